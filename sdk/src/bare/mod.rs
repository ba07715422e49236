//! What std and wasi-libc give a policy's component, for a policy crate built without them
//! (`#![no_std]`): an allocator, a panic's message on stderr and its trap, `cabi_realloc`
//! (through which the host passes the call's inputs in) and `memcmp`. The code is here, once;
//! [`no_std_runtime!`](crate::no_std_runtime) puts it in place in the policy crate that asks
//! for it, so that a policy built with std (which has its own panic handler) never gets a
//! second one.

pub mod arena;

#[cfg(target_arch = "wasm32")]
use core::fmt::Write;

/// Supplies, in a `no_std` policy crate's component, what std and wasi-libc would: the
/// allocator ([`arena::Arena`], dlmalloc past it), a panic handler that writes the panic's
/// message to stderr (which the host adds to the trap's message) and then traps, the canonical
/// ABI's `cabi_realloc` over that allocator, and libc's `memcmp`. Natively (the policy's own
/// tests) it expands to nothing: std is there.
///
/// ```ignore
/// #![cfg_attr(target_arch = "wasm32", no_std)]
/// extern crate alloc;
///
/// cubepod_policy_sdk::no_std_runtime!();
/// cubepod_policy_sdk::export_policy!(MyPolicy);
/// ```
///
/// Only for a `no_std` component: with std the panic handler would be defined twice.
#[macro_export]
macro_rules! no_std_runtime {
    () => {
        #[cfg(target_arch = "wasm32")]
        #[global_allocator]
        static __CUBEPOD_ALLOCATOR: $crate::bare::arena::Arena<
            { $crate::bare::arena::ARENA_BYTES },
        > = $crate::bare::arena::Arena::new();

        #[cfg(target_arch = "wasm32")]
        #[panic_handler]
        fn __cubepod_panic(info: &::core::panic::PanicInfo<'_>) -> ! {
            $crate::bare::panic(info)
        }

        /// The canonical ABI's allocator export.
        ///
        /// # Safety
        /// Called by the host only, with the canonical ABI's arguments.
        #[cfg(target_arch = "wasm32")]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn cabi_realloc(
            old_ptr: *mut u8,
            old_len: usize,
            align: usize,
            new_len: usize,
        ) -> *mut u8 {
            // SAFETY: this function's own contract, handed on.
            unsafe { $crate::bare::cabi_realloc(old_ptr, old_len, align, new_len) }
        }

        // Without libc nothing defines `memcmp`, which the compiled code calls (the compiler's
        // builtins give the other memory functions): wasi-libc's archive gives that one member,
        // and with it no WASI import.
        #[cfg(target_arch = "wasm32")]
        #[link(name = "c")]
        unsafe extern "C" {}
    };
}

/// A panic writes its message to stderr, which the host adds to the trap's message, and ends
/// the call with a trap, as std did (`panic = "abort"`). The message is formatted on the stack:
/// the panic may be the allocator's.
#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    let mut message = Truncated::default();
    // A message longer than the buffer is cut; the host keeps a tail of 2 KiB anyway.
    let _ = writeln!(message, "{info}");
    let stderr = wasip2::cli::stderr::get_stderr();
    let _ = stderr.blocking_write_and_flush(message.bytes());
    core::arch::wasm32::unreachable()
}

/// Bytes of a panic's message that reach stderr; the rest is cut.
pub const PANIC_MESSAGE_BYTES: usize = 1024;

/// Text written into a fixed buffer, cut at its end.
#[cfg(any(target_arch = "wasm32", test))]
struct Truncated {
    buffer: [u8; PANIC_MESSAGE_BYTES],
    len: usize,
}

#[cfg(any(target_arch = "wasm32", test))]
impl Default for Truncated {
    fn default() -> Self {
        Self {
            buffer: [0; PANIC_MESSAGE_BYTES],
            len: 0,
        }
    }
}

#[cfg(any(target_arch = "wasm32", test))]
impl Truncated {
    fn bytes(&self) -> &[u8] {
        &self.buffer[..self.len]
    }
}

#[cfg(any(target_arch = "wasm32", test))]
impl core::fmt::Write for Truncated {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let room = self.buffer.len() - self.len;
        let taken = s.len().min(room);
        self.buffer[self.len..self.len + taken].copy_from_slice(&s.as_bytes()[..taken]);
        self.len += taken;
        Ok(())
    }
}

/// The canonical ABI's allocator: the host allocates here the strings and lists it passes in.
/// wasi-libc exported one over its own `malloc`; this one allocates from the component's
/// global allocator, as wit-bindgen's does for targets without libc.
///
/// # Safety
/// Called by the host only, with the canonical ABI's arguments: a block this function
/// returned (or null with `old_len` 0), its length and alignment, and the length wanted.
#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub unsafe fn cabi_realloc(
    old_ptr: *mut u8,
    old_len: usize,
    align: usize,
    new_len: usize,
) -> *mut u8 {
    use alloc::alloc::{Layout, alloc, realloc};

    if new_len == 0 {
        // A zero-length block needs no memory, only an aligned address.
        return align as *mut u8;
    }
    // A size and alignment the allocator cannot take trap, as an allocation failure does.
    let (Ok(old), Ok(_)) = (
        Layout::from_size_align(old_len, align),
        Layout::from_size_align(new_len, align),
    ) else {
        core::arch::wasm32::unreachable()
    };
    let ptr = if old_len == 0 {
        // SAFETY: a non-zero size (checked above) and a valid layout.
        unsafe { alloc(Layout::from_size_align_unchecked(new_len, align)) }
    } else {
        // SAFETY: the host hands back a block this function allocated, `old_len` bytes at this
        // alignment; `new_len` is non-zero and makes a valid layout at it.
        unsafe { realloc(old_ptr, old, new_len) }
    };
    if ptr.is_null() {
        // Out of memory: the host's limit refused the growth; the call traps.
        core::arch::wasm32::unreachable()
    }
    ptr
}

#[cfg(test)]
mod tests {
    use super::Truncated;
    use core::fmt::Write;

    #[test]
    fn a_message_fits_whole_and_a_long_one_is_cut_at_the_buffer_without_failing() {
        let mut short = Truncated::default();
        // Written in pieces, as a panic's `Display` writes it.
        let what = "index out of bounds";
        writeln!(short, "panicked at sdk/src/pool.rs:12:5: {what}").unwrap();
        assert_eq!(
            short.bytes(),
            b"panicked at sdk/src/pool.rs:12:5: index out of bounds\n"
        );
        let mut long = Truncated::default();
        let line = "x".repeat(700);
        writeln!(long, "{line}").unwrap();
        writeln!(long, "{line}").unwrap();
        assert_eq!(long.bytes().len(), super::PANIC_MESSAGE_BYTES);
        assert!(long.bytes().iter().take(700).all(|&b| b == b'x'));
    }
}
