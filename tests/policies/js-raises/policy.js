// A JavaScript policy (componentize-js, StarlingMonkey) for the host's tests: it describes
// itself, then throws from `reconcile-sandbox` after logging what the WASI stubs gave it. The
// tests check that the host loads it and that its log line and error reach the call's error.
//
// Build (from the repository's root, after .ci/policy-toolchains):
//   target/componentize-js/node_modules/.bin/componentize-js -w wit -n policy-module \
//     -d http fetch-event -o js-raises.wasm tests/policies/js-raises/policy.js

export const policy = {
  describe() {
    return { name: "js-raises", version: "0.1.0", contractVersion: "0.2.0" };
  },
  reconcileSandbox(input) {
    console.log(`clock ${Date.now()} random ${Math.random()}`);
    throw new Error(`no decision for sandbox ${input.sandbox.name}`);
  },
  cleanupSandbox(now, sandbox, observed) {
    throw new Error("no cleanup");
  },
  reconcilePool(input) {
    throw new Error("no pool");
  },
  reap(now, namespace, sandboxes) {
    return [];
  },
};
