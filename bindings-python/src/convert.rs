//! Value conversion between Python and the core: seconds and nanoseconds, the
//! clock `now` defaults to, the RNG draws default to, and argument errors that
//! name the argument.
//!
//! Units: Python passes `float` seconds
//! (a `datetime.timedelta` is accepted for a span), the core takes `i64`
//! nanoseconds. Only differences of `now` are used by the core, so any origin
//! works; omitted, it is `time.monotonic()`.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use pyo3::PyClass;
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDelta, PyDeltaAccess};

const NS: f64 = 1e9;

/// An `Instant` and what `time.monotonic_ns()` read at the same moment.
static ORIGIN: OnceLock<(Instant, i64)> = OnceLock::new();

/// Records the clock pair once, when the module loads. Afterwards `now` is
/// computed in Rust (`Instant` is the same monotonic clock) without calling
/// back into Python.
pub(crate) fn init_clock(py: Python<'_>) -> PyResult<()> {
    if ORIGIN.get().is_none() {
        let mono: i64 = py
            .import("time")?
            .getattr("monotonic_ns")?
            .call0()?
            .extract()?;
        let _ = ORIGIN.set((Instant::now(), mono));
    }
    Ok(())
}

/// `time.monotonic()` now, in nanoseconds.
#[inline]
pub(crate) fn clock() -> i64 {
    match ORIGIN.get() {
        Some((at, mono)) => mono.saturating_add(at.elapsed().as_nanos() as i64),
        None => 0,
    }
}

/// SplitMix64 state: a counter advanced atomically, so any thread may draw.
static RNG: AtomicU64 = AtomicU64::new(0);
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// Seeds the RNG from the OS (through `RandomState`) and the clock.
pub(crate) fn reseed() {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    h.write_u32(std::process::id());
    RNG.store(h.finish(), Ordering::Relaxed);
}

/// A draw in [0, 1) from SplitMix64 (Steele, Lea, Flood: "Fast Splittable
/// Pseudorandom Number Generators"): fast, and good enough for jitter and for
/// the breaker's roll, which only need to be spread, not secret.
#[inline]
pub(crate) fn draw() -> f64 {
    let mut z = RNG
        .fetch_add(GOLDEN, Ordering::Relaxed)
        .wrapping_add(GOLDEN);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// The type name of `obj`, for messages.
pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".to_string())
}

/// A `TypeError` saying that argument `name` must be `what`, naming the
/// type it was: every wrong-type refusal of the binding's, in one wording.
pub(crate) fn wrong_type(name: &str, what: &str, obj: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!("`{name}` must be {what}, not {}", type_name(obj)))
}

/// `obj` as a float, as `float(obj)` reads it but without a Python call;
/// `None` when it is not a number.
#[inline]
fn as_f64(obj: &Bound<'_, PyAny>) -> Option<f64> {
    // SAFETY: `obj` is a live object and we are attached.
    let v = unsafe { ffi::PyFloat_AsDouble(obj.as_ptr()) };
    (v != -1.0 || PyErr::take(obj.py()).is_none()).then_some(v)
}

/// A float argument; `TypeError` naming `name` when it is not a number.
#[inline]
pub(crate) fn float_arg(name: &'static str, obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    as_f64(obj).ok_or_else(|| wrong_type(name, "a number", obj))
}

/// Float seconds to nanoseconds, saturating.
#[inline]
fn to_ns(s: f64) -> i64 {
    // Rounded, so that 0.3 s is 300_000_000 ns and not one short; `as`
    // saturates at the i64 range.
    (s * NS).round() as i64
}

/// An optional argument: omitted or `None` is `None`.
#[inline]
pub(crate) fn some<'a, 'py>(o: Option<&'a Bound<'py, PyAny>>) -> Option<&'a Bound<'py, PyAny>> {
    o.filter(|x| !x.is_none())
}

/// An optional argument converted by `f`: omitted or `None` is `None`.
#[inline]
pub(crate) fn opt<'a, 'py, T>(
    o: Option<&'a Bound<'py, PyAny>>,
    f: impl FnOnce(&'a Bound<'py, PyAny>) -> PyResult<T>,
) -> PyResult<Option<T>> {
    some(o).map(f).transpose()
}

/// Casts `obj` to the pyclass `T`, or a `TypeError` naming the argument.
pub(crate) fn expect<'a, 'py, T: PyClass>(
    name: &'static str,
    what: &'static str,
    obj: &'a Bound<'py, PyAny>,
) -> PyResult<&'a Bound<'py, T>> {
    obj.cast::<T>()
        .map_err(|_| wrong_type(name, &format!("a {what}"), obj))
}

/// An optional argument of the pyclass `T`: omitted or `None` is `None`,
/// anything else must be a `T` (a `TypeError` naming the argument).
pub(crate) fn given<'a, 'py, T: PyClass>(
    name: &'static str,
    what: &'static str,
    obj: Option<&'a Bound<'py, PyAny>>,
) -> PyResult<Option<&'a Bound<'py, T>>> {
    opt(obj, |o| expect::<T>(name, what, o))
}

/// `now`: omitted → the monotonic clock; else finite seconds.
#[inline]
pub(crate) fn now_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<i64> {
    match obj {
        Some(o) if !o.is_none() => {
            let s = float_arg("now", o)?;
            if !s.is_finite() {
                return Err(PyValueError::new_err(
                    "`now` must be a finite number of seconds",
                ));
            }
            Ok(to_ns(s))
        }
        _ => Ok(clock()),
    }
}

/// A random draw: omitted → the binding's RNG; else any number (the core
/// clamps it into [0, 1)).
#[inline]
pub(crate) fn draw_arg(name: &'static str, obj: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
    some(obj).map_or_else(|| Ok(draw()), |o| float_arg(name, o))
}

/// A span: float seconds or a `datetime.timedelta` (exact to the
/// microsecond), as nanoseconds. `inf` saturates; NaN is refused.
pub(crate) fn span_arg(name: &'static str, obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    if let Ok(d) = obj.cast::<PyDelta>() {
        let whole = (d.get_days() as i128) * 86_400 + d.get_seconds() as i128;
        let ns = whole * 1_000_000_000 + d.get_microseconds() as i128 * 1_000;
        return Ok(ns.clamp(i64::MIN as i128, i64::MAX as i128) as i64);
    }
    let what = "seconds (a number or a datetime.timedelta)";
    let v = as_f64(obj).ok_or_else(|| wrong_type(name, what, obj))?;
    if v.is_nan() {
        return Err(PyValueError::new_err(format!(
            "`{name}` must be a number of seconds, not NaN"
        )));
    }
    Ok(to_ns(v))
}

/// An optional span: omitted or `None` → `default`.
pub(crate) fn span_opt(
    name: &'static str,
    obj: Option<&Bound<'_, PyAny>>,
    default: i64,
) -> PyResult<i64> {
    some(obj).map_or(Ok(default), |o| span_arg(name, o))
}

/// An int argument; `TypeError` naming it when it is not an int, `ValueError`
/// when it does not fit in 64 bits.
pub(crate) fn int_arg(name: &'static str, obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    match obj.extract::<i64>() {
        Ok(v) => Ok(v),
        Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => {
            Err(PyValueError::new_err(format!("`{name}` is out of range")))
        }
        Err(_) => Err(wrong_type(name, "an int", obj)),
    }
}

/// An int argument clamped into `i32` (a retry or attempt count).
pub(crate) fn count_arg(name: &'static str, obj: &Bound<'_, PyAny>) -> PyResult<i32> {
    match obj.extract::<i64>() {
        Ok(v) => Ok(v.clamp(i32::MIN as i64, i32::MAX as i64) as i32),
        Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => {
            // A huge count: the sign is all that matters.
            let neg = obj.lt(0i64).unwrap_or(false);
            Ok(if neg { i32::MIN } else { i32::MAX })
        }
        Err(_) => Err(wrong_type(name, "an int", obj)),
    }
}

/// Nanoseconds to float seconds; `i64::MAX` (never) is `math.inf`.
#[inline]
pub(crate) fn secs_out(ns: i64) -> f64 {
    if ns == i64::MAX {
        f64::INFINITY
    } else {
        ns as f64 / NS
    }
}

/// `==` and `!=` between two of one frozen class, by `same`; any other
/// comparison, or another type, is `NotImplemented` (so Python tries the
/// other side).
pub(crate) fn richcmp<T>(
    other: &Bound<'_, PyAny>,
    op: pyo3::pyclass::CompareOp,
    same: impl FnOnce(&T) -> bool,
) -> PyResult<Py<PyAny>>
where
    T: pyo3::PyClass<Frozen = pyo3::pyclass::boolean_struct::True> + Sync,
{
    use pyo3::IntoPyObjectExt;
    use pyo3::pyclass::CompareOp;
    let py = other.py();
    match (op, other.cast::<T>()) {
        (CompareOp::Eq, Ok(o)) => same(o.get()).into_py_any(py),
        (CompareOp::Ne, Ok(o)) => (!same(o.get())).into_py_any(py),
        _ => Ok(py.NotImplemented()),
    }
}

/// A frozen value's hash, from its `Debug` text: values that are equal
/// print alike (none of the classes using it holds a float that could be
/// `-0.0`), so `a == b` implies `hash(a) == hash(b)`.
pub(crate) fn hash_debug(v: &impl std::fmt::Debug) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("{v:?}").hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_to_the_nearest_nanosecond() {
        assert_eq!(to_ns(0.3), 300_000_000);
        assert_eq!(to_ns(0.1), 100_000_000);
        assert_eq!(to_ns(-1.5), -1_500_000_000);
        assert_eq!(to_ns(f64::INFINITY), i64::MAX);
        assert_eq!(to_ns(f64::NEG_INFINITY), i64::MIN);
    }

    #[test]
    fn never_is_infinity() {
        assert_eq!(secs_out(i64::MAX), f64::INFINITY);
        assert_eq!(secs_out(49_000_000), 0.049);
        assert_eq!(secs_out(0), 0.0);
    }

    #[test]
    fn draws_are_in_the_unit_interval_and_spread() {
        reseed();
        let draws: Vec<f64> = (0..10_000).map(|_| draw()).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "mean {mean}");
        assert!(draws.windows(2).all(|w| w[0] != w[1]));
    }
}
