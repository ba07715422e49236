//! A sorted map for the handful of entries a sandbox's children have (two PVCs, a Pod, a
//! Secret): one small allocation, where a `BTreeMap` allocates a node with room for eleven.
//! The cache holds one per sandbox, so this is most of what 10,000 sandboxes cost it.

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SmallMap<V>(Vec<(String, V)>);

impl<V> Default for SmallMap<V> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<V> SmallMap<V> {
    fn find(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    /// The value of the key that is `parts` joined, looked up without joining them: a lookup
    /// per watch event and write answer need not allocate its key.
    pub(crate) fn get_joined(&self, parts: &[&str]) -> Option<&V> {
        self.find_joined(parts).ok().map(|i| &self.0[i].1)
    }

    /// Sets the value of the key that is `parts` joined; the key is joined only when new.
    pub(crate) fn insert_joined(&mut self, parts: &[&str], value: V) {
        match self.find_joined(parts) {
            Ok(i) => self.0[i].1 = value,
            Err(i) => self.insert_at(i, parts.concat(), value),
        }
    }

    /// Inserts a new key at `i`, growing the room by one entry rather than doubling it: the
    /// cache holds a map per sandbox, whose entries come one at a time (a child kind's list
    /// after another's), and doubling left five children in room for eight.
    fn insert_at(&mut self, i: usize, key: String, value: V) {
        self.0.reserve_exact(1);
        self.0.insert(i, (key, value));
    }

    pub(crate) fn remove_joined(&mut self, parts: &[&str]) -> Option<V> {
        self.find_joined(parts).ok().map(|i| self.0.remove(i).1)
    }

    fn find_joined(&self, parts: &[&str]) -> Result<usize, usize> {
        self.0
            .binary_search_by(|(k, _)| cmp_joined(k.as_bytes(), parts))
    }

    pub(crate) fn insert(&mut self, key: String, value: V) {
        match self.find(&key) {
            Ok(i) => self.0[i].1 = value,
            Err(i) => self.insert_at(i, key, value),
        }
    }

    pub(crate) fn remove(&mut self, key: &str) -> Option<V> {
        self.find(key).ok().map(|i| self.0.remove(i).1)
    }

    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&str, &V) -> bool) {
        self.0.retain(|(k, v)| keep(k, v));
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `key` against `parts` joined, in the order of `str`'s `cmp` (bytewise).
fn cmp_joined(mut key: &[u8], parts: &[&str]) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    for part in parts {
        let part = part.as_bytes();
        let n = key.len().min(part.len());
        match key[..n].cmp(&part[..n]) {
            Ordering::Equal if key.len() < part.len() => return Ordering::Less,
            Ordering::Equal => key = &key[n..],
            other => return other,
        }
    }
    if key.is_empty() {
        Ordering::Equal
    } else {
        Ordering::Greater
    }
}

#[cfg(test)]
mod tests {
    use super::{SmallMap, cmp_joined};

    #[test]
    fn behaves_as_a_sorted_map() {
        let mut map = SmallMap::default();
        map.insert("b".to_string(), 2);
        map.insert("a".to_string(), 1);
        map.insert("b".to_string(), 3);
        assert_eq!(map.iter().collect::<Vec<_>>(), [("a", &1), ("b", &3)]);
        assert_eq!(map.get_joined(&["b"]), Some(&3));
        assert_eq!(map.remove("a"), Some(1));
        assert_eq!(map.remove("a"), None);
        map.retain(|_, v| *v != 3);
        assert!(map.is_empty());
    }

    #[test]
    fn holds_no_room_past_its_entries() {
        let mut map = SmallMap::default();
        for (i, key) in ["pods/a", "secrets/a", "persistentvolumeclaims/a-rootfs"]
            .into_iter()
            .enumerate()
        {
            map.insert_joined(&[key], i);
            map.insert(format!("{key}-2"), i);
        }
        assert_eq!(map.0.capacity(), 6);
    }

    #[test]
    fn a_key_in_parts_is_found_as_the_joined_key_is() {
        let mut map = SmallMap::default();
        for key in ["pods/a", "pods/ab", "pods/b", "secrets/a", "pods"] {
            map.insert(key.to_string(), key.len());
        }
        assert_eq!(map.get_joined(&["pods", "/", "ab"]), Some(&7));
        assert_eq!(map.get_joined(&["secrets/", "a"]), Some(&9));
        assert_eq!(map.get_joined(&["pods", "", ""]), Some(&4));
        assert_eq!(map.get_joined(&["pods", "/", "c"]), None);
        assert_eq!(map.get_joined(&["pod", "/", "a"]), None);
        assert_eq!(map.remove_joined(&["pods", "/", "a"]), Some(6));
        assert_eq!(map.get_joined(&["pods/a"]), None);
        map.insert_joined(&["pods", "/", "b"], 1);
        map.insert_joined(&["pods", "/", "c"], 2);
        assert_eq!(map.get_joined(&["pods/b"]), Some(&1));
        assert_eq!(map.get_joined(&["pods/c"]), Some(&2));
        let keys: Vec<&str> = map.iter().map(|(k, _)| k).collect();
        assert!(keys.is_sorted(), "{keys:?}");
        // Every order between keys is the joined string's.
        let words = ["", "a", "ab", "b", "/", "a/b", "ab/"];
        for key in words {
            for x in words {
                for y in words {
                    let joined = format!("{x}{y}");
                    assert_eq!(
                        cmp_joined(key.as_bytes(), &[x, y]),
                        key.cmp(joined.as_str()),
                        "{key:?} against {x:?} + {y:?}"
                    );
                }
            }
        }
    }
}
