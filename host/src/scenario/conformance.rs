//! The conformance self-test a policy passes before it may replace the running one: built-in
//! situations (`conformance/*.yaml`, embedded) run on scratch in-memory clusters through the
//! module as loaded (so under the engine's deadline and memory limit), checked against
//! invariants that any policy of the contract must meet. Nothing here is specific to the
//! default policy: no exact call list, no names of children, no condition reasons.

mod sandbox;
mod ticks;

use std::path::Path;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tracing::subscriber::Interest;
use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::filter::DynFilterFn;
use tracing_subscriber::layer::{Context, Filter};
use tracing_subscriber::registry::LookupSpan;

use super::format::{self, Action, FormatError, ReapTarget, Scenario};
use super::scratch::{Scratch, StepError, StepOutcome, StepResult, summary};
use cubepod_policy_host::runtime::{KubeCall, PolicyModule, RuntimeError};

/// Passes a policy gets to converge a sandbox, or to finish a cleanup.
const MAX_PASSES: usize = 5;

/// Why a module failed the self-test. Each says which case, on what input (the Sandbox and its
/// image, the pool, the reaper's candidates) and what the policy did or answered.
#[derive(Debug, thiserror::Error)]
pub enum SelfTestError {
    /// A built-in scenario does not parse or seed: a bug of this build, not of the policy.
    #[error("built-in conformance scenario {file} is broken: {why}")]
    Scenario {
        /// The scenario's file.
        file: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// The policy trapped, ran past its deadline or out of memory.
    #[error("conformance '{case}'{input}: {source}")]
    Runtime {
        /// The conformance case.
        case: &'static str,
        /// The input the policy was handed.
        input: Input,
        /// The runtime's error.
        #[source]
        source: RuntimeError,
    },
    /// The policy broke an invariant of the contract.
    #[error("conformance '{case}'{input}: {invariant}: {detail}")]
    Violation {
        /// The conformance case.
        case: &'static str,
        /// The input the policy was handed.
        input: Input,
        /// The invariant broken.
        invariant: &'static str,
        /// How it was broken.
        detail: String,
    },
}

/// What a case handed the policy, as a refusal names it: ` on Sandbox conformance-new (image
/// registry.example/conformance:1)`; empty for a case with no situation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Input(String);

impl std::fmt::Display for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            return Ok(());
        }
        write!(f, " on {}", self.0)
    }
}

impl Input {
    /// The object the scenario's step acts on, with what a policy most often decides by.
    fn of(scenario: &Scenario) -> Self {
        let object = |name: &str| scenario.objects.iter().find(|o| o.name == name);
        let text = |value: &serde_json::Value| value.as_str().unwrap_or("none").to_string();
        Input(match &scenario.steps[0].action {
            Action::Reconcile(name) => match object(name) {
                Some(seed) => format!(
                    "Sandbox {name} (image {})",
                    text(&seed.object["spec"]["image"])
                ),
                None => format!("Sandbox {name}"),
            },
            Action::Pool(name) => match object(name) {
                Some(seed) => format!(
                    "PodWarmPool {name} ({} replicas of image {})",
                    seed.object["spec"]["replicas"],
                    text(&seed.object["spec"]["template"]["image"])
                ),
                None => format!("PodWarmPool {name}"),
            },
            Action::Reap(ReapTarget::Only(names)) => {
                format!("a reaper tick handed {}", names.join(", "))
            }
            Action::Reap(ReapTarget::All) => "a reaper tick handed every sandbox".to_string(),
            Action::Patch(patch) => format!("a patch of {}", patch.name),
            Action::Delete(name) => format!("a delete of {name}"),
        })
    }
}

type Check = fn(&Ctx<'_>) -> Result<(), SelfTestError>;

/// One conformance case: a built-in situation and the invariants checked on it.
#[derive(Debug)]
pub struct Case {
    pub(crate) name: &'static str,
    /// `conformance/<file>`, or `None` for a case with no situation (describe).
    pub(crate) file: Option<&'static str>,
    text: &'static str,
    check: Check,
}

/// Every case, in the order they run.
pub fn cases() -> &'static [Case] {
    const CASES: &[Case] = &[
        Case {
            name: "describe names the contract the module targets",
            file: None,
            text: "",
            check: describe,
        },
        Case {
            name: "new running sandbox",
            file: Some("new-sandbox.yaml"),
            text: include_str!("conformance/new-sandbox.yaml"),
            check: sandbox::new_sandbox,
        },
        Case {
            name: "deleted sandbox",
            file: Some("deleted-sandbox.yaml"),
            text: include_str!("conformance/deleted-sandbox.yaml"),
            check: sandbox::deleted_sandbox,
        },
        Case {
            name: "reap decides only about the given sandboxes",
            file: Some("reap.yaml"),
            text: include_str!("conformance/reap.yaml"),
            check: ticks::reap,
        },
        Case {
            name: "warm pool fills without over-creating",
            file: Some("warm-pool.yaml"),
            text: include_str!("conformance/warm-pool.yaml"),
            check: ticks::warm_pool,
        },
    ];
    CASES
}

/// The span a self-test runs in. Its reconciles log as the controller's do, but about scratch
/// objects (`conformance-gone`, ...): [`quiet_at_info`] keeps them out of an INFO log.
pub(crate) const SPAN: &str = "conformance_self_test";

/// How far a run of the cases goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Extent {
    /// Up to the first failure: what admission needs to refuse a module, and no more (a
    /// module that loops would otherwise spend a deadline on every case).
    UntilFirstFailure,
    /// Every case, whatever failed before: what `policy test` reports.
    EveryCase,
}

/// One case's verdict.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) case: &'static Case,
    pub(crate) result: Result<(), SelfTestError>,
    pub(crate) duration: Duration,
}

/// Runs the cases, in order, as far as `extent` says. Call from a blocking thread, not from
/// async code: the scratch clusters' futures run on `handle`, on this thread, so inside this
/// span.
pub(crate) fn run(module: &PolicyModule, handle: &Handle, extent: Extent) -> Vec<Outcome> {
    let _span = tracing::info_span!(SPAN).entered();
    let mut outcomes = Vec::new();
    for case in cases() {
        let started = Instant::now();
        let result = run_case(module, handle, case);
        let failed = result.is_err();
        outcomes.push(Outcome {
            case,
            result,
            duration: started.elapsed(),
        });
        if failed && extent == Extent::UntilFirstFailure {
            break;
        }
    }
    outcomes
}

/// How many cases passed when all did, else the first failure.
pub(crate) fn verdict(outcomes: Vec<Outcome>) -> Result<usize, SelfTestError> {
    let passed = outcomes.len();
    match outcomes.into_iter().find_map(|o| o.result.err()) {
        Some(error) => Err(error),
        None => Ok(passed),
    }
}

/// A log filter that drops the self-test's INFO (and more verbose) lines unless `verbose`
/// (the log's filter shows DEBUG somewhere): at INFO, a start's log names only the cluster's
/// objects. Its warnings and errors always show.
pub fn quiet_at_info<S>(verbose: bool) -> impl Filter<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    // Only the events that may be dropped are judged one by one; the rest pass at the callsite.
    let passes = move |metadata: &Metadata<'_>| {
        verbose || !metadata.is_event() || *metadata.level() < Level::INFO
    };
    DynFilterFn::new(move |metadata: &Metadata<'_>, cx: &Context<'_, S>| {
        passes(metadata)
            || !cx
                .lookup_current()
                .is_some_and(|span| span.scope().any(|s| s.name() == SPAN))
    })
    .with_callsite_filter(move |metadata| {
        if passes(metadata) {
            Interest::always()
        } else {
            Interest::sometimes()
        }
    })
}

/// Runs one case.
fn run_case(
    module: &PolicyModule,
    handle: &Handle,
    case: &'static Case,
) -> Result<(), SelfTestError> {
    let scenario = match case.file {
        Some(file) => Some(parse(case, file)?),
        None => None,
    };
    let input = scenario.as_ref().map(Input::of).unwrap_or_default();
    (case.check)(&Ctx {
        module,
        handle,
        case,
        scenario,
        input,
    })
}

/// A case's built-in scenario: one scenario of one step.
fn parse(case: &Case, file: &'static str) -> Result<Scenario, SelfTestError> {
    let broken = |why: String| SelfTestError::Scenario { file, why };
    let path = Path::new("conformance").join(file);
    let mut scenarios =
        format::parse(&path, case.text).map_err(|e: FormatError| broken(e.to_string()))?;
    if scenarios.len() != 1 || scenarios[0].steps.len() != 1 {
        return Err(broken(
            "a conformance file holds one scenario of one step".to_string(),
        ));
    }
    Ok(scenarios.remove(0))
}

struct Ctx<'a> {
    module: &'a PolicyModule,
    handle: &'a Handle,
    case: &'a Case,
    scenario: Option<Scenario>,
    input: Input,
}

impl Ctx<'_> {
    fn violation(&self, invariant: &'static str, detail: impl Into<String>) -> SelfTestError {
        SelfTestError::Violation {
            case: self.case.name,
            input: self.input.clone(),
            invariant,
            detail: detail.into(),
        }
    }

    fn broken(&self, why: impl std::fmt::Display) -> SelfTestError {
        SelfTestError::Scenario {
            file: self.case.file.unwrap_or("(none)"),
            why: why.to_string(),
        }
    }

    fn scenario(&self) -> Result<Scenario, SelfTestError> {
        self.scenario
            .clone()
            .ok_or_else(|| self.broken("the case has no scenario"))
    }

    /// A fresh scratch cluster holding the scenario's objects.
    fn seeded(&self, scenario: &Scenario) -> Result<Scratch, SelfTestError> {
        let scratch = Scratch::new(&scenario.namespace, self.module, self.handle);
        scratch
            .seed(&scenario.objects)
            .map_err(|e| self.broken(e))?;
        Ok(scratch)
    }

    /// A step that must succeed: a trap is a runtime failure, any other error a violation.
    fn step(
        &self,
        scratch: &mut Scratch,
        action: &Action,
        now: Option<i64>,
        max_pool_replicas: u32,
    ) -> Result<StepResult, SelfTestError> {
        let StepOutcome { result, error } = scratch.run(action, now, max_pool_replicas);
        match error {
            None => Ok(result),
            Some(error) => Err(self.step_error(error)),
        }
    }

    fn step_error(&self, error: StepError) -> SelfTestError {
        match error {
            StepError::Runtime(source) => self.runtime(source),
            other => self.violation("no error on a plain input", other.to_string()),
        }
    }

    fn runtime(&self, source: RuntimeError) -> SelfTestError {
        SelfTestError::Runtime {
            case: self.case.name,
            input: self.input.clone(),
            source,
        }
    }
}

/// Each supported version is its own contract: a module is held to the one its component
/// targets, and `describe` must name that one.
fn describe(ctx: &Ctx<'_>) -> Result<(), SelfTestError> {
    let info = ctx.module.describe().map_err(|e| ctx.runtime(e))?;
    let contract = ctx.module.contract();
    if info.contract_version != contract.version() {
        return Err(ctx.violation(
            "contract version",
            format!(
                "describe says {:?}, the component targets {contract}",
                info.contract_version
            ),
        ));
    }
    Ok(())
}

fn summaries(calls: &[KubeCall], namespace: &str) -> String {
    if calls.is_empty() {
        return "no call".to_string();
    }
    calls
        .iter()
        .map(|c| summary(c, namespace))
        .collect::<Vec<_>>()
        .join(", ")
}

fn show(value: Option<&serde_json::Value>) -> String {
    value.map_or_else(|| "no status".to_string(), super::diff::show)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_scenario_parses_as_one_step() {
        for case in cases().iter().filter(|c| c.file.is_some()) {
            let path = Path::new("conformance").join(case.file.unwrap());
            let scenarios = format::parse(&path, case.text).unwrap();
            assert_eq!(scenarios.len(), 1, "{}", case.name);
            assert_eq!(scenarios[0].steps.len(), 1, "{}", case.name);
            assert_eq!(scenarios[0].name, case.name);
        }
    }

    #[test]
    fn the_default_policy_passes_from_a_blocking_thread_of_a_runtime() {
        // As hot swap calls it: on spawn_blocking, with the runtime's handle.
        let runtime = super::super::test_support::runtime();
        let module = super::super::test_support::default_policy().clone();
        let handle = runtime.handle().clone();
        let passed =
            runtime
                .block_on(runtime.spawn_blocking(move || {
                    verdict(run(&module, &handle, Extent::UntilFirstFailure))
                }))
                .unwrap()
                .unwrap();
        assert_eq!(passed, cases().len());
    }
}
