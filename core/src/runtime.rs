//! The one process-wide tokio runtime the bindings share.
//!
//! Two runtimes in one process (tokenizers ends up with two) double the
//! threads and make a future built on one stall on the other. The Python
//! binding hands this one to pyo3-async-runtimes and the Node binding runs its
//! async work here, so a worker, a Redis connection and an awaited handle all
//! live on the same threads.
//!
//! tokio's threads do not survive `fork()`. The fork generation is recorded
//! when the runtime is built, and [`runtime`] refuses in a forked child
//! rather than hang: use the `spawn` or `forkserver` start methods.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Once, OnceLock};
use std::task::{Context, Poll, Waker};

use tokio::runtime::{Builder, Runtime};

pub use crate::broker::link::Release;

static RUNTIME: OnceLock<(Runtime, u64)> = OnceLock::new();

static FORKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn forked_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// A number that changes in a child each time the process forks: what was
/// made under another number belongs to an ancestor. Cheaper than asking
/// the pid on every call (`getpid` is a system call on today's glibc).
pub(crate) fn fork_generation() -> u64 {
    static WATCH: Once = Once::new();
    WATCH.call_once(|| {
        // SAFETY: registers a handler that only touches an atomic.
        unsafe {
            libc::pthread_atfork(None, None, Some(forked_child));
        }
    });
    FORKS.load(Ordering::Relaxed)
}

/// Why the runtime cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forked;

impl std::fmt::Display for Forked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "headway's runtime was started in a parent process and does not survive fork(); \
             use the 'spawn' or 'forkserver' start method",
        )
    }
}

impl std::error::Error for Forked {}

/// The shared runtime: multi-threaded, one worker thread per core but one
/// (at least one) unless `TOKIO_WORKER_THREADS` (tokio's own variable) says
/// how many, timers and I/O enabled.
///
/// Why not tokio's one per core: every body runs on the host language's own
/// thread (the GIL holder, the JS event loop), which needs a core of its
/// own, and the runtime's work per message is I/O and bookkeeping. Each
/// extra worker thread adds hand-offs between threads: on 2 cores a Python
/// worker draining Redis spent 29 µs of CPU per task with one runtime thread
/// and 37–39 µs with two, and drained 31 k/s against 26–28 k/s
/// (`bench/tasks`). Nothing in headway blocks a runtime thread, so one is
/// enough to make progress.
pub fn runtime() -> Result<&'static Runtime, Forked> {
    let (rt, born) = RUNTIME.get_or_init(|| {
        let threads = std::env::var("TOKIO_WORKER_THREADS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|n| *n > 0)
            .unwrap_or_else(|| {
                std::thread::available_parallelism()
                    .map_or(2, |n| n.get())
                    .saturating_sub(1)
                    .max(1)
            });
        let rt = Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("headway")
            .enable_all()
            .build()
            .expect("the tokio runtime starts");
        (rt, fork_generation())
    });
    if *born != fork_generation() {
        return Err(Forked);
    }
    Ok(rt)
}

/// A binding's first poll of a call's future, inline on the calling thread
/// inside the shared runtime's context: a call that needs no I/O (or only
/// what is ready) answers without a hop to a runtime thread.
///
/// With `release` (a caller that blocks anyway, e.g. a Python method) and
/// a thread in no runtime, the Redis round trips this poll reaches are made
/// on the calling thread over a connection of its own, waiting inside
/// `release` (which lets the GIL go): one thread woken per round trip
/// instead of three (`broker/link/here.rs`). Without it (the Node event
/// loop, which must never block) the poll does no I/O of its own.
pub fn poll_first<F: Future + ?Sized>(
    rt: &Runtime,
    fut: Pin<&mut F>,
    release: Option<Release>,
) -> Poll<F::Output> {
    let here = release.filter(|_| tokio::runtime::Handle::try_current().is_err());
    let _entered = rt.enter();
    let mut cx = Context::from_waker(Waker::noop());
    match here {
        Some(r) => crate::broker::link::here(r, || fut.poll(&mut cx)),
        None => fut.poll(&mut cx),
    }
}
