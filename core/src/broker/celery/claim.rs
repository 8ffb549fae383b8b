//! Claiming on Celery's layout: one Lua step pops envelopes off the step
//! lists and holds them in kombu's `unacked` pair, so a message is at every
//! instant on its queue or in `unacked` (kombu pops and holds in two round
//! trips). Every hold is under a tag made here — a nonce per call and a
//! counter — because an envelope's own `delivery_tag` may be missing (some
//! producers send none) or shared by two envelopes, and one `unacked` entry
//! per message is what lets each be acked and restored on its own. The
//! entry keeps the envelope's bytes, so a restore (headway's or a Celery
//! worker's) pushes back what was sent.

use std::time::Duration;

use super::burial::Burial;
use super::settle::Owed;
use super::{CeleryBroker, Taken, dead};
use crate::task::dead::{DEAD_KEPT, DEAD_PREFIX_BYTES};
use crate::task::message::new_id;
use crate::task::state::{BrokerErrorKind, Refused};

/// One list a claim polls.
pub(super) struct Polled {
    key: String,
    /// The Celery queue name (the routing key a hold records).
    rk: String,
    queue: String,
    step: u8,
}

impl CeleryBroker {
    /// One claim round, run in a task of its own: a non-blocking claim, and
    /// when that found nothing, one BRPOP of up to `wait` and a claim of the
    /// rest. Everything claimed lands in the inbox or the held etas.
    pub(super) async fn fetch(
        &self,
        queues: &[String],
        max: usize,
        wait: Duration,
    ) -> Result<usize, Refused> {
        let max = self.claim_room(max);
        if max == 0 {
            // The held etas fill the cap: nothing is claimed until one comes
            // due (`consume` bounds `wait` by the next eta).
            tokio::time::sleep(wait).await;
            return Ok(0);
        }
        let mut n = self.claim(queues, max).await?;
        if n == 0 && !wait.is_zero() {
            n = self.block(queues, wait).await?;
            if n > 0 && n < max {
                n += self.claim(queues, max - n).await?;
            }
        }
        Ok(n)
    }

    /// The lists `queues` are polled in: `for step in steps: for q in
    /// queues` (kombu's order).
    pub(super) fn poll_keys(&self, queues: &[String]) -> Vec<Polled> {
        let mut out = Vec::new();
        for &step in &self.opts.priority_steps {
            for q in queues {
                out.push(Polled {
                    key: self.queue_key(q, step),
                    rk: self.facts.sender.wire_queue(q).to_string(),
                    queue: q.clone(),
                    step,
                });
            }
        }
        out
    }

    async fn claim(&self, queues: &[String], max: usize) -> Result<usize, Refused> {
        let polled = self.poll_keys(queues);
        let mut inv = self.scripts.claim.prepare_invoke();
        inv.key(&self.keys.unacked).key(&self.keys.index);
        for p in &polled {
            inv.key(&p.key);
        }
        for p in &polled {
            inv.key(self.dead_key(&p.queue));
        }
        inv.arg(max)
            .arg(self.index_score())
            .arg(self.facts.clock.now())
            .arg(self.opts.max_message_bytes)
            .arg(DEAD_KEPT)
            .arg(polled.len());
        for p in &polled {
            inv.arg(&p.rk);
        }
        for p in &polled {
            inv.arg(p.step);
        }
        inv.arg(new_id()).arg(DEAD_PREFIX_BYTES);
        let (epoch, mut c) = self.link.conn().await?;
        let flat: Vec<Vec<u8>> = match inv.invoke_async(&mut c).await {
            Ok(v) => v,
            Err(e) => return Err(self.link.fail(epoch, &e)),
        };
        let mut it = flat.into_iter();
        let buried: usize = it
            .next()
            .and_then(|b| String::from_utf8(b).ok()?.parse().ok())
            .unwrap_or(0);
        if buried > 0 {
            self.log(&format!(
                "quarantined {buried} message(s) over the size cap of {} bytes, unread, in their queues' dead letters",
                self.opts.max_message_bytes
            ));
        }
        let mut claimed = Vec::new();
        while let (Some(k), Some(t), Some(raw)) = (it.next(), it.next(), it.next()) {
            let Some(p) = polled.iter().find(|p| p.key.as_bytes() == k.as_slice()) else {
                continue;
            };
            claimed.push(Taken {
                queue: p.queue.clone(),
                step: p.step,
                tag: String::from_utf8_lossy(&t).into_owned(),
                raw,
            });
        }
        self.admit(claimed).await
    }

    /// One BRPOP over every step key, then kombu's hold of what it got. An
    /// envelope over the size cap goes to the dead letters unparsed; one
    /// whose hold cannot reach Redis within the patience is kept, to go
    /// back to the front of its list when Redis is back.
    async fn block(&self, queues: &[String], wait: Duration) -> Result<usize, Refused> {
        let polled = self.poll_keys(queues);
        let keys: Vec<&str> = polled.iter().map(|p| p.key.as_str()).collect();
        let secs = wait.as_secs_f64().max(0.01);
        let mut brpop = redis::cmd("BRPOP");
        brpop.arg(&keys).arg(secs);
        let got: Option<(String, Vec<u8>)> = self.blocking(&brpop).await?;
        let Some((key, raw)) = got else {
            return Ok(0);
        };
        let Some(p) = polled.iter().find(|p| p.key == key) else {
            // Not a key asked for: cannot happen; put it back.
            self.owe(
                Owed::PushBack(key, raw),
                &Refused::broker(BrokerErrorKind::Script, "an unexpected BRPOP key"),
            );
            return Ok(0);
        };
        if raw.len() > self.opts.max_message_bytes {
            let reason = format!(
                "too large: {} bytes (the cap is {} bytes)",
                raw.len(),
                self.opts.max_message_bytes
            );
            let element = dead::element(self.facts.clock.now(), &reason, p.step, None, &raw);
            drop(raw);
            self.bury(
                &p.queue,
                "quarantined",
                vec![Burial {
                    tag: String::new(),
                    entry: Vec::new(),
                    element,
                    reason,
                }],
            )
            .await;
            return Ok(0);
        }
        let mut inv = self.scripts.hold.prepare_invoke();
        inv.key(&self.keys.unacked)
            .key(&self.keys.index)
            .arg(self.index_score())
            .arg(raw.as_slice())
            .arg(new_id())
            .arg(&p.rk);
        let held = {
            let inv = &inv;
            self.link
                .patiently(true, |mut c| async move {
                    inv.invoke_async::<String>(&mut c).await
                })
                .await
        };
        drop(inv);
        let tag = match held {
            Ok(t) => t,
            Err(e) => {
                self.owe(Owed::PushBack(key, raw), &e);
                return Err(e);
            }
        };
        self.admit(vec![Taken {
            queue: p.queue.clone(),
            step: p.step,
            tag,
            raw,
        }])
        .await
    }

    /// Runs one blocking command (BRPOP) on a connection of its own (no
    /// response timeout: it blocks), opened when needed and dropped on any
    /// error, so one blocked call runs at a time, a blocked claim never
    /// holds up a settle, and a stale connection is never reused.
    async fn blocking<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, Refused> {
        let mut g = self.blocking.lock().await;
        if g.is_none() {
            *g = Some(
                self.link
                    .dedicated(None)
                    .await
                    .map_err(|e| self.link.refused(&e))?,
            );
        }
        let c = g.as_mut().expect("just connected");
        match cmd.query_async(c).await {
            Ok(v) => Ok(v),
            Err(e) => {
                *g = None;
                Err(self.link.refused(&e))
            }
        }
    }
}
