//! The cluster network as the controller's flags describe it (`--cluster-cidr`,
//! `--dns-namespace`, `--dns-selector`, `--ingress-from`, `--cluster-domain`): handed to the
//! policy with every reconcile, and what the boundary checks a sandbox's NetworkPolicy against.

use std::net::IpAddr;

use crate::containment::ipset::{Cidr, IpSet};
use crate::runtime::bindings::ClusterNetwork;

/// kind's and kubeadm's default pod and service ranges.
pub(crate) const DEFAULT_CLUSTER_CIDRS: [&str; 2] = ["10.244.0.0/16", "10.96.0.0/12"];
/// The namespace of the cluster DNS by default.
pub const DEFAULT_DNS_NAMESPACE: &str = "kube-system";
/// The label selector of the cluster DNS Pods by default.
pub const DEFAULT_DNS_SELECTOR: &str = "k8s-app=kube-dns";
/// The cluster's DNS domain by default.
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

/// The API server's addresses as CIDRs (`/32`, `/128`): the in-cluster
/// `KUBERNETES_SERVICE_HOST` and the host of the server the controller connects to (its
/// kubeconfig's), each when it is an IP address (a name is left out).
pub fn api_server_cidrs(server: &str, env: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let authority = server
        .split_once("://")
        .map_or(server, |(_, rest)| rest)
        .split('/')
        .next()
        .unwrap_or_default();
    // `[v6]:port`, `v4:port`, or either without a port.
    let host = match authority.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    let mut cidrs: Vec<String> = Vec::new();
    for candidate in [
        env("KUBERNETES_SERVICE_HOST").unwrap_or_default().as_str(),
        host,
    ] {
        let Ok(ip) = candidate.trim_matches(['[', ']']).parse::<IpAddr>() else {
            continue;
        };
        let cidr = match ip {
            IpAddr::V4(a) => format!("{a}/32"),
            IpAddr::V6(a) => format!("{a}/128"),
        };
        if !cidrs.contains(&cidr) {
            cidrs.push(cidr);
        }
    }
    cidrs
}

/// The cluster network with the API server's addresses among its ranges, those that
/// `--cluster-cidr` does not hold already (the in-cluster address is in the service range).
pub fn with_api_server(mut network: ClusterNetwork, api_server: &[String]) -> ClusterNetwork {
    let known = network
        .cluster_cidrs
        .iter()
        .filter_map(|c| Cidr::parse(c).ok())
        .fold(IpSet::default(), |set, c| set.union(&IpSet::of(c)));
    for cidr in api_server {
        let inside = Cidr::parse(cidr).is_ok_and(|c| IpSet::of(c).is_subset(&known));
        if !inside {
            tracing::info!(%cidr, "the API server's address is among the cluster's ranges");
            network.cluster_cidrs.push(cidr.clone());
        }
    }
    network
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_servers_addresses_are_its_ips() {
        let env = |host: Option<&'static str>| {
            move |name: &str| {
                (name == "KUBERNETES_SERVICE_HOST")
                    .then(|| host.map(str::to_string))
                    .flatten()
            }
        };
        assert_eq!(
            api_server_cidrs("https://10.96.0.1:443", env(Some("10.96.0.1"))),
            ["10.96.0.1/32"]
        );
        assert_eq!(
            api_server_cidrs("https://203.0.113.7:6443/prefix", env(None)),
            ["203.0.113.7/32"]
        );
        assert_eq!(
            api_server_cidrs("https://[fd00::1]:6443", env(Some("fd00::10"))),
            ["fd00::10/128", "fd00::1/128"]
        );
        assert_eq!(
            api_server_cidrs("https://api.example.com", env(None)),
            Vec::<String>::new()
        );
        assert_eq!(
            api_server_cidrs("http://127.0.0.1", env(None)),
            ["127.0.0.1/32"]
        );
        // Only what --cluster-cidr does not hold joins the cluster's ranges.
        let network = with_api_server(
            default_cluster_network(),
            &["10.96.0.1/32".to_string(), "203.0.113.7/32".to_string()],
        );
        assert_eq!(
            network.cluster_cidrs,
            ["10.244.0.0/16", "10.96.0.0/12", "203.0.113.7/32"]
        );
    }
}
