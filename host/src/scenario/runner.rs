//! Runs a scenario: a scratch cluster seeded with its objects, each step through the real
//! policy module (same runtime, same limits), each step's expectations checked. A scenario
//! stops at its first failing step: later steps build on it and would only add noise.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;

use super::expect;
use super::format::{Action, ReapTarget, Scenario};
use super::scratch::Scratch;
use cubepod_policy_host::runtime::PolicyModule;

/// How one scenario went.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    pub(crate) name: String,
    pub(crate) file: PathBuf,
    /// Readable lines saying what differed; empty when the scenario passed.
    pub(crate) failures: Vec<String>,
    pub(crate) duration: Duration,
}

impl Report {
    pub(crate) fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Runs `scenario` against `module`. Call from a blocking thread: the scratch cluster's
/// futures run on `handle`.
pub(crate) fn run(module: &PolicyModule, handle: &Handle, scenario: &Scenario) -> Report {
    let started = Instant::now();
    let failures = run_steps(module, handle, scenario);
    Report {
        name: scenario.name.clone(),
        file: scenario.file.clone(),
        failures,
        duration: started.elapsed(),
    }
}

fn run_steps(module: &PolicyModule, handle: &Handle, scenario: &Scenario) -> Vec<String> {
    let mut scratch = Scratch::new(&scenario.namespace, module, handle);
    if let Err(why) = scratch.seed(&scenario.objects) {
        return vec![format!("setup: {why}")];
    }
    let several = scenario.steps.len() > 1;
    for (index, step) in scenario.steps.iter().enumerate() {
        let outcome = scratch.run(&step.action, step.now, scenario.max_pool_replicas);
        let lines = expect::check(&step.expect, &outcome, &scratch);
        if lines.is_empty() {
            continue;
        }
        if !several {
            return lines;
        }
        let mut out = vec![format!(
            "step {} of {} ({}):",
            index + 1,
            scenario.steps.len(),
            describe(&step.action)
        )];
        out.extend(lines.into_iter().map(|l| format!("  {l}")));
        if index + 1 < scenario.steps.len() {
            out.push("(later steps not run)".to_string());
        }
        return out;
    }
    Vec::new()
}

/// A step's action in a few words: `reconcile a`, `reap all`, `patch Sandbox/a`.
pub(crate) fn describe(action: &Action) -> String {
    match action {
        Action::Reconcile(name) => format!("reconcile {name}"),
        Action::Pool(name) => format!("pool {name}"),
        Action::Reap(ReapTarget::All) => "reap all".to_string(),
        Action::Reap(ReapTarget::Only(names)) => format!("reap {}", names.join(", ")),
        Action::Patch(patch) => format!("patch {}/{}", patch.kind.0.kind(), patch.name),
        Action::Delete(target) => format!("delete {target}"),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::scenario::format;
    use crate::scenario::scratch::Scratch;
    use crate::scenario::test_support::{default_policy, runtime};

    fn run_text(text: &str) -> Report {
        let scenario = format::parse(Path::new("t.yaml"), text).unwrap().remove(0);
        run(default_policy(), runtime().handle(), &scenario)
    }

    const SANDBOX: &str = "
  - apiVersion: cubepod.io/v1alpha1
    kind: Sandbox
    metadata: {name: a, finalizers: [cubepod.io/cleanup], deletionTimestamp: \"2026-01-01T00:00:00Z\"}
    spec: {image: i}
    status: {phase: Running, rootfsPVC: a-rootfs-g1}
";

    #[test]
    fn a_seeded_status_and_deletion_reach_the_policy() {
        // The status given in the file is seen (rootfsPVC kept in the returned status), and
        // deletionTimestamp makes the step a cleanup.
        let report = run_text(&format!(
            "now: 2026-01-01T00:00:00Z\nobjects:{SANDBOX}reconcile: a\nexpect:\n  done: true\n  calls: []\n  status: {{phase: Terminating, rootfsPVC: a-rootfs-g1}}\n  absent: [Sandbox/a]\n"
        ));
        assert!(report.passed(), "{:?}", report.failures);
    }

    #[test]
    fn a_failing_step_is_named_and_stops_the_scenario() {
        let report = run_text(
            "now: 2026-01-01T00:00:00Z\nobjects:\n- {apiVersion: cubepod.io/v1alpha1, kind: Sandbox, metadata: {name: a}, spec: {image: i}}\nsteps:\n- reconcile: a\n  expect: {requeueAfterSeconds: 5}\n- reconcile: a\n",
        );
        assert_eq!(
            report.failures,
            [
                "step 1 of 2 (reconcile a):",
                "  requeueAfterSeconds: expected 5, got none",
                "(later steps not run)"
            ]
        );
    }

    /// `cubepod_sandbox_startup_seconds` counts a sandbox once: when a status first reports
    /// it Ready, not when it is Ready again after a pause and resume (`status.firstReadyAt`,
    /// in the object, says it was counted).
    #[test]
    fn a_start_up_is_counted_once_in_a_sandboxs_life() {
        let text = "now: 2026-01-01T00:00:00Z
objects:
- {apiVersion: cubepod.io/v1alpha1, kind: Sandbox, metadata: {name: a}, spec: {image: i}}
steps:
- reconcile: a
- reconcile: a
- reconcile: a
- patch: {kind: Sandbox, name: a, merge: {spec: {desiredState: Paused}}}
- reconcile: a
- patch: {kind: Sandbox, name: a, merge: {spec: {desiredState: Running}}}
- reconcile: a
- reconcile: a
";
        let scenario = format::parse(Path::new("t.yaml"), text).unwrap().remove(0);
        let mut scratch = Scratch::new(&scenario.namespace, default_policy(), runtime().handle());
        scratch.seed(&scenario.objects).unwrap();
        let mut counts = Vec::new();
        for step in &scenario.steps {
            let outcome = scratch.run(&step.action, step.now, 100);
            assert!(outcome.error.is_none(), "{:?}", outcome.error);
            let startup = &scratch.metrics().sandbox_startup;
            counts.push(startup.with_label_values(&["cold"]).get_sample_count());
            assert_eq!(startup.with_label_values(&["warm"]).get_sample_count(), 0);
        }
        assert_eq!(counts, [0, 1, 1, 1, 1, 1, 1, 1]);
        let object = scratch
            .get(cubepod_kube::Resource::Sandbox, &scenario.namespace, "a")
            .unwrap();
        assert_eq!(object["status"]["firstReadyAt"], "2026-01-01T00:00:00Z");
        assert_eq!(object["status"]["phase"], "Running", "resumed: {object}");
    }

    #[test]
    fn errors_are_expected_or_reported() {
        let missing = "now: 2026-01-01T00:00:00Z\nreconcile: ghost\n";
        let report = run_text(missing);
        assert_eq!(
            report.failures,
            ["error: the step failed: no Sandbox cubepod-workloads/ghost in the cluster"]
        );
        let report = run_text(&format!("{missing}expect: {{error: no Sandbox}}\n"));
        assert!(report.passed(), "{:?}", report.failures);
        let report = run_text(
            "objects:\n- {apiVersion: v1, kind: Secret, metadata: {name: s}}\n- {apiVersion: v1, kind: Secret, metadata: {name: s}}\ndelete: Secret/s\n",
        );
        assert_eq!(
            report.failures,
            ["setup: objects[1] (Secret/s): secrets \"s\" already exists"]
        );
    }
}
