"""The official Kubernetes Python client (`kubernetes`, pinned in .ci/run) against the embedded
cluster, as an agent platform scripts it: for every kind the demo serves, list, read, watch,
create, patch, replace and delete through the typed APIs. The client's models refuse a field
of the wrong type, a missing required field and an unknown field (pydantic, extra="forbid"),
so any answer the real API server would not give fails here with the client's own error.

    python client_peer.py KUBECONFIG NAMESPACE

Prints one line per kind checked; exits non-zero with the client's traceback on any failure.
Run by tests/tests/python_client.rs.
"""

import sys
import time

from kubernetes import client, config, watch

KUBECONFIG, NS = sys.argv[1], sys.argv[2]
PREFIX = "py-peer-"
# The API server's Status for a delete that is done, as the client reads it (a dict: the
# generated client types it `object`).
DELETED = "Success"

config.load_kube_config(config_file=KUBECONFIG)
api = client.ApiClient()
core = client.CoreV1Api(api)
networking = client.NetworkingV1Api(api)
coordination = client.CoordinationV1Api(api)
events = client.EventsV1Api(api)
custom = client.CustomObjectsApi(api)



def meta(name, **fields):
    return client.V1ObjectMeta(name=PREFIX + name, namespace=NS, **fields)


def watch_a_few(list_call, *args, want=1):
    """A watch from the start: its first events (the ADDED of each object), each typed."""
    seen = []
    stream = watch.Watch()
    for event in stream.stream(list_call, *args, timeout_seconds=5):
        seen.append(event)
        if len(seen) >= want:
            stream.stop()
    assert len(seen) >= want, f"{list_call.__name__}: {len(seen)} watch events, wanted {want}"
    for event in seen:
        assert event["type"] in ("ADDED", "MODIFIED", "DELETED"), event["type"]
    return seen


def status_of_delete(answer, kind):
    """A delete of a kind deleted at once answers a Status, as kube-apiserver's does."""
    assert isinstance(answer, dict), f"{kind}: the delete answered {type(answer).__name__}"
    assert answer.get("kind") == "Status", f"{kind}: the delete answered {answer}"
    assert answer.get("status") == DELETED, f"{kind}: the delete answered {answer}"
    assert answer["details"]["name"].startswith(PREFIX), answer


def cycle(kind, create, read, patch, replace, delete, lst, body, patch_body, check):
    """Create, read, patch, replace, list (typed), delete one object of a kind."""
    name = body.metadata.name
    created = create(NS, body)
    assert created.metadata.name == name and created.metadata.uid, created.metadata
    patched = patch(name, NS, patch_body)
    assert check(patched), f"{kind} after the patch: {patched}"
    current = read(name, NS)
    assert check(current), f"{kind} read back: {current}"
    current.metadata.labels = {**(current.metadata.labels or {}), "replaced": "yes"}
    replaced = replace(name, NS, current)
    assert replaced.metadata.labels["replaced"] == "yes", replaced.metadata
    listed = lst(NS)
    assert any(item.metadata.name == name for item in listed.items), f"{kind}: not listed"
    answer = delete(name, NS)
    print(f"{kind}: created, patched, read, replaced, listed, deleted", flush=True)
    return answer


# -- What the demo serves, read as it is: every Pod (the simulated kubelet's statuses), PVC,
# Secret, Service, NetworkPolicy, Event, Lease, ConfigMap, in every namespace.
pods = core.list_pod_for_all_namespaces()
assert pods.items, "the demo runs pods"
running = [p for p in pods.items if p.status and p.status.phase == "Running"]
assert running, "a running pod"
for pod in running:
    for status in pod.status.container_statuses:
        assert status.image_id and status.container_id and status.started, status
    core.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
core.read_namespaced_pod_status(running[0].metadata.name, running[0].metadata.namespace)
for lister in (
    core.list_persistent_volume_claim_for_all_namespaces,
    core.list_secret_for_all_namespaces,
    core.list_service_for_all_namespaces,
    core.list_event_for_all_namespaces,
    core.list_config_map_for_all_namespaces,
    networking.list_network_policy_for_all_namespaces,
    coordination.list_lease_for_all_namespaces,
    events.list_event_for_all_namespaces,
):
    found = lister()
    for item in found.items:
        assert item.metadata.name, item
    print(f"{lister.__name__}: {len(found.items)} read", flush=True)
watch_a_few(core.list_namespaced_pod, NS)
print("pods: watched", flush=True)

# -- ConfigMap, Secret, Service, NetworkPolicy: the whole cycle.
answer = cycle(
    "ConfigMap",
    core.create_namespaced_config_map,
    core.read_namespaced_config_map,
    core.patch_namespaced_config_map,
    core.replace_namespaced_config_map,
    core.delete_namespaced_config_map,
    core.list_namespaced_config_map,
    client.V1ConfigMap(metadata=meta("config"), data={"a": "1"}),
    {"data": {"b": "2"}},
    lambda cm: cm.data == {"a": "1", "b": "2"},
)
status_of_delete(answer, "ConfigMap")

answer = cycle(
    "Secret",
    core.create_namespaced_secret,
    core.read_namespaced_secret,
    core.patch_namespaced_secret,
    core.replace_namespaced_secret,
    core.delete_namespaced_secret,
    core.list_namespaced_secret,
    client.V1Secret(metadata=meta("secret"), string_data={"token": "t"}, type="Opaque"),
    {"metadata": {"labels": {"patched": "yes"}}},
    lambda s: s.data.get("token") == "dA==" and s.metadata.labels == {"patched": "yes"},
)
status_of_delete(answer, "Secret")

service = client.V1Service(
    metadata=meta("service"),
    spec=client.V1ServiceSpec(
        selector={"app": "peer"},
        ports=[client.V1ServicePort(name="http", port=80, target_port=8080)],
    ),
)
answer = cycle(
    "Service",
    core.create_namespaced_service,
    core.read_namespaced_service,
    core.patch_namespaced_service,
    core.replace_namespaced_service,
    core.delete_namespaced_service,
    core.list_namespaced_service,
    service,
    {"metadata": {"labels": {"patched": "yes"}}},
    lambda s: s.spec.ports[0].port == 80 and s.metadata.labels == {"patched": "yes"},
)
# A Service's delete answers with the Service, as kube-apiserver's does: the client reads it
# as a V1Service.
assert answer.metadata.name == PREFIX + "service", answer

policy = client.V1NetworkPolicy(
    metadata=meta("policy"),
    spec=client.V1NetworkPolicySpec(
        pod_selector=client.V1LabelSelector(match_labels={"app": "peer"}),
        policy_types=["Ingress"],
    ),
)
answer = cycle(
    "NetworkPolicy",
    networking.create_namespaced_network_policy,
    networking.read_namespaced_network_policy,
    networking.patch_namespaced_network_policy,
    networking.replace_namespaced_network_policy,
    networking.delete_namespaced_network_policy,
    networking.list_namespaced_network_policy,
    policy,
    {"metadata": {"labels": {"patched": "yes"}}},
    lambda p: p.spec.policy_types == ["Ingress"] and p.metadata.labels == {"patched": "yes"},
)
status_of_delete(answer, "NetworkPolicy")

lease = client.V1Lease(
    metadata=meta("lease"),
    spec=client.V1LeaseSpec(holder_identity="peer", lease_duration_seconds=15),
)
answer = cycle(
    "Lease",
    coordination.create_namespaced_lease,
    coordination.read_namespaced_lease,
    coordination.patch_namespaced_lease,
    coordination.replace_namespaced_lease,
    coordination.delete_namespaced_lease,
    coordination.list_namespaced_lease,
    lease,
    {"spec": {"holderIdentity": "peer-2"}},
    lambda lease: lease.spec.holder_identity == "peer-2",
)
status_of_delete(answer, "Lease")

# -- Events, core/v1 and events.k8s.io/v1: one store, two shapes.
now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
regarding = client.V1ObjectReference(kind="Pod", namespace=NS, name=running[0].metadata.name)
core_event = client.CoreV1Event(
    metadata=meta("core-event"),
    involved_object=regarding,
    reason="Peer",
    message="from the Python client",
    type="Normal",
    first_timestamp=now,
    last_timestamp=now,
    count=1,
)
answer = cycle(
    "Event (core/v1)",
    core.create_namespaced_event,
    core.read_namespaced_event,
    core.patch_namespaced_event,
    core.replace_namespaced_event,
    core.delete_namespaced_event,
    core.list_namespaced_event,
    core_event,
    {"count": 2},
    lambda e: e.count == 2,
)
status_of_delete(answer, "Event")

v1_event = client.EventsV1Event(
    metadata=meta("event"),
    event_time=time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime()),
    regarding=regarding,
    reason="Peer",
    note="from events.k8s.io/v1",
    type="Normal",
    action="Check",
    reporting_controller="example.com/peer",
    reporting_instance="peer-1",
)
created = events.create_namespaced_event(NS, v1_event)
assert created.note == "from events.k8s.io/v1" and created.regarding.name == regarding.name
# The same Event through core/v1: `note` is its message.
as_core = core.read_namespaced_event(PREFIX + "event", NS)
assert as_core.message == "from events.k8s.io/v1", as_core
assert as_core.reporting_component == "example.com/peer", as_core
patched = events.patch_namespaced_event(PREFIX + "event", NS, {"note": "patched"})
assert patched.note == "patched", patched
assert events.read_namespaced_event(PREFIX + "event", NS).note == "patched"
current = events.read_namespaced_event(PREFIX + "event", NS)
current.note = "replaced"
assert events.replace_namespaced_event(PREFIX + "event", NS, current).note == "replaced"
listed = events.list_namespaced_event(NS)
assert any(e.metadata.name == PREFIX + "event" for e in listed.items), "events.k8s.io: listed"
watch_a_few(events.list_namespaced_event, NS)
status_of_delete(events.delete_namespaced_event(PREFIX + "event", NS), "Event (events.k8s.io)")
print("Event (events.k8s.io/v1): created, read as core/v1, patched, listed, watched, deleted",
      flush=True)

# -- A Pod and a PVC: started and bound by the embedded cluster, read back typed.
pvc = client.V1PersistentVolumeClaim(
    metadata=meta("claim"),
    spec=client.V1PersistentVolumeClaimSpec(
        access_modes=["ReadWriteOnce"],
        resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
    ),
)
answer = cycle(
    "PersistentVolumeClaim",
    core.create_namespaced_persistent_volume_claim,
    core.read_namespaced_persistent_volume_claim,
    core.patch_namespaced_persistent_volume_claim,
    core.replace_namespaced_persistent_volume_claim,
    core.delete_namespaced_persistent_volume_claim,
    core.list_namespaced_persistent_volume_claim,
    pvc,
    {"metadata": {"labels": {"patched": "yes"}}},
    lambda c: c.spec.access_modes == ["ReadWriteOnce"] and c.metadata.labels == {"patched": "yes"},
)
assert answer.metadata.name == PREFIX + "claim", answer

pod = client.V1Pod(
    metadata=meta("pod", labels={"app": "peer"}),
    spec=client.V1PodSpec(
        init_containers=[client.V1Container(name="prep", image="busybox:1.36")],
        containers=[client.V1Container(name="main", image="registry.example:5000/app:1.0")],
    ),
)
core.create_namespaced_pod(NS, pod)
deadline = time.monotonic() + 30
while True:
    current = core.read_namespaced_pod(PREFIX + "pod", NS)
    if current.status and current.status.phase == "Running":
        break
    assert time.monotonic() < deadline, f"the pod never ran: {current.status}"
    time.sleep(0.2)
main = current.status.container_statuses[0]
assert main.image_id.startswith("registry.example:5000/app@sha256:"), main.image_id
assert main.container_id.startswith("containerd://"), main.container_id
assert current.status.init_container_statuses[0].state.terminated.exit_code == 0
patched = core.patch_namespaced_pod(
    PREFIX + "pod", NS, {"metadata": {"labels": {"patched": "yes"}}}
)
assert patched.metadata.labels == {"app": "peer", "patched": "yes"}, patched.metadata.labels
patched.metadata.labels["replaced"] = "yes"
replaced = core.replace_namespaced_pod(PREFIX + "pod", NS, patched)
assert replaced.metadata.labels["replaced"] == "yes"
# A pod's delete answers with the pod, terminating or gone, as the client reads it (V1Pod).
deleted = core.delete_namespaced_pod(PREFIX + "pod", NS)
assert deleted.metadata.name == PREFIX + "pod", deleted
print("Pod: created, ran, read, patched, replaced, deleted", flush=True)

# -- The CRDs, through the CustomObjectsApi (dicts: the client has no models for them).
GROUP, VERSION = "cubepod.io", "v1alpha1"
for plural in ("sandboxes", "podwarmpools", "policyrollouts"):
    found = custom.list_namespaced_custom_object(GROUP, VERSION, NS, plural)
    print(f"{plural}: {len(found['items'])} read", flush=True)
sandboxes = custom.list_namespaced_custom_object(GROUP, VERSION, NS, "sandboxes")["items"]
first = sandboxes[0]["metadata"]["name"]
custom.get_namespaced_custom_object(GROUP, VERSION, NS, "sandboxes", first)
watch_a_few(custom.list_namespaced_custom_object, GROUP, VERSION, NS, "sandboxes")
sandbox = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "Sandbox",
    "metadata": {"name": PREFIX + "sandbox", "namespace": NS},
    "spec": {"image": "ghcr.io/cubepod/sandbox-base:1.0", "desiredState": "Paused"},
}
custom.create_namespaced_custom_object(GROUP, VERSION, NS, "sandboxes", sandbox)
patched = custom.patch_namespaced_custom_object(
    GROUP, VERSION, NS, "sandboxes", PREFIX + "sandbox", {"metadata": {"labels": {"p": "y"}}}
)
assert patched["metadata"]["labels"] == {"p": "y"}, patched["metadata"]
current = custom.get_namespaced_custom_object(
    GROUP, VERSION, NS, "sandboxes", PREFIX + "sandbox"
)
current["metadata"]["labels"]["r"] = "y"
custom.replace_namespaced_custom_object(
    GROUP, VERSION, NS, "sandboxes", PREFIX + "sandbox", current
)
custom.delete_namespaced_custom_object(GROUP, VERSION, NS, "sandboxes", PREFIX + "sandbox")
print("Sandbox: created, patched, replaced, deleted", flush=True)
print("python client: every kind read and written, typed", flush=True)
