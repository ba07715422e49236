//! `cubepod-controller policy diff STABLE CANDIDATE [SCENARIO...]`: what a candidate module
//! would do differently from the stable one, object by object, writing nothing anywhere but
//! scratch clusters. Both modules go through the controller's admission. The objects are a
//! scenario's initial ones, or a live cluster's (listed as the controller's reflectors list
//! them: Sandboxes and PodWarmPools whole, their children's metadata and status). Each Sandbox
//! and PodWarmPool is reconciled once per module, on a scratch cluster of its own seeded with
//! its namespace's objects, by the reconcile core `policy test` and the controller run
//! (`scenario::scratch`); what the two did is compared: calls (and the manifests of the same
//! call), the status written, Events, requeue, claim, pool changes and errors.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tokio::runtime::Handle;

use super::{self as cli, CliError};
use crate::admission::{Admission, Admitted, Candidate, FileError, sha256_hex};
use crate::config::PolicyDiffArgs;
use crate::controller::reflector;
use crate::scenario::diff;
use crate::scenario::format::{self, Action, SeedObject};
use crate::scenario::runner::Report;
use crate::scenario::scratch::{Scratch, StepOutcome, summary};
use crate::signing::KeyRing;
use cubepod_kube::rest::{ConnectionConfig, Projection, RestCluster, RestOptions};
use cubepod_kube::{Cluster, Resource};
use cubepod_policy_host::runtime::PolicyModule;

/// The objects both modules decide for: one namespace's, from a scenario or a live cluster.
struct World {
    /// Where they come from, for the output: `scenario NAME (FILE)`, `cluster SERVER`.
    label: String,
    /// What the JUnit report names as the testcases' file.
    file: PathBuf,
    namespace: String,
    objects: Vec<SeedObject>,
    /// The time both modules are given (seconds since the epoch).
    now: i64,
    max_pool_replicas: u32,
}

impl World {
    /// The objects a module decides for: every Sandbox and PodWarmPool of the namespace, pools
    /// first (as the objects are given within each kind).
    fn targets(&self) -> Vec<(Resource, String)> {
        let of = |resource: Resource| {
            self.objects
                .iter()
                .filter(move |o| {
                    o.resource == resource && namespace_of(o, &self.namespace) == self.namespace
                })
                .map(move |o| (resource, o.name.clone()))
        };
        of(Resource::PodWarmPool)
            .chain(of(Resource::Sandbox))
            .collect()
    }
}

fn namespace_of<'a>(object: &'a SeedObject, default: &'a str) -> &'a str {
    object
        .object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or(default)
}

/// Runs `policy diff`; `Ok(true)` when the modules decide alike on every object. Call from a
/// blocking thread.
pub(crate) fn run(
    args: &PolicyDiffArgs,
    handle: &Handle,
    out: &mut dyn Write,
) -> Result<bool, CliError> {
    let engine = cli::engine(&args.guest, &args.containment)?;
    let admission = Admission::new(engine, KeyRing::load(&args.verify_keys)?);
    let stable = admit(&admission, &args.stable, handle)?;
    let candidate = admit(&admission, &args.candidate, handle)?;
    let worlds = if args.scenarios.is_empty() {
        live(args, handle)?
    } else {
        scenarios(&args.scenarios)?
    };
    writeln!(out, "stable:    {}", describe(&stable.module, &args.stable))?;
    writeln!(
        out,
        "candidate: {}",
        describe(&candidate.module, &args.candidate)
    )?;
    let mut reports = Vec::new();
    for world in &worlds {
        let targets = world.targets();
        writeln!(
            out,
            "{} (namespace {}, {} object(s) compared)",
            world.label,
            world.namespace,
            targets.len()
        )?;
        for (resource, name) in targets {
            let started = Instant::now();
            let before = decide(&stable.module, handle, world, resource, &name)?;
            let after = decide(&candidate.module, handle, world, resource, &name)?;
            let differences = compare(&before, &after);
            let object = format!("{} {}/{name}", resource.kind(), world.namespace);
            let verdict = if differences.is_empty() {
                "SAME"
            } else {
                "DIFF"
            };
            writeln!(out, "{verdict} {object}")?;
            for line in &differences {
                writeln!(out, "    {line}")?;
            }
            reports.push(Report {
                name: object,
                file: world.file.clone(),
                failures: differences,
                duration: started.elapsed(),
            });
        }
    }
    let differ = reports.iter().filter(|r| !r.passed()).count();
    writeln!(
        out,
        "{} object(s) compared, {differ} decided differently by the candidate",
        reports.len()
    )?;
    cli::write_junit(args.junit.as_deref(), &reports)?;
    Ok(differ == 0)
}

/// MODULE read and admitted as `run` admits a module (its signature checked when keys are
/// given); a module refused is an error: there is nothing to compare.
fn admit(admission: &Admission, module: &Path, handle: &Handle) -> Result<Admitted, CliError> {
    let candidate = if module.as_os_str() == cli::BUILTIN_DEFAULT {
        Candidate {
            what: cli::BUILTIN_DEFAULT.to_string(),
            ..Candidate::builtin()
        }
    } else {
        handle
            .block_on(admission.read(module))
            .map_err(|error| match error {
                FileError::Io { source, .. } => CliError::Read {
                    path: module.to_path_buf(),
                    source,
                },
                refused => CliError::Refused {
                    module: module.display().to_string(),
                    reason: "file",
                    why: refused.to_string(),
                },
            })?
    };
    admission
        .check(&candidate, handle)
        .map_err(|refused| CliError::Refused {
            module: module.display().to_string(),
            reason: refused.reason(),
            why: refused.to_string(),
        })
}

/// `NAME VERSION (contract ..., sha256 ...) from MODULE`.
fn describe(module: &PolicyModule, given: &Path) -> String {
    let info = module.info();
    format!(
        "{} {} (contract {}, sha256 {}) from {}",
        info.name,
        info.version,
        info.contract_version,
        module.digest(),
        given.display()
    )
}

/// One world per scenario: its namespace and initial objects, at its first step's time.
fn scenarios(paths: &[PathBuf]) -> Result<Vec<World>, CliError> {
    let mut worlds = Vec::new();
    for file in super::test::scenario_files(paths)? {
        for scenario in format::read_file(&file).map_err(CliError::Scenario)? {
            let now = scenario
                .steps
                .iter()
                .find_map(|s| s.now)
                .unwrap_or_else(now);
            let mut objects = scenario.objects;
            with_uids(&mut objects, &scenario.namespace);
            worlds.push(World {
                label: format!("scenario {:?} in {}", scenario.name, file.display()),
                file: file.clone(),
                namespace: scenario.namespace,
                objects,
                now,
                max_pool_replicas: scenario.max_pool_replicas,
            });
        }
    }
    Ok(worlds)
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// Gives each object without a uid one made of its kind, namespace and name: the two modules'
/// scratch clusters then hold the same uids, and what refers to them (owner references,
/// recorded members) reads alike.
fn with_uids(objects: &mut [SeedObject], namespace: &str) {
    for seed in objects {
        let has_uid = seed
            .object
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .is_some_and(|u| !u.is_empty());
        if has_uid {
            continue;
        }
        let key = format!(
            "{}/{}/{}",
            seed.resource.kind(),
            namespace_of(seed, namespace),
            seed.name
        );
        let digest = sha256_hex(key.as_bytes());
        let uid = format!(
            "{}-{}-{}-{}-{}",
            &digest[..8],
            &digest[8..12],
            &digest[12..16],
            &digest[16..20],
            &digest[20..32]
        );
        if let Some(metadata) = seed
            .object
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
        {
            metadata.insert("uid".into(), uid.into());
        }
    }
}

/// One world per namespace of a live cluster, found as `run` finds it; lists only.
fn live(args: &PolicyDiffArgs, handle: &Handle) -> Result<Vec<World>, CliError> {
    let Some((connection, source)) = ConnectionConfig::load()? else {
        return Err(CliError::NoCluster);
    };
    let server = connection.server.clone();
    // As the controller's cache holds them: a child's metadata and status, no Secret's data.
    let options = RestOptions {
        children: Projection::MetadataAndStatus,
        ..RestOptions::default()
    };
    let cluster: Arc<dyn Cluster> = {
        // The client is made within the runtime its requests run on.
        let _runtime = handle.enter();
        RestCluster::new(connection, options)?
    };
    let now = now();
    let mut worlds = Vec::new();
    for namespace in &args.namespaces {
        let mut objects = Vec::new();
        for scope in reflector::scopes(namespace) {
            let resource = scope.resource;
            let list =
                handle
                    .block_on(cluster.list(&scope))
                    .map_err(|source| CliError::ClusterRead {
                        what: format!("listing {}s in namespace {namespace}", resource.kind()),
                        source,
                    })?;
            for mut object in list.items {
                // A projected child reads as PartialObjectMetadata: it is put back as what it is.
                if let Some(fields) = object.as_object_mut() {
                    fields.insert("apiVersion".into(), resource.api_version().into());
                    fields.insert("kind".into(), resource.kind().into());
                }
                let Some(name) = object
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                else {
                    continue;
                };
                objects.push(SeedObject {
                    resource,
                    name,
                    object,
                });
            }
        }
        worlds.push(World {
            label: format!("cluster {server} ({source})"),
            // The report's suite: the namespace.
            file: PathBuf::from(namespace),
            namespace: namespace.clone(),
            objects,
            now,
            max_pool_replicas: args.max_pool_replicas,
        });
    }
    Ok(worlds)
}

/// What a module did with one object: the parts of a step's outcome that are its decisions,
/// as lines and values to compare.
struct Decision {
    calls: Vec<String>,
    /// The manifest of each call that sent one, by its summary.
    manifests: Vec<(String, Value)>,
    status: Option<Value>,
    events: Vec<String>,
    requeue_after_seconds: Option<u32>,
    claim: Option<String>,
    done: Option<bool>,
    pool_create: Vec<String>,
    pool_delete: Vec<String>,
    error: Option<String>,
}

/// Reconciles one object with `module` on a scratch cluster of its own, seeded with the
/// world's objects.
fn decide(
    module: &PolicyModule,
    handle: &Handle,
    world: &World,
    resource: Resource,
    name: &str,
) -> Result<Decision, CliError> {
    let mut scratch = Scratch::new(&world.namespace, module, handle);
    scratch.seed(&world.objects).map_err(|why| CliError::Seed {
        world: world.label.clone(),
        why,
    })?;
    let action = match resource {
        Resource::PodWarmPool => Action::Pool(name.to_string()),
        _ => Action::Reconcile(name.to_string()),
    };
    let StepOutcome { result, error } =
        scratch.run(&action, Some(world.now), world.max_pool_replicas);
    let namespace = scratch.namespace();
    let mut calls = Vec::new();
    let mut manifests = Vec::new();
    for call in &result.calls {
        let mut line = summary(call, namespace);
        if let Err(error) = &call.result {
            line.push_str(&format!(
                " (failed: {})",
                crate::scenario::scratch::kube_error(error)
            ));
        }
        if let Some(manifest) = &call.manifest {
            let value =
                serde_json::from_str(manifest).unwrap_or_else(|_| Value::String(manifest.clone()));
            manifests.push((summary(call, namespace), value));
        }
        calls.push(line);
    }
    let mut pool_create = result.pool_create;
    let mut pool_delete = result.pool_delete;
    pool_create.sort();
    pool_delete.sort();
    Ok(Decision {
        calls,
        manifests,
        status: result.status,
        events: result.events,
        requeue_after_seconds: result.requeue_after_seconds,
        claim: result.claim,
        done: result.done,
        pool_create,
        pool_delete,
        error: error.map(|e| e.to_string()),
    })
}

/// What the candidate decided differently, as lines: empty when nothing.
fn compare(stable: &Decision, candidate: &Decision) -> Vec<String> {
    let mut out = Vec::new();
    if stable.error != candidate.error {
        out.push(format!(
            "error: {} -> {}",
            or_none(&stable.error),
            or_none(&candidate.error)
        ));
    }
    listed(&mut out, "calls", &stable.calls, &candidate.calls);
    // The same call with another manifest: what in it differs.
    for (call, before) in &stable.manifests {
        if let Some((_, after)) = candidate.manifests.iter().find(|(c, _)| c == call) {
            out.extend(diff::changes(call, before, after));
        }
    }
    let (before, after) = (
        stable.status.clone().unwrap_or(Value::Null),
        candidate.status.clone().unwrap_or(Value::Null),
    );
    out.extend(diff::changes("status", &before, &after));
    listed(&mut out, "events", &stable.events, &candidate.events);
    if stable.requeue_after_seconds != candidate.requeue_after_seconds {
        out.push(format!(
            "requeueAfterSeconds: {} -> {}",
            or_none(&stable.requeue_after_seconds),
            or_none(&candidate.requeue_after_seconds)
        ));
    }
    if stable.claim != candidate.claim {
        out.push(format!(
            "claim: {} -> {}",
            or_none(&stable.claim),
            or_none(&candidate.claim)
        ));
    }
    if stable.done != candidate.done {
        out.push(format!(
            "done: {} -> {}",
            or_none(&stable.done),
            or_none(&candidate.done)
        ));
    }
    listed(
        &mut out,
        "pool.create",
        &stable.pool_create,
        &candidate.pool_create,
    );
    listed(
        &mut out,
        "pool.delete",
        &stable.pool_delete,
        &candidate.pool_delete,
    );
    out
}

/// A line diff under a header when the lists differ.
fn listed(out: &mut Vec<String>, what: &str, stable: &[String], candidate: &[String]) {
    diff::listed(out, what, ["stable", "candidate"], stable, candidate);
}

fn or_none<T: std::fmt::Display>(value: &Option<T>) -> String {
    match value {
        Some(v) => v.to_string(),
        None => "none".to_string(),
    }
}
