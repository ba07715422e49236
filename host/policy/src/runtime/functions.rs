//! Cranelift's compiled functions, kept in memory across compiles (its incremental cache): each
//! function's machine code by the hash of what it was compiled from (its code once translated,
//! the target and the compiler's settings). A new module that shares most of its functions with
//! the last one compiled, as a new version of a policy built with the same SDK and standard
//! library does, compiles only the functions that changed: a hot swap's compile is mostly
//! lookups. A restart or another replica reuses a whole module through the precompiled cache
//! (`--cache-dir`, keyed by the module's digest) instead.
//!
//! Only what this process compiled is ever in it, so it needs none of the precompiled cache's
//! checks. It holds the functions of the last compile and of the one before (a function found
//! again moves to the newer), within [`MAX_BYTES`]: about a module's compiled code, resident
//! while the controller runs (about 1 MB for the default policy).

use std::borrow::Cow;
use std::sync::{Mutex, MutexGuard};

use std::collections::HashMap;

/// The most the functions kept may weigh: a compile whose functions would go past it keeps
/// the rest uncached (compiled again next time). Room for the largest policies' code (the
/// Python and JavaScript runtimes compile to about 30 MiB).
pub(crate) const MAX_BYTES: usize = 64 << 20;

/// Compiled functions by their key; see the module's documentation.
#[derive(Debug, Default)]
pub(crate) struct CompiledFunctions {
    inner: Mutex<Generations>,
}

#[derive(Debug, Default)]
struct Generations {
    /// The functions the compile under way (or the last) compiled or found.
    current: HashMap<Vec<u8>, Vec<u8>>,
    /// Those of the compile before, not found again (yet).
    previous: HashMap<Vec<u8>, Vec<u8>>,
    /// What both hold, keys and code.
    bytes: usize,
    hits: u64,
    misses: u64,
}

/// What a compile found in the cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FunctionStats {
    /// Functions taken from the cache, and compiled, since the compile began.
    pub(crate) hits: u64,
    pub(crate) misses: u64,
    /// What the cache holds, keys and code.
    pub(crate) bytes: usize,
}

impl CompiledFunctions {
    fn lock(&self) -> MutexGuard<'_, Generations> {
        // Each change below leaves the maps and the count consistent: a panic cannot tear them.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A compile begins: the functions of the compile before it are dropped, unless found again
    /// by this one; the last compile's are kept for it to find.
    pub(crate) fn begin(&self) {
        let mut inner = self.lock();
        let dropped: usize = inner.previous.iter().map(|(k, v)| k.len() + v.len()).sum();
        inner.bytes -= dropped;
        inner.previous = std::mem::take(&mut inner.current);
        inner.hits = 0;
        inner.misses = 0;
    }

    /// What the compile since [`Self::begin`] found, and what the cache holds.
    pub(crate) fn stats(&self) -> FunctionStats {
        let inner = self.lock();
        FunctionStats {
            hits: inner.hits,
            misses: inner.misses,
            bytes: inner.bytes,
        }
    }
}

impl wasmtime::CacheStore for CompiledFunctions {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let mut inner = self.lock();
        if let Some(code) = inner.current.get(key) {
            let code = code.clone();
            inner.hits += 1;
            return Some(Cow::Owned(code));
        }
        let Some((key, code)) = inner.previous.remove_entry(key) else {
            inner.misses += 1;
            return None;
        };
        let found = code.clone();
        inner.current.insert(key, code);
        inner.hits += 1;
        Some(Cow::Owned(found))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let mut inner = self.lock();
        let weight = key.len() + value.len();
        if inner.bytes + weight > MAX_BYTES || inner.current.contains_key(key) {
            return false;
        }
        inner.bytes += weight;
        inner.current.insert(key.to_vec(), value);
        true
    }
}

#[cfg(test)]
mod tests {
    use wasmtime::CacheStore as _;

    use super::*;

    #[test]
    fn a_function_found_again_is_kept_and_one_not_found_by_the_next_compile_is_dropped() {
        let cache = CompiledFunctions::default();
        cache.begin();
        assert!(cache.get(b"a").is_none());
        assert!(cache.insert(b"a", vec![1; 10]));
        assert!(cache.insert(b"b", vec![2; 10]));
        cache.begin();
        assert_eq!(cache.get(b"a").as_deref(), Some(&[1u8; 10][..]));
        // b was not found by the second compile: the third drops it, and keeps a.
        cache.begin();
        assert!(cache.get(b"b").is_none());
        assert_eq!(cache.get(b"a").as_deref(), Some(&[1u8; 10][..]));
        assert_eq!(
            cache.stats(),
            FunctionStats {
                hits: 1,
                misses: 1,
                bytes: 11
            }
        );
    }

    /// A module that differs from the one compiled before only in a custom section (another
    /// digest, the same code) compiles almost none of its functions again; a fresh engine
    /// compiles them all.
    #[test]
    fn a_new_digest_of_the_same_code_compiles_no_function_again() {
        use crate::runtime::{DEFAULT_POLICY, PolicyEngine, RuntimeConfig};
        let mut variant = DEFAULT_POLICY.to_vec();
        // A custom section (id 0) of 5 bytes: a name of 1 byte, "x", and 3 bytes of content.
        variant.extend_from_slice(&[0, 5, 1, b'x', 1, 2, 3]);
        let engine = PolicyEngine::new(RuntimeConfig::default()).expect("an engine");
        let default = engine.load(DEFAULT_POLICY).expect("the default policy");
        // Functions alike within the module are found from the first compile on.
        let first = engine.functions().stats();
        assert!(first.misses > 100, "{first:?}");
        let module = engine.load(&variant).expect("the variant");
        assert_ne!(module.digest(), default.digest());
        let again = engine.functions().stats();
        // A few functions name something of the module beside their code, and compile again:
        // about 21 of 366 alone, up to 54 in a busy test process (which ones varies with the
        // compile's threads). Most of the module found is what a hot swap needs.
        assert!(again.hits >= 3 * again.misses, "{again:?}");
        assert_eq!(again.hits + again.misses, first.hits + first.misses);
        let fresh = PolicyEngine::new(RuntimeConfig::default()).expect("an engine");
        let cold = fresh.load(&variant).expect("the variant");
        assert!(fresh.functions().stats().misses > 100);
        eprintln!(
            "compile: {:?} first, {:?} again, {:?} on a fresh engine",
            default.loaded_in().compile,
            module.loaded_in().compile,
            cold.loaded_in().compile
        );
    }

    #[test]
    fn past_its_bound_a_function_is_not_kept() {
        let cache = CompiledFunctions::default();
        assert!(cache.insert(b"a", vec![0; MAX_BYTES - 1]));
        assert!(!cache.insert(b"b", vec![0; 1]));
        assert!(cache.get(b"b").is_none());
    }
}
