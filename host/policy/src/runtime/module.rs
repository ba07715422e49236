//! Loading a policy: compile (through the precompiled cache), find which supported contract it
//! targets and check it against that one, pre-instantiate it with that contract's linker, and
//! ask the policy to describe itself.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;

use super::bindings::PolicyInfo;
use super::cache::{CacheDir, engine_key};
use super::contract::ModulePre;
use super::engine::{Compile, PolicyEngine, Tier};
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
    /// The build its calls run: Winch's until Cranelift's replaces it ([`Compile::Tiered`]).
    /// Each call takes the one serving when it begins.
    serving: RwLock<Arc<Build>>,
    /// Whether a Cranelift build is being compiled behind the baseline one; waited on by
    /// [`PolicyModule::wait_optimised`].
    optimising: Mutex<bool>,
    optimised: Condvar,
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

/// One compiler's build of a module, pre-instantiated with its engine's linker: what a call
/// runs, in a store of that engine.
pub(crate) struct Build {
    pub(crate) engine: PolicyEngine,
    pub(crate) pre: ModulePre,
    pub(crate) tier: Tier,
}

/// How long a module's load took: its compile (or its read from the precompiled cache), and
/// the rest (the contract check, the pre-instantiation and `describe`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadTimes {
    /// The compile of the component that first served (Winch's when tiered, else
    /// Cranelift's), or its read from the precompiled cache.
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

    /// The build serving its calls now.
    pub(crate) fn build(&self) -> Arc<Build> {
        // Replaced whole under the lock: a panic cannot tear it.
        self.inner
            .serving
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Which build serves its calls now.
    pub fn tier(&self) -> Tier {
        self.build().tier
    }

    /// Waits, at most `timeout`, until no Cranelift build is being compiled behind the
    /// baseline one (it replaced it, or failed), and says which build serves then.
    pub fn wait_optimised(&self, timeout: Duration) -> Tier {
        let optimising = self
            .inner
            .optimising
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let waited = self
            .inner
            .optimised
            .wait_timeout_while(optimising, timeout, |optimising| *optimising);
        drop(waited.unwrap_or_else(|p| p.into_inner()));
        self.tier()
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
            .field("tier", &self.tier())
            .finish_non_exhaustive()
    }
}

impl PolicyEngine {
    /// Compiles, checks and pre-instantiates a policy component, then calls its `describe` and
    /// checks that it names the contract the component targets. Any failure refuses the module.
    ///
    /// With [`Compile::Tiered`], a module the precompiled cache does not hold is compiled by
    /// Winch, loaded and returned, and its Cranelift build is compiled on a thread of its own,
    /// checked the same way, cached, and put in its place between calls (see
    /// [`PolicyModule::tier`]); a module dropped before it is ready never gets it.
    pub fn load(&self, bytes: &[u8]) -> Result<PolicyModule, RuntimeError> {
        let started = Instant::now();
        let digest = hex::encode(Sha256::digest(bytes));
        let (component, by, tier) = self.first_build(bytes, &digest)?;
        let compiled = started.elapsed();

        let ty = component.component_type();
        let engine = by.engine();
        let imports: Vec<String> = ty.imports(engine).map(|(n, _)| n.to_string()).collect();
        let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
        let contract = check_contract(&imports, &exports)?;

        let pre = pre_instantiate(&by, &component, contract)?;
        let described = super::call::describe(&by, &pre)?;
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
        let optimise = tier == Tier::Baseline && self.config().compile == Compile::Tiered;
        let module = PolicyModule {
            engine: self.clone(),
            inner: Arc::new(ModuleInner {
                serving: RwLock::new(Arc::new(Build {
                    engine: by,
                    pre,
                    tier,
                })),
                optimising: Mutex::new(optimise),
                optimised: Condvar::new(),
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
            tier = tier.describe(),
            "loaded policy"
        );
        if optimise {
            self.optimise_behind(&module, bytes);
        }
        Ok(module)
    }

    /// The build a load serves first, and the engine it is for: the precompiled cache's
    /// (Cranelift's) when it holds one, else Winch's when tiered (Cranelift's if Winch cannot
    /// compile the module: a refusal is always Cranelift's), else Cranelift's.
    fn first_build(
        &self,
        bytes: &[u8],
        digest: &str,
    ) -> Result<(Component, PolicyEngine, Tier), RuntimeError> {
        if let Some(refused) = not_wasm(bytes) {
            return Err(refused);
        }
        let compile = self.config().compile;
        let baseline = self.baseline().filter(|_| compile != Compile::Optimised);
        if let (Some(baseline), Compile::Baseline) = (baseline, compile) {
            let component = Component::new(baseline.engine(), bytes).map_err(compile_error)?;
            return Ok((component, baseline.clone(), Tier::Baseline));
        }
        let entry = match self.precompiled(digest) {
            Precompiled::Found(component) => {
                return Ok((component, self.clone(), Tier::Optimised));
            }
            Precompiled::Missing(entry) => entry,
        };
        if let Some(baseline) = baseline {
            match Component::new(baseline.engine(), bytes) {
                Ok(component) => return Ok((component, baseline.clone(), Tier::Baseline)),
                Err(e) => tracing::debug!(
                    digest,
                    error = %one_line(&format!("{e:#}")),
                    "Winch cannot compile this policy; compiling it with Cranelift"
                ),
            }
        }
        let held = self.compile_lock();
        let component = self.compile_missing(bytes, digest, entry, &held)?;
        Ok((component, self.clone(), Tier::Optimised))
    }

    /// Compiles the Cranelift build of `module`, served by its baseline build now, on a thread
    /// of its own, and puts it in the baseline's place when ready.
    fn optimise_behind(&self, module: &PolicyModule, bytes: &[u8]) {
        let engine = self.clone();
        let inner = Arc::downgrade(&module.inner);
        let bytes = bytes.to_vec();
        let spawned = std::thread::Builder::new()
            .name("cubepod-optimise".to_string())
            .spawn(move || engine.optimise(&inner, &bytes));
        if let Err(e) = spawned {
            tracing::warn!(
                digest = module.digest(),
                "cannot start the optimised compile of the policy ({e}); its baseline build \
                 keeps serving"
            );
            self.count_optimisation(|count| count.failed += 1);
            settle(&module.inner);
        }
    }

    /// The background compile of [`Self::optimise_behind`]: one at a time; skipped, or its
    /// result thrown away, once the module is dropped (a later swap replaced it), so that
    /// nothing of a stale module ever serves.
    fn optimise(&self, module: &Weak<ModuleInner>, bytes: &[u8]) {
        lower_priority();
        let held = self.compile_lock();
        let Some(inner) = module.upgrade() else {
            self.count_optimisation(|count| count.dropped += 1);
            tracing::debug!("policy dropped before its optimised compile began: not compiled");
            return;
        };
        let digest = inner.digest.clone();
        let (contract, info) = (inner.contract, inner.info.clone());
        // Not held while compiling: a module dropped meanwhile is dropped now.
        drop(inner);
        let started = Instant::now();
        let built = self.optimised_build(bytes, &digest, contract, &info, &held);
        drop(held);
        let took_ms = started.elapsed().as_secs_f64() * 1e3;
        let Some(inner) = module.upgrade() else {
            self.count_optimisation(|count| count.dropped += 1);
            tracing::debug!(
                digest,
                took_ms,
                "policy dropped while its optimised build compiled: the build is thrown away"
            );
            return;
        };
        match built {
            Ok(pre) => {
                let build = Arc::new(Build {
                    engine: self.clone(),
                    pre,
                    tier: Tier::Optimised,
                });
                *inner.serving.write().unwrap_or_else(|p| p.into_inner()) = build;
                self.count_optimisation(|count| count.applied += 1);
                tracing::info!(
                    digest,
                    name = %info.name,
                    version = %info.version,
                    took_ms,
                    "policy now serves its optimised (Cranelift) build, compiled behind its \
                     baseline (Winch) build"
                );
            }
            Err(why) => {
                self.count_optimisation(|count| count.failed += 1);
                tracing::warn!(
                    digest,
                    name = %info.name,
                    "the optimised (Cranelift) build of the policy failed, so its baseline \
                     (Winch) build, which passed admission, keeps serving: {why}"
                );
            }
        }
        settle(&inner);
    }

    /// Cranelift's build of a module Winch's build of which was admitted, through the
    /// precompiled cache, checked the way a load checks it: pre-instantiated with the linker of
    /// its contract, and describing itself as before.
    fn optimised_build(
        &self,
        bytes: &[u8],
        digest: &str,
        contract: Contract,
        info: &PolicyInfo,
        held: &std::sync::MutexGuard<'_, ()>,
    ) -> Result<ModulePre, RuntimeError> {
        let component = match self.precompiled(digest) {
            Precompiled::Found(component) => component,
            Precompiled::Missing(entry) => self.compile_missing(bytes, digest, entry, held)?,
        };
        let pre = pre_instantiate(self, &component, contract)?;
        let described = super::call::describe(self, &pre)?.value;
        if described != *info {
            return Err(RuntimeError::Contract {
                contract: contract.to_string(),
                why: format!(
                    "its optimised build describes itself as {} {}, its baseline build as {} {}",
                    described.name, described.version, info.name, info.version
                ),
            });
        }
        Ok(pre)
    }

    /// [`Self::load`] of a file.
    pub fn load_file(&self, path: &Path) -> Result<PolicyModule, RuntimeError> {
        let bytes = std::fs::read(path).map_err(|source| RuntimeError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        self.load(&bytes)
    }

    /// The precompiled cache's build of the module, or where to put the one compiled now. The
    /// cache is an optimisation: a directory that fails its check, or an entry that cannot be
    /// read or trusted, is logged and compiled around (see `cache.rs`).
    #[allow(unsafe_code)] // A precompiled component, from a checked cache entry.
    fn precompiled(&self, digest: &str) -> Precompiled {
        let Some(dir) = &self.config().cache_dir else {
            return Precompiled::Missing(None);
        };
        let cache = match CacheDir::open(dir) {
            Ok(cache) => cache,
            Err(why) => {
                tracing::warn!(dir = %dir.display(), "policy cache not used, compiling in memory: {why}");
                return Precompiled::Missing(None);
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
                        return Precompiled::Found(component);
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
        Precompiled::Missing(Some(CacheEntry {
            cache,
            name,
            engine,
        }))
    }

    /// Cranelift's compile of a module the precompiled cache did not hold, written to `entry`
    /// when there is one. `_held`: the engine's compile lock.
    #[allow(unsafe_code)] // A precompiled component made just now.
    fn compile_missing(
        &self,
        bytes: &[u8],
        digest: &str,
        entry: Option<CacheEntry>,
        _held: &std::sync::MutexGuard<'_, ()>,
    ) -> Result<Component, RuntimeError> {
        let Some(CacheEntry {
            cache,
            name,
            engine,
        }) = entry
        else {
            return self.compiled(|| Component::new(self.engine(), bytes));
        };
        let compiled = self.compiled(|| self.engine().precompile_component(bytes))?;
        if let Err(e) = cache.write(&name, digest, &engine, &compiled) {
            let path = cache.shown(&name);
            tracing::warn!(path = %path.display(), error = %e, "cannot cache the compiled policy");
        }
        // SAFETY: `compiled` was produced a line above by `precompile_component` of this very
        // engine, from the bytes being loaded.
        unsafe { Component::deserialize(self.engine(), &compiled) }.map_err(compile_error)
    }
}

/// A build pre-instantiated with `engine`'s linker of `contract`: the imports' types checked
/// against the linker and the exports' against the bindings.
fn pre_instantiate(
    engine: &PolicyEngine,
    component: &Component,
    contract: Contract,
) -> Result<ModulePre, RuntimeError> {
    ModulePre::new(engine, component, contract).map_err(|e| RuntimeError::Contract {
        contract: contract.to_string(),
        why: one_line(&format!("{e:#}")),
    })
}

/// What the precompiled cache gave for a module.
enum Precompiled {
    /// Its Cranelift build, loaded.
    Found(Component),
    /// Nothing: where to write the build compiled now, if the cache is used.
    Missing(Option<CacheEntry>),
}

/// A cache entry to write.
struct CacheEntry {
    cache: CacheDir,
    name: String,
    engine: [u8; 32],
}

/// Lowers the calling thread's scheduling priority (nice 10, Linux), so that a background
/// compile gives way to the calls and to the next admission. Best effort: not lowered, it
/// only competes more.
#[allow(unsafe_code)] // Two libc calls on this thread's own id.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: `gettid` has no preconditions; `setpriority` of this thread's own id changes
    // only its priority, and its failure is harmless.
    unsafe {
        let tid = libc::gettid();
        let _ = libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 10);
    }
}

/// A background compile is over: wake whoever waits on it.
fn settle(inner: &ModuleInner) {
    *inner.optimising.lock().unwrap_or_else(|p| p.into_inner()) = false;
    inner.optimised.notify_all();
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
    use crate::runtime::Optimisations;

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

    /// An engine that compiles each new module by Winch first, Cranelift behind it; no memo,
    /// so that each call runs the build serving.
    fn tiered() -> PolicyEngine {
        PolicyEngine::new(crate::runtime::RuntimeConfig {
            compile: Compile::Tiered,
            memo: crate::runtime::MemoBounds {
                entries: 0,
                ..crate::runtime::MemoBounds::default()
            },
            ..crate::runtime::RuntimeConfig::default()
        })
        .expect("an engine")
    }

    /// The default policy with a custom section holding `n`: another digest, the same code.
    fn variant(n: u8) -> Vec<u8> {
        let mut bytes = crate::runtime::DEFAULT_POLICY.to_vec();
        bytes.extend_from_slice(&[0, 3, 1, b'n', n]);
        bytes
    }

    /// A tiered load serves Winch's build at once and Cranelift's once compiled; calls made
    /// all along, across the change, each succeed and decide alike.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_tiered_module_serves_winch_then_cranelift_deciding_alike_across_the_change() {
        use crate::runtime::CallContext;
        use std::sync::atomic::{AtomicBool, Ordering};

        let engine = tiered();
        let module = engine.load(&variant(1)).expect("the default policy");
        assert_eq!(module.tier(), Tier::Baseline);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let decide = || {
            // A boundary of its own each time: the same sandbox's writes, call after call,
            // would go past its write rate.
            let ctx = CallContext::new(
                Arc::new(cubepod_kube::Discarding::new()),
                Arc::new(crate::containment::Boundary::new(["tier"])),
                runtime.handle().clone(),
            );
            let input = crate::fixtures::new_sandbox_input("tier", "box", 1_000);
            let call = module.reconcile_sandbox(&ctx, input).expect("no trap");
            (call.value.expect("a decision"), call.host_calls)
        };
        let first = decide();
        let done = AtomicBool::new(false);
        let tiers = std::thread::scope(|scope| {
            let calls = scope.spawn(|| {
                let mut tiers = Vec::new();
                while !done.load(Ordering::Acquire) {
                    tiers.push(module.tier());
                    assert_eq!(decide(), first, "the same decision on {:?}", tiers.last());
                }
                tiers
            });
            let tier = module.wait_optimised(Duration::from_secs(120));
            // A few calls on the optimised build too.
            std::thread::sleep(Duration::from_millis(100));
            done.store(true, Ordering::Release);
            assert_eq!(tier, Tier::Optimised);
            calls.join().expect("the calls")
        });
        assert_eq!(tiers.first(), Some(&Tier::Baseline), "{tiers:?}");
        assert_eq!(tiers.last(), Some(&Tier::Optimised), "{tiers:?}");
        assert_eq!(decide(), first);
        assert_eq!(
            engine.optimisations(),
            Optimisations {
                applied: 1,
                dropped: 0,
                failed: 0
            }
        );
        assert_eq!(module.digest(), hex::encode(Sha256::digest(variant(1))));
    }

    /// A module swapped out while its Cranelift build compiles never gets it, and the build
    /// does not land anywhere else: the module that replaced it gets its own.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn an_optimised_build_of_a_module_dropped_meanwhile_is_thrown_away() {
        let engine = tiered();
        let replaced = engine.load(&variant(2)).expect("the second module");
        assert_eq!(replaced.tier(), Tier::Baseline);
        // Its Cranelift build has just begun; the swap to a third module drops it.
        drop(replaced);
        let third = engine.load(&variant(3)).expect("the third module");
        assert_eq!(third.tier(), Tier::Baseline);
        assert_eq!(
            third.wait_optimised(Duration::from_secs(120)),
            Tier::Optimised
        );
        assert_eq!(third.digest(), hex::encode(Sha256::digest(variant(3))));
        // The third module's build waited for the second's to end: both are counted.
        assert_eq!(
            engine.optimisations(),
            Optimisations {
                applied: 1,
                dropped: 1,
                failed: 0
            }
        );
    }

    /// A module whose Cranelift build is in the precompiled cache serves it at once, with no
    /// Winch build and nothing compiled behind it; the tiered load wrote it there.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_tiered_load_writes_the_optimised_build_to_the_cache_and_the_next_engine_serves_it() {
        let dir = std::env::temp_dir().join(format!("cubepod-tier-cache-{}", std::process::id()));
        let config = || crate::runtime::RuntimeConfig {
            compile: Compile::Tiered,
            cache_dir: Some(dir.join("cache")),
            ..crate::runtime::RuntimeConfig::default()
        };
        let engine = PolicyEngine::new(config()).expect("an engine");
        let module = engine.load(&variant(4)).expect("the module");
        assert_eq!(module.tier(), Tier::Baseline);
        assert_eq!(
            module.wait_optimised(Duration::from_secs(120)),
            Tier::Optimised
        );
        let restarted = PolicyEngine::new(config()).expect("an engine");
        let module = restarted.load(&variant(4)).expect("the module");
        assert_eq!(module.tier(), Tier::Optimised);
        assert_eq!(restarted.optimisations(), Optimisations::default());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Cranelift alone (`policy test`, the default) compiles no Winch build.
    #[test]
    fn an_optimised_engine_serves_cranelift_s_build_from_the_load() {
        let engine = PolicyEngine::new(crate::runtime::RuntimeConfig::default()).expect("engine");
        assert!(engine.baseline().is_none());
        let module = engine.load(&variant(5)).expect("the module");
        assert_eq!(module.tier(), Tier::Optimised);
        assert_eq!(module.wait_optimised(Duration::ZERO), Tier::Optimised);
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
