//! Beat on Celery's layout: one beat leads at a time, under a lease only
//! its owner renews or releases, and each entry's slots fire once across
//! every beat on the Redis (`beat.lua`, the scheme of headway's own
//! layout). The lease is renewed by the broker's background task.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::CeleryBroker;
use crate::task::state::Refused;

impl CeleryBroker {
    pub(super) async fn beat_call(
        &self,
        entry: &str,
        due: i64,
        mode: &str,
    ) -> Result<i64, Refused> {
        let mut inv = self.scripts.beat.prepare_invoke();
        inv.key(&self.keys.beat_lease)
            .key(&self.keys.beat_fired)
            .arg(&self.beat_owner)
            .arg(entry)
            .arg(due)
            .arg(self.opts.beat_lease.as_millis() as u64)
            .arg(mode);
        let inv = &inv;
        self.link
            .patiently(true, |mut c| async move {
                inv.invoke_async::<i64>(&mut c).await
            })
            .await
    }

    pub(super) async fn claim_slot_inner(&self, entry: &str, due: i64) -> Result<bool, Refused> {
        // A standby asks again until the leader has fired the slot or its
        // lease has lapsed (then this beat takes over and fires it): each
        // slot fires once even when the leader dies or pauses right before
        // it. Bounded by one lease and a poll.
        let lease = self.opts.beat_lease;
        let poll = (lease / 20).clamp(Duration::from_millis(10), Duration::from_millis(500));
        let deadline = tokio::time::Instant::now() + lease + poll;
        loop {
            match self.beat_call(entry, due, "claim").await? {
                1 => {
                    if !self.beat_leader.swap(true, Ordering::SeqCst) {
                        self.log("this beat holds the beat lease; it fires the schedule");
                    }
                    return Ok(true);
                }
                2 if tokio::time::Instant::now() < deadline => tokio::time::sleep(poll).await,
                _ => return Ok(false),
            }
        }
    }

    /// Renews this broker's beat lease while it leads, owner-checked: a
    /// beat that was paused past its lease finds another beat holds it and
    /// stops leading, rather than both leading.
    pub(super) async fn renew_beat(&self) {
        if !self.beat_leader.load(Ordering::SeqCst) {
            return;
        }
        let mut inv = self.scripts.beat.prepare_invoke();
        inv.key(&self.keys.beat_lease)
            .key(&self.keys.beat_fired)
            .arg(&self.beat_owner)
            .arg("")
            .arg(0)
            .arg(self.opts.beat_lease.as_millis() as u64)
            .arg("renew");
        let Ok((epoch, mut c)) = self.link.conn().await else {
            return;
        };
        match inv.invoke_async::<i64>(&mut c).await {
            Ok(1) => {}
            Ok(_) => {
                self.beat_leader.store(false, Ordering::SeqCst);
                self.log(
                    "the beat lease was taken by another beat (this one paused or lost Redis past it); standing by",
                );
            }
            // Redis away: the lease may lapse, and the next claim finds out.
            Err(e) => {
                let _ = self.link.fail(epoch, &e);
            }
        }
    }
}
