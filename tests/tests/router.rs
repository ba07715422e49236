//! The sandbox router, as a user meets it: the real binary, and curl as the client.
//!
//! - `run` with the embedded cluster serves the router on loopback: a sandbox paused for idleness
//!   is woken by one write however many requests arrive at once, and every one of them gets the
//!   sandbox's answer; an upgrade passes through, bytes both ways; requests held for a sandbox
//!   deleted meanwhile are answered at once.
//! - `cubepod-controller router` against the fake API server, whose tokens and grants the test
//!   sets: no token 401, a tenant's token 403 for another namespace's sandbox whether it exists
//!   or not (the same answer), by host name and by header; malformed names 400; an unknown
//!   sandbox 404 to whoever may see it; a sandbox paused by its spec 409.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cubepod_apiserver::access::Subject;
use cubepod_apiserver::serve::KubeconfigAuth;
use cubepod_kube::Resource;
use cubepod_kube::review::UserInfo;
use cubepod_tests::convergence::{TOKEN, block, fake_server_with_namespaces};
use cubepod_tests::router::{self, curl_answer};
use cubepod_tests::{Controller, binary, free_port, seed_file};
use serde_json::json;

const NS: &str = "cubepod-workloads";
const DOMAIN: &str = "sandboxes.localhost";

/// `curl` of `http://127.0.0.1:<port>/hello` with `headers`: (status, body).
fn curl(port: u16, headers: &[String], timeout: Duration) -> (u16, String) {
    router::curl(port, headers, "/hello", timeout)
}

fn curl_command(port: u16, headers: &[String], timeout: Duration) -> Command {
    router::curl_command(port, headers, "/hello", timeout)
}

fn host(port: u16, sandbox: &str, namespace: &str) -> String {
    format!("Host: {port}-{sandbox}.{namespace}.{DOMAIN}")
}

fn bearer(token: &str) -> String {
    format!("Authorization: Bearer {token}")
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let output = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("run kubectl");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn wait_until(timeout: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One embedded controller at a time: each compiles and self-tests its policy at start, which
/// two at once on a small machine may not finish within the start's patience.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// An embedded `run` with its router on `port` and `extra` flags, seeded with `seed`.
fn embedded(port: u16, seed: &str, extra: &[&str]) -> (Controller, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let seed = seed_file(dir.path(), seed);
    let mut flags = vec![
        format!("--router-listen=127.0.0.1:{port}"),
        format!("--seed={}", seed.display()),
    ];
    flags.extend(extra.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    (Controller::start(&flags), dir)
}

const IDLE: &str = r#"
apiVersion: cubepod.io/v1alpha1
kind: Sandbox
metadata:
  name: sleepy
  namespace: cubepod-workloads
spec:
  image: ghcr.io/cubepod/sandbox-base:1.0
  desiredState: Running
  idleTimeoutSeconds: 15
"#;

#[test]
fn two_hundred_requests_to_an_idle_paused_sandbox_wake_it_once_and_all_get_its_answer() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let port = free_port();
    let (controller, _dir) = embedded(port, IDLE, &[]);
    let kubeconfig = controller.embedded_kubeconfig();
    let token = controller.embedded_token().expect("the embedded token");
    wait_until(Duration::from_secs(60), "the idle pause", || {
        !kubectl(
            &kubeconfig,
            &[
                "get",
                "sandbox",
                "sleepy",
                "-n",
                NS,
                "-o",
                "jsonpath={.status.idlePausedAt}",
            ],
        )
        .trim()
        .is_empty()
            && kubectl(
                &kubeconfig,
                &[
                    "get",
                    "sandbox",
                    "sleepy",
                    "-n",
                    NS,
                    "-o",
                    "jsonpath={.status.phase}",
                ],
            ) == "Paused"
    });
    let headers = [host(8080, "sleepy", NS), bearer(&token)];
    let children: Vec<Child> = (0..200)
        .map(|_| {
            curl_command(port, &headers, Duration::from_secs(60))
                .spawn()
                .expect("spawn curl")
        })
        .collect();
    let answers: Vec<(u16, String)> = children
        .into_iter()
        .map(|child| {
            let output = child.wait_with_output().expect("curl ends");
            curl_answer(&String::from_utf8_lossy(&output.stdout))
        })
        .collect();
    for (status, body) in &answers {
        assert_eq!(*status, 200, "{body}");
        assert!(
            body.starts_with("sandbox sleepy in namespace cubepod-workloads, rootfs generation 1"),
            "{body}"
        );
    }
    // One resume write: one wake logged, one Woken Event.
    let wakes = controller
        .logs()
        .iter()
        .filter(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("a request woke the sandbox"))
        })
        .count();
    assert_eq!(wakes, 1);
    // An upgrade passes through: 101, then bytes both ways.
    let echoed = upgrade_echo(port, "sleepy", &token, "hello through the router");
    assert_eq!(echoed, "hello through the router");
    wait_until(Duration::from_secs(20), "the Woken Event", || {
        kubectl(
            &kubeconfig,
            &[
                "get",
                "events",
                "-n",
                NS,
                "--field-selector",
                "reason=Woken",
                "-o",
                "name",
            ],
        )
        .lines()
        .count()
            == 1
    });
}

/// An `Upgrade: echo` request through the router, by a raw socket (python3): after the 101, the
/// bytes sent come back as the Pod's stand-in echoes them.
fn upgrade_echo(port: u16, sandbox: &str, token: &str, message: &str) -> String {
    let script = r#"
import socket, sys
port, sandbox, token, message = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
s = socket.create_connection(("127.0.0.1", int(port)), timeout=20)
s.sendall((f"GET /ws HTTP/1.1\r\nHost: 8080-{sandbox}.cubepod-workloads.sandboxes.localhost\r\n"
           f"Authorization: Bearer {token}\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n").encode())
head = b""
while b"\r\n\r\n" not in head:
    chunk = s.recv(1)
    if not chunk:
        break
    head += chunk
if not head.startswith(b"HTTP/1.1 101"):
    print("no 101: " + head.decode(errors="replace"))
    sys.exit(0)
s.sendall(message.encode())
got = b""
while len(got) < len(message):
    chunk = s.recv(4096)
    if not chunk:
        break
    got += chunk
print(got.decode(), end="")
"#;
    let output = Command::new("python3")
        .args(["-c", script, &port.to_string(), sandbox, token, message])
        .output()
        .expect("run python3");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn requests_held_for_a_sandbox_deleted_meanwhile_are_answered_at_once() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let port = free_port();
    // Pods take long to start: a new sandbox's requests are held meanwhile.
    let (controller, _dir) = embedded(
        port,
        &IDLE
            .replace("sleepy", "slow")
            .replace("idleTimeoutSeconds: 15", ""),
        &["--pod-start-delay=120s"],
    );
    let kubeconfig = controller.embedded_kubeconfig();
    let token = controller.embedded_token().expect("the embedded token");
    wait_until(Duration::from_secs(30), "the sandbox", || {
        kubectl(
            &kubeconfig,
            &["get", "sandbox", "slow", "-n", NS, "-o", "name"],
        )
        .contains("slow")
    });
    let headers = [host(8080, "slow", NS), bearer(&token)];
    let children: Vec<Child> = (0..20)
        .map(|_| {
            curl_command(port, &headers, Duration::from_secs(60))
                .spawn()
                .expect("spawn curl")
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let deleted = Instant::now();
    kubectl(
        &kubeconfig,
        &["delete", "sandbox", "slow", "-n", NS, "--wait=false"],
    );
    for child in children {
        let output = child.wait_with_output().expect("curl ends");
        let (status, body) = curl_answer(&String::from_utf8_lossy(&output.stdout));
        assert_eq!(status, 404, "{body}");
        assert_eq!(
            body.trim(),
            "no sandbox slow in namespace cubepod-workloads"
        );
    }
    assert!(
        deleted.elapsed() < Duration::from_secs(15),
        "held requests answered {:?} after the delete",
        deleted.elapsed()
    );
}

/// `cubepod-controller router` against the fake API server.
struct Router {
    child: Child,
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn access_is_guarded_and_never_reveals_another_tenants_sandbox() {
    let fake = fake_server_with_namespaces(Duration::ZERO, 1, &["team-a", "team-b"]);
    let access = fake.access();
    access.add_token("alice-token", UserInfo::named("alice", &[]));
    access.allow_in_namespace(
        Subject::User("alice".into()),
        "team-a",
        "cubepod.io",
        &["create"],
        &["sandboxes/proxy"],
    );
    let cluster = fake.cluster();
    for namespace in ["team-a", "team-b"] {
        let sandbox = json!({
            "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
            "metadata": {"name": "box", "namespace": namespace},
            "spec": {"image": "ghcr.io/cubepod/sandbox-base:1.0", "desiredState": "Paused"},
        });
        block(cubepod_kube::Cluster::create(
            &*cluster,
            Resource::Sandbox,
            namespace,
            sandbox,
        ))
        .expect("create sandbox");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = fake
        .write_kubeconfig(dir.path(), &KubeconfigAuth::Token(TOKEN.into()))
        .expect("kubeconfig");
    let port = free_port();
    let _router = Router {
        child: Command::new(binary())
            .args([
                "router",
                &format!("--listen=127.0.0.1:{port}"),
                "--namespaces=team-a,team-b",
                &format!("--router-domain={DOMAIN}"),
            ])
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the router"),
    };
    let ask = |headers: &[String]| curl(port, headers, Duration::from_secs(10));
    wait_until(Duration::from_secs(30), "the router's cache", || {
        ask(&[host(80, "x", "team-a"), bearer("")]).0 == 401 && curl_path(port, "/readyz").0 == 200
    });

    let alice = bearer("alice-token");
    // Her own sandbox, by host name and by header: past the gate, paused by its spec.
    let (status, body) = ask(&[host(8080, "box", "team-a"), alice.clone()]);
    assert_eq!(status, 409, "{body}");
    assert!(
        body.contains("kubectl patch sandbox box -n team-a"),
        "{body}"
    );
    let by_header = [
        "X-Sandbox-Name: box".to_owned(),
        "X-Sandbox-Namespace: team-a".to_owned(),
        "X-Sandbox-Port: 8080".to_owned(),
        alice.clone(),
    ];
    assert_eq!(ask(&by_header).0, 409);
    // Another tenant's, existing or not, by host or by header: the same 403.
    let existing = ask(&[host(8080, "box", "team-b"), alice.clone()]);
    let missing = ask(&[host(8080, "nothing", "team-b"), alice.clone()]);
    assert_eq!(existing.0, 403, "{}", existing.1);
    assert_eq!(existing, missing);
    let mut header_b = by_header.clone();
    header_b[1] = "X-Sandbox-Namespace: team-b".to_owned();
    let by_header_existing = ask(&header_b);
    assert_eq!(by_header_existing.0, 403);
    header_b[0] = "X-Sandbox-Name: nothing".to_owned();
    assert_eq!(by_header_existing, ask(&header_b));
    // No token, a token the cluster does not know: 401.
    assert_eq!(ask(&[host(8080, "box", "team-a")]).0, 401);
    assert_eq!(ask(&[host(8080, "box", "team-a"), bearer("forged")]).0, 401);
    // Unknown to whoever may see it: 404.
    let (status, body) = ask(&[host(8080, "nothing", "team-a"), bearer(TOKEN)]);
    assert_eq!(
        (status, body.trim()),
        (404, "no sandbox nothing in namespace team-a")
    );
    // Malformed: 400, before any token is looked at.
    for bad in [
        vec![host(8080, "Bad_Name", "team-a")],
        vec![host(0, "box", "team-a")],
        vec!["Host: example.com".to_owned()],
        vec![
            "X-Sandbox-Name: box".to_owned(),
            "X-Sandbox-Namespace: team-a".to_owned(),
        ],
    ] {
        let (status, body) = ask(&bad);
        assert_eq!(status, 400, "{bad:?}: {body}");
    }
}

fn curl_path(port: u16, path: &str) -> (u16, String) {
    let output = Command::new("curl")
        .args(["-s", "-m", "5", "-w", "\n%{http_code}"])
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .expect("run curl");
    curl_answer(&String::from_utf8_lossy(&output.stdout))
}
