//! A sorted map for the handful of entries a sandbox's children have (two PVCs, a Pod, a
//! Secret): one small allocation, where a `BTreeMap` allocates a node with room for eleven.
//! The cache holds one per sandbox, so this is most of what 10,000 sandboxes cost it.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmallMap<V>(Vec<(String, V)>);

impl<V> Default for SmallMap<V> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<V> SmallMap<V> {
    fn find(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    pub fn get(&self, key: &str) -> Option<&V> {
        self.find(key).ok().map(|i| &self.0[i].1)
    }

    pub fn insert(&mut self, key: String, value: V) {
        match self.find(&key) {
            Ok(i) => self.0[i].1 = value,
            Err(i) => self.0.insert(i, (key, value)),
        }
    }

    pub fn remove(&mut self, key: &str) -> Option<V> {
        self.find(key).ok().map(|i| self.0.remove(i).1)
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&str, &V) -> bool) {
        self.0.retain(|(k, v)| keep(k, v));
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::SmallMap;

    #[test]
    fn behaves_as_a_sorted_map() {
        let mut map = SmallMap::default();
        map.insert("b".to_string(), 2);
        map.insert("a".to_string(), 1);
        map.insert("b".to_string(), 3);
        assert_eq!(map.iter().collect::<Vec<_>>(), [("a", &1), ("b", &3)]);
        assert_eq!(map.get("b"), Some(&3));
        assert_eq!(map.remove("a"), Some(1));
        assert_eq!(map.remove("a"), None);
        map.retain(|_, v| *v != 3);
        assert!(map.is_empty());
    }
}
