//! Leases: this consumer's (its claims survive it only while refreshed)
//! and the beat's (one beat leads), both kept by the broker's own tokio task.
//!
//! Why a task of the broker's own: a busy GIL or event loop cannot starve
//! the refresh, and dropping the broker ends the task and lets the leases
//! lapse, so what a dropped consumer held is recovered elsewhere.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{MutexGuard, Weak};
use std::time::Duration;

use ::redis::Cmd;
use tokio::time::Instant;

use super::scripts::evalsha;
use super::settle::Pending;
use super::wire::int;
use super::{RedisBroker, log};
use crate::task::state::Refused;

impl RedisBroker {
    /// Stops refreshing this consumer's leases and deletes them, so what it
    /// still holds is recovered by the next `recover()` anywhere rather than
    /// after the lease. Call it after a worker stopped; further claims are
    /// refused.
    pub async fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if self.beat_leader.swap(false, Ordering::SeqCst) {
            // A standby beat takes over at its next slot, not a lease later.
            let _ = self.one(self.beat_cmd("", 0, "release"), false).await;
        }
        let queues: Vec<String> = self.touched().iter().cloned().collect();
        let mut p = ::redis::pipe();
        for q in &queues {
            p.cmd("DEL")
                .arg(self.key(q, "lease:", &self.consumer))
                .ignore();
        }
        if !queues.is_empty() {
            let _ = self.run(&p, false).await;
        }
    }

    pub(super) fn touched(&self) -> MutexGuard<'_, HashSet<String>> {
        self.touched.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn beat_cmd(&self, entry: &str, due: i64, mode: &str) -> Cmd {
        let mut c = evalsha(&self.scripts.beat, &self.key("beat", "beat:", ""));
        c.arg(&self.consumer)
            .arg(entry)
            .arg(due)
            .arg(self.beat_lease.as_millis() as u64)
            .arg(mode);
        c
    }

    /// The background task's one round: refresh leases, retry kept
    /// settles, hand back stray BLMOVE results.
    pub(super) async fn refresh(&self, sweep: bool) {
        let queues: Vec<String> = self.touched().iter().cloned().collect();
        if !queues.is_empty() {
            let mut p = ::redis::pipe();
            let ms = self.lease.as_millis() as u64;
            for q in &queues {
                p.cmd("SET")
                    .arg(self.key(q, "lease:", &self.consumer))
                    .arg(1)
                    .arg("PX")
                    .arg(ms)
                    .ignore();
                p.cmd("SADD")
                    .arg(self.key(q, "consumers", ""))
                    .arg(&self.consumer)
                    .ignore();
                p.cmd("SADD").arg(self.queues_key()).arg(q).ignore();
            }
            if self.run(&p, false).await.is_err() {
                return;
            }
        }
        let kept: Vec<Pending> =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        if !kept.is_empty() {
            let _ = self.settle(kept).await;
        }
        self.retry_unstored().await;
        if sweep {
            for q in &queues {
                let _ = self.sweep(q).await;
            }
        }
    }

    /// Renews this process's beat lease while it leads, owner-checked: a
    /// beat that was paused past its lease finds another beat holds it and
    /// stops leading, rather than both leading (as two RedBeat schedulers could).
    pub(super) async fn renew_beat(&self) {
        if !self.beat_leader.load(Ordering::SeqCst) {
            return;
        }
        match self.one(self.beat_cmd("", 0, "renew"), false).await {
            Ok(v) if int(&v) == Some(1) => {}
            Ok(_) => {
                self.beat_leader.store(false, Ordering::SeqCst);
                log(
                    "the beat lease was taken by another beat (this one paused or lost Redis past it); standing by",
                );
            }
            // Redis away: the lease may lapse, and the next claim finds out.
            Err(_) => {}
        }
    }

    pub(super) async fn claim_slot_inner(&self, entry: &str, due: i64) -> Result<bool, Refused> {
        // A standby asks again until the leader has fired the slot or its
        // lease has lapsed (then this beat takes over and fires it): each
        // slot fires once even when the leader dies or pauses right
        // before it. Bounded by one lease and a poll.
        let poll =
            (self.beat_lease / 20).clamp(Duration::from_millis(10), Duration::from_millis(500));
        let deadline = Instant::now() + self.beat_lease + poll;
        loop {
            let v = self.one(self.beat_cmd(entry, due, "claim"), true).await?;
            match int(&v) {
                Some(1) => {
                    if !self.beat_leader.swap(true, Ordering::SeqCst) {
                        log("this beat holds the beat lease; it fires the schedule");
                    }
                    return Ok(true);
                }
                Some(2) if Instant::now() < deadline => tokio::time::sleep(poll).await,
                _ => return Ok(false),
            }
        }
    }
}

/// The background task: every third of the lease, refresh this consumer's
/// leases and retry kept settles; every lease, sweep stray BLMOVE results;
/// every `recover_every`, recover dead consumers' claims. It holds the
/// broker weakly, so dropping the broker ends it (and lets the leases lapse:
/// what a dropped consumer held is then recovered elsewhere).
pub(super) async fn tick(weak: Weak<RedisBroker>) {
    let (every, recover_every) = match weak.upgrade() {
        // Often enough for the lease refreshes (a third of each lease) and
        // for `recover_every`, however short it is set.
        Some(b) => (
            (b.lease.min(b.beat_lease) / 3)
                .min(b.recover_every.unwrap_or(Duration::MAX))
                .max(Duration::from_millis(10)),
            b.recover_every,
        ),
        None => return,
    };
    let mut round = 0u64;
    let mut last_recover = Instant::now();
    let mut seen_epoch = 0u64;
    let mut hold_until = Instant::now();
    loop {
        tokio::time::sleep(every).await;
        let Some(b) = weak.upgrade() else { return };
        if b.closed.load(Ordering::SeqCst) {
            return;
        }
        round += 1;
        b.refresh(round.is_multiple_of(3)).await;
        b.renew_beat().await;
        // Redis came back (a new connection after the first): every lease
        // may have lapsed while it was away, live consumers' too. Recovering
        // now would hand back work they are still running, so wait one lease
        // for them to reconnect and refresh theirs first.
        let epoch = b.link.epoch();
        if epoch != seen_epoch {
            if seen_epoch != 0 {
                hold_until = Instant::now() + b.lease;
            }
            seen_epoch = epoch;
        }
        if let Some(r) = recover_every
            && last_recover.elapsed() >= r
            && Instant::now() >= hold_until
        {
            last_recover = Instant::now();
            match b.recover_inner().await {
                Ok(n) if n > 0 => log(&format!(
                    "recovered {n} message(s) held by consumers whose lease expired"
                )),
                _ => {}
            }
        }
    }
}
