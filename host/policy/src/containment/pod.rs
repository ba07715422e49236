//! The sandbox Pod profile: a field allowlist of what a sandbox's Pod needs, the Pod Security
//! Standards level (baseline or restricted, as kubernetes.io defines them), the Kata runtime
//! class, the sandbox's own volumes and Secret, and one service account without a token.

use std::fmt;

use super::json::{Json, Object};
use super::{
    Containment, Fields, Refusal, Rule, SandboxScope, clip, format_bytes, nth, quantity, short, sub,
};
use crate::model::names;

#[path = "pod_placement.rs"]
mod placement;

/// The Pod Security Standards level a sandbox's Pod must meet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
// Undocumented variants: clap would print a variant's doc as its help in `--help`.
#[allow(missing_docs)]
pub enum PodSecurity {
    #[default]
    Baseline,
    Restricted,
}

/// Pod spec fields outside the sandbox profile that an operator may allow by flag: they
/// steer scheduling, not what the Pod can reach.
pub const WIDENABLE_POD_FIELDS: [&str; 8] = [
    "affinity",
    "tolerations",
    "nodeSelector",
    "priorityClassName",
    "topologySpreadConstraints",
    "schedulerName",
    "dnsConfig",
    "hostAliases",
];

/// Node keys (taint keys and label keys alike) a Pod may neither tolerate nor select its node
/// by unless the operator lists them (`--allow-node-key`): the control plane's (its taints
/// keep workloads off it, its labels pick it), a cordoned node's taint, and a node's own name
/// (choosing the node of another workload). Avoiding them (`NotIn`, `DoesNotExist`) is free.
pub const RESERVED_NODE_KEYS: [&str; 4] = [
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
    "node.kubernetes.io/unschedulable",
    "kubernetes.io/hostname",
];

/// The scheduler a Pod gets when it names none.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// How much a sandbox's Pod may ask of a node and how long it may take to stop: per container
/// and for the Pod as a whole, and the same for the Sandbox's own `spec.resources`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodBounds {
    /// The most `terminationGracePeriodSeconds` (the Pod's and a probe's) may be: pause,
    /// reset, reap and delete wait this long on a VM that ignores SIGTERM.
    pub termination_grace_seconds: u64,
    /// The most `activeDeadlineSeconds` may be (absent is no deadline, as Kubernetes has it).
    pub active_deadline_seconds: u64,
    /// CPU, in millicores.
    pub cpu_milli: u128,
    /// Memory, in bytes.
    pub memory_bytes: u128,
    /// Ephemeral storage, in bytes.
    pub ephemeral_storage_bytes: u128,
}

impl Default for PodBounds {
    fn default() -> Self {
        Self {
            termination_grace_seconds: 30,
            active_deadline_seconds: 30 * 24 * 3600,
            cpu_milli: 16_000,
            memory_bytes: 64 << 30,
            ephemeral_storage_bytes: 100 << 30,
        }
    }
}

impl PodBounds {
    /// The amount `text` of `resource` (`cpu`, `memory`, `ephemeral-storage`), in the unit its
    /// bound is kept in, if it is a quantity within that bound; else why not.
    pub(crate) fn amount(&self, resource: &str, text: &str) -> Result<u128, String> {
        let (value, max, flag) = match resource {
            "cpu" => (
                quantity::parse_ceil_milli(text),
                self.cpu_milli,
                "--max-sandbox-cpu",
            ),
            "memory" => (
                quantity::parse_ceil(text),
                self.memory_bytes,
                "--max-sandbox-memory",
            ),
            "ephemeral-storage" => (
                quantity::parse_ceil(text),
                self.ephemeral_storage_bytes,
                "--max-sandbox-ephemeral-storage",
            ),
            _ => {
                return Err(format!(
                    "{resource:?} is not a resource a sandbox may ask for"
                ));
            }
        };
        let value = value.map_err(|e| format!("{:?} {e}", clip(text, 64)))?;
        if value > max {
            return Err(format!(
                "{:?} is more {resource} than a sandbox may have, {} ({flag})",
                clip(text, 64),
                self.show(resource, max)
            ));
        }
        Ok(value)
    }

    /// `amount` of `resource` as a user writes it.
    pub(crate) fn show(&self, resource: &str, amount: u128) -> String {
        if resource == "cpu" {
            quantity::format_milli(amount)
        } else {
            format_bytes(amount)
        }
    }

    /// The bound of `resource`, in its unit.
    pub(crate) fn max(&self, resource: &str) -> u128 {
        match resource {
            "cpu" => self.cpu_milli,
            "memory" => self.memory_bytes,
            _ => self.ephemeral_storage_bytes,
        }
    }

    /// A Sandbox's (or a pool template's) own `resources`: the field at fault and why, if
    /// either is past its bound. `prefix` is where the spec sits (`spec`, `spec.template`).
    pub(crate) fn check_spec(
        &self,
        prefix: &str,
        cpu: Option<&str>,
        memory: Option<&str>,
    ) -> Result<(), (String, String)> {
        for (resource, text) in [("cpu", cpu), ("memory", memory)] {
            if let Some(text) = text {
                self.amount(resource, text)
                    .map_err(|why| (format!("{prefix}.resources.{resource}"), why))?;
            }
        }
        Ok(())
    }
}

/// Pod spec fields a sandbox's Pod may set; `WIDENABLE_POD_FIELDS` by flag.
const SPEC_FIELDS: [&str; 22] = [
    "runtimeClassName",
    "restartPolicy",
    "automountServiceAccountToken",
    "serviceAccountName",
    "serviceAccount",
    "enableServiceLinks",
    "initContainers",
    "containers",
    "volumes",
    "securityContext",
    "imagePullSecrets",
    "terminationGracePeriodSeconds",
    "activeDeadlineSeconds",
    "dnsPolicy",
    "hostname",
    "subdomain",
    "setHostnameAsFQDN",
    "shareProcessNamespace",
    "hostUsers",
    // Pod Security Standards, baseline: only false.
    "hostNetwork",
    "hostPID",
    "hostIPC",
];

const CONTAINER_FIELDS: [&str; 22] = [
    "name",
    "image",
    "command",
    "args",
    "workingDir",
    "env",
    "envFrom",
    "resources",
    "volumeMounts",
    "volumeDevices",
    "ports",
    "securityContext",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
    "imagePullPolicy",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "stdin",
    "stdinOnce",
    "tty",
];

/// Baseline, "Capabilities": what `capabilities.add` may hold.
const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Baseline, "Sysctls": the safe set.
const SAFE_SYSCTLS: [&str; 10] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// Baseline, "SELinux": the allowed `seLinuxOptions.type` values (empty too).
const SELINUX_TYPES: [&str; 5] = [
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// Baseline, "Seccomp" and "AppArmor": any profile but Unconfined.
const CONFINED_PROFILES: [&str; 2] = ["RuntimeDefault", "Localhost"];

/// Resources a container may request: no extended resources (devices) nor claims.
const RESOURCE_NAMES: [&str; 3] = ["cpu", "memory", "ephemeral-storage"];

pub(super) fn check(
    rules: &Containment,
    scope: &SandboxScope,
    what: &dyn std::fmt::Display,
    pod: &Json<'_>,
) -> Result<(), Refusal> {
    let f = Fields::new(Rule::Pod, what);
    f.object(pod, "", &["apiVersion", "kind", "metadata", "spec"])?;
    let spec = f.required(pod, "", "spec")?;
    let spec = f.object_with(spec, "spec", |key| {
        SPEC_FIELDS.contains(&key)
            || (WIDENABLE_POD_FIELDS.contains(&key) && rules.extra_pod_fields.contains(key))
    })?;
    let pod_check = PodCheck { rules, scope, f };
    pod_check.spec(spec)
}

struct PodCheck<'a> {
    rules: &'a Containment,
    scope: &'a SandboxScope,
    f: Fields<'a>,
}

impl PodCheck<'_> {
    fn refuse(&self, field: impl fmt::Display, reason: impl Into<String>) -> Refusal {
        self.f.refuse(field, reason)
    }

    fn spec(&self, spec: &Object<'_>) -> Result<(), Refusal> {
        match spec.get("runtimeClassName").and_then(Json::as_str) {
            Some(class) if self.rules.runtime_classes.contains(class) => {}
            other => {
                return Err(self.refuse(
                    "spec.runtimeClassName",
                    format!(
                        "{} is not an allowed runtime class ({:?}, --allowed-runtime-classes): \
                         a sandbox runs in a VM",
                        other.map_or("missing".to_string(), |c| format!(
                            "{:?}",
                            super::clip(c, 64)
                        )),
                        self.rules.runtime_classes
                    ),
                ));
            }
        }
        if spec
            .get("automountServiceAccountToken")
            .and_then(Json::as_bool)
            != Some(false)
        {
            return Err(self.refuse(
                "spec.automountServiceAccountToken",
                "must be false: a sandbox gets no Kubernetes API credentials",
            ));
        }
        let account = &self.rules.service_account;
        for key in ["serviceAccountName", "serviceAccount"] {
            if let Some(name) = spec.get(key)
                && name.as_str() != Some(account.as_str())
            {
                return Err(self.refuse(
                    format!("spec.{key}"),
                    format!(
                        "{} is not the sandbox service account {account:?} \
                         (--sandbox-service-account)",
                        short(name)
                    ),
                ));
            }
        }
        if account != "default"
            && !spec.contains_key("serviceAccountName")
            && !spec.contains_key("serviceAccount")
        {
            return Err(self.refuse(
                "spec.serviceAccountName",
                format!("missing: the Pod would run as \"default\", not {account:?}"),
            ));
        }
        // Baseline, "Host Namespaces".
        for key in ["hostNetwork", "hostPID", "hostIPC"] {
            self.must_be_false(spec, key, &sub(&"spec", key))?;
        }
        self.grace(spec.get("terminationGracePeriodSeconds"), &"spec")?;
        if let Some(deadline) = spec.get("activeDeadlineSeconds") {
            let max = self.rules.pod_bounds.active_deadline_seconds;
            if !deadline.as_u64().is_some_and(|d| (1..=max).contains(&d)) {
                return Err(self.refuse(
                    "spec.activeDeadlineSeconds",
                    format!(
                        "{} is not a whole number of seconds from 1 to {max} \
                        (--max-active-deadline)",
                        short(deadline)
                    ),
                ));
            }
        }
        self.placement(spec)?;
        if let Some(pull) = spec.get("imagePullSecrets") {
            for (i, secret) in self
                .f
                .array(pull, "spec.imagePullSecrets")?
                .iter()
                .enumerate()
            {
                let field = nth(&"spec.imagePullSecrets", i);
                let map = self.f.object(secret, field, &["name"])?;
                self.secret_ref(map.get("name"), &sub(&field, "name"))?;
            }
        }
        let pod_context = match spec.get("securityContext") {
            Some(context) => Some(self.pod_security_context(context)?),
            None => None,
        };
        if let Some(volumes) = spec.get("volumes") {
            for (i, volume) in self.f.array(volumes, "spec.volumes")?.iter().enumerate() {
                self.volume(volume, &nth(&"spec.volumes", i))?;
            }
        }
        let containers = spec
            .get("containers")
            .ok_or_else(|| self.refuse("spec.containers", "required, and missing"))?;
        let containers = self.f.array(containers, "spec.containers")?;
        if containers.is_empty() {
            return Err(self.refuse("spec.containers", "no container"));
        }
        let mut total = PodTotal::default();
        for (list, values) in [
            ("containers", Some(containers)),
            (
                "initContainers",
                spec.get("initContainers")
                    .map(|v| self.f.array(v, "spec.initContainers"))
                    .transpose()?,
            ),
        ] {
            for (i, container) in values.into_iter().flatten().enumerate() {
                let amounts =
                    self.container(container, list, &nth(&sub(&"spec", list), i), pod_context)?;
                total.add(list, container, &amounts);
            }
        }
        self.pod_total(&total)
    }

    /// A grace period (the Pod's, or a probe's) at `field`: at most the operator's bound.
    fn grace(&self, value: Option<&Json<'_>>, field: &dyn fmt::Display) -> Result<(), Refusal> {
        let Some(value) = value.filter(|v| !v.is_null()) else {
            return Ok(());
        };
        let max = self.rules.pod_bounds.termination_grace_seconds;
        if value.as_u64().is_some_and(|g| g <= max) {
            return Ok(());
        }
        Err(self.refuse(
            sub(&field, "terminationGracePeriodSeconds"),
            format!(
                "{} is not a whole number of seconds up to {max} \
                 (--max-termination-grace-period): stopping, pausing or resetting the sandbox \
                 waits this long on a VM that ignores SIGTERM",
                short(value)
            ),
        ))
    }

    /// A container's resources: each amount at most the sandbox's bound; returns them.
    fn resources(
        &self,
        resources: &Json<'_>,
        field: &dyn fmt::Display,
    ) -> Result<Amounts, Refusal> {
        let resources = self.f.object(resources, field, &["requests", "limits"])?;
        let mut amounts = Amounts::default();
        for (part, values) in resources {
            let f = sub(&field, part);
            let values = self.f.object(values, f, &RESOURCE_NAMES)?;
            for (resource, value) in values {
                let text = match value {
                    Json::String(s) => s.to_string(),
                    // Kubernetes reads a quantity from a JSON number as from its text.
                    Json::Number(n) => n.to_string(),
                    other => {
                        return Err(self.refuse(
                            sub(&f, resource),
                            format!("{} is not a quantity", short(other)),
                        ));
                    }
                };
                let amount = self
                    .rules
                    .pod_bounds
                    .amount(resource, &text)
                    .map_err(|why| self.refuse(sub(&f, resource), why))?;
                let slot = Amounts::index(resource);
                if part == "requests" {
                    amounts.requests[slot] = Some(amount);
                } else {
                    amounts.limits[slot] = Some(amount);
                }
            }
        }
        Ok(amounts)
    }

    /// The Pod's requests and limits as the scheduler counts them: at most the sandbox's bound.
    fn pod_total(&self, total: &PodTotal) -> Result<(), Refusal> {
        let bounds = &self.rules.pod_bounds;
        for (part, sums) in [("requests", total.requests()), ("limits", total.limits())] {
            for (slot, resource) in RESOURCE_NAMES.iter().enumerate() {
                let max = bounds.max(resource);
                if sums[slot] > max {
                    return Err(self.refuse(
                        format!("spec.containers[*].resources.{part}.{resource}"),
                        format!(
                            "the Pod's {part} come to {} of {resource} (its containers and \
                             sidecars, or its largest init container, as the scheduler counts \
                             them), more than a sandbox may have, {} (--max-sandbox-{resource})",
                            bounds.show(resource, sums[slot]),
                            bounds.show(resource, max)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    fn must_be_false(
        &self,
        map: &Object<'_>,
        key: &str,
        field: &dyn fmt::Display,
    ) -> Result<(), Refusal> {
        match map.get(key) {
            None | Some(Json::Bool(false)) => Ok(()),
            Some(other) => Err(self.refuse(
                field,
                format!(
                    "{} is not allowed (Pod Security Standards, baseline)",
                    short(other)
                ),
            )),
        }
    }

    /// The Secret a Pod references: the sandbox's own, or one the operator names.
    fn secret_ref(&self, name: Option<&Json<'_>>, field: &dyn fmt::Display) -> Result<(), Refusal> {
        let own = names::secret(&self.scope.name);
        match name.and_then(Json::as_str) {
            Some(name) if name == own || self.rules.secret_refs.contains(name) => Ok(()),
            _ => Err(self.refuse(
                field,
                format!(
                    "{} is not the sandbox's Secret {own:?} nor one allowed by \
                     --allowed-secret-refs",
                    name.map_or("nothing".to_string(), short)
                ),
            )),
        }
    }

    fn config_map_ref(
        &self,
        name: Option<&Json<'_>>,
        field: &dyn fmt::Display,
    ) -> Result<(), Refusal> {
        match name.and_then(Json::as_str) {
            Some(name) if self.rules.config_map_refs.contains(name) => Ok(()),
            _ => Err(self.refuse(
                field,
                format!(
                    "{} is not a ConfigMap allowed by --allowed-config-map-refs",
                    name.map_or("nothing".to_string(), short)
                ),
            )),
        }
    }

    fn volume(&self, volume: &Json<'_>, field: &dyn fmt::Display) -> Result<(), Refusal> {
        const SOURCES: [&str; 6] = [
            "persistentVolumeClaim",
            "secret",
            "emptyDir",
            "downwardAPI",
            "configMap",
            "projected",
        ];
        let map = self
            .f
            .object_with(volume, field, |key| key == "name" || SOURCES.contains(&key))?;
        let mut sources = map.iter().filter(|(k, _)| *k != "name");
        let (Some((source, value)), None) = (sources.next(), sources.next()) else {
            return Err(self.refuse(field, "a volume has exactly one source"));
        };
        let field = sub(&field, source);
        match source {
            "persistentVolumeClaim" => {
                let pvc = self.f.object(value, field, &["claimName", "readOnly"])?;
                let allowed = self.scope.volumes();
                match pvc.get("claimName").and_then(Json::as_str) {
                    Some(claim) if allowed.iter().any(|a| a == claim) => Ok(()),
                    other => Err(self.refuse(
                        format!("{field}.claimName"),
                        format!(
                            "{} is not one of the sandbox's current volumes {allowed:?}",
                            other.map_or("missing".to_string(), |c| format!(
                                "{:?}",
                                super::clip(c, 128)
                            ))
                        ),
                    )),
                }
            }
            "secret" => {
                let secret = self.f.object(
                    value,
                    field,
                    &["secretName", "items", "defaultMode", "optional"],
                )?;
                self.key_paths(secret.get("items"), &sub(&field, "items"))?;
                self.secret_ref(secret.get("secretName"), &sub(&field, "secretName"))
            }
            "configMap" => {
                let map =
                    self.f
                        .object(value, field, &["name", "items", "defaultMode", "optional"])?;
                self.key_paths(map.get("items"), &sub(&field, "items"))?;
                self.config_map_ref(map.get("name"), &sub(&field, "name"))
            }
            "emptyDir" => {
                let dir = self.f.object(value, field, &["medium", "sizeLimit"])?;
                match dir.get("medium") {
                    None => Ok(()),
                    Some(Json::String(m)) if m.is_empty() || m == "Memory" => Ok(()),
                    Some(other) => Err(self.refuse(
                        format!("{field}.medium"),
                        format!("{} is not \"\" or \"Memory\"", short(other)),
                    )),
                }
            }
            "downwardAPI" => {
                let api = self.f.object(value, field, &["items", "defaultMode"])?;
                self.downward_items(api.get("items"), &sub(&field, "items"))
            }
            _ => {
                let projected = self.f.object(value, field, &["sources", "defaultMode"])?;
                let Some(sources) = projected.get("sources") else {
                    return Ok(());
                };
                for (i, source) in self
                    .f
                    .array(sources, sub(&field, "sources"))?
                    .iter()
                    .enumerate()
                {
                    self.projection(source, &nth(&sub(&field, "sources"), i))?;
                }
                Ok(())
            }
        }
    }

    /// One source of a projected volume: the sandbox's Secret, allowed ConfigMaps, the
    /// downward API. No service account token, trust bundle or certificate.
    fn projection(&self, source: &Json<'_>, field: &dyn fmt::Display) -> Result<(), Refusal> {
        let map = self
            .f
            .object(source, field, &["secret", "configMap", "downwardAPI"])?;
        if let Some(secret) = map.get("secret") {
            let f = sub(&field, "secret");
            let secret = self.f.object(secret, f, &["name", "items", "optional"])?;
            self.key_paths(secret.get("items"), &sub(&f, "items"))?;
            self.secret_ref(secret.get("name"), &sub(&f, "name"))?;
        }
        if let Some(config) = map.get("configMap") {
            let f = sub(&field, "configMap");
            let config = self.f.object(config, f, &["name", "items", "optional"])?;
            self.key_paths(config.get("items"), &sub(&f, "items"))?;
            self.config_map_ref(config.get("name"), &sub(&f, "name"))?;
        }
        if let Some(api) = map.get("downwardAPI") {
            let f = sub(&field, "downwardAPI");
            let api = self.f.object(api, f, &["items"])?;
            self.downward_items(api.get("items"), &sub(&f, "items"))?;
        }
        Ok(())
    }

    fn key_paths(&self, items: Option<&Json<'_>>, field: &dyn fmt::Display) -> Result<(), Refusal> {
        for (i, item) in items
            .map(|v| self.f.array(v, field))
            .transpose()?
            .into_iter()
            .flatten()
            .enumerate()
        {
            self.f
                .object(item, nth(&field, i), &["key", "path", "mode"])?;
        }
        Ok(())
    }

    fn downward_items(
        &self,
        items: Option<&Json<'_>>,
        field: &dyn fmt::Display,
    ) -> Result<(), Refusal> {
        for (i, item) in items
            .map(|v| self.f.array(v, field))
            .transpose()?
            .into_iter()
            .flatten()
            .enumerate()
        {
            let f = nth(&field, i);
            let map = self
                .f
                .object(item, f, &["path", "fieldRef", "resourceFieldRef", "mode"])?;
            self.field_refs(map, &f)?;
        }
        Ok(())
    }

    fn field_refs(&self, map: &Object<'_>, field: &dyn fmt::Display) -> Result<(), Refusal> {
        if let Some(r) = map.get("fieldRef") {
            self.f
                .object(r, sub(&field, "fieldRef"), &["apiVersion", "fieldPath"])?;
        }
        if let Some(r) = map.get("resourceFieldRef") {
            self.f.object(
                r,
                sub(&field, "resourceFieldRef"),
                &["containerName", "resource", "divisor"],
            )?;
        }
        Ok(())
    }

    /// The Pod's `securityContext`; returns what restricted lets containers inherit.
    fn pod_security_context(&self, context: &Json<'_>) -> Result<Inherited, Refusal> {
        let field = "spec.securityContext";
        let map = self.f.object(
            context,
            field,
            &[
                "runAsUser",
                "runAsGroup",
                "runAsNonRoot",
                "fsGroup",
                "fsGroupChangePolicy",
                "supplementalGroups",
                "supplementalGroupsPolicy",
                "seccompProfile",
                "appArmorProfile",
                "seLinuxOptions",
                "seLinuxChangePolicy",
                "sysctls",
                "windowsOptions",
            ],
        )?;
        self.common_security(map, &field)?;
        if let Some(sysctls) = map.get("sysctls") {
            let f = sub(&field, "sysctls");
            for (i, sysctl) in self.f.array(sysctls, f)?.iter().enumerate() {
                let entry = self.f.object(sysctl, nth(&f, i), &["name", "value"])?;
                let name = entry.get("name").and_then(Json::as_str);
                if !name.is_some_and(|n| SAFE_SYSCTLS.contains(&n)) {
                    return Err(self.refuse(
                        format!("{f}[{i}].name"),
                        format!(
                            "{} is not a safe sysctl (Pod Security Standards, baseline)",
                            entry.get("name").map_or("missing".to_string(), short)
                        ),
                    ));
                }
            }
        }
        Ok(Inherited {
            non_root: map.get("runAsNonRoot").and_then(Json::as_bool) == Some(true),
            seccomp: map.contains_key("seccompProfile"),
        })
    }

    /// What the Pod's and a container's security contexts share: user, seccomp, AppArmor,
    /// SELinux, Windows host process.
    fn common_security(&self, map: &Object<'_>, field: &dyn fmt::Display) -> Result<(), Refusal> {
        for key in ["seccompProfile", "appArmorProfile"] {
            if let Some(profile) = map.get(key) {
                let f = sub(&field, key);
                let profile = self.f.object(profile, f, &["type", "localhostProfile"])?;
                let kind = profile.get("type").and_then(Json::as_str);
                if !kind.is_some_and(|k| CONFINED_PROFILES.contains(&k)) {
                    return Err(self.refuse(
                        format!("{f}.type"),
                        format!(
                            "{} is not RuntimeDefault or Localhost (Pod Security Standards, \
                             baseline)",
                            profile.get("type").map_or("missing".to_string(), short)
                        ),
                    ));
                }
            }
        }
        if let Some(options) = map.get("seLinuxOptions") {
            let f = sub(&field, "seLinuxOptions");
            let options = self
                .f
                .object(options, f, &["type", "user", "role", "level"])?;
            let text = |key: &str| options.get(key).map(|v| v.as_str());
            if let Some(kind) = text("type")
                && !kind.is_some_and(|k| SELINUX_TYPES.contains(&k))
            {
                return Err(self.refuse(
                    format!("{f}.type"),
                    format!("not one of {SELINUX_TYPES:?} (Pod Security Standards, baseline)"),
                ));
            }
            for key in ["user", "role"] {
                if text(key).is_some_and(|v| v != Some("")) {
                    return Err(self.refuse(
                        format!("{f}.{key}"),
                        "must be unset (Pod Security Standards, baseline)",
                    ));
                }
            }
        }
        if let Some(windows) = map.get("windowsOptions") {
            let f = sub(&field, "windowsOptions");
            let windows = self.f.object(windows, f, &["hostProcess"])?;
            self.must_be_false(windows, "hostProcess", &sub(&f, "hostProcess"))?;
        }
        if self.rules.pod_security == PodSecurity::Restricted {
            if map.get("runAsUser").is_some_and(|u| u.as_u64() == Some(0)) {
                return Err(self.refuse(
                    format!("{field}.runAsUser"),
                    "0 is root (Pod Security Standards, restricted)",
                ));
            }
            if map.get("runAsNonRoot").and_then(Json::as_bool) == Some(false) {
                return Err(self.refuse(
                    format!("{field}.runAsNonRoot"),
                    "must be true (Pod Security Standards, restricted)",
                ));
            }
        }
        Ok(())
    }

    fn container(
        &self,
        container: &Json<'_>,
        list: &str,
        field: &dyn fmt::Display,
        pod: Option<Inherited>,
    ) -> Result<Amounts, Refusal> {
        // `restartPolicy` on a container: only init containers have it (native sidecars).
        let init = matches!(list, "initContainers");
        let map = self.f.object_with(container, field, |key| {
            CONTAINER_FIELDS.contains(&key) || (init && key == "restartPolicy")
        })?;
        if let Some(env) = map.get("env") {
            for (i, var) in self.f.array(env, sub(&field, "env"))?.iter().enumerate() {
                self.env_var(var, &nth(&sub(&field, "env"), i))?;
            }
        }
        if let Some(env_from) = map.get("envFrom") {
            let f = sub(&field, "envFrom");
            for (i, source) in self.f.array(env_from, f)?.iter().enumerate() {
                let f = nth(&f, i);
                let source = self
                    .f
                    .object(source, f, &["prefix", "secretRef", "configMapRef"])?;
                if let Some(r) = source.get("secretRef") {
                    let r = self
                        .f
                        .object(r, sub(&f, "secretRef"), &["name", "optional"])?;
                    self.secret_ref(r.get("name"), &sub(&f, "secretRef.name"))?;
                }
                if let Some(r) = source.get("configMapRef") {
                    let r = self
                        .f
                        .object(r, sub(&f, "configMapRef"), &["name", "optional"])?;
                    self.config_map_ref(r.get("name"), &sub(&f, "configMapRef.name"))?;
                }
            }
        }
        let amounts = match map.get("resources") {
            Some(resources) => self.resources(resources, &sub(&field, "resources"))?,
            None => Amounts::default(),
        };
        if let Some(ports) = map.get("ports") {
            let f = sub(&field, "ports");
            for (i, port) in self.f.array(ports, f)?.iter().enumerate() {
                let f = nth(&f, i);
                let port =
                    self.f
                        .object(port, f, &["containerPort", "name", "protocol", "hostPort"])?;
                // Baseline, "Host Ports": none, or 0.
                if port.get("hostPort").is_some_and(|p| p.as_u64() != Some(0)) {
                    return Err(self.refuse(
                        format!("{f}.hostPort"),
                        "a host port is not allowed (Pod Security Standards, baseline)",
                    ));
                }
            }
        }
        if let Some(mounts) = map.get("volumeMounts") {
            let f = sub(&field, "volumeMounts");
            for (i, mount) in self.f.array(mounts, f)?.iter().enumerate() {
                let f = nth(&f, i);
                let mount = self.f.object(
                    mount,
                    f,
                    &[
                        "name",
                        "mountPath",
                        "subPath",
                        "subPathExpr",
                        "readOnly",
                        "recursiveReadOnly",
                        "mountPropagation",
                    ],
                )?;
                if let Some(p) = mount.get("mountPropagation")
                    && !matches!(p.as_str(), Some("None" | "HostToContainer"))
                {
                    return Err(self.refuse(
                        format!("{f}.mountPropagation"),
                        format!("{} is not None or HostToContainer", short(p)),
                    ));
                }
            }
        }
        if let Some(devices) = map.get("volumeDevices") {
            let f = sub(&field, "volumeDevices");
            for (i, device) in self.f.array(devices, f)?.iter().enumerate() {
                self.f.object(device, nth(&f, i), &["name", "devicePath"])?;
            }
        }
        for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
            if let Some(p) = map.get(probe) {
                self.probe(p, &sub(&field, probe))?;
            }
        }
        if let Some(lifecycle) = map.get("lifecycle") {
            let f = sub(&field, "lifecycle");
            let lifecycle = self
                .f
                .object(lifecycle, f, &["postStart", "preStop", "stopSignal"])?;
            for hook in ["postStart", "preStop"] {
                if let Some(handler) = lifecycle.get(hook) {
                    let f = sub(&f, hook);
                    let handler =
                        self.f
                            .object(handler, f, &["exec", "httpGet", "tcpSocket", "sleep"])?;
                    self.handler(handler, &f)?;
                }
            }
        }
        self.container_security(map.get("securityContext"), field, pod)?;
        Ok(amounts)
    }

    fn env_var(&self, var: &Json<'_>, field: &dyn fmt::Display) -> Result<(), Refusal> {
        let var = self.f.object(var, field, &["name", "value", "valueFrom"])?;
        let Some(from) = var.get("valueFrom") else {
            return Ok(());
        };
        let f = sub(&field, "valueFrom");
        let from = self.f.object(
            from,
            f,
            &[
                "secretKeyRef",
                "configMapKeyRef",
                "fieldRef",
                "resourceFieldRef",
            ],
        )?;
        if let Some(r) = from.get("secretKeyRef") {
            let r = self
                .f
                .object(r, sub(&f, "secretKeyRef"), &["name", "key", "optional"])?;
            self.secret_ref(r.get("name"), &sub(&f, "secretKeyRef.name"))?;
        }
        if let Some(r) = from.get("configMapKeyRef") {
            let r = self
                .f
                .object(r, sub(&f, "configMapKeyRef"), &["name", "key", "optional"])?;
            self.config_map_ref(r.get("name"), &sub(&f, "configMapKeyRef.name"))?;
        }
        self.field_refs(from, &f)
    }

    fn probe(&self, probe: &Json<'_>, field: &dyn fmt::Display) -> Result<(), Refusal> {
        let map = self.f.object(
            probe,
            field,
            &[
                "exec",
                "httpGet",
                "tcpSocket",
                "grpc",
                "initialDelaySeconds",
                "timeoutSeconds",
                "periodSeconds",
                "successThreshold",
                "failureThreshold",
                "terminationGracePeriodSeconds",
            ],
        )?;
        self.grace(map.get("terminationGracePeriodSeconds"), field)?;
        if let Some(grpc) = map.get("grpc") {
            self.f
                .object(grpc, sub(&field, "grpc"), &["port", "service"])?;
        }
        self.handler(map, field)
    }

    /// A probe's or hook's action. Baseline, "Host Probes / Lifecycle Hooks": no `host`.
    fn handler(&self, map: &Object<'_>, field: &dyn fmt::Display) -> Result<(), Refusal> {
        if let Some(exec) = map.get("exec") {
            self.f.object(exec, sub(&field, "exec"), &["command"])?;
        }
        if let Some(sleep) = map.get("sleep") {
            self.f.object(sleep, sub(&field, "sleep"), &["seconds"])?;
        }
        for (action, allowed) in [
            (
                "httpGet",
                &["path", "port", "host", "scheme", "httpHeaders"][..],
            ),
            ("tcpSocket", &["port", "host"][..]),
        ] {
            let Some(value) = map.get(action) else {
                continue;
            };
            let f = sub(&field, action);
            let target = self.f.object(value, f, allowed)?;
            if target.get("host").is_some_and(|h| h.as_str() != Some("")) {
                return Err(self.refuse(
                    format!("{f}.host"),
                    "a probe or hook may not target another host (Pod Security Standards, \
                     baseline)",
                ));
            }
        }
        Ok(())
    }

    fn container_security(
        &self,
        context: Option<&Json<'_>>,
        field: &dyn fmt::Display,
        pod: Option<Inherited>,
    ) -> Result<(), Refusal> {
        let f = sub(&field, "securityContext");
        let empty = Object::default();
        let map = match context {
            Some(context) => self.f.object(
                context,
                f,
                &[
                    "allowPrivilegeEscalation",
                    "capabilities",
                    "privileged",
                    "procMount",
                    "readOnlyRootFilesystem",
                    "runAsGroup",
                    "runAsNonRoot",
                    "runAsUser",
                    "seLinuxOptions",
                    "seccompProfile",
                    "appArmorProfile",
                    "windowsOptions",
                ],
            )?,
            None => &empty,
        };
        // Baseline, "Privileged Containers" and "/proc Mount Type".
        self.must_be_false(map, "privileged", &sub(&f, "privileged"))?;
        if map
            .get("procMount")
            .is_some_and(|p| p.as_str() != Some("Default"))
        {
            return Err(self.refuse(
                format!("{f}.procMount"),
                "only Default (Pod Security Standards, baseline)",
            ));
        }
        self.common_security(map, &f)?;
        let restricted = self.rules.pod_security == PodSecurity::Restricted;
        let mut drops_all = false;
        if let Some(capabilities) = map.get("capabilities") {
            let cf = sub(&f, "capabilities");
            let caps = self.f.object(capabilities, cf, &["add", "drop"])?;
            if let Some(add) = caps.get("add") {
                let allowed: &[&str] = if restricted {
                    &["NET_BIND_SERVICE"]
                } else {
                    &BASELINE_CAPABILITIES
                };
                for (i, cap) in self.f.array(add, sub(&cf, "add"))?.iter().enumerate() {
                    if !cap.as_str().is_some_and(|c| allowed.contains(&c)) {
                        return Err(self.refuse(
                            format!("{cf}.add[{i}]"),
                            format!(
                                "{} may not be added (Pod Security Standards, {})",
                                short(cap),
                                level(restricted)
                            ),
                        ));
                    }
                }
            }
            if let Some(drop) = caps.get("drop") {
                drops_all = self
                    .f
                    .array(drop, sub(&cf, "drop"))?
                    .iter()
                    .any(|c| c.as_str() == Some("ALL"));
            }
        }
        if !restricted {
            return Ok(());
        }
        let pod = pod.unwrap_or_default();
        if map.get("allowPrivilegeEscalation").and_then(Json::as_bool) != Some(false) {
            return Err(self.refuse(
                format!("{f}.allowPrivilegeEscalation"),
                "must be false (Pod Security Standards, restricted)",
            ));
        }
        if !drops_all {
            return Err(self.refuse(
                format!("{f}.capabilities.drop"),
                "must drop ALL (Pod Security Standards, restricted)",
            ));
        }
        if !pod.non_root && map.get("runAsNonRoot").and_then(Json::as_bool) != Some(true) {
            return Err(self.refuse(
                format!("{f}.runAsNonRoot"),
                "must be true here or in spec.securityContext (Pod Security Standards, \
                 restricted)",
            ));
        }
        if !pod.seccomp && !map.contains_key("seccompProfile") {
            return Err(self.refuse(
                format!("{f}.seccompProfile"),
                "RuntimeDefault or Localhost must be set here or in spec.securityContext \
                 (Pod Security Standards, restricted)",
            ));
        }
        Ok(())
    }
}

/// One container's requests and limits, by [`RESOURCE_NAMES`] slot, in the bounds' units.
#[derive(Clone, Copy, Debug, Default)]
struct Amounts {
    requests: [Option<u128>; 3],
    limits: [Option<u128>; 3],
}

impl Amounts {
    fn index(resource: &str) -> usize {
        RESOURCE_NAMES
            .iter()
            .position(|r| *r == resource)
            .unwrap_or_default()
    }

    /// Requests, a missing one taken from the limit (as Kubernetes defaults it).
    fn requests(&self) -> [u128; 3] {
        std::array::from_fn(|i| self.requests[i].or(self.limits[i]).unwrap_or_default())
    }

    fn limits(&self) -> [u128; 3] {
        std::array::from_fn(|i| self.limits[i].unwrap_or_default())
    }
}

/// A Pod's amounts as the scheduler sums them: its containers and sidecars (init containers
/// with `restartPolicy: Always`) run together; each other init container runs alone, beside
/// the sidecars started before it.
#[derive(Clone, Copy, Debug, Default)]
struct PodTotal {
    /// Per part (requests, limits): containers, sidecars so far, the peak of init.
    parts: [Sums; 2],
}

#[derive(Clone, Copy, Debug, Default)]
struct Sums {
    containers: [u128; 3],
    sidecars: [u128; 3],
    init_peak: [u128; 3],
}

impl PodTotal {
    fn add(&mut self, list: &str, container: &Json<'_>, amounts: &Amounts) {
        let sidecar = container.get("restartPolicy").and_then(Json::as_str) == Some("Always");
        for (sums, values) in self
            .parts
            .iter_mut()
            .zip([amounts.requests(), amounts.limits()])
        {
            for (i, value) in values.into_iter().enumerate() {
                if list == "containers" {
                    sums.containers[i] = sums.containers[i].saturating_add(value);
                } else if sidecar {
                    sums.sidecars[i] = sums.sidecars[i].saturating_add(value);
                    sums.init_peak[i] = sums.init_peak[i].max(sums.sidecars[i]);
                } else {
                    let running = sums.sidecars[i].saturating_add(value);
                    sums.init_peak[i] = sums.init_peak[i].max(running);
                }
            }
        }
    }

    fn total(sums: &Sums) -> [u128; 3] {
        std::array::from_fn(|i| {
            sums.containers[i]
                .saturating_add(sums.sidecars[i])
                .max(sums.init_peak[i])
        })
    }

    fn requests(&self) -> [u128; 3] {
        Self::total(&self.parts[0])
    }

    fn limits(&self) -> [u128; 3] {
        Self::total(&self.parts[1])
    }
}

/// What restricted lets a container take from the Pod's security context.
#[derive(Clone, Copy, Debug, Default)]
struct Inherited {
    non_root: bool,
    seccomp: bool,
}

fn level(restricted: bool) -> &'static str {
    if restricted { "restricted" } else { "baseline" }
}
