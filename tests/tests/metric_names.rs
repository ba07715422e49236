//! The metric names written outside the code stay true: the README's metric tables list every
//! family `/metrics` exposes and nothing else (with its type and labels), and every metric the
//! alerts and the dashboard of `deploy/monitoring/` query exists there.
//!
//! `/metrics` is read from the real binary against the fake API server as Prometheus reads it
//! through the ServiceMonitor (over HTTPS, with a token the fake allows), with leader election,
//! running the hostile test policy over a pool and sandboxes chosen so that every family has a
//! series: a plain sandbox, one whose reconcile floods kube-client (a budget trap) and one that
//! asks for a privileged Pod (a boundary refusal).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cubepod_kube::{Cluster, Resource};
use cubepod_tests::apiserver::{DEFAULT_SEED, KubeconfigAuth};
use cubepod_tests::convergence::{NS, TOKEN, block, create_sandbox, fake_server};
use cubepod_tests::{Controller, backticked, hostile_policy, workspace};
use serde_json::{Value, json};

const PATIENCE: Duration = Duration::from_secs(120);

/// A family as `/metrics` exposes it: its type and label names (without `le`).
#[derive(Debug)]
struct Family {
    kind: String,
    labels: BTreeSet<String>,
}

fn families(text: &str) -> BTreeMap<String, Family> {
    let mut out: BTreeMap<String, Family> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name type");
            out.insert(
                name.to_string(),
                Family {
                    kind: kind.to_string(),
                    labels: BTreeSet::new(),
                },
            );
        }
    }
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("Prometheus text format");
    for sample in scrape.samples {
        let name = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                sample
                    .metric
                    .strip_suffix(suffix)
                    .filter(|base| out.get(*base).is_some_and(|f| f.kind == "histogram"))
            })
            .unwrap_or(&sample.metric)
            .to_string();
        if let Some(family) = out.get_mut(&name) {
            family
                .labels
                .extend(sample.labels.keys().filter(|k| *k != "le").cloned());
        }
    }
    out
}

/// Every family, once each has a series.
fn exposed() -> &'static BTreeMap<String, Family> {
    static EXPOSED: std::sync::OnceLock<BTreeMap<String, Family>> = std::sync::OnceLock::new();
    EXPOSED.get_or_init(|| {
        let fake = fake_server(Duration::from_millis(50), DEFAULT_SEED);
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = fake
            .write_kubeconfig(dir.path(), &KubeconfigAuth::Token(TOKEN.to_string()))
            .unwrap();
        let policy = format!("--policy={}", hostile_policy().display());
        let controller = Controller::start_with_kubeconfig(
            &kubeconfig,
            &[
                policy.as_str(),
                "--leader-elect",
                "--lease-namespace=cubepod-workloads",
            ],
        );
        controller.wait_for("/readyz", PATIENCE, |status, _| status == 200);
        let cluster = fake.cluster();
        for name in ["a", "flood", "privileged"] {
            create_sandbox(&cluster, name);
        }
        let pool = json!({
            "apiVersion": "cubepod.io/v1alpha1", "kind": "PodWarmPool",
            "metadata": {"name": "warm", "namespace": NS},
            "spec": {"replicas": 1, "template": {"image": "ghcr.io/cubepod/sandbox-base:1.0"}},
        });
        block(cluster.create(Resource::PodWarmPool, NS, pool)).expect("create pool");
        let body = controller.wait_for("/metrics", PATIENCE, |_, body| {
            let found = families(body);
            let has = |name: &str| found.get(name).is_some_and(|f| !f.labels.is_empty());
            has("cubepod_guest_traps_total")
                && has("cubepod_boundary_refusals_total")
                && has("cubepod_warmpool_ready")
                && has("rest_client_requests_total")
                && has("leader_election_master_status")
        });
        drop(fake);
        families(&body)
    })
}

/// The rows of the README's tables under `## Metrics`: (names, type, labels cell).
fn readme_rows() -> Vec<(Vec<String>, String, String)> {
    let readme = std::fs::read_to_string(workspace().join("README.md")).expect("README.md");
    let section = readme
        .split("\n## Metrics")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("a ## Metrics section");
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            assert!(cells.len() >= 3, "a row of metric, type, labels: {line}");
            (
                backticked(cells[0]),
                cells[1].to_string(),
                cells[2].to_string(),
            )
        })
        .collect()
}

#[test]
fn the_readme_lists_every_family_metrics_exposes_and_no_other() {
    let exposed = exposed();
    let mut listed = BTreeSet::new();
    let mut wrong = Vec::new();
    for (names, kind, labels) in readme_rows() {
        let mentioned = backticked(&labels);
        for name in names {
            listed.insert(name.clone());
            let Some(family) = exposed.get(&name) else {
                wrong.push(format!("{name}: listed, but not on /metrics"));
                continue;
            };
            if !kind.starts_with(&family.kind) {
                wrong.push(format!("{name}: listed as {kind}, is a {}", family.kind));
            }
            for label in &family.labels {
                if !mentioned.contains(label) {
                    wrong.push(format!("{name}: label {label} is not in the README"));
                }
            }
        }
    }
    for name in exposed.keys() {
        if !listed.contains(name) {
            wrong.push(format!("{name}: on /metrics, not in the README"));
        }
    }
    assert!(
        wrong.is_empty(),
        "README metric tables:\n{}",
        wrong.join("\n")
    );
}

/// The metric names a PromQL expression reads: what is left once strings, label matchers,
/// ranges, grouping clauses, numbers, functions and keywords are taken out.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut text = String::new();
    let mut chars = expr.chars().peekable();
    // Strings and the insides of {...} and [...] go.
    let mut depth_brace = 0;
    let mut depth_bracket = 0;
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' => {
                for d in chars.by_ref() {
                    if d == c {
                        break;
                    }
                }
            }
            '{' => depth_brace += 1,
            '}' => depth_brace -= 1,
            '[' => depth_bracket += 1,
            ']' => depth_bracket -= 1,
            _ if depth_brace > 0 || depth_bracket > 0 => {}
            _ => text.push(c),
        }
    }
    // Grouping clauses name labels, not metrics.
    for keyword in [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ] {
        while let Some(at) = find_word(&text, keyword) {
            let after = &text[at + keyword.len()..];
            let open = after.find('(').filter(|i| after[..*i].trim().is_empty());
            let end = open.and_then(|o| after[o..].find(')').map(|c| o + c + 1));
            let cut = at + keyword.len() + end.unwrap_or(0);
            text.replace_range(at..cut, " ");
        }
    }
    let keywords = ["and", "or", "unless", "offset", "bool", "inf", "nan"];
    let mut names = BTreeSet::new();
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_digit() || (c == '.' && bytes.get(i + 1).is_some_and(char::is_ascii_digit)) {
            // A number, exponent included (1e-9).
            i += 1;
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric()
                    || bytes[i] == '.'
                    || (matches!(bytes[i], '-' | '+') && matches!(bytes[i - 1], 'e' | 'E')))
            {
                i += 1;
            }
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric() || matches!(bytes[i], '_' | ':'))
            {
                i += 1;
            }
            let word: String = bytes[start..i].iter().collect();
            let mut j = i;
            while j < bytes.len() && bytes[j].is_whitespace() {
                j += 1;
            }
            let function = bytes.get(j) == Some(&'(');
            if !function && !keywords.contains(&word.to_ascii_lowercase().as_str()) {
                names.insert(word);
            }
            continue;
        }
        i += 1;
    }
    names
}

fn find_word(text: &str, word: &str) -> Option<usize> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).map(|(i, _)| i).find(|&i| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

#[test]
fn promql_names_are_found_under_functions_matchers_and_clauses() {
    assert_eq!(
        metric_names(
            "histogram_quantile(0.99, sum by (le, controller) (rate(x_seconds_bucket{job=\"j\", a=~\"b|c\"}[5m]))) / clamp_min(y_total offset 1h, 1e-9) > 0.1 or absent(up{job=\"j\"}) and on (name) z"
        ),
        ["up", "x_seconds_bucket", "y_total", "z"]
            .into_iter()
            .map(str::to_string)
            .collect()
    );
}

/// Every PromQL expression of `deploy/monitoring/`: the alerts' and the dashboard's.
fn monitoring_queries() -> Vec<(String, String)> {
    let dir = workspace().join("deploy/monitoring");
    let rules: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(dir.join("prometheusrule.yaml")).expect("prometheusrule.yaml"),
    )
    .expect("YAML");
    let mut queries = Vec::new();
    for group in rules["spec"]["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let what = rule["alert"]
                .as_str()
                .or(rule["record"].as_str())
                .unwrap_or("?");
            queries.push((
                format!("alert {what}"),
                rule["expr"].as_str().expect("expr").to_string(),
            ));
        }
    }
    let board: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("dashboards/cubepod-controller.json"))
            .expect("the dashboard"),
    )
    .expect("JSON");
    for panel in board["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or("?");
            queries.push((
                format!("panel {title}"),
                target["expr"].as_str().expect("expr").to_string(),
            ));
        }
    }
    queries
}

#[test]
fn every_metric_the_monitoring_files_query_is_exposed() {
    let exposed = exposed();
    let queries = monitoring_queries();
    assert!(queries.len() >= 20, "{} queries", queries.len());
    let mut missing = Vec::new();
    let mut used = BTreeSet::new();
    for (what, expr) in &queries {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{what}: no metric in {expr}");
        for name in names {
            // `up` is the series Prometheus adds for each scrape target.
            if name == "up" {
                continue;
            }
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .filter(|base| exposed.get(*base).is_some_and(|f| f.kind == "histogram"))
                .unwrap_or(&name);
            if exposed.contains_key(family) {
                used.insert(family.to_string());
            } else {
                missing.push(format!("{what}: {name} is not on /metrics ({expr})"));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
    // The alerts the folder promises.
    for family in [
        "controller_runtime_reconcile_errors_total",
        "cubepod_guest_traps_total",
        "cubepod_boundary_refusals_total",
        "cubepod_policy_swaps_total",
        "leader_election_master_status",
    ] {
        assert!(
            queries
                .iter()
                .any(|(what, expr)| what.starts_with("alert") && expr.contains(family)),
            "no alert on {family}"
        );
    }
    assert!(used.len() >= 15, "{used:?}");
}
