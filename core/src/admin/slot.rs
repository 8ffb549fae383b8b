//! A live stream as a host hands it out: one `next()` at a time, and a
//! `close()` that ends it whether or not a `next()` is waiting. The rules
//! each binding's stream object keeps, so both keep the same ones.
//!
//! A `close()` also wakes a `next()` waiting for its tick, so a host whose
//! waits cannot be cancelled from outside (Node's, answered through a
//! ticket) is not left holding one for a page that went away.
//!
//! Such a host names a stream by number rather than holding an object:
//! [`Streams`] keeps its open streams by number, so the same rules hold
//! there — an unknown or closed number answers the end, and a stopping
//! server closes them all (a stream never ends by itself).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

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

/// Open streams by number, each a [`StreamSlot`].
pub struct Streams<S> {
    open: Mutex<HashMap<u32, Arc<StreamSlot<S>>>>,
    last: AtomicU32,
}

impl<S> Default for Streams<S> {
    fn default() -> Self {
        Streams {
            open: Mutex::new(HashMap::new()),
            last: AtomicU32::new(0),
        }
    }
}

impl<S> Streams<S> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Arc<StreamSlot<S>>>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `stream` open: its number.
    pub fn open(&self, stream: S) -> u32 {
        let id = self.last.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        self.lock().insert(id, Arc::new(StreamSlot::new(stream)));
        id
    }

    /// Closes stream `id` and ends a `next()` waiting on it. Idempotent.
    pub fn close(&self, id: u32) {
        let slot = self.lock().remove(&id);
        if let Some(slot) = slot {
            slot.close();
        }
    }

    /// Closes every open stream.
    pub fn close_all(&self) {
        let all = std::mem::take(&mut *self.lock());
        all.into_values().for_each(|slot| slot.close());
    }

    /// How many are open.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Streams<EventStream> {
    /// Stream `id`'s next frame ([`StreamSlot::next`]); the end (`Ok(None)`)
    /// for a number that names no open stream.
    pub fn next(
        &self,
        id: u32,
    ) -> impl Future<Output = Result<Option<Vec<u8>>, &'static str>> + Send + 'static {
        let slot = self.lock().get(&id).cloned();
        async move {
            match slot {
                Some(slot) => slot.next().await,
                None => Ok(None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_by_number_closed_one_or_all() {
        let s = Streams::default();
        let (a, b) = (s.open(1), s.open(2));
        assert_ne!(a, b);
        assert_eq!(s.len(), 2);
        let slot = s.lock().get(&a).cloned().unwrap();
        s.close(a);
        s.close(a);
        assert!(slot.closed());
        assert_eq!(s.len(), 1);
        let other = s.lock().get(&b).cloned().unwrap();
        s.close_all();
        assert!(other.closed());
        assert!(s.is_empty());
    }

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
