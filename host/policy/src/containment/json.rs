//! A manifest as the boundary reads it: a tree borrowed from the guest's text (no key or
//! string is copied unless it holds an escape), dropped once the verdict is in. The text
//! itself is what the cluster is sent, so nothing is parsed into a `serde_json::Value` and
//! written out again on the way. A key given twice in one object is refused: the API server
//! would keep only one of them, and the boundary must have checked the one it keeps.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Number;

/// One JSON value of a manifest.
#[derive(Clone, Debug, PartialEq)]
pub enum Json<'a> {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number.
    Number(Number),
    /// A string, borrowed from the text where it can be.
    String(Cow<'a, str>),
    /// An array.
    Array(Vec<Json<'a>>),
    /// An object.
    Object(Object<'a>),
}

/// A JSON object: its members in the order the text gives them, each key once.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Object<'a>(Vec<(Cow<'a, str>, Json<'a>)>);

impl<'a> Json<'a> {
    /// Parses `text`, borrowing from it.
    pub fn parse(text: &'a str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    pub(crate) fn get(&self, key: &str) -> Option<&Json<'a>> {
        self.as_object().and_then(|o| o.get(key))
    }

    pub(crate) fn as_object(&self) -> Option<&Object<'a>> {
        match self {
            Json::Object(o) => Some(o),
            _ => None,
        }
    }

    pub(crate) fn as_array(&self) -> Option<&Vec<Json<'a>>> {
        match self {
            Json::Array(a) => Some(a),
            _ => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn as_bool(&self) -> Option<bool> {
        match self {
            Json::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub(crate) fn as_u64(&self) -> Option<u64> {
        match self {
            Json::Number(n) => n.as_u64(),
            _ => None,
        }
    }

    pub(crate) fn is_string(&self) -> bool {
        matches!(self, Json::String(_))
    }

    pub(crate) fn is_boolean(&self) -> bool {
        matches!(self, Json::Bool(_))
    }

    pub(crate) fn is_null(&self) -> bool {
        matches!(self, Json::Null)
    }
}

impl<'a> Object<'a> {
    pub(crate) fn get(&self, key: &str) -> Option<&Json<'a>> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub(crate) fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_ref())
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &Json<'a>)> {
        self.0.iter().map(|(k, v)| (k.as_ref(), v))
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

impl<'o, 'a> IntoIterator for &'o Object<'a> {
    type Item = (&'o str, &'o Json<'a>);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'o, (Cow<'a, str>, Json<'a>)>,
        fn(&'o (Cow<'a, str>, Json<'a>)) -> (&'o str, &'o Json<'a>),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k.as_ref(), v))
    }
}

/// Compact JSON, as the value was given (for messages).
impl fmt::Display for Json<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = serde_json::to_string(self).map_err(|_| fmt::Error)?;
        f.write_str(&text)
    }
}

impl Serialize for Json<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Null => serializer.serialize_unit(),
            Json::Bool(b) => serializer.serialize_bool(*b),
            Json::Number(n) => n.serialize(serializer),
            Json::String(s) => serializer.serialize_str(s),
            Json::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Json::Object(object) => {
                let mut map = serializer.serialize_map(Some(object.len()))?;
                for (key, value) in object.iter() {
                    map.serialize_entry(key, value)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Json<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Self::Value, E> {
        Ok(Json::Bool(b))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Self::Value, E> {
        Ok(Json::Number(n.into()))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Self::Value, E> {
        Ok(Json::Number(n.into()))
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Self::Value, E> {
        Number::from_f64(n)
            .map(Json::Number)
            .ok_or_else(|| E::custom("a number JSON cannot hold"))
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
        Ok(Json::String(Cow::Borrowed(s)))
    }

    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Json::String(Cow::Owned(s.to_string())))
    }

    fn visit_string<E>(self, s: String) -> Result<Self::Value, E> {
        Ok(Json::String(Cow::Owned(s)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members: Vec<(Cow<'de, str>, Json<'de>)> = Vec::new();
        while let Some(Key(key)) = map.next_key()? {
            // A manifest's objects are small: compared as they come. A large one (a guest may
            // send tens of thousands of keys) is checked once, sorted, below.
            if members.len() < SMALL_OBJECT && members.iter().any(|(k, _)| *k == key) {
                return Err(twice(&key));
            }
            let value = map.next_value()?;
            members.push((key, value));
        }
        if members.len() > SMALL_OBJECT {
            let mut keys: Vec<&str> = members.iter().map(|(k, _)| k.as_ref()).collect();
            keys.sort_unstable();
            if let Some(pair) = keys.windows(2).find(|pair| pair[0] == pair[1]) {
                return Err(twice(pair[0]));
            }
        }
        Ok(Json::Object(Object(members)))
    }
}

/// Objects up to this many members are checked for a repeated key as they are read.
const SMALL_OBJECT: usize = 16;

fn twice<E: de::Error>(key: &str) -> E {
    E::custom(format_args!(
        "the key {:?} is given twice in one object",
        super::clip(key, 128)
    ))
}

/// An object's key, borrowed from the text unless it holds an escape.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(s.to_string())))
            }
            fn visit_string<E>(self, s: String) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(s)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_what_serde_json_reads_and_writes_it_back_the_same() {
        let text = r#"{"a":[1,-2,2.5,true,null,"x\"y"],"b":{"c":"d"},"é":"\u00e9"}"#;
        let tree = Json::parse(text).unwrap();
        let value: serde_json::Value = serde_json::from_str(text).unwrap();
        let back: serde_json::Value = serde_json::from_str(&tree.to_string()).unwrap();
        assert_eq!(back, value);
        assert_eq!(
            tree.get("b")
                .and_then(|b| b.get("c"))
                .and_then(Json::as_str),
            Some("d")
        );
        assert_eq!(tree.get("é").and_then(Json::as_str), Some("é"));
        assert_eq!(
            value,
            json!({"a": [1, -2, 2.5, true, null, "x\"y"], "b": {"c": "d"}, "é": "é"})
        );
    }

    #[test]
    fn an_escaped_key_is_the_key_it_spells() {
        // `hostNetwork` written with an escape is `hostNetwork` to the API server.
        let tree = Json::parse(r#"{"hostNetw\u006frk": true}"#).unwrap();
        assert_eq!(tree.get("hostNetwork"), Some(&Json::Bool(true)));
    }

    #[test]
    fn a_key_given_twice_is_refused_however_it_is_spelled() {
        for text in [
            r#"{"hostNetwork": false, "hostNetwork": true}"#,
            r#"{"a": {"hostNetwork": false, "hostNetw\u006frk": true}}"#,
        ] {
            let error = Json::parse(text).unwrap_err().to_string();
            assert!(error.contains("given twice"), "{text}: {error}");
        }
    }

    #[test]
    fn a_key_given_twice_in_a_large_object_is_refused() {
        let members: Vec<String> = (0..5_000).map(|i| format!("\"k{i}\": {i}")).collect();
        let distinct = format!("{{{}}}", members.join(","));
        assert_eq!(
            Json::parse(&distinct).unwrap().as_object().map(Object::len),
            Some(5_000)
        );
        let repeated = format!("{{{}, \"k17\": 0}}", members.join(","));
        let error = Json::parse(&repeated).unwrap_err().to_string();
        assert!(error.contains("\"k17\" is given twice"), "{error}");
    }

    #[test]
    fn what_is_not_json_is_refused() {
        for text in ["{", "{\"a\": 1,}", "[1 2]", "{\"a\": 1} x", "nul"] {
            assert!(Json::parse(text).is_err(), "{text}");
        }
    }
}
