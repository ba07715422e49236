//! A `PolicyRollout`'s spec as the controller reads it, and its gates judged over a window.

use std::time::Duration;

use serde_json::Value;

use crate::controller::policy::Window;

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
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Gates {
    pub(crate) max_trap_ratio: Option<f64>,
    pub(crate) max_refusal_ratio: Option<f64>,
    pub(crate) max_error_ratio: Option<f64>,
    pub(crate) max_ready_latency_ratio: Option<f64>,
}

/// What the gates saw over a window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Observed {
    pub(crate) reconciles: u64,
    pub(crate) trap_ratio: f64,
    pub(crate) refusal_ratio: f64,
    pub(crate) error_ratio: f64,
    /// The candidate's mean time from creation to Ready over the stable module's, when both
    /// made a sandbox Ready in the window. A creationTimestamp has whole seconds, so each mean
    /// counts as at least one second.
    pub(crate) ready_latency_ratio: Option<f64>,
}

/// A gate the candidate went past.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Breach {
    /// Its field: `maxTrapRatio`.
    pub(crate) gate: &'static str,
    pub(crate) observed: f64,
    pub(crate) max: f64,
}

impl Observed {
    pub(crate) fn of(window: &Window) -> Self {
        let c = &window.candidate;
        let ready_latency_ratio = c
            .mean_ready()
            .zip(window.stable.mean_ready())
            .map(|(candidate, stable)| candidate.max(1.0) / stable.max(1.0));
        Self {
            reconciles: c.reconciles,
            trap_ratio: c.ratio(c.traps),
            refusal_ratio: c.ratio(c.refusals),
            error_ratio: c.ratio(c.errors),
            ready_latency_ratio,
        }
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
                max: 0.1
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
}
