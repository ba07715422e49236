"""The default decisions of the Python SDK, natively: the same cases as the Rust SDK's tests
(sdk/tests/), on the recording client. That both SDKs write the same JSON for the same input is
checked by host/tests/differential.rs, which runs the Python default as a component."""

import json
import random

import pytest

import cubepod_policy
from cubepod_policy import errors, manifest, names, testing
from cubepod_policy.cidr import Cidr, excepts
from cubepod_policy.quantity import is_positive_quantity
from cubepod_policy.shutdown import DAY, HOUR, MINUTE, WEEK, bucket
from cubepod_policy.text import quoted
from cubepod_policy.types import (
    ConditionStatus,
    DesiredState,
    EgressMode,
    EventType,
    ReapAction,
    SandboxPhase,
    ServicePort,
    ServiceSpec,
    UpdateStrategy,
)

POLICY = cubepod_policy.Policy()


def condition(out, kind):
    return next(c for c in out.status.conditions if c.kind == kind)


def test_a_new_running_sandbox_gets_two_block_pvcs_a_secret_a_network_policy_and_a_kata_pod():
    client = testing.RecordingClient(pod_ip="10.0.0.7")
    out = POLICY.reconcile_sandbox(client, testing.reconcile_input(testing.sandbox("a")))
    assert client.summaries() == [
        "ensure-pvc a-workspace",
        "ensure-pvc a-rootfs-g1",
        "ensure-secret a-credentials",
        "apply-network-policy a-network",
        "ensure-pod a",
    ]
    pod = client.objects["pod a"]
    assert pod["spec"]["runtimeClassName"] == "kata-qemu"
    assert pod["metadata"]["labels"]["cubepod.io/rootfs-generation"] == "1"
    assert pod["spec"]["containers"][0]["env"][3]["valueFrom"]["secretKeyRef"] == {
        "name": "a-credentials", "key": "token"}
    assert client.objects["secret a-credentials"]["stringData"]["token"] == testing.FRESH_TOKEN
    assert client.objects["pvc a-workspace"]["spec"]["volumeMode"] == "Block"
    assert out.status.phase == SandboxPhase.PENDING
    assert out.status.pod_ip == "10.0.0.7"
    assert out.status.started_at == testing.NOW
    assert condition(out, "Ready").reason == "PodStarting"
    assert [e.reason for e in out.events] == ["Started"]


def test_a_converged_sandbox_makes_no_call_and_keeps_its_status():
    client = testing.RecordingClient(pod_ip="10.0.0.7")
    first_input = testing.reconcile_input(testing.sandbox("a"))
    first = POLICY.reconcile_sandbox(client, first_input)
    client.take_summaries()
    again = testing.converged(first_input, first.status, client)
    running = POLICY.reconcile_sandbox(client, again)
    assert client.summaries() == []
    assert running.status.phase == SandboxPhase.RUNNING
    assert condition(running, "Ready").status == ConditionStatus.TRUE
    settled = POLICY.reconcile_sandbox(client, testing.converged(again, running.status, client))
    assert client.summaries() == []
    assert settled.status == running.status
    assert settled.events == []


def test_pause_deletes_only_the_pod_and_says_so():
    client = testing.RecordingClient()
    first_input = testing.reconcile_input(testing.sandbox("a"))
    first = POLICY.reconcile_sandbox(client, first_input)
    client.take_summaries()
    paused_input = testing.converged(first_input, first.status, client)
    paused_input.sandbox.spec.desired_state = DesiredState.PAUSED
    paused = POLICY.reconcile_sandbox(client, paused_input)
    assert client.take_summaries() == ["delete-pod a"]
    assert paused.status.phase == SandboxPhase.PAUSED
    assert condition(paused, "Paused").reason == "UserRequested"
    assert all(c.kind != "SpecApplied" for c in paused.status.conditions)


def test_a_spec_change_while_running_waits_for_the_next_start():
    client = testing.RecordingClient()
    first_input = testing.reconcile_input(testing.sandbox("a"))
    first = POLICY.reconcile_sandbox(client, first_input)
    edited = testing.converged(first_input, first.status, client)
    edited.sandbox.spec.image = 'registry.example/x:"2"'
    edited.sandbox.generation = 2
    out = POLICY.reconcile_sandbox(client, edited)
    applied = condition(out, "SpecApplied")
    assert applied.status == ConditionStatus.FALSE
    assert applied.reason == "PendingRestart"
    assert 'spec.image (now "registry.example/x:\\"2\\"")' in applied.message
    assert [e.reason for e in out.events] == ["PendingRestart"]


def test_an_invalid_spec_touches_nothing_and_names_the_fix():
    client = testing.RecordingClient()
    sb = testing.sandbox("a")
    sb.spec.network.allow_cidrs = ["10.0.0.0/33"]
    out = POLICY.reconcile_sandbox(client, testing.reconcile_input(sb))
    assert client.summaries() == []
    valid = condition(out, "SpecValid")
    assert valid.reason == "InvalidCIDR"
    assert valid.message.startswith('spec.network.allowCIDRs[0] "10.0.0.0/33" is not a CIDR')
    assert out.status.phase == SandboxPhase.FAILED
    assert out.events[0].kind == EventType.WARNING


def test_a_fork_of_a_missing_source_waits_and_says_why():
    out = POLICY.reconcile_sandbox(testing.RecordingClient(), testing.reconcile_input(
        testing.sandbox("b", forked_from="a")))
    assert condition(out, "SpecValid").reason == "ForkSourceNotFound"
    assert out.requeue_after_seconds == 10


def test_a_failed_call_raises_the_hosts_error_with_its_message():
    client = testing.RecordingClient(fail=("ensure-secret a-credentials",
                                           errors.Retryable("the API server is busy", 500)))
    with pytest.raises(errors.Retryable) as caught:
        POLICY.reconcile_sandbox(client, testing.reconcile_input(testing.sandbox("a")))
    assert caught.value.message == "the API server is busy"
    assert caught.value.delay_ms == 500
    assert client.summaries() == ["ensure-pvc a-workspace", "ensure-pvc a-rootfs-g1"]


def test_cleanup_deletes_the_children_and_the_network_policy_last():
    client = testing.RecordingClient()
    POLICY.reconcile_sandbox(client, testing.reconcile_input(testing.sandbox("a")))
    client.take_summaries()
    sb = testing.sandbox("a", deleting=True)
    observed = testing.observe(client, "a", True)
    out = POLICY.cleanup_sandbox(client, testing.NOW, sb, observed)
    assert client.take_summaries() == [
        "delete-pod a", "delete-pvc a-rootfs-g1", "delete-pvc a-workspace",
        "delete-secret a-credentials",
    ]
    assert not out.done
    assert out.status.phase == SandboxPhase.TERMINATING
    out = POLICY.cleanup_sandbox(client, testing.NOW, sb, testing.observe(client, "a", True))
    assert client.take_summaries() == ["delete-network-policy a-network"]


def test_internet_egress_excepts_every_blocked_range_in_every_form():
    client = testing.RecordingClient()
    sb = testing.sandbox("a")
    sb.spec.network.deny_cidrs = ["8.8.8.0/24"]
    sb.spec.service = ServiceSpec([ServicePort("http", 8080)])
    inp = testing.reconcile_input(sb)
    inp.cluster_network.ingress_from = [("app", "gateway")]
    POLICY.reconcile_sandbox(client, inp)
    policy = client.objects["networkpolicy a-network"]
    v4, v6 = policy["spec"]["egress"][0]["to"]
    assert v4["ipBlock"]["cidr"] == "0.0.0.0/0"
    assert v4["ipBlock"]["except"] == [
        "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10",
        "8.8.8.0/24",
    ]
    # The IPv4-mapped forms lie in ::/64, which is excepted whole.
    assert "::/64" in v6["ipBlock"]["except"]
    assert "64:ff9b::808:800/120" in v6["ipBlock"]["except"]
    assert "2002:a00::/24" in v6["ipBlock"]["except"]
    assert "64:ff9b:1::/48" == v6["ipBlock"]["except"][-1]
    assert policy["spec"]["ingress"][0]["ports"] == [{"port": 8080, "protocol": "TCP"}]
    annotation = policy["metadata"]["annotations"]["cubepod.io/spec-hash"]
    assert manifest.spec_hash(policy["spec"]) == annotation
    assert client.objects["service a"]["spec"]["clusterIP"] == "None"


def test_excepts_are_the_cuts_inside_that_no_other_cut_covers_the_first_of_equals():
    """The definition, every cut against every other, against the sort and sweep, on ranges
    drawn from a seed (nested, equal, apart, both families)."""

    def pairwise(cidr, cuts):
        if any(cut.contains(cidr) for cut, _ in cuts):
            return None
        return [
            text
            for i, (cut, text) in enumerate(cuts)
            if cidr.contains(cut)
            and not any(
                j != i and other.contains(cut) and (other != cut or j < i)
                for j, (other, _) in enumerate(cuts)
            )
        ]

    draw = random.Random(12345)
    for round_ in range(3000):
        cuts = []
        for k in range(draw.randrange(12)):
            v6 = draw.randrange(3) == 0
            prefix = 120 + draw.randrange(9) if v6 else 24 + draw.randrange(9)
            cuts.append((Cidr.of(v6, draw.randrange(512), prefix), f"cut {k}"))
        cidr = draw.choice(
            [
                Cidr.of(False, draw.randrange(512), 23 + draw.randrange(4)),
                Cidr.of(True, 0, 118),
                Cidr.of(False, 0, 22),
            ]
        )
        assert excepts(cidr, cuts) == pairwise(cidr, cuts), f"seed round {round_}"


def test_egress_none_allows_nothing_not_even_dns():
    client = testing.RecordingClient()
    sb = testing.sandbox("a")
    sb.spec.network.egress = EgressMode.NONE
    POLICY.reconcile_sandbox(client, testing.reconcile_input(sb))
    assert "egress" not in client.objects["networkpolicy a-network"]["spec"]


def test_cidrs_parse_and_print_as_rusts_std_does():
    forms = [str(f) for f in Cidr.parse("169.254.169.254/32").v4_forms()]
    assert forms == [
        "::ffff:169.254.169.254/128", "::ffff:0:a9fe:a9fe/128", "::a9fe:a9fe/128",
        "64:ff9b::a9fe:a9fe/128", "2002:a9fe:a9fe::/48",
    ]
    assert [str(f) for f in Cidr.parse("0.0.0.0/0").v4_forms()] == [
        "::ffff:0.0.0.0/96", "::ffff:0:0:0/96", "::/96", "64:ff9b::/96", "2002::/16"]
    assert Cidr.parse("10.1.2.3/8") == Cidr.parse("10.0.0.0/8")
    assert Cidr.parse("fc00::/7").contains(Cidr.parse("fdff::/16"))
    assert str(Cidr.parse("1:2:3:4:5:6:7::/128")) == "1:2:3:4:5:6:7:0/128"
    assert str(Cidr.parse("::1.2.3.4/128")) == "::102:304/128"
    for bad in ["10.0.0.0", "10.0.0.0/33", "::/129", "x/1", "1.2.3.4/-1", "1.2.3.4/ 8",
                "01.2.3.4/8", "fe80::1%eth0/64", "1:2:3:4:5:6:7:8:9/64", "1::2::3/64",
                "::ffff:1.2.3.4:5/64"]:
        assert Cidr.parse(bad) is None, bad


def test_quantities_as_the_api_server_reads_them():
    for q in ["1", "10Gi", "500m", "1.5Gi", "0.5", "2e3", "1E-2", "100M", "3Ei", ".5Gi"]:
        assert is_positive_quantity(q), q
    for q in ["", "ten", "10GB", "10 Gi", "-1Gi", "0", "0Gi", "1..2", ".", "Gi", "1e", "1x"]:
        assert not is_positive_quantity(q), q


def test_values_are_quoted_as_rust_quotes_them():
    assert quoted('a"b\\c\n\t') == '"a\\"b\\\\c\\n\\t"'
    assert quoted("é\u200b\x7f") == '"é\\u{200b}\\u{7f}"'


def test_shutdown_buckets_show_their_lower_bound():
    assert bucket(15 * DAY) == ("14d", DAY + 1)
    assert bucket(WEEK - 1) == ("3d", 4 * DAY)
    assert bucket(6 * HOUR) == ("5h", HOUR + 1)
    assert bucket(9 * MINUTE) == ("<10m", 9 * MINUTE)
    assert bucket(0) == ("passed", None)


def test_a_pool_fills_with_named_members_and_replaces_stale_ones():
    pool = testing.pool("p", 3)
    out = POLICY.reconcile_pool(testing.pool_input(pool, [testing.member("p-1", True)]))
    assert [c.name for c in out.create] == ["p-0", "p-2"]
    member = json.loads(out.create[0].manifest)
    assert member["metadata"]["labels"]["cubepod.io/pool"] == "p"
    assert member["metadata"]["labels"]["cubepod.io/template-hash"] == testing.member("x", True).template_hash
    pool.spec.template.image = "other:1"
    out = POLICY.reconcile_pool(testing.pool_input(pool, [testing.member("p-0", True)]))
    assert out.delete == ["p-0"]
    assert [e.reason for e in out.events] == ["Recreating", "Scaling"]
    pool.spec.update_strategy = UpdateStrategy.ON_REPLENISH
    out = POLICY.reconcile_pool(testing.pool_input(pool, [testing.member("p-0", True)]))
    assert out.delete == []


def test_a_pool_above_the_cap_keeps_the_cap_and_says_so():
    inp = testing.pool_input(testing.pool("p", 5), [])
    inp.max_replicas = 2
    out = POLICY.reconcile_pool(inp)
    assert len(out.create) == 2
    assert [e.reason for e in out.events] == ["ReplicasCapped", "Scaling"]


def test_the_reaper_pauses_the_idle_and_acts_on_shutdown_times():
    idle = testing.sandbox("idle", idle_timeout=60, last_activity=testing.NOW - 61)
    busy = testing.sandbox("busy", idle_timeout=60, last_activity=testing.NOW - 10)
    done = testing.sandbox("done")
    done.spec.shutdown_time = testing.NOW - 5
    decisions = POLICY.reap(testing.NOW, testing.NAMESPACE,
                            [testing.candidate(s) for s in (idle, busy, done)])
    assert [(d.name, d.action, d.reason) for d in decisions] == [
        ("done", ReapAction.SHUTDOWN_DELETE, "spec.shutdownTime passed 5s ago"),
        ("idle", ReapAction.IDLE_PAUSE, "no activity for 61s, above idleTimeoutSeconds 60"),
    ]


def test_a_policy_overrides_one_decision_and_refuses_with_the_defaults_answer():
    class OnlyAlpine(cubepod_policy.Policy):
        NAME = "only-alpine"

        def reconcile_sandbox(self, client, input):
            if not input.sandbox.spec.image.startswith("alpine"):
                return cubepod_policy.refused(input, cubepod_policy.validate.Invalid(
                    "ImageNotAllowed", "only alpine"))
            return super().reconcile_sandbox(client, input)

    client = testing.RecordingClient()
    out = OnlyAlpine().reconcile_sandbox(client, testing.reconcile_input(testing.sandbox("a")))
    assert client.summaries() == []
    assert condition(out, "SpecValid").reason == "ImageNotAllowed"
    assert OnlyAlpine().describe().name == "only-alpine"
    assert OnlyAlpine().describe().contract_version == "0.2.0"
    assert names.rootfs_generation_of("a", "a-rootfs-g3") == 3
    assert names.rootfs_generation_of("a", "ab-rootfs-g3") is None
