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
//! - Revoked ids under `P:revoked:<id>`, expiring with the revoke; a
//!   terminate is also published on `P:terminate`, which every broker under
//!   the prefix subscribes, so the process running the run stops it.
//! - Remote commands (`headway inspect` / `control`) are published on
//!   `P:control`, which every broker under the prefix subscribes too; each
//!   answers onto the request's `P:control:reply:<ticket>` list (a minute's
//!   expiry).
//!
//! The same layout runs through Redis Sentinel (`redis+sentinel://`: the
//! link follows the primary) and on a Redis Cluster (`redis+cluster://`:
//! each queue's keys in one slot; the claim's revoked read and a round's
//! stores, which span slots on one Redis, are done apart there — see the
//! `cluster` field and `docs/high-availability.md`).
//!
//! Connections reconnect with headway's own capped, jittered backoff
//! ([`crate::flow::Backoff`]) and say so in the log; writes wait through a
//! short outage (`patience`) rather than fail; a URL's password is never
//! shown (`redis://user:***@host`).
//!
//! The code is split by concern: `options` (setup and its checks), `keys`
//! (key names), `wire` (value formats), `scripts` (every Lua script), `run`
//! (commands over the shared reconnecting link of [`crate::broker::link`]),
//! `publish`, `consume` (claims), `settle` (acks, rejects, retries,
//! revokes), `lease` (this consumer's and the beat's, and the background
//! task), `store` and `results` (writing and waiting for results), `terminate`
//! (terminates across processes), `control` (remote commands across
//! processes), `chords`,
//! `inspect`, `restore` (recover and sweep) and `dead` (dead letters). This
//! file holds the broker's state and the seams' impls, which delegate.

mod chords;
mod cluster;
mod consume;
mod control;
mod dead;
mod inspect;
mod keys;
mod lease;
mod options;
mod publish;
mod restore;
mod results;
mod run;
mod scripts;
mod settle;
mod store;
mod terminate;
mod tls;
mod url;
mod wire;

pub use cluster::refuse_cluster;
pub use inspect::{EVENTS_KEPT, EVENTS_PER_ENTRY};
pub use options::RedisOptions;
pub(crate) use tls::check_ca;
pub use url::{RedisUrl, Topology, Wait};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::broker::link::Conn;

use crate::task::app::Seams;
use crate::task::clock::{BoxFuture, Clock};
use crate::task::dead::DeadLetter;
use crate::task::message::Message;
use crate::task::spec::{
    Backend, Broker, Claimed, ConsumerInfo, Counter, Delivery, Inspector, Joined, QueueInfo,
    Receipt, Round, RunEvent,
};
use crate::task::state::{Outcome, Refused, State};

use super::link::{Link, LinkSetup, Waiters};
use scripts::Scripts;
use settle::Pending;

fn log(what: &str) {
    crate::log::warn("headway.redis", format_args!("headway redis: {what}"));
}

/// headway's Redis broker: also its result store, chord counter and
/// inspector. See the module docs and `docs/redis-layout.md`.
pub struct RedisBroker {
    me: Weak<RedisBroker>,
    url: RedisUrl,
    /// On a Redis Cluster: every script touches its own slot only, so the
    /// claim does not read revoked marks (the worker asks), a round's
    /// results are stored one call each, and late acks follow their stores.
    cluster: bool,
    link: Link,
    prefix: String,
    consumer: String,
    lease: Duration,
    result_ms: u64,
    recover_every: Option<Duration>,
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
    blockers: Mutex<Vec<Conn>>,
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
    /// Result waiters; a notification carries the final outcome stored.
    /// The terminate channel is a standing pattern on the same connection.
    waiters: Arc<Waiters<Outcome>>,
    /// The apps on this broker, told of every terminate heard.
    hearers: crate::task::terminate::Hearers,
    /// The apps on this broker, asked every remote command heard.
    answerers: crate::task::control::Answerers,
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
        options.check()?;
        let consumer = match options.consumer {
            Some(c) => {
                options::check_name("consumer", &c)?;
                c
            }
            None => options::default_consumer(),
        };
        let link = Link::new(LinkSetup::dialling(
            parsed.clone(),
            options.tls_ca.as_deref(),
            consumer.clone(),
            options.patience,
            "headway redis".into(),
        )?);
        // A final value (not the `1` wake-up) is kept for the waiters, who
        // then need no GET.
        let waiters = link.waiters(Box::new(|b| {
            wire::unstored(b).filter(|o| o.state.is_final())
        }));
        let cluster = link.dialer().is_cluster();
        let broker = Arc::new_cyclic(|me| RedisBroker {
            me: me.clone(),
            url: parsed,
            cluster,
            link,
            prefix: options.prefix,
            consumer,
            lease: options.lease,
            result_ms: options.result_expires.as_millis().max(1) as u64,
            recover_every: options.recover_every,
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
            waiters,
            hearers: Default::default(),
            answerers: Default::default(),
            closed: AtomicBool::new(false),
            rt: tokio::runtime::Handle::current(),
        });
        // Fail fast on a Redis that is not there or is a Cluster node, and
        // load the scripts.
        let mut c = broker.link.first("").await?;
        broker
            .load_scripts(&mut c)
            .await
            .map_err(|e| broker.link.refused(&e))?;
        // Subscribed before connect answers: a terminate sent right after
        // is heard.
        broker.hear_terminates().await;
        broker.hear_controls().await;
        tokio::spawn(lease::tick(Arc::downgrade(&broker)));
        Ok(broker)
    }

    /// The seams an [`crate::task::App`] is built on, all this broker.
    pub fn seams(self: &Arc<Self>) -> Seams {
        Seams::all(self)
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
}

impl crate::limit::store::Linked for RedisBroker {
    fn link(&self) -> &Link {
        &self.link
    }
}

impl Broker for RedisBroker {
    fn publish(&self, messages: Vec<Message>) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(self.publish_inner(messages))
    }

    /// On this Redis, under its prefix; a concurrency key's permit is
    /// leased for this broker's consumer lease, so a killed worker's room
    /// comes back when its claims do.
    fn task_limits(&self) -> Option<Arc<dyn crate::task::limits::TaskLimits>> {
        let me = self.me.upgrade()?;
        Some(crate::limit::tasks::RedisTaskLimits::new(
            me,
            self.prefix.trim_end_matches(':').to_string(),
            self.lease.as_nanos().min(i64::MAX as u128) as i64,
            self.clock.clone(),
        ))
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
        Box::pin(self.retry_inner(receipt, next))
    }

    fn next_eta<'a>(&'a self, queues: &'a [String]) -> BoxFuture<'a, Result<Option<i64>, Refused>> {
        Box::pin(self.next_eta_inner(queues))
    }

    fn revoke(&self, ids: Vec<String>, until: i64) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(self.revoke_inner(ids, until))
    }

    fn revoked<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<Vec<bool>, Refused>> {
        Box::pin(self.revoked_inner(ids))
    }

    /// The revoke and a PUBLISH on `P:terminate` in one pipeline; every
    /// broker under this prefix hears it (see `terminate.rs`).
    fn terminate(
        &self,
        ids: Vec<String>,
        until: i64,
        signal: i32,
    ) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(self.terminate_inner(ids, until, signal))
    }

    fn control(
        &self,
        request: serde_json::Value,
        timeout: Duration,
    ) -> Option<BoxFuture<'_, Result<Vec<serde_json::Value>, Refused>>> {
        Some(Box::pin(self.control_inner(request, timeout)))
    }

    fn on_control(&self, answer: crate::task::spec::OnControl) {
        self.answerers.add(answer);
    }

    fn on_terminate(&self, hear: crate::task::terminate::OnTerminate) {
        self.hearers.add(hear);
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
        Box::pin(self.requeue_dead_inner(queue, ids, limit))
    }

    fn purge_dead<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, Result<usize, Refused>> {
        Box::pin(self.purge_dead_inner(queue))
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

    fn forget<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<(), Refused>> {
        Box::pin(async move {
            if ids.is_empty() {
                return Ok(());
            }
            let mut del = ::redis::cmd("DEL");
            for id in ids {
                del.arg(self.result_key(id));
            }
            self.one(del, true).await.map(|_| ())
        })
    }
}

impl Counter for RedisBroker {
    /// Nothing to open on Redis: the part set is made by the first arrival,
    /// which carries the size, and lives in the callback queue's slot.
    fn open(&self, _key: &str, _size: u32) -> BoxFuture<'_, Result<(), Refused>> {
        crate::task::clock::done()
    }

    fn arrive<'a>(
        &'a self,
        key: &'a str,
        part: &'a str,
        size: u32,
        callback: &'a Message,
    ) -> BoxFuture<'a, Result<Joined, Refused>> {
        Box::pin(self.arrive_inner(key, part, size, callback))
    }
}

impl Inspector for RedisBroker {
    fn queues(&self) -> BoxFuture<'_, Result<Vec<QueueInfo>, Refused>> {
        Box::pin(self.stats())
    }

    /// Appends events to the capped stream `P:events` (an `XADD … MAXLEN ~`
    /// per sixteen, each event a field of the entry), so an admin page in
    /// any process sees them.
    fn record(&self, events: Vec<RunEvent>) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(self.record_inner(events))
    }

    /// The newest events first (`XREVRANGE … COUNT limit`).
    fn recent(&self, limit: usize) -> BoxFuture<'_, Result<Vec<RunEvent>, Refused>> {
        Box::pin(self.recent_inner(limit))
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
        Box::pin(self.dead_letters_inner(queue, limit))
    }

    fn dead_count<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, Result<u64, Refused>> {
        Box::pin(self.dead_count_inner(queue))
    }
}
