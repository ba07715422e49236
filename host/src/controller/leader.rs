//! Leader election with a `coordination.k8s.io/v1` Lease, as client-go does it: the holder
//! renews the Lease every retry period; another replica takes it over only once it has seen
//! the same record unchanged for a whole lease duration (by its own clock, so clock skew
//! between nodes does not matter). Only the leader reconciles; the others keep their caches
//! warm and take over within a lease duration of the leader's loss.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::watch;

use cubepod_kube::{ApiErrorKind, ApiResult, Cluster, Resource};

/// Whether this replica leads, and so may reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaderState {
    /// No election: this replica always reconciles.
    Disabled,
    /// This replica holds the Lease and reconciles.
    Leading {
        /// This replica's holder identity.
        identity: String,
    },
    /// Another replica holds the Lease (or none yet): this one waits.
    Following {
        /// The holder seen, if any.
        holder: Option<String>,
    },
}

impl LeaderState {
    pub(crate) fn may_reconcile(&self) -> bool {
        matches!(self, LeaderState::Disabled | LeaderState::Leading { .. })
    }

    /// One line for `/readyz`.
    pub(crate) fn describe(&self) -> String {
        match self {
            LeaderState::Disabled => "leader election: off (this replica reconciles)".to_string(),
            LeaderState::Leading { identity } => format!("leader: yes ({identity})"),
            LeaderState::Following {
                holder: Some(holder),
            } => {
                format!("leader: no (following {holder})")
            }
            LeaderState::Following { holder: None } => "leader: no (no holder yet)".to_string(),
        }
    }
}

/// Who may reconcile now, shared by the workers, the ticks and `/readyz`.
pub struct Leadership {
    state: watch::Sender<LeaderState>,
}

impl Leadership {
    /// Shared leadership, starting in `state`.
    pub fn new(state: LeaderState) -> Arc<Self> {
        Arc::new(Self {
            state: watch::Sender::new(state),
        })
    }

    /// The state now.
    pub fn state(&self) -> LeaderState {
        self.state.borrow().clone()
    }

    /// Whether this replica may reconcile now.
    pub fn may_reconcile(&self) -> bool {
        self.state.borrow().may_reconcile()
    }

    /// Every change of the state from now on (the current one first).
    pub(crate) fn subscribe(&self) -> watch::Receiver<LeaderState> {
        self.state.subscribe()
    }

    /// Waits until this replica may reconcile.
    pub(crate) async fn wait_until_leading(&self) {
        let mut state = self.state.subscribe();
        let _ = state.wait_for(LeaderState::may_reconcile).await;
    }

    /// Marks this replica a follower, before its first campaign.
    pub(crate) fn start_following(&self) {
        self.set(LeaderState::Following { holder: None });
    }

    fn set(&self, next: LeaderState) {
        self.state.send_if_modified(|state| {
            if *state == next {
                return false;
            }
            tracing::info!(from = %state.describe(), to = %next.describe(), "leadership changed");
            *state = next;
            true
        });
    }
}

/// Which Lease the election holds, as whom, and its timings.
#[derive(Clone, Debug)]
pub struct ElectionConfig {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This replica's holder identity.
    pub identity: String,
    /// How long a Lease not renewed stays held.
    pub lease_duration: Duration,
    /// How long the leader may go without renewing before it steps down.
    pub renew_deadline: Duration,
    /// How often it tries to acquire or renew.
    pub retry_period: Duration,
}

/// Leader election on a coordination.k8s.io Lease, as client-go does it.
pub struct LeaderElection {
    pub(crate) cluster: Arc<dyn Cluster>,
    pub(crate) config: ElectionConfig,
    pub(crate) leadership: Arc<Leadership>,
    /// The Lease's spec last seen, and when this replica first saw it.
    observed: Option<(Value, Instant)>,
    last_renewed: Option<Instant>,
}

fn now_micro() -> String {
    // metav1.MicroTime: RFC 3339 with microseconds.
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string()
}

impl LeaderElection {
    /// An election on `cluster`, updating `leadership`.
    pub fn new(
        cluster: Arc<dyn Cluster>,
        config: ElectionConfig,
        leadership: Arc<Leadership>,
    ) -> Self {
        Self {
            cluster,
            config,
            leadership,
            observed: None,
            last_renewed: None,
        }
    }

    /// Campaigns and renews until shutdown, then releases the Lease if held so that another
    /// replica takes over at once.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    self.last_renewed = Some(Instant::now());
                    self.leadership.set(LeaderState::Leading {
                        identity: self.config.identity.clone(),
                    });
                }
                Ok(false) => self.follow(),
                Err(error) => {
                    tracing::warn!(%error, "leader election: could not read or write the Lease");
                    // A leader that cannot renew within the deadline must stop: another replica
                    // may take the Lease once it expires.
                    let expired = self
                        .last_renewed
                        .is_none_or(|at| at.elapsed() > self.config.renew_deadline);
                    if expired {
                        self.follow();
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(self.config.retry_period) => {}
                _ = shutdown.changed() => break,
            }
        }
        if matches!(self.leadership.state(), LeaderState::Leading { .. }) {
            if let Err(error) = self.release().await {
                tracing::warn!(%error, "could not release the Lease; it expires by itself");
            }
            self.leadership.set(LeaderState::Following { holder: None });
        }
    }

    fn follow(&mut self) {
        let holder = self
            .observed
            .as_ref()
            .and_then(|(spec, _)| spec["holderIdentity"].as_str())
            .filter(|h| !h.is_empty() && *h != self.config.identity)
            .map(str::to_string);
        self.last_renewed = None;
        self.leadership.set(LeaderState::Following { holder });
    }

    fn lease_spec(&self, now: &str, transitions: u64) -> Value {
        json!({
            "holderIdentity": self.config.identity,
            "leaseDurationSeconds": self.config.lease_duration.as_secs().max(1),
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": transitions,
        })
    }

    /// True when this replica holds the Lease after the attempt.
    async fn try_acquire_or_renew(&mut self) -> ApiResult<bool> {
        let namespace = &self.config.namespace.clone();
        let name = &self.config.name.clone();
        let now = now_micro();
        let lease = match self.cluster.get(Resource::Lease, namespace, name).await {
            Ok(lease) => lease,
            Err(error) if error.is(ApiErrorKind::NotFound) => {
                let lease = json!({
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": self.lease_spec(&now, 0),
                });
                return match self.cluster.create(Resource::Lease, namespace, lease).await {
                    Ok(created) => {
                        self.observe(&created);
                        Ok(true)
                    }
                    Err(error) if error.is(ApiErrorKind::AlreadyExists) => Ok(false),
                    Err(error) => Err(error),
                };
            }
            Err(error) => return Err(error),
        };
        self.observe(&lease);
        let spec = &lease["spec"];
        let holder = spec["holderIdentity"].as_str().unwrap_or_default();
        let version = lease["metadata"]["resourceVersion"].clone();
        let patch = if holder == self.config.identity {
            json!({"metadata": {"resourceVersion": version}, "spec": {"renewTime": now}})
        } else if holder.is_empty() || self.observed_expired(spec) {
            let transitions = spec["leaseTransitions"].as_u64().unwrap_or(0) + 1;
            json!({"metadata": {"resourceVersion": version}, "spec": self.lease_spec(&now, transitions)})
        } else {
            return Ok(false);
        };
        match self
            .cluster
            .patch(Resource::Lease, namespace, name, patch)
            .await
        {
            Ok(updated) => {
                self.observe(&updated);
                Ok(true)
            }
            // Someone else wrote it first: they lead, or renewed.
            Err(error) if error.is(ApiErrorKind::Conflict) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Remembers the record and when it was first seen in this form.
    fn observe(&mut self, lease: &Value) {
        let record = lease["spec"].clone();
        let same = self
            .observed
            .as_ref()
            .is_some_and(|(seen, _)| *seen == record);
        if !same {
            self.observed = Some((record, Instant::now()));
        }
    }

    /// The holder has not renewed for a whole lease duration, by this replica's clock.
    fn observed_expired(&self, spec: &Value) -> bool {
        let duration = spec["leaseDurationSeconds"]
            .as_u64()
            .map(Duration::from_secs)
            .unwrap_or(self.config.lease_duration);
        self.observed
            .as_ref()
            .is_some_and(|(_, since)| since.elapsed() > duration)
    }

    async fn release(&self) -> ApiResult<()> {
        let patch = json!({"spec": {"holderIdentity": "", "renewTime": now_micro()}});
        self.cluster
            .patch(
                Resource::Lease,
                &self.config.namespace,
                &self.config.name,
                patch,
            )
            .await
            .map(drop)
    }
}
