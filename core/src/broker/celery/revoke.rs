//! Revokes on Celery's layout, both ways. Celery's `revoke` is a pidbox
//! broadcast that nothing stores, so each consumer keeps an expiring
//! revoked set of its own, filled from the broadcast; headway also keeps
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

use super::{CeleryBroker, pidbox};
use crate::task::signal::SIGTERM;
use crate::task::state::Refused;

impl CeleryBroker {
    /// Revokes `ids` until `until` (ms): remembered here, kept in the
    /// sorted set, and broadcast over the pidbox as Celery's `revoke` —
    /// asking to terminate with the signal when `terminate` names one.
    pub(super) async fn revoke_all(
        &self,
        ids: Vec<String>,
        until: i64,
        terminate: Option<i32>,
    ) -> Result<(), Refused> {
        if ids.is_empty() {
            return Ok(());
        }
        self.note_revoked(&ids, until);
        let now = self.facts.clock.now();
        let clock = self.facts.lamport.fetch_add(1, Ordering::Relaxed) + 1;
        let env = pidbox::revoke_envelope(&ids, terminate, clock);
        let mut p = redis::pipe();
        for id in &ids {
            p.zadd(&self.keys.revoked, id, until).ignore();
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
        let mut out: Vec<bool> = {
            let g = self.lock();
            ids.iter()
                .map(|id| g.revoked.get(id).is_some_and(|&u| u > now))
                .collect()
        };
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
        let now = self.facts.clock.now();
        let g = self.lock();
        ids.iter()
            .map(|id| g.revoked.get(id).is_some_and(|&u| u > now))
            .collect()
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
        let mut g = self.lock();
        for (id, until) in got {
            g.revoked.insert(id, until as i64);
        }
        Ok(())
    }

    pub(super) fn note_revoked(&self, ids: &[String], until: i64) {
        let mut g = self.lock();
        let now = self.facts.clock.now();
        g.revoked.retain(|_, u| *u > now);
        for id in ids {
            g.revoked.insert(id.clone(), until);
        }
        drop(g);
        self.revoked_bell.notify_waiters();
    }

    /// A broadcast revoke heard: remembered until `until` unless this
    /// consumer already knows the id's own end — its own revoke coming back
    /// to it on the pidbox must not stretch the `until` it was given.
    fn note_heard(&self, ids: &[String], until: i64) {
        let mut g = self.lock();
        let now = self.facts.clock.now();
        g.revoked.retain(|_, u| *u > now);
        for id in ids {
            g.revoked.entry(id.clone()).or_insert(until);
        }
        drop(g);
        self.revoked_bell.notify_waiters();
    }

    pub(super) fn on_pidbox(&self, payload: &[u8]) {
        let Some(c) = pidbox::decode(payload) else {
            return;
        };
        if c.method != "revoke" {
            self.on_control(c);
            return;
        }
        if !c.is_for(&self.facts.node, self.now_secs()) {
            return;
        }
        let keep = i64::try_from(self.opts.revoke_keep.as_millis()).unwrap_or(i64::MAX);
        let until = self.facts.clock.now().saturating_add(keep);
        self.note_heard(&c.ids, until);
        if c.terminate && !c.ids.is_empty() {
            self.hearers.tell(&c.ids, c.signal.unwrap_or(SIGTERM));
        }
    }
}
