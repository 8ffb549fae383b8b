//! Celery's remote control, answered: `celery inspect ping` (the liveness
//! probe), `inspect registered`, `inspect stats`, `inspect revoked`,
//! `inspect scheduled` (the etas held here), `control shutdown` (a
//! warm shutdown of this process's workers), `enable_events` /
//! `disable_events` (Flower's), from Celery's CLI, Flower, or
//! `app.control`.
//!
//! A command is a pidbox broadcast carrying `reply_to` and a `ticket`
//! (`pidbox`); the reply is a kombu message `{node: answer}` pushed onto the
//! asker's reply queue — the queues bound to the `reply.celery.pidbox`
//! direct exchange with the asker's routing key, read from kombu's binding
//! set as kombu's Redis transport reads it. Only a process where a worker
//! of the broker's app runs answers: a producer is no node, and a liveness
//! probe must not be answered by one. What a node knows it answers;
//! commands it does not know get Celery's `{"error": "No such key: ..."}`.

use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use super::CeleryBroker;
use super::pidbox::{self, Control};

impl CeleryBroker {
    /// The app whose workers answer, when one of them runs here.
    fn answering_app(&self) -> Option<crate::task::App> {
        let inner = self
            .app
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()?
            .upgrade()?;
        let app = crate::task::App { inner };
        (!crate::task::runners::workers(&app).is_empty()).then_some(app)
    }

    /// The bodies running in this process's workers of the app, when one
    /// runs here.
    pub(super) fn answering_load(&self) -> Option<u64> {
        let app = self.answering_app()?;
        Some(
            crate::task::runners::workers(&app)
                .iter()
                .map(|w| w.load.active)
                .sum(),
        )
    }

    /// What this node answers `c` with.
    fn answer(&self, app: &crate::task::App, c: &Control) -> Value {
        match c.method.as_str() {
            "ping" => json!({"ok": "pong"}),
            "registered" => json!(app.task_names()),
            // Ids revoked and still remembered here (Celery's
            // `inspect revoked`).
            "revoked" => {
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
            "stats" => {
                let workers = crate::task::runners::workers(app);
                let active: u64 = workers.iter().map(|w| w.load.active).sum();
                let held: u64 = workers.iter().map(|w| w.load.held).sum();
                json!({
                    "pid": std::process::id(),
                    "clock": self.lamport.load(Ordering::Relaxed).to_string(),
                    "broker": {"transport": "redis", "hostname": self.link.url().to_string()},
                    "headway": {
                        "workers": workers.iter().map(|w| w.name.clone()).collect::<Vec<_>>(),
                        "active": active,
                        "held": held,
                    },
                })
            }
            // Celery's warm shutdown: stop claiming, finish what runs
            // (the default grace), give back the rest.
            "shutdown" => {
                let n = crate::task::runners::stop_workers(app);
                json!({"ok": format!("shutting down {n} worker(s)")})
            }
            "enable_events" => {
                self.set_task_events(true);
                json!({"ok": "task events enabled"})
            }
            "disable_events" => {
                self.set_task_events(false);
                json!({"ok": "task events disabled"})
            }
            m => json!({"error": format!("No such key: '{m}'")}),
        }
    }

    /// Answers a control command heard on the pidbox, when it is for this
    /// node, asks for a reply, and a worker runs here.
    pub(super) fn on_control(&self, c: Control) {
        let (Some((exchange, routing_key)), Some(ticket)) = (c.reply_to.clone(), c.ticket.clone())
        else {
            return;
        };
        if !c.is_for(&self.node, self.now_secs()) {
            return;
        }
        let Some(app) = self.answering_app() else {
            return;
        };
        let reply = self.answer(&app, &c);
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
