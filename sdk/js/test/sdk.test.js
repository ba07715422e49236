// The SDK's decisions, natively: `node --test sdk/js/test/`. What the Rust SDK's own tests check
// of the same decisions, so that a change to one SDK that the other lacks shows here or in the
// differential test (host/tests/differential.rs), which compares the two through the host.
import { test } from "node:test";
import assert from "node:assert/strict";

import { Cidr, KubeError, definePolicy, defaults, digest, quoted, reconcile, reap, reconcilePool, shutdown } from "../src/index.js";
import { excepts } from "../src/cidr.js";
import * as fx from "../src/testing.js";

test("the digest is FNV-1a of the UTF-8 bytes", () => {
  assert.equal(digest(""), "cbf29ce484222325");
  assert.equal(digest("a"), "af63dc4c8601ec8c");
  // Against a BigInt implementation, over text with multi-byte characters.
  const slow = (text) => {
    let h = 0xcbf29ce484222325n;
    for (const b of new TextEncoder().encode(text)) h = BigInt.asUintN(64, (h ^ BigInt(b)) * 0x100000001b3n);
    return h.toString(16).padStart(16, "0");
  };
  for (const text of ['{"a":"é"}', "日本語 😀", "x".repeat(1000)]) assert.equal(digest(text), slow(text));
});

test("strings are quoted as Rust's {:?} quotes them", () => {
  assert.equal(quoted('a"b\\c\n'), '"a\\"b\\\\c\\n"');
  assert.equal(quoted("\u0001é"), '"\\u{1}é"');
});

test("CIDRs parse, contain, and carry IPv4 in IPv6 forms as the Rust SDK's", () => {
  const c = (t) => Cidr.parse(t);
  assert.ok(c("10.0.0.0/8").contains(c("10.1.2.0/24")));
  assert.ok(!c("0.0.0.0/0").contains(c("::/0")));
  assert.ok(c("10.1.2.3/8").equals(c("10.0.0.0/8")));
  for (const bad of ["10.0.0.0", "10.0.0.0/33", "::/129", "x/1", "1.2.3.4/-1", "1.2.3.4/ 8", "01.2.3.4/8"]) {
    assert.equal(c(bad), undefined, bad);
  }
  assert.deepEqual(c("10.0.0.0/8").v4Forms().map(String), [
    "::ffff:10.0.0.0/104",
    "::ffff:0:a00:0/104",
    "::a00:0/104",
    "64:ff9b::a00:0/104",
    "2002:a00::/24",
  ]);
});

test("an ipBlock's excepts are the cuts inside it that no other cut covers, the first of equals", () => {
  // The definition, every cut against every other, against the sort and sweep, on ranges
  // drawn from a seed (nested, equal, apart, both families).
  const pairwise = (cidr, cuts) => {
    if (cuts.some(([cut]) => cut.contains(cidr))) return undefined;
    const coveredByAnother = (cut, i) =>
      cuts.some(([o], j) => j !== i && o.contains(cut) && (!o.equals(cut) || j < i));
    return cuts
      .filter(([cut], i) => cidr.contains(cut) && !coveredByAnother(cut, i))
      .map(([cut, text]) => text ?? cut.toString());
  };
  let seed = 12345;
  const next = (n) => ((seed = (seed * 1103515245 + 12345) % 2147483648), seed % n);
  for (let round = 0; round < 3000; round++) {
    const cuts = Array.from({ length: next(12) }, (_, k) => {
      const v6 = next(3) === 0;
      const cut = v6 ? Cidr.v6(BigInt(next(512)), 120 + next(9)) : new Cidr(false, BigInt(next(512)), 24 + next(9));
      return [cut, next(2) === 0 ? undefined : `cut ${k}`];
    });
    const cidr = [new Cidr(false, BigInt(next(512)), 23 + next(4)), Cidr.v6(0n, 118), new Cidr(false, 0n, 22)][next(3)];
    assert.deepEqual(excepts(cidr, cuts), pairwise(cidr, cuts), `seed round ${round}`);
  }
});

test("a new sandbox gets its volumes, credentials and NetworkPolicy before its Pod", () => {
  const client = new fx.RecordingClient({ podIp: "10.0.0.7" });
  const out = reconcile(client, fx.input(fx.sandbox("a")));
  assert.deepEqual(client.summaries(), [
    "ensure-pvc a-workspace",
    "ensure-pvc a-rootfs-g1",
    "ensure-secret a-credentials",
    "apply-network-policy a-network",
    "ensure-pod a",
  ]);
  assert.equal(out.status.phase, "pending");
  assert.equal(out.status.podIp, "10.0.0.7");
  assert.equal(out.status.startedAt, fx.NOW);
  assert.equal(out.status.observedGeneration, 1n);
  assert.deepEqual(
    out.events.map((e) => e.reason),
    ["Started"],
  );
  const policy = client.objects.get("networkpolicy a-network");
  assert.deepEqual(policy.spec.policyTypes, ["Ingress", "Egress"]);
  const internet = policy.spec.egress[0].to[0].ipBlock;
  assert.equal(internet.cidr, "0.0.0.0/0");
  assert.deepEqual(internet.except, ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10"]);
  const pod = client.objects.get("pod a");
  assert.equal(pod.spec.runtimeClassName, "kata-qemu");
  assert.equal(pod.spec.containers[0].env[3].valueFrom.secretKeyRef.name, "a-credentials");
});

test("a converged sandbox makes no call and is Ready", () => {
  const [, converged] = fx.newAndConverged("b");
  const client = new fx.RecordingClient();
  const out = reconcile(client, converged);
  assert.deepEqual(client.summaries(), []);
  assert.equal(out.status.phase, "running");
  assert.equal(out.status.conditions.find((c) => c.kind === "Ready").status, "true");
});

test("a spec the default refuses touches nothing and says why", () => {
  const client = new fx.RecordingClient();
  const s = fx.sandbox("c", (s) => {
    s.spec.network.allowCidrs = ["10.0.0.0"];
  });
  const out = reconcile(client, fx.input(s));
  assert.deepEqual(client.summaries(), []);
  const valid = out.status.conditions.find((c) => c.kind === "SpecValid");
  assert.equal(valid.status, "false");
  assert.equal(valid.reason, "InvalidCIDR");
  assert.match(valid.message, /spec\.network\.allowCIDRs\[0\] "10\.0\.0\.0" is not a CIDR/);
  assert.equal(out.status.phase, "failed");
  assert.equal(out.events[0].kind, "warning");
});

test("a kube-client error stops the reconcile and carries its message", () => {
  const client = new fx.RecordingClient({ fail: ["ensure-secret d-credentials", new KubeError("conflict", "try again")] });
  assert.throws(
    () => reconcile(client, fx.input(fx.sandbox("d"))),
    (e) => e instanceof KubeError && e.payload.tag === "conflict" && e.message === "conflict: try again",
  );
  assert.deepEqual(client.summaries(), ["ensure-pvc d-workspace", "ensure-pvc d-rootfs-g1"]);
});

test("a pool fills to its replicas and names its members in order", () => {
  const out = reconcilePool(fx.poolInput(fx.pool("p", 3), [fx.member("p-1", true)]));
  assert.deepEqual(
    out.create.map((m) => m.name),
    ["p-0", "p-2"],
  );
  const made = JSON.parse(out.create[0].manifest);
  assert.equal(made.metadata.labels["cubepod.io/pool"], "p");
  assert.equal(made.metadata.labels["cubepod.io/template-hash"], fx.member("x", true).templateHash);
  assert.equal(out.status.replicas, 1);
  assert.equal(out.status.conditions.find((c) => c.kind === "Ready").message, "1 of 3 members ready");
});

test("the reaper pauses the idle and shuts down the expired, sorted by name", () => {
  const idle = fx.sandbox("z-idle", (s) => {
    s.spec.idleTimeoutSeconds = 60n;
    s.status.startedAt = fx.NOW - 100n;
  });
  const expired = fx.sandbox("a-expired", (s) => {
    s.spec.shutdownTime = fx.NOW - 5n;
  });
  const fresh = fx.sandbox("m-fresh", (s) => {
    s.spec.idleTimeoutSeconds = 600n;
    s.status.startedAt = fx.NOW - 100n;
  });
  const decisions = reap(fx.NOW, fx.NAMESPACE, [idle, expired, fresh].map(fx.candidate));
  assert.deepEqual(
    decisions.map((d) => [d.name, d.action, d.idleSeconds, d.reason]),
    [
      ["a-expired", "shutdown-delete", 0n, "spec.shutdownTime passed 5s ago"],
      ["z-idle", "idle-pause", 100n, "no activity for 100s, above idleTimeoutSeconds 60"],
    ],
  );
});

test("shutdownIn buckets show their lower bound and end at the next boundary", () => {
  const DAY = 86400n;
  assert.deepEqual(shutdown.bucket(15n * DAY), ["14d", DAY + 1n]);
  assert.deepEqual(shutdown.bucket(9n * 60n), ["<10m", 540n]);
  assert.deepEqual(shutdown.bucket(0n), ["passed", undefined]);
});

test("a policy overrides one decision and keeps the others", () => {
  const policy = definePolicy({
    describe: () => ({ name: "t", version: "0.1.0", contractVersion: "0.2.0" }),
    reconcilePool: (input) => defaults.reconcilePool({ ...input, maxReplicas: 1 }),
  });
  assert.equal(policy.reap, defaults.reap);
  assert.equal(policy.reconcilePool(fx.poolInput(fx.pool("p", 3), [])).create.length, 1);
  assert.throws(() => definePolicy({}), /describe/);
});
