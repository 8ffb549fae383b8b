//! Client-side adaptive throttling, from the Google SRE book ("Handling
//! Overload").
//!
//! A client that keeps sending to a backend that keeps refusing only adds to
//! the overload. The breaker remembers, over a sliding window, how many
//! requests it made and how many the backend accepted, and refuses locally a
//! share of new requests:
//!
//! `refusal = max(0, (requests − k·accepts) / (requests + 1))`
//!
//! With `k = 2` (the book's value) a backend accepting half of what it is asked
//! is never throttled, and one accepting nothing is asked ever more rarely but
//! never not at all — which is how the client learns it has recovered. Unlike
//! a three-state breaker there is no timer to tune and no thundering
//! half-open moment.
//!
//! The window is kept as a fixed ring of slots (120 one-second slots for the
//! book's two minutes), so counting never allocates and memory does not grow
//! with the request rate. The window is exact to one slot's width.

use super::error::{Invalid, finite, span};
use super::{Nanos, SECOND};

/// How many slots the window is cut into.
const SLOTS: usize = 120;

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// Which slot-width stretch of time this slot counts (`now / width`).
    epoch: i64,
    requests: u64,
    accepts: u64,
}

/// Client-side adaptive throttling: what share of makes to refuse locally.
#[derive(Debug, Clone)]
pub struct Breaker {
    k: f64,
    window: Nanos,
    width: Nanos,
    slots: [Slot; SLOTS],
}

impl Default for Breaker {
    /// The SRE book's values: `k = 2` over a two-minute window.
    fn default() -> Self {
        Breaker::new(2.0, 120 * SECOND).expect("defaults are valid")
    }
}

impl Breaker {
    /// A breaker with multiplier `k` over a `window`.
    ///
    /// Refused: `k` NaN, infinite or below 1 (below 1 would refuse a backend
    /// that accepts everything), a `window` that is not positive.
    pub fn new(k: f64, window: Nanos) -> Result<Breaker, Invalid> {
        finite("k", k)?;
        if k < 1.0 {
            return Err(Invalid::new("k", "must be at least 1"));
        }
        span("window", window)?;
        if window == 0 {
            return Err(Invalid::new("window", "must be positive"));
        }
        let width = (window / SLOTS as i64).max(1);
        Ok(Breaker {
            k,
            window,
            width,
            slots: [Slot {
                epoch: i64::MIN,
                requests: 0,
                accepts: 0,
            }; SLOTS],
        })
    }

    /// [`Breaker::new`] with what is not given at [`Breaker::default`]'s
    /// value: what `Breaker()` with some options means in either binding.
    pub fn given(k: Option<f64>, window: Option<Nanos>) -> Result<Breaker, Invalid> {
        let d = Breaker::default();
        Breaker::new(k.unwrap_or(d.k), window.unwrap_or(d.window))
    }

    /// The multiplier.
    pub fn k(&self) -> f64 {
        self.k
    }

    /// The window's length.
    pub fn window(&self) -> Nanos {
        self.window
    }

    fn slot(&mut self, now: Nanos) -> &mut Slot {
        let epoch = now.div_euclid(self.width);
        let i = epoch.rem_euclid(SLOTS as i64) as usize;
        let s = &mut self.slots[i];
        if s.epoch != epoch {
            *s = Slot {
                epoch,
                requests: 0,
                accepts: 0,
            };
        }
        s
    }

    fn totals(&self, now: Nanos) -> (u64, u64) {
        let epoch = now.div_euclid(self.width);
        let oldest = epoch - SLOTS as i64 + 1;
        let mut requests = 0;
        let mut accepts = 0;
        for s in &self.slots {
            if s.epoch >= oldest && s.epoch <= epoch {
                requests += s.requests;
                accepts += s.accepts;
            }
        }
        (requests, accepts)
    }

    /// The share of requests refused now, in [0, 1), without counting
    /// anything.
    pub fn refusal(&self, now: Nanos) -> f64 {
        let (requests, accepts) = self.totals(now);
        let r = requests as f64;
        ((r - self.k * accepts as f64) / (r + 1.0)).max(0.0)
    }

    /// Counts a request and answers whether it may go ahead: `false` when
    /// `roll` falls inside the refused share. A refused request counts too —
    /// that is what keeps the refusal up while the backend stays down.
    pub fn ask(&mut self, now: Nanos, roll: f64) -> bool {
        let refused = roll < self.refusal(now);
        self.slot(now).requests += 1;
        !refused
    }

    /// Counts an accept: the backend answered.
    pub fn accept(&mut self, now: Nanos) {
        self.slot(now).accepts += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knobs_not_given_are_the_defaults() {
        let b = Breaker::given(None, None).unwrap();
        assert_eq!((b.k(), b.window()), (2.0, 120 * SECOND));
        let b = Breaker::given(Some(3.0), None).unwrap();
        assert_eq!((b.k(), b.window()), (3.0, 120 * SECOND));
        assert_eq!(Breaker::given(Some(0.5), None).unwrap_err().arg, "k");
    }

    #[test]
    fn fresh_refuses_nothing() {
        let b = Breaker::default();
        assert_eq!(b.refusal(0), 0.0);
        assert_eq!(b.k(), 2.0);
        assert_eq!(b.window(), 120 * SECOND);
    }

    #[test]
    fn refusal_follows_the_formula() {
        let mut b = Breaker::default();
        for i in 0..8 {
            assert!(b.ask(i, 0.99));
        }
        assert!((b.refusal(10) - 8.0 / 9.0).abs() < 1e-12);
        b.accept(10);
        assert!((b.refusal(10) - 6.0 / 9.0).abs() < 1e-12);
        for _ in 0..3 {
            b.accept(10);
        }
        assert_eq!(b.refusal(10), 0.0);
    }

    #[test]
    fn refused_requests_count() {
        let mut b = Breaker::default();
        b.ask(0, 0.5);
        // refusal 0.5 now; a roll below it is refused and still counted.
        assert!(!b.ask(0, 0.1));
        assert!((b.refusal(0) - 2.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn window_forgets() {
        let mut b = Breaker::default();
        for _ in 0..10 {
            b.ask(0, 0.99);
        }
        assert!(b.refusal(119 * SECOND) > 0.9);
        assert_eq!(b.refusal(121 * SECOND), 0.0);
        // Counting long after reuses the slot.
        b.ask(240 * SECOND, 0.99);
        assert!((b.refusal(240 * SECOND) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn negative_time_works() {
        let mut b = Breaker::default();
        b.ask(-5 * SECOND, 0.99);
        assert!((b.refusal(-5 * SECOND) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn refuses_bad_knobs() {
        assert_eq!(Breaker::new(f64::NAN, SECOND).unwrap_err().arg, "k");
        assert_eq!(Breaker::new(0.5, SECOND).unwrap_err().arg, "k");
        assert_eq!(Breaker::new(2.0, 0).unwrap_err().arg, "window");
        assert_eq!(Breaker::new(2.0, -1).unwrap_err().arg, "window");
    }
}
