//! Settling claims (acks, rejects, retries) and revoking.
//!
//! Why kept and retried: a settle that fails on a connection error outlasting
//! the patience is kept ([`Pending`]) and retried by the background task
//! until it lands, so a finished run is never left held by a live consumer.
//! Each settle is idempotent: an exact stamped element is removed once.

use std::sync::Arc;

use ::redis::Cmd;

use super::options::check_name;
use super::scripts::evalsha;
use super::wire::{int, step_arg, step_of, unheld};
use super::{RedisBroker, log};
use crate::task::message::Message;
use crate::task::spec::{Broker, Receipt};
use crate::task::state::Refused;

/// The count an ack's LREM takes: -1 looks from the tail, where a held list
/// keeps its oldest claims (a claim pushes the head), and claims are mostly
/// settled oldest first — with a prefetch of 512 a search from the head
/// read the whole list for nearly every ack. Elements are unique (each has
/// its fencing token), so which end the search starts from changes nothing
/// else.
pub(super) const HELD_OLDEST_FIRST: i64 = -1;

/// A settle that failed on a connection error, retried by the background
/// task until it lands (each is idempotent: an exact element is removed once).
pub(super) struct Pending {
    pub(super) queue: String,
    pub(super) el: Arc<[u8]>,
    pub(super) mode: &'static str,
    pub(super) next: Option<Message>,
}

impl RedisBroker {
    pub(super) fn settle_cmd(
        &self,
        queue: &str,
        el: &[u8],
        mode: &str,
        next: Option<&Message>,
    ) -> Cmd {
        let mut c = evalsha(&self.scripts.settle, &self.base(queue));
        c.arg(&self.consumer).arg(el).arg(mode).arg(self.now_arg());
        if let Some(n) = next {
            c.arg(step_arg(step_of(n)))
                .arg(n.eta.map(|e| e.to_string()).unwrap_or_default())
                .arg(n.to_json());
        }
        c
    }

    /// Runs settles; on a connection error that outlasts the patience they
    /// are kept and retried by the background task, so a finished run is
    /// never left held by a live consumer.
    pub(super) async fn settle(&self, items: Vec<Pending>) -> Result<(), Refused> {
        if items.is_empty() {
            return Ok(());
        }
        let mut p = ::redis::pipe();
        for it in &items {
            if it.mode == "ack" {
                p.cmd("LREM")
                    .arg(self.key(&it.queue, "held:", &self.consumer))
                    .arg(HELD_OLDEST_FIRST)
                    .arg(&*it.el)
                    .ignore();
            } else {
                p.add_command(self.settle_cmd(&it.queue, &it.el, it.mode, it.next.as_ref()))
                    .ignore();
            }
        }
        match self.run(&p, true).await {
            Ok(_) => {
                let mut o = self.outs();
                for it in &items {
                    if let Some(set) = o.get_mut(&it.queue)
                        && let Some((t, _, _)) = unheld(&it.el)
                    {
                        set.remove(&t);
                    }
                }
                Ok(())
            }
            Err(e) => {
                log(&format!(
                    "{e}; {} settle(s) kept to retry when Redis is back",
                    items.len()
                ));
                self.pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend(items);
                Ok(())
            }
        }
    }

    pub(super) fn pending_of(
        receipt: &Receipt,
        mode: &'static str,
        next: Option<Message>,
    ) -> Option<Pending> {
        Some(Pending {
            queue: receipt.queue.to_string(),
            el: receipt.raw.clone()?,
            mode,
            next,
        })
    }

    pub(super) async fn retry_inner(&self, receipt: Receipt, next: Message) -> Result<(), Refused> {
        if *next.queue != *receipt.queue {
            // Another queue is another slot: publish, then ack.
            self.publish(vec![next]).await?;
            return self.ack(vec![receipt]).await;
        }
        check_name("queue", &next.queue)?;
        let items = Self::pending_of(&receipt, "retry", Some(next))
            .into_iter()
            .collect();
        self.settle(items).await
    }

    pub(super) async fn revoke_inner(&self, ids: Vec<String>, until: i64) -> Result<(), Refused> {
        if ids.is_empty() {
            return Ok(());
        }
        self.run(&self.revoke_pipe(&ids, until), true)
            .await
            .map(|_| ())
    }

    /// The revoked marks of `ids` until `until`, one SET each, after the
    /// revokes key's score is raised to `until` (ZADD GT keeps the latest
    /// end): a claim that finds that score past reads no marks, so it must
    /// be raised before any mark exists. On a Cluster claims read no marks
    /// (they live in other slots), so it is not kept there.
    pub(super) fn revoke_pipe(&self, ids: &[String], until: i64) -> ::redis::Pipeline {
        let ttl = (until - self.clock.now()).max(1);
        let mut p = ::redis::pipe();
        if !self.cluster {
            p.cmd("ZADD")
                .arg(self.revokes_key())
                .arg("GT")
                .arg(until)
                .arg("latest")
                .ignore();
        }
        for id in ids {
            p.cmd("SET")
                .arg(self.revoked_key(id))
                .arg(until)
                .arg("PX")
                .arg(ttl)
                .ignore();
        }
        p
    }

    pub(super) async fn revoked_inner(&self, ids: &[String]) -> Result<Vec<bool>, Refused> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut p = ::redis::pipe();
        for id in ids {
            p.cmd("GET").arg(self.revoked_key(id));
        }
        // Patient: a worker asks before it runs, and one that gave up
        // here would leave its claim held.
        let got = self.run(&p, true).await?;
        let now = self.clock.now();
        Ok(got
            .iter()
            .map(|v| int(v).is_some_and(|until| until > now))
            .collect())
    }
}
