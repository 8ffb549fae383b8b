//! RabbitMQ, on Celery's AMQP topology and message format, so Celery
//! workers and producers on RabbitMQ share queues with headway's.
//!
//! [`AmqpBroker`] implements the Broker seam over AMQP 0-9-1 (lapin, on the
//! core's tokio runtime); results and chords are kept where Celery keeps
//! them beside RabbitMQ — Celery's Redis result backend, the Celery
//! layout's store reused as it is (`backend="redis://..."`), or Celery's
//! `rpc://` backend: results sent as messages to the caller's reply queue.
//!
//! - **Topology** (`topology`): Celery's — a durable queue per queue name,
//!   bound to a durable direct exchange of that name with the name as the
//!   routing key; publishing on the default exchange, routed by the queue's
//!   name; `x-max-priority` when a priority range is configured.
//! - **Publish** (`publish`): Celery's task protocol v2 (the Celery
//!   layout's codec) mapped onto AMQP's properties and header table
//!   (`wire`), persistent, each publish confirmed by the broker before it
//!   returns (publisher confirms): a send that returned is in RabbitMQ.
//! - **Consume** (`consume`): one channel per worker's set of queues, with
//!   `basic.qos` (global) set to the worker's prefetch, a consumer per
//!   queue; deliveries wait in memory until the worker claims them.
//! - **ETA** (`consume`): held by the consumer, unacked, as a Celery worker
//!   holds it — RabbitMQ has no delayed delivery of its own — with the
//!   prefetch raised by one per held message so held etas do not starve
//!   the worker (Celery's `qos.increment_eventually`). An unacked message
//!   is never handed to another consumer while its channel lives, so a
//!   long eta is not run twice (the Redis transport's visibility-timeout
//!   problem does not exist here); if the holder dies, RabbitMQ requeues it.
//! - **Settle** (`settle`): ack, reject (with or without requeue), retry as
//!   publish-then-ack. A receipt names the channel that delivered it; a
//!   settle for a channel that is gone is dropped — RabbitMQ has put that
//!   message back already.
//! - **Reconnect** (`conn`): a lost connection is dialled again after the
//!   core's backoff; consumers are made again on the next claim.
//! - **Revoke** (`revoke`): Celery's pidbox over AMQP (the fanout exchange
//!   `celery.pidbox`), both ways: a Celery client's revoke reaches a
//!   headway worker, and headway's reaches Celery's workers. Each consumer
//!   keeps an expiring revoked set; with a Redis result store, headway also
//!   keeps its revokes there, for a headway worker that was down.
//! - **Remote control and events** (`control`): the rest of Celery's
//!   remote control (`celery inspect`, `celery control`, Flower) is heard
//!   on the same pidbox queue and answered to the asker's `reply_to`; with
//!   task events on (`-E`), Celery's events go to the `celeryev` topic
//!   exchange. What a node answers and which events it sends is decided
//!   once for every transport on Celery's wire (`celery::node`,
//!   `celery::events`); this broker only carries them.

mod conn;
mod consume;
mod control;
mod inspect;
mod listen;
mod options;
mod publish;
mod revoke;
mod rpc;
mod settle;
mod topology;
mod wire;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
use std::time::Duration;

use tokio::sync::Notify;

pub use options::{AmqpOptions, AmqpUrl};
pub use rpc::RpcStore;

use super::celery::CeleryBroker;
use super::celery::codec::{self, Sender};
use super::celery::events::{self, Events};
use super::celery::node::{CeleryNode, NodeFacts};
use crate::task::app::Seams;
use crate::task::clock::{BoxFuture, Clock};
use crate::task::message::Message;
use crate::task::spec::{Broker, Delivery, Receipt};
use crate::task::state::Refused;

/// The consumers of one set of queues (one worker's), on a channel of
/// their own.
struct Group {
    /// The channel's serial: every receipt from it carries it.
    serial: u64,
    channel: lapin::Channel,
    /// The prefetch asked (the worker's), before held etas raise it.
    prefetch: u16,
    /// Delivered, due, not yet claimed by the worker.
    inbox: VecDeque<Delivery>,
    /// Delivered with an eta in the future: (eta, seq) → delivery.
    held: BTreeMap<(i64, u64), Delivery>,
    /// The prefetch last set on the channel.
    qos: u16,
    bell: Arc<Notify>,
    /// Its consumers' tags, to cancel them.
    tags: Vec<lapin::types::ShortString>,
}

#[derive(Default)]
struct Local {
    /// Queue sets (wire names joined by `\n`) → their consumers.
    groups: HashMap<String, Group>,
    /// Live channels by serial, for settling.
    channels: HashMap<u64, lapin::Channel>,
    /// Deliveries handed to workers and not settled yet, by channel serial.
    outstanding: HashMap<u64, usize>,
    /// Every delivery tag a live channel delivered and nobody acked or
    /// rejected yet, by channel serial: what RabbitMQ counts unacked there,
    /// so an ack with `multiple` covers only tags meant to be acked; each
    /// with whether it was delivered before (its ack is not delayed).
    unacked: HashMap<u64, BTreeMap<u64, bool>>,
    /// Acks gathered to share a frame (`settle`).
    gathered: settle::Gathered,
    /// Celery queues declared or consumed here (wire names), for the
    /// inspector.
    queues: std::collections::BTreeSet<String>,
    /// The largest prefetch each queue set was claimed with: a group made
    /// again after a lost connection gets it back, not the room its worker
    /// happened to have at that claim.
    prefetch: HashMap<String, usize>,
    /// Serials of released groups: their channel closes once nothing
    /// handed out from it is left to settle.
    released: std::collections::HashSet<u64>,
    seq: u64,
    /// Run id → the `reply_to` its message carried (its caller's queue).
    replies: HashMap<String, String>,
    replies_order: VecDeque<String>,
}

/// How many runs' reply queues are remembered: far more than any prefetch
/// plus the runs in progress.
const REPLIES_KEPT: usize = 65_536;

/// RabbitMQ behind headway's Broker seam, on Celery's topology.
pub struct AmqpBroker {
    me: Weak<AmqpBroker>,
    conn: conn::Conn,
    opts: AmqpOptions,
    /// Its name, codec, app, Lamport clock, events and the app's clock.
    facts: NodeFacts,
    local: Mutex<Local>,
    /// Queues declared on the live connection: (epoch, names).
    declared: Mutex<(u64, std::collections::HashSet<String>)>,
    /// Serialises making consumer groups.
    making: tokio::sync::Mutex<()>,
    serials: AtomicU64,
    /// Where chord callbacks find their parts' results, and revokes are
    /// kept for workers that were down: the Celery Redis store, when the
    /// app keeps results there.
    store: RwLock<Option<Arc<CeleryBroker>>>,
    /// The `rpc://` store, when an app keeps results that way (it holds
    /// the broker; the broker only finds it again).
    rpc: tokio::sync::Mutex<Option<Weak<RpcStore>>>,
    /// The channel events and control replies go out on.
    side: tokio::sync::Mutex<control::Side>,
}

impl std::fmt::Debug for AmqpBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpBroker")
            .field("url", &self.conn.url().to_string())
            .field("node", &self.facts.node)
            .finish()
    }
}

impl AmqpBroker {
    /// Connects to the RabbitMQ at `url` (`amqp://user:pass@host:port/vhost`,
    /// `pyamqp://`, `amqps://` for TLS) and answers a broker on Celery's
    /// topology there; refused at once when it cannot be reached. `clock`
    /// is the app's: etas and revokes read it. Listens on its pidbox for
    /// revokes until dropped.
    pub async fn connect(
        url: &str,
        opts: AmqpOptions,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<AmqpBroker>, Refused> {
        let parsed = AmqpUrl::parse(url).map_err(Refused::Invalid)?;
        let node = opts
            .consumer
            .clone()
            .unwrap_or_else(|| format!("headway@{}", codec::hostname()));
        let conn = conn::Conn::new(parsed, format!("headway amqp broker {node}"));
        conn.live().await?;
        let (celeryev, outbox) = Events::new(opts.task_events);
        let broker = Arc::new_cyclic(|me| AmqpBroker {
            me: me.clone(),
            conn,
            facts: NodeFacts::new(
                node,
                Sender::this_process(&opts.default_queue),
                clock,
                celeryev,
            ),
            opts,
            local: Mutex::new(Local::default()),
            declared: Mutex::new((0, Default::default())),
            making: tokio::sync::Mutex::new(()),
            serials: AtomicU64::new(0),
            store: RwLock::new(None),
            rpc: tokio::sync::Mutex::new(None),
            side: Default::default(),
        });
        broker.start_pidbox().await?;
        tokio::spawn(events::run(Arc::downgrade(&broker), outbox));
        Ok(broker)
    }

    /// Its seams: the Broker and an Inspector; results and chords live in
    /// the store an app names (`backend=`, see
    /// [`crate::broker::target::backend_store`]).
    pub fn seams(self: &Arc<Self>) -> Seams {
        Seams {
            broker: self.clone(),
            backend: None,
            counter: None,
            inspector: Some(self.clone()),
        }
    }

    /// Keeps results and chord counts in Celery's Redis store `store`: a
    /// chord's last part sends the callback through this broker, and a
    /// callback's parts' results are read there.
    pub fn use_store(self: &Arc<Self>, store: &Arc<CeleryBroker>) {
        let me: Arc<dyn Broker> = self.clone();
        store.send_callbacks_through(Arc::downgrade(&me));
        *self.store.write().unwrap_or_else(|e| e.into_inner()) = Some(store.clone());
    }

    /// The `rpc://` store on this broker: results sent to this producer's
    /// reply queue (declared and read before this answers), and results of
    /// the runs its workers settle sent to their callers'.
    pub async fn use_rpc(self: &Arc<Self>) -> Result<Arc<RpcStore>, Refused> {
        let mut g = self.rpc.lock().await;
        if let Some(r) = g.as_ref().and_then(Weak::upgrade) {
            return Ok(r);
        }
        let r = RpcStore::start(self).await?;
        *g = Some(Arc::downgrade(&r));
        Ok(r)
    }

    /// Where the result of run `id` goes, if a message of it was received.
    fn reply_to_of(&self, id: &str) -> Option<String> {
        self.lock().replies.get(id).cloned()
    }

    /// Routes chain links whose signature names no queue by `app`'s
    /// policies, as on Celery's Redis layout: a Celery worker publishes the
    /// next link itself and knows only what the signature says. The app's
    /// workers in this process answer Celery's remote control here (held
    /// weakly).
    pub fn route_for(&self, app: &crate::task::App) {
        self.facts.route_for(app);
    }

    /// Whether Celery's task events are sent (`-E`).
    pub fn task_events(&self) -> bool {
        self.facts.celeryev.is_on()
    }

    /// The options it was built with.
    pub fn options(&self) -> &AmqpOptions {
        &self.opts
    }

    /// This consumer's node name.
    pub fn node(&self) -> &str {
        &self.facts.node
    }

    /// The URL, password redacted.
    pub fn url(&self) -> String {
        self.conn.url().to_string()
    }

    /// The encoder it uses (its `reply_to` is where `rpc://` results come).
    pub fn sender(&self) -> &Sender {
        &self.facts.sender
    }

    /// Gives back what its consumers hold and no worker took, and closes
    /// the connection; answers how many went back.
    pub async fn close(&self) -> Result<usize, Refused> {
        let n = self.release_all().await;
        self.flush_acks().await;
        self.conn.close().await;
        Ok(n)
    }

    fn lock(&self) -> MutexGuard<'_, Local> {
        self.local.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn store(&self) -> Option<Arc<CeleryBroker>> {
        self.store.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn log(&self, what: &str) {
        self.conn.log(what);
    }
}

impl Broker for AmqpBroker {
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
        Box::pin(async move {
            self.publish_all(vec![next]).await?;
            self.ack_all(vec![receipt]).await
        })
    }

    fn next_eta<'a>(&'a self, queues: &'a [String]) -> BoxFuture<'a, Result<Option<i64>, Refused>> {
        let eta = self.next_held(queues);
        Box::pin(async move { Ok(eta) })
    }

    fn revoke(&self, ids: Vec<String>, until: i64) -> BoxFuture<'_, Result<(), Refused>> {
        self.revoke_all(ids, until, None)
    }

    fn terminate(
        &self,
        ids: Vec<String>,
        until: i64,
        signal: i32,
    ) -> BoxFuture<'_, Result<(), Refused>> {
        self.revoke_all(ids, until, Some(signal))
    }

    fn revoked<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<Vec<bool>, Refused>> {
        Box::pin(self.revoked_of(ids))
    }

    fn on_terminate(&self, hear: crate::task::terminate::OnTerminate) {
        self.facts.hearers.add(hear);
    }

    fn set_task_events(&self, on: bool) -> bool {
        self.facts.celeryev.set_on(on);
        true
    }

    fn rejected(&self, id: &str, requeue: bool) {
        events::rejected(self, id, requeue);
    }

    fn reach(&self, queues: &[String], prefetch: usize) {
        self.set_prefetch(queues, prefetch);
    }

    /// An ack is gathered in the call (`settle`), sent by the broker.
    fn acks_at_once(&self) -> bool {
        true
    }

    fn heartbeat_now(&self) -> bool {
        events::heartbeat(self)
    }

    fn worker_stopped(&self) -> BoxFuture<'_, ()> {
        Box::pin(events::look(self))
    }

    fn stopped<'a>(&'a self, queues: &'a [String]) -> BoxFuture<'a, Result<usize, Refused>> {
        Box::pin(self.release(queues))
    }

    /// With a Redis store, its beat lease and single-fire slots (the Celery
    /// layout's): one beat fires each slot across every process. Without
    /// one, every claim is granted — run a single beat then.
    fn claim_slot<'a>(&'a self, entry: &'a str, due: i64) -> BoxFuture<'a, Result<bool, Refused>> {
        Box::pin(async move {
            match self.store() {
                Some(store) => Broker::claim_slot(&*store, entry, due).await,
                None => Ok(true),
            }
        })
    }
}

/// Remembers where the result of run `id` goes (`reply_to` of the message
/// that carried it); the oldest are forgotten past [`REPLIES_KEPT`].
fn note_reply(g: &mut Local, id: &str, to: String) {
    if g.replies.insert(id.to_string(), to).is_none() {
        g.replies_order.push_back(id.to_string());
        while g.replies_order.len() > REPLIES_KEPT {
            if let Some(old) = g.replies_order.pop_front() {
                g.replies.remove(&old);
            }
        }
    }
}

/// The seq of the next held eta (ties in the map break by arrival).
fn next_seq(g: &mut Local) -> u64 {
    g.seq += 1;
    g.seq
}

fn serial(b: &AmqpBroker) -> u64 {
    b.serials.fetch_add(1, Ordering::Relaxed) + 1
}
