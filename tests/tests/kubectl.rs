//! The real `kubectl` against the real binary's embedded cluster, through the kubeconfig `run`
//! writes: discovery, printer columns, describe, apply, merge patch, delete and watch, as a
//! newcomer would use them. kubectl must be installed (`.ci/run` installs it); without it these
//! tests fail, saying so.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cubepod_tests::kubectl::{Embedded, PATIENCE, row};
use cubepod_tests::refusals;

const NS: &str = "cubepod-workloads";

fn header(table: &str) -> Vec<&str> {
    table
        .lines()
        .next()
        .unwrap_or_default()
        .split("  ")
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect()
}

fn sandbox_yaml(name: &str, desired: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: cubepod.io/v1alpha1\nkind: Sandbox\nmetadata:\n  name: {name}\n  \
         namespace: {NS}\nspec:\n  image: ghcr.io/cubepod/sandbox-base:1.0\n  \
         desiredState: {desired}\n{extra_spec}"
    )
}

#[test]
fn get_prints_the_crds_printer_columns_pods_pvcs_and_describe() {
    let cluster = Embedded::start(&[]);
    // The seeded sandboxes converge: dev-alice runs, dev-bob is paused.
    let table = cluster.until(&["get", "sandboxes", "-n", NS], |out| {
        row(out, "dev-alice").is_some_and(|r| r[1] == "Running")
            && row(out, "dev-bob").is_some_and(|r| r[1] == "Paused")
    });
    assert_eq!(
        header(&table),
        [
            "NAME",
            "PHASE",
            "DESIRED",
            "GEN",
            "POD IP",
            "SHUTDOWN-IN",
            "AGE"
        ],
        "{table}"
    );
    // GEN is the CRD's default: the example does not name it.
    let alice = row(&table, "dev-alice").unwrap();
    assert_eq!(alice[2..4], ["Running", "1"], "{table}");
    assert!(alice[4].starts_with("10."), "a pod IP: {table}");
    // The wide columns (priority 1) and the short name from the CRD.
    let wide = cluster.until(&["get", "sbx", "-n", NS, "-o", "wide"], |out| {
        row(out, "python-pool-0").is_some()
    });
    assert_eq!(
        header(&wide),
        [
            "NAME",
            "PHASE",
            "DESIRED",
            "GEN",
            "POD IP",
            "FORK OF",
            "POOL",
            "CLAIMS FROM",
            "SHUTDOWN-IN",
            "AGE"
        ],
        "{wide}"
    );
    let fork = row(&wide, "dev-alice-fork").expect("the fork");
    assert!(fork.contains(&"dev-alice"), "{wide}");
    // A pool member names its pool.
    let member = row(&wide, "python-pool-0").expect("a member");
    assert!(member.contains(&"python-pool"), "{wide}");
    let pools = cluster.until(&["get", "podwarmpools", "-n", NS], |out| {
        row(out, "python-pool").is_some_and(|r| r[2] == "3")
    });
    assert_eq!(
        header(&pools),
        ["NAME", "REPLICAS", "READY", "AGE"],
        "{pools}"
    );

    // Two kinds at once, with the columns the API server prints for them.
    let children = cluster.ok(&["get", "pods,pvc", "-n", NS]);
    assert!(
        children.contains("pod/dev-alice ") && children.contains("1/1"),
        "{children}"
    );
    assert!(
        children.contains("persistentvolumeclaim/dev-alice-workspace"),
        "{children}"
    );
    for column in [
        "READY",
        "STATUS",
        "RESTARTS",
        "VOLUME",
        "CAPACITY",
        "ACCESS MODES",
    ] {
        assert!(children.contains(column), "{column}: {children}");
    }

    let described = cluster.ok(&["describe", "sandbox", "dev-alice", "-n", NS]);
    for line in [
        "Name:         dev-alice",
        "Namespace:    cubepod-workloads",
        "Kind:         Sandbox",
        "Phase:",
        "Rootfs PVC:",
        "Events:",
    ] {
        assert!(described.contains(line), "{line:?} in:\n{described}");
    }
}

/// The scale subresource, as `kubectl scale` and an autoscaler use it: the pool converges to
/// each new size, the Scale reads the pool's paths, and a template change under the default
/// `updateStrategy: Recreate` replaces every member.
#[test]
fn scale_a_warm_pool_and_change_its_template() {
    let cluster = Embedded::start(&[]);
    let pool = ["get", "podwarmpool", "python-pool", "-n", NS];
    cluster.until(&pool, |out| {
        row(out, "python-pool").is_some_and(|r| r[2] == "3")
    });

    let scaled = cluster.ok(&["scale", "podwarmpool/python-pool", "--replicas=5", "-n", NS]);
    assert_eq!(scaled.trim(), "podwarmpool.cubepod.io/python-pool scaled");
    let scale = cluster.until(
        &[
            "get",
            "podwarmpool/python-pool",
            "--subresource=scale",
            "-n",
            NS,
        ],
        |out| row(out, "python-pool").is_some_and(|r| r[1..] == ["5", "5"]),
    );
    assert_eq!(header(&scale), ["NAME", "DESIRED", "AVAILABLE"], "{scale}");
    cluster.until(&pool, |out| {
        row(out, "python-pool").is_some_and(|r| r[2] == "5")
    });
    let path = format!("/apis/cubepod.io/v1alpha1/namespaces/{NS}/podwarmpools/python-pool/scale");
    let raw: serde_json::Value =
        serde_json::from_str(&cluster.ok(&["get", "--raw", &path])).expect("a Scale");
    assert_eq!(raw["apiVersion"], "autoscaling/v1", "{raw}");
    assert_eq!(raw["kind"], "Scale", "{raw}");
    assert_eq!(raw["spec"]["replicas"], 5, "{raw}");
    assert_eq!(raw["status"]["replicas"], 5, "{raw}");
    let selector = raw["status"]["selector"].as_str().expect("a selector");
    assert_eq!(selector, "cubepod.io/pool=python-pool");
    let members = cluster.ok(&["get", "sandboxes", "-n", NS, "-l", selector, "-o", "name"]);
    assert_eq!(members.lines().count(), 5, "{members}");
    // A write of the Scale is a write of spec.replicas: the generation moved once.
    let generation = cluster.ok(&[
        "get",
        "podwarmpool",
        "python-pool",
        "-n",
        NS,
        "-o",
        "jsonpath={.metadata.generation}",
    ]);
    assert_eq!(generation.trim(), "2");

    cluster.ok(&["scale", "podwarmpool/python-pool", "--replicas=2", "-n", NS]);
    let hashes = [
        "get",
        "sandboxes",
        "-n",
        NS,
        "-l",
        selector,
        "-L",
        "cubepod.io/template-hash",
    ];
    let before = cluster.until(&hashes, |out| out.lines().count() == 3);
    let old_hash = row(&before, "python-pool-0").map(|r| r[r.len() - 1].to_string());
    cluster.ok(&[
        "patch",
        "podwarmpool",
        "python-pool",
        "-n",
        NS,
        "--type=merge",
        "-p",
        r#"{"spec":{"template":{"image":"ghcr.io/cubepod/sandbox-python:3.13"}}}"#,
    ]);
    // Recreate: every member of the old template goes, two new ones come, all ready.
    let after = cluster.until(&hashes, |out| {
        let rows: Vec<Vec<&str>> = out
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().collect())
            .collect();
        rows.len() == 2
            && rows
                .iter()
                .all(|r| r[1] == "Running" && Some(r[r.len() - 1].to_string()) != old_hash)
    });
    assert!(row(&after, "python-pool-0").is_none(), "{after}");
}

#[test]
fn apply_patch_and_delete_a_sandbox() {
    let cluster = Embedded::start(&[]);
    let manifest = cluster.write("made.yaml", &sandbox_yaml("made", "Running", ""));
    let path = manifest.to_str().unwrap();
    let created = cluster.ok(&["apply", "-f", path]);
    assert_eq!(created.trim(), "sandbox.cubepod.io/made created");
    cluster.until(&["get", "sandbox", "made", "-n", NS], |out| {
        row(out, "made").is_some_and(|r| r[1] == "Running")
    });
    cluster.until(&["get", "pod", "made", "-n", NS], |out| {
        row(out, "made").is_some_and(|r| r[2] == "Running")
    });

    // Applied again with a change: a merge patch computed from the last applied configuration.
    std::fs::write(&manifest, sandbox_yaml("made", "Paused", "")).unwrap();
    let configured = cluster.ok(&["apply", "-f", path]);
    assert_eq!(configured.trim(), "sandbox.cubepod.io/made configured");
    let annotation = cluster.ok(&[
        "get",
        "sandbox",
        "made",
        "-n",
        NS,
        "-o",
        "jsonpath={.metadata.annotations.kubectl\\.kubernetes\\.io/last-applied-configuration}",
    ]);
    assert!(
        annotation.contains("\"desiredState\":\"Paused\""),
        "{annotation}"
    );
    cluster.until(&["get", "sandbox", "made", "-n", NS], |out| {
        row(out, "made").is_some_and(|r| r[1] == "Paused")
    });
    let unchanged = cluster.ok(&["apply", "-f", path]);
    assert_eq!(unchanged.trim(), "sandbox.cubepod.io/made unchanged");

    // A field the CRD does not know is refused, as kubectl's strict validation asks.
    let typo = cluster.write(
        "typo.yaml",
        &sandbox_yaml("typo", "Running", "  colour: blue\n"),
    );
    let refused = cluster.run(&["apply", "-f", typo.to_str().unwrap()]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("unknown field \"spec.colour\""), "{stderr}");
    assert!(
        cluster
            .run(&["get", "sandbox", "typo", "-n", NS])
            .status
            .code()
            != Some(0)
    );

    // A merge patch: resumed, the controller brings the Pod back.
    let patched = cluster.ok(&[
        "patch",
        "sandbox",
        "made",
        "-n",
        NS,
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"desiredState":"Running"}}"#,
    ]);
    assert_eq!(patched.trim(), "sandbox.cubepod.io/made patched");
    cluster.until(&["get", "sandbox", "made", "-n", NS], |out| {
        row(out, "made").is_some_and(|r| r[1] == "Running")
    });

    // A strategic merge patch of a custom resource is refused, as the API server refuses it.
    let strategic = cluster.run(&[
        "patch",
        "sandbox",
        "made",
        "-n",
        NS,
        "--type",
        "strategic",
        "-p",
        r#"{"spec":{"desiredState":"Paused"}}"#,
    ]);
    assert!(!strategic.status.success());
    let stderr = String::from_utf8_lossy(&strategic.stderr);
    assert!(
        stderr.contains(
            "the body of the request was in an unknown format - accepted media types include: \
             application/merge-patch+json, application/apply-patch+yaml"
        ),
        "{stderr}"
    );

    // Server-side, the manifest's fields become kubectl's; the client-side apply's last
    // configuration named desiredState Paused, which the merge patch since changed.
    std::fs::write(&manifest, sandbox_yaml("made", "Running", "")).unwrap();
    let server_side = cluster.ok(&["apply", "--server-side", "-f", path]);
    assert_eq!(
        server_side.trim(),
        "sandbox.cubepod.io/made serverside-applied"
    );
    let managers = cluster.ok(&[
        "get",
        "sandbox",
        "made",
        "-n",
        NS,
        "--show-managed-fields",
        "-o",
        "jsonpath={.metadata.managedFields[*].manager}",
    ]);
    for manager in ["kubectl-client-side-apply", "kubectl-patch", "kubectl"] {
        assert!(
            managers.split(' ').any(|m| m == manager),
            "{manager} in {managers}"
        );
    }

    // Deleted: kubectl waits until it is gone (the finalizer, after the children).
    let deleted = cluster.ok(&["delete", "sandbox", "made", "-n", NS]);
    assert_eq!(deleted.trim(), "sandbox.cubepod.io \"made\" deleted");
    let missing = cluster.run(&["get", "sandbox", "made", "-n", NS]);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("NotFound"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
    cluster.until(
        &["get", "pods,pvc,secrets", "-n", NS, "-o", "name"],
        |out| {
            !out.lines()
                .any(|l| l.ends_with("/made") || l.contains("/made-"))
        },
    );

    // A pool, too.
    let pool = cluster.write(
        "pool.yaml",
        &format!(
            "apiVersion: cubepod.io/v1alpha1\nkind: PodWarmPool\nmetadata:\n  name: extra\n  \
             namespace: {NS}\nspec:\n  replicas: 1\n  template:\n    image: \
             ghcr.io/cubepod/sandbox-base:1.0\n"
        ),
    );
    let created = cluster.ok(&["apply", "-f", pool.to_str().unwrap()]);
    assert_eq!(created.trim(), "podwarmpool.cubepod.io/extra created");
    cluster.until(&["get", "podwarmpool", "extra", "-n", NS], |out| {
        row(out, "extra").is_some_and(|r| r[2] == "1")
    });
    let deleted = cluster.ok(&["delete", "podwarmpool", "extra", "-n", NS]);
    assert_eq!(deleted.trim(), "podwarmpool.cubepod.io \"extra\" deleted");
}

/// Every rule of the CRDs is refused as a real API server refuses it, in the words kubectl
/// prints (the table of `cubepod_tests::refusals`, which the fake API server's test holds the
/// fake to as well); a user's sandbox shows the CRD's defaults; a missing sandbox or namespace
/// is NotFound in the API server's words.
#[test]
fn every_rule_of_the_crds_is_refused_in_the_api_servers_words() {
    let cluster = Embedded::start(&[]);
    refusals::check(&cluster.kubectl);
    refusals::check_defaults_and_not_found(&cluster.kubectl);
}

/// Reads `child`'s stdout lines on a thread, to wait for one without blocking forever.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let (sender, receiver) = mpsc::channel();
    let stdout = child.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    receiver
}

fn wait_line(lines: &mpsc::Receiver<String>, seen: &mut Vec<String>, done: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        match lines.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                let hit = done(&line);
                seen.push(line);
                if hit {
                    return;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    panic!(
        "no such line from kubectl get -w; saw:\n{}",
        seen.join("\n")
    );
}

#[test]
fn get_watch_shows_changes_as_rows() {
    let cluster = Embedded::start(&[]);
    cluster.until(&["get", "sandbox", "dev-bob", "-n", NS], |out| {
        row(out, "dev-bob").is_some_and(|r| r[1] == "Paused")
    });
    let mut watch = cluster
        .command(&["get", "sandboxes", "-n", NS, "-w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl could not run: install kubectl (.ci/run does)");
    let lines = lines_of(&mut watch);
    let mut seen = Vec::new();
    // The list first, under the columns' header.
    wait_line(&lines, &mut seen, |line| line.starts_with("NAME "));
    wait_line(&lines, &mut seen, |line| line.starts_with("dev-bob "));

    // Resumed: the watch shows the row changing, without a second header.
    cluster.ok(&[
        "patch",
        "sandbox",
        "dev-bob",
        "-n",
        NS,
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"desiredState":"Running"}}"#,
    ]);
    wait_line(&lines, &mut seen, |line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        words.first() == Some(&"dev-bob") && words.get(1) == Some(&"Running")
    });
    let _ = watch.kill();
    let _ = watch.wait();
    let headers = seen.iter().filter(|l| l.starts_with("NAME ")).count();
    assert_eq!(headers, 1, "{}", seen.join("\n"));
}

/// The controller's namespace, where a policy module's ConfigMap goes.
const SYSTEM_NS: &str = "cubepod-system";

/// A stand-in for a policy module of `size` bytes: the wasm magic, then bytes that are not
/// UTF-8, so that `kubectl create configmap --from-file` puts it in `binaryData`, as it does a
/// real module. `seed` makes each version differ.
fn module(size: usize, seed: u32) -> Vec<u8> {
    let mut bytes = b"\0asm\x01\0\0\0".to_vec();
    let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    while bytes.len() < size {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        bytes.push((state >> 24) as u8 | 0x80);
    }
    bytes
}

/// `kubectl create configmap NAME --from-file=policy.wasm=FILE --dry-run=client -o yaml`, piped
/// into `then` (a kubectl command reading `-f -`).
fn configmap_into(name: &str, file: &str, then: &str) -> String {
    format!(
        "kubectl create configmap {name} --from-file=policy.wasm={file} -n {SYSTEM_NS} \
         --dry-run=client -o yaml | {then}"
    )
}

/// The module a ConfigMap holds, decoded.
fn stored_module(cluster: &Embedded, name: &str) -> Vec<u8> {
    use base64::Engine as _;
    let encoded = cluster.ok(&[
        "get",
        "configmap",
        name,
        "-n",
        SYSTEM_NS,
        "-o",
        "jsonpath={.binaryData.policy\\.wasm}",
    ]);
    base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .expect("binaryData is base64")
}

/// The `metadata.managedFields` entry of `manager`.
fn managed_entry(cluster: &Embedded, name: &str, manager: &str) -> Option<serde_json::Value> {
    let object = cluster.ok(&[
        "get",
        "configmap",
        name,
        "-n",
        SYSTEM_NS,
        "-o",
        "json",
        "--show-managed-fields",
    ]);
    let object: serde_json::Value = serde_json::from_str(&object).expect("JSON");
    object["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|entry| entry["manager"] == manager)
        .cloned()
}

fn stderr_of(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Server-side apply of a 250 KB module's ConfigMap, as the docs ship it: created, owned by
/// its field manager in `managedFields`, updated; another manager's apply of a different
/// module is a conflict in the API server's words until it forces it, and then owns the field.
#[test]
fn a_module_configmap_is_applied_server_side_with_field_managers_and_conflicts() {
    let cluster = Embedded::start(&[]);
    let server_side = "kubectl apply --server-side -f -";
    let first = module(250 * 1024, 1);
    cluster.write_bytes("v1.wasm", &first);
    let applied = cluster.sh(&configmap_into("policy", "v1.wasm", server_side));
    assert!(applied.status.success(), "{}", stderr_of(&applied));
    assert_eq!(
        String::from_utf8_lossy(&applied.stdout).trim(),
        "configmap/policy serverside-applied"
    );
    assert_eq!(stored_module(&cluster, "policy"), first);
    let entry = managed_entry(&cluster, "policy", "kubectl").expect("kubectl's entry");
    assert_eq!(entry["operation"], "Apply", "{entry}");
    assert_eq!(entry["apiVersion"], "v1", "{entry}");
    assert_eq!(entry["fieldsType"], "FieldsV1", "{entry}");
    assert!(
        entry["fieldsV1"]["f:binaryData"]["f:policy.wasm"].is_object(),
        "{entry}"
    );

    // The same manager applies a new version: replaced.
    let second = module(250 * 1024, 2);
    cluster.write_bytes("v2.wasm", &second);
    let again = cluster.sh(&configmap_into("policy", "v2.wasm", server_side));
    assert!(again.status.success(), "{}", stderr_of(&again));
    assert_eq!(stored_module(&cluster, "policy"), second);

    // Another manager's different module conflicts, and nothing changes.
    let third = module(250 * 1024, 3);
    cluster.write_bytes("v3.wasm", &third);
    let other = server_side.replace(" -f -", " --field-manager=rollout-bot -f -");
    let refused = cluster.sh(&configmap_into("policy", "v3.wasm", &other));
    assert!(!refused.status.success());
    let message = stderr_of(&refused);
    assert!(
        message.contains(
            "Apply failed with 1 conflict: conflict with \"kubectl\": .binaryData.policy.wasm"
        ),
        "{message}"
    );
    assert!(message.contains("--force-conflicts"), "{message}");
    assert_eq!(stored_module(&cluster, "policy"), second);

    // Forced, it takes the field over.
    let forced = cluster.sh(&configmap_into(
        "policy",
        "v3.wasm",
        &format!("{other} --force-conflicts"),
    ));
    assert!(forced.status.success(), "{}", stderr_of(&forced));
    assert_eq!(stored_module(&cluster, "policy"), third);
    let bot = managed_entry(&cluster, "policy", "rollout-bot").expect("the bot's entry");
    assert!(
        bot["fieldsV1"]["f:binaryData"]["f:policy.wasm"].is_object(),
        "{bot}"
    );
    let kubectl = managed_entry(&cluster, "policy", "kubectl").expect("kubectl's entry");
    assert!(
        kubectl["fieldsV1"]["f:binaryData"]["f:policy.wasm"].is_null(),
        "{kubectl}"
    );
}

/// The client-side ways: `create --dry-run=client | apply -f -` (a create, then a strategic
/// merge patch computed from the last applied configuration), `replace` (a PUT, refused when
/// the object changed since it was read), and the API server's size limits: a 250 KB module
/// does not fit the last-applied annotation, a ConfigMap over 1 MiB and a body over 3 MiB are
/// refused, each in the API server's words.
#[test]
fn a_module_configmap_is_applied_client_side_replaced_and_held_to_the_size_limits() {
    let cluster = Embedded::start(&[]);
    let apply = "kubectl apply -f -";
    let server_side = "kubectl apply --server-side -f -";
    let small = module(20 * 1024, 1);
    cluster.write_bytes("small.wasm", &small);
    let created = cluster.sh(&configmap_into("small", "small.wasm", apply));
    assert!(created.status.success(), "{}", stderr_of(&created));
    assert_eq!(
        String::from_utf8_lossy(&created.stdout).trim(),
        "configmap/small created"
    );
    let newer = module(20 * 1024, 2);
    cluster.write_bytes("small.wasm", &newer);
    let configured = cluster.sh(&configmap_into("small", "small.wasm", apply));
    assert!(configured.status.success(), "{}", stderr_of(&configured));
    assert_eq!(
        String::from_utf8_lossy(&configured.stdout).trim(),
        "configmap/small configured"
    );
    assert_eq!(stored_module(&cluster, "small"), newer);
    let owner = managed_entry(&cluster, "small", "kubectl-client-side-apply").expect("entry");
    assert_eq!(owner["operation"], "Update", "{owner}");

    // A server-side apply of another module now conflicts with the client-side apply's field.
    cluster.write_bytes("other.wasm", &module(20 * 1024, 3));
    let refused = cluster.sh(&configmap_into("small", "other.wasm", server_side));
    let message = stderr_of(&refused);
    assert!(
        message.contains(
            "conflict with \"kubectl-client-side-apply\" using v1: .binaryData.policy.wasm"
        ),
        "{message}"
    );

    // Replaced: a PUT of the whole object.
    let replacement = module(20 * 1024, 4);
    cluster.write_bytes("small.wasm", &replacement);
    let replace = "kubectl replace -f -";
    let replaced = cluster.sh(&configmap_into("small", "small.wasm", replace));
    assert!(replaced.status.success(), "{}", stderr_of(&replaced));
    assert_eq!(
        String::from_utf8_lossy(&replaced.stdout).trim(),
        "configmap/small replaced"
    );
    assert_eq!(stored_module(&cluster, "small"), replacement);
    // A replace of what was read before another write is a conflict.
    let read = cluster.ok(&["get", "configmap", "small", "-n", SYSTEM_NS, "-o", "yaml"]);
    let stale = cluster.write("stale.yaml", &read);
    cluster.ok(&[
        "label",
        "configmap",
        "small",
        "-n",
        SYSTEM_NS,
        "touched=yes",
    ]);
    let stale_replace = format!("kubectl replace -f {}", stale.display());
    let conflict = cluster.sh(&stale_replace);
    assert!(!conflict.status.success());
    let message = stderr_of(&conflict);
    assert!(
        message.contains(
            "Operation cannot be fulfilled on configmaps \"small\": the object has been \
             modified; please apply your changes to the latest version and try again"
        ),
        "{message}"
    );

    // 250 KB, client-side: the last-applied annotation is over 256 KiB, as on a real cluster.
    cluster.write_bytes("large.wasm", &module(250 * 1024, 5));
    let too_long = cluster.sh(&configmap_into("large", "large.wasm", apply));
    assert!(!too_long.status.success());
    let message = stderr_of(&too_long);
    assert!(
        message.contains(
            "ConfigMap \"large\" is invalid: metadata.annotations: Too long: may not be more \
             than 262144 bytes"
        ),
        "{message}"
    );
    assert!(
        !cluster
            .run(&["get", "configmap", "large", "-n", SYSTEM_NS])
            .status
            .success()
    );
    // Server-side, the same module goes in.
    let large = cluster.sh(&configmap_into("large", "large.wasm", server_side));
    assert!(large.status.success(), "{}", stderr_of(&large));

    // Over 1 MiB of data.
    cluster.write_bytes("huge.wasm", &module(1024 * 1024 + 1, 6));
    let huge = cluster.sh(&configmap_into("huge", "huge.wasm", server_side));
    let message = stderr_of(&huge);
    assert!(
        message.contains(
            "ConfigMap \"huge\" is invalid: []: Too long: may not be more than 1048576 bytes"
        ),
        "{message}"
    );
    // A body over 3 MiB is not read.
    cluster.write_bytes("vast.wasm", &module(2_500_000, 7));
    let vast = cluster.sh(&configmap_into("vast", "vast.wasm", server_side));
    let message = stderr_of(&vast);
    assert!(
        message.contains("Request entity too large: limit is 3145728"),
        "{message}"
    );
}

/// The ConfigMap commands of docs/policy-authoring.md, section 5, run as they are written
/// (the files they name stand in for a module, its signature and the public key): each
/// creates or updates what it says.
#[test]
fn the_configmap_commands_of_the_policy_authoring_guide_work() {
    let guide =
        std::fs::read_to_string(cubepod_tests::workspace().join("docs/policy-authoring.md"))
            .expect("read docs/policy-authoring.md");
    let blocks = cubepod_tests::shell_blocks(&guide);
    let shipping: Vec<&String> = blocks
        .iter()
        .filter(|block| block.contains("kubectl create configmap"))
        .collect();
    assert_eq!(
        shipping.len(),
        2,
        "the guide's ConfigMap commands: {blocks:?}"
    );

    let cluster = Embedded::start(&[]);
    let path = "target/wasm32-wasip2/guest-release/cubepod_policy_guarded.wasm";
    let run = |block: &str| {
        let output = cluster.sh(block);
        assert!(output.status.success(), "{block}\n{}", stderr_of(&output));
    };
    // The plain one creates the ConfigMap, and the same command replaces the module later.
    for seed in [1, 2] {
        let bytes = module(230 * 1024, seed);
        cluster.write_bytes(path, &bytes);
        run(shipping[0]);
        assert_eq!(stored_module(&cluster, "cubepod-policy"), bytes);
    }
    let manager = managed_entry(&cluster, "cubepod-policy", "cubepod-policy")
        .expect("the guide's field manager");
    assert_eq!(manager["operation"], "Apply", "{manager}");

    // The signed one: the module and its signature together, the key beside them.
    let signed = module(230 * 1024, 3);
    cluster.write_bytes(path, &signed);
    cluster.write_bytes("policy.wasm.sig", b"MEUCIQ-signature");
    cluster.write_bytes("cosign.pub", b"-----BEGIN PUBLIC KEY-----\n");
    run(shipping[1]);
    assert_eq!(stored_module(&cluster, "cubepod-policy"), signed);
    // The signed block's other ConfigMap: the key.
    let key = cluster.ok(&[
        "get",
        "configmap",
        "cubepod-policy-verify-key",
        "-n",
        SYSTEM_NS,
        "-o",
        "jsonpath={.data.cosign\\.pub}",
    ]);
    assert_eq!(key, "-----BEGIN PUBLIC KEY-----\n");
    let signature = cluster.ok(&[
        "get",
        "configmap",
        "cubepod-policy",
        "-n",
        SYSTEM_NS,
        "-o",
        "jsonpath={.data.policy\\.wasm\\.sig}",
    ]);
    assert_eq!(signature, "MEUCIQ-signature");
}

/// A running sandbox's spec edited, as an operator sees it: cpu raised past the operator's
/// bound leaves it Running with its Pod and IP, `kubectl describe` showing `SpecValid` False
/// with the field, the bound and the fix; a resource edit within the bound shows `SpecApplied`
/// False (`PendingRestart`) while the Pod keeps its values, and reaches the Pod after a pause
/// and a resume. `kubectl explain` says which class each field is in.
#[test]
fn spec_edits_on_a_running_sandbox_say_what_they_do() {
    let cluster = Embedded::start(&[]);
    let manifest = cluster.write(
        "edited.yaml",
        &sandbox_yaml("edited", "Running", "  resources:\n    cpu: \"2\"\n"),
    );
    cluster.ok(&["apply", "-f", manifest.to_str().unwrap()]);
    cluster.until(&["get", "sandbox", "edited", "-n", NS], |out| {
        row(out, "edited").is_some_and(|r| r[1] == "Running")
    });
    let jsonpath = |path: &str| {
        cluster.ok(&[
            "get",
            "sandbox",
            "edited",
            "-n",
            NS,
            "-o",
            &format!("jsonpath={path}"),
        ])
    };
    let condition = |kind: &str, field: &str| {
        jsonpath(&format!(
            "{{.status.conditions[?(@.type==\"{kind}\")].{field}}}"
        ))
    };
    let pod_cpu = || {
        cluster.ok(&[
            "get",
            "pod",
            "edited",
            "-n",
            NS,
            "-o",
            "jsonpath={.spec.containers[0].resources.limits.cpu}",
        ])
    };
    let ip = jsonpath("{.status.podIP}");
    assert!(ip.starts_with("10."), "a Pod IP: {ip:?}");
    assert_eq!(condition("SpecApplied", "status"), "True");

    let patch = |spec: &str| {
        cluster.ok(&[
            "patch",
            "sandbox",
            "edited",
            "-n",
            NS,
            "--type",
            "merge",
            "-p",
            &format!("{{\"spec\":{spec}}}"),
        ])
    };
    // Past the bound (16 by default): refused, and what runs runs on.
    patch(r#"{"resources":{"cpu":"64"}}"#);
    let deadline = Instant::now() + PATIENCE;
    while condition("SpecValid", "status") != "False" {
        assert!(Instant::now() < deadline, "SpecValid never turned False");
        std::thread::sleep(Duration::from_millis(100));
    }
    let table = cluster.ok(&["get", "sandbox", "edited", "-n", NS]);
    let edited = row(&table, "edited").expect("the sandbox");
    assert_eq!(
        edited[1], "Running",
        "never Failed while its Pod runs: {table}"
    );
    assert_eq!(edited[4], ip, "its Pod IP kept: {table}");
    let pod = cluster.ok(&["get", "pod", "edited", "-n", NS]);
    assert_eq!(row(&pod, "edited").map(|r| r[2]), Some("Running"), "{pod}");
    assert_eq!(pod_cpu(), "2");
    let described = flat(&cluster.ok(&["describe", "sandbox", "edited", "-n", NS]));
    for said in [
        "Type: SpecValid",
        "spec.resources.cpu: \"64\" is more cpu than a sandbox may have, 16 \
         (--max-sandbox-cpu): lower spec.resources.cpu to at most that, or have the operator \
         raise the bound; the sandbox keeps its phase and its Pod as they were",
        "Warning InvalidSpec",
    ] {
        assert!(described.contains(said), "{said:?} in:\n{described}");
    }

    // Within the bound: valid again, and pending until the next start.
    patch(r#"{"resources":{"cpu":"4"}}"#);
    let deadline = Instant::now() + PATIENCE;
    while condition("SpecApplied", "reason") != "PendingRestart" {
        assert!(
            Instant::now() < deadline,
            "SpecApplied never said PendingRestart"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(condition("SpecValid", "status"), "True");
    assert_eq!(condition("SpecApplied", "status"), "False");
    assert_eq!(
        pod_cpu(),
        "2",
        "a running Pod keeps what it was started with"
    );
    let described = flat(&cluster.ok(&["describe", "sandbox", "edited", "-n", NS]));
    for said in [
        "Reason: PendingRestart",
        "changed since: spec.resources.cpu (now \"4\"), which the running Pod keeps until the \
         next start: pause and resume the sandbox",
        "Normal PendingRestart",
    ] {
        assert!(described.contains(said), "{said:?} in:\n{described}");
    }

    // A pause and a resume start a Pod with it.
    patch(r#"{"desiredState":"Paused"}"#);
    cluster.until(&["get", "sandbox", "edited", "-n", NS], |out| {
        row(out, "edited").is_some_and(|r| r[1] == "Paused")
    });
    patch(r#"{"desiredState":"Running"}"#);
    cluster.until(&["get", "sandbox", "edited", "-n", NS], |out| {
        row(out, "edited").is_some_and(|r| r[1] == "Running")
    });
    assert_eq!(pod_cpu(), "4");
    assert_eq!(condition("SpecApplied", "status"), "True");

    // The CRD says which class each field is in.
    let explained = flat(&cluster.ok(&["explain", "sandbox.spec.resources"]));
    assert!(
        explained
            .contains("Applied at the next start: a running Pod keeps what it was started with"),
        "{explained}"
    );
    let explained = flat(&cluster.ok(&["explain", "sandbox.spec.storage.workspaceSize"]));
    assert!(
        explained.contains("Immutable (refused after creation)"),
        "{explained}"
    );
}

/// `text` with every run of whitespace one space: what kubectl wraps or aligns, read as words.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
