//! Rule `pod`: the default policy's Pod, edited one field at a time, against the profile,
//! the Pod Security Standards levels and the operator's bounds.

use serde_json::{Value, json};

use super::tests::*;
use super::*;

#[test]
fn pod_runtime_class_service_account_and_node() {
    pod_refused(
        |p| {
            p["spec"]
                .as_object_mut()
                .unwrap()
                .remove("runtimeClassName");
        },
        Rule::Pod,
        "spec.runtimeClassName",
    );
    pod_refused(
        |p| p["spec"]["runtimeClassName"] = json!("runc"),
        Rule::Pod,
        "spec.runtimeClassName",
    );
    pod_refused(
        |p| p["spec"]["nodeName"] = json!("node-1"),
        Rule::Pod,
        "spec.nodeName",
    );
    pod_refused(
        |p| p["spec"]["automountServiceAccountToken"] = json!(true),
        Rule::Pod,
        "spec.automountServiceAccountToken",
    );
    pod_refused(
        |p| p["spec"]["serviceAccountName"] = json!("cubepod-controller"),
        Rule::Pod,
        "spec.serviceAccountName",
    );
    let rules = Containment {
        runtime_classes: ["kata-clh".to_string()].into(),
        service_account: "sandbox".into(),
        ..Containment::default()
    };
    let mut manifest = pod();
    manifest["spec"]["runtimeClassName"] = json!("kata-clh");
    refused(
        check(&rules, Resource::Pod, S, &manifest),
        Rule::Pod,
        "spec.serviceAccountName",
    );
    manifest["spec"]["serviceAccountName"] = json!("sandbox");
    assert_eq!(check(&rules, Resource::Pod, S, &manifest), Ok(()));
}

#[test]
fn pod_fields_outside_the_profile_are_refused_unless_widened() {
    for field in [
        "affinity",
        "tolerations",
        "nodeSelector",
        "priorityClassName",
        "overhead",
        "resourceClaims",
    ] {
        pod_refused(
            |p| p["spec"][field] = json!({}),
            Rule::Pod,
            &format!("spec.{field}"),
        );
    }
    pod_refused(
        |p| p["spec"]["containers"][0]["resizePolicy"] = json!([]),
        Rule::Pod,
        "spec.containers[0].resizePolicy",
    );
    pod_refused(
        |p| p["spec"]["ephemeralContainers"] = json!([]),
        Rule::Pod,
        "spec.ephemeralContainers",
    );
    let rules = Containment {
        extra_pod_fields: ["affinity".to_string(), "tolerations".to_string()].into(),
        ..Containment::default()
    };
    let mut manifest = pod();
    manifest["spec"]["affinity"] = json!({"nodeAffinity": {}});
    manifest["spec"]["tolerations"] = json!([{"key": "kata", "operator": "Exists"}]);
    assert_eq!(check(&rules, Resource::Pod, S, &manifest), Ok(()));
    manifest["spec"]["nodeSelector"] = json!({});
    refused(
        check(&rules, Resource::Pod, S, &manifest),
        Rule::Pod,
        "spec.nodeSelector",
    );
}

#[test]
fn pod_security_standards_baseline() {
    let c = "spec.containers[0]";
    for (key, value) in [("hostNetwork", true), ("hostPID", true), ("hostIPC", true)] {
        pod_refused(
            |p| p["spec"][key] = json!(value),
            Rule::Pod,
            &format!("spec.{key}"),
        );
    }
    let mut ok = pod();
    ok["spec"]["hostNetwork"] = json!(false);
    assert_eq!(
        check(&Containment::default(), Resource::Pod, S, &ok),
        Ok(())
    );
    let context =
        |value: Value| move |p: &mut Value| p["spec"]["containers"][0]["securityContext"] = value;
    pod_refused(
        context(json!({"privileged": true})),
        Rule::Pod,
        &format!("{c}.securityContext.privileged"),
    );
    pod_refused(
        context(json!({"capabilities": {"add": ["SYS_ADMIN"]}})),
        Rule::Pod,
        &format!("{c}.securityContext.capabilities.add[0]"),
    );
    pod_refused(
        context(json!({"procMount": "Unmasked"})),
        Rule::Pod,
        &format!("{c}.securityContext.procMount"),
    );
    pod_refused(
        context(json!({"seccompProfile": {"type": "Unconfined"}})),
        Rule::Pod,
        &format!("{c}.securityContext.seccompProfile.type"),
    );
    pod_refused(
        context(json!({"appArmorProfile": {"type": "Unconfined"}})),
        Rule::Pod,
        &format!("{c}.securityContext.appArmorProfile.type"),
    );
    pod_refused(
        context(json!({"seLinuxOptions": {"type": "spc_t"}})),
        Rule::Pod,
        &format!("{c}.securityContext.seLinuxOptions.type"),
    );
    pod_refused(
        context(json!({"seLinuxOptions": {"user": "system_u"}})),
        Rule::Pod,
        &format!("{c}.securityContext.seLinuxOptions.user"),
    );
    pod_refused(
        context(json!({"windowsOptions": {"hostProcess": true}})),
        Rule::Pod,
        &format!("{c}.securityContext.windowsOptions.hostProcess"),
    );
    pod_refused(
        |p| {
            p["spec"]["securityContext"] =
                json!({"sysctls": [{"name": "kernel.msgmax", "value": "1"}]})
        },
        Rule::Pod,
        "spec.securityContext.sysctls[0].name",
    );
    pod_refused(
        |p| p["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80, "hostPort": 80}]),
        Rule::Pod,
        &format!("{c}.ports[0].hostPort"),
    );
    pod_refused(
        |p| {
            p["spec"]["containers"][0]["livenessProbe"] =
                json!({"httpGet": {"port": 80, "host": "10.0.0.1"}})
        },
        Rule::Pod,
        &format!("{c}.livenessProbe.httpGet.host"),
    );
    // What baseline allows: the listed capabilities, safe sysctls, confined profiles.
    let mut ok = pod();
    ok["spec"]["containers"][0]["securityContext"] = json!({
        "capabilities": {"add": ["NET_BIND_SERVICE", "CHOWN"], "drop": ["NET_RAW"]},
        "seccompProfile": {"type": "RuntimeDefault"},
        "seLinuxOptions": {"type": "container_t", "level": "s0:c1,c2"},
        "privileged": false,
    });
    ok["spec"]["securityContext"] =
        json!({"sysctls": [{"name": "net.ipv4.ping_group_range", "value": "0 1"}]});
    assert_eq!(
        check(&Containment::default(), Resource::Pod, S, &ok),
        Ok(())
    );
}

#[test]
fn pod_security_standards_restricted() {
    let rules = Containment {
        pod_security: PodSecurity::Restricted,
        ..Containment::default()
    };
    let c = "spec.containers[0].securityContext";
    // The default policy's Pod sets none of what restricted requires.
    refused(
        check(&rules, Resource::Pod, S, &pod()),
        Rule::Pod,
        "spec.containers[0].securityContext.allowPrivilegeEscalation",
    );
    let hardened = |p: &mut Value| {
        let context = json!({
            "allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"]},
        });
        p["spec"]["securityContext"] =
            json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}});
        p["spec"]["containers"][0]["securityContext"] = context.clone();
        p["spec"]["initContainers"][0]["securityContext"] = context;
    };
    let mut ok = pod();
    hardened(&mut ok);
    assert_eq!(check(&rules, Resource::Pod, S, &ok), Ok(()));
    for (edit, field) in [
        (
            json!({"allowPrivilegeEscalation": true, "capabilities": {"drop": ["ALL"]}}),
            format!("{c}.allowPrivilegeEscalation"),
        ),
        (
            json!({"allowPrivilegeEscalation": false}),
            format!("{c}.capabilities.drop"),
        ),
        (
            json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}}),
            format!("{c}.capabilities.add[0]"),
        ),
        (
            json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}, "runAsUser": 0}),
            format!("{c}.runAsUser"),
        ),
    ] {
        let mut manifest = ok.clone();
        manifest["spec"]["containers"][0]["securityContext"] = edit;
        refused(
            check(&rules, Resource::Pod, S, &manifest),
            Rule::Pod,
            &field,
        );
    }
    let mut manifest = ok.clone();
    manifest["spec"]["securityContext"] = json!({});
    refused(
        check(&rules, Resource::Pod, S, &manifest),
        Rule::Pod,
        "spec.containers[0].securityContext.runAsNonRoot",
    );
}

#[test]
fn pod_volumes_and_references() {
    pod_refused(
        |p| p["spec"]["volumes"][1]["persistentVolumeClaim"]["claimName"] = json!("bob-workspace"),
        Rule::Pod,
        "spec.volumes[1].persistentVolumeClaim.claimName",
    );
    // An older rootfs generation is not the current one.
    pod_refused(
        |p| {
            p["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] =
                json!("dev-alice-rootfs-g0")
        },
        Rule::Pod,
        "spec.volumes[0].persistentVolumeClaim.claimName",
    );
    pod_refused(
        |p| p["spec"]["volumes"][0] = json!({"name": "root", "hostPath": {"path": "/"}}),
        Rule::Pod,
        "spec.volumes[0].hostPath",
    );
    pod_refused(
        |p| p["spec"]["volumes"][0] = json!({"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}),
        Rule::Pod,
        "spec.volumes[0].projected.sources[0].serviceAccountToken",
    );
    pod_refused(
        |p| {
            p["spec"]["volumes"][0] =
                json!({"name": "s", "secret": {"secretName": "bob-credentials"}})
        },
        Rule::Pod,
        "spec.volumes[0].secret.secretName",
    );
    pod_refused(
        |p| {
            p["spec"]["containers"][0]["env"][3]["valueFrom"]["secretKeyRef"]["name"] =
                json!("bob-credentials")
        },
        Rule::Pod,
        "spec.containers[0].env[3].valueFrom.secretKeyRef.name",
    );
    pod_refused(
        |p| {
            p["spec"]["containers"][0]["envFrom"] =
                json!([{"configMapRef": {"name": "kube-root-ca.crt"}}])
        },
        Rule::Pod,
        "spec.containers[0].envFrom[0].configMapRef.name",
    );
    pod_refused(
        |p| p["spec"]["imagePullSecrets"] = json!([{"name": "registry"}]),
        Rule::Pod,
        "spec.imagePullSecrets[0].name",
    );
    pod_refused(
        |p| p["spec"]["containers"][0]["resources"] = json!({"limits": {"nvidia.com/gpu": "1"}}),
        Rule::Pod,
        "spec.containers[0].resources.limits.nvidia.com/gpu",
    );
    // What the operator names by flag is allowed; emptyDir and downwardAPI always are.
    let rules = Containment {
        secret_refs: ["registry".to_string()].into(),
        config_map_refs: ["kube-root-ca.crt".to_string()].into(),
        ..Containment::default()
    };
    let mut ok = pod();
    ok["spec"]["imagePullSecrets"] = json!([{"name": "registry"}]);
    ok["spec"]["containers"][0]["envFrom"] =
        json!([{"configMapRef": {"name": "kube-root-ca.crt"}}]);
    ok["spec"]["volumes"].as_array_mut().unwrap().extend([
        json!({"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}}),
        json!({"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}),
        json!({"name": "creds", "secret": {"secretName": "dev-alice-credentials"}}),
    ]);
    assert_eq!(check(&rules, Resource::Pod, S, &ok), Ok(()));
}

#[test]
fn grace_periods_and_deadlines_within_the_operators_bounds() {
    let rules = Containment::default();
    for grace in [json!(0), json!(30)] {
        widened_admitted(&rules, |p| {
            p["spec"]["terminationGracePeriodSeconds"] = grace.clone();
            p["spec"]["containers"][0]["livenessProbe"] =
                json!({"exec": {"command": ["true"]}, "terminationGracePeriodSeconds": grace});
        });
    }
    for grace in [
        json!(31),
        json!(3_155_760_000u64),
        json!(-1),
        json!("30"),
        json!(1.5),
    ] {
        pod_refused(
            |p| p["spec"]["terminationGracePeriodSeconds"] = grace.clone(),
            Rule::Pod,
            "spec.terminationGracePeriodSeconds",
        );
        pod_refused(
            |p| {
                p["spec"]["containers"][0]["startupProbe"] =
                    json!({"exec": {"command": ["true"]}, "terminationGracePeriodSeconds": grace})
            },
            Rule::Pod,
            "spec.containers[0].startupProbe.terminationGracePeriodSeconds",
        );
    }
    let longer = Containment {
        pod_bounds: PodBounds {
            termination_grace_seconds: 600,
            ..PodBounds::default()
        },
        ..Containment::default()
    };
    widened_admitted(&longer, |p| {
        p["spec"]["terminationGracePeriodSeconds"] = json!(600)
    });
    widened_admitted(&rules, |p| {
        p["spec"]["activeDeadlineSeconds"] = json!(30 * 24 * 3600)
    });
    for deadline in [json!(0), json!(30 * 24 * 3600 + 1), json!(3_155_760_000u64)] {
        pod_refused(
            |p| p["spec"]["activeDeadlineSeconds"] = deadline,
            Rule::Pod,
            "spec.activeDeadlineSeconds",
        );
    }
}

#[test]
fn resources_within_the_sandbox_bounds_per_container_and_summed() {
    let c = "spec.containers[0].resources";
    let rules = Containment::default();
    // The largest a sandbox may have, in the forms Kubernetes reads.
    widened_admitted(&rules, |p| {
        p["spec"]["containers"][0]["resources"] = json!({
            "requests": {"cpu": "16", "memory": "64Gi", "ephemeral-storage": "100Gi"},
            "limits": {"cpu": 16, "memory": "68719476736", "ephemeral-storage": "100Gi"},
        })
    });
    for (part, resource, amount) in [
        ("requests", "cpu", json!("4096")),
        ("requests", "cpu", json!("16001m")),
        ("limits", "cpu", json!(17)),
        ("requests", "memory", json!("64Ti")),
        ("limits", "memory", json!("65Gi")),
        ("requests", "ephemeral-storage", json!("1Pi")),
        ("requests", "memory", json!("lots")),
        ("requests", "cpu", json!(true)),
    ] {
        pod_refused(
            |p| p["spec"]["containers"][0]["resources"] = json!({part: {resource: amount}}),
            Rule::Pod,
            &format!("{c}.{part}.{resource}"),
        );
    }
    pod_refused(
        |p| p["spec"]["initContainers"][0]["resources"] = json!({"limits": {"cpu": "32"}}),
        Rule::Pod,
        "spec.initContainers[0].resources.limits.cpu",
    );
    // Two containers of 10 CPUs each: each within the bound, the Pod past it.
    let sidecar = |p: &mut Value, cpu: &str, restart: Option<&str>| {
        let mut extra = p["spec"]["initContainers"][0].clone();
        extra["name"] = json!("extra");
        extra["resources"] = json!({"limits": {"cpu": cpu}});
        if let Some(policy) = restart {
            extra["restartPolicy"] = json!(policy);
        }
        extra
    };
    pod_refused(
        |p| {
            p["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "10"}});
            let mut second = p["spec"]["containers"][0].clone();
            second["name"] = json!("second");
            p["spec"]["containers"] = json!([p["spec"]["containers"][0].clone(), second]);
        },
        Rule::Pod,
        "spec.containers[*].resources.requests.cpu",
    );
    // An init container runs alone: 10 + 10 is not a sum; a sidecar runs beside the rest.
    widened_admitted(&rules, |p| {
        p["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "10"}});
        let init = sidecar(p, "10", None);
        p["spec"]["initContainers"] = json!([init]);
    });
    pod_refused(
        |p| {
            p["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "10"}});
            let init = sidecar(p, "10", Some("Always"));
            p["spec"]["initContainers"] = json!([init]);
        },
        Rule::Pod,
        "spec.containers[*].resources.requests.cpu",
    );
    // The operator's bounds, not the defaults.
    let small = Containment {
        pod_bounds: PodBounds {
            cpu_milli: 2_000,
            memory_bytes: 4 << 30,
            ..PodBounds::default()
        },
        ..Containment::default()
    };
    let mut big = pod();
    big["spec"]["containers"][0]["resources"] = json!({"limits": {"memory": "8Gi"}});
    let refusal = check(&small, Resource::Pod, S, &big).unwrap_err();
    assert_eq!(refusal.field, format!("{c}.limits.memory"));
    assert!(
        refusal.reason.contains("4Gi (--max-sandbox-memory)"),
        "{refusal}"
    );
}

#[test]
fn a_sandbox_spec_within_the_bounds() {
    let bounds = PodBounds::default();
    assert_eq!(bounds.check_spec("spec", Some("16"), Some("64Gi")), Ok(()));
    assert_eq!(bounds.check_spec("spec", None, None), Ok(()));
    let (field, why) = bounds
        .check_spec("spec", Some("4096"), Some("1Gi"))
        .unwrap_err();
    assert_eq!(field, "spec.resources.cpu");
    assert!(why.contains("16 (--max-sandbox-cpu)"), "{why}");
    let (field, _) = bounds
        .check_spec("spec.template", None, Some("64Ti"))
        .unwrap_err();
    assert_eq!(field, "spec.template.resources.memory");
}
