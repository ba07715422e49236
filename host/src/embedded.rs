//! The embedded cluster's seed: the example manifests of `deploy/examples/`, compiled in, so
//! that `cubepod-controller run` with no cluster shows the whole lifecycle at once.

use serde::Deserialize;
use serde_json::Value;

use crate::kube::{ApiErrorKind, Cluster, Resource};

/// The examples, in the order a newcomer reads them.
pub const EXAMPLES: &[(&str, &str)] = &[
    (
        "sandbox-running.yaml",
        include_str!("../../deploy/examples/sandbox-running.yaml"),
    ),
    (
        "sandbox-paused.yaml",
        include_str!("../../deploy/examples/sandbox-paused.yaml"),
    ),
    (
        "sandbox-fork.yaml",
        include_str!("../../deploy/examples/sandbox-fork.yaml"),
    ),
    (
        "sandbox-idle.yaml",
        include_str!("../../deploy/examples/sandbox-idle.yaml"),
    ),
    (
        "podwarmpool.yaml",
        include_str!("../../deploy/examples/podwarmpool.yaml"),
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    #[error("{file}: not YAML: {source}")]
    Yaml {
        file: String,
        source: serde_yaml_ng::Error,
    },
    #[error("{file}: {why}")]
    Object { file: String, why: String },
}

/// Parses YAML documents (`---`-separated) into Kubernetes objects.
pub fn parse_documents(file: &str, text: &str) -> Result<Vec<Value>, SeedError> {
    let mut objects = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let value = Value::deserialize(document).map_err(|source| SeedError::Yaml {
            file: file.to_string(),
            source,
        })?;
        if !value.is_null() {
            objects.push(value);
        }
    }
    Ok(objects)
}

fn resource_of(object: &Value) -> Option<Resource> {
    match object["kind"].as_str()? {
        "Sandbox" => Some(Resource::Sandbox),
        "PodWarmPool" => Some(Resource::PodWarmPool),
        _ => None,
    }
}

/// Creates every example object in `cluster`; returns how many.
pub async fn seed(cluster: &dyn Cluster) -> Result<usize, SeedError> {
    let mut created = 0;
    for (file, text) in EXAMPLES {
        for object in parse_documents(file, text)? {
            let fail = |why: String| SeedError::Object {
                file: file.to_string(),
                why,
            };
            let resource = resource_of(&object)
                .ok_or_else(|| fail(format!("kind {} is not seeded", object["kind"])))?;
            let namespace = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("cubepod-workloads")
                .to_string();
            match cluster.create(resource, &namespace, object).await {
                Ok(_) => created += 1,
                Err(error) if error.is(ApiErrorKind::AlreadyExists) => {}
                Err(error) => return Err(fail(error.to_string())),
            }
        }
    }
    Ok(created)
}
