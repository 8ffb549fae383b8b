//! A sliding window counter: at most `allow` events in any `window`-long
//! stretch, exactly.
//!
//! Where a bucket smooths, a window counts. "A thousand a day" is a window, not
//! a rate: answered with a bucket, a client could spend the whole day in the
//! first minute. The stamps of the events inside the window are kept,
//! oldest first, in a ring buffer — 8 bytes a stamp, O(1) amortised per take —
//! so the count is exact rather than the two-bucket approximation most
//! limiters (nginx, Cloudflare) give.

use std::collections::VecDeque;

use super::Nanos;
use super::error::{Invalid, span};

/// At most `allow` events in any `window`-long stretch.
#[derive(Debug, Clone)]
pub struct Window {
    allow: usize,
    window: Nanos,
    stamps: VecDeque<Nanos>,
}

impl Window {
    /// An empty window. Refused: a negative `allow`, a `window` that is not
    /// positive. The ring grows as events arrive, never past `allow` stamps.
    pub fn new(allow: i64, window: Nanos) -> Result<Window, Invalid> {
        if allow < 0 {
            return Err(Invalid::new("allow", "must not be negative"));
        }
        span("window", window)?;
        if window == 0 {
            return Err(Invalid::new("window", "must be positive"));
        }
        let allow = usize::try_from(allow).map_err(|_| Invalid::new("allow", "too large"))?;
        Ok(Window {
            allow,
            window,
            stamps: VecDeque::with_capacity(allow.min(1024)),
        })
    }

    /// The most events in any window.
    pub fn allow(&self) -> i64 {
        self.allow as i64
    }

    /// The window's length.
    pub fn span(&self) -> Nanos {
        self.window
    }

    /// Stamps at or before this have fallen out of the window at `now`.
    #[inline]
    fn horizon(&self, now: Nanos) -> Nanos {
        now.saturating_sub(self.window)
    }

    /// How many of the kept stamps are still inside the window at `now`.
    #[inline]
    fn inside(&self, now: Nanos) -> usize {
        let h = self.horizon(now);
        self.stamps.len() - self.stamps.partition_point(|&s| s <= h)
    }

    /// Whether an event is within the quota now, counting it if it is. A
    /// stamp earlier than the newest kept one is recorded at the newest, so
    /// the ring stays ordered when a clock runs backwards.
    #[inline]
    pub fn take(&mut self, now: Nanos) -> bool {
        let h = self.horizon(now);
        while let Some(&front) = self.stamps.front() {
            if front <= h {
                self.stamps.pop_front();
            } else {
                break;
            }
        }
        if self.stamps.len() >= self.allow {
            return false;
        }
        let stamp = match self.stamps.back() {
            Some(&last) if last > now => last,
            _ => now,
        };
        self.stamps.push_back(stamp);
        true
    }

    /// How many events remain in the window now.
    pub fn left(&self, now: Nanos) -> i64 {
        (self.allow - self.inside(now).min(self.allow)) as i64
    }

    /// How long until there is room: 0 when there is, else until the oldest
    /// event inside falls out (`i64::MAX` when `allow` is 0).
    pub fn next(&self, now: Nanos) -> Nanos {
        if self.inside(now) < self.allow {
            return 0;
        }
        if self.allow == 0 {
            return i64::MAX;
        }
        let h = self.horizon(now);
        let first = self.stamps.partition_point(|&s| s <= h);
        // The oldest stamp inside leaves at stamp + window.
        let oldest = self.stamps[first + self.inside(now) - self.allow];
        oldest.saturating_add(self.window).saturating_sub(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::SECOND;

    #[test]
    fn exact_count() {
        let mut w = Window::new(3, 10 * SECOND).unwrap();
        assert!(w.take(0));
        assert!(w.take(SECOND));
        assert!(w.take(2 * SECOND));
        assert!(!w.take(3 * SECOND));
        assert_eq!(w.left(3 * SECOND), 0);
        assert_eq!(w.next(3 * SECOND), 7 * SECOND);
        // At exactly 10 s the first event has left.
        assert_eq!(w.left(10 * SECOND), 1);
        assert_eq!(w.next(10 * SECOND), 0);
        assert!(w.take(10 * SECOND));
        assert!(!w.take(10 * SECOND));
        assert_eq!(w.next(10 * SECOND), SECOND);
    }

    #[test]
    fn zero_allow() {
        let mut w = Window::new(0, SECOND).unwrap();
        assert!(!w.take(0));
        assert_eq!(w.left(0), 0);
        assert_eq!(w.next(0), i64::MAX);
    }

    #[test]
    fn backwards_clock_keeps_order() {
        let mut w = Window::new(2, 10 * SECOND).unwrap();
        assert!(w.take(5 * SECOND));
        assert!(w.take(SECOND));
        assert!(!w.take(SECOND));
        assert_eq!(w.left(16 * SECOND), 2);
    }

    #[test]
    fn refuses_bad_args() {
        assert_eq!(Window::new(-1, SECOND).unwrap_err().arg, "allow");
        assert_eq!(Window::new(1, 0).unwrap_err().arg, "window");
        assert_eq!(Window::new(1, -1).unwrap_err().arg, "window");
    }
}
