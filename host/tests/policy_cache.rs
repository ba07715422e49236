//! The precompiled-module cache (`--cache-dir`) cannot be planted: an entry that does not
//! record the module being loaded, or whose code was changed, is compiled again and
//! overwritten, never run; a directory that others may write is not used at all; and the
//! directory is created private.
//!
//! "Run" is told apart by the policy's own answer: the guarded example's compiled code, planted
//! under the default policy's name, would describe itself as `cubepod-guarded`.
//!
//! Run: `cargo test -p cubepod-host --test policy_cache`

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cubepod_policy_host::runtime::{DEFAULT_POLICY, PolicyEngine, RuntimeConfig};

// Its items are `pub` for every includer; each uses only some of them.
#[allow(unreachable_pub)]
mod wasm_build {
    include!("../policy/wasm_build.rs");
}

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
}

/// The guarded example policy's component, built once per test run.
fn guarded() -> &'static [u8] {
    static WASM: OnceLock<Vec<u8>> = OnceLock::new();
    WASM.get_or_init(|| {
        let path = wasm_build::build_policy_component(
            workspace(),
            "cubepod-policy-guarded",
            "cubepod_policy_guarded",
        )
        .unwrap_or_else(|why| panic!("{why}"));
        std::fs::read(path).unwrap()
    })
}

fn engine(cache: &Path) -> PolicyEngine {
    PolicyEngine::new(RuntimeConfig {
        cache_dir: Some(cache.to_path_buf()),
        ..RuntimeConfig::default()
    })
    .unwrap()
}

fn digest(bytes: &[u8]) -> String {
    cubepod_host::admission::sha256_hex(bytes)
}

/// The one entry of `module` in `cache`.
fn entry(cache: &Path, module: &[u8]) -> PathBuf {
    let prefix = format!("{}-", digest(module));
    let found: Vec<PathBuf> = std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&prefix)
        })
        .collect();
    assert_eq!(found.len(), 1, "one entry of the module: {found:?}");
    found[0].clone()
}

/// Where an entry of `module` goes, named as the entry `like` of another module is.
fn named_for(like: &Path, module: &[u8]) -> PathBuf {
    let name = like.file_name().unwrap().to_string_lossy();
    let (_, engine) = name.split_once('-').unwrap();
    like.with_file_name(format!("{}-{engine}", digest(module)))
}

/// The guarded policy's entry, forged to record the default policy's digest in its header: what
/// an attacker who can write the directory and knows the format would plant.
fn forged_entry(guarded_entry: &[u8]) -> Vec<u8> {
    let mut forged = guarded_entry.to_vec();
    let magic = b"cubepod-cwasm-1\n".len();
    forged[magic..magic + 64].copy_from_slice(digest(DEFAULT_POLICY).as_bytes());
    forged
}

/// The name the default policy gives itself when loaded from `cache`.
fn default_policy_name(cache: &Path) -> String {
    engine(cache)
        .load(DEFAULT_POLICY)
        .unwrap()
        .info()
        .name
        .clone()
}

#[test]
fn the_directory_is_created_private_and_an_entry_is_reused() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("a/cache");
    assert_eq!(default_policy_name(&cache), "cubepod-default");
    let mode = std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    let written = entry(&cache, DEFAULT_POLICY);
    let file_mode = std::fs::metadata(&written).unwrap().permissions().mode() & 0o777;
    assert_eq!(file_mode, 0o600);
    let modified = std::fs::metadata(&written).unwrap().modified().unwrap();

    assert_eq!(default_policy_name(&cache), "cubepod-default");
    assert_eq!(
        std::fs::metadata(&written).unwrap().modified().unwrap(),
        modified,
        "a good entry is loaded, not rewritten"
    );
}

#[test]
fn an_entry_of_another_module_or_a_corrupt_one_is_compiled_again_and_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    engine(&cache).load(guarded()).unwrap();
    let guarded_entry = entry(&cache, guarded());
    let target = named_for(&guarded_entry, DEFAULT_POLICY);

    let planted: [(&str, Vec<u8>); 4] = [
        (
            "another module's entry",
            std::fs::read(&guarded_entry).unwrap(),
        ),
        ("garbage", b"#!/bin/sh\nnot native code".to_vec()),
        ("empty", Vec::new()),
        ("a corrupted payload", {
            let mut forged = forged_entry(&std::fs::read(&guarded_entry).unwrap());
            let last = forged.len() - 100;
            forged[last] ^= 0xff;
            forged
        }),
    ];
    for (case, bytes) in planted {
        std::fs::write(&target, &bytes).unwrap();
        assert_eq!(default_policy_name(&cache), "cubepod-default", "{case}");
        let rewritten = std::fs::read(&target).unwrap();
        assert_ne!(rewritten, bytes, "{case}: overwritten");
        assert_eq!(
            &rewritten[16..80],
            digest(DEFAULT_POLICY).as_bytes(),
            "{case}: the new entry records the default policy"
        );
    }
}

#[test]
fn a_directory_others_may_write_is_not_used() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    engine(&cache).load(guarded()).unwrap();
    let guarded_entry = entry(&cache, guarded());
    let target = named_for(&guarded_entry, DEFAULT_POLICY);
    let forged = forged_entry(&std::fs::read(&guarded_entry).unwrap());

    // The permission check is the defence against a forged entry: in a private directory it
    // would be loaded (the test plants it as the directory's owner).
    std::fs::write(&target, &forged).unwrap();
    assert_eq!(default_policy_name(&cache), "cubepod-guarded");

    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o770)).unwrap();
    assert_eq!(default_policy_name(&cache), "cubepod-default");
    assert_eq!(
        std::fs::read(&target).unwrap(),
        forged,
        "the directory is not used at all, not even written"
    );

    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o707)).unwrap();
    assert_eq!(default_policy_name(&cache), "cubepod-default");
}

#[test]
fn a_symlinked_directory_is_not_used() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    engine(&real).load(guarded()).unwrap();
    let target = named_for(&entry(&real, guarded()), DEFAULT_POLICY);
    std::fs::write(
        &target,
        forged_entry(&std::fs::read(entry(&real, guarded())).unwrap()),
    )
    .unwrap();

    // Whoever owns the link could point it elsewhere between the check and the read.
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    assert_eq!(default_policy_name(&link), "cubepod-default");
}
