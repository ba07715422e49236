//! The controller's allocator: mimalloc, set up for a long-running controller.
//!
//! Every answer and watch event the controller reads is a burst of small allocations freed
//! soon after: with glibc's malloc they took about a sixth of the controller's CPU
//! (`_int_malloc`, `_int_free`, `malloc_consolidate`). Set in the library, not only the binary,
//! so that the tests and `policy test` run on the allocator the controller does.
// The allocator is configured through mimalloc's C API before main and trimmed on demand.
#![allow(unsafe_code)]

use mimalloc::MiMalloc;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

/// `mi_option_arena_eager_commit` in `mimalloc.h` (the fifth of `mi_option_e`; the crate
/// exports no constant for it). On by default on Linux, where it commits each arena as it is
/// reserved: the seeded controller's RSS at 10,000 sandboxes was 131–145 MiB with it, 86–87
/// MiB with it off and [`PURGE_DELAY`] at 0 (glibc's: 82–86 MiB).
const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

/// `mi_option_purge_delay` (the sixteenth of `mi_option_e`): how long freed pages stay before
/// they are given back (10 ms by default): at 0 the RSS after a burst is as low as glibc's, and
/// the CPU per new sandbox stayed 17-33% under glibc's (alternated, N = 1,000).
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Sets the allocator's options before anything allocates: the first arena is reserved at the
/// first allocation, which comes before `main` (the runtime's own set-up), and its options stay
/// as they were then. An ELF constructor runs before Rust's `main` and before other threads.
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array")]
static CONFIGURE: extern "C" fn() = configure;

#[cfg(target_os = "linux")]
extern "C" fn configure() {
    // SAFETY: mi_option_set only stores a tunable; constructors run on the one thread there is.
    unsafe {
        libmimalloc_sys::mi_option_set(ARENA_EAGER_COMMIT, 0);
        libmimalloc_sys::mi_option_set(PURGE_DELAY, 0);
    }
}

/// Returns the memory freed after a burst (the initial lists, a resync of every sandbox) to the
/// system, so that the RSS follows the live data rather than the peak.
pub fn trim() {
    // SAFETY: mi_collect takes no pointers; `force` gives back every free page now, not later.
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn the_options_are_mimallocs_and_set_before_main() {
        // The constants are positions in `mi_option_e`: held against the neighbours the crate
        // does export, so that a mimalloc that renumbers them fails here.
        assert_eq!(
            libmimalloc_sys::mi_option_large_os_pages,
            ARENA_EAGER_COMMIT + 2
        );
        assert_eq!(libmimalloc_sys::mi_option_use_numa_nodes - 1, PURGE_DELAY);
        // SAFETY: mi_option_get only reads a tunable.
        let (eager, delay) = unsafe {
            (
                libmimalloc_sys::mi_option_get(ARENA_EAGER_COMMIT),
                libmimalloc_sys::mi_option_get(PURGE_DELAY),
            )
        };
        assert_eq!((eager, delay), (0, 0), "the constructor did not run");
    }
}
