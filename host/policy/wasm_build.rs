// Builds a policy crate of this workspace as a `wasm32-wasip2` component with a nested cargo.
// Shared, through `include!`, by `build.rs` (the default policy the binary embeds) and by the
// tests (the test policies, and `policy new`'s crate): one place knows how to run cargo inside
// cargo.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The target every policy component is built for.
#[allow(dead_code)]
pub const WASM_TARGET: &str = "wasm32-wasip2";
/// The workspace profile that keeps components small (see the root Cargo.toml).
#[allow(dead_code)]
pub const WASM_PROFILE: &str = "guest-release";

/// Where the nested build of `package` puts its artifacts: apart from the host's target dir,
/// whose lock the outer cargo holds while it runs our build script, and one per package, so
/// that the tests building two policies at once do not wait on each other's lock.
#[allow(dead_code)]
pub fn wasm_target_dir(workspace: &Path, package: &str) -> PathBuf {
    target_root(workspace).join("wasm").join(package)
}

/// The workspace's target dir: `CARGO_TARGET_DIR` (relative to the workspace) or `target/`.
#[allow(dead_code)]
pub fn target_root(workspace: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|dir| {
            if dir.is_relative() {
                workspace.join(dir)
            } else {
                dir
            }
        })
        .unwrap_or_else(|| workspace.join("target"))
}

/// `cargo` (the one running us) in `dir`, without what the outer cargo set for itself.
#[allow(dead_code)]
pub fn nested_cargo(dir: &Path) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command.current_dir(dir);
    for (key, _) in std::env::vars_os() {
        if let Some(key) = key.to_str()
            && leaks_into_nested_cargo(key)
        {
            command.env_remove(key);
        }
    }
    command
}

/// Variables that the outer cargo, clippy or a coverage tool set for the build script or the
/// test, and that must not reach the nested cargo: they would send its artifacts elsewhere,
/// compile the guest with host flags, run clippy over it, or hand it a jobserver whose file
/// descriptors it does not have.
#[allow(dead_code)]
fn leaks_into_nested_cargo(key: &str) -> bool {
    const EXACT: &[&str] = &[
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTDOCFLAGS",
        "CARGO_ENCODED_RUSTDOCFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_MAKEFLAGS",
        "MAKEFLAGS",
        "MFLAGS",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_INCREMENTAL",
        "LLVM_PROFILE_FILE",
    ];
    const PREFIXES: &[&str] = &["CARGO_TARGET_", "CARGO_BUILD_", "CARGO_PROFILE_"];
    EXACT.contains(&key) || PREFIXES.iter().any(|p| key.starts_with(p))
}

/// Fails with the command that fixes it when the wasm target is not installed.
#[allow(dead_code)]
fn check_wasm_target(workspace: &Path) -> Result<(), String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let output = Command::new(&rustc)
        .current_dir(workspace)
        .args(["--print", "target-libdir", "--target", WASM_TARGET])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", Path::new(&rustc).display()))?;
    let libdir = String::from_utf8_lossy(&output.stdout).trim().to_string();
    if !output.status.success() || libdir.is_empty() || !Path::new(&libdir).is_dir() {
        return Err(format!(
            "the Rust target {WASM_TARGET} is not installed, and the policy component needs it: \
             run `rustup target add {WASM_TARGET}` (rust-toolchain.toml lists it, so a fresh \
             rustup install adds it by itself)"
        ));
    }
    Ok(())
}

/// Builds `package` (whose library is `lib_name`) as a component and returns the `.wasm` path.
#[allow(dead_code)]
pub fn build_policy_component(
    workspace: &Path,
    package: &str,
    lib_name: &str,
) -> Result<PathBuf, String> {
    build_policy_variant(workspace, package, lib_name, None)
}

/// As [`build_policy_component`], with one cargo feature of the package turned on. Each variant
/// gets a target dir of its own: they share the output file name, and two test processes may
/// build two variants at once.
#[allow(dead_code)]
pub fn build_policy_variant(
    workspace: &Path,
    package: &str,
    lib_name: &str,
    feature: Option<&str>,
) -> Result<PathBuf, String> {
    check_wasm_target(workspace)?;
    let target_dir = match feature {
        None => wasm_target_dir(workspace, package),
        Some(feature) => wasm_target_dir(workspace, &format!("{package}+{feature}")),
    };
    let mut command = nested_cargo(workspace);
    command
        .args(["build", "--quiet", "-p", package, "--target", WASM_TARGET])
        .args(["--profile", WASM_PROFILE])
        .arg("--target-dir")
        .arg(&target_dir);
    if let Some(feature) = feature {
        command.args(["--features", feature]);
    }
    let output = command
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "`cargo build -p {package} --target {WASM_TARGET} --profile {WASM_PROFILE}` failed \
             ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let wasm = target_dir
        .join(WASM_TARGET)
        .join(WASM_PROFILE)
        .join(format!("{lib_name}.wasm"));
    if !wasm.is_file() {
        return Err(format!(
            "cargo built {package} but {} is not there",
            wasm.display()
        ));
    }
    Ok(wasm)
}
