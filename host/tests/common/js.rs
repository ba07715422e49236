//! JavaScript policies of the repository, built by `sdk/js/build.sh` with the toolchain
//! `.ci/policy-toolchains` pins into `target/polyglot/`, where a build is kept while its sources
//! are older (so that a CI run builds each once); and the engine that loads them, which keeps
//! their compiled code in `target/polyglot/cache`, so that the next test binary, or the next run,
//! does not compile a 13 MB component again.

// Not every test binary that shares `common/` builds a JavaScript policy.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

use cubepod_policy_host::runtime::{PolicyEngine, RuntimeConfig};

use super::workspace;

/// The component of the JavaScript policy whose entry point is `entry` (relative to the
/// workspace), built as `target/polyglot/<name>.wasm`.
pub(crate) fn js_policy(entry: &str, name: &str) -> PathBuf {
    let root = workspace();
    let out = root.join("target/polyglot").join(format!("{name}.wasm"));
    let status = std::process::Command::new(root.join("sdk/js/build.sh"))
        .arg(root.join(entry))
        .arg(&out)
        .status()
        .expect("sdk/js/build.sh runs");
    assert!(
        status.success(),
        "sdk/js/build.sh {entry} failed ({status}): .ci/policy-toolchains installs the pinned \
         toolchain"
    );
    out
}

/// An engine as the default one, whose compiled modules are kept in `target/polyglot/cache`.
pub(crate) fn engine() -> &'static PolicyEngine {
    static ENGINE: OnceLock<PolicyEngine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        PolicyEngine::new(RuntimeConfig {
            cache_dir: Some(workspace().join("target/polyglot/cache")),
            ..RuntimeConfig::default()
        })
        .expect("an engine")
    })
}
