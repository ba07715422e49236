//! A [`KubeClient`] that records each call and answers like a small cluster: what tests use
//! to check the exact calls and manifests a decision makes. Native builds only.

use crate::prelude::*;

use alloc::collections::BTreeMap;

use crate::bindings::KubeError;
use crate::client::{KubeClient, KubeResult};

/// One kube-client call as the policy made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    EnsurePvc {
        name: String,
        manifest: serde_json::Value,
    },
    DeletePvc {
        name: String,
    },
    EnsurePod {
        name: String,
        manifest: serde_json::Value,
    },
    DeletePod {
        name: String,
    },
    EnsureSecret {
        name: String,
        manifest: serde_json::Value,
    },
    DeleteSecret {
        name: String,
    },
    ApplyNetworkPolicy {
        name: String,
        manifest: serde_json::Value,
    },
    DeleteNetworkPolicy {
        name: String,
    },
    ApplyService {
        name: String,
        manifest: serde_json::Value,
    },
    DeleteService {
        name: String,
    },
}

impl Call {
    /// A short form for assertions: `"ensure-pvc a-workspace"`.
    pub fn summary(&self) -> String {
        match self {
            Call::EnsurePvc { name, .. } => format!("ensure-pvc {name}"),
            Call::DeletePvc { name } => format!("delete-pvc {name}"),
            Call::EnsurePod { name, .. } => format!("ensure-pod {name}"),
            Call::DeletePod { name } => format!("delete-pod {name}"),
            Call::EnsureSecret { name, .. } => format!("ensure-secret {name}"),
            Call::DeleteSecret { name } => format!("delete-secret {name}"),
            Call::ApplyNetworkPolicy { name, .. } => format!("apply-network-policy {name}"),
            Call::DeleteNetworkPolicy { name } => format!("delete-network-policy {name}"),
            Call::ApplyService { name, .. } => format!("apply-service {name}"),
            Call::DeleteService { name } => format!("delete-service {name}"),
        }
    }

    pub fn manifest(&self) -> Option<&serde_json::Value> {
        match self {
            Call::EnsurePvc { manifest, .. }
            | Call::EnsurePod { manifest, .. }
            | Call::EnsureSecret { manifest, .. }
            | Call::ApplyNetworkPolicy { manifest, .. }
            | Call::ApplyService { manifest, .. } => Some(manifest),
            _ => None,
        }
    }
}

/// Accepts every call and only counts them; `ensure-pod` answers with no IP yet. What the
/// benchmarks use, so that they measure the decision and not a test double.
#[derive(Default)]
pub struct NullClient {
    pub calls: u32,
}

impl NullClient {
    fn call(&mut self) -> KubeResult<()> {
        self.calls += 1;
        Ok(())
    }
}

impl KubeClient for NullClient {
    fn ensure_pvc(&mut self, _: &str, _: &str, _: &str) -> KubeResult<()> {
        self.call()
    }
    fn delete_pvc(&mut self, _: &str, _: &str) -> KubeResult<()> {
        self.call()
    }
    fn ensure_pod(&mut self, _: &str, _: &str, _: &str) -> KubeResult<Option<String>> {
        self.call().map(|()| None)
    }
    fn delete_pod(&mut self, _: &str, _: &str) -> KubeResult<()> {
        self.call()
    }
    fn ensure_secret(&mut self, _: &str, _: &str, _: &str) -> KubeResult<()> {
        self.call()
    }
    fn delete_secret(&mut self, _: &str, _: &str) -> KubeResult<()> {
        self.call()
    }
    fn apply_network_policy(&mut self, _: &str, _: &str, _: &str) -> KubeResult<()> {
        self.call()
    }
    fn delete_network_policy(&mut self, _: &str, _: &str) -> KubeResult<()> {
        self.call()
    }
    fn apply_service(&mut self, _: &str, _: &str, _: &str) -> KubeResult<()> {
        self.call()
    }
    fn delete_service(&mut self, _: &str, _: &str) -> KubeResult<()> {
        self.call()
    }
}

#[derive(Default)]
pub struct RecordingClient {
    pub calls: Vec<Call>,
    /// The IP that `ensure-pod` answers with.
    pub pod_ip: Option<String>,
    /// Fail the call whose summary is this, once, with this error.
    pub fail: Option<(String, KubeError)>,
    /// The objects that exist, by summary-style key ("pvc a-workspace").
    pub objects: BTreeMap<String, serde_json::Value>,
}

impl RecordingClient {
    pub fn summaries(&self) -> Vec<String> {
        self.calls.iter().map(Call::summary).collect()
    }

    pub fn take_summaries(&mut self) -> Vec<String> {
        let summaries = self.summaries();
        self.calls.clear();
        summaries
    }

    fn record(&mut self, call: Call) -> KubeResult<()> {
        let summary = call.summary();
        if self.fail.as_ref().is_some_and(|(s, _)| *s == summary)
            && let Some((_, error)) = self.fail.take()
        {
            return Err(error);
        }
        self.calls.push(call);
        Ok(())
    }

    fn parse(manifest: &str) -> serde_json::Value {
        serde_json::from_str(manifest).unwrap_or(serde_json::Value::String(manifest.to_string()))
    }

    fn ensure(&mut self, kind: &str, name: &str, manifest: &serde_json::Value) {
        self.objects
            .entry(format!("{kind} {name}"))
            .or_insert_with(|| manifest.clone());
    }

    /// An apply replaces what exists.
    fn apply(&mut self, kind: &str, name: &str, manifest: serde_json::Value) {
        self.objects.insert(format!("{kind} {name}"), manifest);
    }

    fn delete(&mut self, kind: &str, name: &str) {
        self.objects.remove(&format!("{kind} {name}"));
    }
}

impl KubeClient for RecordingClient {
    fn ensure_pvc(&mut self, _namespace: &str, name: &str, manifest: &str) -> KubeResult<()> {
        let manifest = Self::parse(manifest);
        self.record(Call::EnsurePvc {
            name: name.to_string(),
            manifest: manifest.clone(),
        })?;
        self.ensure("pvc", name, &manifest);
        Ok(())
    }

    fn delete_pvc(&mut self, _namespace: &str, name: &str) -> KubeResult<()> {
        self.record(Call::DeletePvc {
            name: name.to_string(),
        })?;
        self.delete("pvc", name);
        Ok(())
    }

    fn ensure_pod(
        &mut self,
        _namespace: &str,
        name: &str,
        manifest: &str,
    ) -> KubeResult<Option<String>> {
        let manifest = Self::parse(manifest);
        self.record(Call::EnsurePod {
            name: name.to_string(),
            manifest: manifest.clone(),
        })?;
        self.ensure("pod", name, &manifest);
        Ok(self.pod_ip.clone())
    }

    fn delete_pod(&mut self, _namespace: &str, name: &str) -> KubeResult<()> {
        self.record(Call::DeletePod {
            name: name.to_string(),
        })?;
        self.delete("pod", name);
        Ok(())
    }

    fn ensure_secret(&mut self, _namespace: &str, name: &str, manifest: &str) -> KubeResult<()> {
        let manifest = Self::parse(manifest);
        self.record(Call::EnsureSecret {
            name: name.to_string(),
            manifest: manifest.clone(),
        })?;
        self.ensure("secret", name, &manifest);
        Ok(())
    }

    fn delete_secret(&mut self, _namespace: &str, name: &str) -> KubeResult<()> {
        self.record(Call::DeleteSecret {
            name: name.to_string(),
        })?;
        self.delete("secret", name);
        Ok(())
    }

    fn apply_network_policy(
        &mut self,
        _namespace: &str,
        name: &str,
        manifest: &str,
    ) -> KubeResult<()> {
        let manifest = Self::parse(manifest);
        self.record(Call::ApplyNetworkPolicy {
            name: name.to_string(),
            manifest: manifest.clone(),
        })?;
        self.apply("networkpolicy", name, manifest);
        Ok(())
    }

    fn delete_network_policy(&mut self, _namespace: &str, name: &str) -> KubeResult<()> {
        self.record(Call::DeleteNetworkPolicy {
            name: name.to_string(),
        })?;
        self.delete("networkpolicy", name);
        Ok(())
    }

    fn apply_service(&mut self, _namespace: &str, name: &str, manifest: &str) -> KubeResult<()> {
        let manifest = Self::parse(manifest);
        self.record(Call::ApplyService {
            name: name.to_string(),
            manifest: manifest.clone(),
        })?;
        self.apply("service", name, manifest);
        Ok(())
    }

    fn delete_service(&mut self, _namespace: &str, name: &str) -> KubeResult<()> {
        self.record(Call::DeleteService {
            name: name.to_string(),
        })?;
        self.delete("service", name);
        Ok(())
    }
}
