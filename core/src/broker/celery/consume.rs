//! Consuming on Celery's layout: the loop behind [`crate::task::Broker::consume`]
//! and what becomes of each envelope a claim took. A claim runs in a task
//! of its own (`claim.rs`), so a consumer dropped mid-claim loses nothing;
//! what it claimed is admitted here — decoded, handed back when another
//! consumer's task, held when its eta is ahead, set aside when unreadable.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::burial::Burial;
use super::{CeleryBroker, Held, Taken, dead, restore, unknown};
use crate::task::spec::{Delivery, Receipt};
use crate::task::state::Refused;

/// How long a stopped worker's give-back waits for its claims in flight:
/// a claim waits at most its poll (200 ms) plus the patience for Redis.
const STOP_WAIT: Duration = Duration::from_secs(12);

impl CeleryBroker {
    /// Up to `max` deliveries from `queues`, waiting up to `wait` (bounded
    /// by the next held eta) for the first. Each claim round runs in a task
    /// of its own and lands in the inbox, so dropping this future loses
    /// nothing.
    pub(super) async fn consume_from(
        &self,
        queues: &[String],
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, Refused> {
        if max == 0 || queues.is_empty() {
            return Ok(Vec::new());
        }
        for q in queues {
            self.remember_queue(q);
        }
        self.consumed.store(true, Ordering::Relaxed);
        let deadline = tokio::time::Instant::now() + wait;
        let mut first = true;
        loop {
            let out = self.take_ready(queues, max);
            if !out.is_empty() {
                return Ok(out);
            }
            let now = tokio::time::Instant::now();
            if !first && now >= deadline {
                return Ok(out);
            }
            first = false;
            let mut until = deadline.saturating_duration_since(now);
            if !self.facts.clock.is_virtual()
                && let Some(eta) = self.next_held(queues)
            {
                let ms = eta.saturating_sub(self.facts.clock.now()).max(0) as u64;
                until = until.min(Duration::from_millis(ms));
            }
            let me = self.me.upgrade().ok_or_else(|| {
                Refused::broker(crate::task::BrokerErrorKind::Closed, "the broker is closed")
            })?;
            let qs = queues.to_vec();
            me.fetching.fetch_add(1, Ordering::SeqCst);
            let task = tokio::spawn(async move {
                let r = me.fetch(&qs, max, until).await;
                me.fetching.fetch_sub(1, Ordering::SeqCst);
                me.fetched.notify_waiters();
                r
            });
            match task.await {
                Ok(r) => {
                    r?;
                }
                Err(e) => return Err(Refused::Broker(format!("a claim failed: {e}").into())),
            }
        }
    }

    /// Gives back what was claimed for `queues` and not taken (a stopped
    /// worker's last claim, in a task of its own, can land after the worker
    /// left: a BRPOP older than the next worker's is served first, and what
    /// it took sat in this broker's inbox, held in `unacked` until the
    /// visibility timeout). Waits for the claims in flight to land first
    /// (at most [`STOP_WAIT`]).
    pub(super) async fn give_back_unclaimed(&self, queues: &[String]) -> Result<usize, Refused> {
        let until = tokio::time::Instant::now() + STOP_WAIT;
        loop {
            let rung = self.fetched.notified();
            tokio::pin!(rung);
            rung.as_mut().enable();
            if self.fetching.load(Ordering::SeqCst) == 0 {
                break;
            }
            if tokio::time::timeout_at(until, rung).await.is_err() {
                break;
            }
        }
        let queues = self.model_queues(queues);
        let tags: Vec<String> = {
            let mut g = self.lock();
            let mut back = Vec::new();
            let inbox = std::mem::take(&mut g.inbox);
            for d in inbox {
                if queues.contains(&d.message.queue) {
                    back.push(d.receipt.tag);
                } else {
                    g.inbox.push_back(d);
                }
            }
            let held: Vec<(i64, u64)> = g
                .held
                .iter()
                .filter(|(_, d)| queues.contains(&d.message.queue))
                .map(|(k, _)| *k)
                .collect();
            for k in held {
                g.held.remove(&k);
                back.push(k.1);
            }
            back.into_iter()
                .filter_map(|local| g.out.remove(&local).map(|h| h.tag))
                .collect()
        };
        let mut n = 0;
        for t in tags {
            if self.restore_tag(&t, false, false).await? == super::restore::Restored::Back {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Turns claimed envelopes into deliveries (held when their eta is
    /// still ahead), quarantining what cannot be read ([`dead::decode`]).
    pub(super) async fn admit(&self, claimed: Vec<Taken>) -> Result<usize, Refused> {
        let now = self.facts.clock.now();
        let mut n = 0;
        let mut bad: Vec<(String, Burial)> = Vec::new();
        let mut foreign = Vec::new();
        for Taken {
            queue,
            step,
            tag,
            raw,
        } in claimed
        {
            let decoded = match dead::decode(&self.facts.sender, &raw, self.opts.max_message_bytes)
            {
                // Parsed by headway, not by Redis's cjson: it never reached
                // `unacked`, so it is nobody's to run.
                Ok(_) if tag.is_empty() => Err(crate::task::dead::Undecodable {
                    reason: "bad JSON: not readable by Redis's cjson".into(),
                    id: None,
                }),
                other => other,
            };
            match decoded {
                // Another consumer's task in a content type headway does not
                // read (a pickle): a Celery worker may accept it, so it goes
                // back. (Other faults would fail there too: quarantined.)
                Err(why)
                    if !tag.is_empty()
                        && why.reason.starts_with("content type not allowed")
                        && unknown::named_task(&raw)
                            .is_some_and(|(t, id)| self.is_foreign(&t, &id)) =>
                {
                    foreign.push(tag)
                }
                Err(why) => {
                    let element = dead::element(now, &why.reason, step, why.id.as_deref(), &raw);
                    bad.push((
                        queue,
                        Burial {
                            tag,
                            entry: Vec::new(),
                            element,
                            reason: why.reason,
                        },
                    ));
                }
                Ok(d) if self.is_foreign(&d.message.task, &d.message.id) => foreign.push(tag),
                Ok(d) => {
                    let local = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
                    let m = d.message;
                    let delivery = Delivery {
                        receipt: Receipt {
                            queue: m.queue.as_str().into(),
                            tag: local,
                            token: local,
                            raw: Some(Arc::from(tag.as_bytes())),
                        },
                        redelivered: d.redelivered,
                        message: std::sync::Arc::new(m),
                    };
                    n += 1;
                    super::events::received(self, &delivery.message);
                    let mut g = self.lock();
                    g.out.insert(
                        local,
                        Held {
                            tag: tag.clone(),
                            queue: delivery.message.queue.clone(),
                            id: delivery.message.id.clone(),
                        },
                    );
                    if delivery.message.chord.is_some() && delivery.message.chain.is_empty() {
                        g.note_part(&delivery.message.id, delivery.message.group_index);
                    }
                    match delivery.message.eta {
                        Some(eta) if eta > now => {
                            g.held.insert((eta, local), delivery);
                        }
                        _ => g.inbox.push_back(delivery),
                    }
                }
            }
        }
        while !bad.is_empty() {
            let q = bad[0].0.clone();
            let (mine, rest): (Vec<_>, Vec<_>) = bad.into_iter().partition(|(x, _)| *x == q);
            bad = rest;
            self.bury(
                &q,
                "quarantined",
                mine.into_iter().map(|(_, b)| b).collect(),
            )
            .await;
        }
        for t in &foreign {
            self.put_back(t, true, restore::Count::HandBack).await?;
        }
        if n == 0 && !foreign.is_empty() {
            // Only other consumers' work came: do not spin on it.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(n)
    }
}
