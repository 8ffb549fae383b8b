//! The host threads that run sync bodies, and whether a worker on them is
//! healthy.
//!
//! A sync body (Python's) cannot be interrupted. When the core stops waiting
//! for one — its timeout passed, a terminate, a stop — the body keeps its
//! runner thread until it returns, perhaps never. Left alone, every such
//! body takes a runner for good, and after `concurrency` of them the worker
//! claims messages that nothing runs. So each [`HostQueue`] keeps a
//! [`Runners`] ledger, and the decisions are made here, once, for every
//! binding:
//!
//! - a thread stuck in an *abandoned* call (one the core stopped waiting
//!   for) is **replaced**: [`Runners::hire`] tells the host how many threads
//!   to start, so the queue keeps its staffed number free;
//! - **bounded**: at most [`ABANDONED_PER_RUNNER`] abandoned threads per
//!   staffed runner (a worker of concurrency 4 keeps at most 4 more threads,
//!   each stuck in a body), so a body that hangs every time cannot grow the
//!   process without end;
//! - with that cap reached and every thread stuck, the queue is
//!   **unhealthy**: a worker on it stops claiming (a message it claimed could
//!   only wait) and says so — [`crate::task::Worker::health`], the admin's
//!   `/health` (503) and its overview's `workers`. When a stuck body returns,
//!   its thread serves again (or retires, [`Runners::retire`], when it is
//!   one too many) and the worker claims again.
//!
//! The host only bridges threads: it staffs its runners, starts what `hire`
//! answers, and asks `retire` when a thread is back from an abandoned call.
//! A queue nobody staffs (Node's event loop, an async pump) is always
//! healthy.
//!
//! [`HostQueue`]: super::host::HostQueue

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::watch;

use super::app::{App, AppInner};

/// How many abandoned threads (each stuck in a body past its timeout) a
/// queue may keep per staffed runner: one. Enough that a few hung calls do
/// not cost a worker any of its concurrency; a bound on the threads a body
/// that always hangs can pile up.
pub const ABANDONED_PER_RUNNER: usize = 1;

/// The counts the decisions are made from.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Ledger {
    /// Runners the hosts staffed (a worker's concurrency).
    staffed: usize,
    /// Threads serving now, stuck or not (staffed and hired).
    live: usize,
    /// Calls the core stopped waiting for that a thread still runs.
    abandoned: usize,
}

impl Ledger {
    fn cap(&self) -> usize {
        self.staffed * ABANDONED_PER_RUNNER
    }
    /// How many threads there should be: the staffed ones, plus one per
    /// abandoned call up to the cap.
    fn target(&self) -> usize {
        if self.staffed == 0 {
            return 0;
        }
        self.staffed + self.abandoned.min(self.cap())
    }
    fn wanted(&self) -> usize {
        self.target().saturating_sub(self.live)
    }
    fn surplus(&self) -> bool {
        self.live > self.target()
    }
    /// Healthy unless the cap is reached and every thread it allows is
    /// stuck.
    fn healthy(&self) -> bool {
        self.staffed == 0 || self.abandoned < self.staffed + self.cap()
    }
}

/// What [`Runners::health`] answers: the threads, how many are stuck, the
/// cap on those, and the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunnerHealth {
    /// Whether a call can be run: false when every thread is stuck and no
    /// more may be started.
    pub healthy: bool,
    /// Runners staffed (the worker's concurrency, summed over workers
    /// sharing the queue).
    pub staffed: usize,
    /// Threads serving now, stuck ones included.
    pub threads: usize,
    /// Threads stuck in calls the core stopped waiting for.
    pub stuck: usize,
    /// The most stuck threads that get a replacement.
    pub cap: usize,
}

impl RunnerHealth {
    /// Why it is unhealthy, in words; `None` when it is healthy.
    pub fn why(&self) -> Option<String> {
        (!self.healthy).then(|| {
            format!(
                "every runner thread is stuck in a body past its timeout ({} stuck, {} replaced, the cap); not claiming until one returns",
                self.stuck, self.cap
            )
        })
    }

    /// The counts and the verdict as the admin reports them (`healthy`,
    /// `why`, `runners`, `threads`, `stuck`, `stuck_cap`): one spelling
    /// for the admin's page and a binding's `worker.health` alike.
    pub fn json(&self) -> serde_json::Map<String, serde_json::Value> {
        let serde_json::Value::Object(out) = serde_json::json!({
            "healthy": self.healthy,
            "why": self.why(),
            "runners": self.staffed,
            "threads": self.threads,
            "stuck": self.stuck,
            "stuck_cap": self.cap,
        }) else {
            unreachable!("a json! object")
        };
        out
    }
}

/// One host queue's runner threads, counted (see the module).
pub struct Runners {
    ledger: Mutex<Ledger>,
    /// Rung when threads are wanted.
    wanted: Condvar,
    healthy: AtomicBool,
    health: watch::Sender<bool>,
}

impl Default for Runners {
    fn default() -> Self {
        Runners {
            ledger: Mutex::new(Ledger::default()),
            wanted: Condvar::new(),
            healthy: AtomicBool::new(true),
            health: watch::channel(true).0,
        }
    }
}

impl Runners {
    /// A ledger with nobody staffed.
    pub fn new() -> Arc<Runners> {
        Arc::new(Runners::default())
    }

    fn lock(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// After every change: the verdict published, hirers woken.
    fn changed(&self, l: &Ledger) {
        let ok = l.healthy();
        if self.healthy.swap(ok, Ordering::SeqCst) != ok {
            self.health.send_replace(ok);
        }
        if l.wanted() > 0 {
            self.wanted.notify_all();
        }
    }

    /// The host started `n` runner threads (already counted as serving).
    pub fn staff(&self, n: usize) {
        let mut l = self.lock();
        l.staffed += n;
        l.live += n;
        self.changed(&l);
    }

    /// The host stops asking for `n` runners (a worker stopped); its
    /// threads [`leave`](Self::leave) as they end.
    pub fn unstaff(&self, n: usize) {
        let mut l = self.lock();
        l.staffed = l.staffed.saturating_sub(n);
        self.changed(&l);
    }

    /// A running worker asks for `n` more runners (a remote `pool_grow`):
    /// the host's hiring thread starts them.
    pub fn grow(&self, n: usize) {
        let mut l = self.lock();
        l.staffed += n;
        self.changed(&l);
    }

    /// A serving thread ended (or one counted by `hire` could not start).
    pub fn leave(&self) {
        let mut l = self.lock();
        l.live = l.live.saturating_sub(1);
        self.changed(&l);
    }

    /// How many threads the host should start now, waiting up to `wait`
    /// for a need; they count as serving from here. 0 when none is wanted.
    /// Blocks the thread (the host calls it without its own lock, e.g. the
    /// GIL, held).
    pub fn hire(&self, wait: Duration) -> usize {
        let mut l = self.lock();
        if l.wanted() == 0 {
            l = self
                .wanted
                .wait_timeout(l, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let n = l.wanted();
        l.live += n;
        self.changed(&l);
        n
    }

    /// Asked by a thread back from an abandoned call: whether it is one too
    /// many now and should end (it is then no longer counted; it must not
    /// call `leave`).
    pub fn retire(&self) -> bool {
        let mut l = self.lock();
        if !l.surplus() {
            return false;
        }
        l.live -= 1;
        self.changed(&l);
        true
    }

    /// Whether anybody staffed this queue: only then are abandoned calls
    /// counted (a call withdrawn from an unstaffed queue holds no thread).
    pub(crate) fn staffed(&self) -> bool {
        self.lock().staffed > 0
    }

    /// The core stopped waiting for a call a thread runs.
    pub(crate) fn abandon(&self) {
        let mut l = self.lock();
        l.abandoned += 1;
        self.changed(&l);
    }

    /// An abandoned call returned: its thread serves again.
    pub(crate) fn returned(&self) {
        let mut l = self.lock();
        l.abandoned = l.abandoned.saturating_sub(1);
        self.changed(&l);
    }

    /// Whether a call can be run now.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::SeqCst)
    }

    /// Resolves once no call can be run (at once when none can).
    pub async fn until_unhealthy(&self) {
        let mut rx = self.health.subscribe();
        while *rx.borrow_and_update() {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// The counts and the verdict.
    pub fn health(&self) -> RunnerHealth {
        let l = *self.lock();
        RunnerHealth {
            healthy: l.healthy(),
            staffed: l.staffed,
            threads: l.live,
            stuck: l.abandoned,
            cap: l.cap(),
        }
    }

    /// Resolves once a call can be run (at once when it can).
    pub async fn until_healthy(&self) {
        let mut rx = self.health.subscribe();
        while !*rx.borrow_and_update() {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }
}

/// The runner ledgers a worker's bodies run on: healthy when all are.
#[derive(Clone, Default)]
pub(crate) struct Gate {
    ledgers: Vec<Arc<Runners>>,
}

impl Gate {
    /// The distinct ledgers of `app`'s registered bodies.
    pub(crate) fn of(app: &App) -> Gate {
        let mut ledgers: Vec<Arc<Runners>> = Vec::new();
        for name in app.task_names() {
            if let Some(r) = app.registered(&name).and_then(|r| r.body.runners())
                && !ledgers.iter().any(|l| Arc::ptr_eq(l, &r))
            {
                ledgers.push(r);
            }
        }
        Gate { ledgers }
    }

    pub(crate) fn healthy(&self) -> bool {
        self.ledgers.iter().all(|l| l.healthy())
    }

    /// `n` more runners on each staffed ledger (a remote `pool_grow`).
    pub(crate) fn grow(&self, n: usize) {
        for l in self.ledgers.iter().filter(|l| l.staffed()) {
            l.grow(n);
        }
    }

    /// `n` fewer runners on each staffed ledger (a remote `pool_shrink`,
    /// or a grown worker stopping); surplus threads stay idle until they
    /// end.
    pub(crate) fn shrink(&self, n: usize) {
        for l in self.ledgers.iter().filter(|l| l.staffed()) {
            l.unstaff(n);
        }
    }

    /// Resolves once every ledger is healthy.
    pub(crate) async fn until_healthy(&self) {
        while !self.healthy() {
            for l in &self.ledgers {
                l.until_healthy().await;
            }
        }
    }

    /// Resolves once one ledger is unhealthy; never without ledgers.
    pub(crate) async fn until_unhealthy(&self) {
        if self.ledgers.is_empty() {
            return std::future::pending().await;
        }
        let each = self.ledgers.iter().map(|l| Box::pin(l.until_unhealthy()));
        futures_util::future::select_all(each).await;
    }

    /// The worst of its ledgers: the first unhealthy one, else their sums.
    pub(crate) fn health(&self) -> RunnerHealth {
        let all: Vec<RunnerHealth> = self.ledgers.iter().map(|l| l.health()).collect();
        if let Some(bad) = all.iter().find(|h| !h.healthy) {
            return *bad;
        }
        all.iter().fold(
            RunnerHealth {
                healthy: true,
                staffed: 0,
                threads: 0,
                stuck: 0,
                cap: 0,
            },
            |a, h| RunnerHealth {
                healthy: true,
                staffed: a.staffed + h.staffed,
                threads: a.threads + h.threads,
                stuck: a.stuck + h.stuck,
                cap: a.cap + h.cap,
            },
        )
    }
}

/// A running worker as the admin of its app sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerHealth {
    /// The worker's name.
    pub name: String,
    /// Its runners.
    pub runners: RunnerHealth,
    /// Its load now.
    pub load: Load,
}

/// A worker's load: bodies running, messages held (running or prefetched).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Load {
    pub active: u64,
    pub held: u64,
}

/// How a listed worker tells its load.
pub(crate) type LoadOf = Arc<dyn Fn() -> Load + Send + Sync>;

/// How a listed worker is asked to stop (gracefully, its default grace):
/// a remote `shutdown`.
pub(crate) type StopOf = Arc<dyn Fn() + Send + Sync>;

struct Listed {
    id: u64,
    app: Weak<AppInner>,
    name: String,
    gate: Gate,
    load: LoadOf,
    stop: StopOf,
    /// The worker itself, for remote control (`task::remote`).
    worker: super::Worker,
}

/// The workers running in this process, for the admin of their app: a
/// worker's health is its process's, which only this process knows.
static RUNNING: Mutex<Vec<Listed>> = Mutex::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(1);

/// Lists a running worker until the answer is dropped.
pub(crate) fn list(
    app: &App,
    name: &str,
    gate: Gate,
    load: LoadOf,
    stop: StopOf,
    worker: super::Worker,
) -> Unlist {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    RUNNING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Listed {
            id,
            app: Arc::downgrade(&app.inner),
            name: name.to_string(),
            gate,
            load,
            stop,
            worker,
        });
    Unlist(id)
}

/// Asks every worker of `app` running in this process to stop gracefully;
/// answers how many were asked.
pub(crate) fn stop_workers(app: &App) -> usize {
    let stops: Vec<StopOf> = RUNNING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|l| std::ptr::eq(l.app.as_ptr(), Arc::as_ptr(&app.inner)))
        .map(|l| l.stop.clone())
        .collect();
    for s in &stops {
        s();
    }
    stops.len()
}

/// The workers of `app` running in this process, in the order they
/// started: what remote control reads and changes.
pub(crate) fn handles(app: &App) -> Vec<super::Worker> {
    RUNNING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|l| std::ptr::eq(l.app.as_ptr(), Arc::as_ptr(&app.inner)))
        .map(|l| l.worker.clone())
        .collect()
}

/// Takes a worker off the list when it stops running.
pub(crate) struct Unlist(u64);

impl Drop for Unlist {
    fn drop(&mut self) {
        RUNNING
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|l| l.id != self.0);
    }
}

/// The workers of `app` running in this process, with their runners'
/// health, in the order they started.
pub fn workers(app: &App) -> Vec<WorkerHealth> {
    RUNNING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|l| std::ptr::eq(l.app.as_ptr(), Arc::as_ptr(&app.inner)))
        .map(|l| WorkerHealth {
            name: l.name.clone(),
            runners: l.gate.health(),
            load: (l.load)(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stuck_thread_is_replaced_up_to_the_cap_then_unhealthy() {
        let r = Runners::new();
        assert!(r.healthy());
        assert_eq!(r.hire(Duration::ZERO), 0, "nobody staffed: nothing to hire");
        r.staff(2);
        assert_eq!(r.hire(Duration::ZERO), 0);
        r.abandon();
        assert_eq!(r.hire(Duration::ZERO), 1, "one stuck: one replacement");
        assert_eq!(r.hire(Duration::ZERO), 0, "counted once");
        r.abandon();
        assert_eq!(r.hire(Duration::ZERO), 1);
        assert!(r.healthy(), "two stuck, two replaced: two free");
        r.abandon();
        assert_eq!(r.hire(Duration::ZERO), 0, "the cap (2) is reached");
        assert!(r.healthy(), "one thread is still free");
        r.abandon();
        assert!(!r.healthy(), "all four threads are stuck");
        let h = r.health();
        assert_eq!((h.staffed, h.threads, h.stuck, h.cap), (2, 4, 4, 2));
        assert!(h.why().unwrap().contains("4 stuck"));
        let j = h.json();
        assert_eq!(j["healthy"], false);
        assert_eq!(j["why"], h.why().unwrap());
        assert_eq!(j["runners"], 2);
        assert_eq!(j["threads"], 4);
        assert_eq!(j["stuck"], 4);
        assert_eq!(j["stuck_cap"], 2);
        // One returns: healthy again, and no thread is surplus (4 stuck
        // would want 2 + 2; 3 stuck wants 2 + 2 too).
        r.returned();
        assert!(r.healthy());
        assert!(!r.retire());
        // All return: two threads are surplus and retire, not a third.
        r.returned();
        r.returned();
        r.returned();
        assert!(r.retire());
        assert!(r.retire());
        assert!(!r.retire());
        assert_eq!(r.health().threads, 2);
    }

    #[test]
    fn a_thread_that_left_is_hired_again() {
        let r = Runners::new();
        r.staff(1);
        r.abandon();
        assert_eq!(r.hire(Duration::ZERO), 1);
        r.leave(); // it could not start
        assert_eq!(r.hire(Duration::ZERO), 1);
        // Unstaffed (the worker stopped): nothing is wanted, healthy.
        r.unstaff(1);
        assert!(r.healthy());
        assert_eq!(r.hire(Duration::ZERO), 0);
    }

    #[tokio::test]
    async fn until_healthy_wakes_when_a_stuck_call_returns() {
        let r = Runners::new();
        r.staff(1);
        r.abandon();
        r.abandon();
        assert!(!r.healthy());
        let r2 = r.clone();
        let w = tokio::spawn(async move { r2.until_healthy().await });
        tokio::task::yield_now().await;
        assert!(!w.is_finished());
        r.returned();
        tokio::time::timeout(Duration::from_secs(5), w)
            .await
            .expect("woken")
            .unwrap();
    }
}
