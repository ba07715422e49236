//! Checks a step's `expect` against what the step returned and the cluster it left. Each
//! mismatch is one or more readable lines; none means the step passed.

use super::diff;
use super::format::Expect;
use super::scratch::{Scratch, StepOutcome, summary};

pub(crate) fn check(expect: &Expect, outcome: &StepOutcome, scratch: &Scratch) -> Vec<String> {
    let mut out = Vec::new();
    let result = &outcome.result;
    match (&expect.error, &outcome.error) {
        (None, None) => {}
        (None, Some(error)) => out.push(format!("error: the step failed: {error}")),
        (Some(wanted), None) => out.push(format!(
            "error: expected an error containing {wanted:?}, the step succeeded"
        )),
        (Some(wanted), Some(error)) => {
            let text = error.to_string();
            if !text.contains(wanted.as_str()) {
                out.push(format!(
                    "error: expected an error containing {wanted:?}, got: {text}"
                ));
            }
        }
    }

    if let Some(calls) = &expect.calls {
        let actual: Vec<String> = result
            .calls
            .iter()
            .map(|c| summary(c, scratch.namespace()))
            .collect();
        listed(&mut out, "calls", calls, &actual);
    }
    if let Some(events) = &expect.events {
        listed(&mut out, "events", events, &result.events);
    }
    if let Some(wanted) = &expect.requeue_after_seconds
        && *wanted != result.requeue_after_seconds
    {
        out.push(format!(
            "requeueAfterSeconds: expected {}, got {}",
            or_none(wanted),
            or_none(&result.requeue_after_seconds)
        ));
    }
    if let Some(wanted) = &expect.claim
        && *wanted != result.claim
    {
        out.push(format!(
            "claim: expected {}, got {}",
            or_none(wanted),
            or_none(&result.claim)
        ));
    }
    if let Some(wanted) = expect.done
        && Some(wanted) != result.done
    {
        out.push(format!(
            "done: expected {wanted}, got {}",
            or_none(&result.done)
        ));
    }
    if let Some(reaped) = &expect.reaped {
        unordered(&mut out, "reaped", reaped, &result.reaped);
    }
    if let Some(pool) = &expect.pool {
        if let Some(create) = &pool.create {
            unordered(&mut out, "pool.create", create, &result.pool_create);
        }
        if let Some(delete) = &pool.delete {
            unordered(&mut out, "pool.delete", delete, &result.pool_delete);
        }
    }
    if let Some(status) = &expect.status {
        match &result.status {
            Some(actual) => out.extend(diff::subset("status", status, Some(actual))),
            None => out.push("status: the step returned no status".to_string()),
        }
    }
    for wanted in &expect.objects {
        let namespace = wanted
            .fields
            .pointer("/metadata/namespace")
            .and_then(serde_json::Value::as_str)
            .unwrap_or(scratch.namespace());
        let label = format!("{}/{}", wanted.resource.kind(), wanted.name);
        match scratch.get(wanted.resource, namespace, &wanted.name) {
            Some(actual) => out.extend(diff::subset(&label, &wanted.fields, Some(&actual))),
            None => out.push(format!("{label}: expected to exist, not found")),
        }
    }
    for gone in &expect.absent {
        if let Some(actual) = scratch.get(gone.resource, scratch.namespace(), &gone.name) {
            let deleting = actual.pointer("/metadata/deletionTimestamp").is_some();
            out.push(format!(
                "{gone}: expected absent, exists{}",
                if deleting { " (being deleted)" } else { "" }
            ));
        }
    }
    out
}

/// An ordered list: a line diff under a header when it differs.
fn listed(out: &mut Vec<String>, what: &str, expected: &[String], actual: &[String]) {
    diff::listed(out, what, ["expected", "actual"], expected, actual);
}

/// A list whose order the contract does not fix: compared sorted.
fn unordered(out: &mut Vec<String>, what: &str, expected: &[String], actual: &[String]) {
    let (mut expected, mut actual) = (expected.to_vec(), actual.to_vec());
    expected.sort();
    actual.sort();
    listed(out, what, &expected, &actual);
}

fn or_none<T: std::fmt::Display>(value: &Option<T>) -> String {
    match value {
        Some(v) => v.to_string(),
        None => "none".to_string(),
    }
}
