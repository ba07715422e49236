//! Rule `pod`, the widenable fields (`--allow-pod-field`): each allowed, its values still
//! bounded.

use serde_json::{Value, json};

use super::tests::*;
use super::*;

#[test]
fn priority_classes_and_schedulers_only_from_the_operators_lists() {
    let rules = widened();
    for class in ["system-node-critical", "system-cluster-critical", "high"] {
        widened_refused(
            &rules,
            |p| p["spec"]["priorityClassName"] = json!(class),
            "spec.priorityClassName",
        );
    }
    let listed = Containment {
        priority_classes: ["sandbox-low".to_string()].into(),
        ..widened()
    };
    widened_admitted(&listed, |p| {
        p["spec"]["priorityClassName"] = json!("sandbox-low")
    });
    widened_refused(
        &listed,
        |p| p["spec"]["priorityClassName"] = json!("system-node-critical"),
        "spec.priorityClassName",
    );
    widened_admitted(&rules, |p| {
        p["spec"]["schedulerName"] = json!("default-scheduler")
    });
    widened_refused(
        &rules,
        |p| p["spec"]["schedulerName"] = json!("my-scheduler"),
        "spec.schedulerName",
    );
}

#[test]
fn tolerations_name_a_taint_and_not_the_control_planes() {
    let rules = widened();
    // Of every taint: no key, or an empty one.
    for toleration in [
        json!({"operator": "Exists"}),
        json!({"key": "", "operator": "Exists"}),
    ] {
        widened_refused(
            &rules,
            |p| p["spec"]["tolerations"] = json!([toleration]),
            "spec.tolerations[0].key",
        );
    }
    for key in [
        "node-role.kubernetes.io/control-plane",
        "node-role.kubernetes.io/master",
        "node.kubernetes.io/unschedulable",
    ] {
        widened_refused(
            &rules,
            |p| {
                p["spec"]["tolerations"] = json!([
                    {"key": "kata", "operator": "Exists"},
                    {"key": key, "operator": "Exists", "effect": "NoSchedule"},
                ])
            },
            "spec.tolerations[1].key",
        );
    }
    widened_refused(
        &rules,
        |p| p["spec"]["tolerations"] = json!([{"key": "kata", "operator": "Matches"}]),
        "spec.tolerations[0].operator",
    );
    // The guarded example's toleration, and the not-ready one Kubernetes adds to every Pod.
    widened_admitted(&rules, |p| {
        p["spec"]["tolerations"] = json!([
            {"key": "sandbox.cubepod.io/dedicated", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
        ])
    });
    let control_plane = Containment {
        node_keys: ["node-role.kubernetes.io/control-plane".to_string()].into(),
        ..widened()
    };
    widened_admitted(&control_plane, |p| {
        p["spec"]["tolerations"] =
            json!([{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]);
        p["spec"]["nodeSelector"] = json!({"node-role.kubernetes.io/control-plane": ""});
    });
    widened_refused(
        &control_plane,
        |p| p["spec"]["tolerations"] = json!([{"operator": "Exists"}]),
        "spec.tolerations[0].key",
    );
}

#[test]
fn node_selection_not_of_the_control_plane_nor_a_node_by_name() {
    let rules = widened();
    widened_refused(
        &rules,
        |p| p["spec"]["nodeSelector"] = json!({"node-role.kubernetes.io/control-plane": ""}),
        "spec.nodeSelector.node-role.kubernetes.io/control-plane",
    );
    widened_refused(
        &rules,
        |p| p["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": "node-7"}),
        "spec.nodeSelector.kubernetes.io/hostname",
    );
    widened_admitted(&rules, |p| {
        p["spec"]["nodeSelector"] = json!({"katacontainers.io/kata-runtime": "true"})
    });
    let required = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution";
    for (operator, selects) in [
        ("In", true),
        ("Exists", true),
        ("Gt", true),
        ("NotIn", false),
        ("DoesNotExist", false),
    ] {
        let edit = |p: &mut Value| {
            p["spec"]["affinity"] = json!({"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [
                        {"key": "katacontainers.io/kata-runtime", "operator": "In", "values": ["true"]},
                        {"key": "node-role.kubernetes.io/master", "operator": operator, "values": []},
                    ]},
                ]},
            }})
        };
        if selects {
            widened_refused(
                &rules,
                edit,
                &format!("{required}.nodeSelectorTerms[0].matchExpressions[1].key"),
            );
        } else {
            widened_admitted(&rules, edit);
        }
    }
    // A node by name, as a field, and a preference as a requirement.
    widened_refused(
        &rules,
        |p| {
            p["spec"]["affinity"] = json!({"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["cp-1"]}]},
                ]},
            }})
        },
        &format!("{required}.nodeSelectorTerms[0].matchFields[0].key"),
    );
    widened_refused(
        &rules,
        |p| {
            p["spec"]["affinity"] = json!({"nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference":
                    {"matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}}],
            }})
        },
        "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]\
         .preference.matchExpressions[0].key",
    );
}

#[test]
fn pod_affinity_and_spreading_only_over_the_sandboxs_own_pods() {
    let rules = widened();
    let term = |selector: Value| json!({"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"});
    let required = "requiredDuringSchedulingIgnoredDuringExecution";
    for kind in ["podAffinity", "podAntiAffinity"] {
        for selector in [
            json!({"matchLabels": {"cubepod.io/sandbox": "victim"}}),
            json!({"matchLabels": {"app.kubernetes.io/managed-by": "cubepod-controller"}}),
            json!({"matchExpressions": [{"key": "cubepod.io/sandbox", "operator": "Exists"}]}),
            json!({"matchExpressions": [
                {"key": "cubepod.io/sandbox", "operator": "In", "values": [S, "victim"]}]}),
            json!({}),
        ] {
            widened_refused(
                &rules,
                |p| p["spec"]["affinity"] = json!({kind: {required: [term(selector)]}}),
                &format!("spec.affinity.{kind}.{required}[0].labelSelector"),
            );
        }
        // S's own Pods: in either form, narrowed further or not.
        for selector in [
            json!({"matchLabels": {"cubepod.io/sandbox": S}}),
            json!({"matchLabels": {"cubepod.io/sandbox": S, "team": "a"}}),
            json!({"matchExpressions": [
                {"key": "cubepod.io/sandbox", "operator": "In", "values": [S]}]}),
        ] {
            widened_admitted(&rules, |p| {
                p["spec"]["affinity"] = json!({kind: {
                    required: [term(selector.clone())],
                    "preferredDuringSchedulingIgnoredDuringExecution":
                        [{"weight": 1, "podAffinityTerm": term(selector)}],
                }})
            });
        }
        // Another namespace's Pods, by name or by selector.
        let mut other = term(json!({"matchLabels": {"cubepod.io/sandbox": S}}));
        other["namespaces"] = json!(["kube-system"]);
        widened_refused(
            &rules,
            |p| p["spec"]["affinity"] = json!({kind: {required: [other]}}),
            &format!("spec.affinity.{kind}.{required}[0].namespaces[0]"),
        );
        let mut every = term(json!({"matchLabels": {"cubepod.io/sandbox": S}}));
        every["namespaceSelector"] = json!({});
        widened_refused(
            &rules,
            |p| p["spec"]["affinity"] = json!({kind: {required: [every]}}),
            &format!("spec.affinity.{kind}.{required}[0].namespaceSelector"),
        );
    }
    widened_refused(
        &rules,
        |p| {
            p["spec"]["affinity"] = json!({"podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100,
                    "podAffinityTerm": term(json!({"matchLabels": {"cubepod.io/sandbox": "victim"}}))}],
            }})
        },
        "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]\
         .podAffinityTerm.labelSelector",
    );
    let spread = |selector: Value| {
        json!([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}])
    };
    widened_refused(
        &rules,
        |p| {
            p["spec"]["topologySpreadConstraints"] =
                spread(json!({"matchLabels": {"cubepod.io/sandbox": "victim"}}))
        },
        "spec.topologySpreadConstraints[0].labelSelector",
    );
    widened_admitted(&rules, |p| {
        p["spec"]["topologySpreadConstraints"] =
            spread(json!({"matchLabels": {"cubepod.io/sandbox": S}}))
    });
    // DNS settings and host aliases: their known fields only.
    widened_admitted(&rules, |p| {
        p["spec"]["dnsConfig"] = json!({"nameservers": ["10.96.0.10"], "searches": ["svc.local"],
                                        "options": [{"name": "ndots", "value": "2"}]});
        p["spec"]["hostAliases"] = json!([{"ip": "10.0.0.1", "hostnames": ["db"]}]);
    });
    widened_refused(
        &rules,
        |p| p["spec"]["dnsConfig"] = json!({"options": [{"name": "ndots", "x": 1}]}),
        "spec.dnsConfig.options[0].x",
    );
    widened_refused(
        &rules,
        |p| p["spec"]["hostAliases"] = json!([{"ip": "10.0.0.1", "hostnames": [], "x": 1}]),
        "spec.hostAliases[0].x",
    );
}
