//! The parent's side: children started, handed one run each, replaced.
//!
//! A child is handed a run only once it said `ready` and only while it runs
//! nothing else, so one child's death costs exactly one run. What ends a run
//! other than its answer ends its child too, since the child is the only
//! thing that can stop a body mid-instruction:
//! - past its hard limit: SIGKILL, the run fails with `TimeLimitExceeded`;
//! - a terminate: the signal asked for (SIGTERM by default), SIGKILL
//!   [`KILL_AFTER`] later if the child outlives it;
//! - the worker stopped waiting (its `timeout`, a stop past the grace): SIGKILL;
//! - the child died by itself (`os._exit`, a segfault, the OOM killer): the
//!   run fails with `WorkerLostError`.
//!
//! Each time a new child takes the dead one's place. A child is also retired
//! (its socket closed, so it exits) after `max_tasks_per_child` runs or once
//! its resident memory passed `max_memory_per_child` KiB after a run, as
//! Celery's prefork pool does. Each child is reaped by a thread of its own
//! blocked in `waitpid` rather than through SIGCHLD: the host runtime may own
//! that signal (Node's libuv installs a handler for its own children).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Notify;

use super::spawn::{Child, KILL_AFTER, describe, launch, retire, rss_kib, signal};
use super::wire::{self, FromChild, ToChild};
use crate::task::body::Context;
use crate::task::state::{Failure, Refused};

/// The wait before starting a child again after one failed to start: 1 s, so
/// an app that cannot be imported is retried but not in a tight loop.
const RESTART: Duration = Duration::from_secs(1);

/// The failure of a run whose child died under it (Celery's type name).
pub const WORKER_LOST: &str = "WorkerLostError";
/// The failure of a run past its hard time limit (Celery's type name).
pub const TIME_LIMIT: &str = "TimeLimitExceeded";

/// How to start a child, and when to replace one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcSpec {
    /// The program (`sys.executable`, `process.execPath`).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables set for it, on top of the parent's environment.
    pub env: Vec<(String, String)>,
    /// Runs after which a child is replaced (`None`: never).
    pub max_tasks_per_child: Option<u64>,
    /// Resident memory (KiB) past which a child is replaced after its run
    /// (`None`: never).
    pub max_memory_per_child: Option<u64>,
}

/// A pool of child processes that run bodies for one worker.
#[derive(Clone)]
pub struct Procs {
    inner: Arc<Inner>,
}

struct Inner {
    spec: ProcSpec,
    size: usize,
    state: Mutex<State>,
    changed: Notify,
    closed: AtomicBool,
    name: String,
}

#[derive(Default)]
struct State {
    idle: Vec<Child>,
    /// Children started and not ready yet.
    starting: usize,
    /// The pid running each run id.
    running: HashMap<String, u32>,
    /// The signal a terminate sent to each run's child.
    signalled: HashMap<String, i32>,
    /// Why the last start failed, until a child is ready.
    broken: Option<String>,
    /// Children that said `ready`, in all.
    started: u64,
    /// Children to let go rather than replace (a remote `pool_shrink`
    /// that found them busy).
    shed: usize,
}

fn warn(name: &str, what: &str) {
    crate::log::emit(
        crate::log::Level::Warn,
        "headway.worker",
        crate::log::About::worker(name),
        format_args!("headway worker {name}: process pool: {what}"),
    );
}

impl Procs {
    /// A pool of `size` children started by `spec` (none started yet:
    /// [`Procs::start`]).
    pub fn new(spec: ProcSpec, size: usize, name: &str) -> Procs {
        Procs {
            inner: Arc::new(Inner {
                spec,
                size,
                state: Mutex::new(State::default()),
                changed: Notify::new(),
                closed: AtomicBool::new(false),
                name: name.to_string(),
            }),
        }
    }

    /// Starts its children and waits until one is ready. Refused when the
    /// first to finish starting failed (the app could not be imported, the
    /// program is missing): a worker that can run nothing says so at once.
    pub async fn start(&self) -> Result<(), Refused> {
        {
            let mut st = self.inner.lock();
            st.starting += self.inner.size;
        }
        for _ in 0..self.inner.size {
            tokio::spawn(spawn_child(self.inner.clone()));
        }
        loop {
            let changed = self.inner.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let st = self.inner.lock();
                if st.started > 0 {
                    return Ok(());
                }
                if let Some(why) = &st.broken {
                    let why = why.clone();
                    drop(st);
                    self.close();
                    return Err(Refused::Invalid(format!(
                        "the process pool could not start a child: {why}"
                    )));
                }
            }
            changed.await;
        }
    }

    /// Stops handing out runs; idle children are let go (their socket
    /// closes and they exit), busy ones when their run ends.
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        let idle = std::mem::take(&mut self.inner.lock().idle);
        for c in idle {
            retire(c);
        }
        self.inner.changed.notify_waiters();
    }

    /// Starts `n` more children (a remote `pool_grow`).
    pub fn grow(&self, n: usize) {
        if self.inner.closed.load(Ordering::SeqCst) {
            return;
        }
        let more = {
            let mut st = self.inner.lock();
            // A grow first cancels a shrink still owed.
            let owed = st.shed.min(n);
            st.shed -= owed;
            st.starting += n - owed;
            n - owed
        };
        for _ in 0..more {
            tokio::spawn(spawn_child(self.inner.clone()));
        }
    }

    /// Lets `n` children go (a remote `pool_shrink`): idle ones now, busy
    /// ones when their run ends, instead of being replaced.
    pub fn shrink(&self, n: usize) {
        let idle: Vec<Child> = {
            let mut st = self.inner.lock();
            let k = n.min(st.idle.len());
            st.shed += n - k;
            let at = st.idle.len() - k;
            st.idle.split_off(at)
        };
        for c in idle {
            retire(c);
        }
    }

    /// The pids of its children alive now (idle and busy).
    pub fn pids(&self) -> Vec<u32> {
        let st = self.inner.lock();
        let mut pids: Vec<u32> = st.idle.iter().map(|c| c.proc.pid).collect();
        pids.extend(st.running.values().copied());
        pids.sort_unstable();
        pids
    }

    /// The pid of the child running `id`, while one here does.
    pub fn running(&self, id: &str) -> Option<u32> {
        self.inner.lock().running.get(id).copied()
    }

    /// How many children said `ready` since the pool started.
    pub fn started(&self) -> u64 {
        self.inner.lock().started
    }

    /// Sends `sig` to the child running `id`, if one here does; the run then
    /// ends as terminated when its caller stops waiting, and the child is
    /// killed [`KILL_AFTER`] later if it outlives the signal.
    pub fn signal(&self, id: &str, sig: i32) -> bool {
        let mut st = self.inner.lock();
        match st.running.get(id).copied() {
            Some(pid) => {
                st.signalled.insert(id.to_string(), sig);
                drop(st);
                signal(pid, sig);
                true
            }
            None => false,
        }
    }

    /// Waits for an idle child and holds it for one run ([`Procs::run_on`]);
    /// a child held and never run goes back to the idle list.
    pub async fn idle(&self) -> Result<Idle, Failure> {
        let child = self.acquire().await?;
        Ok(Idle {
            inner: self.inner.clone(),
            child: Some(child),
        })
    }

    /// Runs the body registered as `key` in a child: its answer, or the
    /// failure that ended it (`TimeLimitExceeded` past `ctx.time_limit`,
    /// `TimeoutError` past `timeout` ms, `WorkerLostError` when the child
    /// died). Dropping the future mid-run ends the child (see the module
    /// docs).
    pub async fn run(
        &self,
        key: &str,
        ctx: Context,
        args: Vec<Value>,
        timeout: Option<i64>,
    ) -> Result<Value, Failure> {
        let idle = self.idle().await?;
        self.run_on(idle, key, ctx, args, timeout).await
    }

    /// Runs the body registered as `key` on the child `idle` holds (see
    /// [`Procs::run`]). Both limits count from here, not from the wait for
    /// a child.
    pub async fn run_on(
        &self,
        mut idle: Idle,
        key: &str,
        ctx: Context,
        args: Vec<Value>,
        timeout: Option<i64>,
    ) -> Result<Value, Failure> {
        let child = idle.child.take().expect("held");
        let id = ctx.id.clone();
        // A custom state the body sends mid-run is stored through the run's
        // recorder, as on the threads pool.
        let (recorder, task, retries) = (ctx.recorder.clone(), ctx.name.clone(), ctx.retries);
        // The nearer of the hard limit and the run's timeout ends it.
        let limit = match (ctx.time_limit, timeout) {
            (Some(h), Some(t)) if t < h => Some((t, false)),
            (Some(h), _) => Some((h, true)),
            (None, Some(t)) => Some((t, false)),
            (None, None) => None,
        };
        self.inner.lock().running.insert(id.clone(), child.proc.pid);
        let mut lease = Lease {
            inner: self.inner.clone(),
            child: Some(child),
            id,
        };
        let c = lease.child.as_mut().expect("leased");
        let seq = c.runs + 1;
        let call = ToChild::Call {
            seq,
            key: key.to_string(),
            ctx,
            args,
        };
        enum End {
            Answer(Result<Value, Failure>),
            Lost,
            Limit(i64),
            Timeout(i64),
        }
        let end = if wire::write(&mut c.tx, &call).await.is_err() {
            End::Lost
        } else {
            let answer = async {
                loop {
                    match wire::read::<_, FromChild>(&mut c.rx).await {
                        Ok(Some(FromChild::Done { seq: s, ok, err })) if s == seq => {
                            return match err {
                                Some(f) => End::Answer(Err(f)),
                                None => End::Answer(Ok(ok.unwrap_or(Value::Null))),
                            };
                        }
                        Ok(Some(FromChild::State {
                            id: of,
                            state,
                            meta,
                        })) => {
                            if let Some(app) = &recorder.0
                                && let Err(e) =
                                    app.record_state(&of, &task, retries, &state, meta).await
                            {
                                warn(
                                    &self.inner.name,
                                    &format!("run {of}: its state {state:?} was not stored: {e}"),
                                );
                            }
                        }
                        Ok(Some(_)) => continue,
                        Ok(None) | Err(_) => return End::Lost,
                    }
                }
            };
            match limit {
                Some((ms, hard)) => {
                    match tokio::time::timeout(Duration::from_millis(ms.max(1) as u64), answer)
                        .await
                    {
                        Ok(e) => e,
                        Err(_) if hard => End::Limit(ms),
                        Err(_) => End::Timeout(ms),
                    }
                }
                None => answer.await,
            }
        };
        match end {
            End::Answer(r) => {
                lease.give_back();
                r
            }
            End::Limit(ms) => {
                lease.end(libc::SIGKILL);
                Err(Failure::new(
                    TIME_LIMIT,
                    format!("TimeLimitExceeded({})", secs(ms)),
                ))
            }
            End::Timeout(ms) => {
                lease.end(libc::SIGKILL);
                Err(timed_out(ms))
            }
            End::Lost => {
                let (mut c, _) = lease.take();
                let status = tokio::time::timeout(KILL_AFTER, c.proc.status()).await;
                let why = match status {
                    Ok(s) => describe(s),
                    Err(_) => {
                        c.proc.signal(libc::SIGKILL);
                        "its socket closed".into()
                    }
                };
                lease.replace(c);
                Err(Failure::new(
                    WORKER_LOST,
                    format!("Worker exited prematurely: {why}."),
                ))
            }
        }
    }

    /// An idle child, waiting for one if each is busy or starting.
    async fn acquire(&self) -> Result<Child, Failure> {
        loop {
            let changed = self.inner.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut st = self.inner.lock();
                if self.inner.closed.load(Ordering::SeqCst) {
                    return Err(Failure::new(WORKER_LOST, "the process pool is closed"));
                }
                while let Some(c) = st.idle.pop() {
                    if !c.proc.exited() && c.quiet() {
                        return Ok(c);
                    }
                    // Died while idle: replaced, and no run is charged.
                    retire(c);
                    st.starting += 1;
                    tokio::spawn(spawn_child(self.inner.clone()));
                }
            }
            changed.await;
        }
    }
}

fn secs(ms: i64) -> String {
    let s = ms as f64 / 1000.0;
    if s.fract() == 0.0 {
        format!("{s:.1}")
    } else {
        format!("{s}")
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A child lent to one run: whatever ends the run early ends the child.
struct Lease {
    inner: Arc<Inner>,
    child: Option<Child>,
    id: String,
}

impl Lease {
    /// The child back from the run, and the signal a terminate sent it.
    fn take(&mut self) -> (Child, Option<i32>) {
        let sig = {
            let mut st = self.inner.lock();
            st.running.remove(&self.id);
            st.signalled.remove(&self.id)
        };
        (self.child.take().expect("leased"), sig)
    }

    /// The run answered: the child goes back to the idle list, or is
    /// retired when it ran its share or grew past its memory.
    fn give_back(&mut self) {
        let (mut c, _) = self.take();
        c.runs += 1;
        let spec = &self.inner.spec;
        let worn = spec.max_tasks_per_child.is_some_and(|k| c.runs >= k)
            || spec
                .max_memory_per_child
                .is_some_and(|kib| rss_kib(c.proc.pid).is_some_and(|rss| rss > kib));
        let shed = {
            let mut st = self.inner.lock();
            let shed = st.shed > 0;
            st.shed -= usize::from(shed);
            shed
        };
        if shed {
            retire(c);
            self.inner.changed.notify_waiters();
        } else if worn || self.inner.closed.load(Ordering::SeqCst) {
            retire(c);
            if !self.inner.closed.load(Ordering::SeqCst) {
                self.inner.lock().starting += 1;
                tokio::spawn(spawn_child(self.inner.clone()));
            }
        } else {
            self.inner.lock().idle.push(c);
            self.inner.changed.notify_one();
        }
    }

    /// Ends the child with `sig` (SIGKILL after [`KILL_AFTER`] if it
    /// outlives another signal), and starts a new one.
    fn end(&mut self, sig: i32) {
        let (c, _) = self.take();
        c.proc.signal(sig);
        self.replace(c);
    }

    /// Reaps `c` in the background (killing it if it lingers) and starts a
    /// new child in its place.
    fn replace(&mut self, c: Child) {
        let Child { tx, rx, proc, .. } = c;
        drop((tx, rx));
        proc.reap();
        let shed = {
            let mut st = self.inner.lock();
            let shed = st.shed > 0;
            st.shed -= usize::from(shed);
            shed
        };
        if !shed
            && !self.inner.closed.load(Ordering::SeqCst)
            && tokio::runtime::Handle::try_current().is_ok()
        {
            self.inner.lock().starting += 1;
            tokio::spawn(spawn_child(self.inner.clone()));
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.child.is_some() {
            // The caller stopped waiting mid-run: a terminate already sent
            // its signal; anything else kills.
            let (c, sig) = self.take();
            if sig.is_none() {
                c.proc.signal(libc::SIGKILL);
            }
            self.replace(c);
        }
    }
}

/// An idle child held for one run: the run waits for a child before its
/// early ack and its revoked check at hand-over (the worker's), and a run
/// that ends there (terminated, the worker stopping) puts the child back.
pub struct Idle {
    inner: Arc<Inner>,
    child: Option<Child>,
}

impl Drop for Idle {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            if self.inner.closed.load(Ordering::SeqCst) {
                retire(c);
            } else {
                self.inner.lock().idle.push(c);
            }
            self.inner.changed.notify_one();
        }
    }
}

/// The failure of a run past its `timeout` (ms).
pub fn timed_out(ms: i64) -> Failure {
    Failure::new(
        "TimeoutError",
        format!("the run took longer than its timeout of {ms} ms"),
    )
}

/// Starts one child and, once it is ready, adds it to the idle list;
/// retried every [`RESTART`] while starts fail and the pool is open.
async fn spawn_child(inner: Arc<Inner>) {
    loop {
        if inner.closed.load(Ordering::SeqCst) {
            inner.lock().starting -= 1;
            inner.changed.notify_waiters();
            return;
        }
        match launch(&inner.spec).await {
            Ok(c) => {
                let late = {
                    let mut st = inner.lock();
                    st.starting -= 1;
                    st.started += 1;
                    st.broken = None;
                    if inner.closed.load(Ordering::SeqCst) {
                        Some(c)
                    } else {
                        st.idle.push(c);
                        None
                    }
                };
                if let Some(c) = late {
                    retire(c);
                }
                inner.changed.notify_waiters();
                return;
            }
            Err(why) => {
                warn(&inner.name, &format!("a child failed to start: {why}"));
                inner.lock().broken = Some(why);
                inner.changed.notify_waiters();
                tokio::time::sleep(RESTART).await;
            }
        }
    }
}
