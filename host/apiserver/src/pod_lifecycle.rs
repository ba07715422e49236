//! A Pod's lifecycle as the simulated kubelet ([`super::kubelet`]) carries it out on the state:
//! its queued work run when due, a started pod given an IP and a Running, Ready status, a
//! stopped one removed once no finalizer holds it.

use std::net::Ipv4Addr;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

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

/// The status kwok reports for a started pod: every container running and ready, each with the
/// ids a container runtime reports (`imageID`, `containerID`: strings the API requires), made
/// from the image, the pod's uid and the container's name so that they stay the same.
fn running_status(pod: &Value, ip: Ipv4Addr, now: &str) -> Value {
    let uid = meta::uid(pod).unwrap_or_default();
    let containers = |field: &str| -> Vec<Value> {
        pod.pointer(&format!("/spec/{field}"))
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .map(|c| {
                        let name = c.get("name").and_then(Value::as_str).unwrap_or_default();
                        let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
                        json!({
                            "name": name,
                            "image": image,
                            "imageID": image_id(image),
                            "containerID": format!("containerd://{}", digest(&[uid, name])),
                            "restartCount": 0,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let with = |mut status: Value, fields: Value| {
        if let (Some(status), Some(fields)) = (status.as_object_mut(), fields.as_object()) {
            status.extend(fields.clone());
        }
        status
    };
    let init_statuses: Vec<Value> = containers("initContainers")
        .into_iter()
        .map(|status| {
            with(
                status,
                json!({"ready": true, "started": false,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                    "startedAt": now, "finishedAt": now}}}),
            )
        })
        .collect();
    let statuses: Vec<Value> = containers("containers")
        .into_iter()
        .map(|status| {
            with(
                status,
                json!({"ready": true, "started": true,
                "state": {"running": {"startedAt": now}}}),
            )
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

/// The hex SHA-256 of `parts`, joined by `/`.
fn digest(parts: &[&str]) -> String {
    hex::encode(Sha256::digest(parts.join("/")))
}

/// The image pinned to a digest, as containerd reports it (`repo@sha256:...`), the digest made
/// from the reference: the simulated kubelet pulls nothing.
fn image_id(image: &str) -> String {
    if image.contains("@sha256:") {
        return image.to_owned();
    }
    // A tag follows the last `:` after the last `/` (a `:` before it is a registry's port).
    let repository = match image.rsplit_once(':') {
        Some((repository, tag)) if !tag.contains('/') => repository,
        _ => image,
    };
    format!("{repository}@sha256:{}", digest(&[image]))
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
        let main = &status["containerStatuses"][0];
        assert!(main["imageID"].as_str().unwrap().starts_with("m@sha256:"));
        assert!(
            main["containerID"]
                .as_str()
                .unwrap()
                .starts_with("containerd://")
        );
        assert_eq!(
            image_id("registry:5000/team/app:1.2"),
            format!(
                "registry:5000/team/app@sha256:{}",
                digest(&["registry:5000/team/app:1.2"])
            )
        );
        assert_eq!(image_id("a@sha256:00"), "a@sha256:00");
        assert_eq!(status["initContainerStatuses"][0]["name"], "prep");
        let ready = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        assert!(ready);
    }
}
