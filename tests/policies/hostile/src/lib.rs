//! A hostile policy: well-formed, but it attacks the host on request, one case per
//! containment rule, so that the host's tests can check each rule against a real component.
//! Every case is picked by a name: the sandbox's (reconcile-sandbox, cleanup-sandbox), the
//! pool's (reconcile-pool) or a reap candidate's (reap), equal to the case's name or starting
//! with it and a `-`. Anything else behaves as the default policy. [`VICTIM`] is the other
//! sandbox a case attacks.
//!
//! Writes (`kube-client`, refused by the host in the import; the case returns the host's
//! answer as its error):
//!
//! - `privileged`: the default Pod with `privileged: true` (rule `pod`);
//! - `host-network`: the default Pod with `hostNetwork: true` (`pod`);
//! - `no-runtime-class`: the default Pod without `runtimeClassName` (`pod`);
//! - `foreign-workspace`: a Pod mounting the victim's workspace PVC (`pod`);
//! - `foreign-secret`: a Pod whose token comes from the victim's Secret (`pod`);
//! - `clone-without-fork`: a workspace PVC cloning the victim's, with no forkFrom (`pvc`);
//! - `oversized-volume`: a workspace PVC of 1 Pi (`pvc`);
//! - `foreign-service-account`: a Pod running as the controller's service account (`pod`);
//! - `sa-token-secret`: a service-account-token Secret (`secret`);
//! - `delete-unmanaged`: deletes a Secret the controller does not manage (`scope`);
//! - `squat`: creates the victim's workspace PVC, labelled as its own (`scope`);
//! - `extra-child`: a second Pod, `<name>-debug` (`scope`);
//! - `flood`: 50,000 `ensure-secret` calls (the calls budget: the call fails, reason `budget`);
//! - `huge-manifest`: a 4 MiB Pod manifest (`budget`, before it is parsed);
//! - `unbounded-manifest`: a 64 MiB Pod manifest, which the call's memory bound stops first;
//! - `duplicate-key`: a Pod whose spec says `hostNetwork` twice, `true` then `false` (`manifest`:
//!   a parser keeping the last would have seen only the harmless one);
//! - `hostpath`: a Pod mounting the node's `/` (`pod`);
//! - `node-name`: a Pod with `nodeName` (`pod`);
//! - `unknown-field`: a Pod with a container field no Kubernetes release has (`pod`);
//! - `foreign-network-policy`: its NetworkPolicy selecting the victim's Pod instead (`network`);
//! - `open-egress`: its NetworkPolicy allowing 0.0.0.0/0 with no except, wider than the spec
//!   (`network`);
//! - `foreign-service`: its Service selecting the victim's Pod (`service`; give the sandbox a
//!   `spec.service`);
//! - `pod-before-policy`: the default Pod with no NetworkPolicy applied before it (`network`);
//! - `priority-critical`: the default Pod with `priorityClassName: system-node-critical`, which
//!   preempts other tenants (`pod`, even where the field is allowed);
//! - `foreign-scheduler`: the default Pod with a scheduler of its own choosing (`pod`);
//! - `tolerate-all`: the default Pod tolerating every taint (a toleration without a key), with
//!   a control-plane nodeSelector (`pod`);
//! - `control-plane`: the default Pod selecting control-plane nodes (`pod`);
//! - `co-reside`: the default Pod with a pod affinity to the victim's Pod, on its node (`pod`);
//! - `century-grace`: the default Pod with a termination grace period of a century (`pod`);
//! - `huge-resources`: the default Pod requesting 4096 CPUs, 64 Ti of memory and 1 Pi of
//!   ephemeral storage (`pod`);
//! - `delete-network-policy`: deletes its NetworkPolicy while its Pod exists (`network`);
//! - `policy-swap-in-call`: applies its NetworkPolicy, deletes it, then creates its Pod in the
//!   same call (`network`, at the Pod: the NetworkPolicy is gone at that moment);
//! - `egress-metadata`: its NetworkPolicy also allowing the metadata address in its NAT64 form,
//!   `64:ff9b::a9fe:a9fe/128`, within `::/0` but carrying 169.254.169.254 (`network`);
//! - `egress-translated`: its NetworkPolicy's `::/0` peer excepting the IPv6 ranges alone
//!   (`fc00::/7`, `fe80::/10`), which reaches the NAT64, 6to4 and IPv4-compatible forms of the
//!   metadata address, the API server and the cluster's ranges (`network`);
//! - `delete-strangers`: deletes the Secret and workspace PVC of its own child names, which
//!   objects not its own hold (labelled as its, with no controller reference to it): the host
//!   sends neither delete and tells the Sandbox (`NameConflict`);
//! - `cleanup-policy-first` (cleanup-sandbox): deletes its NetworkPolicy before its Pod is
//!   gone (`network`);
//! - `pool-writes` (a pool's name) and `reap-writes` (a candidate's): kube-client calls from
//!   exports that get no cluster access (`scope`);
//! - `future-generation`: a rootfs PVC of the generation after the spec's (`scope`);
//! - `fork-status-lie` (give it a `forkFrom`): a workspace PVC cloning what the fork source's
//!   status names (`pvc` when the status, which a policy writes, names another sandbox's
//!   volume), then a rootfs PVC cloning the source's own current one (admitted);
//! - `cleanup-foreign` (cleanup-sandbox): deletes the victim's Pod (`scope`);
//! - `cleanup-huge-status` (cleanup-sandbox): the default cleanup, `done`, with the 5,000
//!   conditions of `huge-status` (the host's output budget: the finalizer stays).
//!
//! Writes a rollback must undo (admitted: each is a policy's choice, which only a rollout's
//! gates judge; the default logic otherwise):
//!
//! - `candidate-image`: its Pod runs [`CANDIDATE_IMAGE`], not the spec's image;
//! - `planted-token`: its Secret holds [`PLANTED_TOKEN`], not the host's fresh token;
//! - `pause-until`: its status pauses it ([`PAUSE_UNTIL_SECONDS`] ahead), so that no activity
//!   before then resumes it.
//!
//! Progress (no error, no refusal: only a rollout's progress gate and its shadow tell them):
//!
//! - `cleanup-stuck` (cleanup-sandbox): never `done`, deleting nothing: the sandbox stays
//!   Terminating, its Pod running;
//! - `reap-active` (a candidate's name): idle-pauses every running sandbox handed, however
//!   recent its activity;
//! - `never-ready`: its status as it was, no child made, looked at again in 5 s: the sandbox
//!   never gets a Pod and never becomes Ready.
//!
//! Outputs (no kube-client call; bounded by the host's reconcile core):
//!
//! - `claim-non-candidate`: claims a name not among the pool candidates;
//! - `claim-status-lie`: a status naming the victim as its `claimedMember`, which the
//!   controller never adopted for it;
//! - `huge-status`: 5,000 conditions, one with a 4 MiB message;
//! - `event-flood`: 5,000 Events with 1 KiB messages;
//! - `requeue-zero`: `requeue-after-seconds: 0`;
//! - `pool-hundreds` (a pool's name): creates 500 members;
//! - `pool-clone` (a pool's name): members that fork the victim, which is not a member;
//! - `pool-foreign-owner` (a pool's name): members owned by another object's uid, with a
//!   finalizer of their own;
//! - `pool-delete-strangers` (a pool's name): deletes the victim and names not members;
//! - `reap-strangers` (a candidate's name): decisions about sandboxes not handed, and about
//!   another namespace.
//!
//! Rates (within every rule of one call, but unbounded across calls; the host defers what is
//! past the Sandbox's rate and tells it once):
//!
//! - `churn`: the default, then its NetworkPolicy of [`CHURN_BYTES`] (one egress peer per
//!   public /32), changed at every pass (its `cubepod.io/spec-hash` is the time), every second
//!   (`--max-write-bytes-per-minute`);
//! - `event-churn`: the default, then a Warning Event with a new reason and message at every
//!   pass, every second (`--event-burst`).
//!
//! Memory (within every bound of one call, but many calls at their bounds at once would take
//! the controller past its container's limit; the host's budget of all calls in flight,
//! `--calls-memory-budget`, fails those it cannot cover, reason `memory`, and retries them):
//!
//! - `memory-fill`: fills [`MEMORY_FILL_BYTES`] of its memory (every page touched), then the
//!   default, with a condition whose message is [`MEMORY_FILL_MESSAGE_BYTES`] (within the
//!   status budget), requeued every second.
//!
//! Memory across objects (within every bound of a call and of a Sandbox's write rate, but what
//! the host keeps of the objects written grows with the sandboxes; the host charges what it
//! holds of them, per sandbox and in total, `--max-policy-object-bytes`, and past it defers the
//! writes and tells the Sandbox):
//!
//! - `inflate`: the default, then its NetworkPolicy again with a `cubepod.io/spec-hash` of
//!   [`INFLATE_HASH_BYTES`] (the default's digest and a tail), written once, and a status with
//!   [`INFLATE_CONDITIONS`] conditions of [`INFLATE_MESSAGE_BYTES`] each (within the status
//!   budget), requeued every 2 seconds; a write the host defers does not stop the pass.
//!
//! `scenarios/refusals.yaml` expects some of these refusals through `policy test` (which runs
//! the same import as the controller).
//!
//! Built by `host/tests/containment.rs` with
//! `cargo build -p cubepod-hostile-policy --target wasm32-wasip2 --profile guest-release`.

use cubepod_policy_sdk::bindings::{
    CleanupOutput, Condition, ConditionStatus, Event, EventType, KubeError, MemberCreate,
    ObservedChildren, PolicyInfo, PoolInput, PoolOutput, ReapAction, ReapCandidate, ReapDecision,
    ReconcileInput, ReconcileOutput, Sandbox, ServicePort, ServiceProtocol, ServiceSpec,
    ShutdownPolicy, Timestamp,
};
use cubepod_policy_sdk::client::KubeClient;
use cubepod_policy_sdk::manifest::{self, Owner, VolumeRole};
use cubepod_policy_sdk::names;
use serde_json::{Value, json};

pub const POLICY_NAME: &str = "cubepod-hostile";

/// The sandbox the cases attack.
pub const VICTIM: &str = "victim";

/// Writes made past this many calls: far past any budget.
pub const FLOOD_CALLS: u32 = 50_000;

/// Bytes of the `huge-manifest` case's Pod.
pub const HUGE_MANIFEST_BYTES: usize = 4 << 20;

/// Bytes of the `unbounded-manifest` case's Pod: more than a call's memory bound holds.
pub const UNBOUNDED_MANIFEST_BYTES: usize = 64 << 20;

/// Bytes the `memory-fill` case fills: near the default 32 MiB bound of a call, with room
/// for the code, the input and the output.
pub const MEMORY_FILL_BYTES: usize = 26 << 20;

/// Bytes of the message of the `memory-fill` case's condition.
pub const MEMORY_FILL_MESSAGE_BYTES: usize = 16 << 10;

/// Bytes of the `inflate` case's spec-hash annotation: within `--max-manifest-bytes` and its
/// Sandbox's write rate, far more than the host should keep of one child.
pub const INFLATE_HASH_BYTES: usize = 384 << 10;

/// Conditions of the `inflate` case's status, and the bytes of each one's message: 40 KiB,
/// within the default status budget (64 KiB).
pub const INFLATE_CONDITIONS: usize = 10;
pub const INFLATE_MESSAGE_BYTES: usize = 4 << 10;

/// The label and taint of control-plane nodes.
pub const CONTROL_PLANE: &str = "node-role.kubernetes.io/control-plane";
/// About the bytes of the `churn` case's NetworkPolicy.
pub const CHURN_BYTES: usize = 500 << 10;

/// The image the `candidate-image` case's Pod runs.
pub const CANDIDATE_IMAGE: &str = "docker.io/hostile/candidate:1";

/// The token the `planted-token` case's Secret holds.
pub const PLANTED_TOKEN: &str = "hostile-planted-token";

/// How far ahead of now the `pause-until` case dates its idle pause: ten years.
pub const PAUSE_UNTIL_SECONDS: i64 = 10 * 365 * 24 * 3600;

/// An unmanaged Secret the `delete-unmanaged` case deletes.
pub const UNMANAGED_SECRET: &str = "registry-credentials";

pub fn describe() -> PolicyInfo {
    PolicyInfo {
        name: POLICY_NAME.to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        contract_version: cubepod_policy_sdk::CONTRACT_VERSION.to_string(),
    }
}

/// Every case, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    Privileged,
    HostNetwork,
    NoRuntimeClass,
    ForeignWorkspace,
    ForeignSecret,
    CloneWithoutFork,
    OversizedVolume,
    ForeignServiceAccount,
    SaTokenSecret,
    DeleteUnmanaged,
    Squat,
    ExtraChild,
    Flood,
    HugeManifest,
    UnboundedManifest,
    DuplicateKey,
    Hostpath,
    NodeName,
    UnknownField,
    ForeignNetworkPolicy,
    OpenEgress,
    ForeignService,
    PodBeforePolicy,
    PriorityCritical,
    ForeignScheduler,
    TolerateAll,
    ControlPlane,
    CoReside,
    CenturyGrace,
    HugeResources,
    PoolWrites,
    ReapWrites,
    CleanupForeign,
    CleanupHugeStatus,
    ClaimNonCandidate,
    ClaimStatusLie,
    HugeStatus,
    EventFlood,
    RequeueZero,
    PoolHundreds,
    PoolClone,
    PoolForeignOwner,
    PoolDeleteStrangers,
    ReapStrangers,
    ReapEarly,
    FutureGeneration,
    ForkStatusLie,
    DeleteNetworkPolicy,
    PolicySwapInCall,
    EgressMetadata,
    EgressTranslated,
    DeleteStrangers,
    CleanupPolicyFirst,
    Churn,
    EventChurn,
    MemoryFill,
    Inflate,
    CandidateImage,
    PlantedToken,
    PauseUntil,
    CleanupStuck,
    ReapActive,
    NeverReady,
}

impl Case {
    pub const ALL: &[(&'static str, Case)] = &[
        ("privileged", Case::Privileged),
        ("host-network", Case::HostNetwork),
        ("no-runtime-class", Case::NoRuntimeClass),
        ("foreign-workspace", Case::ForeignWorkspace),
        ("foreign-secret", Case::ForeignSecret),
        ("clone-without-fork", Case::CloneWithoutFork),
        ("oversized-volume", Case::OversizedVolume),
        ("foreign-service-account", Case::ForeignServiceAccount),
        ("sa-token-secret", Case::SaTokenSecret),
        ("delete-unmanaged", Case::DeleteUnmanaged),
        ("squat", Case::Squat),
        ("extra-child", Case::ExtraChild),
        ("flood", Case::Flood),
        ("huge-manifest", Case::HugeManifest),
        ("unbounded-manifest", Case::UnboundedManifest),
        ("duplicate-key", Case::DuplicateKey),
        ("hostpath", Case::Hostpath),
        ("node-name", Case::NodeName),
        ("unknown-field", Case::UnknownField),
        ("foreign-network-policy", Case::ForeignNetworkPolicy),
        ("open-egress", Case::OpenEgress),
        ("foreign-service", Case::ForeignService),
        ("pod-before-policy", Case::PodBeforePolicy),
        ("priority-critical", Case::PriorityCritical),
        ("foreign-scheduler", Case::ForeignScheduler),
        ("tolerate-all", Case::TolerateAll),
        ("control-plane", Case::ControlPlane),
        ("co-reside", Case::CoReside),
        ("century-grace", Case::CenturyGrace),
        ("huge-resources", Case::HugeResources),
        ("pool-writes", Case::PoolWrites),
        ("reap-writes", Case::ReapWrites),
        ("cleanup-foreign", Case::CleanupForeign),
        ("cleanup-huge-status", Case::CleanupHugeStatus),
        ("claim-non-candidate", Case::ClaimNonCandidate),
        ("claim-status-lie", Case::ClaimStatusLie),
        ("huge-status", Case::HugeStatus),
        ("event-flood", Case::EventFlood),
        ("requeue-zero", Case::RequeueZero),
        ("pool-hundreds", Case::PoolHundreds),
        ("pool-clone", Case::PoolClone),
        ("pool-foreign-owner", Case::PoolForeignOwner),
        ("pool-delete-strangers", Case::PoolDeleteStrangers),
        ("reap-strangers", Case::ReapStrangers),
        ("reap-early", Case::ReapEarly),
        ("future-generation", Case::FutureGeneration),
        ("fork-status-lie", Case::ForkStatusLie),
        ("delete-network-policy", Case::DeleteNetworkPolicy),
        ("policy-swap-in-call", Case::PolicySwapInCall),
        ("egress-metadata", Case::EgressMetadata),
        ("egress-translated", Case::EgressTranslated),
        ("delete-strangers", Case::DeleteStrangers),
        ("cleanup-policy-first", Case::CleanupPolicyFirst),
        ("churn", Case::Churn),
        ("event-churn", Case::EventChurn),
        ("memory-fill", Case::MemoryFill),
        ("inflate", Case::Inflate),
        ("candidate-image", Case::CandidateImage),
        ("planted-token", Case::PlantedToken),
        ("pause-until", Case::PauseUntil),
        ("cleanup-stuck", Case::CleanupStuck),
        ("reap-active", Case::ReapActive),
        ("never-ready", Case::NeverReady),
    ];

    /// The case a name asks for: the case's name, or it and a `-` and anything.
    pub fn of(name: &str) -> Option<Case> {
        Self::ALL
            .iter()
            .find(|(case, _)| {
                name == *case
                    || name
                        .strip_prefix(case)
                        .is_some_and(|rest| rest.starts_with('-'))
            })
            .map(|(_, case)| *case)
    }
}

/// The default policy's manifests for `sandbox`, as JSON to edit.
struct Manifests<'a> {
    sandbox: &'a Sandbox,
}

impl<'a> Manifests<'a> {
    fn owner(&self) -> Owner<'a> {
        Owner {
            kind: "Sandbox",
            name: &self.sandbox.name,
            uid: &self.sandbox.uid,
        }
    }

    fn pod(&self) -> Value {
        let s = &self.sandbox;
        let text = manifest::pod(
            &s.namespace,
            self.owner(),
            &s.spec,
            &names::rootfs_pvc(&s.name, s.spec.rootfs_generation),
            &names::workspace_pvc(&s.name),
            &names::secret(&s.name),
        );
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    fn workspace(&self) -> Value {
        self.workspace_cloning(None)
    }

    fn workspace_cloning(&self, source: Option<&str>) -> Value {
        let s = &self.sandbox;
        let text = manifest::pvc(
            &names::workspace_pvc(&s.name),
            &s.namespace,
            self.owner(),
            VolumeRole::Workspace,
            None,
            &s.spec.workspace_size,
            s.spec.storage_class.as_deref(),
            source,
        );
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// The rootfs PVC of `generation`, a clone of `source` if given.
    fn rootfs(&self, generation: u32, source: Option<&str>) -> Value {
        let s = &self.sandbox;
        let text = manifest::pvc(
            &names::rootfs_pvc(&s.name, generation),
            &s.namespace,
            self.owner(),
            VolumeRole::Rootfs,
            Some(generation),
            &s.spec.rootfs_size,
            s.spec.storage_class.as_deref(),
            source,
        );
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    fn network_policy(&self, input: &ReconcileInput) -> Value {
        let s = &self.sandbox;
        let rendered =
            manifest::network_policy(&s.namespace, self.owner(), &s.spec, &input.cluster_network);
        serde_json::from_str(&rendered.manifest).unwrap_or(Value::Null)
    }

    /// The default Service, for a sandbox with `spec.service` (or one port if it has none).
    fn service(&self) -> Value {
        let s = &self.sandbox;
        let spec = s.spec.service.clone().unwrap_or(ServiceSpec {
            ports: vec![ServicePort {
                name: "http".into(),
                port: 8080,
                protocol: ServiceProtocol::Tcp,
            }],
        });
        let rendered = manifest::service(&s.namespace, self.owner(), &spec);
        serde_json::from_str(&rendered.manifest).unwrap_or(Value::Null)
    }

    fn secret(&self) -> Value {
        let s = &self.sandbox;
        let text = manifest::secret(&names::secret(&s.name), &s.namespace, self.owner(), "t");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }
}

/// `reconcile-sandbox`: the default logic, or the case the sandbox's name asks for.
pub fn reconcile(
    client: &mut impl KubeClient,
    input: &ReconcileInput,
) -> Result<ReconcileOutput, KubeError> {
    let sandbox = &input.sandbox;
    let Some(case) = Case::of(&sandbox.name) else {
        return cubepod_policy_sdk::reconcile::reconcile(client, input);
    };
    let ns = sandbox.namespace.as_str();
    let own = sandbox.name.as_str();
    let m = Manifests { sandbox };
    if let Some(edit) = pod_edit(case) {
        let mut pod = m.pod();
        edit(&mut pod);
        client.ensure_pod(ns, own, &pod.to_string())?;
        return Err(KubeError::Other(format!(
            "hostile policy: the host let case {case:?} through"
        )));
    }
    let written: Result<(), KubeError> = match case {
        Case::ExtraChild => {
            let debug = format!("{own}-debug");
            let mut pod = m.pod();
            pod["metadata"]["name"] = json!(debug);
            client.ensure_pod(ns, &debug, &pod.to_string()).map(drop)
        }
        Case::DuplicateKey => {
            let mut pod = m.pod();
            pod["spec"]["hostNetwork"] = json!(false);
            let text = pod.to_string().replacen(
                "\"hostNetwork\":false",
                "\"hostNetwork\":true,\"hostNetwork\":false",
                1,
            );
            client.ensure_pod(ns, own, &text).map(drop)
        }
        Case::HugeManifest | Case::UnboundedManifest => {
            let bytes = if case == Case::HugeManifest {
                HUGE_MANIFEST_BYTES
            } else {
                UNBOUNDED_MANIFEST_BYTES
            };
            let mut pod = m.pod();
            pod["spec"]["containers"][0]["env"][0]["value"] = json!("x".repeat(bytes));
            client.ensure_pod(ns, own, &pod.to_string()).map(drop)
        }
        Case::CloneWithoutFork => {
            let mut pvc = m.workspace();
            pvc["spec"]["dataSource"] =
                json!({"kind": "PersistentVolumeClaim", "name": names::workspace_pvc(VICTIM)});
            client
                .ensure_pvc(ns, &names::workspace_pvc(own), &pvc.to_string())
                .map(drop)
        }
        Case::OversizedVolume => {
            let mut pvc = m.workspace();
            pvc["spec"]["resources"]["requests"]["storage"] = json!("1Pi");
            client.ensure_pvc(ns, &names::workspace_pvc(own), &pvc.to_string())
        }
        Case::FutureGeneration => {
            let generation = sandbox.spec.rootfs_generation.saturating_add(1);
            let pvc = m.rootfs(generation, None);
            client.ensure_pvc(ns, &names::rootfs_pvc(own, generation), &pvc.to_string())
        }
        Case::ForkStatusLie => {
            let source = input.fork_source.as_ref();
            // What the source's status names: a policy wrote it.
            let said = source.and_then(|s| s.status.workspace_pvc.as_deref());
            let pvc = m.workspace_cloning(Some(said.unwrap_or_default()));
            let lied = client.ensure_pvc(ns, &names::workspace_pvc(own), &pvc.to_string());
            // What the source owns, by the controller's name for it.
            let truth = source.map(|s| names::rootfs_pvc(&s.name, s.spec.rootfs_generation));
            let generation = sandbox.spec.rootfs_generation;
            let pvc = m.rootfs(generation, Some(truth.as_deref().unwrap_or_default()));
            client.ensure_pvc(ns, &names::rootfs_pvc(own, generation), &pvc.to_string())?;
            lied
        }
        Case::Squat => {
            let name = names::workspace_pvc(VICTIM);
            let mut pvc = m.workspace();
            pvc["metadata"]["name"] = json!(name);
            client.ensure_pvc(ns, &name, &pvc.to_string())
        }
        Case::SaTokenSecret => {
            let mut secret = m.secret();
            secret["type"] = json!("kubernetes.io/service-account-token");
            client.ensure_secret(ns, &names::secret(own), &secret.to_string())
        }
        Case::ForeignNetworkPolicy => {
            let mut policy = m.network_policy(input);
            policy["spec"]["podSelector"]["matchLabels"][names::SANDBOX_LABEL] = json!(VICTIM);
            client.apply_network_policy(ns, &names::network_policy(own), &policy.to_string())
        }
        Case::OpenEgress => {
            let mut policy = m.network_policy(input);
            policy["spec"]["egress"][0]["to"] = json!([{"ipBlock": {"cidr": "0.0.0.0/0"}}]);
            client.apply_network_policy(ns, &names::network_policy(own), &policy.to_string())
        }
        Case::ForeignService => {
            let mut service = m.service();
            service["spec"]["selector"][names::SANDBOX_LABEL] = json!(VICTIM);
            client.apply_service(ns, &names::service(own), &service.to_string())
        }
        Case::PodBeforePolicy => client.ensure_pod(ns, own, &m.pod().to_string()).map(drop),
        Case::DeleteNetworkPolicy => client.delete_network_policy(ns, &names::network_policy(own)),
        Case::PolicySwapInCall => {
            let policy = names::network_policy(own);
            client.apply_network_policy(ns, &policy, &m.network_policy(input).to_string())?;
            client.delete_network_policy(ns, &policy)?;
            client.ensure_pod(ns, own, &m.pod().to_string()).map(drop)
        }
        Case::EgressMetadata => {
            let mut policy = m.network_policy(input);
            if let Some(peers) = policy["spec"]["egress"][0]["to"].as_array_mut() {
                peers.push(json!({"ipBlock": {"cidr": "64:ff9b::a9fe:a9fe/128"}}));
            }
            client.apply_network_policy(ns, &names::network_policy(own), &policy.to_string())
        }
        Case::EgressTranslated => {
            let mut policy = m.network_policy(input);
            if let Some(peers) = policy["spec"]["egress"][0]["to"].as_array_mut() {
                for peer in peers.iter_mut() {
                    if peer["ipBlock"]["cidr"] == "::/0" {
                        peer["ipBlock"]["except"] = json!(["fc00::/7", "fe80::/10"]);
                    }
                }
            }
            client.apply_network_policy(ns, &names::network_policy(own), &policy.to_string())
        }
        Case::DeleteStrangers => client
            .delete_secret(ns, &names::secret(own))
            .and_then(|()| client.delete_pvc(ns, &names::workspace_pvc(own))),
        Case::DeleteUnmanaged => client.delete_secret(ns, UNMANAGED_SECRET),
        Case::Flood => {
            let secret = m.secret().to_string();
            let mut last = Ok(());
            for _ in 0..FLOOD_CALLS {
                last = client.ensure_secret(ns, &names::secret(own), &secret);
            }
            last
        }
        Case::ClaimNonCandidate => {
            let mut out = unchanged(input);
            out.claim = Some("not-a-candidate".to_string());
            return Ok(out);
        }
        Case::ClaimStatusLie => {
            let mut out = unchanged(input);
            out.status.claimed_member = Some(VICTIM.to_string());
            return Ok(out);
        }
        Case::HugeStatus => {
            let mut out = unchanged(input);
            out.status.conditions = huge_conditions(input.now);
            return Ok(out);
        }
        Case::EventFlood => {
            let mut out = unchanged(input);
            out.events = (0..5_000)
                .map(|i| Event {
                    kind: EventType::Warning,
                    reason: format!("Hostile{i}"),
                    message: "e".repeat(1024),
                })
                .collect();
            return Ok(out);
        }
        Case::RequeueZero => {
            let mut out = cubepod_policy_sdk::reconcile::reconcile(client, input)?;
            out.requeue_after_seconds = Some(0);
            return Ok(out);
        }
        Case::Churn => {
            let mut out = cubepod_policy_sdk::reconcile::reconcile(client, input)?;
            let mut policy = m.network_policy(input);
            policy["metadata"]["annotations"][names::SPEC_HASH_ANNOTATION] =
                json!(format!("churn-{}", input.now));
            if let Some(egress) = policy["spec"]["egress"].as_array_mut() {
                egress.push(json!({"to": "PEERS"}));
            }
            // 8.0.0.0/8 is public: within `egress: Internet`; ~37 bytes a peer, written as
            // text (a tree of them takes the guest longer than its deadline in a debug host).
            let mut peers = String::with_capacity(CHURN_BYTES + 64);
            peers.push('[');
            for i in 0..CHURN_BYTES / 37 {
                if i > 0 {
                    peers.push(',');
                }
                peers.push_str(&format!(
                    "{{\"ipBlock\":{{\"cidr\":\"8.{}.{}.{}/32\"}}}}",
                    i >> 16 & 255,
                    i >> 8 & 255,
                    i & 255
                ));
            }
            peers.push(']');
            let text = policy.to_string().replacen("\"PEERS\"", &peers, 1);
            client.apply_network_policy(ns, &names::network_policy(own), &text)?;
            out.requeue_after_seconds = Some(1);
            return Ok(out);
        }
        Case::EventChurn => {
            let mut out = cubepod_policy_sdk::reconcile::reconcile(client, input)?;
            out.events.push(Event {
                kind: EventType::Warning,
                reason: format!("Churn{}", input.now),
                message: format!("pass at {}", input.now),
            });
            out.requeue_after_seconds = Some(1);
            return Ok(out);
        }
        Case::MemoryFill => {
            let mut fill = vec![0u8; MEMORY_FILL_BYTES];
            // One byte a page: each page is made resident.
            for page in fill.chunks_mut(4096) {
                page[0] = 1;
            }
            std::hint::black_box(&fill);
            drop(fill);
            let mut out = cubepod_policy_sdk::reconcile::reconcile(client, input)?;
            const KIND: &str = "MemoryFilled";
            // The same condition at every pass: the status is written once.
            let since = input
                .sandbox
                .status
                .conditions
                .iter()
                .find(|c| c.kind == KIND)
                .map_or(input.now, |c| c.last_transition_time);
            out.status.conditions.retain(|c| c.kind != KIND);
            out.status.conditions.push(Condition {
                kind: KIND.to_string(),
                status: ConditionStatus::True,
                reason: "Filled".to_string(),
                message: "m".repeat(MEMORY_FILL_MESSAGE_BYTES),
                last_transition_time: since,
            });
            out.requeue_after_seconds = Some(1);
            return Ok(out);
        }
        Case::Inflate => return inflate(client, input, &m),
        Case::CandidateImage => {
            let mut input = input.clone();
            input.sandbox.spec.image = CANDIDATE_IMAGE.to_string();
            return cubepod_policy_sdk::reconcile::reconcile(client, &input);
        }
        Case::PlantedToken => {
            let mut input = input.clone();
            input.fresh_token = PLANTED_TOKEN.to_string();
            return cubepod_policy_sdk::reconcile::reconcile(client, &input);
        }
        Case::PauseUntil => {
            let mut out = cubepod_policy_sdk::reconcile::reconcile(client, input)?;
            out.status.idle_paused_at = Some(
                out.status
                    .idle_paused_at
                    .unwrap_or(input.now.saturating_add(PAUSE_UNTIL_SECONDS)),
            );
            return Ok(out);
        }
        Case::NeverReady => {
            let mut out = unchanged(input);
            out.requeue_after_seconds = Some(5);
            return Ok(out);
        }
        // Cases of other exports: here, the default.
        _ => return cubepod_policy_sdk::reconcile::reconcile(client, input),
    };
    written?;
    Err(KubeError::Other(format!(
        "hostile policy: the host let case {case:?} through"
    )))
}

/// The `inflate` case: the default decisions, over its NetworkPolicy seen as the default's
/// (its digest is the inflated one's prefix), then the inflated NetworkPolicy when it is not
/// there yet, and a status of many long conditions.
fn inflate(
    client: &mut impl KubeClient,
    input: &ReconcileInput,
    m: &Manifests<'_>,
) -> Result<ReconcileOutput, KubeError> {
    let sandbox = &input.sandbox;
    let mut policy = m.network_policy(input);
    let digest = policy["metadata"]["annotations"][names::SPEC_HASH_ANNOTATION]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut inflated = format!("{digest}-");
    while inflated.len() < INFLATE_HASH_BYTES {
        inflated.push_str("inflated");
    }
    let mut seen = input.clone();
    let written = seen
        .observed
        .network_policy
        .as_ref()
        .is_some_and(|o| o.spec_hash.as_deref() == Some(inflated.as_str()));
    if written && let Some(observed) = seen.observed.network_policy.as_mut() {
        observed.spec_hash = Some(digest);
    }
    let mut out = cubepod_policy_sdk::reconcile::reconcile(client, &seen)?;
    if !written {
        policy["metadata"]["annotations"][names::SPEC_HASH_ANNOTATION] = json!(inflated);
        // A refusal or deferral is not the end of the pass: the status is written all the same.
        let _ = client.apply_network_policy(
            &sandbox.namespace,
            &names::network_policy(&sandbox.name),
            &policy.to_string(),
        );
    }
    for i in 0..INFLATE_CONDITIONS {
        let kind = format!("Inflated{i}");
        let since = sandbox
            .status
            .conditions
            .iter()
            .find(|c| c.kind == kind)
            .map_or(input.now, |c| c.last_transition_time);
        out.status.conditions.retain(|c| c.kind != kind);
        out.status.conditions.push(Condition {
            kind,
            status: ConditionStatus::True,
            reason: "Inflated".to_string(),
            message: "i".repeat(INFLATE_MESSAGE_BYTES),
            last_transition_time: since,
        });
    }
    out.requeue_after_seconds = Some(2);
    Ok(out)
}

/// The edit of the default Pod a Pod case makes.
fn pod_edit(case: Case) -> Option<fn(&mut Value)> {
    let edit: fn(&mut Value) = match case {
        Case::Privileged => |p| {
            p["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
        },
        Case::HostNetwork => |p| p["spec"]["hostNetwork"] = json!(true),
        Case::NoRuntimeClass => |p| {
            if let Some(spec) = p["spec"].as_object_mut() {
                spec.remove("runtimeClassName");
            }
        },
        Case::ForeignWorkspace => |p| {
            p["spec"]["volumes"][1]["persistentVolumeClaim"]["claimName"] =
                json!(names::workspace_pvc(VICTIM));
        },
        Case::ForeignSecret => |p| {
            p["spec"]["containers"][0]["env"][3]["valueFrom"]["secretKeyRef"]["name"] =
                json!(names::secret(VICTIM));
        },
        Case::ForeignServiceAccount => |p| {
            p["spec"]["serviceAccountName"] = json!("cubepod-controller");
        },
        Case::Hostpath => |p| {
            p["spec"]["volumes"][0] = json!({"name": "rootfs", "hostPath": {"path": "/"}});
        },
        Case::NodeName => |p| p["spec"]["nodeName"] = json!("node-1"),
        Case::UnknownField => |p| {
            p["spec"]["containers"][0]["hostDevices"] = json!(["/dev/kvm"]);
        },
        Case::PriorityCritical => |p| {
            p["spec"]["priorityClassName"] = json!("system-node-critical");
        },
        Case::ForeignScheduler => |p| p["spec"]["schedulerName"] = json!("hostile-scheduler"),
        Case::TolerateAll => |p| {
            p["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
            p["spec"]["nodeSelector"] = json!({CONTROL_PLANE: ""});
        },
        Case::ControlPlane => |p| p["spec"]["nodeSelector"] = json!({CONTROL_PLANE: ""}),
        Case::CoReside => |p| {
            p["spec"]["affinity"] = json!({"podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": {"matchLabels": {names::SANDBOX_LABEL: VICTIM}},
                    "topologyKey": "kubernetes.io/hostname",
                }],
            }});
        },
        Case::CenturyGrace => |p| {
            p["spec"]["terminationGracePeriodSeconds"] = json!(100u64 * 365 * 24 * 3600);
        },
        Case::HugeResources => |p| {
            // Requests only: a map's keys go out sorted, and this names cpu first.
            p["spec"]["containers"][0]["resources"] = json!({"requests": {
                "cpu": "4096", "ephemeral-storage": "1Pi", "memory": "64Ti",
            }});
        },
        _ => return None,
    };
    Some(edit)
}

/// The sandbox's status as it was: an output that changes nothing.
/// 5,000 conditions, the first with a 4 MiB message.
fn huge_conditions(now: Timestamp) -> Vec<Condition> {
    (0..5_000)
        .map(|i| Condition {
            kind: format!("Hostile{i}"),
            status: ConditionStatus::True,
            reason: "Hostile".to_string(),
            message: if i == 0 {
                "m".repeat(4 << 20)
            } else {
                format!("condition {i}")
            },
            last_transition_time: now,
        })
        .collect()
}

fn unchanged(input: &ReconcileInput) -> ReconcileOutput {
    ReconcileOutput {
        status: input.sandbox.status.clone(),
        requeue_after_seconds: None,
        claim: None,
        events: Vec::new(),
    }
}

/// `cleanup-sandbox`: the default, a delete of the victim's Pod, or of its own NetworkPolicy
/// first.
pub fn cleanup(
    client: &mut impl KubeClient,
    now: Timestamp,
    sandbox: &Sandbox,
    observed: &ObservedChildren,
) -> Result<CleanupOutput, KubeError> {
    if Case::of(&sandbox.name) == Some(Case::CleanupForeign) {
        client.delete_pod(&sandbox.namespace, VICTIM)?;
        return Err(KubeError::Other(
            "hostile policy: the host let a cleanup delete another sandbox's Pod".to_string(),
        ));
    }
    if Case::of(&sandbox.name) == Some(Case::CleanupPolicyFirst) {
        client.delete_network_policy(&sandbox.namespace, &names::network_policy(&sandbox.name))?;
        return Err(KubeError::Other(
            "hostile policy: the host let a cleanup delete the NetworkPolicy before the Pod"
                .to_string(),
        ));
    }
    if Case::of(&sandbox.name) == Some(Case::CleanupStuck) {
        return Ok(CleanupOutput {
            done: false,
            status: sandbox.status.clone(),
        });
    }
    let mut out = cubepod_policy_sdk::cleanup::cleanup(client, now, sandbox, observed)?;
    if Case::of(&sandbox.name) == Some(Case::CleanupHugeStatus) {
        out.status.conditions = huge_conditions(now);
    }
    Ok(out)
}

/// `reconcile-pool`: the default, or a case of the pool's name.
pub fn reconcile_pool(
    client: &mut impl KubeClient,
    input: &PoolInput,
) -> Result<PoolOutput, KubeError> {
    let pool = &input.pool;
    let mut out = cubepod_policy_sdk::pool::reconcile_pool(input);
    let owner = Owner {
        kind: "PodWarmPool",
        name: &pool.name,
        uid: &pool.uid,
    };
    let member = |name: &str, edit: &dyn Fn(&mut Value)| {
        let text = manifest::pool_member(name, &pool.namespace, owner, &pool.spec.template);
        let mut object: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        edit(&mut object);
        MemberCreate {
            name: name.to_string(),
            manifest: object.to_string(),
        }
    };
    match Case::of(&pool.name) {
        Some(Case::PoolWrites) => {
            let name = format!("{}-credentials", pool.name);
            let secret = json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "namespace": pool.namespace},
                "type": "Opaque",
            });
            client.ensure_secret(&pool.namespace, &name, &secret.to_string())?;
            return Err(KubeError::Other(
                "hostile policy: reconcile-pool wrote to the cluster".to_string(),
            ));
        }
        Some(Case::PoolHundreds) => {
            out.create = (0..500)
                .map(|i| member(&names::pool_member(&pool.name, i), &|_| {}))
                .collect();
        }
        Some(Case::PoolClone) => {
            out.create = vec![member(&names::pool_member(&pool.name, 0), &|m| {
                m["spec"]["forkFrom"] = json!(VICTIM);
            })];
        }
        Some(Case::PoolForeignOwner) => {
            out.create = vec![member(&names::pool_member(&pool.name, 0), &|m| {
                m["metadata"]["ownerReferences"][0]["uid"] = json!("uid-of-something-else");
                m["metadata"]["finalizers"] = json!(["hostile.example/keep"]);
            })];
        }
        Some(Case::PoolDeleteStrangers) => {
            out.delete = vec![VICTIM.to_string(), "not-a-member".to_string()];
        }
        _ => {}
    }
    Ok(out)
}

/// `reap`: the default, or a case of a candidate's name.
pub fn reap(
    client: &mut impl KubeClient,
    now: Timestamp,
    namespace: &str,
    sandboxes: &[ReapCandidate],
) -> Vec<ReapDecision> {
    let case = sandboxes.iter().find_map(|c| Case::of(&c.name));
    match case {
        Some(Case::ReapWrites) => {
            // The answer is dropped: reap returns decisions only; the host records the call.
            let _ = client.delete_pod(namespace, VICTIM);
            Vec::new()
        }
        Some(Case::ReapStrangers) => [
            (namespace, VICTIM),
            (namespace, "not-handed"),
            ("kube-system", "coredns"),
        ]
        .into_iter()
        .map(|(namespace, name)| ReapDecision {
            namespace: namespace.to_string(),
            name: name.to_string(),
            action: ReapAction::IdlePause,
            idle_seconds: 1,
            reason: "hostile".to_string(),
        })
        .collect(),
        Some(Case::ReapActive) => sandboxes
            .iter()
            .filter(|c| c.running)
            .map(|c| ReapDecision {
                namespace: namespace.to_string(),
                name: c.name.clone(),
                action: ReapAction::IdlePause,
                idle_seconds: 0,
                reason: "hostile: paused while active".to_string(),
            })
            .collect(),
        // Each handed sandbox shut down or paused in a way its own record does not allow.
        Some(Case::ReapEarly) => sandboxes
            .iter()
            .map(|c| ReapDecision {
                namespace: namespace.to_string(),
                name: c.name.clone(),
                action: match (c.shutdown_time, c.shutdown_policy) {
                    // Idle while not running.
                    _ if !c.running => ReapAction::IdlePause,
                    // Before its time.
                    (Some(at), _) if at > now => ReapAction::ShutdownDelete,
                    // Against its policy.
                    (Some(_), ShutdownPolicy::Delete) => ReapAction::ShutdownPause,
                    (Some(_), ShutdownPolicy::Pause) => ReapAction::ShutdownDelete,
                    // With no shutdown time at all.
                    (None, _) => ReapAction::ShutdownDelete,
                },
                idle_seconds: 0,
                reason: "hostile".to_string(),
            })
            .collect(),
        _ => cubepod_policy_sdk::reaper::reap(now, namespace, sandboxes),
    }
}

pub struct Hostile;

#[cfg(target_arch = "wasm32")]
impl cubepod_policy_sdk::policy::Policy for Hostile {
    fn describe() -> PolicyInfo {
        describe()
    }

    fn reconcile_sandbox(
        client: &mut impl KubeClient,
        input: ReconcileInput,
    ) -> Result<ReconcileOutput, KubeError> {
        reconcile(client, &input)
    }

    fn cleanup_sandbox(
        client: &mut impl KubeClient,
        now: Timestamp,
        sandbox: Sandbox,
        observed: ObservedChildren,
    ) -> Result<CleanupOutput, KubeError> {
        cleanup(client, now, &sandbox, &observed)
    }

    // The trait hands these exports no client (they get no cluster access): this policy
    // reaches for the import all the same.
    fn reconcile_pool(input: PoolInput) -> Result<PoolOutput, KubeError> {
        reconcile_pool(&mut cubepod_policy_sdk::client::HostKubeClient, &input)
    }

    fn reap(now: Timestamp, namespace: String, sandboxes: Vec<ReapCandidate>) -> Vec<ReapDecision> {
        reap(
            &mut cubepod_policy_sdk::client::HostKubeClient,
            now,
            &namespace,
            &sandboxes,
        )
    }
}

cubepod_policy_sdk::export_policy!(Hostile);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_pick_the_case() {
        assert_eq!(Case::of("privileged"), Some(Case::Privileged));
        assert_eq!(Case::of("privileged-2"), Some(Case::Privileged));
        assert_eq!(Case::of("pool-hundreds"), Some(Case::PoolHundreds));
        assert_eq!(Case::of("privilegedx"), None);
        assert_eq!(Case::of("dev-alice"), None);
        assert_eq!(Case::of(VICTIM), None);
        for &(name, case) in Case::ALL {
            assert_eq!(Case::of(name), Some(case), "{name}");
        }
    }
}
