//! Node's units to the core's and back: milliseconds (floats) to `i64`
//! nanoseconds, JS numbers to integers.
//!
//! Value conversion only — no rule lives here.

use crate::raw::Fail;

/// Milliseconds to nanoseconds, rounded to the nearest and saturating; NaN is
/// 0. Rounding (not truncating) keeps `0.57 ms` at 570 000 ns although
/// `0.57 * 1e6` is 569 999.999…; the cast saturates, so ±Infinity become the
/// ends of the range. No libm call: this is on every hot path.
#[inline(always)]
pub fn ns(ms: f64) -> i64 {
    let x = ms * 1e6;
    (x + 0.5f64.copysign(x)) as i64
}

/// Nanoseconds to milliseconds; `i64::MAX` (the core's "never") is Infinity.
#[inline(always)]
pub fn ms(ns: i64) -> f64 {
    if ns == i64::MAX {
        f64::INFINITY
    } else {
        ns as f64 / 1e6
    }
}

/// A span argument in milliseconds: NaN is refused (Infinity is "for ever"
/// and saturates); the core refuses what it must (a negative span).
pub fn span(name: &'static str, x: f64) -> Result<i64, Fail> {
    if x.is_nan() {
        return Err(Fail::Range(
            name.to_string(),
            "must be a number of milliseconds, not NaN".to_string(),
        ));
    }
    Ok(ns(x))
}

/// The largest integer a JS number holds exactly (`Number.MAX_SAFE_INTEGER`).
const SAFE: f64 = 9_007_199_254_740_991.0;

/// An integer argument: a JS number with no fractional part, within the safe
/// range (a larger one has already lost its low digits).
pub fn int(name: &'static str, x: f64) -> Result<i64, Fail> {
    if x.is_finite() && x.fract() == 0.0 && x.abs() <= SAFE {
        Ok(x as i64)
    } else {
        Err(Fail::Range(
            name.to_string(),
            format!("must be a safe integer (received {x})"),
        ))
    }
}

/// An integer argument that fits in an `i32`.
pub fn int32(name: &'static str, x: f64) -> Result<i32, Fail> {
    let i = int(name, x)?;
    i32::try_from(i).map_err(|_| {
        Fail::Range(
            name.to_string(),
            format!("must be an integer in the 32-bit range (received {x})"),
        )
    })
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
        assert!(int("x", 2.5).is_err());
        assert!(int("x", f64::INFINITY).is_err());
        assert!(int("x", 1e300).is_err());
        assert_eq!(int("x", SAFE).unwrap(), 9_007_199_254_740_991);
        assert_eq!(int("x", -3.0).unwrap(), -3);
        assert!(int32("x", 3e10).is_err());
        assert!(span("x", f64::NAN).is_err());
    }
}
