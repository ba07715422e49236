//! The rules of what a policy may write, and the only place they live: every `kube-client`
//! call of a policy passes them before it reaches the cluster, and the reconcile core admits a
//! policy's output by them before it writes any of it (docs/policy-authoring.md, "The
//! boundary", has the table). One file per rule:
//!
//! - `boundary.rs`: the first layer of a call ([`Boundary::check`]): the configured
//!   namespaces only, a sandbox's child kinds only (Pods, PVCs, Secrets, NetworkPolicies,
//!   Services), a valid name, and a manifest that is the object the call names (rules
//!   `namespace`, `kind`, `name`, `manifest`);
//! - [`Containment`] (this file: [`Containment::check_write`], `Containment::check_delete`)
//!   dispatches what one call for Sandbox S may write, as allowlists of what a sandbox needs:
//!   - `scope.rs`: only S's own children (a rootfs PVC only of S's current generation), with
//!     S's labels and controller reference; `metadata.rs`: on the Pod the labels and
//!     annotations the operator allows ([`keys`]) (rule `scope`);
//!   - `pod.rs` (and `pod_placement.rs`): a Pod inside the Pod Security Standards level and
//!     the sandbox profile (rule `pod`);
//!   - `pvc.rs`: a block PVC of bounded size that clones only a PVC S's fork source owns
//!     (rule `pvc`);
//!   - `secret.rs`: an Opaque Secret of bounded size (rule `secret`);
//!   - [`network`] (and [`ipset`]): a NetworkPolicy no wider than S's spec allows, and no Pod
//!     before its NetworkPolicy (rule `network`);
//!   - `service.rs`: S's own headless Service (rule `service`);
//!   - `budgets.rs`: the per-call budgets and the output's ([`OutputBudget`]) (rule
//!     `budget`); [`rates`]: what may be written over time, across calls;
//! - [`pools`]: a policy's output about pools, claims and the reaper (rules `pool`, `claim`,
//!   `reap`); `spec.rs`: a Sandbox's own spec within the operator's bounds, before the policy
//!   is handed it.
//!
//! The entry points, all here: `Containment::check_call` (a `kube-client` call, every rule
//! in order), [`Containment::sandbox_output`] (what a reconcile returns),
//! [`Containment::refused_spec`], and `SandboxScope::check_held` (whether a delete is sent).
//!
//! A field, kind or value not known to be safe is refused; an operator widens the lists by
//! flag (`config::ContainmentArgs`). A refusal names its [`Rule`] and the field; it goes back
//! to the guest as `kube-error::refused` and is logged and counted by the caller. Each rule's
//! unit tests sit beside it; `tests.rs` holds the fixtures they share and the tests that span
//! rules.

pub(crate) mod boundary;
mod budgets;
mod fields;
pub mod ipset;
pub mod json;
pub mod keys;
mod metadata;
pub mod network;
#[cfg(test)]
mod network_tests;
mod pod;
#[cfg(test)]
mod pod_placement_tests;
#[cfg(test)]
mod pod_tests;
pub mod pools;
mod pvc;
mod quantity;
pub mod rates;
mod scope;
mod secret;
mod service;
mod spec;
mod surfaced;
#[cfg(test)]
mod tests;
mod text;

use std::collections::BTreeSet;
use std::fmt;

pub use boundary::Boundary;
pub use budgets::{MIN_REQUEUE_SECONDS, OutputBudget};
pub use keys::{KeyAllowlist, KeyKind};
pub use network::SandboxNetwork;
pub use pod::{
    DEFAULT_SCHEDULER, PodBounds, PodSecurity, RESERVED_NODE_KEYS, WIDENABLE_POD_FIELDS,
};
pub use quantity::{
    QuantityError, format_bytes, parse_ceil as quantity_value, parse_ceil_milli as quantity_milli,
};
pub(crate) use scope::ChildRole;
pub use scope::{ChildHeld, ForkSource, SandboxScope};

/// How the host names an object that bears one of a Sandbox's child names but is not its own
/// (no controller reference to its uid): the start of the `conflict` error an ensure or an
/// apply of it gets, the reason of the Warning Event and the type of the condition on the
/// Sandbox. Such an object is never adopted, mounted, reported, patched or deleted.
pub const NAME_CONFLICT: &str = "NameConflict";
pub use surfaced::Surfaced;
pub use text::{clip, shown};

use self::fields::{Fields, nth, sub};
use self::json::Json;
use self::text::{Clipped, dns1123_subdomain, short};
use crate::model::names;
use crate::model::sandbox::StatusPatch;
use crate::runtime::bindings::ReconcileOutput;
use cubepod_kube::Resource;

/// The labels every child carries: the managed-by label and value, and its Sandbox's name.
pub use crate::model::names::{MANAGED_BY, MANAGED_BY_LABEL, SANDBOX_LABEL};

/// How much of a refused manifest or name the host keeps (in logs and call records).
pub const KEPT_PREFIX: usize = 1024;

/// Which rule refused a call: the `rule` label of `cubepod_boundary_refusals_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// The export may not call the cluster, or the object is not the call's Sandbox's child.
    Scope,
    /// Not a namespace the controller manages.
    Namespace,
    /// Not a child kind: a Pod, PVC, Secret, NetworkPolicy or Service.
    Kind,
    /// Not a valid object name.
    Name,
    /// Not the JSON object the call names.
    Manifest,
    /// Past a per-call budget (calls, bytes of a manifest).
    Budget,
    /// Outside the Pod profile.
    Pod,
    /// Outside the PVC rules: the sandbox's own claims, of bounded size.
    Pvc,
    /// Outside the Secret rules.
    Secret,
    /// A NetworkPolicy wider than the spec allows, or a Pod before its NetworkPolicy.
    Network,
    /// A Service that is not the sandbox's own headless one.
    Service,
    /// A pool's creates and deletes: only its own members, made from its template.
    Pool,
    /// A claim only of a candidate the input offered.
    Claim,
    /// Reaper decisions only about the candidates handed.
    Reap,
}

impl Rule {
    /// The rule's name in refusals, logs and metric labels.
    pub const fn label(self) -> &'static str {
        match self {
            Rule::Scope => "scope",
            Rule::Namespace => "namespace",
            Rule::Kind => "kind",
            Rule::Name => "name",
            Rule::Manifest => "manifest",
            Rule::Budget => "budget",
            Rule::Pod => "pod",
            Rule::Pvc => "pvc",
            Rule::Secret => "secret",
            Rule::Network => "network",
            Rule::Service => "service",
            Rule::Pool => "pool",
            Rule::Claim => "claim",
            Rule::Reap => "reap",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// Why the boundary refused a call: the rule, the field, and why, about the object named.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what}: refused by rule {rule} at {field}: {reason}")]
pub struct Refusal {
    /// The rule that refused.
    pub rule: Rule,
    /// `Pod ns/name`.
    pub(crate) what: String,
    /// The field refused: `spec.hostNetwork`, `metadata.labels`, `namespace` (the call's).
    pub field: String,
    /// Why, in words.
    pub reason: String,
}

impl Refusal {
    /// A refusal of `what` by `rule` at `field`, for `reason`.
    pub fn new(
        rule: Rule,
        what: impl fmt::Display,
        field: impl fmt::Display,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            rule,
            what: what.to_string(),
            field: field.to_string(),
            reason: reason.into(),
        }
    }
}

/// `Pod ns/name`, with the guest's strings clipped: written out only where a refusal or a
/// message needs it, since every admitted call would otherwise pay for the text.
pub(crate) fn describe<'a>(resource: Resource, namespace: &'a str, name: &'a str) -> Described<'a> {
    Described {
        resource,
        namespace,
        name,
    }
}

/// An object a call names, as [`describe`] shows it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Described<'a> {
    resource: Resource,
    namespace: &'a str,
    name: &'a str,
}

impl fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}/{}",
            self.resource.kind(),
            Clipped(self.namespace, KEPT_PREFIX),
            Clipped(self.name, KEPT_PREFIX)
        )
    }
}

/// The rules of containment and the per-call budgets (one set for `run`, `policy test` and
/// the hot-swap self-test: `config::ContainmentArgs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Containment {
    /// RuntimeClasses a Pod may name (it must name one).
    pub runtime_classes: BTreeSet<String>,
    /// The Pod security profile every Pod must satisfy.
    pub pod_security: PodSecurity,
    /// The only service account a Pod may run as.
    pub service_account: String,
    /// Fields of [`WIDENABLE_POD_FIELDS`] allowed in a Pod's spec.
    pub extra_pod_fields: BTreeSet<String>,
    /// Labels besides the host's a Pod may carry.
    pub pod_labels: KeyAllowlist,
    /// Annotations a Pod may carry.
    pub pod_annotations: KeyAllowlist,
    /// Secrets besides the sandbox's own that a Pod may reference.
    pub secret_refs: BTreeSet<String>,
    /// ConfigMaps a Pod may reference.
    pub config_map_refs: BTreeSet<String>,
    /// PriorityClasses a Pod may name (where `priorityClassName` is allowed).
    pub priority_classes: BTreeSet<String>,
    /// Schedulers a Pod may name (where `schedulerName` is allowed).
    pub schedulers: BTreeSet<String>,
    /// Keys of [`RESERVED_NODE_KEYS`] a Pod may tolerate and select nodes by.
    pub node_keys: BTreeSet<String>,
    /// Grace periods, deadline and resources.
    pub pod_bounds: PodBounds,
    /// The largest storage request of a PVC, in bytes.
    pub max_volume_bytes: u128,
    /// `kube-client` calls one policy call may make; past it the call traps.
    pub max_kube_calls: u32,
    /// Bytes of one manifest, checked before it is parsed.
    pub max_manifest_bytes: usize,
    /// Addresses the operator lets sandboxes reach although they are protected (the metadata
    /// service, link-local, the cluster's ranges and the API server: `network::protected`).
    pub allowed_egress: ipset::IpSet,
    /// What one call's output may hold (checked by the reconcile core).
    pub output: OutputBudget,
    /// What may be written for one object over time, across calls.
    pub rates: rates::Rates,
}

impl Default for Containment {
    fn default() -> Self {
        Self {
            runtime_classes: BTreeSet::from([names::DEFAULT_RUNTIME_CLASS.to_string()]),
            pod_security: PodSecurity::Baseline,
            service_account: "default".to_string(),
            extra_pod_fields: BTreeSet::new(),
            pod_labels: KeyAllowlist::none(KeyKind::Label),
            pod_annotations: KeyAllowlist::none(KeyKind::Annotation),
            secret_refs: BTreeSet::new(),
            config_map_refs: BTreeSet::new(),
            priority_classes: BTreeSet::new(),
            schedulers: BTreeSet::from([DEFAULT_SCHEDULER.to_string()]),
            node_keys: BTreeSet::new(),
            pod_bounds: PodBounds::default(),
            max_volume_bytes: 1 << 40,
            max_kube_calls: 16,
            max_manifest_bytes: 512 << 10,
            allowed_egress: ipset::IpSet::default(),
            output: OutputBudget::default(),
            rates: rates::Rates::default(),
        }
    }
}

/// What the host knows of one call and of the controller's cache that the rules of order read
/// (no Pod before its NetworkPolicy, no NetworkPolicy deleted before its Pod).
pub(crate) trait CallFacts {
    /// What this call last did to an object: `Some(true)` written, `Some(false)` deleted,
    /// `None` neither.
    fn last_done(&self, resource: Resource, namespace: &str, name: &str) -> Option<bool>;
    /// Whether the call's Sandbox holds the object as its own child, as the cache says (or,
    /// without one, the input's observed children): one lookup.
    fn held(&self, resource: Resource, namespace: &str, name: &str) -> bool;
}

impl Containment {
    /// The verdict on one `kube-client` call, every rule in order: only an export with a
    /// Sandbox to call for (`call`: the boundary and the call's scope) calls the cluster; a
    /// manifest within its size before it is parsed; the boundary ([`Boundary::check`]); then
    /// a write as [`Self::check_write`] and no Pod before its NetworkPolicy, a delete as
    /// [`Self::check_delete`] and no NetworkPolicy deleted while its Pod is there.
    pub(crate) fn check_call(
        &self,
        call: Option<(&Boundary, &SandboxScope)>,
        resource: Resource,
        namespace: &str,
        name: &str,
        manifest: Option<&str>,
        facts: &impl CallFacts,
    ) -> Result<(), Refusal> {
        let what = describe(resource, namespace, name);
        let Some((boundary, scope)) = call else {
            return Err(Refusal::new(
                Rule::Scope,
                what,
                "export",
                "this export may not call the cluster: only reconcile-sandbox and \
                 cleanup-sandbox may",
            ));
        };
        if let Some(manifest) = manifest {
            self.check_manifest_size(&what, manifest)?;
        }
        match boundary.check(resource, namespace, name, manifest)? {
            Some(object) => {
                self.check_write(scope, resource, namespace, name, &object)?;
                if resource == Resource::Pod {
                    network::network_policy_first(scope, facts, namespace, name)?;
                }
            }
            None => {
                self.check_delete(scope, resource, namespace, name)?;
                if resource == Resource::NetworkPolicy {
                    network::no_pod_without_its_policy(scope, facts, namespace, name)?;
                }
            }
        }
        Ok(())
    }

    /// A delete's name: one of the Sandbox's child names. Whether the object is the
    /// Sandbox's is the cache's to say (see `runtime::ChildLookup`).
    pub(crate) fn check_delete(
        &self,
        scope: &SandboxScope,
        resource: Resource,
        namespace: &str,
        name: &str,
    ) -> Result<ChildRole, Refusal> {
        scope.check_namespace(resource, namespace, name)?;
        let what = describe(resource, &scope.namespace, name);
        let role = scope.child_role(resource, name).ok_or_else(|| {
            Refusal::new(
                Rule::Scope,
                what,
                "name",
                format!(
                    "not a child name of Sandbox {:?}: a call for it may delete only {}",
                    scope.name,
                    scope.child_names(resource)
                ),
            )
        })?;
        scope.check_generation(role, true, &what, "name")?;
        Ok(role)
    }

    /// What a call for `scope`'s Sandbox may write: its own child, as the profile of its
    /// kind allows. `object` is the manifest [`Boundary::check`] admitted.
    pub fn check_write(
        &self,
        scope: &SandboxScope,
        resource: Resource,
        namespace: &str,
        name: &str,
        object: &Json<'_>,
    ) -> Result<(), Refusal> {
        scope.check_namespace(resource, namespace, name)?;
        let what = describe(resource, namespace, name);
        let role = scope.child_role(resource, name).ok_or_else(|| {
            Refusal::new(
                Rule::Scope,
                what,
                "metadata.name",
                format!(
                    "not a child name of Sandbox {:?}: a call for it may write only {}",
                    scope.name,
                    scope.child_names(resource)
                ),
            )
        })?;
        scope.check_generation(role, false, &what, "metadata.name")?;
        self.check_metadata(scope, resource, &what, object)?;
        match resource {
            Resource::Pod => pod::check(self, scope, &what, object),
            Resource::PersistentVolumeClaim => self.check_pvc(scope, role, &what, object),
            Resource::Secret => secret::check(&what, object),
            Resource::NetworkPolicy => network::check(self, scope, &what, object),
            Resource::Service => service::check(scope, &what, object),
            Resource::Sandbox
            | Resource::PodWarmPool
            | Resource::Event
            | Resource::Lease
            | Resource::PolicyRollout
            | Resource::ConfigMap => {
                Err(Refusal::new(Rule::Kind, what, "kind", "not a child kind"))
            }
        }
    }

    /// What the reconcile core admits of a Sandbox's output, all of it before any is written
    /// (rules `budget` and `claim`): its status within the budget (returned as the patch the
    /// controller writes; its conditions checked before the patch is made, since a status of
    /// thousands of conditions or a huge message is megabytes, every copy resident at once),
    /// its Events within theirs, a claim only of a candidate `offered`, and a status naming as
    /// its member only the one the controller adopted for it (`bound`) or the one it claims.
    pub fn sandbox_output(
        &self,
        what: &str,
        out: &ReconcileOutput,
        generation: i64,
        offered: &[String],
        bound: Option<&str>,
    ) -> Result<StatusPatch, Refusal> {
        let patch = self
            .output
            .sandbox_status_patch(what, &out.status, generation)?;
        self.output.events(what, &out.events)?;
        if let Some(member) = &out.claim {
            pools::claim(what, member, offered)?;
        }
        pools::claimed_member(
            what,
            out.status.claimed_member.as_deref(),
            bound,
            out.claim.as_deref(),
        )?;
        Ok(patch)
    }
}
