//! An in-process broker that is also a result store, a chord counter and an
//! inspector.
//!
//! Everything sits behind one mutex: every operation is a few map updates, so
//! a lock held for nanoseconds beats anything finer-grained, and a batch is
//! one lock. Delayed messages wait in a map ordered by eta and are moved to
//! their queue when the broker's clock (the app's) says they are due, so a
//! virtual clock drives them as well as the system clock does.
//!
//! Claimed messages are kept until acked; `reject(requeue)` puts one back at
//! the head of its queue, as RabbitMQ and kombu's Redis transport do, so a
//! message handed back by a stopping worker runs next rather than last.
//!
//! It follows headway's Redis layout wherever the two can agree, so one
//! model-based test holds both to the same observable behaviour:
//! - each claim is held by a named consumer ([`MemoryBroker::handle`] gives a
//!   second consumer on the same broker, as a second process is on Redis); a
//!   settle by another consumer, or of a claim already settled or recovered,
//!   is a no-op (the receipt's tag fences it);
//! - a consumer's lease never runs out by itself (its process is the
//!   broker's), but [`MemoryBroker::expire`] makes it so, as a dying worker
//!   would, and `recover()` then hands back what it held — oldest claim at
//!   the head, marked redelivered — and dead-letters a message lost with its
//!   holder `max_deliveries` times ("worker lost ×3");
//! - bytes pushed by [`MemoryBroker::push_raw`] go through the same decoder
//!   as a Redis claim ([`crate::task::dead::decode`]), and what does not
//!   decode is quarantined in the queue's dead letters.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use crate::task::clock::{BoxFuture, Clock};
use crate::task::dead::{self, DEAD_KEPT, DeadLetter, MAX_DELIVERIES, MAX_MESSAGE_BYTES};
use crate::task::message::Message;
use crate::task::spec::{
    Backend, Broker, ConsumerInfo, Counter, Delivery, Inspector, Joined, QueueInfo, Receipt,
    RunEvent,
};

/// How many run events the memory broker keeps: the last thousand.
pub const EVENTS_KEPT: usize = 1000;
use crate::task::state::{Outcome, Refused, State};

/// Priority steps: 0 is claimed first (kombu's Redis order: lower first).
const STEPS: usize = 10;

/// The consumer name of a broker made by [`MemoryBroker::new`].
pub const LOCAL: &str = "local";

/// How a [`MemoryBroker`] is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryOptions {
    /// How many times a consumer may be lost holding a message before it is
    /// dead-lettered ([`MAX_DELIVERIES`], 3).
    pub max_deliveries: u32,
    /// The size cap for raw bytes pushed onto a queue
    /// ([`MAX_MESSAGE_BYTES`], 16 MiB). Published messages are values here,
    /// not bytes, so the cap is not checked on publish.
    pub max_message_bytes: usize,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        MemoryOptions {
            max_deliveries: MAX_DELIVERIES,
            max_message_bytes: MAX_MESSAGE_BYTES,
        }
    }
}

/// What waits on a queue: a message, or bytes still to be decoded.
///
/// Messages are by far the common case, so they are held inline: boxing
/// them to shrink the rare raw variant would cost an allocation per publish.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
enum Payload {
    Msg(Message),
    Raw(Arc<[u8]>),
}

#[derive(Clone)]
struct Entry {
    payload: Payload,
    /// The bytes it came as, when it was pushed raw: what a dead letter
    /// keeps, as Redis keeps the bytes it was given.
    raw: Option<Arc<[u8]>>,
    /// How many times a consumer was lost holding it.
    lost: u32,
    /// Handed out before (requeued, recovered, re-queued from the dead).
    redelivered: bool,
}

impl Entry {
    fn fresh(m: Message) -> Entry {
        Entry {
            payload: Payload::Msg(m),
            raw: None,
            lost: 0,
            redelivered: false,
        }
    }
}

struct Dead {
    letter: DeadLetter,
    step: usize,
}

#[derive(Default)]
struct Queue {
    steps: [VecDeque<Entry>; STEPS],
    /// (eta, seq) → message, moved to its step by a claim of this queue
    /// once due (as Redis's claim script does).
    delayed: BTreeMap<(i64, u64), Message>,
    unacked: u64,
    /// Newest first, at most [`DEAD_KEPT`].
    dead: VecDeque<Dead>,
}

impl Queue {
    fn len(&self) -> usize {
        self.steps.iter().map(VecDeque::len).sum()
    }

    fn bury(&mut self, letter: DeadLetter, step: usize) {
        eprintln!(
            "headway memory broker: queue {:?}: dead-lettered a message ({})",
            letter.queue,
            crate::log::shown(&letter.reason)
        );
        self.dead.push_front(Dead { letter, step });
        self.dead.truncate(DEAD_KEPT);
    }
}

fn step(m: &Message) -> usize {
    (m.priority.unwrap_or(0) as usize).min(STEPS - 1)
}

/// A claim: who holds it, from where, and what it was.
struct Held {
    consumer: Arc<str>,
    queue: String,
    step: usize,
    message: Message,
    raw: Option<Arc<[u8]>>,
    lost: u32,
}

#[derive(Default)]
struct Inner {
    queues: HashMap<String, Queue>,
    /// By tag, which grows with every claim: oldest claim first.
    unacked: BTreeMap<u64, Held>,
    /// Consumers that have claimed; the (consumer, queue) leases they hold,
    /// one per queue as on Redis; those made to run out.
    consumers: BTreeSet<Arc<str>>,
    leased: HashSet<(Arc<str>, String)>,
    expired: BTreeSet<(Arc<str>, String)>,
    revoked: HashMap<String, i64>,
    results: HashMap<String, Outcome>,
    chords: HashMap<String, (u32, HashSet<String>)>,
    events: VecDeque<RunEvent>,
    /// Per beat entry, the latest due time fired.
    fired: HashMap<String, i64>,
    seq: u64,
}

impl Inner {
    fn queue(&mut self, name: &str) -> &mut Queue {
        if !self.queues.contains_key(name) {
            self.queues.insert(name.to_string(), Queue::default());
        }
        self.queues.get_mut(name).expect("just inserted")
    }

    fn push(&mut self, m: Message, now: i64) {
        match m.eta {
            Some(eta) if eta > now => {
                self.seq += 1;
                let seq = self.seq;
                self.queue(&m.queue).delayed.insert((eta, seq), m);
            }
            _ => {
                let s = step(&m);
                self.queue(&m.queue).steps[s].push_back(Entry::fresh(m));
            }
        }
    }

    /// Moves what is due on `queue` to its steps.
    fn promote(&mut self, queue: &str, now: i64) {
        let Some(q) = self.queues.get_mut(queue) else {
            return;
        };
        while let Some(entry) = q.delayed.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let m = entry.remove();
            q.steps[step(&m)].push_back(Entry::fresh(m));
        }
    }
}

struct Shared {
    inner: Mutex<Inner>,
    clock: Arc<dyn Clock>,
    published: Notify,
    stored: Notify,
    opts: MemoryOptions,
}

/// A broker, result store, chord counter and inspector over maps.
///
/// Each value is one consumer of a shared in-memory broker: `new` makes the
/// broker and its consumer [`LOCAL`], `handle` another consumer of it.
pub struct MemoryBroker {
    shared: Arc<Shared>,
    consumer: Arc<str>,
}

impl MemoryBroker {
    /// An empty broker whose time comes from `clock` (the app's).
    pub fn new(clock: Arc<dyn Clock>) -> Arc<MemoryBroker> {
        MemoryBroker::with_options(clock, MemoryOptions::default())
    }

    /// An empty broker set up by `opts`.
    pub fn with_options(clock: Arc<dyn Clock>, opts: MemoryOptions) -> Arc<MemoryBroker> {
        Arc::new(MemoryBroker {
            shared: Arc::new(Shared {
                inner: Mutex::new(Inner::default()),
                clock,
                published: Notify::new(),
                stored: Notify::new(),
                opts,
            }),
            consumer: Arc::from(LOCAL),
        })
    }

    /// Another consumer named `consumer` of this same broker: what a second
    /// worker process is on a shared broker. It sees the same queues,
    /// results and dead letters; its claims are its own.
    pub fn handle(&self, consumer: &str) -> Arc<MemoryBroker> {
        Arc::new(MemoryBroker {
            shared: self.shared.clone(),
            consumer: Arc::from(consumer),
        })
    }

    /// This consumer's name.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// How it was set up.
    pub fn options(&self) -> &MemoryOptions {
        &self.shared.opts
    }

    /// Makes `consumer`'s lease run out now, as a worker that died would:
    /// the next `recover()` hands back what it holds. A claim by it renews
    /// its lease (as on Redis), so it only stays lost if it stays quiet.
    pub fn expire(&self, consumer: &str) {
        let mut g = self.lock();
        let mine: Vec<(Arc<str>, String)> = g
            .leased
            .iter()
            .filter(|(c, _)| &**c == consumer)
            .cloned()
            .collect();
        g.expired.extend(mine);
    }

    /// Puts `raw` on `queue` as another producer would, unchecked: it is
    /// decoded when claimed, and quarantined if it is not a message.
    pub fn push_raw(&self, queue: &str, raw: &[u8]) {
        self.lock().queue(queue).steps[0].push_back(Entry {
            payload: Payload::Raw(Arc::from(raw)),
            raw: None,
            lost: 0,
            redelivered: false,
        });
        self.shared.published.notify_waiters();
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves maps that are still
        // consistent (every update is a single insert or remove), so a
        // poisoned lock is taken over rather than propagated.
        self.shared.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> i64 {
        self.shared.clock.now()
    }

    /// Claims up to `max`; also answers whether anything was quarantined.
    fn claim(&self, queues: &[String], max: usize) -> (Vec<Delivery>, bool) {
        let now = self.now();
        let cap = self.shared.opts.max_message_bytes;
        let mut g = self.lock();
        let me = match g.consumers.get(&*self.consumer) {
            Some(c) => c.clone(),
            None => {
                g.consumers.insert(self.consumer.clone());
                self.consumer.clone()
            }
        };
        let mut out = Vec::new();
        let mut buried = false;
        for name in queues {
            // A claim renews this queue's lease, as Redis's claim script does.
            let pair = (me.clone(), name.clone());
            g.expired.remove(&pair);
            g.leased.insert(pair);
            g.promote(name, now);
            // Bytes that did not decode count towards `max`, as on Redis,
            // where the claim script takes them before they are read. Too
            // large ones are dead-lettered first, the others after the pass
            // (Redis: by the claim script, then by the client).
            let mut taken = 0;
            let mut undecoded = Vec::new();
            let mut early = Vec::new();
            while out.len() + taken < max {
                let Some(q) = g.queues.get_mut(name) else {
                    break;
                };
                let Some((s, e)) = q
                    .steps
                    .iter_mut()
                    .enumerate()
                    .find_map(|(s, l)| l.pop_front().map(|e| (s, e)))
                else {
                    break;
                };
                let (m, raw) = match e.payload {
                    Payload::Msg(m) => (m, e.raw),
                    Payload::Raw(raw) => match dead::decode(&raw, cap) {
                        // Put on the queue by another producer before its
                        // eta: it waits for it, as a published one does.
                        Ok(m) if m.eta.is_some_and(|eta| eta > now) => {
                            early.push(m);
                            continue;
                        }
                        Ok(m) => (m, Some(raw)),
                        Err(why) => {
                            taken += 1;
                            buried = true;
                            let letter = DeadLetter {
                                queue: name.clone(),
                                id: why.id,
                                reason: why.reason,
                                at: now,
                                // A prefix and the size, never the whole.
                                raw: dead::kept_prefix(&raw).to_vec(),
                                size: raw.len(),
                            };
                            if raw.len() > cap {
                                q.bury(letter, s);
                            } else {
                                undecoded.push((letter, s));
                            }
                            continue;
                        }
                    },
                };
                q.unacked += 1;
                g.seq += 1;
                let tag = g.seq;
                g.unacked.insert(
                    tag,
                    Held {
                        consumer: me.clone(),
                        queue: name.clone(),
                        step: s,
                        message: m.clone(),
                        raw,
                        lost: e.lost,
                    },
                );
                out.push(Delivery {
                    receipt: Receipt {
                        queue: name.clone(),
                        tag,
                        token: tag,
                        raw: None,
                    },
                    redelivered: e.redelivered,
                    message: m,
                });
            }
            if let Some(q) = g.queues.get_mut(name) {
                for (letter, s) in undecoded {
                    q.bury(letter, s);
                }
            }
            for m in early {
                g.seq += 1;
                let key = (m.eta.unwrap_or(now), g.seq);
                g.queue(name).delayed.insert(key, m);
            }
            if out.len() >= max {
                break;
            }
        }
        (out, buried)
    }

    /// Removes the claim `r` if this consumer holds it.
    fn settle(&self, g: &mut Inner, r: &Receipt) -> Option<Held> {
        match g.unacked.get(&r.tag) {
            Some(h) if h.consumer == self.consumer && h.queue == r.queue => {}
            _ => return None,
        }
        let h = g.unacked.remove(&r.tag)?;
        if let Some(q) = g.queues.get_mut(&h.queue) {
            q.unacked = q.unacked.saturating_sub(1);
        }
        Some(h)
    }

    /// Messages ready on `queue` now (all priority steps), for tests.
    pub fn ready(&self, queue: &str) -> usize {
        let now = self.now();
        let mut g = self.lock();
        g.promote(queue, now);
        g.queues.get(queue).map_or(0, Queue::len)
    }

    /// Messages claimed and not settled, for tests.
    pub fn unacked(&self) -> usize {
        self.lock().unacked.len()
    }

    /// Messages waiting for an eta, for tests.
    pub fn delayed(&self) -> usize {
        self.lock().queues.values().map(|q| q.delayed.len()).sum()
    }

    fn recover_now(&self) -> usize {
        let now = self.now();
        let max = self.shared.opts.max_deliveries.max(1);
        let mut g = self.lock();
        if g.expired.is_empty() {
            return 0;
        }
        // Lost (consumer, queue) leases, by consumer name within a queue,
        // each one's claims newest first, each put at the head: the oldest
        // claim ends up first — the order Redis's recover script gives, so
        // both brokers answer the same.
        // Never this handle's own: a live consumer does not recover what it
        // holds itself (as on Redis); another handle's recover takes them.
        type Lapsed = Vec<(Arc<str>, String)>;
        let (mine, lost): (Lapsed, Lapsed) = std::mem::take(&mut g.expired)
            .into_iter()
            .partition(|(c, _)| *c == self.consumer);
        g.expired.extend(mine);
        let mut n = 0;
        for pair in lost {
            g.leased.remove(&pair);
            let (c, queue) = pair;
            let tags: Vec<u64> = g
                .unacked
                .iter()
                .rev()
                .filter(|(_, h)| h.consumer == c && h.queue == queue)
                .map(|(t, _)| *t)
                .collect();
            for t in tags {
                let h = g.unacked.remove(&t).expect("just listed");
                let lost = h.lost + 1;
                let q = g.queue(&h.queue);
                q.unacked = q.unacked.saturating_sub(1);
                if lost >= max {
                    q.bury(
                        DeadLetter {
                            queue: h.queue.clone(),
                            id: Some(h.message.id.clone()),
                            reason: dead::lost_reason(lost),
                            at: now,
                            raw: h.raw.map_or_else(|| h.message.to_json(), |r| r.to_vec()),
                            size: 0,
                        }
                        .sized(),
                        h.step,
                    );
                } else {
                    q.steps[h.step].push_front(Entry {
                        payload: Payload::Msg(h.message),
                        raw: h.raw,
                        lost,
                        redelivered: true,
                    });
                    n += 1;
                }
            }
        }
        drop(g);
        if n > 0 {
            self.shared.published.notify_waiters();
        }
        n
    }
}

impl Broker for MemoryBroker {
    fn publish(&self, messages: Vec<Message>) -> BoxFuture<'_, Result<(), Refused>> {
        let now = self.now();
        {
            let mut g = self.lock();
            for m in messages {
                g.push(m, now);
            }
        }
        self.shared.published.notify_waiters();
        Box::pin(async { Ok(()) })
    }

    fn consume<'a>(
        &'a self,
        queues: &'a [String],
        max: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<Delivery>, Refused>> {
        Box::pin(async move {
            if max == 0 {
                return Ok(Vec::new());
            }
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                let published = self.shared.published.notified();
                tokio::pin!(published);
                published.as_mut().enable();
                let moved = self.shared.clock.moved();
                let (got, buried) = self.claim(queues, max);
                if !got.is_empty() {
                    return Ok(got);
                }
                let now = tokio::time::Instant::now();
                if now >= deadline {
                    return Ok(got);
                }
                // What was quarantined made room: look again at once rather
                // than wait for the next publish.
                if buried {
                    continue;
                }
                // Wake for a publish, a move of a virtual clock, the next eta
                // on the system clock, or the end of the wait.
                let mut until = deadline;
                if !self.shared.clock.is_virtual()
                    && let Some(eta) = self.next_due(queues)
                {
                    let ms = eta.saturating_sub(self.now()).max(0) as u64;
                    until = until.min(now + Duration::from_millis(ms));
                }
                tokio::select! {
                    _ = &mut published => {}
                    _ = moved => {}
                    _ = tokio::time::sleep_until(until) => {}
                }
            }
        })
    }

    fn ack(&self, receipts: Vec<Receipt>) -> BoxFuture<'_, Result<(), Refused>> {
        let mut g = self.lock();
        for r in &receipts {
            self.settle(&mut g, r);
        }
        Box::pin(async { Ok(()) })
    }

    fn reject(&self, receipt: Receipt, requeue: bool) -> BoxFuture<'_, Result<(), Refused>> {
        let mut g = self.lock();
        if let Some(h) = self.settle(&mut g, &receipt)
            && requeue
        {
            g.queue(&h.queue).steps[h.step].push_front(Entry {
                payload: Payload::Msg(h.message),
                raw: h.raw,
                lost: h.lost,
                redelivered: true,
            });
            drop(g);
            self.shared.published.notify_waiters();
        }
        Box::pin(async { Ok(()) })
    }

    fn retry(&self, receipt: Receipt, next: Message) -> BoxFuture<'_, Result<(), Refused>> {
        let now = self.now();
        {
            let mut g = self.lock();
            // Fenced: a claim no longer held (recovered, settled) publishes
            // nothing, so a late retry cannot double the run.
            if self.settle(&mut g, &receipt).is_some() {
                g.push(next, now);
            }
        }
        self.shared.published.notify_waiters();
        Box::pin(async { Ok(()) })
    }

    fn next_eta<'a>(&'a self, queues: &'a [String]) -> BoxFuture<'a, Result<Option<i64>, Refused>> {
        let eta = self.next_due(queues);
        Box::pin(async move { Ok(eta) })
    }

    fn revoke(&self, ids: Vec<String>, until: i64) -> BoxFuture<'_, Result<(), Refused>> {
        let mut g = self.lock();
        for id in ids {
            g.revoked.insert(id, until);
        }
        Box::pin(async { Ok(()) })
    }

    fn revoked<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<Vec<bool>, Refused>> {
        let now = self.now();
        let g = self.lock();
        let out = ids
            .iter()
            .map(|id| g.revoked.get(id).is_some_and(|&until| until > now))
            .collect();
        Box::pin(async move { Ok(out) })
    }

    /// Two beats on one in-memory broker (one process) fire each entry's
    /// slots once: a slot is granted only if it is later than the latest one
    /// fired for that entry.
    fn claim_slot<'a>(&'a self, entry: &'a str, due: i64) -> BoxFuture<'a, Result<bool, Refused>> {
        let mut g = self.lock();
        let ok = match g.fired.get_mut(entry) {
            Some(last) if *last >= due => false,
            Some(last) => {
                *last = due;
                true
            }
            None => {
                g.fired.insert(entry.to_string(), due);
                true
            }
        };
        Box::pin(async move { Ok(ok) })
    }

    fn recover(&self) -> BoxFuture<'_, Result<usize, Refused>> {
        let n = self.recover_now();
        Box::pin(async move { Ok(n) })
    }

    fn requeue_dead<'a>(
        &'a self,
        queue: &'a str,
        ids: &'a [String],
        limit: usize,
    ) -> BoxFuture<'a, Result<usize, Refused>> {
        let mut n = 0;
        {
            let mut g = self.lock();
            if let Some(q) = g.queues.get_mut(queue) {
                let mut kept = VecDeque::with_capacity(q.dead.len());
                // Oldest (the back) first.
                while let Some(d) = q.dead.pop_back() {
                    // A prefix is not the message: it stays a dead letter.
                    let wanted = !d.letter.truncated()
                        && (ids.is_empty()
                            || d.letter.id.as_ref().is_some_and(|id| ids.contains(id)));
                    if n < limit && wanted {
                        q.steps[d.step].push_back(Entry {
                            payload: Payload::Raw(Arc::from(d.letter.raw)),
                            raw: None,
                            lost: 0,
                            redelivered: true,
                        });
                        n += 1;
                    } else {
                        kept.push_front(d);
                    }
                }
                q.dead = kept;
            }
        }
        if n > 0 {
            self.shared.published.notify_waiters();
        }
        Box::pin(async move { Ok(n) })
    }

    fn purge_dead<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, Result<usize, Refused>> {
        let n = self
            .lock()
            .queues
            .get_mut(queue)
            .map_or(0, |q| std::mem::take(&mut q.dead).len());
        Box::pin(async move { Ok(n) })
    }
}

impl MemoryBroker {
    fn next_due(&self, queues: &[String]) -> Option<i64> {
        let g = self.lock();
        queues
            .iter()
            .filter_map(|q| g.queues.get(q)?.delayed.keys().next().map(|k| k.0))
            .min()
    }
}

impl Backend for MemoryBroker {
    fn store(&self, outcomes: Vec<Outcome>) -> BoxFuture<'_, Result<(), Refused>> {
        {
            let mut g = self.lock();
            for o in outcomes {
                match g.results.get(&o.id) {
                    Some(old) if old.state.is_final() => {}
                    _ => {
                        g.results.insert(o.id.clone(), o);
                    }
                }
            }
        }
        self.shared.stored.notify_waiters();
        Box::pin(async { Ok(()) })
    }

    fn fetch<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Outcome>, Refused>> {
        let o = self.lock().results.get(id).cloned();
        Box::pin(async move { Ok(o) })
    }

    fn wait<'a>(
        &'a self,
        id: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Option<Outcome>, Refused>> {
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + timeout;
            loop {
                let stored = self.shared.stored.notified();
                tokio::pin!(stored);
                stored.as_mut().enable();
                if let Some(o) = self.lock().results.get(id)
                    && o.state.is_final()
                {
                    return Ok(Some(o.clone()));
                }
                tokio::select! {
                    _ = &mut stored => {}
                    _ = tokio::time::sleep_until(deadline) => return Ok(None),
                }
            }
        })
    }
}

/// What a chord's part set holds once its callback was sent.
const CHORD_SENT: &str = "~sent";

impl Counter for MemoryBroker {
    fn open(&self, key: &str, size: u32) -> BoxFuture<'_, Result<(), Refused>> {
        self.lock()
            .chords
            .entry(key.to_string())
            .or_insert_with(|| (size, HashSet::new()));
        Box::pin(async { Ok(()) })
    }

    fn arrive<'a>(
        &'a self,
        key: &'a str,
        part: &'a str,
        size: u32,
        callback: &'a Message,
    ) -> BoxFuture<'a, Result<Joined, Refused>> {
        let now = self.now();
        let joined = {
            let mut g = self.lock();
            let entry = g
                .chords
                .entry(key.to_string())
                .or_insert_with(|| (size, HashSet::new()));
            // A sent chord keeps only its mark (as Redis's `~sent`), kept as
            // long as the results are: a redelivered part arriving after the
            // callback went must not start a count that could send it again.
            let fresh = !entry.1.contains(CHORD_SENT) && entry.1.insert(part.to_string());
            if fresh && entry.1.len() as u32 >= entry.0 {
                entry.1.clear();
                entry.1.insert(CHORD_SENT.to_string());
                g.push(callback.clone(), now);
                Joined::Sent
            } else {
                Joined::Waiting
            }
        };
        if joined == Joined::Sent {
            self.shared.published.notify_waiters();
        }
        Box::pin(async move { Ok(joined) })
    }
}

impl Inspector for MemoryBroker {
    fn queues(&self) -> BoxFuture<'_, Result<Vec<QueueInfo>, Refused>> {
        let g = self.lock();
        let mut out: Vec<QueueInfo> = g
            .queues
            .iter()
            .map(|(name, q)| QueueInfo {
                name: name.clone(),
                ready: q
                    .steps
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| !s.is_empty())
                    .map(|(i, s)| (i as u8, s.len() as u64))
                    .collect(),
                delayed: q.delayed.len() as u64,
                unacked: q.unacked,
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Box::pin(async move { Ok(out) })
    }

    fn record(&self, events: Vec<RunEvent>) -> BoxFuture<'_, Result<(), Refused>> {
        let mut g = self.lock();
        for e in events {
            if g.events.len() >= EVENTS_KEPT {
                g.events.pop_front();
            }
            g.events.push_back(e);
        }
        Box::pin(async { Ok(()) })
    }

    fn recent(&self, limit: usize) -> BoxFuture<'_, Result<Vec<RunEvent>, Refused>> {
        let out: Vec<RunEvent> = self
            .lock()
            .events
            .iter()
            .rev()
            .take(limit)
            .cloned()
            .collect();
        Box::pin(async move { Ok(out) })
    }

    fn counts(&self) -> BoxFuture<'_, Result<BTreeMap<State, u64>, Refused>> {
        let g = self.lock();
        let mut out = BTreeMap::new();
        for o in g.results.values() {
            *out.entry(o.state).or_insert(0) += 1;
        }
        Box::pin(async move { Ok(out) })
    }

    /// Every consumer that has claimed, with what it holds (oldest claim
    /// first). A live one's lease never runs out by itself: `i64::MAX`;
    /// one made to expire has none.
    fn consumers(&self) -> BoxFuture<'_, Result<Vec<ConsumerInfo>, Refused>> {
        let g = self.lock();
        let out = g
            .consumers
            .iter()
            .map(|c| ConsumerInfo {
                name: c.to_string(),
                lease_until: (!g.expired.iter().any(|(x, _)| x == c)).then_some(i64::MAX),
                holding: g
                    .unacked
                    .values()
                    .filter(|h| h.consumer == *c)
                    .map(|h| h.message.id.clone())
                    .collect(),
            })
            .collect();
        Box::pin(async move { Ok(out) })
    }

    fn dead_letters<'a>(
        &'a self,
        queue: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<DeadLetter>, Refused>> {
        let out = self.lock().queues.get(queue).map_or_else(Vec::new, |q| {
            q.dead
                .iter()
                .take(limit)
                .map(|d| d.letter.clone())
                .collect()
        });
        Box::pin(async move { Ok(out) })
    }

    fn dead_count<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, Result<u64, Refused>> {
        let n = self
            .lock()
            .queues
            .get(queue)
            .map_or(0, |q| q.dead.len() as u64);
        Box::pin(async move { Ok(n) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::clock::VirtualClock;
    use serde_json::Map;

    fn msg(id: &str, q: &str) -> Message {
        Message::new(id.into(), "t".into(), vec![], Map::new(), q.into())
    }

    #[tokio::test]
    async fn fifo_priority_eta_and_requeue_at_head() {
        let clock = VirtualClock::new(1000);
        let b = MemoryBroker::new(clock.clone());
        let mut hi = msg("hi", "q");
        hi.priority = Some(0);
        let mut lo = msg("lo", "q");
        lo.priority = Some(5);
        let mut later = msg("later", "q");
        later.eta = Some(2000);
        b.publish(vec![lo, msg("a", "q"), hi, later]).await.unwrap();
        let qs = vec!["q".to_string()];
        let got = b.consume(&qs, 10, Duration::ZERO).await.unwrap();
        let ids: Vec<_> = got.iter().map(|d| d.message.id.as_str()).collect();
        assert_eq!(ids, ["a", "hi", "lo"]);
        assert_eq!(b.next_eta(&qs).await.unwrap(), Some(2000));
        b.reject(got[2].receipt.clone(), true).await.unwrap();
        b.ack(vec![got[0].receipt.clone(), got[1].receipt.clone()])
            .await
            .unwrap();
        assert_eq!(b.unacked(), 0);
        clock.advance_to(2000);
        let got = b.consume(&qs, 10, Duration::ZERO).await.unwrap();
        let ids: Vec<_> = got.iter().map(|d| d.message.id.as_str()).collect();
        assert_eq!(ids, ["later", "lo"]);
    }

    #[tokio::test]
    async fn results_are_write_once_for_final_states() {
        let b = MemoryBroker::new(VirtualClock::new(0));
        b.store(vec![Outcome::new("x", State::Started, 0)])
            .await
            .unwrap();
        b.store(vec![Outcome::new("x", State::Success, 1)])
            .await
            .unwrap();
        b.store(vec![Outcome::new("x", State::Failure, 2)])
            .await
            .unwrap();
        assert_eq!(b.fetch("x").await.unwrap().unwrap().state, State::Success);
        assert!(
            b.wait("y", Duration::from_millis(5))
                .await
                .unwrap()
                .is_none()
        );
    }

    #[tokio::test]
    async fn chord_counts_a_set() {
        let b = MemoryBroker::new(VirtualClock::new(0));
        let cb = msg("cb", "q");
        b.open("k", 2).await.unwrap();
        assert_eq!(b.arrive("k", "p1", 2, &cb).await.unwrap(), Joined::Waiting);
        assert_eq!(b.arrive("k", "p1", 2, &cb).await.unwrap(), Joined::Waiting);
        assert_eq!(b.arrive("k", "p2", 2, &cb).await.unwrap(), Joined::Sent);
        assert_eq!(b.ready("q"), 1);
    }

    #[tokio::test]
    async fn revoked_expire() {
        let clock = VirtualClock::new(0);
        let b = MemoryBroker::new(clock.clone());
        b.revoke(vec!["a".into()], 100).await.unwrap();
        let ids = vec!["a".to_string(), "b".to_string()];
        assert_eq!(b.revoked(&ids).await.unwrap(), vec![true, false]);
        clock.advance(100);
        assert_eq!(b.revoked(&ids).await.unwrap(), vec![false, false]);
    }

    #[tokio::test]
    async fn consume_wakes_on_publish() {
        let b = MemoryBroker::new(Arc::new(crate::task::clock::SystemClock));
        let b2 = b.clone();
        let t = tokio::spawn(async move {
            let qs = vec!["q".to_string()];
            b2.consume(&qs, 1, Duration::from_secs(5))
                .await
                .unwrap()
                .len()
        });
        tokio::task::yield_now().await;
        b.publish(vec![msg("a", "q")]).await.unwrap();
        assert_eq!(t.await.unwrap(), 1);
    }
}
