//! The boundary every `kube-client` call of a policy passes before it reaches the cluster
//! (docs/policy-authoring.md, "The boundary", has the table). Two layers:
//!
//! - [`Boundary::check`]: the configured namespaces only, a sandbox's child kinds only (Pods,
//!   PVCs, Secrets, NetworkPolicies, Services), a valid name, and a manifest that is the object
//!   the call names;
//! - [`Containment`]: what one call for Sandbox S may write, as allowlists of what a sandbox
//!   needs: only S's own children (a rootfs PVC only of S's current generation), with S's
//!   labels and controller reference, and on the Pod the labels and annotations the operator
//!   allows ([`keys`]) (rule `scope`); a Pod inside the Pod Security Standards level and the
//!   sandbox profile (rule `pod`); a block PVC of bounded size that clones only a PVC S's fork
//!   source owns (rule `pvc`); an Opaque Secret of bounded size (rule `secret`); a
//!   NetworkPolicy no wider than S's spec allows (rule `network`); S's own headless Service
//!   (rule `service`); and the per-call budgets (rule `budget`).
//!
//! A field, kind or value not known to be safe is refused; an operator widens the lists by
//! flag (`config::ContainmentArgs`). A refusal names its [`Rule`] and the field; it goes back
//! to the guest as `kube-error::refused` and is logged and counted by the caller.

#[cfg(test)]
mod containment_tests;
pub mod ipset;
pub mod json;
pub mod keys;
pub mod network;
#[cfg(test)]
mod network_tests;
pub mod output_rules;
mod pod;
mod quantity;
pub mod rates;
mod service;

use std::collections::BTreeSet;
use std::fmt;

pub use keys::{KeyAllowlist, KeyKind};
pub use network::SandboxNetwork;
pub use quantity::{
    QuantityError, format_bytes, parse_ceil as quantity_value, parse_ceil_milli as quantity_milli,
};

use self::json::{Json, Object};
use crate::model::names;
use crate::runtime::bindings::ClusterNetwork;
use cubepod_kube::Resource;

/// The labels every child carries: the managed-by label and value, and its Sandbox's name.
pub use crate::model::names::{MANAGED_BY, MANAGED_BY_LABEL, SANDBOX_LABEL};

/// The labels of the host a child may carry: any other could make a sandbox's Pod match a
/// Service, NetworkPolicy or PodDisruptionBudget selector of another workload, so a Pod carries
/// another only where the operator allows it (`--allow-pod-label`).
const CHILD_LABELS: [&str; 4] = [
    MANAGED_BY_LABEL,
    SANDBOX_LABEL,
    names::VOLUME_LABEL,
    names::GENERATION_LABEL,
];

/// The most a Secret's data may hold, keys and values as sent (base64 counted as sent).
pub const MAX_SECRET_BYTES: usize = 64 << 10;

/// How much of a refused manifest or name the host keeps (in logs and call records).
pub const KEPT_PREFIX: usize = 1024;

/// Which rule refused a call: the `rule` label of `cubepod_boundary_refusals_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// The export may not call the cluster, or the object is not the call's Sandbox's child.
    Scope,
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
    Pvc,
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
    pub rule: Rule,
    /// `Pod ns/name`.
    pub what: String,
    /// The field refused: `spec.hostNetwork`, `metadata.labels`, `namespace` (the call's).
    pub field: String,
    pub reason: String,
}

impl Refusal {
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
pub fn describe<'a>(resource: Resource, namespace: &'a str, name: &'a str) -> Described<'a> {
    Described {
        resource,
        namespace,
        name,
    }
}

/// An object a call names, as [`describe`] shows it.
#[derive(Clone, Copy, Debug)]
pub struct Described<'a> {
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

/// [`clip`] without the allocation.
struct Clipped<'a>(&'a str, usize);

impl fmt::Display for Clipped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Clipped(text, max) = *self;
        if text.len() <= max {
            return f.write_str(text);
        }
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        write!(f, "{}... ({} bytes)", &text[..end], text.len())
    }
}

/// At most `max` bytes of `text` (on a character boundary), and how long it was if cut.
pub fn clip(text: &str, max: usize) -> String {
    Clipped(text, max).to_string()
}

/// The Pod Security Standards level a sandbox's Pod must meet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PodSecurity {
    #[default]
    Baseline,
    Restricted,
}

/// Pod spec fields outside the sandbox profile that an operator may allow by flag: they
/// steer scheduling, not what the Pod can reach.
pub const WIDENABLE_POD_FIELDS: [&str; 8] = [
    "affinity",
    "tolerations",
    "nodeSelector",
    "priorityClassName",
    "topologySpreadConstraints",
    "schedulerName",
    "dnsConfig",
    "hostAliases",
];

/// Node keys (taint keys and label keys alike) a Pod may neither tolerate nor select its node
/// by unless the operator lists them (`--allow-node-key`): the control plane's (its taints
/// keep workloads off it, its labels pick it), a cordoned node's taint, and a node's own name
/// (choosing the node of another workload). Avoiding them (`NotIn`, `DoesNotExist`) is free.
pub const RESERVED_NODE_KEYS: [&str; 4] = [
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
    "node.kubernetes.io/unschedulable",
    "kubernetes.io/hostname",
];

/// The scheduler a Pod gets when it names none.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// How much a sandbox's Pod may ask of a node and how long it may take to stop: per container
/// and for the Pod as a whole, and the same for the Sandbox's own `spec.resources`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodBounds {
    /// The most `terminationGracePeriodSeconds` (the Pod's and a probe's) may be: pause,
    /// reset, reap and delete wait this long on a VM that ignores SIGTERM.
    pub termination_grace_seconds: u64,
    /// The most `activeDeadlineSeconds` may be (absent is no deadline, as Kubernetes has it).
    pub active_deadline_seconds: u64,
    /// CPU, in millicores.
    pub cpu_milli: u128,
    /// Memory, in bytes.
    pub memory_bytes: u128,
    /// Ephemeral storage, in bytes.
    pub ephemeral_storage_bytes: u128,
}

impl Default for PodBounds {
    fn default() -> Self {
        Self {
            termination_grace_seconds: 30,
            active_deadline_seconds: 30 * 24 * 3600,
            cpu_milli: 16_000,
            memory_bytes: 64 << 30,
            ephemeral_storage_bytes: 100 << 30,
        }
    }
}

impl PodBounds {
    /// The amount `text` of `resource` (`cpu`, `memory`, `ephemeral-storage`), in the unit its
    /// bound is kept in, if it is a quantity within that bound; else why not.
    pub fn amount(&self, resource: &str, text: &str) -> Result<u128, String> {
        let (value, max, flag) = match resource {
            "cpu" => (
                quantity::parse_ceil_milli(text),
                self.cpu_milli,
                "--max-sandbox-cpu",
            ),
            "memory" => (
                quantity::parse_ceil(text),
                self.memory_bytes,
                "--max-sandbox-memory",
            ),
            "ephemeral-storage" => (
                quantity::parse_ceil(text),
                self.ephemeral_storage_bytes,
                "--max-sandbox-ephemeral-storage",
            ),
            _ => {
                return Err(format!(
                    "{resource:?} is not a resource a sandbox may ask for"
                ));
            }
        };
        let value = value.map_err(|e| format!("{:?} {e}", clip(text, 64)))?;
        if value > max {
            return Err(format!(
                "{:?} is more {resource} than a sandbox may have, {} ({flag})",
                clip(text, 64),
                self.show(resource, max)
            ));
        }
        Ok(value)
    }

    /// `amount` of `resource` as a user writes it.
    pub fn show(&self, resource: &str, amount: u128) -> String {
        if resource == "cpu" {
            quantity::format_milli(amount)
        } else {
            format_bytes(amount)
        }
    }

    /// The bound of `resource`, in its unit.
    pub fn max(&self, resource: &str) -> u128 {
        match resource {
            "cpu" => self.cpu_milli,
            "memory" => self.memory_bytes,
            _ => self.ephemeral_storage_bytes,
        }
    }

    /// A Sandbox's (or a pool template's) own `resources`: the field at fault and why, if
    /// either is past its bound. `prefix` is where the spec sits (`spec`, `spec.template`).
    pub fn check_spec(
        &self,
        prefix: &str,
        cpu: Option<&str>,
        memory: Option<&str>,
    ) -> Result<(), (String, String)> {
        for (resource, text) in [("cpu", cpu), ("memory", memory)] {
            if let Some(text) = text {
                self.amount(resource, text)
                    .map_err(|why| (format!("{prefix}.resources.{resource}"), why))?;
            }
        }
        Ok(())
    }
}

/// The rules of containment and the per-call budgets (one set for `run`, `policy test` and
/// the hot-swap self-test: `config::ContainmentArgs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Containment {
    /// RuntimeClasses a Pod may name (it must name one).
    pub runtime_classes: BTreeSet<String>,
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

/// How much of one policy output the reconcile core acts on
/// (`controller::output_rules`); past any of them the call fails (`budget`) and nothing of the
/// output is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputBudget {
    /// A status as written (its JSON).
    pub status_bytes: usize,
    pub conditions: usize,
    /// Events one call may ask for.
    pub events: usize,
    /// Bytes of one Event's message.
    pub event_message_bytes: usize,
}

impl Default for OutputBudget {
    fn default() -> Self {
        Self {
            status_bytes: 64 * 1024,
            conditions: 16,
            events: 8,
            event_message_bytes: 1024,
        }
    }
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

/// The Sandbox a call is for, from the call's own input: what its children are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SandboxScope {
    pub namespace: String,
    pub name: String,
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
    pub name: String,
    /// The source's PVCs that are not being deleted: labelled as its, managed, and with its
    /// controller reference (the source's uid).
    pub pvcs: Vec<String>,
}

/// Which child of its Sandbox an object is, by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildRole {
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
    pub fn child_role(&self, resource: Resource, name: &str) -> Option<ChildRole> {
        let s = self.name.as_str();
        match resource {
            Resource::Pod if name == names::pod(s) => Some(ChildRole::Pod),
            Resource::Secret if name == names::secret(s) => Some(ChildRole::Credentials),
            Resource::NetworkPolicy if name == names::network_policy(s) => {
                Some(ChildRole::NetworkPolicy)
            }
            Resource::Service if name == names::service(s) => Some(ChildRole::Service),
            Resource::PersistentVolumeClaim => pvc_role(s, name),
            _ => None,
        }
    }

    /// A rootfs PVC of a generation a call may not write (any but the spec's) or, outside
    /// cleanup, delete (a later one: it would be the volume of a reset the spec has not asked
    /// for, and one the cache may show before the spec that asks for it).
    fn check_generation(
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
    fn check_namespace(
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

    fn child_names(&self, resource: Resource) -> String {
        let s = self.name.as_str();
        match resource {
            Resource::Pod => format!("{:?}", names::pod(s)),
            Resource::Secret => format!("{:?}", names::secret(s)),
            Resource::NetworkPolicy => format!("{:?}", names::network_policy(s)),
            Resource::Service => format!("{:?}", names::service(s)),
            _ => format!("{:?} or \"{s}-rootfs-g<N>\"", names::workspace_pvc(s)),
        }
    }

    /// The current rootfs PVC and the workspace PVC: what a Pod may mount.
    fn volumes(&self) -> [String; 2] {
        [
            names::rootfs_pvc(&self.name, self.rootfs_generation),
            names::workspace_pvc(&self.name),
        ]
    }
}

/// The role of PVC `name` among Sandbox `sandbox`'s children, if it is one of their names.
fn pvc_role(sandbox: &str, name: &str) -> Option<ChildRole> {
    if name == names::workspace_pvc(sandbox) {
        return Some(ChildRole::Workspace);
    }
    names::rootfs_generation_of(sandbox, name)
        // Only the canonical spelling: `-g03` would be a second name for `-g3`.
        .filter(|g| names::rootfs_pvc(sandbox, *g) == name)
        .map(ChildRole::Rootfs)
}

/// What a policy may write: the namespaces the controller serves, Pods, PVCs, Secrets,
/// NetworkPolicies and Services; and the cluster network a NetworkPolicy is checked against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Boundary {
    /// The namespaces the controller serves.
    pub namespaces: BTreeSet<String>,
    /// The cluster network of the flags (`--cluster-cidr`, `--dns-*`, `--ingress-from`).
    pub network: ClusterNetwork,
}

impl Default for Boundary {
    fn default() -> Self {
        Self {
            namespaces: BTreeSet::new(),
            network: crate::model::network::default_cluster_network(),
        }
    }
}

impl Boundary {
    pub fn new<I, S>(namespaces: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            namespaces: namespaces.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// The same boundary over another cluster network.
    pub fn with_network(mut self, network: ClusterNetwork) -> Self {
        self.network = network;
        self
    }

    /// The first layer: namespace, kind, name, and for a write (`manifest` given) a manifest
    /// that is the object the call names; returns the parsed manifest. What a call for one
    /// Sandbox may write is [`Containment`]'s to say.
    pub fn check<'m>(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        manifest: Option<&'m str>,
    ) -> Result<Option<Json<'m>>, Refusal> {
        let what = describe(resource, namespace, name);
        if !resource.is_child() {
            return Err(Refusal::new(
                Rule::Kind,
                what,
                "kind",
                "a policy may write only Pods, PersistentVolumeClaims, Secrets, NetworkPolicies \
                 and Services",
            ));
        }
        if !self.namespaces.contains(namespace) {
            return Err(Refusal::new(
                Rule::Namespace,
                what,
                "namespace",
                format!(
                    "namespace {:?} is outside the controller's namespaces ({})",
                    clip(namespace, KEPT_PREFIX),
                    self.list()
                ),
            ));
        }
        if let Err(why) = dns1123_subdomain(name) {
            return Err(Refusal::new(
                Rule::Name,
                what,
                "name",
                format!("name {:?} {why}", clip(name, KEPT_PREFIX)),
            ));
        }
        let Some(manifest) = manifest else {
            return Ok(None);
        };
        let refuse =
            |field: &str, reason: String| Refusal::new(Rule::Manifest, what, field, reason);
        let object = Json::parse(manifest)
            .map_err(|e| refuse("manifest", format!("the manifest is not valid JSON: {e}")))?;
        let Some(fields) = object.as_object() else {
            return Err(refuse(
                "manifest",
                "the manifest is not a JSON object".into(),
            ));
        };
        let text = |key: &str| fields.get(key).and_then(Json::as_str);
        if text("kind") != Some(resource.kind())
            || text("apiVersion") != Some(resource.api_version())
        {
            return Err(refuse(
                "kind",
                format!(
                    "the manifest is a {} {}, not the {} {} this call writes",
                    clip(text("apiVersion").unwrap_or("<no apiVersion>"), 64),
                    clip(text("kind").unwrap_or("<no kind>"), 64),
                    resource.api_version(),
                    resource.kind(),
                ),
            ));
        }
        let metadata = object.get("metadata");
        let meta = |key: &str| metadata.and_then(|m| m.get(key)).and_then(Json::as_str);
        if meta("name") != Some(name) {
            return Err(refuse(
                "metadata.name",
                format!(
                    "the manifest's metadata.name is {:?}, not the call's {:?}",
                    clip(meta("name").unwrap_or_default(), KEPT_PREFIX),
                    clip(name, KEPT_PREFIX)
                ),
            ));
        }
        if meta("namespace") != Some(namespace) {
            return Err(refuse(
                "metadata.namespace",
                format!(
                    "the manifest's metadata.namespace is {:?}, not the call's {namespace:?}",
                    clip(meta("namespace").unwrap_or_default(), KEPT_PREFIX)
                ),
            ));
        }
        Ok(Some(object))
    }

    fn list(&self) -> String {
        if self.namespaces.is_empty() {
            return "none".to_string();
        }
        self.namespaces
            .iter()
            .map(|n| format!("{n:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Containment {
    /// A manifest's size, before anything parses it.
    pub fn check_manifest_size(
        &self,
        what: &dyn fmt::Display,
        manifest: &str,
    ) -> Result<(), Refusal> {
        if manifest.len() > self.max_manifest_bytes {
            return Err(Refusal::new(
                Rule::Budget,
                what,
                "manifest",
                format!(
                    "the manifest is {} bytes, more than the {} a manifest may have \
                     (--max-manifest-bytes)",
                    manifest.len(),
                    self.max_manifest_bytes
                ),
            ));
        }
        Ok(())
    }

    /// A delete's name: one of the Sandbox's child names. Whether the object is the
    /// Sandbox's is the cache's to say (see `runtime::ChildLookup`).
    pub fn check_delete(
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
            Resource::Secret => check_secret(&what, object),
            Resource::NetworkPolicy => network::check(self, scope, &what, object),
            Resource::Service => service::check(scope, &what, object),
            _ => Err(Refusal::new(Rule::Kind, what, "kind", "not a child kind")),
        }
    }

    fn check_pvc(
        &self,
        scope: &SandboxScope,
        role: ChildRole,
        what: &dyn fmt::Display,
        object: &Json<'_>,
    ) -> Result<(), Refusal> {
        let fields = Fields::new(Rule::Pvc, what);
        fields.object(object, "", &["apiVersion", "kind", "metadata", "spec"])?;
        let spec = fields.required(object, "", "spec")?;
        let spec_map = fields.object(
            spec,
            "spec",
            &[
                "accessModes",
                "volumeMode",
                "resources",
                "storageClassName",
                "dataSource",
            ],
        )?;
        if spec.get("volumeMode").and_then(Json::as_str) != Some("Block") {
            return Err(fields.refuse(
                "spec.volumeMode",
                "a sandbox's volume must be volumeMode: Block",
            ));
        }
        const ACCESS_MODES: [&str; 2] = ["ReadWriteOnce", "ReadWriteOncePod"];
        let modes = fields.array(
            fields.required(spec, "spec", "accessModes")?,
            "spec.accessModes",
        )?;
        if modes.is_empty() {
            return Err(fields.refuse("spec.accessModes", "no access mode"));
        }
        for (i, mode) in modes.iter().enumerate() {
            if !mode.as_str().is_some_and(|m| ACCESS_MODES.contains(&m)) {
                return Err(fields.refuse(
                    format!("spec.accessModes[{i}]"),
                    format!("{} is not one of {ACCESS_MODES:?}", short(mode)),
                ));
            }
        }
        let resources = fields.required(spec, "spec", "resources")?;
        fields.object(resources, "spec.resources", &["requests", "limits"])?;
        let requests = fields.required(resources, "spec.resources", "requests")?;
        fields.object(requests, "spec.resources.requests", &["storage"])?;
        fields.required(requests, "spec.resources.requests", "storage")?;
        for part in ["requests", "limits"] {
            let Some(amounts) = resources.get(part) else {
                continue;
            };
            let at = sub(&"spec.resources", part);
            fields.object(amounts, at, &["storage"])?;
            if let Some(size) = amounts.get("storage") {
                self.check_size(&fields, &sub(&at, "storage"), size)?;
            }
        }
        if let Some(class) = spec_map.get("storageClassName")
            && (class.as_str() != scope.storage_class.as_deref() || class.is_null())
        {
            return Err(fields.refuse(
                "spec.storageClassName",
                format!(
                    "{} is not the storage class the Sandbox's spec names ({})",
                    short(class),
                    scope
                        .storage_class
                        .as_deref()
                        .map_or("none".to_string(), |c| format!("{c:?}"))
                ),
            ));
        }
        if let Some(source) = spec_map.get("dataSource") {
            check_clone(scope, role, &fields, source)?;
        }
        Ok(())
    }

    fn check_size(
        &self,
        fields: &Fields<'_>,
        field: &dyn fmt::Display,
        size: &Json<'_>,
    ) -> Result<(), Refusal> {
        let text = size
            .as_str()
            .ok_or_else(|| fields.refuse(field, "a quantity must be a string"))?;
        let bytes = quantity_value(text)
            .map_err(|e| fields.refuse(field, format!("{:?} {e}", clip(text, 64))))?;
        if bytes > self.max_volume_bytes {
            return Err(fields.refuse(
                field,
                format!(
                    "{:?} is more than the largest volume allowed, {} (--max-volume-size)",
                    clip(text, 64),
                    quantity::format_bytes(self.max_volume_bytes)
                ),
            ));
        }
        Ok(())
    }
}

/// A PVC's `dataSource`: only when the Sandbox is a fork, only a PVC of the same role that the
/// source owns in the cluster (any rootfs generation of it that is not being deleted: while a
/// reset of the source is under way, its status may still name the older one).
fn check_clone(
    scope: &SandboxScope,
    role: ChildRole,
    fields: &Fields<'_>,
    source: &Json<'_>,
) -> Result<(), Refusal> {
    let field = "spec.dataSource";
    fields.object(source, field, &["apiGroup", "kind", "name"])?;
    if source
        .get("apiGroup")
        .is_some_and(|g| g.as_str() != Some(""))
        || source.get("kind").and_then(Json::as_str) != Some("PersistentVolumeClaim")
    {
        return Err(fields.refuse(
            field,
            "a volume may be cloned only from a PersistentVolumeClaim",
        ));
    }
    let Some(fork) = &scope.fork else {
        return Err(fields.refuse(
            field,
            format!(
                "Sandbox {:?} is not a fork (no spec.forkFrom whose source the call was handed): \
                 its volumes may not clone another's",
                scope.name
            ),
        ));
    };
    let same_role = |name: &str| {
        matches!(
            (role, pvc_role(&fork.name, name)),
            (ChildRole::Workspace, Some(ChildRole::Workspace))
                | (ChildRole::Rootfs(_), Some(ChildRole::Rootfs(_)))
        )
    };
    let name = source.get("name").and_then(Json::as_str);
    if name.is_some_and(|n| same_role(n) && fork.pvcs.iter().any(|p| p == n)) {
        return Ok(());
    }
    let allowed: Vec<String> = fork
        .pvcs
        .iter()
        .filter(|p| same_role(p))
        .map(|p| format!("{p:?}"))
        .collect();
    Err(fields.refuse(
        format!("{field}.name"),
        format!(
            "{} is not a PVC of this role that the fork source {:?} owns (its name, labels and \
             controller reference, as the controller's cache holds them; not being deleted): {}",
            source.get("name").map_or("nothing".to_string(), short),
            fork.name,
            if allowed.is_empty() {
                "it has none".to_string()
            } else {
                allowed.join(", ")
            }
        ),
    ))
}

fn check_secret(what: &dyn fmt::Display, object: &Json<'_>) -> Result<(), Refusal> {
    let fields = Fields::new(Rule::Secret, what);
    let map = fields.object(
        object,
        "",
        &[
            "apiVersion",
            "kind",
            "metadata",
            "type",
            "data",
            "stringData",
            "immutable",
        ],
    )?;
    if let Some(kind) = map.get("type")
        && kind.as_str() != Some("Opaque")
    {
        return Err(fields.refuse(
            "type",
            format!(
                "{} is not Opaque, the only type a sandbox's Secret may have",
                short(kind)
            ),
        ));
    }
    let mut total = 0usize;
    for part in ["data", "stringData"] {
        let Some(entries) = map.get(part) else {
            continue;
        };
        let entries = entries
            .as_object()
            .ok_or_else(|| fields.refuse(part, "not an object"))?;
        for (key, value) in entries {
            let value = value.as_str().ok_or_else(|| {
                fields.refuse(format!("{part}.{}", clip(key, 64)), "not a string")
            })?;
            total = total.saturating_add(key.len()).saturating_add(value.len());
        }
    }
    if total > MAX_SECRET_BYTES {
        return Err(fields.refuse(
            "data",
            format!("{total} bytes of data, more than the {MAX_SECRET_BYTES} a Secret may hold"),
        ));
    }
    Ok(())
}

impl Containment {
    /// A child's metadata: its name and namespace (checked already), S's labels (and on a Pod
    /// the labels and annotations the operator allows), and exactly one ownerReference, the
    /// controller reference to S.
    fn check_metadata(
        &self,
        scope: &SandboxScope,
        resource: Resource,
        what: &dyn fmt::Display,
        object: &Json<'_>,
    ) -> Result<(), Refusal> {
        let fields = Fields::new(Rule::Scope, what);
        let metadata = fields.required(object, "", "metadata")?;
        let pod = resource == Resource::Pod;
        // A NetworkPolicy and a Service carry one annotation of the host's, their spec's
        // digest; a Pod those the operator allows, and none unless it allows some.
        let digested = matches!(resource, Resource::NetworkPolicy | Resource::Service);
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

/// What makes a child S's: the host's labels with S's values, and its one owner reference.
fn check_belongs(
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

/// The field `key` of the field `parent` (`spec` and `volumes`: `spec.volumes`), written out
/// only when a refusal names it: an admitted manifest costs no text.
pub(super) fn sub<'a>(parent: &'a dyn fmt::Display, key: &'a str) -> Below<'a> {
    Below(parent, Step::Key(key))
}

/// The `i`th item of the list at `parent` (`spec.volumes[0]`), as [`sub`].
pub(super) fn nth(parent: &dyn fmt::Display, i: usize) -> Below<'_> {
    Below(parent, Step::Index(i))
}

#[derive(Clone, Copy)]
pub(super) struct Below<'a>(&'a dyn fmt::Display, Step<'a>);

#[derive(Clone, Copy)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

impl fmt::Display for Below<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Step::Key(key) => write!(f, "{}.{key}", self.0),
            Step::Index(i) => write!(f, "{}[{i}]", self.0),
        }
    }
}

/// Reads a manifest for one rule, refusing what it does not know. Fields are named by
/// anything that writes a path (`""` for the manifest itself), written out only on refusal.
struct Fields<'a> {
    rule: Rule,
    what: &'a dyn fmt::Display,
}

impl<'a> Fields<'a> {
    fn new(rule: Rule, what: &'a dyn fmt::Display) -> Self {
        Self { rule, what }
    }

    fn refuse(&self, field: impl fmt::Display, reason: impl Into<String>) -> Refusal {
        Refusal::new(self.rule, self.what, field, reason)
    }

    /// `value` as an object whose every key is in `allowed`.
    fn object<'v, 'j>(
        &self,
        value: &'v Json<'j>,
        field: impl fmt::Display,
        allowed: &[&str],
    ) -> Result<&'v Object<'j>, Refusal> {
        self.object_with(value, field, |key| allowed.contains(&key))
    }

    fn object_with<'v, 'j>(
        &self,
        value: &'v Json<'j>,
        field: impl fmt::Display,
        allowed: impl Fn(&str) -> bool,
    ) -> Result<&'v Object<'j>, Refusal> {
        self.object_with_reason(value, field, allowed, |_| {
            "a field the host does not know to be safe for a sandbox".to_string()
        })
    }

    /// [`Self::object_with`], saying why a key is refused with `why`.
    fn object_with_reason<'v, 'j>(
        &self,
        value: &'v Json<'j>,
        field: impl fmt::Display,
        allowed: impl Fn(&str) -> bool,
        why: impl Fn(&str) -> String,
    ) -> Result<&'v Object<'j>, Refusal> {
        let Some(map) = value.as_object() else {
            let shown = field.to_string();
            let shown = if shown.is_empty() {
                "the manifest".to_string()
            } else {
                shown
            };
            return Err(self.refuse(shown, "not an object"));
        };
        if let Some(key) = map.keys().find(|k| !allowed(k)) {
            let path = joined(&field, &clip(key, 128));
            return Err(self.refuse(path, why(key)));
        }
        Ok(map)
    }

    fn array<'v, 'j>(
        &self,
        value: &'v Json<'j>,
        field: impl fmt::Display,
    ) -> Result<&'v Vec<Json<'j>>, Refusal> {
        value
            .as_array()
            .ok_or_else(|| self.refuse(field, "not an array"))
    }

    /// `value.key`, where `value` is at `field` (`""` for the manifest itself).
    fn required<'v, 'j>(
        &self,
        value: &'v Json<'j>,
        field: impl fmt::Display,
        key: &str,
    ) -> Result<&'v Json<'j>, Refusal> {
        value
            .get(key)
            .ok_or_else(|| self.refuse(joined(&field, key), "required, and missing"))
    }
}

/// `field.key`, or `key` where `field` is the manifest itself (written as `""`).
fn joined(field: &dyn fmt::Display, key: &str) -> String {
    let field = field.to_string();
    if field.is_empty() {
        key.to_string()
    } else {
        format!("{field}.{key}")
    }
}

/// A guest's value in a message, clipped.
fn short(value: &Json<'_>) -> String {
    clip(&value.to_string(), 128)
}

/// Kubernetes' rule for object names (RFC 1123 subdomain): at most 253 characters, dot-separated
/// labels of lower-case alphanumerics and '-', each starting and ending alphanumeric.
fn dns1123_subdomain(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("is empty");
    }
    if name.len() > 253 {
        return Err("is longer than 253 characters");
    }
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ok = name.split('.').all(|label| {
        label.starts_with(alnum)
            && label.ends_with(alnum)
            && label.chars().all(|c| alnum(c) || c == '-')
    });
    if ok {
        Ok(())
    } else {
        Err("is not a DNS-1123 subdomain (lower-case letters, digits, '-' and '.')")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const NS: &str = "cubepod-workloads";

    fn boundary() -> Boundary {
        Boundary::new([NS])
    }

    fn secret(name: &str, namespace: &str) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {
                    "app.kubernetes.io/managed-by": "cubepod-controller",
                    "cubepod.io/sandbox": "dev-alice",
                },
            },
            "stringData": {"token": "t"},
        })
    }

    /// The admitted manifest read back as a value.
    fn check_secret(manifest: &Value) -> Result<Option<Value>, Refusal> {
        let text = manifest.to_string();
        boundary()
            .check(Resource::Secret, NS, "dev-alice-credentials", Some(&text))
            .map(|tree| tree.map(|t| serde_json::to_value(&t).expect("written back")))
    }

    fn refusal<T: fmt::Debug>(result: Result<T, Refusal>) -> String {
        match result {
            Err(reason) => reason.to_string(),
            Ok(v) => panic!("admitted: {v:?}"),
        }
    }

    #[test]
    fn admits_a_managed_child_and_returns_it() {
        let manifest = secret("dev-alice-credentials", NS);
        assert_eq!(check_secret(&manifest), Ok(Some(manifest)));
    }

    #[test]
    fn admits_a_delete_in_the_namespaces() {
        assert_eq!(
            boundary().check(Resource::Pod, NS, "dev-alice", None),
            Ok(None)
        );
    }

    #[test]
    fn refuses_a_namespace_outside_the_allowlist() {
        let reason = refusal(boundary().check(
            Resource::Secret,
            "kube-system",
            "dev-alice-credentials",
            Some(&secret("dev-alice-credentials", "kube-system").to_string()),
        ));
        assert!(reason.contains("\"kube-system\""), "{reason}");
        assert!(reason.contains("outside"), "{reason}");
        let reason = refusal(boundary().check(Resource::Pod, "default", "x", None));
        assert!(reason.contains("\"default\""), "{reason}");
    }

    #[test]
    fn refuses_resources_other_than_children() {
        for resource in [Resource::Sandbox, Resource::PodWarmPool, Resource::Event] {
            let reason = refusal(boundary().check(resource, NS, "x", None));
            assert!(reason.contains("only Pods"), "{reason}");
        }
    }

    #[test]
    fn refuses_a_manifest_of_another_kind() {
        let reason = refusal(boundary().check(
            Resource::Pod,
            NS,
            "dev-alice-credentials",
            Some(&secret("dev-alice-credentials", NS).to_string()),
        ));
        assert!(reason.contains("v1 Secret, not the v1 Pod"), "{reason}");
    }

    #[test]
    fn refuses_a_manifest_of_another_api_version() {
        let mut manifest = secret("dev-alice-credentials", NS);
        manifest["apiVersion"] = json!("v2");
        let reason = refusal(check_secret(&manifest));
        assert!(reason.contains("v2 Secret"), "{reason}");
    }

    #[test]
    fn refuses_a_manifest_that_is_not_json() {
        let reason = refusal(boundary().check(
            Resource::Secret,
            NS,
            "dev-alice-credentials",
            Some("{not json"),
        ));
        assert!(reason.contains("not valid JSON"), "{reason}");
    }

    #[test]
    fn refuses_a_manifest_that_is_not_an_object() {
        let reason = refusal(boundary().check(
            Resource::Secret,
            NS,
            "dev-alice-credentials",
            Some("[1, 2]"),
        ));
        assert!(reason.contains("not a JSON object"), "{reason}");
    }

    #[test]
    fn refuses_a_manifest_named_otherwise() {
        let reason = refusal(check_secret(&secret("someone-else", NS)));
        assert!(
            reason.contains("metadata.name is \"someone-else\""),
            "{reason}"
        );
    }

    #[test]
    fn refuses_a_manifest_in_another_namespace() {
        let reason = refusal(check_secret(&secret(
            "dev-alice-credentials",
            "kube-system",
        )));
        assert!(
            reason.contains("metadata.namespace is \"kube-system\""),
            "{reason}"
        );
        let mut manifest = secret("dev-alice-credentials", NS);
        manifest["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("namespace");
        let reason = refusal(check_secret(&manifest));
        assert!(reason.contains("metadata.namespace is \"\""), "{reason}");
    }

    #[test]
    fn refuses_names_that_are_not_dns_subdomains() {
        for name in ["", "Dev-Alice", "-a", "a-", "a..b", "a_b", &"a".repeat(254)] {
            let reason = refusal(boundary().check(Resource::Pod, NS, name, None));
            assert!(reason.contains("name"), "{name}: {reason}");
        }
        for name in ["a", "dev-alice", "a.b-c.d0", &"a".repeat(253)] {
            assert!(
                boundary().check(Resource::Pod, NS, name, None).is_ok(),
                "{name}"
            );
        }
    }

    #[test]
    fn an_empty_boundary_refuses_everything() {
        let reason = refusal(Boundary::default().check(Resource::Pod, NS, "a", None));
        assert!(reason.contains("(none)"), "{reason}");
    }
}
