//! A Pod's lifecycle as the simulated kubelet ([`super::kubelet`]) carries it out on the state:
//! its queued work run when due, a started pod given an IP and a Running, Ready status, a
//! stopped one removed once no finalizer holds it.

use std::net::Ipv4Addr;
use std::time::Duration;

use serde_json::{Value, json};

use super::kubelet::{PodRef, Work};
use super::meta;
use super::state::State;

impl State {
    /// Runs the queued kubelet work that is due now (and what it queues in turn); returns the
    /// work that must wait, with its delay.
    pub(crate) fn settle(&mut self) -> Vec<(Duration, Work)> {
        let mut later = Vec::new();
        loop {
            let batch = self.kubelet.take_pending();
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
        let Some(ip) = self.kubelet.allocate_ip() else {
            tracing::warn!(pod = %pod.key, "memory cluster: pod IPs exhausted, pod stays Pending");
            return;
        };
        let mut next = (*current).clone();
        let status = running_status(&current, ip, &meta::now());
        meta::object_mut(&mut next).insert("status".into(), status);
        self.update(pod.key.clone(), next, current);
    }

    fn stop_pod(&mut self, pod: &PodRef) {
        self.kubelet.stopped(&pod.uid);
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

#[cfg(test)]
mod tests {
    use super::*;

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
