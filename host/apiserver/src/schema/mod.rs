//! Custom resources held to their CRDs (`deploy/crds/`, compiled in) as the API server holds
//! them: defaulted when decoded (`defaults`), then validated on every create, update and status
//! write: the name (`objectmeta`), the structural OpenAPI schema (`values`, `datetime`), the
//! list types' keys (`listtype`) and the CEL rules (`rules`), in that order and with the API
//! server's words, so that what a real cluster refuses is refused here too.

mod cel_rule;
mod datetime;
mod defaults;
mod error;
mod listtype;
mod objectmeta;
mod rules;
mod structural;
mod values;

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::Value;

use super::crds;
use super::field::{BadValue, FieldError, Kind, Path};
use cubepod_kube::Resource;

pub(crate) use self::error::SchemaError;
pub(crate) use self::structural::{ListType, Node};

/// One CRD's schema, compiled (patterns and rules included).
#[derive(Debug)]
pub(crate) struct CrdSchema {
    root: Node,
}

impl CrdSchema {
    /// Reads a CRD version's `openAPIV3Schema`.
    pub(crate) fn load(schema: &Value) -> Result<CrdSchema, SchemaError> {
        Ok(CrdSchema {
            root: Node::parse(schema, "")?,
        })
    }

    /// Applies the schema's defaults, as the API server does when it decodes an object.
    pub(crate) fn default(&self, object: &mut Value) {
        defaults::apply(&self.root, object);
    }

    /// Every error the API server finds in `object`; `old` is the stored object on an update
    /// (transition rules need it; the name cannot change then).
    pub(crate) fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<FieldError> {
        let mut errors = Vec::new();
        if old.is_none()
            && let Some(name) = object.pointer("/metadata/name").and_then(Value::as_str)
        {
            objectmeta::validate_name(name, &mut errors);
        }
        values::validate(&self.root, object, &Path::root(), &mut errors);
        listtype::validate(&self.root, object, &Path::root(), &mut errors);
        // As apiextensions: CEL sees only an object that has the schema's shape.
        if errors.iter().any(blocks_rules) {
            errors.push(FieldError::invalid(
                Path::root(),
                BadValue::Null,
                "some validation rules were not checked because the object was invalid; \
                 correct the existing errors to complete validation",
            ));
        } else {
            rules::validate(&self.root, object, old, &Path::root(), true, &mut errors);
        }
        errors
    }
}

impl CrdSchema {
    /// The schema of the field at `path` (field names; a list's items are stepped into on the
    /// way), for how server-side apply and patches treat it.
    pub(crate) fn at(&self, path: &[String]) -> Option<&Node> {
        let mut node = &self.root;
        for name in path {
            if let Some(items) = &node.items {
                node = items;
            }
            node = node.field(name)?;
        }
        Some(node)
    }
}

/// An error that leaves the object without the shape its rules assume.
fn blocks_rules(error: &FieldError) -> bool {
    matches!(
        error.kind,
        Kind::NotSupported | Kind::Required | Kind::TooLong | Kind::TooMany | Kind::TypeInvalid
    )
}

/// The schema of `resource`, if it is one of ours.
pub(crate) fn of(resource: Resource) -> Option<&'static CrdSchema> {
    static SCHEMAS: OnceLock<HashMap<Resource, CrdSchema>> = OnceLock::new();
    SCHEMAS
        .get_or_init(|| {
            Resource::ALL
                .into_iter()
                .filter_map(|resource| {
                    let crd = crds::of(resource)?;
                    match CrdSchema::load(&crd.schema) {
                        Ok(schema) => Some((resource, schema)),
                        // A unit test holds every CRD to loading; should one not, its kind is
                        // still served, unchecked.
                        Err(error) => {
                            tracing::error!(%error, kind = resource.kind(), "a compiled-in CRD's schema does not load");
                            None
                        }
                    }
                })
                .collect()
        })
        .get(&resource)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_crd_loads() {
        for resource in [Resource::Sandbox, Resource::PodWarmPool] {
            let crd = crds::of(resource).unwrap();
            CrdSchema::load(&crd.schema).unwrap();
            assert!(of(resource).is_some());
        }
        assert!(of(Resource::Pod).is_none());
    }

    fn sandbox(spec: Value) -> Value {
        json!({"apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
               "metadata": {"name": "a", "namespace": "ns"}, "spec": spec})
    }

    fn messages(errors: Vec<FieldError>) -> Vec<String> {
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_sandbox_is_defaulted_as_its_crd_says() {
        let schema = of(Resource::Sandbox).unwrap();
        let mut object =
            sandbox(json!({"image": "i", "service": {"ports": [{"name": "http", "port": 80}]}}));
        schema.default(&mut object);
        assert_eq!(
            object["spec"],
            json!({
                "image": "i",
                "desiredState": "Running",
                "rootfsGeneration": 1,
                "storage": {"rootfsSize": "10Gi", "workspaceSize": "10Gi"},
                "network": {"egress": "Internet"},
                "shutdownPolicy": "Delete",
                "service": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
            })
        );
        assert!(schema.validate(&object, None).is_empty());
    }

    #[test]
    fn schema_errors_block_the_rules() {
        let schema = of(Resource::Sandbox).unwrap();
        let mut object = sandbox(json!({"image": "i", "desiredState": "Stopped"}));
        object["metadata"]["name"] = json!("a".repeat(64));
        schema.default(&mut object);
        assert_eq!(
            messages(schema.validate(&object, None)),
            [
                "spec.desiredState: Unsupported value: \"Stopped\": supported values: \"Running\", \"Paused\"",
                "<nil>: Invalid value: \"null\": some validation rules were not checked because the \
                 object was invalid; correct the existing errors to complete validation",
            ]
        );
        object["spec"]["desiredState"] = json!("Paused");
        assert_eq!(
            messages(schema.validate(&object, None)),
            [
                "<nil>: Invalid value: \"object\": a Sandbox name must be at most 63 characters (it is used as a label value)"
            ]
        );
    }

    #[test]
    fn fork_from_is_immutable_and_generations_only_go_up() {
        let schema = of(Resource::Sandbox).unwrap();
        let mut old = sandbox(json!({"image": "i", "rootfsGeneration": 2}));
        schema.default(&mut old);
        let mut forked = old.clone();
        forked["spec"]["forkFrom"] = json!("b");
        assert_eq!(
            messages(schema.validate(&forked, Some(&old))),
            [
                "spec.forkFrom: Forbidden: forkFrom is immutable; it can only be set when the Sandbox is created"
            ]
        );
        assert!(schema.validate(&forked, None).is_empty());
        let mut lower = old.clone();
        lower["spec"]["rootfsGeneration"] = json!(1);
        assert_eq!(
            messages(schema.validate(&lower, Some(&old))),
            [
                "spec.rootfsGeneration: Invalid value: \"object\": rootfsGeneration can only go up (raise it by one to reset the root filesystem)"
            ]
        );
    }
}
