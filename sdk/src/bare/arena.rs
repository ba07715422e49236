//! The allocator `no_std_runtime!` gives a policy's component. The host runs every call in a
//! fresh instance and then drops its memory whole, so freeing a call's allocations one by one
//! (dlmalloc's bookkeeping, about a sixth of the policy's own instructions) is work nobody
//! needs. Allocations are bumped out of one arena instead; a free gives back only the newest
//! allocation (a temporary's), and a realloc of the newest grows it in place (a `String` or
//! `Vec` being built). What does not fit in the arena goes to dlmalloc (the system's allocator
//! natively), which frees as before: a call that allocates more than the arena holds, or an
//! instance that a host were to reuse, costs memory only up to the arena's size, never more
//! than it would with dlmalloc alone plus that.

use core::alloc::{GlobalAlloc, Layout};
use core::cell::{Cell, UnsafeCell};

// What does not fit goes to a general allocator: dlmalloc in the component (which has no
// libc: the policy is `no_std`), the system's natively (the tests).
#[cfg(target_arch = "wasm32")]
use dlmalloc::GlobalDlmalloc as Fallback;
#[cfg(not(target_arch = "wasm32"))]
use std::alloc::System as Fallback;

/// Bytes of the arena: a reconcile's inputs, manifests and temporaries take tens of KiB.
pub const ARENA_BYTES: usize = 1 << 20;

/// The arena's bytes, zero in a fresh instance (they are the module's `.bss`).
#[repr(align(16))]
struct Memory<const N: usize>(UnsafeCell<[u8; N]>);

/// A bump allocator over `memory`, falling back to a general allocator.
pub struct Arena<const N: usize> {
    memory: Memory<N>,
    /// Offset of the first free byte.
    next: Cell<usize>,
    /// One past the offset of the newest allocation while it is still the newest, 0 otherwise:
    /// an arena of zeros alone is all `.bss`, which a fresh instance gets without a copy of
    /// an initial image (a non-zero field would put the whole arena in the data segment).
    newest: Cell<usize>,
}

// A wasm32-wasip2 component runs on one thread: no two calls of the allocator overlap.
unsafe impl<const N: usize> Sync for Arena<N> {}

impl<const N: usize> Arena<N> {
    pub const fn new() -> Self {
        Self {
            memory: Memory(UnsafeCell::new([0; N])),
            next: Cell::new(0),
            newest: Cell::new(0),
        }
    }

    /// Whether the allocation at `at` is the newest.
    fn is_newest(&self, at: usize) -> bool {
        self.newest.get() == at + 1
    }

    fn base(&self) -> usize {
        self.memory.0.get() as usize
    }

    /// The offset of `ptr` in the arena, if it is in it.
    fn offset(&self, ptr: *mut u8) -> Option<usize> {
        (ptr as usize).checked_sub(self.base()).filter(|&at| at < N)
    }

    /// Room for `layout` in the arena: its offset, the arena's `next` moved past it.
    fn bump(&self, layout: Layout) -> Option<usize> {
        let base = self.base();
        let start = base
            .checked_add(self.next.get())?
            .checked_next_multiple_of(layout.align())?
            - base;
        let end = start.checked_add(layout.size())?;
        if end > N {
            return None;
        }
        self.next.set(end);
        self.newest.set(start + 1);
        Some(start)
    }
}

impl<const N: usize> Default for Arena<N> {
    fn default() -> Self {
        Self::new()
    }
}

// Not inlined: with LTO each of the component's hundreds of allocation sites would otherwise
// get its own copy of these, which made the code section 29% larger (and every compile, so
// every hot swap, longer) for 0.3% fewer instructions per new sandbox.
unsafe impl<const N: usize> GlobalAlloc for Arena<N> {
    #[inline(never)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.bump(layout) {
            Some(at) => (self.base() + at) as *mut u8,
            // SAFETY: the caller's layout, handed on as it came.
            None => unsafe { Fallback.alloc(layout) },
        }
    }

    #[inline(never)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match self.offset(ptr) {
            // The newest allocation is handed back; any other stays until the instance goes.
            Some(at) => {
                if self.is_newest(at) {
                    self.next.set(at);
                    self.newest.set(0);
                }
            }
            // SAFETY: not the arena's, so the fallback allocated it, with this layout.
            None => unsafe { Fallback.dealloc(ptr, layout) },
        }
    }

    #[inline(never)]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Some(at) = self.offset(ptr) else {
            // SAFETY: not the arena's, so the fallback allocated it, with this layout.
            return unsafe { Fallback.realloc(ptr, layout, new_size) };
        };
        // The newest allocation grows or shrinks in place while the arena has room.
        if self.is_newest(at) && at.checked_add(new_size).is_some_and(|end| end <= N) {
            self.next.set(at + new_size);
            return ptr;
        }
        if new_size <= layout.size() {
            return ptr;
        }
        // SAFETY: `layout.align()` is a valid alignment, and `new_size` was checked by the
        // caller not to overflow when rounded up to it (GlobalAlloc::realloc's contract).
        let grown = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a non-zero size (it exceeds `layout.size()`).
        let moved = unsafe { self.alloc(grown) };
        if !moved.is_null() {
            // SAFETY: both blocks are live and distinct, the old one `layout.size()` long.
            unsafe { core::ptr::copy_nonoverlapping(ptr, moved, layout.size()) };
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn allocations_are_aligned_distinct_and_the_newest_is_given_back() {
        let arena = Arena::<256>::new();
        unsafe {
            let a = arena.alloc(layout(3, 1));
            let b = arena.alloc(layout(8, 8));
            assert_eq!(b as usize % 8, 0);
            assert!(b as usize >= a as usize + 3);
            a.write_bytes(0xaa, 3);
            b.write_bytes(0xbb, 8);
            // The newest goes back: the next allocation takes its place.
            arena.dealloc(b, layout(8, 8));
            let c = arena.alloc(layout(8, 8));
            assert_eq!(c, b);
            // An older one stays taken.
            arena.dealloc(a, layout(3, 1));
            let d = arena.alloc(layout(1, 1));
            assert!(d as usize >= c as usize + 8);
            assert_eq!(*a, 0xaa);
        }
    }

    #[test]
    fn the_newest_grows_in_place_and_an_older_one_moves_with_its_bytes() {
        let arena = Arena::<256>::new();
        unsafe {
            let a = arena.alloc(layout(4, 1));
            a.copy_from_nonoverlapping(b"abcd".as_ptr(), 4);
            let grown = arena.realloc(a, layout(4, 1), 16);
            assert_eq!(grown, a);
            let b = arena.alloc(layout(4, 1));
            assert!(b as usize >= a as usize + 16);
            let moved = arena.realloc(a, layout(16, 1), 32);
            assert_ne!(moved, a);
            assert_eq!(std::slice::from_raw_parts(moved, 4), b"abcd");
            // A shrink keeps the block.
            assert_eq!(arena.realloc(moved, layout(32, 1), 8), moved);
        }
    }

    #[test]
    fn past_the_arena_the_system_allocator_serves_and_frees() {
        let arena = Arena::<64>::new();
        unsafe {
            let small = arena.alloc(layout(48, 1));
            assert!(arena.offset(small).is_some());
            let big = arena.alloc(layout(100, 8));
            assert!(!big.is_null());
            assert!(arena.offset(big).is_none());
            big.write_bytes(7, 100);
            // Growing the newest arena block past the end moves it out to the system.
            let out = arena.realloc(small, layout(48, 1), 200);
            assert!(arena.offset(out).is_none());
            arena.dealloc(out, layout(200, 1));
            let big = arena.realloc(big, layout(100, 8), 300);
            assert_eq!(*big.add(99), 7);
            arena.dealloc(big, layout(300, 8));
        }
    }
}
