//! The Celery layout's subscriber: result wake-ups on each result key's
//! own channel (subscribed while someone waits on it) and the pidbox
//! pattern (revokes). One pub/sub connection, reconnected with a capped
//! backoff; on reconnecting it resubscribes and wakes every waiter, since
//! what was published meanwhile was missed.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use super::CeleryBroker;

/// The subscriber: result channels (on demand) and the pidbox pattern.
/// Reconnects with a capped backoff and resubscribes what is being waited on.
pub(super) async fn listen(
    me: Weak<CeleryBroker>,
    mut ready: Option<tokio::sync::oneshot::Sender<()>>,
) {
    use futures_util::StreamExt;
    let mut backoff = Duration::from_millis(100);
    loop {
        let Some(b) = me.upgrade() else { return };
        let ps = b.link.client.get_async_pubsub().await;
        let (mut sink, mut stream) = match ps {
            Ok(p) => p.split(),
            Err(_) => {
                drop(b);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
                continue;
            }
        };
        let mut ok = true;
        for p in &b.keys.pidbox_patterns {
            ok &= sink.psubscribe(p).await.is_ok();
        }
        let channels: Vec<String> = b
            .waits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        for ch in &channels {
            ok &= sink.subscribe(ch).await.is_ok();
        }
        if !ok {
            drop(b);
            tokio::time::sleep(backoff).await;
            continue;
        }
        *b.sink.lock().await = Some(sink);
        // Anything stored while the subscriber was down: wake every waiter
        // so it reads the key again.
        for ch in &channels {
            b.ring(ch);
        }
        let _ = b.load_revoked().await;
        backoff = Duration::from_millis(100);
        if let Some(r) = ready.take() {
            let _ = r.send(());
        }
        drop(b);
        while let Some(msg) = stream.next().await {
            let Some(b) = me.upgrade() else { return };
            let ch = msg.get_channel_name().to_string();
            if msg.from_pattern() {
                b.on_pidbox(msg.get_payload_bytes());
            } else {
                b.ring(&ch);
            }
        }
        let Some(b) = me.upgrade() else { return };
        *b.sink.lock().await = None;
    }
}

impl CeleryBroker {
    /// Registers a waiter on `channel`, subscribing on first use.
    pub(super) async fn watch(&self, channel: &str) -> Arc<Notify> {
        let (bell, first) = {
            let mut w = self.waits.lock().unwrap_or_else(|e| e.into_inner());
            let e = w
                .entry(channel.to_string())
                .or_insert_with(|| (0, Arc::new(Notify::new())));
            e.0 += 1;
            (e.1.clone(), e.0 == 1)
        };
        if first && let Some(s) = self.sink.lock().await.as_mut() {
            let _ = s.subscribe(channel).await;
        }
        bell
    }

    pub(super) async fn unwatch(&self, channel: &str) {
        let last = {
            let mut w = self.waits.lock().unwrap_or_else(|e| e.into_inner());
            match w.get_mut(channel) {
                Some(e) if e.0 > 1 => {
                    e.0 -= 1;
                    false
                }
                Some(_) => {
                    w.remove(channel);
                    true
                }
                None => false,
            }
        };
        if last && let Some(s) = self.sink.lock().await.as_mut() {
            let _ = s.unsubscribe(channel).await;
        }
    }

    pub(super) fn ring(&self, channel: &str) {
        let bell = self
            .waits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(channel)
            .map(|e| e.1.clone());
        if let Some(b) = bell {
            b.notify_waiters();
        }
    }
}
