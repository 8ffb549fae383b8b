//! The one error `flow` has: an argument a constructor cannot accept.
//!
//! Everything else in `flow` is an answer, not an error: a pool that is full
//! says `Wait`, a bucket that is empty says `false`. Only a value that would
//! make the bookkeeping meaningless — a negative size, a NaN rate — is refused,
//! and it is refused at construction with the argument named, so the Python and
//! Node bindings raise the same `ValueError` / `RangeError` from one place.

use std::fmt;

/// An argument that cannot be accepted, with its name and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The argument's name as the public API spells it (`size`, `rate`, ...).
    pub arg: &'static str,
    /// Why it was refused, in a few words.
    pub why: &'static str,
}

impl Invalid {
    pub(crate) const fn new(arg: &'static str, why: &'static str) -> Self {
        Invalid { arg, why }
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid `{}`: {}", self.arg, self.why)
    }
}

impl std::error::Error for Invalid {}

/// Refuses NaN and infinities.
pub(crate) fn finite(arg: &'static str, x: f64) -> Result<f64, Invalid> {
    if x.is_finite() {
        Ok(x)
    } else {
        Err(Invalid::new(arg, "must be a finite number"))
    }
}

/// Refuses negative spans.
pub(crate) fn span(arg: &'static str, x: i64) -> Result<i64, Invalid> {
    if x >= 0 {
        Ok(x)
    } else {
        Err(Invalid::new(arg, "must not be negative"))
    }
}
