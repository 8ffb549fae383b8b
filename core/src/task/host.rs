//! Bodies that run in a host language, called in batches.
//!
//! A Python or JS body cannot run on a tokio thread: Python needs the GIL and
//! JS needs its own event-loop thread. Crossing into the host once per message
//! costs more than a no-op body does (a GIL attach, a ThreadsafeFunction
//! call), so the core does not call the host per message. A [`HostQueue`]
//! collects calls; the host takes them in batches — one GIL attach or one
//! napi call per batch — runs them, and hands results back in a batch.
//!
//! Both bindings use this one mechanism, so how a body is called, cancelled
//! and answered cannot differ between Python and Node:
//! - a Python runner thread blocks in [`HostQueue::take_blocking`] with the
//!   GIL released, then attaches once and runs what it got;
//! - the Node event loop is rung by the `bell` when calls arrive, and drains
//!   with [`HostQueue::take`].
//!
//! When the core stops waiting for a call (a timeout, a terminate, a
//! stopping worker) the call is withdrawn: if the host has not taken it yet it
//! never runs; if it has, its id is reported by [`HostQueue::cancelled`] so an
//! async body can be cancelled, and its late answer is discarded. On a queue
//! whose host staffed runner threads ([`HostQueue::runners`]), a taken call
//! withdrawn is *abandoned*: its thread is stuck in it until it returns, and
//! the queue's [`Runners`] ledger has it replaced, within a cap.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::oneshot;

use super::body::{Body, Context, Slot};
use super::clock::BoxFuture;
use super::runners::Runners;
use super::state::Failure;
use crate::hashed::{HashMap, HashSet};

/// How long a runner thread that ran out of calls should look for the next
/// before it sleeps, learned from the gaps it has seen (sans-I/O: the
/// runner measures, this decides).
///
/// Why learned: when calls come back to back (the memory broker, a full
/// prefetch) the next arrives microseconds after an answer, and a short
/// spin catches it without a sleep and a wake-up; the memory drain of
/// no-op Python bodies ran 41-44 k/s with a 100 µs spin against 29 k/s
/// without one. When each call waits on a broker round trip (a Redis
/// drain at the default concurrency), the gaps are 100 µs and more, the
/// spin nearly always runs out, and it burns a core the broker and the
/// core's threads need: on the same 2-core machine a Redis drain ran
/// 8.3-8.8 k/s spinning against 9.3-9.9 k/s not, with 15 µs less runner
/// CPU per task. So a runner spins while the recent gaps (a moving average)
/// are shorter than the spin would wait, and sleeps at once otherwise; a
/// sleep's gap still counts, so a runner finds its way back to spinning
/// when calls crowd again.
///
/// A gap ends when the next call was queued, not when the runner got to
/// it ([`Taker`]): counted to its own wake-up (60-100 µs on a 2-vCPU VM)
/// a runner that once slept measured gaps as long as the wake-up and
/// seldom spun again. Six alternating pairs of 40 000-run no-op drains on
/// a private Redis, medians: Python 46.1k → 54.8k/s (its runner threads'
/// sleeps per task 0.49-0.73 → 0.30-0.38), Node 38.0k → 41.4k/s (the
/// event loop's 0.07-0.22 → 0.02-0.04).
#[derive(Debug, Clone)]
pub struct Idle {
    /// Moving average of the gaps, in ns (each new gap weighs a quarter).
    avg: u64,
}

impl Idle {
    /// The longest spin.
    pub const SPIN: Duration = Duration::from_micros(100);

    /// A runner that has seen nothing yet: it spins.
    pub fn new() -> Idle {
        Idle { avg: 0 }
    }

    /// How long to spin before sleeping (zero: sleep at once).
    pub fn spin(&self) -> Duration {
        if self.avg < Self::SPIN.as_nanos() as u64 {
            Self::SPIN
        } else {
            Duration::ZERO
        }
    }

    /// The runner ran out of calls `gap` before its next arrived (by spin
    /// or by sleep and wake).
    pub fn saw(&mut self, gap: Duration) {
        // Capped, so an idle minute is forgotten after a few short gaps.
        let g = gap.min(Self::SPIN * 10).as_nanos() as u64;
        self.avg = self.avg - self.avg / 4 + g / 4;
    }
}

impl Default for Idle {
    fn default() -> Idle {
        Idle::new()
    }
}

/// How a host thread takes calls (a Python runner thread, the JS event loop
/// between batches): at once, and when none wait and its [`Idle`] says the
/// next is near, by spinning for it rather than going back to sleep until
/// it is woken or rung. The gap to the next call counts either way.
///
/// Why: at the default concurrency a batch is a few calls, and the next
/// comes a few microseconds after the batch's answers free their slots; a
/// Node worker that slept between batches paid two wake-ups (its own and
/// the runtime thread's) per batch.
#[derive(Debug, Default)]
pub struct Taker {
    idle: Idle,
    ran_out: Option<Instant>,
}

impl Taker {
    /// Whether a take that finds nothing would spin now.
    pub fn spinning(&self) -> bool {
        !self.idle.spin().is_zero()
    }

    /// Up to `max` calls from `q`; empty when none came.
    pub fn take(&mut self, q: &HostQueue, max: usize) -> Vec<Call> {
        self.take_with(q, max, |spin| q.spin_for(spin))
    }

    /// As [`Taker::take`], spinning through `spin_for` (which answers
    /// [`HostQueue::spin_for`]): a Python runner releases the GIL around it.
    pub fn take_with(
        &mut self,
        q: &HostQueue,
        max: usize,
        spin_for: impl FnOnce(Duration) -> bool,
    ) -> Vec<Call> {
        let (calls, filled) = q.take_filled(max);
        if !calls.is_empty() {
            if let Some(t) = self.ran_out.take() {
                self.idle.saw(gap(t, filled));
            }
            return calls;
        }
        let t = *self.ran_out.get_or_insert_with(Instant::now);
        let spin = self.idle.spin();
        if !spin.is_zero() && spin_for(spin) {
            self.ran_out = None;
            let (calls, filled) = q.take_filled(max);
            self.idle.saw(gap(t, filled));
            return calls;
        }
        Vec::new()
    }
}

/// How long after `ran_out` the next call came: when it was queued, not
/// when the taker noticed. A taker that slept between the two would
/// otherwise count its own wake-up (60-100 µs on a 2-vCPU VM) as the gap,
/// and with it never learn that a spin would have caught the call.
fn gap(ran_out: Instant, filled: Option<Instant>) -> Duration {
    match filled {
        Some(f) => f.saturating_duration_since(ran_out),
        None => ran_out.elapsed(),
    }
}

/// One call for the host to make.
#[derive(Debug, Clone)]
pub struct Call {
    /// The call's number, to answer it by.
    pub seq: u64,
    /// The key the body was registered under (the task's name).
    pub key: Arc<str>,
    /// What the body is told about the run.
    pub ctx: Context,
    /// Positional arguments.
    pub args: Vec<Value>,
}

/// Where a call's answer goes.
pub(crate) type Reply = oneshot::Sender<Result<Value, Failure>>;

/// How many calls are out to a host — queued or taken, not yet answered or
/// withdrawn — across every queue in the process: while any is, an answer
/// from another thread is coming, and the runtime's thread looks for it
/// before it sleeps (`runtime::ParkSpin`); while none is, what wakes it
/// next is I/O, which a look would only delay.
static CALLS_OUT: AtomicUsize = AtomicUsize::new(0);

/// How many calls are out to a host in this process (see [`CALLS_OUT`]).
pub fn calls_out() -> usize {
    CALLS_OUT.load(Ordering::Relaxed)
}

/// A call's answer channel while the call is out, counted in
/// [`CALLS_OUT`] for as long as it lives: however it leaves the queue's
/// map (answered, withdrawn, closed, dropped with the queue), the count
/// goes down once.
///
/// It also holds the worker's slot the call's run took, if the run gave it
/// (`Body::call_holding`): freed as the answer is sent, on the host's
/// thread, so the run waiting for that slot is woken at once — not after
/// the answered run's task has been woken to free it. At the default
/// concurrency a Node drain's host waited through that second wake-up
/// for its next batch.
struct Out(Option<Reply>, Option<Slot>);

impl Out {
    fn new(tx: Reply, slot: Option<Slot>) -> Out {
        CALLS_OUT.fetch_add(1, Ordering::Relaxed);
        Out(Some(tx), slot)
    }

    /// Frees the slot (first: the run waiting for it is woken before the
    /// answered run) and sends the answer.
    fn send(mut self, r: Result<Value, Failure>) {
        self.1 = None;
        if let Some(tx) = self.0.take() {
            let _ = tx.send(r);
        }
    }
}

impl Drop for Out {
    fn drop(&mut self) {
        CALLS_OUT.fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Default)]
struct Inner {
    queue: VecDeque<Call>,
    waiting: HashMap<u64, Out>,
    cancelled: Vec<u64>,
    /// Taken calls withdrawn on a staffed queue, until their late answer.
    abandoned: HashSet<u64>,
    seq: u64,
    closed: bool,
    /// Threads asleep in `take_blocking`. A push rings the condvar only
    /// when one is: a notify is a futex syscall even with nobody waiting,
    /// and a busy runner is never asleep.
    sleepers: usize,
    /// Taken calls past their soft time limit, for the host to interrupt.
    softened: Vec<u64>,
    /// When the queue last went from empty to holding a call.
    filled: Option<Instant>,
    /// A host is inside [`HostQueue::swap`]: it takes after it answers, so
    /// a call pushed meanwhile does not ring the bell.
    taking: bool,
}

/// Calls waiting for a host language, and their answers.
pub struct HostQueue {
    inner: Mutex<Inner>,
    arrived: Condvar,
    /// Rung when a call passes its soft limit (`softened_blocking`).
    soft: Condvar,
    bell: Mutex<Option<Arc<dyn Fn() + Send + Sync>>>,
    runners: Arc<Runners>,
}

impl Default for HostQueue {
    fn default() -> Self {
        HostQueue {
            inner: Mutex::new(Inner::default()),
            arrived: Condvar::new(),
            soft: Condvar::new(),
            bell: Mutex::new(None),
            runners: Runners::new(),
        }
    }
}

impl HostQueue {
    /// An empty queue.
    pub fn new() -> Arc<HostQueue> {
        Arc::new(HostQueue::default())
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The ledger of the threads serving it: a host with runner threads
    /// staffs them here and starts the replacements it answers.
    pub fn runners(&self) -> &Arc<Runners> {
        &self.runners
    }

    /// Sets what is called when calls arrive on an empty queue (Node: a
    /// ThreadsafeFunction that wakes the event loop). Called with no lock
    /// held, at most once per batch that finds the queue empty.
    pub fn set_bell(&self, bell: Option<Arc<dyn Fn() + Send + Sync>>) {
        *self.bell.lock().unwrap_or_else(|e| e.into_inner()) = bell;
    }

    /// A body that queues its calls here under `key`.
    pub fn body(self: &Arc<Self>, key: &str) -> Arc<dyn Body> {
        Arc::new(HostBody {
            queue: self.clone(),
            key: Arc::from(key),
        })
    }

    fn push(
        &self,
        key: Arc<str>,
        ctx: Context,
        args: Vec<Value>,
        slot: Option<Slot>,
    ) -> Result<(u64, oneshot::Receiver<Result<Value, Failure>>), Failure> {
        // On a closed queue `push_reply` answers the call `WorkerLost` at
        // once, which the receiver then gives: one lock a push.
        let (tx, rx) = oneshot::channel();
        Ok((self.push_reply(key, ctx, args, slot, tx), rx))
    }

    /// Queues a call answered on `reply` (a run handed over from the deck),
    /// holding `slot`: its number. On a closed queue the reply is
    /// `WorkerLost` at once (and the number 0, which names no call).
    pub(crate) fn push_reply(
        &self,
        key: Arc<str>,
        ctx: Context,
        args: Vec<Value>,
        slot: Option<Slot>,
        tx: Reply,
    ) -> u64 {
        let mut was_empty;
        let seq;
        let wake;
        {
            let mut g = self.lock();
            if g.closed {
                drop(g);
                // The slot first, outside the lock: it may hand the next
                // run on deck here, which fails the same way.
                drop(slot);
                let _ = tx.send(Err(Failure::new(
                    "WorkerLost",
                    "the host runner has stopped",
                )));
                return 0;
            }
            g.seq += 1;
            seq = g.seq;
            was_empty = g.queue.is_empty();
            if was_empty {
                g.filled = Some(Instant::now());
            }
            g.queue.push_back(Call {
                seq,
                key,
                ctx,
                args,
            });
            g.waiting.insert(seq, Out::new(tx, slot));
            wake = g.sleepers > 0;
            was_empty &= !g.taking;
        }
        if wake {
            self.arrived.notify_one();
        }
        if was_empty {
            self.ring();
        }
        seq
    }

    fn ring(&self) {
        let bell = self.bell.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(b) = bell {
            b();
        }
    }

    /// Answers `results`, then takes up to `max` calls through `taker`: what
    /// a host rung by the bell does between batches (Node's event loop), in
    /// one step. A call pushed meanwhile — a run on deck handed over by a
    /// slot an answer freed, one arriving while the taker spins — is taken
    /// here without ringing the bell, which would wake the host to find
    /// nothing (on a JS drain at the defaults every batch's answers hand
    /// the next runs over); one that comes after the last take, when it
    /// took nothing, rings it as before.
    pub fn swap(
        &self,
        results: Vec<(u64, Result<Value, Failure>)>,
        taker: &mut Taker,
        max: usize,
    ) -> Vec<Call> {
        self.lock().taking = true;
        self.finish_many(results);
        let calls = taker.take(self, max);
        let missed = {
            let mut g = self.lock();
            g.taking = false;
            calls.is_empty() && !g.queue.is_empty()
        };
        if missed {
            self.ring();
        }
        calls
    }

    /// Stops waiting for call `seq`: not run if not taken yet, reported
    /// `cancelled` if it was.
    pub(crate) fn withdraw(&self, seq: u64) {
        let mut g = self.lock();
        // Dropped after the lock: its slot may hand a run on deck over to
        // this queue.
        let out = g.waiting.remove(&seq);
        if out.is_some() {
            if let Some(i) = g.queue.iter().position(|c| c.seq == seq) {
                g.queue.remove(i);
            } else {
                g.cancelled.push(seq);
                if self.runners.staffed() && g.abandoned.insert(seq) {
                    self.runners.abandon();
                }
            }
        }
        drop(g);
        drop(out);
    }

    /// Up to `max` calls, at once (empty when there are none).
    pub fn take(&self, max: usize) -> Vec<Call> {
        self.take_filled(max).0
    }

    /// As [`HostQueue::take`], with when the queue last went from empty to
    /// holding a call (what a [`Taker`] counts its gap to).
    fn take_filled(&self, max: usize) -> (Vec<Call>, Option<Instant>) {
        let mut g = self.lock();
        let n = max.min(g.queue.len());
        (g.queue.drain(..n).collect(), g.filled)
    }

    /// Up to `max` calls, waiting up to `wait` for the first. Empty when the
    /// wait ran out or the queue was closed. Blocks the thread: a Python
    /// runner calls it with the GIL released.
    pub fn take_blocking(&self, max: usize, wait: Duration) -> Vec<Call> {
        let deadline = Instant::now() + wait;
        let mut g = self.lock();
        loop {
            if !g.queue.is_empty() || g.closed {
                let n = max.min(g.queue.len());
                return g.queue.drain(..n).collect();
            }
            let now = Instant::now();
            if now >= deadline {
                return Vec::new();
            }
            g.sleepers += 1;
            g = self
                .arrived
                .wait_timeout(g, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            g.sleepers -= 1;
        }
    }

    /// Answers call `seq`. A call the core stopped waiting for is dropped;
    /// `true` when it was abandoned (its thread was counted stuck, and may
    /// now be one too many: see [`Runners::retire`]).
    pub fn finish(&self, seq: u64, result: Result<Value, Failure>) -> bool {
        let (tx, late) = {
            let mut g = self.lock();
            match g.waiting.remove(&seq) {
                Some(tx) => (Some(tx), false),
                None => (None, g.abandoned.remove(&seq)),
            }
        };
        if let Some(tx) = tx {
            tx.send(result);
        }
        if late {
            self.runners.returned();
        }
        late
    }

    /// Answers many calls under one lock.
    pub fn finish_many(&self, results: Vec<(u64, Result<Value, Failure>)>) {
        let mut late = 0;
        let txs: Vec<(Out, Result<Value, Failure>)> = {
            let mut g = self.lock();
            let mut txs = Vec::with_capacity(results.len());
            for (seq, r) in results {
                match g.waiting.remove(&seq) {
                    Some(tx) => txs.push((tx, r)),
                    None => late += usize::from(g.abandoned.remove(&seq)),
                }
            }
            txs
        };
        for _ in 0..late {
            self.runners.returned();
        }
        // Every slot first: the runs waiting for them start queueing the
        // next calls while the answered runs are still being woken.
        let mut txs = txs;
        for (tx, _) in &mut txs {
            tx.1 = None;
        }
        for (tx, r) in txs {
            tx.send(r);
        }
    }

    /// Calls the host took that the core no longer waits for (drained): an
    /// async body among them should be cancelled.
    pub fn cancelled(&self) -> Vec<u64> {
        std::mem::take(&mut self.lock().cancelled)
    }

    /// Marks call `seq` past its soft time limit, if the host took it and
    /// it has not answered: the host raises `SoftTimeLimitExceeded` in it
    /// (a Python thread) or aborts its signal (JS).
    fn soften(&self, seq: u64) {
        {
            let mut g = self.lock();
            if !g.waiting.contains_key(&seq) || g.queue.iter().any(|c| c.seq == seq) {
                return;
            }
            g.softened.push(seq);
        }
        self.soft.notify_all();
        self.ring();
    }

    /// Calls past their soft time limit since the last ask (drained).
    pub fn softened(&self) -> Vec<u64> {
        std::mem::take(&mut self.lock().softened)
    }

    /// Like [`HostQueue::softened`], waiting up to `wait` for one. Blocks
    /// the thread: a Python thread calls it with the GIL released.
    pub fn softened_blocking(&self, wait: Duration) -> Vec<u64> {
        let deadline = Instant::now() + wait;
        let mut g = self.lock();
        loop {
            if !g.softened.is_empty() || g.closed {
                return std::mem::take(&mut g.softened);
            }
            let now = Instant::now();
            if now >= deadline {
                return Vec::new();
            }
            g = self
                .soft
                .wait_timeout(g, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Whether a call arrived within `spin`, looked for without sleeping (a
    /// yield every 16 looks): what a runner that ran out of calls does
    /// before it sleeps, when its [`Idle`] says the next call is near.
    pub fn spin_for(&self, spin: Duration) -> bool {
        let until = Instant::now() + spin;
        let mut i = 0u32;
        loop {
            if !self.is_empty() {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            i += 1;
            if i.is_multiple_of(16) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Calls waiting to be taken.
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// Whether no call is waiting to be taken.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Closes the queue: blocked takers wake with nothing, and every call not
    /// yet answered fails with `WorkerLost` (its message is given back by the
    /// worker's stop, or recovered by the broker).
    pub fn close(&self) {
        let waiting: Vec<Out> = {
            let mut g = self.lock();
            g.closed = true;
            g.queue.clear();
            g.waiting.drain().map(|(_, tx)| tx).collect()
        };
        self.arrived.notify_all();
        self.soft.notify_all();
        for tx in waiting {
            tx.send(Err(Failure::new(
                "WorkerLost",
                "the host runner has stopped",
            )));
        }
    }

    /// Whether it was closed.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }
}

struct HostBody {
    queue: Arc<HostQueue>,
    key: Arc<str>,
}

/// Withdraws the call when the core stops waiting before it is answered.
struct Withdraw {
    queue: Arc<HostQueue>,
    seq: u64,
    armed: bool,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        if self.armed {
            self.queue.withdraw(self.seq);
        }
    }
}

impl Body for HostBody {
    fn host(&self) -> Option<(Arc<HostQueue>, Arc<str>)> {
        Some((self.queue.clone(), self.key.clone()))
    }

    fn runners(&self) -> Option<Arc<Runners>> {
        Some(self.queue.runners.clone())
    }

    fn call(&self, ctx: Context, args: Vec<Value>) -> BoxFuture<'static, Result<Value, Failure>> {
        self.call_holding(ctx, args, &mut None)
    }

    fn call_holding(
        &self,
        ctx: Context,
        args: Vec<Value>,
        slot: &mut Option<Slot>,
    ) -> BoxFuture<'static, Result<Value, Failure>> {
        let soft = ctx.soft_time_limit;
        let pushed = self.queue.push(self.key.clone(), ctx, args, slot.take());
        let queue = self.queue.clone();
        Box::pin(async move {
            let (seq, mut rx) = pushed?;
            let mut guard = Withdraw {
                queue,
                seq,
                armed: true,
            };
            let r = match soft {
                None => rx.await,
                Some(ms) => {
                    let limit = tokio::time::sleep(Duration::from_millis(ms.max(1) as u64));
                    tokio::select! {
                        r = &mut rx => r,
                        _ = limit => {
                            guard.queue.soften(seq);
                            rx.await
                        }
                    }
                }
            };
            guard.armed = false;
            r.unwrap_or_else(|_| Err(Failure::new("WorkerLost", "the host runner has stopped")))
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn ctx() -> Context {
        Context::direct("i".into(), "t".into(), "q".into(), 0)
    }

    #[tokio::test]
    async fn batches_and_answers() {
        let q = HostQueue::new();
        let rung = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let r2 = rung.clone();
        q.set_bell(Some(Arc::new(move || {
            r2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        })));
        let b = q.body("t");
        let f1 = tokio::spawn(b.call(ctx(), vec![json!(1)]));
        let f2 = tokio::spawn(b.call(ctx(), vec![json!(2)]));
        tokio::task::yield_now().await;
        let q2 = q.clone();
        let calls =
            tokio::task::spawn_blocking(move || q2.take_blocking(10, Duration::from_secs(1)))
                .await
                .unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(&*calls[0].key, "t");
        q.finish_many(
            calls
                .iter()
                .map(|c| (c.seq, Ok(c.args[0].clone())))
                .collect(),
        );
        let mut got = vec![f1.await.unwrap().unwrap(), f2.await.unwrap().unwrap()];
        got.sort_by_key(|v| v.as_i64());
        assert_eq!(got, vec![json!(1), json!(2)]);
        assert!(rung.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    }

    #[tokio::test]
    async fn dropped_calls_are_withdrawn_or_reported() {
        let q = HostQueue::new();
        let b = q.body("t");
        // Not yet taken: withdrawn, never runs.
        let f = b.call(ctx(), vec![]);
        let mut f = Box::pin(f);
        assert!(futures_poll_once(&mut f).await);
        drop(f);
        assert!(q.take(10).is_empty());
        // Taken: reported as cancelled; a late answer is discarded.
        let f = b.call(ctx(), vec![]);
        let mut f = Box::pin(f);
        assert!(futures_poll_once(&mut f).await);
        let calls = q.take(10);
        assert_eq!(calls.len(), 1);
        drop(f);
        assert_eq!(q.cancelled(), vec![calls[0].seq]);
        q.finish(calls[0].seq, Ok(json!(1)));
    }

    /// A run's slot goes with its call and is freed as the host answers —
    /// before the run's task is polled again — and freed too when the call
    /// is withdrawn or the queue closes.
    #[tokio::test]
    async fn a_calls_slot_is_freed_as_the_host_answers() {
        let q = HostQueue::new();
        let b = q.body("t");
        let slots = Arc::new(tokio::sync::Semaphore::new(2));
        let held = |sem: &Arc<tokio::sync::Semaphore>| {
            Some(Slot::plain(sem.clone().try_acquire_owned().unwrap()))
        };
        // Answered: free once `finish_many` returns, the future not polled.
        let mut slot = held(&slots);
        let mut f = Box::pin(b.call_holding(ctx(), vec![json!(1)], &mut slot));
        assert!(slot.is_none(), "the host body took the slot");
        assert!(futures_poll_once(&mut f).await);
        assert_eq!(slots.available_permits(), 1, "held while the call is out");
        let c = q.take(1);
        q.finish_many(vec![(c[0].seq, Ok(json!(1)))]);
        assert_eq!(slots.available_permits(), 2, "freed by the answer");
        assert_eq!(f.await.unwrap(), json!(1));
        // Answered one by one.
        let mut slot = held(&slots);
        let f = tokio::spawn(b.call_holding(ctx(), vec![], &mut slot));
        tokio::task::yield_now().await;
        let c = q.take_blocking(1, Duration::from_secs(5));
        q.finish(c[0].seq, Ok(json!(2)));
        assert_eq!(slots.available_permits(), 2);
        assert_eq!(f.await.unwrap().unwrap(), json!(2));
        // Withdrawn (the run stopped waiting): freed with it.
        let mut slot = held(&slots);
        let mut f = Box::pin(b.call_holding(ctx(), vec![], &mut slot));
        assert!(futures_poll_once(&mut f).await);
        assert_eq!(slots.available_permits(), 1);
        drop(f);
        assert_eq!(slots.available_permits(), 2, "freed by the withdrawal");
        // Closed: freed as the call fails.
        let mut slot = held(&slots);
        let f = tokio::spawn(b.call_holding(ctx(), vec![], &mut slot));
        tokio::task::yield_now().await;
        assert_eq!(slots.available_permits(), 1);
        q.close();
        assert_eq!(slots.available_permits(), 2, "freed by the close");
        assert_eq!(f.await.unwrap().unwrap_err().kind, "WorkerLost");
        // A Rust body leaves the slot to the worker.
        let rust = crate::task::body::body(|_, _| async { Ok(json!(3)) });
        let mut slot = held(&slots);
        assert_eq!(
            rust.call_holding(ctx(), vec![], &mut slot).await.unwrap(),
            json!(3)
        );
        assert!(slot.is_some());
    }

    #[tokio::test]
    async fn close_fails_what_waits() {
        let q = HostQueue::new();
        let b = q.body("t");
        let f = tokio::spawn(b.call(ctx(), vec![]));
        tokio::task::yield_now().await;
        q.close();
        assert_eq!(f.await.unwrap().unwrap_err().kind, "WorkerLost");
        assert!(q.take_blocking(1, Duration::from_secs(5)).is_empty());
        assert_eq!(b.call(ctx(), vec![]).await.unwrap_err().kind, "WorkerLost");
    }

    #[tokio::test]
    async fn a_taken_call_withdrawn_on_a_staffed_queue_is_abandoned_until_it_returns() {
        let q = HostQueue::new();
        let b = q.body("t");
        assert!(Arc::ptr_eq(&b.runners().unwrap(), q.runners()));
        // Unstaffed (an event loop, a pump): a withdrawn call holds no thread.
        let mut f = Box::pin(b.call(ctx(), vec![]));
        assert!(futures_poll_once(&mut f).await);
        let c = q.take(1);
        drop(f);
        assert_eq!(q.runners().health().stuck, 0);
        assert!(!q.finish(c[0].seq, Ok(json!(1))));
        // Staffed: the thread running it is stuck until the late answer.
        q.runners().staff(1);
        let mut f = Box::pin(b.call(ctx(), vec![]));
        assert!(futures_poll_once(&mut f).await);
        let c = q.take(1);
        drop(f);
        assert_eq!(q.runners().health().stuck, 1);
        assert_eq!(q.runners().hire(Duration::ZERO), 1, "replaced");
        assert!(q.finish(c[0].seq, Ok(json!(1))), "a late answer");
        assert_eq!(q.runners().health().stuck, 0);
        assert!(q.runners().retire(), "one thread too many now");
        // A call withdrawn before it was taken never ran: nothing is stuck.
        let mut f = Box::pin(b.call(ctx(), vec![]));
        assert!(futures_poll_once(&mut f).await);
        drop(f);
        assert_eq!(q.runners().health().stuck, 0);
    }

    /// Polls once; true when still pending.
    async fn futures_poll_once<F: std::future::Future + Unpin>(f: &mut F) -> bool {
        std::future::poll_fn(|cx| match std::pin::Pin::new(&mut *f).poll(cx) {
            std::task::Poll::Pending => std::task::Poll::Ready(true),
            std::task::Poll::Ready(_) => std::task::Poll::Ready(false),
        })
        .await
    }

    #[tokio::test]
    async fn a_taker_spins_for_near_calls_and_stops_once_they_are_far() {
        let q = HostQueue::new();
        let b = q.body("t");
        let mut taker = Taker::default();
        // Nothing seen yet: an empty take spins its full spin first.
        assert!(taker.spinning());
        let t = Instant::now();
        assert!(taker.take(&q, 4).is_empty());
        assert!(t.elapsed() >= Idle::SPIN, "answered empty without spinning");
        // A call that waits is taken at once (and the gap since it ran out
        // counts: far, here, 2 ms).
        let mut far = Vec::new();
        for _ in 0..10 {
            std::thread::sleep(Duration::from_millis(2));
            let mut f = Box::pin(b.call(ctx(), vec![]));
            assert!(futures_poll_once(&mut f).await);
            assert_eq!(taker.take(&q, 4).len(), 1);
            far.push(f);
            if !taker.spinning() {
                break;
            }
            assert!(taker.take(&q, 4).is_empty());
        }
        assert!(!taker.spinning(), "still spinning after ten far calls");
        // Now an empty take answers at once; calls back to back bring the
        // spin back.
        assert!(taker.take(&q, 4).is_empty());
        for _ in 0..20 {
            let mut f = Box::pin(b.call(ctx(), vec![]));
            assert!(futures_poll_once(&mut f).await);
            assert_eq!(taker.take(&q, 4).len(), 1);
            far.push(f);
            if taker.spinning() {
                break;
            }
            assert!(taker.take(&q, 4).is_empty());
        }
        assert!(taker.spinning(), "near calls did not bring the spin back");
    }

    /// The gap a taker learns from ends when the next call was queued, not
    /// when the taker got to it: a taker that slept (here: whose look ran
    /// out at once) and was woken late keeps spinning when the calls
    /// themselves came close behind, and stops when they came late.
    #[tokio::test]
    async fn a_taker_counts_the_gap_to_the_calls_arrival_not_to_its_own_wake_up() {
        let q = HostQueue::new();
        let b = q.body("t");
        // The calls' futures, kept: one dropped is withdrawn.
        let mut held = Vec::new();
        // Calls queued right after the taker ran out, taken 2 ms later
        // (the taker asleep, woken late): the spin stays.
        let mut near = Taker::default();
        for _ in 0..10 {
            assert!(near.take_with(&q, 4, |_| false).is_empty());
            let mut f = Box::pin(b.call(ctx(), vec![]));
            assert!(futures_poll_once(&mut f).await);
            held.push(f);
            std::thread::sleep(Duration::from_millis(2));
            assert_eq!(near.take(&q, 4).len(), 1);
        }
        assert!(near.spinning(), "a late wake-up counted as the gap");
        // Control: calls queued 2 ms after it ran out: the spin goes.
        let mut far = Taker::default();
        for _ in 0..10 {
            assert!(far.take_with(&q, 4, |_| false).is_empty());
            std::thread::sleep(Duration::from_millis(2));
            let mut f = Box::pin(b.call(ctx(), vec![]));
            assert!(futures_poll_once(&mut f).await);
            held.push(f);
            assert_eq!(far.take(&q, 4).len(), 1);
        }
        assert!(!far.spinning(), "calls 2 ms apart kept the spin");
    }

    #[test]
    fn a_runner_spins_while_its_gaps_are_short_and_sleeps_once_they_are_long() {
        let us = Duration::from_micros;
        let mut idle = Idle::new();
        // Nothing seen yet: spin.
        assert_eq!(idle.spin(), Idle::SPIN);
        // Calls back to back (a few µs apart) keep it spinning.
        for _ in 0..50 {
            idle.saw(us(5));
        }
        assert_eq!(idle.spin(), Idle::SPIN);
        // A broker round trip between calls (300 µs): within a few gaps it
        // stops spinning.
        let mut n = 0;
        while !idle.spin().is_zero() {
            idle.saw(us(300));
            n += 1;
            assert!(n < 10, "still spinning after {n} long gaps");
        }
        assert!(n >= 2, "one long gap among short ones stopped the spin");
        // An idle minute is forgotten after a few short gaps (the cap), and
        // it spins again.
        idle.saw(Duration::from_secs(60));
        assert!(idle.spin().is_zero());
        let mut n = 0;
        while idle.spin().is_zero() {
            idle.saw(us(20));
            n += 1;
            assert!(n < 16, "not spinning again after {n} short gaps");
        }
    }

    #[tokio::test]
    async fn spin_for_finds_a_waiting_call_and_runs_out_on_an_empty_queue() {
        let q = HostQueue::new();
        let t = Instant::now();
        assert!(!q.spin_for(Duration::from_micros(200)));
        assert!(t.elapsed() >= Duration::from_micros(200));
        let b = q.body("t");
        let mut f = Box::pin(b.call(ctx(), vec![]));
        assert!(futures_poll_once(&mut f).await);
        assert!(q.spin_for(Duration::from_secs(5)));
        assert_eq!(q.take(10).len(), 1);
    }
}
