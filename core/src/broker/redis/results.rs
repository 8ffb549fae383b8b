//! Reading results and waiting for them.
//!
//! Why this way: a waiter subscribes to its result key's channel on one
//! shared pub/sub connection (the shared
//! [`Waiters`](crate::broker::link::Waiters)), and the store script publishes a final value
//! (up to [`NOTIFY_CAP`]) there, so a woken waiter answers without a GET; a
//! look (GET) made alongside the subscribe answers a result already stored
//! in one round trip.

use std::time::Duration;

use tokio::time::Instant;

use super::RedisBroker;
use super::wire::{bytes, unstored};
use crate::task::state::{Outcome, Refused};

/// A final result up to this size is published whole on its channel, so a
/// waiter subscribed before the store answers without a GET; a bigger one
/// publishes just a wake-up (Redis copies a message to every subscriber).
pub(super) const NOTIFY_CAP: usize = 64 * 1024;

impl RedisBroker {
    pub(super) async fn fetch_inner(
        &self,
        id: &str,
        patient: bool,
    ) -> Result<Option<Outcome>, Refused> {
        let v = self
            .one(
                ::redis::cmd("GET").arg(self.result_key(id)).clone(),
                patient,
            )
            .await?;
        Ok(bytes(&v).and_then(unstored))
    }

    /// Waits for a final result. The first look (GET) runs alongside the
    /// subscribe, so a result already final answers in one round trip; a
    /// GET that may have run before the subscribe took is repeated once it
    /// has. A notification carries the stored value (up to [`NOTIFY_CAP`]),
    /// so a waiter woken by the store answers without another GET.
    pub(super) async fn wait_inner(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<Option<Outcome>, Refused> {
        let deadline = Instant::now() + timeout;
        let ch = self.result_key(id);
        let waiting = self.waiters.join(&ch);
        let notify = waiting.notify();
        let mut first = true;
        loop {
            let woken = notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if let Some(o) = self.waiters.got(&ch) {
                return Ok(Some(o));
            }
            let (subscribed, looked) = if first {
                first = false;
                // Already subscribed on the live connection: the look is
                // after the subscribe, as below.
                let before = self.waiters.on(&ch);
                let sub = self.waiters.subscribe(&ch);
                let get = self.fetch_inner(id, false);
                tokio::pin!(sub, get);
                let mut subscribed = None;
                let looked = loop {
                    tokio::select! {
                        r = &mut get => break r,
                        r = &mut sub, if subscribed.is_none() => subscribed = Some(r.is_ok()),
                    }
                };
                match looked {
                    Ok(Some(o)) if o.state.is_final() => return Ok(Some(o)),
                    Err(e) if Instant::now() >= deadline => return Err(e),
                    _ => {}
                }
                let subscribed = match subscribed {
                    Some(s) => s,
                    None => sub.await.is_ok(),
                };
                let on = self.waiters.on(&ch);
                let ahead = before != 0 && before == on;
                (subscribed, looked.is_ok() && ahead)
            } else {
                (self.waiters.subscribe(&ch).await.is_ok(), false)
            };
            // Not sure the look came after the subscribe: look again now
            // that it has (a store after this look publishes to us).
            let looked = looked || {
                if let Some(o) = self.waiters.got(&ch) {
                    return Ok(Some(o));
                }
                match self.fetch_inner(id, false).await {
                    Ok(Some(o)) if o.state.is_final() => return Ok(Some(o)),
                    Ok(_) => true,
                    Err(e) if Instant::now() >= deadline => return Err(e),
                    Err(_) => false,
                }
            };
            // Subscribed and looked: only a store can change the answer, and
            // it publishes. Otherwise (Redis away, the look failed, so the
            // store may have come first) look again shortly.
            let until = if subscribed && looked {
                deadline
            } else {
                deadline.min(Instant::now() + Duration::from_millis(100))
            };
            tokio::select! {
                _ = &mut woken => {}
                _ = tokio::time::sleep_until(until) => {
                    if Instant::now() >= deadline {
                        return Ok(None);
                    }
                }
            }
        }
    }
}
