//! A live stream as a host hands it out: one `next()` at a time, and a
//! `close()` that ends it whether or not a `next()` is waiting. The rules
//! each binding's stream object keeps, so both keep the same ones.
//!
//! A `close()` also wakes a `next()` waiting for its tick, so a host whose
//! waits cannot be cancelled from outside (Node's, answered through a
//! ticket) is not left holding one for a page that went away.

use std::sync::Mutex;

use futures_util::future::{Either, select};
use tokio::sync::Notify;

use super::EventStream;

/// Why a `next()` is refused while another holds the stream (a binding
/// prefixes its own name).
pub const NEXT_BUSY: &str = "the previous next() has not finished";

/// A stream lent to one `next()` at a time, closed for good by `close()`.
pub struct StreamSlot<S> {
    /// The stream when no `next()` holds it, and whether it is closed.
    inner: Mutex<(Option<S>, bool)>,
    /// Rung by `close()`, for the `next()` waiting.
    wake: Notify,
}

impl<S> StreamSlot<S> {
    pub fn new(stream: S) -> Self {
        StreamSlot {
            inner: Mutex::new((Some(stream), false)),
            wake: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Option<S>, bool)> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The stream for one `next()`: `Ok(None)` once closed (the `next()`
    /// answers the end), [`NEXT_BUSY`] while another `next()` holds it.
    pub fn take(&self) -> Result<Option<S>, &'static str> {
        let mut s = self.lock();
        match s.0.take() {
            _ if s.1 => Ok(None),
            Some(st) => Ok(Some(st)),
            None => Err(NEXT_BUSY),
        }
    }

    /// Gives the stream back once its `next()` has its frame: `false` when
    /// it was closed meanwhile — the stream is dropped, and that `next()`
    /// answers the end instead of its frame.
    pub fn give(&self, stream: S) -> bool {
        let mut s = self.lock();
        if s.1 {
            drop(s);
            drop(stream);
            return false;
        }
        s.0 = Some(stream);
        true
    }

    /// Closes it for good; a stream no `next()` holds is dropped now.
    pub fn close(&self) {
        let taken = {
            let mut s = self.lock();
            s.1 = true;
            s.0.take()
        };
        drop(taken);
        // A permit kept when no `next()` waits yet: one that takes the
        // stream before this and waits after still ends at once.
        self.wake.notify_one();
    }

    /// Whether `close()` was called.
    pub fn closed(&self) -> bool {
        self.lock().1
    }
}

impl StreamSlot<EventStream> {
    /// The next frame: the first at once, then one per tick; `Ok(None)`
    /// once closed, also when the close comes while this waits (it ends
    /// the wait); [`NEXT_BUSY`] while another `next()` holds the stream.
    pub async fn next(&self) -> Result<Option<Vec<u8>>, &'static str> {
        let Some(mut st) = self.take()? else {
            return Ok(None);
        };
        let frame = {
            let next = std::pin::pin!(st.next());
            let woken = std::pin::pin!(self.wake.notified());
            match select(next, woken).await {
                Either::Left((f, _)) => f,
                Either::Right(_) => None,
            }
        };
        Ok(if self.give(st) { frame } else { None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_next_at_a_time() {
        let s = StreamSlot::new(7);
        assert_eq!(s.take(), Ok(Some(7)));
        assert_eq!(s.take(), Err(NEXT_BUSY));
        assert!(s.give(7));
        assert_eq!(s.take(), Ok(Some(7)));
        assert!(s.give(7));
        assert!(!s.closed());
    }

    #[test]
    fn a_close_ends_it_also_under_a_waiting_next() {
        let s = StreamSlot::new(1);
        assert_eq!(s.take(), Ok(Some(1)));
        s.close();
        assert!(s.closed());
        // The waiting next() comes back: its frame is dropped, the end answered.
        assert!(!s.give(1));
        assert_eq!(s.take(), Ok(None));
        // Closed while idle: the next next() answers the end at once.
        let idle = StreamSlot::new(2);
        idle.close();
        assert_eq!(idle.take(), Ok(None));
        assert_eq!(idle.take(), Ok(None));
    }
}
