//! Which of a host's runner threads runs calls, and when another joins.
//!
//! A host language with a global lock (Python's GIL) pays for every thread
//! that takes it: a stream of no-op bodies spread over four runner threads
//! is four threads handing one lock round, each woken to find the next call
//! already taken. So the threads of one worker take turns as the one
//! *watcher* (waiting for work with the lock released); the rest sleep as
//! followers. When work comes and nobody is running calls, the watcher runs
//! them — taking call after call while they keep coming ([`Taker`]) — and
//! hands the watch to a follower. When somebody already is, the watcher
//! joins only if nobody finished a call for [`HELP_AFTER`]: then they are
//! stuck in bodies (blocked on I/O, sleeping) and another thread is worth
//! its lock traffic. So fast bodies run on one thread with one lock crossing
//! per busy stretch, and bodies that block still run up to the worker's
//! concurrency at a time.
//!
//! The binding only bridges its runtime: it says how to wait with its lock
//! released, and how to run one call ([`Crew::serve`]).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use super::host::{Call, HostQueue, Taker};

/// How long a watcher lets the threads already running calls keep up
/// before it joins them. 200 µs: far below any body worth a thread, far
/// above the core's turnaround between calls.
pub const HELP_AFTER: Duration = Duration::from_micros(200);

/// How long one wait lasts before a thread looks at the stop flag again.
const SLICE: Duration = Duration::from_millis(100);

/// What a thread does after running one call ([`Crew::serve`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Take the next call.
    Go,
    /// Leave: this thread is one too many (it came back from a call the
    /// core had abandoned, and [`Runners::retire`](super::Runners::retire)
    /// said so).
    Leave,
}

/// One worker's runner threads: a stop flag, and who runs calls.
#[derive(Debug, Default)]
pub struct Crew {
    stop: AtomicBool,
    /// Threads running calls now.
    active: AtomicUsize,
    /// Calls finished, ever: what "making progress" is measured by.
    progress: AtomicU64,
    watching: Mutex<bool>,
    followers: Condvar,
}

impl Crew {
    /// A crew with nobody watching and its stop flag down.
    pub fn new() -> Crew {
        Crew::default()
    }

    /// Sets the stop flag and wakes every thread serving with it.
    pub fn stop_all(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.followers.notify_all();
    }

    /// Whether the stop flag is set.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Threads running calls now.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }

    /// Waits to be the watcher; `false` once stopped.
    fn watch_turn(&self) -> bool {
        let mut w = self.watching.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if self.stopped() {
                return false;
            }
            if !*w {
                *w = true;
                return true;
            }
            w = self
                .followers
                .wait_timeout(w, SLICE)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn end_watch(&self) {
        *self.watching.lock().unwrap_or_else(|e| e.into_inner()) = false;
        self.followers.notify_one();
    }

    /// As the watcher: waits until this thread should run calls (`true`) or
    /// the crew stops or `q` closes (`false`).
    fn watch(&self, q: &HostQueue) -> bool {
        loop {
            if self.stopped() || q.is_closed() {
                return false;
            }
            let _ = q.take_blocking(0, SLICE);
            // Withdrawn sync calls cannot be interrupted; their answers are
            // dropped by `finish`. Drained so the list does not grow.
            let _ = q.cancelled();
            if q.is_empty() {
                continue;
            }
            if self.active() == 0 {
                return true;
            }
            let before = self.progress.load(Ordering::SeqCst);
            std::thread::sleep(HELP_AFTER);
            if !q.is_empty() && self.progress.load(Ordering::SeqCst) == before {
                return true;
            }
        }
    }

    /// Serves `q`'s calls on this thread until the crew stops, `q` closes
    /// or `run` answers [`Next::Leave`]. `detached(f)` runs `f` (a wait)
    /// with the host's lock released; `run` runs one call, holding it.
    pub fn serve(
        &self,
        q: &HostQueue,
        detached: impl Fn(&mut (dyn FnMut() -> bool + Send)) -> bool,
        mut run: impl FnMut(Call) -> Next,
    ) {
        // Whether to spin for the next call, from how near the next has
        // been; the lock is released while it spins.
        let mut taker = Taker::default();
        loop {
            if !detached(&mut || self.watch_turn()) {
                return;
            }
            let go = detached(&mut || self.watch(q));
            self.end_watch();
            if !go {
                return;
            }
            self.active.fetch_add(1, Ordering::SeqCst);
            loop {
                let calls = taker.take_with(q, 1, |spin| detached(&mut || q.spin_for(spin)));
                let Some(c) = calls.into_iter().next() else {
                    break;
                };
                let next = run(c);
                self.progress.fetch_add(1, Ordering::SeqCst);
                if next == Next::Leave {
                    self.active.fetch_sub(1, Ordering::SeqCst);
                    return;
                }
            }
            self.active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    use std::thread;
    use std::time::Instant;

    use serde_json::json;

    use super::*;
    use crate::task::Body;

    /// Calls `b` from a runtime of the test's own, as a run would.
    fn direct(rt: &tokio::runtime::Runtime, b: &Arc<dyn Body>) {
        drop(rt.spawn(b.call(crate::task::host::tests::ctx(), vec![json!(1)])));
    }

    fn until(what: &str, cond: impl Fn() -> bool) {
        let t = Instant::now();
        while !cond() {
            assert!(t.elapsed() < Duration::from_secs(10), "waited for {what}");
            thread::sleep(Duration::from_millis(1));
        }
    }

    /// Four threads serve; `body` runs each call. Answers the crew, the
    /// threads, and the most that ran at once.
    fn crew_of_four(
        q: &Arc<HostQueue>,
        body: impl Fn(&Call) + Send + Sync + 'static,
    ) -> (Arc<Crew>, Vec<thread::JoinHandle<()>>, Arc<AtomicUsize>) {
        let crew = Arc::new(Crew::new());
        let body = Arc::new(body);
        let most = Arc::new(AtomicUsize::new(0));
        let threads = (0..4)
            .map(|_| {
                let (crew, q, body, most) = (crew.clone(), q.clone(), body.clone(), most.clone());
                thread::spawn(move || {
                    crew.serve(
                        &q,
                        |f| f(),
                        |c| {
                            most.fetch_max(crew.active(), Ordering::SeqCst);
                            body(&c);
                            q.finish(c.seq, Ok(json!(2)));
                            Next::Go
                        },
                    )
                })
            })
            .collect();
        (crew, threads, most)
    }

    #[test]
    fn every_call_is_run_and_blocking_ones_get_helpers() {
        // A thousand fast calls are all run (how many threads ran them is
        // a matter of timing: one, where nothing held the first up).
        let q = HostQueue::new();
        let b = q.body("fast");
        let rt = tokio::runtime::Runtime::new().unwrap();
        let done = Arc::new(AtomicUsize::new(0));
        let d2 = done.clone();
        let (crew, threads, _) = crew_of_four(&q, move |_| {
            d2.fetch_add(1, Ordering::SeqCst);
        });
        for _ in 0..1000 {
            direct(&rt, &b);
        }
        until("1000 fast calls run", || {
            done.load(Ordering::SeqCst) == 1000
        });
        crew.stop_all();
        for t in threads {
            t.join().unwrap();
        }

        // Bodies that block for 20 ms make no progress: watchers join them,
        // up to the four threads.
        let q = HostQueue::new();
        let b = q.body("slow");
        let (crew, threads, most) = crew_of_four(&q, |_| thread::sleep(Duration::from_millis(20)));
        for _ in 0..8 {
            direct(&rt, &b);
        }
        until("four at once", || most.load(Ordering::SeqCst) == 4);
        crew.stop_all();
        q.close();
        for t in threads {
            t.join().unwrap();
        }
    }

    /// A thread serving `q` in `crew` that counts each call in `ran` and
    /// answers `next` after it.
    fn serving(
        crew: &Arc<Crew>,
        q: &Arc<HostQueue>,
        ran: &Arc<AtomicUsize>,
        next: Next,
    ) -> thread::JoinHandle<()> {
        let (crew, q, ran) = (crew.clone(), q.clone(), ran.clone());
        thread::spawn(move || {
            crew.serve(
                &q,
                |f| f(),
                |c| {
                    ran.fetch_add(1, Ordering::SeqCst);
                    q.finish(c.seq, Ok(json!(0)));
                    next
                },
            )
        })
    }

    #[test]
    fn a_thread_told_to_leave_leaves_and_the_rest_serve_on() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let q = HostQueue::new();
        let b = q.body("k");
        let crew = Arc::new(Crew::new());
        let ran = Arc::new(AtomicUsize::new(0));
        let leaver = serving(&crew, &q, &ran, Next::Leave);
        direct(&rt, &b);
        leaver.join().unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert_eq!(crew.active(), 0, "a leaver is counted out");
        // Nobody serves now: a call waits; a new thread takes it.
        direct(&rt, &b);
        until("the call queued", || !q.is_empty());
        let other = serving(&crew, &q, &ran, Next::Go);
        until("the second call ran", || ran.load(Ordering::SeqCst) == 2);
        crew.stop_all();
        other.join().unwrap();
    }
}
