//! The retry loop, without the sleeping.
//!
//! Every `@retry` is the same loop: call, and on a failure decide whether to
//! go on and how long to sleep first. The decision was written in each
//! binding, so the count of attempts, which delay the first retry draws and
//! what `previous` a decorrelated jitter reads could drift between them.
//! [`Attempts`] holds that loop's state; the driver calls, catches, reports
//! the failure with what only it can know (whether the error is one worth
//! retrying, whether the caller stopped it, a random draw), and does what
//! the answer says.

use super::{Backoff, Nanos};

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Sleep this span, then call again.
    Sleep(Nanos),
    /// Call again at once (the backoff drew no delay).
    Retry,
    /// Give up: raise the error this attempt failed with.
    Fail,
}

/// Why a failure ended the loop (for a driver that reports it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The error is not one the policy retries.
    NotRetried,
    /// The caller stopped the loop (an abort signal, a shutdown).
    Stopped,
    /// The backoff allows no more attempts.
    Exhausted,
}

/// One call's run of attempts under a [`Backoff`].
#[derive(Debug, Clone)]
pub struct Attempts {
    backoff: Backoff,
    made: i32,
    previous: Nanos,
    stop: Option<Stop>,
}

impl Attempts {
    /// A run that has made `made` attempts (usually 0; 1 for a driver that
    /// made the first call on its own fast path before asking).
    pub fn new(backoff: Backoff, made: i32) -> Attempts {
        Attempts {
            backoff,
            made: made.max(0),
            previous: 0,
            stop: None,
        }
    }

    /// A run picked up where a driver that keeps only numbers left it: `made`
    /// attempts, the last delay `previous` (0: none yet).
    pub fn resume(backoff: Backoff, made: i32, previous: Nanos) -> Attempts {
        Attempts {
            previous: previous.max(0),
            ..Attempts::new(backoff, made)
        }
    }

    /// The last delay answered (0: none yet).
    pub fn previous(&self) -> Nanos {
        self.previous
    }

    /// How many attempts have been made (the one being reported included).
    pub fn made(&self) -> i32 {
        self.made
    }

    /// The next attempt's number, the first being 1: what a driver passes to
    /// a function that wants to know.
    pub fn attempt(&self) -> i32 {
        self.made + 1
    }

    /// Why the run stopped, once `failed` answered `Fail`.
    pub fn stop(&self) -> Option<Stop> {
        self.stop
    }

    /// The attempt failed. `retryable`: the error is one the policy retries.
    /// `stopped`: the caller wants no more. `u`: a draw in [0, 1) for the
    /// jitter.
    pub fn failed(&mut self, retryable: bool, stopped: bool, u: f64) -> Next {
        self.made = self.made.saturating_add(1);
        let stop = if stopped {
            Some(Stop::Stopped)
        } else if !retryable {
            Some(Stop::NotRetried)
        } else if !self.backoff.more(self.made) {
            Some(Stop::Exhausted)
        } else {
            None
        };
        if let Some(s) = stop {
            self.stop = Some(s);
            return Next::Fail;
        }
        self.previous = self.backoff.delay(self.made, u, self.previous);
        if self.previous > 0 {
            Next::Sleep(self.previous)
        } else {
            Next::Retry
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::{Jitter, MILLI, SECOND};

    #[test]
    fn three_attempts_two_sleeps() {
        let b = Backoff::new(100 * MILLI, 2.0, SECOND, 3, Jitter::Rigid).unwrap();
        let mut a = Attempts::new(b, 0);
        assert_eq!(a.attempt(), 1);
        assert_eq!(a.failed(true, false, 0.5), Next::Sleep(100 * MILLI));
        assert_eq!(a.failed(true, false, 0.5), Next::Sleep(200 * MILLI));
        assert_eq!(a.failed(true, false, 0.5), Next::Fail);
        assert_eq!(a.stop(), Some(Stop::Exhausted));
        assert_eq!(a.made(), 3);
    }

    #[test]
    fn not_retried_and_stopped_fail_at_once() {
        let mut a = Attempts::new(Backoff::default(), 0);
        assert_eq!(a.failed(false, false, 0.5), Next::Fail);
        assert_eq!(a.stop(), Some(Stop::NotRetried));
        let mut a = Attempts::new(Backoff::default(), 0);
        assert_eq!(a.failed(true, true, 0.5), Next::Fail);
        assert_eq!(a.stop(), Some(Stop::Stopped));
    }

    #[test]
    fn zero_draw_retries_at_once() {
        let mut a = Attempts::new(Backoff::default(), 0);
        assert_eq!(a.failed(true, false, 0.0), Next::Retry);
    }
}
