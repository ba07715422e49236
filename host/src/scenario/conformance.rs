//! The conformance self-test a policy passes before it may replace the running one: built-in
//! situations (`conformance/*.yaml`, embedded) run on scratch in-memory clusters through the
//! module as loaded (so under the engine's deadline and memory limit), checked against
//! invariants that any policy of the contract must meet. Nothing here is specific to the
//! default policy: no exact call list, no names of children, no condition reasons.

mod sandbox;
mod ticks;

use std::path::Path;

use tokio::runtime::Handle;
use tracing::subscriber::Interest;
use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::filter::DynFilterFn;
use tracing_subscriber::layer::{Context, Filter};
use tracing_subscriber::registry::LookupSpan;

use super::format::{self, Action, FormatError, Scenario};
use super::scratch::{Scratch, StepError, StepOutcome, StepResult, summary};
use crate::runtime::{KubeCall, PolicyModule, RuntimeError};

/// Passes a policy gets to converge a sandbox, or to finish a cleanup.
const MAX_PASSES: usize = 5;

/// Why a module failed the self-test.
#[derive(Debug, thiserror::Error)]
pub enum SelfTestError {
    /// A built-in scenario does not parse or seed: a bug of this build, not of the policy.
    #[error("built-in conformance scenario {file} is broken: {why}")]
    Scenario { file: &'static str, why: String },
    /// The policy trapped, ran past its deadline or out of memory.
    #[error("conformance '{case}': {source}")]
    Runtime {
        case: &'static str,
        #[source]
        source: RuntimeError,
    },
    /// The policy broke an invariant of the contract.
    #[error("conformance '{case}': {invariant}: {detail}")]
    Violation {
        case: &'static str,
        invariant: &'static str,
        detail: String,
    },
}

type Check = fn(&Ctx<'_>) -> Result<(), SelfTestError>;

/// One conformance case: a built-in situation and the invariants checked on it.
pub struct Case {
    pub name: &'static str,
    /// `conformance/<file>`, or `None` for a case with no situation (describe).
    pub file: Option<&'static str>,
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
pub const SPAN: &str = "conformance_self_test";

/// Runs every case; returns how many passed (all of them), or the first failure. Call from a
/// blocking thread, not from async code: the scratch clusters' futures run on `handle`, on this
/// thread, so inside this span.
pub fn self_test(module: &PolicyModule, handle: &Handle) -> Result<usize, SelfTestError> {
    let _span = tracing::info_span!(SPAN).entered();
    for case in cases() {
        run_case(module, handle, case)?;
    }
    Ok(cases().len())
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
pub fn run_case(module: &PolicyModule, handle: &Handle, case: &Case) -> Result<(), SelfTestError> {
    (case.check)(&Ctx {
        module,
        handle,
        case,
    })
}

struct Ctx<'a> {
    module: &'a PolicyModule,
    handle: &'a Handle,
    case: &'a Case,
}

impl Ctx<'_> {
    fn violation(&self, invariant: &'static str, detail: impl Into<String>) -> SelfTestError {
        SelfTestError::Violation {
            case: self.case.name,
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
        let file = self.case.file.unwrap_or("(none)");
        let path = Path::new("conformance").join(file);
        let mut scenarios =
            format::parse(&path, self.case.text).map_err(|e: FormatError| self.broken(e))?;
        if scenarios.len() != 1 || scenarios[0].steps.len() != 1 {
            return Err(self.broken("a conformance file holds one scenario of one step"));
        }
        Ok(scenarios.remove(0))
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
            StepError::Runtime(source) => SelfTestError::Runtime {
                case: self.case.name,
                source,
            },
            other => self.violation("no error on a plain input", other.to_string()),
        }
    }

    fn runtime(&self, source: RuntimeError) -> SelfTestError {
        SelfTestError::Runtime {
            case: self.case.name,
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
        let passed = runtime
            .block_on(runtime.spawn_blocking(move || self_test(&module, &handle)))
            .unwrap()
            .unwrap();
        assert_eq!(passed, cases().len());
    }
}
