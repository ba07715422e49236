// The component's entry point: the policy of policy.js as the `policy` interface. build.sh
// bundles this file with the SDK into one module and builds the component from it.
import { exportPolicy } from "@cubepod/policy/component";
import { imageAllowlist } from "./policy.js";

export const policy = exportPolicy(imageAllowlist);
