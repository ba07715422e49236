//! The scenario file as written (`Raw*`), and its checks into the types the runner uses.
//! Checked types are read as their raw form and then converted *inside* the YAML node's own
//! deserialization (in the visitor), not after it as `#[serde(try_from)]` would: only then
//! does serde_yaml_ng give the error the node's path (`steps[1]`) and line.

use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use super::{
    Action, DEFAULT_MAX_POOL_REPLICAS, DEFAULT_NAMESPACE, Expect, ExpectedObject, KindName,
    ObjectName, PatchStep, ReapTarget, SeedObject, Step,
};
use cubepod_policy_host::model::time;

/// The actions a step (or a one-step scenario, at its top level) may hold: exactly one.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawAction {
    reconcile: Option<String>,
    pool: Option<String>,
    reap: Option<ReapTarget>,
    patch: Option<PatchStep>,
    delete: Option<ObjectName>,
}

impl RawAction {
    fn into_action(self) -> Result<Option<Action>, String> {
        let mut actions: Vec<Action> = [
            self.reconcile.map(Action::Reconcile),
            self.pool.map(Action::Pool),
            self.reap.map(Action::Reap),
            self.patch.map(Action::Patch),
            self.delete.map(Action::Delete),
        ]
        .into_iter()
        .flatten()
        .collect();
        match actions.len() {
            0 => Ok(None),
            1 => Ok(actions.pop()),
            _ => Err(
                "give exactly one of reconcile, pool, reap, patch or delete per step".to_string(),
            ),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawStep {
    reconcile: Option<String>,
    pool: Option<String>,
    reap: Option<ReapTarget>,
    patch: Option<PatchStep>,
    delete: Option<ObjectName>,
    now: Option<String>,
    #[serde(default)]
    expect: Expect,
}

/// A step as written, checked: one action, a parseable `now`.
#[derive(Debug)]
struct CheckedStep(Step);

impl TryFrom<RawStep> for CheckedStep {
    type Error = String;
    fn try_from(raw: RawStep) -> Result<Self, String> {
        let action = RawAction {
            reconcile: raw.reconcile,
            pool: raw.pool,
            reap: raw.reap,
            patch: raw.patch,
            delete: raw.delete,
        }
        .into_action()?
        .ok_or("a step needs one of reconcile, pool, reap, patch or delete")?;
        Ok(CheckedStep(Step {
            action,
            now: parse_now(raw.now.as_deref())?,
            expect: raw.expect,
        }))
    }
}

fn parse_now(text: Option<&str>) -> Result<Option<i64>, String> {
    text.map(|t| time::parse(t).map_err(|e| format!("now: {e}")))
        .transpose()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawScenario {
    name: Option<String>,
    namespace: Option<String>,
    now: Option<String>,
    max_pool_replicas: Option<u32>,
    #[serde(default)]
    objects: Vec<SeedObject>,
    steps: Option<Vec<CheckedStep>>,
    // A one-step scenario may give its step at the top level.
    reconcile: Option<String>,
    pool: Option<String>,
    reap: Option<ReapTarget>,
    patch: Option<PatchStep>,
    delete: Option<ObjectName>,
    expect: Option<Expect>,
}

/// A scenario as written, checked, before it knows its file.
#[derive(Debug)]
pub(super) struct CheckedScenario {
    pub(crate) name: Option<String>,
    pub(crate) namespace: String,
    pub(crate) max_pool_replicas: u32,
    pub(crate) objects: Vec<SeedObject>,
    pub(crate) steps: Vec<Step>,
}

impl TryFrom<RawScenario> for CheckedScenario {
    type Error = String;
    fn try_from(raw: RawScenario) -> Result<Self, String> {
        let default_now = parse_now(raw.now.as_deref())?;
        let inline = RawAction {
            reconcile: raw.reconcile,
            pool: raw.pool,
            reap: raw.reap,
            patch: raw.patch,
            delete: raw.delete,
        }
        .into_action()?;
        let steps = match (raw.steps, inline) {
            (Some(_), Some(_)) => {
                return Err(
                    "give either steps, or one action (reconcile, pool, reap...) at the top \
                     level, not both"
                        .to_string(),
                );
            }
            (Some(_), None) if raw.expect.is_some() => {
                return Err("with steps, each step has its own expect".to_string());
            }
            (Some(steps), None) => steps.into_iter().map(|s| s.0).collect(),
            (None, Some(action)) => vec![Step {
                action,
                now: None,
                expect: raw.expect.unwrap_or_default(),
            }],
            (None, None) => {
                return Err(
                    "no step: give steps, or one of reconcile, pool, reap, patch or delete"
                        .to_string(),
                );
            }
        };
        let mut checked = Vec::with_capacity(steps.len());
        for (index, mut step) in steps.into_iter().enumerate() {
            step.now = step.now.or(default_now);
            if step.action.calls_policy() && step.now.is_none() {
                return Err(format!(
                    "steps[{index}]: no now: give now (RFC 3339) to the scenario or the step, \
                     so that the policy's decisions are reproducible"
                ));
            }
            checked.push(step);
        }
        Ok(CheckedScenario {
            name: raw.name,
            namespace: raw
                .namespace
                .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string()),
            max_pool_replicas: raw.max_pool_replicas.unwrap_or(DEFAULT_MAX_POOL_REPLICAS),
            objects: raw.objects,
            steps: checked,
        })
    }
}

/// Reads `R` from a mapping and checks it into `T`.
fn checked_map<'de, D, R, T>(deserializer: D, expecting: &'static str) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    R: Deserialize<'de>,
    T: TryFrom<R, Error = String>,
{
    struct Map<R, T>(&'static str, PhantomData<(R, T)>);
    impl<'de, R, T> Visitor<'de> for Map<R, T>
    where
        R: Deserialize<'de>,
        T: TryFrom<R, Error = String>,
    {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str(self.0)
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            let raw = R::deserialize(de::value::MapAccessDeserializer::new(map))?;
            T::try_from(raw).map_err(de::Error::custom)
        }
    }
    deserializer.deserialize_map(Map(expecting, PhantomData))
}

/// Reads a string and checks it into `T`.
fn checked_str<'de, D, T>(deserializer: D, expecting: &'static str) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<String, Error = String>,
{
    struct Str<T>(&'static str, PhantomData<T>);
    impl<'de, T: TryFrom<String, Error = String>> Visitor<'de> for Str<T> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str(self.0)
        }
        fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
            T::try_from(text.to_string()).map_err(E::custom)
        }
    }
    deserializer.deserialize_str(Str(expecting, PhantomData))
}

impl<'de> Deserialize<'de> for ObjectName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked_str(d, "Kind/name (for example Pod/a)")
    }
}

impl<'de> Deserialize<'de> for KindName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked_str(
            d,
            "a kind (Sandbox, PodWarmPool, Pod, PersistentVolumeClaim, Secret)",
        )
    }
}

impl<'de> Deserialize<'de> for SeedObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked_map::<D, Value, Self>(d, "a Kubernetes object with kind and metadata.name")
    }
}

impl<'de> Deserialize<'de> for ExpectedObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked_map::<D, Value, Self>(d, "an object with kind and metadata.name")
    }
}

impl<'de> Deserialize<'de> for CheckedStep {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked_map::<D, RawStep, Self>(d, "a step")
    }
}

impl<'de> Deserialize<'de> for CheckedScenario {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked_map::<D, RawScenario, Self>(d, "a scenario")
    }
}
