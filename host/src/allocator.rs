//! The system allocator tuned for a long-running controller. glibc's malloc keeps what a burst
//! allocated (the initial lists, a resync of every sandbox) in up to eight arenas per core and
//! gives little of it back, so the RSS would stay at the peak. With fewer arenas and a trim
//! after each burst it follows the live data. Elsewhere these are no-ops.

/// Caps the number of malloc arenas, unless `MALLOC_ARENA_MAX` already says how many. Call
/// before threads start allocating.
pub fn limit_arenas(arenas: i32) {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a tunable of the allocator; M_ARENA_MAX takes any positive
    // count, and an unsupported request is refused (returns 0) without effect.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, arenas.max(1));
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = arenas;
}

/// Returns the free memory at the top of every arena and whole free pages inside them to the
/// system.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers and is safe to call at any time from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}
