//! A list answer (`PodList`, `SandboxList`, ...): read straight into its items, each through
//! the client's [`Projection`], and the two fields of its metadata the reflector needs; not the
//! whole list as one `Value` and then a copy of it (a list is the largest answer we read).

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::projection::{Projection, read_seeded};

pub(crate) struct ListBody {
    pub(crate) items: Vec<Value>,
    pub(crate) resource_version: Option<String>,
    pub(crate) continue_token: Option<String>,
}

#[derive(Default, serde::Deserialize)]
struct ListMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
    #[serde(rename = "continue")]
    continue_token: Option<String>,
}

impl ListBody {
    pub(crate) fn from_slice(bytes: &[u8], projection: Projection) -> serde_json::Result<ListBody> {
        read_seeded(bytes, ListSeed(projection))
    }
}

struct ListSeed(Projection);

impl<'de> DeserializeSeed<'de> for ListSeed {
    type Value = ListBody;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<ListBody, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ListSeed {
    type Value = ListBody;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ListBody, A::Error> {
        let mut items = Vec::new();
        let mut meta = ListMeta::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "items" => items = map.next_value_seed(Items(self.0))?,
                "metadata" => meta = map.next_value::<Option<ListMeta>>()?.unwrap_or_default(),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(ListBody {
            items,
            resource_version: meta.resource_version,
            continue_token: meta.continue_token,
        })
    }
}

/// The `items` array, each object read through the projection.
struct Items(Projection);

impl<'de> DeserializeSeed<'de> for Items {
    type Value = Vec<Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Vec<Value>, D::Error> {
        // `any`, not `seq`: serde_json's `deserialize_seq` refuses a `null` outright.
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Items {
    type Value = Vec<Value>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Value>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element_seed(self.0)? {
            items.push(item);
        }
        Ok(items)
    }

    // `"items": null`, as some servers send for an empty list.
    fn visit_unit<E>(self) -> Result<Vec<Value>, E> {
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_items_and_the_list_metadata() {
        let body = br#"{"kind":"PodList","metadata":{"resourceVersion":"12","continue":"c"},
            "items":[{"metadata":{"name":"a"},"spec":{"x":1}},{"metadata":{"name":"b"}}]}"#;
        let list = ListBody::from_slice(body, Projection::MetadataAndStatus).unwrap();
        assert_eq!(list.items.len(), 2);
        assert_eq!(
            list.items[0],
            serde_json::json!({"metadata": {"name": "a"}})
        );
        assert_eq!(list.resource_version.as_deref(), Some("12"));
        assert_eq!(list.continue_token.as_deref(), Some("c"));
        assert!(list.items.iter().all(|item| item.get("spec").is_none()));
        let whole = ListBody::from_slice(body, Projection::Whole).unwrap();
        assert_eq!(whole.items[0]["spec"]["x"], 1);
    }

    #[test]
    fn an_empty_list_may_say_null_or_nothing() {
        for body in [&br#"{"items":null,"metadata":null}"#[..], br#"{}"#] {
            let list = ListBody::from_slice(body, Projection::Whole).unwrap();
            assert!(list.items.is_empty());
            assert_eq!(list.resource_version, None);
        }
        assert!(ListBody::from_slice(b"[]", Projection::Whole).is_err());
        assert!(ListBody::from_slice(br#"{"items":{}}"#, Projection::Whole).is_err());
    }
}
