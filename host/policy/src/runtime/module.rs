//! Loading a policy: compile (through the precompiled cache), find which supported contract it
//! targets and check it against that one, pre-instantiate it with that contract's linker, and
//! ask the policy to describe itself.

use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;

use super::bindings::PolicyInfo;
use super::cache::{CacheDir, engine_key};
use super::contract::ModulePre;
use super::engine::PolicyEngine;
use super::host::{ALLOWED_WASI, DENIED_WASI};
use super::memo::{Memo, MemoStats};
use super::{CONTRACT_PACKAGE, Contract, RuntimeError};

/// A policy component, compiled, checked and ready to instantiate. Cheap to clone; holds its
/// engine (and so keeps the epoch ticker running).
#[derive(Clone)]
pub struct PolicyModule {
    engine: PolicyEngine,
    inner: Arc<ModuleInner>,
}

struct ModuleInner {
    pre: ModulePre,
    digest: String,
    size: usize,
    info: PolicyInfo,
    contract: Contract,
    imports: Vec<String>,
    exports: Vec<String>,
    /// Its answers kept for calls with the same input: dropped with the module.
    memo: Memo,
    /// How long its load took, step by step.
    loaded_in: LoadTimes,
}

/// How long a module's load took: its compile (or its read from the precompiled cache), and
/// the rest (the contract check, the pre-instantiation and `describe`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadTimes {
    /// Cranelift's compile of the component, or its read from the precompiled cache.
    pub compile: std::time::Duration,
    /// The contract check, the pre-instantiation with the contract's linker, and `describe`.
    pub check: std::time::Duration,
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

    /// The contract the component targets, found from its imports and exports.
    pub fn contract(&self) -> Contract {
        self.inner.contract
    }

    /// The component's imports (`cubepod:controller/kube-client@0.2.0`, `wasi:io/streams@0.2.6`...).
    pub fn imports(&self) -> &[String] {
        &self.inner.imports
    }

    /// The component's exports (`cubepod:controller/policy@0.2.0`).
    pub fn exports(&self) -> &[String] {
        &self.inner.exports
    }

    /// The engine it was compiled by.
    pub fn engine(&self) -> &PolicyEngine {
        &self.engine
    }

    /// How long its load took, step by step.
    pub fn loaded_in(&self) -> LoadTimes {
        self.inner.loaded_in
    }

    /// What its decision memo has answered and holds.
    pub fn memo_stats(&self) -> MemoStats {
        self.inner.memo.stats()
    }

    pub(crate) fn pre(&self) -> &ModulePre {
        &self.inner.pre
    }

    pub(crate) fn memo(&self) -> &Memo {
        &self.inner.memo
    }
}

impl std::fmt::Debug for PolicyModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyModule")
            .field("digest", &self.inner.digest)
            .field("contract", &self.inner.contract)
            .field("info", &self.inner.info)
            .field("size", &self.inner.size)
            .finish_non_exhaustive()
    }
}

impl PolicyEngine {
    /// Compiles, checks and pre-instantiates a policy component, then calls its `describe` and
    /// checks that it names the contract the component targets. Any failure refuses the module.
    pub fn load(&self, bytes: &[u8]) -> Result<PolicyModule, RuntimeError> {
        let started = std::time::Instant::now();
        let digest = hex::encode(Sha256::digest(bytes));
        let component = self.compile(bytes, &digest)?;
        let compiled = started.elapsed();

        let ty = component.component_type();
        let engine = self.engine();
        let imports: Vec<String> = ty.imports(engine).map(|(n, _)| n.to_string()).collect();
        let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
        let contract = check_contract(&imports, &exports)?;

        // Checks the imports' types against the linker and the exports' against the bindings.
        let pre =
            ModulePre::new(self, &component, contract).map_err(|e| RuntimeError::Contract {
                contract: contract.to_string(),
                why: one_line(&format!("{e:#}")),
            })?;
        let described = super::call::describe(self, &pre)?;
        if described.host_calls > 0 {
            tracing::warn!(
                digest,
                calls = described.host_calls,
                "policy called kube-client from describe (refused)"
            );
        }
        let info = described.value;
        check_info(&info).map_err(|why| RuntimeError::Contract {
            contract: contract.to_string(),
            why,
        })?;
        if info.contract_version != contract.version() {
            return Err(RuntimeError::Contract {
                contract: contract.to_string(),
                why: format!(
                    "describe says contract {:?}, the component is built against {:?}",
                    info.contract_version,
                    contract.version()
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
                contract,
                imports,
                exports,
                memo: Memo::new(self.config().memo),
                loaded_in: LoadTimes {
                    compile: compiled,
                    check: started.elapsed().saturating_sub(compiled),
                },
            }),
        };
        tracing::debug!(
            digest = module.digest(),
            name = %module.info().name,
            version = %module.info().version,
            contract = module.contract().version(),
            size = module.size(),
            compile_ms = compiled.as_secs_f64() * 1e3,
            check_ms = module.loaded_in().check.as_secs_f64() * 1e3,
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
    #[allow(unsafe_code)] // A precompiled component, from a checked cache entry or made just now.
    fn compile(&self, bytes: &[u8], digest: &str) -> Result<Component, RuntimeError> {
        if let Some(refused) = not_wasm(bytes) {
            return Err(refused);
        }
        let Some(dir) = &self.config().cache_dir else {
            return self.compiled(|| Component::new(self.engine(), bytes));
        };
        let cache = match CacheDir::open(dir) {
            Ok(cache) => cache,
            Err(why) => {
                tracing::warn!(dir = %dir.display(), "policy cache not used, compiling in memory: {why}");
                return self.compiled(|| Component::new(self.engine(), bytes));
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
        let compiled = self.compiled(|| self.engine().precompile_component(bytes))?;
        if let Err(e) = cache.write(&name, digest, &engine, &compiled) {
            tracing::warn!(path = %path.display(), error = %e, "cannot cache the compiled policy");
        }
        // SAFETY: `compiled` was produced a line above by `precompile_component` of this very
        // engine, from the bytes being loaded.
        unsafe { Component::deserialize(self.engine(), &compiled) }.map_err(compile_error)
    }
}

impl PolicyEngine {
    /// Runs Cranelift's `compile`, each function of it found in the functions the compile
    /// before kept if it is there (`functions.rs`).
    fn compiled<T>(
        &self,
        compile: impl FnOnce() -> wasmtime::Result<T>,
    ) -> Result<T, RuntimeError> {
        let functions = self.functions();
        functions.begin();
        let compiled = compile().map_err(compile_error)?;
        let found = functions.stats();
        tracing::debug!(
            reused = found.hits,
            compiled = found.misses,
            kept_bytes = found.bytes,
            "compiled a policy's functions"
        );
        Ok(compiled)
    }
}

/// The longest name or version a module may give itself.
const MAX_INFO_LEN: usize = 63;

/// What `describe` returns goes into logs, metric labels, `/readyz` and reports as it is, so it
/// is held to the syntax of a Kubernetes label value (at most 63 characters, alphanumerics at
/// both ends, `-`, `_` and `.` between), and a version also may hold SemVer's `+`. Nothing
/// else: no newline that would forge a log or `/readyz` line, no escape sequence for a
/// terminal, no megabytes in every scrape. The refusal quotes a bounded, escaped prefix.
fn check_info(info: &PolicyInfo) -> Result<(), String> {
    let check = |what: &str, value: &str, extra: &[u8]| {
        let bytes = value.as_bytes();
        let inner = |b: &u8| b.is_ascii_alphanumeric() || b"-_.".contains(b) || extra.contains(b);
        let ok = (1..=MAX_INFO_LEN).contains(&bytes.len())
            && bytes.iter().all(inner)
            && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
            && bytes.last().is_some_and(u8::is_ascii_alphanumeric);
        if ok {
            return Ok(());
        }
        let shown: String = value.chars().take(MAX_INFO_LEN).collect();
        let more = if shown.len() < value.len() {
            format!(" (and {} more bytes)", value.len() - shown.len())
        } else {
            String::new()
        };
        Err(format!(
            "describe gives the {what} {shown:?}{more}: a {what} is 1 to {MAX_INFO_LEN} \
             characters, letters, digits, '-', '_', '.'{}, beginning and ending with a letter \
             or digit",
            if extra.is_empty() { "" } else { " or '+'" }
        ))
    };
    check("name", &info.name, b"")?;
    check("version", &info.version, b"+")
}

fn compile_error(e: wasmtime::Error) -> RuntimeError {
    RuntimeError::Compile {
        why: one_line(&format!("{e:#}")),
    }
}

/// The magic bytes every WebAssembly binary, module or component, begins with.
const WASM_MAGIC: &[u8] = b"\0asm";

/// Bytes that are not WebAssembly at all, refused in words before wasmtime's parser sees them
/// (whose error lists the expected and found bytes one per line).
fn not_wasm(bytes: &[u8]) -> Option<RuntimeError> {
    if bytes.starts_with(WASM_MAGIC) {
        return None;
    }
    let head: Vec<String> = bytes.iter().take(4).map(|b| format!("{b:02x}")).collect();
    let found = if head.is_empty() {
        "it is empty".to_string()
    } else {
        format!("it begins with {}", head.join(" "))
    };
    Some(RuntimeError::Compile {
        why: format!(
            "not a WebAssembly component: a component begins with the bytes 00 61 73 6d, \
             {found}; build the policy for wasm32-wasip2 and give its .wasm file"
        ),
    })
}

/// `text` on one line: each run of whitespace, newlines included, one space. wasmtime's
/// errors may span lines, and a condition's or an Event's message is one line.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The contract version a component targets, from its import and export names: the version of
/// its `policy` export, else of its first import of the package. `None` when it names no
/// version of the package. Whether the host supports it is [`Contract::of_version`].
pub fn targeted_version<'a>(imports: &'a [String], exports: &'a [String]) -> Option<&'a str> {
    let version = |name: &'a String, interface: Option<&str>| {
        let (item, version) = name
            .strip_prefix(CONTRACT_PACKAGE)?
            .strip_prefix('/')?
            .split_once('@')?;
        interface.is_none_or(|i| i == item).then_some(version)
    };
    exports
        .iter()
        .find_map(|n| version(n, Some("policy")))
        .or_else(|| imports.iter().find_map(|n| version(n, None)))
}

/// Finds the contract the component targets, then checks that its imports are that contract's
/// world plus linked WASI interfaces, and its exports the world's, plus any outside the
/// contract's package (a language runtime's initialisation export, never called). Names every
/// missing and extra item; a version the host does not run is refused naming those it does.
fn check_contract(imports: &[String], exports: &[String]) -> Result<Contract, RuntimeError> {
    // A component that names no version of the package is checked against the current
    // contract, so that the refusal lists what it lacks.
    let contract = match targeted_version(imports, exports) {
        None => Contract::CURRENT,
        Some(version) => Contract::of_version(version).ok_or_else(|| RuntimeError::Contract {
            contract: format!("{CONTRACT_PACKAGE}@{version}"),
            why: format!(
                "the component was built against contract {version}; the host runs modules of \
                 contract {} only",
                Contract::supported_versions()
            ),
        })?,
    };
    let mut problems = Vec::new();
    let expected_imports = contract.world_imports();
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
                "import {name} is not provided: a policy gets only {}, and {} as stubs that \
                 deny or fix what they would give",
                ALLOWED_WASI.join(", "),
                DENIED_WASI.join(", ")
            )
        } else {
            format!("unexpected import {name}")
        });
    }
    let expected_exports = contract.world_exports();
    for name in &expected_exports {
        if !exports.contains(name) {
            problems.push(format!("missing export {name}"));
        }
    }
    for name in exports {
        // The host calls only the contract's exports; another package's is never called.
        let in_contract = name.starts_with(&format!("{CONTRACT_PACKAGE}/"));
        if in_contract && !expected_exports.contains(name) {
            problems.push(format!("unexpected export {name}"));
        }
    }
    if problems.is_empty() {
        return Ok(contract);
    }
    // Parts of two versions: name the other one, the likely cause.
    let other_version = imports
        .iter()
        .chain(exports)
        .filter_map(|n| n.strip_prefix(CONTRACT_PACKAGE)?.split_once('@'))
        .map(|(_, version)| version)
        .find(|v| *v != contract.version());
    if let Some(version) = other_version {
        problems.push(format!(
            "it also names contract {version}: a module targets one contract, {}",
            contract.version()
        ));
    }
    Err(RuntimeError::Contract {
        contract: contract.to_string(),
        why: problems.join("; "),
    })
}

/// `wasi:cli/stdin@0.2.x` for a linked interface, working or a stub: any 0.2 version, which the
/// linker matches.
fn is_allowed_wasi(name: &str) -> bool {
    name.split_once('@').is_some_and(|(interface, version)| {
        (ALLOWED_WASI.contains(&interface) || DENIED_WASI.contains(&interface))
            && version.starts_with("0.2.")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, version: &str) -> PolicyInfo {
        PolicyInfo {
            name: name.to_string(),
            version: version.to_string(),
            contract_version: "0.2.0".to_string(),
        }
    }

    #[test]
    fn a_module_names_itself_as_a_label_value_and_nothing_else() {
        for (name, version) in [
            ("cubepod-default", "0.1.0"),
            ("My_Policy.v2", "1.0.0-rc.1+build.5"),
            ("p", "1"),
            (&"a".repeat(63), &"1".repeat(63)),
        ] {
            assert_eq!(check_info(&info(name, version)), Ok(()), "{name} {version}");
        }
        let huge = "x".repeat(1 << 20);
        for (name, version, shown) in [
            ("", "1", "the name \"\""),
            (
                "cubepod\ncache: synced",
                "1",
                "the name \"cubepod\\ncache: synced\"",
            ),
            ("\u{1b}[31mred", "1", "the name \"\\u{1b}[31mred\""),
            ("name with spaces", "1", "the name"),
            ("-leading", "1", "the name"),
            ("trailing.", "1", "the name"),
            ("naïve", "1", "the name"),
            ("a\"b", "1", "the name"),
            (&"a".repeat(64), "1", "the name"),
            (&huge, "1", "(and 1048513 more bytes)"),
            ("p", "", "the version \"\""),
            ("p", "1.0\n", "the version"),
            ("p", "1 0", "the version"),
        ] {
            let why = check_info(&info(name, version)).expect_err(name);
            assert!(why.contains(shown), "{why}");
            assert!(
                why.len() < 400,
                "the refusal is bounded: {} bytes",
                why.len()
            );
            assert!(!why.contains('\n') && !why.contains('\u{1b}'), "{why}");
        }
    }

    fn names(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn each_supported_world_and_allowed_wasi_pass_as_their_own_contract() {
        for contract in Contract::SUPPORTED {
            let mut imports = contract.world_imports();
            imports.push("wasi:io/streams@0.2.6".to_string());
            let found = check_contract(&imports, &contract.world_exports()).unwrap();
            assert_eq!(found, contract);
        }
        assert_eq!(Contract::supported_versions(), "0.1.0 and 0.2.0");
    }

    #[test]
    fn a_language_runtime_s_wasi_imports_pass_and_an_unlinked_one_is_named() {
        let mut imports = Contract::V0_1.world_imports();
        for name in [
            "wasi:filesystem/preopens@0.2.6",
            "wasi:clocks/wall-clock@0.2.0",
            "wasi:random/random@0.2.3",
            "wasi:sockets/tcp@0.2.6",
        ] {
            imports.push(name.to_string());
        }
        let exports = Contract::V0_1.world_exports();
        assert_eq!(check_contract(&imports, &exports).unwrap(), Contract::V0_1);
        imports.push("wasi:http/outgoing-handler@0.2.6".to_string());
        let err = check_contract(&imports, &exports).unwrap_err().to_string();
        assert!(
            err.contains("import wasi:http/outgoing-handler@0.2.6 is not provided"),
            "{err}"
        );
        assert!(err.contains("contract cubepod:controller@0.1.0"), "{err}");
    }

    #[test]
    fn an_unsupported_version_is_refused_naming_the_supported_ones() {
        let imports = names(&[
            "cubepod:controller/types@0.3.0",
            "cubepod:controller/kube-client@0.3.0",
        ]);
        let exports = names(&["cubepod:controller/policy@0.3.0"]);
        let err = check_contract(&imports, &exports).unwrap_err();
        assert_eq!(err.metric_label(), "contract");
        assert_eq!(
            err.to_string(),
            "policy breaks the contract cubepod:controller@0.3.0: the component was built \
             against contract 0.3.0; the host runs modules of contract 0.1.0 and 0.2.0 only"
        );
        // Found from an import when there is no policy export.
        let err = check_contract(&imports, &[]).unwrap_err().to_string();
        assert!(err.contains("built against contract 0.3.0"), "{err}");
    }

    #[test]
    fn a_module_mixing_versions_is_checked_against_its_export_and_the_other_named() {
        let imports = names(&[
            "cubepod:controller/types@0.1.0",
            "cubepod:controller/kube-client@0.1.0",
        ]);
        let exports = names(&["cubepod:controller/policy@0.2.0"]);
        let err = check_contract(&imports, &exports).unwrap_err().to_string();
        for expected in [
            "contract cubepod:controller@0.2.0",
            "missing import cubepod:controller/kube-client@0.2.0",
            "unexpected import cubepod:controller/kube-client@0.1.0",
            "it also names contract 0.1.0",
        ] {
            assert!(err.contains(expected), "missing {expected:?} in {err}");
        }
    }

    #[test]
    fn a_component_naming_no_contract_is_told_what_the_current_one_needs() {
        let err = check_contract(&[], &names(&["run"]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("missing export cubepod:controller/policy@0.2.0"),
            "{err}"
        );
        assert!(
            !err.contains("run"),
            "never called, so not a problem: {err}"
        );
    }

    #[test]
    fn an_extra_export_passes_unless_it_claims_the_contract_s_package() {
        let mut exports = Contract::CURRENT.world_exports();
        // componentize-py's and componentize-qjs's initialisation exports.
        exports.push("exports".to_string());
        exports.push("init".to_string());
        let imports = Contract::CURRENT.world_imports();
        assert_eq!(
            check_contract(&imports, &exports).unwrap(),
            Contract::CURRENT
        );
        exports.push("cubepod:controller/admin@0.2.0".to_string());
        let err = check_contract(&imports, &exports).unwrap_err();
        assert!(
            err.to_string()
                .contains("unexpected export cubepod:controller/admin@0.2.0"),
            "{err}"
        );
    }

    #[test]
    fn bytes_that_are_no_component_are_refused_in_one_line() {
        let engine = PolicyEngine::new(crate::runtime::RuntimeConfig {
            cache_dir: None,
            ..crate::runtime::RuntimeConfig::default()
        })
        .unwrap();
        for (bytes, says) in [
            (&b"not a wasm component"[..], "it begins with 6e 6f 74 20"),
            (&b""[..], "it is empty"),
            // A header wasmtime's parser refuses: its own words, on one line.
            (&b"\0asm\x0d\0\x01\0garbage"[..], "policy does not compile"),
            (&b"\0asm\x2a\0\0\0"[..], "policy does not compile"),
        ] {
            let refused = engine.load(bytes).unwrap_err();
            assert_eq!(refused.metric_label(), "compile", "{refused}");
            let text = refused.to_string();
            assert!(text.contains(says), "{text}");
            assert!(!text.contains('\n'), "{text}");
            assert!(!text.contains("0x0,"), "no byte dump: {text}");
        }
    }
}
