// The names and labels of a sandbox's children, as the default policy gives them.
import { parseU32 } from "./json.js";

export const API_VERSION = "cubepod.io/v1alpha1";
export const MANAGED_BY_LABEL = "app.kubernetes.io/managed-by";
export const MANAGED_BY = "cubepod-controller";
export const SANDBOX_LABEL = "cubepod.io/sandbox";
export const POOL_LABEL = "cubepod.io/pool";
export const VOLUME_LABEL = "cubepod.io/volume";
export const GENERATION_LABEL = "cubepod.io/rootfs-generation";
export const TEMPLATE_HASH_LABEL = "cubepod.io/template-hash";
export const SPEC_HASH_ANNOTATION = "cubepod.io/spec-hash";
export const DEFAULT_RUNTIME_CLASS = "kata-qemu";
/** A label value's longest length: children are labelled with the sandbox's name. */
export const MAX_LABEL_VALUE = 63;
export const NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name";

/** What `egress: Internet` does not reach, besides the cluster's ranges. */
export const BLOCKED_FOR_INTERNET = Object.freeze([
  "10.0.0.0/8",
  "172.16.0.0/12",
  "192.168.0.0/16",
  "169.254.0.0/16",
  "100.64.0.0/10",
  "fc00::/7",
  "fe80::/10",
  "::/64",
]);

export const pod = (sandbox) => sandbox;
export const rootfsPvc = (sandbox, generation) => `${sandbox}-rootfs-g${generation}`;
export const workspacePvc = (sandbox) => `${sandbox}-workspace`;
export const secret = (sandbox) => `${sandbox}-credentials`;
export const networkPolicy = (sandbox) => `${sandbox}-network`;
export const service = (sandbox) => sandbox;
export const poolMember = (pool, index) => `${pool}-${index}`;

/** The rootfs generation of `pvc` when it is one of `sandbox`'s rootfs PVCs; else undefined. */
export function rootfsGenerationOf(sandbox, pvc) {
  const prefix = `${sandbox}-rootfs-g`;
  if (!pvc.startsWith(prefix)) return undefined;
  return parseU32(pvc.slice(prefix.length));
}
