//! One pub/sub connection for many waiters (see the parent module).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::PubSubSink;
use redis::{Client, RedisError};
use tokio::sync::Notify;

use super::conn_error;
use super::dial::Dialer;
use crate::broker::error;
use crate::broker::redis::RedisUrl;
use crate::task::state::Refused;

/// Called with a channel and its message, for a pattern subscription.
pub type Handler = Arc<dyn Fn(&str, &[u8]) + Send + Sync>;

/// Reads what a waited-for channel's message carries (`None`: a wake-up
/// only, the waiter looks for itself).
pub type Decode<T> = Box<dyn Fn(&[u8]) -> Option<T> + Send + Sync>;

struct Sub<T> {
    count: usize,
    notify: Arc<Notify>,
    /// What a message carried (see [`Decode`]).
    got: Option<T>,
    /// The pub/sub connection it is subscribed on (0: none).
    on: u64,
}

/// Waiters on pub/sub channels, over one pub/sub connection.
pub struct Waiters<T> {
    me: Weak<Waiters<T>>,
    dialer: Arc<Dialer>,
    url: RedisUrl,
    decode: Decode<T>,
    subs: Mutex<HashMap<String, Sub<T>>>,
    /// Standing pattern subscriptions, made again on every connection.
    patterns: Mutex<Vec<(String, Handler)>>,
    /// The live pub/sub connection's writing half and its number.
    sink: tokio::sync::Mutex<Option<(u64, PubSubSink)>>,
    epoch: AtomicU64,
    rt: tokio::runtime::Handle,
}

/// One waiter's place on a channel: leaves it when dropped, however the
/// wait ends (the last one out unsubscribes).
pub struct Waiting<'a, T: Clone + Send + 'static> {
    waiters: &'a Waiters<T>,
    ch: String,
    notify: Arc<Notify>,
}

impl<T: Clone + Send + 'static> Waiting<'_, T> {
    /// Notified on every message on the channel and when the connection
    /// goes away.
    pub fn notify(&self) -> &Arc<Notify> {
        &self.notify
    }
}

impl<T: Clone + Send + 'static> Drop for Waiting<'_, T> {
    fn drop(&mut self) {
        let last = {
            let mut g = self.waiters.lock();
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
        if last && let Some(w) = self.waiters.me.upgrade() {
            let ch = std::mem::take(&mut self.ch);
            self.waiters.rt.spawn(async move {
                let mut sink = w.sink.lock().await;
                // Still nobody waiting: unsubscribe (under the sink lock, so
                // it cannot overtake a new waiter's subscribe).
                if !w.lock().contains_key(&ch)
                    && let Some((_, s)) = sink.as_mut()
                {
                    let _ = s.unsubscribe(&ch).await;
                }
            });
        }
    }
}

impl<T: Clone + Send + 'static> Waiters<T> {
    /// Waiters on `client`'s Redis. Must be called inside a tokio runtime,
    /// which runs the connection's reader.
    pub fn new(client: Client, url: RedisUrl, decode: Decode<T>) -> Arc<Waiters<T>> {
        let dialer = Arc::new(Dialer::direct(client, url.clone()));
        Waiters::with_dialer(dialer, url, decode)
    }

    /// Waiters on the Redis `dialer` reaches (with Sentinel, the primary
    /// named when a connection is made).
    pub fn with_dialer(dialer: Arc<Dialer>, url: RedisUrl, decode: Decode<T>) -> Arc<Waiters<T>> {
        Arc::new_cyclic(|me| Waiters {
            me: me.clone(),
            dialer,
            url,
            decode,
            subs: Mutex::new(HashMap::new()),
            patterns: Mutex::new(Vec::new()),
            sink: tokio::sync::Mutex::new(None),
            epoch: AtomicU64::new(0),
            rt: tokio::runtime::Handle::current(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Sub<T>>> {
        self.subs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn refused(&self, e: &RedisError) -> Refused {
        error::refused(
            e,
            format!("{}: {}", self.url, self.url.scrub(&e.to_string())),
        )
    }

    /// Joins `ch`'s waiters (subscribe with [`Waiters::subscribe`]).
    pub fn join(&self, ch: &str) -> Waiting<'_, T> {
        let mut g = self.lock();
        let e = g.entry(ch.to_string()).or_insert_with(|| Sub {
            count: 0,
            notify: Arc::new(Notify::new()),
            got: None,
            on: 0,
        });
        e.count += 1;
        Waiting {
            waiters: self,
            ch: ch.to_string(),
            notify: e.notify.clone(),
        }
    }

    /// The number of the current (or last) pub/sub connection: it changes
    /// when a new one is made, so a caller can tell what it may have missed.
    pub fn connection(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// What a message on `ch` carried, if one did.
    pub fn got(&self, ch: &str) -> Option<T> {
        self.lock().get(ch).and_then(|s| s.got.clone())
    }

    /// The connection `ch` is subscribed on (0: none). A value that did
    /// not change across a look means the look came after the subscribe.
    pub fn on(&self, ch: &str) -> u64 {
        self.lock().get(ch).map_or(0, |s| s.on)
    }

    fn wake_all(&self) {
        for s in self.lock().values() {
            s.notify.notify_waiters();
        }
    }

    /// The live connection, made (with its reader, and the standing
    /// patterns subscribed) when there is none.
    async fn ensure<'g>(
        &self,
        sink: &'g mut Option<(u64, PubSubSink)>,
    ) -> Result<&'g mut (u64, PubSubSink), Refused> {
        if sink.is_none() {
            let ps = self.dialer.pubsub().await.map_err(|e| self.refused(&e))?;
            let (mut s, stream) = ps.split();
            let patterns: Vec<String> = self.patterns().iter().map(|(p, _)| p.clone()).collect();
            for p in &patterns {
                match s.psubscribe(p).await {
                    Ok(()) => {}
                    Err(e) if conn_error(&e) => return Err(self.refused(&e)),
                    // Refused by Redis (an ACL without it): the other
                    // patterns and every waiter still work; said once per
                    // connection.
                    Err(e) => crate::log::warn(
                        "headway.redis",
                        format_args!(
                            "headway: {}; the pattern {p:?} is not heard",
                            self.refused(&e)
                        ),
                    ),
                }
            }
            let epoch = self.epoch.fetch_add(1, Ordering::SeqCst) + 1;
            *sink = Some((epoch, s));
            self.rt.spawn(read(self.me.clone(), stream, epoch));
        }
        Ok(sink.as_mut().expect("just made"))
    }

    fn patterns(&self) -> MutexGuard<'_, Vec<(String, Handler)>> {
        self.patterns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Subscribes `ch` on the live connection unless it already is.
    pub async fn subscribe(&self, ch: &str) -> Result<(), Refused> {
        let mut sink = self.sink.lock().await;
        let (epoch, s) = self.ensure(&mut sink).await?;
        if self.on(ch) != *epoch {
            s.subscribe(ch).await.map_err(|e| self.refused(&e))?;
            if let Some(e) = self.lock().get_mut(ch) {
                e.on = *epoch;
            }
        }
        Ok(())
    }

    /// Subscribes `pattern` for good: `handler` gets every message on a
    /// matching channel, on this connection and every one after it (a lost
    /// connection is made again in the background while a pattern stands).
    /// Refused when Redis cannot be reached now; the pattern still stands
    /// and is subscribed as soon as Redis is back.
    pub async fn psubscribe(&self, pattern: &str, handler: Handler) -> Result<(), Refused> {
        let mut sink = self.sink.lock().await;
        let fresh = sink.is_none();
        self.patterns().push((pattern.to_string(), handler));
        // A new connection subscribes every standing pattern itself.
        let (_, s) = match self.ensure(&mut sink).await {
            Ok(s) => s,
            Err(e) => {
                self.rt.spawn(reconnect(self.me.clone()));
                return Err(e);
            }
        };
        if !fresh {
            s.psubscribe(pattern).await.map_err(|e| self.refused(&e))?;
        }
        Ok(())
    }
}

/// After a lost connection: makes a new one while patterns stand and the
/// waiters are kept, waiting 50 ms doubling to 1 s between attempts.
///
/// Boxed: it and the reader spawn each other, so its type is spelled out.
fn reconnect<T: Clone + Send + 'static>(
    weak: Weak<Waiters<T>>,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        let mut wait = Duration::from_millis(50);
        loop {
            let Some(w) = weak.upgrade() else { return };
            if w.patterns().is_empty() {
                return;
            }
            let mut sink = w.sink.lock().await;
            if sink.is_some() || w.ensure(&mut sink).await.is_ok() {
                return;
            }
            drop(sink);
            drop(w);
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(1));
        }
    })
}

/// Reads connection `epoch`'s messages until it goes away, then wakes
/// every waiter to subscribe on a new one (and makes one for the patterns).
async fn read<T: Clone + Send + 'static>(
    weak: Weak<Waiters<T>>,
    mut stream: redis::aio::PubSubStream,
    epoch: u64,
) {
    while let Some(msg) = stream.next().await {
        let Some(w) = weak.upgrade() else { return };
        let ch = msg.get_channel_name();
        if msg.from_pattern() {
            let pattern: String = msg.get_pattern().unwrap_or_default();
            let handlers: Vec<Handler> = w
                .patterns()
                .iter()
                .filter(|(p, _)| *p == pattern)
                .map(|(_, h)| h.clone())
                .collect();
            for h in handlers {
                h(ch, msg.get_payload_bytes());
            }
            continue;
        }
        let got = (w.decode)(msg.get_payload_bytes());
        if let Some(s) = w.lock().get_mut(ch) {
            if got.is_some() {
                s.got = got;
            }
            s.notify.notify_waiters();
        }
    }
    if let Some(w) = weak.upgrade() {
        let mut sink = w.sink.lock().await;
        if sink.as_ref().is_some_and(|(g, _)| *g == epoch) {
            *sink = None;
        }
        drop(sink);
        w.wake_all();
        if !w.patterns().is_empty() {
            w.rt.spawn(reconnect(weak));
        }
    }
}
