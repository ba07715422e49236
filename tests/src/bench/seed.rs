//! Converged sandboxes, seeded straight into a [`MemoryCluster`]: one sandbox is brought up
//! by the real control loop (in-process, on an in-memory cluster), and its objects (the
//! Sandbox with its status, two PVCs, the Secret and the running Pod) are copied under other
//! names. A controller started over the copies finds every sandbox converged, so that its
//! cache can be filled with 100,000 sandboxes without reconciling them from scratch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cubepod_apiserver::{MemoryCluster, MemoryClusterConfig};
use cubepod_host::controller::health::Health;
use cubepod_host::controller::manager::{ControllerManager, ManagerConfig};
use cubepod_host::metrics::Metrics;
use cubepod_kube::{Cluster, Resource};
use cubepod_policy_host::model::network;
use cubepod_policy_host::runtime::PolicyModule;
use cubepod_policy_sdk::names::SPEC_HASH_ANNOTATION;
use serde_json::{Value, json};

use super::NS;

const TEMPLATE_NAME: &str = "cpbtemplate";

/// A future that completes on its first poll (the in-memory cluster's calls do), run there.
trait Now: Future + Sized {
    fn now(self) -> Result<Self::Output> {
        let mut future = std::pin::pin!(self);
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        match future.as_mut().poll(&mut context) {
            std::task::Poll::Ready(output) => Ok(output),
            std::task::Poll::Pending => bail!("an in-memory cluster call did not complete at once"),
        }
    }
}

impl<F: Future> Now for F {}

/// Idle timeout of every benchmark sandbox: far off, so that the reaper decides on each one
/// and pauses none.
pub const IDLE_TIMEOUT_SECONDS: u64 = 86_400;

/// The manifest a user POSTs for sandbox `name`.
pub fn sandbox_manifest(name: &str) -> Value {
    json!({
        "apiVersion": "cubepod.io/v1alpha1",
        "kind": "Sandbox",
        "metadata": {
            "name": name,
            "namespace": NS,
            "annotations": {
                "cubepod.io/last-activity": cubepod_policy_host::model::time::format(
                    cubepod_policy_host::model::time::now()
                ),
            },
        },
        "spec": {
            "image": "ghcr.io/cubepod/sandbox-base:1.0",
            "idleTimeoutSeconds": IDLE_TIMEOUT_SECONDS,
        },
    })
}

/// Name of the `i`-th benchmark sandbox.
pub fn sandbox_name(i: usize) -> String {
    format!("sb-{i:06}")
}

/// One converged sandbox's objects, as text to copy.
pub struct Template {
    sandbox: String,
    status: String,
    children: Vec<(Resource, String, Option<String>)>,
    uid: String,
    pod_ip: String,
}

/// A status as a merge patch would carry it, and the object without its status or the
/// server's metadata.
fn split(mut object: Value) -> (Value, Option<Value>) {
    let status = object.as_object_mut().and_then(|o| o.remove("status"));
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in ["uid", "resourceVersion", "creationTimestamp", "generation"] {
            metadata.remove(field);
        }
    }
    (object, status)
}

impl Template {
    /// Runs the real control loop in-process over an in-memory cluster until one sandbox is
    /// Running, and keeps its objects.
    pub async fn make(module: PolicyModule) -> Result<Self> {
        let cluster = MemoryCluster::new(MemoryClusterConfig::instant());
        // The cluster's ranges as the controller that reads the seeded state has them: the
        // fake API server's loopback address among them (the NetworkPolicies' egress says so).
        let api_server = network::api_server_cidrs("https://127.0.0.1", |_| None);
        let manager = ControllerManager::new(
            cluster.clone(),
            module,
            ManagerConfig {
                cluster_network: network::with_api_server(
                    network::default_cluster_network(),
                    &api_server,
                ),
                ..ManagerConfig::for_namespaces(vec![NS.to_string()])
            },
            Arc::new(Metrics::new()),
            Arc::new(Health::default()),
        );
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        let running = tokio::spawn(manager.run(shutdown));
        cluster
            .create(Resource::Sandbox, NS, sandbox_manifest(TEMPLATE_NAME))
            .await
            .context("creating the template sandbox")?;
        let started = Instant::now();
        let sandbox = loop {
            let sandbox = cluster
                .get(Resource::Sandbox, NS, TEMPLATE_NAME)
                .await
                .context("reading the template sandbox")?;
            if sandbox["status"]["phase"] == "Running" {
                break sandbox;
            }
            if started.elapsed() > Duration::from_secs(60) {
                bail!("the template sandbox never ran: {sandbox}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        // Let the controller settle, then take everything as it stands.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = stop.send(true);
        let _ = running.await;
        let sandbox = cluster
            .get(Resource::Sandbox, NS, TEMPLATE_NAME)
            .await
            .unwrap_or(sandbox);
        let uid = sandbox["metadata"]["uid"]
            .as_str()
            .context("the template's uid")?
            .to_string();
        let pod_ip = sandbox["status"]["podIP"]
            .as_str()
            .context("the template's pod IP")?
            .to_string();
        let (object, status) = split(sandbox);
        let mut children = Vec::new();
        for resource in [
            Resource::PersistentVolumeClaim,
            Resource::Secret,
            Resource::NetworkPolicy,
            Resource::Pod,
        ] {
            for child in cluster.objects(resource) {
                let (object, status) = split(child);
                // Only a Pod's status is the kubelet's to copy; PVCs bind at creation.
                let status = status.filter(|_| resource == Resource::Pod);
                children.push((resource, object.to_string(), status.map(|s| s.to_string())));
            }
        }
        if children.len() != 5 {
            bail!(
                "the template sandbox has {} children, not 5",
                children.len()
            );
        }
        Ok(Self {
            sandbox: object.to_string(),
            status: status.context("the template's status")?.to_string(),
            children,
            uid,
            pod_ip,
        })
    }

    /// The JSON size of one converged sandbox's six objects, as a list sends them.
    pub fn json_bytes(&self) -> usize {
        self.sandbox.len()
            + self.status.len()
            + self
                .children
                .iter()
                .map(|(_, object, status)| object.len() + status.as_ref().map_or(0, String::len))
                .sum::<usize>()
    }

    /// Inserts `count` converged sandboxes named [`sandbox_name`]`(first..)` with their
    /// children, as the API server would hold them; the writes are not logged as clients'.
    ///
    /// Runs on a thread of its own, outside any tokio runtime: there the cluster's kubelet
    /// starts a seeded Pod at once (whatever its start delay) rather than on a timer that would
    /// later overwrite the status copied into it.
    pub fn seed(&self, cluster: &MemoryCluster, first: usize, count: usize) -> Result<()> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| self.seed_here(cluster, first, count))
                .join()
                .map_err(|_| anyhow::anyhow!("the seeding thread panicked"))?
        })
    }

    fn seed_here(&self, cluster: &MemoryCluster, first: usize, count: usize) -> Result<()> {
        for i in first..first + count {
            let name = sandbox_name(i);
            let ip = format!(
                "10.{}.{}.{}",
                100 + (i >> 16) % 100,
                (i >> 8) & 255,
                i & 255
            );
            let rename = |text: &str, uid: Option<&str>| -> Result<Value> {
                let mut text = text
                    .replace(TEMPLATE_NAME, &name)
                    .replace(&format!("\"{}\"", self.pod_ip), &format!("\"{ip}\""));
                if let Some(uid) = uid {
                    text = text.replace(&format!("\"{}\"", self.uid), &format!("\"{uid}\""));
                }
                serde_json::from_str(&text).context("a renamed template object")
            };
            let stored = cluster
                .insert(Resource::Sandbox, rename(&self.sandbox, None)?)
                .map_err(|e| anyhow::anyhow!("seeding sandbox {name}: {e}"))?;
            let uid = stored["metadata"]["uid"]
                .as_str()
                .context("a seeded sandbox's uid")?
                .to_string();
            let status = rename(&self.status, None)?;
            cluster
                .patch_status(Resource::Sandbox, NS, &name, json!({ "status": status }))
                .now()?
                .map_err(|e| anyhow::anyhow!("seeding the status of {name}: {e}"))?;
            for (resource, object, status) in &self.children {
                let mut object = rename(object, Some(&uid))?;
                if *resource == Resource::NetworkPolicy {
                    // Its spec names the sandbox's Pod: the digest the policy compares changes
                    // with the name.
                    let hash = cubepod_policy_sdk::manifest::spec_hash(&object["spec"]);
                    object["metadata"]["annotations"][SPEC_HASH_ANNOTATION] = Value::String(hash);
                }
                let child = object["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                cluster
                    .insert(*resource, object)
                    .map_err(|e| anyhow::anyhow!("seeding {resource:?} {child}: {e}"))?;
                if let Some(status) = status {
                    let status = rename(status, Some(&uid))?;
                    cluster
                        .patch_status(*resource, NS, &child, json!({ "status": status }))
                        .now()?
                        .map_err(|e| anyhow::anyhow!("seeding the status of {child}: {e}"))?;
                }
            }
        }
        cluster.clear_writes();
        // The seeding's garbage (renamed copies, parse buffers) back to the system, so that this
        // process's footprint is the fake's objects, not the way they were made.
        cubepod_host::allocator::trim();
        Ok(())
    }
}
