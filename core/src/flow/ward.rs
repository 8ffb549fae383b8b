//! What stands between a pool and a backend that is failing.
//!
//! A pool that answers `Make` for every take while the backend refuses every
//! connection turns one outage into a storm of connection attempts. The ward
//! has two optional parts, each answering a different question:
//! - a [`Breaker`] answers *what share* of makes to refuse (`Shed`), learning
//!   from the makes that succeed and fail;
//! - a [`Backoff`] answers *how long* to hold makes after a failure (`Later`),
//!   growing with each failure in a row and reset by a success.

use super::{Backoff, Breaker, Nanos};

/// A breaker and a backoff in front of making; both optional.
#[derive(Debug, Clone, Default)]
pub struct Ward {
    breaker: Option<Breaker>,
    backoff: Option<Backoff>,
    /// Failed makes in a row.
    failures: i32,
    /// Makes are held until this instant (meaningful when `failures > 0`).
    until: Nanos,
    /// The last hold's length, which a decorrelated backoff grows from.
    previous: Nanos,
}

/// What the ward says about a take that would make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Go,
    Later(Nanos),
    Shed,
}

impl Ward {
    /// A ward with the parts given.
    pub fn new(breaker: Option<Breaker>, backoff: Option<Backoff>) -> Ward {
        Ward {
            breaker,
            backoff,
            failures: 0,
            until: 0,
            previous: 0,
        }
    }

    /// The breaker, if any.
    pub fn breaker(&self) -> Option<&Breaker> {
        self.breaker.as_ref()
    }

    /// The backoff, if any.
    pub fn backoff(&self) -> Option<&Backoff> {
        self.backoff.as_ref()
    }

    /// Failed makes in a row.
    pub fn failures(&self) -> i32 {
        self.failures
    }

    /// The breaker's refusal now (0 without one).
    pub fn refusal(&self, now: Nanos) -> f64 {
        self.breaker.as_ref().map_or(0.0, |b| b.refusal(now))
    }

    /// A take would make: hold it, shed it, or let it go. A held take is not a
    /// request (it asks nothing of the backend); a shed one is.
    pub(crate) fn ask(&mut self, now: Nanos, roll: f64) -> Verdict {
        if self.failures > 0 && self.backoff.is_some() && now < self.until {
            return Verdict::Later(self.until - now);
        }
        if let Some(b) = &mut self.breaker
            && !b.ask(now, roll)
        {
            return Verdict::Shed;
        }
        Verdict::Go
    }

    /// A make succeeded: an accept for the breaker, and the hold is over.
    pub(crate) fn made(&mut self, now: Nanos) {
        if let Some(b) = &mut self.breaker {
            b.accept(now);
        }
        self.failures = 0;
        self.previous = 0;
    }

    /// A make failed: the next is held for `backoff.delay(failures, roll)`
    /// from now. Neither a request nor an accept for the breaker: the request
    /// was counted when the take said `Make`.
    pub(crate) fn unmade(&mut self, now: Nanos, roll: f64) {
        self.failures = self.failures.saturating_add(1);
        if let Some(b) = &self.backoff {
            let d = b.delay(self.failures, roll, self.previous);
            self.previous = d;
            self.until = now.saturating_add(d);
        }
    }
}
