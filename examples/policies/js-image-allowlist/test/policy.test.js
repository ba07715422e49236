// Unit tests of the policy, natively: `node --test` in this directory.
import { test } from "node:test";
import assert from "node:assert/strict";

import { reconcile } from "@cubepod/policy";
import * as fx from "@cubepod/policy/testing";
import { POLICY_NAME, REASON, allowed, imageAllowlist, repository } from "../policy.js";

test("describe names this policy and the contract", () => {
  const info = imageAllowlist.describe();
  assert.equal(info.name, POLICY_NAME);
  assert.equal(info.contractVersion, "0.2.0");
});

test("images are compared in full form", () => {
  for (const [image, full] of [
    ["python", "docker.io/library/python"],
    ["python:3.12", "docker.io/library/python"],
    ["library/python:3.12", "docker.io/library/python"],
    ["someone/tool:1", "docker.io/someone/tool"],
    ["ghcr.io/cubepod/base:1.0", "ghcr.io/cubepod/base"],
    ["localhost:5000/a/b:2", "localhost:5000/a/b"],
    ["localhost/a", "localhost/a"],
    ["registry.example:443/x@sha256:abc", "registry.example:443/x"],
    ["ghcr.io/cubepod/base:1.0@sha256:abc", "ghcr.io/cubepod/base"],
  ]) {
    assert.equal(repository(image), full, image);
  }
});

test("a prefix admits what is under it and a repository only itself", () => {
  for (const image of ["ghcr.io/cubepod/sandbox-base:1.0", "ghcr.io/cubepod/tools/git@sha256:0123", "python:3.12", "docker.io/library/python:3.12-slim"]) {
    assert.ok(allowed(image), image);
  }
  for (const image of ["ghcr.io/cubepodx/base:1", "ghcr.io/cubepod", "registry.example/conformance:1", "pythonista:1", "someone/python:3.12", "python.example/python:3", ""]) {
    assert.ok(!allowed(image), image);
  }
});

test("an allowed image gets the default reconcile", () => {
  const input = fx.input(fx.sandbox("a"));
  const ours = new fx.RecordingClient();
  const theDefault = new fx.RecordingClient();
  assert.deepEqual(imageAllowlist.reconcileSandbox(ours, input), reconcile(theDefault, input));
  assert.deepEqual(ours.calls, theDefault.calls);
  assert.ok(ours.calls.length > 0);
});

test("another image is declined with no call and says why", () => {
  const client = new fx.RecordingClient();
  const s = fx.sandbox("b", (s) => {
    s.spec.image = "quay.io/someone/miner:latest";
  });
  const out = imageAllowlist.reconcileSandbox(client, fx.input(s));
  assert.deepEqual(client.summaries(), []);
  assert.equal(out.status.phase, "failed");
  const valid = out.status.conditions.find((c) => c.kind === "SpecValid");
  assert.equal(valid.status, "false");
  assert.equal(valid.reason, REASON);
  assert.equal(
    valid.message,
    'image "quay.io/someone/miner:latest" is not one this cluster runs sandboxes of: ghcr.io/cubepod/, docker.io/library/python',
  );
  assert.deepEqual(out.events.map((e) => [e.kind, e.reason]), [["warning", REASON]]);
});
