//! The object that runs tasks.
//!
//! A worker claims messages from its queues, runs up to `concurrency` bodies
//! at once, holds at most `prefetch` messages unsettled, and settles each the
//! way its task's policy says:
//! - **early ack** (the default) confirms a message when it is taken to run,
//!   so a worker that dies mid-run does not run it twice; **`acks_late`**
//!   confirms after the run, so a worker that dies mid-run has it run again
//!   elsewhere (at-least-once);
//! - a failure within the retry budget goes back as a new message with the
//!   same id and an eta from the backoff; the claim is settled by the broker's
//!   `retry`, which publishes the next attempt in the same step;
//! - a message whose `expires` has passed is recorded REVOKED (expired)
//!   without running; a revoked one never runs, checked at receipt and again
//!   just before running; `terminate` stops a run in progress here;
//! - a success advances the chain or chord the message carries; a failure for
//!   good fails the rest of its chain and its chord's callback, so nobody
//!   waits on something that will never come.
//!
//! `stop(grace)` is graceful: it stops claiming, gives prefetched messages
//! back at once, waits up to `grace` for the runs in progress, then cancels
//! what is left and gives it back too — nothing it held is lost.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{Notify, Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinSet;

use super::app::{App, Registered};
use super::body::Context;
use super::message::Message;
use super::runners::{self, Gate, RunnerHealth};
use super::spec::{Delivery, EVENT_TEXT_MAX, Receipt, Round, RunEvent, truncate};
use super::state::{Failure, Outcome, Refused, State};
use crate::flow::{Backoff, Jitter, MILLI, Window};
use crate::log::shown;

/// How long one claim waits for a message before the loop looks round.
const POLL: Duration = Duration::from_millis(200);

/// Celery's `worker_prefetch_multiplier`: a worker holds four messages per
/// slot, enough to keep every slot fed without starving other workers.
pub const PREFETCH_MULTIPLIER: usize = 4;

/// How a worker is set up.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The queues to claim from, in order (`["default"]`).
    pub queues: Vec<String>,
    /// How many bodies run at once (4, moontask's preset).
    pub concurrency: usize,
    /// How many messages it may hold unsettled (`concurrency × 4` when
    /// `None`). Never below `concurrency`.
    pub prefetch: Option<usize>,
    /// A name for logs and the admin page.
    pub name: Option<String>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            queues: vec!["default".into()],
            concurrency: 4,
            prefetch: None,
            name: None,
        }
    }
}

/// What one run came to.
enum Ran {
    Value(Value),
    Failed(Failure),
    Terminated,
    Cancelled,
}

struct Shared {
    app: App,
    queues: Vec<String>,
    concurrency: usize,
    prefetch: usize,
    name: String,
    /// Set when stop begins: stop claiming, give prefetched messages back.
    stopping: watch::Sender<bool>,
    /// Set when the grace is over: cancel runs in progress.
    cancel: watch::Sender<bool>,
    grace: Mutex<Duration>,
    woken: Notify,
    running: AtomicBool,
    slots: Semaphore,
    limiters: Mutex<HashMap<String, Window>>,
    done: AtomicU64,
    /// The runner threads its bodies run on (known once it runs): while
    /// every one is stuck it claims nothing (`runners`).
    gate: std::sync::OnceLock<Gate>,
}

/// Runs tasks. Cheap to clone (shared); `stop` from any clone.
#[derive(Clone)]
pub struct Worker {
    shared: Arc<Shared>,
}

fn warn(name: &str, what: &str) {
    eprintln!("headway worker {name}: {what}");
}

impl Worker {
    /// A worker of `app` set up by `config`.
    pub fn new(app: App, config: WorkerConfig) -> Result<Worker, Refused> {
        if config.concurrency == 0 {
            return Err(Refused::Invalid(format!(
                "invalid `concurrency`: {}",
                super::specs::AT_LEAST_ONE
            )));
        }
        if config.queues.is_empty() || config.queues.iter().any(String::is_empty) {
            return Err(Refused::Invalid(
                "invalid `queues`: needs at least one non-empty name".into(),
            ));
        }
        let prefetch = config
            .prefetch
            .unwrap_or(config.concurrency * PREFETCH_MULTIPLIER)
            .max(config.concurrency);
        let name = config
            .name
            .unwrap_or_else(|| format!("worker-{}", &super::message::new_id()[..8]));
        Ok(Worker {
            shared: Arc::new(Shared {
                app,
                queues: config.queues,
                concurrency: config.concurrency,
                prefetch,
                name,
                stopping: watch::channel(false).0,
                cancel: watch::channel(false).0,
                grace: Mutex::new(Duration::from_secs(10)),
                woken: Notify::new(),
                running: AtomicBool::new(false),
                slots: Semaphore::new(config.concurrency),
                limiters: Mutex::new(HashMap::new()),
                done: AtomicU64::new(0),
                gate: std::sync::OnceLock::new(),
            }),
        })
    }

    /// The queues it claims from.
    pub fn queues(&self) -> &[String] {
        &self.shared.queues
    }
    /// The most messages it holds unsettled.
    pub fn prefetch(&self) -> usize {
        self.shared.prefetch
    }
    /// How many bodies run at once.
    pub fn concurrency(&self) -> usize {
        self.shared.concurrency
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

    /// Stops claiming, gives prefetched messages back, waits up to `grace`
    /// for runs in progress, then cancels and gives back the rest. Returns at
    /// once; `run` resolves when it is all done.
    pub fn stop(&self, grace: Duration) {
        *self.shared.grace.lock().unwrap_or_else(|e| e.into_inner()) = grace;
        self.shared.stopping.send_replace(true);
        self.shared.woken.notify_waiters();
    }

    /// Runs until stopped. Resolves once every message it held is settled or
    /// given back.
    pub async fn run(&self) -> Result<(), Refused> {
        let s = &self.shared;
        if s.running.swap(true, Ordering::SeqCst) {
            return Err(Refused::Invalid("this worker is already running".into()));
        }
        let mut set: JoinSet<()> = JoinSet::new();
        let mut stopping = s.stopping.subscribe();
        let (writes_tx, writes_rx) = mpsc::unbounded_channel();
        let (takes_tx, takes_rx) = mpsc::unbounded_channel();
        let writer = Writer {
            writes: writes_tx,
            takes: takes_tx,
            cancel: s.cancel.subscribe(),
            name: s.name.clone().into(),
        };
        let writes = tokio::spawn(write_loop(s.app.clone(), writes_rx, takes_rx));
        let reconnect = Backoff::new(100 * MILLI, 2.0, 10_000 * MILLI, i32::MAX, Jitter::Full)
            .expect("valid backoff");
        let mut failures = 0i32;
        let clock = s.app.clock().clone();
        let gate = s.gate.get_or_init(|| Gate::of(&s.app)).clone();
        let _listed = runners::list(&s.app, &s.name, gate.clone());
        loop {
            while let Some(r) = set.try_join_next() {
                if let Err(e) = r
                    && e.is_panic()
                {
                    warn(
                        &s.name,
                        "a run panicked; its message is left to the broker's recovery",
                    );
                }
            }
            if *stopping.borrow() {
                break;
            }
            if !gate.healthy() {
                warn(&s.name, &gate.health().why().unwrap_or_default());
                tokio::select! {
                    _ = gate.until_healthy() => warn(&s.name, "a runner is free again; claiming again"),
                    _ = stopping.changed() => {}
                }
                continue;
            }
            // Refill in halves: a claim per run settled would be a round
            // trip (and a claim script) per message under load. An idle
            // worker claims at once, whatever it holds.
            let room = s.prefetch.saturating_sub(set.len());
            if room == 0 || (!set.is_empty() && room < s.prefetch.div_ceil(2)) {
                tokio::select! {
                    _ = set.join_next() => {}
                    _ = stopping.changed() => {}
                }
                continue;
            }
            let got = tokio::select! {
                biased;
                _ = stopping.changed() => continue,
                // A claim cut short is handed back, as at a stop.
                _ = gate.until_unhealthy() => continue,
                r = s.app.broker().claim(&s.queues, room, POLL) => r,
            };
            let batch = match got {
                Ok(b) => {
                    if failures > 0 {
                        warn(&s.name, "broker is back; consuming again");
                        failures = 0;
                    }
                    b
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let wait = reconnect.delay(
                        failures,
                        crate::task::policy::seeded(&s.name, failures as u32),
                        0,
                    );
                    warn(&s.name, &format!("{e}; retrying in {} ms", wait / MILLI));
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_nanos(wait as u64)) => {}
                        _ = stopping.changed() => {}
                    }
                    continue;
                }
            };
            if batch.is_empty() {
                if clock.is_virtual()
                    && set.is_empty()
                    && let Ok(Some(eta)) = s.app.broker().next_eta(&s.queues).await
                {
                    clock.sleep_until(eta).await;
                }
                continue;
            }
            // Receipt checks the broker did not do in its claim, for the
            // whole batch at once: one revoked lookup, not one per message.
            // Early acks are each run's own, gathered by the writer (so this
            // loop claims again at once).
            let ask: Vec<String> = batch
                .iter()
                .filter(|c| c.revoked.is_none())
                .map(|c| c.delivery.message.id.clone())
                .collect();
            let mut looked = if ask.is_empty() {
                Vec::new()
            } else {
                match s.app.broker().revoked(&ask).await {
                    Ok(r) => r,
                    Err(_) => vec![false; ask.len()],
                }
            }
            .into_iter();
            for c in batch {
                let rev = match c.revoked {
                    Some(r) => r,
                    None => looked.next().unwrap_or(false),
                };
                let shared = self.shared.clone();
                let tx = writer.clone();
                set.spawn(async move { process(shared, tx, c.delivery, rev).await });
            }
        }
        // Stopping: prefetched messages go back at once (each run sees
        // `stopping` while it waits for a slot); runs in progress get the grace.
        let grace = *s.grace.lock().unwrap_or_else(|e| e.into_inner());
        let drained =
            tokio::time::timeout(grace, async { while set.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            s.cancel.send_replace(true);
            while set.join_next().await.is_some() {}
        }
        // Every run is done: the writer finishes what it holds and ends.
        drop(writer);
        let _ = writes.await;
        s.running.store(false, Ordering::SeqCst);
        Ok(())
    }
}

async fn process(s: Arc<Shared>, w: Writer, d: Delivery, revoked: bool) {
    let receipt = d.receipt.clone();
    if let Err(e) = settle(&s, &w, d, revoked).await {
        // A claim that could not be settled goes back rather than sit held by
        // a live consumer for ever (a claim already acked is not affected:
        // the broker's fencing makes this a no-op).
        warn(
            &s.name,
            &format!(
                "could not settle a message ({}); giving it back",
                shown(&e.to_string())
            ),
        );
        if let Err(e) = s.app.broker().reject(receipt, true).await {
            warn(
                &s.name,
                &format!("could not give it back either ({e}); the broker's recovery will"),
            );
        }
    }
    s.done.fetch_add(1, Ordering::Relaxed);
}

async fn settle(s: &Shared, w: &Writer, d: Delivery, revoked: bool) -> Result<(), Refused> {
    let app = &s.app;
    let broker = app.broker();
    let Delivery {
        message: m,
        receipt,
        redelivered,
    } = d;
    let now = app.now();

    // Checked at receipt: revoked, expired, unknown.
    if revoked {
        give_up(
            app,
            &m,
            State::Revoked,
            Failure::new("Revoked", "revoked before it ran"),
        )
        .await?;
        return broker.ack(vec![receipt]).await;
    }
    if let Some(exp) = m.expires
        && exp <= now
    {
        give_up(
            app,
            &m,
            State::Revoked,
            Failure::new("Expired", "expired before it ran"),
        )
        .await?;
        return broker.ack(vec![receipt]).await;
    }
    let Some(reg) = app.registered(&m.task) else {
        warn(
            &s.name,
            &format!(
                "received unregistered task {:?}; recorded as failed",
                shown(&m.task)
            ),
        );
        give_up(
            app,
            &m,
            State::Failure,
            Failure::new(
                "NotRegistered",
                format!("no task is registered as {:?} on this worker", m.task),
            ),
        )
        .await?;
        event(
            s,
            &m,
            State::Failure,
            None,
            Some(format!("NotRegistered: {:?}", m.task)),
        )
        .await;
        return broker.ack(vec![receipt]).await;
    };
    let Registered { policy, body } = &*reg;
    // A redelivered run that already succeeded is not run again. Its chain
    // link and Celery links went out before its result was stored (below),
    // so they are not sent again; its chord arrival came after, so it is
    // made again (counted as a set) in case the first delivery died first.
    if redelivered
        && let Some(b) = app.backend()
        && let Some(o) = b.fetch(&m.id).await?
        && o.state == State::Success
    {
        arrive(app, &m).await?;
        return broker.ack(vec![receipt]).await;
    }

    let settle_late = |_: &App, receipt| {
        let late = policy.acks_late;
        async move {
            if late {
                w.write(Vec::new(), None, Some(receipt)).await
            } else {
                Ok(())
            }
        }
    };

    // Wait for a slot; a stopping worker hands the claim back instead (not
    // acked yet, whatever the policy: a prefetched message is not taken).
    let mut stopping = s.stopping.subscribe();
    let (permit, mut waited) = match s.slots.try_acquire() {
        Ok(p) => (p, false),
        Err(_) => {
            let p = tokio::select! {
                p = s.slots.acquire() => p.map_err(|_| Refused::Broker("worker closed".into()))?,
                _ = wait_true(&mut stopping) => {
                    return give_back(app, &m, receipt, false).await;
                }
            };
            (p, true)
        }
    };
    // Every runner stuck: wait for one rather than hand it a call nobody
    // takes (`runners`).
    if let Some(g) = s.gate.get()
        && !g.healthy()
    {
        waited = true;
        tokio::select! {
            _ = g.until_healthy() => {}
            _ = wait_true(&mut stopping) => {
                drop(permit);
                return give_back(app, &m, receipt, false).await;
            }
        }
    }

    // Per-worker rate.
    if let Some(rate) = policy.rate {
        loop {
            let now_ns = app.now().saturating_mul(MILLI);
            let wait = {
                let mut l = s.limiters.lock().unwrap_or_else(|e| e.into_inner());
                let w = l.entry(m.task.clone()).or_insert_with(|| {
                    Window::new(rate.count as i64, rate.per.saturating_mul(MILLI))
                        .expect("valid rate")
                });
                if w.take(now_ns) {
                    None
                } else {
                    Some(w.next(now_ns))
                }
            };
            match wait {
                None => break,
                Some(ns) => {
                    let until = app.now().saturating_add((ns / MILLI).max(1));
                    waited = true;
                    tokio::select! {
                        _ = app.clock().sleep_until(until) => {}
                        _ = wait_true(&mut stopping) => {
                            drop(permit);
                            return give_back(app, &m, receipt, false).await;
                        }
                    }
                }
            }
        }
    }

    // Taken to run: the early ack, and the revoked check again when it
    // waited (for a slot or its rate) since the claim's — one write,
    // gathered with other runs' by the writer. Acking here, not at receipt,
    // means a worker killed with messages prefetched loses none of them:
    // they are still held, and recovered (Celery acks when its pool
    // accepts the task, not when the message arrives).
    let early = (!policy.acks_late).then(|| receipt.clone());
    if (early.is_some() || waited) && w.take(early, waited.then(|| m.id.clone())).await? {
        drop(permit);
        give_up(
            app,
            &m,
            State::Revoked,
            Failure::new("Revoked", "revoked before it ran"),
        )
        .await?;
        return settle_late(app, receipt).await;
    }

    // A chord's callback collects its parts' results.
    let mut args = m.args.clone();
    if let Some(join) = &m.join {
        match collect(app, &join.parts).await {
            Ok(results) => {
                if !join.immutable {
                    args.insert(0, Value::Array(results));
                }
            }
            Err(f) => {
                drop(permit);
                give_up(app, &m, State::Failure, f).await?;
                return settle_late(app, receipt).await;
            }
        }
    }

    let ctx = Context {
        id: m.id.clone(),
        name: m.task.clone(),
        queue: m.queue.clone(),
        retries: m.retries,
        attempt: m.retries.saturating_add(1),
        last: m.retries >= policy.retries,
        now: app.now(),
        kwargs: m.kwargs.clone(),
        root_id: m.root_id.clone(),
        parent_id: m.parent_id.clone(),
    };
    let mut cancel = s.cancel.subscribe();
    let started = app.now();
    let call = body.call(ctx, args);
    let ran = tokio::select! {
        r = async {
            match policy.timeout {
                Some(ms) => match tokio::time::timeout(Duration::from_millis(ms as u64), call).await {
                    Ok(r) => r,
                    Err(_) => Err(Failure::new("TimeoutError", format!("the run took longer than its timeout of {ms} ms"))),
                },
                None => call.await,
            }
        } => match r {
            Ok(v) => Ran::Value(v),
            Err(f) => Ran::Failed(f),
        },
        _ = app.terminated(&m.id) => Ran::Terminated,
        _ = wait_true(&mut cancel) => Ran::Cancelled,
    };
    drop(permit);

    match ran {
        Ran::Value(v) => {
            let mut outcomes = Vec::new();
            if !policy.ignore_result || m.chord.is_some() || m.group.is_some() {
                let mut o = Outcome::new(m.id.clone(), State::Success, app.now());
                o.retries = m.retries;
                o.task = Some(m.task.clone());
                outcomes.push(o);
            }
            let ev = run_event(s, &m, State::Success, Some(started), || {
                serde_json::to_string(&v).ok()
            });
            // Nothing follows (no chain, no chord, no Celery `link`): the
            // result, the event and a late ack go out together, the ack
            // after the result.
            if !follows(&m) {
                if let Some(o) = outcomes.first_mut() {
                    o.result = Some(v);
                }
                let ack = policy.acks_late.then_some(receipt);
                return w.write(outcomes, ev, ack).await;
            }
            if let Some(o) = outcomes.first_mut() {
                o.result = Some(v.clone());
            }
            // Links before the result, the chord's arrival after it (its
            // callback reads the parts' results): a stored success means
            // the links were sent, so a redelivery does not send them twice.
            send_links(app, &m, v).await?;
            w.write(outcomes, ev, None).await?;
            arrive(app, &m).await?;
            settle_late(app, receipt).await
        }
        Ran::Failed(f) if m.retries < policy.retries => {
            let mut next = m.clone();
            next.retries = next.retries.saturating_add(1);
            let wait = policy.backoff_delay(next.retries.saturating_add(1), &m.id);
            next.eta = Some(app.now().saturating_add(wait));
            event(s, &m, State::Retry, Some(started), Some(failure_text(&f))).await;
            let mut o = Outcome::new(m.id.clone(), State::Retry, app.now());
            o.error = Some(f);
            o.retries = m.retries;
            o.task = Some(m.task.clone());
            app.store(vec![o]).await?;
            if policy.acks_late {
                broker.retry(receipt, next).await
            } else {
                broker.publish(vec![next]).await
            }
        }
        Ran::Failed(f) => {
            event(s, &m, State::Failure, Some(started), Some(failure_text(&f))).await;
            give_up(app, &m, State::Failure, f).await?;
            settle_late(app, receipt).await
        }
        Ran::Terminated => {
            give_up(
                app,
                &m,
                State::Revoked,
                Failure::new("Terminated", "terminated while running"),
            )
            .await?;
            settle_late(app, receipt).await
        }
        Ran::Cancelled => give_back(app, &m, receipt, !policy.acks_late).await,
    }
}

/// Records what happened to a run for admin pages, when the broker keeps a
/// log. A failure to record is not a failure of the run.
async fn event(
    s: &Shared,
    m: &Message,
    state: State,
    started: Option<i64>,
    detail: Option<String>,
) {
    if let Some(ev) = run_event(s, m, state, started, || detail)
        && let Some(insp) = s.app.inspector()
    {
        let _ = insp.record(vec![ev]).await;
    }
}

/// The event a run records, when the app has an inspector to keep it
/// (`detail` is only made then).
fn run_event(
    s: &Shared,
    m: &Message,
    state: State,
    started: Option<i64>,
    detail: impl FnOnce() -> Option<String>,
) -> Option<RunEvent> {
    s.app.inspector()?;
    let now = s.app.now();
    let args = serde_json::to_string(&m.args).unwrap_or_default();
    Some(RunEvent {
        id: m.id.clone(),
        task: m.task.clone(),
        state,
        at: now,
        worker: s.name.clone(),
        retries: m.retries,
        runtime: started.map(|t| now - t),
        args: truncate(args, EVENT_TEXT_MAX),
        detail: detail().map(|d| truncate(d, EVENT_TEXT_MAX)),
    })
}

/// How many gathered jobs the writer sends in one go at most.
const WRITE_BATCH: usize = 512;
/// How many of its rounds may be in flight at once. One: what arrives while
/// a round is out goes in the next, so under load each round carries more
/// (a Python drain on Redis: 17 µs of Redis CPU per task against 21–22 µs
/// with two in flight), while a lone write still goes out at once.
const WRITE_ROUNDS: usize = 1;
/// How many take rounds may be in flight at once. One, for the same reason:
/// with four, the Rust drain on Redis spent more CPU per task (smaller
/// rounds) and was no faster.
const TAKE_ROUNDS: usize = 1;

/// One run's writes or question, for the writer to gather with others'.
struct Job {
    outcomes: Vec<Outcome>,
    event: Option<RunEvent>,
    /// Settled after `outcomes` land (at once when there are none).
    ack: Option<Receipt>,
    /// An id whose revoked status is asked.
    ask: Option<String>,
    done: oneshot::Sender<Result<bool, Refused>>,
}

/// A run's way to the writer: two lanes, because a take holds a slot while
/// it waits and a write does not.
#[derive(Clone)]
struct Writer {
    writes: mpsc::UnboundedSender<Job>,
    takes: mpsc::UnboundedSender<Job>,
    /// Set when the grace is over: a write still failing then gives up.
    cancel: watch::Receiver<bool>,
    name: Arc<str>,
}

impl Writer {
    async fn send(
        lane: &mpsc::UnboundedSender<Job>,
        job: Job,
        rx: oneshot::Receiver<Result<bool, Refused>>,
    ) -> Result<bool, Refused> {
        lane.send(job)
            .map_err(|_| Refused::Broker("the worker's writer has stopped".into()))?;
        rx.await
            .map_err(|_| Refused::Broker("the worker's writer has stopped".into()))?
    }

    /// Stores `outcomes` and records `event`, then acks `ack`. A write the
    /// broker refuses (Redis away longer than its patience) is sent again,
    /// backing off, until it lands or the worker's grace is over: the run
    /// has finished, and giving its message back instead would run it
    /// twice.
    async fn write(
        &self,
        outcomes: Vec<Outcome>,
        event: Option<RunEvent>,
        ack: Option<Receipt>,
    ) -> Result<(), Refused> {
        if outcomes.is_empty() && event.is_none() && ack.is_none() {
            return Ok(());
        }
        let mut cancel = self.cancel.clone();
        let mut failures = 0u32;
        loop {
            let (done, rx) = oneshot::channel();
            let job = Job {
                outcomes: outcomes.clone(),
                event: event.clone(),
                ack: ack.clone(),
                ask: None,
                done,
            };
            self.writes
                .send(job)
                .map_err(|_| Refused::Broker("the worker's writer has stopped".into()))?;
            let e = match rx.await {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(e @ Refused::Broker(_))) if !*cancel.borrow() => e,
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(Refused::Broker("the worker's writer has stopped".into())),
            };
            failures += 1;
            if failures == 1 {
                warn(
                    &self.name,
                    &format!("could not store a finished run ({e}); retrying until it lands"),
                );
            }
            let wait = Duration::from_millis(50 << failures.min(6));
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = wait_true(&mut cancel) => {}
            }
        }
    }

    /// Acks `ack` and answers whether `ask` is revoked now (`false` when
    /// not asked), in one job.
    async fn take(&self, ack: Option<Receipt>, ask: Option<String>) -> Result<bool, Refused> {
        let (done, rx) = oneshot::channel();
        let job = Job {
            outcomes: Vec::new(),
            event: None,
            ack,
            ask,
            done,
        };
        Self::send(&self.takes, job, rx).await
    }
}

/// Gathers the runs' writes and questions: whatever is waiting when it
/// looks goes out as one round (one store, one record, one ack, one revoked
/// lookup, side by side), so under load there is about one round trip per
/// batch, while a lone run's write goes out at once — no timer. Takes (an
/// early ack, a revoked check before running) have a lane of their own: a
/// run waits on its take holding a slot, so a take does not queue behind a
/// round of results in flight; it goes out at once, pipelined on the same
/// connection.
async fn write_loop(
    app: App,
    writes: mpsc::UnboundedReceiver<Job>,
    takes: mpsc::UnboundedReceiver<Job>,
) {
    tokio::join!(
        lane(app.clone(), takes, TAKE_ROUNDS),
        lane(app, writes, WRITE_ROUNDS)
    );
}

/// One lane of the writer: gathers what waits into a round, up to `limit`
/// rounds in flight, until every sender is gone and its rounds are done.
async fn lane(app: App, mut jobs: mpsc::UnboundedReceiver<Job>, limit: usize) {
    let mut rounds = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            Some(_) = rounds.join_next(), if !rounds.is_empty() => {}
            got = jobs.recv(), if rounds.len() < limit => {
                let Some(first) = got else { break };
                // The first job's sender woke this task, and the scheduler
                // runs the task woken last first: yield once so the runs
                // woken with it (by the same reply, the same freed slots)
                // put their jobs in this round, not the next (the Rust drain
                // on Redis: 26k/s against 20k/s).
                tokio::task::yield_now().await;
                let mut batch = vec![first];
                while batch.len() < WRITE_BATCH {
                    match jobs.try_recv() {
                        Ok(j) => batch.push(j),
                        Err(_) => break,
                    }
                }
                rounds.spawn(write_round(app.clone(), batch));
            }
        }
    }
    while rounds.join_next().await.is_some() {}
}

/// Whether the broker is also the app's result store and event log (one
/// object behind the seams), so a round can go to it whole.
fn fused(app: &App) -> bool {
    let me = Arc::as_ptr(app.broker()) as *const u8;
    app.backend()
        .is_some_and(|b| Arc::as_ptr(b) as *const u8 == me)
        && app
            .inspector()
            .is_none_or(|i| Arc::as_ptr(i) as *const u8 == me)
}

async fn write_round(app: App, batch: Vec<Job>) {
    let broker = app.broker();
    let mut r = Round::default();
    let mut replies = Vec::with_capacity(batch.len());
    for j in batch {
        let stores = !j.outcomes.is_empty();
        if let Some(a) = j.ack {
            if stores {
                // Acked once the run's last outcome is stored.
                r.after.push((r.outcomes.len() + j.outcomes.len() - 1, a))
            } else {
                r.acks.push(a)
            }
        }
        let asked = j.ask.is_some();
        r.ask.extend(j.ask);
        r.outcomes.extend(j.outcomes);
        r.events.extend(j.event);
        replies.push((j.done, stores, asked));
    }
    // One call when the broker takes the round whole; else side by side.
    let r = if fused(&app) {
        match broker.round(r) {
            Ok(call) => {
                let got = call.await;
                let mut looked = got.as_ref().map(|v| v.iter());
                for (done, _, asked) in replies {
                    let _ = done.send(match &mut looked {
                        Ok(it) => Ok(asked && it.next().copied().unwrap_or(false)),
                        Err(e) => Err(e.clone()),
                    });
                }
                return;
            }
            Err(r) => r,
        }
    } else {
        r
    };
    let Round {
        outcomes,
        events,
        acks: bare,
        after,
        ask: ids,
    } = r;
    let (stored, acked, revoked, _) = tokio::join!(
        async {
            if outcomes.is_empty() {
                Ok(())
            } else {
                app.store(outcomes).await
            }
        },
        async {
            if bare.is_empty() {
                Ok(())
            } else {
                broker.ack(bare).await
            }
        },
        async {
            if ids.is_empty() {
                Ok(Vec::new())
            } else {
                broker.revoked(&ids).await
            }
        },
        async {
            if let Some(i) = app.inspector()
                && !events.is_empty()
            {
                let _ = i.record(events).await;
            }
        },
    );
    let late = match &stored {
        Ok(()) if !after.is_empty() => {
            broker
                .ack(after.into_iter().map(|(_, a)| a).collect())
                .await
        }
        _ => Ok(()),
    };
    let mut looked = revoked.as_ref().map(|v| v.iter());
    for (done, stores, asked) in replies {
        let r = if asked {
            match &mut looked {
                Ok(it) => Ok(it.next().copied().unwrap_or(false)),
                Err(e) => Err(e.clone()),
            }
        } else if stores {
            stored.clone().and_then(|_| late.clone()).map(|_| false)
        } else {
            acked.clone().map(|_| false)
        };
        let _ = done.send(r);
    }
}

fn failure_text(f: &Failure) -> String {
    match &f.traceback {
        Some(tb) => format!("{f}\n{tb}"),
        None => f.to_string(),
    }
}

/// Resolves once the flag is true (at once if it already is).
async fn wait_true(rx: &mut watch::Receiver<bool>) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Gives a message back for another worker: a claim not yet acked is
/// rejected onto its queue; one acked early is published again.
async fn give_back(
    app: &App,
    m: &Message,
    receipt: super::spec::Receipt,
    acked: bool,
) -> Result<(), Refused> {
    if acked {
        app.broker().publish(vec![m.clone()]).await
    } else {
        app.broker().reject(receipt, true).await
    }
}

/// The parts' results, in order, or why the callback cannot run.
async fn collect(app: &App, parts: &[String]) -> Result<Vec<Value>, Failure> {
    let Some(b) = app.backend() else {
        return Err(Failure::new("ChordError", "a chord needs a result store"));
    };
    let mut out = Vec::with_capacity(parts.len());
    for id in parts {
        match b.fetch(id).await {
            Ok(Some(o)) if o.state == State::Success => out.push(o.result.unwrap_or(Value::Null)),
            Ok(Some(o)) => {
                let why = o
                    .error
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| o.state.to_string());
                return Err(Failure::new(
                    "ChordError",
                    format!("dependency {id} did not succeed: {why}"),
                ));
            }
            Ok(None) => {
                return Err(Failure::new(
                    "ChordError",
                    format!("dependency {id} has no result"),
                ));
            }
            Err(e) => return Err(Failure::new("ChordError", e.to_string())),
        }
    }
    Ok(out)
}

/// Sends the Celery `link` (`errors` false) or `link_error` callbacks `m`
/// carries, given `arg`, as Celery 5.5 sends them (see
/// [`crate::broker::celery::codec::apply_links`]). A signature that cannot
/// be read is logged and skipped, as it cannot be run anywhere.
async fn celery_links(app: &App, m: &Message, arg: Value, errors: bool) -> Result<(), Refused> {
    let Some(c) = m.carried.as_deref() else {
        return Ok(());
    };
    let (sigs, grouped) = if errors {
        (&c.errbacks, true)
    } else {
        (&c.callbacks, c.callbacks.len() > 1)
    };
    if sigs.is_empty() {
        return Ok(());
    }
    let (out, bad) =
        crate::broker::celery::codec::apply_links(sigs, &arg, m, grouped, |s| app.message_of(s));
    for e in bad {
        eprintln!(
            "headway worker: a callback of {} was not sent: {}",
            shown(&m.id),
            shown(&e.to_string())
        );
    }
    if out.is_empty() {
        return Ok(());
    }
    app.broker().publish(out).await
}

/// What follows a success: Celery `link` callbacks, then the chain's next
/// link ([`send_links`]), or the chord's arrival ([`arrive`]).
/// Whether those have anything to do for a success of `m`: a Celery
/// `link`, a chain's next link, or a chord arrival. Kept beside them so
/// the batched fast path (result, event and late ack in one write) never
/// skips a follow-up kind that they learn.
fn follows(m: &Message) -> bool {
    !m.chain.is_empty()
        || m.chord.is_some()
        || m.carried
            .as_deref()
            .is_some_and(|c| !c.callbacks.is_empty())
}

/// Sends a success's Celery `link` callbacks and its chain's next link.
async fn send_links(app: &App, m: &Message, value: Value) -> Result<(), Refused> {
    celery_links(app, m, value.clone(), false).await?;
    if let Some((next, rest)) = m.chain.split_first() {
        let mut n = app.message_of(next);
        if !next.immutable {
            n.args.insert(0, value);
        }
        // A Celery chain link's own `link`/`link_error` travel with it.
        crate::broker::celery::codec::carry_links(&next.extra, &mut n);
        n.chain = rest.to_vec();
        n.chord = m.chord.clone();
        n.root_id = Some(m.root_id.clone().unwrap_or_else(|| m.id.clone()));
        n.parent_id = Some(m.id.clone());
        n.group = m.group.clone();
        n.group_index = m.group_index;
        return app.broker().publish(vec![n]).await;
    }
    Ok(())
}

/// A success's chord arrival; none when a chain follows it (its last link
/// carries the chord).
async fn arrive(app: &App, m: &Message) -> Result<(), Refused> {
    if !m.chain.is_empty() {
        return Ok(());
    }
    if let Some(chord) = &m.chord {
        let counter = app
            .inner
            .counter
            .as_ref()
            .ok_or_else(|| Refused::Invalid("a chord needs an app with a counter".into()))?;
        let mut cb = (*chord.callback).clone();
        cb.root_id = Some(m.root_id.clone().unwrap_or_else(|| m.id.clone()));
        if counter.arrive(&chord.key, &m.id, chord.size, &cb).await? == super::spec::Joined::Last {
            app.broker().publish(vec![cb]).await?;
        }
    }
    Ok(())
}

/// Records a run that will not succeed, and everything waiting on it: the
/// rest of its chain, and its chord's callback (with that callback's chain).
/// A failure (not a revoke, and not an unregistered name, as with Celery)
/// then sends its Celery `link_error` callbacks with its id.
async fn give_up(app: &App, m: &Message, state: State, f: Failure) -> Result<(), Refused> {
    record_given_up(app, m, state, &f).await?;
    if state == State::Failure && f.kind != "NotRegistered" {
        celery_links(app, m, Value::String(m.id.clone()), true).await?;
    }
    Ok(())
}

async fn record_given_up(app: &App, m: &Message, state: State, f: &Failure) -> Result<(), Refused> {
    let now = app.now();
    let mut o = Outcome::new(m.id.clone(), state, now);
    o.retries = m.retries;
    o.task = Some(m.task.clone());
    o.error = Some(f.clone());
    let mut all = vec![o];
    let because = Failure::new(
        if state == State::Failure {
            f.kind.clone()
        } else {
            "Revoked".into()
        },
        format!("an earlier link ({}) did not succeed: {}", m.id, f),
    );
    for s in &m.chain {
        if let Some(id) = &s.id {
            let mut o = Outcome::new(id.clone(), state, now);
            o.task = Some(s.task.clone());
            o.error = Some(because.clone());
            all.push(o);
        }
    }
    if let Some(chord) = &m.chord {
        let cb = &chord.callback;
        let cf = Failure::new(
            "ChordError",
            format!("dependency {} did not succeed: {}", m.id, f),
        );
        let mut o = Outcome::new(cb.id.clone(), State::Failure, now);
        o.task = Some(cb.task.clone());
        o.error = Some(cf.clone());
        all.push(o);
        for s in &cb.chain {
            if let Some(id) = &s.id {
                let mut o = Outcome::new(id.clone(), State::Failure, now);
                o.task = Some(s.task.clone());
                o.error = Some(cf.clone());
                all.push(o);
            }
        }
    }
    app.store(all).await
}
