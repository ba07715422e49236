//! A Sandbox's own spec (or a pool's template) within the operator's bounds, read before the
//! policy runs: a spec past them is one the controller cannot act on (`SpecValid=False`), and
//! the policy is never handed it.

use super::{Containment, network, shown};
use crate::runtime::bindings::SandboxSpec;

impl Containment {
    /// A Sandbox spec (`prefix` `spec`) or a pool's template (`spec.template`) past the
    /// operator's bounds: a runtime class outside `--allowed-runtime-classes`, `resources` past
    /// `--max-sandbox-cpu` and `--max-sandbox-memory`, or an `allowCIDRs` entry reaching a
    /// protected address (`network::protected`, `--allowed-egress-cidrs`) of the cluster's
    /// ranges `cluster_cidrs`. The field at fault and why.
    pub fn refused_spec(
        &self,
        spec: &SandboxSpec,
        prefix: &str,
        cluster_cidrs: &[String],
    ) -> Option<(String, String)> {
        let allowed = &self.runtime_classes;
        if let Some(class) = spec.runtime_class.as_deref()
            && !allowed.contains(class)
        {
            return Some((
                format!("{prefix}.runtimeClassName"),
                format!(
                    "{:?} is not an allowed runtime class (allowed: {})",
                    shown(class),
                    allowed.iter().cloned().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        if let Some((i, why)) = network::refused_allow_cidr(
            &spec.network.allow_cidrs,
            cluster_cidrs,
            &self.allowed_egress,
        ) {
            return Some((format!("{prefix}.network.allowCIDRs[{i}]"), why));
        }
        self.pod_bounds
            .check_spec(prefix, spec.cpu.as_deref(), spec.memory.as_deref())
            .err()
            .map(|(field, why)| {
                let fix = format!(
                    "{why}: lower {field} to at most that, or have the operator raise the bound"
                );
                (field, fix)
            })
    }
}
