//! Numbers from a host whose only number is a double (JavaScript): spans and
//! instants in milliseconds as [`Nanos`] and back, and the integers an
//! argument must be.
//!
//! The rules — how a millisecond rounds, what saturates, which doubles are
//! refused and the words saying why — live here once, so the Node binding
//! only reads the double and throws what this answers as a `RangeError`
//! naming the argument.

use std::fmt;

use super::Nanos;

/// A number outside the range its argument must be in: the argument's name
/// as the host spells it, and why (the value received included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfRange {
    pub arg: &'static str,
    pub why: String,
}

impl OutOfRange {
    fn new(arg: &'static str, why: String) -> Self {
        OutOfRange { arg, why }
    }
}

impl fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid `{}`: {}", self.arg, self.why)
    }
}

impl std::error::Error for OutOfRange {}

/// Milliseconds to nanoseconds, rounded to the nearest and saturating; NaN is
/// 0. Rounding (not truncating) keeps `0.57 ms` at 570 000 ns although
/// `0.57 * 1e6` is 569 999.999…; the cast saturates, so ±Infinity become the
/// ends of the range. No libm call: this is on every hot path.
#[inline(always)]
pub fn ns(ms: f64) -> Nanos {
    let x = ms * 1e6;
    (x + 0.5f64.copysign(x)) as i64
}

/// Nanoseconds to milliseconds; `i64::MAX` (the core's "never") is Infinity.
#[inline(always)]
pub fn ms(ns: Nanos) -> f64 {
    if ns == i64::MAX {
        f64::INFINITY
    } else {
        ns as f64 / 1e6
    }
}

/// A span argument in milliseconds: NaN is refused (Infinity is "for ever"
/// and saturates); the piece it is for refuses what it must (a negative span).
pub fn span(arg: &'static str, x: f64) -> Result<Nanos, OutOfRange> {
    if x.is_nan() {
        let why = "must be a number of milliseconds, not NaN";
        return Err(OutOfRange::new(arg, why.to_string()));
    }
    Ok(ns(x))
}

/// A `now` argument: finite milliseconds, as nanoseconds. NaN or an infinity
/// is refused rather than read as 0 (Python raises the same).
#[inline(always)]
pub fn now(x: f64) -> Result<Nanos, OutOfRange> {
    if x.is_finite() {
        Ok(ns(x))
    } else {
        let why = format!("must be a finite number of milliseconds (received {x})");
        Err(OutOfRange::new("now", why))
    }
}

/// The largest integer a double holds exactly (`Number.MAX_SAFE_INTEGER`).
const SAFE: f64 = 9_007_199_254_740_991.0;

/// An integer argument: a double with no fractional part, within the safe
/// range (a larger one has already lost its low digits).
pub fn int(arg: &'static str, x: f64) -> Result<i64, OutOfRange> {
    if x.is_finite() && x.fract() == 0.0 && x.abs() <= SAFE {
        Ok(x as i64)
    } else {
        Err(OutOfRange::new(
            arg,
            format!("must be a safe integer (received {x})"),
        ))
    }
}

/// An integer argument that fits in an `i32` (a count: attempts, retries).
pub fn int32(arg: &'static str, x: f64) -> Result<i32, OutOfRange> {
    i32::try_from(int(arg, x)?).map_err(|_| not_i32(arg, x))
}

/// [`int32`] for a hot path: one cast and one comparison, every refusal
/// worded as out of the 32-bit range.
#[inline(always)]
pub fn exact_i32(arg: &'static str, x: f64) -> Result<i32, OutOfRange> {
    let i = x as i32;
    if i as f64 == x {
        Ok(i)
    } else {
        Err(not_i32(arg, x))
    }
}

fn not_i32(arg: &'static str, x: f64) -> OutOfRange {
    let why = format!("must be an integer in the 32-bit range (received {x})");
    OutOfRange::new(arg, why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_and_saturates() {
        assert_eq!(ns(0.57), 570_000);
        assert_eq!(ns(-0.57), -570_000);
        assert_eq!(ns(1.0), 1_000_000);
        assert_eq!(ns(f64::NAN), 0);
        assert_eq!(ns(f64::INFINITY), i64::MAX);
        assert_eq!(ns(f64::NEG_INFINITY), i64::MIN);
        assert_eq!(ms(1_500_000), 1.5);
        assert_eq!(ms(i64::MAX), f64::INFINITY);
    }

    #[test]
    fn refuses_what_is_out_of_range_naming_it() {
        assert!(int("x", 2.5).is_err());
        assert!(int("x", f64::INFINITY).is_err());
        assert!(int("x", 1e300).is_err());
        assert_eq!(int("x", SAFE).unwrap(), 9_007_199_254_740_991);
        assert_eq!(int("x", -3.0).unwrap(), -3);
        assert_eq!(
            int32("n", 3e10).unwrap_err().to_string(),
            "invalid `n`: must be an integer in the 32-bit range (received 30000000000)"
        );
        assert_eq!(exact_i32("n", -7.0), Ok(-7));
        assert_eq!(exact_i32("n", 2.5).unwrap_err().arg, "n");
        assert!(span("x", f64::NAN).is_err());
        assert_eq!(span("x", f64::INFINITY), Ok(i64::MAX));
        assert_eq!(now(2.0), Ok(2_000_000));
        let e = now(f64::NAN).unwrap_err();
        assert_eq!(e.arg, "now");
        assert_eq!(
            e.why,
            "must be a finite number of milliseconds (received NaN)"
        );
    }
}
