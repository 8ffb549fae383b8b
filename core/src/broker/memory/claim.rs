//! Claiming, settling and recovering: what moves a message between a
//! queue's steps and a consumer's claims.
//!
//! Why together: a claim, its settle and its recovery are one life cycle,
//! fenced by the claim's tag, and each keeps the per-queue held count that
//! the inspector reports.

use std::sync::Arc;

use super::MemoryBroker;
use super::state::{Entry, Held, Inner, Payload};
use crate::task::dead::{self, DeadLetter};
use crate::task::spec::{Delivery, Receipt};

impl MemoryBroker {
    /// Claims up to `max`; also answers whether anything was quarantined.
    pub(super) fn claim(&self, queues: &[String], max: usize) -> (Vec<Delivery>, bool) {
        let now = self.now();
        let cap = self.shared.opts.max_message_bytes;
        let mut g = self.lock();
        let me = match g.consumers.get(&*self.consumer) {
            Some(c) => c.clone(),
            None => {
                g.consumers.insert(self.consumer.clone());
                self.consumer.clone()
            }
        };
        let mut out = Vec::new();
        let mut buried = false;
        for name in queues {
            // A claim renews this queue's lease, as Redis's claim script does.
            let pair = (me.clone(), name.clone());
            g.expired.remove(&pair);
            g.leased.insert(pair);
            g.promote(name, now);
            // Bytes that did not decode count towards `max`, as on Redis,
            // where the claim script takes them before they are read. Too
            // large ones are dead-lettered first, the others after the pass
            // (Redis: by the claim script, then by the client).
            let mut taken = 0;
            // One name for the batch's claims and receipts.
            let shared: Arc<str> = name.as_str().into();
            let mut undecoded = Vec::new();
            let mut early = Vec::new();
            while out.len() + taken < max {
                let Some(q) = g.queues.get_mut(name) else {
                    break;
                };
                let Some((s, e)) = q
                    .steps
                    .iter_mut()
                    .enumerate()
                    .find_map(|(s, l)| l.pop_front().map(|e| (s, e)))
                else {
                    break;
                };
                let (m, raw) = match e.payload {
                    Payload::Msg(m) => (m, e.raw),
                    Payload::Raw(raw) => match dead::decode(&raw, cap) {
                        // Put on the queue by another producer before its
                        // eta: it waits for it, as a published one does.
                        Ok(m) if m.eta.is_some_and(|eta| eta > now) => {
                            early.push(m);
                            continue;
                        }
                        Ok(m) => (Arc::new(m), Some(raw)),
                        Err(why) => {
                            taken += 1;
                            buried = true;
                            let letter = DeadLetter {
                                queue: name.clone(),
                                id: why.id,
                                reason: why.reason,
                                at: now,
                                // A prefix and the size, never the whole.
                                raw: dead::kept_prefix(&raw).to_vec(),
                                size: raw.len(),
                            };
                            if raw.len() > cap {
                                q.bury(letter, s);
                            } else {
                                undecoded.push((letter, s));
                            }
                            continue;
                        }
                    },
                };
                q.unacked += 1;
                g.seq += 1;
                let tag = g.seq;
                g.unacked.insert(
                    tag,
                    Box::new(Held {
                        consumer: me.clone(),
                        queue: shared.clone(),
                        step: s,
                        message: m.clone(),
                        raw,
                        lost: e.lost,
                    }),
                );
                out.push(Delivery {
                    receipt: Receipt {
                        queue: shared.clone(),
                        tag,
                        token: tag,
                        raw: None,
                    },
                    redelivered: e.redelivered,
                    message: m,
                });
            }
            if let Some(q) = g.queues.get_mut(name) {
                for (letter, s) in undecoded {
                    q.bury(letter, s);
                }
            }
            for m in early {
                g.seq += 1;
                let key = (m.eta.unwrap_or(now), g.seq);
                g.queue(name).delayed.insert(key, Arc::new(m));
            }
            if out.len() >= max {
                break;
            }
        }
        (out, buried)
    }

    /// Removes the claim `r` if this consumer holds it.
    pub(super) fn settle(&self, g: &mut Inner, r: &Receipt) -> Option<Held> {
        match g.unacked.get(&r.tag) {
            Some(h) if h.consumer == self.consumer && *h.queue == *r.queue => {}
            _ => return None,
        }
        let h = g.unacked.remove(&r.tag)?;
        if let Some(q) = g.queues.get_mut(&*h.queue) {
            q.unacked = q.unacked.saturating_sub(1);
        }
        Some(*h)
    }

    pub(super) fn recover_now(&self) -> usize {
        let now = self.now();
        let max = self.shared.opts.max_deliveries.max(1);
        let mut g = self.lock();
        if g.expired.is_empty() {
            return 0;
        }
        // Lost (consumer, queue) leases, by consumer name within a queue,
        // each one's claims newest first, each put at the head: the oldest
        // claim ends up first — the order Redis's recover script gives, so
        // both brokers answer the same.
        // Never this handle's own: a live consumer does not recover what it
        // holds itself (as on Redis); another handle's recover takes them.
        type Lapsed = Vec<(Arc<str>, String)>;
        let (mine, lost): (Lapsed, Lapsed) = std::mem::take(&mut g.expired)
            .into_iter()
            .partition(|(c, _)| *c == self.consumer);
        g.expired.extend(mine);
        let mut n = 0;
        for pair in lost {
            g.leased.remove(&pair);
            let (c, queue) = pair;
            let tags: Vec<u64> = g
                .unacked
                .iter()
                .rev()
                .filter(|(_, h)| h.consumer == c && *h.queue == *queue)
                .map(|(t, _)| *t)
                .collect();
            for t in tags {
                let h = g.unacked.remove(&t).expect("just listed");
                let lost = h.lost + 1;
                let q = g.queue(&h.queue);
                q.unacked = q.unacked.saturating_sub(1);
                if lost >= max {
                    q.bury(
                        DeadLetter {
                            queue: h.queue.to_string(),
                            id: Some(h.message.id.clone()),
                            reason: dead::lost_reason(lost),
                            at: now,
                            raw: h.raw.map_or_else(|| h.message.to_json(), |r| r.to_vec()),
                            size: 0,
                        }
                        .sized(),
                        h.step,
                    );
                } else {
                    q.steps[h.step].push_front(Entry {
                        payload: Payload::Msg(h.message),
                        raw: h.raw,
                        lost,
                        redelivered: true,
                    });
                    n += 1;
                }
            }
        }
        drop(g);
        if n > 0 {
            self.shared.published.notify_waiters();
        }
        n
    }
}
