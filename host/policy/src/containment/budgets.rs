//! Rule `budget`: what one call may send (a manifest's bytes, checked before it is parsed)
//! and what one call's output may hold (a status, its conditions, Events), checked by the
//! reconcile core before any of the output is written; and the shortest requeue it honours.
//! The calls budget (`max_kube_calls`) traps the guest in the runtime; the write rate across
//! calls is [`super::rates`].

use std::fmt;

use serde::Serialize;
use serde_json::Value;

use super::{Containment, Refusal, Rule};
use crate::model::pool;
use crate::model::sandbox::StatusPatch;
use crate::runtime::bindings::{Condition, Event, SandboxStatus, WarmPoolStatus};

/// The limits `metav1.Condition` sets: the API server refuses a status beyond them.
const CONDITION_MESSAGE_BYTES: usize = 32 * 1024;
const CONDITION_REASON_BYTES: usize = 1024;
const CONDITION_TYPE_BYTES: usize = 316;
/// Event reasons are short CamelCase words; anything longer is not a reason.
const EVENT_REASON_BYTES: usize = 128;

/// The shortest requeue the core honours: a policy asking for less would make the controller
/// spin on one key.
pub const MIN_REQUEUE_SECONDS: u32 = 1;

/// How much of one policy output the reconcile core acts on; past any of them the call fails
/// (`budget`) and nothing of the output is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputBudget {
    /// A status as written (its JSON).
    pub status_bytes: usize,
    /// Conditions one status may carry.
    pub conditions: usize,
    /// Events one call may ask for.
    pub events: usize,
    /// Bytes of one Event's message.
    pub event_message_bytes: usize,
}

impl Default for OutputBudget {
    fn default() -> Self {
        Self {
            status_bytes: 64 * 1024,
            conditions: 16,
            events: 8,
            event_message_bytes: 1024,
        }
    }
}

impl OutputBudget {
    /// A Sandbox's returned status as the controller would write it (its
    /// [`StatusPatch`]), once its conditions are as `metav1.Condition` allows and the
    /// whole is within the byte budget. The conditions are checked before the patch is made: a
    /// status past them may be megabytes, and every copy is resident at once.
    pub fn sandbox_status_patch(
        &self,
        what: &str,
        status: &SandboxStatus,
        generation: i64,
    ) -> Result<StatusPatch, Refusal> {
        self.conditions_within(what, &status.conditions)?;
        let patch = StatusPatch::new(status, generation);
        self.status_size(what, &patch)?;
        Ok(patch)
    }

    /// As [`Self::sandbox_status_patch`], for a PodWarmPool's status.
    pub fn pool_status_patch(
        &self,
        what: &str,
        pool_name: &str,
        status: &WarmPoolStatus,
        generation: i64,
    ) -> Result<Value, Refusal> {
        self.conditions_within(what, &status.conditions)?;
        let patch = pool::status_patch(pool_name, status, generation);
        self.status_size(what, &patch)?;
        Ok(patch)
    }

    fn conditions_within(&self, what: &str, conditions: &[Condition]) -> Result<(), Refusal> {
        if conditions.len() > self.conditions {
            return Err(Refusal::new(
                Rule::Budget,
                what,
                "status.conditions",
                format!(
                    "{} conditions, more than the {} a status may hold",
                    conditions.len(),
                    self.conditions
                ),
            ));
        }
        for (index, condition) in conditions.iter().enumerate() {
            let (kind, reason, message) = (&condition.kind, &condition.reason, &condition.message);
            let field = |name: &str| format!("status.conditions[{index}].{name}");
            if kind.is_empty() || kind.len() > CONDITION_TYPE_BYTES {
                return Err(Refusal::new(
                    Rule::Budget,
                    what,
                    field("type"),
                    format!("{} bytes, not 1 to {CONDITION_TYPE_BYTES}", kind.len()),
                ));
            }
            if reason.len() > CONDITION_REASON_BYTES {
                return Err(Refusal::new(
                    Rule::Budget,
                    what,
                    field("reason"),
                    format!("{} bytes, more than {CONDITION_REASON_BYTES}", reason.len()),
                ));
            }
            if message.len() > CONDITION_MESSAGE_BYTES {
                return Err(Refusal::new(
                    Rule::Budget,
                    what,
                    field("message"),
                    format!(
                        "{} bytes, more than the {CONDITION_MESSAGE_BYTES} metav1.Condition allows",
                        message.len()
                    ),
                ));
            }
        }
        Ok(())
    }

    fn status_size(&self, what: &str, written: &impl Serialize) -> Result<(), Refusal> {
        let bytes = serialized_len(written);
        if bytes > self.status_bytes {
            return Err(Refusal::new(
                Rule::Budget,
                what,
                "status",
                format!("{bytes} bytes as written, more than {}", self.status_bytes),
            ));
        }
        Ok(())
    }

    /// Refuses events past the count and message budgets; `what` names the call in the refusal.
    pub fn events(&self, what: &str, events: &[Event]) -> Result<(), Refusal> {
        if events.len() > self.events {
            return Err(Refusal::new(
                Rule::Budget,
                what,
                "events",
                format!(
                    "{} Events in one call, more than {}",
                    events.len(),
                    self.events
                ),
            ));
        }
        for (index, event) in events.iter().enumerate() {
            if event.reason.is_empty() || event.reason.len() > EVENT_REASON_BYTES {
                return Err(Refusal::new(
                    Rule::Budget,
                    what,
                    format!("events[{index}].reason"),
                    format!(
                        "{} bytes, not 1 to {EVENT_REASON_BYTES}",
                        event.reason.len()
                    ),
                ));
            }
            if event.message.len() > self.event_message_bytes {
                return Err(Refusal::new(
                    Rule::Budget,
                    what,
                    format!("events[{index}].message"),
                    format!(
                        "{} bytes, more than {}",
                        event.message.len(),
                        self.event_message_bytes
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The bytes of `value` as JSON, counted without building the text.
fn serialized_len(value: &impl Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter cannot fail, and a Value always serializes.
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

impl Containment {
    /// A manifest's size, before anything parses it.
    pub(crate) fn check_manifest_size(
        &self,
        what: &dyn fmt::Display,
        manifest: &str,
    ) -> Result<(), Refusal> {
        if manifest.len() > self.max_manifest_bytes {
            return Err(Refusal::new(
                Rule::Budget,
                what,
                "manifest",
                format!(
                    "the manifest is {} bytes, more than the {} a manifest may have \
                     (--max-manifest-bytes)",
                    manifest.len(),
                    self.max_manifest_bytes
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::containment::{KEPT_PREFIX, clip};
    use crate::runtime::bindings::EventType;

    #[test]
    fn a_manifest_past_its_budget_is_refused_before_parsing() {
        let rules = Containment {
            max_manifest_bytes: 1024,
            ..Containment::default()
        };
        let huge = format!("{{\"x\": \"{}\"}}", "a".repeat(2048));
        let refusal = rules.check_manifest_size(&"Pod ns/a", &huge).unwrap_err();
        assert_eq!(
            (refusal.rule, refusal.field.as_str()),
            (Rule::Budget, "manifest")
        );
        // Not even valid JSON: the size is checked first.
        assert!(rules.check_manifest_size(&"Pod ns/a", "{").is_ok());
        assert!(clip(&huge, KEPT_PREFIX).len() < KEPT_PREFIX + 32);
    }

    #[test]
    fn events_and_statuses_past_their_budget_are_refused() {
        let budget = OutputBudget::default();
        let event = |message: String| Event {
            kind: EventType::Warning,
            reason: "R".to_string(),
            message,
        };
        let what = "Sandbox ns/a";
        budget.events(what, &[event("fine".into())]).unwrap();
        let many: Vec<Event> = (0..1_000).map(|_| event("x".into())).collect();
        assert_eq!(budget.events(what, &many).unwrap_err().field, "events");
        let long = budget
            .events(what, &[event("x".repeat(1 << 20))])
            .unwrap_err();
        assert_eq!(long.field, "events[0].message");
        assert!(
            budget
                .status_size(what, &json!({"x": "y".repeat(1 << 20)}))
                .is_err()
        );
    }
}
