//! The sandbox router under concurrency and faults, as an operator would run it: real
//! `cubepod-controller router` processes against an API server, real clients.
//!
//! - Two router replicas under 1,000 requests/s spread over 50 sandboxes: together they write
//!   each sandbox's `cubepod.io/last-activity` at most once per `--activity-interval`, as the
//!   API server's log of requests counts the writes.
//! - A router killed (SIGKILL) while it holds requests for a sandbox it is waking, then
//!   restarted: its held requests fail as connections (never a wrong answer), every 200 it gave
//!   carried the sandbox's body, the sandbox finishes waking, and new requests get its answer.
//!
//! The API server is the fake (an in-memory cluster served over HTTPS) with its Pod IPs on a
//! loopback range, each served at its own address as the simulated kubelet's stand-in: a
//! router in another process dials a Pod's IP directly, as it does in a cluster.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cubepod_apiserver::MemoryCluster;
use cubepod_apiserver::serve::KubeconfigAuth;
use cubepod_kube::Resource;
use cubepod_policy_host::model::time;
use cubepod_policy_sdk::names::API_VERSION;
use cubepod_tests::convergence::TOKEN;
use cubepod_tests::router::{
    Connection, RouterProcess, answer_of, curl, curl_answer, curl_command, fake_api, host,
    sandbox_with_pod, serve_pod_ips,
};
use cubepod_tests::{Controller, binary, free_port};
use hyper::Method;
use serde_json::{Value, json};

/// One test at a time: the load test's rate needs the machine's cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// What one client connection saw: 200s with the right body per sandbox, and anything else.
#[derive(Default)]
struct Tally {
    answered: BTreeMap<String, u64>,
    wrong: Vec<String>,
}

/// Sends requests over one keep-alive connection to the router at `port`, every `period`,
/// until `until`, for the sandboxes `pick` names by request number, to their Pods' `pod_port`.
async fn drive(
    port: u16,
    pod_port: u16,
    namespace: String,
    period: Duration,
    until: tokio::time::Instant,
    pick: impl Fn(u64) -> String,
) -> Tally {
    let mut tally = Tally::default();
    let mut connection = Connection::open(SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .expect("connect to the router");
    let mut ticks = tokio::time::interval(period);
    let mut n = 0;
    while tokio::time::Instant::now() < until {
        ticks.tick().await;
        let sandbox = pick(n);
        n += 1;
        let answer = connection
            .get(&host(pod_port, &sandbox, &namespace), "/load")
            .await;
        match answer {
            Ok((200, _, body)) if body.starts_with(answer_of(&sandbox, &namespace).as_bytes()) => {
                *tally.answered.entry(sandbox).or_default() += 1;
            }
            Ok((status, _, body)) => tally.wrong.push(format!(
                "{sandbox}: {status} {}",
                String::from_utf8_lossy(&body).trim()
            )),
            Err(error) => {
                tally.wrong.push(format!("{sandbox}: {error:#}"));
                break;
            }
        }
    }
    tally
}

#[test]
fn two_router_replicas_under_load_write_each_sandboxs_activity_at_most_once_per_interval() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    const NS: &str = "load";
    const SANDBOXES: u64 = 50;
    const RATE: u64 = 1_000;
    const CONNECTIONS: u64 = 20;
    const LOAD: Duration = Duration::from_secs(60);
    const INTERVAL: Duration = Duration::from_secs(5);

    let network = Ipv4Addr::new(127, 11, 0, 0);
    let fake = fake_api(NS, Duration::ZERO, network).expect("fake API server");
    let cluster = fake.cluster();
    let runtime = runtime();
    let names: Vec<String> = (0..SANDBOXES).map(|i| format!("s{i:02}")).collect();
    let pod_port = runtime.block_on(async {
        let pod_port = serve_pod_ips(&cluster, network, SANDBOXES as u16)
            .await
            .expect("serve the Pod IPs");
        for name in &names {
            sandbox_with_pod(&cluster, NS, name)
                .await
                .expect("a sandbox and its Pod");
        }
        pod_port
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = fake
        .write_kubeconfig(dir.path(), &KubeconfigAuth::Token(TOKEN.into()))
        .expect("kubeconfig");
    let interval = format!("--activity-interval={}s", INTERVAL.as_secs());
    let replica = || {
        RouterProcess::start(
            &binary(),
            &kubeconfig,
            dir.path(),
            free_port(),
            NS,
            &[&interval],
        )
        .expect("a router replica")
    };
    let replicas = [replica(), replica()];

    fake.clear_requests();
    let started = Instant::now();
    let tallies = runtime.block_on(async {
        let until = tokio::time::Instant::now() + LOAD;
        let period = Duration::from_micros(1_000_000 * CONNECTIONS / RATE);
        let drivers: Vec<_> = (0..CONNECTIONS)
            .map(|c| {
                // Half the connections to each replica; each sandbox reached through both.
                let port = replicas[(c % 2) as usize].port;
                let names = names.clone();
                tokio::spawn(drive(
                    port,
                    pod_port,
                    NS.to_owned(),
                    period,
                    until,
                    move |n| names[((n * CONNECTIONS + c) % SANDBOXES) as usize].clone(),
                ))
            })
            .collect();
        let mut tallies = Vec::new();
        for driver in drivers {
            tallies.push(driver.await.expect("a load driver"));
        }
        tallies
    });
    // The last writes, spawned by the last requests, land.
    std::thread::sleep(Duration::from_secs(1));
    let window = started.elapsed();

    let wrong: Vec<&String> = tallies.iter().flat_map(|t| &t.wrong).collect();
    assert!(
        wrong.is_empty(),
        "{} requests not answered by their sandbox, first: {}",
        wrong.len(),
        wrong[0]
    );
    let mut answered: BTreeMap<&str, u64> = BTreeMap::new();
    for tally in &tallies {
        for (sandbox, count) in &tally.answered {
            *answered.entry(sandbox.as_str()).or_default() += count;
        }
    }
    let total: u64 = answered.values().sum();
    let rate = total as f64 / LOAD.as_secs_f64();
    // Below this, a sandbox might not be reached through both replicas in every interval,
    // and the bound would hold for want of traffic.
    assert!(
        rate >= 0.25 * RATE as f64,
        "the load reached {rate:.0} requests/s, not near {RATE}: the machine is too busy for \
         the bound to mean much"
    );

    // Each write of the activity, as the API server's log of requests shows it: a PATCH of
    // the Sandbox that succeeded.
    let mut writes: BTreeMap<String, u64> = BTreeMap::new();
    for request in fake.requests() {
        if request.method == Method::PATCH
            && request.resource == Some(Resource::Sandbox)
            && request.status == Some(200)
        {
            let name = request.path.rsplit('/').next().unwrap_or_default();
            *writes.entry(name.to_owned()).or_default() += 1;
        }
    }
    let bound = window.as_secs().div_ceil(INTERVAL.as_secs()) + 1;
    // Traffic reached every sandbox all along: its activity was recorded in most intervals.
    let least = LOAD.as_secs() / INTERVAL.as_secs() / 2;
    for name in &names {
        let sent = answered.get(name.as_str()).copied().unwrap_or(0);
        let written = writes.get(name).copied().unwrap_or(0);
        assert!(
            written <= bound,
            "sandbox {name}: {written} activity writes in {window:?} from two replicas, more \
             than one per {INTERVAL:?} ({bound}); it was sent {sent} requests"
        );
        assert!(
            written >= least,
            "sandbox {name}: {written} activity writes in {window:?}, fewer than {least}: \
             traffic was not recorded as activity ({sent} requests)"
        );
    }
    eprintln!(
        "{total} requests ({rate:.0}/s) over {} sandboxes through two replicas: {} activity \
         writes in all, at most {} per sandbox (bound {bound})",
        names.len(),
        writes.values().sum::<u64>(),
        writes.values().max().copied().unwrap_or(0)
    );
}

const SLEEPY: &str = "sleepy";
const AWAKE: &str = "awake";
const WORKLOADS: &str = "cubepod-workloads";

fn sandbox(cluster: &MemoryCluster, name: &str) -> Option<Value> {
    cluster
        .objects(Resource::Sandbox)
        .into_iter()
        .find(|s| s.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
}

fn text<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object.pointer(pointer).and_then(Value::as_str)
}

/// Whether the Pod of sandbox `name` is Running and Ready.
fn pod_ready(cluster: &MemoryCluster, name: &str) -> bool {
    cluster.objects(Resource::Pod).iter().any(|pod| {
        text(pod, "/metadata/labels/cubepod.io~1sandbox") == Some(name)
            && text(pod, "/metadata/deletionTimestamp").is_none()
            && text(pod, "/status/phase") == Some("Running")
            && pod
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|conditions| {
                    conditions.iter().any(|c| {
                        text(c, "/type") == Some("Ready") && text(c, "/status") == Some("True")
                    })
                })
    })
}

fn wait_until(timeout: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_router_killed_mid_wake_loses_no_answer_and_the_sandbox_finishes_waking_after_restart() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // Pods take 3 s to start: the wake is under way for that long.
    let network = Ipv4Addr::new(127, 12, 0, 0);
    let fake = fake_api(WORKLOADS, Duration::from_secs(3), network).expect("fake API server");
    let cluster = fake.cluster();
    let runtime = runtime();
    let pod_port = runtime
        .block_on(serve_pod_ips(&cluster, network, 8))
        .expect("serve the Pod IPs");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = fake
        .write_kubeconfig(dir.path(), &KubeconfigAuth::Token(TOKEN.into()))
        .expect("kubeconfig");
    let controller = Controller::start_with_kubeconfig(&kubeconfig, &[]);
    controller.wait_for("/readyz", Duration::from_secs(60), |status, _| {
        status == 200
    });
    for (name, spec) in [
        (
            SLEEPY,
            json!({"image": "ghcr.io/cubepod/sandbox-base:1.0", "desiredState": "Running", "idleTimeoutSeconds": 6}),
        ),
        (
            AWAKE,
            json!({"image": "ghcr.io/cubepod/sandbox-base:1.0", "desiredState": "Running"}),
        ),
    ] {
        runtime
            .block_on(cubepod_kube::Cluster::create(
                &*cluster,
                Resource::Sandbox,
                WORKLOADS,
                json!({"apiVersion": API_VERSION, "kind": "Sandbox",
                    "metadata": {"name": name, "namespace": WORKLOADS}, "spec": spec}),
            ))
            .expect("create sandbox");
    }
    let stamp =
        |object: &Value, pointer: &str| text(object, pointer).and_then(|t| time::parse(t).ok());
    let mut paused_at = None;
    wait_until(Duration::from_secs(60), "the idle pause", || {
        paused_at = sandbox(&cluster, SLEEPY)
            .filter(|s| text(s, "/status/phase") == Some("Paused"))
            .and_then(|s| stamp(&s, "/status/idlePausedAt"));
        paused_at.is_some() && pod_ready(&cluster, AWAKE)
    });
    let paused_at = paused_at.expect("the idle pause's time");
    let port = free_port();
    let start_router = || {
        RouterProcess::start(&binary(), &kubeconfig, dir.path(), port, WORKLOADS, &[])
            .expect("the router")
    };
    let mut router = start_router();
    let bearer = format!("Authorization: Bearer {TOKEN}");
    let to = |name: &str| {
        [
            format!("Host: {}", host(pod_port, name, WORKLOADS)),
            bearer.clone(),
        ]
    };
    let answer = |name: &str| answer_of(name, WORKLOADS);

    // Requests for the awake sandbox all along, through the kill.
    let stop = Arc::new(AtomicBool::new(false));
    let steady = {
        let stop = stop.clone();
        let headers = to(AWAKE);
        std::thread::spawn(move || {
            let mut answers = Vec::new();
            while !stop.load(Ordering::Acquire) {
                answers.push(curl(port, &headers, "/steady", Duration::from_secs(10)));
                std::thread::sleep(Duration::from_millis(20));
            }
            answers
        })
    };
    // Requests for the paused one: held while it wakes.
    let held: Vec<Child> = (0..20)
        .map(|_| {
            curl_command(port, &to(SLEEPY), "/held", Duration::from_secs(30))
                .spawn()
                .expect("spawn curl")
        })
        .collect();
    // The wake's write landed (activity after the pause), and its Pod is not Ready yet.
    wait_until(Duration::from_secs(10), "the wake's write", || {
        sandbox(&cluster, SLEEPY)
            .and_then(|s| stamp(&s, "/metadata/annotations/cubepod.io~1last-activity"))
            .is_some_and(|activity| activity > paused_at)
    });
    assert!(
        !pod_ready(&cluster, SLEEPY),
        "the sandbox was Ready before the router was killed: nothing was mid-wake"
    );
    router.kill();
    let killed = Instant::now();
    for child in held {
        let output = child.wait_with_output().expect("curl ends");
        let (status, body) = curl_answer(&String::from_utf8_lossy(&output.stdout));
        assert!(
            status == 0 || (status == 200 && body.starts_with(&answer(SLEEPY))),
            "a request held when the router was killed got {status} {body}"
        );
    }
    assert!(
        killed.elapsed() < Duration::from_secs(5),
        "held requests were left hanging after the kill"
    );

    // Restarted on the same address: the sandbox finishes waking, and answers.
    let router = start_router();
    let (status, body) = curl(port, &to(SLEEPY), "/after", Duration::from_secs(30));
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with(&answer(SLEEPY)), "{body}");
    stop.store(true, Ordering::Release);
    let answers = steady.join().expect("the steady client");
    let answered = answers.iter().filter(|(status, _)| *status == 200).count();
    for (status, body) in &answers {
        assert!(
            *status == 0 || (*status == 200 && body.starts_with(&answer(AWAKE))),
            "a request to the awake sandbox got {status} {body}"
        );
    }
    assert!(answered > 0, "no request to the awake sandbox was answered");
    // Not half-woken: Running, its pause cleared, its Pod Ready.
    wait_until(Duration::from_secs(20), "the sandbox to be Running", || {
        sandbox(&cluster, SLEEPY).is_some_and(|s| {
            text(&s, "/status/phase") == Some("Running")
                && text(&s, "/status/idlePausedAt").is_none()
        }) && pod_ready(&cluster, SLEEPY)
    });
    drop(router);
}
