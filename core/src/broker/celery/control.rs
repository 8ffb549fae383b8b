//! Celery's remote control, answered on Celery's layout: `celery inspect
//! ping` (the liveness probe), `registered`, `stats`, `active`,
//! `reserved`, `active_queues`, `scheduled` (the etas held here),
//! `revoked`, `conf` (Flower asks it), `report`, `clock`; `celery control
//! rate_limit`, `time_limit`, `pool_grow`, `pool_shrink`, `add_consumer`,
//! `cancel_consumer`, `heartbeat`, `shutdown` (a warm shutdown of this
//! process's workers), `enable_events` / `disable_events` (Flower's) —
//! from Celery's CLI, Flower, or `app.control`.
//!
//! What a command does is not decided here: it is read into a
//! `task::remote::Command` and run by `task::remote::Node`, as on the own
//! layouts; this file only shapes the answer as Celery's worker does
//! (`Request.info()` for a run, kombu's `Queue.as_dict()` for a queue, the
//! keys of Celery's `stats` Flower reads) and answers what only this
//! layout knows (its held etas, its revoked set, its settings).
//!
//! A command is a pidbox broadcast carrying `reply_to` and a `ticket`
//! (`pidbox`); the reply is a kombu message `{node: answer}` pushed onto the
//! asker's reply queue — the queues bound to the `reply.celery.pidbox`
//! direct exchange with the asker's routing key, read from kombu's binding
//! set as kombu's Redis transport reads it. Only a process where a worker
//! of the broker's app runs answers: a producer is no node, and a liveness
//! probe must not be answered by one. A refused control answers Celery's
//! `{"error": why}`; a command it does not know, Celery's `{"error": "No
//! such key: ..."}`.

use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use super::CeleryBroker;
use super::pidbox::{self, Control};
use crate::task::RunInfo;
use crate::task::remote::{self, Command, Node, Reply, Stats};

impl CeleryBroker {
    /// The app whose workers answer, when one of them runs here.
    fn answering_node(&self) -> Option<Node> {
        let inner = self
            .app
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()?
            .upgrade()?;
        Node::here(&crate::task::App { inner })
    }

    /// The bodies running in this process's workers of the app, when one
    /// runs here.
    pub(super) fn answering_load(&self) -> Option<u64> {
        let node = self.answering_node()?;
        Some(node.stats().workers.iter().map(|w| w.active).sum())
    }

    /// A run as Celery's `Request.info()` shows it.
    fn request_info(&self, r: &RunInfo) -> Value {
        json!({
            "id": r.id,
            "name": r.name,
            "args": r.args,
            "kwargs": r.kwargs,
            "type": r.name,
            "hostname": self.node,
            "time_start": r.started.map(|ms| ms as f64 / 1000.0),
            "acknowledged": r.acknowledged,
            "delivery_info": {
                "exchange": "",
                "routing_key": self.sender.wire_queue(&r.queue),
                "priority": r.priority.unwrap_or(0),
                "redelivered": r.redelivered,
            },
            "worker_pid": r.pid,
        })
    }

    /// A consumed queue as kombu's `Queue.as_dict(recurse=True)` shows it
    /// (Celery's `inspect active_queues`): a direct exchange of the same
    /// name, as Celery declares a queue it creates.
    fn queue_info(&self, queue: &str) -> Value {
        let name = self.sender.wire_queue(queue);
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
    fn stats_info(&self, s: &Stats) -> Value {
        let active: u64 = s.workers.iter().map(|w| w.active).sum();
        let held: u64 = s.workers.iter().map(|w| w.held).sum();
        let processes: Vec<u32> = s.workers.iter().flat_map(|w| w.pids.clone()).collect();
        let prefetch: usize = s.workers.iter().map(|w| w.prefetch).sum();
        json!({
            "pid": s.pid,
            "clock": self.lamport.load(Ordering::Relaxed).to_string(),
            "broker": {"transport": "redis", "hostname": self.link.url().to_string()},
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
    fn conf_info(&self, node: &Node) -> Value {
        json!({
            "broker_url": self.link.url().to_string(),
            "task_default_queue": self.opts.default_queue,
            "worker_send_task_events": self.task_events(),
            "task_send_sent_event": self.opts.task_send_sent_event,
            "broker_transport_options": {
                "visibility_timeout": self.opts.visibility_timeout.as_secs_f64(),
                "global_keyprefix": self.opts.global_keyprefix,
                "sep": self.opts.sep,
                "priority_steps": self.opts.priority_steps,
            },
            "result_expires": self.opts.result_expires.map(|d| d.as_secs_f64()),
            "worker_concurrency": node.stats().concurrency(),
            "include": [],
        })
    }

    /// What this node answers `c` with.
    fn answer(&self, node: &Node, c: &Control) -> Value {
        let cmd = match Command::parse(&c.method, &c.arguments) {
            Ok(cmd) => cmd,
            Err(e) => return remote::refused(&e),
        };
        match node.run(&cmd) {
            Err(e) => remote::refused(&e),
            Ok(Reply::Runs(runs)) => {
                Value::Array(runs.iter().map(|r| self.request_info(r)).collect())
            }
            Ok(Reply::Queues(qs)) => Value::Array(qs.iter().map(|q| self.queue_info(q)).collect()),
            Ok(Reply::Stats(s)) => self.stats_info(&s),
            Ok(Reply::Layout(m)) => self.answer_here(node, &m),
            Ok(other) => remote::reply_json(Ok(other)),
        }
    }

    /// The commands only this layout answers.
    fn answer_here(&self, node: &Node, method: &str) -> Value {
        match method {
            // Ids revoked and still remembered here (Celery's
            // `inspect revoked`).
            "revoked" | "dump_revoked" => {
                let now = self.clock.now();
                let g = self.lock();
                let mut ids: Vec<&String> = g
                    .revoked
                    .iter()
                    .filter(|(_, until)| **until > now)
                    .map(|(id, _)| id)
                    .collect();
                ids.sort();
                json!(ids)
            }
            // Messages claimed with an eta, held here until due (Celery's
            // `inspect scheduled`: its request fields that apply).
            "scheduled" => {
                let g = self.lock();
                let out: Vec<Value> = g
                    .held
                    .iter()
                    .map(|((eta, _), d)| {
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
                                "hostname": self.node,
                                "time_start": null,
                                "acknowledged": false,
                                "delivery_info": {
                                    "exchange": "",
                                    "routing_key": self.sender.wire_queue(&m.queue),
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
            "conf" | "dump_conf" => self.conf_info(node),
            // Celery's bug report, in its spirit: what runs here.
            "report" => json!({"ok": format!(
                "software -> headway:{} ({})\nplatform -> system:{} pid:{}\ntransport -> redis\nbroker -> {}\n",
                env!("CARGO_PKG_VERSION"),
                self.node,
                std::env::consts::OS,
                std::process::id(),
                self.link.url(),
            )}),
            "clock" => json!({"clock": self.lamport.load(Ordering::Relaxed)}),
            "enable_events" => {
                let was = self.task_events();
                self.set_task_events(true);
                json!({"ok": if was { "task events already enabled" } else { "task events enabled" }})
            }
            "disable_events" => {
                let was = self.task_events();
                self.set_task_events(false);
                json!({"ok": if was { "task events disabled" } else { "task events already disabled" }})
            }
            m => remote::unknown(m),
        }
    }

    /// Carries out a control command heard on the pidbox, when it is for
    /// this node and a worker runs here, and answers it when it asks for a
    /// reply. A broadcast without `reply_to` and `ticket` is carried out
    /// all the same, unanswered, as Celery's worker does: Flower's
    /// `enable_events` every 5 s and its Shut Down button ask for none.
    pub(super) fn on_control(&self, c: Control) {
        if !c.is_for(&self.node, self.now_secs()) {
            return;
        }
        let Some(node) = self.answering_node() else {
            return;
        };
        let reply = self.answer(&node, &c);
        let (Some((exchange, routing_key)), Some(ticket)) = (c.reply_to.clone(), c.ticket.clone())
        else {
            return;
        };
        let clock = self.lamport.fetch_add(1, Ordering::Relaxed) + 1;
        let env =
            pidbox::reply_envelope(&self.node, &reply, &exchange, &routing_key, &ticket, clock);
        let Some(me) = self.me.upgrade() else { return };
        tokio::spawn(async move {
            let prefix = me.opts.global_keyprefix.clone();
            let key = pidbox::bindings_key(&prefix, &exchange);
            let members: Vec<String> = match me.link.conn().await {
                Ok((epoch, mut conn)) => match redis::cmd("SMEMBERS")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                {
                    Ok(m) => m,
                    Err(e) => {
                        let _ = me.link.fail(epoch, &e);
                        return;
                    }
                },
                Err(_) => return,
            };
            let queues = pidbox::bound_queues(&members, &routing_key);
            if queues.is_empty() {
                // Nobody waits any more (the asker's queue is gone).
                return;
            }
            let mut p = redis::pipe();
            for q in queues {
                p.lpush(format!("{prefix}{q}"), &env).ignore();
            }
            let _ = me.link.pipe(&p).await;
        });
    }
}
