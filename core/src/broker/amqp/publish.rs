//! A message's way out of a producer: declared, published, confirmed.
//!
//! As a Celery producer does, the first publish to a queue on a connection
//! declares it (its exchange, the queue and the binding), so a message sent
//! before any worker started is kept rather than dropped by RabbitMQ as
//! unroutable. Every publish is persistent and confirmed: `publish`
//! returns once RabbitMQ has taken responsibility for each message, and a
//! nack or a lost connection is an error, never a silent drop. A publish
//! that fails on a connection lost in between is tried once more on a new
//! one (the first may have landed: at least once, as everywhere).

use lapin::options::BasicPublishOptions;

use super::{AmqpBroker, topology, wire};
use crate::task::BrokerErrorKind;
use crate::task::message::Message;
use crate::task::state::Refused;

/// The largest message published: RabbitMQ's own default cap is 128 MiB;
/// headway's other layouts refuse far less, and so does this one.
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

impl AmqpBroker {
    /// Publishes `messages`, chord callbacks with their parts' results,
    /// waiting for the broker's confirm of each.
    pub(super) async fn publish_all(&self, messages: Vec<Message>) -> Result<(), Refused> {
        if messages.is_empty() {
            return Ok(());
        }
        let mut ready = Vec::with_capacity(messages.len());
        let mut sent = Vec::new();
        for m in messages {
            let m = if m.join.is_some() {
                match self.store() {
                    Some(s) => match s.materialize(m).await? {
                        Some(m) => m,
                        None => continue,
                    },
                    None => {
                        return Err(Refused::Invalid(
                            "a chord on amqp:// needs a result store: pass backend=\"redis://...\""
                                .into(),
                        ));
                    }
                }
            } else {
                m
            };
            let to = self
                .reply_to_of(&m.id)
                .unwrap_or_else(|| self.facts.sender.reply_to.clone());
            let out = wire::encode(&self.facts.sender, &m, self.facts.clock.now(), &to)?;
            if out.body.len() > MAX_MESSAGE_BYTES {
                return Err(Refused::Invalid(format!(
                    "invalid `message` {:?}: {} bytes, over the {} byte cap",
                    crate::task::spec::truncate(m.id.clone(), 64),
                    out.body.len(),
                    MAX_MESSAGE_BYTES
                )));
            }
            ready.push(out);
            if self.opts.task_send_sent_event {
                sent.push(m);
            }
        }
        match self.publish_once(&ready, &mut sent).await {
            Err(e) if e.broker_kind() == Some(BrokerErrorKind::Connection) => {
                self.publish_once(&ready, &mut sent).await
            }
            r => r,
        }
    }

    /// Publishes `ready` and waits for the confirms. The `task-sent`
    /// events of `sent` go out once every message is written, before the
    /// confirms (as Celery sends them once its publish returns), and only
    /// once across a retry.
    async fn publish_once(
        &self,
        ready: &[wire::Outgoing],
        sent: &mut Vec<Message>,
    ) -> Result<(), Refused> {
        let live = self.conn.live().await?;
        let url = self.conn.url().clone();
        let lost = |what: &str, e: &lapin::Error| {
            self.conn.lost(live.epoch);
            super::conn::refused(&url, what, e)
        };
        for o in ready {
            self.declare(&live, &o.queue).await?;
        }
        let mut confirms = Vec::with_capacity(ready.len());
        for o in ready {
            let c = live
                .publish
                .basic_publish(
                    "".into(),
                    o.queue.as_str().into(),
                    BasicPublishOptions::default(),
                    &o.body,
                    o.props.clone(),
                )
                .await
                .map_err(|e| lost("cannot publish", &e))?;
            confirms.push(c);
        }
        for m in sent.drain(..) {
            crate::broker::celery::events::sent(self, &m);
        }
        for c in confirms {
            let got = tokio::time::timeout(self.opts.confirm_timeout, c)
                .await
                .map_err(|_| {
                    self.conn.lost(live.epoch);
                    Refused::broker(
                        BrokerErrorKind::Connection,
                        format!(
                            "{url}: no publisher confirm within {} s",
                            self.opts.confirm_timeout.as_secs()
                        ),
                    )
                })?
                .map_err(|e| lost("lost before the publish was confirmed", &e))?;
            if got.is_nack() {
                return Err(Refused::broker(
                    BrokerErrorKind::Server,
                    format!("{url}: the broker refused (nacked) a publish"),
                ));
            }
        }
        Ok(())
    }

    /// Publishes `raw` as a message body on `queue` (headway's name) as
    /// another producer might, unchecked and without headers: it is read
    /// when claimed, and dropped if it is not a message headway runs. For
    /// tests and tools; an app publishes with [`crate::task::Broker::publish`].
    pub async fn push_raw(&self, queue: &str, raw: &[u8]) -> Result<(), Refused> {
        let wire_name = self.facts.sender.wire_queue(queue).to_string();
        wire::short(&wire_name, "queue")?;
        let out = wire::Outgoing {
            queue: wire_name,
            body: raw.to_vec(),
            props: lapin::BasicProperties::default()
                .with_content_type("application/json".into())
                .with_delivery_mode(2),
        };
        self.publish_once(std::slice::from_ref(&out), &mut Vec::new())
            .await
    }

    /// Declares `queue` once per connection, as kombu's `maybe_declare`.
    async fn declare(&self, live: &super::conn::Live, queue: &str) -> Result<(), Refused> {
        {
            let d = self.declared.lock().unwrap_or_else(|e| e.into_inner());
            if d.0 == live.epoch && d.1.contains(queue) {
                return Ok(());
            }
        }
        let r = topology::declare_queue(
            &live.publish,
            self.conn.url(),
            queue,
            self.opts.max_priority,
        )
        .await;
        if r.is_err() {
            // A refused declaration closes the channel: dial afresh.
            self.conn.lost(live.epoch);
        }
        r?;
        self.remember_queue(queue);
        let mut d = self.declared.lock().unwrap_or_else(|e| e.into_inner());
        if d.0 != live.epoch {
            *d = (live.epoch, Default::default());
        }
        d.1.insert(queue.to_string());
        Ok(())
    }
}
