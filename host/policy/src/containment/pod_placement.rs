//! The widenable Pod fields (`--allow-pod-field`), each to bounded values: where a Pod runs
//! must not preempt or displace other tenants, land on the control plane, a cordoned node or
//! a node chosen by name, nor follow or repel another workload's Pods.

use std::fmt;

use super::super::json::{Json, Object};
use super::super::{RESERVED_NODE_KEYS, Refusal, SANDBOX_LABEL, clip, nth, short, sub};
use super::PodCheck;

/// A node requirement's operators that select nodes by a key (rather than avoid them).
const AVOIDING: [&str; 2] = ["NotIn", "DoesNotExist"];

impl PodCheck<'_> {
    /// The widened fields the spec sets (which ones it may set at all is checked before).
    pub(super) fn placement(&self, spec: &Object<'_>) -> Result<(), Refusal> {
        if let Some(class) = spec.get("priorityClassName") {
            self.listed(
                class,
                "spec.priorityClassName",
                &self.rules.priority_classes,
                "PriorityClass",
                "--allowed-priority-classes",
                "a priority class decides whose Pods this one preempts",
            )?;
        }
        if let Some(scheduler) = spec.get("schedulerName") {
            self.listed(
                scheduler,
                "spec.schedulerName",
                &self.rules.schedulers,
                "scheduler",
                "--allowed-schedulers",
                "another scheduler places the Pod by rules of its own",
            )?;
        }
        if let Some(tolerations) = spec.get("tolerations") {
            let field = "spec.tolerations";
            for (i, toleration) in self.f.array(tolerations, field)?.iter().enumerate() {
                self.toleration(toleration, &nth(&field, i))?;
            }
        }
        if let Some(selector) = spec.get("nodeSelector") {
            let field = "spec.nodeSelector";
            let map = self.f.object_with(selector, field, |_| true)?;
            for (key, value) in map {
                let f = format!("{field}.{}", clip(key, 128));
                if !value.is_string() {
                    return Err(self.refuse(f, "not a string"));
                }
                self.node_key(key, "In", &f)?;
            }
        }
        if let Some(affinity) = spec.get("affinity") {
            self.affinity(affinity)?;
        }
        if let Some(constraints) = spec.get("topologySpreadConstraints") {
            let field = "spec.topologySpreadConstraints";
            for (i, constraint) in self.f.array(constraints, field)?.iter().enumerate() {
                let f = nth(&field, i);
                let map = self.f.object(
                    constraint,
                    f,
                    &[
                        "maxSkew",
                        "topologyKey",
                        "whenUnsatisfiable",
                        "labelSelector",
                        "minDomains",
                        "nodeAffinityPolicy",
                        "nodeTaintsPolicy",
                        "matchLabelKeys",
                    ],
                )?;
                self.own_selector(map.get("labelSelector"), &sub(&f, "labelSelector"))?;
            }
        }
        if let Some(dns) = spec.get("dnsConfig") {
            let field = "spec.dnsConfig";
            let map = self
                .f
                .object(dns, field, &["nameservers", "searches", "options"])?;
            if let Some(options) = map.get("options") {
                let f = sub(&field, "options");
                for (i, option) in self.f.array(options, f)?.iter().enumerate() {
                    self.f.object(option, nth(&f, i), &["name", "value"])?;
                }
            }
        }
        if let Some(aliases) = spec.get("hostAliases") {
            let field = "spec.hostAliases";
            for (i, alias) in self.f.array(aliases, field)?.iter().enumerate() {
                self.f.object(alias, nth(&field, i), &["ip", "hostnames"])?;
            }
        }
        Ok(())
    }

    /// A name the operator lists (`flag`).
    fn listed(
        &self,
        value: &Json<'_>,
        field: &str,
        allowed: &std::collections::BTreeSet<String>,
        what: &str,
        flag: &str,
        why: &str,
    ) -> Result<(), Refusal> {
        if value.as_str().is_some_and(|v| allowed.contains(v)) {
            return Ok(());
        }
        let listed = if allowed.is_empty() {
            "none".to_string()
        } else {
            format!("{allowed:?}")
        };
        Err(self.refuse(
            field,
            format!(
                "{} is not a {what} allowed by {flag} ({listed}): {why}",
                short(value)
            ),
        ))
    }

    /// A toleration: of one named taint, not of every taint, nor of a reserved one.
    fn toleration(&self, toleration: &Json<'_>, field: &dyn fmt::Display) -> Result<(), Refusal> {
        let map = self.f.object(
            toleration,
            field,
            &["key", "operator", "value", "effect", "tolerationSeconds"],
        )?;
        if let Some(operator) = map.get("operator")
            && !matches!(operator.as_str(), Some("Exists" | "Equal"))
        {
            return Err(self.refuse(
                sub(&field, "operator"),
                format!("{} is not Exists or Equal", short(operator)),
            ));
        }
        let key = map.get("key").and_then(Json::as_str).unwrap_or_default();
        if key.is_empty() {
            return Err(self.refuse(
                sub(&field, "key"),
                "a toleration without a key tolerates every taint, the control plane's too: \
                 name the taint",
            ));
        }
        if self.reserved(key) {
            return Err(self.refuse(
                sub(&field, "key"),
                format!(
                    "{key:?} is a taint that keeps workloads off the control plane or a cordoned \
                     node; tolerating it needs --allow-node-key (allowed: {})",
                    self.allowed_node_keys()
                ),
            ));
        }
        Ok(())
    }

    fn reserved(&self, key: &str) -> bool {
        RESERVED_NODE_KEYS.contains(&key) && !self.rules.node_keys.contains(key)
    }

    fn allowed_node_keys(&self) -> String {
        if self.rules.node_keys.is_empty() {
            "none".to_string()
        } else {
            format!("{:?}", self.rules.node_keys)
        }
    }

    /// A node requirement on `key` by `operator`: a reserved key only to avoid such nodes.
    fn node_key(&self, key: &str, operator: &str, field: &dyn fmt::Display) -> Result<(), Refusal> {
        if !self.reserved(key) || AVOIDING.contains(&operator) {
            return Ok(());
        }
        Err(self.refuse(
            field,
            format!(
                "{:?} selects the control plane, a cordoned node or a node by name (only \
                 NotIn and DoesNotExist may use it); selecting by it needs --allow-node-key \
                 (allowed: {})",
                clip(key, 128),
                self.allowed_node_keys()
            ),
        ))
    }

    fn affinity(&self, affinity: &Json<'_>) -> Result<(), Refusal> {
        let field = "spec.affinity";
        let map = self.f.object(
            affinity,
            field,
            &["nodeAffinity", "podAffinity", "podAntiAffinity"],
        )?;
        const REQUIRED: &str = "requiredDuringSchedulingIgnoredDuringExecution";
        const PREFERRED: &str = "preferredDuringSchedulingIgnoredDuringExecution";
        if let Some(node) = map.get("nodeAffinity") {
            let f = sub(&field, "nodeAffinity");
            let node = self.f.object(node, f, &[REQUIRED, PREFERRED])?;
            if let Some(required) = node.get(REQUIRED) {
                let f = sub(&f, REQUIRED);
                let required = self.f.object(required, f, &["nodeSelectorTerms"])?;
                if let Some(terms) = required.get("nodeSelectorTerms") {
                    let f = sub(&f, "nodeSelectorTerms");
                    for (i, term) in self.f.array(terms, f)?.iter().enumerate() {
                        self.node_term(term, &nth(&f, i))?;
                    }
                }
            }
            if let Some(preferred) = node.get(PREFERRED) {
                let f = sub(&f, PREFERRED);
                for (i, weighted) in self.f.array(preferred, f)?.iter().enumerate() {
                    let f = nth(&f, i);
                    let weighted = self.f.object(weighted, f, &["weight", "preference"])?;
                    if let Some(term) = weighted.get("preference") {
                        self.node_term(term, &sub(&f, "preference"))?;
                    }
                }
            }
        }
        for kind in ["podAffinity", "podAntiAffinity"] {
            let Some(pods) = map.get(kind) else {
                continue;
            };
            let f = sub(&field, kind);
            let pods = self.f.object(pods, f, &[REQUIRED, PREFERRED])?;
            if let Some(required) = pods.get(REQUIRED) {
                let f = sub(&f, REQUIRED);
                for (i, term) in self.f.array(required, f)?.iter().enumerate() {
                    self.pod_term(term, &nth(&f, i))?;
                }
            }
            if let Some(preferred) = pods.get(PREFERRED) {
                let f = sub(&f, PREFERRED);
                for (i, weighted) in self.f.array(preferred, f)?.iter().enumerate() {
                    let f = nth(&f, i);
                    let weighted = self.f.object(weighted, f, &["weight", "podAffinityTerm"])?;
                    if let Some(term) = weighted.get("podAffinityTerm") {
                        self.pod_term(term, &sub(&f, "podAffinityTerm"))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// A node selector term: its label requirements as [`Self::node_key`] allows them; a field
    /// requirement (`metadata.name`, the only field) as the node's name label.
    fn node_term(&self, term: &Json<'_>, field: &dyn fmt::Display) -> Result<(), Refusal> {
        let map = self
            .f
            .object(term, field, &["matchExpressions", "matchFields"])?;
        for (list, by_name) in [("matchExpressions", false), ("matchFields", true)] {
            let Some(requirements) = map.get(list) else {
                continue;
            };
            let f = sub(&field, list);
            for (i, requirement) in self.f.array(requirements, f)?.iter().enumerate() {
                let f = nth(&f, i);
                let requirement = self
                    .f
                    .object(requirement, f, &["key", "operator", "values"])?;
                let text = |key: &str| {
                    requirement
                        .get(key)
                        .and_then(Json::as_str)
                        .unwrap_or_default()
                };
                let key = if by_name {
                    "kubernetes.io/hostname"
                } else {
                    text("key")
                };
                self.node_key(key, text("operator"), &sub(&f, "key"))?;
            }
        }
        Ok(())
    }

    /// A pod (anti-)affinity term: it may concern S's own Pods only. A term that matched
    /// another sandbox's Pod (or any other workload's) would place S beside it by choice, or,
    /// as anti-affinity, which the scheduler also holds against the Pods that come after,
    /// keep that Pod out of S's node or zone.
    fn pod_term(&self, term: &Json<'_>, field: &dyn fmt::Display) -> Result<(), Refusal> {
        let map = self.f.object(
            term,
            field,
            &[
                "labelSelector",
                "namespaces",
                "namespaceSelector",
                "topologyKey",
                "matchLabelKeys",
                "mismatchLabelKeys",
            ],
        )?;
        if map.get("namespaceSelector").is_some_and(|s| !s.is_null()) {
            return Err(self.refuse(
                sub(&field, "namespaceSelector"),
                "a term selects Pods of the sandbox's own namespace only",
            ));
        }
        if let Some(namespaces) = map.get("namespaces") {
            let f = sub(&field, "namespaces");
            for (i, namespace) in self.f.array(namespaces, f)?.iter().enumerate() {
                if namespace.as_str() != Some(self.scope.namespace.as_str()) {
                    return Err(self.refuse(
                        nth(&f, i),
                        format!(
                            "{} is not the sandbox's namespace {:?}",
                            short(namespace),
                            self.scope.namespace
                        ),
                    ));
                }
            }
        }
        self.own_selector(map.get("labelSelector"), &sub(&field, "labelSelector"))
    }

    /// A label selector (of an affinity term or a spread constraint) that matches S's Pods
    /// only: it requires `cubepod.io/sandbox: S` (in `matchLabels`, or `In [S]`); its other
    /// requirements can only narrow it. None at all matches no Pod.
    fn own_selector(
        &self,
        selector: Option<&Json<'_>>,
        field: &dyn fmt::Display,
    ) -> Result<(), Refusal> {
        let Some(selector) = selector.filter(|s| !s.is_null()) else {
            return Ok(());
        };
        let map = self
            .f
            .object(selector, field, &["matchLabels", "matchExpressions"])?;
        let own = self.scope.name.as_str();
        let by_label = map
            .get("matchLabels")
            .and_then(|labels| labels.get(SANDBOX_LABEL))
            .and_then(Json::as_str)
            == Some(own);
        let by_expression = map
            .get("matchExpressions")
            .and_then(Json::as_array)
            .is_some_and(|expressions| {
                expressions.iter().any(|e| {
                    e.get("key").and_then(Json::as_str) == Some(SANDBOX_LABEL)
                        && e.get("operator").and_then(Json::as_str) == Some("In")
                        && e.get("values")
                            .and_then(Json::as_array)
                            .is_some_and(|v| v.len() == 1 && v[0].as_str() == Some(own))
                })
            });
        if by_label || by_expression {
            return Ok(());
        }
        Err(self.refuse(
            field,
            format!(
                "it may match Pods other than the sandbox's own: it must require \
                 {SANDBOX_LABEL}: {own:?}"
            ),
        ))
    }
}
