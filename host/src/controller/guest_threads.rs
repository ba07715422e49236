//! The threads policies run on. A guest call blocks its thread (its `kube-client` calls wait
//! on the cluster), so it cannot run on the async runtime's workers; these threads, unlike
//! tokio's blocking pool, live as long as the process, and each waits on the cluster in a
//! runtime of its own (`kube::local`), so that a policy's requests cost no hand-off between
//! threads. A thread is added whenever every thread is busy: there are as many as guest calls
//! ever ran at once (the workers, `--concurrency`, bound that).

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

use tokio::sync::oneshot;

type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    /// Threads waiting for a job.
    idle: usize,
    /// Threads started.
    threads: usize,
}

#[derive(Default)]
struct Threads {
    state: Mutex<State>,
    wake: Condvar,
}

fn threads() -> &'static Threads {
    static THREADS: OnceLock<Threads> = OnceLock::new();
    THREADS.get_or_init(Threads::default)
}

impl Threads {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every change under the lock is one push, pop or count: a panic leaves it whole.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn work(&'static self) {
        crate::kube::local::allow_on_this_thread();
        let mut state = self.lock();
        loop {
            if let Some(job) = state.jobs.pop_front() {
                drop(state);
                job();
                state = self.lock();
                continue;
            }
            state.idle += 1;
            state = self.wake.wait(state).unwrap_or_else(|p| p.into_inner());
            state.idle -= 1;
        }
    }
}

/// Why a guest call has no result.
#[derive(Debug, thiserror::Error)]
pub enum GuestThreadError {
    #[error("the guest call's thread could not be started: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("the guest call panicked")]
    Panicked,
}

/// Runs `call` on a guest thread, with `handle`'s runtime as its current one (as on tokio's
/// blocking pool), and waits for its result.
pub async fn run<T, F>(handle: tokio::runtime::Handle, call: F) -> Result<T, GuestThreadError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (send, result) = oneshot::channel();
    let job: Job = Box::new(move || {
        let _runtime = handle.enter();
        // A panic unwinds out of the job only: the thread goes on, the caller hears of it.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(call));
        let _ = send.send(outcome);
    });
    let pool = threads();
    let spawn = {
        let mut state = pool.lock();
        state.jobs.push_back(job);
        let spawn = state.jobs.len() > state.idle;
        if spawn {
            state.threads += 1;
        }
        spawn
    };
    if spawn {
        let started = std::thread::Builder::new()
            .name("cubepod-guest".into())
            .spawn(|| pool.work());
        if let Err(error) = started {
            let mut state = pool.lock();
            state.threads -= 1;
            if state.threads == 0 {
                // No thread will ever take it.
                state.jobs.clear();
                return Err(GuestThreadError::Spawn(error));
            }
            // A busy thread takes it when done.
            tracing::warn!(%error, "no new guest thread; the call waits for a busy one");
        }
    } else {
        pool.wake.notify_one();
    }
    match result.await {
        Ok(Ok(value)) => Ok(value),
        _ => Err(GuestThreadError::Panicked),
    }
}
