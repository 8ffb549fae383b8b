//! Task-side time: instants, spans, the virtual clock and the rhythms.
//!
//! Units (the same in Node): the core's task side counts
//! `i64` milliseconds since the Unix epoch. Python passes an instant as an
//! aware `datetime` or epoch seconds (`float`/`int`), and a span as float
//! seconds or a `timedelta`. Instants the library hands back (`ctx.now`,
//! `beat.pending()`) are aware `datetime`s in UTC; a clock's own reading
//! (`VirtualClock.now()`) is epoch seconds, like `time.time()`.
//!
//! A naive `datetime` is refused: Python reads it as local time, which makes
//! the same code schedule differently on two machines.

use std::sync::Arc;

use headway_core::task::{Clock, Cron, Every, Rhythm, VirtualClock};
use headway_core::task::{clock, specs};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDelta, PyList};

use crate::json::kinds;
use crate::{float_arg, guard, invalid, some, span_arg, wrong_type};

/// `ms` since the epoch as an aware UTC `datetime` (exact: epoch plus a
/// timedelta, no float on the way).
pub(crate) fn instant_out(py: Python<'_>, ms: i64) -> PyResult<Bound<'_, PyAny>> {
    let d = kinds(py)?;
    let days = ms.div_euclid(86_400_000);
    let rest = ms.rem_euclid(86_400_000);
    let delta = PyDelta::new(
        py,
        days as i32,
        (rest / 1000) as i32,
        ((rest % 1000) * 1000) as i32,
        false,
    )?;
    d.epoch.bind(py).call_method1("__add__", (delta,))
}

/// What an instant argument was: absolute, or (a `timedelta`) from now.
pub(crate) use headway_core::task::specs::When;

/// An instant: an aware `datetime`, epoch seconds, or (when `relative`) a
/// `timedelta` from now. `TypeError`/`ValueError` naming `name`.
pub(crate) fn when_arg(
    name: &'static str,
    obj: &Bound<'_, PyAny>,
    relative: bool,
) -> PyResult<When> {
    let py = obj.py();
    let d = kinds(py)?;
    if obj.is_instance(d.datetime.bind(py))? {
        if obj.getattr("tzinfo")?.is_none() || obj.call_method0("utcoffset")?.is_none() {
            return Err(PyValueError::new_err(format!("`{name}` {}", specs::NAIVE)));
        }
        let ts: f64 = obj.call_method0("timestamp")?.extract()?;
        return Ok(When::At((ts * 1000.0).round() as i64));
    }
    if obj.is_instance(d.timedelta.bind(py))? {
        if !relative {
            return Err(PyTypeError::new_err(format!(
                "`{name}` must be an aware datetime or epoch seconds, not a timedelta"
            )));
        }
        return Ok(When::In(span_ms(name, obj)?));
    }
    if obj.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "`{name}` must be an aware datetime or epoch seconds, not bool"
        )));
    }
    let what = if relative {
        "an aware datetime, epoch seconds or a timedelta"
    } else {
        "an aware datetime or epoch seconds"
    };
    let s = float_arg("_", obj).map_err(|_| wrong_type(name, what, obj))?;
    if !s.is_finite() {
        return Err(PyValueError::new_err(format!(
            "`{name}` must be a finite number of epoch seconds"
        )));
    }
    Ok(When::At((s * 1000.0).round() as i64))
}

/// `(name, when)` pairs as a list of `(str, datetime)`: what `pending()`
/// answers for a beat and a scheduler alike.
pub(crate) fn named_instants(
    py: Python<'_>,
    items: Vec<(String, i64)>,
) -> PyResult<Bound<'_, PyList>> {
    let items = items
        .into_iter()
        .map(|(n, at)| Ok((n, instant_out(py, at)?)))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// The `eta` a body's retry asks for (`headway.TaskRetry`) as epoch ms, by
/// the rule every instant argument follows (a naive `datetime` refused).
#[pyfunction]
fn _eta_ms(eta: &Bound<'_, PyAny>) -> PyResult<i64> {
    instant_arg("eta", eta)
}

/// An absolute instant (no `timedelta`).
pub(crate) fn instant_arg(name: &'static str, obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    match when_arg(name, obj, false)? {
        When::At(ms) => Ok(ms),
        When::In(_) => unreachable!("relative is false"),
    }
}

/// A span (float seconds or `timedelta`) in ms, rounded to the nearest.
pub(crate) fn span_ms(name: &'static str, obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    let ns = span_arg(name, obj)?;
    Ok(((ns as i128 + 500_000).div_euclid(1_000_000)) as i64)
}

/// Epoch ms as float seconds.
pub(crate) fn secs(ms: i64) -> f64 {
    ms as f64 / 1000.0
}

/// The clock an `App`/`Scheduler` reads: the system clock for `None`, or a
/// `VirtualClock`'s.
pub(crate) fn clock_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Arc<dyn Clock>> {
    let what = "headway.testing.VirtualClock or None (the system clock)";
    Ok(match crate::given::<PyVirtualClock>("clock", what, obj)? {
        Some(c) => c.get().inner.clone() as Arc<dyn Clock>,
        None => clock::system(),
    })
}

// ------------------------------------------------------------- VirtualClock

/// A clock that workers and beats *sleep on*: a sleep advances it instead of
/// waiting, so a retry schedule or an hour of beats runs in milliseconds and
/// prints the same every time.
///
/// `start` is an aware `datetime` or epoch seconds (0: 1970-01-01 UTC).
/// What it moves is what the queue schedules — etas, retry backoffs,
/// expiry, beats. A body's `timeout` and `get(timeout=...)` stay real waits:
/// no clock makes a stuck body finish sooner.
#[pyclass(module = "headway._native", name = "VirtualClock", frozen)]
pub(crate) struct PyVirtualClock {
    pub(crate) inner: Arc<VirtualClock>,
}

#[pymethods]
impl PyVirtualClock {
    #[new]
    #[pyo3(signature = (start=None), text_signature = "(start=0.0)")]
    fn new(start: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        guard(|| {
            let ms = some(start).map_or(Ok(0), |s| instant_arg("start", s))?;
            Ok(PyVirtualClock {
                inner: VirtualClock::new(ms),
            })
        })
    }

    /// Now, in epoch seconds (like `time.time()`).
    fn now(&self) -> f64 {
        secs(self.inner.now())
    }

    /// Now, as an aware UTC `datetime`.
    fn datetime<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        instant_out(py, self.inner.now())
    }

    /// Moves it forward by `seconds` (float or `timedelta`); a negative step
    /// does nothing: time here never runs backwards.
    fn advance(&self, seconds: &Bound<'_, PyAny>) -> PyResult<()> {
        guard(|| {
            self.inner.advance(span_ms("seconds", seconds)?);
            Ok(())
        })
    }

    /// Moves it to `when` (aware `datetime` or epoch seconds) if that is later.
    fn advance_to(&self, when: &Bound<'_, PyAny>) -> PyResult<()> {
        guard(|| {
            self.inner.advance_to(instant_arg("when", when)?);
            Ok(())
        })
    }

    fn __repr__(&self) -> String {
        format!("VirtualClock(now={})", secs(self.inner.now()))
    }
}

// ------------------------------------------------------------- rhythms

fn opt_instant(py: Python<'_>, ms: Option<i64>) -> PyResult<Py<PyAny>> {
    match ms {
        Some(m) => Ok(instant_out(py, m)?.unbind()),
        None => Ok(py.None()),
    }
}

/// The methods `Every`, `Cron` and `At` share (`first`, `after`, and `==`
/// and `hash` by value), written once over the core's `Rhythm` that `$variant` makes
/// of the class's own value; each class adds its own after the `;`.
macro_rules! rhythm_methods {
    ($ty:ident, $variant:path; $($own:tt)*) => {
        impl $ty {
            /// Its rhythm, as a beat or a scheduler takes it.
            #[allow(clippy::clone_on_copy)] // `Every` and `At`'s i64 are Copy, `Cron` is not
            fn rhythm(&self) -> Rhythm {
                $variant(self.inner.clone())
            }
        }

        methods! {
            $ty, eq {}

            /// The first time it fires at or after `now` (aware `datetime` or
            /// epoch seconds), as an aware UTC `datetime`; `None` if never.
            fn first(&self, py: Python<'_>, now: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
                opt_instant(py, self.rhythm().first(instant_arg("now", now)?))
            }

            /// The first time it fires strictly after `at` — pass the time that
            /// was *due*, which is how a late tick keeps the phase. `None` when it
            /// never fires again.
            fn after(&self, py: Python<'_>, at: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
                opt_instant(py, self.rhythm().after(instant_arg("at", at)?))
            }

            $($own)*
        }
    };
}

/// Once per `interval` (float seconds or `timedelta`).
///
/// Without `anchor` the slots count from when the entry is added, and the
/// first fires one interval after that (Celery beat and APScheduler both
/// wait: firing at once on every restart turns a crash loop into a job
/// storm). With `anchor` (an instant) the slots are `anchor + k·interval`,
/// the same on every machine: `Every(3600, anchor=0)` is "on the hour".
/// An interval under a millisecond raises `ValueError`.
#[pyclass(module = "headway._native", name = "Every", frozen)]
pub(crate) struct PyEvery {
    inner: Every,
}

rhythm_methods! { PyEvery, Rhythm::Every;
    #[new]
    #[pyo3(signature = (interval, anchor=None))]
    fn new(interval: &Bound<'_, PyAny>, anchor: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        guard(|| {
            let ms = span_ms("interval", interval)?;
            let every = match anchor {
                Some(a) if !a.is_none() => Every::anchored(ms, instant_arg("anchor", a)?),
                _ => Every::new(ms),
            };
            Ok(PyEvery {
                inner: every.map_err(invalid)?,
            })
        })
    }

    /// The interval, in seconds.
    #[getter]
    fn interval(&self) -> f64 {
        secs(self.inner.interval())
    }

    /// The anchor the slots count from (aware UTC `datetime`), or `None`.
    #[getter]
    fn anchor(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        opt_instant(py, self.inner.anchor())
    }

    fn __repr__(&self) -> String {
        match self.inner.anchor() {
            Some(a) => format!("Every({}, anchor={})", self.interval(), secs(a)),
            None => format!("Every({})", self.interval()),
        }
    }
}

/// The minutes a 5-field crontab line names, read in the IANA time zone
/// `tz` ("Europe/London"; UTC when not given).
///
/// Fields: minute, hour, day of month, month, day of week, with `*`, lists,
/// ranges, steps and names (`MON-FRI`, `JAN`); `@hourly`, `@daily`,
/// `@weekly`, `@monthly`, `@yearly`. Across a daylight-saving change (Vixie
/// cron's rules, as the croner crate implements them): a fixed time that does
/// not exist that day fires at the first instant after the gap, a fixed time
/// that happens twice fires once, and a wildcard or step line keeps its
/// real-time rhythm. A line that is not 5 fields, never fires, or an unknown
/// zone raises `ValueError`.
#[pyclass(module = "headway._native", name = "Cron", frozen)]
pub(crate) struct PyCron {
    inner: Cron,
}

rhythm_methods! { PyCron, Rhythm::Cron;
    #[new]
    #[pyo3(signature = (expr, tz=None))]
    fn new(expr: &str, tz: Option<&str>) -> PyResult<Self> {
        guard(|| {
            Ok(PyCron {
                inner: Cron::in_zone(expr, tz).map_err(invalid)?,
            })
        })
    }

    /// The crontab line as given.
    #[getter]
    fn expr(&self) -> &str {
        self.inner.expr()
    }

    /// The time zone's IANA name.
    #[getter]
    fn tz(&self) -> &str {
        self.inner.tz_name()
    }

    fn __repr__(&self) -> String {
        format!(
            "Cron({}, tz={})",
            crate::host::quoted(self.expr()),
            crate::host::quoted(self.tz())
        )
    }
}

/// Once, at `when` (an aware `datetime` or epoch seconds). A time already
/// past still fires, once, at once: a one-off added a little late should run.
#[pyclass(module = "headway._native", name = "At", frozen)]
pub(crate) struct PyAt {
    inner: i64,
}

rhythm_methods! { PyAt, Rhythm::At;
    #[new]
    fn new(when: &Bound<'_, PyAny>) -> PyResult<Self> {
        guard(|| {
            Ok(PyAt {
                inner: instant_arg("when", when)?,
            })
        })
    }

    /// When it fires, as an aware UTC `datetime`.
    #[getter]
    fn when<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        instant_out(py, self.inner)
    }

    fn __repr__(&self) -> String {
        format!("At({})", secs(self.inner))
    }
}

/// A rhythm argument: `Every`, `Cron` or `At`.
pub(crate) fn rhythm_arg(name: &'static str, obj: &Bound<'_, PyAny>) -> PyResult<Rhythm> {
    if let Ok(e) = obj.cast::<PyEvery>() {
        return Ok(e.get().rhythm());
    }
    if let Ok(c) = obj.cast::<PyCron>() {
        return Ok(c.get().rhythm());
    }
    if let Ok(a) = obj.cast::<PyAt>() {
        return Ok(a.get().rhythm());
    }
    Err(wrong_type(
        name,
        "headway.Every, headway.Cron or headway.At",
        obj,
    ))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyVirtualClock>()?;
    m.add_class::<PyEvery>()?;
    m.add_class::<PyCron>()?;
    m.add_class::<PyAt>()?;
    m.add_function(wrap_pyfunction!(_eta_ms, m)?)?;
    Ok(())
}
