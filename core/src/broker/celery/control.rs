//! Celery's remote control and events, carried on Celery's Redis layout:
//! `celery inspect ping` (the liveness probe), `registered`, `stats`,
//! `active`, `reserved`, `active_queues`, `scheduled` (the etas held here),
//! `revoked`, `conf` (Flower asks it), `report`, `clock`; `celery control
//! rate_limit`, `time_limit`, `pool_grow`, `pool_shrink`, `add_consumer`,
//! `cancel_consumer`, `heartbeat`, `shutdown` (a warm shutdown of this
//! process's workers), `enable_events` / `disable_events` (Flower's) —
//! from Celery's CLI, Flower, or `app.control`.
//!
//! What a command does and how its answer reads is not decided here:
//! `node` (shared with RabbitMQ) answers it through `task::remote`, as on
//! the own layouts. This file gives `node` the facts of this layout
//! ([`CeleryNode`]) and carries: a command is a pidbox broadcast carrying
//! `reply_to` and a `ticket` (`pidbox`); the reply is a kombu message
//! `{node: answer}` pushed onto the asker's reply queue — the queues bound
//! to the `reply.celery.pidbox` direct exchange with the asker's routing
//! key, read from kombu's binding set as kombu's Redis transport reads it.
//! Events go out as kombu's Redis transport publishes a fanout: `PUBLISH
//! <prefix>/<db>.celeryev/<routing key>` of a kombu envelope.

use serde_json::{Map, Value, json};

use super::CeleryBroker;
use super::b64;
use super::node::{CeleryNode, NodeFacts, Outgoing, Revoke};
use super::pidbox::{self, Control};
use super::pyjson::dumps;
use crate::task::clock::BoxFuture;
use crate::task::message::new_id;
use crate::task::spec::Delivery;
use crate::task::state::Refused;

impl CeleryNode for CeleryBroker {
    fn facts(&self) -> &NodeFacts {
        &self.facts
    }

    fn transport(&self) -> &'static str {
        "redis"
    }

    fn broker_url(&self) -> String {
        self.link.url().to_string()
    }

    fn held_etas(&self) -> Vec<(i64, Delivery)> {
        let g = self.lock();
        g.held
            .iter()
            .map(|((eta, _), d)| (*eta, d.clone()))
            .collect()
    }

    fn layout_conf(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert(
            "broker_transport_options".into(),
            json!({
                "visibility_timeout": self.opts.visibility_timeout.as_secs_f64(),
                "global_keyprefix": self.opts.global_keyprefix,
                "sep": self.opts.sep,
                "priority_steps": self.opts.priority_steps,
            }),
        );
        m.insert(
            "result_expires".into(),
            json!(self.opts.result_expires.map(|d| d.as_secs_f64())),
        );
        m
    }

    fn sends_sent_events(&self) -> bool {
        self.opts.task_send_sent_event
    }

    /// Each event as kombu's Redis transport publishes a fanout, many to a
    /// pipeline.
    fn publish_events(&self, events: Vec<Outgoing>) -> BoxFuture<'_, ()> {
        let mut p = redis::pipe();
        for e in events {
            let env = json!({
                "body": b64::encode(e.body.as_bytes()),
                "content-encoding": "utf-8",
                "content-type": "application/json",
                "headers": {"hostname": self.facts.node},
                "properties": {
                    "delivery_mode": 1,
                    "delivery_info": {"exchange": "celeryev", "routing_key": e.routing_key},
                    "priority": 0,
                    "body_encoding": "base64",
                    "delivery_tag": new_id(),
                },
            });
            let channel = format!(
                "{}/{}.celeryev/{}",
                self.opts.global_keyprefix, self.db, e.routing_key
            );
            p.publish(channel, dumps(&env)).ignore();
        }
        Box::pin(async move {
            let _ = self.link.pipe(&p).await;
        })
    }

    fn revoke_keep(&self) -> std::time::Duration {
        self.opts.revoke_keep
    }

    /// Pushes the reply onto the asker's reply queues when it asks for
    /// one.
    fn carry_control(&self, c: Control) {
        let Some(r) = self.control_reply(&c) else {
            return;
        };
        let env = pidbox::reply_envelope(&r);
        let Some(me) = self.me.upgrade() else { return };
        tokio::spawn(async move {
            let prefix = me.opts.global_keyprefix.clone();
            let key = pidbox::bindings_key(&prefix, &r.exchange);
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
            let queues = pidbox::bound_queues(&members, &r.routing_key);
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

    fn send_revoke(&self, r: Revoke) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(self.broadcast_revoke(r))
    }
}
