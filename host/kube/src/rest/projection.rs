//! What of an object a reader keeps: all of it, or, for the controller, of a sandbox's
//! children the metadata and the few status fields it reads. Its cache holds no more than that
//! of a Pod, PVC, Secret, NetworkPolicy or Service, so the rest (`spec`, `data`, a Pod's container statuses) is skipped
//! while the JSON is read (no allocation, no tree to drop), and a Secret's data never enters
//! the controller's memory at all. Applied to write answers, `get`, list items and watch events
//! alike.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::Resource;
use crate::resource::ChildRead;

/// How much of each child object (Pod, PersistentVolumeClaim, Secret, NetworkPolicy, Service)
/// the client keeps. Every other resource (Sandbox, PodWarmPool, Lease, Event) is always read
/// whole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Projection {
    /// Every field, as the server sent it.
    #[default]
    Whole,
    /// `apiVersion`, `kind`, of `metadata` the name, namespace, resourceVersion,
    /// deletionTimestamp, labels and annotations, of `status` only what the controller reads
    /// (`phase`, `podIP`, and each condition's `type` and `status`), and any other top-level
    /// field but `spec`, `data`, `stringData` and `binaryData`.
    MetadataAndStatus,
    /// Read as [`Self::MetadataAndStatus`], of a child whose status the controller does not
    /// read (a PVC, Secret, NetworkPolicy or Service): its lists and watches ask the server
    /// for the metadata alone (`PartialObjectMetadata`), so that neither its spec nor a Secret's data
    /// is sent at all.
    Metadata,
    /// Of any object its `metadata` alone, less `managedFields`, asked for as
    /// `PartialObjectMetadata`: how a write's answer is read when the writer knows the rest of
    /// the object (a Sandbox's own finalizer and status writes, made over the version it holds).
    /// Never a configuration: [`Self::of`] leaves it as it is.
    ObjectMetadata,
}

/// What of a JSON value is kept. A value that is not what its shape reads (a string where an
/// object was expected, say) is kept as it is, as the whole read would keep it.
#[derive(Clone, Copy, Debug)]
enum Shape {
    /// All of it.
    All,
    /// Of an object, every field but those in `skip`, each field named in `inner` read with its
    /// own shape.
    Except {
        skip: &'static [&'static str],
        inner: &'static [(&'static str, Shape)],
    },
    /// Of an object, only these fields, each read with its shape.
    Only(&'static [(&'static str, Shape)]),
    /// Of an array, each item read with this shape.
    Each(&'static Shape),
}

/// A child object: no `spec` or data, the metadata less what a server fills for itself, and of
/// the status what `model::children` reads. A real kubelet's Pod status (container statuses,
/// their images and states) is most of a Pod event the controller would otherwise build a tree
/// for and drop.
const CHILD: Shape = Shape::Except {
    skip: &["spec", "data", "stringData", "binaryData"],
    inner: &[("metadata", METADATA), ("status", STATUS)],
};
/// What `model::children` and the cache read of a child's metadata: of its owner references
/// only the controller's, which Sandbox it is (a fork clones only what its source owns). A real
/// API server's `managedFields`, `uid` and timestamps are read past: in a write's answer or a
/// watch event they were most of the allocations of the metadata.
const METADATA: Shape = Shape::Only(&[
    ("name", Shape::All),
    ("namespace", Shape::All),
    ("resourceVersion", Shape::All),
    ("deletionTimestamp", Shape::All),
    ("labels", Shape::All),
    ("annotations", Shape::All),
    ("ownerReferences", Shape::Each(&OWNER_REFERENCE)),
]);
const OWNER_REFERENCE: Shape = Shape::Only(&[
    ("apiVersion", Shape::All),
    ("kind", Shape::All),
    ("name", Shape::All),
    ("uid", Shape::All),
    ("controller", Shape::All),
]);
const STATUS: Shape = Shape::Only(&[
    ("phase", Shape::All),
    ("podIP", Shape::All),
    ("conditions", Shape::Each(&CONDITION)),
]);
/// An object's metadata but what the server keeps for itself: [`Projection::ObjectMetadata`].
const OBJECT_METADATA: Shape = Shape::Only(&[(
    "metadata",
    Shape::Except {
        skip: &["managedFields"],
        inner: &[],
    },
)]);
const CONDITION: Shape = Shape::Only(&[("type", Shape::All), ("status", Shape::All)]);

impl Projection {
    /// The projection for objects of `resource`: of a child, what its descriptor says the
    /// controller reads ([`Child::read`](crate::resource::Child::read)); every other kind (a
    /// Lease's holder is in its spec; Events, our own resources and a rollout's ConfigMap,
    /// the module) is read whole.
    pub fn of(self, resource: Resource) -> Projection {
        match (resource.child().map(|c| c.read), self) {
            (_, Projection::ObjectMetadata) => Projection::ObjectMetadata,
            (None, _) => Projection::Whole,
            // A Pod's readiness and IP are in its status.
            (Some(ChildRead::MetadataAndStatus), _) => self,
            // Of a PVC or Secret the controller reads the name, labels and deletion; of a
            // NetworkPolicy or Service also the annotation with its spec's digest.
            (Some(ChildRead::Metadata), Projection::Whole) => Projection::Whole,
            (Some(ChildRead::Metadata), Projection::MetadataAndStatus | Projection::Metadata) => {
                Projection::Metadata
            }
        }
    }

    /// The projection of a create's answer of `resource`: as [`Self::of`], but of a Pod read by
    /// its metadata and status, the metadata alone. A created Pod's status is the API server's
    /// own (Pending, no IP, no conditions: its create strategy drops any status the writer
    /// sent), so such an answer holds nothing of it to read, and its spec, most of the object,
    /// need not come back.
    pub(crate) fn of_created(self, resource: Resource) -> Projection {
        match (resource, self) {
            (Resource::Pod, Projection::MetadataAndStatus) => Projection::Metadata,
            _ => self.of(resource),
        }
    }

    /// One JSON document as this projection keeps it.
    pub fn from_slice(self, bytes: &[u8]) -> serde_json::Result<Value> {
        read_seeded(bytes, self)
    }

    /// The `Accept` header of a list (`list`) or a watch of objects read with this
    /// projection: for [`Self::Metadata`] client-go's metadata client's, the metadata alone
    /// (`PartialObjectMetadata`, `...List` for a list), with plain JSON after it for a server
    /// that does not serve it (the projection reads either the same way).
    pub(crate) fn accept(self, list: bool) -> &'static str {
        match self {
            Projection::Metadata if list => {
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
            }
            Projection::Metadata | Projection::ObjectMetadata => {
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
            }
            Projection::Whole | Projection::MetadataAndStatus => "application/json",
        }
    }

    fn shape(self) -> Shape {
        match self {
            Projection::Whole => Shape::All,
            Projection::MetadataAndStatus | Projection::Metadata => CHILD,
            Projection::ObjectMetadata => OBJECT_METADATA,
        }
    }
}

/// One whole JSON document read through `seed`: trailing bytes are an error, as for
/// `serde_json::from_slice`. Shared by objects, list answers and watch events. The bytes are
/// checked to be UTF-8 once, whole (a word at a time), and then read as text: read from bytes,
/// serde_json checks each string it keeps on its own, which cost more than the whole check.
pub(crate) fn read_seeded<'de, S: DeserializeSeed<'de>>(
    bytes: &'de [u8],
    seed: S,
) -> serde_json::Result<S::Value> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        <serde_json::Error as serde::de::Error>::custom(format_args!(
            "not UTF-8 at byte {}",
            e.valid_up_to()
        ))
    })?;
    let mut de = serde_json::Deserializer::from_str(text);
    let value = seed.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

impl<'de> DeserializeSeed<'de> for Projection {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.shape().deserialize(deserializer)
    }
}

impl<'de> DeserializeSeed<'de> for Shape {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        match self {
            Shape::All => Value::deserialize(deserializer),
            _ => deserializer.deserialize_any(self),
        }
    }
}

/// An object's key, borrowed from the input unless it holds an escape.
pub(super) struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

impl Shape {
    /// The shape of `key`'s value in an object of this shape; `None`: the field is read past.
    fn field(self, key: &str) -> Option<Shape> {
        let named = |fields: &[(&str, Shape)]| {
            fields
                .iter()
                .find(|(name, _)| *name == key)
                .map(|(_, shape)| *shape)
        };
        match self {
            Shape::All | Shape::Each(_) => Some(Shape::All),
            Shape::Except { skip, inner } => {
                if skip.contains(&key) {
                    None
                } else {
                    Some(named(inner).unwrap_or(Shape::All))
                }
            }
            Shape::Only(fields) => named(fields),
        }
    }
}

impl<'de> Visitor<'de> for Shape {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        // A key is borrowed from the input where it can be: one read past costs no allocation.
        while let Some(key) = map.next_key_seed(Key)? {
            match self.field(&key) {
                Some(shape) => {
                    let value = map.next_value_seed(shape)?;
                    object.insert(key.into_owned(), value);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(object))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let item = match self {
            Shape::Each(item) => *item,
            _ => Shape::All,
        };
        let mut items = Vec::new();
        while let Some(value) = seq.next_element_seed(item)? {
            items.push(value);
        }
        Ok(Value::Array(items))
    }

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
                "namespace": "work",
                "uid": "0b5c-uid",
                "creationTimestamp": "2026-12-01T00:00:00Z",
                "deletionTimestamp": "2026-12-01T00:10:00Z",
                "labels": {"cubepod.io/sandbox": "dev-alice", "cubepod.io/rootfs-generation": "2"},
                "annotations": {"cubepod.io/spec-hash": "h1"},
                "ownerReferences": [{"apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
                    "name": "dev-alice", "uid": "u", "controller": true}],
                "finalizers": ["example.com/keep"],
                "managedFields": [{"manager": "kubectl"}],
                "resourceVersion": "7",
                "escaped\\u0041key": 1,
            },
            "spec": {"containers": [{"name": "sandbox", "image": "base:1"}]},
            "status": {
                "phase": "Running",
                "podIP": "10.0.0.7",
                "podIPs": [{"ip": "10.0.0.7"}],
                "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T00:00:00Z"},
                    {"type": "PodScheduled", "status": "True", "reason": "Scheduled"},
                ],
                "containerStatuses": [{"name": "sandbox", "ready": true, "state": {"running": {}}}],
            },
        })
    }

    #[test]
    fn whole_keeps_everything() {
        let bytes = serde_json::to_vec(&pod()).unwrap();
        assert_eq!(Projection::Whole.from_slice(&bytes).unwrap(), pod());
    }

    #[test]
    fn metadata_and_status_keeps_what_the_controller_reads() {
        let bytes = serde_json::to_vec(&pod()).unwrap();
        let kept = Projection::MetadataAndStatus.from_slice(&bytes).unwrap();
        assert_eq!(
            kept,
            json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "dev-alice",
                    "namespace": "work",
                    "deletionTimestamp": "2026-12-01T00:10:00Z",
                    "labels": {"cubepod.io/sandbox": "dev-alice", "cubepod.io/rootfs-generation": "2"},
                    "annotations": {"cubepod.io/spec-hash": "h1"},
                    "ownerReferences": [{"apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
                        "name": "dev-alice", "uid": "u", "controller": true}],
                    "resourceVersion": "7",
                },
                "status": {
                    "phase": "Running",
                    "podIP": "10.0.0.7",
                    "conditions": [
                        {"type": "Ready", "status": "True"},
                        {"type": "PodScheduled", "status": "True"},
                    ],
                },
            })
        );
        // Keys with escapes are read as any other.
        let escaped = br#"{"metadata":{"n\u0061me":"a","labels":{"x\u002fy":"1"}}}"#;
        assert_eq!(
            Projection::MetadataAndStatus.from_slice(escaped).unwrap(),
            json!({"metadata": {"name": "a", "labels": {"x/y": "1"}}})
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
        assert_eq!(children.of(Resource::Pod), children);
        for metadata_only in [
            Resource::PersistentVolumeClaim,
            Resource::Secret,
            Resource::NetworkPolicy,
            Resource::Service,
        ] {
            assert_eq!(children.of(metadata_only), Projection::Metadata);
            assert_eq!(Projection::Whole.of(metadata_only), Projection::Whole);
        }
        assert_eq!(children.of(Resource::Pod).accept(false), "application/json");
        assert!(
            children
                .of(Resource::Secret)
                .accept(true)
                .starts_with("application/json;as=PartialObjectMetadataList;")
        );
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
        assert_eq!(
            kept.from_slice(br#"{"status":{"conditions":"odd","hostIP":"h"}}"#)
                .unwrap(),
            json!({"status": {"conditions": "odd"}})
        );
        assert_eq!(
            kept.from_slice(br#"{"status":"odd"}"#).unwrap(),
            json!({"status": "odd"})
        );
        assert!(kept.from_slice(br#"{"spec":{"a":"#).is_err());
        assert!(kept.from_slice(br#"{"status":{}} trailing"#).is_err());
    }
}
