"""cubepod-image-allowlist in Python, on the Python SDK (sdk/python): the default decisions,
but a sandbox whose image is outside ALLOWED_IMAGES is declined. It gets no child, and its
status says why: SpecValid=False, reason ImageNotAllowed, a message that names the image and
the list (and a Warning Event, once), through the SDK's `refused`, the default's own answer to
a spec it will not act on. The same policy as examples/policies/image-allowlist (Rust), with
the same scenarios.

An entry of the list is a repository, matched with any tag or digest, or a prefix ending in
`/` that admits every repository under it. Images are compared in their full form, as the
container runtime pulls them: `python:3.12` is `docker.io/library/python:3.12`.

Build:  examples/policies/python-image-allowlist/build.sh OUT.wasm
Test:   python -m pytest examples/policies/python-image-allowlist
        cubepod-controller policy test OUT.wasm examples/policies/python-image-allowlist/scenarios
"""

import cubepod_policy
from cubepod_policy import shutdown
from cubepod_policy.text import quoted
from cubepod_policy.validate import Invalid

#: The images a sandbox may run: repositories, and prefixes ending in `/`, in full form.
ALLOWED_IMAGES = ["ghcr.io/cubepod/", "docker.io/library/python"]
#: The reason of the SpecValid=False condition and of the Warning Event.
REASON = "ImageNotAllowed"
#: Docker Hub, where an image without a registry comes from.
DEFAULT_REGISTRY = "docker.io"


def repository(image: str) -> str:
    """The repository of `image` in full form, without its tag or digest."""
    name = image.split("@", 1)[0]
    # A tag follows the last `:` after the last `/`; a `:` before it is a registry's port.
    last_part = name.rfind("/") + 1
    colon = name[last_part:].rfind(":")
    if colon >= 0:
        name = name[: last_part + colon]
    # Docker's rule: the first part names a registry only if it looks like a host.
    first, slash, rest = name.partition("/")
    if not slash:
        first, rest = "", name
    if "." in first or ":" in first or first == "localhost":
        return name
    if first == "":
        return f"{DEFAULT_REGISTRY}/library/{rest}"
    return f"{DEFAULT_REGISTRY}/{name}"


def allowed(image: str) -> bool:
    repo = repository(image)
    return any(repo.startswith(entry) if entry.endswith("/") else repo == entry
               for entry in ALLOWED_IMAGES)


def not_allowed(image: str) -> Invalid:
    shown = repository(image)
    # The full form only where it says more than the image as written.
    full = "" if image.startswith(shown) else f" ({shown})"
    return Invalid(
        REASON,
        f"image {quoted(image)}{full} is not one this cluster runs sandboxes "
        f"of: {', '.join(ALLOWED_IMAGES)}",
    )


class ImageAllowlist(cubepod_policy.Policy):
    """The default's decisions, but for reconcile-sandbox: cleanup only deletes what exists,
    and pools and the reaper need no image check."""

    NAME = "cubepod-image-allowlist-python"
    VERSION = "0.1.0"

    def reconcile_sandbox(self, client, input):
        image = input.sandbox.spec.image
        if allowed(image):
            return super().reconcile_sandbox(client, input)
        out = cubepod_policy.refused(input, not_allowed(image))
        # As the default reports it on every path, a declined sandbox's time left included.
        shutdown.report(out, input.sandbox, input.now)
        return out


# componentize-py exports the class this module names `Policy`.
Policy = cubepod_policy.export(ImageAllowlist)
