//! A headway process as a Celery worker node, whatever carries Celery's
//! wire: what it answers to Celery's remote control and which events it
//! sends, written once for every transport on Celery's format (Celery's
//! Redis layout, RabbitMQ).
//!
//! A transport implements [`CeleryNode`]: the facts only it knows (its node
//! name, its app, its held etas, its settings) and how an event, a reply and
//! a revoke go out. Everything else — which commands exist and what they do
//! (`task::remote`), how Celery's worker shapes an answer
//! (`Request.info()` for a run, kombu's `Queue.as_dict()` for a queue, the
//! keys of `stats` Flower reads), which events a run makes and with which
//! fields (`events`) — is decided here, so a `celery inspect` reads the
//! same answer from a headway worker on Redis and on RabbitMQ.
//!
//! The transports only carry: what a pidbox brings is handed to
//! [`CeleryNode::hear_pidbox`]; a command's reply body (`{node: answer}`,
//! [`CeleryNode::control_reply`]) goes back the transport's way — pushed
//! onto kombu's reply queues on Redis, published to the
//! `reply.celery.pidbox` exchange on RabbitMQ.
//!
//! Revokes are the node's too. Celery's `revoke` is a broadcast nothing
//! stores, so each node keeps the ids it heard or sent in an expiring set
//! of its own ([`Revoked`], in [`NodeFacts`]): one set with one rule for
//! how long an id is kept, whichever transport carried the revoke, and one
//! way a heard revoke is taken in (for this node or not, remembered, a
//! terminate told to this process's apps). What a revoke sent from here
//! adds beside the broadcast (a record in Redis for a headway worker that
//! was down) is the transport's ([`CeleryNode::send_revoke`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::codec::Sender;
use super::events::Events;
use super::pidbox::{self, Control};
use crate::task::app::AppInner;
use crate::task::clock::{BoxFuture, Clock};
use crate::task::remote::{self, Command, Node, Reply, Stats};
use crate::task::signal::SIGTERM;
use crate::task::spec::Delivery;
use crate::task::state::Refused;
use crate::task::terminate::Hearers;
use crate::task::{App, RunInfo};

/// One event ready to go out: its routing key (the type with `.` for
/// `-`, `task.succeeded`) and its body, the event's JSON as Celery writes
/// it.
#[derive(Debug, Clone)]
pub(crate) struct Outgoing {
    pub routing_key: String,
    pub body: String,
}

/// A reply to a control command, for the transport to carry: where
/// (`reply_to`'s exchange and routing key), with which ticket and Lamport
/// clock, and the body `{node: answer}` as JSON text.
#[derive(Debug, Clone)]
pub(crate) struct ControlReply {
    pub exchange: String,
    pub routing_key: String,
    pub ticket: String,
    pub clock: u64,
    pub body: String,
}

/// What a node keeps whatever carries it: its name, its codec, the app it
/// serves, its Lamport clock, its events state and the app's clock. Each
/// transport's broker holds one ([`CeleryNode::facts`]).
pub(crate) struct NodeFacts {
    /// Its node name (`headway@host`).
    pub node: String,
    /// Its codec (queue names as Celery spells them).
    pub sender: Sender,
    /// The app's clock: etas, revokes and events read it.
    pub clock: Arc<dyn Clock>,
    /// Its Lamport clock (replies and events carry it).
    pub lamport: AtomicU64,
    /// The app whose workers answer remote control and send events here,
    /// once told.
    pub app: RwLock<Option<Weak<AppInner>>>,
    /// Celery's events: on or off, and the way out.
    pub celeryev: Events,
    /// The ids revoked, each until when.
    pub revoked: Revoked,
    /// The apps in this process, told of every terminate heard.
    pub hearers: Hearers,
}

impl NodeFacts {
    pub(crate) fn new(
        node: String,
        sender: Sender,
        clock: Arc<dyn Clock>,
        celeryev: Events,
    ) -> Self {
        NodeFacts {
            node,
            sender,
            clock,
            lamport: AtomicU64::new(0),
            app: RwLock::new(None),
            celeryev,
            revoked: Revoked::default(),
            hearers: Hearers::default(),
        }
    }

    /// Tells the node which app it serves, and its codec where the app
    /// routes each task (its `queue`).
    pub(crate) fn route_for(&self, app: &App) {
        let weak = Arc::downgrade(&app.inner);
        *self.app.write().unwrap_or_else(|e| e.into_inner()) = Some(weak.clone());
        let router: super::codec::Router = Arc::new(move |task: &str| {
            let inner = weak.upgrade()?;
            App { inner }.policy_of(task).map(|p| p.queue)
        });
        *self
            .sender
            .routes
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Some(router);
    }
}

/// The ids a node knows revoked, each with the time (ms) it is kept
/// until: an id is revoked while its time is ahead. Every write first
/// forgets the ids whose time has passed, so the set holds only what
/// revokes still cover.
#[derive(Default)]
pub(crate) struct Revoked {
    until: Mutex<HashMap<String, i64>>,
}

impl Revoked {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        self.until.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers `ids` until `until`, replacing any end known for them: a
    /// revoke sent from here says how long it lasts.
    pub(crate) fn note(&self, ids: &[String], until: i64, now: i64) {
        let mut g = self.lock();
        g.retain(|_, u| *u > now);
        for id in ids {
            g.insert(id.clone(), until);
        }
    }

    /// Remembers `ids` until `until` unless an end is known for them: a
    /// node's own revoke coming back to it on the pidbox must not stretch
    /// the end it was given.
    pub(crate) fn heard(&self, ids: &[String], until: i64, now: i64) {
        let mut g = self.lock();
        g.retain(|_, u| *u > now);
        for id in ids {
            g.entry(id.clone()).or_insert(until);
        }
    }

    /// Takes in ids and ends read back from a record of revokes, as they
    /// are.
    pub(crate) fn load(&self, kept: impl IntoIterator<Item = (String, i64)>) {
        let mut g = self.lock();
        for (id, until) in kept {
            g.insert(id, until);
        }
    }

    /// Whether each of `ids` is revoked at `now`.
    pub(crate) fn of(&self, ids: &[String], now: i64) -> Vec<bool> {
        let g = self.lock();
        ids.iter()
            .map(|id| g.get(id).is_some_and(|&u| u > now))
            .collect()
    }

    /// The ids revoked at `now`, sorted.
    pub(crate) fn live(&self, now: i64) -> Vec<String> {
        let g = self.lock();
        let mut ids: Vec<String> = g
            .iter()
            .filter(|(_, until)| **until > now)
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        ids
    }
}

/// A revoke sent from this node: the ids, the time (ms) they are revoked
/// until, and the signal when it asks to terminate their runs.
pub(crate) struct Revoke {
    pub ids: Vec<String>,
    pub until: i64,
    pub terminate: Option<i32>,
}

/// A transport on Celery's wire, seen as a Celery worker node. The
/// provided methods are the node's behaviour; a transport supplies only
/// the required ones.
pub(crate) trait CeleryNode: Send + Sync + 'static {
    /// What it keeps whatever its transport.
    fn facts(&self) -> &NodeFacts;
    /// Its node name (`headway@host`).
    fn node_name(&self) -> &str {
        &self.facts().node
    }
    /// Its codec (queue names as Celery spells them).
    fn codec(&self) -> &Sender {
        &self.facts().sender
    }
    /// The app it serves, once told (`route_for`).
    fn served_app(&self) -> Option<App> {
        let app = self.facts().app.read().unwrap_or_else(|e| e.into_inner());
        let inner = app.as_ref()?.upgrade()?;
        Some(App { inner })
    }
    /// Its Lamport clock (replies and events carry it).
    fn lamport(&self) -> &AtomicU64 {
        &self.facts().lamport
    }
    /// Its events state.
    fn celeryev(&self) -> &Events {
        &self.facts().celeryev
    }
    /// Now, in ms, by the app's clock.
    fn now_ms(&self) -> i64 {
        self.facts().clock.now()
    }
    /// Celery's name for the transport (`redis`, `amqp`).
    fn transport(&self) -> &'static str;
    /// Its broker URL, password redacted.
    fn broker_url(&self) -> String;
    /// The ids revoked and still remembered here, sorted.
    fn revoked_ids(&self) -> Vec<String> {
        self.facts().revoked.live(self.now_ms())
    }
    /// How long a revoke heard is kept (Celery's `LimitedSet` keeps 3 h).
    fn revoke_keep(&self) -> Duration;
    /// The messages held here until their eta: (eta ms, delivery).
    fn held_etas(&self) -> Vec<(i64, Delivery)>;
    /// The settings only this transport has, in Celery's names (merged
    /// into `inspect conf`).
    fn layout_conf(&self) -> Map<String, Value>;
    /// Whether it sends `task-sent` for each message published.
    fn sends_sent_events(&self) -> bool;
    /// Sends `events` in order, best-effort (events are in Celery too).
    fn publish_events(&self, events: Vec<Outgoing>) -> BoxFuture<'_, ()>;
    /// Carries out control command `c`, heard on the pidbox, and sends its
    /// reply ([`CeleryNode::control_reply`]) the transport's way.
    fn carry_control(&self, c: Control);
    /// Sends `r`, already remembered here, as Celery's `revoke` broadcast,
    /// with whatever the transport keeps beside it.
    fn send_revoke(&self, r: Revoke) -> BoxFuture<'_, Result<(), Refused>>;

    /// Revokes `ids` until `until` (ms), asking to terminate their runs
    /// with the signal `terminate` names: remembered here, then sent
    /// ([`CeleryNode::send_revoke`]). No ids, nothing sent.
    fn revoke_all(
        &self,
        ids: Vec<String>,
        until: i64,
        terminate: Option<i32>,
    ) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(async move {
            if ids.is_empty() {
                return Ok(());
            }
            self.facts().revoked.note(&ids, until, self.now_ms());
            self.send_revoke(Revoke {
                ids,
                until,
                terminate,
            })
            .await
        })
    }

    /// Takes in a revoke heard on the pidbox, for this node, until `until`:
    /// [`Revoked::heard`], so its own revoke coming back does not stretch
    /// the end it was sent with.
    fn heard_revoke(&self, ids: &[String], until: i64) {
        self.facts().revoked.heard(ids, until, self.now_ms());
    }

    /// What a pidbox brought (a kombu envelope). A revoke for this node is
    /// remembered for [`CeleryNode::revoke_keep`] and, when it asks to
    /// terminate, told to this process's apps, whichever process sent it
    /// (this one's included: that is how its own terminate reaches its
    /// runs); any other command is carried out. What cannot be read is
    /// dropped.
    fn hear_pidbox(&self, raw: &[u8]) {
        let Some(c) = pidbox::decode(raw) else {
            return;
        };
        if c.method != "revoke" {
            self.carry_control(c);
            return;
        }
        if !c.is_for(self.node_name(), self.now_ms() as f64 / 1000.0) {
            return;
        }
        let keep = i64::try_from(self.revoke_keep().as_millis()).unwrap_or(i64::MAX);
        let until = self.now_ms().saturating_add(keep);
        self.heard_revoke(&c.ids, until);
        if c.terminate && !c.ids.is_empty() {
            self.facts()
                .hearers
                .tell(&c.ids, c.signal.unwrap_or(SIGTERM));
        }
    }

    /// The app's node in this process, when a worker of it runs here: a
    /// producer is no node, and a liveness probe must not be answered by
    /// one.
    fn answering_node(&self) -> Option<Node> {
        Node::here(&self.served_app()?)
    }

    /// The bodies running in this process's workers of the app, when one
    /// runs here.
    fn answering_load(&self) -> Option<u64> {
        let node = self.answering_node()?;
        Some(node.stats().workers.iter().map(|w| w.active).sum())
    }

    /// Carries out control command `c` when it is for this node and a
    /// worker runs here; answers the reply to send when `c` asks for one.
    /// A broadcast without `reply_to` and `ticket` is carried out all the
    /// same, unanswered, as Celery's worker does: Flower's `enable_events`
    /// every 5 s and its Shut Down button ask for none.
    fn control_reply(&self, c: &Control) -> Option<ControlReply> {
        let now = self.now_ms() as f64 / 1000.0;
        if !c.is_for(self.node_name(), now) {
            return None;
        }
        let node = self.answering_node()?;
        let answer = answer(self, &node, c);
        let (Some((exchange, routing_key)), Some(ticket)) = (c.reply_to.clone(), c.ticket.clone())
        else {
            return None;
        };
        Some(ControlReply {
            exchange,
            routing_key,
            ticket,
            clock: self.lamport().fetch_add(1, Ordering::Relaxed) + 1,
            body: pidbox::reply_body(self.node_name(), &answer),
        })
    }
}

/// What `node` answers `c` with, in Celery's shapes.
fn answer<B: CeleryNode + ?Sized>(b: &B, node: &Node, c: &Control) -> Value {
    let cmd = match Command::parse(&c.method, &c.arguments) {
        Ok(cmd) => cmd,
        Err(e) => return remote::refused(&e),
    };
    match node.run(&cmd) {
        Err(e) => remote::refused(&e),
        Ok(Reply::Runs(runs)) => Value::Array(runs.iter().map(|r| request_info(b, r)).collect()),
        Ok(Reply::Queues(qs)) => Value::Array(qs.iter().map(|q| queue_info(b, q)).collect()),
        Ok(Reply::Stats(s)) => stats_info(b, &s),
        Ok(Reply::Layout(m)) => answer_here(b, node, &m),
        Ok(other) => remote::reply_json(Ok(other)),
    }
}

/// A run as Celery's `Request.info()` shows it.
fn request_info<B: CeleryNode + ?Sized>(b: &B, r: &RunInfo) -> Value {
    json!({
        "id": r.id,
        "name": r.name,
        "args": r.args,
        "kwargs": r.kwargs,
        "type": r.name,
        "hostname": b.node_name(),
        "time_start": r.started.map(|ms| ms as f64 / 1000.0),
        "acknowledged": r.acknowledged,
        "delivery_info": {
            "exchange": "",
            "routing_key": b.codec().wire_queue(&r.queue),
            "priority": r.priority.unwrap_or(0),
            "redelivered": r.redelivered,
        },
        "worker_pid": r.pid,
    })
}

/// A consumed queue as kombu's `Queue.as_dict(recurse=True)` shows it
/// (Celery's `inspect active_queues`): a direct exchange of the same name,
/// as Celery declares a queue it creates.
fn queue_info<B: CeleryNode + ?Sized>(b: &B, queue: &str) -> Value {
    let name = b.codec().wire_queue(queue);
    json!({
        "name": name,
        "exchange": {
            "name": name,
            "type": "direct",
            "arguments": null,
            "durable": true,
            "passive": false,
            "auto_delete": false,
            "delivery_mode": null,
            "no_declare": false,
        },
        "routing_key": name,
        "queue_arguments": null,
        "binding_arguments": null,
        "consumer_arguments": null,
        "durable": true,
        "exclusive": false,
        "auto_delete": false,
        "no_ack": false,
        "alias": null,
        "bindings": [],
        "no_declare": null,
        "expires": null,
        "message_ttl": null,
        "max_length": null,
        "max_length_bytes": null,
        "max_priority": null,
    })
}

/// Celery's `inspect stats`: its keys that apply (Flower reads
/// `pool.max-concurrency`, `pool.processes` and `total`).
fn stats_info<B: CeleryNode + ?Sized>(b: &B, s: &Stats) -> Value {
    let active: u64 = s.workers.iter().map(|w| w.active).sum();
    let held: u64 = s.workers.iter().map(|w| w.held).sum();
    let processes: Vec<u32> = s.workers.iter().flat_map(|w| w.pids.clone()).collect();
    let prefetch: usize = s.workers.iter().map(|w| w.prefetch).sum();
    json!({
        "pid": s.pid,
        "clock": b.lamport().load(Ordering::Relaxed).to_string(),
        "broker": {"transport": b.transport(), "hostname": b.broker_url()},
        "pool": {
            "max-concurrency": s.concurrency(),
            "processes": if processes.is_empty() { vec![s.pid] } else { processes },
        },
        "prefetch_count": prefetch,
        "total": {},
        "headway": {
            "workers": s.workers.iter().map(|w| w.name.clone()).collect::<Vec<_>>(),
            "active": active,
            "held": held,
        },
    })
}

/// Celery's `inspect conf`: the settings a headway worker goes by, in
/// Celery's names (Flower shows them).
fn conf_info<B: CeleryNode + ?Sized>(b: &B, node: &Node) -> Value {
    let mut conf = Map::new();
    conf.insert("broker_url".into(), b.broker_url().into());
    conf.insert(
        "task_default_queue".into(),
        b.codec().wire_queue("default").into(),
    );
    conf.insert(
        "worker_send_task_events".into(),
        b.celeryev().is_on().into(),
    );
    conf.insert("task_send_sent_event".into(), b.sends_sent_events().into());
    conf.insert(
        "worker_concurrency".into(),
        node.stats().concurrency().into(),
    );
    conf.insert("include".into(), json!([]));
    conf.extend(b.layout_conf());
    Value::Object(conf)
}

/// The commands `task::remote` leaves to the layout.
fn answer_here<B: CeleryNode + ?Sized>(b: &B, node: &Node, method: &str) -> Value {
    match method {
        // Ids revoked and still remembered here (Celery's `inspect
        // revoked`).
        "revoked" | "dump_revoked" => json!(b.revoked_ids()),
        // Messages claimed with an eta, held here until due (Celery's
        // `inspect scheduled`: its request fields that apply).
        "scheduled" => {
            let out: Vec<Value> = b
                .held_etas()
                .iter()
                .map(|(eta, d)| {
                    let m = &d.message;
                    json!({
                        "eta": super::typed::iso(*eta),
                        "priority": m.priority.unwrap_or(0),
                        "request": {
                            "id": m.id,
                            "name": m.task,
                            "args": m.args,
                            "kwargs": m.kwargs,
                            "type": m.task,
                            "hostname": b.node_name(),
                            "time_start": null,
                            "acknowledged": false,
                            "delivery_info": {
                                "exchange": "",
                                "routing_key": b.codec().wire_queue(&m.queue),
                                "priority": m.priority.unwrap_or(0),
                                "redelivered": d.redelivered,
                            },
                            "worker_pid": null,
                        },
                    })
                })
                .collect();
            json!(out)
        }
        "conf" | "dump_conf" => conf_info(b, node),
        // Celery's bug report, in its spirit: what runs here.
        "report" => json!({"ok": format!(
            "software -> headway:{} ({})\nplatform -> system:{} pid:{}\ntransport -> {}\nbroker -> {}\n",
            env!("CARGO_PKG_VERSION"),
            b.node_name(),
            std::env::consts::OS,
            std::process::id(),
            b.transport(),
            b.broker_url(),
        )}),
        "clock" => json!({"clock": b.lamport().load(Ordering::Relaxed)}),
        "enable_events" => {
            let was = b.celeryev().set_on(true);
            json!({"ok": if was { "task events already enabled" } else { "task events enabled" }})
        }
        "disable_events" => {
            let was = b.celeryev().set_on(false);
            json!({"ok": if was { "task events disabled" } else { "task events already disabled" }})
        }
        m => remote::unknown(m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ids named in `words`, split at spaces.
    fn ids(words: &str) -> Vec<String> {
        words.split(' ').map(String::from).collect()
    }

    #[test]
    fn a_revoke_sent_sets_the_end_and_one_heard_keeps_a_known_end() {
        let r = Revoked::default();
        r.note(&ids("a"), 100, 0);
        r.heard(&ids("a b"), 500, 0);
        assert_eq!(r.of(&ids("a b c"), 99), vec![true, true, false]);
        assert_eq!(r.of(&ids("a b"), 100), vec![false, true]);
        r.note(&ids("b"), 50, 0);
        assert_eq!(r.of(&ids("b"), 60), vec![false]);
    }

    #[test]
    fn ended_ids_are_forgotten_and_the_live_ones_listed_sorted() {
        let r = Revoked::default();
        r.load([("z".to_string(), 300), ("y".to_string(), 10)]);
        r.note(&ids("m"), 300, 0);
        assert_eq!(r.live(20), ids("m z"));
        // A write forgets what has ended: a late heard revoke of it counts
        // afresh.
        r.heard(&ids("x"), 400, 20);
        r.heard(&ids("y"), 400, 20);
        assert_eq!(r.of(&ids("y"), 20), vec![true]);
        assert_eq!(r.lock().len(), 4);
    }
}
