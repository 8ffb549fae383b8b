//! The Celery-layout broker's own tokio task: what a Celery worker's timer
//! does (restoring dead consumers' claims) and what headway adds — re-
//! scoring what this consumer holds so nobody restores it while it lives,
//! retrying settles kept through an outage, reading the revokes kept while
//! the pidbox was away, flushing run events, renewing
//! the beat lease. It holds the broker weakly and stops when it is dropped.

use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::CeleryBroker;
use crate::task::spec::Broker;

/// Re-scores held claims every quarter of the visibility timeout (at least
/// every 250 ms, at most every 5 minutes), retries settles kept through an
/// outage, renews the beat lease while this broker's beat leads (every third
/// of `beat_lease`), and — once this broker consumes — restores dead
/// consumers' claims every `restore_every`, as a Celery worker's timer does.
pub(super) async fn rescore_loop(me: Weak<CeleryBroker>) {
    let (period, restore_every, renew_every) = {
        let Some(b) = me.upgrade() else { return };
        (
            (b.opts.visibility_timeout / 4)
                .clamp(Duration::from_millis(250), Duration::from_secs(300)),
            b.opts.restore_every,
            b.opts.beat_lease / 3,
        )
    };
    let tick = period
        .min(Duration::from_millis(250))
        .min(renew_every)
        .max(Duration::from_millis(10));
    let mut last_rescore = tokio::time::Instant::now();
    let mut last_restore: Option<tokio::time::Instant> = None;
    let mut last_renew = tokio::time::Instant::now();
    // Each kind of failure is logged once per outage: the connection's own
    // log says when it ends.
    let (mut rescore_failing, mut restore_failing) = (false, false);
    // The pub/sub connection the revokes were last loaded for: a new one
    // may have missed pidbox broadcasts meanwhile.
    let mut heard = me.upgrade().map_or(0, |b| b.waiters.connection());
    loop {
        tokio::time::sleep(tick).await;
        let Some(b) = me.upgrade() else { return };
        let now = tokio::time::Instant::now();
        if now.duration_since(last_renew) >= renew_every {
            last_renew = now;
            b.renew_beat().await;
        }
        let conn = b.waiters.connection();
        if conn != heard && b.load_revoked().await.is_ok() {
            heard = conn;
        }
        let _ = b.flush_events().await;
        b.pay().await;
        if now.duration_since(last_rescore) >= period {
            last_rescore = now;
            match b.heartbeat().await {
                Ok(_) => rescore_failing = false,
                Err(e) if !rescore_failing => {
                    rescore_failing = true;
                    b.log(&format!("could not re-score held claims: {e}"));
                }
                Err(_) => {}
            }
        }
        if let Some(every) = restore_every
            && b.consumed.load(Ordering::Relaxed)
            && last_restore.is_none_or(|t| now.duration_since(t) >= every)
        {
            last_restore = Some(now);
            match b.recover().await {
                Ok(n) => {
                    restore_failing = false;
                    if n > 0 {
                        b.log(&format!(
                            "restored {n} claim(s) older than the visibility timeout"
                        ));
                    }
                }
                Err(e) if !restore_failing => {
                    restore_failing = true;
                    b.log(&format!("could not restore claims: {e}"));
                }
                Err(_) => {}
            }
        }
    }
}
