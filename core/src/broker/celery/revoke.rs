//! Revokes on Celery's layout, both ways. Celery's `revoke` is a pidbox
//! broadcast that nothing stores, so each consumer keeps an expiring
//! revoked set of its own, filled from the broadcast (the node's, kept and
//! heard as on every transport on Celery's wire: `node`); headway also keeps
//! its revokes in a sorted set (`headway.celery.revoked`), so a headway
//! worker that was down when a revoke went out still skips the task.
//!
//! A revoke with `terminate` goes out as Celery's own (`"terminate": true`
//! and the signal's name): a Celery worker running the task stops it, and a
//! headway consumer hearing it — this process's included — tells its apps,
//! so the headway process running the run stops it. Both ways, as for a
//! revoke: a Celery client's `app.control.revoke(id, terminate=True)` stops
//! a headway worker's run.

use std::sync::atomic::Ordering;

use super::node::Revoke;
use super::{CeleryBroker, pidbox};
use crate::task::state::Refused;

impl CeleryBroker {
    /// Sends `r` (already in this consumer's set, `node`): kept in the
    /// sorted set and broadcast over the pidbox as Celery's `revoke`, in one
    /// pipeline.
    pub(super) async fn broadcast_revoke(&self, r: Revoke) -> Result<(), Refused> {
        let now = self.facts.clock.now();
        let clock = self.facts.lamport.fetch_add(1, Ordering::Relaxed) + 1;
        let env = pidbox::revoke_envelope(&r.ids, r.terminate, clock);
        let mut p = redis::pipe();
        for id in &r.ids {
            p.zadd(&self.keys.revoked, id, r.until).ignore();
        }
        p.cmd("ZREMRANGEBYSCORE")
            .arg(&self.keys.revoked)
            .arg("-inf")
            .arg(now)
            .ignore();
        p.publish(&self.keys.pidbox, env).ignore();
        self.link.pipe(&p).await
    }

    /// Whether each of `ids` is revoked: this consumer's set first, then
    /// the sorted set for those it does not know.
    pub(super) async fn revoked_of(&self, ids: &[String]) -> Result<Vec<bool>, Refused> {
        let now = self.facts.clock.now();
        let mut out = self.facts.revoked.of(ids, now);
        if out.iter().all(|&r| r) || ids.is_empty() {
            return Ok(out);
        }
        // Another headway process may have revoked while this one's
        // subscriber was away: the sorted set is the record.
        let (epoch, mut c) = self.link.conn().await?;
        let scores: Vec<Option<f64>> = match redis::cmd("ZMSCORE")
            .arg(&self.keys.revoked)
            .arg(ids)
            .query_async(&mut c)
            .await
        {
            Ok(v) => v,
            Err(e) => return Err(self.link.fail(epoch, &e)),
        };
        for (o, s) in out.iter_mut().zip(scores) {
            if s.is_some_and(|u| u as i64 > now) {
                *o = true;
            }
        }
        Ok(out)
    }

    /// Which of `ids` this broker knows revoked without asking Redis: the
    /// set loaded at connect, and every revoke heard on the pidbox since
    /// (for another transport that keeps its revokes here and hears the
    /// rest on a pidbox of its own).
    pub(crate) fn revoked_here(&self, ids: &[String]) -> Vec<bool> {
        self.facts.revoked.of(ids, self.facts.clock.now())
    }

    /// Reads the revoked ids kept in Redis into this broker's set again
    /// (after a listener of another transport was away).
    pub(crate) async fn load_revoked(&self) -> Result<(), Refused> {
        let now = self.facts.clock.now();
        let (epoch, mut c) = self.link.conn().await?;
        let got: Vec<(String, f64)> = match redis::cmd("ZRANGEBYSCORE")
            .arg(&self.keys.revoked)
            .arg(now)
            .arg("+inf")
            .arg("WITHSCORES")
            .query_async(&mut c)
            .await
        {
            Ok(v) => v,
            Err(e) => return Err(self.link.fail(epoch, &e)),
        };
        self.facts
            .revoked
            .load(got.into_iter().map(|(id, until)| (id, until as i64)));
        Ok(())
    }
}
