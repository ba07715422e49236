//! A simulated kubelet, as kwok runs one: a new Pod is started (IP, Running, Ready) after a
//! delay, a deleted one stops and disappears after another. The work is queued here while the
//! state is locked; [`super::MemoryCluster`] runs it at once or later on tokio, and
//! `pod_lifecycle` carries it out on the state.

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::time::Duration;

use serde_json::Value;

use super::meta;
use super::store::ObjectKey;
use cubepod_kube::Resource;

/// A pod, by key and uid: a later pod of the same name is another pod.
#[derive(Clone, Debug)]
pub(crate) struct PodRef {
    pub(crate) key: ObjectKey,
    pub(crate) uid: String,
}

#[derive(Clone, Debug)]
pub(crate) enum Work {
    Start(PodRef),
    Stop(PodRef),
}

pub(crate) struct Kubelet {
    start_delay: Duration,
    stop_delay: Duration,
    ips: IpPool,
    /// Deleted pods whose grace period runs: the API keeps them even without finalizers.
    terminating: HashSet<String>,
    pending: Vec<Work>,
}

impl Kubelet {
    pub(crate) fn new(start_delay: Duration, stop_delay: Duration, network: Ipv4Addr) -> Self {
        Self {
            start_delay,
            stop_delay,
            ips: IpPool::new(network),
            terminating: HashSet::new(),
            pending: Vec::new(),
        }
    }

    /// Whether a deleted pod lingers (deletionTimestamp set) before it goes.
    pub(crate) fn stops_gracefully(&self) -> bool {
        !self.stop_delay.is_zero()
    }

    pub(crate) fn pod_created(&mut self, key: ObjectKey, uid: String) {
        self.pending.push(Work::Start(PodRef { key, uid }));
    }

    pub(crate) fn pod_deleting(&mut self, key: ObjectKey, uid: String) {
        self.terminating.insert(uid.clone());
        self.pending.push(Work::Stop(PodRef { key, uid }));
    }

    pub(crate) fn is_terminating(&self, uid: &str) -> bool {
        self.terminating.contains(uid)
    }

    /// An object was removed: if a pod, its IP is free again.
    pub(crate) fn forget(&mut self, resource: Resource, object: &Value) {
        if resource != Resource::Pod {
            return;
        }
        if let Some(uid) = meta::uid(object) {
            self.terminating.remove(uid);
        }
        if let Some(ip) = object.pointer("/status/podIP").and_then(Value::as_str) {
            self.ips.release(ip);
        }
    }

    /// How long `work` waits before it runs.
    pub(crate) fn delay(&self, work: &Work) -> Duration {
        match work {
            Work::Start(_) => self.start_delay,
            Work::Stop(_) => self.stop_delay,
        }
    }

    /// The work queued since the last call.
    pub(crate) fn take_pending(&mut self) -> Vec<Work> {
        std::mem::take(&mut self.pending)
    }

    /// A free pod IP, taken; `None` when every one is in use.
    pub(crate) fn allocate_ip(&mut self) -> Option<Ipv4Addr> {
        self.ips.allocate()
    }

    /// A deleted pod's grace period is over.
    pub(crate) fn stopped(&mut self, uid: &str) {
        self.terminating.remove(uid);
    }
}

/// Pod IPs from a /16 (10.244.0.0/16 by default), handed out counting up and reused once free.
struct IpPool {
    network: u32,
    next: u32,
    in_use: HashSet<u32>,
}

const POD_NETWORK_SIZE: u32 = 1 << 16;

impl IpPool {
    fn new(network: Ipv4Addr) -> Self {
        Self {
            network: u32::from(network) & !(POD_NETWORK_SIZE - 1),
            next: 1,
            in_use: HashSet::new(),
        }
    }

    fn allocate(&mut self) -> Option<Ipv4Addr> {
        for _ in 0..POD_NETWORK_SIZE {
            let offset = self.next;
            self.next = (self.next + 1) % POD_NETWORK_SIZE;
            // Skip the network and broadcast addresses.
            if offset == 0 || offset == POD_NETWORK_SIZE - 1 {
                continue;
            }
            if self.in_use.insert(offset) {
                return Some(Ipv4Addr::from(self.network + offset));
            }
        }
        None
    }

    fn release(&mut self, ip: &str) {
        let Ok(ip) = ip.parse::<Ipv4Addr>() else {
            return;
        };
        if let Some(offset) = u32::from(ip).checked_sub(self.network) {
            self.in_use.remove(&offset);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ips_count_up_and_are_reused_once_free() {
        let mut pool = IpPool::new(Ipv4Addr::new(10, 244, 0, 0));
        let first = pool.allocate().unwrap();
        assert_eq!(first, Ipv4Addr::new(10, 244, 0, 1));
        assert_eq!(pool.allocate().unwrap(), Ipv4Addr::new(10, 244, 0, 2));
        pool.release(&first.to_string());
        pool.next = 1;
        assert_eq!(pool.allocate().unwrap(), first);
        assert_eq!(pool.allocate().unwrap(), Ipv4Addr::new(10, 244, 0, 3));
    }

    #[test]
    fn ips_come_from_the_configured_network() {
        let mut pool = IpPool::new(Ipv4Addr::new(127, 11, 0, 0));
        let first = pool.allocate().unwrap();
        assert_eq!(first, Ipv4Addr::new(127, 11, 0, 1));
        pool.release(&first.to_string());
        pool.release("10.244.0.2");
        assert_eq!(pool.allocate().unwrap(), Ipv4Addr::new(127, 11, 0, 2));
    }

    #[test]
    fn the_pool_runs_out_without_looping_forever() {
        let mut pool = IpPool::new(Ipv4Addr::new(10, 244, 0, 0));
        let mut count = 0;
        while pool.allocate().is_some() {
            count += 1;
        }
        assert_eq!(count, POD_NETWORK_SIZE - 2);
    }
}
