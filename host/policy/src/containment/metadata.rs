//! A child's labels and annotations (rule `scope`): the host's labels, and on a Pod those
//! the operator allows ([`super::keys`]); a NetworkPolicy's and a Service's one annotation,
//! their spec's digest.

use std::fmt;

use super::json::Json;
use super::scope::check_belongs;
use super::{Containment, Fields, MANAGED_BY_LABEL, Refusal, Rule, SANDBOX_LABEL, SandboxScope};
use crate::model::names;
use cubepod_kube::Resource;

/// The labels of the host a child may carry: any other could make a sandbox's Pod match a
/// Service, NetworkPolicy or PodDisruptionBudget selector of another workload, so a Pod carries
/// another only where the operator allows it (`--allow-pod-label`).
const CHILD_LABELS: [&str; 4] = [
    MANAGED_BY_LABEL,
    SANDBOX_LABEL,
    names::VOLUME_LABEL,
    names::GENERATION_LABEL,
];

impl Containment {
    /// A child's metadata: its name and namespace (checked already), S's labels (and on a Pod
    /// the labels and annotations the operator allows), and exactly one ownerReference, the
    /// controller reference to S.
    pub(super) fn check_metadata(
        &self,
        scope: &SandboxScope,
        resource: Resource,
        what: &dyn fmt::Display,
        object: &Json<'_>,
    ) -> Result<(), Refusal> {
        let fields = Fields::new(Rule::Scope, what);
        let metadata = fields.required(object, "", "metadata")?;
        let pod = resource == Resource::Pod;
        // An applied child (a NetworkPolicy, a Service) carries one annotation of the host's,
        // its spec's digest; a Pod those the operator allows, and none unless it allows some.
        let digested = resource.child().is_some_and(|child| child.applied);
        let annotated = digested || (pod && !self.pod_annotations.is_empty());
        let keys: &[&str] = if annotated {
            &[
                "name",
                "namespace",
                "labels",
                "annotations",
                "ownerReferences",
            ]
        } else {
            &["name", "namespace", "labels", "ownerReferences"]
        };
        fields.object(metadata, "metadata", keys)?;
        if let Some(annotations) = metadata.get("annotations") {
            let annotations = if pod {
                fields.object_with_reason(
                    annotations,
                    "metadata.annotations",
                    |key| self.pod_annotations.admits(key),
                    |key| self.pod_annotations.refusal(key),
                )?
            } else {
                fields.object(
                    annotations,
                    "metadata.annotations",
                    &[names::SPEC_HASH_ANNOTATION],
                )?
            };
            if annotations.iter().any(|(_, v)| !v.is_string()) {
                return Err(fields.refuse("metadata.annotations", "not a string"));
            }
        }
        let labels = fields.object_with_reason(
            fields.required(metadata, "metadata", "labels")?,
            "metadata.labels",
            |key| CHILD_LABELS.contains(&key) || (pod && self.pod_labels.admits(key)),
            |key| {
                if pod {
                    self.pod_labels.refusal(key)
                } else {
                    "a label the host does not set on a child of this kind".to_string()
                }
            },
        )?;
        for (key, value) in labels {
            if !value.is_string() {
                return Err(fields.refuse(format!("metadata.labels.{key}"), "not a string"));
            }
        }
        check_belongs(scope, &fields, metadata, labels)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::containment::tests::*;
    use crate::containment::*;

    #[test]
    fn pod_labels_and_annotations_only_where_the_operator_allows() {
        // A team and a cost center, from the Sandbox's labels: refused by default, as any label
        // not the host's is.
        for (key, value) in [("team", "payments"), ("example.com/cost-center", "cc-42")] {
            pod_refused(
                |p| p["metadata"]["labels"][key] = json!(value),
                Rule::Scope,
                &format!("metadata.labels.{key}"),
            );
        }
        let rules = Containment {
            pod_labels: KeyAllowlist::new(KeyKind::Label, ["team", "example.com/"]),
            pod_annotations: KeyAllowlist::new(KeyKind::Annotation, ["example.com/"]),
            ..Containment::default()
        };
        let mut labelled = pod();
        labelled["metadata"]["labels"]["team"] = json!("payments");
        labelled["metadata"]["labels"]["example.com/cost-center"] = json!("cc-42");
        labelled["metadata"]["annotations"] = json!({"example.com/owner": "alice"});
        assert_eq!(check(&rules, Resource::Pod, S, &labelled), Ok(()));

        // A key outside the lists, with its rule and field as without them, and the flag named.
        let edited = |edit: &dyn Fn(&mut Value)| {
            let mut manifest = labelled.clone();
            edit(&mut manifest);
            check(&rules, Resource::Pod, S, &manifest)
        };
        let result = edited(&|p| p["metadata"]["labels"]["app"] = json!("frontend"));
        refused(result.clone(), Rule::Scope, "metadata.labels.app");
        let message = result.unwrap_err().to_string();
        assert!(
            message.contains("--allow-pod-label allows (\"example.com/\", \"team\")"),
            "{message}"
        );
        refused(
            edited(&|p| p["metadata"]["labels"]["example.com.evil/x"] = json!("y")),
            Rule::Scope,
            "metadata.labels.example.com.evil/x",
        );
        refused(
            edited(&|p| {
                p["metadata"]["annotations"]["io.katacontainers.config.hypervisor.path"] =
                    json!("/x")
            }),
            Rule::Scope,
            "metadata.annotations.io.katacontainers.config.hypervisor.path",
        );
        refused(
            edited(&|p| p["metadata"]["labels"]["team"] = json!(7)),
            Rule::Scope,
            "metadata.labels.team",
        );

        // The host's keys stay the host's, whatever a list holds: its values are checked as ever,
        // and another key under cubepod.io/ is refused as no flag's.
        let wide = Containment {
            pod_labels: KeyAllowlist::new(KeyKind::Label, ["cubepod.io/", "app.kubernetes.io/"]),
            pod_annotations: KeyAllowlist::new(
                KeyKind::Annotation,
                ["cubepod.io/", "io.katacontainers.config.hypervisor.path"],
            ),
            ..Containment::default()
        };
        let wide_edit = |edit: &dyn Fn(&mut Value)| {
            let mut manifest = pod();
            edit(&mut manifest);
            check(&wide, Resource::Pod, S, &manifest)
        };
        let result = wide_edit(&|p| p["metadata"]["labels"]["cubepod.io/pool"] = json!("p"));
        refused(
            result.clone(),
            Rule::Scope,
            "metadata.labels.cubepod.io/pool",
        );
        assert!(
            result
                .unwrap_err()
                .to_string()
                .contains("no flag widens it"),
            "the refusal says why"
        );
        refused(
            wide_edit(&|p| p["metadata"]["labels"]["cubepod.io/sandbox"] = json!("bob")),
            Rule::Scope,
            "metadata.labels.cubepod.io/sandbox",
        );
        refused(
            wide_edit(&|p| {
                p["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("someone-else")
            }),
            Rule::Scope,
            "metadata.labels.app.kubernetes.io/managed-by",
        );
        refused(
            wide_edit(&|p| p["metadata"]["annotations"] = json!({"cubepod.io/spec-hash": "1"})),
            Rule::Scope,
            "metadata.annotations.cubepod.io/spec-hash",
        );
        refused(
            wide_edit(&|p| {
                p["metadata"]["annotations"] =
                    json!({"io.katacontainers.config.hypervisor.path": "/x"})
            }),
            Rule::Scope,
            "metadata.annotations.io.katacontainers.config.hypervisor.path",
        );
        assert_eq!(
            wide_edit(&|p| p["metadata"]["labels"]["app.kubernetes.io/part-of"] = json!("ci")),
            Ok(())
        );

        // Only the Pod: the other children carry the host's labels alone, whatever the flags.
        for (resource, name) in [
            (Resource::PersistentVolumeClaim, "dev-alice-workspace"),
            (Resource::Secret, "dev-alice-credentials"),
            (Resource::NetworkPolicy, "dev-alice-network"),
        ] {
            let mut manifest = manifest_of(resource, name);
            manifest["metadata"]["labels"]["team"] = json!("payments");
            refused(
                check(&rules, resource, name, &manifest),
                Rule::Scope,
                "metadata.labels.team",
            );
        }
        let mut network = manifest_of(Resource::NetworkPolicy, "dev-alice-network");
        network["metadata"]["annotations"]["example.com/owner"] = json!("alice");
        refused(
            check(
                &rules,
                Resource::NetworkPolicy,
                "dev-alice-network",
                &network,
            ),
            Rule::Scope,
            "metadata.annotations.example.com/owner",
        );
    }
}
