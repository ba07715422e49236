//! Wiring of `cubepod-controller run`: configuration to cluster, policy, control loop and
//! server, then a graceful stop on SIGTERM or SIGINT.

use std::sync::Arc;

use tokio::sync::watch;

use crate::admission::{Admission, Admitted, Candidate, REFUSAL_REASONS};
use crate::config::{EngineFlags, RouterArgs, RunArgs};
use crate::controller::health::Health;
use crate::controller::leader::{ElectionConfig, LeaderElection, LeaderState};
use crate::controller::manager::{ControllerManager, ManagerConfig, PolicySource};
use crate::controller::policy_watch::{PolicyFile, PolicyWatcher, Verdicts, first_admitted};
use crate::controller::queue::Backoff;
use crate::controller::reconcile::Settings;
use crate::controller::rollout::RolloutController;
use crate::instrumented::InstrumentedCluster;
use crate::metrics::Metrics;
use crate::server::auth::Gate;
use crate::server::cert::{Certificate, Source};
use crate::server::{self, ServerState};
use crate::signing::KeyRing;
use cubepod_apiserver::{MemoryCluster, MemoryClusterConfig};
use cubepod_kube::rest::{ConnectionConfig, Projection, RestCluster, RestOptions};
use cubepod_kube::review::Reviewer;
use cubepod_kube::{ApiErrorKind, Cluster, PageRequest, Resource, Scope};
use cubepod_policy_host::runtime::PolicyEngine;

/// Why `run` could not start the controller.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The cluster's connection settings are unusable.
    #[error("Kubernetes connection: {0}")]
    Kube(#[from] cubepod_kube::rest::RestError),
    /// A CRD the controller needs is not installed.
    #[error(
        "the {kind} CRD is not installed in this cluster ({why}): install it with \
         `kubectl apply -k deploy/` (or `kubectl apply -f deploy/crds/`)"
    )]
    CrdMissing {
        /// The CRD's kind.
        kind: &'static str,
        /// What the API answered.
        why: String,
    },
    /// A namespace's objects cannot be listed (RBAC, most often).
    #[error("cannot list {kind}s in namespace {namespace}: {why}")]
    Preflight {
        /// The kind listed.
        kind: &'static str,
        /// The namespace.
        namespace: String,
        /// What the API answered.
        why: String,
    },
    /// The policy could not be loaded.
    #[error("policy {what}: {source}")]
    Policy {
        /// Which policy, in words.
        what: String,
        /// The runtime's error.
        source: cubepod_policy_host::runtime::RuntimeError,
    },
    /// Admission refused the built-in policy module (a module of `--policy` that admission
    /// refuses is waited on, not fatal).
    #[error("policy module {what} refused ({}): {source}", source.reason())]
    PolicyRefused {
        /// Which policy, in words.
        what: String,
        /// Why it was refused.
        source: crate::admission::Refused,
    },
    /// A `--policy-verify-key` could not be read.
    #[error("policy verification {0}")]
    VerifyKey(#[from] crate::signing::KeyError),
    /// The embedded cluster's examples could not be seeded.
    #[error("seeding the embedded cluster: {0}")]
    Seed(#[from] crate::embedded::SeedError),
    /// The embedded cluster could not be served.
    #[error(transparent)]
    Serve(#[from] crate::embedded::ServeStartError),
    /// An address to serve on (the probes, `/metrics`) could not be bound.
    #[error(
        "cannot serve {what} on {addr} ({flag}): {source}{}",
        crate::server::bind_hint(source, flag)
    )]
    Listen {
        /// What is served there: `/healthz and /readyz`.
        what: &'static str,
        /// The address.
        addr: std::net::SocketAddr,
        /// The flag that sets it: `--listen`.
        flag: &'static str,
        /// The socket's error.
        source: std::io::Error,
    },
    /// `router` found no cluster to route to.
    #[error(
        "the router needs a Kubernetes cluster and found no kubeconfig or in-cluster \
         environment; set KUBECONFIG (the embedded demo serves its router from `run`: \
         --router-listen)"
    )]
    NoCluster,
    /// Plain `/metrics` asked for on an address that is not loopback.
    #[error(
        "--metrics-secure=false serves /metrics beside the probes with no authentication, so only \
         on a loopback --listen, not {0}; over HTTPS, --metrics-secure, it may be served anywhere"
    )]
    PlainMetrics(std::net::SocketAddr),
    /// The metrics server's certificate could not be made or read.
    #[error("the metrics server's certificate: {0}")]
    MetricsCert(#[from] crate::server::cert::CertError),
    /// The router's certificate could not be read.
    #[error("the router's certificate (--router-tls-cert, --router-tls-key): {0}")]
    RouterCert(crate::server::cert::CertError),
}

/// What [`connect`] found: the cluster, what reviews its tokens and requests (for `/metrics`),
/// and for the embedded cluster what keeps it served.
type Connected = (
    Arc<dyn Cluster>,
    Arc<dyn Reviewer>,
    Option<crate::embedded::Served>,
    // The API server's addresses, as CIDRs (`model::network::api_server_cidrs`).
    Vec<String>,
);

/// The cluster to reconcile: the Kubernetes API when a kubeconfig or in-cluster environment is
/// found (and `--embedded` is not given), else the embedded in-memory cluster, seeded and
/// served for kubectl.
async fn connect(args: &RunArgs, metrics: &Metrics) -> Result<Connected, StartError> {
    if !args.embedded
        && let Some((connection, source)) = ConnectionConfig::load()?
    {
        tracing::info!(%source, server = %connection.server, "using the Kubernetes API");
        // The cache keeps no more of a child than its metadata and status: the rest is skipped
        // while reading, not parsed and dropped (and a Secret's data is never held).
        let options = RestOptions {
            children: Projection::MetadataAndStatus,
            request_metrics: Some(metrics.rest_client_requests.clone()),
            ..RestOptions::default()
        };
        let api_server =
            cubepod_policy_host::model::network::api_server_cidrs(&connection.server, |name| {
                std::env::var(name).ok()
            });
        let rest = RestCluster::new(connection, options)?;
        preflight(rest.as_ref(), &args.namespaces).await?;
        return Ok((rest.clone(), rest, None, api_server));
    }
    let memory = MemoryCluster::new(
        MemoryClusterConfig {
            pod_start_delay: args.pod_start_delay,
            ..MemoryClusterConfig::default()
        }
        .with_namespaces(crate::embedded::namespaces(
            &args.namespaces,
            &args.lease_namespace,
        )),
    );
    let seeded = crate::embedded::seed(memory.as_ref(), &args.seeds).await?;
    tracing::info!(
        objects = seeded,
        "no kubeconfig or in-cluster environment: running against the embedded in-memory \
         cluster, seeded from deploy/examples"
    );
    let kubeconfig = args.embedded_kubeconfig();
    let served = crate::embedded::serve(memory.clone(), args.embedded_api_listen, &kubeconfig)?;
    tracing::info!(
        server = %served.server.url(),
        kubeconfig = %kubeconfig.display(),
        "serving the embedded cluster's Kubernetes API for kubectl"
    );
    let reviewer = memory.access().clone();
    Ok((memory, reviewer, Some(served), Vec::new()))
}

/// The embedded cluster's router, on loopback: its Pods answered by the simulated kubelet's
/// stand-ins, its tokens the embedded cluster's (the kubeconfig's is allowed everything).
async fn serve_embedded_router(
    args: &RunArgs,
    cluster: Arc<dyn Cluster>,
    reviewer: Arc<dyn Reviewer>,
    memory: Arc<MemoryCluster>,
    metrics: &Metrics,
    shutdown: &watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>, StartError> {
    let config = args.router.config(&args.namespaces);
    let domain = config.domain.clone();
    let tls = router_tls(&args.router, shutdown)?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let router = crate::router::Router::start(
        cluster,
        reviewer,
        crate::router::PodNetwork::Embedded(memory),
        config,
        metrics.register_router(),
        shutdown.clone(),
    );
    let (bound, task) = crate::router::listen(router, args.router_listen, tls, shutdown.clone())
        .await
        .map_err(|source| StartError::Listen {
            what: "the sandbox router",
            addr: args.router_listen,
            flag: "--router-listen",
            source,
        })?;
    tracing::info!(
        addr = %bound,
        example = %format!("curl -H \"Authorization: Bearer $TOKEN\" {scheme}://8080-<sandbox>.<namespace>.{domain}:{}/", bound.port()),
        "serving the sandbox router (the token is the kubeconfig's)"
    );
    Ok(task)
}

/// The router's TLS, when `--router-tls-cert` and `--router-tls-key` name a certificate: HTTP/2
/// and HTTP/1.1 offered by ALPN, the files read again when they change.
fn router_tls(
    flags: &crate::config::RouterFlags,
    shutdown: &watch::Receiver<bool>,
) -> Result<Option<Arc<rustls::ServerConfig>>, StartError> {
    let Some((cert, key)) = flags.tls_files() else {
        return Ok(None);
    };
    let certificate =
        Certificate::new(Source::Files { cert, key }).map_err(StartError::RouterCert)?;
    let tls = certificate
        .server_config_for(&[b"h2", b"http/1.1"])
        .map_err(StartError::RouterCert)?;
    tokio::spawn(certificate.watch(shutdown.clone()));
    Ok(Some(tls))
}

/// `cubepod-controller router`: the sandbox router against the cluster of the kubeconfig or
/// the in-cluster environment, until `shutdown`.
pub async fn run_router(
    args: RouterArgs,
    shutdown: watch::Receiver<bool>,
) -> Result<(), StartError> {
    let Some((connection, source)) = ConnectionConfig::load()? else {
        return Err(StartError::NoCluster);
    };
    tracing::info!(%source, server = %connection.server, "using the Kubernetes API");
    let options = RestOptions {
        children: Projection::MetadataAndStatus,
        ..RestOptions::default()
    };
    let rest = RestCluster::new(connection, options)?;
    let tls = router_tls(&args.flags, &shutdown)?;
    let metrics = crate::metrics::RouterMetrics::register(prometheus::Registry::new());
    let router = crate::router::Router::start(
        rest.clone(),
        rest,
        crate::router::PodNetwork::Direct,
        args.flags.config(&args.namespaces),
        metrics,
        shutdown.clone(),
    );
    let tls_on = tls.is_some();
    let (bound, task) = crate::router::listen(router, args.listen, tls, shutdown.clone())
        .await
        .map_err(|source| StartError::Listen {
            what: "the sandbox router",
            addr: args.listen,
            flag: "--listen",
            source,
        })?;
    tracing::info!(addr = %bound, domain = %args.flags.router_domain, tls = tls_on,
        "serving the sandbox router, and its /metrics to bearer tokens allowed to get it");
    let mut shutdown = shutdown;
    let _ = shutdown.wait_for(|stop| *stop).await;
    task.abort();
    tracing::info!("stopped");
    Ok(())
}

/// Fails fast, with the command that fixes it, when the CRDs are missing or the controller may
/// not read what it reconciles.
async fn preflight(cluster: &dyn Cluster, namespaces: &[String]) -> Result<(), StartError> {
    for namespace in namespaces {
        for resource in [Resource::Sandbox, Resource::PodWarmPool] {
            let scope = Scope {
                resource,
                namespace: namespace.clone(),
                label_selector: None,
            };
            // One item is enough to know the resource is served. An API server that ignores
            // `limit` (a list from its watch cache) sends every object all the same: read as
            // it comes and dropped a batch at a time, not held whole (held whole, 100,000
            // sandboxes take 570 MiB at the start, more than the controller settles at).
            let probe = PageRequest {
                limit: 1,
                continue_token: None,
            };
            match cluster
                .list_page_each(&scope, &probe, &mut drop::<Vec<serde_json::Value>>)
                .await
            {
                Ok(_) => {}
                Err(error) if error.is(ApiErrorKind::NotFound) => {
                    return Err(StartError::CrdMissing {
                        kind: resource.kind(),
                        why: error.message,
                    });
                }
                Err(error) => {
                    return Err(StartError::Preflight {
                        kind: resource.kind(),
                        namespace: namespace.clone(),
                        why: error.to_string(),
                    });
                }
            }
        }
    }
    Ok(())
}

/// How often the start beats `/healthz` while it waits for a module: as the control loop does.
const WAITING_BEAT: std::time::Duration = std::time::Duration::from_millis(500);

/// The module the controller starts with, and the file it keeps watching.
struct FirstModule {
    admitted: Admitted,
    /// With `--policy`: the file, watched since the start, and what its verdicts remember.
    watched: Option<(PolicyFile, Verdicts)>,
}

/// The first module to run: the built-in default, or the first module of the `--policy` file
/// that admission accepts (signature, compile, contract, self-test: what every hot swap
/// passes). A refused or unreadable file is not fatal: the process waits, alive and serving
/// `/readyz` (not ready, saying which module and why), holding no Lease and writing nothing,
/// while the file is watched; the first admissible module starts the controller. `None` when
/// `shutdown` came first.
async fn first_module(
    args: &RunArgs,
    admission: &Admission,
    metrics: &Arc<Metrics>,
    health: &Arc<Health>,
    shutdown: &watch::Receiver<bool>,
) -> Result<Option<FirstModule>, StartError> {
    let Some(path) = &args.policy else {
        let candidate = Candidate::builtin();
        let what = candidate.what.clone();
        let admitted = admission
            .admit(candidate)
            .await
            .map_err(|source| StartError::PolicyRefused { what, source })?;
        return Ok(Some(FirstModule {
            admitted,
            watched: None,
        }));
    };
    let mut file = PolicyFile::new(
        path.clone(),
        admission.clone(),
        args.policy_poll_interval,
        metrics.clone(),
    );
    let mut verdicts = Verdicts::new(admission.clone(), metrics.clone(), health.clone());
    tracing::info!(path = %path.display(), "watching the policy file for new modules");
    let admitted = {
        let first = first_admitted(file.looks(shutdown.clone()), &mut verdicts);
        let mut first = std::pin::pin!(first);
        // Alive while waiting: the liveness probe must not restart a process that waits for
        // its module, which is what a restart would do too.
        let mut beat = tokio::time::interval(WAITING_BEAT);
        loop {
            tokio::select! {
                admitted = &mut first => break admitted,
                _ = beat.tick() => health.beat(),
            }
        }
    };
    Ok(admitted.map(|admitted| FirstModule {
        admitted,
        watched: Some((file, verdicts)),
    }))
}

/// Keeps `leader_election_master_status{name}` at 1 while this replica leads, 0 otherwise.
async fn report_leadership(
    mut state: watch::Receiver<LeaderState>,
    metrics: Arc<Metrics>,
    lease: String,
) {
    let gauge = metrics
        .leader_election_master_status
        .with_label_values(&[lease.as_str()]);
    loop {
        let leading = matches!(*state.borrow_and_update(), LeaderState::Leading { .. });
        gauge.set(i64::from(leading));
        if state.changed().await.is_err() {
            return;
        }
    }
}

/// Serves `/metrics` over HTTPS on `--metrics-listen`, each request's token and access reviewed
/// by `reviewer`, with the certificate of `--metrics-cert-path` or a self-signed one.
async fn serve_secure_metrics(
    args: &RunArgs,
    reviewer: Arc<dyn Reviewer>,
    metrics: Arc<Metrics>,
    shutdown: &watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>, StartError> {
    let source = match args.metrics_cert_files() {
        Some((cert, key)) => Source::Files { cert, key },
        None => Source::SelfSigned,
    };
    let described = match &source {
        Source::SelfSigned => "self-signed, made at start".to_string(),
        Source::Files { cert, .. } => cert.display().to_string(),
    };
    let certificate = Certificate::new(source)?;
    let tls = certificate.server_config()?;
    tokio::spawn(certificate.watch(shutdown.clone()));
    let gate = Arc::new(Gate::new(reviewer));
    let (bound, task) =
        server::secure::serve(args.metrics_listen, tls, gate, metrics, shutdown.clone())
            .await
            .map_err(|source| StartError::Listen {
                what: "/metrics",
                addr: args.metrics_listen,
                flag: "--metrics-listen",
                source,
            })?;
    tracing::info!(
        addr = %bound,
        certificate = %described,
        "serving /metrics over HTTPS, to bearer tokens allowed to get it"
    );
    Ok(task)
}

/// Runs the controller until `shutdown` turns true.
pub async fn run(args: RunArgs, shutdown: watch::Receiver<bool>) -> Result<(), StartError> {
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::default());

    let engine = PolicyEngine::new(EngineFlags::Run(&args).runtime_config()).map_err(|source| {
        StartError::Policy {
            what: "engine".to_string(),
            source,
        }
    })?;
    engine
        .memory_budget()
        .report_to(metrics.calls_memory_charged.clone());
    let keys = KeyRing::load(&args.policy_verify_keys)?;
    for key in keys.keys() {
        tracing::info!(key = %key.describe(), "policy modules must be signed by a configured key");
    }
    if !keys.is_empty() && args.policy.is_none() {
        tracing::warn!(
            "--policy-verify-key without --policy: the built-in default policy runs (it is part \
             of the binary, not verified)"
        );
    }
    let admission =
        Admission::new(engine.clone(), keys).with_max_module_bytes(args.max_policy_bytes);
    // Every result shows from the start, so that a rate() over them is defined.
    for result in std::iter::once(&"applied").chain(REFUSAL_REASONS) {
        metrics.policy_swaps.with_label_values(&[result]).inc_by(0);
    }
    for resource in Resource::children() {
        metrics
            .policy_writes_deferred
            .with_label_values(&[resource.plural()])
            .inc_by(0);
    }
    // Only reads (the preflight's lists): nothing is written before a module is admitted.
    let (cluster, reviewer, served, api_server) = connect(&args, &metrics).await?;
    let embedded = served.is_some();
    let listen = args.listen(embedded);
    let metrics_secure = args.metrics_secure(embedded);
    if !metrics_secure && !listen.ip().is_loopback() {
        return Err(StartError::PlainMetrics(listen));
    }
    let cluster: Arc<dyn Cluster> = InstrumentedCluster::new(cluster, metrics.clone());

    // Served before the module is judged, so that a refused one is seen on /readyz.
    let (bound, server_task) = server::serve(
        listen,
        ServerState {
            health: health.clone(),
            metrics: metrics.clone(),
            plain_metrics: !metrics_secure,
        },
        shutdown.clone(),
    )
    .await
    .map_err(|source| StartError::Listen {
        what: "/healthz and /readyz",
        addr: listen,
        flag: "--listen",
        source,
    })?;
    let router_reviewer = reviewer.clone();
    let metrics_task = if metrics_secure {
        tracing::info!(addr = %bound, "serving /healthz and /readyz");
        Some(serve_secure_metrics(&args, reviewer, metrics.clone(), &shutdown).await?)
    } else {
        tracing::info!(
            addr = %bound,
            "serving /healthz, /readyz and /metrics, plain HTTP with no authentication \
             (--metrics-secure=false)"
        );
        None
    };
    let router_task = match &served {
        Some(served) => Some(
            serve_embedded_router(
                &args,
                cluster.clone(),
                router_reviewer,
                served.server.cluster(),
                &metrics,
                &shutdown,
            )
            .await?,
        ),
        None => None,
    };
    if let Some(served) = &served {
        // The one line a newcomer needs, on stdout whatever the log format; once every
        // address is bound, so that it is never followed by a failure to serve.
        println!("export KUBECONFIG={}", served.kubeconfig.display());
    }
    let stop_serving = |metrics_task: Option<tokio::task::JoinHandle<()>>| {
        server_task.abort();
        if let Some(task) = &router_task {
            task.abort();
        }
        if let Some(task) = metrics_task {
            task.abort();
        }
    };
    if args.leader_elect {
        // A replica starts as a follower and reconciles only once it holds the Lease.
        health.leadership.start_following();
    }

    let Some(first) = first_module(&args, &admission, &metrics, &health, &shutdown).await? else {
        stop_serving(metrics_task);
        drop((admission, engine, served));
        tracing::info!("stopped before a policy module was admitted");
        return Ok(());
    };
    let admitted = first.admitted;
    let module = admitted.module;
    let info = module.info().clone();
    tracing::info!(
        name = %info.name,
        version = %info.version,
        digest = %module.digest(),
        key = %admitted.key.as_ref().map_or_else(|| "none".to_string(), |k| k.describe()),
        conformance = admitted.cases,
        "policy admitted"
    );
    metrics
        .policy_info
        .with_label_values(&[info.name.as_str(), info.version.as_str(), module.digest()])
        .set(1);
    let manager = ControllerManager::new(
        cluster,
        module,
        ManagerConfig {
            namespaces: args.namespaces.clone(),
            concurrency: args.concurrency as usize,
            reap_interval: args.reap_interval,
            pool_interval: args.pool_interval,
            shutdown_timeout: args.shutdown_timeout,
            backoff: Backoff::default(),
            reconcile: Arc::new(Settings {
                max_pool_replicas: args.max_pool_replicas,
                status_coalesce: args.status_coalesce,
                normal_events: args.normal_events,
                object_bounds: crate::controller::cache::ObjectBounds {
                    total: u64::try_from(args.max_policy_object_bytes).unwrap_or(u64::MAX),
                    per_sandbox: u64::try_from(args.max_policy_object_bytes_per_sandbox)
                        .unwrap_or(u64::MAX),
                },
                event_queue: crate::controller::events::DEFAULT_EVENT_QUEUE,
                ..Settings::default()
            }),
            // The API server is among the cluster's ranges: no sandbox reaches it but by
            // `egress: cluster` or `--allowed-egress-cidrs`.
            cluster_network: cubepod_policy_host::model::network::with_api_server(
                args.network.cluster_network(),
                &api_server,
            ),
            // One source of the serving module: with `--policy`, the file, and every
            // PolicyRollout is refused; without, the rollouts.
            policy_source: args
                .policy
                .clone()
                .map_or(PolicySource::Rollouts, PolicySource::File),
        },
        metrics.clone(),
        health.clone(),
    );

    if args.leader_elect {
        let election = LeaderElection::new(
            manager.cluster.clone(),
            ElectionConfig {
                namespace: args.lease_namespace.clone(),
                name: args.lease_name.clone(),
                identity: args.identity(),
                lease_duration: args.lease_duration,
                renew_deadline: args.lease_renew_deadline,
                retry_period: args.lease_retry_period,
            },
            health.leadership.clone(),
        );
        tokio::spawn(election.run(shutdown.clone()));
        tokio::spawn(report_leadership(
            health.leadership.subscribe(),
            manager.metrics.clone(),
            args.lease_name.clone(),
        ));
    }
    if let Some((file, verdicts)) = first.watched {
        let watcher = PolicyWatcher::resume(file, verdicts, manager.clone());
        tokio::spawn(watcher.run(shutdown.clone()));
    }
    // PolicyRollouts, read from the API (none without the CRD: the lists are retried). With
    // `--policy` each is refused, saying why: the file is the only source of the module.
    let rollouts = RolloutController::new(
        manager.clone(),
        admission.clone(),
        args.lease_namespace.clone(),
    );
    tokio::spawn(rollouts.run(shutdown.clone()));
    manager.run(shutdown).await;
    stop_serving(metrics_task);
    drop((admission, engine, served));
    tracing::info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use serde_json::{Value, json};
    use tokio::sync::mpsc;

    use super::*;

    use crate::controller::cache::Cache;
    use crate::controller::claims::ClaimView;
    use crate::controller::inputs;
    use cubepod_apiserver::serve::{ApiServer, ServeOptions};
    use cubepod_kube::testing::{Reply, StubCluster};
    use cubepod_kube::{ApiResult, BoxFuture, ObjectList, WatchEvent};
    use cubepod_policy_host::containment::Boundary;
    use cubepod_policy_host::model::{children, network, sandbox};
    use cubepod_policy_host::runtime::bindings::KubeError;
    use cubepod_policy_host::runtime::{CallContext, DEFAULT_POLICY, RuntimeConfig};

    /// A setting's default is stated twice, by its flag and by the library's defaults (which
    /// `policy test`, the benchmarks and the tests run with): the two say the same.
    #[test]
    fn the_flags_defaults_are_the_engines_and_the_managers() {
        let args = crate::config::tests::run(&[]);
        let flags = EngineFlags::Run(&args).runtime_config();
        let engine = RuntimeConfig::default();
        assert_eq!(flags.call_deadline, engine.call_deadline);
        assert_eq!(flags.memory_limit_bytes, engine.memory_limit_bytes);
        assert_eq!(flags.host_call_timeout, engine.host_call_timeout);
        assert_eq!(
            flags.calls_memory_budget_bytes,
            engine.calls_memory_budget_bytes
        );
        assert_eq!(flags.address_space, engine.address_space);
        let manager = ManagerConfig::for_namespaces(Vec::new());
        assert_eq!(args.concurrency as usize, manager.concurrency);
        assert_eq!(args.reap_interval, manager.reap_interval);
        assert_eq!(args.pool_interval, manager.pool_interval);
        assert_eq!(args.max_pool_replicas, manager.reconcile.max_pool_replicas);
        assert_eq!(args.shutdown_timeout, manager.shutdown_timeout);
        assert_eq!(args.status_coalesce, manager.reconcile.status_coalesce);
        assert_eq!(args.normal_events, manager.reconcile.normal_events);
        assert_eq!(args.network.cluster_network(), manager.cluster_network);
    }

    /// The Cluster it wraps, counting the most list items any one answer (or batch of a
    /// streamed list) handed its caller at once.
    struct MostAtOnce {
        inner: Arc<dyn Cluster>,
        most: std::sync::atomic::AtomicUsize,
    }

    impl MostAtOnce {
        fn saw(&self, items: usize) {
            self.most
                .fetch_max(items, std::sync::atomic::Ordering::Relaxed);
        }
    }

    impl Cluster for MostAtOnce {
        fn create(
            &self,
            resource: Resource,
            namespace: &str,
            object: Value,
        ) -> BoxFuture<'_, ApiResult<Value>> {
            self.inner.create(resource, namespace, object)
        }
        fn get(
            &self,
            resource: Resource,
            namespace: &str,
            name: &str,
        ) -> BoxFuture<'_, ApiResult<Value>> {
            self.inner.get(resource, namespace, name)
        }
        fn delete(
            &self,
            resource: Resource,
            namespace: &str,
            name: &str,
        ) -> BoxFuture<'_, ApiResult<()>> {
            self.inner.delete(resource, namespace, name)
        }
        fn patch(
            &self,
            resource: Resource,
            namespace: &str,
            name: &str,
            patch: Value,
        ) -> BoxFuture<'_, ApiResult<Value>> {
            self.inner.patch(resource, namespace, name, patch)
        }
        fn patch_status(
            &self,
            resource: Resource,
            namespace: &str,
            name: &str,
            patch: Value,
        ) -> BoxFuture<'_, ApiResult<Value>> {
            self.inner.patch_status(resource, namespace, name, patch)
        }
        fn list(&self, scope: &Scope) -> BoxFuture<'_, ApiResult<ObjectList>> {
            let scope = scope.clone();
            Box::pin(async move {
                let list = self.inner.list(&scope).await?;
                self.saw(list.items.len());
                Ok(list)
            })
        }
        fn list_page(
            &self,
            scope: &Scope,
            page: &PageRequest,
        ) -> BoxFuture<'_, ApiResult<ObjectList>> {
            let (scope, page) = (scope.clone(), page.clone());
            Box::pin(async move {
                let list = self.inner.list_page(&scope, &page).await?;
                self.saw(list.items.len());
                Ok(list)
            })
        }
        fn list_page_each<'a>(
            &'a self,
            scope: &'a Scope,
            page: &'a PageRequest,
            each: &'a mut (dyn FnMut(Vec<Value>) + Send),
        ) -> BoxFuture<'a, ApiResult<ObjectList>> {
            Box::pin(async move {
                let mut counted = |items: Vec<Value>| {
                    self.saw(items.len());
                    each(items);
                };
                let list = self.inner.list_page_each(scope, page, &mut counted).await?;
                self.saw(list.items.len());
                Ok(list)
            })
        }
        fn watch(
            &self,
            scope: &Scope,
            resource_version: &str,
        ) -> BoxFuture<'_, ApiResult<mpsc::Receiver<ApiResult<WatchEvent>>>> {
            self.inner.watch(scope, resource_version)
        }
    }

    /// The start's check that the CRDs are served and listable asks for one item; an API
    /// server that ignores `limit` (a list from its watch cache) sends every object instead,
    /// and the check must not hold them all: at 100,000 sandboxes that was the restart's peak,
    /// twice the settled RSS.
    #[tokio::test]
    async fn the_preflight_holds_no_whole_list_from_a_server_that_ignores_limit() {
        const SANDBOXES: usize = 1_000;
        let cluster = MemoryCluster::new(MemoryClusterConfig::default().with_namespaces(["ns"]));
        for i in 0..SANDBOXES {
            cluster
                .create(
                    Resource::Sandbox,
                    "ns",
                    json!({
                        "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
                        "metadata": {"name": format!("s{i}"), "namespace": "ns"},
                        "spec": {"image": "busybox"},
                    }),
                )
                .await
                .expect("a sandbox");
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let server = ApiServer::start(
            listener,
            cluster,
            ServeOptions {
                tls: false,
                ignore_limit: true,
                ..ServeOptions::default()
            },
            None,
        )
        .expect("the API server");
        let rest = RestCluster::new(
            ConnectionConfig::new(&server.url()).expect("its URL"),
            RestOptions::default(),
        )
        .expect("a client");
        let probed = MostAtOnce {
            inner: rest,
            most: Default::default(),
        };
        preflight(&probed, &["ns".to_string()])
            .await
            .expect("the CRDs are served");
        let most = probed.most.into_inner();
        // The REST client hands a streamed list on 100 items at a time.
        assert!(
            (1..=100).contains(&most),
            "the preflight was handed {most} of {SANDBOXES} sandboxes at once"
        );
    }

    /// `--host-call-timeout` is what a policy's request waits at most: from the flag, through
    /// the engine `run` makes, to the first request of a new sandbox's reconcile.
    #[test]
    fn the_host_call_timeout_flag_bounds_each_request_of_the_policys() {
        let args = crate::config::tests::run(&["--host-call-timeout", "150ms"]);
        let config = RuntimeConfig {
            // Not the controller's cache of compiled modules.
            cache_dir: None,
            ..EngineFlags::Run(&args).runtime_config()
        };
        let module = PolicyEngine::new(config)
            .expect("an engine")
            .load(DEFAULT_POLICY)
            .expect("the default policy");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let context = CallContext::new(
            // An API server that takes every request and never answers.
            Arc::new(StubCluster::new(Reply::Never)),
            Arc::new(Boundary::new(["ns"])),
            runtime.handle().clone(),
        );
        let object = sandbox::from_json(&json!({
            "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u", "resourceVersion": "1"},
            "spec": {"image": "busybox"},
        }))
        .expect("a sandbox");
        let input = inputs::reconcile_input(
            &Cache::default(),
            &object.sandbox,
            children::empty(),
            &ClaimView::Unclaimed,
            0,
            "token".to_string(),
            &network::default_cluster_network(),
        );
        let started = Instant::now();
        let call = runtime
            .block_on(module.reconcile_sandbox_async(&context, input))
            .expect("the call returns");
        // Well before the default of 10 s.
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        match call.value {
            Err(KubeError::Retryable(retry)) => assert!(
                retry.message.contains("did not answer within 150ms"),
                "{}",
                retry.message
            ),
            other => panic!("expected the request's timeout, got {other:?}"),
        }
    }
}
