//! How a Sandbox is told that the controller held back what its policy wrote, past its bound
//! of what policies wrote (`cache/charge.rs`): a `PolicyObjectsBounded` condition naming the
//! bound, the flag and the fix, and a status whose messages are cut to fit.

use super::cache::{CacheWriter, Past};
use cubepod_policy_host::containment;
use cubepod_policy_host::model::ObjectRef;
use cubepod_policy_host::runtime::bindings::{Condition, ConditionStatus, SandboxStatus};

/// The condition type, and the Event's reason.
pub(crate) const POLICY_OBJECTS_BOUNDED: &str = "PolicyObjectsBounded";

/// A condition message kept of a status cut to fit the bound.
const CUT_MESSAGE_BYTES: usize = 256;

/// The status `new` as the controller keeps it in place of `old`, told of `written` (a bound
/// a write of this pass met): as it is when the cache has room for it; else with every message
/// of the policy's cut to [`CUT_MESSAGE_BYTES`], or `old` itself when even that does not fit.
/// Either way it carries the `PolicyObjectsBounded` condition while a bound held something
/// back. The bound met, if one was, and whether the status was not kept whole.
pub(crate) fn fit_status(
    cache: &CacheWriter,
    target: &ObjectRef,
    old: &SandboxStatus,
    new: &mut SandboxStatus,
    written: Option<Past>,
    now: i64,
) -> (Option<Past>, bool) {
    bound_condition(&mut new.conditions, written.as_ref(), now);
    let Err(past) = cache.room_for_status(target, old, new) else {
        return (written, false);
    };
    bound_condition(&mut new.conditions, Some(&past), now);
    for condition in &mut new.conditions {
        if condition.kind != POLICY_OBJECTS_BOUNDED && condition.message.len() > CUT_MESSAGE_BYTES {
            condition.message = containment::clip(&condition.message, CUT_MESSAGE_BYTES);
        }
    }
    if cache.room_for_status(target, old, new).is_err() {
        *new = old.clone();
        bound_condition(&mut new.conditions, Some(&past), now);
    }
    (Some(past), true)
}

/// The Sandbox's `PolicyObjectsBounded` condition as this pass found it: `True` with the bound
/// in words while its writes or status were held back, gone once they were not; whatever the
/// policy wrote of that type is replaced.
pub(crate) fn bound_condition(conditions: &mut Vec<Condition>, past: Option<&Past>, now: i64) {
    let before = conditions
        .iter()
        .find(|c| c.kind == POLICY_OBJECTS_BOUNDED)
        .cloned();
    conditions.retain(|c| c.kind != POLICY_OBJECTS_BOUNDED);
    let Some(past) = past else {
        return;
    };
    let since = before
        .filter(|c| c.status == ConditionStatus::True)
        .map_or(now, |c| c.last_transition_time);
    conditions.push(Condition {
        kind: POLICY_OBJECTS_BOUNDED.to_string(),
        status: ConditionStatus::True,
        reason: past.reason().to_string(),
        message: format!(
            "the policy's writes or status for this Sandbox were held back: {}",
            past.words()
        ),
        last_transition_time: since,
    });
}
