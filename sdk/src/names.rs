//! The names and labels that docs/architecture.md fixes: other tools and tests rely on them.

// Named from `alloc`, not the SDK's prelude: the host compiles this file into itself too.
use alloc::format;
use alloc::string::{String, ToString};

pub const API_VERSION: &str = "cubepod.io/v1alpha1";
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "cubepod-controller";
pub const SANDBOX_LABEL: &str = "cubepod.io/sandbox";
pub const POOL_LABEL: &str = "cubepod.io/pool";
pub const VOLUME_LABEL: &str = "cubepod.io/volume";
pub const GENERATION_LABEL: &str = "cubepod.io/rootfs-generation";
/// On a pool member: the digest of the pool template it was made from.
pub const TEMPLATE_HASH_LABEL: &str = "cubepod.io/template-hash";
/// On a NetworkPolicy or Service: the digest of the spec the policy wrote.
pub const SPEC_HASH_ANNOTATION: &str = "cubepod.io/spec-hash";
pub const DEFAULT_RUNTIME_CLASS: &str = "kata-qemu";
/// Kubernetes label values are at most 63 characters; a sandbox's name is one.
pub const MAX_LABEL_VALUE: usize = 63;

/// The label the API server sets on every namespace, with its name: how a NetworkPolicy
/// selects the cluster DNS's namespace.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Destinations `egress: Internet` never reaches besides the cluster's own ranges: RFC 1918,
/// link-local (with the cloud metadata address 169.254.169.254), RFC 6598 shared space
/// (carrier-grade NAT, which several providers use for pod or node networks; never the public
/// internet), IPv6 unique-local and link-local, and `::/64` (reserved, never an internet
/// destination), which holds the IPv4-mapped, -compatible and -translated forms of every IPv4
/// address (the API server refuses an except inside `::ffff:0:0/96` under `::/0`, as its parser
/// reads such an address as IPv4: `::/64` is the except that covers them, and leaves NAT64's
/// `64:ff9b::/96`, which `::/8` would hold, to the internet). The default policy writes them, with every form of
/// them that carries an IPv4 address (`cidr::EMBEDDINGS`), as excepts, and the boundary
/// refuses a NetworkPolicy that reaches them: one list for both.
pub const BLOCKED_FOR_INTERNET: [&str; 8] = [
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "169.254.0.0/16",
    "100.64.0.0/10",
    "fc00::/7",
    "fe80::/10",
    "::/64",
];

pub fn pod(sandbox: &str) -> String {
    sandbox.to_string()
}

pub fn rootfs_pvc(sandbox: &str, generation: u32) -> String {
    format!("{sandbox}-rootfs-g{generation}")
}

pub fn workspace_pvc(sandbox: &str) -> String {
    format!("{sandbox}-workspace")
}

pub fn secret(sandbox: &str) -> String {
    format!("{sandbox}-credentials")
}

/// The generation of a rootfs PVC of `sandbox`, or `None` for any other name.
pub fn rootfs_generation_of(sandbox: &str, pvc: &str) -> Option<u32> {
    pvc.strip_prefix(sandbox)?
        .strip_prefix("-rootfs-g")?
        .parse()
        .ok()
}

pub fn network_policy(sandbox: &str) -> String {
    format!("{sandbox}-network")
}

/// The headless Service of a sandbox has the sandbox's name.
pub fn service(sandbox: &str) -> String {
    sandbox.to_string()
}

pub fn pool_member(pool: &str, index: u32) -> String {
    format!("{pool}-{index}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rootfs_generation_parses_only_own_names() {
        assert_eq!(rootfs_generation_of("a", "a-rootfs-g3"), Some(3));
        assert_eq!(rootfs_generation_of("a", "a-workspace"), None);
        assert_eq!(rootfs_generation_of("a", "ab-rootfs-g3"), None);
        assert_eq!(rootfs_generation_of("a", "a-rootfs-gx"), None);
    }
}
