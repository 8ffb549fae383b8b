//! Celery's remote control and events, carried on RabbitMQ as kombu
//! carries them: the node answers what `celery::node` decides (the same
//! answers as on Celery's Redis layout); this file gives it the facts of
//! this broker and carries.
//!
//! - A command arrives on this broker's pidbox queue (`revoke`); a reply
//!   goes as kombu's `Mailbox._publish_reply` sends it: the body `{node:
//!   answer}` (JSON), headers `ticket` and `clock`, published to the
//!   `reply_to` exchange (`reply.celery.pidbox`, direct, non-durable,
//!   declared as kombu declares it) with the asker's routing key.
//! - Events go to the `celeryev` topic exchange (durable, as Celery's
//!   `event_exchange`), routed by the type with `.` for `-`, transient,
//!   with the `hostname` header, as Celery's `EventDispatcher` publishes
//!   them on AMQP; `celery events`, Flower and an `EventReceiver` bind a
//!   queue of their own with `#`.
//!
//! Both go out on a channel of their own without publisher confirms
//! (events and replies are best-effort in Celery too), made again after a
//! lost connection; a run never waits for either.

use std::collections::HashSet;

use lapin::options::{BasicPublishOptions, ExchangeDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};
use serde_json::{Map, Value, json};

use super::AmqpBroker;
use crate::broker::celery::node::{CeleryNode, ControlReply, NodeFacts, Outgoing, Revoke};
use crate::broker::celery::pidbox::Control;
use crate::task::clock::BoxFuture;
use crate::task::spec::Delivery;
use crate::task::state::Refused;

/// The exchange Celery's events go to.
pub(super) const CELERYEV: &str = "celeryev";

/// The channel events and replies go out on, and the exchanges declared on
/// it.
#[derive(Default)]
pub(super) struct Side {
    channel: Option<Channel>,
    declared: HashSet<String>,
}

impl CeleryNode for AmqpBroker {
    fn facts(&self) -> &NodeFacts {
        &self.facts
    }

    fn transport(&self) -> &'static str {
        "amqp"
    }

    fn broker_url(&self) -> String {
        self.conn.url().to_string()
    }

    fn held_etas(&self) -> Vec<(i64, Delivery)> {
        let g = self.lock();
        let mut out: Vec<(i64, Delivery)> = g
            .groups
            .values()
            .flat_map(|gr| gr.held.iter().map(|((eta, _), d)| (*eta, d.clone())))
            .collect();
        out.sort_by_key(|(eta, _)| *eta);
        out
    }

    fn layout_conf(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert(
            "task_queue_max_priority".into(),
            json!(self.opts.max_priority),
        );
        m
    }

    fn sends_sent_events(&self) -> bool {
        self.opts.task_send_sent_event
    }

    fn publish_events(&self, events: Vec<Outgoing>) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let mut headers = FieldTable::default();
            headers.insert(
                "hostname".into(),
                AMQPValue::LongString(self.facts.node.as_str().into()),
            );
            let props = json_props().with_delivery_mode(1).with_headers(headers);
            let Some(ch) = self.side_channel(CELERYEV, ExchangeKind::Topic, true).await else {
                return;
            };
            for e in events {
                let sent = ch
                    .basic_publish(
                        CELERYEV.into(),
                        e.routing_key.as_str().into(),
                        BasicPublishOptions::default(),
                        e.body.as_bytes(),
                        props.clone(),
                    )
                    .await;
                if sent.is_err() {
                    self.side_lost();
                    return;
                }
            }
        })
    }

    fn revoke_keep(&self) -> std::time::Duration {
        self.opts.revoke_keep
    }

    /// Publishes the reply when it asks for one.
    fn carry_control(&self, c: Control) {
        let Some(r) = self.control_reply(&c) else {
            return;
        };
        let Some(me) = self.me.upgrade() else { return };
        tokio::spawn(async move { me.send_reply(r).await });
    }

    fn send_revoke(&self, r: Revoke) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(self.broadcast_revoke(r))
    }

    /// A revoke heard replaces the end this consumer knew for its ids, its
    /// own revoke coming back on the pidbox included.
    fn heard_revoke(&self, ids: &[String], until: i64) {
        self.facts.revoked.note(ids, until, self.now_ms());
    }
}

fn json_props() -> BasicProperties {
    BasicProperties::default()
        .with_content_type("application/json".into())
        .with_content_encoding("utf-8".into())
}

impl AmqpBroker {
    async fn send_reply(&self, r: ControlReply) {
        let Some(ch) = self
            .side_channel(&r.exchange, ExchangeKind::Direct, false)
            .await
        else {
            return;
        };
        let mut headers = FieldTable::default();
        headers.insert(
            "ticket".into(),
            AMQPValue::LongString(r.ticket.as_str().into()),
        );
        headers.insert(
            "clock".into(),
            AMQPValue::LongLongInt(i64::try_from(r.clock).unwrap_or(i64::MAX)),
        );
        let props = json_props().with_delivery_mode(1).with_headers(headers);
        let sent = ch
            .basic_publish(
                r.exchange.as_str().into(),
                r.routing_key.as_str().into(),
                BasicPublishOptions::default(),
                r.body.as_bytes(),
                props,
            )
            .await;
        if sent.is_err() {
            self.side_lost();
        }
    }

    /// The side channel, with `exchange` declared on it (`kind`,
    /// `durable`, as Celery declares it); `None` when RabbitMQ cannot be
    /// reached or refuses the declaration (logged).
    async fn side_channel(
        &self,
        exchange: &str,
        kind: ExchangeKind,
        durable: bool,
    ) -> Option<Channel> {
        let mut side = self.side.lock().await;
        let live = side
            .channel
            .as_ref()
            .filter(|c| c.status().connected())
            .cloned();
        let ch = match live {
            Some(c) => c,
            None => {
                let (_, c) = self.conn.channel().await.ok()?;
                *side = Side {
                    channel: Some(c.clone()),
                    declared: HashSet::new(),
                };
                c
            }
        };
        if !side.declared.contains(exchange) {
            let opts = ExchangeDeclareOptions {
                durable,
                ..Default::default()
            };
            if let Err(e) = ch
                .exchange_declare(exchange.into(), kind, opts, FieldTable::default())
                .await
            {
                self.log(&format!("cannot declare exchange {exchange:?}: {e}"));
                side.channel = None;
                return None;
            }
            side.declared.insert(exchange.to_string());
        }
        Some(ch)
    }

    fn side_lost(&self) {
        if let Ok(mut side) = self.side.try_lock() {
            side.channel = None;
        }
    }
}
