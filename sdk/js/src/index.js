// @cubepod/policy: the SDK of cubepod-controller policies in JavaScript. A policy is
// `definePolicy({describe, ...the decisions it changes})`; every other decision is the default
// policy's, which lives here as it does in the Rust SDK (sdk/src/), with the same output for the
// same input. `@cubepod/policy/component` exports a policy as the component's `policy`
// interface; `@cubepod/policy/testing` has a recording client and inputs for unit tests.
export { CONTRACT_VERSION, KubeError, defaults, definePolicy } from "./policy.js";
export { reconcile, refused } from "./reconcile.js";
export { cleanup } from "./cleanup.js";
export { reconcilePool, templateHash, REPLICAS_CAPPED } from "./pool.js";
export { reap } from "./reaper.js";
export { Invalid } from "./validate.js";
export * as validate from "./validate.js";
export * as manifest from "./manifest.js";
export * as names from "./names.js";
export * as status from "./status.js";
export * as applied from "./applied.js";
export * as shutdown from "./shutdown.js";
export { Cidr } from "./cidr.js";
export { digest, toJson, quoted } from "./json.js";
