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

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Once, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

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

/// What a caught Rust panic said (its `&str` or `String` payload), for the
/// error a binding raises in its place.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// The text of the error a binding raises for a caught panic: a bug, never
/// an answer.
pub fn panicked(payload: &(dyn std::any::Any + Send)) -> String {
    format!(
        "headway panicked (a bug, please report it): {}",
        panic_message(payload)
    )
}

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
            .on_thread_park(before_park)
            .on_thread_unpark(after_unpark)
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

/// Waits up to `slice` for `fut`, on a calling thread that blocks anyway
/// and has let its runtime go (Python: the GIL is released around this):
/// the future is polled here, inside the shared runtime's context, and the
/// thread sleeps between polls until a wake-up or the slice's end (`None`:
/// not ready yet; the caller checks its signals and comes back).
///
/// Why not the runtime's `block_on`: it polls the same way, but without
/// this thread's own Redis link (`broker/link/here.rs`), so a round trip
/// the future makes after its first poll went through a runtime thread,
/// which then woke this one. Waiting for a result makes one: the look
/// (GET) made again once the subscribe took. Made here, that round trip
/// wakes one thread instead of three: `delay(i).get()` with the worker
/// in the same process, six back-to-back pairs of 2 000 round trips, p50
/// median 0.548 → 0.491 ms, p90 0.68 → 0.62 ms. On a thread inside a
/// runtime the round trips take the shared link.
pub fn wait_here<F: Future + ?Sized>(
    rt: &Runtime,
    mut fut: Pin<&mut F>,
    slice: Duration,
) -> Option<F::Output> {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    fn direct(f: &mut dyn FnMut()) {
        f()
    }
    let here = tokio::runtime::Handle::try_current().is_err();
    let waker = Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let until = Instant::now() + slice;
    let _entered = rt.enter();
    loop {
        let polled = if here {
            crate::broker::link::here(direct, || fut.as_mut().poll(&mut cx))
        } else {
            fut.as_mut().poll(&mut cx)
        };
        if let Poll::Ready(v) = polled {
            return Some(v);
        }
        let now = Instant::now();
        if now >= until {
            return None;
        }
        std::thread::park_timeout(until - now);
    }
}

/// Whether a runtime thread that ran out of work should look for more a
/// little longer before it sleeps, learned from how soon work came back
/// after its recent sleeps (sans-I/O: the thread measures, this decides).
///
/// Why: most of what wakes the runtime's thread under load comes from
/// another thread — a Python runner or the JS event loop answering a call,
/// a broker's I/O thread — microseconds after it went to sleep. A sleep
/// and the wake-up that ends it cost both threads a context switch (the
/// waker writes the runtime's eventfd, the sleeper comes back through
/// epoll): on the 2-core VMs the benchmarks ran on, the scheduler's
/// switching was the largest item in the runtime thread's profile (a
/// third of its samples). While the thread is still looking, the same
/// wake-up is a flag set and no system call. A Python worker draining
/// 100 000 no-op runs from Redis (back to back, four runs each): its
/// runtime thread went to sleep 0.65-0.74 times per task without the look
/// and 0.04-0.06 with it; worker CPU per task 23.8-26.0 → 20.6-23.9 µs,
/// Redis's 15.3-16.3 → 12.7-14.3 µs (rounds carry more), the drain
/// 38.5-40.3k → 39.6-44.7k/s. A Node worker (three each): 30-33k →
/// 32-35k/s, worker CPU 29-31 → 27-29 µs. The round trip's p50 did not
/// move (0.48-0.54 ms both), nor did an idle worker's CPU (21-23 ms in
/// 5 s). An idle worker's thread would only burn the look each time, so
/// the thread looks only while most recent sleeps ended within
/// the look ([`ParkSpin::saw`]).
///
/// What a look notices is work handed over from outside the runtime (its
/// global queue); I/O that becomes ready meanwhile waits for the look to
/// end (at most [`ParkSpin::LOOK`]). So a thread looks only while a call
/// is out to a host (a runner thread or the event loop will answer it);
/// while none is, what wakes it next is I/O, and it sleeps at once (in
/// two back-to-back pairs, looking whatever was out moved the round trip's
/// p50 from 0.50-0.51 to 0.52-0.53 ms; with this rule three pairs were
/// inside the noise, 0.51-0.61 ms either way, and the drain kept its 0.04
/// sleeps per task).
#[derive(Debug, Clone, Copy)]
pub struct ParkSpin {
    /// How many of the recent sleeps ended within the look, in 1/256ths
    /// (a moving average: each new sleep weighs an eighth).
    hits: u32,
}

impl ParkSpin {
    /// How long a thread looks before it sleeps.
    pub const LOOK: Duration = Duration::from_micros(15);

    /// A thread that has seen nothing yet: it looks.
    pub const fn new() -> ParkSpin {
        ParkSpin { hits: 256 }
    }

    /// How long to look before sleeping (zero: sleep at once): the look
    /// while at least half the recent sleeps ended within it.
    pub fn look(&self) -> Duration {
        if self.hits >= 128 {
            Self::LOOK
        } else {
            Duration::ZERO
        }
    }

    /// The thread ran out of work `gap` before it had work again (found by
    /// looking, or by sleeping and being woken).
    pub fn saw(&mut self, gap: Duration) {
        let hit = if gap <= Self::LOOK { 256 } else { 0 };
        self.hits = self.hits - self.hits / 8 + hit / 8;
    }
}

impl Default for ParkSpin {
    fn default() -> ParkSpin {
        ParkSpin::new()
    }
}

thread_local! {
    /// When a runtime thread last ran out of work, and its rule.
    static PARKING: Cell<(Option<Instant>, ParkSpin)> = const { Cell::new((None, ParkSpin::new())) };
}

/// How many looks began (tests check that the look path runs).
#[cfg(test)]
static LOOKS: AtomicU64 = AtomicU64::new(0);

/// The runtime's `on_thread_park`: looks for work handed over from outside
/// for as long as the thread's [`ParkSpin`] says.
fn before_park() {
    let now = Instant::now();
    let (_, rule) = PARKING.get();
    PARKING.set((Some(now), rule));
    let look = rule.look();
    if look.is_zero() || crate::task::host::calls_out() == 0 {
        return;
    }
    #[cfg(test)]
    LOOKS.fetch_add(1, Ordering::Relaxed);
    let Ok(h) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let m = h.metrics();
    let until = now + look;
    // Yield at each look: on a busy machine the thread that will hand the
    // work over may be waiting for this core.
    while m.global_queue_depth() == 0 && Instant::now() < until {
        std::thread::yield_now();
    }
}

/// The runtime's `on_thread_unpark`: records how soon work came back.
fn after_unpark() {
    if let (Some(t), mut rule) = PARKING.get() {
        rule.saw(t.elapsed());
        PARKING.set((None, rule));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_thread_looks_before_it_sleeps() {
        assert_eq!(ParkSpin::new().look(), ParkSpin::LOOK);
    }

    #[test]
    fn long_sleeps_stop_the_look_and_short_ones_bring_it_back() {
        let mut p = ParkSpin::new();
        let long = ParkSpin::LOOK * 10;
        let short = ParkSpin::LOOK / 3;
        // Six long sleeps in a row: (7/8)^6 of the hits is below half.
        for _ in 0..5 {
            p.saw(long);
            assert_eq!(p.look(), ParkSpin::LOOK, "a few long sleeps are tolerated");
        }
        p.saw(long);
        assert_eq!(p.look(), Duration::ZERO);
        // Short sleeps (work came back soon, woken or found) bring it back.
        let mut n = 0;
        while p.look().is_zero() {
            p.saw(short);
            n += 1;
            assert!(n < 20, "never looked again");
        }
    }

    #[test]
    fn a_sleep_exactly_the_look_long_counts_as_work_found() {
        let mut p = ParkSpin { hits: 128 };
        p.saw(ParkSpin::LOOK);
        assert_eq!(p.look(), ParkSpin::LOOK);
        p.saw(ParkSpin::LOOK + Duration::from_nanos(1));
        assert_eq!(p.look(), Duration::ZERO);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn work_handed_over_from_another_thread_while_looking_is_run() {
        // The shared runtime, woken from a plain thread over and over: each
        // hand-over lands while its thread looks or sleeps, and none is
        // lost (a lost one hangs this test). A call held out to a host
        // opens the look's gate for the whole test.
        let q = crate::task::host::HostQueue::new();
        let ctx: crate::task::Context = serde_json::from_value(serde_json::json!({
            "id": "i", "name": "t", "queue": "q", "retries": 0, "attempt": 1,
            "last": true, "now": 0, "kwargs": {}, "root_id": null, "parent_id": null,
            "soft_time_limit": null, "time_limit": null, "worker": ""
        }))
        .expect("a context");
        // Queued as the call is made; out until the future is dropped.
        let out = q.body("t").call(ctx, vec![]);
        assert!(crate::task::host::calls_out() > 0, "a call is out");
        let looks = LOOKS.load(Ordering::Relaxed);
        let rt = runtime().expect("runtime");
        for i in 0..200u32 {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let got = rt.spawn(async move { rx.await.expect("sent") });
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_micros(u64::from(i % 40)));
                tx.send(i).expect("receiver alive");
            });
            assert_eq!(got.await.expect("joined"), i);
        }
        assert!(
            LOOKS.load(Ordering::Relaxed) > looks,
            "the runtime's thread looked while the call was out"
        );
        drop(out);
    }
}
