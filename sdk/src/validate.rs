//! What the CRD schema cannot check, or an API server without the schema lets through. A spec
//! that fails here gets a condition that says what to change, and no child is touched.

use crate::prelude::*;

use crate::bindings::{ObservedChildren, Sandbox, SandboxSpec};
use crate::cidr::Cidr;
use crate::names;
use crate::quantity::is_positive_quantity;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub reason: &'static str,
    pub message: String,
}

fn invalid(reason: &'static str, message: String) -> Result<(), Invalid> {
    Err(Invalid { reason, message })
}

/// Checks a sandbox's spec against its name and what already exists of it.
pub fn sandbox(sandbox: &Sandbox, observed: &ObservedChildren) -> Result<(), Invalid> {
    if sandbox.name.len() > names::MAX_LABEL_VALUE {
        return invalid(
            "NameTooLong",
            format!(
                "the name is {} characters long; its children are labelled with it and a label \
                 value is at most {}: recreate the sandbox with a shorter name",
                sandbox.name.len(),
                names::MAX_LABEL_VALUE
            ),
        );
    }
    spec(&sandbox.spec, "spec")?;
    if let Some(source) = &sandbox.spec.fork_from
        && source == &sandbox.name
    {
        return invalid(
            "ForkFromSelf",
            "spec.forkFrom names this sandbox itself: name another sandbox, or remove the field"
                .to_string(),
        );
    }
    if sandbox.spec.fork_from.is_some() && sandbox.spec.warm_pool.is_some() {
        return invalid(
            "ForkAndClaim",
            "spec.forkFrom and spec.warmPool are both set: a sandbox is either a fork or a claim \
             from a pool, so remove one"
                .to_string(),
        );
    }
    let highest = highest_rootfs_generation(sandbox, observed);
    if highest > sandbox.spec.rootfs_generation {
        return invalid(
            "RootfsGenerationDecreased",
            format!(
                "spec.rootfsGeneration went down from {highest} to {}: a reset only moves \
                 forward, so set it to {highest} (keep) or {} (reset)",
                sandbox.spec.rootfs_generation,
                highest + 1
            ),
        );
    }
    Ok(())
}

/// Checks a spec alone; `path` names it in messages ("spec", "spec.template").
pub fn spec(spec: &SandboxSpec, path: &str) -> Result<(), Invalid> {
    if spec.image.trim().is_empty() {
        return invalid(
            "ImageMissing",
            format!("{path}.image is empty: set it to the sandbox's container image"),
        );
    }
    if spec.rootfs_generation == 0 {
        return invalid(
            "InvalidRootfsGeneration",
            format!("{path}.rootfsGeneration is 0: generations start at 1"),
        );
    }
    let quantities = [
        ("storage.rootfsSize", Some(&spec.rootfs_size)),
        ("storage.workspaceSize", Some(&spec.workspace_size)),
        ("resources.cpu", spec.cpu.as_ref()),
        ("resources.memory", spec.memory.as_ref()),
    ];
    for (field, value) in quantities {
        if let Some(value) = value
            && !is_positive_quantity(value)
        {
            return invalid(
                "InvalidQuantity",
                format!(
                    "{path}.{field} {value:?} is not a positive Kubernetes quantity: write it \
                     like \"10Gi\", \"512Mi\" or \"500m\""
                ),
            );
        }
    }
    network(spec, path)
}

/// `spec.network`'s CIDRs and `spec.service`'s ports: what the NetworkPolicy and the Service
/// are made of, so the API server must not be the first to find them wrong.
fn network(spec: &SandboxSpec, path: &str) -> Result<(), Invalid> {
    let lists = [
        ("allowCIDRs", &spec.network.allow_cidrs),
        ("denyCIDRs", &spec.network.deny_cidrs),
    ];
    for (field, list) in lists {
        for (i, text) in list.iter().enumerate() {
            if Cidr::parse(text).is_none() {
                return invalid(
                    "InvalidCIDR",
                    format!(
                        "{path}.network.{field}[{i}] {text:?} is not a CIDR: write an address \
                         and a prefix length, like \"10.0.5.0/24\" or \"2001:db8::/32\""
                    ),
                );
            }
        }
    }
    if let Some(service) = &spec.service {
        let mut seen = Vec::new();
        for (i, port) in service.ports.iter().enumerate() {
            if port.port == 0 {
                return invalid(
                    "InvalidServicePort",
                    format!("{path}.service.ports[{i}].port is 0: ports are 1-65535"),
                );
            }
            if seen.contains(&(port.port, port.protocol)) {
                return invalid(
                    "InvalidServicePort",
                    format!(
                        "{path}.service.ports[{i}] repeats port {} of the same protocol",
                        port.port
                    ),
                );
            }
            seen.push((port.port, port.protocol));
        }
        if service.ports.len() > 1 && service.ports.iter().any(|p| p.name.is_empty()) {
            return invalid(
                "InvalidServicePort",
                format!("{path}.service.ports: with more than one port, each needs a name"),
            );
        }
    }
    Ok(())
}

/// The highest rootfs generation this sandbox is known to have had.
fn highest_rootfs_generation(sandbox: &Sandbox, observed: &ObservedChildren) -> u32 {
    let from_status = sandbox
        .status
        .rootfs_pvc
        .as_deref()
        .and_then(|pvc| names::rootfs_generation_of(&sandbox.name, pvc));
    observed
        .pvcs
        .iter()
        .filter_map(|pvc| names::rootfs_generation_of(&sandbox.name, &pvc.name))
        .chain(from_status)
        .max()
        .unwrap_or(0)
}
