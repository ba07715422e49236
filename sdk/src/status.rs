//! Conditions and their transition times, kept true in every transition.

use crate::prelude::*;

use crate::bindings::{Condition, ConditionStatus, Event, EventType, Timestamp};

pub const READY: &str = "Ready";
pub const PAUSED: &str = "Paused";
pub const SPEC_VALID: &str = "SpecValid";

/// Sets a condition; its transition time moves only when its status does, as Kubernetes
/// conventions ask.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    kind: &str,
    status: ConditionStatus,
    reason: &str,
    message: impl Into<String>,
    now: Timestamp,
) {
    let message = message.into();
    match conditions.iter_mut().find(|c| c.kind == kind) {
        Some(existing) => {
            if existing.status != status {
                existing.last_transition_time = now;
            }
            existing.status = status;
            existing.reason = reason.to_string();
            existing.message = message;
        }
        None => conditions.push(Condition {
            kind: kind.to_string(),
            status,
            reason: reason.to_string(),
            message,
            last_transition_time: now,
        }),
    }
}

pub fn condition<'a>(conditions: &'a [Condition], kind: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.kind == kind)
}

/// True when `kind` already holds this status and reason: used to emit an Event once per
/// transition rather than once per reconcile.
pub fn holds(conditions: &[Condition], kind: &str, status: ConditionStatus, reason: &str) -> bool {
    condition(conditions, kind).is_some_and(|c| c.status == status && c.reason == reason)
}

pub fn normal(reason: &str, message: impl Into<String>) -> Event {
    Event {
        kind: EventType::Normal,
        reason: reason.to_string(),
        message: message.into(),
    }
}

pub fn warning(reason: &str, message: impl Into<String>) -> Event {
    Event {
        kind: EventType::Warning,
        reason: reason.to_string(),
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_with_status() {
        let mut conditions = Vec::new();
        set_condition(&mut conditions, READY, ConditionStatus::False, "A", "a", 10);
        set_condition(&mut conditions, READY, ConditionStatus::False, "B", "b", 20);
        assert_eq!(conditions[0].last_transition_time, 10);
        assert_eq!(conditions[0].reason, "B");
        set_condition(&mut conditions, READY, ConditionStatus::True, "C", "c", 30);
        assert_eq!(conditions[0].last_transition_time, 30);
        assert_eq!(conditions.len(), 1);
    }
}
