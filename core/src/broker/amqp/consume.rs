//! A message's way in: consumers, the prefetch, and etas held until due.
//!
//! Each set of queues a worker consumes gets a channel of its own with
//! `basic.qos` (global: one limit over the channel's consumers, as Celery
//! sets it on RabbitMQ) at the worker's prefetch, and one consumer per
//! queue. A task per consumer moves deliveries into the set's inbox; a
//! claim takes from the inbox without a round trip, so a claim dropped
//! half-way (a stopping worker) loses nothing.
//!
//! A message whose eta is in the future is held here, unacked, until due,
//! and the channel's prefetch is raised by one for each held message (up
//! to [`MAX_HELD_ETAS`]), as a Celery worker does: otherwise a prefetch's
//! worth of far etas would stop the worker from receiving anything else.
//! A message a Celery worker could not read either is rejected without
//! requeue (dead-lettered where the queue has a dead-letter exchange,
//! dropped otherwise) and logged, as Celery's worker drops it.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use lapin::options::{
    BasicCancelOptions, BasicConsumeOptions, BasicQosOptions, BasicRejectOptions,
};
use lapin::types::FieldTable;
use tokio::sync::Notify;

use super::super::celery::MAX_HELD_ETAS;
use super::{AmqpBroker, Group, next_seq, note_reply, serial, topology, wire};
use crate::task::spec::{Delivery, Receipt};
use crate::task::state::Refused;

fn key_of(wire: &[String]) -> String {
    wire.join("\n")
}

impl AmqpBroker {
    fn wire_names(&self, queues: &[String]) -> Vec<String> {
        queues
            .iter()
            .map(|q| self.facts.sender.wire_queue(q).to_string())
            .collect()
    }

    pub(super) async fn consume_from(
        &self,
        queues: &[String],
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, Refused> {
        if queues.is_empty() || max == 0 {
            return Ok(Vec::new());
        }
        let wire = self.wire_names(queues);
        let key = key_of(&wire);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let bell = self.ensure_group(&key, &wire, max).await?;
            let rung = bell.notified();
            tokio::pin!(rung);
            rung.as_mut().enable();
            let (out, next) = self.take(&key, max);
            if !out.is_empty() {
                return Ok(out);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            // Wake for a delivery, the next held eta, or the deadline.
            let mut until = deadline;
            if let Some(eta) = next {
                let left = eta.saturating_sub(self.facts.clock.now()).max(0) as u64;
                until = until.min(now + Duration::from_millis(left));
            }
            tokio::select! {
                _ = &mut rung => {}
                _ = tokio::time::sleep_until(until) => {}
            }
        }
    }

    /// The bell of the live consumers of `wire`, made first when there are
    /// none (or their channel died).
    async fn ensure_group(
        &self,
        key: &str,
        wire: &[String],
        prefetch: usize,
    ) -> Result<Arc<Notify>, Refused> {
        let prefetch = {
            let mut g = self.lock();
            let p = g.prefetch.entry(key.to_string()).or_default();
            *p = (*p).max(prefetch);
            *p
        };
        if let Some(b) = self.live_group(key) {
            return Ok(b);
        }
        let me = self.me.upgrade().ok_or_else(|| {
            Refused::broker(
                crate::task::BrokerErrorKind::Closed,
                "the broker was dropped",
            )
        })?;
        let (key, wire) = (key.to_string(), wire.to_vec());
        // In a task of its own: a claim dropped half-way must not leave
        // consumers made and never recorded.
        tokio::spawn(async move { me.make_group(key, wire, prefetch).await })
            .await
            .map_err(|e| Refused::Invalid(format!("making consumers failed: {e}")))?
    }

    fn live_group(&self, key: &str) -> Option<Arc<Notify>> {
        let g = self.lock();
        g.groups
            .get(key)
            .filter(|gr| gr.channel.status().connected())
            .map(|gr| gr.bell.clone())
    }

    async fn make_group(
        self: Arc<Self>,
        key: String,
        wire: Vec<String>,
        prefetch: usize,
    ) -> Result<Arc<Notify>, Refused> {
        let _making = self.making.lock().await;
        if let Some(b) = self.live_group(&key) {
            return Ok(b);
        }
        // A dead group's unclaimed deliveries died with its channel:
        // RabbitMQ requeued them.
        {
            let mut g = self.lock();
            if let Some(old) = g.groups.remove(&key) {
                g.channels.remove(&old.serial);
                g.unacked.remove(&old.serial);
            }
        }
        let url = self.conn.url().clone();
        let (epoch, ch) = self.conn.channel().await?;
        let fail = |e: Refused| {
            self.conn.lost(epoch);
            e
        };
        let prefetch = u16::try_from(prefetch.max(1)).unwrap_or(u16::MAX);
        ch.basic_qos(prefetch, BasicQosOptions { global: true })
            .await
            .map_err(|e| fail(super::conn::refused(&url, "basic.qos", &e)))?;
        for q in &wire {
            topology::declare_queue(&ch, &url, q, self.opts.max_priority).await?;
            self.remember_queue(q);
        }
        let serial = serial(&self);
        let bell = Arc::new(Notify::new());
        let mut consumers = Vec::with_capacity(wire.len());
        let mut tags = Vec::with_capacity(wire.len());
        for q in &wire {
            let tag = format!("{}.{}.{serial}.{q}", self.facts.node, std::process::id());
            let tag = lapin::types::ShortString::try_new(tag)
                .unwrap_or_else(|_| format!("headway.{serial}").into());
            let c = ch
                .basic_consume(
                    q.as_str().into(),
                    tag,
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await
                .map_err(|e| {
                    fail(super::conn::refused(
                        &url,
                        &format!("cannot consume {q:?}"),
                        &e,
                    ))
                })?;
            tags.push(c.tag());
            consumers.push((q.clone(), c));
        }
        {
            let mut g = self.lock();
            g.channels.insert(serial, ch.clone());
            g.groups.insert(
                key.clone(),
                Group {
                    serial,
                    channel: ch,
                    prefetch,
                    inbox: Default::default(),
                    held: Default::default(),
                    qos: prefetch,
                    bell: bell.clone(),
                    tags,
                },
            );
        }
        for (q, c) in consumers {
            tokio::spawn(pump(Arc::downgrade(&self), key.clone(), serial, q, c));
        }
        Ok(bell)
    }

    /// Deliveries arrived on group `key`'s channel `serial` from `queue`,
    /// as many as were ready at once: two turns of the lock for the batch
    /// and one ring of the bell, not four turns and a ring a message.
    fn received(&self, key: &str, serial: u64, queue: &str, ds: Vec<lapin::message::Delivery>) {
        // Counted unacked before anything else, so no ack with `multiple`
        // on the channel covers one still on its way to the inbox.
        {
            let mut g = self.lock();
            let set = g.unacked.entry(serial).or_default();
            for d in &ds {
                set.insert(d.delivery_tag, d.redelivered);
            }
        }
        let mut ready = Vec::with_capacity(ds.len());
        for d in ds {
            let m = match wire::decode(&self.facts.sender, queue, &d.properties, &d.data) {
                Ok(m) => m,
                Err(e) => {
                    self.log(&format!(
                        "dropping a message on {queue:?} that cannot be read: {e}"
                    ));
                    let ch = self.unacked_channel(serial, &[d.delivery_tag]);
                    if let Some(ch) = ch {
                        let tag = d.delivery_tag;
                        tokio::spawn(async move {
                            let _ = ch
                                .basic_reject(tag, BasicRejectOptions { requeue: false })
                                .await;
                        });
                    }
                    continue;
                }
            };
            let reply = d
                .properties
                .reply_to()
                .as_ref()
                .filter(|t| !t.as_str().is_empty())
                .map(|t| t.as_str().to_string());
            let delivery = Delivery {
                receipt: Receipt {
                    queue: m.message.queue.as_str().into(),
                    tag: d.delivery_tag,
                    token: serial,
                    raw: None,
                },
                redelivered: d.redelivered || m.redelivered,
                message: std::sync::Arc::new(m.message),
            };
            crate::broker::celery::events::received(self, &delivery.message);
            ready.push((delivery, reply));
        }
        if ready.is_empty() {
            return;
        }
        let now = self.facts.clock.now();
        let mut raise = None;
        let mut gone = Vec::new();
        let bell = {
            let mut g = self.lock();
            for (delivery, reply) in ready {
                if let Some(to) = reply {
                    note_reply(&mut g, &delivery.message.id, to);
                }
                let seq = next_seq(&mut g);
                // Delivered before by Celery's own mark: its ack is not
                // delayed either (`settle`).
                if delivery.redelivered
                    && let Some(again) = g
                        .unacked
                        .get_mut(&serial)
                        .and_then(|s| s.get_mut(&delivery.receipt.tag))
                {
                    *again = true;
                }
                let Some(gr) = g.groups.get_mut(key).filter(|gr| gr.serial == serial) else {
                    // Its consumers were released (a stopped worker) and
                    // this was on its way meanwhile: back to the queue.
                    gone.push(delivery.receipt.tag);
                    continue;
                };
                match delivery.message.eta {
                    Some(eta) if eta > now => {
                        gr.held.insert((eta, seq), delivery);
                        raise = qos_for(gr).or(raise);
                    }
                    _ => gr.inbox.push_back(delivery),
                }
            }
            g.groups
                .get(key)
                .filter(|gr| gr.serial == serial)
                .map(|gr| gr.bell.clone())
        };
        if !gone.is_empty()
            && let Some(ch) = self.unacked_channel(serial, &gone)
        {
            tokio::spawn(async move {
                for tag in gone {
                    let _ = ch
                        .basic_reject(tag, BasicRejectOptions { requeue: true })
                        .await;
                }
            });
        }
        if let Some((ch, n)) = raise {
            tokio::spawn(async move {
                let _ = ch.basic_qos(n, BasicQosOptions { global: true }).await;
            });
        }
        if let Some(bell) = bell {
            bell.notify_waiters();
        }
    }

    /// The worker's prefetch for `queues` is now `prefetch` (its reach):
    /// the channel's `basic.qos` follows it, up or down, so RabbitMQ sends
    /// ahead about as much as the worker would claim ahead on Redis. With
    /// the window kept at the first claim's (the floor, 16 at the
    /// defaults) the inbox ran dry between an ack and RabbitMQ's refill: a
    /// no-op drain at the defaults ran 10.1-11.3k/s so, and 11.6-12.5k/s
    /// with the window following the reach (three pairs back to back;
    /// RabbitMQ's CPU per message 63-74 µs against 57-60).
    pub(super) fn set_prefetch(&self, queues: &[String], prefetch: usize) {
        let key = key_of(&self.wire_names(queues));
        let want = u16::try_from(prefetch.max(1)).unwrap_or(u16::MAX);
        let raise = {
            let mut g = self.lock();
            g.prefetch.insert(key.clone(), prefetch.max(1));
            match g.groups.get_mut(&key) {
                Some(gr) if gr.prefetch != want => {
                    gr.prefetch = want;
                    qos_for(gr)
                }
                _ => None,
            }
        };
        if let Some((ch, n)) = raise {
            tokio::spawn(async move {
                let _ = ch.basic_qos(n, BasicQosOptions { global: true }).await;
            });
        }
    }

    /// Up to `max` due deliveries of group `key`, and the next held eta.
    fn take(&self, key: &str, max: usize) -> (Vec<Delivery>, Option<i64>) {
        let now = self.facts.clock.now();
        let mut out = Vec::new();
        let mut lower = None;
        let mut g = self.lock();
        let Some(gr) = g.groups.get_mut(key) else {
            return (out, None);
        };
        while out.len() < max {
            match gr.held.first_key_value() {
                Some((&(eta, _), _)) if eta <= now => {
                    let (_, d) = gr.held.pop_first().expect("a first entry");
                    out.push(d);
                    lower = qos_for(gr);
                }
                _ => break,
            }
        }
        while out.len() < max {
            match gr.inbox.pop_front() {
                Some(d) => out.push(d),
                None => break,
            }
        }
        let next = gr.held.first_key_value().map(|(&(eta, _), _)| eta);
        let serial = gr.serial;
        if !out.is_empty() {
            *g.outstanding.entry(serial).or_default() += out.len();
        }
        drop(g);
        if let Some((ch, n)) = lower {
            tokio::spawn(async move {
                let _ = ch.basic_qos(n, BasicQosOptions { global: true }).await;
            });
        }
        (out, next)
    }

    /// The earliest eta held for `queues`.
    pub(super) fn next_held(&self, queues: &[String]) -> Option<i64> {
        let key = key_of(&self.wire_names(queues));
        let g = self.lock();
        g.groups
            .get(&key)
            .and_then(|gr| gr.held.first_key_value().map(|(&(eta, _), _)| eta))
    }

    /// The consumers of `queues` stopped: cancel them and give back what
    /// they hold that no worker took.
    pub(super) async fn release(&self, queues: &[String]) -> Result<usize, Refused> {
        let key = key_of(&self.wire_names(queues));
        let gr = {
            let mut g = self.lock();
            g.prefetch.remove(&key);
            g.groups.remove(&key)
        };
        Ok(match gr {
            Some(gr) => self.give_back(gr).await,
            None => 0,
        })
    }

    pub(super) async fn release_all(&self) -> usize {
        let all: Vec<Group> = {
            let mut g = self.lock();
            g.groups.drain().map(|(_, v)| v).collect()
        };
        let mut n = 0;
        for gr in all {
            n += self.give_back(gr).await;
        }
        n
    }

    /// Cancels a group's consumers and requeues its unclaimed deliveries;
    /// the channel stays open for the settles of runs still in progress,
    /// and closes after the last ([`AmqpBroker::settled`]).
    async fn give_back(&self, mut gr: Group) -> usize {
        self.lock().released.insert(gr.serial);
        // Acks gathered for its taken runs go first: its channel may close
        // once they are out.
        self.flush_acks().await;
        let ch = gr.channel.clone();
        for tag in std::mem::take(&mut gr.tags) {
            let _ = ch.basic_cancel(tag, BasicCancelOptions::default()).await;
        }
        let mut n = 0;
        let mut back: Vec<Delivery> = gr.inbox.drain(..).collect();
        back.extend(std::mem::take(&mut gr.held).into_values());
        let tags: Vec<u64> = back.iter().map(|d| d.receipt.tag).collect();
        self.unacked_channel(gr.serial, &tags);
        for d in back {
            if ch
                .basic_reject(d.receipt.tag, BasicRejectOptions { requeue: true })
                .await
                .is_ok()
            {
                n += 1;
            }
        }
        self.settled(gr.serial, 0);
        n
    }

    /// `n` deliveries of channel `serial` were settled: a released group's
    /// channel with nothing left to settle is closed.
    pub(super) fn settled(&self, serial: u64, n: usize) {
        let close = {
            let mut g = self.lock();
            let left = g.outstanding.entry(serial).or_default();
            *left = left.saturating_sub(n);
            if *left == 0 && g.released.contains(&serial) {
                g.outstanding.remove(&serial);
                g.released.remove(&serial);
                g.unacked.remove(&serial);
                g.channels.remove(&serial)
            } else {
                None
            }
        };
        if let Some(ch) = close {
            tokio::spawn(async move {
                let _ = ch.close(200, "released".into()).await;
            });
        }
    }
}

/// The prefetch `gr` should have now, with the channel to set it on, when
/// it changed: the worker's, plus one per held eta.
fn qos_for(gr: &mut Group) -> Option<(lapin::Channel, u16)> {
    let held = gr.held.len().min(MAX_HELD_ETAS);
    let want = (gr.prefetch as usize + held).min(u16::MAX as usize) as u16;
    if want == gr.qos {
        return None;
    }
    gr.qos = want;
    Some((gr.channel.clone(), want))
}

/// How many deliveries the pump moves at once at most.
const PUMP_BATCH: usize = 256;

/// Moves one consumer's deliveries into its group until the consumer or
/// the broker is gone: every delivery ready when it wakes, in one batch.
async fn pump(
    me: std::sync::Weak<AmqpBroker>,
    key: String,
    serial: u64,
    queue: String,
    mut consumer: lapin::Consumer,
) {
    loop {
        // Ready at once, no timer armed; else wait, looking every second
        // whether the channel was closed under it.
        let next = match consumer.next().now_or_never() {
            Some(n) => Ok(n),
            None => tokio::time::timeout(Duration::from_secs(1), consumer.next()).await,
        };
        let Some(b) = me.upgrade() else {
            return;
        };
        let end = match next {
            Err(_) => {
                let alive = b.lock().channels.contains_key(&serial);
                if !alive {
                    return;
                }
                continue;
            }
            Ok(Some(Ok(d))) => {
                let mut batch = vec![d];
                let mut end = false;
                while batch.len() < PUMP_BATCH {
                    match consumer.next().now_or_never() {
                        Some(Some(Ok(d))) => batch.push(d),
                        Some(_) => {
                            end = true;
                            break;
                        }
                        None => break,
                    }
                }
                b.received(&key, serial, &queue, batch);
                end
            }
            Ok(None) | Ok(Some(Err(_))) => true,
        };
        if end {
            // A group released on purpose keeps its channel for the
            // settles of runs still in progress; a lost one is gone.
            let bell = {
                let mut g = b.lock();
                match g.groups.get(&key) {
                    Some(gr) if gr.serial == serial => {
                        let bell = gr.bell.clone();
                        g.groups.remove(&key);
                        g.channels.remove(&serial);
                        g.unacked.remove(&serial);
                        Some(bell)
                    }
                    _ => None,
                }
            };
            if let Some(bell) = bell {
                b.log(&format!(
                    "the consumer of {queue:?} was lost; consuming again at the next claim"
                ));
                bell.notify_waiters();
            }
            return;
        }
    }
}
