//! Leader election: of two replicas at most one leads at any moment, and when the leader stops
//! the other takes over.

use std::sync::Arc;
use std::time::Duration;

use cubepod_apiserver::{MemoryCluster, MemoryClusterConfig};
use cubepod_host::controller::leader::{ElectionConfig, LeaderElection, LeaderState, Leadership};
use tokio::sync::watch;

fn config(identity: &str) -> ElectionConfig {
    ElectionConfig {
        namespace: "cubepod-system".to_string(),
        name: "cubepod-controller".to_string(),
        identity: identity.to_string(),
        lease_duration: Duration::from_millis(1500),
        renew_deadline: Duration::from_millis(1000),
        retry_period: Duration::from_millis(100),
    }
}

fn replica(
    cluster: &Arc<MemoryCluster>,
    identity: &str,
) -> (
    Arc<Leadership>,
    watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
) {
    let leadership = Leadership::new(LeaderState::Following { holder: None });
    let (stop, shutdown) = watch::channel(false);
    let election = LeaderElection::new(cluster.clone(), config(identity), leadership.clone());
    (leadership, stop, tokio::spawn(election.run(shutdown)))
}

async fn until(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Samples both replicas for a while: never both leading.
async fn never_both(a: &Leadership, b: &Leadership) {
    for _ in 0..150 {
        assert!(
            !(a.may_reconcile() && b.may_reconcile()),
            "both replicas lead at once: {:?} {:?}",
            a.state(),
            b.state()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_takes_over_when_the_leader_steps_down() {
    let cluster = MemoryCluster::new(MemoryClusterConfig::instant());
    let (a, stop_a, task_a) = replica(&cluster, "replica-a");
    until("a leads", || a.may_reconcile()).await;
    let (b, _stop_b, _task_b) = replica(&cluster, "replica-b");
    never_both(&a, &b).await;
    assert_eq!(
        b.state(),
        LeaderState::Following {
            holder: Some("replica-a".to_string())
        }
    );

    // A clean stop releases the Lease: b takes over without waiting for it to expire.
    let _ = stop_a.send(true);
    let _ = task_a.await;
    assert!(!a.may_reconcile());
    until("b leads", || b.may_reconcile()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_leader_is_replaced_once_its_lease_expires() {
    let cluster = MemoryCluster::new(MemoryClusterConfig::instant());
    let (a, _stop_a, task_a) = replica(&cluster, "replica-a");
    until("a leads", || a.may_reconcile()).await;
    let (b, _stop_b, _task_b) = replica(&cluster, "replica-b");
    never_both(&a, &b).await;

    // A crash: no release, the Lease just stops being renewed.
    task_a.abort();
    let _ = task_a.await;
    until("b leads after the lease expired", || b.may_reconcile()).await;
    assert_eq!(
        b.state(),
        LeaderState::Leading {
            identity: "replica-b".to_string()
        }
    );
}
