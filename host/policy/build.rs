//! Builds the default policy component (`guest/`, over the SDK in `sdk/`) so that the binary
//! embeds it (`runtime::default_policy`), and reads the contracts' versions from `wit/`: the
//! current one (`wit/controller.wit`) and the previous one the host still runs
//! (`wit/0.1.0/controller.wit`, checked to be the version its directory names).

use std::path::{Path, PathBuf};

// Its items are `pub` for every includer; each uses only some of them.
#[allow(unreachable_pub)]
mod wasm_build {
    include!("wasm_build.rs");
}
use wasm_build::build_policy_component;

fn main() {
    let manifest_dir = PathBuf::from(env_or_exit("CARGO_MANIFEST_DIR"));
    let workspace = manifest_dir
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| fail("host/policy/ is not two levels under the workspace"));

    for watched in [
        "../../guest/src",
        "../../guest/Cargo.toml",
        "../../sdk/src",
        "../../sdk/Cargo.toml",
        "../../wit",
        "wasm_build.rs",
    ] {
        println!("cargo:rerun-if-changed={watched}");
    }

    let version = contract_version(&workspace.join("wit").join("controller.wit"))
        .unwrap_or_else(|why| fail(&why));
    println!("cargo:rustc-env=CUBEPOD_CONTRACT_VERSION={version}");
    // The bindings of `runtime::bindings::v0_1` come from this directory: its name and its
    // package line must agree, or the host would claim a version it does not speak.
    let previous = "0.1.0";
    let found = contract_version(&workspace.join("wit").join(previous).join("controller.wit"))
        .unwrap_or_else(|why| fail(&why));
    if found != previous {
        fail(&format!(
            "wit/{previous}/controller.wit says package version {found}, not {previous}"
        ));
    }
    println!("cargo:rustc-env=CUBEPOD_CONTRACT_0_1_VERSION={found}");

    let built = build_policy_component(&workspace, "cubepod-guest", "cubepod_guest")
        .unwrap_or_else(|why| fail(&why));
    // Embedded from OUT_DIR: the copy changes only when this script runs again, whatever
    // happens to the nested target dir in between.
    let embedded = PathBuf::from(env_or_exit("OUT_DIR")).join("cubepod_guest.wasm");
    std::fs::copy(&built, &embedded).unwrap_or_else(|e| {
        fail(&format!(
            "cannot copy {} to {}: {e}",
            built.display(),
            embedded.display()
        ))
    });
    println!(
        "cargo:rustc-env=CUBEPOD_DEFAULT_POLICY={}",
        embedded.display()
    );
}

/// The version on the `package cubepod:controller@X;` line: the one source of the host's
/// `CONTRACT_VERSION` (and of the previous contract's version).
fn contract_version(wit: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(wit).map_err(|e| format!("{}: {e}", wit.display()))?;
    text.lines()
        .find_map(|line| {
            line.trim()
                .strip_prefix("package cubepod:controller@")?
                .strip_suffix(';')
                .map(str::to_string)
        })
        .ok_or_else(|| {
            format!(
                "{} has no `package cubepod:controller@<version>;` line",
                wit.display()
            )
        })
}

fn env_or_exit(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| fail(&format!("cargo did not set {key}")))
}

fn fail(why: &str) -> ! {
    eprintln!("error: cubepod-policy-host build script: {why}");
    std::process::exit(1);
}
