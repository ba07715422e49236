//! What of an object a reader keeps: all of it, or, for the controller, the metadata and status
//! of a sandbox's children. Its cache holds no more than that of a Pod, PVC or Secret, so their
//! `spec` and `data` are skipped while the JSON is read (no allocation, no tree to drop), and a
//! Secret's data never enters the controller's memory at all. Applied to write answers, `get`,
//! list items and watch events alike.

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::kube::Resource;

/// How much of each child object (Pod, PersistentVolumeClaim, Secret) the client keeps. Every
/// other resource (Sandbox, PodWarmPool, Lease, Event) is always read whole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Projection {
    /// Every field, as the server sent it.
    #[default]
    Whole,
    /// `apiVersion`, `kind`, `metadata` (less `managedFields`) and `status`, and any field other
    /// than `spec`, `data`, `stringData` and `binaryData`.
    MetadataAndStatus,
}

/// Fields of a child object that the controller never reads.
const SKIPPED: &[&str] = &["spec", "data", "stringData", "binaryData"];
/// Fields of `metadata` that nobody here reads, and that a real API server fills.
const SKIPPED_IN_METADATA: &[&str] = &["managedFields"];

impl Projection {
    /// The projection for objects of `resource`.
    pub fn of(self, resource: Resource) -> Projection {
        match resource {
            // The controller reads a NetworkPolicy's or Service's annotations, never its spec.
            Resource::Pod
            | Resource::PersistentVolumeClaim
            | Resource::Secret
            | Resource::NetworkPolicy
            | Resource::Service => self,
            // A Lease's holder is in its spec; Events and our own resources are read whole.
            Resource::Sandbox | Resource::PodWarmPool | Resource::Lease | Resource::Event => {
                Projection::Whole
            }
        }
    }

    /// One JSON document as this projection keeps it.
    pub fn from_slice(self, bytes: &[u8]) -> serde_json::Result<Value> {
        read_seeded(bytes, self)
    }
}

/// One whole JSON document read through `seed`: trailing bytes are an error, as for
/// `serde_json::from_slice`. Shared by objects, list answers and watch events.
pub fn read_seeded<'de, S: DeserializeSeed<'de>>(
    bytes: &'de [u8],
    seed: S,
) -> serde_json::Result<S::Value> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = seed.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

impl<'de> DeserializeSeed<'de> for Projection {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        match self {
            Projection::Whole => Value::deserialize(deserializer),
            Projection::MetadataAndStatus => deserializer.deserialize_any(Pruned {
                skip: SKIPPED,
                nested: true,
            }),
        }
    }
}

/// Any JSON value; of an object, the keys in `skip` are read past, and (when `nested`) its
/// `metadata` is pruned in turn.
struct Pruned {
    skip: &'static [&'static str],
    nested: bool,
}

impl<'de> Visitor<'de> for Pruned {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if self.skip.contains(&key.as_str()) {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let value = if self.nested && key == "metadata" {
                map.next_value_seed(Pruned {
                    skip: SKIPPED_IN_METADATA,
                    nested: false,
                })?
            } else {
                map.next_value::<Value>()?
            };
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }

    // Anything but an object is kept as it is (a malformed `metadata`, say, as the whole read
    // would keep it).
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Value>()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
}

impl<'de> DeserializeSeed<'de> for Pruned {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "dev-alice",
                "labels": {"cubepod.io/sandbox": "dev-alice"},
                "managedFields": [{"manager": "kubectl"}],
                "resourceVersion": "7",
            },
            "spec": {"containers": [{"name": "sandbox", "image": "base:1"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.7"},
        })
    }

    #[test]
    fn whole_keeps_everything() {
        let bytes = serde_json::to_vec(&pod()).unwrap();
        assert_eq!(Projection::Whole.from_slice(&bytes).unwrap(), pod());
    }

    #[test]
    fn metadata_and_status_drops_spec_data_and_managed_fields() {
        let bytes = serde_json::to_vec(&pod()).unwrap();
        let kept = Projection::MetadataAndStatus.from_slice(&bytes).unwrap();
        assert_eq!(
            kept,
            json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "dev-alice",
                    "labels": {"cubepod.io/sandbox": "dev-alice"},
                    "resourceVersion": "7",
                },
                "status": {"phase": "Running", "podIP": "10.0.0.7"},
            })
        );
        let secret = br#"{"kind":"Secret","metadata":{"name":"s"},"data":{"token":"c2VjcmV0"},"stringData":{"a":"b"}}"#;
        assert_eq!(
            Projection::MetadataAndStatus.from_slice(secret).unwrap(),
            json!({"kind": "Secret", "metadata": {"name": "s"}})
        );
    }

    #[test]
    fn the_controllers_own_resources_are_read_whole() {
        let children = Projection::MetadataAndStatus;
        assert_eq!(children.of(Resource::Sandbox), Projection::Whole);
        assert_eq!(children.of(Resource::PodWarmPool), Projection::Whole);
        assert_eq!(children.of(Resource::Lease), Projection::Whole);
        assert_eq!(children.of(Resource::Secret), children);
    }

    #[test]
    fn anything_but_an_object_is_kept_and_bad_json_is_an_error() {
        let kept = Projection::MetadataAndStatus;
        assert_eq!(
            kept.from_slice(b"[1,\"a\",null]").unwrap(),
            json!([1, "a", null])
        );
        assert_eq!(
            kept.from_slice(br#"{"metadata":"odd","spec":1}"#).unwrap(),
            json!({"metadata": "odd"})
        );
        assert!(kept.from_slice(br#"{"spec":{"a":"#).is_err());
        assert!(kept.from_slice(br#"{"status":{}} trailing"#).is_err());
    }
}
