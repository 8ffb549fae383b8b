//! Celery's events, sent as a Celery worker sends them, for any transport
//! on Celery's wire (`node::CeleryNode`): each event is its JSON body and
//! its routing key, the type with `.` for `-` (`task.succeeded`), and the
//! transport carries it — on Celery's Redis layout the `celeryev` fanout
//! exchange, which kombu's Redis transport makes `PUBLISH
//! <prefix>/<db>.celeryev/<routing key>` (its `fanout_patterns`, on in
//! Celery); on RabbitMQ the `celeryev` topic exchange. Flower, `celery
//! events` and celery-exporter read them.
//!
//! Off until asked, as in Celery: the transport's `task_events` option (Celery's
//! `worker_send_task_events`, the worker's `-E`), or Celery's
//! `enable_events` control command (Flower broadcasts it), and
//! `disable_events` turns them off again. While on and a worker of the
//! app runs in this process: `worker-online`, a `worker-heartbeat` every
//! [`HEARTBEAT`] (with `freq`, `active`, `processed`, `loadavg`), and
//! `worker-offline` when the last worker stops or events are turned off;
//! for each run `task-received`, `task-started`, then `task-succeeded`,
//! `task-failed`, `task-retried` or `task-revoked`, from the run events the
//! worker records anyway. Events go out in order through one task, many
//! to a pipeline, never on a run's path: a run waits for none of them, and
//! one the broker cannot take is dropped (events are best-effort in Celery too).

use std::sync::Weak;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};

use super::node::{CeleryNode, Outgoing};
use super::pyjson::dumps;
use crate::task::message::Message;
use crate::task::spec::RunEvent;
use crate::task::state::State;

/// How often a worker's heartbeat goes out: 2 s, Celery's
/// `worker_heartbeat` default `freq`.
pub const HEARTBEAT: Duration = Duration::from_secs(2);

/// What the events task is handed: an event, or a look at the workers now
/// (answered once what it sends is out).
enum Item {
    Event(String, Map<String, Value>),
    Look(oneshot::Sender<()>),
}

/// The events state of one broker.
pub(crate) struct Events {
    on: AtomicBool,
    processed: AtomicU64,
    tx: mpsc::UnboundedSender<Item>,
}

/// The receiving end, for [`run`].
pub(crate) struct Outbox(mpsc::UnboundedReceiver<Item>);

impl Events {
    pub(crate) fn new(on: bool) -> (Events, Outbox) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Events {
                on: AtomicBool::new(on),
                processed: AtomicU64::new(0),
                tx,
            },
            Outbox(rx),
        )
    }

    /// Whether task events are sent.
    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Turns task events on or off (Celery's `enable_events` /
    /// `disable_events`); answers whether they were on.
    pub(crate) fn set_on(&self, on: bool) -> bool {
        self.on.swap(on, Ordering::Relaxed)
    }

    fn send(&self, kind: &str, fields: Map<String, Value>) {
        let _ = self.tx.send(Item::Event(kind.to_string(), fields));
    }
}

fn secs(ms: i64) -> f64 {
    ms as f64 / 1000.0
}

/// `task-sent` for a message published (Celery's `task_send_sent_event`),
/// with the fields a Celery producer sends.
pub(crate) fn sent<B: CeleryNode + ?Sized>(b: &B, m: &Message) {
    let queue = b.codec().wire_queue(&m.queue);
    let mut f = task_fields(m);
    f.insert("queue".into(), queue.into());
    f.insert("exchange".into(), "".into());
    f.insert("routing_key".into(), queue.into());
    b.celeryev().send("task-sent", f);
}

/// `task-received` for a message as it reaches this consumer (held for its
/// eta or not), as a Celery worker sends it on receipt, with the fields
/// Flower shows (its eta among them); only while task events are on and a
/// worker of the app runs here.
pub(crate) fn received<B: CeleryNode + ?Sized>(b: &B, m: &Message) {
    if !b.celeryev().is_on() || b.answering_load().is_none() {
        return;
    }
    b.celeryev().send("task-received", task_fields(m));
}

/// `task-rejected` for a message a worker gave back (`requeue`) or
/// dropped, as a Celery worker's `Request.reject` sends it.
pub(crate) fn rejected<B: CeleryNode + ?Sized>(b: &B, id: &str, requeue: bool) {
    if !b.celeryev().is_on() {
        return;
    }
    let mut f = Map::new();
    f.insert("uuid".into(), id.into());
    f.insert("requeue".into(), requeue.into());
    b.celeryev().send("task-rejected", f);
}

/// A `worker-heartbeat` now (Celery's `heartbeat` control), whether task
/// events are on or not, as a Celery worker sends it; only while a worker
/// runs here.
pub(crate) fn heartbeat<B: CeleryNode + ?Sized>(b: &B) -> bool {
    let Some(active) = b.answering_load() else {
        return false;
    };
    b.celeryev()
        .send("worker-heartbeat", worker_fields(b, active));
    true
}

/// Has the events task look at the workers now (a worker stopped):
/// `worker-offline` goes out, after what was queued before, when no worker
/// of the app runs here any more and it was online; resolves once sent.
pub(crate) async fn look<B: CeleryNode + ?Sized>(b: &B) {
    let (tx, rx) = oneshot::channel();
    if b.celeryev().tx.send(Item::Look(tx)).is_ok() {
        let _ = rx.await;
    }
}

/// The Celery events for `evs`, the run events a worker recorded.
pub(crate) fn runs<B: CeleryNode + ?Sized>(b: &B, evs: &[RunEvent]) {
    let ev = b.celeryev();
    if !ev.is_on() {
        return;
    }
    for e in evs {
        let mut f = Map::new();
        f.insert("uuid".into(), e.id.clone().into());
        f.insert("timestamp".into(), secs(e.at).into());
        let detail = e.detail.clone().unwrap_or_default();
        let (first, rest) = detail.split_once('\n').unwrap_or((detail.as_str(), ""));
        let kind = match e.state {
            // Sent on receipt, by the consumer (`received`).
            State::Received => continue,
            State::Started => "task-started",
            State::Success => {
                ev.processed.fetch_add(1, Ordering::Relaxed);
                f.insert("result".into(), detail.clone().into());
                f.insert("runtime".into(), secs(e.runtime.unwrap_or(0)).into());
                "task-succeeded"
            }
            State::Failure => {
                ev.processed.fetch_add(1, Ordering::Relaxed);
                f.insert("exception".into(), first.into());
                f.insert("traceback".into(), rest.into());
                "task-failed"
            }
            State::Retry => {
                f.insert("exception".into(), first.into());
                f.insert("traceback".into(), rest.into());
                "task-retried"
            }
            // Why, from the run event's failure: revoked before it ran,
            // expired, or terminated while running (Celery's
            // `Request._announce_revoked` fields).
            State::Revoked => {
                let terminated = first.starts_with("Terminated");
                f.insert("terminated".into(), terminated.into());
                // The signal is the terminating process's, not known here.
                f.insert("signum".into(), Value::Null);
                f.insert("expired".into(), first.starts_with("Expired").into());
                "task-revoked"
            }
            State::Pending => continue,
        };
        ev.send(kind, f);
    }
}

/// A worker event's fields (Celery's heartbeat fields).
fn worker_fields<B: CeleryNode + ?Sized>(b: &B, active: u64) -> Map<String, Value> {
    let load: Vec<f64> = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| {
            s.split_whitespace()
                .take(3)
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let mut f = Map::new();
    f.insert("freq".into(), HEARTBEAT.as_secs_f64().into());
    f.insert("active".into(), active.into());
    f.insert(
        "processed".into(),
        b.celeryev().processed.load(Ordering::Relaxed).into(),
    );
    f.insert("loadavg".into(), json!(load));
    f.insert("sw_ident".into(), "headway".into());
    f.insert("sw_ver".into(), env!("CARGO_PKG_VERSION").into());
    f.insert("sw_sys".into(), std::env::consts::OS.into());
    f
}

/// One event as it goes out: the fields every Celery event carries
/// (hostname, utcoffset, pid, clock, timestamp, type) added.
fn outgoing<B: CeleryNode + ?Sized>(b: &B, kind: &str, mut fields: Map<String, Value>) -> Outgoing {
    fields.insert("hostname".into(), b.node_name().into());
    fields.insert("utcoffset".into(), 0.into());
    fields.insert("pid".into(), std::process::id().into());
    fields.insert(
        "clock".into(),
        (b.lamport().fetch_add(1, Ordering::Relaxed) + 1).into(),
    );
    if !fields.contains_key("timestamp") {
        fields.insert("timestamp".into(), secs(b.now_ms()).into());
    }
    fields.insert("type".into(), kind.into());
    Outgoing {
        routing_key: kind.replace('-', "."),
        body: dumps(&Value::Object(fields)),
    }
}

/// Sends the broker's events in order, and its workers' heartbeats, until
/// the broker is dropped.
pub(crate) async fn run<B: CeleryNode>(me: Weak<B>, outbox: Outbox) {
    let mut outbox = outbox.0;
    let mut tick = tokio::time::interval(HEARTBEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut online = false;
    loop {
        let mut batch = Vec::new();
        tokio::select! {
            got = outbox.recv() => match got {
                Some(e) => {
                    batch.push(e);
                    while let Ok(e) = outbox.try_recv() {
                        batch.push(e);
                    }
                }
                None => return,
            },
            _ = tick.tick() => {}
        }
        let Some(b) = me.upgrade() else { return };
        // The workers' state, looked at on every wake-up.
        let running = b.celeryev().is_on().then(|| b.answering_load()).flatten();
        let mut out = Vec::with_capacity(batch.len() + 2);
        match (running, online) {
            (Some(active), was) => {
                if !was {
                    out.push(outgoing(&*b, "worker-online", worker_fields(&*b, active)));
                }
                if batch.is_empty() || !was {
                    out.push(outgoing(
                        &*b,
                        "worker-heartbeat",
                        worker_fields(&*b, active),
                    ));
                }
                online = true;
            }
            (None, true) => {
                out.push(outgoing(&*b, "worker-offline", worker_fields(&*b, 0)));
                online = false;
            }
            (None, false) => {}
        }
        let mut lookers = Vec::new();
        for item in batch {
            match item {
                Item::Event(kind, fields) => out.push(outgoing(&*b, &kind, fields)),
                Item::Look(tx) => lookers.push(tx),
            }
        }
        if !out.is_empty() {
            b.publish_events(out).await;
        }
        for tx in lookers {
            let _ = tx.send(());
        }
    }
}

/// What `task-sent` and `task-received` say of message `m`: its id, name,
/// arguments (as text), retries, eta, expires, root and parent.
fn task_fields(m: &Message) -> Map<String, Value> {
    let mut f = Map::new();
    f.insert("uuid".into(), m.id.clone().into());
    f.insert(
        "root_id".into(),
        json!(m.root_id.as_deref().unwrap_or(&m.id)),
    );
    f.insert("parent_id".into(), json!(m.parent_id));
    f.insert("name".into(), m.task.clone().into());
    f.insert("args".into(), dumps(&Value::Array(m.args.clone())).into());
    f.insert(
        "kwargs".into(),
        dumps(&Value::Object(m.kwargs.clone())).into(),
    );
    f.insert("retries".into(), m.retries.into());
    f.insert("eta".into(), json!(m.eta.map(super::typed::iso)));
    f.insert("expires".into(), json!(m.expires.map(super::typed::iso)));
    f
}
