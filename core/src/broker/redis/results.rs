//! Reading results and waiting for them.
//!
//! Why this way: a waiter subscribes to its result key's channel on one
//! shared pub/sub connection, and the store script publishes a final value
//! (up to [`NOTIFY_CAP`]) there, so a woken waiter answers without a GET; a
//! look (GET) made alongside the subscribe answers a result already stored
//! in one round trip.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ::redis::aio::PubSubSink;
use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::RedisBroker;
use super::wire::{bytes, unstored};
use crate::task::state::{Outcome, Refused};

/// A final result up to this size is published whole on its channel, so a
/// waiter subscribed before the store answers without a GET; a bigger one
/// publishes just a wake-up (Redis copies a message to every subscriber).
pub(super) const NOTIFY_CAP: usize = 64 * 1024;

pub(super) struct Sub {
    pub(super) count: usize,
    pub(super) notify: Arc<Notify>,
    /// The final outcome a notification carried (the store script publishes
    /// only what it wrote, so this is what the key holds).
    pub(super) got: Option<Outcome>,
    /// The pub/sub connection generation it is subscribed on (0: none).
    pub(super) on: u64,
}

/// Result waiters: one pub/sub connection, one channel per awaited result.
pub(super) struct Waiters {
    pub(super) subs: Mutex<HashMap<String, Sub>>,
    pub(super) sink: tokio::sync::Mutex<Option<(u64, PubSubSink)>>,
    pub(super) epoch: AtomicU64,
}

impl Waiters {
    pub(super) fn lock(&self) -> MutexGuard<'_, HashMap<String, Sub>> {
        self.subs.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn join(&self, ch: &str) -> Arc<Notify> {
        let mut g = self.lock();
        let e = g.entry(ch.to_string()).or_insert_with(|| Sub {
            count: 0,
            notify: Arc::new(Notify::new()),
            got: None,
            on: 0,
        });
        e.count += 1;
        e.notify.clone()
    }

    /// The final outcome a notification on `ch` carried, if any.
    pub(super) fn got(&self, ch: &str) -> Option<Outcome> {
        self.lock().get(ch).and_then(|s| s.got.clone())
    }

    /// Wakes every waiter (the pub/sub connection went away: they look
    /// again and subscribe on a new one).
    pub(super) fn wake_all(&self) {
        for s in self.lock().values() {
            s.notify.notify_waiters();
        }
    }
}

/// Leaves a result channel when a wait ends, however it ends.
pub(super) struct Leave<'a> {
    pub(super) broker: &'a RedisBroker,
    pub(super) ch: String,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        let last = {
            let mut g = self.broker.waiters.lock();
            match g.get_mut(&self.ch) {
                Some(s) if s.count <= 1 => {
                    g.remove(&self.ch);
                    true
                }
                Some(s) => {
                    s.count -= 1;
                    false
                }
                None => false,
            }
        };
        if last && let Some(b) = self.broker.me.upgrade() {
            let ch = std::mem::take(&mut self.ch);
            self.broker.rt.spawn(async move {
                let mut sink = b.waiters.sink.lock().await;
                // Still nobody waiting: unsubscribe (under the sink lock, so
                // it cannot overtake a new waiter's subscribe).
                if !b.waiters.lock().contains_key(&ch)
                    && let Some((_, s)) = sink.as_mut()
                {
                    let _ = s.unsubscribe(&ch).await;
                }
            });
        }
    }
}

impl RedisBroker {
    pub(super) async fn subscribe(&self, ch: &str) -> Result<(), Refused> {
        let mut sink = self.waiters.sink.lock().await;
        if sink.is_none() {
            let ps = self
                .client
                .get_async_pubsub()
                .await
                .map_err(|e| self.link.refused(&e))?;
            let (s, mut stream) = ps.split();
            let epoch = self.waiters.epoch.fetch_add(1, Ordering::SeqCst) + 1;
            *sink = Some((epoch, s));
            let weak = self.me.clone();
            self.rt.spawn(async move {
                while let Some(msg) = stream.next().await {
                    let Some(b) = weak.upgrade() else { return };
                    // A final value (not the `1` wake-up) is kept for the
                    // waiters, who then need no GET.
                    let got = unstored(msg.get_payload_bytes()).filter(|o| o.state.is_final());
                    if let Some(s) = b.waiters.lock().get_mut(msg.get_channel_name()) {
                        if got.is_some() {
                            s.got = got;
                        }
                        s.notify.notify_waiters();
                    }
                }
                // The connection went away: forget it and wake every waiter
                // to look again and subscribe on a new one.
                if let Some(b) = weak.upgrade() {
                    let mut sink = b.waiters.sink.lock().await;
                    if sink.as_ref().is_some_and(|(g, _)| *g == epoch) {
                        *sink = None;
                    }
                    drop(sink);
                    b.waiters.wake_all();
                }
            });
        }
        let (epoch, s) = sink.as_mut().expect("just made");
        let on = self.waiters.lock().get(ch).map_or(0, |s| s.on);
        if on != *epoch {
            s.subscribe(ch).await.map_err(|e| self.link.refused(&e))?;
            if let Some(e) = self.waiters.lock().get_mut(ch) {
                e.on = *epoch;
            }
        }
        Ok(())
    }

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
        let notify = self.waiters.join(&ch);
        let _leave = Leave {
            broker: self,
            ch: ch.clone(),
        };
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
                let before = self.waiters.lock().get(&ch).map_or(0, |s| s.on);
                let sub = self.subscribe(&ch);
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
                let on = self.waiters.lock().get(&ch).map_or(0, |s| s.on);
                let ahead = before != 0 && before == on;
                (subscribed, looked.is_ok() && ahead)
            } else {
                (self.subscribe(&ch).await.is_ok(), false)
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
