//! Fault injection: rules, checked in order before a request is handled, that answer with an
//! error Status, delay, reset the connection, or cut a watch short. A later fault-injection
//! suite drives them; probabilities draw from a seeded RNG so that a run can be replayed.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use cubepod_kube::Resource;
// The server's own verdict: what the rules make of a request, once delays are waited out.
pub(crate) use cubepod_apiserver::serve::Verdict as Outcome;
use hyper::Method;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The seed of a new injector's RNG.
pub const DEFAULT_SEED: u64 = 0xC0BE_90D0;

/// Which requests a rule applies to; `None` fields match anything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultMatcher {
    pub method: Option<Method>,
    /// Requests without a resource (discovery, `/version`) never match a `Some`.
    pub resource: Option<Resource>,
    /// `Some(true)`: watches only; `Some(false)`: everything but watches.
    pub watch: Option<bool>,
}

impl FaultMatcher {
    fn matches(&self, method: &Method, resource: Option<Resource>, watch: bool) -> bool {
        self.method.as_ref().is_none_or(|m| m == method)
            && self.resource.is_none_or(|r| resource == Some(r))
            && self.watch.is_none_or(|w| w == watch)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum FaultAction {
    /// Answer with a Status of this code and reason, and `Retry-After` when given (seconds).
    Status {
        code: u16,
        reason: String,
        retry_after: Option<u64>,
    },
    /// Wait, then go on to the next rules and the request.
    Delay(Duration),
    /// Close the connection (HTTP/2: reset the stream) without a response.
    Reset,
    /// For a watch: end the stream after this many events (other requests are unaffected).
    EndWatchAfter(u32),
}

impl FaultAction {
    pub fn status(code: u16, reason: impl Into<String>) -> Self {
        FaultAction::Status {
            code,
            reason: reason.into(),
            retry_after: None,
        }
    }

    /// 503 ServiceUnavailable with `Retry-After: seconds`.
    pub fn unavailable(retry_after: u64) -> Self {
        FaultAction::Status {
            code: 503,
            reason: "ServiceUnavailable".into(),
            retry_after: Some(retry_after),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct FaultRule {
    pub matcher: FaultMatcher,
    pub action: FaultAction,
    /// How many requests it fires on before it is spent; `None`: always.
    pub times: Option<u32>,
    /// The chance it fires on a matching request; `None`: every time.
    pub probability: Option<f64>,
}

impl FaultRule {
    /// A rule that fires on every request, to narrow with the builder methods.
    pub fn new(action: FaultAction) -> Self {
        Self {
            matcher: FaultMatcher::default(),
            action,
            times: None,
            probability: None,
        }
    }

    pub fn method(mut self, method: Method) -> Self {
        self.matcher.method = Some(method);
        self
    }

    pub fn resource(mut self, resource: Resource) -> Self {
        self.matcher.resource = Some(resource);
        self
    }

    pub fn watch(mut self, watch: bool) -> Self {
        self.matcher.watch = Some(watch);
        self
    }

    pub fn times(mut self, times: u32) -> Self {
        self.times = Some(times);
        self
    }

    pub fn probability(mut self, probability: f64) -> Self {
        self.probability = Some(probability);
        self
    }
}

/// What the rules make of one request.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Decision {
    /// The sum of the delays that fired.
    pub delay: Duration,
    pub outcome: Outcome,
}

struct Rules {
    rules: Vec<FaultRule>,
    rng: StdRng,
    fired: u64,
}

pub struct FaultInjector {
    inner: Mutex<Rules>,
}

impl Default for FaultInjector {
    fn default() -> Self {
        Self::new(DEFAULT_SEED)
    }
}

impl std::fmt::Debug for FaultInjector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultInjector")
            .field("rules", &self.lock().rules)
            .finish_non_exhaustive()
    }
}

impl FaultInjector {
    pub fn new(seed: u64) -> Self {
        Self {
            inner: Mutex::new(Rules {
                rules: Vec::new(),
                rng: StdRng::seed_from_u64(seed),
                fired: 0,
            }),
        }
    }

    /// Appends a rule; rules are checked in the order added.
    pub fn add(&self, rule: FaultRule) {
        self.lock().rules.push(rule);
    }

    /// Removes every rule (the RNG and the fired count go on).
    pub fn clear(&self) {
        self.lock().rules.clear();
    }

    /// Restarts the RNG from `seed`.
    pub fn reseed(&self, seed: u64) {
        self.lock().rng = StdRng::seed_from_u64(seed);
    }

    /// Rules not yet spent.
    pub fn rules(&self) -> Vec<FaultRule> {
        self.lock().rules.clone()
    }

    /// How many times a rule fired, over the injector's life.
    pub fn fired(&self) -> u64 {
        self.lock().fired
    }

    /// Fires the matching rules: delays and watch limits add up, and the first Status or
    /// Reset decides the request. A rule fires (and spends one of its `times`) only when its
    /// probability draw succeeds.
    pub(crate) fn decide(
        &self,
        method: &Method,
        resource: Option<Resource>,
        watch: bool,
    ) -> Decision {
        let mut rules = self.lock();
        let Rules { rules, rng, fired } = &mut *rules;
        let mut decision = Decision {
            delay: Duration::ZERO,
            outcome: Outcome::Proceed {
                end_watch_after: None,
            },
        };
        let mut index = 0;
        while index < rules.len() {
            let rule = &mut rules[index];
            let fires = rule.matcher.matches(method, resource, watch)
                && rule.times != Some(0)
                && rule
                    .probability
                    .is_none_or(|p| rng.random_bool(p.clamp(0.0, 1.0)));
            if !fires {
                index += 1;
                continue;
            }
            *fired += 1;
            if let Some(times) = &mut rule.times {
                *times -= 1;
            }
            let action = rule.action.clone();
            if rule.times == Some(0) {
                rules.remove(index);
            } else {
                index += 1;
            }
            match action {
                FaultAction::Delay(delay) => decision.delay += delay,
                FaultAction::EndWatchAfter(n) => {
                    if let Outcome::Proceed { end_watch_after } = &mut decision.outcome {
                        *end_watch_after = Some(end_watch_after.map_or(n, |m| m.min(n)));
                    }
                }
                FaultAction::Status {
                    code,
                    reason,
                    retry_after,
                } => {
                    decision.outcome = Outcome::Respond {
                        code,
                        reason,
                        retry_after,
                    };
                    break;
                }
                FaultAction::Reset => {
                    decision.outcome = Outcome::Reset;
                    break;
                }
            }
        }
        decision
    }

    fn lock(&self) -> MutexGuard<'_, Rules> {
        // Rules are plain data, whole after any panic.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(injector: &FaultInjector) -> Outcome {
        injector
            .decide(&Method::GET, Some(Resource::Pod), false)
            .outcome
    }

    #[test]
    fn times_spend_a_rule_and_first_terminal_wins() {
        let injector = FaultInjector::default();
        injector.add(FaultRule::new(FaultAction::unavailable(1)).times(2));
        injector.add(FaultRule::new(FaultAction::Reset).resource(Resource::Secret));
        let unavailable = Outcome::Respond {
            code: 503,
            reason: "ServiceUnavailable".into(),
            retry_after: Some(1),
        };
        assert_eq!(get(&injector), unavailable);
        assert_eq!(get(&injector), unavailable);
        let proceed = Outcome::Proceed {
            end_watch_after: None,
        };
        assert_eq!(get(&injector), proceed);
        assert_eq!(injector.rules().len(), 1);
        let secret = injector.decide(&Method::GET, Some(Resource::Secret), false);
        assert_eq!(secret.outcome, Outcome::Reset);
        assert_eq!(injector.fired(), 3);
    }

    #[test]
    fn delays_and_watch_limits_combine() {
        let injector = FaultInjector::default();
        injector.add(FaultRule::new(FaultAction::Delay(Duration::from_millis(5))));
        injector.add(FaultRule::new(FaultAction::EndWatchAfter(3)).watch(true));
        injector.add(FaultRule::new(FaultAction::EndWatchAfter(2)).method(Method::GET));
        let watch = injector.decide(&Method::GET, Some(Resource::Pod), true);
        assert_eq!(watch.delay, Duration::from_millis(5));
        assert_eq!(
            watch.outcome,
            Outcome::Proceed {
                end_watch_after: Some(2)
            }
        );
        let post = injector.decide(&Method::POST, None, false);
        assert_eq!(
            post.outcome,
            Outcome::Proceed {
                end_watch_after: None
            }
        );
    }

    #[test]
    fn probabilities_replay_with_the_seed() {
        let draw = |seed| {
            let injector = FaultInjector::new(seed);
            injector.add(FaultRule::new(FaultAction::Reset).probability(0.5));
            (0..64)
                .map(|_| get(&injector) == Outcome::Reset)
                .collect::<Vec<_>>()
        };
        let first = draw(7);
        assert_eq!(first, draw(7));
        let hits = first.iter().filter(|hit| **hit).count();
        assert!((10..54).contains(&hits), "{hits} of 64");
    }
}
