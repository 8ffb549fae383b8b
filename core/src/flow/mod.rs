//! Flow control, sans-I/O.
//!
//! Nothing in this module opens, closes, sleeps, locks or reads a clock. Time
//! is an `i64` count of nanoseconds from whatever clock the caller reads — only
//! differences are used, so the origin does not matter — and every random draw
//! is an `f64` in [0, 1) the caller passes in. That is what makes every
//! sequence reproducible: the same times and draws give the same answers, and
//! a test drives a pool through an hour without waiting for one.
//!
//! | piece | what it answers |
//! |---|---|
//! | [`Pool`] | which resource to hand out, whether to make another, which to let go |
//! | [`Ward`] / [`Breaker`] | whether a make should be tried at all while a backend is failing |
//! | [`pick`] | which of several pools to ask (two random choices) |
//! | [`Backoff`] | how long before the next try, and whether there should be one |
//! | [`Bucket`] | whether a request is within a rate, and how long until it would be |
//! | [`Window`] | whether it is within a quota (a thousand a day is a window, not a rate) |
//! | [`Gate`] | whether there is room right now, which has nothing to do with time |
//! | [`Acquires`] | the loop around a pool's takes: who is served next, who waits, who gives up |
//! | [`Attempts`] | the loop around a retried call: sleep, call again, or give up |
//!
//! [`millis`] reads the milliseconds and integers a host with only doubles
//! (JavaScript) passes.

mod attempts;
mod backoff;
mod breaker;
mod bucket;
mod error;
mod failed;
mod gate;
pub mod millis;
mod pick;
mod pool;
mod pooled;
mod ward;
mod window;

pub use attempts::{Attempts, Next, Stop};
pub use backoff::{Backoff, Jitter};
pub use breaker::Breaker;
pub use bucket::Bucket;
pub use error::Invalid;
pub use failed::{Failed, Unit};
pub use gate::Gate;
pub use pick::{Load, pick};
pub use pool::{Limits, MIN_EVICT_EVERY, Pool, TAKE_TIMEOUT, Taken};
pub use pooled::{Acquires, Step, Ticket};
pub use ward::Ward;
pub use window::Window;

/// Nanoseconds: the unit of every instant and span in `flow`.
pub type Nanos = i64;

/// One second in [`Nanos`].
pub const SECOND: Nanos = 1_000_000_000;
/// One millisecond in [`Nanos`].
pub const MILLI: Nanos = 1_000_000;

/// Brings a caller's draw into [0, 1).
///
/// A draw outside the range is clamped into it rather than refused, so a
/// generator that returns exactly 1.0 cannot push a delay past its ceiling.
/// NaN is taken as 0, the low end of every strategy.
#[inline]
pub(crate) fn unit(r: f64) -> f64 {
    if r.is_nan() || r <= 0.0 {
        0.0
    } else if r >= 1.0 {
        // The largest f64 below 1.
        1.0 - f64::EPSILON / 2.0
    } else {
        r
    }
}

/// Converts a float count of nanoseconds to [`Nanos`], saturating.
#[inline]
pub(crate) fn nanos(x: f64) -> Nanos {
    if x.is_nan() {
        0
    } else if x >= i64::MAX as f64 {
        i64::MAX
    } else if x <= i64::MIN as f64 {
        i64::MIN
    } else {
        x as i64
    }
}
