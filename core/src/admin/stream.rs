//! The live stream: server-sent events of counts and queue lengths.
//!
//! A frame goes out at once and then every [`TICK`] of real time — the app's
//! clock may be virtual, and a page wants to see movement on the wall clock.
//! Each frame is one SSE event, `event: counts`, whose data is the same JSON
//! as a snapshot (`at`, `counts`, `queues`), escaped like every other body.
//!
//! Every open stream sends the same snapshot: the first stream whose tick
//! finds none younger than [`SHARED_FOR`] reads the broker, the others reuse
//! what it read. So the broker answers about one snapshot per tick however
//! many pages watch — where each stream used to read its own — and at most
//! [`STREAMS_MAX`] streams are open at once (past that, 503), so neither
//! Redis nor the admin's memory grows with the number of tabs left open.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::Inner;
use super::http::safe_json;
use super::reports::snapshot;

/// How often a frame goes out: 800 ms, so "at least once a second" holds
/// with room for a slow broker round trip.
pub const TICK: Duration = Duration::from_millis(800);

/// How long a browser waits before reconnecting a dropped stream (the SSE
/// `retry:` field): 2 s, twice a tick, so a restart is noticed quickly without
/// hammering a server that is down.
pub const RETRY_MS: u64 = 2000;

/// The most live streams one admin keeps open at once: 8, a handful of
/// operators each with a tab or two. One past it is answered 503 with
/// `Retry-After`, and the page's `EventSource` tries again later.
pub const STREAMS_MAX: usize = 8;

/// How long one snapshot serves every stream: half a tick, so a frame is
/// never older than that and the broker is read at most about twice a tick
/// whatever the number of streams.
pub const SHARED_FOR: Duration = Duration::from_millis(400);

/// What all of one admin's streams share: the newest frame body and how
/// many streams are open.
#[derive(Default)]
pub(crate) struct Hub {
    open: Arc<AtomicUsize>,
    last: tokio::sync::Mutex<Option<(Instant, Arc<Vec<u8>>)>>,
}

impl Hub {
    /// A place for one more stream, or `None` at [`STREAMS_MAX`].
    pub(crate) fn open(&self) -> Option<Slot> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < STREAMS_MAX).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(self.open.clone()))
    }

    /// How many streams are open.
    pub(crate) fn streams(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }
}

/// One open stream's place; freed when the stream is dropped.
pub(crate) struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The frame body (`event: …\ndata: …`) every stream sends now: the shared
/// one when it is younger than [`SHARED_FOR`], else a fresh read of the
/// broker (an error frame when it cannot answer, shared the same way, so a
/// broker that is down is not asked once per stream either).
async fn shared(inner: &Inner) -> Arc<Vec<u8>> {
    let mut last = inner.hub.last.lock().await;
    if let Some((at, body)) = last.as_ref()
        && at.elapsed() < SHARED_FOR
    {
        return body.clone();
    }
    let at = Instant::now();
    let mut body = Vec::with_capacity(512);
    match snapshot(inner).await {
        Ok(v) => {
            body.extend_from_slice(b"event: counts\ndata: ");
            body.extend_from_slice(&safe_json(&v));
        }
        Err(e) => {
            body.extend_from_slice(b"event: error\ndata: ");
            body.extend_from_slice(&safe_json(
                &json!({ "error": "broker", "reason": e.to_string() }),
            ));
        }
    }
    let body = Arc::new(body);
    *last = Some((at, body.clone()));
    body
}

/// Frames of counts for an adapter to pump to the client.
///
/// It never ends by itself: the adapter stops calling [`EventStream::next`]
/// (and drops it) when the client goes away, which frees its place.
pub struct EventStream {
    inner: Arc<Inner>,
    tick: Option<Interval>,
    _slot: Slot,
}

impl EventStream {
    pub(crate) fn new(inner: Arc<Inner>, slot: Slot) -> EventStream {
        EventStream {
            inner,
            tick: None,
            _slot: slot,
        }
    }

    /// The next frame: `event: counts\ndata: {...}\n\n`, the first at once,
    /// then one per [`TICK`]. When the broker cannot answer, an
    /// `event: error` frame says why and the stream goes on.
    pub async fn next(&mut self) -> Option<Vec<u8>> {
        let first = match &mut self.tick {
            None => {
                // Made on the first call, so the stream can be built outside a
                // runtime and its timer lives where it is polled.
                let mut t = tokio::time::interval(TICK);
                t.set_missed_tick_behavior(MissedTickBehavior::Delay);
                t.tick().await;
                self.tick = Some(t);
                true
            }
            Some(t) => {
                t.tick().await;
                false
            }
        };
        let body = shared(&self.inner).await;
        let mut frame = Vec::with_capacity(body.len() + 32);
        if first {
            frame.extend_from_slice(format!("retry: {RETRY_MS}\n").as_bytes());
        }
        frame.extend_from_slice(&body);
        frame.extend_from_slice(b"\n\n");
        Some(frame)
    }
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream").finish_non_exhaustive()
    }
}
