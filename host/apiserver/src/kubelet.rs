//! A simulated kubelet, as kwok runs one: a new Pod is started (IP, Running, Ready) after a
//! delay, a deleted one stops and disappears after another. The work is queued here while the
//! state is locked; [`super::MemoryCluster`] runs it at once or later on tokio.

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::time::Duration;

use serde_json::{Value, json};

use super::meta;
use super::state::State;
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
    pub(crate) fn new(start_delay: Duration, stop_delay: Duration) -> Self {
        Self {
            start_delay,
            stop_delay,
            ips: IpPool::default(),
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

    fn delay(&self, work: &Work) -> Duration {
        match work {
            Work::Start(_) => self.start_delay,
            Work::Stop(_) => self.stop_delay,
        }
    }
}

impl State {
    /// Runs the queued kubelet work that is due now (and what it queues in turn); returns the
    /// work that must wait, with its delay.
    pub(crate) fn settle(&mut self) -> Vec<(Duration, Work)> {
        let mut later = Vec::new();
        loop {
            let batch = std::mem::take(&mut self.kubelet.pending);
            if batch.is_empty() {
                return later;
            }
            for work in batch {
                let delay = self.kubelet.delay(&work);
                if delay.is_zero() {
                    self.run_kubelet(work);
                } else {
                    later.push((delay, work));
                }
            }
        }
    }

    pub(crate) fn run_kubelet(&mut self, work: Work) {
        match work {
            Work::Start(pod) => self.start_pod(&pod),
            Work::Stop(pod) => self.stop_pod(&pod),
        }
    }

    fn start_pod(&mut self, pod: &PodRef) {
        let Some(current) = self.store.get(&pod.key).cloned() else {
            return;
        };
        if meta::uid(&current) != Some(pod.uid.as_str()) || meta::is_deleting(&current) {
            return;
        }
        let Some(ip) = self.kubelet.ips.allocate() else {
            tracing::warn!(pod = %pod.key, "memory cluster: pod IPs exhausted, pod stays Pending");
            return;
        };
        let mut next = (*current).clone();
        let status = running_status(&current, ip, &meta::now());
        meta::object_mut(&mut next).insert("status".into(), status);
        self.update(pod.key.clone(), next, current);
    }

    fn stop_pod(&mut self, pod: &PodRef) {
        self.kubelet.terminating.remove(&pod.uid);
        let Some(current) = self.store.get(&pod.key).cloned() else {
            return;
        };
        // Finalizers still hold it: the patch that clears the last one removes it.
        if meta::uid(&current) == Some(pod.uid.as_str()) && meta::finalizers(&current).is_empty() {
            self.remove(&pod.key, (*current).clone());
        }
    }
}

/// The status kwok reports for a started pod: every container running and ready.
fn running_status(pod: &Value, ip: Ipv4Addr, now: &str) -> Value {
    let containers = |field: &str| -> Vec<(Value, Value)> {
        pod.pointer(&format!("/spec/{field}"))
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .map(|c| {
                        let get = |k| c.get(k).cloned().unwrap_or(Value::Null);
                        (get("name"), get("image"))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let init_statuses: Vec<Value> = containers("initContainers")
        .into_iter()
        .map(|(name, image)| {
            json!({"name": name, "image": image, "ready": true, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                    "startedAt": now, "finishedAt": now}}})
        })
        .collect();
    let statuses: Vec<Value> = containers("containers")
        .into_iter()
        .map(|(name, image)| {
            json!({"name": name, "image": image, "ready": true, "started": true,
                "restartCount": 0, "state": {"running": {"startedAt": now}}})
        })
        .collect();
    let condition = |kind: &str| json!({"type": kind, "status": "True", "lastTransitionTime": now});
    json!({
        "phase": "Running",
        "podIP": ip.to_string(),
        "podIPs": [{"ip": ip.to_string()}],
        "startTime": now,
        "conditions": [
            condition("PodScheduled"),
            condition("Initialized"),
            condition("ContainersReady"),
            condition("Ready"),
        ],
        "initContainerStatuses": init_statuses,
        "containerStatuses": statuses,
    })
}

/// Pod IPs from 10.244.0.0/16, handed out counting up and reused once free.
struct IpPool {
    next: u32,
    in_use: HashSet<u32>,
}

const POD_NETWORK: u32 = u32::from_be_bytes([10, 244, 0, 0]);
const POD_NETWORK_SIZE: u32 = 1 << 16;

impl Default for IpPool {
    fn default() -> Self {
        Self {
            next: 1,
            in_use: HashSet::new(),
        }
    }
}

impl IpPool {
    fn allocate(&mut self) -> Option<Ipv4Addr> {
        for _ in 0..POD_NETWORK_SIZE {
            let offset = self.next;
            self.next = (self.next + 1) % POD_NETWORK_SIZE;
            // Skip the network and broadcast addresses.
            if offset == 0 || offset == POD_NETWORK_SIZE - 1 {
                continue;
            }
            if self.in_use.insert(offset) {
                return Some(Ipv4Addr::from(POD_NETWORK + offset));
            }
        }
        None
    }

    fn release(&mut self, ip: &str) {
        let Ok(ip) = ip.parse::<Ipv4Addr>() else {
            return;
        };
        if let Some(offset) = u32::from(ip).checked_sub(POD_NETWORK) {
            self.in_use.remove(&offset);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ips_count_up_and_are_reused_once_free() {
        let mut pool = IpPool::default();
        let first = pool.allocate().unwrap();
        assert_eq!(first, Ipv4Addr::new(10, 244, 0, 1));
        assert_eq!(pool.allocate().unwrap(), Ipv4Addr::new(10, 244, 0, 2));
        pool.release(&first.to_string());
        pool.next = 1;
        assert_eq!(pool.allocate().unwrap(), first);
        assert_eq!(pool.allocate().unwrap(), Ipv4Addr::new(10, 244, 0, 3));
    }

    #[test]
    fn the_pool_runs_out_without_looping_forever() {
        let mut pool = IpPool::default();
        let mut count = 0;
        while pool.allocate().is_some() {
            count += 1;
        }
        assert_eq!(count, POD_NETWORK_SIZE - 2);
    }

    #[test]
    fn running_status_reports_every_container_ready() {
        let pod = json!({"spec": {"initContainers": [{"name": "prep", "image": "i"}],
            "containers": [{"name": "main", "image": "m"}]}});
        let status = running_status(&pod, Ipv4Addr::new(10, 244, 0, 9), "2026-01-01T00:00:00Z");
        assert_eq!(status["phase"], "Running");
        assert_eq!(status["podIP"], "10.244.0.9");
        assert_eq!(status["containerStatuses"][0]["ready"], true);
        assert_eq!(status["initContainerStatuses"][0]["name"], "prep");
        let ready = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        assert!(ready);
    }
}
