//! kubectl's client-side validation against the embedded cluster, as against a real one: it
//! reads the OpenAPI v3 documents of every kind served (the Kubernetes API's schemas for the
//! built-in kinds), leaves the check to the server (`fieldValidation=Strict`), which refuses an
//! unknown field in the API server's words. events.k8s.io/v1 Events, `kubectl explain` and
//! `kubectl delete`'s output too. kubectl must be installed (`.ci/run` installs it).

use cubepod_tests::kubectl::Embedded;

const NS: &str = "cubepod-workloads";

/// One manifest of each built-in kind the demo serves.
fn manifests() -> Vec<(&'static str, String)> {
    let meta = |name: &str| format!("metadata:\n  name: {name}\n  namespace: {NS}\n");
    vec![
        (
            "configmap/v-config",
            format!(
                "apiVersion: v1\nkind: ConfigMap\n{}data:\n  a: \"1\"\n",
                meta("v-config")
            ),
        ),
        (
            "secret/v-secret",
            format!(
                "apiVersion: v1\nkind: Secret\n{}type: Opaque\nstringData:\n  token: t\n",
                meta("v-secret")
            ),
        ),
        (
            "pod/v-pod",
            format!(
                "apiVersion: v1\nkind: Pod\n{}spec:\n  containers:\n  - name: main\n    \
                 image: busybox:1.36\n    resources:\n      requests:\n        cpu: 100m\n",
                meta("v-pod")
            ),
        ),
        (
            "persistentvolumeclaim/v-claim",
            format!(
                "apiVersion: v1\nkind: PersistentVolumeClaim\n{}spec:\n  accessModes: \
                 [ReadWriteOnce]\n  resources:\n    requests:\n      storage: 1Gi\n",
                meta("v-claim")
            ),
        ),
        (
            "service/v-service",
            format!(
                "apiVersion: v1\nkind: Service\n{}spec:\n  selector:\n    app: v\n  ports:\n  \
                 - port: 80\n    targetPort: 8080\n",
                meta("v-service")
            ),
        ),
        (
            "networkpolicy.networking.k8s.io/v-policy",
            format!(
                "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n{}spec:\n  \
                 podSelector: {{}}\n  policyTypes: [Ingress]\n",
                meta("v-policy")
            ),
        ),
        (
            "lease.coordination.k8s.io/v-lease",
            format!(
                "apiVersion: coordination.k8s.io/v1\nkind: Lease\n{}spec:\n  \
                 holderIdentity: v\n",
                meta("v-lease")
            ),
        ),
        (
            "event/v-event",
            format!(
                "apiVersion: v1\nkind: Event\n{}involvedObject:\n  kind: Pod\n  name: v-pod\n  \
                 namespace: {NS}\nreason: Checked\nmessage: from kubectl\ntype: Normal\n",
                meta("v-event")
            ),
        ),
    ]
}

#[test]
fn apply_with_default_validation_takes_every_built_in_kind_and_refuses_unknown_fields() {
    let cluster = Embedded::start(&[]);
    for (name, yaml) in manifests() {
        let file = name.replace(['/', '.'], "-");
        let path = cluster.write(&format!("{file}.yaml"), &yaml);
        let path = path.to_str().expect("a UTF-8 path");
        let applied = cluster.ok(&["apply", "-f", path]);
        assert_eq!(applied.trim(), format!("{name} created"), "{yaml}");

        // The same object with a field its kind does not have: refused, nothing written.
        let unknown = format!("{yaml}colour: blue\n");
        let path = cluster.write(&format!("{file}-unknown.yaml"), &unknown);
        let out = cluster.run(&["create", "-f", path.to_str().expect("a UTF-8 path")]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{name} with an unknown field: {stderr}"
        );
        assert!(
            stderr.contains("strict decoding error: unknown field \"colour\""),
            "{name}: {stderr}"
        );
    }
    // A nested unknown field is named by its path.
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: v-pod-2\n  namespace: \
               cubepod-workloads\nspec:\n  containers:\n  - name: main\n    image: i\n    \
               imagePolicy: Always\n";
    let path = cluster.write("pod-2.yaml", pod);
    let out = cluster.run(&["apply", "-f", path.to_str().expect("a UTF-8 path")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unknown field \"spec.containers[0].imagePolicy\""),
        "{stderr}"
    );
    let missing = cluster.run(&["get", "pod", "v-pod-2", "-n", NS]);
    assert!(!missing.status.success(), "the refused pod was not written");

    // What kubectl explain reads: the Kubernetes API's descriptions.
    let explained = cluster.ok(&["explain", "configmap.data"]);
    assert!(
        explained.contains("Data contains the configuration data"),
        "{explained}"
    );

    // Deleting a ConfigMap: the API server's Status, and kubectl's usual line.
    let deleted = cluster.ok(&["delete", "configmap", "v-config", "-n", NS]);
    assert_eq!(deleted.trim(), "configmap \"v-config\" deleted");
    let raw = cluster.ok(&[
        "delete",
        "--raw",
        &format!("/api/v1/namespaces/{NS}/secrets/v-secret"),
    ]);
    let status: serde_json::Value = serde_json::from_str(&raw).expect("a JSON answer");
    assert_eq!(status["kind"], "Status", "{raw}");
    assert_eq!(status["status"], "Success", "{raw}");
    assert_eq!(status["details"]["name"], "v-secret", "{raw}");
    assert_eq!(status["details"]["kind"], "secrets", "{raw}");
}

#[test]
fn events_are_served_as_events_k8s_io_v1_too() {
    let cluster = Embedded::start(&[]);
    // The controller's own Events, read through events.k8s.io/v1.
    let listed = cluster.until(
        &["get", "events.v1.events.k8s.io", "-n", NS, "-o", "json"],
        |out| out.contains("\"note\""),
    );
    let list: serde_json::Value = serde_json::from_str(&listed).expect("a JSON list");
    let first = &list["items"][0];
    assert_eq!(first["apiVersion"], "events.k8s.io/v1", "{first}");
    for field in ["note", "regarding", "reportingController", "eventTime"] {
        assert!(first.get(field).is_some(), "{field} in {first}");
    }
    assert!(first.get("message").is_none(), "{first}");

    let event = format!(
        "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata:\n  name: v1-event\n  \
         namespace: {NS}\neventTime: \"2026-01-01T00:00:00.000000Z\"\nregarding:\n  kind: Pod\n  \
         name: dev-alice\n  namespace: {NS}\nreason: Checked\nnote: through events.k8s.io\n\
         action: Check\nreportingController: example.com/check\nreportingInstance: check-1\n\
         type: Normal\n"
    );
    let path = cluster.write("v1-event.yaml", &event);
    let created = cluster.ok(&["apply", "-f", path.to_str().expect("a UTF-8 path")]);
    assert_eq!(created.trim(), "event.events.k8s.io/v1-event created");
    // The same Event, core/v1: the note is its message.
    let message = cluster.ok(&[
        "get",
        "event",
        "v1-event",
        "-n",
        NS,
        "-o",
        "jsonpath={.message} {.reportingComponent}",
    ]);
    assert_eq!(message, "through events.k8s.io example.com/check");
    let deleted = cluster.ok(&["delete", "events.v1.events.k8s.io", "v1-event", "-n", NS]);
    assert_eq!(deleted.trim(), "event.events.k8s.io \"v1-event\" deleted");
}
