// cubepod-image-allowlist in JavaScript: the default decisions, but a sandbox whose image is
// outside ALLOWED_IMAGES is declined. It gets no child, and its status says why:
// `SpecValid=False`, reason REASON, a message that names the image and the list (and a Warning
// Event, once), through the SDK's `refused`, the default's own answer to a spec it will not act
// on. The same policy as examples/policies/image-allowlist (Rust), with the same scenarios.
//
// An entry of the list is a repository, matched with any tag or digest
// (`docker.io/library/python` admits `python:3.12`), or a prefix ending in `/` that admits every
// repository under it (`ghcr.io/cubepod/`). Images are compared in their full form, as the
// container runtime pulls them: a name without a registry is Docker Hub's.
//
// Build: ./build.sh (the component is target/js-image-allowlist.wasm); unit tests: node --test.
import { CONTRACT_VERSION, Invalid, definePolicy, quoted, reconcile, refused, shutdown } from "@cubepod/policy";

export const POLICY_NAME = "cubepod-image-allowlist";

/** The images a sandbox may run: repositories, and prefixes ending in `/`, in full form. */
export const ALLOWED_IMAGES = ["ghcr.io/cubepod/", "docker.io/library/python"];

/** The reason of the `SpecValid=False` condition and of the Warning Event. */
export const REASON = "ImageNotAllowed";

/** Docker Hub, where an image without a registry comes from. */
const DEFAULT_REGISTRY = "docker.io";

/** The repository of `image` in full form, without its tag or digest. */
export function repository(image) {
  const at = image.indexOf("@");
  let name = at >= 0 ? image.slice(0, at) : image;
  // A tag follows the last `:` after the last `/`; a `:` before it is a registry's port.
  const lastPart = name.lastIndexOf("/") + 1;
  const colon = name.slice(lastPart).lastIndexOf(":");
  if (colon >= 0) name = name.slice(0, lastPart + colon);
  // Docker's rule: the first part names a registry only if it looks like a host.
  const slash = name.indexOf("/");
  const [first, rest] = slash >= 0 ? [name.slice(0, slash), name.slice(slash + 1)] : ["", name];
  if (first.includes(".") || first.includes(":") || first === "localhost") return name;
  if (first === "") return `${DEFAULT_REGISTRY}/library/${rest}`;
  return `${DEFAULT_REGISTRY}/${name}`;
}

/** Whether `image` is one ALLOWED_IMAGES admits. */
export function allowed(image) {
  const full = repository(image);
  return ALLOWED_IMAGES.some((entry) => (entry.endsWith("/") ? full.startsWith(entry) : full === entry));
}

/** Why `image` is declined, in the words of the sandbox's status. */
function notAllowed(image) {
  const shown = repository(image);
  // The full form only where it says more than the image as written.
  const full = image.startsWith(shown) ? "" : ` (${shown})`;
  return new Invalid(
    REASON,
    `image ${quoted(image)}${full} is not one this cluster runs sandboxes of: ${ALLOWED_IMAGES.join(", ")}`,
  );
}

/**
 * The policy: the default's decisions, but for `reconcileSandbox`. Cleanup only deletes what
 * exists, and pools and the reaper need no image check, so those stay the default's.
 */
export const imageAllowlist = definePolicy({
  describe: () => ({ name: POLICY_NAME, version: "0.1.0", contractVersion: CONTRACT_VERSION }),
  reconcileSandbox(client, input) {
    const image = input.sandbox.spec.image;
    if (allowed(image)) return reconcile(client, input);
    const out = refused(input, notAllowed(image));
    // As the default reports it on every path, a declined sandbox's time left included.
    shutdown.report(out, input.sandbox, input.now);
    return out;
  },
});
