//! Celery's own Redis layout: queues, acks, results, chords and revokes
//! exactly as Celery 5.5+ with a Redis broker and the Redis result backend
//! keeps them, so headway and Celery workers and producers share one Redis.
//!
//! [`CeleryBroker`] implements all four seams:
//! - **Broker** — kombu's Redis transport. A queue is one list per priority
//!   step (`q`, `q\x06\x163`, `q\x06\x166`, `q\x06\x169`); publish LPUSHes,
//!   consume takes from the tail (FIFO), polling `for step in steps: for q in
//!   queues` so priority 0 wins. A claimed envelope sits in the `unacked`
//!   hash (`[envelope, exchange, routing_key]` by delivery tag) and the
//!   `unacked_index` sorted set (scored by claim time) until acked; reject
//!   with requeue LPUSHes it back; [`Broker::recover`] is kombu's
//!   `restore_visible` under `unacked_mutex`, so a headway worker hands back
//!   what dead Celery consumers left, as a Celery worker would.
//! - **ETA** — a message with an eta is claimed and held, the Celery way:
//!   it stays in `unacked` while this consumer keeps it in memory until due.
//!   Unlike Celery, a live headway consumer re-scores the index entries of
//!   everything it holds (every `visibility_timeout / 4`), so neither
//!   Celery's restore nor headway's takes them while it lives — a long eta
//!   is not run twice. (Celery workers on the same queue still hold their
//!   own etas unrefreshed; see `docs/celery.md`.)
//! - **Backend** — `celery-task-meta-<id>`, SETEX `result_expires` and
//!   PUBLISH on the key's channel, so Celery's `AsyncResult.get()` wakes;
//!   final states are never overwritten. Waits subscribe to that channel.
//! - **Counter** — chords through `celery-taskset-meta-<gid>.j` (sorted set
//!   of `[1, id, state, result]` members scored by group index), `.t`, `.s`:
//!   whichever side finishes the last part sends the callback with the
//!   ordered results; a failed part fails the callback with `ChordError`.
//! - **Inspector** — queue depths per step, result counts, this consumer.
//!
//! Revokes go both ways over the pidbox broadcast (`/<db>.celery.pidbox`);
//! each consumer keeps an expiring revoked set, checked at receipt and before
//! running, and a revoke with `terminate` stops the run wherever it is going
//! (a Celery worker's or a headway process's). Headway also keeps revokes in a sorted set of its own
//! (`headway.celery.revoked`) so a headway worker that was down when the
//! revoke was sent still skips the task.

//!
//! The module is split by concern, each file saying why it is shaped as it
//! is: `options` and `keys` (what a broker is built with, every name it
//! uses), `publish`, `claim` and
//! `consume` (a message's way in), `eta` (held until due), `settle`,
//! `restore` and `burial` (its way out: acked, put back, or set aside),
//! `unknown` (tasks another consumer runs), `revoke` (the pidbox), `backend` and `chords` (results), `beat`,
//! `inspect`, and `background` (the broker's own task). Every Lua script
//! is a file under `lua/` (`scripts`). The wire formats are `codec`
//! (Celery's task protocol), `result` (its result meta), `pidbox`, `dead`
//! (dead letters) and `pyjson`/`typed`/`b64` (Python's JSON as Celery
//! writes it; `js`: its typed values as a JS host carries them). Its connections to Redis — the command connection, the
//! pub/sub connection for result waiters and the pidbox — are the shared
//! `broker::link`, with this layout's timeouts and backoff.

mod b64;
mod backend;
mod background;
mod beat;
mod burial;
mod chords;
mod claim;
pub mod codec;
mod consume;
mod control;
pub mod dead;
mod eta;
pub(crate) mod events;
mod inspect;
pub mod js;
mod keys;
pub(crate) mod node;
mod options;
pub mod pidbox;
mod publish;
pub mod pyjson;
mod restore;
pub mod result;
mod revoke;
mod scripts;
mod settle;
pub mod typed;
mod unknown;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;

pub use codec::{CodecError, Decoded, Encoded, Router, Sender};
pub use eta::MAX_HELD_ETAS;
pub use options::{CeleryOptions, UnknownTasks};
pub use typed::{Typed, TypedError};
pub use unknown::{HANDBACK_HEADER, MAX_HANDBACKS};

use keys::Keys;
use scripts::Scripts;
use settle::Owed;

use super::link::{Link, LinkSetup, Waiters};
use super::redis::RedisUrl;
use crate::flow::{Backoff, Jitter, MILLI};
use crate::task::app::Seams;
use crate::task::clock::{BoxFuture, Clock};
use crate::task::message::{Message, new_id};
use crate::task::spec::{Broker, Delivery, Receipt};
use crate::task::state::Refused;
use node::{CeleryNode, NodeFacts};

/// One message this consumer claimed and has not settled.
#[derive(Debug, Clone)]
struct Held {
    tag: String,
    queue: String,
    id: String,
}

/// One envelope a claim took.
struct Taken {
    /// The headway queue and priority step of the list it came from.
    queue: String,
    step: u8,
    /// Its delivery tag in `unacked` ("": Redis could not parse it, so it
    /// never got there).
    tag: String,
    raw: Vec<u8>,
}

#[derive(Default)]
struct Local {
    /// Claimed, unsettled: local tag → what it is.
    out: HashMap<u64, Held>,
    /// Claimed with an eta in the future: (eta, local tag) → delivery.
    held: BTreeMap<(i64, u64), Delivery>,
    /// Claimed, due, not yet handed to a consumer: a claim finishes in a
    /// task of its own, so a `consume` dropped mid-claim (a stopping worker)
    /// loses nothing — the next `consume` or `release` finds it here.
    inbox: VecDeque<Delivery>,
    /// Chord parts received: id → group index.
    parts: HashMap<String, Option<u32>>,
    parts_order: VecDeque<String>,
    /// Queues this broker has seen (for the inspector).
    queues: HashSet<String>,
}

/// Celery's Redis layout behind headway's four seams.
pub struct CeleryBroker {
    me: Weak<CeleryBroker>,
    /// Its command connection to Redis (shared plumbing: reconnects, waits
    /// through a short outage).
    link: Link,
    /// BRPOP's own connection (no response timeout: it blocks).
    blocking: tokio::sync::Mutex<Option<crate::broker::link::Conn>>,
    /// Result waiters and the pidbox patterns, on one pub/sub connection.
    waiters: Arc<Waiters<()>>,
    db: i64,
    /// Settles and hand-backs waiting for Redis.
    owed: Mutex<Vec<Owed>>,
    /// This broker's beat lease owner: the node name and a random suffix,
    /// so two beats on one host never share a lease.
    beat_owner: String,
    /// Whether this broker's beat holds the lease: the background task
    /// renews it (owner-checked) while it does.
    beat_leader: AtomicBool,
    opts: CeleryOptions,
    /// Its name, codec, app, Lamport clock, events and the app's clock.
    facts: NodeFacts,
    warned: Mutex<HashSet<String>>,
    local: Mutex<Local>,
    seq: AtomicU64,
    consumed: std::sync::atomic::AtomicBool,
    /// Claims in flight in tasks of their own, and the bell rung as each
    /// ends (`stopped` waits for them).
    fetching: std::sync::atomic::AtomicUsize,
    fetched: tokio::sync::Notify,
    /// Run events not yet written: a worker records one per settle, and one
    /// round trip each would cost as much as the settle itself.
    events: Mutex<Vec<String>>,
    stored: Notify,
    keys: Keys,
    scripts: Scripts,
    /// Another transport's broker chord callbacks go through, when this is
    /// only its result store (see `chords`).
    via: std::sync::RwLock<Option<Weak<dyn Broker>>>,
}

impl crate::limit::store::Linked for CeleryBroker {
    fn link(&self) -> &Link {
        &self.link
    }
}

impl std::fmt::Debug for CeleryBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CeleryBroker")
            .field("url", self.link.url())
            .field("node", &self.facts.node)
            .finish()
    }
}

impl CeleryBroker {
    /// Connects to the Redis at `url` (`redis://[user:pass@]host:port/db`,
    /// `rediss://` for TLS) and answers a broker on Celery's layout there.
    /// `clock` is the app's: index scores, etas and result times read it.
    ///
    /// Starts its background task on the current tokio runtime (the
    /// re-scorer of held claims, see `background`) and subscribes the
    /// pidbox; both stop when the broker is dropped.
    pub async fn connect(
        url: &str,
        opts: CeleryOptions,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<CeleryBroker>, Refused> {
        opts.check()?;
        // headway's URL rules (percent-decoded credentials, the db number,
        // `rediss://`, `tls_ca`) and its redaction: only the parsed URL is
        // ever shown, so no password reaches a log, encoded or not.
        let parsed = RedisUrl::parse(url)?;
        if matches!(
            parsed.topology,
            crate::broker::redis::Topology::Cluster { .. }
        ) {
            // Celery keeps `unacked` beside every queue, in other slots.
            return Err(Refused::Invalid(format!(
                "invalid `url`: {parsed}: Celery's layout does not run on Redis Cluster \
                 (neither does kombu's Redis transport)"
            )));
        }
        let db = parsed.db;
        let node = opts
            .consumer
            .clone()
            .unwrap_or_else(|| format!("headway@{}", codec::hostname()));
        if parsed.wait.is_some() {
            return Err(Refused::Invalid(format!(
                "invalid `url`: {parsed}: `?wait=` is for headway's own layout; \
                 Celery's layout does not wait for replicas"
            )));
        }
        let label = format!("headway celery broker {node}");
        let common = LinkSetup::dialling(
            parsed,
            opts.tls_ca.as_deref(),
            node.clone(),
            opts.patience,
            label,
        )?;
        // kombu's: 5 s to connect, 30 s for a reply; a failed dial waits
        // 50 ms doubling to 1 s before the next, without jitter.
        let link = Link::new(LinkSetup {
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(30),
            backoff: Backoff::new(50 * MILLI, 2.0, 1_000 * MILLI, i32::MAX, Jitter::Rigid)
                .expect("a valid backoff"),
            ..common
        });
        link.first("cannot reach ").await?;
        // Result channels carry a wake-up only: a waiter reads the key.
        let waiters = link.waiters(Box::new(|_| None));
        let keys = Keys::new(&opts, db);
        let beat_owner = format!("{node}#{}-{}", std::process::id(), &new_id()[..8]);
        let (celeryev, outbox) = events::Events::new(opts.task_events);
        let broker = Arc::new_cyclic(|me| CeleryBroker {
            me: me.clone(),
            link,
            blocking: tokio::sync::Mutex::new(None),
            waiters,
            db,
            owed: Mutex::new(Vec::new()),
            beat_owner,
            beat_leader: AtomicBool::new(false),
            facts: NodeFacts::new(
                node,
                Sender::this_process(&opts.default_queue),
                clock,
                celeryev,
            ),
            warned: Mutex::new(HashSet::new()),
            opts,
            local: Mutex::new(Local::default()),
            seq: AtomicU64::new(0),
            consumed: std::sync::atomic::AtomicBool::new(false),
            fetching: std::sync::atomic::AtomicUsize::new(0),
            fetched: tokio::sync::Notify::new(),
            events: Mutex::new(Vec::new()),
            stored: Notify::new(),
            keys,
            scripts: Scripts::new(),
            via: std::sync::RwLock::new(None),
        });
        // The pidbox patterns stand: subscribed before connect answers, so a
        // revoke sent right after is heard, and made again after a lost
        // connection. One that cannot be made now is retried in the
        // background.
        for p in &broker.keys.pidbox_patterns {
            let me = Arc::downgrade(&broker);
            let on: super::link::Handler = Arc::new(move |_, payload| {
                if let Some(b) = me.upgrade() {
                    b.hear_pidbox(payload);
                }
            });
            let _ = broker.waiters.psubscribe(p, on).await;
        }
        broker.load_revoked().await?;
        tokio::spawn(background::rescore_loop(Arc::downgrade(&broker)));
        tokio::spawn(events::run(Arc::downgrade(&broker), outbox));
        Ok(broker)
    }

    /// The four seams an [`crate::task::App`] is built on, all this broker.
    pub fn seams(self: &Arc<Self>) -> Seams {
        Seams::all(self)
    }

    /// Gives back what this consumer holds ([`CeleryBroker::release`]) so
    /// another consumer runs it now rather than after the visibility
    /// timeout: call it when the worker has stopped.
    pub async fn close(&self) -> Result<usize, Refused> {
        if self.beat_leader.swap(false, Ordering::SeqCst) {
            // A standby beat takes over at its next slot, not a lease later.
            let _ = self.beat_call("", 0, "release").await;
        }
        self.release().await
    }

    /// The options it was built with.
    pub fn options(&self) -> &CeleryOptions {
        &self.opts
    }

    /// This consumer's node name.
    pub fn node(&self) -> &str {
        &self.facts.node
    }

    /// The encoder/decoder it uses (origin, reply-to, queue alias).
    pub fn sender(&self) -> &Sender {
        &self.facts.sender
    }

    /// Routes chain links and callbacks whose signature names no queue by
    /// `app`'s policies — headway resolves a link's queue when the link is
    /// published, but a Celery worker publishes the next link itself and
    /// knows only what the signature says. Call it once the app is built on
    /// this broker (the bindings do). Holds the app weakly.
    pub fn route_for(&self, app: &crate::task::App) {
        self.facts.route_for(app);
    }

    /// The Redis database number (it names the pidbox channel).
    pub fn db(&self) -> i64 {
        self.db
    }

    fn lock(&self) -> MutexGuard<'_, Local> {
        self.local.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn log(&self, what: &str) {
        crate::log::emit(
            crate::log::Level::Warn,
            "headway.celery",
            crate::log::About::worker(&self.facts.node),
            format_args!("headway celery broker {}: {what}", self.facts.node),
        );
    }

    /// Whether task events are sent (Celery's `worker_send_task_events`).
    pub fn task_events(&self) -> bool {
        self.facts.celeryev.is_on()
    }

    /// Turns task events on or off (Celery's `enable_events` /
    /// `disable_events`).
    pub fn set_task_events(&self, on: bool) {
        self.facts.celeryev.set_on(on);
    }

    fn now_secs(&self) -> f64 {
        typed::unix_secs(self.facts.clock.now())
    }

    /// A hold's score in kombu's `unacked_index`: now in whole seconds,
    /// rounded up. kombu scores with `time()`, a float; to its
    /// `restore_visible` (a range up to now − visibility_timeout) an
    /// integer is the same. To Redis it is not: a small sorted set (a
    /// listpack, up to 128 members) compares each new member against every
    /// member's score, and a float score is parsed (strtod) at each
    /// comparison — a claim's ZADD of 28 holds into an index of 28-84 cost
    /// Redis 150-360 µs with float scores and 43-98 µs with integers, and
    /// was a third of Redis's CPU per message on this layout. Rounded up, a
    /// hold looks younger by under a second: restored up to a second late,
    /// never early.
    fn index_score(&self) -> i64 {
        (self.facts.clock.now() + 999).div_euclid(1000)
    }

    fn expires_secs(&self) -> u64 {
        self.opts.result_expires.map_or(0, |d| d.as_secs().max(1))
    }

    fn remember_queue(&self, q: &str) {
        let mut g = self.lock();
        if !g.queues.contains(q) {
            g.queues.insert(q.to_string());
        }
    }
}

/// The Broker seam; each call is its concern's (publish, consume, settle,
/// revoke, restore, burial, beat).
impl Broker for CeleryBroker {
    fn publish(&self, messages: Vec<Message>) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(self.publish_all(messages))
    }

    fn consume<'a>(
        &'a self,
        queues: &'a [String],
        max: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<Delivery>, Refused>> {
        Box::pin(self.consume_from(queues, max, wait))
    }

    fn ack(&self, receipts: Vec<Receipt>) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(self.ack_all(receipts))
    }

    fn reject(&self, receipt: Receipt, requeue: bool) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(self.reject_one(receipt, requeue))
    }

    fn retry(&self, receipt: Receipt, next: Message) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(self.retry_one(receipt, next))
    }

    fn next_eta<'a>(&'a self, queues: &'a [String]) -> BoxFuture<'a, Result<Option<i64>, Refused>> {
        let eta = self.next_held(queues);
        Box::pin(async move { Ok(eta) })
    }

    fn revoke(&self, ids: Vec<String>, until: i64) -> BoxFuture<'_, Result<(), Refused>> {
        self.revoke_all(ids, until, None)
    }

    /// Celery's own revoke with `terminate: true` and the signal: Celery's
    /// workers and headway's hear the same broadcast.
    fn terminate(
        &self,
        ids: Vec<String>,
        until: i64,
        signal: i32,
    ) -> BoxFuture<'_, Result<(), Refused>> {
        self.revoke_all(ids, until, Some(signal))
    }

    fn set_task_events(&self, on: bool) -> bool {
        CeleryBroker::set_task_events(self, on);
        true
    }

    /// On this Redis, under `celery` and the `global_keyprefix`; a
    /// concurrency key's permit is leased for the shared gate's 30 s (the
    /// visibility timeout, an hour, is too long to hold a dead worker's
    /// room), renewed while its run runs.
    fn task_limits(&self) -> Option<Arc<dyn crate::task::limits::TaskLimits>> {
        let me = self.me.upgrade()?;
        Some(crate::limit::tasks::RedisTaskLimits::new(
            me,
            format!("celery{}", self.opts.global_keyprefix),
            crate::limit::LEASE,
            self.facts.clock.clone(),
        ))
    }

    fn rejected(&self, id: &str, requeue: bool) {
        events::rejected(self, id, requeue);
    }

    fn heartbeat_now(&self) -> bool {
        events::heartbeat(self)
    }

    fn worker_stopped(&self) -> BoxFuture<'_, ()> {
        Box::pin(events::look(self))
    }

    fn on_terminate(&self, hear: crate::task::terminate::OnTerminate) {
        self.facts.hearers.add(hear);
    }

    fn revoked<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<Vec<bool>, Refused>> {
        Box::pin(self.revoked_of(ids))
    }

    /// One beat leads (an owner-checked lease), and each entry's slots fire
    /// once, in order, across every beat on this Redis (`beat.lua`, the
    /// scheme of headway's own layout). A standby's claim waits up to one
    /// `beat_lease` for the leader to fire the slot or lapse.
    fn claim_slot<'a>(&'a self, entry: &'a str, due: i64) -> BoxFuture<'a, Result<bool, Refused>> {
        Box::pin(self.claim_slot_inner(entry, due))
    }

    /// kombu's `restore_visible` under `unacked_mutex`
    /// ([`CeleryBroker::restore_visible`]).
    fn recover(&self) -> BoxFuture<'_, Result<usize, Refused>> {
        Box::pin(self.restore_visible())
    }

    fn stopped<'a>(&'a self, queues: &'a [String]) -> BoxFuture<'a, Result<usize, Refused>> {
        Box::pin(self.give_back_unclaimed(queues))
    }

    fn requeue_dead<'a>(
        &'a self,
        queue: &'a str,
        ids: &'a [String],
        limit: usize,
    ) -> BoxFuture<'a, Result<usize, Refused>> {
        Box::pin(self.requeue_dead_letters(queue, ids, limit))
    }

    fn purge_dead<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, Result<usize, Refused>> {
        Box::pin(self.purge_dead_letters(queue))
    }
}
