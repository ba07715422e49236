//! The results as a table (stdout), as `docs/performance.md` and as `docs/performance.svg`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

use super::claims::ClaimRun;
use super::create::CreateRun;
use super::rollout::{Stage, StageRun};
use super::stats::{median, p50_p99_micros};
use super::swap;
use super::{Protocol, Results};

/// Writes a controller makes for one new sandbox, plus the user's own create: what the API
/// serves per sandbox.
const API_WRITES_PER_SANDBOX: f64 = 7.0;

pub const TARGET_PODS_PER_SECOND: f64 = 1_500.0;
pub const TARGET_WRITES_PER_SANDBOX: f64 = 6.0;
pub const TARGET_DECISION_P50_MICROS: f64 = 20.0;
/// Through wasm as the controller calls it against native, p50: a converged resync (answered
/// from the module's memo), and a new sandbox.
pub const TARGET_WASM_NATIVE_RATIO_CONVERGED: f64 = 2.0;
pub const TARGET_WASM_NATIVE_RATIO_NEW: f64 = 1.5;
pub const TARGET_RSS_MIB: [(usize, f64); 2] = [(10_000, 64.0), (100_000, 400.0)];

/// A restart's peak RSS (VmHWM), at most this many times the RSS it settles at.
pub const RESTART_PEAK_RATIO: f64 = 1.3;
pub const TARGET_REAP_MILLIS: f64 = 10.0;
pub const TARGET_SWAP_MILLIS: f64 = 100.0;
pub const TARGET_COMPONENT_KIB: f64 = 300.0;
/// Controller CPU per new sandbox at N = 1,000, µs, by protocol.
pub const TARGET_CPU_PER_SANDBOX_MICROS_H2: f64 = 500.0;
pub const TARGET_CPU_PER_SANDBOX_MICROS_HTTP1: f64 = 600.0;
/// Sandboxes/s over HTTP/1.1 at least this share of those over HTTP/2.
pub const TARGET_HTTP1_SHARE: f64 = 0.85;
/// A burst of claims at N = 300: claims/s, and as a multiple of the run's cold sandboxes/s.
pub const TARGET_CLAIMS_PER_SECOND: f64 = 1_000.0;
pub const TARGET_CLAIMS_OVER_COLD: f64 = 2.0;
pub const TARGET_CLAIM_P50_MILLIS: f64 = 20.0;
pub const TARGET_CLAIM_P99_MILLIS: f64 = 100.0;
/// The adoption and the claim's status, and the claim's finalizer.
pub const TARGET_WRITES_PER_CLAIM: f64 = 3.0;
/// The controller's CPU per claim against its CPU per cold sandbox, in the same run (issue 57).
pub const TARGET_CLAIM_TO_COLD_CPU: f64 = 0.4;
/// Requests/s through the router at least this share of the same client's straight to the Pod.
pub const TARGET_ROUTER_SHARE: f64 = 0.8;
/// What the router adds to the p99 at 1,000 requests/s, µs.
pub const TARGET_ROUTER_ADDED_P99_MICROS: f64 = 1_000.0;
/// A wake, paused to first byte, beyond the simulated Pod start, ms.
pub const TARGET_WAKE_MILLIS: f64 = 200.0;
/// The router's RSS after more requests to each of its sandboxes, beyond its RSS after one
/// to each: flat, its state per sandbox and not per request.
pub const TARGET_ROUTER_RSS_GROWTH_PERCENT: f64 = 5.0;
/// The N the claims targets are set at.
const CLAIMS_TARGET_N: usize = 300;

/// Marks the end of what `--write-docs` regenerates; what follows it is kept.
const GENERATED_END: &str = "<!-- end of the generated part: what follows is kept on rewrite -->";

pub struct Row {
    pub metric: String,
    pub value: String,
    pub target: String,
    pub verdict: String,
}

fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// "met, 23% to spare" / "missed by 410 (27% short)" for a figure that must be at least
/// `target`.
fn at_least(value: f64, target: f64, unit: &str) -> String {
    if value >= target {
        format!("met, {:.0}% to spare", (value / target - 1.0) * 100.0)
    } else {
        format!(
            "**missed** by {:.0}{unit} ({:.0}% short)",
            target - value,
            (1.0 - value / target) * 100.0
        )
    }
}

/// The same for a figure that must be at most `target` (`strict`: below it).
fn at_most(value: f64, target: f64, unit: &str, digits: usize) -> String {
    let met = value < target || (value == target && target > 0.0);
    if target == 0.0 {
        return if value == 0.0 {
            "met".to_string()
        } else {
            format!("**missed** by {value:.digits$}{unit}")
        };
    }
    if met {
        format!("met, {:.0}% under", (1.0 - value / target) * 100.0)
    } else if unit == "×" {
        format!("**missed**: {:.1} times the bound", value / target)
    } else {
        format!(
            "**missed** by {:.digits$}{unit} ({:.1}× the target)",
            value - target,
            value / target
        )
    }
}

fn median_of<T>(runs: &[T], f: impl Fn(&T) -> f64) -> Option<f64> {
    median(&runs.iter().map(f).collect::<Vec<_>>())
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn runs_note(count: usize) -> String {
    if count == 1 {
        "1 run".to_string()
    } else {
        format!("median of {count} runs")
    }
}

/// The controller's writes by kind, as "2 create persistentvolumeclaims, 1 patch sandboxes".
fn writes_list(writes: &BTreeMap<String, usize>, per: usize) -> String {
    if writes.is_empty() {
        return "none".to_string();
    }
    writes
        .iter()
        .map(|(what, count)| {
            let each = *count as f64 / per as f64;
            if (each - each.round()).abs() < 0.005 {
                format!("{each:.0} {what}")
            } else {
                format!("{each:.2} {what}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// RSS by N, MiB: from the controller that resynced the state it created where there is one,
/// else from the seeded runs.
pub fn rss_by_n(results: &Results) -> BTreeMap<usize, f64> {
    let mut rss = BTreeMap::new();
    for (n, runs) in &results.seeded {
        if let Some(m) = median_of(runs, |r| mib(r.memory.rss_kib)) {
            rss.insert(*n, m);
        }
    }
    for (n, runs) in &results.creates {
        if let Some(m) = median_of(runs, |r| mib(r.resync_memory.rss_kib)) {
            rss.insert(*n, m);
        }
    }
    rss
}

/// The controller's CPU per new sandbox and per request, beside the fake's in the same runs.
fn cpu_rows(protocol: Protocol, n: usize, runs: &[CreateRun]) -> Vec<Row> {
    let Some(cpu) = median_of(runs, CreateRun::cpu_per_sandbox_micros) else {
        return Vec::new();
    };
    let per_request = median_of(runs, CreateRun::cpu_per_request_micros).unwrap_or(f64::NAN);
    let requests = median_of(runs, |r| r.requests as f64 / r.n as f64).unwrap_or(f64::NAN);
    let fake =
        median_of(runs, |r| r.bench_cpu.as_secs_f64() / r.n as f64 * 1e6).unwrap_or(f64::NAN);
    let target = match protocol {
        Protocol::H2 => TARGET_CPU_PER_SANDBOX_MICROS_H2,
        Protocol::Http1 => TARGET_CPU_PER_SANDBOX_MICROS_HTTP1,
    };
    let (target, verdict) = if n == 1_000 {
        (
            format!("≤ {target:.0} µs"),
            at_most(cpu, target + 1e-9, " µs", 0),
        )
    } else {
        ("—".to_string(), String::new())
    };
    let mut rows = vec![Row {
        metric: format!(
            "Controller CPU per new sandbox, {}, N = {}",
            protocol.label(),
            thousands(n)
        ),
        value: format!(
            "{cpu:.0} µs (fake API server + load generator in the same runs: {fake:.0} µs), {}",
            runs_note(runs.len())
        ),
        target,
        verdict,
    }];
    // Where the machine has a counter for `perf stat` (the callgrind rows count anywhere).
    if let Some(m) = median_of(runs, |r| {
        r.instructions_per_sandbox_millions().unwrap_or(f64::NAN)
    })
    .filter(|m| m.is_finite())
    {
        rows.push(Row {
            metric: format!(
                "Controller instructions per new sandbox, {}, N = {}",
                protocol.label(),
                thousands(n)
            ),
            value: format!(
                "{m:.2} million (user + kernel, `perf stat`), {}",
                runs_note(runs.len())
            ),
            target: "—".to_string(),
            verdict: String::new(),
        });
    }
    rows.push(Row {
        metric: format!(
            "Controller CPU per API request, {}, N = {}",
            protocol.label(),
            thousands(n)
        ),
        value: format!("{per_request:.0} µs ({requests:.2} requests per sandbox)"),
        target: "—".to_string(),
        verdict: String::new(),
    });
    rows
}

/// The controller's instructions per new sandbox and per API request, counted by callgrind.
fn counted_rows(counted: &[CreateRun]) -> Vec<Row> {
    counted
        .iter()
        .filter_map(|run| {
            let m = run.instructions_per_sandbox_millions()?;
            let requests = run.requests.max(1) as f64;
            let per_request = run.instructions? as f64 / requests / 1e3;
            Some(Row {
                metric: format!(
                    "Controller instructions per new sandbox (callgrind), {}, N = {}",
                    run.protocol.label(),
                    thousands(run.n)
                ),
                value: format!(
                    "{m:.3} million, user space ({per_request:.0} thousand per API request; \
                     {:.2} reconciles and {:.2} requests per sandbox under valgrind), one run",
                    run.breakdown.reconciles / run.n as f64,
                    requests / run.n as f64
                ),
                target: "—".to_string(),
                verdict: String::new(),
            })
        })
        .collect()
}

/// Sandboxes/s over HTTP/1.1, and at N = 1,000 against the same over HTTP/2.
fn http1_rate_rows(n: usize, runs: &[CreateRun], h2: Option<&Vec<CreateRun>>) -> Vec<Row> {
    let Some(pods) = median_of(runs, CreateRun::pods_per_second) else {
        return Vec::new();
    };
    let h2 = h2.and_then(|runs| median_of(runs, CreateRun::pods_per_second));
    let (target, verdict) = match h2.filter(|_| n == 1_000) {
        Some(h2) => (
            format!("≥ HTTP/2's − {:.0}%", (1.0 - TARGET_HTTP1_SHARE) * 100.0),
            at_least(pods, h2 * TARGET_HTTP1_SHARE, "/s"),
        ),
        None => ("—".to_string(), String::new()),
    };
    let running = median_of(runs, CreateRun::running_per_second).unwrap_or(f64::NAN);
    vec![Row {
        metric: format!(
            "Sandboxes/s over plain HTTP/1.1, POST to Pod exists, N = {}",
            thousands(n)
        ),
        value: format!(
            "{pods:.0}/s{} (to Running {running:.0}/s), {}",
            h2.map_or(String::new(), |h2| format!(
                ", {:.0}% of HTTP/2's {h2:.0}/s",
                pods / h2 * 100.0
            )),
            runs_note(runs.len())
        ),
        target,
        verdict,
    }]
}

pub fn rows(results: &Results) -> Vec<Row> {
    let mut rows = Vec::new();
    let capacity = median(&results.capacity);
    if let Some(capacity) = capacity {
        rows.push(Row {
            metric: "Fake API server raw capacity: POST Secret, HTTP/2 + TLS, 64 streams"
                .to_string(),
            value: format!("{capacity:.0} writes/s"),
            target: "(reference)".to_string(),
            verdict: format!(
                "ceiling {:.0} sandboxes/s at {API_WRITES_PER_SANDBOX:.0} writes each",
                capacity / API_WRITES_PER_SANDBOX
            ),
        });
    }
    let share = |per_second: f64| {
        capacity.map_or(String::new(), |c| {
            format!(
                " ({:.0}% of the API's ceiling)",
                per_second * API_WRITES_PER_SANDBOX / c * 100.0
            )
        })
    };
    for (n, runs) in &results.creates {
        let note = runs_note(runs.len());
        if let Some(pods) = median_of(runs, |r| r.pods_per_second()) {
            let (target, verdict) = if *n == 1_000 {
                (
                    format!("≥ {TARGET_PODS_PER_SECOND:.0}/s"),
                    at_least(pods, TARGET_PODS_PER_SECOND, "/s"),
                )
            } else {
                ("—".to_string(), String::new())
            };
            rows.push(Row {
                metric: format!("Sandboxes/s, POST to Pod exists, N = {}", thousands(*n)),
                value: format!("{pods:.0}/s{}, {note}", share(pods)),
                target,
                verdict,
            });
        }
        if let Some(running) = median_of(runs, |r| r.running_per_second()) {
            rows.push(Row {
                metric: format!("Sandboxes/s, POST to status Running, N = {}", thousands(*n)),
                value: format!("{running:.0}/s{}, {note}", share(running)),
                target: "—".to_string(),
                verdict: String::new(),
            });
        }
        if let Some(writes) = median_of(runs, |r| r.writes_per_sandbox()) {
            let example = runs
                .iter()
                .min_by(|a, b| {
                    (a.writes_per_sandbox() - writes)
                        .abs()
                        .total_cmp(&(b.writes_per_sandbox() - writes).abs())
                })
                .map(|r| writes_list(&r.writes, r.n))
                .unwrap_or_default();
            rows.push(Row {
                metric: format!(
                    "API writes per new sandbox (controller), N = {}, Events apart",
                    thousands(*n)
                ),
                value: format!("{writes:.2}: {example}"),
                target: format!("≤ {TARGET_WRITES_PER_SANDBOX:.0}"),
                verdict: at_most(writes, TARGET_WRITES_PER_SANDBOX + 1e-9, "", 2),
            });
            if let Some(events) = median_of(runs, |r| r.events_per_sandbox()) {
                rows.push(Row {
                    metric: format!(
                        "Event writes per new sandbox (Normal Events on, the default), N = {}",
                        thousands(*n)
                    ),
                    value: format!("{events:.2}, {note}"),
                    target: "—".to_string(),
                    verdict: String::new(),
                });
            }
        }
        if let Some(resync) = median_of(runs, |r| r.resync_writes.values().sum::<usize>() as f64) {
            let took = median_of(runs, |r| r.resync_took.as_secs_f64()).unwrap_or(f64::NAN);
            rows.push(Row {
                metric: format!("API writes, full resync of converged N = {}", thousands(*n)),
                value: format!("{resync:.0} (resync took {took:.1} s), {note}"),
                target: "0".to_string(),
                verdict: at_most(resync, 0.0, " writes", 0),
            });
        }
    }
    for (protocol, creates) in [
        (Protocol::H2, &results.creates),
        (Protocol::Http1, &results.creates_http1),
    ] {
        for (n, runs) in creates {
            rows.extend(cpu_rows(protocol, *n, runs));
            if protocol == Protocol::Http1 {
                rows.extend(http1_rate_rows(*n, runs, results.creates.get(n)));
            }
        }
    }
    rows.extend(claim_rows(results));
    rows.extend(rollout_rows(results));
    rows.extend(counted_rows(&results.counted));
    for (n, runs) in &results.seeded {
        if results.creates.contains_key(n) {
            continue;
        }
        if let Some(resync) = median_of(runs, |r| r.resync_writes.values().sum::<usize>() as f64) {
            let took = median_of(runs, |r| r.settled.as_secs_f64()).unwrap_or(f64::NAN);
            rows.push(Row {
                metric: format!(
                    "API writes, full resync of converged N = {} (seeded)",
                    thousands(*n)
                ),
                value: format!(
                    "{resync:.0} (start to settled {took:.1} s), {}",
                    runs_note(runs.len())
                ),
                target: "0".to_string(),
                verdict: at_most(resync, 0.0, " writes", 0),
            });
        }
    }
    let rounds = results.decision.len();
    for case in results.decision.first().into_iter().flatten() {
        // The median over the rounds of each round's percentile.
        let of_rounds = |pick: fn(&super::decision::Case) -> (f64, f64), p99: bool| {
            let values: Vec<f64> = results
                .decision
                .iter()
                .filter_map(|round| round.iter().find(|c| c.label == case.label))
                .map(|c| if p99 { pick(c).1 } else { pick(c).0 })
                .collect();
            median(&values).unwrap_or(f64::NAN)
        };
        let native = |c: &super::decision::Case| p50_p99_micros(&c.native);
        let wasm = |c: &super::decision::Case| p50_p99_micros(&c.wasm);
        let (native50, native99) = (of_rounds(native, false), of_rounds(native, true));
        let (wasm50, wasm99) = (of_rounds(wasm, false), of_rounds(wasm, true));
        rows.push(Row {
            metric: format!(
                "Reconcile decision, wasm with a fresh Store: {} ({} kube-client calls)",
                case.label, case.calls
            ),
            value: format!(
                "p50 {wasm50:.1} µs, p99 {wasm99:.1} µs ({})",
                runs_note(rounds).replace("run", "round")
            ),
            target: format!("p50 < {TARGET_DECISION_P50_MICROS:.0} µs"),
            verdict: at_most(wasm50, TARGET_DECISION_P50_MICROS, " µs", 1),
        });
        rows.push(Row {
            metric: format!("Reconcile decision, native: {}", case.label),
            value: format!("p50 {native50:.2} µs, p99 {native99:.2} µs"),
            target: "—".to_string(),
            verdict: String::new(),
        });
        // The path the controller takes: the memo's, for an input whose answer it keeps.
        let memo = |c: &super::decision::Case| {
            if c.memo.is_empty() {
                (f64::NAN, f64::NAN)
            } else {
                p50_p99_micros(&c.memo)
            }
        };
        let mut ratio = wasm50 / native50;
        let mut note = String::new();
        if !case.memo.is_empty() {
            let (memo50, memo99) = (of_rounds(memo, false), of_rounds(memo, true));
            rows.push(Row {
                metric: format!(
                    "Reconcile decision, wasm answered from the memo: {} (a later now, another \
                     credential)",
                    case.label
                ),
                value: format!("p50 {memo50:.2} µs, p99 {memo99:.2} µs"),
                target: "—".to_string(),
                verdict: String::new(),
            });
            note = format!(" (from the memo; a fresh Store {ratio:.1}×)");
            ratio = memo50 / native50;
        }
        let target = if case.calls == 0 {
            TARGET_WASM_NATIVE_RATIO_CONVERGED
        } else {
            TARGET_WASM_NATIVE_RATIO_NEW
        };
        rows.push(Row {
            metric: format!("Reconcile decision, wasm / native p50: {}", case.label),
            value: format!("{ratio:.1}×{note}"),
            target: format!("≤ {target}×"),
            verdict: at_most(ratio, target + 1e-9, "×", 1),
        });
    }
    let targets: BTreeMap<usize, f64> = TARGET_RSS_MIB.into_iter().collect();
    for (n, runs) in &results.creates {
        if let Some(rss) = median_of(runs, |r| mib(r.resync_memory.rss_kib)) {
            let peak = median_of(runs, |r| mib(r.resync_memory.hwm_kib)).unwrap_or(f64::NAN);
            let created = median_of(runs, |r| mib(r.created_memory.rss_kib)).unwrap_or(f64::NAN);
            let target = targets.get(n);
            rows.push(Row {
                metric: format!(
                    "Controller RSS, {} sandboxes and children cached (restarted over them)",
                    thousands(*n)
                ),
                value: format!(
                    "{rss:.1} MiB (peak {peak:.1}; {created:.1} MiB in the controller that \
                     created them), {}",
                    runs_note(runs.len())
                ),
                target: target.map_or("—".to_string(), |t| format!("< {t:.0} MiB")),
                verdict: target.map_or(String::new(), |t| at_most(rss, *t, " MiB", 1)),
            });
        }
    }
    for (n, runs) in &results.seeded {
        if let Some(rss) = median_of(runs, |r| mib(r.memory.rss_kib)) {
            let peak = median_of(runs, |r| mib(r.memory.hwm_kib)).unwrap_or(f64::NAN);
            let cross_check = results.creates.contains_key(n);
            let target = targets.get(n).filter(|_| !cross_check);
            rows.push(Row {
                metric: format!(
                    "Controller RSS, {} sandboxes and children cached (seeded{})",
                    thousands(*n),
                    if cross_check { ", cross-check" } else { "" }
                ),
                value: format!("{rss:.1} MiB (peak {peak:.1}), {}", runs_note(runs.len())),
                target: target.map_or("—".to_string(), |t| format!("< {t:.0} MiB")),
                verdict: target.map_or(String::new(), |t| at_most(rss, *t, " MiB", 1)),
            });
        }
    }
    for (lists, by_n) in [
        ("paging lists by `limit`", &results.seeded),
        (
            "answering each list whole, ignoring `limit`",
            &results.seeded_whole,
        ),
    ] {
        for (n, runs) in by_n {
            let ratio = |r: &super::rss::SeededRun| {
                r.memory.hwm_kib as f64 / r.memory.rss_kib.max(1) as f64
            };
            let (Some(rss), Some(peak), Some(times)) = (
                median_of(runs, |r| mib(r.memory.rss_kib)),
                median_of(runs, |r| mib(r.memory.hwm_kib)),
                median_of(runs, ratio),
            ) else {
                continue;
            };
            rows.push(Row {
                metric: format!(
                    "Controller restart over {} seeded sandboxes, the API server {lists}: peak \
                     (VmHWM) against the settled RSS",
                    thousands(*n)
                ),
                value: format!(
                    "{times:.2}× (peak {peak:.1} MiB, settled {rss:.1} MiB), {}",
                    runs_note(runs.len())
                ),
                target: format!("≤ {RESTART_PEAK_RATIO}×"),
                verdict: at_most(times, RESTART_PEAK_RATIO, "× the settled RSS", 2),
            });
        }
    }
    for skipped in &results.skipped {
        let target = targets.get(&skipped.n);
        rows.push(Row {
            metric: format!(
                "Controller RSS, {} sandboxes and children cached (seeded)",
                thousands(skipped.n)
            ),
            value: format!(
                "not measured: projected {:.0} MiB (on the line through the two largest N \
                 measured), more than this machine could give it beside the fake ({:.0} MiB \
                 available)",
                skipped.projected_mib, skipped.available_mib
            ),
            target: target.map_or("—".to_string(), |t| format!("< {t:.0} MiB")),
            verdict: target.map_or(String::new(), |t| {
                format!(
                    "{} (projected)",
                    at_most(skipped.projected_mib, *t, " MiB", 0)
                )
            }),
        });
    }
    if let Some(ticks) = &results.ticks {
        let (reap50, reap99) = p50_p99_micros(&ticks.reap);
        rows.push(Row {
            metric: format!("Reap tick over {} sandboxes", thousands(ticks.n)),
            value: format!(
                "p50 {:.2} ms, p99 {:.2} ms ({} ticks)",
                reap50 / 1e3,
                reap99 / 1e3,
                ticks.reap.len()
            ),
            target: format!("< {TARGET_REAP_MILLIS:.0} ms"),
            verdict: at_most(reap50 / 1e3, TARGET_REAP_MILLIS, " ms", 2),
        });
        let (pool50, pool99) = p50_p99_micros(&ticks.pool);
        rows.push(Row {
            metric: format!(
                "Warm-pool tick over {} sandboxes (1 pool of 10)",
                thousands(ticks.n)
            ),
            value: format!(
                "p50 {:.2} ms, p99 {:.2} ms ({} ticks)",
                pool50 / 1e3,
                pool99 / 1e3,
                ticks.pool.len()
            ),
            target: "—".to_string(),
            verdict: String::new(),
        });
    }
    if !results.swaps.is_empty() {
        let spread = |times: Vec<f64>| {
            let p50 = median(&times).unwrap_or(f64::NAN);
            let (min, max) = times.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
                (lo.min(*v), hi.max(*v))
            });
            let said = format!(
                "p50 {p50:.1} ms (min {min:.1}, max {max:.1}; {} swaps)",
                times.len()
            );
            (p50, said)
        };
        let (_, serving) = spread(results.swaps.iter().map(|s| millis(s.serving)).collect());
        rows.push(Row {
            metric: "Policy hot swap, file change to the new module serving".to_string(),
            value: serving,
            target: "—".to_string(),
            verdict: String::new(),
        });
        let (p50, decided) = spread(results.swaps.iter().map(|s| millis(s.decided)).collect());
        rows.push(Row {
            metric: "Policy hot swap, file change to the new module's first decision".to_string(),
            value: decided,
            target: format!("< {TARGET_SWAP_MILLIS:.0} ms"),
            verdict: at_most(p50, TARGET_SWAP_MILLIS, " ms", 1),
        });
        let step = |time: fn(&swap::Swap) -> Duration| {
            median(
                &results
                    .swaps
                    .iter()
                    .map(|s| millis(time(s)))
                    .collect::<Vec<_>>(),
            )
            .unwrap_or(f64::NAN)
        };
        rows.push(Row {
            metric:
                "Policy hot swap, the admission's steps (medians, as the controller counts them)"
                    .to_string(),
            value: format!(
                "compile {:.1} ms, check (contract, pre-instantiation, describe) {:.1} ms, \
                 self-test {:.1} ms",
                step(|s| s.compile),
                step(|s| s.check),
                step(|s| s.self_test)
            ),
            target: "—".to_string(),
            verdict: String::new(),
        });
        for (level, took) in &results.compile {
            rows.push(Row {
                metric: format!("Compiling the default component alone, {level}"),
                value: format!("{:.1} ms (median)", millis(*took)),
                target: "—".to_string(),
                verdict: String::new(),
            });
        }
    }
    rows.extend(router_rows(results));
    rows.extend(language_rows(results));
    if results.component_bytes > 0 {
        let kib = results.component_bytes as f64 / 1024.0;
        rows.push(Row {
            metric: "Default policy component size".to_string(),
            value: format!(
                "{kib:.1} KiB ({} bytes)",
                thousands(results.component_bytes)
            ),
            target: format!("< {TARGET_COMPONENT_KIB:.0} KiB"),
            verdict: at_most(kib, TARGET_COMPONENT_KIB, " KiB", 1),
        });
    }
    rows
}

/// The default policy in each language: size, admission cold and from the compiled cache,
/// per-call time against the Rust default's.
fn language_rows(results: &Results) -> Vec<Row> {
    // A debug build's host code weighs on every call (each call's instantiation above all), and
    // on the bigger components' most.
    const BUILD: &str = if cfg!(debug_assertions) {
        " (debug build)"
    } else {
        ""
    };
    use super::languages::{AdmissionRun, TARGET_CACHED_ADMISSION_SECONDS};
    let mut rows = Vec::new();
    // The median over the rounds of each round's p50, by case.
    let p50 = |run: &super::languages::LanguageRun, label: &str| {
        let values: Vec<f64> = run
            .decisions
            .iter()
            .filter_map(|round| round.iter().find(|c| c.label == label))
            .map(|c| p50_p99_micros(&c.wasm).0)
            .collect();
        median(&values)
    };
    let rust = results.languages.first();
    for run in &results.languages {
        let label = run.language.label;
        let note = runs_note(run.admissions.len());
        rows.push(Row {
            metric: format!("Default policy in {label}: component size, plain and gzipped"),
            value: format!(
                "{:.2} MiB ({} bytes), gzipped {:.2} MiB",
                run.bytes as f64 / 1048576.0,
                thousands(run.bytes),
                run.gzipped as f64 / 1048576.0
            ),
            target: "—".to_string(),
            verdict: String::new(),
        });
        let took = |pick: fn(&AdmissionRun) -> f64| median_of(&run.admissions, pick);
        if let (Some(cold), Some(peak)) = (
            took(|a| a.cold.took.as_secs_f64()),
            took(|a| mib(a.cold.peak_kib)),
        ) {
            let compiled = took(|a| a.compiled_bytes as f64).unwrap_or(f64::NAN);
            let before = took(|a| mib(a.cold.before_kib)).unwrap_or(f64::NAN);
            rows.push(Row {
                metric: format!(
                    "Default policy in {label}: admission with an empty compiled-module cache \
                     (compile, contract, describe, self-test)"
                ),
                value: format!(
                    "{cold:.2} s, peak RSS {peak:.0} MiB ({before:.0} MiB before the read; \
                     {:.0} MiB of native code cached), {note}",
                    compiled / 1048576.0
                ),
                target: "—".to_string(),
                verdict: String::new(),
            });
        }
        if let (Some(cached), Some(peak)) = (
            took(|a| a.cached.took.as_secs_f64()),
            took(|a| mib(a.cached.peak_kib)),
        ) {
            let load = took(|a| a.cached.load.as_secs_f64()).unwrap_or(f64::NAN);
            let misses = run.admissions.iter().filter(|a| !a.hit).count();
            let hits = if misses == 0 {
                "the cache hit every time".to_string()
            } else {
                format!("**compiled again {misses} times**: no cache hit")
            };
            rows.push(Row {
                metric: format!(
                    "Default policy in {label}: admission from the compiled-module cache \
                     (a second replica, a restart)"
                ),
                value: format!(
                    "{cached:.2} s ({load:.2} s of it the load: the cached code, the contract \
                     check, describe; the rest the file's read and the self-test), peak RSS \
                     {peak:.0} MiB, {hits}, {note}"
                ),
                target: format!("≤ {TARGET_CACHED_ADMISSION_SECONDS} s"),
                verdict: at_most(cached, TARGET_CACHED_ADMISSION_SECONDS + 1e-9, " s", 2),
            });
        }
        let cases = run.decisions.first().into_iter().flatten();
        for case in cases {
            let Some(own) = p50(run, case.label) else {
                continue;
            };
            let ratio = rust.and_then(|r| p50(r, case.label)).map(|r| own / r);
            let is_rust = rust.is_some_and(|r| std::ptr::eq(r, run));
            let target = run.language.call_ratio_target.filter(|_| !is_rust);
            rows.push(Row {
                metric: format!(
                    "Default policy in {label}: reconcile decision p50, {} ({} kube-client calls)",
                    case.label, case.calls
                ),
                value: match ratio.filter(|_| !is_rust) {
                    Some(ratio) => format!("{own:.1} µs, {ratio:.1}× the Rust default's{BUILD}"),
                    None => format!("{own:.1} µs{BUILD}"),
                },
                target: target.map_or("—".to_string(), |t| format!("≤ {t:.0}× Rust's")),
                verdict: match (target, ratio) {
                    (Some(t), Some(ratio)) => at_most(ratio, t + 1e-9, "×", 1),
                    _ => String::new(),
                },
            });
        }
    }
    rows
}

/// The sandbox router: requests/s and latency through it against straight to the Pod, the
/// wake, its RSS by sandboxes routed.
fn router_rows(results: &Results) -> Vec<Row> {
    use super::router::{MORE_ROUNDS, PACED_RATE, WAKE_POD_START};
    let mut rows = Vec::new();
    let Some(router) = &results.router else {
        return rows;
    };
    let runs = runs_note(router.proxied_per_second.len());
    for (what, direct, proxied) in [
        (
            "HTTP/1.1 keep-alive (8 connections)",
            router.direct(),
            router.proxied(),
        ),
        (
            "HTTP/2 h2c (8 streams on one connection)",
            router.direct_h2(),
            router.proxied_h2(),
        ),
    ] {
        let (Some(direct), Some(proxied)) = (direct, proxied) else {
            continue;
        };
        let share = proxied / direct;
        rows.push(Row {
            metric: format!("Router: requests/s through it, {what}"),
            value: format!(
                "{proxied:.0}/s, {:.0}% of the same client's {direct:.0}/s straight to the Pod ({runs})",
                share * 100.0
            ),
            target: format!("≥ {:.0}% of straight", TARGET_ROUTER_SHARE * 100.0),
            verdict: at_least(share * 100.0, TARGET_ROUTER_SHARE * 100.0, " points"),
        });
    }
    if let Some(added) = router.added_p99_micros() {
        let p = |latencies: &[(f64, f64)], pick: fn(&(f64, f64)) -> f64| {
            median_of(latencies, pick).unwrap_or(f64::NAN)
        };
        rows.push(Row {
            metric: format!(
                "Router: p99 added at {} requests/s",
                thousands(PACED_RATE as usize)
            ),
            value: format!(
                "{added:.0} µs (p50/p99 {:.0}/{:.0} µs through, {:.0}/{:.0} µs straight; {runs})",
                p(&router.proxied_latency, |l| l.0),
                p(&router.proxied_latency, |l| l.1),
                p(&router.direct_latency, |l| l.0),
                p(&router.direct_latency, |l| l.1),
            ),
            target: format!("< {TARGET_ROUTER_ADDED_P99_MICROS:.0} µs"),
            verdict: at_most(added, TARGET_ROUTER_ADDED_P99_MICROS, " µs", 0),
        });
    }
    let wakes: Vec<f64> = router.wakes.iter().map(|w| millis(*w)).collect();
    if let Some(wake) = median(&wakes) {
        let worst = wakes.iter().copied().fold(f64::NAN, f64::max);
        rows.push(Row {
            metric: format!(
                "Router: wake in the embedded demo, paused to first byte, beyond the simulated \
                 Pod start ({} ms)",
                WAKE_POD_START.as_millis()
            ),
            value: format!(
                "{wake:.0} ms (worst {worst:.0} ms; {})",
                runs_note(wakes.len())
            ),
            target: format!("≤ {TARGET_WAKE_MILLIS:.0} ms"),
            verdict: at_most(wake, TARGET_WAKE_MILLIS, " ms", 0),
        });
    }
    for (n, routed) in &router.rss {
        let growth =
            (routed.again_kib as f64 / routed.once_kib.max(1) as f64 - 1.0).max(0.0) * 100.0;
        rows.push(Row {
            metric: format!("Router RSS, {} sandboxes routed", thousands(*n)),
            value: format!(
                "{:.1} MiB after a request to each, {:.1} MiB after {MORE_ROUNDS} more each",
                mib(routed.once_kib),
                mib(routed.again_kib)
            ),
            target: format!(
                "flat: ≤ {TARGET_ROUTER_RSS_GROWTH_PERCENT:.0}% more after more requests"
            ),
            verdict: at_most(growth, TARGET_ROUTER_RSS_GROWTH_PERCENT, "%", 1),
        });
    }
    if let (Some(small), Some(large)) = (router.rss.first_key_value(), router.rss.last_key_value())
        && large.0 > small.0
    {
        let per = (large.1.once_kib as f64 - small.1.once_kib as f64) / (large.0 - small.0) as f64;
        rows.push(Row {
            metric: "Router state per sandbox routed".to_string(),
            value: format!(
                "{per:.1} KiB ({} to {} sandboxes)",
                thousands(*small.0),
                thousands(*large.0)
            ),
            target: "(reference)".to_string(),
            verdict: String::new(),
        });
    }
    rows
}

/// The claims runs: a pool of N filled, then N claims at once.
fn claim_rows(results: &Results) -> Vec<Row> {
    let mut rows = Vec::new();
    for ((protocol, n), runs) in &results.claims {
        let note = runs_note(runs.len());
        let targeted = *n == CLAIMS_TARGET_N;
        let what = format!("N = {}, {}", thousands(*n), protocol.label());
        let rate = median_of(runs, |r| r.claims_per_second()).unwrap_or(f64::NAN);
        let over_cold =
            median_of(runs, |r| r.claims_per_second() / r.cold_per_second()).unwrap_or(f64::NAN);
        rows.push(Row {
            metric: format!(
                "Claims/s, N claims at once on N ready members, POST to Running, {what}"
            ),
            value: format!("{rate:.0}/s, {over_cold:.1}× the run's cold fill of the pool, {note}"),
            target: if targeted {
                format!(
                    "≥ {TARGET_CLAIMS_PER_SECOND:.0}/s and ≥ {TARGET_CLAIMS_OVER_COLD:.0}× cold"
                )
            } else {
                "—".to_string()
            },
            verdict: if targeted {
                let verdicts = [
                    at_least(rate, TARGET_CLAIMS_PER_SECOND, "/s"),
                    at_least(over_cold, TARGET_CLAIMS_OVER_COLD, "×"),
                ];
                verdicts.join("; ")
            } else {
                String::new()
            },
        });
        let p = |q: f64| median_of(runs, |r| r.latency_ms(q)).unwrap_or(f64::NAN);
        let max = median_of(runs, |r| r.max_latency_ms()).unwrap_or(f64::NAN);
        let (p50, p99) = (p(50.0), p(99.0));
        rows.push(Row {
            metric: format!(
                "Claim latency in a burst (N at once), POST to Running with a pod IP, {what}"
            ),
            value: format!(
                "p50 {p50:.1} ms, p90 {:.1}, p99 {p99:.1}, max {max:.1}, {note}",
                p(90.0)
            ),
            target: if targeted {
                format!(
                    "p50 ≤ {TARGET_CLAIM_P50_MILLIS:.0} ms, p99 ≤ {TARGET_CLAIM_P99_MILLIS:.0} ms"
                )
            } else {
                "—".to_string()
            },
            verdict: if targeted {
                [
                    at_most(p50, TARGET_CLAIM_P50_MILLIS + 1e-9, " ms", 1),
                    at_most(p99, TARGET_CLAIM_P99_MILLIS + 1e-9, " ms", 1),
                ]
                .join("; ")
            } else {
                String::new()
            },
        });
        let writes = median_of(runs, |r| r.writes_per_claim()).unwrap_or(f64::NAN);
        let events = median_of(runs, |r| r.claim_events as f64 / r.n as f64).unwrap_or(f64::NAN);
        let refill = median_of(runs, |r| r.refill_writes as f64 / r.n as f64).unwrap_or(f64::NAN);
        let example = runs
            .first()
            .map(|r| writes_list(&r.claim_writes, r.n))
            .unwrap_or_default();
        rows.push(Row {
            metric: format!("API writes per claim, the refill and Events apart, {what}"),
            value: format!(
                "{writes:.2} ({example}); Events {events:.2}, the refill {refill:.2} per claim"
            ),
            target: format!("≤ {TARGET_WRITES_PER_CLAIM:.0}"),
            verdict: at_most(writes, TARGET_WRITES_PER_CLAIM + 1e-9, "", 2),
        });
        // Each side's CPU per claim, and its share of one core over the burst: the side
        // nearest a whole core is where the claims queue.
        let controller = median_of(runs, |r| r.cpu_per_claim_micros()).unwrap_or(f64::NAN);
        let fake = median_of(runs, |r| r.bench_cpu_per_claim_micros()).unwrap_or(f64::NAN);
        let busy = |cpu: fn(&ClaimRun) -> Duration| {
            median_of(runs, |r| {
                cpu(r).as_secs_f64() / r.took.as_secs_f64() * 100.0
            })
            .unwrap_or(f64::NAN)
        };
        rows.push(Row {
            metric: format!("CPU per claim over the burst, {what}"),
            value: format!(
                "controller {controller:.0} µs ({:.0}% of a core), the fake with its clients \
                 {fake:.0} µs ({:.0}% of a core)",
                busy(|r| r.controller_cpu),
                busy(|r| r.bench_cpu)
            ),
            target: "—".to_string(),
            verdict: String::new(),
        });
        let ratio = median_of(runs, |r| r.claim_to_cold_cpu()).unwrap_or(f64::NAN);
        let own_ratio = median_of(runs, |r| r.claim_own_to_cold_cpu()).unwrap_or(f64::NAN);
        let own = median_of(runs, |r| r.cpu_per_claim_own_micros()).unwrap_or(f64::NAN);
        let cold = median_of(runs, |r| r.cpu_per_cold_micros()).unwrap_or(f64::NAN);
        let refill =
            median_of(runs, |r| r.refill_writes_in_window as f64 / r.n as f64).unwrap_or(f64::NAN);
        rows.push(Row {
            metric: format!(
                "Controller CPU per claim / per cold sandbox (the pool's fill), {what}"
            ),
            value: format!(
                "{own_ratio:.2}× the claim's own ({own:.0} µs per claim: the window's \
                 {controller:.0} µs less the refill's {refill:.2} writes per claim made in it, \
                 each at the fill's CPU per write; {ratio:.2}× with them), {cold:.0} µs per cold \
                 sandbox, medians of the runs"
            ),
            target: format!("≤ {TARGET_CLAIM_TO_COLD_CPU}×"),
            verdict: at_most(own_ratio, TARGET_CLAIM_TO_COLD_CPU, "", 2),
        });
        let conflicts = median_of(runs, |r| r.conflicts_per_claim()).unwrap_or(f64::NAN);
        let wrong = runs
            .iter()
            .map(|r| r.double_claims + r.not_running.len())
            .sum::<usize>();
        if let Some(paced) = results.paced_claims.get(&(*protocol, *n)) {
            rows.push(paced_row(paced, targeted, &what));
        }
        rows.push(Row {
            metric: format!(
                "409s per claim; members held twice and claims not Running once quiet, {what}"
            ),
            value: format!("{conflicts:.2}; {wrong} in {} runs", runs.len()),
            target: "0; 0".to_string(),
            verdict: if conflicts == 0.0 && wrong == 0 {
                "met".to_string()
            } else {
                "**missed**".to_string()
            },
        });
    }
    rows
}

/// The claims of `runs` POSTed paced: each claim's latency at that sustained rate, the rate
/// reached, and whether every claim ran on a member of its own with no 409.
fn paced_row(runs: &[ClaimRun], targeted: bool, what: &str) -> Row {
    let note = runs_note(runs.len());
    let pace = runs.iter().find_map(|r| r.pace).unwrap_or(f64::NAN);
    let p = |q: f64| median_of(runs, |r| r.latency_ms(q)).unwrap_or(f64::NAN);
    let max = median_of(runs, |r| r.max_latency_ms()).unwrap_or(f64::NAN);
    let reached = median_of(runs, |r| r.claims_per_second()).unwrap_or(f64::NAN);
    let conflicts = runs.iter().map(|r| r.conflicts).sum::<usize>();
    let wrong = runs
        .iter()
        .map(|r| r.double_claims + r.not_running.len())
        .sum::<usize>();
    let (p50, p99) = (p(50.0), p(99.0));
    let mut verdicts = vec![
        at_most(p50, TARGET_CLAIM_P50_MILLIS + 1e-9, " ms", 1),
        at_most(p99, TARGET_CLAIM_P99_MILLIS + 1e-9, " ms", 1),
    ];
    if conflicts + wrong > 0 {
        verdicts.push(format!(
            "**missed**: {conflicts} 409s, {wrong} claims held twice or not Running"
        ));
    }
    Row {
        metric: format!(
            "Claim latency at a sustained {} claims/s (POSTs paced), POST to Running with \
             a pod IP, {what}",
            thousands(pace.round() as usize)
        ),
        value: format!(
            "p50 {p50:.1} ms, p90 {:.1}, p99 {p99:.1}, max {max:.1}; {reached:.0} claims/s \
             reached; {conflicts} 409s, {wrong} held twice or not Running; {note}",
            p(90.0)
        ),
        target: if targeted {
            format!("p50 ≤ {TARGET_CLAIM_P50_MILLIS:.0} ms, p99 ≤ {TARGET_CLAIM_P99_MILLIS:.0} ms")
        } else {
            "—".to_string()
        },
        verdict: if targeted {
            verdicts.join("; ")
        } else {
            verdicts.split_off(2).join("; ")
        },
    }
}

/// The rollout runs: sandboxes/s and CPU per sandbox in each stage, and as a ratio of the
/// plain run of the same round.
fn rollout_rows(results: &Results) -> Vec<Row> {
    let of = |stage: Stage| -> Vec<&StageRun> {
        results
            .rollouts
            .iter()
            .filter(|r| r.stage == stage)
            .collect()
    };
    let plain = of(Stage::Plain);
    let mut rows = Vec::new();
    for stage in Stage::ALL {
        let runs = of(stage);
        let Some(first) = runs.first() else { continue };
        let rate = median_of(&runs, |r| r.run.running_per_second()).unwrap_or(f64::NAN);
        let cpu = median_of(&runs, |r| r.run.cpu_per_sandbox_micros()).unwrap_or(f64::NAN);
        // Each run against the plain run of its own round: the same minutes of the machine.
        let paired: Vec<(&StageRun, &StageRun)> =
            runs.iter().copied().zip(plain.iter().copied()).collect();
        let ratio = |f: fn(&CreateRun) -> f64| {
            median(
                &paired
                    .iter()
                    .map(|(run, plain)| f(&run.run) / f(&plain.run))
                    .collect::<Vec<_>>(),
            )
            .unwrap_or(f64::NAN)
        };
        let mut value = format!("{rate:.0}/s, controller CPU {cpu:.0} µs per sandbox");
        if stage != Stage::Plain {
            let _ = write!(
                value,
                " ({:.2}× and {:.2}× the plain run's)",
                ratio(CreateRun::running_per_second),
                ratio(CreateRun::cpu_per_sandbox_micros)
            );
        }
        match stage {
            Stage::Plain => {}
            Stage::Shadow => {
                let compared = median_of(&runs, |r| r.compared as f64).unwrap_or(f64::NAN);
                let _ = write!(
                    value,
                    "; {compared:.0} reconciles compared, {} differences",
                    runs.iter().map(|r| r.differences).sum::<u64>()
                );
            }
            Stage::Canary => {
                let touched = median_of(&runs, |r| r.touched as f64).unwrap_or(f64::NAN);
                let _ = write!(
                    value,
                    "; {touched:.0} sandboxes reconciled by the candidate"
                );
            }
        }
        let _ = write!(value, ", {}", runs_note(runs.len()));
        rows.push(Row {
            metric: format!(
                "Sandboxes/s to Running during a policy rollout, N = {}, {}, {}",
                thousands(first.run.n),
                Protocol::H2.label(),
                stage.label()
            ),
            value,
            target: "—".to_string(),
            verdict: String::new(),
        });
    }
    rows
}

/// The rows as a Markdown table.
pub fn markdown_table(rows: &[Row]) -> String {
    let mut out = String::from("| metric | value | target | met? |\n| --- | --- | --- | --- |\n");
    for row in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            row.metric, row.value, row.target, row.verdict
        );
    }
    out
}

/// The rows for a terminal.
pub fn text_table(rows: &[Row]) -> String {
    let width = |f: fn(&Row) -> &str| rows.iter().map(|r| f(r).chars().count()).max().unwrap_or(0);
    let (m, v, t) = (
        width(|r| &r.metric),
        width(|r| &r.value),
        width(|r| &r.target),
    );
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<m$}  {:<v$}  {:<t$}  met?",
        "metric", "value", "target"
    );
    for row in rows {
        let pad = |s: &str, w: usize| format!("{s}{}", " ".repeat(w - s.chars().count()));
        let _ = writeln!(
            out,
            "{}  {}  {}  {}",
            pad(&row.metric, m),
            pad(&row.value, v),
            pad(&row.target, t),
            row.verdict.replace("**", "")
        );
    }
    out
}

/// Where the time and the CPU of the sandboxes/s runs went, from the controller's metrics.
pub fn breakdown(results: &Results) -> String {
    let mut out = String::new();
    let creates = results
        .creates
        .iter()
        .map(|(n, runs)| (Protocol::H2, n, runs))
        .chain(
            results
                .creates_http1
                .iter()
                .map(|(n, runs)| (Protocol::Http1, n, runs)),
        );
    for (protocol, n, runs) in creates {
        let Some(run) = runs.iter().min_by(|a, b| {
            let m = median_of(runs, |r| r.pods_per_second()).unwrap_or(0.0);
            (a.pods_per_second() - m)
                .abs()
                .total_cmp(&(b.pods_per_second() - m).abs())
        }) else {
            continue;
        };
        let wall = run.to_running.as_secs_f64();
        let _ = writeln!(
            out,
            "**N = {}, {}** (the median run): the load generator's {} POSTs took {:.2} s \
             ({:.0}/s); Pods after {:.2} s, Running after {:.2} s. CPU over that span: \
             controller {:.2} s ({:.2} cores, {:.0} µs per sandbox, {:.0} µs per each of its {} \
             API requests), this process (fake API server + load generator) {:.2} s ({:.2} \
             cores), of {} cores. Watches the controller had to re-open meanwhile: {}.",
            thousands(*n),
            protocol.label(),
            thousands(run.post.sent),
            run.post.took.as_secs_f64(),
            run.post.per_second(),
            run.to_pods.as_secs_f64(),
            wall,
            run.controller_cpu.as_secs_f64(),
            run.controller_cpu.as_secs_f64() / wall,
            run.cpu_per_sandbox_micros(),
            run.cpu_per_request_micros(),
            thousands(run.requests),
            run.bench_cpu.as_secs_f64(),
            run.bench_cpu.as_secs_f64() / wall,
            results.machine.cpus,
            run.watches,
        );
        let b = &run.breakdown;
        let _ = writeln!(out);
        let _ = writeln!(out, "| controller metric (mean) | value |\n| --- | --- |");
        if let Some(mean) = b.reconcile_mean {
            let _ = writeln!(
                out,
                "| one Sandbox reconcile, end to end ({:.2} per sandbox) | {:.2} ms |",
                b.reconciles / *n as f64,
                mean * 1e3
            );
        }
        for (export, mean) in &b.guest_call_mean {
            let _ = writeln!(
                out,
                "| guest call `{export}` (incl. its kube-client calls) | {:.2} ms |",
                mean * 1e3
            );
        }
        for (what, mean) in &b.request_mean {
            let count = b.requests.get(what).copied().unwrap_or(0.0);
            // The start's lists and watches: one of each.
            if count < 10.0 {
                continue;
            }
            let _ = writeln!(
                out,
                "| API request `{what}` ({count:.0} made) | {:.2} ms |",
                mean * 1e3
            );
        }
        if run.failed_writes > 0 {
            let _ = writeln!(
                out,
                "| failed writes (conflicts, ...) | {} |",
                run.failed_writes
            );
        }
        let _ = writeln!(out);
    }
    let seeded: Vec<(usize, f64)> = results
        .seeded
        .iter()
        .filter_map(|(n, runs)| Some((*n, median_of(runs, |r| r.memory.rss_kib as f64)?)))
        .collect();
    if let [.., (n1, rss1), (n2, rss2)] = seeded.as_slice() {
        let _ = writeln!(
            out,
            "**RSS per sandbox**: {:.1} KiB (the slope from {} to {} seeded sandboxes); one \
             sandbox's six objects are {:.1} KiB of JSON.\n",
            (rss2 - rss1) / (*n2 as f64 - *n1 as f64),
            thousands(*n1),
            thousands(*n2),
            results.sandbox_json_bytes as f64 / 1024.0
        );
    }
    for (n, runs) in &results.seeded {
        let Some(run) = runs.first() else { continue };
        let _ = writeln!(
            out,
            "**Seeded N = {}**: ready (every list done) after {:.1} s with RSS {:.1} MiB, every \
             sandbox reconciled and quiet after {:.1} s, {:.1} CPU-seconds; resync writes: {}.{}{}",
            thousands(*n),
            run.ready.as_secs_f64(),
            mib(run.ready_memory.rss_kib),
            run.settled.as_secs_f64(),
            run.controller_cpu.as_secs_f64(),
            writes_list(&run.resync_writes, 1),
            run.trimmed.map_or(String::new(), |m| format!(
                " After `mi_collect(true)` (called in the controller by gdb): RSS {:.1} MiB.",
                mib(m.rss_kib)
            )),
            if run.warnings.is_empty() {
                String::new()
            } else {
                format!(" Warnings logged: {}", run.warnings.join("; "))
            }
        );
        let _ = writeln!(out);
    }
    out
}

/// A round step for about `count` ticks up to `max`: 1, 2, 2.5 or 5 times a power of ten.
fn nice_step(max: f64, count: f64) -> f64 {
    let raw = (max / count).max(f64::MIN_POSITIVE);
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|step| *step >= raw)
        .unwrap_or(10.0 * power)
}

/// The plot: sandboxes/s (to Pods and to Running; linear, left) and the controller's RSS (log,
/// right) against N (log), with the targets.
pub fn svg(results: &Results) -> String {
    let (w, h) = (760.0, 470.0);
    let (left, right, top, bottom) = (80.0, 660.0, 50.0, 360.0);
    let (x_lo, x_hi) = (500f64.log10(), 200_000f64.log10());
    let x = |n: f64| left + (n.log10() - x_lo) / (x_hi - x_lo) * (right - left);
    let pods: Vec<(f64, f64)> = results
        .creates
        .iter()
        .filter_map(|(n, runs)| Some((*n as f64, median_of(runs, |r| r.pods_per_second())?)))
        .collect();
    let running: Vec<(f64, f64)> = results
        .creates
        .iter()
        .filter_map(|(n, runs)| Some((*n as f64, median_of(runs, |r| r.running_per_second())?)))
        .collect();
    let rss: Vec<(f64, f64)> = rss_by_n(results)
        .into_iter()
        .map(|(n, m)| (n as f64, m))
        .collect();
    let projected: Vec<(f64, f64)> = results
        .skipped
        .iter()
        .map(|s| (s.n as f64, s.projected_mib))
        .collect();
    let rate_peak = pods
        .iter()
        .chain(&running)
        .map(|p| p.1)
        .fold(TARGET_PODS_PER_SECOND, f64::max);
    let rate_step = nice_step(rate_peak * 1.1, 5.0);
    let rate_max = rate_step * (rate_peak * 1.1 / rate_step).ceil();
    // RSS on a log axis, in decades of MiB.
    let rss_peak = rss
        .iter()
        .chain(&projected)
        .map(|p| p.1)
        .fold(400.0, f64::max);
    let (rss_lo, rss_hi) = (1.0f64, rss_peak.log10().ceil().max(3.0));
    let y_rate = |v: f64| bottom - v / rate_max * (bottom - top);
    let y_rss =
        |v: f64| bottom - (v.max(10.0).log10() - rss_lo) / (rss_hi - rss_lo) * (bottom - top);
    let blue = "#1f5fbf";
    let light = "#5b9bd5";
    let red = "#b5452b";
    let mut s = String::new();
    let _ = writeln!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"##
    );
    let _ = writeln!(s, r##"<rect width="{w}" height="{h}" fill="white"/>"##);
    let _ = writeln!(
        s,
        r##"<text x="{}" y="24" text-anchor="middle" font-size="15">cubepod-controller against the fake API server: sandboxes/s and RSS by N ({} cores)</text>"##,
        w / 2.0,
        results.machine.cpus
    );
    let _ = writeln!(
        s,
        r##"<path d="M{left} {top} V{bottom} H{right} V{top}" fill="none" stroke="#333"/>"##
    );
    for n in [1_000.0, 10_000.0, 100_000.0] {
        let xi = x(n);
        let _ = writeln!(
            s,
            r##"<line x1="{xi:.1}" y1="{top}" x2="{xi:.1}" y2="{bottom}" stroke="#e4e4e4"/><text x="{xi:.1}" y="{}" text-anchor="middle">{}</text>"##,
            bottom + 18.0,
            thousands(n as usize)
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" text-anchor="middle">N, sandboxes (log scale)</text>"##,
        (left + right) / 2.0,
        bottom + 38.0
    );
    let mut tick = 0.0;
    while tick <= rate_max + 1e-9 {
        let yi = y_rate(tick);
        let _ = writeln!(
            s,
            r##"<line x1="{}" y1="{yi:.1}" x2="{left}" y2="{yi:.1}" stroke="{blue}"/><text x="{}" y="{:.1}" text-anchor="end" fill="{blue}">{}</text>"##,
            left - 4.0,
            left - 7.0,
            yi + 4.0,
            thousands(tick as usize)
        );
        tick += rate_step;
    }
    for decade in (rss_lo as i32)..=(rss_hi as i32) {
        let v = 10f64.powi(decade);
        let yi = y_rss(v);
        let _ = writeln!(
            s,
            r##"<line x1="{right}" y1="{yi:.1}" x2="{}" y2="{yi:.1}" stroke="{red}"/><text x="{}" y="{:.1}" fill="{red}">{}</text>"##,
            right + 4.0,
            right + 7.0,
            yi + 4.0,
            thousands(v as usize)
        );
    }
    let _ = writeln!(
        s,
        r##"<text transform="translate(24 {}) rotate(-90)" text-anchor="middle" fill="{blue}">sandboxes/s (linear)</text><text transform="translate({} {}) rotate(90)" text-anchor="middle" fill="{red}">controller RSS, MiB (log scale)</text>"##,
        (top + bottom) / 2.0,
        w - 30.0,
        (top + bottom) / 2.0
    );
    // Targets.
    let yt = y_rate(TARGET_PODS_PER_SECOND);
    let _ = writeln!(
        s,
        r##"<line x1="{left}" y1="{yt:.1}" x2="{right}" y2="{yt:.1}" stroke="{blue}" stroke-dasharray="2 4"/><text x="{}" y="{:.1}" fill="{blue}" font-size="10">target: 1,500 sandboxes/s to Pods at N = 1,000</text>"##,
        left + 6.0,
        yt - 5.0
    );
    for (n, mib) in TARGET_RSS_MIB {
        let (xi, yi) = (x(n as f64), y_rss(mib));
        let _ = writeln!(
            s,
            r##"<line x1="{:.1}" y1="{yi:.1}" x2="{:.1}" y2="{yi:.1}" stroke="{red}" stroke-width="3"/><text x="{:.1}" y="{:.1}" fill="{red}" font-size="10">target &lt; {mib:.0} MiB</text>"##,
            xi - 16.0,
            xi + 16.0,
            xi + 20.0,
            yi + 4.0
        );
    }
    // Series.
    // Labels above the points, the RSS's below them.
    let mut series = |points: &[(f64, f64)],
                      y: &dyn Fn(f64) -> f64,
                      color: &str,
                      dash: &str,
                      label_dy: f64| {
        let path: Vec<String> = points
            .iter()
            .map(|(n, v)| format!("{:.1},{:.1}", x(*n), y(*v)))
            .collect();
        let _ = writeln!(
            s,
            r##"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/>"##,
            path.join(" ")
        );
        for (n, v) in points {
            let _ = writeln!(
                s,
                r##"<circle cx="{:.1}" cy="{:.1}" r="4" fill="{color}"/><text x="{:.1}" y="{:.1}" font-size="10" fill="{color}">{}</text>"##,
                x(*n),
                y(*v),
                x(*n) + 7.0,
                y(*v) + label_dy,
                thousands(v.round() as usize)
            );
        }
    };
    series(&pods, &y_rate, blue, "none", -7.0);
    series(&running, &y_rate, light, "6 3", -7.0);
    series(&rss, &y_rss, red, "none", 15.0);
    if let (Some(last), false) = (rss.last(), projected.is_empty()) {
        let mut points = vec![*last];
        points.extend(&projected);
        let path: Vec<String> = points
            .iter()
            .map(|(n, v)| format!("{:.1},{:.1}", x(*n), y_rss(*v)))
            .collect();
        let _ = writeln!(
            s,
            r##"<polyline points="{}" fill="none" stroke="{red}" stroke-width="1.5" stroke-dasharray="3 3"/>"##,
            path.join(" ")
        );
        for (n, v) in &projected {
            let _ = writeln!(
                s,
                r##"<circle cx="{:.1}" cy="{:.1}" r="4" fill="white" stroke="{red}" stroke-width="1.5"/><text x="{:.1}" y="{:.1}" font-size="10" fill="{red}" text-anchor="end">{} projected, not measured</text>"##,
                x(*n),
                y_rss(*v),
                x(*n) - 8.0,
                y_rss(*v) + 16.0,
                thousands(v.round() as usize)
            );
        }
    }
    // Legend, under the plot.
    let legend = [
        (blue, "none", "sandboxes/s, POST to Pod exists (median)"),
        (light, "6 3", "sandboxes/s, POST to status Running (median)"),
        (red, "none", "controller RSS, synced and quiet (median)"),
    ];
    for (i, (color, dash, label)) in legend.iter().enumerate() {
        let (lx, ly) = (
            left + (i % 2) as f64 * 300.0,
            bottom + 62.0 + (i / 2) as f64 * 18.0,
        );
        let _ = writeln!(
            s,
            r##"<line x1="{lx}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/><text x="{}" y="{ly:.1}">{label}</text>"##,
            ly - 4.0,
            lx + 24.0,
            ly - 4.0,
            lx + 30.0
        );
    }
    s.push_str("</svg>\n");
    s
}

/// `docs/performance.md`: the generated part, then whatever followed the marker before.
pub fn markdown(results: &Results, rows: &[Row], kept: &str) -> String {
    let m = &results.machine;
    let options = results.options.clone().unwrap_or_default();
    let mut out = String::new();
    let _ = writeln!(out, "# Performance\n");
    let _ = writeln!(
        out,
        "Measured by `cubepod-bench` (`tests/src/bench/`), which runs the real controller \
         binary against the project's stateful fake Kubernetes API server (`tests/src/apiserver`: \
         HTTPS, HTTP/2, bearer token, a `MemoryCluster` behind it; for the HTTP/1.1 rows the \
         same server in plain HTTP, as behind `kubectl proxy`) on loopback, with a load \
         generator, all in one run. Every figure is the median of several runs unless the row \
         says otherwise; the fake's own raw capacity is measured in the same run, so that the \
         sandboxes/s can be read as a share of what the API allows.\n"
    );
    let _ = writeln!(out, "## Rerun it\n");
    let _ = writeln!(
        out,
        "```sh\njust bench            # the micro-benchmarks, then the command below\n\
         cargo build --release -p cubepod-host\n\
         cargo run --release -p cubepod-tests --bin cubepod-bench -- --write-docs\n\
         cargo run --release -p cubepod-tests --bin cubepod-bench -- --quick   # a minute, for development\n```\n"
    );
    let _ = writeln!(
        out,
        "Flags: `--sizes 1000,10000` (N of the sandboxes/s runs), `--claim-sizes 100,300,1000` \
         (N of the claims runs), `--claim-rate 1000` (the rate of the paced claims runs), \
         `--rollout-size 1000` (N of the runs during a rollout), \
         `--protocols h2,http1` (how the controller reaches the API in \
         them), `--rss-sizes 10000,30000,100000` (RSS over seeded sandboxes), `--rss-lists paged,whole` (how \
         the fake answers their lists), `--runs 3`, \
         `--pod-start-delay 0ms`, `--perf DIR` (`perf record` of the creating and the claiming \
         controller), `--instruction-sizes 1000` (the controller's instructions under callgrind; \
         needs valgrind), `--callgrind-keep DIR` (keep its dumps), `--trim-probe` (RSS after \
         `mi_collect`, through gdb), `--token-bytes 1024` (a bearer token of a projected \
         token's size), `--controller-arg=--concurrency=32` (a flag for the controller), `--only \
         create,claims,rollout,instructions` (some scenarios), `--controller PATH`.\n"
    );
    let _ = writeln!(out, "## The machine\n");
    let _ = writeln!(
        out,
        "| | |\n| --- | --- |\n| CPU | {} × {} |\n| memory | {:.1} GiB |\n| kernel | Linux {} |\n\
         | toolchain | {} |\n| commit | {} |\n| measured | {} |\n\
         | load average before the run | {} |\n\
         | other processes' share of the CPU during the run ({:.0} s) | {} |\n\
         | runs per figure | {} |\n",
        m.cpus,
        m.model,
        m.memory_gib,
        m.kernel,
        m.rustc,
        m.commit,
        m.date,
        m.load_before,
        m.wall.as_secs_f64(),
        m.others_share
            .map_or("n/a".to_string(), |s| format!("{:.0}%", s * 100.0)),
        options.runs
    );
    let _ = writeln!(
        out,
        "The fake API server, the load generator and the controller share these {} cores, as \
         they would share no real cluster: the sandboxes/s figures are what the controller \
         reaches while the API server competes with it for CPU.\n",
        m.cpus
    );
    let flags = if options.controller_args.is_empty() {
        "its defaults (`--concurrency 16`, `--status-coalesce 2s`, ...)".to_string()
    } else {
        format!(
            "`{}`, defaults otherwise",
            options.controller_args.join(" ")
        )
    };
    let token = match options.token_bytes {
        Some(bytes) => format!("a {bytes}-byte JWT-shaped token (`--token-bytes`)"),
        None => format!("a {}-byte token", super::TOKEN.len()),
    };
    let _ = writeln!(
        out,
        "The controller runs with {flags}. In the sandboxes/s runs the fake's kubelet starts a \
         Pod {} ms after its create (`--pod-start-delay`), and the controller authenticates \
         with {token}.\n",
        options.pod_start_delay.as_millis()
    );
    let _ = writeln!(out, "## Results\n");
    out.push_str(&markdown_table(rows));
    let _ = writeln!(out);
    let _ = writeln!(out, "![sandboxes/s and RSS against N](performance.svg)\n");
    let _ = writeln!(out, "## How each figure is taken\n");
    out.push_str(METHOD);
    let _ = writeln!(out);
    let _ = writeln!(out, "## Where the time went (this run)\n");
    out.push_str(&breakdown(results));
    append_kept(&mut out, kept);
    out
}

/// What follows the generated part of an existing page, without the line break that ends the
/// marker itself (which `append_kept` writes again).
fn kept_part(page: &str) -> &str {
    page.split_once(GENERATED_END)
        .map_or("", |(_, rest)| rest.strip_prefix('\n').unwrap_or(rest))
}

/// The marker, then the hand-written part as it was: a rewrite adds nothing to it.
fn append_kept(out: &mut String, kept: &str) {
    let _ = writeln!(out, "{GENERATED_END}");
    out.push_str(kept);
}

const METHOD: &str = "\
- **Raw capacity**: a fresh fake server, no controller; 64 HTTP/2 streams over 4 TLS \
connections POST Secrets (30,000 per run) as fast as the server answers; writes/s = 201s / wall time. \
A new sandbox costs the API 7 writes (the user's create and the controller's 6), so capacity / 7 \
is the ceiling any controller could reach on this server and machine.
- **Sandboxes/s**: a fresh fake server (its kubelet starts a Pod `--pod-start-delay` after its \
create, at once by default) and the real \
`target/release/cubepod-controller` reading it through a kubeconfig; once it is \
ready, the load generator POSTs N Sandboxes through the HTTP API (32 streams over 2 connections). \
The fake's own watch times the N-th Pod and the N-th `status.phase: Running`, from the first POST. \
Each run is made twice in a row: over HTTPS with HTTP/2 (the figures without a protocol named), then \
over plain HTTP/1.1 (the fake served without TLS, an `http://` server in the controller's kubeconfig; \
the load generator still speaks HTTP/2, in the clear).
- **Controller CPU per new sandbox / per API request**: user + system time of the controller \
process (`/proc/<pid>/stat`) from the first POST to the N-th Running, / N, and / the HTTP \
requests it made (the fake's request log from the first POST until quiet); \"fake API server + load \
generator\" is this process's CPU over the same span, / N. Instructions, where the machine has \
a counter: `perf stat -e instructions:u,instructions:k` of the controller over the same span, / N.
- **Instructions (callgrind)**: the same run with the controller under valgrind's callgrind \
(`--guest-address-space=compact`, since valgrind cannot map the guarded slots' 4 GiB \
reservations, so the policy's code checks its bounds); its counts are zeroed at the first POST and \
dumped at the N-th Running, user space only, / N. The machine's speed does not move them (runs of \
one binary agree within 0.2% over HTTP/2, within 2% over HTTP/1.1, whose reconciles per sandbox \
vary), so a change of a few percent shows where CPU time cannot; but \
valgrind runs the controller some 50 times slower, which changes how its tasks interleave with the \
fake's (over HTTP/1.1 more echoes arrive before their write's answer, so more reconciles).
- **Claims**: the same controller and fake fill a PodWarmPool of N members (the run's cold \
sandboxes/s), then 8 clients POST N claiming Sandboxes at once (a burst, as fast as the fake takes \
them), and in a second run of the same N paced at `--claim-rate` claims/s. A claim's latency runs \
from its own POST to the fake's watch showing it Running with a pod IP; claims/s from the first \
POST to the N-th Running. In a burst the clients POST faster than any controller sharing their \
two cores serves claims, so a claim's latency is mostly its wait behind the claims posted before \
it; paced, it is the claim's own time at that rate. Once the pool has refilled and the \
controller is quiet, the cluster is checked (no member held by two claims, every claim Running) \
and the writes are split into the claims' own (finalizers, adoptions, statuses) and the refill's.
- **Rollout**: the sandboxes/s run at `--rollout-size` over HTTP/2, three times in a round: with \
no rollout; with a `PolicyRollout` held in its shadow stage (`share: 100`: the candidate runs \
beside the stable module on every sandbox reconcile, against a recording cluster, and writes \
nothing); and held in a canary step of 50% (half the sandboxes reconciled by the candidate alone). \
The candidate is the default policy under another digest, admitted from a ConfigMap before the \
burst; the shadow must report no difference and every canaried sandbox must run. Ratios are each \
run's against the plain run of its round.
- **Writes per new sandbox**: the fake's `MemoryCluster::writes()` once the controller has gone \
quiet (queue empty, no reconcile or request for 1.5 s), the load generator's creates left out, / N.
- **Resync**: that controller is stopped (SIGTERM) and a second one started over the converged \
state; its writes are counted once it has reconciled every sandbox and gone quiet. At 100,000 the \
state is seeded (below), not created.
- **RSS**: VmRSS of the controller process (`/proc/<pid>/status`) once it has listed, reconciled \
and gone quiet: at 1,000 and 10,000 the second (restarted) controller over the state the first \
created; at 30,000 and 100,000 (and 10,000 as a cross-check) a controller started over a seeded fake: one \
sandbox is brought up by the real control loop in-process and its objects (Sandbox with status, \
two PVCs, the Secret, the running Pod) are copied under N names straight into the fake's \
`MemoryCluster`. **Restart peak**: the seeded controller's VmHWM over its settled VmRSS (a start over \
existing state is a restart), once with the fake paging its lists by `limit` (500 a page, as the \
controller asks) and once with it answering each list whole, continue token none, as the API server \
may from its watch cache at `resourceVersion=0`.
- **Reap / warm-pool tick**: in-process, the real `ControllerManager` over an in-memory cluster \
seeded with 10,000 converged sandboxes (idle timeout 1 day, none idle) and one PodWarmPool of 10 \
ready members. Reap: `ControllerManager::reap()` timed whole (the cache's reap candidates, the \
policy's `reap` over all 10,010 of them; nothing to pause). Pool: the pool's reconcile as \
`cubepod_reconcile_duration_seconds{kind=\"podwarmpool\"}` records it.
- **Decision**: the default policy's `reconcile-sandbox` through the wasm component (a fresh \
Store and instance per call, as the controller makes them; the cluster answers at once; every \
call checked to have made the decision the native one makes, each in a call context of its own) \
and the same Rust called natively, on a converged resync and on a new sandbox. \
`cargo bench -p cubepod-tests --bench reconcile` breaks the wasm figure down.
- **Hot swap**: the manager running over one converged Sandbox, with a `PolicyWatcher` on a \
file; the file is replaced by a rename with the default policy plus a distinct custom section \
(a new digest: compiled, contract-checked, self-tested), timed until the manager serves the new \
module, and until the first Sandbox reconcile after it (the swap requeues every object), the new \
module's decision, has ended (the first swap is a warm-up). `cargo bench -p cubepod-tests --bench swap` is the \
same measurement.
- **Component size**: the default policy component embedded in the binary.
- **Languages** (`--only languages`, `tests/src/bench/languages.rs`): the default policy built \
from each SDK, every build deciding as the Rust default does (`host/tests/differential.rs`): Rust \
(the component embedded in the binary), Python (`sdk/python/examples/default`, componentize-py \
0.25.1), JavaScript (`sdk/js/default`, componentize-js 0.23.0 with StarlingMonkey, and \
componentize-qjs 0.4.5 with QuickJS), built by `.ci/policy-examples build`. Size: the component's \
bytes, and gzipped at level 9 (what a ConfigMap's `binaryData` or an image layer carries). \
Admission: in a process of its own (`cubepod-bench admit-once`), what a replica runs before it \
serves a module: the file read, the compile, the contract check, `describe` and the conformance \
self-test, timed from the read to the verdict, with the process's peak RSS (VmHWM); once with an \
empty `--cache-dir`, then again with the cache that run filled, as a second replica or a restart \
finds it. The cached run must load the entry the cold one wrote (the same file, not replaced by a \
compile), or its row says it compiled again. Per call: `reconcile-sandbox` on a converged resync \
and on a new sandbox, each call instantiating the module in a fresh Store as the controller does \
when the decision memo has no answer (the memo off: no call is answered from it), on the module \
the engine loaded from that cache. Before any call is timed, the module timed must be the \
language's: its sha256 that of the component read, the name its `describe` gives the language's \
default's, and the component must carry its toolchain's runtime (`componentize_py_runtime`, \
`StarlingMonkey`, `componentize_qjs_runtime`), or the run fails. 1,000 calls a round per input \
and language (a third of `--decision-runs`; 166 with `--quick`), after 100 untimed; every call, \
timed or not, is checked afterwards to have decided as the native Rust does through all its \
kube-client calls, each in a call context of its own (so that no new sandbox is deferred by the \
write allowance the calls before it spent). The ratio is each p50 over the Rust default's in the \
same run.
- **Router** (`--only router`, `tests/src/bench/router.rs`): the real `cubepod-controller \
router` against the fake, its Pods' IPs on a loopback range, each served at its own address by \
the simulated kubelet's stand-in (a one-line HTTP/1.1 answer). Requests/s: 8 keep-alive \
HTTP/1.1 connections, each sending its next request when the last is answered, for 5 s after a \
second's warm-up, straight to the stand-in and then through the router to it. Added p99: the same \
8 connections paced at 1,000 requests/s together, the time to each response's head, through the \
router less straight. Wake: `run --embedded --router-listen` with a sandbox of \
`idleTimeoutSeconds: 1` and `--pod-start-delay 1s`; each time the reaper has paused it, one \
request through the router, from sending to its response's head, less the second of the Pod's \
start. RSS: VmRSS of the router once it has forwarded one request to each of N sandboxes, and \
after 5 more rounds (their Pods share one stand-in address, so the figure leaves out one idle \
keep-alive connection per Pod). HTTP/2 is not measured: the stand-in speaks HTTP/1.1 only.
";

/// Writes `docs/performance.md` and `docs/performance.svg` under `root`, keeping what follows
/// the generated part of an existing `performance.md`.
pub fn write_docs(root: &Path, results: &Results, rows: &[Row]) -> Result<()> {
    let docs = root.join("docs");
    std::fs::create_dir_all(&docs).context("creating docs/")?;
    let page = docs.join("performance.md");
    let existing = std::fs::read_to_string(&page).unwrap_or_default();
    let kept = kept_part(&existing);
    std::fs::write(&page, markdown(results, rows, kept)).context("writing performance.md")?;
    std::fs::write(docs.join("performance.svg"), svg(results))
        .context("writing performance.svg")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_keep_the_hand_written_part_as_it_was() {
        let hand = "\n## What's in the way\n\nA note.\n";
        let mut page = String::from("# Performance\n\n(generated)\n");
        append_kept(&mut page, hand);
        for _ in 0..3 {
            let mut again = String::from("# Performance\n\n(generated again)\n");
            append_kept(&mut again, kept_part(&page));
            page = again;
        }
        assert_eq!(kept_part(&page), hand);
        assert!(page.ends_with(&format!("{GENERATED_END}\n{hand}")));
        assert_eq!(kept_part("a page without the marker"), "");
    }
}
