// What the default policy refuses to act on: a spec that the API server would reject in a
// child's manifest, or that contradicts itself.
import { Cidr } from "./cidr.js";
import * as names from "./names.js";
import { isPositiveQuantity } from "./quantity.js";
import { quoted } from "./json.js";

/** A spec the policy will not act on: a condition's reason, and a message that names the fix. */
export class Invalid {
  constructor(reason, message) {
    this.reason = reason;
    this.message = message;
  }
}

/** Checks a sandbox (and the children the cache shows); returns an `Invalid` or undefined. */
export function sandbox(s, observed) {
  if (s.name.length > names.MAX_LABEL_VALUE) {
    return new Invalid(
      "NameTooLong",
      `the name is ${s.name.length} characters long; its children are labelled with it and a label value is at most ${names.MAX_LABEL_VALUE}: recreate the sandbox with a shorter name`,
    );
  }
  const problem = spec(s.spec, "spec");
  if (problem) return problem;
  if (s.spec.forkFrom != null && s.spec.forkFrom === s.name) {
    return new Invalid(
      "ForkFromSelf",
      "spec.forkFrom names this sandbox itself: name another sandbox, or remove the field",
    );
  }
  if (s.spec.forkFrom != null && s.spec.warmPool != null) {
    return new Invalid(
      "ForkAndClaim",
      "spec.forkFrom and spec.warmPool are both set: a sandbox is either a fork or a claim from a pool, so remove one",
    );
  }
  const highest = highestRootfsGeneration(s, observed);
  if (highest > s.spec.rootfsGeneration) {
    return new Invalid(
      "RootfsGenerationDecreased",
      `spec.rootfsGeneration went down from ${highest} to ${s.spec.rootfsGeneration}: a reset only moves forward, so set it to ${highest} (keep) or ${highest + 1} (reset)`,
    );
  }
  return undefined;
}

/** Checks a sandbox spec (a Sandbox's, or a pool's template at `path`). */
export function spec(spec, path) {
  if (spec.image.trim() === "") {
    return new Invalid("ImageMissing", `${path}.image is empty: set it to the sandbox's container image`);
  }
  if (spec.rootfsGeneration === 0) {
    return new Invalid("InvalidRootfsGeneration", `${path}.rootfsGeneration is 0: generations start at 1`);
  }
  const quantities = [
    ["storage.rootfsSize", spec.rootfsSize],
    ["storage.workspaceSize", spec.workspaceSize],
    ["resources.cpu", spec.cpu],
    ["resources.memory", spec.memory],
  ];
  for (const [field, value] of quantities) {
    if (value != null && !isPositiveQuantity(value)) {
      return new Invalid(
        "InvalidQuantity",
        `${path}.${field} ${quoted(value)} is not a positive Kubernetes quantity: write it like "10Gi", "512Mi" or "500m"`,
      );
    }
  }
  return network(spec, path);
}

function network(spec, path) {
  for (const [field, list] of [
    ["allowCIDRs", spec.network.allowCidrs],
    ["denyCIDRs", spec.network.denyCidrs],
  ]) {
    for (const [i, text] of list.entries()) {
      if (Cidr.parse(text) === undefined) {
        return new Invalid(
          "InvalidCIDR",
          `${path}.network.${field}[${i}] ${quoted(text)} is not a CIDR: write an address and a prefix length, like "10.0.5.0/24" or "2001:db8::/32"`,
        );
      }
    }
  }
  const service = spec.service;
  if (service != null) {
    const seen = new Set();
    for (const [i, port] of service.ports.entries()) {
      if (port.port === 0) {
        return new Invalid("InvalidServicePort", `${path}.service.ports[${i}].port is 0: ports are 1-65535`);
      }
      const key = `${port.port}/${port.protocol}`;
      if (seen.has(key)) {
        return new Invalid(
          "InvalidServicePort",
          `${path}.service.ports[${i}] repeats port ${port.port} of the same protocol`,
        );
      }
      seen.add(key);
    }
    if (service.ports.length > 1 && service.ports.some((p) => p.name === "")) {
      return new Invalid(
        "InvalidServicePort",
        `${path}.service.ports: with more than one port, each needs a name`,
      );
    }
  }
  return undefined;
}

function highestRootfsGeneration(s, observed) {
  const generations = observed.pvcs
    .map((pvc) => names.rootfsGenerationOf(s.name, pvc.name))
    .filter((g) => g !== undefined);
  if (s.status.rootfsPvc != null) {
    const g = names.rootfsGenerationOf(s.name, s.status.rootfsPvc);
    if (g !== undefined) generations.push(g);
  }
  return generations.reduce((a, b) => Math.max(a, b), 0);
}
