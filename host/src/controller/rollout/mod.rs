//! `PolicyRollout`s: a module read from a ConfigMap of the controller's namespace (no file
//! sync), admitted through [`crate::admission`] as at start, then swapped in at once
//! (`Immediate`) or canaried on a growing share of objects (`Progressive`: [`PolicySlot`]'s
//! candidate and weight), each step judged by its gates over the step's window; a gate
//! breached rolls back at once, the last step passed promotes. Only the leader acts; what it
//! decides is written to the rollout's status (merge patches of the subresource), with one
//! Event per transition.

mod spec;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

use super::events::{Posting, Recorder};
use super::export::Export;
use super::health::ActivePolicy;
use super::manager::ControllerManager;
use super::policy::Canary;
use super::policy_watch::announce_swap;
use super::shadow::{Findings, Shadow};
use super::writer::Writer;
use crate::admission::{Admission, Candidate};
use cubepod_kube::{ApiErrorKind, Cluster, Resource, Scope};
use cubepod_policy_host::model::{ObjectRef, time};
use cubepod_policy_host::runtime::PolicyModule;
use cubepod_policy_host::runtime::bindings::{Event, EventType};
pub use spec::SpecError;
use spec::{Breach, Observed, Spec, TooFew};

/// How often a canary's gates and step are looked at, besides on every change and failure.
const TICK: Duration = Duration::from_millis(250);

/// The least time between two status writes that only refresh the gates' observed values.
const REFRESH: Duration = Duration::from_secs(2);

/// A rollout's phase, as its status says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Admitting,
    /// Another rollout's shadow or canary is in progress: one rollout at a time.
    Waiting,
    Shadowing,
    Canary,
    Promoted,
    RolledBack,
    Refused,
}

impl Phase {
    fn as_str(self) -> &'static str {
        match self {
            Phase::Admitting => "Admitting",
            Phase::Waiting => "Waiting",
            Phase::Shadowing => "Shadowing",
            Phase::Canary => "Canary",
            Phase::Promoted => "Promoted",
            Phase::RolledBack => "RolledBack",
            Phase::Refused => "Refused",
        }
    }
}

impl Phase {
    /// Whether a rollout in this phase holds the slot's shadow or canary (or is about to).
    fn busy(self) -> bool {
        matches!(self, Phase::Admitting | Phase::Shadowing | Phase::Canary)
    }
}

/// The reason a rollout is refused when the `--policy` file is the module's source.
const FILE_SOURCE_SET: &str = "FileSourceSet";

/// The reason a rollout of another namespace than the controller's is refused.
const OUTSIDE_NAMESPACE: &str = "OutsideControllerNamespace";

/// The conditions a rollout's status has.
const CONDITIONS: [&str; 2] = ["Admitted", "Progressing"];

/// A module as the status names it.
#[derive(Clone, Debug, PartialEq)]
struct ModuleRef {
    name: String,
    version: String,
    digest: String,
}

impl ModuleRef {
    fn of(module: &PolicyModule) -> Self {
        let info = module.info();
        Self {
            name: info.name.clone(),
            version: info.version.clone(),
            digest: module.digest().to_string(),
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "ref": format!("{}@{}", self.name, self.version),
            "name": self.name,
            "version": self.version,
            "digest": self.digest,
        })
    }
}

/// One condition of a rollout's status.
#[derive(Clone, Debug, PartialEq)]
struct Condition {
    kind: &'static str,
    status: bool,
    reason: String,
    message: String,
    since: i64,
}

/// What the controller holds of one rollout.
struct Tracked {
    uid: String,
    generation: i64,
    /// The module and signature last judged (digests), or why none could be read.
    identity: Option<(String, Option<String>)>,
    /// Where the module was last read from and the ConfigMap's resourceVersion then: the
    /// module is read (decoded, digested) again only when either changes.
    read_from: Option<(spec::ModuleSource, Option<String>)>,
    phase: Phase,
    candidate: Option<ModuleRef>,
    canary: Option<Arc<Canary>>,
    shadow: Option<Arc<Shadow>>,
    findings: Option<Findings>,
    step: usize,
    step_started: i64,
    paused_at: Option<i64>,
    weight: u8,
    touched: usize,
    observed: Option<Observed>,
    conditions: Vec<Condition>,
    /// The status last written, and when.
    written: Option<(Value, i64)>,
    /// Events of transitions the status does not show yet: posted once it does, so that a
    /// controller starting over from an older status, which makes the transition again,
    /// announces it once.
    unposted: Vec<Event>,
}

impl Tracked {
    /// A rollout first seen by this controller; the conditions its status holds are kept, so
    /// that their transition times survive a restart or a change of leader.
    fn new(uid: String, status: &Value) -> Self {
        let conditions = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| {
                let kind = CONDITIONS
                    .into_iter()
                    .find(|kind| c["type"].as_str() == Some(kind))?;
                Some(Condition {
                    kind,
                    status: c["status"] == "True",
                    reason: c["reason"].as_str()?.to_string(),
                    message: c["message"].as_str().unwrap_or_default().to_string(),
                    since: time::parse(c["lastTransitionTime"].as_str()?).ok()?,
                })
            })
            .collect();
        Self {
            uid,
            generation: 0,
            identity: None,
            read_from: None,
            phase: Phase::Admitting,
            candidate: None,
            canary: None,
            shadow: None,
            findings: None,
            step: 0,
            step_started: 0,
            paused_at: None,
            weight: 0,
            touched: 0,
            observed: None,
            conditions,
            written: None,
            unposted: Vec::new(),
        }
    }

    /// An Event for a transition just made, posted once the status shows it.
    fn announce(&mut self, kind: EventType, reason: &str, message: String) {
        self.unposted.push(Event {
            kind,
            reason: reason.to_string(),
            message,
        });
    }

    fn condition(
        &mut self,
        kind: &'static str,
        status: bool,
        reason: &str,
        message: String,
        now: i64,
    ) {
        let since = match self.conditions.iter().find(|c| c.kind == kind) {
            Some(c) if c.status == status => c.since,
            _ => now,
        };
        self.conditions.retain(|c| c.kind != kind);
        self.conditions.push(Condition {
            kind,
            status,
            reason: reason.to_string(),
            message,
            since,
        });
    }
}

/// The objects of one kind, by `namespace/name`, kept by a list and watch.
#[derive(Default)]
struct Mirror {
    objects: Mutex<BTreeMap<String, Arc<Value>>>,
}

/// `namespace/name`, a [`Mirror`]'s key of an object.
fn key_of(object: &Value) -> Option<String> {
    let meta = &object["metadata"];
    Some(format!(
        "{}/{}",
        meta["namespace"].as_str().unwrap_or_default(),
        meta["name"].as_str()?
    ))
}

impl Mirror {
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.objects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&format!("{namespace}/{name}"))
            .cloned()
    }

    fn all(&self) -> Vec<Arc<Value>> {
        self.objects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Lists, then watches from the list's version, until shutdown; a watch that ends is
    /// resumed from the last version seen, an expired one (410) listed again. A list of every
    /// namespace that is forbidden (RBAC without the cluster-wide rule) falls back to
    /// `fallback`'s namespace, saying so once.
    async fn run(
        self: Arc<Self>,
        cluster: Arc<dyn Cluster>,
        mut scope: Scope,
        fallback: Option<String>,
        changed: Arc<Notify>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut told = false;
        'list: loop {
            let listed = tokio::select! {
                listed = cluster.list(&scope) => listed,
                _ = shutdown.changed() => return,
            };
            let list = match listed {
                Ok(list) => list,
                Err(error)
                    if error.is(ApiErrorKind::Forbidden)
                        && scope.namespace.is_empty()
                        && fallback.is_some() =>
                {
                    let own = fallback.clone().unwrap_or_default();
                    tracing::warn!(resource = %scope.resource, namespace = %own, %error,
                        "cannot list PolicyRollouts of every namespace; reading only those of the \
                         controller's namespace, so a rollout made elsewhere is not told that it \
                         is ignored: grant list and watch of policyrollouts cluster-wide \
                         (deploy/rbac.yaml, cubepod-controller-rollouts-everywhere)");
                    scope.namespace = own;
                    continue 'list;
                }
                Err(error) => {
                    if !told {
                        tracing::warn!(resource = %scope.resource, namespace = %scope.namespace, %error,
                            "cannot list for policy rollouts; trying again every 10 s");
                        told = true;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(10)) => continue,
                        _ = shutdown.changed() => return,
                    }
                }
            };
            *self.objects.lock().unwrap_or_else(|p| p.into_inner()) = list
                .items
                .into_iter()
                .filter_map(|item| Some((key_of(&item)?, Arc::new(item))))
                .collect();
            changed.notify_one();
            let mut version = list.resource_version;
            loop {
                let events = tokio::select! {
                    events = cluster.watch(&scope, &version) => events,
                    _ = shutdown.changed() => return,
                };
                let mut events = match events {
                    Ok(events) => events,
                    Err(error) if error.is(ApiErrorKind::Gone) => continue 'list,
                    Err(error) => {
                        tracing::debug!(%error, "policy rollout watch failed; resuming");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                loop {
                    let event = tokio::select! {
                        event = events.recv() => event,
                        _ = shutdown.changed() => return,
                    };
                    let event = match event {
                        None => break,
                        Some(Err(error)) if error.is(ApiErrorKind::Gone) => continue 'list,
                        Some(Err(_)) => break,
                        Some(Ok(event)) => event,
                    };
                    let meta = &event.object["metadata"];
                    if let Some(v) = meta["resourceVersion"].as_str() {
                        version = v.to_string();
                    }
                    let Some(name) = key_of(&event.object) else {
                        continue;
                    };
                    let mut objects = self.objects.lock().unwrap_or_else(|p| p.into_inner());
                    match event.kind {
                        cubepod_kube::WatchEventType::Added
                        | cubepod_kube::WatchEventType::Modified => {
                            objects.insert(name, event.object.clone());
                        }
                        cubepod_kube::WatchEventType::Deleted => {
                            objects.remove(&name);
                        }
                        cubepod_kube::WatchEventType::Bookmark => continue,
                    }
                    drop(objects);
                    changed.notify_one();
                }
            }
        }
    }
}

/// Reads the PolicyRollouts of the controller's namespace and carries them out, one at a time;
/// refuses those of other namespaces, and every one when the `--policy` file is the source of
/// the module.
pub struct RolloutController {
    manager: Arc<ControllerManager>,
    admission: Admission,
    namespace: String,
    rollouts: Arc<Mirror>,
    config_maps: Arc<Mirror>,
    tracked: HashMap<String, Tracked>,
    /// Rollouts of other namespaces told they are not acted on: `namespace/name` to uid.
    elsewhere: HashMap<String, String>,
    recorder: Recorder,
}

impl RolloutController {
    /// A controller of the rollouts in `namespace` (the controller's own), admitting with
    /// `admission` and swapping into `manager`.
    pub fn new(manager: Arc<ControllerManager>, admission: Admission, namespace: String) -> Self {
        let burst = manager
            .policy
            .current()
            .engine()
            .config()
            .containment
            .rates
            .event_burst;
        let recorder = Recorder::new(manager.metrics.clone(), burst);
        // Every series shows from the start, so that a rate() over them is defined.
        for (export, kinds) in super::shadow::SERIES {
            for kind in kinds {
                manager
                    .metrics
                    .policy_shadow_differences
                    .with_label_values(&[export, kind])
                    .inc_by(0);
            }
        }
        Self {
            manager,
            admission,
            namespace,
            rollouts: Arc::default(),
            config_maps: Arc::default(),
            tracked: HashMap::new(),
            elsewhere: HashMap::new(),
            recorder,
        }
    }

    /// Watches and acts until shutdown.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let changed = Arc::new(Notify::new());
        // Rollouts of every namespace, so that one made elsewhere is told it is not acted on;
        // the modules' ConfigMaps of the controller's own only.
        for (mirror, resource, namespace, fallback) in [
            (
                &self.rollouts,
                Resource::PolicyRollout,
                String::new(),
                Some(self.namespace.clone()),
            ),
            (
                &self.config_maps,
                Resource::ConfigMap,
                self.namespace.clone(),
                None,
            ),
        ] {
            let scope = Scope {
                resource,
                namespace,
                label_selector: None,
            };
            tokio::spawn(mirror.clone().run(
                self.manager.cluster.clone(),
                scope,
                fallback,
                changed.clone(),
                shutdown.clone(),
            ));
        }
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut leadership = self.manager.health.leadership.subscribe();
        loop {
            let canary = self.manager.policy.canary();
            let breach = async {
                match &canary {
                    Some(canary) => canary.breach.notified().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = changed.notified() => {}
                _ = tick.tick() => {}
                _ = breach => {}
                _ = shutdown.changed() => return,
            }
            if !self.manager.health.leadership.may_reconcile() {
                self.step_down();
                continue;
            }
            // An admission in progress is dropped when the process stops or the lease is lost:
            // what it would write is the next leader's to decide.
            let lost = async {
                let _ = leadership.wait_for(|state| !state.may_reconcile()).await;
            };
            tokio::select! {
                _ = self.reconcile_all() => {}
                _ = lost => self.step_down(),
                _ = shutdown.changed() => return,
            }
        }
    }

    /// No longer the leader: what this replica held of each rollout is forgotten (the next
    /// leader may move it on), and its shadow and canary end, so that leading again takes every
    /// rollout up from its status.
    fn step_down(&mut self) {
        for (_, mut tracked) in std::mem::take(&mut self.tracked) {
            self.abort_canary(&mut tracked);
        }
    }

    async fn reconcile_all(&mut self) {
        let (objects, elsewhere): (Vec<_>, Vec<_>) = self
            .rollouts
            .all()
            .into_iter()
            .partition(|o| o["metadata"]["namespace"] == self.namespace.as_str());
        let keys: Vec<String> = elsewhere.iter().filter_map(|o| key_of(o)).collect();
        self.elsewhere.retain(|key, _| keys.contains(key));
        for object in elsewhere {
            self.refuse_elsewhere(&object).await;
        }
        let present: Vec<String> = objects
            .iter()
            .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
            .collect();
        // A rollout deleted mid-canary hands every object back to the stable module.
        let gone: Vec<String> = self
            .tracked
            .keys()
            .filter(|name| !present.contains(name))
            .cloned()
            .collect();
        for name in gone {
            if let Some(mut tracked) = self.tracked.remove(&name) {
                self.end_shadow(&mut tracked);
                if tracked.canary.is_none() {
                    continue;
                }
                tracing::info!(rollout = %name, "rollout deleted during its canary: every object back on the stable module");
                self.abort_canary(&mut tracked);
            }
        }
        for object in objects {
            self.reconcile(&object).await;
        }
    }

    async fn reconcile(&mut self, object: &Value) {
        let meta = &object["metadata"];
        let (Some(name), Some(uid)) = (meta["name"].as_str(), meta["uid"].as_str()) else {
            return;
        };
        let now = self.manager.config.reconcile.clock.now();
        let mut tracked = self
            .tracked
            .remove(name)
            .filter(|t| t.uid == uid)
            .unwrap_or_else(|| Tracked::new(uid.to_string(), &object["status"]));
        tracked.generation = meta["generation"].as_i64().unwrap_or(0);
        if let Some(path) = self.manager.policy.file_source() {
            let path = path.display().to_string();
            self.refuse_file_source(name, object, &mut tracked, &path, now)
                .await;
            self.write_status(name, &mut tracked, now).await;
            self.tracked.insert(name.to_string(), tracked);
            return;
        }
        match Spec::from_json(&object["spec"]) {
            Ok(spec) => {
                self.step(name, object, &mut tracked, &spec, now).await;
            }
            Err(error) => {
                if tracked.phase != Phase::Refused || tracked.identity.is_some() {
                    self.abort_canary(&mut tracked);
                    tracked.identity = None;
                    tracked.read_from = None;
                    tracked.phase = Phase::Refused;
                    tracked.condition("Admitted", false, "InvalidSpec", error.to_string(), now);
                    tracked.announce(EventType::Warning, "RolloutRefused", error.to_string());
                }
            }
        }
        self.write_status(name, &mut tracked, now).await;
        self.tracked.insert(name.to_string(), tracked);
    }

    /// The `--policy` file is the only source of the module: the rollout is not acted on, and
    /// says so at once (phase `Refused`, `Admitted` false with reason `FileSourceSet`, one
    /// Warning Event, a log line). A status that said it was promoted or in progress is
    /// rewritten, so that it never claims a module the file does not serve.
    async fn refuse_file_source(
        &mut self,
        name: &str,
        object: &Value,
        tracked: &mut Tracked,
        path: &str,
        now: i64,
    ) {
        let told = |status: &Value| {
            status["phase"] == "Refused"
                && status["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Admitted" && c["reason"] == FILE_SOURCE_SET)
        };
        let already = tracked.phase == Phase::Refused
            && tracked
                .conditions
                .iter()
                .any(|c| c.kind == "Admitted" && c.reason == FILE_SOURCE_SET);
        let message = format!(
            "this controller serves the module of --policy {path}; PolicyRollouts roll out \
             modules only on a controller run without --policy: remove --policy (and \
             deploy/signed-policy's patch) to use them"
        );
        tracked.phase = Phase::Refused;
        tracked.candidate = None;
        tracked.weight = 0;
        tracked.step = 0;
        tracked.touched = 0;
        tracked.observed = None;
        tracked.findings = None;
        tracked.condition("Admitted", false, FILE_SOURCE_SET, message.clone(), now);
        tracked.condition(
            "Progressing",
            false,
            FILE_SOURCE_SET,
            format!("not rolled out: the module of --policy {path} serves every sandbox"),
            now,
        );
        if already || told(&object["status"]) {
            return;
        }
        tracing::warn!(rollout = %name, path, reason = FILE_SOURCE_SET, "policy rollout refused: {message}");
        tracked.announce(EventType::Warning, "RolloutRefused", message);
    }

    /// A rollout of another namespace: not acted on, and told so once (phase `Refused`,
    /// `Admitted` false with reason `OutsideControllerNamespace`, one Warning Event, a log
    /// line).
    async fn refuse_elsewhere(&mut self, object: &Value) {
        let meta = &object["metadata"];
        let (Some(key), Some(namespace), Some(name), Some(uid)) = (
            key_of(object),
            meta["namespace"].as_str(),
            meta["name"].as_str(),
            meta["uid"].as_str(),
        ) else {
            return;
        };
        if self.elsewhere.get(&key).is_some_and(|told| told == uid) {
            return;
        }
        let status = &object["status"];
        let told = status["phase"] == "Refused"
            && status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Admitted" && c["reason"] == OUTSIDE_NAMESPACE);
        if told {
            self.elsewhere.insert(key, uid.to_string());
            return;
        }
        let now = self.manager.config.reconcile.clock.now();
        let message = format!(
            "not acted on: this controller reads PolicyRollouts only in its own namespace {} \
             (--lease-namespace); create the rollout and its module's ConfigMap there",
            self.namespace
        );
        let generation = meta["generation"].as_i64().unwrap_or(0);
        let patch = json!({"status": {
            "phase": Phase::Refused.as_str(),
            "observedGeneration": generation,
            "conditions": [{
                "type": "Admitted",
                "status": "False",
                "observedGeneration": generation,
                "lastTransitionTime": time::format(now),
                "reason": OUTSIDE_NAMESPACE,
                "message": message,
            }],
        }});
        tracing::warn!(rollout = %key, reason = OUTSIDE_NAMESPACE, "policy rollout refused: {message}");
        if let Err(error) = self
            .manager
            .cluster
            .patch_status(Resource::PolicyRollout, namespace, name, patch)
            .await
        {
            tracing::warn!(rollout = %key, %error, "cannot write the rollout's status; retried");
            return;
        }
        let at = ObjectRef::new(namespace, name);
        let refused = Event {
            kind: EventType::Warning,
            reason: "RolloutRefused".to_string(),
            message,
        };
        self.post(&at, uid, &[refused], now).await;
        self.elsewhere.insert(key, uid.to_string());
    }

    /// Another rollout of the namespace whose shadow or canary is in progress, with its phase:
    /// one this controller holds, or, not taken up yet, one whose status says so and that is
    /// older than `object` (the older goes first).
    fn busy_other(&self, name: &str, object: &Value) -> Option<(String, &'static str)> {
        let age = |o: &Value| {
            (
                o["metadata"]["creationTimestamp"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        };
        let mine = age(object);
        self.rollouts.all().into_iter().find_map(|other| {
            let meta = &other["metadata"];
            let other_name = meta["name"].as_str()?;
            if other_name == name || meta["namespace"] != self.namespace.as_str() {
                return None;
            }
            if let Some(held) = self.tracked.get(other_name)
                && meta["uid"] == held.uid.as_str()
            {
                return held
                    .phase
                    .busy()
                    .then(|| (other_name.to_string(), held.phase.as_str()));
            }
            let phase = [Phase::Admitting, Phase::Shadowing, Phase::Canary]
                .into_iter()
                .find(|p| other["status"]["phase"] == p.as_str())?;
            (age(&other) < mine).then(|| (other_name.to_string(), phase.as_str()))
        })
    }

    /// `other`'s stage holds the slot: this rollout waits (phase `Waiting`, `Progressing`
    /// false with reason `WaitingForRollout`, one Normal Event when it starts waiting), and
    /// starts once `other` is promoted, rolled back, refused or deleted.
    async fn wait_for(
        &mut self,
        name: &str,
        object: &Value,
        tracked: &mut Tracked,
        other: &str,
        phase: &str,
        now: i64,
    ) {
        let message = format!(
            "waits for PolicyRollout {other} ({phase}): one rollout at a time; this one starts \
             when that one is promoted, rolled back, refused or deleted"
        );
        let again = tracked.phase == Phase::Waiting
            || (object["status"]["phase"] == "Waiting"
                && tracked.conditions.iter().any(|c| c.message == message));
        tracked.phase = Phase::Waiting;
        tracked.weight = 0;
        tracked.condition(
            "Progressing",
            false,
            "WaitingForRollout",
            message.clone(),
            now,
        );
        if again {
            return;
        }
        tracing::info!(rollout = %name, waits_for = %other, "{message}");
        tracked.announce(EventType::Normal, "RolloutWaiting", message);
    }

    /// One look at a rollout whose spec reads: a new module judged, or the canary moved on.
    async fn step(
        &mut self,
        name: &str,
        object: &Value,
        tracked: &mut Tracked,
        spec: &Spec,
        now: i64,
    ) {
        let version = self
            .config_maps
            .get(&self.namespace, &spec.module.config_map)
            .and_then(|map| {
                map["metadata"]["resourceVersion"]
                    .as_str()
                    .map(str::to_string)
            });
        let read_from = Some((spec.module.clone(), version));
        if read_from != tracked.read_from {
            let candidate = self.read_module(spec);
            let identity = match &candidate {
                Ok(candidate) => Some(candidate.identity()),
                Err(why) => Some((format!("unreadable: {why}"), None)),
            };
            if identity != tracked.identity {
                // One rollout at a time: a new module waits while another rollout's shadow or
                // canary runs (a promotion the status records is only taken up again).
                let promoted = candidate
                    .as_ref()
                    .is_ok_and(|c| status_says(object, "Promoted", "stable", &c.digest()));
                if !promoted && let Some((other, phase)) = self.busy_other(name, object) {
                    self.wait_for(name, object, tracked, &other, phase, now)
                        .await;
                    return;
                }
                tracked.read_from = read_from;
                tracked.identity = identity;
                self.judge(name, object, tracked, spec, candidate, now)
                    .await;
                return;
            }
            tracked.read_from = read_from;
        }
        match tracked.phase {
            Phase::Canary => self.advance(name, tracked, spec, now).await,
            Phase::Shadowing => self.advance_shadow(name, tracked, spec, now).await,
            _ => {}
        }
    }

    /// The module and signature the spec names, from the ConfigMap as last seen.
    fn read_module(&self, spec: &Spec) -> Result<Candidate, String> {
        let source = &spec.module;
        let where_ = format!("ConfigMap {}/{}", self.namespace, source.config_map);
        let map = self
            .config_maps
            .get(&self.namespace, &source.config_map)
            .ok_or_else(|| format!("{where_} not found"))?;
        let read = |key: &str| -> Result<Vec<u8>, String> {
            if let Some(text) = map["binaryData"][key].as_str() {
                return base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_err(|e| format!("{where_} binaryData {key}: {e}"));
            }
            map["data"][key]
                .as_str()
                .map(|text| text.as_bytes().to_vec())
                .ok_or_else(|| format!("{where_} has no key {key}"))
        };
        let bytes = read(&source.key)?;
        let signature = read(&source.signature_key);
        self.admission
            .candidate_of(
                format!("{where_} key {}", source.key),
                bytes,
                (format!("{where_} key {}", source.signature_key), signature),
            )
            .map_err(|e| e.to_string())
    }

    /// A new module (or signature): admitted, then swapped in, or its canary started.
    async fn judge(
        &mut self,
        name: &str,
        object: &Value,
        tracked: &mut Tracked,
        spec: &Spec,
        candidate: Result<Candidate, String>,
        now: i64,
    ) {
        // A canary of the previous candidate ends: the new one starts from the stable module.
        self.abort_canary(tracked);
        tracked.observed = None;
        tracked.touched = 0;
        tracked.weight = 0;
        tracked.candidate = None;
        let candidate = match candidate {
            Ok(candidate) => candidate,
            Err(why) => {
                tracked.phase = Phase::Refused;
                tracked.condition("Admitted", false, "ModuleUnreadable", why.clone(), now);
                tracked.announce(EventType::Warning, "RolloutRefused", why);
                return;
            }
        };
        // A module the status already names (a controller starting over, a new leader) is
        // judged again without the status going back to Admitting meanwhile.
        let digest = candidate.digest();
        let named = ["candidate", "stable"]
            .iter()
            .any(|which| object["status"][which]["digest"] == digest.as_str());
        if !named {
            tracked.phase = Phase::Admitting;
            tracked.condition(
                "Admitted",
                false,
                "Admitting",
                format!("checking {}", candidate.what),
                now,
            );
            self.write_status(name, tracked, now).await;
        }
        let what = candidate.what.clone();
        let (module, checks) = match self.admission.admit(candidate).await {
            Ok(admitted) => {
                let checks = admitted.checks();
                (admitted.module, checks)
            }
            Err(why) => {
                let reason = why.reason();
                self.manager
                    .metrics
                    .policy_swaps
                    .with_label_values(&[reason])
                    .inc();
                let message = format!("{what} refused ({reason}): {why}; the running module stays");
                tracing::warn!(rollout = %name, reason, "{message}");
                tracked.phase = Phase::Refused;
                tracked.condition("Admitted", false, &camel(reason), message.clone(), now);
                tracked.announce(EventType::Warning, "RolloutRefused", message);
                return;
            }
        };
        let next = ModuleRef::of(&module);
        tracked.candidate = Some(next.clone());
        tracked.condition(
            "Admitted",
            true,
            "Admitted",
            format!("{what}: {}@{} passed {checks}", next.name, next.version),
            now,
        );
        let stable = ModuleRef::of(&self.manager.policy.current());
        let resumed = status_says(object, "Promoted", "stable", &next.digest);
        if stable.digest == next.digest {
            tracked.phase = Phase::Promoted;
            tracked.weight = 100;
            tracked.condition(
                "Progressing",
                false,
                "Promoted",
                "the module is the stable one".into(),
                now,
            );
            return;
        }
        if (spec.steps.is_empty() && spec.shadow.is_none()) || resumed {
            // Immediate with no shadow, or a rollout this controller (or another replica)
            // promoted before.
            self.promote(name, tracked, Arc::new(module), resumed, now)
                .await;
            return;
        }
        if status_says(object, "RolledBack", "candidate", &next.digest) {
            // Rolled back before: the same module is not tried again; a new one (or signature) is.
            tracked.phase = Phase::RolledBack;
            return;
        }
        let module = Arc::new(module);
        tracked.findings = None;
        if let Some(stage) = Resumed::of(object, &next.digest, spec) {
            // A stage this controller (or another replica) started before a restart or a
            // change of leader: it goes on where it was, its time so far counted.
            self.resume(name, tracked, spec, module, stage, now).await;
            return;
        }
        match &spec.shadow {
            Some(shadow) => {
                self.start_shadow(name, tracked, module, shadow.share, false, now)
                    .await
            }
            None => {
                self.start_canary(name, tracked, spec, module, None, now)
                    .await
            }
        }
    }

    /// A shadow stage or a canary step taken up where the status says it was: its start
    /// time and (paused) the time its pause began come from the status, so that neither a
    /// restart nor a new leader starts the stage's time over or counts a pause towards it.
    async fn resume(
        &mut self,
        name: &str,
        tracked: &mut Tracked,
        spec: &Spec,
        module: Arc<PolicyModule>,
        stage: Resumed,
        now: i64,
    ) {
        match stage.step {
            None => {
                let share = spec.shadow.as_ref().map_or(100, |s| s.share);
                self.start_shadow(name, tracked, module, share, true, now)
                    .await;
            }
            Some(step) => {
                self.start_canary(name, tracked, spec, module, Some(step), now)
                    .await;
            }
        }
        // A pause that began before counts no more than one that begins now: the stage's start
        // moves on by it, and `spec.paused` (if it still says so) holds it from here.
        let paused_for = stage.paused_at.map_or(0, |at| (now - at).max(0));
        tracked.step_started = (stage.started + paused_for).min(now);
    }

    /// The candidate runs in the shadow of the stable module, writing nothing; announced by
    /// an Event, unless `resumed` (taken up from the status).
    async fn start_shadow(
        &mut self,
        name: &str,
        tracked: &mut Tracked,
        module: Arc<PolicyModule>,
        share: u8,
        resumed: bool,
        now: i64,
    ) {
        let Ok(swap) = self.manager.policy.rollouts() else {
            return;
        };
        let next = ModuleRef::of(&module);
        let shadow = Arc::new(Shadow::new(
            module,
            share,
            &self.manager.reconciler.context,
            self.manager.cache.clone(),
            self.manager.metrics.clone(),
        ));
        swap.set_shadow(Some(shadow.clone()));
        tracked.shadow = Some(shadow);
        tracked.phase = Phase::Shadowing;
        tracked.step_started = now;
        tracked.paused_at = None;
        tracked.weight = 0;
        let message = format!(
            "{}@{} runs beside the stable module on {share}% of reconciles, writing nothing",
            next.name, next.version
        );
        tracked.condition("Progressing", true, "Shadowing", message.clone(), now);
        // Every object reconciled once, so that the shadow sees each.
        self.manager.requeue_all();
        tracing::info!(rollout = %name, candidate = %next.digest, share, resumed, "shadow started");
        if !resumed {
            tracked.announce(EventType::Normal, "ShadowStarted", message);
        }
    }

    /// The candidate's canary starts at the first step's weight, announced by an Event; or,
    /// `resumed_at` a step the status says it was at, there, with no Event.
    async fn start_canary(
        &mut self,
        name: &str,
        tracked: &mut Tracked,
        spec: &Spec,
        module: Arc<PolicyModule>,
        resumed_at: Option<usize>,
        now: i64,
    ) {
        let step = resumed_at.unwrap_or(0);
        let resumed = resumed_at.is_some();
        let Some(weight) = spec.steps.get(step).map(|s| s.weight) else {
            return;
        };
        let Ok(swap) = self.manager.policy.rollouts() else {
            return;
        };
        let next = ModuleRef::of(&module);
        let canary = swap.start_canary(module);
        canary.set_weight(weight);
        tracked.canary = Some(canary);
        tracked.phase = Phase::Canary;
        tracked.step = step;
        tracked.step_started = now;
        tracked.paused_at = None;
        tracked.weight = weight;
        tracked.condition(
            "Progressing",
            true,
            "CanaryStep",
            step_message(spec, step),
            now,
        );
        self.manager.requeue_all();
        tracing::info!(rollout = %name, candidate = %next.digest, weight = tracked.weight, resumed, "canary started");
        if !resumed {
            let message = format!("{}@{} on {weight}% of sandboxes", next.name, next.version);
            tracked.announce(EventType::Normal, "CanaryStarted", message);
        }
    }

    /// A stage whose shadow or canary is no longer the slot's: nothing feeds its window any
    /// more, so it starts over (from admission) rather than being judged on it.
    fn start_over(&self, name: &str, tracked: &mut Tracked, stage: &str) {
        tracing::warn!(rollout = %name, "the {stage} is no longer the one running; starting it over");
        self.abort_canary(tracked);
        tracked.read_from = None;
        tracked.identity = None;
    }

    /// A shadow's findings kept; once its time is up (on the manager's clock, standing still
    /// while paused), the canary starts, or the candidate is promoted when there are no steps.
    async fn advance_shadow(&mut self, name: &str, tracked: &mut Tracked, spec: &Spec, now: i64) {
        let Some(shadow) = tracked.shadow.clone() else {
            return;
        };
        if !self
            .manager
            .policy
            .shadow()
            .is_some_and(|s| Arc::ptr_eq(&s, &shadow))
        {
            self.start_over(name, tracked, "shadow");
            return;
        }
        tracked.findings = Some(shadow.findings());
        if self.hold(tracked, spec, now, "Shadowing", "the shadow stage") {
            return;
        }
        let duration = spec
            .shadow
            .as_ref()
            .map_or(0, |s| s.duration.as_secs() as i64);
        if now - tracked.step_started < duration {
            return;
        }
        let findings = tracked.findings.clone().unwrap_or_default();
        let calls = Export::ALL.map(|export| {
            let name = export.name();
            let count = |by: &BTreeMap<&'static str, u64>| by.get(name).copied().unwrap_or(0);
            (
                name,
                count(&findings.compared_by_export),
                count(&findings.offered_by_export),
            )
        });
        if let Some(few) = TooFew::first(calls, spec.gates.min_calls_per_export) {
            let message = too_few_message(
                "the shadow stage",
                &few,
                "the shadow compared",
                "the stable module made",
            );
            tracked.condition("Progressing", true, "TooFewCalls", message, now);
            return;
        }
        if let Some(max) = spec.gates.max_shadow_difference_ratio
            && findings.compared > 0
        {
            let ratio = findings.differing as f64 / findings.compared as f64;
            if ratio > max {
                self.end_shadow(tracked);
                tracked.phase = Phase::RolledBack;
                tracked.weight = 0;
                let first = findings
                    .examples
                    .first()
                    .map(|e| format!("; the first: {e}"))
                    .unwrap_or_default();
                let message = format!(
                    "gate maxShadowDifferenceRatio breached: {} of the {} calls the shadow \
                     compared differed from the stable module's ({ratio:.3} > {max}){first}; \
                     rolled back before any sandbox ran on it: status.shadow lists the \
                     differences; fix the module, or raise or remove \
                     spec.strategy.gates.maxShadowDifferenceRatio if they are intended",
                    findings.differing, findings.compared
                );
                self.tell_rolled_back(
                    name,
                    tracked,
                    "maxShadowDifferenceRatio",
                    ratio,
                    message,
                    now,
                )
                .await;
                return;
            }
        }
        self.end_shadow(tracked);
        tracing::info!(
            rollout = %name,
            compared = findings.compared,
            differences = findings.differences.values().sum::<u64>(),
            "shadow stage done"
        );
        if spec.steps.is_empty() {
            self.promote(name, tracked, shadow.module.clone(), false, now)
                .await;
        } else {
            self.start_canary(name, tracked, spec, shadow.module.clone(), None, now)
                .await;
        }
    }

    /// `spec.paused` read: whether the stage holds now. The time paused does not count
    /// towards the stage's duration.
    fn hold(
        &self,
        tracked: &mut Tracked,
        spec: &Spec,
        now: i64,
        reason: &str,
        stage: &str,
    ) -> bool {
        match (spec.paused, tracked.paused_at) {
            (true, None) => {
                tracked.paused_at = Some(now);
                tracked.condition(
                    "Progressing",
                    false,
                    "Paused",
                    format!("spec.paused holds {stage}"),
                    now,
                );
                true
            }
            (true, Some(_)) => true,
            (false, Some(at)) => {
                tracked.step_started += now - at;
                tracked.paused_at = None;
                let message = match tracked.phase {
                    Phase::Canary => step_message(spec, tracked.step),
                    _ => format!("{stage} resumed"),
                };
                tracked.condition("Progressing", true, reason, message, now);
                false
            }
            (false, None) => false,
        }
    }

    /// Ends this rollout's shadow, if it runs one.
    fn end_shadow(&self, tracked: &mut Tracked) {
        let Some(shadow) = tracked.shadow.take() else {
            return;
        };
        let slot = &self.manager.policy;
        if let Ok(swap) = slot.rollouts()
            && slot.shadow().is_some_and(|s| Arc::ptr_eq(&s, &shadow))
        {
            swap.set_shadow(None);
        }
    }

    /// A canary's gates judged over its window, then its step moved on when its time is up.
    async fn advance(&mut self, name: &str, tracked: &mut Tracked, spec: &Spec, now: i64) {
        let Some(canary) = tracked.canary.clone() else {
            return;
        };
        // A stage closes only on the window that fed it: a canary that is no longer the slot's
        // (nothing counts for it any more) starts over rather than being judged on an empty
        // window.
        if !self
            .manager
            .policy
            .canary()
            .is_some_and(|c| Arc::ptr_eq(&c, &canary))
        {
            self.start_over(name, tracked, "canary");
            return;
        }
        let observed = Observed::of(&canary.window(now));
        tracked.observed = Some(observed);
        tracked.touched = canary.touched();
        if let Some(breach) = spec.gates.breached(&observed) {
            self.roll_back(name, tracked, &canary, &observed, breach, now)
                .await;
            return;
        }
        // Paused: the step's time stands still; the gates still judge.
        if self.hold(tracked, spec, now, "CanaryStep", "the canary") {
            return;
        }
        // A spec edited to fewer steps (or to Immediate) has passed them all.
        if let Some(step) = spec.steps.get(tracked.step)
            && now - tracked.step_started < step.duration.as_secs() as i64
        {
            return;
        }
        // The step's end: what its sandboxes came to, then whether it saw enough of each
        // export to judge it.
        if let Some(breach) = spec.gates.progress_breached(&observed) {
            self.roll_back(name, tracked, &canary, &observed, breach, now)
                .await;
            return;
        }
        // Before the promotion, the canary as a whole must have seen enough of each export
        // exercised (a step before grows the share, which brings more).
        let last = tracked.step + 1 >= spec.steps.len();
        if last
            && canary.weight() > 0
            && let Some(few) = observed.too_few(spec.gates.min_calls_per_export)
        {
            let stage = format!("step {} of {}", tracked.step + 1, spec.steps.len());
            let message =
                too_few_message(&stage, &few, "the candidate made", "the stable module made");
            tracked.condition("Progressing", true, "TooFewCalls", message, now);
            return;
        }
        tracked.step += 1;
        match spec.steps.get(tracked.step) {
            Some(next) => {
                canary.set_weight(next.weight);
                tracked.weight = next.weight;
                tracked.step_started = now;
                tracked.condition(
                    "Progressing",
                    true,
                    "CanaryStep",
                    step_message(spec, tracked.step),
                    now,
                );
                tracing::info!(rollout = %name, step = tracked.step, weight = next.weight, "canary step");
                self.manager.requeue_all();
            }
            None => {
                let module = canary.module.clone();
                tracked.canary = None;
                self.promote(name, tracked, module, false, now).await;
            }
        }
    }

    /// A gate breached: the canary ends, every object back on the stable module, and the
    /// status and a Warning Event say which gate, what was seen and what to do.
    async fn roll_back(
        &mut self,
        name: &str,
        tracked: &mut Tracked,
        canary: &Canary,
        observed: &Observed,
        breach: Breach,
        now: i64,
    ) {
        let weight = canary.weight();
        self.abort_canary(tracked);
        tracked.phase = Phase::RolledBack;
        tracked.weight = 0;
        let seen = match &breach.what {
            Some(what) => format!(
                "{what}: a shortfall of {:.3} > {}",
                breach.observed, breach.max
            ),
            None => format!(
                "observed {:.3} > {} over {} calls of the candidate's",
                breach.observed, breach.max, observed.reconciles
            ),
        };
        let message = format!(
            "gate {} breached at {weight}%: {seen}; rolled back: the {} sandboxes and pools it \
             reconciled are the stable module's again; fix the module and roll it out again, \
             or loosen spec.strategy.gates.{}",
            breach.gate, tracked.touched, breach.gate
        );
        self.tell_rolled_back(name, tracked, breach.gate, breach.observed, message, now)
            .await;
    }

    /// A rollback by a gate, told: a log line, the `Progressing` condition and a Warning Event.
    async fn tell_rolled_back(
        &mut self,
        name: &str,
        tracked: &mut Tracked,
        gate: &str,
        observed: f64,
        message: String,
        now: i64,
    ) {
        tracing::warn!(rollout = %name, gate, observed, "{message}");
        tracked.condition("Progressing", false, "GateBreached", message.clone(), now);
        tracked.announce(EventType::Warning, "RolledBack", message);
    }

    /// `module` made the stable one for every object; the canary, if any, ends.
    async fn promote(
        &mut self,
        name: &str,
        tracked: &mut Tracked,
        module: Arc<PolicyModule>,
        quiet: bool,
        now: i64,
    ) {
        let slot = &self.manager.policy;
        let Ok(swap) = slot.rollouts() else {
            return;
        };
        // Only this rollout's own canary ends: one rollout runs at a time, and a promotion
        // taken up again from the status leaves another's canary be.
        let previous = match slot.canary() {
            Some(canary) if Arc::ptr_eq(&canary.module, &module) => swap.promote_canary(),
            _ => Some(swap.replace_shared(module.clone())),
        };
        if let Some(previous) = previous {
            announce_swap(
                &self.manager,
                &ActivePolicy::of(&previous),
                &ActivePolicy::of(&module),
            );
        }
        self.manager.requeue_all();
        tracked.phase = Phase::Promoted;
        tracked.weight = 100;
        let next = ModuleRef::of(&module);
        let message = format!(
            "{}@{} is the stable module for every sandbox",
            next.name, next.version
        );
        tracing::info!(rollout = %name, digest = %next.digest, "policy promoted");
        tracked.condition("Progressing", false, "Promoted", message.clone(), now);
        if !quiet {
            tracked.announce(EventType::Normal, "Promoted", message);
        }
    }

    /// Ends this rollout's canary, if it holds one: every object back on the stable module.
    fn abort_canary(&self, tracked: &mut Tracked) {
        self.end_shadow(tracked);
        let Some(canary) = tracked.canary.take() else {
            return;
        };
        tracked.touched = canary.touched();
        let slot = &self.manager.policy;
        if let Ok(swap) = slot.rollouts()
            && slot.canary().is_some_and(|c| Arc::ptr_eq(&c, &canary))
        {
            swap.end_canary();
        }
        self.manager.requeue_all();
    }

    /// Events on the rollout `at` (of `uid`), in its namespace.
    async fn post(&self, at: &ObjectRef, uid: &str, events: &[Event], now: i64) {
        let writer = Writer {
            cluster: self.manager.cluster.as_ref(),
            cache: &self.manager.cache_writer,
            events: &self.recorder,
        };
        let kind = Resource::PolicyRollout.kind();
        writer
            .post_events(&Posting::by_controller(kind, at, uid, events, now))
            .await;
    }

    /// The status as the controller holds it, patched when it changed (the gates' values and
    /// the conditions' messages at most every [`REFRESH`]).
    async fn write_status(&self, name: &str, tracked: &mut Tracked, now: i64) {
        let stable = ModuleRef::of(&self.manager.policy.current());
        let mut status = json!({
            "phase": tracked.phase.as_str(),
            "observedGeneration": tracked.generation,
            "stable": stable.to_json(),
            "candidate": tracked.candidate.as_ref().filter(|c| c.digest != stable.digest || tracked.phase != Phase::Promoted).map(ModuleRef::to_json),
            "weight": tracked.weight,
            "step": tracked.step,
            "touched": tracked.touched,
            "conditions": tracked.conditions.iter().map(|c| json!({
                "type": c.kind,
                "status": if c.status { "True" } else { "False" },
                "observedGeneration": tracked.generation,
                "lastTransitionTime": time::format(c.since),
                "reason": c.reason,
                "message": c.message,
            })).collect::<Vec<_>>(),
        });
        // Null removes it from the status once no stage is timed.
        status["stepStartedAt"] = if matches!(tracked.phase, Phase::Canary | Phase::Shadowing) {
            json!(time::format(tracked.step_started))
        } else {
            Value::Null
        };
        status["shadow"] = tracked.findings.as_ref().map_or(Value::Null, |f| {
            json!({
                "compared": f.compared,
                "comparedByExport": f.compared_by_export,
                "offeredByExport": f.offered_by_export,
                "differing": f.differing,
                "differences": f.differences.iter().map(|((export, kind), count)| json!({
                    "export": export, "kind": kind, "count": count,
                })).collect::<Vec<_>>(),
                "examples": f.examples,
            })
        });
        let gates = tracked.observed.as_ref().map(|o| {
            let sides = |[(c, c_of), (s, s_of)]: [(u64, u64); 2], done: &str| {
                json!({
                    "candidate": {done: c, "of": c_of},
                    "stable": {done: s, "of": s_of},
                })
            };
            let calls: serde_json::Map<String, Value> = Export::ALL
                .iter()
                .zip(o.calls)
                .map(|(export, (c, s))| {
                    (
                        export.name().to_string(),
                        json!({"candidate": c, "stable": s}),
                    )
                })
                .collect();
            json!({
                "reconciles": o.reconciles,
                "trapRatio": o.trap_ratio,
                "refusalRatio": o.refusal_ratio,
                "errorRatio": o.error_ratio,
                "readyLatencyRatio": o.ready_latency_ratio,
                "callsByExport": calls,
                "sandboxes": sides(o.ready, "ready"),
                "cleanups": sides(o.cleaned, "done"),
            })
        });
        status["gates"] = gates.unwrap_or(Value::Null);
        if let Some((written, at)) = &tracked.written {
            let only_counts = without_counts(written) == without_counts(&status);
            if *written == status || (only_counts && now - at < REFRESH.as_secs() as i64) {
                self.post_unposted(name, tracked, now).await;
                return;
            }
        }
        let patch = json!({"status": status});
        match self
            .manager
            .cluster
            .patch_status(Resource::PolicyRollout, &self.namespace, name, patch)
            .await
        {
            Ok(_) => {
                tracked.written = Some((status, now));
                self.post_unposted(name, tracked, now).await;
            }
            Err(error) => {
                tracing::warn!(rollout = %name, %error, "cannot write the rollout's status; retried")
            }
        }
    }

    /// The Events of the transitions the status written now shows.
    async fn post_unposted(&self, name: &str, tracked: &mut Tracked, now: i64) {
        if tracked.unposted.is_empty() {
            return;
        }
        let events = std::mem::take(&mut tracked.unposted);
        self.post(
            &ObjectRef::new(&self.namespace, name),
            &tracked.uid,
            &events,
            now,
        )
        .await;
    }
}

/// A rollout's status without what counts calls as they come: the gates' values and the
/// messages of conditions (a held stage's message counts the calls it has seen). A change
/// there alone is written at most every [`REFRESH`]; a condition's type, status or reason
/// changing is a transition, written at once.
fn without_counts(status: &Value) -> Value {
    let mut status = status.clone();
    status["gates"] = Value::Null;
    if let Some(conditions) = status["conditions"].as_array_mut() {
        for condition in conditions {
            condition["message"] = Value::Null;
        }
    }
    status
}

/// A stage in progress as a rollout's status tells it: what a controller that starts over
/// (or a new leader) takes up.
#[derive(Clone, Debug, PartialEq)]
struct Resumed {
    /// The canary's step; `None`: the shadow stage.
    step: Option<usize>,
    started: i64,
    /// When its pause began, if the status says it is paused.
    paused_at: Option<i64>,
}

impl Resumed {
    /// The stage `object`'s status says the candidate of `digest` is in, if it is one `spec`
    /// still has.
    fn of(object: &Value, digest: &str, spec: &Spec) -> Option<Self> {
        let status = &object["status"];
        let started = time::parse(status["stepStartedAt"].as_str()?).ok()?;
        let step = if status_says(object, "Shadowing", "candidate", digest) {
            spec.shadow.as_ref()?;
            None
        } else if status_says(object, "Canary", "candidate", digest) {
            let step = usize::try_from(status["step"].as_u64()?).ok()?;
            spec.steps.get(step)?;
            Some(step)
        } else {
            return None;
        };
        let paused_at = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Progressing" && c["reason"] == "Paused")
            .and_then(|c| time::parse(c["lastTransitionTime"].as_str()?).ok());
        Some(Self {
            step,
            started,
            paused_at,
        })
    }
}

/// Whether the rollout's status says `phase` with its `which` module of `digest`: what a
/// controller that starts over finds of an earlier decision.
fn status_says(object: &Value, phase: &str, which: &str, digest: &str) -> bool {
    let status = &object["status"];
    status["phase"] == phase && status[which]["digest"] == digest
}

/// A stage held past its time: it saw `few` of an export's calls (`made` by the candidate, of
/// those the stage `saw`), too few to judge it.
fn too_few_message(stage: &str, few: &TooFew, made: &str, saw: &str) -> String {
    format!(
        "{stage} is held past its duration: {made} {} {} calls where {saw} {}, fewer than \
         spec.strategy.gates.minCallsPerExport ({}): too few to judge the candidate's {}; it \
         moves on once there are enough (sandboxes on the candidate's share created, deleted \
         or idle, pools reconciled; a last step at weight 100 gives it every call), or set \
         minCallsPerExport to 0 to move on without judging it",
        few.candidate, few.export, few.stable, few.min, few.export
    )
}

fn step_message(spec: &Spec, step: usize) -> String {
    let Some(s) = spec.steps.get(step) else {
        return String::new();
    };
    format!(
        "step {} of {}: {}% of sandboxes on the candidate for {}",
        step + 1,
        spec.steps.len(),
        s.weight,
        humantime::format_duration(s.duration)
    )
}

/// `signature_missing` as a condition's reason: `SignatureMissing`.
fn camel(reason: &str) -> String {
    reason
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_reasons_read_as_condition_reasons() {
        assert_eq!(camel("signature_missing"), "SignatureMissing");
        assert_eq!(camel("self_test"), "SelfTest");
        assert_eq!(camel("trap"), "Trap");
    }
}
