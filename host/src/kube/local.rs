//! Waiting on the cluster from a policy's thread without two thread hand-offs per request.
//!
//! A policy's `kube-client` call is synchronous: the thread running the guest waits on the
//! request. With the controller runtime's `Handle::block_on` the request is polled here but
//! its I/O is the runtime's (the connection's task and the reactor live on its workers), so
//! every request woke a worker to send it and this thread again for the answer: with four
//! requests per new sandbox, most of the controller's scheduler time. A guest thread
//! ([`crate::controller::guest_threads`]) instead has a single-threaded runtime of its own,
//! and a cluster that says it can ([`crate::kube::Cluster::local_io`]: the REST client, which
//! then keeps connections per such runtime) is waited on in it: the request is written, the
//! socket waited on and the answer read all on this thread.

use std::cell::{Cell, OnceCell};
use std::future::Future;

use tokio::runtime::{Handle, Runtime};

thread_local! {
    /// Whether this thread may run a runtime of its own (a guest thread's).
    static ALLOWED: Cell<bool> = const { Cell::new(false) };
    /// That runtime, made on first use; `None` if it could not be made.
    static RUNTIME: OnceCell<Option<Runtime>> = const { OnceCell::new() };
    /// Whether this thread is inside [`block_on`]'s own runtime now.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Lets this thread wait on clusters in a runtime of its own: only for threads outside any
/// runtime that live as long as the process (a runtime dropped in a thread's exit could not
/// shut down cleanly).
pub fn allow_on_this_thread() {
    ALLOWED.with(|allowed| allowed.set(true));
}

/// Whether the code running now is inside a guest thread's own runtime: a client must then
/// use connections made on it (one made on another runtime would be driven by that one).
pub fn inside() -> bool {
    INSIDE.with(Cell::get)
}

/// Runs `future` to its end from a thread outside the runtime: in this thread's own runtime
/// when `local_io` (the cluster can) and this thread has one, otherwise on `handle`.
pub fn block_on<F: Future>(handle: &Handle, local_io: bool, future: F) -> F::Output {
    let own = local_io
        && ALLOWED.with(Cell::get)
        && RUNTIME.with(|runtime| runtime.get_or_init(own_runtime).is_some());
    if !own {
        return handle.block_on(future);
    }
    RUNTIME.with(|runtime| match runtime.get() {
        Some(Some(runtime)) => {
            let _inside = Inside::enter();
            runtime.block_on(future)
        }
        _ => handle.block_on(future),
    })
}

fn own_runtime() -> Option<Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| {
            tracing::warn!(%error, "a guest thread has no runtime of its own; it waits on the shared one");
        })
        .ok()
}

/// Sets [`INSIDE`] for as long as it lives, panics included.
struct Inside;

impl Inside {
    fn enter() -> Self {
        INSIDE.with(|inside| inside.set(true));
        Inside
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        INSIDE.with(|inside| inside.set(false));
    }
}
