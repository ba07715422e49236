//! The cluster network as the controller's flags describe it (`--cluster-cidr`,
//! `--dns-namespace`, `--dns-selector`, `--ingress-from`, `--cluster-domain`): handed to the
//! policy with every reconcile, and what the boundary checks a sandbox's NetworkPolicy against.

use crate::runtime::bindings::ClusterNetwork;

/// kind's and kubeadm's default pod and service ranges.
pub const DEFAULT_CLUSTER_CIDRS: [&str; 2] = ["10.244.0.0/16", "10.96.0.0/12"];
pub const DEFAULT_DNS_NAMESPACE: &str = "kube-system";
pub const DEFAULT_DNS_SELECTOR: &str = "k8s-app=kube-dns";
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";

/// The cluster network of the default flags.
pub fn default_cluster_network() -> ClusterNetwork {
    ClusterNetwork {
        cluster_cidrs: DEFAULT_CLUSTER_CIDRS
            .iter()
            .map(|c| c.to_string())
            .collect(),
        dns_namespace: DEFAULT_DNS_NAMESPACE.to_string(),
        dns_pod_labels: vec![("k8s-app".to_string(), "kube-dns".to_string())],
        ingress_from: Vec::new(),
        cluster_domain: DEFAULT_CLUSTER_DOMAIN.to_string(),
    }
}
