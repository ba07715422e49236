//! The real binary against a Kubernetes API over HTTPS: a stateful fake API server with a CA
//! made by the test, reached through a kubeconfig, as a cluster would be.

use std::time::Duration;

use cubepod_apiserver::MemoryClusterConfig;
use cubepod_kube::{Cluster, Resource};
use cubepod_tests::Controller;
use cubepod_tests::apiserver::{DEFAULT_SEED, FakeApiServer, FakeOptions, KubeconfigAuth};
use cubepod_tests::convergence::{
    self, NS, TOKEN, assert_converged, block, create_sandbox, fake_server, names, running,
};
use serde_json::json;

const PATIENCE: Duration = Duration::from_secs(60);

fn server() -> FakeApiServer {
    fake_server(Duration::from_millis(50), DEFAULT_SEED)
}

fn until(what: &str, check: impl Fn() -> bool) {
    convergence::until(what, PATIENCE, check);
}

#[test]
fn a_sandbox_gets_its_children_and_a_true_status_then_goes_with_them() {
    let fake = server();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = fake
        .write_kubeconfig(dir.path(), &KubeconfigAuth::Token(TOKEN.to_string()))
        .unwrap();
    let controller = Controller::start_with_kubeconfig(&kubeconfig, &[]);
    let ready = controller.wait_for("/readyz", PATIENCE, |status, _| status == 200);
    assert!(ready.contains("cache: synced"), "{ready}");
    let cluster = fake.cluster();

    cluster.clear_writes();
    create_sandbox(&cluster, "a");
    until("a runs", || running(&cluster) == 1);
    assert_converged(&cluster, &["a".to_string()]);
    // Seven writes from the controller for a new sandbox, no more: the finalizer, two PVCs,
    // the Secret, the NetworkPolicy, the Pod and one status; and one Normal Event, that it
    // started.
    std::thread::sleep(Duration::from_millis(500));
    let (events, others): (Vec<_>, Vec<_>) = cluster
        .writes()
        .into_iter()
        .partition(|w| w.resource == Resource::Event);
    assert_eq!(events.len(), 1, "{events:?}");
    let posted = cluster.objects(Resource::Event);
    assert_eq!(posted.len(), 1, "{posted:?}");
    assert_eq!(posted[0]["type"], "Normal");
    let mut writes: Vec<String> = others
        .iter()
        .map(|w| format!("{} {} {}", w.verb, w.resource, w.name))
        .collect();
    writes.sort();
    assert_eq!(
        writes,
        [
            "create networkpolicies a-network",
            "create persistentvolumeclaims a-rootfs-g1",
            "create persistentvolumeclaims a-workspace",
            "create pods a",
            "create sandboxes a", // the test's own
            "create secrets a-credentials",
            "patch sandboxes a",
            "patch_status sandboxes a",
        ]
    );
    let a = block(cluster.get(Resource::Sandbox, NS, "a")).unwrap();
    assert_eq!(a["metadata"]["finalizers"], json!(["cubepod.io/cleanup"]));
    assert_eq!(a["status"]["rootfsPVC"], "a-rootfs-g1");
    assert_eq!(a["status"]["workspacePVC"], "a-workspace");
    assert!(a["status"]["podIP"].is_string());
    let pvc = block(cluster.get(Resource::PersistentVolumeClaim, NS, "a-rootfs-g1")).unwrap();
    assert_eq!(pvc["spec"]["volumeMode"], "Block");

    // Every request went over HTTP/2 with TLS, authenticated.
    assert!(
        fake.requests()
            .iter()
            .all(|r| r.version == hyper::Version::HTTP_2),
        "connections are HTTP/2 and reused"
    );

    block(cluster.delete(Resource::Sandbox, NS, "a")).unwrap();
    until("a and its children are gone", || {
        names(&cluster, Resource::Sandbox).is_empty()
            && names(&cluster, Resource::Pod).is_empty()
            && names(&cluster, Resource::PersistentVolumeClaim).is_empty()
            && names(&cluster, Resource::Secret).is_empty()
            && names(&cluster, Resource::NetworkPolicy).is_empty()
    });
}

#[test]
fn killed_mid_way_and_restarted_it_converges_with_nothing_duplicated_or_orphaned() {
    let fake = server();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = fake
        .write_kubeconfig(dir.path(), &KubeconfigAuth::Token(TOKEN.to_string()))
        .unwrap();
    let cluster = fake.cluster();
    let sandboxes: Vec<String> = (0..30).map(|i| format!("s{i:02}")).collect();
    for name in &sandboxes {
        create_sandbox(&cluster, name);
    }

    let mut first = Controller::start_with_kubeconfig(&kubeconfig, &["--concurrency=2"]);
    until("some children exist", || {
        cluster.count(Resource::PersistentVolumeClaim) >= 6
    });
    first.kill();
    assert!(
        running(&cluster) < sandboxes.len(),
        "killed before it finished"
    );

    let second = Controller::start_with_kubeconfig(&kubeconfig, &[]);
    until("every sandbox runs", || {
        running(&cluster) == sandboxes.len()
    });
    assert_converged(&cluster, &sandboxes);
    drop(second);

    // A resync of converged objects writes nothing: a third controller lists and reconciles
    // everything again.
    cluster.clear_writes();
    let third = Controller::start_with_kubeconfig(&kubeconfig, &[]);
    third.wait_for("/readyz", PATIENCE, |status, _| status == 200);
    std::thread::sleep(Duration::from_secs(2));
    let writes: Vec<String> = cluster
        .writes()
        .iter()
        .filter(|w| w.resource != Resource::Event)
        .map(|w| format!("{} {} {}", w.verb, w.resource, w.name))
        .collect();
    let logs: Vec<String> = third
        .logs()
        .iter()
        .map(|l| l.to_string())
        .take(40)
        .collect();
    assert!(
        writes.is_empty(),
        "a converged resync wrote: {writes:?}\n{logs:#?}"
    );
    assert_converged(&cluster, &sandboxes);
}

#[test]
fn a_wrong_ca_is_refused_with_a_clear_error() {
    let fake = server();
    let other = server();
    let dir = tempfile::tempdir().unwrap();
    // A kubeconfig naming `fake` but trusting `other`'s CA.
    let kubeconfig = other
        .write_kubeconfig(dir.path(), &KubeconfigAuth::Token(TOKEN.to_string()))
        .unwrap();
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    let text = text.replace(&other.url(), &fake.url());
    std::fs::write(&kubeconfig, text).unwrap();
    let mut controller = Controller::start_with_kubeconfig(&kubeconfig, &[]);
    let status = controller
        .wait_exit(PATIENCE)
        .expect("exits at start when the server cannot be trusted");
    assert!(!status.success());
    let stderr = controller.stderr();
    assert!(
        stderr.contains("certificate") || stderr.contains("UnknownIssuer"),
        "the error names the certificate problem: {stderr}"
    );
}

#[test]
fn a_missing_crd_stops_the_start_with_the_command_that_installs_it() {
    let fake = server();
    fake.set_crds_installed(false);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = fake
        .write_kubeconfig(dir.path(), &KubeconfigAuth::Token(TOKEN.to_string()))
        .unwrap();
    let mut controller = Controller::start_with_kubeconfig(&kubeconfig, &[]);
    let status = controller.wait_exit(PATIENCE).expect("exits at start");
    assert!(!status.success());
    let stderr = controller.stderr();
    assert!(stderr.contains("kubectl apply -k deploy/"), "{stderr}");
}

#[test]
fn two_replicas_never_both_reconcile_and_the_survivor_takes_over() {
    let fake = server();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = fake
        .write_kubeconfig(dir.path(), &KubeconfigAuth::Token(TOKEN.to_string()))
        .unwrap();
    let election = [
        "--leader-elect",
        "--lease-duration=2s",
        "--lease-renew-deadline=1500ms",
        "--lease-retry-period=200ms",
    ];
    let a = Controller::start_with_kubeconfig(
        &kubeconfig,
        &[&election[..], &["--identity=a"]].concat(),
    );
    let b = Controller::start_with_kubeconfig(
        &kubeconfig,
        &[&election[..], &["--identity=b"]].concat(),
    );
    let leader_of = |c: &Controller| {
        c.get("/readyz")
            .map(|(_, body)| body.contains("leader: yes"))
            .unwrap_or(false)
    };
    until("one replica leads", || leader_of(&a) || leader_of(&b));
    for _ in 0..20 {
        assert!(!(leader_of(&a) && leader_of(&b)), "both lead");
        std::thread::sleep(Duration::from_millis(100));
    }
    let cluster = fake.cluster();
    create_sandbox(&cluster, "x");
    until("x runs", || running(&cluster) == 1);

    // Kill the leader outright; the other takes over once the lease expires.
    let (mut leader, follower) = if leader_of(&a) { (a, b) } else { (b, a) };
    leader.kill();
    until("the survivor leads", || leader_of(&follower));
    create_sandbox(&cluster, "y");
    until("y runs under the new leader", || running(&cluster) == 2);
}

#[test]
fn a_replica_whose_module_is_refused_waits_without_touching_the_cluster() {
    let fake = server();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = fake
        .write_kubeconfig(dir.path(), &KubeconfigAuth::Token(TOKEN.to_string()))
        .unwrap();
    let election = [
        "--leader-elect",
        "--lease-duration=2s",
        "--lease-renew-deadline=1500ms",
        "--lease-retry-period=200ms",
    ];
    let bad = format!(
        "--policy={}",
        cubepod_tests::faulty_policy_variant("nonconforming").display()
    );
    let refused_replica = |identity: &str| {
        let replica = Controller::start_with_kubeconfig(
            &kubeconfig,
            &[&election[..], &[identity, bad.as_str()]].concat(),
        );
        replica.wait_for("/readyz", PATIENCE, |status, body| {
            status == 503 && body.contains("refused (self_test)")
        });
        replica
    };

    // Alone: only the preflight's reads reach the API server; no Lease is taken, no watch
    // started, nothing written.
    let mut b = refused_replica("--identity=b");
    std::thread::sleep(Duration::from_secs(2));
    let requests = fake.requests();
    assert!(!requests.is_empty(), "the preflight reads");
    assert!(
        requests
            .iter()
            .all(|r| r.method == "GET" && !r.watch && r.resource != Some(Resource::Lease)),
        "{requests:?}"
    );
    assert!(b.child.try_wait().unwrap().is_none(), "it waits, not exits");
    b.kill();

    // Beside a healthy leader: it leads on, and reconciles, while the other waits with the bad
    // module.
    let a = Controller::start_with_kubeconfig(
        &kubeconfig,
        &[&election[..], &["--identity=a"]].concat(),
    );
    let leads = || {
        a.get("/readyz")
            .map(|(_, body)| body.contains("leader: yes"))
            .unwrap_or(false)
    };
    until("a leads", leads);
    let cluster = fake.cluster();
    let holder = || {
        block(cluster.get(Resource::Lease, "cubepod-system", "cubepod-controller"))
            .map(|lease| lease["spec"]["holderIdentity"].clone())
    };
    let b = refused_replica("--identity=b");
    // Past a Lease's duration: b never tries for it.
    std::thread::sleep(Duration::from_secs(3));
    assert!(leads(), "a still leads");
    assert_eq!(holder().ok(), Some(json!("a")));
    create_sandbox(&cluster, "x");
    until("x runs", || running(&cluster) == 1);
    let (status, _) = b.get("/readyz").unwrap();
    assert_eq!(status, 503, "b waits on");
}

#[test]
fn watches_that_end_or_expire_lose_no_change() {
    let fake = server();
    // Every watch stream ends after a few events, as a server timeout or a load balancer would
    // end it: the controller must resume from the last version it saw.
    fake.faults().add(
        cubepod_tests::apiserver::FaultRule::new(
            cubepod_tests::apiserver::FaultAction::EndWatchAfter(3),
        )
        .watch(true),
    );
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = fake
        .write_kubeconfig(dir.path(), &KubeconfigAuth::Token(TOKEN.to_string()))
        .unwrap();
    let controller = Controller::start_with_kubeconfig(&kubeconfig, &[]);
    controller.wait_for("/readyz", PATIENCE, |status, _| status == 200);
    let cluster = fake.cluster();
    let sandboxes: Vec<String> = (0..20).map(|i| format!("w{i:02}")).collect();
    for (i, name) in sandboxes.iter().enumerate() {
        create_sandbox(&cluster, name);
        if i % 5 == 4 {
            // The history a resume needs is gone: the next resume gets 410 Gone and lists again.
            cluster.compact();
            cluster.end_watches();
        }
    }
    until("every sandbox runs", || {
        running(&cluster) == sandboxes.len()
    });
    assert_converged(&cluster, &sandboxes);
    let resumed_watches = fake.requests().iter().filter(|r| r.watch).count();
    assert!(
        resumed_watches > 10,
        "the watches were ended and resumed: {resumed_watches}"
    );
}

/// Against a server that opens a watch only for `watch=true` (as some API emulators read the
/// query) and answers anything else with a list, the controller still sees what changes after
/// its list: it asks for watches as client-go does.
#[test]
fn watches_are_asked_for_as_client_go_asks_for_them() {
    let fake = FakeApiServer::start(FakeOptions {
        token: Some(TOKEN.to_string()),
        cluster_config: MemoryClusterConfig {
            pod_start_delay: Duration::from_millis(50),
            pod_stop_delay: Duration::from_millis(50),
            ..MemoryClusterConfig::default()
        },
        watch_true_only: true,
        ..FakeOptions::default()
    })
    .expect("fake API server");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = fake
        .write_kubeconfig(dir.path(), &KubeconfigAuth::Token(TOKEN.to_string()))
        .unwrap();
    let controller = Controller::start_with_kubeconfig(&kubeconfig, &[]);
    controller.wait_for("/readyz", PATIENCE, |status, _| status == 200);
    let cluster = fake.cluster();

    // Created after the controller's list: only a watch shows it.
    create_sandbox(&cluster, "late");
    until("the sandbox created after the list runs", || {
        running(&cluster) == 1
    });
    assert_converged(&cluster, &["late".to_string()]);
    assert!(
        fake.requests()
            .iter()
            .any(|r| r.watch && r.resource == Some(Resource::Sandbox)),
        "the Sandbox watch was served as a watch"
    );
}
