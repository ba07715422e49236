//! `cubepod-image-allowlist`: an example policy built on the SDK (`cubepod-policy-sdk`): the
//! default decisions, but a sandbox whose image is outside [`ALLOWED_IMAGES`] is declined. It
//! gets no child, and its status says why: `SpecValid=False`, reason [`REASON`], a message that
//! names the image and the list (and a Warning Event, once), through the SDK's
//! `reconcile::refused`, the default's own answer to a spec it will not act on.
//!
//! An entry of the list is a repository, matched with any tag or digest
//! (`docker.io/library/python` admits `python:3.12`), or a prefix ending in `/` that admits every
//! repository under it (`ghcr.io/cubepod/`). Images are compared in their full form, as the
//! container runtime pulls them: a name without a registry is Docker Hub's (`python:3.12` is
//! `docker.io/library/python:3.12`), so no short name slips past a prefix.
//!
//! A policy has no configuration of its own (no file, no environment): the list is part of the
//! module, and changing it is a new build, which goes through the controller's admission like
//! any module. The conformance self-test's sandboxes run `registry.example/conformance:1`,
//! outside the list: they are declined, which the self-test accepts from a policy that says why.
//! Warm pools are the default's: the members of a pool whose template names another image are
//! declined one by one, as any sandbox would be.
//!
//! Build: `cargo build -p cubepod-policy-image-allowlist --target wasm32-wasip2 --profile
//! guest-release` (the component is
//! `target/wasm32-wasip2/guest-release/cubepod_policy_image_allowlist.wasm`).
//! Test: `cubepod-controller policy test <that file> examples/policies/image-allowlist/scenarios`.

use cubepod_policy_sdk::bindings::{PolicyInfo, ReconcileInput, ReconcileOutput};
use cubepod_policy_sdk::client::{KubeClient, KubeResult};
use cubepod_policy_sdk::validate::Invalid;

pub const POLICY_NAME: &str = "cubepod-image-allowlist";

/// The images a sandbox may run: repositories, and prefixes ending in `/`, in full form.
pub const ALLOWED_IMAGES: &[&str] = &["ghcr.io/cubepod/", "docker.io/library/python"];

/// The reason of the `SpecValid=False` condition and of the Warning Event.
pub const REASON: &str = "ImageNotAllowed";

/// Docker Hub, where an image without a registry comes from.
const DEFAULT_REGISTRY: &str = "docker.io";

pub fn describe() -> PolicyInfo {
    PolicyInfo {
        name: POLICY_NAME.to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        contract_version: cubepod_policy_sdk::CONTRACT_VERSION.to_string(),
    }
}

/// The repository of `image` in full form, without its tag or digest:
/// `python:3.12` is `docker.io/library/python`, `localhost:5000/a/b@sha256:..` is
/// `localhost:5000/a/b`.
pub fn repository(image: &str) -> String {
    let name = image.split_once('@').map_or(image, |(name, _)| name);
    // A tag follows the last `:` after the last `/`; a `:` before it is a registry's port.
    let last_part = name.rfind('/').map_or(0, |slash| slash + 1);
    let name = match name[last_part..].rfind(':') {
        Some(colon) => &name[..last_part + colon],
        None => name,
    };
    // Docker's rule: the first part names a registry only if it looks like a host.
    let (first, rest) = name.split_once('/').unwrap_or(("", name));
    let is_registry = first.contains(['.', ':']) || first == "localhost";
    if is_registry {
        name.to_string()
    } else if first.is_empty() {
        format!("{DEFAULT_REGISTRY}/library/{rest}")
    } else {
        format!("{DEFAULT_REGISTRY}/{name}")
    }
}

/// Whether `image` is one [`ALLOWED_IMAGES`] admits.
pub fn allowed(image: &str) -> bool {
    let repository = repository(image);
    ALLOWED_IMAGES
        .iter()
        .any(|entry| match entry.strip_suffix('/') {
            Some(_) => repository.starts_with(entry),
            None => repository == *entry,
        })
}

/// Why `image` is declined, in the words of the sandbox's status.
fn not_allowed(image: &str) -> Invalid {
    let shown = repository(image);
    // The full form only where it says more than the image as written.
    let full = if image.starts_with(&shown) {
        String::new()
    } else {
        format!(" ({shown})")
    };
    Invalid {
        reason: REASON,
        message: format!(
            "image {image:?}{full} is not one this cluster runs sandboxes of: {}",
            ALLOWED_IMAGES.join(", ")
        ),
    }
}

/// `reconcile-sandbox`: the default reconcile for an allowed image; otherwise the default's
/// answer to a spec it will not act on, with no child touched.
pub fn reconcile(
    client: &mut impl KubeClient,
    input: ReconcileInput,
) -> KubeResult<ReconcileOutput> {
    let image = &input.sandbox.spec.image;
    if allowed(image) {
        return cubepod_policy_sdk::reconcile::reconcile(client, &input);
    }
    let mut out = cubepod_policy_sdk::reconcile::refused(&input, &not_allowed(image));
    // As the default reports it on every path, a declined sandbox's time left included.
    cubepod_policy_sdk::shutdown::report(&mut out, &input.sandbox, input.now);
    Ok(out)
}

/// The policy: the default's decisions, but for `reconcile-sandbox`. Cleanup only deletes what
/// exists, and pools and the reaper need no image check, so those stay the default's.
pub struct ImageAllowlist;

impl cubepod_policy_sdk::policy::Policy for ImageAllowlist {
    fn describe() -> PolicyInfo {
        describe()
    }

    fn reconcile_sandbox(
        client: &mut impl KubeClient,
        input: ReconcileInput,
    ) -> KubeResult<ReconcileOutput> {
        reconcile(client, input)
    }
}

cubepod_policy_sdk::export_policy!(ImageAllowlist);

#[cfg(test)]
mod tests {
    use cubepod_policy_sdk::bindings::{ConditionStatus, EventType, SandboxPhase};
    use cubepod_policy_sdk::fixtures::sandbox;
    use cubepod_policy_sdk::recording::RecordingClient;

    use super::*;

    #[test]
    fn describe_names_this_policy_and_the_contract() {
        let info = describe();
        assert_eq!(info.name, "cubepod-image-allowlist");
        assert_eq!(info.contract_version, cubepod_policy_sdk::CONTRACT_VERSION);
    }

    #[test]
    fn images_are_compared_in_full_form() {
        for (image, full) in [
            ("python", "docker.io/library/python"),
            ("python:3.12", "docker.io/library/python"),
            ("library/python:3.12", "docker.io/library/python"),
            ("someone/tool:1", "docker.io/someone/tool"),
            ("ghcr.io/cubepod/base:1.0", "ghcr.io/cubepod/base"),
            ("localhost:5000/a/b:2", "localhost:5000/a/b"),
            ("localhost/a", "localhost/a"),
            (
                "registry.example:443/x@sha256:abc",
                "registry.example:443/x",
            ),
            (
                "ghcr.io/cubepod/base:1.0@sha256:abc",
                "ghcr.io/cubepod/base",
            ),
        ] {
            assert_eq!(repository(image), full, "{image}");
        }
    }

    #[test]
    fn a_prefix_admits_what_is_under_it_and_a_repository_only_itself() {
        for image in [
            "ghcr.io/cubepod/sandbox-base:1.0",
            "ghcr.io/cubepod/tools/git@sha256:0123",
            "python:3.12",
            "docker.io/library/python:3.12-slim",
        ] {
            assert!(allowed(image), "{image}");
        }
        for image in [
            "ghcr.io/cubepodx/base:1",
            "ghcr.io/cubepod",
            "registry.example/conformance:1",
            "pythonista:1",
            "someone/python:3.12",
            // Not Docker Hub's python: a registry that happens to be named so.
            "python.example/python:3",
            "",
        ] {
            assert!(!allowed(image), "{image}");
        }
    }

    #[test]
    fn an_allowed_image_gets_the_default_reconcile() {
        let input = sandbox("a")
            .with_spec(|s| s.image = "ghcr.io/cubepod/sandbox-base:1.0".into())
            .input();
        let mut ours = RecordingClient::default();
        let out = reconcile(&mut ours, input.clone()).unwrap();
        let mut default = RecordingClient::default();
        let expected = cubepod_policy_sdk::reconcile::reconcile(&mut default, &input).unwrap();
        assert_eq!(ours.calls, default.calls);
        assert_eq!(out, expected);
        assert!(!ours.calls.is_empty());
    }

    #[test]
    fn another_image_is_declined_with_no_call_and_says_why() {
        let input = sandbox("a")
            .with_spec(|s| s.image = "python.example/python:3".into())
            .input();
        let mut client = RecordingClient::default();
        let out = reconcile(&mut client, input).unwrap();
        assert!(client.calls.is_empty(), "{:?}", client.summaries());
        assert_eq!(out.status.phase, SandboxPhase::Failed);
        let spec_valid = out
            .status
            .conditions
            .iter()
            .find(|c| c.kind == "SpecValid")
            .expect("a SpecValid condition");
        assert_eq!(spec_valid.status, ConditionStatus::False);
        assert_eq!(spec_valid.reason, REASON);
        assert_eq!(
            spec_valid.message,
            "image \"python.example/python:3\" is not one this cluster runs sandboxes of: \
             ghcr.io/cubepod/, docker.io/library/python"
        );
        assert_eq!(out.events.len(), 1);
        assert_eq!(out.events[0].kind, EventType::Warning);
        assert_eq!(out.events[0].reason, REASON);
    }

    #[test]
    fn a_short_name_is_shown_with_its_full_form() {
        let input = sandbox("a")
            .with_spec(|s| s.image = "pythonista:1".into())
            .input();
        let out = reconcile(&mut RecordingClient::default(), input).unwrap();
        let message = &out
            .status
            .conditions
            .iter()
            .find(|c| c.kind == "SpecValid")
            .expect("a SpecValid condition")
            .message;
        assert!(
            message.starts_with("image \"pythonista:1\" (docker.io/library/pythonista) is not"),
            "{message}"
        );
    }
}
