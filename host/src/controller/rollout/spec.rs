//! A `PolicyRollout`'s spec as the controller reads it, and its gates judged over a window.

use std::time::Duration;

use serde_json::Value;

use crate::controller::export::Export;
use crate::controller::policy::{Counts, Window};

/// The most a canary's share of sandboxes Ready (or of cleanups done) at a step's end may fall
/// short of the stable module's, when the spec does not say (`maxProgressShortfall`).
pub(crate) const DEFAULT_PROGRESS_SHORTFALL: f64 = 0.2;

/// The least calls of each export a stage must see the candidate make, of those exercised in
/// the stage, before it may end, when the spec does not say (`minCallsPerExport`).
pub(crate) const DEFAULT_MIN_CALLS: u64 = 1;

/// Why a spec cannot be acted on (the CRD's schema holds most of it; these are what it cannot).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SpecError {
    /// A field is missing or of the wrong type.
    #[error("spec.{0} is required")]
    Missing(&'static str),
    /// A duration is not one (`30s`, `5m`, `1h`).
    #[error("spec.strategy.canary.steps[{step}].duration {text:?}: {why}")]
    Duration {
        /// The step.
        step: usize,
        /// As written.
        text: String,
        /// Why it does not parse.
        why: String,
    },
    /// The shadow's duration is not one.
    #[error("spec.strategy.shadow.duration {text:?}: {why}")]
    ShadowDuration {
        /// As written.
        text: String,
        /// Why it does not parse.
        why: String,
    },
    /// A step's weight is below the one before it: assignments would shrink.
    #[error(
        "spec.strategy.canary.steps[{step}].weight {weight} is below the step before it: \
         a canary's share only grows"
    )]
    Shrinks {
        /// The step.
        step: usize,
        /// Its weight.
        weight: u8,
    },
}

/// Where the module is: a ConfigMap of the rollout's namespace and its keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ModuleSource {
    pub(crate) config_map: String,
    pub(crate) key: String,
    pub(crate) signature_key: String,
}

/// One canary step: a share of objects for a time.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Step {
    pub(crate) weight: u8,
    pub(crate) duration: Duration,
}

/// The most the candidate may show over a step; `None`: not gated.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Gates {
    pub(crate) max_trap_ratio: Option<f64>,
    pub(crate) max_refusal_ratio: Option<f64>,
    pub(crate) max_error_ratio: Option<f64>,
    pub(crate) max_ready_latency_ratio: Option<f64>,
    /// The most the candidate's share of sandboxes Ready, and of cleanups done, at a step's
    /// end may fall short of the stable module's (1: not gated).
    pub(crate) max_progress_shortfall: f64,
    /// The least calls of an export exercised in a stage the candidate must make (or the
    /// shadow compare) before the stage may end.
    pub(crate) min_calls_per_export: u64,
    /// The most of the shadow's compared calls that may differ for the shadow stage to pass.
    pub(crate) max_shadow_difference_ratio: Option<f64>,
}

impl Default for Gates {
    fn default() -> Self {
        Self {
            max_trap_ratio: None,
            max_refusal_ratio: None,
            max_error_ratio: None,
            max_ready_latency_ratio: None,
            max_progress_shortfall: DEFAULT_PROGRESS_SHORTFALL,
            min_calls_per_export: DEFAULT_MIN_CALLS,
            max_shadow_difference_ratio: None,
        }
    }
}

/// What the gates saw over a window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Observed {
    pub(crate) reconciles: u64,
    pub(crate) trap_ratio: f64,
    pub(crate) refusal_ratio: f64,
    pub(crate) error_ratio: f64,
    /// The candidate's mean time from creation to Ready over the stable module's, a sandbox
    /// of the step not Ready yet counted with the time it has waited so far, when both had
    /// such sandboxes in the window. A creationTimestamp has whole seconds, so each mean
    /// counts as at least one second.
    pub(crate) ready_latency_ratio: Option<f64>,
    /// Calls of each export in the window ([`Export::ALL`]'s order): the candidate's, the
    /// stable module's.
    pub(crate) calls: [(u64, u64); 4],
    /// The same over the whole canary.
    pub(crate) canary_calls: [(u64, u64); 4],
    /// Sandboxes to run and those Ready: the candidate's, the stable module's.
    pub(crate) ready: [(u64, u64); 2],
    /// Sandboxes being deleted and those whose cleanup is done: the same.
    pub(crate) cleaned: [(u64, u64); 2],
}

/// A gate the candidate went past.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Breach {
    /// Its field: `maxTrapRatio`.
    pub(crate) gate: &'static str,
    pub(crate) observed: f64,
    pub(crate) max: f64,
    /// What was measured, in words, for a progress gate: `2 of 6 of the candidate's
    /// sandboxes Ready, against 4 of 4 of the stable module's`.
    pub(crate) what: Option<String>,
}

/// An export a stage saw too few of the candidate's calls of to judge it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TooFew {
    pub(crate) export: &'static str,
    /// The candidate's calls (or the shadow's comparisons) of it, and the stable module's.
    pub(crate) candidate: u64,
    pub(crate) stable: u64,
    pub(crate) min: u64,
}

impl TooFew {
    /// The first export exercised in a stage (`calls`: the candidate's or compared, the
    /// stable module's, by export) of which fewer than `min` were the candidate's.
    pub(crate) fn first(
        calls: impl IntoIterator<Item = (&'static str, u64, u64)>,
        min: u64,
    ) -> Option<Self> {
        calls
            .into_iter()
            .find(|&(_, candidate, stable)| candidate + stable > 0 && candidate < min)
            .map(|(export, candidate, stable)| Self {
                export,
                candidate,
                stable,
                min,
            })
    }
}

impl Observed {
    pub(crate) fn of(window: &Window) -> Self {
        let c = &window.candidate;
        let ready_latency_ratio = c
            .mean_ready()
            .zip(window.stable.mean_ready())
            .map(|(candidate, stable)| candidate.max(1.0) / stable.max(1.0));
        let s = &window.stable;
        Self {
            reconciles: c.reconciles,
            trap_ratio: c.ratio(c.traps),
            refusal_ratio: c.ratio(c.refusals),
            error_ratio: c.ratio(c.errors),
            ready_latency_ratio,
            calls: std::array::from_fn(|i| (c.calls[i], s.calls[i])),
            canary_calls: std::array::from_fn(|i| (c.canary_calls[i], s.canary_calls[i])),
            ready: [(c.ready, c.started), (s.ready, s.started)],
            cleaned: [(c.cleaned, c.cleanups), (s.cleaned, s.cleanups)],
        }
    }

    /// The first export the canary saw too few of the candidate's calls of.
    pub(crate) fn too_few(&self, min: u64) -> Option<TooFew> {
        let calls = Export::ALL
            .iter()
            .zip(self.canary_calls)
            .map(|(export, (candidate, stable))| (export.name(), candidate, stable));
        TooFew::first(calls, min)
    }
}

impl Gates {
    /// The first gate `observed` is past, if any.
    pub(crate) fn breached(&self, observed: &Observed) -> Option<Breach> {
        let checks = [
            (
                "maxTrapRatio",
                self.max_trap_ratio,
                Some(observed.trap_ratio),
            ),
            (
                "maxRefusalRatio",
                self.max_refusal_ratio,
                Some(observed.refusal_ratio),
            ),
            (
                "maxErrorRatio",
                self.max_error_ratio,
                Some(observed.error_ratio),
            ),
            (
                "maxReadyLatencyRatio",
                self.max_ready_latency_ratio,
                observed.ready_latency_ratio,
            ),
        ];
        checks.into_iter().find_map(|(gate, max, seen)| {
            let (max, observed) = (max?, seen?);
            (observed > max).then_some(Breach {
                gate,
                observed,
                max,
                what: None,
            })
        })
    }

    /// At a step's end: the candidate's share of sandboxes Ready, then of cleanups done,
    /// short of the stable module's by more than `maxProgressShortfall`. A sandbox that never
    /// became Ready (or never finished its cleanup) counts against its module. With no
    /// sandbox of the stable module's to compare with (a step at 100% from the start), the
    /// candidate's share is compared with all of them.
    pub(crate) fn progress_breached(&self, observed: &Observed) -> Option<Breach> {
        let checks = [
            (observed.ready, "sandboxes Ready"),
            (observed.cleaned, "cleanups done"),
        ];
        checks
            .into_iter()
            .find_map(|([(c, c_of), (s, s_of)], what)| {
                let candidate = Counts::share(c, c_of)?;
                let stable = Counts::share(s, s_of).unwrap_or(1.0);
                let shortfall = stable - candidate;
                let against = if s_of > 0 {
                    format!("{s} of {s_of} of the stable module's")
                } else {
                    "all of them (the stable module had none to compare with)".to_string()
                };
                (shortfall > self.max_progress_shortfall).then(|| Breach {
                gate: "maxProgressShortfall",
                observed: shortfall,
                max: self.max_progress_shortfall,
                what: Some(format!(
                    "{c} of {c_of} of the candidate's {what} at the step's end, against {against}"
                )),
            })
            })
    }
}

/// The shadow stage: how long, and on what share of reconciles.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ShadowStage {
    pub(crate) duration: Duration,
    pub(crate) share: u8,
}

/// A rollout's spec.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Spec {
    pub(crate) module: ModuleSource,
    /// A shadow stage before the canary (or the swap).
    pub(crate) shadow: Option<ShadowStage>,
    /// Empty: `Immediate`.
    pub(crate) steps: Vec<Step>,
    pub(crate) gates: Gates,
    pub(crate) paused: bool,
}

impl Spec {
    /// Reads a PolicyRollout's `spec` (as the API server defaulted it, or not).
    pub(crate) fn from_json(spec: &Value) -> Result<Self, SpecError> {
        let module = &spec["module"];
        let config_map = module["configMap"]
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or(SpecError::Missing("module.configMap"))?;
        let text = |value: &Value, default: &str| value.as_str().unwrap_or(default).to_string();
        let strategy = &spec["strategy"];
        let progressive = strategy["type"].as_str() == Some("Progressive");
        let mut steps = Vec::new();
        if progressive {
            let listed = strategy["canary"]["steps"].as_array();
            for (index, step) in listed.into_iter().flatten().enumerate() {
                let weight = step["weight"].as_u64().unwrap_or(0).min(100) as u8;
                let written = step["duration"].as_str().unwrap_or("0s");
                let duration =
                    humantime::parse_duration(written).map_err(|e| SpecError::Duration {
                        step: index,
                        text: written.to_string(),
                        why: e.to_string(),
                    })?;
                if steps.last().is_some_and(|s: &Step| s.weight > weight) {
                    return Err(SpecError::Shrinks {
                        step: index,
                        weight,
                    });
                }
                steps.push(Step { weight, duration });
            }
        }
        let shadow = match &strategy["shadow"] {
            Value::Object(stage) => {
                let written = stage
                    .get("duration")
                    .and_then(Value::as_str)
                    .unwrap_or("0s");
                let duration =
                    humantime::parse_duration(written).map_err(|e| SpecError::ShadowDuration {
                        text: written.to_string(),
                        why: e.to_string(),
                    })?;
                let share = stage.get("share").and_then(Value::as_u64).unwrap_or(100);
                Some(ShadowStage {
                    duration,
                    share: share.min(100) as u8,
                })
            }
            _ => None,
        };
        let gates = &strategy["gates"];
        Ok(Self {
            shadow,
            module: ModuleSource {
                config_map: config_map.to_string(),
                key: text(&module["key"], "policy.wasm"),
                signature_key: text(&module["signatureKey"], "policy.wasm.sig"),
            },
            steps,
            gates: Gates {
                max_trap_ratio: gates["maxTrapRatio"].as_f64(),
                max_refusal_ratio: gates["maxRefusalRatio"].as_f64(),
                max_error_ratio: gates["maxErrorRatio"].as_f64(),
                max_ready_latency_ratio: gates["maxReadyLatencyRatio"].as_f64(),
                max_progress_shortfall: gates["maxProgressShortfall"]
                    .as_f64()
                    .unwrap_or(DEFAULT_PROGRESS_SHORTFALL),
                min_calls_per_export: gates["minCallsPerExport"]
                    .as_u64()
                    .unwrap_or(DEFAULT_MIN_CALLS),
                max_shadow_difference_ratio: gates["maxShadowDifferenceRatio"].as_f64(),
            },
            paused: spec["paused"].as_bool().unwrap_or(false),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::controller::policy::Counts;

    fn counts(reconciles: u64, traps: u64, refusals: u64, errors: u64) -> Counts {
        Counts {
            reconciles,
            traps,
            refusals,
            errors,
            ..Counts::default()
        }
    }

    #[test]
    fn a_progressive_spec_reads_its_steps_and_gates() {
        let spec = Spec::from_json(&json!({
            "module": {"configMap": "policy-v2"},
            "strategy": {
                "type": "Progressive",
                "canary": {"steps": [{"weight": 10, "duration": "30s"}, {"weight": 100, "duration": "1m"}]},
                "gates": {"maxTrapRatio": 0.01, "maxReadyLatencyRatio": 1.5},
            },
        }))
        .unwrap();
        assert_eq!(spec.module.key, "policy.wasm");
        assert_eq!(spec.module.signature_key, "policy.wasm.sig");
        assert_eq!(
            spec.steps,
            [
                Step {
                    weight: 10,
                    duration: Duration::from_secs(30)
                },
                Step {
                    weight: 100,
                    duration: Duration::from_secs(60)
                },
            ]
        );
        assert_eq!(spec.gates.max_trap_ratio, Some(0.01));
        assert_eq!(spec.gates.max_error_ratio, None);
        assert!(!spec.paused);
    }

    #[test]
    fn immediate_has_no_steps_and_bad_specs_say_why() {
        let immediate = Spec::from_json(&json!({"module": {"configMap": "m"}})).unwrap();
        assert!(immediate.steps.is_empty());
        assert_eq!(
            Spec::from_json(&json!({"module": {}})),
            Err(SpecError::Missing("module.configMap"))
        );
        let shrinking = json!({"module": {"configMap": "m"}, "strategy": {"type": "Progressive",
            "canary": {"steps": [{"weight": 50, "duration": "1s"}, {"weight": 10, "duration": "1s"}]}}});
        assert!(matches!(
            Spec::from_json(&shrinking),
            Err(SpecError::Shrinks { step: 1, .. })
        ));
        let bad = json!({"module": {"configMap": "m"}, "strategy": {"type": "Progressive",
            "canary": {"steps": [{"weight": 50, "duration": "soon"}]}}});
        assert!(matches!(
            Spec::from_json(&bad),
            Err(SpecError::Duration { step: 0, .. })
        ));
    }

    #[test]
    fn a_gate_is_breached_only_past_its_bound() {
        let gates = Gates {
            max_trap_ratio: Some(0.1),
            max_refusal_ratio: Some(0.0),
            max_error_ratio: None,
            max_ready_latency_ratio: Some(2.0),
            ..Gates::default()
        };
        let quiet = Window {
            candidate: counts(10, 1, 0, 5),
            stable: counts(10, 0, 0, 0),
        };
        // One trap in ten is the bound itself; errors are not gated.
        assert_eq!(gates.breached(&Observed::of(&quiet)), None);
        let trapping = Window {
            candidate: counts(10, 2, 0, 0),
            ..quiet
        };
        assert_eq!(
            gates.breached(&Observed::of(&trapping)),
            Some(Breach {
                gate: "maxTrapRatio",
                observed: 0.2,
                max: 0.1,
                what: None,
            })
        );
        let refusing = Window {
            candidate: counts(10, 0, 1, 0),
            ..quiet
        };
        assert_eq!(
            gates.breached(&Observed::of(&refusing)).map(|b| b.gate),
            Some("maxRefusalRatio")
        );
        // Nothing reconciled yet: nothing breached.
        assert_eq!(gates.breached(&Observed::of(&Window::default())), None);
    }

    #[test]
    fn the_ready_latency_gate_compares_the_candidates_mean_with_the_stables() {
        let gates = Gates {
            max_ready_latency_ratio: Some(2.0),
            ..Gates::default()
        };
        let with = |candidate: f64, stable: f64| Window {
            candidate: Counts {
                reconciles: 2,
                ready_seconds: candidate * 2.0,
                readied: 2,
                ..Counts::default()
            },
            stable: Counts {
                reconciles: 2,
                ready_seconds: stable * 2.0,
                readied: 2,
                ..Counts::default()
            },
        };
        assert_eq!(gates.breached(&Observed::of(&with(4.0, 2.0))), None);
        let slow = gates.breached(&Observed::of(&with(9.0, 3.0))).unwrap();
        assert_eq!((slow.gate, slow.observed), ("maxReadyLatencyRatio", 3.0));
        // Whole seconds: a stable mean of 0 counts as 1 s.
        assert_eq!(Observed::of(&with(0.0, 0.0)).ready_latency_ratio, Some(1.0));
        // No Ready on one side: nothing to compare.
        let one_sided = Window {
            stable: Counts::default(),
            ..with(9.0, 1.0)
        };
        assert_eq!(Observed::of(&one_sided).ready_latency_ratio, None);
    }

    #[test]
    fn progress_falls_short_only_past_its_bound_and_unfinished_sandboxes_count() {
        let gates = Gates::default();
        let with = |ready: (u64, u64), stable: (u64, u64)| Observed {
            ready: [ready, stable],
            ..Observed::default()
        };
        // 4 of 5 against 5 of 5: a shortfall of 0.2, the bound itself.
        assert_eq!(gates.progress_breached(&with((4, 5), (5, 5))), None);
        // None of 6 Ready: each counts against the candidate.
        let never = gates.progress_breached(&with((0, 6), (4, 4))).unwrap();
        assert_eq!((never.gate, never.observed), ("maxProgressShortfall", 1.0));
        assert_eq!(
            never.what.as_deref(),
            Some(
                "0 of 6 of the candidate's sandboxes Ready at the step's end, against 4 of 4 \
                 of the stable module's"
            )
        );
        // No sandbox of the stable module's: compared with all of them.
        assert!(gates.progress_breached(&with((1, 2), (0, 0))).is_some());
        // Cleanups are judged alike.
        let stuck = Observed {
            cleaned: [(0, 3), (4, 4)],
            ..Observed::default()
        };
        let breach = gates.progress_breached(&stuck).unwrap();
        assert!(breach.what.unwrap().contains("cleanups done"));
        // Nothing of the candidate's: nothing to judge.
        assert_eq!(gates.progress_breached(&Observed::default()), None);
    }

    #[test]
    fn an_export_exercised_with_too_few_of_the_candidates_calls_is_named() {
        let observed = Observed {
            canary_calls: [(8, 8), (0, 3), (0, 0), (1, 1)],
            ..Observed::default()
        };
        assert_eq!(
            observed.too_few(1),
            Some(TooFew {
                export: "cleanup-sandbox",
                candidate: 0,
                stable: 3,
                min: 1
            })
        );
        // reconcile-pool, never called, is not held for.
        assert_eq!(observed.too_few(0), None);
        let enough = Observed {
            canary_calls: [(8, 8), (2, 3), (0, 0), (1, 1)],
            ..Observed::default()
        };
        assert_eq!(enough.too_few(1), None);
    }
}
