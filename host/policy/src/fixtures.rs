//! Inputs as the host hands them to a policy, for the tests of the host's side (the memo, the
//! runtime's calls, a module's answers): a Sandbox just created and its first
//! `reconcile-sandbox` input, in the host's types. They are the SDK's fixtures
//! (`cubepod_policy_sdk::fixtures`, what a policy's own tests use) through [`twin`], so that
//! both sides test with one Sandbox.

use cubepod_policy_sdk::fixtures as sdk;

use crate::runtime::bindings::{ReconcileInput, Sandbox};
use crate::twin;

/// The Sandbox `name` in `namespace` (uid `uid-<name>`) as the API server holds it just after
/// its creation: its spec's defaults with the SDK fixtures' image, internet egress, and no
/// status yet (`Pending`, generation 0 observed).
pub fn new_sandbox(namespace: &str, name: &str) -> Sandbox {
    let mut sandbox = twin::sandbox(&sdk::sandbox(name).build());
    sandbox.namespace = namespace.to_string();
    sandbox
}

/// The first `reconcile-sandbox` input of [`new_sandbox`] at `now`: no child observed yet, no
/// fork or pool, the SDK fixtures' token, the cluster network of the default flags.
pub fn new_sandbox_input(namespace: &str, name: &str, now: i64) -> ReconcileInput {
    let mut input = twin::reconcile_input(&sdk::sandbox(name).input());
    input.sandbox.namespace = namespace.to_string();
    input.now = now;
    input
}

#[cfg(test)]
mod tests {
    use crate::model::{children, network};
    use crate::runtime::bindings::SandboxPhase;

    /// The SDK's fixtures say they hand the cluster network of the host's default flags and
    /// nothing observed: a policy tested with them meets what the host hands it.
    #[test]
    fn the_sdks_first_input_is_the_hosts() {
        let input = super::new_sandbox_input("ns", "a", 7);
        assert_eq!(input.cluster_network, network::default_cluster_network());
        assert_eq!(input.observed, children::empty());
        assert_eq!(input.sandbox.status.phase, SandboxPhase::Pending);
        assert_eq!((input.sandbox.namespace.as_str(), input.now), ("ns", 7));
    }
}
