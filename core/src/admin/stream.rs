//! The live stream: server-sent events of counts and queue lengths.
//!
//! A frame goes out at once and then every [`TICK`] of real time — the app's
//! clock may be virtual, and a page wants to see movement on the wall clock.
//! Each frame is one SSE event, `event: counts`, whose data is the same JSON
//! as a snapshot (`at`, `counts`, `queues`), escaped like every other body.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::time::{Interval, MissedTickBehavior};

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

/// Frames of counts for an adapter to pump to the client.
///
/// It never ends by itself: the adapter stops calling [`EventStream::next`]
/// (and drops it) when the client goes away.
pub struct EventStream {
    inner: Arc<Inner>,
    tick: Option<Interval>,
}

impl EventStream {
    pub(crate) fn new(inner: Arc<Inner>) -> EventStream {
        EventStream { inner, tick: None }
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
        let mut frame = Vec::with_capacity(512);
        if first {
            frame.extend_from_slice(format!("retry: {RETRY_MS}\n").as_bytes());
        }
        match snapshot(&self.inner).await {
            Ok(v) => {
                frame.extend_from_slice(b"event: counts\ndata: ");
                frame.extend_from_slice(&safe_json(&v));
            }
            Err(e) => {
                frame.extend_from_slice(b"event: error\ndata: ");
                frame.extend_from_slice(&safe_json(
                    &json!({ "error": "broker", "reason": e.to_string() }),
                ));
            }
        }
        frame.extend_from_slice(b"\n\n");
        Some(frame)
    }
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream").finish_non_exhaustive()
    }
}
