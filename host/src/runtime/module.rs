//! Loading a policy: compile (through the precompiled cache), check the contract,
//! pre-instantiate, and ask the policy to describe itself.

use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;

use super::bindings::{PolicyInfo, PolicyModulePre};
use super::cache::{CacheDir, engine_key};
use super::engine::PolicyEngine;
use super::host::{ALLOWED_WASI, HostState};
use super::{CONTRACT_PACKAGE, CONTRACT_VERSION, RuntimeError};

/// A policy component, compiled, checked and ready to instantiate. Cheap to clone; holds its
/// engine (and so keeps the epoch ticker running).
#[derive(Clone)]
pub struct PolicyModule {
    engine: PolicyEngine,
    inner: Arc<ModuleInner>,
}

struct ModuleInner {
    pre: PolicyModulePre<HostState>,
    digest: String,
    size: usize,
    info: PolicyInfo,
    imports: Vec<String>,
    exports: Vec<String>,
}

impl PolicyModule {
    /// The sha256 of the component's bytes, lower-case hex.
    pub fn digest(&self) -> &str {
        &self.inner.digest
    }

    /// What the policy said of itself at load.
    pub fn info(&self) -> &PolicyInfo {
        &self.inner.info
    }

    /// The component's size in bytes.
    pub fn size(&self) -> usize {
        self.inner.size
    }

    /// The component's imports (`cubepod:controller/kube-client@0.1.0`, `wasi:io/streams@0.2.6`...).
    pub fn imports(&self) -> &[String] {
        &self.inner.imports
    }

    /// The component's exports (`cubepod:controller/policy@0.1.0`).
    pub fn exports(&self) -> &[String] {
        &self.inner.exports
    }

    pub fn engine(&self) -> &PolicyEngine {
        &self.engine
    }

    pub(crate) fn pre(&self) -> &PolicyModulePre<HostState> {
        &self.inner.pre
    }
}

impl std::fmt::Debug for PolicyModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyModule")
            .field("digest", &self.inner.digest)
            .field("info", &self.inner.info)
            .field("size", &self.inner.size)
            .finish_non_exhaustive()
    }
}

impl PolicyEngine {
    /// Compiles, checks and pre-instantiates a policy component, then calls its `describe` and
    /// checks the contract version it names. Any failure refuses the module.
    pub fn load(&self, bytes: &[u8]) -> Result<PolicyModule, RuntimeError> {
        let digest = hex::encode(Sha256::digest(bytes));
        let component = self.compile(bytes, &digest)?;

        let ty = component.component_type();
        let engine = self.engine();
        let imports: Vec<String> = ty.imports(engine).map(|(n, _)| n.to_string()).collect();
        let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
        check_contract(&imports, &exports)?;

        // Checks the imports' types against the linker and the exports' against the bindings.
        let pre = self
            .linker()
            .instantiate_pre(&component)
            .and_then(PolicyModulePre::new)
            .map_err(|e| RuntimeError::Contract {
                why: format!("{e:#}"),
            })?;
        let described = super::call::call(self, &pre, "describe", None, None, |policy, store| {
            policy.call_describe(store)
        })?;
        if described.host_calls > 0 {
            tracing::warn!(
                digest,
                calls = described.host_calls,
                "policy called kube-client from describe (refused)"
            );
        }
        let info = described.value;
        if info.contract_version != CONTRACT_VERSION {
            return Err(RuntimeError::Contract {
                why: format!(
                    "describe says contract {:?}, the host speaks {CONTRACT_VERSION:?}",
                    info.contract_version
                ),
            });
        }
        let module = PolicyModule {
            engine: self.clone(),
            inner: Arc::new(ModuleInner {
                pre,
                digest,
                size: bytes.len(),
                info,
                imports,
                exports,
            }),
        };
        tracing::debug!(
            digest = module.digest(),
            name = %module.info().name,
            version = %module.info().version,
            size = module.size(),
            "loaded policy"
        );
        Ok(module)
    }

    /// [`Self::load`] of a file.
    pub fn load_file(&self, path: &Path) -> Result<PolicyModule, RuntimeError> {
        let bytes = std::fs::read(path).map_err(|source| RuntimeError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        self.load(&bytes)
    }

    /// Compiles the component, through the precompiled cache when there is one. The cache is
    /// an optimisation: a directory that fails its check, or an entry that cannot be read,
    /// written or trusted, is logged and compiled around (see `cache.rs`).
    fn compile(&self, bytes: &[u8], digest: &str) -> Result<Component, RuntimeError> {
        let Some(dir) = &self.config().cache_dir else {
            return Component::new(self.engine(), bytes).map_err(compile_error);
        };
        let cache = match CacheDir::open(dir) {
            Ok(cache) => cache,
            Err(why) => {
                tracing::warn!(dir = %dir.display(), "policy cache not used, compiling in memory: {why}");
                return Component::new(self.engine(), bytes).map_err(compile_error);
            }
        };
        let engine = engine_key(self.engine());
        let name = format!("{digest}-{}.cwasm", hex::encode(&engine[..8]));
        let path = cache.shown(&name);
        match cache.read(&name, digest, &engine) {
            Ok(Some(compiled)) => {
                // SAFETY: `deserialize` runs the native code in `compiled`. The entry was read
                // from a directory that only this user may write (checked through the handle it
                // was read by), and it records this module's digest, this engine, and the
                // sha256 of the code, all checked above; wasmtime checks its own header too.
                match unsafe { Component::deserialize(self.engine(), &compiled) } {
                    Ok(component) => {
                        tracing::debug!(path = %path.display(), "loaded precompiled policy");
                        return Ok(component);
                    }
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %format!("{e:#}"), "unusable precompiled policy; compiling again");
                    }
                }
            }
            Ok(None) => {}
            Err(why) => {
                tracing::warn!(path = %path.display(), "precompiled policy not trusted, compiling again: {why}");
            }
        }
        let compiled = self
            .engine()
            .precompile_component(bytes)
            .map_err(compile_error)?;
        if let Err(e) = cache.write(&name, digest, &engine, &compiled) {
            tracing::warn!(path = %path.display(), error = %e, "cannot cache the compiled policy");
        }
        // SAFETY: `compiled` was produced a line above by `precompile_component` of this very
        // engine, from the bytes being loaded.
        unsafe { Component::deserialize(self.engine(), &compiled) }.map_err(compile_error)
    }
}

fn compile_error(e: wasmtime::Error) -> RuntimeError {
    RuntimeError::Compile {
        why: format!("{e:#}"),
    }
}

/// The imports of the `policy-module` world, as a component names them.
pub fn world_imports() -> Vec<String> {
    ["types", "kube-client"]
        .iter()
        .map(|i| format!("{CONTRACT_PACKAGE}/{i}@{CONTRACT_VERSION}"))
        .collect()
}

/// The exports of the `policy-module` world, as a component names them.
pub fn world_exports() -> Vec<String> {
    vec![format!("{CONTRACT_PACKAGE}/policy@{CONTRACT_VERSION}")]
}

/// The component's imports must be the world's plus allowed WASI interfaces, and its exports
/// the world's, exactly. Names every missing and extra item.
fn check_contract(imports: &[String], exports: &[String]) -> Result<(), RuntimeError> {
    let mut problems = Vec::new();
    let expected_imports = world_imports();
    for name in &expected_imports {
        if !imports.contains(name) {
            problems.push(format!("missing import {name}"));
        }
    }
    for name in imports {
        if expected_imports.contains(name) || is_allowed_wasi(name) {
            continue;
        }
        problems.push(if name.starts_with("wasi:") {
            format!(
                "import {name} is not provided: a policy gets no filesystem, network, clock or \
                 randomness (only {})",
                ALLOWED_WASI.join(", ")
            )
        } else {
            format!("unexpected import {name}")
        });
    }
    let expected_exports = world_exports();
    for name in &expected_exports {
        if !exports.contains(name) {
            problems.push(format!("missing export {name}"));
        }
    }
    for name in exports {
        if !expected_exports.contains(name) {
            problems.push(format!("unexpected export {name}"));
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    let other_version = imports
        .iter()
        .chain(exports)
        .filter_map(|n| n.strip_prefix(CONTRACT_PACKAGE)?.split_once('@'))
        .map(|(_, version)| version)
        .find(|v| *v != CONTRACT_VERSION);
    if let Some(version) = other_version {
        problems.push(format!(
            "the component was built against contract {version}, the host speaks {CONTRACT_VERSION}"
        ));
    }
    Err(RuntimeError::Contract {
        why: problems.join("; "),
    })
}

/// `wasi:cli/stdin@0.2.x` for an allowed interface: any 0.2 version, which the linker matches.
fn is_allowed_wasi(name: &str) -> bool {
    name.split_once('@').is_some_and(|(interface, version)| {
        ALLOWED_WASI.contains(&interface) && version.starts_with("0.2.")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_world_and_allowed_wasi_pass() {
        let mut imports = world_imports();
        imports.push("wasi:io/streams@0.2.6".to_string());
        assert!(check_contract(&imports, &world_exports()).is_ok());
    }

    #[test]
    fn a_filesystem_import_is_named() {
        let mut imports = world_imports();
        imports.push("wasi:filesystem/preopens@0.2.6".to_string());
        let err = check_contract(&imports, &world_exports()).unwrap_err();
        assert!(
            err.to_string().contains("wasi:filesystem/preopens@0.2.6"),
            "{err}"
        );
    }

    #[test]
    fn another_contract_version_is_named() {
        let imports = names(&[
            "cubepod:controller/types@0.2.0",
            "cubepod:controller/kube-client@0.2.0",
        ]);
        let exports = names(&["cubepod:controller/policy@0.2.0"]);
        let err = check_contract(&imports, &exports).unwrap_err().to_string();
        assert!(
            err.contains("missing export cubepod:controller/policy@0.1.0"),
            "{err}"
        );
        assert!(err.contains("built against contract 0.2.0"), "{err}");
    }

    #[test]
    fn an_extra_export_is_named() {
        let mut exports = world_exports();
        exports.push("run".to_string());
        let err = check_contract(&world_imports(), &exports).unwrap_err();
        assert!(err.to_string().contains("unexpected export run"), "{err}");
    }
}
