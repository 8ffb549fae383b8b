//! headway's own Redis layout: a broker, result store, chord counter and
//! inspector on one Redis (redis-rs on tokio).
//!
//! The layout is written down in `docs/redis-layout.md`. In short, with `P`
//! the prefix (`headway:`) and `Q` a queue, every key of a queue shares the
//! hash tag `{Q}`, so the queue lives in one Cluster slot and each script
//! touches one slot:
//! - `P{Q}:ready:0`…`9` lists, one per priority step (0 first). Publish
//!   pushes the tail (LPUSH), a claim pops the head (RPOP): FIFO per step.
//! - A claim moves messages into the consumer's own `P{Q}:held:<consumer>`
//!   list, each stamped `<token>:<step>:` with a fresh fencing token, so a
//!   claimed message is always somewhere in Redis. When nothing is ready the
//!   consumer blocks in BLMOVE on a dedicated connection; everything else
//!   shares one multiplexed connection.
//! - `P{Q}:lease:<consumer>` expires after the lease (30 s, BullMQ's lock
//!   duration) unless the broker's own tokio task refreshes it every third
//!   of that — a busy GIL or event loop cannot starve it. `recover()` hands
//!   back, in one Lua script per queue, what consumers whose lease expired
//!   were holding, marked redelivered. A late ack of a recovered claim finds
//!   its exact stamped element gone and is a no-op: the token fences it.
//! - ETAs and retry backoffs wait in the `P{Q}:delayed` sorted set, scored
//!   by due time, and are moved to their step by the claim script reading
//!   Redis `TIME`, so no worker's clock decides when a task runs. When the
//!   app's clock is virtual (tests) the app's now is passed instead, so the
//!   suite's virtual-time tests run on Redis unchanged. The delayed set is
//!   not held by any consumer, so an eta far beyond the lease runs once
//!   (Celery's eta that runs twice once it outlives the visibility timeout
//!   cannot happen here).
//! - Results under `P:result:<id>` with an expiry (one day, Celery's
//!   `result_expires`); a final state is written once (Lua); a final store
//!   publishes its value (up to 64 KiB, else a wake-up) on the key's
//!   channel, which is what waiters block on: no GET after the wake-up.
//! - Chords count parts in a set (SADD), so a redelivered part cannot count
//!   twice; the arrival that completes it enqueues the callback in the same
//!   script (`Joined::Sent`).
//! - Revoked ids under `P:revoked:<id>`, expiring with the revoke.
//!
//! Connections reconnect with headway's own capped, jittered backoff
//! ([`crate::flow::Backoff`]) and say so in the log; writes wait through a
//! short outage (`patience`) rather than fail; a URL's password is never
//! shown (`redis://user:***@host`).

mod cluster;
mod store;
mod tls;
mod url;

pub use cluster::refuse_cluster;
pub use url::RedisUrl;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::Poll;
use std::time::Duration;

use ::redis::aio::{MultiplexedConnection, PubSubSink};
use ::redis::{AsyncConnectionConfig, Client, Cmd, Pipeline, RedisError, Value};
use futures_util::StreamExt;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use crate::flow::{Backoff, Jitter, MILLI};
use crate::task::app::Seams;
use crate::task::clock::{BoxFuture, Clock};
use crate::task::dead::{self, DEAD_KEPT, DeadLetter, MAX_DELIVERIES, MAX_MESSAGE_BYTES};
use crate::task::message::Message;
use crate::task::policy::seeded;
use crate::task::spec::{
    Backend, Broker, Claimed, ConsumerInfo, Counter, Delivery, Inspector, Joined, QueueInfo,
    Receipt, Round, RunEvent,
};
use crate::task::state::{Outcome, Refused, State};

/// How a [`RedisBroker`] is set up.
#[derive(Clone)]
pub struct RedisOptions {
    /// This process's consumer name: its held lists and lease keys are
    /// named after it. Must be unique among live processes. `None`: host,
    /// pid and a random suffix.
    pub consumer: Option<String>,
    /// Put before every key (`"headway:"`), so one Redis can host other data
    /// and an ACL can be limited to `headway:*`.
    pub prefix: String,
    /// How long a consumer's claims survive it without a refresh: 30 s,
    /// BullMQ's default lock duration. Refreshed every third of it.
    pub lease: Duration,
    /// How long results are kept: one day, Celery's `result_expires`.
    pub result_expires: Duration,
    /// How often this broker runs `recover()` by itself (`Some(lease)`:
    /// a dead consumer's claims are back within two leases). `None`: only
    /// when called.
    pub recover_every: Option<Duration>,
    /// How long a write waits for Redis to come back before it is refused:
    /// 10 s, long enough for a restart, short enough that a caller learns.
    pub patience: Duration,
    /// PEM roots to verify a `rediss://` server against instead of the
    /// platform's (a private CA).
    pub tls_ca: Option<Vec<u8>>,
    /// How many times a consumer may be lost holding a message before
    /// `recover()` dead-letters it as a poison pill
    /// ([`MAX_DELIVERIES`], 3). Every process recovering one queue should
    /// agree on it.
    pub max_deliveries: u32,
    /// The size cap for one message ([`MAX_MESSAGE_BYTES`], 16 MiB): a
    /// publish of a bigger one is refused, and a bigger one put on a queue
    /// by another producer is dead-lettered by the claim script without
    /// ever being sent to a worker.
    pub max_message_bytes: usize,
    /// How long a beat leads without renewing (30 s, the same as the
    /// consumer lease: BullMQ's lock duration). Renewed every third of it
    /// by the broker's own task; a standby beat takes over within one
    /// `beat_lease` of the leader dying or pausing.
    pub beat_lease: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            consumer: None,
            prefix: "headway:".into(),
            lease: Duration::from_secs(30),
            result_expires: Duration::from_secs(86_400),
            recover_every: Some(Duration::from_secs(30)),
            patience: Duration::from_secs(10),
            tls_ca: None,
            max_deliveries: MAX_DELIVERIES,
            max_message_bytes: MAX_MESSAGE_BYTES,
            beat_lease: Duration::from_secs(30),
        }
    }
}

impl std::fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisOptions")
            .field("consumer", &self.consumer)
            .field("prefix", &self.prefix)
            .field("lease", &self.lease)
            .field("result_expires", &self.result_expires)
            .field("recover_every", &self.recover_every)
            .field("patience", &self.patience)
            .field("tls_ca", &self.tls_ca.as_ref().map(|_| "<pem>"))
            .field("max_deliveries", &self.max_deliveries)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("beat_lease", &self.beat_lease)
            .finish()
    }
}

/// Priority steps: 0 is claimed first (kombu's Redis order), as in memory.
const STEPS: u8 = 10;

/// How long a worker of several queues blocks on its first before it looks
/// at the others again: BLMOVE watches one list.
const SLICE: Duration = Duration::from_millis(100);

/// How many messages one publish script carries: keeps each script short
/// (Redis runs one at a time) and Lua's stack small.
const CHUNK: usize = 500;

/// The count an ack's LREM takes: -1 looks from the tail, where a held list
/// keeps its oldest claims (a claim pushes the head), and claims are mostly
/// settled oldest first — with a prefetch of 512 a search from the head
/// read the whole list for nearly every ack. Elements are unique (each has
/// its fencing token), so which end the search starts from changes nothing
/// else.
const HELD_OLDEST_FIRST: i64 = -1;

/// How many results one store script call writes: a round's worth, kept
/// short because Redis runs one script at a time.
const STORE_CHUNK: usize = 256;

/// A final result up to this size is published whole on its channel, so a
/// waiter subscribed before the store answers without a GET; a bigger one
/// publishes just a wake-up (Redis copies a message to every subscriber).
const NOTIFY_CAP: usize = 64 * 1024;

/// Connecting gives up after 2 s; a reply after 10 s (a stuck server or a
/// pipeline of thousands of scripts).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

fn log(what: &str) {
    eprintln!("headway redis: {what}");
}

// ---------------------------------------------------------------- scripts

const COMMON: &str = include_str!("redis/lua/common.lua");

struct Script {
    src: String,
    sha: String,
}

impl Script {
    fn new(body: &str, common: bool) -> Script {
        let src = if common {
            format!("{COMMON}\n{body}")
        } else {
            body.to_string()
        };
        let sha = ::redis::Script::new(&src).get_hash().to_string();
        Script { src, sha }
    }
}

struct Scripts {
    publish: Script,
    claim: Script,
    settle: Script,
    recover: Script,
    sweep: Script,
    arrive: Script,
    stats: Script,
    store: Script,
    bury: Script,
    dead: Script,
    holders: Script,
    beat: Script,
}

impl Scripts {
    fn new() -> Scripts {
        Scripts {
            publish: Script::new(include_str!("redis/lua/publish.lua"), true),
            claim: Script::new(include_str!("redis/lua/claim.lua"), true),
            settle: Script::new(include_str!("redis/lua/settle.lua"), true),
            recover: Script::new(include_str!("redis/lua/recover.lua"), true),
            sweep: Script::new(include_str!("redis/lua/sweep.lua"), true),
            arrive: Script::new(include_str!("redis/lua/arrive.lua"), true),
            stats: Script::new(include_str!("redis/lua/stats.lua"), true),
            store: Script::new(include_str!("redis/lua/store.lua"), false),
            bury: Script::new(include_str!("redis/lua/bury.lua"), true),
            dead: Script::new(include_str!("redis/lua/dead.lua"), true),
            holders: Script::new(include_str!("redis/lua/holders.lua"), true),
            beat: Script::new(include_str!("redis/lua/beat.lua"), true),
        }
    }

    fn all(&self) -> [&Script; 12] {
        [
            &self.publish,
            &self.claim,
            &self.settle,
            &self.recover,
            &self.sweep,
            &self.arrive,
            &self.stats,
            &self.store,
            &self.bury,
            &self.dead,
            &self.holders,
            &self.beat,
        ]
    }
}

/// `EVALSHA sha 1 key args…`.
fn evalsha(s: &Script, key: &str) -> Cmd {
    let mut c = ::redis::cmd("EVALSHA");
    c.arg(&s.sha).arg(1).arg(key);
    c
}

// ---------------------------------------------------------------- link

/// Why a call did not get an answer.
enum Fail {
    /// The link is down and waiting out its backoff.
    Down(Refused, Instant),
    /// Redis (or the socket) answered an error on connection `epoch`.
    Redis(u64, RedisError),
}

struct LinkState {
    conn: Option<MultiplexedConnection>,
    epoch: u64,
    failures: i32,
    retry_at: Option<Instant>,
}

/// One multiplexed connection that reconnects with headway's backoff.
struct Link {
    client: Client,
    url: RedisUrl,
    seed: String,
    state: Mutex<LinkState>,
    dial: tokio::sync::Mutex<()>,
    /// 50 ms doubling to 2 s (ioredis's default cap), full jitter (AWS,
    /// "Exponential Backoff and Jitter").
    backoff: Backoff,
}

fn conn_error(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
}

impl Link {
    fn lock(&self) -> MutexGuard<'_, LinkState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn refused(&self, e: &RedisError) -> Refused {
        Refused::Broker(format!("{}: {}", self.url, self.url.scrub(&e.to_string())))
    }

    async fn get(&self) -> Result<(u64, MultiplexedConnection), Fail> {
        if let Some(r) = self.ready() {
            return r;
        }
        let _dial = self.dial.lock().await;
        if let Some(r) = self.ready() {
            return r;
        }
        let cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        let made = self
            .client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await;
        let mut s = self.lock();
        match made {
            Ok(c) => {
                s.epoch += 1;
                if s.failures > 0 {
                    log(&format!(
                        "{}: reconnected after {} attempt(s); resuming",
                        self.url, s.failures
                    ));
                }
                s.failures = 0;
                s.retry_at = None;
                s.conn = Some(c.clone());
                Ok((s.epoch, c))
            }
            Err(e) => {
                s.failures = s.failures.saturating_add(1);
                let wait = self
                    .backoff
                    .delay(s.failures, seeded(&self.seed, s.failures as u32), 0);
                let at = Instant::now() + Duration::from_nanos(wait as u64);
                s.retry_at = Some(at);
                let why = self.refused(&e);
                log(&format!(
                    "{why}; cannot connect, next attempt in {} ms",
                    wait / MILLI
                ));
                Err(Fail::Down(why, at))
            }
        }
    }

    fn ready(&self) -> Option<Result<(u64, MultiplexedConnection), Fail>> {
        let s = self.lock();
        if let Some(c) = &s.conn {
            return Some(Ok((s.epoch, c.clone())));
        }
        match s.retry_at {
            Some(at) if Instant::now() < at => Some(Err(Fail::Down(
                Refused::Broker(format!(
                    "{}: unreachable; reconnecting in {} ms",
                    self.url,
                    at.saturating_duration_since(Instant::now()).as_millis()
                )),
                at,
            ))),
            _ => None,
        }
    }

    /// Drops connection `epoch` after a connection error, once.
    fn broken(&self, epoch: u64, e: &RedisError) {
        let mut s = self.lock();
        if s.epoch == epoch && s.conn.is_some() {
            s.conn = None;
            s.failures = s.failures.max(1);
            log(&format!(
                "{}; connection lost, reconnecting",
                self.refused(e)
            ));
        }
    }
}

// ---------------------------------------------------------------- waiters

struct Sub {
    count: usize,
    notify: Arc<Notify>,
    /// The final outcome a notification carried (the store script publishes
    /// only what it wrote, so this is what the key holds).
    got: Option<Outcome>,
    /// The pub/sub connection generation it is subscribed on (0: none).
    on: u64,
}

/// Result waiters: one pub/sub connection, one channel per awaited result.
struct Waiters {
    subs: Mutex<HashMap<String, Sub>>,
    sink: tokio::sync::Mutex<Option<(u64, PubSubSink)>>,
    epoch: AtomicU64,
}

impl Waiters {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Sub>> {
        self.subs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn join(&self, ch: &str) -> Arc<Notify> {
        let mut g = self.lock();
        let e = g.entry(ch.to_string()).or_insert_with(|| Sub {
            count: 0,
            notify: Arc::new(Notify::new()),
            got: None,
            on: 0,
        });
        e.count += 1;
        e.notify.clone()
    }

    /// The final outcome a notification on `ch` carried, if any.
    fn got(&self, ch: &str) -> Option<Outcome> {
        self.lock().get(ch).and_then(|s| s.got.clone())
    }

    /// Wakes every waiter (the pub/sub connection went away: they look
    /// again and subscribe on a new one).
    fn wake_all(&self) {
        for s in self.lock().values() {
            s.notify.notify_waiters();
        }
    }
}

/// Leaves a result channel when a wait ends, however it ends.
struct Leave<'a> {
    broker: &'a RedisBroker,
    ch: String,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        let last = {
            let mut g = self.broker.waiters.lock();
            match g.get_mut(&self.ch) {
                Some(s) if s.count <= 1 => {
                    g.remove(&self.ch);
                    true
                }
                Some(s) => {
                    s.count -= 1;
                    false
                }
                None => false,
            }
        };
        if last && let Some(b) = self.broker.me.upgrade() {
            let ch = std::mem::take(&mut self.ch);
            self.broker.rt.spawn(async move {
                let mut sink = b.waiters.sink.lock().await;
                // Still nobody waiting: unsubscribe (under the sink lock, so
                // it cannot overtake a new waiter's subscribe).
                if !b.waiters.lock().contains_key(&ch)
                    && let Some((_, s)) = sink.as_mut()
                {
                    let _ = s.unsubscribe(&ch).await;
                }
            });
        }
    }
}

// ---------------------------------------------------------------- broker

/// A settle that failed on a connection error, retried by the background
/// task until it lands (each is idempotent: an exact element is removed once).
struct Pending {
    queue: String,
    el: Arc<[u8]>,
    mode: &'static str,
    next: Option<Message>,
}

/// headway's Redis broker: also its result store, chord counter and
/// inspector. See the module docs and `docs/redis-layout.md`.
pub struct RedisBroker {
    me: Weak<RedisBroker>,
    url: RedisUrl,
    client: Client,
    link: Link,
    prefix: String,
    consumer: String,
    lease: Duration,
    result_ms: u64,
    recover_every: Option<Duration>,
    patience: Duration,
    max_deliveries: u32,
    max_bytes: usize,
    beat_lease: Duration,
    /// Whether this process's beat holds the beat lease: the background
    /// task renews it (owner-checked) while it does.
    beat_leader: AtomicBool,
    clock: Arc<dyn Clock>,
    scripts: Scripts,
    /// Queues registered in `P:queues` on the link epoch it holds (a new
    /// connection may be a Redis that lost them: register again).
    known: Mutex<(u64, HashSet<String>)>,
    /// Queues this consumer has claimed from: their leases are refreshed.
    touched: Mutex<HashSet<String>>,
    /// Idle dedicated connections for blocking claims.
    blockers: Mutex<Vec<MultiplexedConnection>>,
    pending: Mutex<Vec<Pending>>,
    /// Results Redis refused to write, their late acks waiting (`store.rs`).
    unstored: Mutex<Vec<store::Unstored>>,
    /// Per queue, the tokens of claims delivered and not yet settled: what
    /// the sweep must leave alone.
    out: Mutex<HashMap<String, HashSet<u64>>>,
    /// Claims hold it shared, the sweep exclusively: a sweep never runs
    /// while a claim's answer is on its way.
    gate: tokio::sync::RwLock<()>,
    /// The link epoch the last sweep ran on: a new connection means a claim
    /// answer may have been lost with the old one.
    swept: AtomicU64,
    waiters: Waiters,
    closed: AtomicBool,
    rt: tokio::runtime::Handle,
}

impl std::fmt::Debug for RedisBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBroker")
            .field("url", &self.url)
            .field("prefix", &self.prefix)
            .field("consumer", &self.consumer)
            .finish()
    }
}

fn check_name(what: &str, name: &str) -> Result<(), Refused> {
    if name.is_empty() || name.contains(['{', '}']) {
        return Err(Refused::Invalid(format!(
            "invalid `{what}`: {name:?} must be non-empty and without `{{` or `}}` (they would break the queue's hash tag)"
        )));
    }
    Ok(())
}

fn default_consumer() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "host".into())
        .replace(['{', '}', ':'], "-");
    let id = crate::task::message::new_id();
    format!("{host}-{}-{}", std::process::id(), &id[..8])
}

fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        other => bytes(other).and_then(|b| std::str::from_utf8(b).ok()?.trim().parse().ok()),
    }
}

fn step_of(m: &Message) -> u8 {
    m.priority.unwrap_or(0).min(STEPS - 1)
}

fn step_arg(s: u8) -> &'static str {
    ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"][s as usize]
}

/// A final state's result value starts with its name and `|`.
fn stored(o: &Outcome) -> Vec<u8> {
    let mut v = Vec::with_capacity(128);
    v.extend_from_slice(o.state.name().as_bytes());
    v.push(b'|');
    serde_json::to_writer(&mut v, o).expect("an outcome always serialises");
    v
}

fn unstored(b: &[u8]) -> Option<Outcome> {
    let bar = b.iter().position(|c| *c == b'|')?;
    serde_json::from_slice(&b[bar + 1..]).ok()
}

/// A held element `<token>:<step>:<payload>`: token, step, payload.
fn unheld(el: &[u8]) -> Option<(u64, u8, &[u8])> {
    let c1 = el.iter().position(|c| *c == b':')?;
    let token = std::str::from_utf8(&el[..c1]).ok()?.parse().ok()?;
    let rest = &el[c1 + 1..];
    let c2 = rest.iter().position(|c| *c == b':')?;
    let step = std::str::from_utf8(&rest[..c2]).ok()?.parse().ok()?;
    Some((token, step, &rest[c2 + 1..]))
}

/// A ready payload's bytes when it is marked redelivered (`!<n>!<bytes>`).
fn unmark(p: &[u8]) -> Option<&[u8]> {
    let rest = p.strip_prefix(b"!")?;
    // `!{` is the mark as it was before the count.
    if rest.first() == Some(&b'{') {
        return Some(rest);
    }
    let bang = rest.iter().position(|c| *c == b'!')?;
    if bang == 0 || !rest[..bang].iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(&rest[bang + 1..])
}

/// A quarantined message as the scripts keep it: `<header JSON>\n<bytes>`,
/// the bytes only their first [`dead::DEAD_PREFIX_BYTES`], the header with
/// the whole size.
fn dead_element(now: i64, step: u8, why: &dead::Undecodable, raw: &[u8]) -> Vec<u8> {
    let mut head = serde_json::json!({
        "at": now, "reason": why.reason, "step": step, "size": raw.len(),
    });
    if let Some(id) = &why.id {
        head["id"] = serde_json::Value::String(id.clone());
    }
    let mut out = serde_json::to_vec(&head).expect("a header always serialises");
    out.push(b'\n');
    out.extend_from_slice(dead::kept_prefix(raw));
    out
}

#[derive(serde::Deserialize)]
struct DeadHead {
    at: i64,
    reason: String,
    #[serde(default)]
    id: Option<String>,
    /// Absent in letters kept before sizes were: the bytes are whole.
    #[serde(default)]
    size: Option<usize>,
}

/// A dead letter read back; one kept before dead letters had headers is its
/// bytes alone.
fn undead(queue: &str, el: &[u8]) -> DeadLetter {
    if el.starts_with(b"{\"at\":")
        && let Some(nl) = el.iter().position(|c| *c == b'\n')
        && let Ok(h) = serde_json::from_slice::<DeadHead>(&el[..nl])
    {
        return DeadLetter {
            queue: queue.to_string(),
            id: h.id,
            reason: h.reason,
            at: h.at,
            raw: el[nl + 1..].to_vec(),
            size: h.size.unwrap_or(el.len() - nl - 1),
        };
    }
    DeadLetter {
        queue: queue.to_string(),
        id: None,
        reason: "unknown: kept before dead letters had reasons".into(),
        at: 0,
        raw: el.to_vec(),
        size: el.len(),
    }
}

impl RedisBroker {
    /// Connects to `url` (`redis://` or `rediss://`, see [`RedisUrl`]) and
    /// starts the background task that refreshes this consumer's leases,
    /// retries settles that failed in an outage, and recovers dead
    /// consumers' claims every `recover_every`.
    ///
    /// Refused: a bad URL or option (naming it), or a Redis that cannot be
    /// reached now (the URL shown redacted). Must be called inside a tokio
    /// runtime, which runs the background task.
    pub async fn connect(
        url: &str,
        options: RedisOptions,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<RedisBroker>, Refused> {
        let parsed = RedisUrl::parse(url)?;
        if options.prefix.contains(['{', '}']) {
            return Err(Refused::Invalid(
                "invalid `prefix`: must not contain `{` or `}` (the queue's hash tag must be the first)".into(),
            ));
        }
        if options.lease < Duration::from_millis(30) {
            return Err(Refused::Invalid(
                "invalid `lease`: must be at least 30 ms".into(),
            ));
        }
        if options.result_expires < Duration::from_millis(1) {
            return Err(Refused::Invalid(
                "invalid `result_expires`: must be positive".into(),
            ));
        }
        if options.max_deliveries == 0 {
            return Err(Refused::Invalid(
                "invalid `max_deliveries`: must be at least 1".into(),
            ));
        }
        if options.max_message_bytes == 0 {
            return Err(Refused::Invalid(
                "invalid `max_message_bytes`: must be at least 1".into(),
            ));
        }
        if options.beat_lease < Duration::from_millis(30) {
            return Err(Refused::Invalid(
                "invalid `beat_lease`: must be at least 30 ms".into(),
            ));
        }
        let consumer = match options.consumer {
            Some(c) => {
                check_name("consumer", &c)?;
                c
            }
            None => default_consumer(),
        };
        let addr = if parsed.tls {
            let _ = rustls::crypto::ring::default_provider().install_default();
            ::redis::ConnectionAddr::TcpTls {
                host: parsed.host.clone(),
                port: parsed.port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ::redis::ConnectionAddr::Tcp(parsed.host.clone(), parsed.port)
        };
        let mut settings = ::redis::RedisConnectionInfo::default().set_db(parsed.db);
        if let Some(u) = &parsed.username {
            settings = settings.set_username(u);
        }
        if let Some(p) = &parsed.password {
            settings = settings.set_password(p);
        }
        let info = ::redis::IntoConnectionInfo::into_connection_info(addr)
            .map_err(|e| {
                Refused::Invalid(format!("invalid `url`: {}", parsed.scrub(&e.to_string())))
            })?
            .set_redis_settings(settings);
        let client = match (&options.tls_ca, parsed.tls) {
            (Some(pem), true) => Client::build_with_tls(
                tls::check_ca(pem).map(|_| info)?,
                ::redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem.clone()),
                },
            ),
            (Some(_), false) => {
                return Err(Refused::Invalid(
                    "invalid `tls_ca`: given for a redis:// URL; use rediss://".into(),
                ));
            }
            (None, _) => Client::open(info),
        }
        .map_err(|e| {
            Refused::Invalid(format!("invalid `url`: {}", parsed.scrub(&e.to_string())))
        })?;
        let backoff = Backoff::new(50 * MILLI, 2.0, 2_000 * MILLI, i32::MAX, Jitter::Full)
            .expect("a valid backoff");
        let link = Link {
            client: client.clone(),
            url: parsed.clone(),
            seed: consumer.clone(),
            state: Mutex::new(LinkState {
                conn: None,
                epoch: 0,
                failures: 0,
                retry_at: None,
            }),
            dial: tokio::sync::Mutex::new(()),
            backoff,
        };
        let broker = Arc::new_cyclic(|me| RedisBroker {
            me: me.clone(),
            url: parsed,
            client,
            link,
            prefix: options.prefix,
            consumer,
            lease: options.lease,
            result_ms: options.result_expires.as_millis().max(1) as u64,
            recover_every: options.recover_every,
            patience: options.patience,
            max_deliveries: options.max_deliveries,
            max_bytes: options.max_message_bytes,
            beat_lease: options.beat_lease,
            beat_leader: AtomicBool::new(false),
            clock,
            scripts: Scripts::new(),
            known: Mutex::new((0, HashSet::new())),
            touched: Mutex::new(HashSet::new()),
            blockers: Mutex::new(Vec::new()),
            pending: Mutex::new(Vec::new()),
            unstored: Mutex::new(Vec::new()),
            out: Mutex::new(HashMap::new()),
            gate: tokio::sync::RwLock::new(()),
            swept: AtomicU64::new(0),
            waiters: Waiters {
                subs: Mutex::new(HashMap::new()),
                sink: tokio::sync::Mutex::new(None),
                epoch: AtomicU64::new(0),
            },
            closed: AtomicBool::new(false),
            rt: tokio::runtime::Handle::current(),
        });
        // Fail fast on a Redis that is not there or is a Cluster node, and
        // load the scripts.
        match broker.link.get().await {
            Ok((_, mut c)) => {
                refuse_cluster(&mut c, &broker.url).await?;
                broker
                    .load_scripts(&mut c)
                    .await
                    .map_err(|e| broker.link.refused(&e))?
            }
            Err(Fail::Down(why, _)) => return Err(why),
            Err(Fail::Redis(_, e)) => return Err(broker.link.refused(&e)),
        }
        tokio::spawn(tick(Arc::downgrade(&broker)));
        Ok(broker)
    }

    /// The seams an [`crate::task::App`] is built on, all this broker.
    pub fn seams(self: &Arc<Self>) -> Seams {
        Seams {
            broker: self.clone(),
            backend: Some(self.clone()),
            counter: Some(self.clone()),
            inspector: Some(self.clone()),
        }
    }

    /// This process's consumer name.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// The URL, redacted.
    pub fn url(&self) -> &RedisUrl {
        &self.url
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Stops refreshing this consumer's leases and deletes them, so what it
    /// still holds is recovered by the next `recover()` anywhere rather than
    /// after the lease. Call it after a worker stopped; further claims are
    /// refused.
    pub async fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if self.beat_leader.swap(false, Ordering::SeqCst) {
            // A standby beat takes over at its next slot, not a lease later.
            let _ = self.one(self.beat_cmd("", 0, "release"), false).await;
        }
        let queues: Vec<String> = self.touched().iter().cloned().collect();
        let mut p = ::redis::pipe();
        for q in &queues {
            p.cmd("DEL")
                .arg(self.key(q, "lease:", &self.consumer))
                .ignore();
        }
        if !queues.is_empty() {
            let _ = self.run(&p, false).await;
        }
    }

    fn touched(&self) -> MutexGuard<'_, HashSet<String>> {
        self.touched.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `P{Q}:` — the base every key of queue `Q` is derived from.
    fn base(&self, q: &str) -> String {
        let mut s = String::with_capacity(self.prefix.len() + q.len() + 3);
        s.push_str(&self.prefix);
        s.push('{');
        s.push_str(q);
        s.push_str("}:");
        s
    }

    fn key(&self, q: &str, what: &str, tail: &str) -> String {
        let mut s = self.base(q);
        s.push_str(what);
        s.push_str(tail);
        s
    }

    fn result_key(&self, id: &str) -> String {
        format!("{}result:{id}", self.prefix)
    }

    fn revoked_key(&self, id: &str) -> String {
        format!("{}revoked:{id}", self.prefix)
    }

    fn queues_key(&self) -> String {
        format!("{}queues", self.prefix)
    }

    /// What scripts take as now: the app's time on a virtual clock, else
    /// empty (the script reads Redis TIME).
    fn now_arg(&self) -> String {
        if self.clock.is_virtual() {
            self.clock.now().to_string()
        } else {
            String::new()
        }
    }

    async fn load_scripts(&self, c: &mut MultiplexedConnection) -> Result<(), RedisError> {
        let mut p = ::redis::pipe();
        for s in self.scripts.all() {
            p.cmd("SCRIPT").arg("LOAD").arg(&s.src).ignore();
        }
        p.exec_async(c).await
    }

    /// Runs a pipeline and answers its replies. NOSCRIPT (a restarted Redis)
    /// reloads the scripts and runs it again; a connection error drops the
    /// connection, and with `patient` the call waits for the link to come
    /// back for up to `patience`. Every error is shown with the URL redacted.
    async fn run(&self, p: &Pipeline, patient: bool) -> Result<Vec<Value>, Refused> {
        let start = Instant::now();
        let mut reloaded = false;
        loop {
            let fail = match self.link.get().await {
                Ok((epoch, mut c)) => match p.query_async::<Vec<Value>>(&mut c).await {
                    Ok(v) => return Ok(v),
                    Err(e) if e.code() == Some("NOSCRIPT") && !reloaded => {
                        reloaded = true;
                        match self.load_scripts(&mut c).await {
                            Ok(()) => continue,
                            Err(e) => Fail::Redis(epoch, e),
                        }
                    }
                    Err(e) => Fail::Redis(epoch, e),
                },
                Err(f) => f,
            };
            let (why, retry_at) = match fail {
                Fail::Down(why, at) => (why, at),
                Fail::Redis(epoch, e) => {
                    let lost = conn_error(&e);
                    if !lost && e.code() != Some("LOADING") {
                        return Err(self.link.refused(&e));
                    }
                    if lost {
                        self.link.broken(epoch, &e);
                    }
                    (
                        self.link.refused(&e),
                        Instant::now() + Duration::from_millis(50),
                    )
                }
            };
            let deadline = start + self.patience;
            if !patient || Instant::now() >= deadline {
                return Err(why);
            }
            let at = retry_at
                .min(deadline)
                .max(Instant::now() + Duration::from_millis(5));
            tokio::time::sleep_until(at).await;
            if at >= deadline {
                // One last attempt before raising, whatever the backoff
                // says: Redis may have come back since the last one.
                self.link.lock().retry_at = None;
            }
        }
    }

    async fn one(&self, c: Cmd, patient: bool) -> Result<Value, Refused> {
        let mut p = ::redis::pipe();
        p.add_command(c);
        Ok(self.run(&p, patient).await?.pop().unwrap_or(Value::Nil))
    }

    /// Adds `SADD P:queues` for queues this process has not registered yet.
    fn register(&self, p: &mut Pipeline, queues: &[&str]) {
        let epoch = self.link.lock().epoch;
        let mut k = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if k.0 != epoch {
            *k = (epoch, HashSet::new());
        }
        for q in queues {
            if !k.1.contains(*q) {
                k.1.insert(q.to_string());
                p.cmd("SADD").arg(self.queues_key()).arg(*q).ignore();
            }
        }
    }

    /// The first claim from a queue in this process: register it, and hand
    /// back what this consumer name held in a previous life (a restart
    /// inside its lease), along with any dead consumer's claims.
    async fn touch(&self, q: &str) -> Result<(), Refused> {
        if self.touched().contains(q) {
            return Ok(());
        }
        let mut p = ::redis::pipe();
        self.register(&mut p, &[q]);
        p.add_command(self.recover_cmd(q));
        let got = self.run(&p, false).await?;
        if let Some(n) = got.last().and_then(int)
            && n > 0
        {
            log(&format!(
                "queue {q:?}: recovered {n} message(s) held by consumers whose lease expired"
            ));
        }
        // What this consumer name held before a restart inside its lease:
        // nobody here holds it, so the sweep hands it back.
        self.sweep(q).await?;
        self.touched().insert(q.to_string());
        Ok(())
    }

    fn publish_cmds(&self, p: &mut Pipeline, messages: &[Message]) -> Result<(), Refused> {
        // Per queue, in order; chunks keep each script short.
        let mut by: Vec<(&str, Vec<&Message>)> = Vec::new();
        for m in messages {
            check_name("queue", &m.queue)?;
            match by.iter_mut().find(|(q, _)| *q == m.queue) {
                Some((_, v)) => v.push(m),
                None => by.push((&m.queue, vec![m])),
            }
        }
        let qs: Vec<&str> = by.iter().map(|(q, _)| *q).collect();
        self.register(p, &qs);
        let now = self.now_arg();
        let mut encoded = Vec::with_capacity(messages.len());
        for (q, ms) in by {
            for m in ms {
                let json = m.to_json();
                if json.len() > self.max_bytes {
                    return Err(Refused::Invalid(format!(
                        "invalid `message` {:?}: {} bytes encoded, over the `max_message_bytes` cap of {}",
                        crate::task::spec::truncate(m.id.clone(), 64),
                        json.len(),
                        self.max_bytes
                    )));
                }
                encoded.push((q, m, json));
            }
        }
        for chunk in encoded.chunk_by(|a, b| a.0 == b.0) {
            let base = self.base(chunk[0].0);
            for part in chunk.chunks(CHUNK) {
                let mut c = evalsha(&self.scripts.publish, &base);
                c.arg(&now);
                for (_, m, json) in part {
                    c.arg(step_arg(step_of(m)))
                        .arg(m.eta.map(|e| e.to_string()).unwrap_or_default())
                        .arg(json.as_slice());
                }
                p.add_command(c).ignore();
            }
        }
        Ok(())
    }

    /// One claim script on `q`: claims, and ms until its next eta. With
    /// `check` the script also reads each claim's revoked mark.
    async fn claim(
        &self,
        q: &str,
        max: usize,
        adopt: Option<Vec<u8>>,
        check: bool,
    ) -> Result<(Vec<Claimed>, Option<i64>), Refused> {
        let mut c = evalsha(&self.scripts.claim, &self.base(q));
        c.arg(&self.consumer)
            .arg(max)
            .arg(self.lease.as_millis() as u64)
            .arg(self.now_arg())
            .arg(adopt.unwrap_or_default())
            .arg(self.max_bytes);
        if check {
            c.arg(self.revoked_key(""));
        }
        let _gate = self.gate.read().await;
        let v = self.one(c, false).await?;
        let Value::Array(parts) = v else {
            return Err(Refused::Broker("unexpected reply to a claim".into()));
        };
        let els = match parts.first() {
            Some(Value::Array(e)) => e.as_slice(),
            _ => &[],
        };
        let eta = parts.get(1).and_then(int).unwrap_or(-1);
        let now = parts.get(2).and_then(int).unwrap_or(0);
        let flags = match parts.get(4) {
            Some(Value::Array(f)) => f.as_slice(),
            _ => &[],
        };
        if let Some(n) = parts.get(3).and_then(int)
            && n > 0
        {
            log(&format!(
                "queue {q:?}: {n} message(s) over the size cap of {} bytes moved to {} unread",
                self.max_bytes,
                self.key(q, "dead", "")
            ));
        }
        let mut out = Vec::with_capacity(els.len());
        let mut dead = Vec::new();
        for (i, el) in els.iter().enumerate() {
            let Some(el) = bytes(el) else { continue };
            let flag = flags.get(i).and_then(int).unwrap_or(3);
            match self.delivery(q, el) {
                Ok(delivery) => out.push(Claimed {
                    delivery,
                    revoked: match flag {
                        0 => Some(false),
                        1 => Some(true),
                        _ => None,
                    },
                }),
                Err((why, step, raw)) => {
                    let letter = dead_element(now, step, &why, raw);
                    dead.push((el.to_vec(), letter, why.reason));
                }
            }
        }
        if !out.is_empty() {
            let mut o = self.outs();
            let set = o.entry(q.to_string()).or_default();
            set.extend(out.iter().map(|c| c.delivery.receipt.token));
        }
        if !dead.is_empty() {
            self.bury(q, dead).await;
        }
        Ok((out, (eta >= 0).then(|| eta.saturating_sub(now).max(0))))
    }

    /// A claimed element as a delivery, or why it is quarantined (with its
    /// step and its bytes as they were published).
    fn delivery<'e>(
        &self,
        q: &str,
        el: &'e [u8],
    ) -> Result<Delivery, (dead::Undecodable, u8, &'e [u8])> {
        let (token, step, payload) = unheld(el).unwrap_or((0, 0, el));
        let (redelivered, raw) = match unmark(payload) {
            Some(rest) => (true, rest),
            None => (false, payload),
        };
        let message = dead::decode(raw, self.max_bytes).map_err(|e| (e, step, raw))?;
        Ok(Delivery {
            message,
            receipt: Receipt {
                queue: q.to_string(),
                tag: token,
                token,
                raw: Some(Arc::from(el)),
            },
            redelivered,
        })
    }

    /// Moves claims that do not decode from the held list to `P{Q}:dead`
    /// with their reasons (one script: fenced, capped), and logs why: a
    /// malformed message must neither block the queue nor vanish unseen.
    async fn bury(&self, q: &str, items: Vec<(Vec<u8>, Vec<u8>, String)>) {
        let reasons: Vec<String> = items
            .iter()
            .map(|(_, _, r)| crate::log::shown(r).to_string())
            .collect();
        log(&format!(
            "queue {q:?}: quarantined {} message(s) in {}: {}",
            items.len(),
            self.key(q, "dead", ""),
            reasons.join("; ")
        ));
        let mut c = evalsha(&self.scripts.bury, &self.base(q));
        c.arg(&self.consumer);
        for (el, letter, _) in &items {
            c.arg(el.as_slice()).arg(letter.as_slice());
        }
        if let Err(e) = self.one(c, true).await {
            // Left in the held list: the sweep hands it back and the next
            // claim quarantines it again.
            log(&format!(
                "queue {q:?}: could not quarantine ({e}); retried at the next sweep"
            ));
        }
    }

    fn recover_cmd(&self, q: &str) -> Cmd {
        let mut c = evalsha(&self.scripts.recover, &self.base(q));
        // Its own name: a live process never recovers what it holds itself,
        // even when its lease lapsed (Redis was away longer than the lease);
        // a restart under the same name gets its old claims back by `sweep`.
        c.arg(self.max_deliveries)
            .arg(self.now_arg())
            .arg(&self.consumer);
        c
    }

    fn beat_cmd(&self, entry: &str, due: i64, mode: &str) -> Cmd {
        let mut c = evalsha(&self.scripts.beat, &self.key("beat", "beat:", ""));
        c.arg(&self.consumer)
            .arg(entry)
            .arg(due)
            .arg(self.beat_lease.as_millis() as u64)
            .arg(mode);
        c
    }

    /// Puts `raw` on `queue` (priority step 0, at the tail) as another
    /// producer would, unchecked: it is decoded when claimed, and
    /// quarantined if it is not a message headway will run. For tests and
    /// tools; an app publishes with [`Broker::publish`].
    pub async fn push_raw(&self, queue: &str, raw: &[u8]) -> Result<(), Refused> {
        check_name("queue", queue)?;
        let mut p = ::redis::pipe();
        self.register(&mut p, &[queue]);
        p.cmd("LPUSH")
            .arg(self.key(queue, "ready:", "0"))
            .arg(raw)
            .ignore();
        self.run(&p, true).await.map(|_| ())
    }

    fn take_blocker(&self) -> Option<MultiplexedConnection> {
        self.blockers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
    }

    /// Blocks in BLMOVE on `q`'s step 0 for up to `block`, on a dedicated
    /// connection, in a task of its own: if the caller goes away (a
    /// cancelled consume), what the BLMOVE moved is handed back rather than
    /// left held.
    fn block(&self, q: &str, block: Duration) -> oneshot::Receiver<Result<Option<Moved>, Refused>> {
        let (tx, rx) = oneshot::channel();
        let Some(me) = self.me.upgrade() else {
            return rx;
        };
        let src = self.key(q, "ready:", "0");
        let dst = self.key(q, "held:", &self.consumer);
        let queue = q.to_string();
        self.rt.spawn(async move {
            let conn = match me.take_blocker() {
                Some(c) => Ok(c),
                None => {
                    let cfg = AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(CONNECT_TIMEOUT))
                        .set_response_timeout(None);
                    me.client
                        .get_multiplexed_async_connection_with_config(&cfg)
                        .await
                }
            };
            let mut conn = match conn {
                Ok(c) => c,
                Err(e) => {
                    let _ = tx.send(Err(me.link.refused(&e)));
                    return;
                }
            };
            let secs = format!("{:.3}", block.as_secs_f64().max(0.001));
            let mut blmove = ::redis::cmd("BLMOVE");
            blmove
                .arg(&src)
                .arg(&dst)
                .arg("RIGHT")
                .arg("LEFT")
                .arg(secs);
            let call = blmove.query_async::<Option<Vec<u8>>>(&mut conn);
            match tokio::time::timeout(block + RESPONSE_TIMEOUT, call).await {
                Ok(Ok(el)) => {
                    me.blockers
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(conn);
                    let moved = el.map(|el| Moved {
                        broker: Arc::downgrade(&me),
                        queue,
                        el: Some(el),
                    });
                    // A dropped receiver drops `moved`, which hands it back.
                    let _ = tx.send(Ok(moved));
                }
                Ok(Err(e)) => {
                    let _ = tx.send(Err(me.link.refused(&e)));
                }
                // The reply may still come on this connection, so it is not
                // reused; an element it moved is swept back.
                Err(_) => {
                    let _ = tx.send(Ok(None));
                }
            }
        });
        rx
    }

    fn outs(&self) -> MutexGuard<'_, HashMap<String, HashSet<u64>>> {
        self.out.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands back what this consumer's held list has that nobody here
    /// holds: a stray BLMOVE result, or a claim whose answer was lost.
    async fn sweep(&self, q: &str) -> Result<i64, Refused> {
        let _gate = self.gate.write().await;
        let mut c = evalsha(&self.scripts.sweep, &self.base(q));
        c.arg(&self.consumer);
        if let Some(set) = self.outs().get(q) {
            for t in set {
                c.arg(*t);
            }
        }
        let n = int(&self.one(c, true).await?).unwrap_or(0);
        if n > 0 {
            log(&format!(
                "queue {q:?}: handed back {n} claim(s) whose answer was lost or never taken"
            ));
        }
        Ok(n)
    }

    /// After a reconnect, sweeps every queue this consumer claims from once.
    async fn sweep_after_reconnect(&self) {
        let epoch = self.link.lock().epoch;
        if self.swept.swap(epoch, Ordering::SeqCst) != epoch && epoch > 1 {
            let queues: Vec<String> = self.touched().iter().cloned().collect();
            for q in &queues {
                let _ = self.sweep(q).await;
            }
        }
    }

    async fn consume_inner(
        &self,
        queues: &[String],
        max: usize,
        wait: Duration,
        check: bool,
    ) -> Result<Vec<Claimed>, Refused> {
        if max == 0 {
            return Ok(Vec::new());
        }
        if self.closed.load(Ordering::SeqCst) {
            return Err(Refused::Broker("this broker was closed".into()));
        }
        if queues.is_empty() {
            return Err(Refused::Invalid(
                "invalid `queues`: needs at least one".into(),
            ));
        }
        for q in queues {
            check_name("queue", q)?;
            self.touch(q).await?;
        }
        self.sweep_after_reconnect().await;
        let deadline = Instant::now() + wait;
        let virt = self.clock.is_virtual();
        let mut adopt: Option<Vec<u8>> = None;
        loop {
            let mut moved = self.clock.moved();
            // Register for a move now, so one during the claim is not missed.
            std::future::poll_fn(|cx| {
                let _ = moved.as_mut().poll(cx);
                Poll::Ready(())
            })
            .await;
            let mut out = Vec::new();
            let mut next: Option<i64> = None;
            for (i, q) in queues.iter().enumerate() {
                if out.len() >= max {
                    break;
                }
                let a = if i == 0 { adopt.take() } else { None };
                let (got, eta) = self.claim(q, max - out.len(), a, check).await?;
                out.extend(got);
                if let Some(e) = eta {
                    next = Some(next.map_or(e, |n: i64| n.min(e)));
                }
            }
            if !out.is_empty() {
                return Ok(out);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(out);
            }
            let mut block = deadline - now;
            if !virt && let Some(ms) = next {
                block = block.min(Duration::from_millis(ms.max(1) as u64));
            }
            if queues.len() > 1 {
                block = block.min(SLICE);
            }
            let rx = self.block(&queues[0], block);
            let got = if virt {
                tokio::select! {
                    r = rx => r,
                    _ = moved => continue,
                }
            } else {
                rx.await
            };
            match got {
                Ok(Ok(Some(mut m))) => adopt = m.el.take(),
                Ok(Ok(None)) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(Refused::Broker("the blocking claim was lost".into())),
            }
        }
    }

    fn settle_cmd(&self, queue: &str, el: &[u8], mode: &str, next: Option<&Message>) -> Cmd {
        let mut c = evalsha(&self.scripts.settle, &self.base(queue));
        c.arg(&self.consumer).arg(el).arg(mode).arg(self.now_arg());
        if let Some(n) = next {
            c.arg(step_arg(step_of(n)))
                .arg(n.eta.map(|e| e.to_string()).unwrap_or_default())
                .arg(n.to_json());
        }
        c
    }

    /// Runs settles; on a connection error that outlasts the patience they
    /// are kept and retried by the background task, so a finished run is
    /// never left held by a live consumer.
    async fn settle(&self, items: Vec<Pending>) -> Result<(), Refused> {
        if items.is_empty() {
            return Ok(());
        }
        let mut p = ::redis::pipe();
        for it in &items {
            if it.mode == "ack" {
                p.cmd("LREM")
                    .arg(self.key(&it.queue, "held:", &self.consumer))
                    .arg(HELD_OLDEST_FIRST)
                    .arg(&*it.el)
                    .ignore();
            } else {
                p.add_command(self.settle_cmd(&it.queue, &it.el, it.mode, it.next.as_ref()))
                    .ignore();
            }
        }
        match self.run(&p, true).await {
            Ok(_) => {
                let mut o = self.outs();
                for it in &items {
                    if let Some(set) = o.get_mut(&it.queue)
                        && let Some((t, _, _)) = unheld(&it.el)
                    {
                        set.remove(&t);
                    }
                }
                Ok(())
            }
            Err(e) => {
                log(&format!(
                    "{e}; {} settle(s) kept to retry when Redis is back",
                    items.len()
                ));
                self.pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend(items);
                Ok(())
            }
        }
    }

    fn pending_of(receipt: &Receipt, mode: &'static str, next: Option<Message>) -> Option<Pending> {
        Some(Pending {
            queue: receipt.queue.clone(),
            el: receipt.raw.clone()?,
            mode,
            next,
        })
    }

    /// The background task's one round: refresh leases, retry kept
    /// settles, hand back stray BLMOVE results.
    async fn refresh(&self, sweep: bool) {
        let queues: Vec<String> = self.touched().iter().cloned().collect();
        if !queues.is_empty() {
            let mut p = ::redis::pipe();
            let ms = self.lease.as_millis() as u64;
            for q in &queues {
                p.cmd("SET")
                    .arg(self.key(q, "lease:", &self.consumer))
                    .arg(1)
                    .arg("PX")
                    .arg(ms)
                    .ignore();
                p.cmd("SADD")
                    .arg(self.key(q, "consumers", ""))
                    .arg(&self.consumer)
                    .ignore();
                p.cmd("SADD").arg(self.queues_key()).arg(q).ignore();
            }
            if self.run(&p, false).await.is_err() {
                return;
            }
        }
        let kept: Vec<Pending> =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        if !kept.is_empty() {
            let _ = self.settle(kept).await;
        }
        self.retry_unstored().await;
        if sweep {
            for q in &queues {
                let _ = self.sweep(q).await;
            }
        }
    }

    async fn subscribe(&self, ch: &str) -> Result<(), Refused> {
        let mut sink = self.waiters.sink.lock().await;
        if sink.is_none() {
            let ps = self
                .client
                .get_async_pubsub()
                .await
                .map_err(|e| self.link.refused(&e))?;
            let (s, mut stream) = ps.split();
            let epoch = self.waiters.epoch.fetch_add(1, Ordering::SeqCst) + 1;
            *sink = Some((epoch, s));
            let weak = self.me.clone();
            self.rt.spawn(async move {
                while let Some(msg) = stream.next().await {
                    let Some(b) = weak.upgrade() else { return };
                    // A final value (not the `1` wake-up) is kept for the
                    // waiters, who then need no GET.
                    let got = unstored(msg.get_payload_bytes()).filter(|o| o.state.is_final());
                    if let Some(s) = b.waiters.lock().get_mut(msg.get_channel_name()) {
                        if got.is_some() {
                            s.got = got;
                        }
                        s.notify.notify_waiters();
                    }
                }
                // The connection went away: forget it and wake every waiter
                // to look again and subscribe on a new one.
                if let Some(b) = weak.upgrade() {
                    let mut sink = b.waiters.sink.lock().await;
                    if sink.as_ref().is_some_and(|(g, _)| *g == epoch) {
                        *sink = None;
                    }
                    drop(sink);
                    b.waiters.wake_all();
                }
            });
        }
        let (epoch, s) = sink.as_mut().expect("just made");
        let on = self.waiters.lock().get(ch).map_or(0, |s| s.on);
        if on != *epoch {
            s.subscribe(ch).await.map_err(|e| self.link.refused(&e))?;
            if let Some(e) = self.waiters.lock().get_mut(ch) {
                e.on = *epoch;
            }
        }
        Ok(())
    }

    async fn fetch_inner(&self, id: &str, patient: bool) -> Result<Option<Outcome>, Refused> {
        let v = self
            .one(
                ::redis::cmd("GET").arg(self.result_key(id)).clone(),
                patient,
            )
            .await?;
        Ok(bytes(&v).and_then(unstored))
    }

    /// Waits for a final result. The first look (GET) runs alongside the
    /// subscribe, so a result already final answers in one round trip; a
    /// GET that may have run before the subscribe took is repeated once it
    /// has. A notification carries the stored value (up to [`NOTIFY_CAP`]),
    /// so a waiter woken by the store answers without another GET.
    async fn wait_inner(&self, id: &str, timeout: Duration) -> Result<Option<Outcome>, Refused> {
        let deadline = Instant::now() + timeout;
        let ch = self.result_key(id);
        let notify = self.waiters.join(&ch);
        let _leave = Leave {
            broker: self,
            ch: ch.clone(),
        };
        let mut first = true;
        loop {
            let woken = notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if let Some(o) = self.waiters.got(&ch) {
                return Ok(Some(o));
            }
            let (subscribed, looked) = if first {
                first = false;
                // Already subscribed on the live connection: the look is
                // after the subscribe, as below.
                let before = self.waiters.lock().get(&ch).map_or(0, |s| s.on);
                let sub = self.subscribe(&ch);
                let get = self.fetch_inner(id, false);
                tokio::pin!(sub, get);
                let mut subscribed = None;
                let looked = loop {
                    tokio::select! {
                        r = &mut get => break r,
                        r = &mut sub, if subscribed.is_none() => subscribed = Some(r.is_ok()),
                    }
                };
                match looked {
                    Ok(Some(o)) if o.state.is_final() => return Ok(Some(o)),
                    Err(e) if Instant::now() >= deadline => return Err(e),
                    _ => {}
                }
                let subscribed = match subscribed {
                    Some(s) => s,
                    None => sub.await.is_ok(),
                };
                let on = self.waiters.lock().get(&ch).map_or(0, |s| s.on);
                let ahead = before != 0 && before == on;
                (subscribed, looked.is_ok() && ahead)
            } else {
                (self.subscribe(&ch).await.is_ok(), false)
            };
            // Not sure the look came after the subscribe: look again now
            // that it has (a store after this look publishes to us).
            let looked = looked || {
                if let Some(o) = self.waiters.got(&ch) {
                    return Ok(Some(o));
                }
                match self.fetch_inner(id, false).await {
                    Ok(Some(o)) if o.state.is_final() => return Ok(Some(o)),
                    Ok(_) => true,
                    Err(e) if Instant::now() >= deadline => return Err(e),
                    Err(_) => false,
                }
            };
            // Subscribed and looked: only a store can change the answer, and
            // it publishes. Otherwise (Redis away, the look failed, so the
            // store may have come first) look again shortly.
            let until = if subscribed && looked {
                deadline
            } else {
                deadline.min(Instant::now() + Duration::from_millis(100))
            };
            tokio::select! {
                _ = &mut woken => {}
                _ = tokio::time::sleep_until(until) => {
                    if Instant::now() >= deadline {
                        return Ok(None);
                    }
                }
            }
        }
    }

    async fn stats(&self) -> Result<Vec<QueueInfo>, Refused> {
        let v = self
            .one(
                ::redis::cmd("SMEMBERS").arg(self.queues_key()).clone(),
                false,
            )
            .await?;
        let mut names: Vec<String> = match v {
            Value::Array(a) | Value::Set(a) => a
                .iter()
                .filter_map(|x| bytes(x).map(|b| String::from_utf8_lossy(b).into_owned()))
                .collect(),
            _ => Vec::new(),
        };
        names.sort();
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut p = ::redis::pipe();
        for q in &names {
            p.add_command(evalsha(&self.scripts.stats, &self.base(q)));
        }
        let got = self.run(&p, false).await?;
        Ok(names
            .into_iter()
            .zip(got)
            .map(|(name, v)| {
                let n: Vec<u64> = match v {
                    Value::Array(a) => a
                        .iter()
                        .map(|x| int(x).unwrap_or(0).max(0) as u64)
                        .collect(),
                    _ => Vec::new(),
                };
                let at = |i: usize| n.get(i).copied().unwrap_or(0);
                QueueInfo {
                    name,
                    ready: (0..STEPS)
                        .filter(|s| at(*s as usize) > 0)
                        .map(|s| (s, at(s as usize)))
                        .collect(),
                    delayed: at(STEPS as usize),
                    unacked: at(STEPS as usize + 1),
                }
            })
            .collect())
    }

    /// The seven count indexes `P:count:<STATE>`, in [`State::ALL`] order,
    /// which the store script keeps (see `lua/store.lua`).
    pub(super) fn count_keys(&self) -> impl Iterator<Item = String> + '_ {
        State::ALL
            .iter()
            .map(|s| format!("{}count:{}", self.prefix, s.name()))
    }

    /// Stored outcomes per state: one ZCOUNT per state's index, of the
    /// entries not yet expired — a fixed number of commands however many
    /// results are kept, where a SCAN of `P:result:*` was O(results).
    async fn counts_inner(&self) -> Result<BTreeMap<State, u64>, Refused> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut p = ::redis::pipe();
        for k in self.count_keys() {
            p.cmd("ZCOUNT").arg(k).arg(format!("({now}")).arg("+inf");
        }
        let got = self.run(&p, false).await?;
        Ok(State::ALL
            .iter()
            .zip(got)
            .filter_map(|(s, v)| int(&v).filter(|n| *n > 0).map(|n| (*s, n as u64)))
            .collect())
    }
}

/// What a BLMOVE moved into the held list, unstamped. Dropped without being
/// taken, it is handed back to its queue.
struct Moved {
    broker: Weak<RedisBroker>,
    queue: String,
    el: Option<Vec<u8>>,
}

impl Drop for Moved {
    fn drop(&mut self) {
        if self.el.take().is_some()
            && let Some(b) = self.broker.upgrade()
        {
            let q = std::mem::take(&mut self.queue);
            b.rt.clone().spawn(async move {
                let _ = b.sweep(&q).await;
            });
        }
    }
}

/// The background task: every third of the lease, refresh this consumer's
/// leases and retry kept settles; every lease, sweep stray BLMOVE results;
/// every `recover_every`, recover dead consumers' claims. It holds the
/// broker weakly, so dropping the broker ends it (and lets the leases lapse:
/// what a dropped consumer held is then recovered elsewhere).
async fn tick(weak: Weak<RedisBroker>) {
    let (every, recover_every) = match weak.upgrade() {
        // Often enough for the lease refreshes (a third of each lease) and
        // for `recover_every`, however short it is set.
        Some(b) => (
            (b.lease.min(b.beat_lease) / 3)
                .min(b.recover_every.unwrap_or(Duration::MAX))
                .max(Duration::from_millis(10)),
            b.recover_every,
        ),
        None => return,
    };
    let mut round = 0u64;
    let mut last_recover = Instant::now();
    let mut seen_epoch = 0u64;
    let mut hold_until = Instant::now();
    loop {
        tokio::time::sleep(every).await;
        let Some(b) = weak.upgrade() else { return };
        if b.closed.load(Ordering::SeqCst) {
            return;
        }
        round += 1;
        b.refresh(round.is_multiple_of(3)).await;
        b.renew_beat().await;
        // Redis came back (a new connection after the first): every lease
        // may have lapsed while it was away, live consumers' too. Recovering
        // now would hand back work they are still running, so wait one lease
        // for them to reconnect and refresh theirs first.
        let epoch = b.link.lock().epoch;
        if epoch != seen_epoch {
            if seen_epoch != 0 {
                hold_until = Instant::now() + b.lease;
            }
            seen_epoch = epoch;
        }
        if let Some(r) = recover_every
            && last_recover.elapsed() >= r
            && Instant::now() >= hold_until
        {
            last_recover = Instant::now();
            match b.recover_inner().await {
                Ok(n) if n > 0 => log(&format!(
                    "recovered {n} message(s) held by consumers whose lease expired"
                )),
                _ => {}
            }
        }
    }
}

impl RedisBroker {
    /// Renews this process's beat lease while it leads, owner-checked: a
    /// beat that was paused past its lease finds another beat holds it and
    /// stops leading, rather than both leading (as two RedBeat schedulers could).
    async fn renew_beat(&self) {
        if !self.beat_leader.load(Ordering::SeqCst) {
            return;
        }
        match self.one(self.beat_cmd("", 0, "renew"), false).await {
            Ok(v) if int(&v) == Some(1) => {}
            Ok(_) => {
                self.beat_leader.store(false, Ordering::SeqCst);
                log(
                    "the beat lease was taken by another beat (this one paused or lost Redis past it); standing by",
                );
            }
            // Redis away: the lease may lapse, and the next claim finds out.
            Err(_) => {}
        }
    }

    async fn claim_slot_inner(&self, entry: &str, due: i64) -> Result<bool, Refused> {
        // A standby asks again until the leader has fired the slot or its
        // lease has lapsed (then this beat takes over and fires it): each
        // slot fires once even when the leader dies or pauses right
        // before it. Bounded by one lease and a poll.
        let poll =
            (self.beat_lease / 20).clamp(Duration::from_millis(10), Duration::from_millis(500));
        let deadline = Instant::now() + self.beat_lease + poll;
        loop {
            let v = self.one(self.beat_cmd(entry, due, "claim"), true).await?;
            match int(&v) {
                Some(1) => {
                    if !self.beat_leader.swap(true, Ordering::SeqCst) {
                        log("this beat holds the beat lease; it fires the schedule");
                    }
                    return Ok(true);
                }
                Some(2) if Instant::now() < deadline => tokio::time::sleep(poll).await,
                _ => return Ok(false),
            }
        }
    }

    async fn consumers_inner(&self) -> Result<Vec<ConsumerInfo>, Refused> {
        let v = self
            .one(
                ::redis::cmd("SMEMBERS").arg(self.queues_key()).clone(),
                false,
            )
            .await?;
        let mut names: Vec<String> = match v {
            Value::Array(a) | Value::Set(a) => a
                .iter()
                .filter_map(|x| bytes(x).map(|b| String::from_utf8_lossy(b).into_owned()))
                .collect(),
            _ => Vec::new(),
        };
        names.sort();
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut p = ::redis::pipe();
        for q in &names {
            p.add_command(evalsha(&self.scripts.holders, &self.base(q)));
        }
        let now = self.clock.now();
        let mut by: BTreeMap<String, ConsumerInfo> = BTreeMap::new();
        for v in self.run(&p, false).await? {
            let Value::Array(cs) = v else { continue };
            for c in cs {
                let Value::Array(f) = c else { continue };
                let Some(name) = f.first().and_then(bytes) else {
                    continue;
                };
                let name = String::from_utf8_lossy(name).into_owned();
                let pttl = f.get(1).and_then(int).unwrap_or(-2);
                let info = by.entry(name.clone()).or_insert_with(|| ConsumerInfo {
                    name,
                    lease_until: Some(i64::MAX),
                    holding: Vec::new(),
                });
                // The earliest lease of its queues; none once one is gone.
                info.lease_until = match (info.lease_until, pttl > 0) {
                    (Some(u), true) => Some(u.min(now + pttl)),
                    _ => None,
                };
                if let Some(Value::Array(ids)) = f.get(2) {
                    info.holding.extend(
                        ids.iter()
                            .filter_map(bytes)
                            .map(|b| String::from_utf8_lossy(b).into_owned()),
                    );
                }
            }
        }
        Ok(by.into_values().collect())
    }

    async fn recover_inner(&self) -> Result<usize, Refused> {
        let v = self
            .one(
                ::redis::cmd("SMEMBERS").arg(self.queues_key()).clone(),
                false,
            )
            .await?;
        let names: Vec<Vec<u8>> = match v {
            Value::Array(a) | Value::Set(a) => a
                .iter()
                .filter_map(|x| bytes(x).map(<[u8]>::to_vec))
                .collect(),
            _ => Vec::new(),
        };
        if names.is_empty() {
            return Ok(0);
        }
        let mut p = ::redis::pipe();
        for q in &names {
            let q = String::from_utf8_lossy(q);
            p.add_command(self.recover_cmd(&q));
        }
        let got = self.run(&p, true).await?;
        Ok(got.iter().filter_map(int).sum::<i64>().max(0) as usize)
    }
}

impl Broker for RedisBroker {
    fn publish(&self, messages: Vec<Message>) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(async move {
            if messages.is_empty() {
                return Ok(());
            }
            let mut p = ::redis::pipe();
            self.publish_cmds(&mut p, &messages)?;
            self.run(&p, true).await.map(|_| ())
        })
    }

    fn consume<'a>(
        &'a self,
        queues: &'a [String],
        max: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<Delivery>, Refused>> {
        Box::pin(async move {
            let got = self.consume_inner(queues, max, wait, false).await?;
            Ok(got.into_iter().map(|c| c.delivery).collect())
        })
    }

    /// One script claims and reads each claim's revoked mark (see
    /// `claim.lua`): one round trip for the claim and its revoked check.
    fn claim<'a>(
        &'a self,
        queues: &'a [String],
        max: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<Claimed>, Refused>> {
        Box::pin(self.consume_inner(queues, max, wait, true))
    }

    /// The whole round in one pipeline (see `store.rs`).
    fn round(&self, r: Round) -> Result<BoxFuture<'_, Result<Vec<bool>, Refused>>, Round> {
        Ok(Box::pin(self.round_inner(r)))
    }

    fn ack(&self, receipts: Vec<Receipt>) -> BoxFuture<'_, Result<(), Refused>> {
        let items = receipts
            .iter()
            .filter_map(|r| Self::pending_of(r, "ack", None))
            .collect();
        Box::pin(self.settle(items))
    }

    fn reject(&self, receipt: Receipt, requeue: bool) -> BoxFuture<'_, Result<(), Refused>> {
        let mode = if requeue { "requeue" } else { "drop" };
        let items = Self::pending_of(&receipt, mode, None).into_iter().collect();
        Box::pin(self.settle(items))
    }

    fn retry(&self, receipt: Receipt, next: Message) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(async move {
            if next.queue != receipt.queue {
                // Another queue is another slot: publish, then ack.
                self.publish(vec![next]).await?;
                return self.ack(vec![receipt]).await;
            }
            check_name("queue", &next.queue)?;
            let items = Self::pending_of(&receipt, "retry", Some(next))
                .into_iter()
                .collect();
            self.settle(items).await
        })
    }

    fn next_eta<'a>(&'a self, queues: &'a [String]) -> BoxFuture<'a, Result<Option<i64>, Refused>> {
        Box::pin(async move {
            let mut p = ::redis::pipe();
            for q in queues {
                check_name("queue", q)?;
                p.cmd("ZRANGE")
                    .arg(self.key(q, "delayed", ""))
                    .arg(0)
                    .arg(0)
                    .arg("WITHSCORES");
            }
            let got = self.run(&p, false).await?;
            Ok(got
                .iter()
                .filter_map(|v| match v {
                    Value::Array(a) => a.get(1).and_then(|s| match s {
                        Value::Double(d) => Some(*d as i64),
                        other => bytes(other)
                            .and_then(|b| std::str::from_utf8(b).ok()?.parse::<f64>().ok())
                            .map(|f| f as i64),
                    }),
                    _ => None,
                })
                .min())
        })
    }

    fn revoke(&self, ids: Vec<String>, until: i64) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(async move {
            if ids.is_empty() {
                return Ok(());
            }
            let ttl = (until - self.clock.now()).max(1);
            let mut p = ::redis::pipe();
            for id in &ids {
                p.cmd("SET")
                    .arg(self.revoked_key(id))
                    .arg(until)
                    .arg("PX")
                    .arg(ttl)
                    .ignore();
            }
            self.run(&p, true).await.map(|_| ())
        })
    }

    fn revoked<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<Vec<bool>, Refused>> {
        Box::pin(async move {
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            let mut p = ::redis::pipe();
            for id in ids {
                p.cmd("GET").arg(self.revoked_key(id));
            }
            // Patient: a worker asks before it runs, and one that gave up
            // here would leave its claim held.
            let got = self.run(&p, true).await?;
            let now = self.clock.now();
            Ok(got
                .iter()
                .map(|v| int(v).is_some_and(|until| until > now))
                .collect())
        })
    }

    fn recover(&self) -> BoxFuture<'_, Result<usize, Refused>> {
        Box::pin(self.recover_inner())
    }

    /// One beat leads (an owner-checked lease), and each entry's slots fire
    /// once, in order, across every beat on this Redis (see `beat.lua`). A
    /// standby's claim waits up to one `beat_lease` for the leader to fire
    /// the slot or lapse.
    fn claim_slot<'a>(&'a self, entry: &'a str, due: i64) -> BoxFuture<'a, Result<bool, Refused>> {
        Box::pin(self.claim_slot_inner(entry, due))
    }

    fn requeue_dead<'a>(
        &'a self,
        queue: &'a str,
        ids: &'a [String],
        limit: usize,
    ) -> BoxFuture<'a, Result<usize, Refused>> {
        Box::pin(async move {
            check_name("queue", queue)?;
            if limit == 0 {
                return Ok(0);
            }
            let mut c = evalsha(&self.scripts.dead, &self.base(queue));
            c.arg("requeue").arg(limit);
            for id in ids {
                c.arg(id);
            }
            let n = int(&self.one(c, true).await?).unwrap_or(0).max(0) as usize;
            if n > 0 {
                log(&format!("queue {queue:?}: re-queued {n} dead letter(s)"));
            }
            Ok(n)
        })
    }

    fn purge_dead<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, Result<usize, Refused>> {
        Box::pin(async move {
            check_name("queue", queue)?;
            let mut c = evalsha(&self.scripts.dead, &self.base(queue));
            c.arg("purge").arg(0);
            let n = int(&self.one(c, true).await?).unwrap_or(0).max(0) as usize;
            if n > 0 {
                log(&format!("queue {queue:?}: purged {n} dead letter(s)"));
            }
            Ok(n)
        })
    }
}

impl Backend for RedisBroker {
    fn store(&self, outcomes: Vec<Outcome>) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(async move { self.store_all(&outcomes).await })
    }

    fn fetch<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Outcome>, Refused>> {
        Box::pin(self.fetch_inner(id, true))
    }

    fn wait<'a>(
        &'a self,
        id: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Option<Outcome>, Refused>> {
        Box::pin(self.wait_inner(id, timeout))
    }
}

impl Counter for RedisBroker {
    /// Nothing to open on Redis: the part set is made by the first arrival,
    /// which carries the size, and lives in the callback queue's slot.
    fn open(&self, _key: &str, _size: u32) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(async { Ok(()) })
    }

    fn arrive<'a>(
        &'a self,
        key: &'a str,
        part: &'a str,
        size: u32,
        callback: &'a Message,
    ) -> BoxFuture<'a, Result<Joined, Refused>> {
        Box::pin(async move {
            check_name("queue", &callback.queue)?;
            let mut p = ::redis::pipe();
            self.register(&mut p, &[callback.queue.as_str()]);
            p.add_command(
                evalsha(&self.scripts.arrive, &self.base(&callback.queue))
                    .arg(key)
                    .arg(part)
                    .arg(size)
                    .arg(self.result_ms)
                    .arg(self.now_arg())
                    .arg(step_arg(step_of(callback)))
                    .arg(callback.eta.map(|e| e.to_string()).unwrap_or_default())
                    .arg(callback.to_json())
                    .clone(),
            );
            let got = self.run(&p, true).await?;
            Ok(match got.last().and_then(int) {
                Some(2) => Joined::Sent,
                _ => Joined::Waiting,
            })
        })
    }
}

/// How many run events the Redis layout keeps: about ten thousand, in a
/// stream trimmed with `MAXLEN ~` (Redis trims whole nodes, so a little more
/// may stay) — enough for an admin page's recent runs, bounded whatever the
/// traffic.
pub const EVENTS_KEPT: usize = 10_000;

impl RedisBroker {
    fn events_key(&self) -> String {
        format!("{}events", self.prefix)
    }
}

impl Inspector for RedisBroker {
    fn queues(&self) -> BoxFuture<'_, Result<Vec<QueueInfo>, Refused>> {
        Box::pin(self.stats())
    }

    /// Appends events to the capped stream `P:events` (one `XADD … MAXLEN ~`
    /// each, in one pipeline), so an admin page in any process sees them.
    fn record(&self, events: Vec<RunEvent>) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(async move {
            if events.is_empty() {
                return Ok(());
            }
            let mut p = ::redis::pipe();
            self.add_events(&mut p, &events)?;
            self.run(&p, false).await.map(|_| ())
        })
    }

    /// The newest events first (`XREVRANGE … COUNT limit`).
    fn recent(&self, limit: usize) -> BoxFuture<'_, Result<Vec<RunEvent>, Refused>> {
        Box::pin(async move {
            if limit == 0 {
                return Ok(Vec::new());
            }
            let v = self
                .one(
                    ::redis::cmd("XREVRANGE")
                        .arg(self.events_key())
                        .arg("+")
                        .arg("-")
                        .arg("COUNT")
                        .arg(limit)
                        .clone(),
                    false,
                )
                .await?;
            let mut out = Vec::new();
            if let Value::Array(entries) = v {
                for entry in entries {
                    // [id, [field, value, ...]]
                    let Value::Array(parts) = entry else { continue };
                    let Some(Value::Array(fields)) = parts.get(1) else {
                        continue;
                    };
                    for pair in fields.chunks(2) {
                        if let [Value::BulkString(f), Value::BulkString(val)] = pair
                            && f.as_slice() == b"e"
                            && let Ok(ev) = serde_json::from_slice::<RunEvent>(val)
                        {
                            out.push(ev);
                        }
                    }
                }
            }
            Ok(out)
        })
    }

    fn counts(&self) -> BoxFuture<'_, Result<BTreeMap<State, u64>, Refused>> {
        Box::pin(self.counts_inner())
    }

    /// Every consumer of every queue, with the ids it holds (oldest claim
    /// first) and when its earliest lease runs out (`None`: one has).
    fn consumers(&self) -> BoxFuture<'_, Result<Vec<ConsumerInfo>, Refused>> {
        Box::pin(self.consumers_inner())
    }

    fn dead_letters<'a>(
        &'a self,
        queue: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<DeadLetter>, Refused>> {
        Box::pin(async move {
            check_name("queue", queue)?;
            if limit == 0 {
                return Ok(Vec::new());
            }
            let v = self
                .one(
                    ::redis::cmd("LRANGE")
                        .arg(self.key(queue, "dead", ""))
                        .arg(0)
                        .arg(limit.min(DEAD_KEPT) as i64 - 1)
                        .clone(),
                    false,
                )
                .await?;
            Ok(match v {
                Value::Array(a) => a
                    .iter()
                    .filter_map(bytes)
                    .map(|el| undead(queue, el))
                    .collect(),
                _ => Vec::new(),
            })
        })
    }

    fn dead_count<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, Result<u64, Refused>> {
        Box::pin(async move {
            check_name("queue", queue)?;
            let v = self
                .one(
                    ::redis::cmd("LLEN")
                        .arg(self.key(queue, "dead", ""))
                        .clone(),
                    false,
                )
                .await?;
            Ok(int(&v).unwrap_or(0).max(0) as u64)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_elements_parse() {
        assert_eq!(unheld(b"12:3:{\"a\":1}"), Some((12, 3, &b"{\"a\":1}"[..])));
        assert_eq!(unheld(b"7:0:!{}"), Some((7, 0, &b"!{}"[..])));
        assert_eq!(unheld(b"{\"a\":1}"), None);
        let o = Outcome::new("x", State::Success, 5);
        let s = stored(&o);
        assert!(s.starts_with(b"SUCCESS|"));
        assert_eq!(unstored(&s), Some(o));
    }

    #[test]
    fn marks_and_dead_letters_parse() {
        assert_eq!(unmark(b"!0!{}"), Some(&b"{}"[..]));
        assert_eq!(unmark(b"!12!x!y"), Some(&b"x!y"[..]));
        assert_eq!(unmark(b"!!{}"), None);
        assert_eq!(unmark(b"!{}"), Some(&b"{}"[..]));
        assert_eq!(unmark(b"{}"), None);
        let why = dead::Undecodable {
            reason: "bad JSON: \"x\"\n".into(),
            id: Some("a".into()),
        };
        let el = dead_element(7, 3, &why, b"\x00raw\nbytes");
        let d = undead("q", &el);
        assert_eq!(
            (d.at, d.id.as_deref(), d.reason.as_str(), d.raw.as_slice()),
            (7, Some("a"), why.reason.as_str(), &b"\x00raw\nbytes"[..])
        );
        assert_eq!(undead("q", b"{\"a\":1}").raw, b"{\"a\":1}");
        // The scripts' cap is the Rust one.
        assert!(COMMON.contains(&format!("local DEAD_KEPT = {DEAD_KEPT}\n")));
        assert!(COMMON.contains(&format!(
            "local DEAD_PREFIX = {}\n",
            dead::DEAD_PREFIX_BYTES
        )));
        assert_eq!(d.size, d.raw.len());
        let big = vec![b'x'; dead::DEAD_PREFIX_BYTES + 10];
        let d = undead("q", &dead_element(7, 0, &why, &big));
        assert_eq!((d.raw.len(), d.size), (dead::DEAD_PREFIX_BYTES, big.len()));
        assert!(d.truncated());
    }

    #[test]
    fn names_that_break_the_hash_tag_are_refused() {
        assert!(check_name("queue", "a{b}").is_err());
        assert!(check_name("queue", "").is_err());
        assert!(check_name("queue", "celery.high").is_ok());
    }
}
