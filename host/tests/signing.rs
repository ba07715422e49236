//! Signed policy modules, with keys that openssl makes in the test: a signature made by an
//! independent implementation verifies (openssl's `dgst -sha256 -sign` of a P-256 key, base64,
//! is what cosign's key-based `sign-blob` writes; `pkeyutl -sign -rawin` for Ed25519), one made
//! by `policy sign` verifies with openssl, and every kind of bad signature refuses the module
//! with its own reason, before anything is compiled.
//!
//! Needs `openssl` and `base64` on PATH (CI installs openssl).
//!
//! Run: `cargo test -p cubepod-host --test signing`

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cubepod_host::admission::{Admission, Refused};
use cubepod_host::signing::{KeyRing, SigningKey, signature_path};
use cubepod_policy_host::runtime::{DEFAULT_POLICY, PolicyEngine, RuntimeConfig};

/// Runs a shell pipeline; panics with its stderr when it fails. Returns stdout.
fn sh(script: &str) -> Vec<u8> {
    let out = Command::new("sh")
        .args(["-c", script])
        .stdin(Stdio::null())
        .output()
        .expect("sh runs");
    assert!(
        out.status.success(),
        "`{script}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn q(path: &Path) -> String {
    format!("'{}'", path.display())
}

/// Key pairs made by openssl: (private PKCS#8 PEM, public SPKI PEM).
struct Keys {
    dir: tempfile::TempDir,
}

impl Keys {
    fn new() -> Self {
        let keys = Self {
            dir: tempfile::tempdir().unwrap(),
        };
        for name in ["ec", "other-ec"] {
            let key = keys.private(name);
            sh(&format!(
                "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out {} 2>&1",
                q(&key)
            ));
            sh(&format!(
                "openssl pkey -in {} -pubout -out {}",
                q(&key),
                q(&keys.public(name))
            ));
        }
        let ed = keys.private("ed");
        sh(&format!(
            "openssl genpkey -algorithm ed25519 -out {}",
            q(&ed)
        ));
        sh(&format!(
            "openssl pkey -in {} -pubout -out {}",
            q(&ed),
            q(&keys.public("ed"))
        ));
        keys
    }

    fn private(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.pem"))
    }

    fn public(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.pub"))
    }

    /// A file in the keys' folder.
    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }
}

/// What cosign's key-based `sign-blob` writes: base64 of openssl's DER ECDSA P-256 signature.
fn openssl_p256_signature(key: &Path, module: &Path) -> Vec<u8> {
    sh(&format!(
        "openssl dgst -sha256 -sign {} {} | base64",
        q(key),
        q(module)
    ))
}

fn openssl_ed25519_signature(key: &Path, module: &Path) -> Vec<u8> {
    sh(&format!(
        "openssl pkeyutl -sign -rawin -inkey {} -in {} | base64",
        q(key),
        q(module)
    ))
}

fn ring(keys: &[PathBuf]) -> KeyRing {
    KeyRing::load(keys).unwrap()
}

#[test]
fn signatures_made_by_openssl_verify() {
    let keys = Keys::new();
    let module = keys.file("policy.wasm", DEFAULT_POLICY);
    let sig = signature_path(&module);

    let p256 = openssl_p256_signature(&keys.private("ec"), &module);
    let key = ring(&[keys.public("ec")])
        .verify(DEFAULT_POLICY, &p256, &sig)
        .map(|k| k.path().to_path_buf());
    assert_eq!(key, Ok(keys.public("ec")));

    let ed25519 = openssl_ed25519_signature(&keys.private("ed"), &module);
    let key = ring(&[keys.public("ed")])
        .verify(DEFAULT_POLICY, &ed25519, &sig)
        .map(|k| k.algorithm());
    assert_eq!(key, Ok("ed25519"));
}

#[test]
fn any_configured_key_that_verifies_admits() {
    let keys = Keys::new();
    let module = keys.file("policy.wasm", DEFAULT_POLICY);
    let signature = openssl_p256_signature(&keys.private("ec"), &module);
    let all = ring(&[
        keys.public("ed"),
        keys.public("other-ec"),
        keys.public("ec"),
    ]);
    let key = all.verify(DEFAULT_POLICY, &signature, &signature_path(&module));
    assert_eq!(key.map(|k| k.path().to_path_buf()), Ok(keys.public("ec")));
}

/// `policy sign`, run as the built binary.
fn policy_sign(key: &Path, module: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_cubepod-controller"))
        .args(["policy", "sign", "--key"])
        .arg(key)
        .arg(module)
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "policy sign failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn signatures_made_by_policy_sign_verify_with_openssl() {
    let keys = Keys::new();
    let module = keys.file("policy.wasm", DEFAULT_POLICY);
    let sig = signature_path(&module);
    let der = keys.dir.path().join("signature.der");

    policy_sign(&keys.private("ec"), &module);
    sh(&format!("base64 -d {} > {}", q(&sig), q(&der)));
    let verdict = sh(&format!(
        "openssl dgst -sha256 -verify {} -signature {} {}",
        q(&keys.public("ec")),
        q(&der),
        q(&module)
    ));
    assert_eq!(String::from_utf8_lossy(&verdict).trim(), "Verified OK");

    policy_sign(&keys.private("ed"), &module);
    sh(&format!("base64 -d {} > {}", q(&sig), q(&der)));
    let verdict = sh(&format!(
        "openssl pkeyutl -verify -pubin -inkey {} -rawin -in {} -sigfile {}",
        q(&keys.public("ed")),
        q(&module),
        q(&der)
    ));
    assert_eq!(
        String::from_utf8_lossy(&verdict).trim(),
        "Signature Verified Successfully"
    );
}

/// A module given gzip-compressed is the component as built: `policy sign` signs the
/// decompressed bytes (so openssl verifies the signature against the .wasm), and the controller
/// admits the .wasm.gz with it, its digest the component's.
#[test]
fn a_gzip_module_is_signed_and_admitted_as_the_component_it_decompresses_to() {
    let keys = Keys::new();
    let wasm = keys.file("policy.wasm", DEFAULT_POLICY);
    sh(&format!("gzip -9 -c {} > {}.gz", q(&wasm), q(&wasm)));
    let gz = keys.dir.path().join("policy.wasm.gz");
    policy_sign(&keys.private("ec"), &gz);
    let der = keys.dir.path().join("signature.der");
    sh(&format!(
        "base64 -d {} > {}",
        q(&signature_path(&gz)),
        q(&der)
    ));
    let verdict = sh(&format!(
        "openssl dgst -sha256 -verify {} -signature {} {}",
        q(&keys.public("ec")),
        q(&der),
        q(&wasm)
    ));
    assert_eq!(String::from_utf8_lossy(&verdict).trim(), "Verified OK");

    let runtime = runtime();
    let admission = admission(ring(&[keys.public("ec")]));
    assert_eq!(admit(&runtime, &admission, &gz).unwrap(), "cubepod-default");
    // Its bound is on the component, not on the smaller file.
    let small = admission.with_max_module_bytes(DEFAULT_POLICY.len() as u64 - 1);
    let refused = runtime.block_on(small.read(&gz)).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("decompresses to more than the"),
        "{refused}"
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn admission(keys: KeyRing) -> Admission {
    Admission::new(PolicyEngine::new(RuntimeConfig::default()).unwrap(), keys)
}

/// Reads the module at `path` (and its signature) and runs the whole pipeline on it.
fn admit(
    runtime: &tokio::runtime::Runtime,
    admission: &Admission,
    path: &Path,
) -> Result<String, Refused> {
    runtime.block_on(async {
        let candidate = admission.read(path).await.expect("module readable");
        admission
            .admit(candidate)
            .await
            .map(|admitted| admitted.module.info().name.clone())
    })
}

/// What is under test, the module's bytes, and its signature file (`None`: no file).
type Case<'a> = (&'a str, &'a [u8], Option<&'a [u8]>);

#[test]
fn every_bad_signature_refuses_the_module_with_its_reason_before_it_compiles() {
    let keys = Keys::new();
    let runtime = runtime();
    let admission = admission(ring(&[keys.public("ec")]));
    let module = keys.file("policy.wasm", DEFAULT_POLICY);
    let sig = signature_path(&module);
    let good = openssl_p256_signature(&keys.private("ec"), &module);

    std::fs::write(&sig, &good).unwrap();
    assert_eq!(
        admit(&runtime, &admission, &module).map_err(|e| e.reason()),
        Ok("cubepod-default".to_string())
    );

    // Not even WebAssembly: had it been compiled first, the reason would be `compile`.
    let mut changed = DEFAULT_POLICY.to_vec();
    changed.truncate(1000);
    let by_other_key = openssl_p256_signature(&keys.private("other-ec"), &module);
    let text = String::from_utf8(good.clone()).unwrap();
    let half = text.trim().len() / 2 / 4 * 4;
    let cases: [Case; 6] = [
        ("changed after signing", &changed, Some(&good)),
        ("signed by another key", DEFAULT_POLICY, Some(&by_other_key)),
        ("truncated", DEFAULT_POLICY, Some(&text.as_bytes()[..half])),
        ("not base64", DEFAULT_POLICY, Some(b"this is not base64!")),
        ("empty", DEFAULT_POLICY, Some(b"\n")),
        ("missing", DEFAULT_POLICY, None),
    ];
    let reasons: Vec<(&str, &str)> = cases
        .iter()
        .map(|(case, bytes, signature)| {
            std::fs::write(&module, bytes).unwrap();
            match signature {
                Some(signature) => std::fs::write(&sig, signature).unwrap(),
                None => std::fs::remove_file(&sig).unwrap(),
            }
            let refused = admit(&runtime, &admission, &module).expect_err(case);
            (*case, refused.reason())
        })
        .collect();
    assert_eq!(
        reasons,
        [
            ("changed after signing", "signature_invalid"),
            ("signed by another key", "signature_invalid"),
            ("truncated", "signature_malformed"),
            ("not base64", "signature_malformed"),
            ("empty", "signature_malformed"),
            ("missing", "signature_missing"),
        ]
    );
}

#[test]
fn without_a_key_an_unsigned_module_is_admitted_as_before() {
    let keys = Keys::new();
    let runtime = runtime();
    let module = keys.file("policy.wasm", DEFAULT_POLICY);
    let name = admit(&runtime, &admission(KeyRing::default()), &module).map_err(|e| e.reason());
    assert_eq!(name, Ok("cubepod-default".to_string()));
}

#[test]
fn unusable_keys_are_refused_with_what_to_do() {
    let keys = Keys::new();
    let private_as_public = KeyRing::load(&[keys.private("ec")])
        .unwrap_err()
        .to_string();
    assert!(
        private_as_public.contains("PUBLIC KEY"),
        "{private_as_public}"
    );

    let rsa = keys.dir.path().join("rsa.pub");
    sh(&format!(
        "openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 2>/dev/null | openssl pkey -pubout -out {}",
        q(&rsa)
    ));
    let rsa = KeyRing::load(&[rsa]).unwrap_err().to_string();
    assert!(
        rsa.contains("neither an ECDSA P-256 nor an Ed25519"),
        "{rsa}"
    );

    let cosign = keys.file(
        "cosign.key",
        b"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n",
    );
    let cosign = SigningKey::load(&cosign).unwrap_err().to_string();
    assert!(cosign.contains("cosign sign-blob"), "{cosign}");

    let missing = KeyRing::load(&[keys.dir.path().join("nope.pub")])
        .unwrap_err()
        .to_string();
    assert!(missing.contains("nope.pub"), "{missing}");
}

#[test]
fn policy_inspect_gives_the_signature_verdict() {
    let keys = Keys::new();
    let module = keys.file("policy.wasm", DEFAULT_POLICY);
    let inspect = || {
        let out = Command::new(env!("CARGO_BIN_EXE_cubepod-controller"))
            .args(["policy", "inspect", "--verify-key"])
            .arg(keys.public("ec"))
            .arg(&module)
            .output()
            .expect("the binary runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, stdout) = inspect();
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("signature: signature_missing"), "{stdout}");

    policy_sign(&keys.private("ec"), &module);
    let (code, stdout) = inspect();
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("signature: valid: verified by"), "{stdout}");
}

/// `policy diff --verify-key` admits both modules as `run --policy-verify-key` would: an
/// unsigned candidate stops the comparison (exit 2, naming it and why); signed, it is compared.
#[test]
fn policy_diff_verifies_both_modules_with_the_keys_given() {
    let keys = Keys::new();
    let module = keys.file("candidate.wasm", DEFAULT_POLICY);
    let scenario = keys.file(
        "one.yaml",
        b"now: 2026-01-01T00:00:00Z\nobjects:\n- {apiVersion: cubepod.io/v1alpha1, kind: Sandbox, metadata: {name: a}, spec: {image: i}}\nreconcile: a\n",
    );
    let diff = || {
        let out = Command::new(env!("CARGO_BIN_EXE_cubepod-controller"))
            .args(["policy", "diff", "--verify-key"])
            .arg(keys.public("ec"))
            .arg("builtin:default")
            .arg(&module)
            .arg(&scenario)
            .output()
            .expect("the binary runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = diff();
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains("candidate.wasm: refused (signature_missing)"),
        "{stderr}"
    );

    policy_sign(&keys.private("ec"), &module);
    let (code, stdout, stderr) = diff();
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("SAME Sandbox cubepod-workloads/a"),
        "{stdout}"
    );
}

/// A ConfigMap volume as the kubelet lays it out: `policy.wasm -> ..data/policy.wasm`,
/// `..data -> ..<timestamp>`, the files in the timestamped folder.
fn config_map_volume(dir: &Path) -> PathBuf {
    let data = dir.join("..2026_01_01_00_00_00.000000000");
    std::fs::create_dir(&data).unwrap();
    std::os::unix::fs::symlink(data.file_name().unwrap(), dir.join("..data")).unwrap();
    for name in ["policy.wasm", "policy.wasm.sig"] {
        std::os::unix::fs::symlink(format!("..data/{name}"), dir.join(name)).unwrap();
    }
    data
}

/// The policy file watcher over a FIFO, a directory, a module past its bound and a `.sig` past
/// its bound, each in the place of a ConfigMap volume's file: each is refused unread, with
/// reason `file`, counted, told on `/readyz`, and at once (a FIFO opened for reading would
/// wait for a writer); the watcher then admits a good module put there.
#[test]
fn the_watcher_refuses_what_is_not_a_file_within_its_bound_and_goes_on() {
    use std::sync::Arc;

    use cubepod_apiserver::{MemoryCluster, MemoryClusterConfig};
    use cubepod_host::controller::health::Health;
    use cubepod_host::controller::manager::{ControllerManager, ManagerConfig};
    use cubepod_host::controller::policy_watch::{PolicyWatcher, SwapOutcome};
    use cubepod_host::metrics::Metrics;

    let keys = Keys::new();
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let data = config_map_volume(dir.path());
    let (module, sig) = (data.join("policy.wasm"), data.join("policy.wasm.sig"));
    let path = dir.path().join("policy.wasm");
    // A module of its own bytes (a custom section more), so that it is not the running one.
    let mut good = DEFAULT_POLICY.to_vec();
    good.extend_from_slice(&[0, 5, 4, b't', b'e', b's', b't']);
    let bound = good.len() as u64 + 16;
    let engine = PolicyEngine::new(RuntimeConfig::default()).unwrap();
    let admission =
        Admission::new(engine.clone(), ring(&[keys.public("ec")])).with_max_module_bytes(bound);
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::default());
    let manager = runtime.block_on(async {
        ControllerManager::new(
            MemoryCluster::new(MemoryClusterConfig::instant()),
            engine.load(DEFAULT_POLICY).unwrap(),
            ManagerConfig::for_namespaces(vec!["ns".to_string()]),
            metrics.clone(),
            health.clone(),
        )
    });
    let mut watcher = PolicyWatcher::new(
        path.clone(),
        admission,
        manager.clone(),
        std::time::Duration::from_secs(600),
    );
    // A refusal is at once (the good module's compile and self-test take longer).
    let check = |watcher: &mut PolicyWatcher| runtime.block_on(watcher.check());
    let refusing = |watcher: &mut PolicyWatcher| {
        let started = std::time::Instant::now();
        let outcome = check(watcher);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "a refusal took {:?}",
            started.elapsed()
        );
        outcome
    };
    let refused = |outcome: SwapOutcome, says: &str| match outcome {
        SwapOutcome::Refused { why, .. } => {
            assert_eq!(why.reason(), "file", "{why}");
            assert!(why.to_string().contains(says), "{why}");
            let line = health.policy_file().expect("/readyz says why");
            assert!(line.starts_with("refused (file): "), "{line}");
            assert!(line.contains(says), "{line}");
        }
        other => panic!("not refused: {other:?}"),
    };

    sh(&format!("mkfifo {}", q(&module)));
    refused(refusing(&mut watcher), "is a FIFO, not a regular file");
    // Told once: the same refusal at the next poll is not counted again.
    refused(refusing(&mut watcher), "is a FIFO");
    std::fs::remove_file(&module).unwrap();

    std::fs::create_dir(&module).unwrap();
    refused(refusing(&mut watcher), "is a directory, not a regular file");
    std::fs::remove_dir(&module).unwrap();

    // Past the bound: refused from its size, not read (a sparse file of 1 GiB reads as zeros).
    let huge = std::fs::File::create(&module).unwrap();
    huge.set_len(1 << 30).unwrap();
    drop(huge);
    refused(refusing(&mut watcher), "more than the");
    std::fs::write(&module, vec![0u8; bound as usize + 1]).unwrap();
    refused(
        refusing(&mut watcher),
        &format!("holds {} bytes", bound + 1),
    );

    std::fs::write(&module, &good).unwrap();
    let sig_file = std::fs::File::create(&sig).unwrap();
    sig_file.set_len(512 << 20).unwrap();
    drop(sig_file);
    refused(refusing(&mut watcher), "a signature may (4 KiB)");

    std::fs::remove_file(&sig).unwrap();
    std::fs::write(&sig, openssl_p256_signature(&keys.private("ec"), &module)).unwrap();
    match check(&mut watcher) {
        SwapOutcome::Applied { .. } => {}
        other => panic!("the good module was not admitted: {other:?}"),
    }
    assert_eq!(health.policy_file(), None, "the refusal is no longer told");
    assert_eq!(
        metrics.policy_swaps.with_label_values(&["file"]).get(),
        5,
        "each distinct refusal counted once"
    );
    assert_eq!(
        metrics.policy_swaps.with_label_values(&["applied"]).get(),
        1
    );
}
