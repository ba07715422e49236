//! Hot swap in a live controller: the policy file is replaced while the process runs. A good
//! module takes over between reconciles, in the same process, and every object is reconciled
//! under it; a bad one is refused with its reason and the running module stays. With a
//! verification key, only a module whose signature verifies takes over, even when the
//! signature arrives after the module.

use std::time::Duration;

use cubepod_host::admission::REFUSAL_REASONS;
use cubepod_host::signing::{SigningKey, signature_path};
use cubepod_policy_host::runtime::default_policy::DEFAULT_POLICY;
use cubepod_tests::{
    Controller, faulty_policy, faulty_policy_variant, metric, p256_key_pair, replace_file,
    seed_file,
};

const PATIENCE: Duration = Duration::from_secs(90);

fn swaps(body: &str, result: &str) -> f64 {
    metric(body, "cubepod_policy_swaps_total", &[("result", result)]).unwrap_or(-1.0)
}

/// Every refusal, whatever its reason.
fn refused(body: &str) -> f64 {
    REFUSAL_REASONS.iter().map(|r| swaps(body, r)).sum()
}

/// The default policy with its contract's package version changed from the current one to 0.9.0 in
/// every import and export name: a module built against another version of `wit/`.
fn other_contract_version() -> Vec<u8> {
    let mut bytes = DEFAULT_POLICY.to_vec();
    let from = b"cubepod:controller/";
    // The current contract's names (`@0.2.0`) become `@0.9.0`, a version no host supports.
    let current = format!("@{}", cubepod_policy_host::runtime::CONTRACT_VERSION);
    let mut i = 0;
    while let Some(at) = bytes[i..].windows(from.len()).position(|w| w == from) {
        let start = i + at + from.len();
        if let Some(version) = bytes[start..]
            .windows(current.len())
            .position(|w| w == current.as_bytes())
            && version < 24
        {
            bytes[start + version + 3] = b'9';
        }
        i = start;
    }
    assert_ne!(bytes, DEFAULT_POLICY, "no versioned name found to change");
    bytes
}

#[test]
fn a_live_controller_takes_good_modules_and_refuses_bad_ones() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.wasm");
    std::fs::write(&policy, DEFAULT_POLICY).unwrap();
    // A sandbox that the default policy runs and the faulty one tries to escape with.
    let seed = seed_file(
        dir.path(),
        "apiVersion: cubepod.io/v1alpha1\nkind: Sandbox\n\
         metadata: {name: escape-x, namespace: cubepod-workloads}\n\
         spec: {image: ghcr.io/cubepod/sandbox-base:1.0}\n",
    );
    let mut controller = Controller::start(&[
        &format!("--policy={}", policy.display()),
        &format!("--seed={}", seed.display()),
        "--policy-poll-interval=200ms",
        // The default deadline (1s): the looping module's self-test waits it out once, and the
        // default policy, serving all along, keeps a wide margin on a slow, loaded CI machine.
        "--guest-memory-mib=16",
    ]);
    controller.wait_for("/metrics", PATIENCE, |_, body| {
        metric(body, "cubepod_active_sandboxes", &[])
            == Some(cubepod_tests::seeded_running_and_paused().0 + 1.0)
    });
    let ready = controller.wait_for("/readyz", PATIENCE, |s, _| s == 200);
    assert!(ready.contains("policy: cubepod-default"), "{ready}");

    let refusals: [(&str, Vec<u8>); 5] = [
        ("compile", b"not a wasm component".to_vec()),
        ("contract", other_contract_version()),
        (
            "self_test",
            std::fs::read(faulty_policy_variant("nonconforming")).unwrap(),
        ),
        (
            "self_test",
            std::fs::read(faulty_policy_variant("always-trap")).unwrap(),
        ),
        (
            "self_test",
            std::fs::read(faulty_policy_variant("always-loop")).unwrap(),
        ),
    ];
    for (n, (reason, bytes)) in refusals.iter().enumerate() {
        replace_file(&policy, bytes);
        let digest = cubepod_host::controller::policy_watch::sha256_hex(bytes);
        let line = controller.wait_for_log(PATIENCE, |fields| {
            fields["digest"] == digest.as_str() && fields["reason"].is_string()
        });
        assert_eq!(line["fields"]["reason"], *reason, "{line}");
        let body = controller.wait_for("/metrics", PATIENCE, |_, body| {
            refused(body) == (n + 1) as f64
        });
        assert_eq!(swaps(&body, "applied"), 0.0);
        let (_, ready) = controller.get("/readyz").unwrap();
        assert!(
            ready.contains("policy: cubepod-default"),
            "the old module stays: {ready}"
        );
    }
    let body = controller.get("/metrics").unwrap().1;
    let traps: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("cubepod_guest_traps_total"))
        .collect();
    let stderr = controller.stderr();
    let failures: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("reconcile failed"))
        .collect();
    assert!(
        traps.is_empty(),
        "a refused module never served, yet calls failed: {traps:?}; {failures:#?}"
    );

    // A good module: applied between reconciles, and every object is reconciled under it, so
    // the faulty policy's attempt on escape-x shows at once.
    replace_file(&policy, &std::fs::read(faulty_policy()).unwrap());
    let ready = controller.wait_for("/readyz", PATIENCE, |_, body| {
        body.contains("policy: cubepod-faulty")
    });
    assert!(ready.contains("cache: synced"));
    let body = controller.wait_for("/metrics", PATIENCE, |_, body| {
        metric(
            body,
            "cubepod_boundary_refusals_total",
            &[("verb", "create"), ("resource", "secrets")],
        )
        .is_some_and(|n| n >= 1.0)
    });
    assert_eq!(swaps(&body, "applied"), 1.0);
    assert_eq!(
        metric(&body, "cubepod_policy_info", &[("name", "cubepod-faulty")]),
        Some(1.0)
    );
    assert_eq!(
        metric(&body, "cubepod_policy_info", &[("name", "cubepod-default")]),
        None
    );
    let failed: f64 = ["trap", "timeout", "memory", "panic"]
        .iter()
        .filter_map(|r| {
            metric(
                &body,
                "cubepod_reconciles_total",
                &[("kind", "sandbox"), ("result", r)],
            )
        })
        .sum();
    assert_eq!(failed, 0.0, "no reconcile failed in the swap");
    assert!(
        controller.child.try_wait().unwrap().is_none(),
        "the same process serves on"
    );
    let (status, _) = controller.get("/healthz").unwrap();
    assert_eq!(status, 200);
}

/// The file is read again when it changes, not when it is read: by others (a backup, an
/// operator's `sha256sum`), nor by the controller's own checks, each of which opens it.
#[test]
fn the_policy_file_is_checked_when_it_changes_not_when_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.wasm");
    std::fs::write(&policy, DEFAULT_POLICY).unwrap();
    let controller = Controller::start(&[
        &format!("--policy={}", policy.display()),
        // The first tick only: every later check is a file event's.
        "--policy-poll-interval=1h",
    ]);
    controller.wait_for("/readyz", PATIENCE, |s, _| s == 200);
    let modules = [
        std::fs::read(faulty_policy()).unwrap(),
        DEFAULT_POLICY.to_vec(),
    ];
    for (n, module) in modules.iter().enumerate() {
        for _ in 0..20 {
            std::fs::read(&policy).unwrap();
        }
        replace_file(&policy, module);
        controller.wait_for("/metrics", PATIENCE, |_, body| {
            swaps(body, "applied") == (n + 1) as f64
        });
    }
    // Idle, and read by others: nothing to check.
    for _ in 0..20 {
        std::fs::read(&policy).unwrap();
    }
    std::thread::sleep(Duration::from_secs(1));
    let body = controller.get("/metrics").unwrap().1;
    let checks = |trigger| {
        metric(
            &body,
            "cubepod_policy_file_checks_total",
            &[("trigger", trigger)],
        )
        .unwrap_or(-1.0)
    };
    assert_eq!(checks("poll"), 1.0);
    // A replace is a few events (the staged file's create, write and close, the rename), some
    // coalesced into one check; a read is none. When a check's own open woke the next check,
    // an idle controller spent a core reading its policy (about 1,700 times a second in a
    // release build).
    let most = 6.0 * modules.len() as f64;
    assert!(
        (modules.len() as f64..=most).contains(&checks("event")),
        "{} checks on file events for {} replaces, {most} at most",
        checks("event"),
        modules.len()
    );
}

#[test]
fn with_a_key_only_a_module_whose_signature_verifies_takes_over() {
    let dir = tempfile::tempdir().unwrap();
    let (private, public) = p256_key_pair(dir.path(), "release");
    let (other, _) = p256_key_pair(dir.path(), "other");
    let key = SigningKey::load(&private).unwrap();
    let policy = dir.path().join("policy.wasm");
    let sig = signature_path(&policy);
    std::fs::write(&policy, DEFAULT_POLICY).unwrap();
    std::fs::write(&sig, key.sign(DEFAULT_POLICY)).unwrap();
    let controller = Controller::start(&[
        &format!("--policy={}", policy.display()),
        &format!("--policy-verify-key={}", public.display()),
        "--policy-poll-interval=200ms",
    ]);
    let ready = controller.wait_for("/readyz", PATIENCE, |s, _| s == 200);
    assert!(ready.contains("policy: cubepod-default"), "{ready}");

    // A new module arrives before its signature, as a watcher may see a ConfigMap update; then
    // the signature files a mistaken release could ship; the right one last.
    let faulty = std::fs::read(faulty_policy()).unwrap();
    let digest = cubepod_host::controller::policy_watch::sha256_hex(&faulty);
    let good = key.sign(&faulty);
    let steps: [(&str, Option<Vec<u8>>, &str); 5] = [
        // The default policy's signature stays beside the new module.
        ("the old signature", None, "signature_invalid"),
        (
            "another key's",
            Some(SigningKey::load(&other).unwrap().sign(&faulty).into_bytes()),
            "signature_invalid",
        ),
        (
            "a truncated one",
            Some(good.as_bytes()[..good.len() / 2].to_vec()),
            "signature_malformed",
        ),
        (
            "not base64",
            Some(b"-- not a signature --".to_vec()),
            "signature_malformed",
        ),
        ("none", Some(Vec::new()), "signature_missing"),
    ];
    replace_file(&policy, &faulty);
    for (n, (case, signature, reason)) in steps.iter().enumerate() {
        match signature {
            Some(bytes) if bytes.is_empty() => std::fs::remove_file(&sig).unwrap(),
            Some(bytes) => replace_file(&sig, bytes),
            None => {}
        }
        let line = controller.wait_for_log(PATIENCE, |fields| {
            fields["digest"] == digest.as_str() && fields["reason"] == *reason
        });
        assert!(
            line["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("policy.wasm.sig")),
            "{case}: the refusal names the signature file: {line}"
        );
        let body = controller.wait_for("/metrics", PATIENCE, |_, body| {
            refused(body) == (n + 1) as f64
        });
        assert_eq!(swaps(&body, "applied"), 0.0, "{case}");
        let (_, ready) = controller.get("/readyz").unwrap();
        assert!(
            ready.contains("policy: cubepod-default"),
            "{case}: the old module stays: {ready}"
        );
    }

    let body = controller.get("/metrics").unwrap().1;
    assert_eq!(
        metric(&body, "cubepod_guest_traps_total", &[]),
        None,
        "no refused module ran"
    );

    // The right signature arrives: the module refused a moment ago is checked again.
    replace_file(&sig, good.as_bytes());
    controller.wait_for("/readyz", PATIENCE, |_, body| {
        body.contains("policy: cubepod-faulty")
    });
    let body = controller.get("/metrics").unwrap().1;
    assert_eq!(swaps(&body, "applied"), 1.0);
    assert_eq!(swaps(&body, "signature_invalid"), 2.0);
    assert_eq!(swaps(&body, "signature_malformed"), 2.0);
    assert_eq!(swaps(&body, "signature_missing"), 1.0);
}
