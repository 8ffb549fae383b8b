//! A token bucket: whether a request is within a rate, and how long until it
//! would be.
//!
//! The rate limiter that allows a burst after a quiet period, which is what a
//! limit on a human-facing API wants: nobody should be refused for making two
//! requests in the same second after an hour of making none. Tokens are
//! computed lazily from the time passed in; nothing ticks.

use super::error::{Invalid, finite};
use super::{Nanos, SECOND, nanos};

/// `rate` tokens accrue per second up to `burst`; each request takes some.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    /// Tokens per nanosecond.
    per_ns: f64,
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Nanos,
}

impl Bucket {
    /// A bucket that starts full at `at`, which is what lets the first burst
    /// through.
    ///
    /// `rate` is tokens per second; `burst` the most it holds, `None` meaning
    /// the rate when the rate is above 1, else 1 (one second's worth). A burst
    /// below one would let nothing pass, so it is raised to one. Refused: a
    /// rate or burst that is NaN, infinite or negative.
    pub fn new(rate: f64, burst: Option<f64>, at: Nanos) -> Result<Bucket, Invalid> {
        finite("rate", rate)?;
        if rate < 0.0 {
            return Err(Invalid::new("rate", "must not be negative"));
        }
        let burst = match burst {
            Some(b) => {
                finite("burst", b)?;
                if b < 0.0 {
                    return Err(Invalid::new("burst", "must not be negative"));
                }
                b.max(1.0)
            }
            None => rate.max(1.0),
        };
        Ok(Bucket {
            per_ns: rate / SECOND as f64,
            rate,
            burst,
            tokens: burst,
            at,
        })
    }

    /// Tokens per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The most it holds.
    pub fn burst(&self) -> f64 {
        self.burst
    }

    #[inline]
    fn level(&self, now: Nanos) -> f64 {
        if now <= self.at {
            return self.tokens;
        }
        let grown = self.tokens + (now - self.at) as f64 * self.per_ns;
        if grown > self.burst {
            self.burst
        } else {
            grown
        }
    }

    /// Refuses a token count that is NaN, infinite or negative: taking a
    /// negative count would add tokens past the burst. The bindings call this
    /// before `take`/`next` to raise a typed error; `take` and `next`
    /// themselves answer "no" and "never" for such a count.
    #[inline]
    pub fn check(n: f64) -> Result<f64, Invalid> {
        if n.is_finite() && n >= 0.0 {
            Ok(n)
        } else {
            Err(Invalid::new(
                "n",
                "must be a finite number of tokens, not negative",
            ))
        }
    }

    /// Whether `n` tokens are available now, taking them if they are. Time
    /// that runs backwards adds nothing; an invalid `n` (see
    /// [`Bucket::check`]) is never taken.
    #[inline]
    pub fn take(&mut self, now: Nanos, n: f64) -> bool {
        if !(n >= 0.0 && n.is_finite()) {
            return false;
        }
        let level = self.level(now);
        if now > self.at {
            self.tokens = level;
            self.at = now;
        }
        if level >= n {
            self.tokens = level - n;
            true
        } else {
            false
        }
    }

    /// How long until `n` tokens would be available, without taking them: 0
    /// when they are there now, `i64::MAX` when they never will be (more than
    /// the burst, or a zero rate). What a caller sleeps rather than spinning,
    /// and what a `Retry-After` is computed from.
    pub fn next(&self, now: Nanos, n: f64) -> Nanos {
        if !(n >= 0.0 && n.is_finite()) {
            return i64::MAX;
        }
        let level = self.level(now);
        if level >= n {
            return 0;
        }
        if n > self.burst || self.per_ns <= 0.0 {
            return i64::MAX;
        }
        // Round up so that sleeping exactly this long is enough.
        nanos(((n - level) / self.per_ns).ceil())
    }

    /// One round of a driver's `wait(n)`: take `n` tokens now (`Ok(None)`),
    /// or the span to sleep before asking again (`Ok(Some(span))`: what
    /// [`Bucket::next`] answers, so never a guess). Refused: a count that can
    /// never be taken — more than the burst, or a zero rate — since waiting
    /// would be for ever, and an invalid count (see [`Bucket::check`]).
    pub fn wait(&mut self, now: Nanos, n: f64) -> Result<Option<Nanos>, Invalid> {
        let n = Bucket::check(n)?;
        if self.take(now, n) {
            return Ok(None);
        }
        match self.next(now, n) {
            i64::MAX => Err(Invalid::new(
                "n",
                "can never be taken: more than the burst or a zero rate, so the tokens never come",
            )),
            // Below one nanosecond's worth after rounding: ask again at once.
            span => Ok(Some(span.max(1))),
        }
    }

    /// How many tokens are there now, for a caller that reports its headroom.
    pub fn tokens(&self, now: Nanos) -> f64 {
        self.level(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::MILLI;

    #[test]
    fn wait_takes_or_answers_the_sleep() {
        let mut b = Bucket::new(10.0, Some(1.0), 0).unwrap();
        assert_eq!(b.wait(0, 1.0), Ok(None));
        assert_eq!(b.wait(0, 1.0), Ok(Some(100 * MILLI)));
        assert_eq!(b.wait(100 * MILLI, 1.0), Ok(None));
        assert_eq!(b.wait(0, 2.0).unwrap_err().arg, "n");
        assert!(b.wait(0, 2.0).unwrap_err().why.contains("never"));
        assert_eq!(b.wait(0, -1.0).unwrap_err().arg, "n");
        let mut z = Bucket::new(0.0, Some(1.0), 0).unwrap();
        assert_eq!(z.wait(0, 1.0), Ok(None));
        assert!(z.wait(0, 1.0).is_err(), "a zero rate never refills");
    }

    #[test]
    fn starts_full_and_refills() {
        let mut b = Bucket::new(10.0, Some(2.0), 0).unwrap();
        assert!(b.take(0, 1.0));
        assert!(b.take(0, 1.0));
        assert!(!b.take(0, 1.0));
        assert_eq!(b.next(0, 1.0), 100 * MILLI);
        assert!(!b.take(99 * MILLI, 1.0));
        assert!(b.take(100 * MILLI, 1.0));
        assert!((b.tokens(10 * SECOND) - 2.0).abs() < 1e-9);
    }

    #[test]
    fn burst_defaults() {
        assert_eq!(Bucket::new(100.0, None, 0).unwrap().burst(), 100.0);
        assert_eq!(Bucket::new(0.5, None, 0).unwrap().burst(), 1.0);
        assert_eq!(Bucket::new(5.0, Some(0.2), 0).unwrap().burst(), 1.0);
    }

    #[test]
    fn never_and_backwards() {
        let mut b = Bucket::new(1.0, Some(1.0), 0).unwrap();
        assert_eq!(b.next(0, 2.0), i64::MAX);
        assert!(b.take(SECOND, 1.0));
        assert!(!b.take(0, 1.0));
        assert_eq!(b.tokens(0), 0.0);
        let z = Bucket::new(0.0, Some(1.0), 0).unwrap();
        assert_eq!(z.next(0, 1.0), 0);
        let mut z = z;
        assert!(z.take(0, 1.0));
        assert_eq!(z.next(SECOND, 1.0), i64::MAX);
    }

    #[test]
    fn next_is_enough() {
        let mut b = Bucket::new(3.0, Some(1.0), 0).unwrap();
        assert!(b.take(0, 1.0));
        let wait = b.next(0, 1.0);
        assert!(b.take(wait, 1.0));
    }

    #[test]
    fn invalid_counts_are_never_taken() {
        let mut b = Bucket::new(1.0, Some(1.0), 0).unwrap();
        assert!(!b.take(0, -5.0));
        assert!(!b.take(0, f64::NAN));
        assert_eq!(b.tokens(0), 1.0);
        assert_eq!(b.next(0, -1.0), i64::MAX);
        assert_eq!(Bucket::check(-1.0).unwrap_err().arg, "n");
        assert!(Bucket::check(f64::INFINITY).is_err());
        assert_eq!(Bucket::check(0.0), Ok(0.0));
        assert!(b.take(0, 0.0));
    }

    #[test]
    fn refuses_bad_rates() {
        assert_eq!(Bucket::new(f64::NAN, None, 0).unwrap_err().arg, "rate");
        assert_eq!(Bucket::new(-1.0, None, 0).unwrap_err().arg, "rate");
        assert_eq!(Bucket::new(f64::INFINITY, None, 0).unwrap_err().arg, "rate");
        assert_eq!(
            Bucket::new(1.0, Some(f64::NAN), 0).unwrap_err().arg,
            "burst"
        );
        assert_eq!(Bucket::new(1.0, Some(-2.0), 0).unwrap_err().arg, "burst");
    }
}
