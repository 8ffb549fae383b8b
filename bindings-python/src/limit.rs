//! `Bucket`, `Window` and `Gate`.
//!
//! `Bucket` and `Gate` are subclassable: the `headway` package adds the
//! runtime helpers (`await bucket.wait(n)`, `with gate:`) in Python on top.

use headway_core::flow;
use headway_core::limit::tokens::tokens;
use pyo3::prelude::*;

use crate::{
    clock, float_arg, guard, int_arg, invalid, now_arg, opt, secs_out, span_arg, span_opt,
};

/// A count of tokens: omitted or `None` is the core's default (one).
#[inline]
pub(crate) fn tokens_arg(n: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
    Ok(tokens(opt(n, |o| float_arg("n", o))?))
}

/// A count of tokens an in-process bucket takes, checked by the core.
#[inline]
fn n_arg(n: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
    flow::Bucket::check(tokens_arg(n)?).map_err(invalid)
}

/// A token bucket: `rate` tokens accrue per second up to `burst`, and each
/// request takes some.
///
/// The limiter that allows a burst after a quiet period, which is what a limit
/// on a human-facing API wants: nobody should be refused for two requests in
/// the same second after an hour of none. It starts full at `at` (seconds).
/// `burst` omitted is the rate when the rate is above 1, else 1 (one second's
/// worth); a burst below 1 would let nothing pass, so it is raised to 1. A
/// rate or burst that is NaN, infinite or negative raises `ValueError`.
#[pyclass(module = "headway._native", name = "Bucket", subclass)]
pub(crate) struct PyBucket {
    inner: flow::Bucket,
}

methods! {
    PyBucket {
        /// Tokens per second.
        rate: f64 = |c| c.rate();
        /// The most it holds.
        burst: f64 = |c| c.burst();
    }

    #[new]
    #[pyo3(
        signature = (rate, burst=None, at=None),
        text_signature = "(rate, burst=None, at=0.0)"
    )]
    fn new(
        rate: &Bound<'_, PyAny>,
        burst: Option<&Bound<'_, PyAny>>,
        at: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        guard(|| {
            let rate = float_arg("rate", rate)?;
            let burst = opt(burst, |b| float_arg("burst", b))?;
            let at = span_opt("at", at, 0)?;
            let inner = flow::Bucket::new(rate, burst, at).map_err(invalid)?;
            Ok(PyBucket { inner })
        })
    }

    /// Whether `n` tokens are available now, taking them if they are. Time
    /// that runs backwards adds nothing.
    #[pyo3(signature = (now=None, n=None), text_signature = "($self, now=None, n=1.0)")]
    fn take(
        &mut self,
        now: Option<&Bound<'_, PyAny>>,
        n: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        guard(|| {
            let now = now_arg(now)?;
            let n = n_arg(n)?;
            Ok(self.inner.take(now, n))
        })
    }

    /// Seconds until `n` tokens would be available, without taking them: 0
    /// when they are there now, `math.inf` when they never will be (more than
    /// the burst, or a zero rate). What to sleep rather than spin, and what a
    /// `Retry-After` is computed from.
    #[pyo3(signature = (now=None, n=None), text_signature = "($self, now=None, n=1.0)")]
    fn next(&self, now: Option<&Bound<'_, PyAny>>, n: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
        guard(|| {
            let now = now_arg(now)?;
            let n = n_arg(n)?;
            Ok(secs_out(self.inner.next(now, n)))
        })
    }

    /// One round of `await wait(n)`: `None` when `n` tokens were taken now,
    /// else the seconds to sleep before asking again. `ValueError` when they
    /// never come (more than the burst, or a zero rate).
    #[pyo3(signature = (n=None))]
    fn _wait(&mut self, n: Option<&Bound<'_, PyAny>>) -> PyResult<Option<f64>> {
        guard(|| {
            let n = n_arg(n)?;
            let span = self.inner.wait(clock(), n).map_err(invalid)?;
            Ok(span.map(secs_out))
        })
    }

    /// How many tokens are there now, for a caller that reports its headroom.
    #[pyo3(signature = (now=None))]
    fn tokens(&self, now: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
        guard(|| Ok(self.inner.tokens(now_arg(now)?)))
    }

    fn __repr__(&self) -> String {
        format!(
            "Bucket(rate={:?}, burst={:?})",
            self.inner.rate(),
            self.inner.burst()
        )
    }
}

/// A sliding window counter: at most `allow` events in any `window`-long
/// stretch (seconds), exactly.
///
/// Where a bucket smooths, a window counts: "a thousand a day" is a window,
/// not a rate — answered with a bucket, a client could spend the day's
/// allowance in the first minute. The stamps inside the window are kept, so
/// the count is exact rather than the two-bucket approximation most limiters
/// give. A negative `allow` or a window that is not positive raises
/// `ValueError`.
#[pyclass(module = "headway._native", name = "Window", subclass)]
pub(crate) struct PyWindow {
    inner: flow::Window,
}

methods! {
    PyWindow {
        /// The most events in any window.
        allow: i64 = |c| c.allow();
        /// The window's length, in seconds.
        window: f64 = |c| secs_out(c.span());
    }

    #[new]
    fn new(allow: &Bound<'_, PyAny>, window: &Bound<'_, PyAny>) -> PyResult<Self> {
        guard(|| {
            let allow = int_arg("allow", allow)?;
            let window = span_arg("window", window)?;
            let inner = flow::Window::new(allow, window).map_err(invalid)?;
            Ok(PyWindow { inner })
        })
    }

    /// Whether an event is within the quota now, counting it if it is.
    #[pyo3(signature = (now=None))]
    fn take(&mut self, now: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        guard(|| Ok(self.inner.take(now_arg(now)?)))
    }

    /// How many events remain in the window now.
    #[pyo3(signature = (now=None))]
    fn left(&self, now: Option<&Bound<'_, PyAny>>) -> PyResult<i64> {
        guard(|| Ok(self.inner.left(now_arg(now)?)))
    }

    /// Seconds until there is room: 0 when there is, else until the oldest
    /// event inside falls out (`math.inf` when `allow` is 0).
    #[pyo3(signature = (now=None))]
    fn next(&self, now: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
        guard(|| Ok(secs_out(self.inner.next(now_arg(now)?))))
    }

    fn __repr__(&self) -> String {
        format!(
            "Window(allow={}, window={:?})",
            self.inner.allow(),
            secs_out(self.inner.span())
        )
    }
}

/// A count with a ceiling: the concurrency limit a server puts on itself.
///
/// It has nothing to do with time: it is how many things are happening at
/// once. A server past its limit answers rather than queues, which keeps a
/// queue from becoming the outage. A negative limit raises `ValueError`.
#[pyclass(module = "headway._native", name = "Gate", subclass)]
pub(crate) struct PyGate {
    inner: flow::Gate,
}

methods! {
    PyGate {
        /// How many are inside.
        held: i64 = |c| c.held();
        /// The ceiling.
        limit: i64 = |c| c.limit();
    }

    #[new]
    fn new(limit: &Bound<'_, PyAny>) -> PyResult<Self> {
        guard(|| {
            let limit = int_arg("limit", limit)?;
            Ok(PyGate {
                inner: flow::Gate::new(limit).map_err(invalid)?,
            })
        })
    }

    /// Whether there is room, taking it if there is.
    fn enter(&mut self) -> bool {
        self.inner.enter()
    }

    /// Give the room back. Leaving an empty gate does nothing, so a double
    /// leave cannot open room that was never taken.
    fn leave(&mut self) {
        self.inner.leave()
    }

    fn __repr__(&self) -> String {
        format!(
            "Gate(limit={}, held={})",
            self.inner.limit(),
            self.inner.held()
        )
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyBucket>()?;
    m.add_class::<PyWindow>()?;
    m.add_class::<PyGate>()?;
    Ok(())
}
