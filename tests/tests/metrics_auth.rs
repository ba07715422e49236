//! `/metrics` as an operator reaches it, with curl: over HTTPS on `--metrics-listen`, refused
//! without a token the cluster authenticates (401) and to a user the cluster does not allow to
//! get `/metrics` (403), served to one it allows; the reviews asked once, not at every scrape;
//! the probes plain on `--listen`. The embedded demo's `/metrics` stays plain on loopback, as
//! the README reads it, and secure on request.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use cubepod_apiserver::access::Subject;
use cubepod_kube::review::{SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS, UserInfo};
use cubepod_tests::apiserver::{FakeApiServer, KubeconfigAuth, PROMETHEUS_TOKEN};
use cubepod_tests::convergence::{TOKEN, fake_server};
use cubepod_tests::{Controller, binary, http_get, metric};

const PATIENCE: Duration = Duration::from_secs(60);

/// `curl` with `args`: (HTTP status, body). Fails the test, saying so, when curl is missing.
fn curl(args: &[&str]) -> (u16, String) {
    let output = Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "20"])
        .args(["--write-out", "\n%{http_code}"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("curl runs: install it (.ci/run does where it is missing)");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    let code = code.trim().parse().unwrap_or(0);
    assert!(
        code != 0,
        "curl {args:?} got no answer: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    (code, body.to_string())
}

/// `curl -k` of `url` with `token` as the bearer: the ServiceMonitor's scrape.
fn scrape(url: &str, token: Option<&str>) -> (u16, String) {
    let header = token.map(|t| format!("Authorization: Bearer {t}"));
    let mut args = vec!["--insecure", url];
    if let Some(header) = &header {
        args.extend(["--header", header.as_str()]);
    }
    curl(&args)
}

fn reviews(fake: &FakeApiServer, path: &str) -> usize {
    fake.requests().iter().filter(|r| r.path == path).count()
}

fn on_fake(fake: &FakeApiServer, dir: &Path, flags: &[&str]) -> Controller {
    let kubeconfig = fake
        .write_kubeconfig(dir, &KubeconfigAuth::Token(TOKEN.to_string()))
        .unwrap();
    let controller = Controller::start_with_kubeconfig(&kubeconfig, flags);
    controller.wait_for("/readyz", PATIENCE, |status, _| status == 200);
    controller
}

#[test]
fn metrics_refuse_no_token_401_a_user_not_allowed_403_and_serve_an_allowed_one() {
    let fake = fake_server(Duration::from_millis(50), 1);
    let access = fake.access();
    access.add_token("alice-token", UserInfo::named("alice", &["sre"]));
    access.add_token("bob-token", UserInfo::named("bob", &["dev"]));
    access.allow(Subject::Group("sre".into()), &["get"], &["/metrics"]);
    access.allow(Subject::User("bob".into()), &["get"], &["/healthz"]);
    let dir = tempfile::tempdir().unwrap();
    let controller = on_fake(&fake, dir.path(), &[]);
    let url = format!(
        "https://{}/metrics",
        controller.metrics_addr().expect("secure")
    );

    assert_eq!(scrape(&url, None), (401, "Unauthorized\n".to_string()));
    assert_eq!(scrape(&url, Some("no-such-token")).0, 401);
    let (code, body) = scrape(&url, Some("bob-token"));
    assert_eq!(
        (code, body.as_str()),
        (403, "Authorization denied for user bob\n")
    );
    // Plain HTTP to the TLS port gets no metrics.
    let plain = http_get(controller.metrics_addr().expect("secure"), "/metrics");
    assert!(
        plain
            .as_ref()
            .map_or(true, |(_, body)| !body.contains("cubepod_")),
        "{plain:?}"
    );

    // Each scrape every 15 s (here at once) asks nothing more of the API server after the first.
    fake.clear_requests();
    for _ in 0..5 {
        let (code, body) = scrape(&url, Some("alice-token"));
        assert_eq!(code, 200, "{body}");
        assert!(
            metric(&body, "cubepod_queue_depth", &[]).is_some(),
            "{body}"
        );
    }
    assert_eq!(reviews(&fake, TOKEN_REVIEWS), 1);
    assert_eq!(reviews(&fake, SUBJECT_ACCESS_REVIEWS), 1);
    let (code, body) = scrape(&url, Some(PROMETHEUS_TOKEN));
    assert_eq!(code, 200, "{body}");

    // The kubelet's probes stay plain on --listen, where /metrics is not.
    let probes = controller.addr;
    assert_eq!(
        curl(&[&format!("http://{probes}/healthz")]),
        (200, "ok\n".to_string())
    );
    assert_eq!(curl(&[&format!("http://{probes}/readyz")]).0, 200);
    let (code, body) = curl(&[&format!("http://{probes}/metrics")]);
    assert_eq!(code, 404);
    assert!(body.contains("HTTPS"), "{body}");
}

#[test]
fn given_certificate_files_are_served_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    // openssl, not this project's code, makes the CA and the serving pair.
    let openssl = |line: &str| {
        let out = Command::new("openssl")
            .args(line.split_whitespace())
            .current_dir(&certs)
            .output()
            .expect("openssl runs (install it)");
        assert!(
            out.status.success(),
            "openssl {line}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
    openssl(&format!(
        "req -x509 {ec} -keyout ca.key -out ca.crt -subj /CN=test-ca -days 1"
    ));
    openssl(&format!(
        "req {ec} -keyout serving.key -out serving.csr -subj /CN=localhost"
    ));
    std::fs::write(
        certs.join("san.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .unwrap();
    openssl(
        "x509 -req -in serving.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 \
         -extfile san.ext -out serving.crt",
    );

    let fake = fake_server(Duration::from_millis(50), 1);
    let cert_path = format!("--metrics-cert-path={}", certs.display());
    let controller = on_fake(
        &fake,
        dir.path(),
        &[
            &cert_path,
            "--metrics-cert-name=serving.crt",
            "--metrics-cert-key=serving.key",
        ],
    );
    let url = format!(
        "https://{}/metrics",
        controller.metrics_addr().expect("secure")
    );
    let ca = certs.join("ca.crt");
    let ca = ca.to_str().unwrap();
    let bearer = format!("Authorization: Bearer {PROMETHEUS_TOKEN}");
    // No --insecure: the chain and the name are verified against the test CA.
    let (code, body) = curl(&["--cacert", ca, "--header", &bearer, &url]);
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("cubepod_queue_depth"), "{body}");

    let mut refused = Controller::start_with_kubeconfig(
        &dir.path().join("kubeconfig"),
        &["--metrics-cert-path=/no/such/folder"],
    );
    let status = refused.wait_exit(PATIENCE).expect("exits at start");
    assert!(!status.success());
    assert!(
        refused.stderr().contains("/no/such/folder/tls.crt"),
        "{}",
        refused.stderr()
    );
}

#[test]
fn the_embedded_demo_serves_metrics_plain_on_loopback_and_secure_on_request() {
    let plain = Controller::start(&[]);
    let url = format!("http://{}/metrics", plain.addr);
    let (code, body) = curl(&[&url]);
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("cubepod_queue_depth"), "{body}");
    drop(plain);

    let secure = Controller::start(&["--metrics-secure"]);
    let url = format!("https://{}/metrics", secure.metrics_addr().expect("secure"));
    assert_eq!(scrape(&url, None).0, 401);
    // The embedded cluster's own token, from the kubeconfig `run` wrote: its administrator.
    let token = secure.embedded_token().expect("a token in the kubeconfig");
    let (code, body) = scrape(&url, Some(&token));
    assert_eq!(code, 200, "{body}");
    assert_eq!(scrape(&url, Some("not-the-token")).0, 401);
    let (code, _) = curl(&[&format!("http://{}/metrics", secure.addr)]);
    assert_eq!(code, 404);
}

#[test]
fn plain_metrics_beyond_loopback_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(binary())
        .args([
            "run",
            "--embedded",
            "--listen=0.0.0.0:0",
            "--metrics-secure=false",
        ])
        .arg(format!(
            "--cache-dir={}",
            dir.path().join("cache").display()
        ))
        .env("HOME", dir.path())
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdin(Stdio::null())
        .output()
        .expect("the controller runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("--metrics-secure=false") && stderr.contains("loopback"),
        "{stderr}"
    );
}
