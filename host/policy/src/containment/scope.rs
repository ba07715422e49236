//! Rule `scope`: a call for Sandbox S writes and deletes only S's own children, by their
//! names, in S's namespace, a rootfs PVC only of S's current generation, each carrying S's
//! labels and its one controller reference to S.

use std::fmt;

use super::fields::Fields;
use super::json::{Json, Object};
use super::{
    MANAGED_BY, MANAGED_BY_LABEL, Refusal, Rule, SANDBOX_LABEL, SandboxNetwork, describe, short,
};
use crate::model::names;
use cubepod_kube::Resource;

/// The Sandbox a call is for, from the call's own input: what its children are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SandboxScope {
    /// The Sandbox's namespace.
    pub namespace: String,
    /// The Sandbox's name.
    pub name: String,
    /// The Sandbox's UID, which its children's owner reference names.
    pub uid: String,
    /// `spec.rootfsGeneration`: the one rootfs PVC a call may write and a Pod may mount;
    /// older ones it may only delete.
    pub rootfs_generation: u32,
    /// `spec.storage.storageClassName`: the only class a PVC may name.
    pub storage_class: Option<String>,
    /// The Sandbox `spec.forkFrom` names, as the input carries it, and its PVCs.
    pub fork: Option<ForkSource>,
    /// The call is `cleanup-sandbox`: the Sandbox is going, and every child with it (a rootfs
    /// PVC of a later generation than the spec's too, which a reconcile may not delete).
    pub cleanup: bool,
    /// The children the input shows as observed: what a delete may name where no cache
    /// answers (tests, `policy test`).
    pub observed: Vec<(Resource, String)>,
    /// What the Sandbox's NetworkPolicy may allow; `None` (tests only) allows none.
    pub network: Option<SandboxNetwork>,
}

/// What a fork may clone: the PVCs its source owns in the cluster, as the controller's cache
/// holds them (`runtime::ChildLookup::owned_pvcs`), never a name a status holds: a status is
/// the policy's to write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ForkSource {
    pub(crate) name: String,
    /// The source's PVCs that are not being deleted: labelled as its, managed, and with its
    /// controller reference (the source's uid).
    pub(crate) pvcs: Vec<String>,
}

/// What the controller's cache holds under a name, for the delete rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildHeld {
    /// A managed child of the call's Sandbox.
    Own,
    /// A managed child of another Sandbox.
    Other,
    /// Labelled as the call's Sandbox's, but without its controller reference (its uid): not
    /// its child, whoever made it. Never deleted, patched or adopted for it.
    Stranger,
    /// Nothing: the object does not exist, or cubepod-controller does not manage it.
    NotHeld,
}

/// Which child of its Sandbox an object is, by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChildRole {
    Pod,
    Workspace,
    Rootfs(u32),
    Credentials,
    NetworkPolicy,
    Service,
}

impl SandboxScope {
    /// The role of `resource` `name` among this Sandbox's children, if it is one of their
    /// names (`<s>`, `<s>-workspace`, `<s>-rootfs-g<N>`, `<s>-credentials`).
    pub(crate) fn child_role(&self, resource: Resource, name: &str) -> Option<ChildRole> {
        let s = self.name.as_str();
        match resource {
            Resource::Pod => (name == names::pod(s)).then_some(ChildRole::Pod),
            Resource::Secret => (name == names::secret(s)).then_some(ChildRole::Credentials),
            Resource::NetworkPolicy => {
                (name == names::network_policy(s)).then_some(ChildRole::NetworkPolicy)
            }
            Resource::Service => (name == names::service(s)).then_some(ChildRole::Service),
            Resource::PersistentVolumeClaim => pvc_role(s, name),
            Resource::Sandbox
            | Resource::PodWarmPool
            | Resource::Event
            | Resource::Lease
            | Resource::PolicyRollout
            | Resource::ConfigMap => None,
        }
    }

    /// A rootfs PVC of a generation a call may not write (any but the spec's) or, outside
    /// cleanup, delete (a later one: it would be the volume of a reset the spec has not asked
    /// for, and one the cache may show before the spec that asks for it).
    pub(super) fn check_generation(
        &self,
        role: ChildRole,
        delete: bool,
        what: &dyn fmt::Display,
        field: &str,
    ) -> Result<(), Refusal> {
        let ChildRole::Rootfs(generation) = role else {
            return Ok(());
        };
        let current = self.rootfs_generation;
        let allowed = if delete {
            generation <= current || self.cleanup
        } else {
            generation == current
        };
        if allowed {
            return Ok(());
        }
        let current_pvc = names::rootfs_pvc(&self.name, current);
        let may = if delete {
            format!("delete rootfs PVCs up to {current_pvc:?} (a later one goes in its cleanup)")
        } else {
            format!("write only the rootfs PVC {current_pvc:?}")
        };
        Err(Refusal::new(
            Rule::Scope,
            what,
            field,
            format!(
                "generation {generation} is not Sandbox {:?}'s current rootfs generation \
                 (spec.rootfsGeneration: {current}): a call for it may {may}",
                self.name,
            ),
        ))
    }

    /// A Sandbox's children live in its namespace.
    pub(super) fn check_namespace(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
    ) -> Result<(), Refusal> {
        if namespace == self.namespace {
            return Ok(());
        }
        Err(Refusal::new(
            Rule::Scope,
            describe(resource, namespace, name),
            "namespace",
            format!(
                "not the namespace of Sandbox {:?} ({:?})",
                self.name, self.namespace
            ),
        ))
    }

    pub(super) fn child_names(&self, resource: Resource) -> String {
        let s = self.name.as_str();
        match resource {
            Resource::Pod => format!("{:?}", names::pod(s)),
            Resource::Secret => format!("{:?}", names::secret(s)),
            Resource::NetworkPolicy => format!("{:?}", names::network_policy(s)),
            Resource::Service => format!("{:?}", names::service(s)),
            Resource::PersistentVolumeClaim => {
                format!("{:?} or \"{s}-rootfs-g<N>\"", names::workspace_pvc(s))
            }
            // Refused by the boundary as no child kind before a name is looked at.
            Resource::Sandbox
            | Resource::PodWarmPool
            | Resource::Event
            | Resource::Lease
            | Resource::PolicyRollout
            | Resource::ConfigMap => format!("no {}", resource.plural()),
        }
    }

    /// The current rootfs PVC and the workspace PVC: what a Pod may mount.
    pub(super) fn volumes(&self) -> [String; 2] {
        [
            names::rootfs_pvc(&self.name, self.rootfs_generation),
            names::workspace_pvc(&self.name),
        ]
    }
}

impl SandboxScope {
    /// Whether an admitted delete is sent, by what the controller's cache holds under the name
    /// (`held`; `None` where there is no cache): `Ok(false)` for what it does not hold (taken
    /// as gone), refused for another Sandbox's child; without a cache, only what the input shows
    /// as observed is sent, anything else refused (fail closed).
    pub(crate) fn check_held(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        held: Option<ChildHeld>,
    ) -> Result<bool, Refusal> {
        let what = describe(resource, namespace, name);
        match held {
            Some(ChildHeld::Own) => Ok(true),
            Some(ChildHeld::NotHeld | ChildHeld::Stranger) => Ok(false),
            Some(ChildHeld::Other) => Err(Refusal::new(
                Rule::Scope,
                what,
                "name",
                format!(
                    "the controller holds it as a child of another Sandbox, not of {:?}",
                    self.name
                ),
            )),
            None if self
                .observed
                .iter()
                .any(|(r, n)| *r == resource && n == name) =>
            {
                Ok(true)
            }
            None => Err(Refusal::new(
                Rule::Scope,
                what,
                "name",
                format!(
                    "not among Sandbox {:?}'s observed children, and no cache to ask",
                    self.name
                ),
            )),
        }
    }
}

/// The role of PVC `name` among Sandbox `sandbox`'s children, if it is one of their names.
pub(super) fn pvc_role(sandbox: &str, name: &str) -> Option<ChildRole> {
    if name == names::workspace_pvc(sandbox) {
        return Some(ChildRole::Workspace);
    }
    names::rootfs_generation_of(sandbox, name)
        // Only the canonical spelling: `-g03` would be a second name for `-g3`.
        .filter(|g| names::rootfs_pvc(sandbox, *g) == name)
        .map(ChildRole::Rootfs)
}

/// What makes a child S's: the host's labels with S's values, and its one owner reference.
pub(super) fn check_belongs(
    scope: &SandboxScope,
    fields: &Fields<'_>,
    metadata: &Json<'_>,
    labels: &Object<'_>,
) -> Result<(), Refusal> {
    let label = |key: &str| labels.get(key).and_then(Json::as_str);
    if label(MANAGED_BY_LABEL) != Some(MANAGED_BY) {
        return Err(fields.refuse(
            format!("metadata.labels.{MANAGED_BY_LABEL}"),
            format!(
                "the manifest lacks the label {MANAGED_BY_LABEL}: {MANAGED_BY}, so \
                 cubepod-controller would not manage the object"
            ),
        ));
    }
    if label(SANDBOX_LABEL) != Some(scope.name.as_str()) {
        return Err(fields.refuse(
            format!("metadata.labels.{SANDBOX_LABEL}"),
            format!(
                "the manifest's label {SANDBOX_LABEL} is {}, not the call's Sandbox {:?}",
                labels
                    .get(SANDBOX_LABEL)
                    .map_or("missing".to_string(), short),
                scope.name
            ),
        ));
    }
    let field = "metadata.ownerReferences";
    let owners = fields.array(
        fields.required(metadata, "metadata", "ownerReferences")?,
        field,
    )?;
    let [owner] = owners.as_slice() else {
        return Err(fields.refuse(
            field,
            format!(
                "{} owner references: a child has exactly one, the controller reference to its \
                 Sandbox",
                owners.len()
            ),
        ));
    };
    let field = "metadata.ownerReferences[0]";
    let owner_map = fields.object(
        owner,
        field,
        &[
            "apiVersion",
            "kind",
            "name",
            "uid",
            "controller",
            "blockOwnerDeletion",
        ],
    )?;
    let is =
        |key: &str, expected: &str| owner_map.get(key).and_then(Json::as_str) == Some(expected);
    if !is("apiVersion", names::API_VERSION)
        || !is("kind", "Sandbox")
        || !is("name", &scope.name)
        || !is("uid", &scope.uid)
        || owner_map.get("controller").and_then(Json::as_bool) != Some(true)
        || owner_map
            .get("blockOwnerDeletion")
            .is_some_and(|b| !b.is_boolean())
    {
        return Err(fields.refuse(
            field,
            format!(
                "not the controller reference to Sandbox {:?} (apiVersion {}, kind Sandbox, \
                 uid {:?}, controller: true)",
                scope.name,
                names::API_VERSION,
                scope.uid
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::containment::tests::*;
    use crate::containment::*;
    use cubepod_policy_sdk::fixtures;

    #[test]
    fn a_rootfs_pvc_only_of_the_current_generation_and_deletes_of_no_later_one() {
        let rules = Containment::default();
        let mut input = new_sandbox();
        input.sandbox.spec.rootfs_generation = 3;
        let scope = scope_of(&input);
        let (_, _, current) = writes(&input)
            .into_iter()
            .find(|(_, name, _)| name == "dev-alice-rootfs-g3")
            .expect("the default writes the current rootfs PVC");
        let pvc = Resource::PersistentVolumeClaim;
        assert_eq!(
            check_in(&rules, &scope, pvc, "dev-alice-rootfs-g3", &current),
            Ok(())
        );
        for generation in [1, 2, 4, 99] {
            let name = format!("dev-alice-rootfs-g{generation}");
            let mut other = current.clone();
            other["metadata"]["name"] = json!(name);
            other["metadata"]["labels"]["cubepod.io/rootfs-generation"] =
                json!(generation.to_string());
            refused(
                check_in(&rules, &scope, pvc, &name, &other),
                Rule::Scope,
                "metadata.name",
            );
        }
        let reason = match check_in(&rules, &scope, pvc, "dev-alice-rootfs-g4", &{
            let mut other = current.clone();
            other["metadata"]["name"] = json!("dev-alice-rootfs-g4");
            other
        }) {
            Err(refusal) => refusal.reason,
            Ok(()) => panic!("admitted"),
        };
        assert!(
            reason.contains("spec.rootfsGeneration: 3")
                && reason.contains("\"dev-alice-rootfs-g3\""),
            "{reason}"
        );
        // Deletes: the older generations and the current one; a later one only in cleanup.
        let delete = |scope: &SandboxScope, generation: u32| {
            rules
                .check_delete(
                    scope,
                    pvc,
                    fixtures::NAMESPACE,
                    &format!("dev-alice-rootfs-g{generation}"),
                )
                .map(drop)
        };
        for generation in [1, 2, 3] {
            assert_eq!(delete(&scope, generation), Ok(()), "g{generation}");
        }
        refused(delete(&scope, 4), Rule::Scope, "name");
        let cleanup = SandboxScope {
            cleanup: true,
            ..scope.clone()
        };
        assert_eq!(delete(&cleanup, 4), Ok(()));
        // Cleanup writes no more than a reconcile does.
        let mut later = current.clone();
        later["metadata"]["name"] = json!("dev-alice-rootfs-g4");
        refused(
            check_in(&rules, &cleanup, pvc, "dev-alice-rootfs-g4", &later),
            Rule::Scope,
            "metadata.name",
        );
    }

    #[test]
    fn scope_only_the_sandboxs_own_children() {
        let rules = Containment::default();
        // Another sandbox's child names, and names no child has.
        for (resource, name) in [
            (Resource::PersistentVolumeClaim, "bob-workspace"),
            (Resource::Secret, "bob-credentials"),
            (Resource::Pod, "bob"),
            (Resource::Pod, "dev-alice-debug"),
            (Resource::PersistentVolumeClaim, "dev-alice-rootfs-g01"),
            (Resource::Secret, "dev-alice-token"),
        ] {
            let mut manifest = match resource {
                Resource::Pod => pod(),
                Resource::Secret => manifest_of(resource, "dev-alice-credentials"),
                _ => manifest_of(resource, "dev-alice-workspace"),
            };
            manifest["metadata"]["name"] = json!(name);
            refused(
                check(&rules, resource, name, &manifest),
                Rule::Scope,
                "metadata.name",
            );
            let scope = scope_of(&new_sandbox());
            refused(
                rules
                    .check_delete(&scope, resource, fixtures::NAMESPACE, name)
                    .map(drop),
                Rule::Scope,
                "name",
            );
        }
        let mut scope = scope_of(&new_sandbox());
        scope.rootfs_generation = 7;
        assert_eq!(
            rules.check_delete(
                &scope,
                Resource::PersistentVolumeClaim,
                fixtures::NAMESPACE,
                "dev-alice-rootfs-g7"
            ),
            Ok(ChildRole::Rootfs(7))
        );
        refused(
            rules
                .check_delete(&scope, Resource::Pod, "other-namespace", S)
                .map(drop),
            Rule::Scope,
            "namespace",
        );
        // Labels: the sandbox's own, and no other that a selector could match.
        pod_refused(
            |p| p["metadata"]["labels"]["cubepod.io/sandbox"] = json!("bob"),
            Rule::Scope,
            "metadata.labels.cubepod.io/sandbox",
        );
        pod_refused(
            |p| p["metadata"]["labels"]["app"] = json!("payments"),
            Rule::Scope,
            "metadata.labels.app",
        );
        pod_refused(
            |p| {
                p["metadata"]["labels"]
                    .as_object_mut()
                    .unwrap()
                    .remove("app.kubernetes.io/managed-by");
            },
            Rule::Scope,
            "metadata.labels.app.kubernetes.io/managed-by",
        );
        pod_refused(
            |p| {
                p["metadata"]["annotations"] =
                    json!({"io.katacontainers.config.hypervisor.path": "/x"})
            },
            Rule::Scope,
            "metadata.annotations",
        );
        // Exactly one owner reference: the controller reference to the sandbox's uid.
        pod_refused(
            |p| p["metadata"]["ownerReferences"][0]["uid"] = json!("uid-bob"),
            Rule::Scope,
            "metadata.ownerReferences[0]",
        );
        pod_refused(
            |p| p["metadata"]["ownerReferences"][0]["controller"] = json!(false),
            Rule::Scope,
            "metadata.ownerReferences[0]",
        );
        pod_refused(
            |p| {
                let first = p["metadata"]["ownerReferences"][0].clone();
                p["metadata"]["ownerReferences"] = json!([first.clone(), first]);
            },
            Rule::Scope,
            "metadata.ownerReferences",
        );
        pod_refused(
            |p| {
                p["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("ownerReferences");
            },
            Rule::Scope,
            "metadata.ownerReferences",
        );
    }

    #[test]
    fn deletes_name_only_the_sandboxs_own_network_policy_and_service() {
        let scope = scope_of(&with(|_| {}));
        let rules = Containment::default();
        let ns = fixtures::NAMESPACE;
        assert_eq!(
            rules.check_delete(&scope, Resource::NetworkPolicy, ns, "dev-alice-network"),
            Ok(ChildRole::NetworkPolicy)
        );
        assert_eq!(
            rules.check_delete(&scope, Resource::Service, ns, S),
            Ok(ChildRole::Service)
        );
        for (resource, name) in [
            (Resource::NetworkPolicy, "bob-network"),
            (Resource::NetworkPolicy, S),
            (Resource::Service, "bob"),
        ] {
            refused(
                rules.check_delete(&scope, resource, ns, name).map(drop),
                Rule::Scope,
                "name",
            );
        }
    }
}
