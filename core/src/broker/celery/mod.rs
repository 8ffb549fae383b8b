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
//! running. Headway also keeps revokes in a sorted set of its own
//! (`headway.celery.revoked`) so a headway worker that was down when the
//! revoke was sent still skips the task.

mod b64;
mod claim;
mod client;
pub mod codec;
pub mod dead;
mod eta;
pub mod pidbox;
pub mod pyjson;
mod restore;
pub mod result;
mod scripts;
pub mod typed;
mod unknown;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use serde_json::Value;
use tokio::sync::Notify;

pub use codec::{CodecError, Decoded, Encoded, Router, Sender};
pub use eta::MAX_HELD_ETAS;
pub use typed::{Typed, TypedError};
pub use unknown::{HANDBACK_HEADER, MAX_HANDBACKS};

use scripts::Scripts;

use super::redis::RedisUrl;
use crate::task::app::Seams;
use crate::task::clock::{BoxFuture, Clock};
use crate::task::dead::{DEAD_KEPT, DeadLetter, MAX_DELIVERIES, MAX_MESSAGE_BYTES};
use crate::task::message::{Message, new_id};
use crate::task::spec::{
    Backend, Broker, ConsumerInfo, Counter, Delivery, Inspector, Joined, QueueInfo, Receipt,
    RunEvent,
};
use crate::task::state::{Failure, Outcome, Refused, State};

/// kombu's Redis transport options and Celery's result backend settings
/// that matter for sharing a Redis with Celery.
#[derive(Debug, Clone, PartialEq)]
pub struct CeleryOptions {
    /// This consumer's node name (pidbox destinations, the inspector):
    /// `headway@<hostname>` when `None`, like Celery's `celery@<hostname>`.
    pub consumer: Option<String>,
    /// How long a claim may stay unacked before any consumer's restore puts
    /// it back: 3600 s, kombu's `visibility_timeout` default.
    pub visibility_timeout: Duration,
    /// The priority steps: `[0, 3, 6, 9]`, kombu's `PRIORITY_STEPS`.
    pub priority_steps: Vec<u8>,
    /// Between a queue's name and its step: `"\x06\x16"`, kombu's `sep`.
    pub sep: String,
    /// Before every transport key and channel: `""`, kombu's
    /// `global_keyprefix`.
    pub global_keyprefix: String,
    /// Before every result key (`result_backend_transport_options`
    /// `global_keyprefix`; `_` is added unless it ends in `:_-.`): `""`.
    pub result_keyprefix: String,
    /// How long results and chord keys live: 1 day, Celery's
    /// `result_expires`. `None` keeps them forever.
    pub result_expires: Option<Duration>,
    /// The Celery queue headway's `default` queue is: `celery`, Celery's
    /// `task_default_queue`.
    pub default_queue: String,
    /// How long the `unacked_mutex` may be held: 300 s, kombu's
    /// `unacked_mutex_expire`.
    pub unacked_mutex_expire: Duration,
    /// How many entries one restore takes: all (`None`), kombu's
    /// `unacked_restore_limit`.
    pub unacked_restore_limit: Option<usize>,
    /// How long a revoke is remembered: 10800 s, Celery's
    /// `CELERY_WORKER_REVOKE_EXPIRES`.
    pub revoke_keep: Duration,
    /// What a consumer does with a task name its app does not register
    /// (once [`CeleryBroker::route_for`] has told it the app): hand it back
    /// for another consumer — a Celery worker on the same queue — by
    /// default, logging the name once.
    pub unknown_tasks: UnknownTasks,
    /// How often a consuming broker runs [`Broker::recover`] by itself, the
    /// first time as soon as it consumes: 100 s, what a Celery worker's
    /// timer amounts to (`maybe_restore_messages` every 10 s, scanning on
    /// every 10th call). `None`: only when called.
    pub restore_every: Option<Duration>,
    /// How many times a message's holder may be lost (its claim restored by
    /// [`Broker::recover`]) before the next restore dead-letters it as a
    /// poison pill instead ([`MAX_DELIVERIES`], 3). Counted in the
    /// envelope's `headway_lost` header; every headway process restoring
    /// one queue should agree on it.
    pub max_deliveries: u32,
    /// The size cap for one envelope ([`MAX_MESSAGE_BYTES`], 16 MiB): a
    /// publish of a bigger one is refused, and a bigger one put on a queue
    /// by another producer goes to the dead letters unparsed (by the claim
    /// script, never sent to the consumer).
    pub max_message_bytes: usize,
    /// How long a beat leads without renewing: 30 s, as on headway's own
    /// layout (BullMQ's lock duration). Renewed every third of it by the
    /// broker's own task; a standby beat takes over within one `beat_lease`
    /// of the leader dying or pausing.
    pub beat_lease: Duration,
    /// How long a write (publish, ack, result, restore) waits for Redis to
    /// come back before it is refused: 10 s, as on headway's own layout —
    /// long enough for a restart, short enough that a caller learns.
    pub patience: Duration,
    /// PEM roots to verify a `rediss://` server against instead of the
    /// platform's (a private CA), as on headway's own layout.
    pub tls_ca: Option<Vec<u8>>,
    /// How many times a message for a task the app does not run is handed
    /// back (counted in its `x-headway-handbacks` header) before the next
    /// hand-back dead-letters it instead: [`unknown::MAX_HANDBACKS`], 100.
    pub max_handbacks: u32,
    /// How many etas a consumer holds in memory at most
    /// ([`eta::MAX_HELD_ETAS`], 10 000): past it, it stops claiming until
    /// one comes due, as Celery's prefetch stops a worker.
    pub max_held_etas: usize,
}

/// What a consumer does with a message for a task its app does not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnknownTasks {
    /// Put it back at the end of its queue for another consumer (the
    /// default: a queue shared with Celery workers carries their tasks too).
    #[default]
    Requeue,
    /// Hand it to the worker, which records FAILURE `NotRegistered` as a
    /// Celery worker does.
    Fail,
}

impl Default for CeleryOptions {
    fn default() -> Self {
        CeleryOptions {
            consumer: None,
            visibility_timeout: Duration::from_secs(3600),
            priority_steps: vec![0, 3, 6, 9],
            sep: "\x06\x16".into(),
            global_keyprefix: String::new(),
            result_keyprefix: String::new(),
            result_expires: Some(Duration::from_secs(86_400)),
            default_queue: "celery".into(),
            unacked_mutex_expire: Duration::from_secs(300),
            unacked_restore_limit: None,
            revoke_keep: Duration::from_secs(10_800),
            unknown_tasks: UnknownTasks::Requeue,
            restore_every: Some(Duration::from_secs(100)),
            max_deliveries: MAX_DELIVERIES,
            max_message_bytes: MAX_MESSAGE_BYTES,
            beat_lease: Duration::from_secs(30),
            patience: Duration::from_secs(10),
            tls_ca: None,
            max_handbacks: unknown::MAX_HANDBACKS,
            max_held_etas: eta::MAX_HELD_ETAS,
        }
    }
}

impl CeleryOptions {
    fn check(&self) -> Result<(), Refused> {
        if self.visibility_timeout.is_zero() {
            return Err(Refused::Invalid(
                "invalid `visibility_timeout`: must be positive".into(),
            ));
        }
        if self.priority_steps.is_empty()
            || self.priority_steps[0] != 0
            || self.priority_steps.windows(2).any(|w| w[0] >= w[1])
            || self.priority_steps.iter().any(|&s| s > 9)
        {
            return Err(Refused::Invalid(
                "invalid `priority_steps`: must rise from 0 and stay within 0..=9".into(),
            ));
        }
        if self.sep.is_empty() {
            return Err(Refused::Invalid("invalid `sep`: must not be empty".into()));
        }
        if self.default_queue.is_empty() {
            return Err(Refused::Invalid(
                "invalid `default_queue`: must not be empty".into(),
            ));
        }
        if self.max_deliveries == 0 {
            return Err(Refused::Invalid(
                "invalid `max_deliveries`: must be at least 1".into(),
            ));
        }
        if self.max_held_etas == 0 {
            return Err(Refused::Invalid(
                "invalid `max_held_etas`: must be at least 1".into(),
            ));
        }
        if self.max_handbacks == 0 {
            return Err(Refused::Invalid(
                "invalid `max_handbacks`: must be at least 1".into(),
            ));
        }
        if self.max_message_bytes == 0 {
            return Err(Refused::Invalid(
                "invalid `max_message_bytes`: must be at least 1".into(),
            ));
        }
        if self.beat_lease < Duration::from_millis(30) {
            return Err(Refused::Invalid(
                "invalid `beat_lease`: must be at least 30 ms".into(),
            ));
        }
        Ok(())
    }
}

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

/// One message on its way to the dead letters.
struct Burial {
    /// Its `unacked` tag ("": it never got there).
    tag: String,
    /// Its `unacked` entry as read, to compare before moving ("": presence).
    entry: Vec<u8>,
    /// The dead letter ([`dead::element`]).
    element: Vec<u8>,
    reason: String,
}

/// What became of a restored tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Restored {
    /// Back on its queue.
    Back,
    /// In the dead letters.
    Dead,
    /// Not there any more (settled or restored by someone else).
    Gone,
}

/// How many chord parts' group indexes are remembered between receipt and
/// arrival: enough for any prefetch, small enough to bound memory.
const PARTS_KEPT: usize = 65_536;

/// How many run events are kept.
const EVENTS_KEPT: isize = 1000;

/// How many results one store script call writes at most: a round's worth,
/// without one call holding Redis for long.
const STORE_CHUNK: usize = 256;

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
    /// Revoked ids → until (ms).
    revoked: HashMap<String, i64>,
    /// Chord parts received: id → group index.
    parts: HashMap<String, Option<u32>>,
    parts_order: VecDeque<String>,
    /// Queues this broker has seen (for the inspector).
    queues: HashSet<String>,
}

/// A settle or a hand-back that could not reach Redis within the patience:
/// kept, and retried by the background task until it lands (each is
/// idempotent: an `unacked` entry is removed once, a push happens once).
#[derive(Debug, Clone)]
enum Owed {
    /// Acks (or drops) of these tags.
    Drop(Vec<String>),
    /// A reject with requeue, or a release: the tag back on its queue.
    Restore(String, bool),
    /// An envelope a BRPOP took whose hold did not land: back to the front
    /// of the list it came from.
    PushBack(String, Vec<u8>),
}

/// Celery's Redis layout behind headway's four seams.
pub struct CeleryBroker {
    me: Weak<CeleryBroker>,
    client: redis::Client,
    url: RedisUrl,
    db: i64,
    /// Failed attempts to reach Redis since the last answer (0: connected):
    /// an outage is logged when it starts and when it ends.
    failures: AtomicU32,
    /// Settles and hand-backs waiting for Redis.
    owed: Mutex<Vec<Owed>>,
    /// This broker's beat lease owner: the node name and a random suffix,
    /// so two beats on one host never share a lease.
    beat_owner: String,
    /// Whether this broker's beat holds the lease: the background task
    /// renews it (owner-checked) while it does.
    beat_leader: AtomicBool,
    cmd: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    blocking: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    opts: CeleryOptions,
    node: String,
    sender: Sender,
    app: std::sync::RwLock<Option<Weak<crate::task::app::AppInner>>>,
    warned: Mutex<HashSet<String>>,
    clock: Arc<dyn Clock>,
    local: Mutex<Local>,
    seq: AtomicU64,
    lamport: AtomicU64,
    consumed: std::sync::atomic::AtomicBool,
    /// Run events not yet written: a worker records one per settle, and one
    /// round trip each would cost as much as the settle itself.
    events: Mutex<Vec<String>>,
    stored: Notify,
    revoked_bell: Notify,
    waits: Mutex<HashMap<String, (usize, Arc<Notify>)>>,
    sink: tokio::sync::Mutex<Option<redis::aio::PubSubSink>>,
    keys: Keys,
    scripts: Scripts,
}

struct Keys {
    unacked: String,
    index: String,
    mutex: String,
    revoked: String,
    events: String,
    dead: String,
    beat_lease: String,
    beat_fired: String,
    pidbox: String,
    pidbox_patterns: Vec<String>,
    result_prefix: String,
}

impl std::fmt::Debug for CeleryBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CeleryBroker")
            .field("url", &self.url)
            .field("node", &self.node)
            .finish()
    }
}

fn is_conn_error(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
}

impl CeleryBroker {
    /// Connects to the Redis at `url` (`redis://[user:pass@]host:port/db`,
    /// `rediss://` for TLS) and answers a broker on Celery's layout there.
    /// `clock` is the app's: index scores, etas and result times read it.
    ///
    /// Starts two background tasks on the current tokio runtime: the
    /// subscriber (result wake-ups and pidbox revokes) and the re-scorer of
    /// held claims. Both stop when the broker is dropped.
    pub async fn connect(
        url: &str,
        opts: CeleryOptions,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<CeleryBroker>, Refused> {
        opts.check()?;
        // headway's URL rules (percent-decoded credentials, the db number,
        // `rediss://`) and its redaction: a password never reaches a log.
        // headway's URL rules (percent-decoded credentials, the db number,
        // `rediss://`, `tls_ca`) and its redaction: only the parsed URL is
        // ever shown, so no password reaches a log, encoded or not.
        let parsed = RedisUrl::parse(url)?;
        let client = client::client(&parsed, opts.tls_ca.as_deref())?;
        let db = parsed.db;
        let cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(5)))
            .set_response_timeout(Some(Duration::from_secs(30)));
        let cmd = client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await
            .map_err(|e| {
                Refused::Broker(format!(
                    "cannot reach {parsed}: {}",
                    client::scrub(&parsed, &e.to_string())
                ))
            })?;
        super::redis::refuse_cluster(&mut cmd.clone(), &parsed).await?;
        let p = &opts.global_keyprefix;
        let mut rp = opts.result_keyprefix.clone();
        if !rp.is_empty() && !rp.ends_with([':', '_', '-', '.']) {
            rp.push('_');
        }
        let base = pidbox::channel("", db);
        let mut patterns = vec![base.clone()];
        if !p.is_empty() {
            patterns.push(format!("{p}{base}"));
        }
        let keys = Keys {
            unacked: format!("{p}unacked"),
            index: format!("{p}unacked_index"),
            mutex: format!("{p}unacked_mutex"),
            revoked: format!("{p}headway.celery.revoked"),
            events: format!("{p}headway.celery.events"),
            dead: format!("{p}headway.celery.dead:"),
            beat_lease: format!("{p}headway.celery.beat.lease"),
            beat_fired: format!("{p}headway.celery.beat.fired"),
            pidbox: pidbox::channel(p, db),
            pidbox_patterns: patterns,
            result_prefix: rp,
        };
        let node = opts
            .consumer
            .clone()
            .unwrap_or_else(|| format!("headway@{}", codec::hostname()));
        let beat_owner = format!("{node}#{}-{}", std::process::id(), &new_id()[..8]);
        let broker = Arc::new_cyclic(|me| CeleryBroker {
            me: me.clone(),
            client,
            url: parsed,
            db,
            failures: AtomicU32::new(0),
            owed: Mutex::new(Vec::new()),
            beat_owner,
            beat_leader: AtomicBool::new(false),
            cmd: tokio::sync::Mutex::new(Some(cmd)),
            blocking: tokio::sync::Mutex::new(None),
            sender: Sender::this_process(&opts.default_queue),
            app: std::sync::RwLock::new(None),
            warned: Mutex::new(HashSet::new()),
            opts,
            node,
            clock,
            local: Mutex::new(Local::default()),
            seq: AtomicU64::new(0),
            lamport: AtomicU64::new(0),
            consumed: std::sync::atomic::AtomicBool::new(false),
            events: Mutex::new(Vec::new()),
            stored: Notify::new(),
            revoked_bell: Notify::new(),
            waits: Mutex::new(HashMap::new()),
            sink: tokio::sync::Mutex::new(None),
            keys,
            scripts: Scripts::new(),
        });
        broker.load_revoked().await?;
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(listen(Arc::downgrade(&broker), Some(ready_tx)));
        tokio::spawn(rescore_loop(Arc::downgrade(&broker)));
        // Subscribed before connect answers, so a revoke sent right after is
        // heard; a subscriber that cannot start is retried in the background.
        let _ = tokio::time::timeout(Duration::from_secs(5), ready_rx).await;
        Ok(broker)
    }

    /// The four seams an [`crate::task::App`] is built on, all this broker.
    pub fn seams(self: &Arc<Self>) -> Seams {
        Seams {
            broker: self.clone(),
            backend: Some(self.clone()),
            counter: Some(self.clone()),
            inspector: Some(self.clone()),
        }
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
        &self.node
    }

    /// The encoder/decoder it uses (origin, reply-to, queue alias).
    pub fn sender(&self) -> &Sender {
        &self.sender
    }

    /// Routes chain links and callbacks whose signature names no queue by
    /// `app`'s policies — headway resolves a link's queue when the link is
    /// published, but a Celery worker publishes the next link itself and
    /// knows only what the signature says. Call it once the app is built on
    /// this broker (the bindings do). Holds the app weakly.
    pub fn route_for(&self, app: &crate::task::App) {
        let weak = Arc::downgrade(&app.inner);
        *self.app.write().unwrap_or_else(|e| e.into_inner()) = Some(weak.clone());
        let router: codec::Router = Arc::new(move |task: &str| {
            let inner = weak.upgrade()?;
            crate::task::App { inner }.policy_of(task).map(|p| p.queue)
        });
        *self
            .sender
            .routes
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Some(router);
    }

    /// Writes buffered run events in one pipeline (the recorder flushes at
    /// 256, the background loop every 250 ms or so, `recent` before reading).
    async fn flush_events(&self) -> Result<(), Refused> {
        let batch = std::mem::take(&mut *self.events.lock().unwrap_or_else(|e| e.into_inner()));
        if batch.is_empty() {
            return Ok(());
        }
        let mut p = redis::pipe();
        p.lpush(&self.keys.events, &batch).ignore();
        p.ltrim(&self.keys.events, 0, EVENTS_KEPT - 1).ignore();
        let mut c = self.conn().await?;
        match p.query_async::<()>(&mut c).await {
            Ok(()) => Ok(()),
            Err(e) => Err(self.fail(e).await),
        }
    }

    /// The Redis database number (it names the pidbox channel).
    pub fn db(&self) -> i64 {
        self.db
    }

    fn lock(&self) -> MutexGuard<'_, Local> {
        self.local.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn log(&self, what: &str) {
        eprintln!("headway celery broker {}: {what}", self.node);
    }

    async fn conn(&self) -> Result<MultiplexedConnection, Refused> {
        let mut g = self.cmd.lock().await;
        if let Some(c) = g.as_ref() {
            return Ok(c.clone());
        }
        let cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(5)))
            .set_response_timeout(Some(Duration::from_secs(30)));
        match self
            .client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await
        {
            Ok(c) => {
                let n = self.failures.swap(0, Ordering::SeqCst);
                if n > 0 {
                    self.log(&format!(
                        "reconnected to {} after {n} attempt(s); resuming",
                        self.url
                    ));
                }
                *g = Some(c.clone());
                Ok(c)
            }
            Err(e) => {
                if self.failures.fetch_add(1, Ordering::SeqCst) == 0 {
                    self.log(&format!(
                        "cannot reach {}: {}; retrying",
                        self.url,
                        client::scrub(&self.url, &e.to_string())
                    ));
                }
                Err(self.refused(&e))
            }
        }
    }

    fn refused(&self, e: &redis::RedisError) -> Refused {
        Refused::Broker(format!(
            "{}: {}",
            self.url,
            client::scrub(&self.url, &e.to_string())
        ))
    }

    /// Turns a Redis error into a refusal, dropping the connection when the
    /// error says it is dead so the next call reconnects.
    async fn fail(&self, e: redis::RedisError) -> Refused {
        if is_conn_error(&e) && self.cmd.lock().await.take().is_some() {
            self.failures.fetch_max(1, Ordering::SeqCst);
            self.log(&format!(
                "connection to {} lost ({}); reconnecting",
                self.url,
                client::scrub(&self.url, &e.to_string())
            ));
        }
        self.refused(&e)
    }

    /// Runs `op` on the command connection, waiting through an outage: on a
    /// connection error (or a Redis still loading its data after a restart)
    /// it reconnects and tries again, backing off from 50 ms to 1 s, for up
    /// to `patience`. Any other error is answered at once.
    async fn patiently<T, F, Fut>(&self, mut op: F) -> Result<T, Refused>
    where
        F: FnMut(MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = Result<T, redis::RedisError>>,
    {
        let deadline = tokio::time::Instant::now() + self.opts.patience;
        let mut wait = Duration::from_millis(50);
        loop {
            let why = match self.conn().await {
                Ok(c) => match op(c).await {
                    Ok(v) => return Ok(v),
                    Err(e) => {
                        let transient = is_conn_error(&e) || e.code() == Some("LOADING");
                        let why = self.fail(e).await;
                        if !transient {
                            return Err(why);
                        }
                        why
                    }
                },
                Err(why) => why,
            };
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(why);
            }
            tokio::time::sleep(wait.min(deadline - now)).await;
            wait = (wait * 2).min(Duration::from_secs(1));
        }
    }

    /// The list key of `queue` (a headway name) at `step`.
    pub fn queue_key(&self, queue: &str, step: u8) -> String {
        let q = self.sender.wire_queue(queue);
        if step == 0 {
            format!("{}{q}", self.opts.global_keyprefix)
        } else {
            format!("{}{q}{}{step}", self.opts.global_keyprefix, self.opts.sep)
        }
    }

    /// The step a priority goes to: the largest step not above it (kombu's
    /// `priority()`), priorities clamped to 0..=9.
    pub fn step_of(&self, priority: Option<u8>) -> u8 {
        let p = priority.unwrap_or(0).min(9);
        *self
            .opts
            .priority_steps
            .iter()
            .rev()
            .find(|&&s| s <= p)
            .unwrap_or(&0)
    }

    /// The key of `id`'s result: `celery-task-meta-<id>`.
    pub fn meta_key(&self, id: &str) -> String {
        format!("{}celery-task-meta-{id}", self.keys.result_prefix)
    }

    /// A chord's key: `celery-taskset-meta-<gid><suffix>`.
    pub fn group_key(&self, gid: &str, suffix: &str) -> String {
        format!(
            "{}celery-taskset-meta-{gid}{suffix}",
            self.keys.result_prefix
        )
    }

    fn now_secs(&self) -> f64 {
        typed::unix_secs(self.clock.now())
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

    /// Encodes `m` for its queue: (queue key, envelope).
    fn encode(&self, m: &Message) -> (String, Encoded) {
        let key = self.queue_key(&m.queue, self.step_of(m.priority));
        (key, self.sender.encode(m, self.clock.now()))
    }

    /// The dead-letter list of `queue` (a headway name):
    /// `headway.celery.dead:<Celery queue name>`, a key no Celery worker
    /// reads (see `docs/celery.md`).
    pub fn dead_key(&self, queue: &str) -> String {
        format!("{}{}", self.keys.dead, self.sender.wire_queue(queue))
    }

    /// Moves messages to `queue`'s dead letters, one `bury.lua` each
    /// (fenced on their `unacked` entries), and logs why: a message set
    /// aside must neither block the queue nor vanish unseen. Answers how
    /// many moved; one that could not (Redis away past the patience) is
    /// left where it was — in `unacked`, restored and quarantined again
    /// later — and logged.
    async fn bury(&self, queue: &str, what: &str, items: Vec<Burial>) -> usize {
        if items.is_empty() {
            return 0;
        }
        let key = self.dead_key(queue);
        let reasons: Vec<String> = items
            .iter()
            .map(|b| crate::log::shown(&b.reason).to_string())
            .collect();
        self.log(&format!(
            "queue {queue:?}: {what} {} message(s) in {key}: {}",
            items.len(),
            reasons.join("; ")
        ));
        let mut n = 0;
        for b in &items {
            let mut inv = self.scripts.bury.prepare_invoke();
            inv.key(&self.keys.unacked)
                .key(&self.keys.index)
                .key(&key)
                .arg(&b.tag)
                .arg(b.entry.as_slice())
                .arg(b.element.as_slice())
                .arg(DEAD_KEPT);
            let inv = &inv;
            match self
                .patiently(|mut c| async move { inv.invoke_async::<i64>(&mut c).await })
                .await
            {
                Ok(1) => n += 1,
                Ok(_) => {}
                Err(e) => self.log(&format!(
                    "queue {queue:?}: could not move a message to {key} ({e}){}",
                    if b.tag.is_empty() {
                        "; its bytes are lost"
                    } else {
                        "; it stays in `unacked` and is set aside again after a restore"
                    }
                )),
            }
        }
        n
    }

    /// Turns claimed envelopes into deliveries (held when their eta is
    /// still ahead), quarantining what cannot be read ([`dead::decode`]).
    async fn admit(&self, claimed: Vec<Taken>) -> Result<usize, Refused> {
        let now = self.clock.now();
        let mut n = 0;
        let mut bad: Vec<(String, Burial)> = Vec::new();
        let mut foreign = Vec::new();
        for Taken {
            queue,
            step,
            tag,
            raw,
        } in claimed
        {
            let decoded = match dead::decode(&self.sender, &raw, self.opts.max_message_bytes) {
                // Parsed by headway, not by Redis's cjson: it never reached
                // `unacked`, so it is nobody's to run.
                Ok(_) if tag.is_empty() => Err(crate::task::dead::Undecodable {
                    reason: "bad JSON: not readable by Redis's cjson".into(),
                    id: None,
                }),
                other => other,
            };
            match decoded {
                // Another consumer's task in a content type headway does not
                // read (a pickle): a Celery worker may accept it, so it goes
                // back. (Other faults would fail there too: quarantined.)
                Err(why)
                    if !tag.is_empty()
                        && why.reason.starts_with("content type not allowed")
                        && unknown::named_task(&raw).is_some_and(|t| self.is_foreign(&t)) =>
                {
                    foreign.push(tag)
                }
                Err(why) => {
                    let element = dead::element(now, &why.reason, step, why.id.as_deref(), &raw);
                    bad.push((
                        queue,
                        Burial {
                            tag,
                            entry: Vec::new(),
                            element,
                            reason: why.reason,
                        },
                    ));
                }
                Ok(d) if self.is_foreign(&d.message.task) => foreign.push(tag),
                Ok(d) => {
                    let local = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
                    let m = d.message;
                    let delivery = Delivery {
                        receipt: Receipt {
                            queue: m.queue.clone(),
                            tag: local,
                            token: local,
                            raw: Some(Arc::from(tag.as_bytes())),
                        },
                        redelivered: d.redelivered,
                        message: m,
                    };
                    n += 1;
                    let mut g = self.lock();
                    g.out.insert(
                        local,
                        Held {
                            tag: tag.clone(),
                            queue: delivery.message.queue.clone(),
                            id: delivery.message.id.clone(),
                        },
                    );
                    if delivery.message.chord.is_some() && delivery.message.chain.is_empty() {
                        let id = delivery.message.id.clone();
                        if g.parts
                            .insert(id.clone(), delivery.message.group_index)
                            .is_none()
                        {
                            g.parts_order.push_back(id);
                            while g.parts_order.len() > PARTS_KEPT {
                                if let Some(old) = g.parts_order.pop_front() {
                                    g.parts.remove(&old);
                                }
                            }
                        }
                    }
                    match delivery.message.eta {
                        Some(eta) if eta > now => {
                            g.held.insert((eta, local), delivery);
                        }
                        _ => g.inbox.push_back(delivery),
                    }
                }
            }
        }
        while !bad.is_empty() {
            let q = bad[0].0.clone();
            let (mine, rest): (Vec<_>, Vec<_>) = bad.into_iter().partition(|(x, _)| *x == q);
            bad = rest;
            self.bury(
                &q,
                "quarantined",
                mine.into_iter().map(|(_, b)| b).collect(),
            )
            .await;
        }
        for t in &foreign {
            self.put_back(t, true, restore::Count::HandBack).await?;
        }
        if n == 0 && !foreign.is_empty() {
            // Only other consumers' work came: do not spin on it.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(n)
    }

    async fn drop_tags(&self, tags: &[String]) -> Result<(), Refused> {
        let mut p = redis::pipe();
        p.atomic()
            .zrem(&self.keys.index, tags)
            .hdel(&self.keys.unacked, tags);
        let p = &p;
        self.patiently(|mut c| async move { p.query_async::<()>(&mut c).await })
            .await
    }

    /// Keeps a settle that could not land, for the background task.
    fn owe(&self, what: Owed, why: &Refused) {
        self.log(&format!(
            "{why}; a settle is kept to retry when Redis is back"
        ));
        self.owed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(what);
    }

    /// Retries kept settles (the background task, each round).
    async fn pay(&self) {
        let owed: Vec<Owed> =
            std::mem::take(&mut *self.owed.lock().unwrap_or_else(|e| e.into_inner()));
        if owed.is_empty() {
            return;
        }
        let n = owed.len();
        let mut left = Vec::new();
        for (i, o) in owed.iter().enumerate() {
            let r = match o {
                Owed::Drop(tags) => self.drop_tags(tags).await,
                Owed::Restore(tag, leftmost) => {
                    self.restore_tag(tag, *leftmost, false).await.map(|_| ())
                }
                Owed::PushBack(key, raw) => {
                    let mut p = redis::pipe();
                    p.rpush(key, raw.as_slice()).ignore();
                    let p = &p;
                    self.patiently(|mut c| async move { p.query_async::<()>(&mut c).await })
                        .await
                }
            };
            if r.is_err() {
                left.extend(owed[i..].iter().cloned());
                break;
            }
        }
        if left.is_empty() {
            self.log(&format!("{n} kept settle(s) landed"));
        } else {
            self.owed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(left);
        }
    }

    /// The tags kept settles name: still this consumer's, so neither
    /// re-scored away nor restored by its own `recover()`.
    fn owed_tags(&self) -> Vec<String> {
        let g = self.owed.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for o in g.iter() {
            match o {
                Owed::Drop(tags) => out.extend(tags.iter().cloned()),
                Owed::Restore(tag, _) => out.push(tag.clone()),
                Owed::PushBack(..) => {}
            }
        }
        out
    }

    /// Gives back everything this consumer holds (etas waiting, claims not
    /// settled) to the front of their queues, as kombu's `restore_unacked`
    /// does at a warm shutdown. Answers how many went back.
    pub async fn release(&self) -> Result<usize, Refused> {
        let tags: Vec<String> = {
            let mut g = self.lock();
            g.held.clear();
            g.inbox.clear();
            g.out.drain().map(|(_, h)| h.tag).collect()
        };
        let mut n = 0;
        for t in tags {
            if self.restore_tag(&t, false, false).await? == Restored::Back {
                n += 1;
            }
        }
        Ok(n)
    }

    async fn load_revoked(&self) -> Result<(), Refused> {
        let now = self.clock.now();
        let mut c = self.conn().await?;
        let got: Vec<(String, f64)> = match redis::cmd("ZRANGEBYSCORE")
            .arg(&self.keys.revoked)
            .arg(now)
            .arg("+inf")
            .arg("WITHSCORES")
            .query_async(&mut c)
            .await
        {
            Ok(v) => v,
            Err(e) => return Err(self.fail(e).await),
        };
        let mut g = self.lock();
        for (id, until) in got {
            g.revoked.insert(id, until as i64);
        }
        Ok(())
    }

    fn note_revoked(&self, ids: &[String], until: i64) {
        let mut g = self.lock();
        let now = self.clock.now();
        g.revoked.retain(|_, u| *u > now);
        for id in ids {
            g.revoked.insert(id.clone(), until);
        }
        drop(g);
        self.revoked_bell.notify_waiters();
    }

    fn on_pidbox(&self, payload: &[u8]) {
        let Some(c) = pidbox::decode(payload) else {
            return;
        };
        if c.method != "revoke" || !c.is_for(&self.node, self.now_secs()) {
            return;
        }
        let keep = i64::try_from(self.opts.revoke_keep.as_millis()).unwrap_or(i64::MAX);
        let until = self.clock.now().saturating_add(keep);
        self.note_revoked(&c.ids, until);
    }

    /// Registers a waiter on `channel`, subscribing on first use.
    async fn watch(&self, channel: &str) -> Arc<Notify> {
        let (bell, first) = {
            let mut w = self.waits.lock().unwrap_or_else(|e| e.into_inner());
            let e = w
                .entry(channel.to_string())
                .or_insert_with(|| (0, Arc::new(Notify::new())));
            e.0 += 1;
            (e.1.clone(), e.0 == 1)
        };
        if first && let Some(s) = self.sink.lock().await.as_mut() {
            let _ = s.subscribe(channel).await;
        }
        bell
    }

    async fn unwatch(&self, channel: &str) {
        let last = {
            let mut w = self.waits.lock().unwrap_or_else(|e| e.into_inner());
            match w.get_mut(channel) {
                Some(e) if e.0 > 1 => {
                    e.0 -= 1;
                    false
                }
                Some(_) => {
                    w.remove(channel);
                    true
                }
                None => false,
            }
        };
        if last && let Some(s) = self.sink.lock().await.as_mut() {
            let _ = s.unsubscribe(channel).await;
        }
    }

    fn ring(&self, channel: &str) {
        let bell = self
            .waits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(channel)
            .map(|e| e.1.clone());
        if let Some(b) = bell {
            b.notify_waiters();
        }
    }

    /// The `unacked` tags `receipts` settle, each taken out of what this
    /// consumer holds. A receipt names its message by that tag (`raw`);
    /// its local number is only this instance's, and a receipt from
    /// another instance (or a stale one) may carry a number this one uses
    /// for another message — so the local hold is let go only when its
    /// tag is the receipt's. A receipt without a tag names nothing.
    fn settle_local(&self, receipts: &[Receipt]) -> Vec<String> {
        let mut g = self.lock();
        receipts
            .iter()
            .filter_map(|r| {
                let tag = String::from_utf8_lossy(r.raw.as_deref()?).into_owned();
                if g.out.get(&r.tag).is_some_and(|h| h.tag == tag) {
                    g.out.remove(&r.tag);
                }
                Some(tag)
            })
            .collect()
    }

    async fn fetch_raw(&self, id: &str) -> Result<Option<Vec<u8>>, Refused> {
        let mut c = self.conn().await?;
        match redis::cmd("GET")
            .arg(self.meta_key(id))
            .query_async(&mut c)
            .await
        {
            Ok(v) => Ok(v),
            Err(e) => Err(self.fail(e).await),
        }
    }

    async fn fetch_outcome(&self, id: &str) -> Result<Option<Outcome>, Refused> {
        match self.fetch_raw(id).await? {
            None => Ok(None),
            Some(raw) => result::decode_meta(id, &raw)
                .map(Some)
                .map_err(|e| Refused::Broker(e.to_string())),
        }
    }

    /// Stores `outcomes` (the seam's rule: never over a final state), one
    /// script call per `STORE_CHUNK`, in one pipeline.
    async fn store_all(&self, outcomes: &[Outcome]) -> Result<(), Refused> {
        if outcomes.is_empty() {
            return Ok(());
        }
        let ex = self.expires_secs();
        // One pipeline of EVALSHA, one round trip; a Redis that lost the
        // script (a restart) has it loaded again and the pipeline re-run.
        let mut p = redis::pipe();
        for chunk in outcomes.chunks(STORE_CHUNK) {
            let mut c = redis::cmd("EVALSHA");
            c.arg(self.scripts.store.get_hash()).arg(chunk.len());
            for o in chunk {
                c.arg(self.meta_key(&o.id));
            }
            c.arg(ex);
            for o in chunk {
                c.arg(result::encode_meta(o, None, None));
            }
            p.add_command(c).ignore();
        }
        let (p, script) = (&p, &self.scripts.store);
        self.patiently(|mut c| async move {
            match p.query_async::<()>(&mut c).await {
                Err(e) if e.code() == Some("NOSCRIPT") => {
                    script.load_async(&mut c).await?;
                    p.query_async::<()>(&mut c).await
                }
                r => r,
            }
        })
        .await?;
        self.stored.notify_waiters();
        Ok(())
    }

    /// The last part of a chord finished: send its callback, or fail it.
    async fn complete_chord(
        &self,
        key: &str,
        part: &str,
        members: Vec<Vec<u8>>,
        callback: &Message,
    ) -> Result<(), Refused> {
        let mut results = Vec::with_capacity(members.len());
        let mut failed: Option<Failure> = None;
        for raw in &members {
            let m: Value = serde_json::from_slice(raw)
                .map_err(|e| Refused::Broker(format!("bad chord member: {e}")))?;
            let tid = m.get(1).and_then(Value::as_str).unwrap_or("?").to_string();
            let state = m.get(2).and_then(Value::as_str).unwrap_or("");
            let r = m.get(3).cloned().unwrap_or(Value::Null);
            if matches!(state, "FAILURE" | "REVOKED") {
                let f = result::failure_of(&r, None);
                failed.get_or_insert_with(|| {
                    Failure::new(
                        "ChordError",
                        format!("Dependency {tid} raised {}({:?})", f.kind, f.message),
                    )
                });
            }
            results.push(r);
        }
        if let Some(f) = failed {
            let now = self.clock.now();
            let mut all = Vec::new();
            let mut o = Outcome::new(callback.id.clone(), State::Failure, now);
            o.task = Some(callback.task.clone());
            o.error = Some(f.clone());
            all.push(o);
            for s in &callback.chain {
                if let Some(id) = &s.id {
                    let mut o = Outcome::new(id.clone(), State::Failure, now);
                    o.error = Some(f.clone());
                    all.push(o);
                }
            }
            return self.store_all(&all).await;
        }
        let mut cb = callback.clone();
        let immutable = cb.join.take().is_some_and(|j| j.immutable);
        if !immutable {
            cb.args.insert(0, Value::Array(results));
        }
        cb.parent_id = Some(part.to_string());
        let (qkey, enc) = self.encode(&cb);
        let mut c = self.conn().await?;
        let r: Result<i64, _> = self
            .scripts
            .fire
            .key(self.group_key(key, ".j"))
            .key(self.group_key(key, ".t"))
            .key(self.group_key(key, ".s"))
            .key(qkey)
            .arg(enc.json)
            .invoke_async(&mut c)
            .await;
        match r {
            Ok(_) => Ok(()),
            Err(e) => Err(self.fail(e).await),
        }
    }
}

/// The subscriber: result channels (on demand) and the pidbox pattern.
/// Reconnects with a capped backoff and resubscribes what is being waited on.
async fn listen(me: Weak<CeleryBroker>, mut ready: Option<tokio::sync::oneshot::Sender<()>>) {
    use futures_util::StreamExt;
    let mut backoff = Duration::from_millis(100);
    loop {
        let Some(b) = me.upgrade() else { return };
        let ps = b.client.get_async_pubsub().await;
        let (mut sink, mut stream) = match ps {
            Ok(p) => p.split(),
            Err(_) => {
                drop(b);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
                continue;
            }
        };
        let mut ok = true;
        for p in &b.keys.pidbox_patterns {
            ok &= sink.psubscribe(p).await.is_ok();
        }
        let channels: Vec<String> = b
            .waits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        for ch in &channels {
            ok &= sink.subscribe(ch).await.is_ok();
        }
        if !ok {
            drop(b);
            tokio::time::sleep(backoff).await;
            continue;
        }
        *b.sink.lock().await = Some(sink);
        // Anything stored while the subscriber was down: wake every waiter
        // so it reads the key again.
        for ch in &channels {
            b.ring(ch);
        }
        let _ = b.load_revoked().await;
        backoff = Duration::from_millis(100);
        if let Some(r) = ready.take() {
            let _ = r.send(());
        }
        drop(b);
        while let Some(msg) = stream.next().await {
            let Some(b) = me.upgrade() else { return };
            let ch = msg.get_channel_name().to_string();
            if msg.from_pattern() {
                b.on_pidbox(msg.get_payload_bytes());
            } else {
                b.ring(&ch);
            }
        }
        let Some(b) = me.upgrade() else { return };
        *b.sink.lock().await = None;
    }
}

/// Re-scores held claims every quarter of the visibility timeout (at least
/// every 250 ms, at most every 5 minutes), retries settles kept through an
/// outage, renews the beat lease while this broker's beat leads (every third
/// of `beat_lease`), and — once this broker consumes — restores dead
/// consumers' claims every `restore_every`, as a Celery worker's timer does.
async fn rescore_loop(me: Weak<CeleryBroker>) {
    let (period, restore_every, renew_every) = {
        let Some(b) = me.upgrade() else { return };
        (
            (b.opts.visibility_timeout / 4)
                .clamp(Duration::from_millis(250), Duration::from_secs(300)),
            b.opts.restore_every,
            b.opts.beat_lease / 3,
        )
    };
    let tick = period
        .min(Duration::from_millis(250))
        .min(renew_every)
        .max(Duration::from_millis(10));
    let mut last_rescore = tokio::time::Instant::now();
    let mut last_restore: Option<tokio::time::Instant> = None;
    let mut last_renew = tokio::time::Instant::now();
    // Each kind of failure is logged once per outage: the connection's own
    // log says when it ends.
    let (mut rescore_failing, mut restore_failing) = (false, false);
    loop {
        tokio::time::sleep(tick).await;
        let Some(b) = me.upgrade() else { return };
        let now = tokio::time::Instant::now();
        if now.duration_since(last_renew) >= renew_every {
            last_renew = now;
            b.renew_beat().await;
        }
        let _ = b.flush_events().await;
        b.pay().await;
        if now.duration_since(last_rescore) >= period {
            last_rescore = now;
            match b.heartbeat().await {
                Ok(_) => rescore_failing = false,
                Err(e) if !rescore_failing => {
                    rescore_failing = true;
                    b.log(&format!("could not re-score held claims: {e}"));
                }
                Err(_) => {}
            }
        }
        if let Some(every) = restore_every
            && b.consumed.load(Ordering::Relaxed)
            && last_restore.is_none_or(|t| now.duration_since(t) >= every)
        {
            last_restore = Some(now);
            match b.recover().await {
                Ok(n) => {
                    restore_failing = false;
                    if n > 0 {
                        b.log(&format!(
                            "restored {n} claim(s) older than the visibility timeout"
                        ));
                    }
                }
                Err(e) if !restore_failing => {
                    restore_failing = true;
                    b.log(&format!("could not restore claims: {e}"));
                }
                Err(_) => {}
            }
        }
    }
}

impl Broker for CeleryBroker {
    fn publish(&self, messages: Vec<Message>) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(async move {
            if messages.is_empty() {
                return Ok(());
            }
            let mut ready = Vec::with_capacity(messages.len());
            for m in messages {
                if let Some(m) = self.materialize(m).await? {
                    ready.push(m);
                }
            }
            let mut p = redis::pipe();
            for m in &ready {
                let (key, enc) = self.encode(m);
                if enc.json.len() > self.opts.max_message_bytes {
                    return Err(Refused::Invalid(format!(
                        "invalid `message` {:?}: {} bytes encoded, over the `max_message_bytes` cap of {}",
                        crate::task::spec::truncate(m.id.clone(), 64),
                        enc.json.len(),
                        self.opts.max_message_bytes
                    )));
                }
                p.lpush(key, enc.json).ignore();
            }
            for m in &ready {
                self.remember_queue(&m.queue);
            }
            let p = &p;
            self.patiently(|mut c| async move { p.query_async::<()>(&mut c).await })
                .await
        })
    }

    fn consume<'a>(
        &'a self,
        queues: &'a [String],
        max: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<Delivery>, Refused>> {
        Box::pin(async move {
            if max == 0 || queues.is_empty() {
                return Ok(Vec::new());
            }
            for q in queues {
                self.remember_queue(q);
            }
            self.consumed.store(true, Ordering::Relaxed);
            let deadline = tokio::time::Instant::now() + wait;
            let mut first = true;
            loop {
                let out = self.take_ready(queues, max);
                if !out.is_empty() {
                    return Ok(out);
                }
                let now = tokio::time::Instant::now();
                if !first && now >= deadline {
                    return Ok(out);
                }
                first = false;
                let mut until = deadline.saturating_duration_since(now);
                if !self.clock.is_virtual()
                    && let Some(eta) = self.next_held(queues)
                {
                    let ms = eta.saturating_sub(self.clock.now()).max(0) as u64;
                    until = until.min(Duration::from_millis(ms));
                }
                let me = self
                    .me
                    .upgrade()
                    .ok_or_else(|| Refused::Broker("the broker is closed".into()))?;
                let qs = queues.to_vec();
                let task = tokio::spawn(async move { me.fetch(&qs, max, until).await });
                match task.await {
                    Ok(r) => {
                        r?;
                    }
                    Err(e) => return Err(Refused::Broker(format!("a claim failed: {e}"))),
                }
            }
        })
    }

    fn ack(&self, receipts: Vec<Receipt>) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(async move {
            let tags = self.settle_local(&receipts);
            if tags.is_empty() {
                return Ok(());
            }
            if let Err(e) = self.drop_tags(&tags).await {
                self.owe(Owed::Drop(tags), &e);
            }
            Ok(())
        })
    }

    fn reject(&self, receipt: Receipt, requeue: bool) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(async move {
            let tags = self.settle_local(std::slice::from_ref(&receipt));
            let Some(tag) = tags.into_iter().next() else {
                return Ok(());
            };
            let r = if requeue {
                self.restore_tag(&tag, true, false).await.map(|_| ())
            } else {
                self.drop_tags(std::slice::from_ref(&tag)).await
            };
            if let Err(e) = r {
                let owed = if requeue {
                    Owed::Restore(tag, true)
                } else {
                    Owed::Drop(vec![tag])
                };
                self.owe(owed, &e);
            }
            Ok(())
        })
    }

    fn retry(&self, receipt: Receipt, next: Message) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(async move {
            let tags = self.settle_local(std::slice::from_ref(&receipt));
            let (key, enc) = self.encode(&next);
            let mut p = redis::pipe();
            p.atomic().lpush(key, enc.json).ignore();
            if !tags.is_empty() {
                p.zrem(&self.keys.index, &tags)
                    .ignore()
                    .hdel(&self.keys.unacked, &tags)
                    .ignore();
            }
            let p = &p;
            self.patiently(|mut c| async move { p.query_async::<()>(&mut c).await })
                .await
        })
    }

    fn next_eta<'a>(&'a self, queues: &'a [String]) -> BoxFuture<'a, Result<Option<i64>, Refused>> {
        let eta = self.next_held(queues);
        Box::pin(async move { Ok(eta) })
    }

    fn revoke(&self, ids: Vec<String>, until: i64) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(async move {
            if ids.is_empty() {
                return Ok(());
            }
            self.note_revoked(&ids, until);
            let now = self.clock.now();
            let clock = self.lamport.fetch_add(1, Ordering::Relaxed) + 1;
            let env = pidbox::revoke_envelope(&ids, false, clock);
            let mut p = redis::pipe();
            for id in &ids {
                p.zadd(&self.keys.revoked, id, until).ignore();
            }
            p.cmd("ZREMRANGEBYSCORE")
                .arg(&self.keys.revoked)
                .arg("-inf")
                .arg(now)
                .ignore();
            p.publish(&self.keys.pidbox, env).ignore();
            let p = &p;
            self.patiently(|mut c| async move { p.query_async::<()>(&mut c).await })
                .await
        })
    }

    fn revoked<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<Vec<bool>, Refused>> {
        Box::pin(async move {
            let now = self.clock.now();
            let mut out: Vec<bool> = {
                let g = self.lock();
                ids.iter()
                    .map(|id| g.revoked.get(id).is_some_and(|&u| u > now))
                    .collect()
            };
            if out.iter().all(|&r| r) || ids.is_empty() {
                return Ok(out);
            }
            // Another headway process may have revoked while this one's
            // subscriber was away: the sorted set is the record.
            let mut c = self.conn().await?;
            let scores: Vec<Option<f64>> = match redis::cmd("ZMSCORE")
                .arg(&self.keys.revoked)
                .arg(ids)
                .query_async(&mut c)
                .await
            {
                Ok(v) => v,
                Err(e) => return Err(self.fail(e).await),
            };
            for (o, s) in out.iter_mut().zip(scores) {
                if s.is_some_and(|u| u as i64 > now) {
                    *o = true;
                }
            }
            Ok(out)
        })
    }

    /// One beat leads (an owner-checked lease), and each entry's slots fire
    /// once, in order, across every beat on this Redis (`beat.lua`,
    /// the scheme of headway's own layout). A standby's claim waits up to
    /// one `beat_lease` for the leader to fire the slot or lapse.
    fn claim_slot<'a>(&'a self, entry: &'a str, due: i64) -> BoxFuture<'a, Result<bool, Refused>> {
        Box::pin(self.claim_slot_inner(entry, due))
    }

    /// kombu's `restore_visible` under `unacked_mutex`: every claim older
    /// than `visibility_timeout` that this consumer does not hold goes back
    /// to the front of its queue, marked redelivered, with one more lost
    /// holder counted in its `headway_lost` header. One whose count reaches
    /// `max_deliveries` (3) goes to its queue's dead letters instead
    /// ("worker lost ×3") and is not counted. A Celery worker's restore
    /// keeps the header but does not add to it (see `docs/celery.md`).
    fn recover(&self) -> BoxFuture<'_, Result<usize, Refused>> {
        Box::pin(async move {
            let token = new_id();
            let mut c = self.conn().await?;
            let got: Option<String> = match redis::cmd("SET")
                .arg(&self.keys.mutex)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(self.opts.unacked_mutex_expire.as_millis() as u64)
                .query_async(&mut c)
                .await
            {
                Ok(v) => v,
                Err(e) => return Err(self.fail(e).await),
            };
            if got.is_none() {
                // kombu's MutexHeld: someone else is restoring right now.
                return Ok(0);
            }
            let ceil = self.now_secs() - self.opts.visibility_timeout.as_secs_f64();
            let mut q = redis::cmd("ZREVRANGEBYSCORE");
            q.arg(&self.keys.index).arg(ceil).arg(0);
            if let Some(n) = self.opts.unacked_restore_limit {
                q.arg("LIMIT").arg(0).arg(n);
            }
            let tags: Result<Vec<String>, _> = q.query_async(&mut c).await;
            let mut n = 0;
            let result = match tags {
                Err(e) => Err(self.fail(e).await),
                Ok(tags) => {
                    let mut mine: HashSet<String> =
                        self.lock().out.values().map(|h| h.tag.clone()).collect();
                    mine.extend(self.owed_tags());
                    let mut r = Ok(());
                    for t in tags.iter().filter(|t| !mine.contains(*t)) {
                        match self.restore_tag(t, false, true).await {
                            Ok(Restored::Back) => n += 1,
                            Ok(_) => {}
                            Err(e) => {
                                r = Err(e);
                                break;
                            }
                        }
                    }
                    r
                }
            };
            let _: Result<i64, _> = self
                .scripts
                .unlock
                .key(&self.keys.mutex)
                .arg(&token)
                .invoke_async(&mut c)
                .await;
            result.map(|()| n)
        })
    }

    /// Puts dead letters of `queue` back, oldest first, at most `limit`
    /// (only those whose id is in `ids` unless it is empty), each as its
    /// bytes at the back of the step list it came from, in one script. A
    /// poison pill was kept marked redelivered with its lost count taken
    /// off, so it goes back that way; quarantined bytes go back as they
    /// were (and are quarantined again if still bad).
    fn requeue_dead<'a>(
        &'a self,
        queue: &'a str,
        ids: &'a [String],
        limit: usize,
    ) -> BoxFuture<'a, Result<usize, Refused>> {
        Box::pin(async move {
            if limit == 0 {
                return Ok(0);
            }
            self.remember_queue(queue);
            let mut inv = self.scripts.dead.prepare_invoke();
            inv.key(self.dead_key(queue));
            for &step in &self.opts.priority_steps {
                inv.key(self.queue_key(queue, step));
            }
            inv.arg("requeue")
                .arg(limit)
                .arg(self.opts.priority_steps.len());
            for &step in &self.opts.priority_steps {
                inv.arg(step);
            }
            for id in ids {
                inv.arg(id);
            }
            let inv = &inv;
            let n = self
                .patiently(|mut c| async move { inv.invoke_async::<i64>(&mut c).await })
                .await?
                .max(0) as usize;
            if n > 0 {
                self.log(&format!("queue {queue:?}: re-queued {n} dead letter(s)"));
            }
            Ok(n)
        })
    }

    fn purge_dead<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, Result<usize, Refused>> {
        Box::pin(async move {
            let mut inv = self.scripts.dead.prepare_invoke();
            inv.key(self.dead_key(queue))
                .key(self.queue_key(queue, 0))
                .arg("purge")
                .arg(0)
                .arg(0);
            let inv = &inv;
            let n = self
                .patiently(|mut c| async move { inv.invoke_async::<i64>(&mut c).await })
                .await?
                .max(0) as usize;
            if n > 0 {
                self.log(&format!("queue {queue:?}: purged {n} dead letter(s)"));
            }
            Ok(n)
        })
    }
}

impl CeleryBroker {
    /// A chord callback published directly (an empty chord, or a counter
    /// that answered `Last`) carries its results as Celery's do: prepended
    /// as one list argument, since a Celery worker knows no `join`. A part
    /// that did not succeed fails the callback with `ChordError` instead.
    async fn materialize(&self, mut m: Message) -> Result<Option<Message>, Refused> {
        let Some(join) = m.join.take() else {
            return Ok(Some(m));
        };
        let mut results = Vec::with_capacity(join.parts.len());
        for id in &join.parts {
            match self.fetch_outcome(id).await? {
                Some(o) if o.state == State::Success => {
                    results.push(o.result.unwrap_or(Value::Null))
                }
                other => {
                    let why = other
                        .and_then(|o| o.error.map(|e| e.to_string()))
                        .unwrap_or_else(|| "no result".into());
                    let mut o = Outcome::new(m.id.clone(), State::Failure, self.clock.now());
                    o.task = Some(m.task.clone());
                    o.error = Some(Failure::new(
                        "ChordError",
                        format!("Dependency {id} raised {why}"),
                    ));
                    self.store_all(&[o]).await?;
                    return Ok(None);
                }
            }
        }
        if !join.immutable {
            m.args.insert(0, Value::Array(results));
        }
        Ok(Some(m))
    }

    async fn beat_call(&self, entry: &str, due: i64, mode: &str) -> Result<i64, Refused> {
        let mut inv = self.scripts.beat.prepare_invoke();
        inv.key(&self.keys.beat_lease)
            .key(&self.keys.beat_fired)
            .arg(&self.beat_owner)
            .arg(entry)
            .arg(due)
            .arg(self.opts.beat_lease.as_millis() as u64)
            .arg(mode);
        let inv = &inv;
        self.patiently(|mut c| async move { inv.invoke_async::<i64>(&mut c).await })
            .await
    }

    async fn claim_slot_inner(&self, entry: &str, due: i64) -> Result<bool, Refused> {
        // A standby asks again until the leader has fired the slot or its
        // lease has lapsed (then this beat takes over and fires it): each
        // slot fires once even when the leader dies or pauses right before
        // it. Bounded by one lease and a poll.
        let lease = self.opts.beat_lease;
        let poll = (lease / 20).clamp(Duration::from_millis(10), Duration::from_millis(500));
        let deadline = tokio::time::Instant::now() + lease + poll;
        loop {
            match self.beat_call(entry, due, "claim").await? {
                1 => {
                    if !self.beat_leader.swap(true, Ordering::SeqCst) {
                        self.log("this beat holds the beat lease; it fires the schedule");
                    }
                    return Ok(true);
                }
                2 if tokio::time::Instant::now() < deadline => tokio::time::sleep(poll).await,
                _ => return Ok(false),
            }
        }
    }

    /// Renews this broker's beat lease while it leads, owner-checked: a
    /// beat that was paused past its lease finds another beat holds it and
    /// stops leading, rather than both leading (as two RedBeat schedulers could).
    async fn renew_beat(&self) {
        if !self.beat_leader.load(Ordering::SeqCst) {
            return;
        }
        let mut inv = self.scripts.beat.prepare_invoke();
        inv.key(&self.keys.beat_lease)
            .key(&self.keys.beat_fired)
            .arg(&self.beat_owner)
            .arg("")
            .arg(0)
            .arg(self.opts.beat_lease.as_millis() as u64)
            .arg("renew");
        let Ok(mut c) = self.conn().await else { return };
        match inv.invoke_async::<i64>(&mut c).await {
            Ok(1) => {}
            Ok(_) => {
                self.beat_leader.store(false, Ordering::SeqCst);
                self.log(
                    "the beat lease was taken by another beat (this one paused or lost Redis past it); standing by",
                );
            }
            // Redis away: the lease may lapse, and the next claim finds out.
            Err(e) => {
                let _ = self.fail(e).await;
            }
        }
    }

    /// Puts `raw` on `queue` (its step-0 list, at the back) as another
    /// producer would, unchecked: it is decoded when claimed, and
    /// quarantined if it is not a message headway will run. For tests and
    /// tools; an app publishes with [`Broker::publish`].
    pub async fn push_raw(&self, queue: &str, raw: &[u8]) -> Result<(), Refused> {
        self.remember_queue(queue);
        let mut p = redis::pipe();
        p.lpush(self.queue_key(queue, 0), raw).ignore();
        let p = &p;
        self.patiently(|mut c| async move { p.query_async::<()>(&mut c).await })
            .await
    }

    /// `queues` by their headway names (Celery's default queue, `celery`
    /// unless configured, is `default`).
    fn model_queues(&self, queues: &[String]) -> Vec<String> {
        queues.iter().map(|q| self.sender.model_queue(q)).collect()
    }
}

impl Backend for CeleryBroker {
    fn store(&self, outcomes: Vec<Outcome>) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(async move { self.store_all(&outcomes).await })
    }

    fn fetch<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Outcome>, Refused>> {
        Box::pin(async move { self.fetch_outcome(id).await })
    }

    fn wait<'a>(
        &'a self,
        id: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Option<Outcome>, Refused>> {
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + timeout;
            let channel = self.meta_key(id);
            let bell = self.watch(&channel).await;
            let r = async {
                loop {
                    let rung = bell.notified();
                    tokio::pin!(rung);
                    rung.as_mut().enable();
                    let stored = self.stored.notified();
                    tokio::pin!(stored);
                    stored.as_mut().enable();
                    if let Some(o) = self.fetch_outcome(id).await?
                        && o.state.is_final()
                    {
                        return Ok(Some(o));
                    }
                    // Pub/sub wakes it; a slow re-read covers a subscriber
                    // that was reconnecting when the result was stored.
                    let poll = tokio::time::Instant::now() + Duration::from_secs(2);
                    tokio::select! {
                        _ = &mut rung => {}
                        _ = &mut stored => {}
                        _ = tokio::time::sleep_until(poll.min(deadline)) => {
                            if tokio::time::Instant::now() >= deadline {
                                return Ok(None);
                            }
                        }
                    }
                }
            }
            .await;
            self.unwatch(&channel).await;
            r
        })
    }
}

impl Counter for CeleryBroker {
    fn open(&self, key: &str, size: u32) -> BoxFuture<'_, Result<(), Refused>> {
        let skey = self.group_key(key, ".s");
        Box::pin(async move {
            // Celery's `set_chord_size`: its `set`, i.e. SETEX + PUBLISH.
            let ex = self.expires_secs();
            let mut p = redis::pipe();
            if ex > 0 {
                p.set_ex(&skey, size, ex).ignore();
            } else {
                p.set(&skey, size).ignore();
            }
            p.publish(&skey, size).ignore();
            let mut c = self.conn().await?;
            match p.query_async::<()>(&mut c).await {
                Ok(()) => Ok(()),
                Err(e) => Err(self.fail(e).await),
            }
        })
    }

    fn arrive<'a>(
        &'a self,
        key: &'a str,
        part: &'a str,
        _size: u32,
        callback: &'a Message,
    ) -> BoxFuture<'a, Result<Joined, Refused>> {
        Box::pin(async move {
            let index = {
                let mut g = self.lock();
                g.parts.remove(part).flatten()
            };
            let stored = self.fetch_outcome(part).await?;
            let (state, value) = match &stored {
                Some(o) => (o.state, o.clone()),
                None => {
                    let mut o = Outcome::new(part, State::Success, self.clock.now());
                    o.result = Some(Value::Null);
                    (State::Success, o)
                }
            };
            let mut member = String::from("[1, ");
            pyjson::write_str(&mut member, part);
            member.push_str(", ");
            pyjson::write_str(&mut member, state.name());
            member.push_str(", ");
            result::write_result(&mut member, &value);
            member.push(']');
            let score = index.map_or("+inf".to_string(), |i| i.to_string());
            let mut c = self.conn().await?;
            let r: Result<Vec<redis::Value>, _> = self
                .scripts
                .arrive
                .key(self.group_key(key, ".j"))
                .key(self.group_key(key, ".t"))
                .key(self.group_key(key, ".s"))
                .arg(member)
                .arg(score)
                .arg(self.expires_secs())
                .invoke_async(&mut c)
                .await;
            let reply = match r {
                Ok(v) => v,
                Err(e) => return Err(self.fail(e).await),
            };
            if reply.len() <= 3 {
                return Ok(Joined::Waiting);
            }
            let members: Vec<Vec<u8>> = reply[3..]
                .iter()
                .filter_map(|v| match v {
                    redis::Value::BulkString(b) => Some(b.clone()),
                    _ => None,
                })
                .collect();
            self.complete_chord(key, part, members, callback).await?;
            Ok(Joined::Sent)
        })
    }
}

impl Inspector for CeleryBroker {
    fn queues(&self) -> BoxFuture<'_, Result<Vec<QueueInfo>, Refused>> {
        Box::pin(async move {
            let mut names: Vec<String> = self.lock().queues.iter().cloned().collect();
            names.sort();
            if names.is_empty() {
                // An empty pipeline is an error to Redis ("empty command").
                return Ok(Vec::new());
            }
            let mut p = redis::pipe();
            for q in &names {
                for &s in &self.opts.priority_steps {
                    p.llen(self.queue_key(q, s));
                }
            }
            let mut c = self.conn().await?;
            let lens: Vec<u64> = match p.query_async(&mut c).await {
                Ok(v) => v,
                Err(e) => return Err(self.fail(e).await),
            };
            let g = self.lock();
            let steps = self.opts.priority_steps.len();
            Ok(names
                .iter()
                .enumerate()
                .map(|(i, q)| QueueInfo {
                    name: q.clone(),
                    ready: self
                        .opts
                        .priority_steps
                        .iter()
                        .zip(&lens[i * steps..(i + 1) * steps])
                        .filter(|(_, n)| **n > 0)
                        .map(|(s, n)| (*s, *n))
                        .collect(),
                    delayed: g.held.values().filter(|d| &d.message.queue == q).count() as u64,
                    unacked: g.out.values().filter(|h| &h.queue == q).count() as u64,
                })
                .collect())
        })
    }

    fn counts(&self) -> BoxFuture<'_, Result<BTreeMap<State, u64>, Refused>> {
        Box::pin(async move {
            let mut c = self.conn().await?;
            let pattern = format!("{}celery-task-meta-*", self.keys.result_prefix);
            let mut cursor: u64 = 0;
            let mut out = BTreeMap::new();
            let mut seen = 0usize;
            loop {
                let (next, keys): (u64, Vec<String>) = match redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(500)
                    .query_async(&mut c)
                    .await
                {
                    Ok(v) => v,
                    Err(e) => return Err(self.fail(e).await),
                };
                if !keys.is_empty() {
                    let vals: Vec<Option<Vec<u8>>> =
                        match redis::cmd("MGET").arg(&keys).query_async(&mut c).await {
                            Ok(v) => v,
                            Err(e) => return Err(self.fail(e).await),
                        };
                    for v in vals.into_iter().flatten() {
                        if let Ok(o) = result::decode_meta("", &v) {
                            *out.entry(o.state).or_insert(0) += 1;
                        }
                    }
                }
                seen += keys.len();
                cursor = next;
                // Bounded: an admin page must not walk a million keys.
                if cursor == 0 || seen >= 100_000 {
                    break;
                }
            }
            Ok(out)
        })
    }

    fn consumers(&self) -> BoxFuture<'_, Result<Vec<ConsumerInfo>, Refused>> {
        let g = self.lock();
        let holding = g.out.values().map(|h| h.id.clone()).collect();
        let info = ConsumerInfo {
            name: self.node.clone(),
            lease_until: None,
            holding,
        };
        Box::pin(async move { Ok(vec![info]) })
    }

    fn record(&self, events: Vec<RunEvent>) -> BoxFuture<'_, Result<(), Refused>> {
        let full = {
            let mut buf = self.events.lock().unwrap_or_else(|e| e.into_inner());
            buf.extend(events.iter().filter_map(|e| serde_json::to_string(e).ok()));
            buf.len() >= 256
        };
        Box::pin(async move {
            if full {
                self.flush_events().await?;
            }
            Ok(())
        })
    }

    fn dead_letters<'a>(
        &'a self,
        queue: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<DeadLetter>, Refused>> {
        Box::pin(async move {
            if limit == 0 {
                return Ok(Vec::new());
            }
            let mut c = self.conn().await?;
            let raw: Vec<Vec<u8>> = match redis::cmd("LRANGE")
                .arg(self.dead_key(queue))
                .arg(0)
                .arg(limit.min(DEAD_KEPT) as i64 - 1)
                .query_async(&mut c)
                .await
            {
                Ok(v) => v,
                Err(e) => return Err(self.fail(e).await),
            };
            Ok(raw.iter().map(|el| dead::letter(queue, el)).collect())
        })
    }

    fn dead_count<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, Result<u64, Refused>> {
        Box::pin(async move {
            let mut c = self.conn().await?;
            match redis::cmd("LLEN")
                .arg(self.dead_key(queue))
                .query_async::<u64>(&mut c)
                .await
            {
                Ok(n) => Ok(n),
                Err(e) => Err(self.fail(e).await),
            }
        })
    }

    fn recent(&self, limit: usize) -> BoxFuture<'_, Result<Vec<RunEvent>, Refused>> {
        Box::pin(async move {
            if limit == 0 {
                return Ok(Vec::new());
            }
            self.flush_events().await?;
            let mut c = self.conn().await?;
            let raw: Vec<String> = match redis::cmd("LRANGE")
                .arg(&self.keys.events)
                .arg(0)
                .arg(limit as i64 - 1)
                .query_async(&mut c)
                .await
            {
                Ok(v) => v,
                Err(e) => return Err(self.fail(e).await),
            };
            Ok(raw
                .iter()
                .filter_map(|r| serde_json::from_str(r).ok())
                .collect())
        })
    }
}
