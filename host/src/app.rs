//! Wiring of `cubepod-controller run`: configuration to cluster, policy, control loop and
//! server, then a graceful stop on SIGTERM or SIGINT.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;

use crate::config::RunArgs;
use crate::controller::health::Health;
use crate::controller::manager::{ControllerManager, ManagerConfig};
use crate::controller::queue::Backoff;
use crate::kube::Cluster;
use crate::kube::instrumented::InstrumentedCluster;
use crate::kube::memory::{MemoryCluster, MemoryClusterConfig};
use crate::metrics::Metrics;
use crate::runtime::{PolicyEngine, PolicyModule, RuntimeConfig, default_policy};
use crate::server::{self, ServerState};

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(
        "found a Kubernetes configuration ({0}), but this build of cubepod-controller reconciles \
         only its embedded in-memory cluster; pass --embedded to run it"
    )]
    RealClusterUnsupported(String),
    #[error("policy module {path}: {source}")]
    PolicyFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("policy module {what}: {source}")]
    Policy {
        what: String,
        source: crate::runtime::RuntimeError,
    },
    #[error("seeding the embedded cluster: {0}")]
    Seed(#[from] crate::embedded::SeedError),
    #[error("cannot serve on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
}

/// Where a real cluster's configuration would come from, if there is one.
fn kubernetes_config() -> Option<String> {
    if let Ok(host) = std::env::var("KUBERNETES_SERVICE_HOST")
        && !host.is_empty()
    {
        return Some(format!(
            "in-cluster environment, KUBERNETES_SERVICE_HOST={host}"
        ));
    }
    if let Ok(path) = std::env::var("KUBECONFIG")
        && !path.is_empty()
    {
        return Some(format!("KUBECONFIG={path}"));
    }
    let home = std::env::var_os("HOME")?;
    let default = PathBuf::from(home).join(".kube").join("config");
    default.exists().then(|| default.display().to_string())
}

/// Loads the policy the flags name, or the built-in default.
pub fn load_policy(
    engine: &PolicyEngine,
    path: Option<&PathBuf>,
) -> Result<PolicyModule, StartError> {
    match path {
        Some(path) => {
            let bytes = std::fs::read(path).map_err(|source| StartError::PolicyFile {
                path: path.clone(),
                source,
            })?;
            engine.load(&bytes).map_err(|source| StartError::Policy {
                what: path.display().to_string(),
                source,
            })
        }
        None => engine
            .load(default_policy::DEFAULT_POLICY)
            .map_err(|source| StartError::Policy {
                what: "built-in default".to_string(),
                source,
            }),
    }
}

/// Runs the controller until `shutdown` turns true.
pub async fn run(args: RunArgs, shutdown: watch::Receiver<bool>) -> Result<(), StartError> {
    if !args.embedded
        && let Some(found) = kubernetes_config()
    {
        return Err(StartError::RealClusterUnsupported(found));
    }
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::default());

    let memory = MemoryCluster::new(MemoryClusterConfig {
        pod_start_delay: args.pod_start_delay,
        ..MemoryClusterConfig::default()
    });
    let seeded = crate::embedded::seed(memory.as_ref(), &args.seeds).await?;
    tracing::info!(
        objects = seeded,
        "no kubeconfig or in-cluster environment: running against the embedded in-memory \
         cluster, seeded from deploy/examples"
    );
    let cluster: Arc<dyn Cluster> = InstrumentedCluster::new(memory, metrics.clone());

    let engine = PolicyEngine::new(RuntimeConfig {
        call_deadline: args.guest_deadline,
        memory_limit_bytes: args.guest_memory_mib as usize * 1024 * 1024,
        host_call_timeout: args.host_call_timeout,
        cache_dir: Some(args.cache_dir()),
        ..RuntimeConfig::default()
    })
    .map_err(|source| StartError::Policy {
        what: "engine".to_string(),
        source,
    })?;
    let module = load_policy(&engine, args.policy.as_ref())?;
    let info = module.info().clone();
    tracing::info!(
        name = %info.name,
        version = %info.version,
        digest = %module.digest(),
        "policy loaded"
    );
    metrics
        .policy_info
        .with_label_values(&[info.name.as_str(), info.version.as_str(), module.digest()])
        .set(1);
    metrics
        .policy_swaps
        .with_label_values(&["applied"])
        .inc_by(0);
    let manager = ControllerManager::new(
        cluster,
        module,
        ManagerConfig {
            namespaces: args.namespaces.clone(),
            concurrency: args.concurrency as usize,
            reap_interval: args.reap_interval,
            pool_interval: args.pool_interval,
            max_pool_replicas: args.max_pool_replicas,
            shutdown_timeout: args.shutdown_timeout,
            host_call_timeout: args.host_call_timeout,
            backoff: Backoff::default(),
        },
        metrics.clone(),
        health.clone(),
    );

    let (bound, server_task) = server::serve(
        args.listen,
        ServerState {
            health: health.clone(),
            metrics,
        },
        shutdown.clone(),
    )
    .await
    .map_err(|source| StartError::Listen {
        addr: args.listen,
        source,
    })?;
    tracing::info!(addr = %bound, "serving /healthz, /readyz and /metrics");

    manager.run(shutdown).await;
    server_task.abort();
    drop(engine);
    tracing::info!("stopped");
    Ok(())
}
