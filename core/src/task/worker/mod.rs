//! The object that runs tasks.
//!
//! A worker claims messages from its queues, runs up to `concurrency` bodies
//! at once, holds at most `prefetch` messages it has not finished running
//! (and twice that unsettled: results still being stored), and settles each
//! the way its task's policy says:
//! - **early ack** (the default) confirms a message when it is taken to run,
//!   so a worker that dies mid-run does not run it twice; **`acks_late`**
//!   confirms after the run, so a worker that dies mid-run has it run again
//!   elsewhere (at-least-once);
//! - a failure within the retry budget goes back as a new message with the
//!   same id and an eta from the backoff; the claim is settled by the broker's
//!   `retry`, which publishes the next attempt in the same step;
//! - a message whose `expires` has passed is recorded REVOKED (expired)
//!   without running; a revoked one never runs, checked at receipt and again
//!   before running when it waited over 100 ms since; `terminate` stops a
//!   run in progress here, whichever process on the broker asked (the app's
//!   terminate marks, which the broker fills from other processes'
//!   terminates);
//! - a success advances the chain or chord the message carries; a failure for
//!   good fails the rest of its chain and its chord's callback, so nobody
//!   waits on something that will never come.
//!
//! `stop(grace)` is graceful: it stops claiming, gives prefetched messages
//! back at once, waits up to `grace` for the runs in progress, then cancels
//! what is left and gives it back too — nothing it held is lost.
//!
//! The worker is split by concern, each file small enough to read whole:
//! - `options`: its settings and the checks on them;
//! - `claim`: the loop that claims and keeps the prefetch topped up;
//! - `run`: one message from receipt to the end of its body (the checks at
//!   receipt, a slot, the rate, the early ack, the run itself);
//! - `settle`: what a finished run comes to (result, retry, failure) and
//!   the events it records;
//! - `follow`: what waits on a run (chains, chords, Celery links), sent on
//!   a success and failed with it on a failure;
//! - `notes`: what a binding is told of each process-pool run (Node's
//!   worker events fire in the parent);
//! - `writer`: the lanes that gather many runs' writes into one round trip;
//! - `stop`: the graceful stop, and giving a message back;
//! - `live`: what remote control reads and changes while it runs (the runs
//!   it holds, its queues, its concurrency, a task's rate and time limits).

mod admit;
mod claim;
mod follow;
mod live;
mod notes;
mod options;
mod reach;
mod run;
mod seat;
mod settle;
mod stop;
mod writer;

use crate::hashed::HashMap;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore, watch};

use super::app::App;
use super::procs::Procs;
use super::runners::{Gate, RunnerHealth};
use super::state::Refused;
use crate::flow::Window;

pub use live::RunInfo;
pub use notes::{Observer, RunNote};
use options::slots_per;
pub use options::{
    PREFETCH_MULTIPLIER, Pool, WorkerConfig, hard_limit_needs_process, process_pool_option,
};

struct Shared {
    app: App,
    /// The queues it claims from; remote control adds and cancels.
    queues: RwLock<Vec<String>>,
    /// Slots and prefetch; remote control grows and shrinks them.
    concurrency: AtomicUsize,
    prefetch: AtomicUsize,
    /// Whether the prefetch was left to the worker: it then reaches
    /// further while runs are short (`reach`).
    reach: bool,
    /// Its concurrency as configured: the runners a host staffed for it.
    configured: usize,
    name: String,
    /// The same name, shared by the events its runs record.
    named: Arc<str>,
    /// Set when stop begins: stop claiming, give prefetched messages back.
    stopping: watch::Sender<bool>,
    /// Set when the grace is over: cancel runs in progress.
    cancel: watch::Sender<bool>,
    grace: Mutex<Duration>,
    woken: Notify,
    running: AtomicBool,
    /// A run holds one from before its revoked check until its body ends:
    /// [`slots_per`] a unit of concurrency. Shared, so a run's slot can go
    /// with its call to the host, which frees it as it answers (`run`).
    slots: Arc<Semaphore>,
    /// Its slots again, with the runs on deck they go to first (`deck`).
    deck: Arc<crate::task::deck::Deck>,
    limiters: Mutex<HashMap<String, Window>>,
    done: AtomicU64,
    /// Messages claimed so far (held now: claimed − done).
    claimed: AtomicU64,
    /// Runs whose body is over and whose settle (the result's store, a late
    /// ack) is still in flight: they no longer count against the prefetch.
    settling: AtomicUsize,
    /// Rung when a body ends and when a run is over: the claim loop may
    /// have room again.
    freed: Notify,
    /// The runner threads its bodies run on (known once it runs): while
    /// every one is stuck it claims nothing (`runners`).
    gate: std::sync::OnceLock<Gate>,
    /// The child processes its bodies run in, on the process pool.
    procs: Option<Procs>,
    /// The time limits (ms) of a task that sets none.
    time_limit: Option<i64>,
    soft_time_limit: Option<i64>,
    /// The runs it holds, by claim order (`live`).
    runs: Mutex<BTreeMap<u64, live::Held>>,
    next_run: AtomicU64,
    /// A task's limits as remote control set them here (`live`).
    tuned: Mutex<HashMap<String, live::Tuned>>,
    /// Rung when a remote command changed a rate: waiters read it again.
    retuned: Notify,
    /// Bumped when a remote command changed its queues or its prefetch:
    /// the claim loop looks round at once.
    reshaped: watch::Sender<u64>,
    /// What a binding is told of each process-pool run (`notes`).
    notes: notes::Notes,
}

/// Runs tasks. Cheap to clone (shared); `stop` from any clone.
#[derive(Clone)]
pub struct Worker {
    shared: Arc<Shared>,
}

impl Shared {
    /// Runs claimed and not over yet (waiting, running or settling).
    fn held(&self) -> usize {
        let claimed = self.claimed.load(Ordering::SeqCst);
        claimed.saturating_sub(self.done.load(Ordering::SeqCst)) as usize
    }

    /// A run is over (settled or given back): counted, and the claim loop
    /// told it may have room.
    fn over(&self) {
        self.done.fetch_add(1, Ordering::SeqCst);
        self.freed.notify_one();
    }

    fn queues(&self) -> Vec<String> {
        self.queues
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

fn warn(name: &str, what: &str) {
    crate::log::emit(
        crate::log::Level::Warn,
        "headway.worker",
        crate::log::About::worker(name),
        format_args!("headway worker {name}: {what}"),
    );
}

/// A warning about one run of worker `name`: the record carries the task's
/// name and id.
fn warn_run(name: &str, task: &str, id: &str, what: &str) {
    crate::log::emit(
        crate::log::Level::Warn,
        "headway.worker",
        crate::log::About::worker(name).run(task, id),
        format_args!("headway worker {name}: {what}"),
    );
}

/// Refuses a worker on a broker that keeps no shared task limits when a
/// registered task's rate is global: nothing there could keep it.
fn global_rates_refused(app: &App) -> Result<(), Refused> {
    if app.broker().task_limits().is_some() {
        return Ok(());
    }
    for name in app.task_names() {
        if let Some(reg) = app.registered(&name)
            && reg.policy.rate_scope == crate::task::policy::RateScope::Global
        {
            return Err(crate::task::limits::unsupported(app.host(), "rate_scope"));
        }
    }
    Ok(())
}

/// Refuses a worker on the threads pool when a registered task has a hard
/// time limit: nothing there could keep it.
fn hard_limits_refused(app: &App) -> Result<(), Refused> {
    for name in app.task_names() {
        if let Some(reg) = app.registered(&name)
            && reg.policy.time_limit.is_some()
        {
            return Err(Refused::Invalid(format!(
                "task {name:?} has a `{}`: {}",
                app.host().spell("time_limit"),
                hard_limit_needs_process(app.host())
            )));
        }
    }
    Ok(())
}

impl Worker {
    /// A worker of `app` set up by `config`.
    pub fn new(app: App, config: WorkerConfig) -> Result<Worker, Refused> {
        let options::Options {
            queues,
            concurrency,
            prefetch,
            reach,
            name,
            pool,
            time_limit,
            soft_time_limit,
        } = options::check(config)?;
        global_rates_refused(&app)?;
        let pooled = matches!(pool, Pool::Process(_));
        let procs = match pool {
            Pool::Threads => {
                hard_limits_refused(&app)?;
                None
            }
            Pool::Process(spec) => Some(Procs::new(spec, concurrency, &name)),
        };
        let slots = Arc::new(Semaphore::new(concurrency * slots_per(pooled)));
        // Runs on deck for each slot on threads; the process pool has its own.
        use crate::task::deck::{Deck, PER_SLOT};
        let deck = Deck::new(
            slots.clone(),
            concurrency,
            if pooled { 0 } else { PER_SLOT },
        );
        Ok(Worker {
            shared: Arc::new(Shared {
                app,
                queues: RwLock::new(queues),
                concurrency: AtomicUsize::new(concurrency),
                configured: concurrency,
                prefetch: AtomicUsize::new(prefetch),
                reach,
                named: name.as_str().into(),
                name,
                stopping: watch::channel(false).0,
                cancel: watch::channel(false).0,
                grace: Mutex::new(Duration::from_secs(10)),
                woken: Notify::new(),
                running: AtomicBool::new(false),
                slots,
                deck,
                limiters: Mutex::new(HashMap::default()),
                done: AtomicU64::new(0),
                claimed: AtomicU64::new(0),
                settling: AtomicUsize::new(0),
                freed: Notify::new(),
                gate: std::sync::OnceLock::new(),
                procs,
                time_limit,
                soft_time_limit,
                runs: Mutex::new(BTreeMap::new()),
                next_run: AtomicU64::new(0),
                tuned: Mutex::new(HashMap::default()),
                retuned: Notify::new(),
                reshaped: watch::channel(0).0,
                notes: notes::Notes::default(),
            }),
        })
    }

    /// Its process pool, when its bodies run in child processes.
    pub fn procs(&self) -> Option<&Procs> {
        self.shared.procs.as_ref()
    }

    /// Its pool's name as both bindings show it: `"process"` when its
    /// bodies run in child processes, else `"threads"`.
    pub fn pool_name(&self) -> &'static str {
        if self.procs().is_some() {
            "process"
        } else {
            "threads"
        }
    }

    /// The queues it claims from now.
    pub fn queues(&self) -> Vec<String> {
        self.shared.queues()
    }
    /// The most messages it holds unsettled now.
    pub fn prefetch(&self) -> usize {
        self.shared.prefetch.load(Ordering::SeqCst)
    }
    /// How many bodies run at once now.
    pub fn concurrency(&self) -> usize {
        self.shared.concurrency.load(Ordering::SeqCst)
    }
    /// Its name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }
    /// Whether stop has been called.
    pub fn is_stopping(&self) -> bool {
        *self.shared.stopping.borrow()
    }
    /// How many messages it has settled.
    pub fn settled(&self) -> u64 {
        self.shared.done.load(Ordering::Relaxed)
    }
    /// Whether its runner threads can run a call, and their counts.
    pub fn health(&self) -> RunnerHealth {
        let s = &self.shared;
        match s.gate.get() {
            Some(g) => g.health(),
            None => Gate::of(&s.app).health(),
        }
    }
}
