//! What a running sandbox's Pod was started with, and which of those spec fields changed
//! since: the condition `SpecApplied`.
//!
//! A Pod's spec cannot change once it runs (Kubernetes refuses it, and a Kata VM is sized when
//! it boots), so `spec.image`, `spec.resources` and `spec.runtimeClassName` reach the sandbox
//! at its next start: a resume, or a reset. The status is all a policy keeps between calls, so
//! the condition's message both tells the user what the Pod runs and is how the next pass
//! knows it: it starts with the record ("the Pod was started with spec.image \"...\", ..."),
//! one field at a time in a fixed order, each value quoted as Rust quotes a string (so a
//! value cannot end early) or `unset`. A sandbox whose Pod was started before the record was
//! kept gets no condition, and one whose record does not read keeps it as it is: nothing
//! true could be said of what its Pod runs.

use crate::prelude::*;

use crate::bindings::{ConditionStatus, ReconcileOutput, Sandbox, SandboxSpec, Timestamp};
use crate::status::{self, set_condition};

/// The condition's type.
pub const SPEC_APPLIED: &str = "SpecApplied";
/// The reason while the running Pod has what the spec says.
pub const STARTED: &str = "Started";
/// The reason while a field the Pod was started with differs from the spec.
pub const PENDING_RESTART: &str = "PendingRestart";

const STARTED_WITH: &str = "the Pod was started with ";
const SEPARATOR: &str = ", ";

/// The spec fields a Pod is made from, by their path, in the record's order.
const POD_FIELDS: [&str; 4] = [
    "spec.image",
    "spec.resources.cpu",
    "spec.resources.memory",
    "spec.runtimeClassName",
];

/// `spec`'s values of [`POD_FIELDS`], as shown.
fn pod_values(spec: &SandboxSpec) -> [String; 4] {
    [
        Some(spec.image.as_str()),
        spec.cpu.as_deref(),
        spec.memory.as_deref(),
        spec.runtime_class.as_deref(),
    ]
    .map(shown)
}

fn shown(value: Option<&str>) -> String {
    match value {
        Some(value) => format!("{value:?}"),
        None => "unset".to_string(),
    }
}

/// The record of a Pod started from `spec`: the message of `SpecApplied=True`.
pub fn record(spec: &SandboxSpec) -> String {
    let fields: Vec<String> = POD_FIELDS
        .iter()
        .zip(pod_values(spec))
        .map(|(path, value)| format!("{path} {value}"))
        .collect();
    format!("{STARTED_WITH}{}", fields.join(SEPARATOR))
}

/// The values a record at the start of `message` holds, as shown, in [`POD_FIELDS`]' order,
/// and the record's length; `None` when the message does not start with a record.
fn recorded(message: &str) -> Option<(Vec<&str>, usize)> {
    let mut rest = message.strip_prefix(STARTED_WITH)?;
    let mut values = Vec::new();
    for (index, path) in POD_FIELDS.iter().enumerate() {
        if index > 0 {
            rest = rest.strip_prefix(SEPARATOR)?;
        }
        rest = rest.strip_prefix(path)?.strip_prefix(' ')?;
        let end = shown_len(rest)?;
        values.push(&rest[..end]);
        rest = &rest[end..];
    }
    Some((values, message.len() - rest.len()))
}

/// The length of the value shown at the start of `text`: `unset`, or a quoted string up to its
/// closing quote (a quote inside is escaped, and so is a backslash).
fn shown_len(text: &str) -> Option<usize> {
    if text.starts_with("unset") {
        return Some("unset".len());
    }
    let mut chars = text.char_indices();
    if chars.next()?.1 != '"' {
        return None;
    }
    while let Some((at, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next()?;
            }
            '"' => return Some(at + 1),
            _ => {}
        }
    }
    None
}

/// A Pod was just started from `spec`: the condition records it.
pub fn started(out: &mut ReconcileOutput, spec: &SandboxSpec, now: Timestamp) {
    set_condition(
        &mut out.status.conditions,
        SPEC_APPLIED,
        ConditionStatus::True,
        STARTED,
        record(spec),
        now,
    );
}

/// `sandbox`'s Pod runs on: `SpecApplied` says whether it has what the spec says, and if not,
/// which fields differ and how to apply them (with a Normal Event when that becomes so).
/// Nothing is said of a Pod with no record, but for one whose start's status was never
/// written (no `startedAt`: the host holds a just-started sandbox's Pending status back, and
/// a write can be lost) on a spec never changed since the Sandbox was created (generation
/// 1): that Pod was made from the spec as it is.
pub fn running(out: &mut ReconcileOutput, sandbox: &Sandbox, now: Timestamp) {
    let spec = &sandbox.spec;
    if status::condition(&out.status.conditions, SPEC_APPLIED).is_none()
        && out.status.started_at.is_none()
        && sandbox.generation == 1
    {
        started(out, spec, now);
        return;
    }
    let conditions = &mut out.status.conditions;
    let Some(held) = status::condition(conditions, SPEC_APPLIED) else {
        return;
    };
    let Some((values, record_len)) = recorded(&held.message) else {
        return;
    };
    let changed: Vec<(&str, String)> = POD_FIELDS
        .iter()
        .zip(pod_values(spec))
        .zip(&values)
        .filter(|((_, wanted), then)| wanted.as_str() != **then)
        .map(|((path, wanted), _)| (*path, wanted))
        .collect();
    let record = held.message[..record_len].to_string();
    if changed.is_empty() {
        set_condition(
            conditions,
            SPEC_APPLIED,
            ConditionStatus::True,
            STARTED,
            record,
            now,
        );
        return;
    }
    let fields: Vec<String> = changed
        .iter()
        .map(|(path, value)| format!("{path} (now {value})"))
        .collect();
    let paths: Vec<&str> = changed.iter().map(|(path, _)| *path).collect();
    if !status::holds(
        conditions,
        SPEC_APPLIED,
        ConditionStatus::False,
        PENDING_RESTART,
    ) {
        out.events.push(status::normal(
            PENDING_RESTART,
            format!(
                "{} changed while the sandbox runs; its Pod keeps what it was started with \
                 until the next start: {HOW_TO_APPLY}",
                paths.join(SEPARATOR)
            ),
        ));
    }
    set_condition(
        conditions,
        SPEC_APPLIED,
        ConditionStatus::False,
        PENDING_RESTART,
        format!(
            "{record}; changed since: {}, which the running Pod keeps until the next \
             start: {HOW_TO_APPLY}",
            fields.join(SEPARATOR)
        ),
        now,
    );
}

/// How a change that waits for the next start is applied.
const HOW_TO_APPLY: &str = "pause and resume the sandbox (spec.desiredState Paused, then \
                            Running), or raise spec.rootfsGeneration by one to reset it";

/// No Pod runs (paused, or the Pod is going): nothing to say until the next start, which
/// records what it starts with.
pub fn stopped(out: &mut ReconcileOutput) {
    out.status.conditions.retain(|c| c.kind != SPEC_APPLIED);
}
