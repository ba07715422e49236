//! A child's manifest in two steps: its spec and the spec's digest first, which a reconcile
//! compares with the `cubepod.io/spec-hash` the cache shows, then the manifest, only when they
//! differ. The spec is built and serialized once either way.

use crate::prelude::*;

use serde::Serialize;
use serde_json::Value;

use super::meta::{ObjectMeta, Owner};
use crate::names;

/// A manifest and the digest of its spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    pub manifest: String,
    pub spec_hash: String,
}

/// The [`digest`](super::digest) of the spec's JSON: the JSON of a `serde_json::Value` is
/// canonical for us (keys in one order, no whitespace), so the same spec gives the same digest.
/// The specs the policy builds serialize to the same canonical JSON (their fields are declared
/// in key order, their maps are sorted), so a spec read back from the API gets the digest its
/// manifest carries: both are digested as the same text.
pub fn spec_hash(spec: &Value) -> String {
    super::digest(&super::to_json(spec))
}

/// A child's spec, serialized once, with its digest: a reconcile compares the digest with the
/// cache's and renders the manifest from the same text only when they differ.
pub struct Planned<'a> {
    kind: &'static str,
    api_version: &'static str,
    name: String,
    owner: Owner<'a>,
    spec_json: String,
    spec_hash: String,
}

impl<'a> Planned<'a> {
    pub(super) fn new<S: Serialize>(
        kind: &'static str,
        api_version: &'static str,
        name: String,
        owner: Owner<'a>,
        spec: &S,
    ) -> Self {
        let spec_json = super::to_json(spec);
        let spec_hash = super::digest(&spec_json);
        Self {
            kind,
            api_version,
            name,
            owner,
            spec_json,
            spec_hash,
        }
    }

    /// The `cubepod.io/spec-hash` the manifest carries.
    pub fn spec_hash(&self) -> &str {
        &self.spec_hash
    }

    /// The object, with its spec and the spec's digest as an annotation.
    pub fn render(self, namespace: &str) -> Rendered {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Head<'a> {
            api_version: &'static str,
            kind: &'static str,
            metadata: ObjectMeta<'a>,
        }
        let metadata = ObjectMeta::child_of(&self.name, namespace, self.owner)
            .annotation(names::SPEC_HASH_ANNOTATION, self.spec_hash.clone());
        // `{"apiVersion":…,"kind":…,"metadata":{…}}`, its closing brace then replaced by the
        // spec: the text the whole object serializes to, without serializing the spec again.
        let mut manifest = super::to_json(&Head {
            api_version: self.api_version,
            kind: self.kind,
            metadata,
        });
        const SPEC_KEY: &str = ",\"spec\":";
        manifest.pop();
        manifest.reserve(SPEC_KEY.len() + self.spec_json.len() + 1);
        manifest.push_str(SPEC_KEY);
        manifest.push_str(&self.spec_json);
        manifest.push('}');
        Rendered {
            manifest,
            spec_hash: self.spec_hash,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;

    /// Fields in key order, as the policy's specs are.
    #[derive(Serialize)]
    struct Spec {
        note: &'static str,
        ports: Vec<u16>,
        selector: BTreeMap<&'static str, &'static str>,
    }

    /// The manifest is the text the whole object serializes to in one go (the envelope's keys
    /// in order, the spec last), and its annotation is the digest of the spec's text.
    #[test]
    fn a_render_is_the_whole_object_serialized_once() {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Object<'a> {
            api_version: &'static str,
            kind: &'static str,
            metadata: ObjectMeta<'a>,
            spec: &'a Spec,
        }
        let owner = Owner {
            kind: "Sandbox",
            name: "a",
            uid: "u-1",
        };
        let spec = Spec {
            note: "line\nbreak \u{e9}",
            ports: vec![80, 443],
            selector: BTreeMap::from([("app", "a\"quoted\"")]),
        };
        let planned = Planned::new("Service", "v1", "a".to_string(), owner, &spec);
        let hash = planned.spec_hash().to_string();
        assert_eq!(hash, super::super::digest(&super::super::to_json(&spec)));
        let rendered = planned.render("ns");
        let whole = serde_json::to_string(&Object {
            api_version: "v1",
            kind: "Service",
            metadata: ObjectMeta::child_of("a", "ns", owner)
                .annotation(names::SPEC_HASH_ANNOTATION, hash.clone()),
            spec: &spec,
        })
        .unwrap();
        assert_eq!(rendered.manifest, whole);
        assert_eq!(rendered.spec_hash, hash);
        let read: Value = serde_json::from_str(&rendered.manifest).unwrap();
        assert_eq!(spec_hash(&read["spec"]), hash);
    }
}
