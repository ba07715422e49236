//! The embedded cluster of `cubepod-controller run` with no cluster: seeded with the example
//! manifests of `deploy/examples/` (compiled in), so that it shows the whole lifecycle at once,
//! and served over the Kubernetes API on loopback, with a kubeconfig written for kubectl.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use cubepod_apiserver::MemoryCluster;
use cubepod_apiserver::serve::{ApiServer, KubeconfigAuth, ServeError, ServeOptions};
use cubepod_kube::{ApiErrorKind, Cluster, Resource};

/// The kubeconfig's cluster, user and context.
pub(crate) const CONTEXT: &str = "cubepod-embedded";

/// The examples: every resource of `deploy/examples/kustomization.yaml`, in its order (a test
/// holds the two lists together).
pub(crate) const EXAMPLES: &[(&str, &str)] = &[
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
        "sandbox-shutdown.yaml",
        include_str!("../../deploy/examples/sandbox-shutdown.yaml"),
    ),
    (
        "podwarmpool.yaml",
        include_str!("../../deploy/examples/podwarmpool.yaml"),
    ),
    (
        "podwarmpool-on-replenish.yaml",
        include_str!("../../deploy/examples/podwarmpool-on-replenish.yaml"),
    ),
];

/// The namespaces `kubectl apply -k deploy/` makes, compiled in.
const DEPLOY_NAMESPACES: &str = include_str!("../../deploy/namespace.yaml");

/// The namespaces the embedded cluster has (besides those every cluster has): the ones
/// `deploy/` makes, where its examples live, the controller's own (`--namespaces`) and its
/// Lease's. A create anywhere else is NotFound, as in a real cluster.
pub(crate) fn namespaces(served: &[String], lease_namespace: &str) -> Vec<String> {
    let mut names: Vec<String> = parse_documents("namespace.yaml", DEPLOY_NAMESPACES)
        .unwrap_or_default()
        .iter()
        .filter(|object| object["kind"] == "Namespace")
        .filter_map(|object| object["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    names.extend(served.iter().cloned());
    names.push(lease_namespace.to_owned());
    names
}

/// Why the embedded cluster's examples could not be seeded.
#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    #[error("{file}: not YAML: {source}")]
    Yaml {
        file: String,
        source: serde_yaml_ng::Error,
    },
    #[error("{file}: {why}")]
    Object { file: String, why: String },
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
}

/// Why the embedded cluster could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeStartError {
    #[error(
        "the embedded cluster's API is served on loopback only, not on {0} (it has no \
         authorization beyond its token)"
    )]
    NotLoopback(SocketAddr),
    #[error(
        "cannot serve the embedded cluster's API on {addr} (--embedded-api-listen): {source}{}",
        crate::server::bind_hint(source, "--embedded-api-listen")
    )]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Serve(#[from] ServeError),
    #[error("writing the embedded cluster's kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The embedded cluster, served: the server and the kubeconfig written for it. Dropping it
/// stops serving and removes the kubeconfig (its token opens nothing any more).
#[derive(Debug)]
pub(crate) struct Served {
    pub(crate) server: ApiServer,
    pub(crate) kubeconfig: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

/// Serves `cluster` on `addr` (loopback; port 0 for a free one) with HTTPS from a fresh CA and
/// a fresh bearer token, and writes the kubeconfig at `kubeconfig` (mode 0600). The token is
/// only in that file.
pub(crate) fn serve(
    cluster: Arc<MemoryCluster>,
    addr: SocketAddr,
    kubeconfig: &Path,
) -> Result<Served, ServeStartError> {
    if !addr.ip().is_loopback() {
        return Err(ServeStartError::NotLoopback(addr));
    }
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|source| ServeStartError::Bind { addr, source })?;
    // 256 bits from the thread RNG (a CSPRNG, seeded by the OS).
    let token = hex::encode(rand::random::<[u8; 32]>());
    // Its holder is the cluster's administrator: kubectl, and the reviews of `/metrics`.
    cluster
        .access()
        .add_token(&token, cubepod_apiserver::access::admin());
    let server = ApiServer::start(
        listener,
        cluster,
        ServeOptions {
            token: Some(token.clone()),
            ..ServeOptions::default()
        },
        None,
    )?;
    let auth = KubeconfigAuth::Token(token);
    server
        .kubeconfig(CONTEXT, &auth)
        .write(kubeconfig)
        .map_err(|source| ServeStartError::Kubeconfig {
            path: kubeconfig.to_path_buf(),
            source,
        })?;
    Ok(Served {
        server,
        kubeconfig: kubeconfig.to_path_buf(),
    })
}

/// Parses YAML documents (`---`-separated) into Kubernetes objects.
pub(crate) fn parse_documents(file: &str, text: &str) -> Result<Vec<Value>, SeedError> {
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

/// The YAML files at `path`: the file itself, or a folder's `*.yaml`/`*.yml`, by name.
fn read_yaml_files(path: &Path) -> Result<Vec<(String, String)>, SeedError> {
    let read_error = |source| SeedError::Read {
        path: path.display().to_string(),
        source,
    };
    let files = if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(read_error)?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
            .collect();
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).map_err(|source| SeedError::Read {
                path: file.display().to_string(),
                source,
            })?;
            Ok((file.display().to_string(), text))
        })
        .collect()
}

fn resource_of(object: &Value) -> Option<Resource> {
    match object["kind"].as_str()? {
        "Sandbox" => Some(Resource::Sandbox),
        "PodWarmPool" => Some(Resource::PodWarmPool),
        _ => None,
    }
}

/// Creates every example object in `cluster`, then the objects of the `extra` YAML files (or
/// folders of them); returns how many.
pub(crate) async fn seed(cluster: &dyn Cluster, extra: &[PathBuf]) -> Result<usize, SeedError> {
    let mut sources: Vec<(String, String)> = EXAMPLES
        .iter()
        .map(|(file, text)| (file.to_string(), text.to_string()))
        .collect();
    for path in extra {
        sources.extend(read_yaml_files(path)?);
    }
    let mut created = 0;
    for (file, text) in &sources {
        for object in parse_documents(file, text)? {
            let fail = |why: String| SeedError::Object {
                file: file.to_string(),
                why,
            };
            // A folder of manifests often holds its kustomization too: not an object to create.
            if object["kind"] == "Kustomization" {
                continue;
            }
            let resource = resource_of(&object).ok_or_else(|| {
                fail(format!(
                    "kind {} cannot be seeded: only Sandbox and PodWarmPool",
                    object["kind"]
                ))
            })?;
            // Held to the CRDs as a scenario's objects are: a typo is refused, not seeded.
            let violations = crate::scenario::schema::check(resource, &object);
            if !violations.is_empty() {
                let each: Vec<String> = violations.iter().map(ToString::to_string).collect();
                return Err(fail(format!(
                    "{} {}: {}",
                    resource.kind(),
                    object["metadata"]["name"].as_str().unwrap_or("?"),
                    each.join("; ")
                )));
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use cubepod_apiserver::{MemoryCluster, MemoryClusterConfig};

    #[test]
    fn the_namespaces_are_deploys_the_controllers_and_the_leases() {
        let names = namespaces(&["team-a".to_owned()], "leases");
        for name in ["cubepod-system", "cubepod-workloads", "team-a", "leases"] {
            assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
        }
    }

    #[test]
    fn the_examples_are_every_resource_of_the_examples_kustomization() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples");
        let text = std::fs::read_to_string(dir.join("kustomization.yaml")).expect("readable");
        let kustomization: Value = serde_yaml_ng::from_str(&text).expect("YAML");
        let listed: Vec<&str> = kustomization["resources"]
            .as_array()
            .expect("a resources list")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let seeded: Vec<&str> = EXAMPLES.iter().map(|(file, _)| *file).collect();
        assert_eq!(seeded, listed);
        for (file, text) in EXAMPLES {
            let on_disk = std::fs::read_to_string(dir.join(file)).expect("readable");
            assert_eq!(*text, on_disk, "{file}");
        }
    }

    #[tokio::test]
    async fn the_examples_seed_and_a_seed_with_an_unknown_field_is_refused() {
        let cluster = MemoryCluster::new(MemoryClusterConfig::default());
        let created = seed(cluster.as_ref(), &[])
            .await
            .expect("the examples seed");
        assert_eq!(created, EXAMPLES.len());
        let dir = tempfile::tempdir().expect("temp dir");
        let extra = dir.path().join("mine.yaml");
        std::fs::write(
            &extra,
            "apiVersion: cubepod.io/v1alpha1\nkind: Sandbox\nmetadata: {name: mine}\nspec: {image: i, cpu: 500m}\n",
        )
        .expect("write");
        let error = seed(cluster.as_ref(), &[extra])
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("mine.yaml: Sandbox mine: unknown field \"spec.cpu\""),
            "{error}"
        );
    }
}
