//! The `/scale` subresource of a PodWarmPool, as the API server serves a CRD's: an
//! `autoscaling/v1` Scale whose `spec.replicas` is the pool's (`specReplicasPath`), whose
//! `status.replicas` and `status.selector` are the pool's status (`statusReplicasPath`,
//! `labelSelectorPath`). A write of the Scale is a write of the pool's `spec.replicas`, and
//! bumps its generation as any spec change does.

use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use super::status::Failure;
use crate::merge::merge_patch;

/// The most replicas a Scale may ask for: the CRD's `maximum` of `spec.replicas`.
const MAX_REPLICAS: u64 = 1000;

/// The Scale of `object` (a PodWarmPool).
pub(crate) fn of(object: &Value) -> Value {
    let meta = &object["metadata"];
    let mut metadata = json!({});
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(value) = meta.get(field) {
            metadata[field] = value.clone();
        }
    }
    let mut status = json!({"replicas": object["status"]["replicas"].as_u64().unwrap_or(0)});
    if let Some(selector) = object["status"]["selector"].as_str() {
        status["selector"] = json!(selector);
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": object["spec"]["replicas"].as_u64().unwrap_or(0)},
        "status": status,
    })
}

/// The one-row Table of a Scale, with the columns the API server prints for one (`kubectl get
/// --subresource=scale`): its name, the replicas wanted and those there.
pub(crate) fn table(scale: &Value) -> Value {
    let column = |name: &str, kind: &str, format: &str, description: &str| {
        json!({"name": name, "type": kind, "format": format, "description": description,
               "priority": 0})
    };
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": scale["metadata"]["resourceVersion"]},
        "columnDefinitions": [
            column("Name", "string", "name", "Name of the scaled object."),
            column("Desired", "integer", "", "Replicas wanted (spec.replicas)."),
            column("Available", "integer", "", "Replicas there (status.replicas)."),
        ],
        "rows": [{
            "cells": [scale["metadata"]["name"], scale["spec"]["replicas"],
                      scale["status"]["replicas"]],
            "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                       "metadata": scale["metadata"]},
        }],
    })
}

/// The pool patch a Scale write asks for: `spec.replicas`, conditional on the Scale's
/// `metadata.resourceVersion` when it names one (a PUT from `kubectl scale
/// --resource-version`, or an autoscaler's read-modify-write). `current` is the pool's Scale
/// now; a PATCH is a JSON merge patch of it, a PUT the whole new Scale.
pub(crate) fn pool_patch(method: &Method, current: &Value, body: &Value) -> Result<Value, Failure> {
    let wanted = if *method == Method::PATCH {
        let mut scale = current.clone();
        merge_patch(&mut scale, body);
        scale
    } else {
        if body
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k != "Scale")
        {
            return Err(Failure::bad_request(
                "the body of a scale update must be a Scale",
            ));
        }
        body.clone()
    };
    let replicas = &wanted["spec"]["replicas"];
    let count = replicas
        .as_u64()
        .filter(|r| *r <= MAX_REPLICAS)
        .ok_or_else(|| {
            Failure::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                format!(
                    "Scale.autoscaling \"{}\" is invalid: spec.replicas: Invalid value: {replicas}: \
                     must be an integer from 0 to {MAX_REPLICAS}",
                    current["metadata"]["name"].as_str().unwrap_or_default()
                ),
            )
        })?;
    let mut patch = json!({"spec": {"replicas": count}});
    // A PUT's version is a precondition; a merge patch carries the current one unless it
    // names its own, so only a version the client gave makes the write conditional.
    let given = body["metadata"]["resourceVersion"].as_str();
    if let Some(version) = given.filter(|v| !v.is_empty()) {
        patch["metadata"] = json!({"resourceVersion": version});
    }
    Ok(patch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> Value {
        json!({
            "apiVersion": "cubepod.io/v1alpha1", "kind": "PodWarmPool",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                         "generation": 2, "labels": {"a": "b"}},
            "spec": {"replicas": 2, "template": {"image": "i"}},
            "status": {"replicas": 1, "readyReplicas": 1, "selector": "cubepod.io/pool=p"},
        })
    }

    #[test]
    fn a_scale_reads_the_pools_paths() {
        let scale = of(&pool());
        assert_eq!(scale["apiVersion"], "autoscaling/v1");
        assert_eq!(scale["spec"]["replicas"], 2);
        assert_eq!(
            scale["status"],
            json!({"replicas": 1, "selector": "cubepod.io/pool=p"})
        );
        assert_eq!(scale["metadata"]["resourceVersion"], "7");
        assert!(scale["metadata"].get("labels").is_none());
        // A pool the controller has not written a status for yet.
        let mut fresh = pool();
        fresh["status"] = json!(null);
        assert_eq!(of(&fresh)["status"], json!({"replicas": 0}));
    }

    #[test]
    fn writes_become_a_replicas_patch_conditional_only_when_asked() {
        let current = of(&pool());
        let patch = pool_patch(&Method::PATCH, &current, &json!({"spec": {"replicas": 3}}));
        assert_eq!(patch.unwrap(), json!({"spec": {"replicas": 3}}));
        let mut put = current.clone();
        put["spec"]["replicas"] = json!(5);
        let patch = pool_patch(&Method::PUT, &current, &put).unwrap();
        assert_eq!(
            patch,
            json!({"spec": {"replicas": 5}, "metadata": {"resourceVersion": "7"}})
        );
        for bad in [json!(-1), json!(1001), json!("3"), json!(null)] {
            let body = json!({"spec": {"replicas": bad}});
            let failure = pool_patch(&Method::PATCH, &current, &body).unwrap_err();
            assert_eq!(failure.code, StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
        }
        let not_scale = json!({"kind": "PodWarmPool", "spec": {"replicas": 1}});
        assert!(pool_patch(&Method::PUT, &current, &not_scale).is_err());
    }
}
