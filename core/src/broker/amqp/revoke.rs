//! Revokes over Celery's pidbox on RabbitMQ, both ways.
//!
//! Celery's `app.control.revoke(id)` publishes `{"method": "revoke",
//! "arguments": {"task_id", "terminate", "signal"}, ...}` on the fanout
//! exchange `celery.pidbox`; every worker has a queue bound to it. This
//! broker binds one of its own (named after its node, with a random
//! suffix: two headway processes on one host must not share a queue, or
//! each would hear only half of the revokes), reads it without acks, and
//! keeps an expiring revoked set checked at receipt and before a run.
//! Its own revokes go out the same way, so a Celery worker skips them;
//! with a Redis result store they are also kept there, so a headway
//! worker that was down when one was sent still skips the task.

use std::sync::Arc;

use lapin::BasicProperties;
use lapin::options::BasicPublishOptions;
use lapin::types::{AMQPValue, FieldTable};
use serde_json::{Map, Value};

use super::listen::{self, listen};
use super::{AmqpBroker, topology, wire};
use crate::broker::celery::node::{CeleryNode, Revoke};
use crate::broker::celery::pidbox;
use crate::task::message::new_id;
use crate::task::spec::Broker;
use crate::task::state::Refused;

impl AmqpBroker {
    /// Binds this broker's pidbox queue now (so a revoke sent right after
    /// connect is heard) and keeps reading it in a task of its own, bound
    /// again after a lost connection.
    pub(super) async fn start_pidbox(&self) -> Result<(), Refused> {
        let queue = format!(
            "{}#{}.{}",
            self.facts.node,
            &new_id()[..8],
            topology::PIDBOX
        );
        let first = self.pidbox_consumer(&queue).await?;
        tokio::spawn(listen(
            self.me.clone(),
            Some(first),
            AmqpBroker::on_pidbox,
            move |b: Arc<AmqpBroker>| {
                let queue = queue.clone();
                async move {
                    let c = b.pidbox_consumer(&queue).await.ok()?;
                    // Revokes sent while the queue was gone are in the store.
                    if let Some(store) = b.store() {
                        let _ = store.load_revoked().await;
                    }
                    Some(c)
                }
            },
        ));
        Ok(())
    }

    async fn pidbox_consumer(&self, queue: &str) -> Result<lapin::Consumer, Refused> {
        let (_, ch) = self.conn.channel().await?;
        let url = self.conn.url().clone();
        // The queue is named in full here; `declare_pidbox` adds the suffix.
        let node = queue.trim_end_matches(&format!(".{}", topology::PIDBOX));
        topology::declare_pidbox(&ch, &url, Some(node)).await?;
        listen::unacked(&ch, &url, queue, "cannot consume the pidbox").await
    }

    /// A pidbox message as kombu's envelope (its body and headers), heard
    /// as on every transport on Celery's wire (`node`).
    fn on_pidbox(&self, d: &lapin::message::Delivery) {
        let headers = d
            .properties
            .headers()
            .as_ref()
            .map(wire::table_json)
            .unwrap_or_default();
        let mut env = Map::new();
        env.insert(
            "body".into(),
            Value::String(String::from_utf8_lossy(&d.data).into()),
        );
        env.insert("headers".into(), Value::Object(headers));
        let Ok(raw) = serde_json::to_vec(&env) else {
            return;
        };
        self.hear_pidbox(&raw);
    }

    /// Sends `r` (already in this consumer's set, `node`): kept in the Redis
    /// store when there is one, and broadcast as Celery's `revoke` (with
    /// `terminate` and the signal when asked).
    pub(super) async fn broadcast_revoke(&self, r: Revoke) -> Result<(), Refused> {
        let Revoke {
            ids,
            until,
            terminate,
        } = r;
        if let Some(store) = self.store() {
            Broker::revoke(&*store, ids.clone(), until).await?;
        }
        let body = pidbox::revoke_body(&ids, terminate);
        let clock = self
            .facts
            .lamport
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let mut headers = FieldTable::default();
        headers.insert(
            "clock".into(),
            AMQPValue::LongLongInt(i64::try_from(clock).unwrap_or(i64::MAX)),
        );
        headers.insert("expires".into(), AMQPValue::LongInt(0));
        let props = BasicProperties::default()
            .with_content_type("application/json".into())
            .with_content_encoding("utf-8".into())
            .with_headers(headers);
        let live = self.conn.live().await?;
        let url = self.conn.url().clone();
        let fail = |what: &str, e: &lapin::Error| {
            self.conn.lost(live.epoch);
            super::conn::refused(&url, what, e)
        };
        topology::declare_pidbox(&live.publish, &url, None).await?;
        let confirm = live
            .publish
            .basic_publish(
                topology::PIDBOX.into(),
                "".into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                props,
            )
            .await
            .map_err(|e| fail("cannot broadcast a revoke", &e))?;
        confirm
            .await
            .map_err(|e| fail("lost before a revoke was confirmed", &e))?;
        Ok(())
    }

    /// Which of `ids` are revoked: this consumer's set, then the store's
    /// set in memory — no round trip on a run's path. Nothing is missed by
    /// not asking Redis: the store read every revoke kept there when it
    /// connected and hears headway's later ones on Redis's pidbox; this
    /// consumer hears Celery's and headway's on RabbitMQ's, whose queue
    /// keeps them while the listener reconnects; and after a reconnect
    /// (the queue may have expired meanwhile) the store's set is read
    /// again (`listen`).
    pub(super) async fn revoked_of(&self, ids: &[String]) -> Result<Vec<bool>, Refused> {
        let mut out = self.facts.revoked.of(ids, self.facts.clock.now());
        if out.iter().all(|&r| r) {
            return Ok(out);
        }
        if let Some(store) = self.store() {
            for (o, t) in out.iter_mut().zip(store.revoked_here(ids)) {
                *o |= t;
            }
        }
        Ok(out)
    }
}
