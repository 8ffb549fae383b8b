//! Claiming: the claim script moves ready messages into this consumer's
//! held list, each stamped with a fencing token; when nothing is ready the
//! consumer blocks in BLMOVE on a dedicated connection.
//!
//! Why a task of its own for BLMOVE: a consume cancelled mid-block must not
//! leave what the BLMOVE moved held by nobody; [`Moved`] hands it back.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard, Weak};
use std::task::Poll;
use std::time::Duration;

use crate::broker::link::Conn;
use ::redis::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::dead::dead_element;
use super::options::check_name;
use super::scripts::evalsha;
use super::wire::{bytes, int, unheld, unmark};
use super::{RedisBroker, log};
use crate::task::dead;
use crate::task::spec::{Claimed, Delivery, Receipt};
use crate::task::state::{BrokerErrorKind, Refused};

/// How long a worker of several queues blocks on its first before it looks
/// at the others again: BLMOVE watches one list.
pub(super) const SLICE: Duration = Duration::from_millis(100);

impl RedisBroker {
    /// The first claim from a queue in this process: register it, and hand
    /// back what this consumer name held in a previous life (a restart
    /// inside its lease), along with any dead consumer's claims.
    pub(super) async fn touch(&self, q: &str) -> Result<(), Refused> {
        if self.touched().contains(q) {
            return Ok(());
        }
        let mut p = ::redis::pipe();
        self.register(&mut p, &[q]);
        p.add_command(self.recover_cmd(q));
        let got = self.run(&p, false).await?;
        if let Some(n) = got.last().and_then(int)
            && n > 0
        {
            log(&format!(
                "queue {q:?}: recovered {n} message(s) held by consumers whose lease expired"
            ));
        }
        // What this consumer name held before a restart inside its lease:
        // nobody here holds it, so the sweep hands it back.
        self.sweep(q).await?;
        self.touched().insert(q.to_string());
        Ok(())
    }

    /// One claim script on `q`: claims, and ms until its next eta. With
    /// `check` the script also reads each claim's revoked mark.
    pub(super) async fn claim(
        &self,
        q: &str,
        max: usize,
        adopt: Option<Vec<u8>>,
        check: bool,
    ) -> Result<(Vec<Claimed>, Option<i64>), Refused> {
        // A revoked mark is in its id's slot, not the queue's.
        let check = check && !self.cluster;
        let mut c = evalsha(&self.scripts.claim, &self.base(q));
        c.arg(&self.consumer)
            .arg(max)
            .arg(self.lease.as_millis() as u64)
            .arg(self.now_arg())
            .arg(adopt.unwrap_or_default())
            .arg(self.max_bytes);
        if check {
            c.arg(self.revoked_key("")).arg(self.revokes_key());
        }
        let _gate = self.gate.read().await;
        let v = self.one(c, false).await?;
        let Value::Array(parts) = v else {
            return Err(Refused::broker(
                BrokerErrorKind::Script,
                "unexpected reply to a claim",
            ));
        };
        let els = match parts.first() {
            Some(Value::Array(e)) => e.as_slice(),
            _ => &[],
        };
        let eta = parts.get(1).and_then(int).unwrap_or(-1);
        let now = parts.get(2).and_then(int).unwrap_or(0);
        let flags = match parts.get(4) {
            Some(Value::Array(f)) => f.as_slice(),
            _ => &[],
        };
        if let Some(n) = parts.get(3).and_then(int)
            && n > 0
        {
            log(&format!(
                "queue {q:?}: {n} message(s) over the size cap of {} bytes moved to {} unread",
                self.max_bytes,
                self.key(q, "dead", "")
            ));
        }
        let mut out = Vec::with_capacity(els.len());
        let mut dead = Vec::new();
        for (i, el) in els.iter().enumerate() {
            let Some(el) = bytes(el) else { continue };
            let flag = flags.get(i).and_then(int).unwrap_or(3);
            match self.delivery(q, el) {
                Ok(delivery) => out.push(Claimed {
                    delivery,
                    revoked: match flag {
                        0 => Some(false),
                        1 => Some(true),
                        _ => None,
                    },
                }),
                Err((why, step, raw)) => {
                    let letter = dead_element(now, step, &why, raw);
                    dead.push((el.to_vec(), letter, why.reason));
                }
            }
        }
        if !out.is_empty() {
            let mut o = self.outs();
            let set = o.entry(q.to_string()).or_default();
            set.extend(out.iter().map(|c| c.delivery.receipt.token));
        }
        if !dead.is_empty() {
            self.bury(q, dead).await;
        }
        Ok((out, (eta >= 0).then(|| eta.saturating_sub(now).max(0))))
    }

    /// A claimed element as a delivery, or why it is quarantined (with its
    /// step and its bytes as they were published).
    pub(super) fn delivery<'e>(
        &self,
        q: &str,
        el: &'e [u8],
    ) -> Result<Delivery, (dead::Undecodable, u8, &'e [u8])> {
        let (token, step, payload) = unheld(el).unwrap_or((0, 0, el));
        let (redelivered, raw) = match unmark(payload) {
            Some(rest) => (true, rest),
            None => (false, payload),
        };
        let message = dead::decode(raw, self.max_bytes).map_err(|e| (e, step, raw))?;
        Ok(Delivery {
            message: Arc::new(message),
            receipt: Receipt {
                queue: q.into(),
                tag: token,
                token,
                raw: Some(Arc::from(el)),
            },
            redelivered,
        })
    }

    pub(super) fn take_blocker(&self) -> Option<Conn> {
        self.blockers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
    }

    /// Blocks in BLMOVE on `q`'s step 0 for up to `block`, on a dedicated
    /// connection, in a task of its own: if the caller goes away (a
    /// cancelled consume), what the BLMOVE moved is handed back rather than
    /// left held.
    pub(super) fn block(
        &self,
        q: &str,
        block: Duration,
    ) -> oneshot::Receiver<Result<Option<Moved>, Refused>> {
        let (tx, rx) = oneshot::channel();
        let Some(me) = self.me.upgrade() else {
            return rx;
        };
        let src = self.key(q, "ready:", "0");
        let dst = self.key(q, "held:", &self.consumer);
        let queue = q.to_string();
        self.rt.spawn(async move {
            let conn = match me.take_blocker() {
                Some(c) => Ok(c),
                None => me.link.dedicated(None).await,
            };
            let mut conn = match conn {
                Ok(c) => c,
                Err(e) => {
                    let _ = tx.send(Err(me.link.refused(&e)));
                    return;
                }
            };
            let secs = format!("{:.3}", block.as_secs_f64().max(0.001));
            let mut blmove = ::redis::cmd("BLMOVE");
            blmove
                .arg(&src)
                .arg(&dst)
                .arg("RIGHT")
                .arg("LEFT")
                .arg(secs);
            let call = blmove.query_async::<Option<Vec<u8>>>(&mut conn);
            match tokio::time::timeout(block + me.link.response_timeout(), call).await {
                Ok(Ok(el)) => {
                    me.blockers
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(conn);
                    let moved = el.map(|el| Moved {
                        broker: Arc::downgrade(&me),
                        queue,
                        el: Some(el),
                    });
                    // A dropped receiver drops `moved`, which hands it back.
                    let _ = tx.send(Ok(moved));
                }
                Ok(Err(e)) => {
                    let _ = tx.send(Err(me.link.refused(&e)));
                }
                // The reply may still come on this connection, so it is not
                // reused; an element it moved is swept back.
                Err(_) => {
                    let _ = tx.send(Ok(None));
                }
            }
        });
        rx
    }

    pub(super) fn outs(&self) -> MutexGuard<'_, HashMap<String, HashSet<u64>>> {
        self.out.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) async fn consume_inner(
        &self,
        queues: &[String],
        max: usize,
        wait: Duration,
        check: bool,
    ) -> Result<Vec<Claimed>, Refused> {
        if max == 0 {
            return Ok(Vec::new());
        }
        if self.closed.load(Ordering::SeqCst) {
            return Err(Refused::broker(
                BrokerErrorKind::Closed,
                "this broker was closed",
            ));
        }
        if queues.is_empty() {
            return Err(Refused::Invalid(
                "invalid `queues`: needs at least one".into(),
            ));
        }
        for q in queues {
            check_name("queue", q)?;
            self.touch(q).await?;
        }
        self.sweep_after_reconnect().await;
        let deadline = Instant::now() + wait;
        let virt = self.clock.is_virtual();
        let mut adopt: Option<Vec<u8>> = None;
        let mut on_way = OnTheWay {
            broker: self,
            flying: None,
            out: Vec::new(),
        };
        loop {
            let mut moved = self.clock.moved();
            // Register for a move now, so one during the claim is not missed.
            std::future::poll_fn(|cx| {
                let _ = moved.as_mut().poll(cx);
                Poll::Ready(())
            })
            .await;
            let mut next: Option<i64> = None;
            for (i, q) in queues.iter().enumerate() {
                if on_way.out.len() >= max {
                    break;
                }
                let a = if i == 0 { adopt.take() } else { None };
                on_way.flying = Some(q);
                let (got, eta) = self.claim(q, max - on_way.out.len(), a, check).await?;
                on_way.flying = None;
                on_way.out.extend(got);
                if let Some(e) = eta {
                    next = Some(next.map_or(e, |n: i64| n.min(e)));
                }
            }
            if !on_way.out.is_empty() {
                return Ok(std::mem::take(&mut on_way.out));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            let mut block = deadline - now;
            if !virt && let Some(ms) = next {
                block = block.min(Duration::from_millis(ms.max(1) as u64));
            }
            if queues.len() > 1 {
                block = block.min(SLICE);
            }
            if self.cluster {
                // Within the cluster client's reply timeout (10 s).
                block = block.min(Duration::from_secs(5));
            }
            let rx = self.block(&queues[0], block);
            let got = if virt {
                tokio::select! {
                    r = rx => r,
                    _ = moved => continue,
                }
            } else {
                rx.await
            };
            match got {
                Ok(Ok(Some(mut m))) => {
                    // Held unstamped until the next claim adopts it.
                    on_way.flying = Some(&queues[0]);
                    adopt = m.el.take();
                }
                Ok(Ok(None)) => {}
                Ok(Err(e)) => return Err(e),
                // Its task ended without answering: the broker is gone.
                Err(_) => {
                    return Err(Refused::broker(
                        BrokerErrorKind::Closed,
                        "the blocking claim was lost",
                    ));
                }
            }
        }
    }

    pub(super) async fn next_eta_inner(&self, queues: &[String]) -> Result<Option<i64>, Refused> {
        let mut p = ::redis::pipe();
        for q in queues {
            check_name("queue", q)?;
            p.cmd("ZRANGE")
                .arg(self.key(q, "delayed", ""))
                .arg(0)
                .arg(0)
                .arg("WITHSCORES");
        }
        let got = self.run(&p, false).await?;
        Ok(got
            .iter()
            .filter_map(|v| match v {
                Value::Array(a) => a.get(1).and_then(|s| match s {
                    Value::Double(d) => Some(*d as i64),
                    other => bytes(other)
                        .and_then(|b| std::str::from_utf8(b).ok()?.parse::<f64>().ok())
                        .map(|f| f as i64),
                }),
                _ => None,
            })
            .min())
    }
}

/// What a consume has moved into this consumer's held list and not yet
/// handed to its caller: the queue of a claim script on its way (or of a
/// BLMOVE's element waiting to be adopted by the next claim), and the
/// claims already read. A consume dropped there — a stopping worker's, cut
/// short mid-claim — would leave them held by nobody here until a restart;
/// on drop they are let go and their queues swept. The sweep's command
/// follows the claim's on the same connection, so it sees what the script
/// moved; it waits for claims in flight (the gate), so it hands back only
/// what nobody here holds.
struct OnTheWay<'a> {
    broker: &'a RedisBroker,
    flying: Option<&'a str>,
    out: Vec<Claimed>,
}

impl Drop for OnTheWay<'_> {
    fn drop(&mut self) {
        if self.flying.is_none() && self.out.is_empty() {
            return;
        }
        let mut queues: Vec<String> = self.flying.iter().map(|q| q.to_string()).collect();
        if !self.out.is_empty() {
            let mut o = self.broker.outs();
            for c in self.out.drain(..) {
                let r = &c.delivery.receipt;
                if let Some(set) = o.get_mut(&*r.queue) {
                    set.remove(&r.token);
                }
                if !queues.iter().any(|q| *q == *r.queue) {
                    queues.push(r.queue.to_string());
                }
            }
        }
        if let Some(b) = self.broker.me.upgrade() {
            b.rt.clone().spawn(async move {
                for q in &queues {
                    let _ = b.sweep(q).await;
                }
            });
        }
    }
}

/// What a BLMOVE moved into the held list, unstamped. Dropped without being
/// taken, it is handed back to its queue.
pub(super) struct Moved {
    pub(super) broker: Weak<RedisBroker>,
    pub(super) queue: String,
    pub(super) el: Option<Vec<u8>>,
}

impl Drop for Moved {
    fn drop(&mut self) {
        if self.el.take().is_some()
            && let Some(b) = self.broker.upgrade()
        {
            let q = std::mem::take(&mut self.queue);
            b.rt.clone().spawn(async move {
                let _ = b.sweep(&q).await;
            });
        }
    }
}
