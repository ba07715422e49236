//! The scenario file: YAML, one scenario per document (`---` separates several). Every struct
//! refuses unknown fields, so a typo is an error that names the file, the field path and the
//! line, never an expectation silently skipped. Checks that serde cannot express (exactly one
//! action per step, a `now` that parses) run while reading (see `raw`), so that their errors
//! carry a position too.

mod raw;

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde_json::Value;

use cubepod_kube::Resource;

/// The namespace a scenario runs in unless it names another.
pub(crate) const DEFAULT_NAMESPACE: &str = "cubepod-workloads";
/// `max-replicas` of the pool input unless the scenario names another (the CLI's default).
pub(crate) const DEFAULT_MAX_POOL_REPLICAS: u32 = 100;

/// Why a scenario file cannot be used: which file, and serde's field path and position.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The read's error.
        #[source]
        source: std::io::Error,
    },
    /// `serde_yaml_ng` names the field path and the line and column.
    #[error("{}: {message}", path.display())]
    Yaml {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where.
        message: String,
    },
    /// The file holds no scenario.
    #[error("{}: no scenario in the file", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
}

/// One scenario, ready to run.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The scenario's name.
    pub name: String,
    /// The file it came from, for the report.
    pub file: PathBuf,
    /// The namespace its objects are in.
    pub namespace: String,
    /// The controller's `--max-pool-replicas`.
    pub max_pool_replicas: u32,
    /// Objects in the cluster before the first step.
    pub objects: Vec<SeedObject>,
    /// What runs, in order.
    pub steps: Vec<Step>,
}

/// One step: an action, the time it runs at, and what must hold afterwards.
#[derive(Debug, Clone)]
pub struct Step {
    /// What the controller does.
    pub action: Action,
    /// Seconds since the epoch; every policy call needs one.
    pub now: Option<i64>,
    pub(crate) expect: Expect,
}

/// What a step has the controller do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// What the controller runs for a Sandbox key: `reconcile-sandbox`, or `cleanup-sandbox`
    /// once it is being deleted.
    Reconcile(String),
    /// `reconcile-pool` for a PodWarmPool.
    Pool(String),
    /// A reaper tick over the named sandboxes, or over all of them.
    Reap(ReapTarget),
    /// A merge patch of an object, as a user or another controller would make.
    Patch(PatchStep),
    /// A delete of an object (a Sandbox with a finalizer lingers, as in the API).
    Delete(ObjectName),
}

impl Action {
    /// Whether the step calls the policy (and so needs a `now`).
    pub(crate) fn calls_policy(&self) -> bool {
        matches!(
            self,
            Action::Reconcile(_) | Action::Pool(_) | Action::Reap(_)
        )
    }
}

/// Which reap candidates a reap step hands the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReapTarget {
    /// Every candidate.
    All,
    /// Only these, by name.
    Only(Vec<String>),
}

/// A merge patch of one object, as a step.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchStep {
    pub(crate) kind: KindName,
    pub(crate) name: String,
    /// An RFC 7386 merge patch; its `status`, if any, goes through the status subresource.
    pub(crate) merge: Value,
}

/// `Kind/name` of an object, as `expect.absent` and `delete` name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectName {
    pub(crate) resource: Resource,
    pub(crate) name: String,
}

impl std::fmt::Display for ObjectName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.resource.kind(), self.name)
    }
}

impl TryFrom<String> for ObjectName {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        let (kind, name) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?} is not Kind/name (for example Pod/a)"))?;
        if name.is_empty() {
            return Err(format!("{text:?} names no object after the '/'"));
        }
        Ok(ObjectName {
            resource: resource_of_kind(kind)?,
            name: name.to_string(),
        })
    }
}

/// A kind of object a scenario may hold: one the controller reads or the policy writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KindName(pub(crate) Resource);

impl TryFrom<String> for KindName {
    type Error = String;
    fn try_from(kind: String) -> Result<Self, String> {
        resource_of_kind(&kind).map(KindName)
    }
}

/// The kinds a scenario may seed: our own resources and a sandbox's children.
fn kinds() -> impl Iterator<Item = Resource> {
    [Resource::Sandbox, Resource::PodWarmPool]
        .into_iter()
        .chain(Resource::children())
}

pub(crate) fn resource_of_kind(kind: &str) -> Result<Resource, String> {
    kinds().find(|r| r.kind() == kind).ok_or_else(|| {
        let known: Vec<&str> = kinds().map(Resource::kind).collect();
        format!("kind {kind:?} is not one of {}", known.join(", "))
    })
}

/// An object to create before the first step: a Kubernetes object with `kind` and
/// `metadata.name`.
#[derive(Debug, Clone, PartialEq)]
pub struct SeedObject {
    pub(crate) resource: Resource,
    pub(crate) name: String,
    pub(crate) object: Value,
}

impl TryFrom<Value> for SeedObject {
    type Error = String;
    fn try_from(object: Value) -> Result<Self, String> {
        let (resource, name) = kind_and_name(&object)?;
        let violations = super::schema::check(resource, &object);
        if !violations.is_empty() {
            let each: Vec<String> = violations.iter().map(ToString::to_string).collect();
            return Err(format!(
                "{}/{name}: {} (the API server refuses it, with strict field validation)",
                resource.kind(),
                each.join("; ")
            ));
        }
        Ok(SeedObject {
            resource,
            name,
            object,
        })
    }
}

/// An object expected in the cluster after the step: matched by kind and `metadata.name`,
/// then every field given must be there with that value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ExpectedObject {
    pub(crate) resource: Resource,
    pub(crate) name: String,
    pub(crate) fields: Value,
}

impl TryFrom<Value> for ExpectedObject {
    type Error = String;
    fn try_from(fields: Value) -> Result<Self, String> {
        let (resource, name) = kind_and_name(&fields)?;
        Ok(ExpectedObject {
            resource,
            name,
            fields,
        })
    }
}

fn kind_and_name(object: &Value) -> Result<(Resource, String), String> {
    if !object.is_object() {
        return Err("an object must be a mapping with kind and metadata.name".to_string());
    }
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .ok_or("the object has no kind")?;
    let resource = resource_of_kind(kind)?;
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| format!("the {kind} has no metadata.name"))?;
    Ok((resource, name.to_string()))
}

/// What must hold after a step. Every field is optional: only what is given is checked.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Expect {
    /// The policy's kube-client calls, exactly and in order: `ensure-pvc a-workspace`
    /// (`op namespace/name` outside the scenario's namespace).
    pub(crate) calls: Option<Vec<String>>,
    /// Objects in the cluster afterwards, each a subset of the real one.
    #[serde(default)]
    pub(crate) objects: Vec<ExpectedObject>,
    /// Objects that must not exist afterwards: `Kind/name`.
    #[serde(default)]
    pub(crate) absent: Vec<ObjectName>,
    /// A subset of the status the policy returned, as the controller writes it (`phase`,
    /// `podIP`, `rootfsPVC`, `conditions` matched by `type`...).
    pub(crate) status: Option<Value>,
    /// The reasons of the Events the policy asked for, in order.
    pub(crate) events: Option<Vec<String>>,
    /// `null` for none.
    #[serde(default, deserialize_with = "present")]
    pub(crate) requeue_after_seconds: Option<Option<u32>>,
    /// The pool member a reconcile adopted; `null` for none.
    #[serde(default, deserialize_with = "present")]
    pub(crate) claim: Option<Option<String>>,
    /// `cleanup-sandbox` reported every child gone.
    pub(crate) done: Option<bool>,
    /// Names of the sandboxes a reap acted on: idle pauses and shutdowns (in any order).
    pub(crate) reaped: Option<Vec<String>>,
    pub(crate) pool: Option<PoolExpect>,
    /// The step fails, with an error containing this text.
    pub(crate) error: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PoolExpect {
    /// Names of the members the pool decided to create (in any order).
    pub(crate) create: Option<Vec<String>>,
    pub(crate) delete: Option<Vec<String>>,
}

/// A field that is there, even as `null`, is `Some`: `null` then asserts "none".
fn present<'de, T, D>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    T: Deserialize<'de>,
    D: Deserializer<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

impl<'de> Deserialize<'de> for ReapTarget {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Target;
        impl<'de> Visitor<'de> for Target {
            type Value = ReapTarget;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("`all` or a list of sandbox names")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<ReapTarget, E> {
                match text {
                    "all" => Ok(ReapTarget::All),
                    _ => Err(E::invalid_value(de::Unexpected::Str(text), &self)),
                }
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ReapTarget, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = seq.next_element::<String>()? {
                    names.push(name);
                }
                Ok(ReapTarget::Only(names))
            }
        }
        deserializer.deserialize_any(Target)
    }
}

/// Reads every scenario of a file.
pub fn read_file(path: &Path) -> Result<Vec<Scenario>, FormatError> {
    let text = std::fs::read_to_string(path).map_err(|source| FormatError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse(path, &text)
}

/// Parses the scenarios of `text`, read from `path`. A scenario without a name is named after
/// the file (and its position, when the file holds several).
pub(crate) fn parse(path: &Path, text: &str) -> Result<Vec<Scenario>, FormatError> {
    let yaml_error = |e: serde_yaml_ng::Error| FormatError::Yaml {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let mut checked = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        // A document of comments only (a trailing `---`) is no scenario.
        let value = serde_yaml_ng::Value::deserialize(document).map_err(yaml_error)?;
        if value.is_null() {
            continue;
        }
        checked.push(value);
    }
    if checked.is_empty() {
        return Err(FormatError::Empty {
            path: path.to_path_buf(),
        });
    }
    // Deserialized again from the text, not from the Value, so that errors keep their line.
    let mut scenarios = Vec::new();
    let mut index = 0;
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let Some(scenario) =
            Option::<raw::CheckedScenario>::deserialize(document).map_err(yaml_error)?
        else {
            continue;
        };
        index += 1;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        let name = scenario.name.unwrap_or_else(|| {
            if checked.len() > 1 {
                format!("{stem} #{index}")
            } else {
                stem
            }
        });
        scenarios.push(Scenario {
            name,
            file: path.to_path_buf(),
            namespace: scenario.namespace,
            max_pool_replicas: scenario.max_pool_replicas,
            objects: scenario.objects,
            steps: scenario.steps,
        });
    }
    Ok(scenarios)
}

/// The calls of `expect.calls` are written like this; the runner formats actual calls alike.
pub(crate) fn call_summary(
    op: &str,
    namespace: &str,
    name: &str,
    scenario_namespace: &str,
) -> String {
    if namespace == scenario_namespace {
        format!("{op} {name}")
    } else {
        format!("{op} {namespace}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_one(text: &str) -> Result<Scenario, String> {
        parse(Path::new("s.yaml"), text)
            .map(|mut s| s.remove(0))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_one_step_scenario_reads_with_its_defaults() {
        let s = parse_one(
            "now: 2026-01-01T00:00:00Z\nobjects:\n- {apiVersion: cubepod.io/v1alpha1, kind: Sandbox, metadata: {name: a}, spec: {image: i}}\nreconcile: a\nexpect: {calls: [ensure-pod a], requeueAfterSeconds: null}\n",
        )
        .unwrap();
        assert_eq!(s.name, "s");
        assert_eq!(s.namespace, DEFAULT_NAMESPACE);
        assert_eq!(s.steps.len(), 1);
        assert_eq!(s.steps[0].action, Action::Reconcile("a".into()));
        assert_eq!(s.steps[0].now, Some(1_767_225_600));
        assert_eq!(s.steps[0].expect.requeue_after_seconds, Some(None));
        assert_eq!(s.steps[0].expect.claim, None);
        assert_eq!(s.objects[0].resource, Resource::Sandbox);
    }

    #[test]
    fn an_unknown_field_is_named_with_its_path_and_line() {
        let error = parse_one(
            "now: 2026-01-01T00:00:00Z\nsteps:\n- reconcile: a\n  expect:\n    calsl: []\n",
        )
        .unwrap_err();
        assert!(error.starts_with("s.yaml: "), "{error}");
        assert!(error.contains("steps[0].expect"), "{error}");
        assert!(error.contains("unknown field `calsl`"), "{error}");
        assert!(error.contains("line 5"), "{error}");
    }

    #[test]
    fn a_step_with_two_actions_or_none_is_refused_where_it_is() {
        let error = parse_one(
            "now: 2026-01-01T00:00:00Z\nsteps:\n- reconcile: a\n- reconcile: a\n  pool: p\n",
        )
        .unwrap_err();
        assert!(error.contains("steps[1]"), "{error}");
        assert!(error.contains("exactly one"), "{error}");
        let error = parse_one("objects: []\n").unwrap_err();
        assert!(error.contains("no step"), "{error}");
    }

    #[test]
    fn a_policy_step_needs_a_time() {
        let error = parse_one("reconcile: a\n").unwrap_err();
        assert!(error.contains("no now"), "{error}");
        let error = parse_one("now: yesterday\nreconcile: a\n").unwrap_err();
        assert!(error.contains("not an RFC 3339 time"), "{error}");
    }

    #[test]
    fn objects_and_names_are_checked() {
        let error = parse_one(
            "now: 2026-01-01T00:00:00Z\nobjects:\n- {kind: Deployment, metadata: {name: a}}\nreconcile: a\n",
        )
        .unwrap_err();
        assert!(error.contains("objects[0]"), "{error}");
        assert!(error.contains("\"Deployment\" is not one of"), "{error}");
        let error =
            parse_one("now: 2026-01-01T00:00:00Z\nreconcile: a\nexpect: {absent: [pod-a]}\n")
                .unwrap_err();
        assert!(error.contains("is not Kind/name"), "{error}");
    }

    #[test]
    fn a_declared_object_is_held_to_its_schema_as_the_api_server_would() {
        // `cpu` belongs in spec.resources: this Sandbox would get no CPU limit, silently.
        let error = parse_one(
            "now: 2026-01-01T00:00:00Z\nobjects:\n  - apiVersion: cubepod.io/v1alpha1\n    kind: Sandbox\n    metadata: {name: a}\n    spec: {image: i, cpu: 500m}\nreconcile: a\n",
        )
        .unwrap_err();
        assert!(
            error.starts_with("s.yaml: objects[0]: Sandbox/a: "),
            "{error}"
        );
        assert!(error.contains("unknown field \"spec.cpu\""), "{error}");
        assert!(error.contains("line 3"), "{error}");
        let error = parse_one(
            "objects:\n- {apiVersion: v1, kind: Secret, metadata: {name: s}, status: {}}\ndelete: Secret/s\n",
        )
        .unwrap_err();
        assert!(
            error.contains("Secret/s: unknown field \"status\""),
            "{error}"
        );
    }

    #[test]
    fn several_documents_are_several_scenarios() {
        let all = parse(
            Path::new("dir/many.yaml"),
            "# first\nnow: 2026-01-01T00:00:00Z\nreap: all\n---\nname: second\nnow: 2026-01-01T00:00:00Z\nreap: [a, b]\n---\n# nothing\n",
        )
        .unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].name, "many #1");
        assert_eq!(all[0].steps[0].action, Action::Reap(ReapTarget::All));
        assert_eq!(all[1].name, "second");
        assert_eq!(
            all[1].steps[0].action,
            Action::Reap(ReapTarget::Only(vec!["a".into(), "b".into()]))
        );
    }

    #[test]
    fn an_error_in_a_later_document_gives_the_line_in_the_file() {
        let error = parse(
            Path::new("m.yaml"),
            "now: 2026-01-01T00:00:00Z\nreap: all\n---\nnow: 2026-01-01T00:00:00Z\nreap: some\n",
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("line 5"), "{error}");
        assert!(
            error.contains("`all` or a list of sandbox names"),
            "{error}"
        );
    }
}
