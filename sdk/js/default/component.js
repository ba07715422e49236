// cubepod-controller's default policy, built from the JavaScript SDK: every decision is the SDK's
// default. host/tests/differential.rs builds it (sdk/js/build.sh) and checks that it makes the
// same writes as the Rust default policy (guest/) on the default policy's scenarios.
import { CONTRACT_VERSION, definePolicy } from "@cubepod/policy";
import { exportPolicy } from "@cubepod/policy/component";

export const policy = exportPolicy(
  definePolicy({
    describe: () => ({ name: "cubepod-default-js", version: "0.1.0", contractVersion: CONTRACT_VERSION }),
  }),
);
