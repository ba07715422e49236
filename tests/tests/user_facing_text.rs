//! Every line a person reads, in words: the real binary is driven through the demo's paths (the
//! seeded sandboxes and pools, a claim no ready member suits, a fork of a missing source, a
//! rollout whose shadow differs, a rollout of a module that is not one, and `policy test`,
//! `diff` and `inspect`), and every status string, condition and Event message and reason,
//! controller log field and CLI line is scanned for what Rust's debug formatting leaves:
//! `Type::Variant`, `Some(`, `None`, `Struct { field: `, byte dumps, and a condition or Event
//! message over several lines (a value shown as JSON may escape its quotes: that is JSON's). A mark fails the test with its line and where
//! it was read.

use std::process::Command;
use std::time::{Duration, Instant};

use cubepod_tests::kubectl::{Embedded, Kubectl, row};
use cubepod_tests::{binary, image_allowlist_policy, seed_file, workspace};
use serde_json::Value;

const NS: &str = "cubepod-workloads";
const SYSTEM: &str = "cubepod-system";

/// What Rust's `{:?}` leaves in `text`, if anything: the mark found.
fn debug_mark(text: &str) -> Option<&'static str> {
    let bytes = text.as_bytes();
    let before = |at: usize| at.checked_sub(1).map(|i| bytes[i] as char);
    // `SandboxPhase::Running`: a path to an enum's variant (not an IPv6 address's `::`).
    for (at, _) in text.match_indices("::") {
        let after = bytes.get(at + 2).map(|b| *b as char);
        if before(at).is_some_and(|c| c.is_ascii_alphanumeric())
            && after.is_some_and(|c| c.is_ascii_uppercase())
        {
            return Some("a Type::Variant path");
        }
    }
    for wrapper in ["Some(", "Ok(", "Err("] {
        for (at, _) in text.match_indices(wrapper) {
            if !before(at).is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Some("an Option or Result wrapper");
            }
        }
    }
    for (at, _) in text.match_indices("None") {
        let end = at + 4;
        let word_start = !before(at).is_some_and(|c| c.is_ascii_alphanumeric() || c == '"');
        let word_end = !bytes
            .get(end)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'"');
        // `egress: None` is the API's name of a network mode.
        let egress = text[..at].ends_with("egress ") || text[..at].ends_with("egress: ");
        if word_start && word_end && !egress {
            return Some("None");
        }
    }
    // `Struct { field: ...`.
    for (at, _) in text.match_indices(" { ") {
        let name = text[..at]
            .rsplit(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .next()
            .unwrap_or_default();
        let field: String = text[at + 3..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        let struct_name = name.chars().next().is_some_and(|c| c.is_ascii_uppercase());
        if struct_name && !field.is_empty() && text[at + 3 + field.len()..].starts_with(": ") {
            return Some("a struct literal");
        }
    }
    if text.contains("[0x") || text.contains("0x0,") {
        return Some("a byte dump");
    }
    None
}

/// Whether a one-line message has a run of spaces between its words: what a string literal
/// broken across source lines without `\` leaves.
fn spaced(text: &str) -> bool {
    text.trim().contains("   ")
}

/// Every line that has a mark, with where it was read.
#[derive(Default)]
struct Scan {
    read: usize,
    found: Vec<String>,
}

impl Scan {
    /// One message; `one_line`: a condition's or an Event's, which must fit on one line.
    fn text(&mut self, source: &str, text: &str, one_line: bool) {
        self.read += 1;
        if one_line && text.trim_end().contains('\n') {
            self.found.push(format!("{source}: several lines: {text}"));
        }
        if one_line && spaced(text) {
            self.found
                .push(format!("{source}: a run of spaces: {text}"));
        }
        for line in text.lines() {
            if let Some(mark) = debug_mark(line) {
                self.found.push(format!("{source}: {mark}: {line}"));
            }
        }
    }

    /// Every string under `value`; the messages of conditions and shadow examples one line.
    fn strings(&mut self, source: &str, value: &Value) {
        match value {
            Value::String(text) => self.text(source, text, true),
            Value::Array(items) => items.iter().for_each(|v| self.strings(source, v)),
            Value::Object(fields) => {
                for (key, value) in fields {
                    self.strings(&format!("{source}.{key}"), value);
                }
            }
            _ => {}
        }
    }

    fn output(&mut self, source: &str, stdout: &[u8], stderr: &[u8]) {
        self.text(source, &String::from_utf8_lossy(stdout), false);
        self.text(
            &format!("{source} (stderr)"),
            &String::from_utf8_lossy(stderr),
            false,
        );
    }
}

#[test]
fn the_marks_of_debug_formatting_are_found() {
    for (text, mark) in [
        (
            "stable phase SandboxPhase::Running",
            Some("a Type::Variant path"),
        ),
        ("stable Some(30) s", Some("an Option or Result wrapper")),
        ("candidate returned None", Some("None")),
        ("Leading { identity: \"a\" }", Some("a struct literal")),
        ("expected=[\n    0x0,", Some("a byte dump")),
        ("reaches 64:ff9b::/96 and fd00:ec2::254", None),
        ("spec.network.egress is \"None\" here", None),
        ("egress None reaches nothing", None),
        ("{namespaceSelector: {}}", None),
        (
            "status.phase: stable \"Running\", candidate \"Failed\"",
            None,
        ),
    ] {
        assert_eq!(debug_mark(text), mark, "{text}");
    }
    assert!(spaced(
        "from 1 to 86400                          (--max-active-deadline)"
    ));
    assert!(!spaced("from 1 to 86400 (--max-active-deadline)"));
}

/// `kubectl get KIND -A -o json`'s items.
fn items(kubectl: &Kubectl, kind: &str) -> Vec<Value> {
    let out = kubectl.ok(&["get", kind, "-A", "-o", "json"]);
    let list: Value = serde_json::from_str(&out).expect("kubectl prints JSON");
    list["items"].as_array().cloned().unwrap_or_default()
}

fn status(kubectl: &Kubectl, kind: &str, namespace: &str, name: &str) -> Value {
    let out = kubectl.ok(&["get", kind, name, "-n", namespace, "-o", "json"]);
    let object: Value = serde_json::from_str(&out).expect("kubectl prints JSON");
    object["status"].clone()
}

/// Polls `done` on the status of `kind` `namespace/name` until it holds.
fn until_status(
    kubectl: &Kubectl,
    (kind, namespace, name): (&str, &str, &str),
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let status = status(kubectl, kind, namespace, name);
        if done(&status) {
            return status;
        }
        assert!(Instant::now() < deadline, "{kind} {name}: {status}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn rollout(name: &str, map: &str, strategy: &str) -> String {
    format!(
        "apiVersion: cubepod.io/v1alpha1\nkind: PolicyRollout\nmetadata:\n  name: {name}\n  \
         namespace: {SYSTEM}\nspec:\n  module: {{configMap: {map}}}\n  strategy:\n{strategy}"
    )
}

/// `cubepod-controller ARGS` from the workspace; its output.
fn cli(args: &[&str]) -> std::process::Output {
    Command::new(binary())
        .args(args)
        .current_dir(workspace())
        .env_remove("RUST_LOG")
        .output()
        .expect("the binary runs")
}

#[test]
fn no_status_event_log_or_cli_line_carries_debug_formatting() {
    let dir = tempfile::tempdir().unwrap();
    let seed = "---\napiVersion: cubepod.io/v1alpha1\nkind: Sandbox\nmetadata: {name: busybox, \
                namespace: cubepod-workloads}\nspec: {image: docker.io/library/busybox:1.36}\n\
                ---\napiVersion: cubepod.io/v1alpha1\nkind: Sandbox\nmetadata: {name: \
                orphan-fork, namespace: cubepod-workloads}\nspec: {image: \
                ghcr.io/cubepod/sandbox-base:1.0, forkFrom: nowhere}\n";
    let seed = format!("--seed={}", seed_file(dir.path(), seed).display());
    let cluster = Embedded::start(&[&seed]);
    let members = ["python-pool-0", "python-pool-1", "python-pool-2"];
    cluster.until(&["get", "sandboxes", "-n", NS], |out| {
        members
            .iter()
            .chain(&["busybox"])
            .all(|name| row(out, name).is_some_and(|r| r[1] == "Running"))
    });
    // A claim of another image than the pool's ready members.
    let claim = cluster.write(
        "claim.yaml",
        &format!(
            "apiVersion: cubepod.io/v1alpha1\nkind: Sandbox\nmetadata: {{name: node-claim, \
             namespace: {NS}}}\nspec: {{image: ghcr.io/cubepod/sandbox-node:22, warmPool: \
             python-pool}}\n"
        ),
    );
    cluster.ok(&["apply", "-f", claim.to_str().unwrap()]);
    cluster.until(&["get", "sandboxes", "-n", NS], |out| {
        row(out, "node-claim").is_some_and(|r| r[1] == "Running")
    });

    // A rollout of bytes that are no module: refused.
    let junk = cluster.write("junk.wasm", "not a wasm component");
    let file = format!("--from-file=policy.wasm={}", junk.display());
    cluster.ok(&["create", "configmap", "junk", "-n", SYSTEM, &file]);
    let manifest = cluster.write(
        "junk.yaml",
        &rollout("junk", "junk", "    type: Immediate\n"),
    );
    cluster.ok(&["apply", "-f", manifest.to_str().unwrap()]);
    let refused = until_status(&cluster, ("policyrollout", SYSTEM, "junk"), |s| {
        s["phase"] == "Refused"
    });
    let admitted = refused["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Admitted")
        .cloned()
        .unwrap_or_default();
    let message = admitted["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("not a WebAssembly component") && message.contains("6e 6f 74 20"),
        "{refused}"
    );

    // A rollout whose shadow differs: the allowlist declines busybox.
    let file = format!(
        "--from-file=policy.wasm={}",
        image_allowlist_policy().display()
    );
    cluster.ok(&["create", "configmap", "allowlist", "-n", SYSTEM, &file]);
    let manifest = cluster.write(
        "allowlist.yaml",
        &rollout(
            "allowlist",
            "allowlist",
            "    type: Progressive\n    shadow: {duration: 1h}\n    canary:\n      steps:\n        \
             - {weight: 100, duration: 1h}\n",
        ),
    );
    cluster.ok(&["apply", "-f", manifest.to_str().unwrap()]);
    let shadowing = until_status(&cluster, ("policyrollout", SYSTEM, "allowlist"), |s| {
        let differences = s["shadow"]["differences"].as_array().cloned();
        let kinds: Vec<Value> = differences
            .unwrap_or_default()
            .iter()
            .map(|d| d["kind"].clone())
            .collect();
        kinds.contains(&"status".into()) && kinds.contains(&"events".into())
    });
    // `Admitted` names what was checked: no key is set, so no signature.
    let admitted = shadowing["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Admitted")
        .cloned()
        .unwrap_or_default();
    let message = admitted["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("passed the contract check and the self-test")
            && message.contains("no signature checked (no --policy-verify-key is set)"),
        "{shadowing}"
    );
    // A finding names the field and both values.
    let examples = shadowing["shadow"]["examples"].to_string();
    assert!(
        examples.contains(
            r#"status: status.conditions[type=SpecValid].status: stable \"True\", candidate \"False\""#
        ),
        "{shadowing}"
    );

    // The claim no ready member suits: told which field differs, and not that none is ready.
    let events = items(&cluster, "events");
    let about = |name: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["involvedObject"]["name"] == name)
            .filter_map(|e| e["reason"].as_str().map(str::to_string))
            .collect()
    };
    let claim = about("node-claim");
    assert!(claim.iter().any(|r| r == "NoMatchingMember"), "{claim:?}");
    assert!(!claim.iter().any(|r| r == "NoReadyMember"), "{claim:?}");

    let mut scan = Scan::default();
    for kind in ["sandboxes", "podwarmpools", "policyrollouts"] {
        for object in items(&cluster, kind) {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            scan.strings(&format!("{kind}/{name} status"), &object["status"]);
        }
    }
    for event in &events {
        let name = event["metadata"]["name"].as_str().unwrap_or_default();
        for field in ["reason", "message"] {
            let text = event[field].as_str().unwrap_or_default();
            scan.text(&format!("event {name} {field}"), text, true);
        }
    }
    for (what, args) in [
        (
            "kubectl get -o wide",
            &["get", "sandboxes,podwarmpools", "-A", "-o", "wide"][..],
        ),
        ("kubectl describe", &["describe", "sandboxes", "-n", NS][..]),
        (
            "kubectl describe",
            &["describe", "policyrollouts", "-n", SYSTEM][..],
        ),
    ] {
        scan.text(what, &cluster.ok(args), false);
    }
    for line in cluster.controller.logs() {
        scan.strings("controller log", &line["fields"]);
    }
    scan.text("controller stderr", &cluster.controller.stderr(), false);

    // The CLI: a module refused, the default's scenarios, a diff and an inspection.
    let allowlist = image_allowlist_policy().to_str().expect("a UTF-8 path");
    let junk = junk.to_str().expect("a UTF-8 path");
    for args in [
        &["policy", "test", junk][..],
        &["policy", "inspect", junk][..],
        &["policy", "test", "builtin:default", "tests/scenarios"][..],
        &[
            "policy",
            "diff",
            "builtin:default",
            allowlist,
            "examples/policies/image-allowlist/scenarios",
        ][..],
        &["policy", "inspect", allowlist][..],
    ] {
        let out = cli(args);
        scan.output(&args[..2].join(" "), &out.stdout, &out.stderr);
    }

    assert!(scan.read > 100, "only {} texts read", scan.read);
    assert!(
        scan.found.is_empty(),
        "debug formatting where a person reads:\n{}",
        scan.found.join("\n")
    );
}
