//! A Redis round trip made on the calling thread, for a caller that blocks
//! anyway (a Python `delay()`, `SharedBucket.take()`, `handle.get()`).
//!
//! Why: a blocking call that goes through the shared runtime crosses
//! threads three times — the caller hands the command to the multiplexed
//! connection's task on a runtime thread (a wake-up), the reply wakes that
//! thread (another), and it wakes the caller (a third). Each costs tens of
//! µs on a 2-vCPU VM when the other side was idle; redis-py and ioredis pay
//! one (the reply waking the thread that waits on the socket). Here the
//! caller's thread drives a connection of its own on a current-thread
//! runtime of its own, so its round trip wakes one thread: on this machine
//! a Python `SharedBucket.take()` went from 51 µs to the figure in
//! `bench/limits/results.md`, and a one-thread `delay()` loop likewise
//! (`bench/tasks`).
//!
//! When: only during a binding's first, inline poll of a blocking call
//! ([`crate::runtime::poll_first`] with `here = true`), on a thread that is
//! in no runtime, for a link that is not a Cluster's (a Cluster client
//! keeps background work a runtime that only runs during calls would
//! starve). Anything else — the Node event loop, which must never block,
//! a runtime thread, a second attempt — takes the shared link as before.
//!
//! How it fails: one attempt. A connection error, or a local link still
//! waiting out its backoff, hands the operation to the shared link's
//! patient path, which retries it (a retried write may have run once
//! already: the same as a retry on the shared link). Any other error (a
//! script error, a refusal by the server) is the answer, as on the shared
//! link.
//!
//! Crowds: while [`CROWD`] threads are already in a round trip of their
//! own to the same place, a call takes the shared link instead, where
//! concurrent calls share one pipeline (one socket read and one write for
//! Redis however many calls it carries). Before the look below, sixteen
//! Python threads each on a connection of their own sent 17.8-19.4k/s on
//! the 2-core machine where the shared link alone sent 20.8-22.4k/s, and
//! a crowd of two kept both (20.1-22.0k/s for sixteen, 12.3-13.4k/s for
//! one thread alone against 8.3-8.8k/s on the shared link). With the look,
//! five runs of sixteen threads each way: a crowd of two 35-51k/s (median
//! 49.5k), of four 46-61k/s (median 51.9k), of six 41-44k/s; four threads
//! 30-37k against 31-39k/s. Four it is: a little ahead, inside the noise.
//!
//! Spinning: a thread that sleeps on its socket is woken by the reply,
//! and on the 2-vCPU VMs the benchmarks run on that wake-up is most of a
//! round trip. So the thread looks for its reply for up to [`SPIN`] (the
//! runtime's I/O checked between looks by an `epoll_wait` that does not
//! block, the GIL released throughout) before it sleeps, and gives its
//! core up at each look (`sched_yield`): the reply's other half — Redis,
//! or a worker in the same process — may be waiting for that core. A
//! one-thread `delay()` loop, per call (p50): 99-122 µs sleeping, 42-72 µs
//! looking; sixteen threads (a crowd of two here, the rest on the shared link) sent
//! 26-37k/s and then 48k/s in two back-to-back pairs. Looking without
//! giving the core up cost the send → result round trip with the worker in
//! the same process (p50 0.57-0.63 → 0.69-0.73 ms); with the yield it is
//! unchanged (0.62-0.81 against 0.63-0.73 ms, five pairs). A bare socket
//! client shows the same gap (a PING loop: 10-15k/s blocking, 30-42k/s
//! spinning on a non-blocking socket). The look ends after [`SPIN`], about
//! twice what the wake-up it saves costs, so a slow command does not keep
//! a core busy.
//!
//! Bounds: at most [`MAX_LOCAL`] threads keep a connection of their own
//! per shared link; past that, calls take the shared link (a server with a
//! thousand request threads would otherwise hold a thousand connections).
//! A thread's connections close when it ends. After `fork()` the child
//! leaves its parent's connections and runtime alone (their sockets and
//! epoll instance are the parent's) and makes new ones.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::task::Poll;
use std::time::{Duration, Instant};

use redis::RedisError;
use tokio::runtime::{Builder, Runtime};

use super::{Conn, Fail, Link, conn_error, moved};
use crate::broker::redis::Topology;
use crate::task::state::Refused;

/// How many threads may hold a connection of their own to one Redis
/// through one shared link.
pub const MAX_LOCAL: usize = 64;

/// How many threads may be in a round trip of their own to one place at
/// once before the next call takes the shared link.
pub const CROWD: usize = 4;

/// How long a round trip made here looks for its reply before the thread
/// sleeps on its socket (see the module's doc, "Spinning").
pub const SPIN: Duration = Duration::from_micros(200);

/// `fut`, polled again and again (the runtime's I/O looked at between
/// polls, without sleeping) for up to `budget`, then waited for.
async fn spinning<F: Future>(fut: F, budget: Duration) -> F::Output {
    let mut fut = pin!(fut);
    let until = Instant::now() + budget;
    loop {
        if let Poll::Ready(v) = poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await {
            return v;
        }
        if Instant::now() >= until {
            return fut.await;
        }
        // A thread the reply would wake may be waiting for this core.
        std::thread::yield_now();
        tokio::task::yield_now().await;
    }
}

/// How a binding lets its runtime go while this thread waits on Redis
/// (Python: the GIL, so other threads run meanwhile): it calls the
/// function it is given and comes back.
pub type Release = fn(&mut dyn FnMut());

thread_local! {
    /// Inside a binding's first poll of a blocking call on a thread in no
    /// runtime: how to wait.
    static HERE: Cell<Option<Release>> = const { Cell::new(None) };
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}

/// This thread's runtime and its links, made in fork generation `born`.
struct Local {
    born: u64,
    rt: Runtime,
    /// (the shared link's count of local links — alive while it is —,
    /// this thread's link to the same place).
    links: Vec<(Weak<AtomicUsize>, Arc<Link>)>,
}

impl Drop for Local {
    fn drop(&mut self) {
        for (count, _) in &self.links {
            if let Some(c) = count.upgrade() {
                c.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

/// Runs `f` with the thread marked as blocking in no runtime, so that the
/// links it reaches may answer [`attempt`]s on this thread, waiting inside
/// `release`.
pub(crate) fn mark<R>(release: Release, f: impl FnOnce() -> R) -> R {
    struct Reset(Option<Release>);
    impl Drop for Reset {
        fn drop(&mut self) {
            HERE.set(self.0);
        }
    }
    let _reset = Reset(HERE.replace(Some(release)));
    f()
}

/// What [`attempt`] came to.
pub(crate) enum Here<T> {
    /// Not tried here: take the shared link.
    Elsewhere,
    /// Answered here.
    Done(Result<T, Refused>),
}

/// `op` once on this thread's own link to where `shared` goes, when this
/// thread may block here (see the module's doc).
pub(crate) fn attempt<T, F, Fut>(shared: &Link, op: &mut F) -> Here<T>
where
    F: FnMut(Conn) -> Fut,
    Fut: Future<Output = Result<T, RedisError>>,
{
    let Some(release) = HERE.get() else {
        return Here::Elsewhere;
    };
    if matches!(shared.setup.url.topology, Topology::Cluster { .. }) {
        return Here::Elsewhere;
    }
    struct Leave<'a>(&'a AtomicUsize);
    impl Drop for Leave<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::Relaxed);
        }
    }
    if shared.here_now.fetch_add(1, Ordering::Relaxed) >= CROWD {
        shared.here_now.fetch_sub(1, Ordering::Relaxed);
        return Here::Elsewhere;
    }
    let _leave = Leave(&shared.here_now);
    // Nothing below may come back here (a nested attempt would borrow
    // LOCAL twice).
    HERE.set(None);
    let out = LOCAL.with(|cell| {
        let Ok(mut slot) = cell.try_borrow_mut() else {
            return Here::Elsewhere;
        };
        let born = crate::runtime::fork_generation();
        if slot.as_ref().is_some_and(|l| l.born != born) {
            // A forked child: the parent's sockets and epoll are not ours
            // to close or deregister.
            if let Some(old) = slot.take() {
                std::mem::forget(old);
            }
        }
        if slot.is_none() {
            let Ok(rt) = Builder::new_current_thread().enable_all().build() else {
                return Here::Elsewhere;
            };
            *slot = Some(Local {
                born,
                rt,
                links: Vec::new(),
            });
        }
        let local = slot.as_mut().expect("made above");
        let Some(link) = local.link_for(shared) else {
            return Here::Elsewhere;
        };
        let rt = &local.rt;
        let mut out = Here::Elsewhere;
        release(&mut || {
            out = rt.block_on(spinning(
                async {
                    match link.get().await {
                        Ok((epoch, c)) => match op(c).await {
                            Ok(v) => Here::Done(Ok(v)),
                            Err(e) if conn_error(&e) || moved(&e) => {
                                link.broken(epoch, &e);
                                Here::Elsewhere
                            }
                            Err(e) => Here::Done(Err(shared.refused(&e))),
                        },
                        Err(Fail::Down(..)) | Err(Fail::Redis(..)) => Here::Elsewhere,
                    }
                },
                SPIN,
            ));
        });
        out
    });
    HERE.set(Some(release));
    out
}

impl Local {
    /// This thread's link to where `shared` goes: found, made (within
    /// [`MAX_LOCAL`]), or none.
    fn link_for(&mut self, shared: &Link) -> Option<Arc<Link>> {
        if let Some((_, l)) = self
            .links
            .iter()
            .find(|(c, _)| std::ptr::eq(c.as_ptr(), Arc::as_ptr(&shared.locals)))
        {
            return Some(l.clone());
        }
        // Links whose shared link is gone are let go when a new one is
        // made, not looked over on every call.
        self.links.retain(|(c, _)| c.strong_count() > 0);
        let held = shared.locals.fetch_add(1, Ordering::Relaxed);
        if held >= MAX_LOCAL {
            shared.locals.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        // Quiet: the shared link logs an outage when the call falls back
        // to it; a thread's own link would say it again.
        let l = Arc::new(Link::quiet(shared.setup.clone()));
        self.links.push((Arc::downgrade(&shared.locals), l.clone()));
        Some(l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use tokio::io::AsyncReadExt;

    /// This thread's voluntary context switches so far (each time it slept).
    fn slept() -> u64 {
        let status = std::fs::read_to_string("/proc/thread-self/status").expect("linux");
        status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("a count")
    }

    /// Fifty round trips over a socket another thread answers `after` it
    /// is asked: how many this thread took without sleeping, when it looks
    /// for the reply for `budget`.
    fn unslept(after: Duration, budget: Duration) -> usize {
        let rt = Builder::new_current_thread().enable_all().build().unwrap();
        let (mine, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        mine.set_nonblocking(true).unwrap();
        let (ask, asked) = std::sync::mpsc::channel::<()>();
        let answerer = std::thread::spawn(move || {
            let mut theirs = theirs;
            while asked.recv().is_ok() {
                let at = Instant::now() + after;
                while Instant::now() < at {
                    std::hint::spin_loop();
                }
                theirs.write_all(b"x").unwrap();
            }
        });
        let mut mine = rt.block_on(async { tokio::net::UnixStream::from_std(mine).unwrap() });
        let mut quick = 0;
        for _ in 0..50 {
            let before = slept();
            ask.send(()).unwrap();
            let mut b = [0u8; 1];
            let n = rt.block_on(spinning(mine.read(&mut b), budget)).unwrap();
            assert_eq!((n, b[0]), (1, b'x'));
            if slept() == before {
                quick += 1;
            }
        }
        drop(ask);
        answerer.join().unwrap();
        quick
    }

    #[test]
    fn a_reply_that_comes_within_the_look_is_taken_without_sleeping() {
        let quick = unslept(Duration::from_micros(30), Duration::from_millis(20));
        assert!(quick >= 40, "{quick} of 50 without sleeping");
        // The control: a thread that does not look sleeps for a reply
        // that is not there yet, and the count sees it (all but one or
        // two of fifty: a wake-up can be pending when the thread parks).
        let control = unslept(Duration::from_millis(2), Duration::ZERO);
        assert!(control <= 10, "{control} of 50 without sleeping");
    }

    #[test]
    fn a_reply_later_than_the_look_is_waited_for() {
        let rt = Builder::new_current_thread().enable_all().build().unwrap();
        let t = Instant::now();
        let v = rt.block_on(spinning(
            async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                7
            },
            Duration::from_micros(200),
        ));
        assert_eq!(v, 7);
        assert!(t.elapsed() >= Duration::from_millis(20));
    }
}
