//! `SharedBucket`: the core's `limit::SharedBucket`. `take()` blocks on the
//! round trip with the GIL released; `atake()` is its awaitable.

use std::sync::Arc;

use headway_core::limit::SharedBucket;
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::rt::{awaitable, check, wait};
use crate::wire::wired;
use crate::{float_arg, guard, opt, secs_out, some};

fn n_of(n: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
    Ok(headway_core::limit::tokens::tokens(
        some(n).map(|o| float_arg("n", o)).transpose()?,
    ))
}

/// A token bucket shared by every process (Python or Node) that names the
/// same `key` on the Redis at `url`: ``Bucket``'s rules, run in Redis on
/// Redis's clock. `rate` and `burst` as ``Bucket`` takes them (the same
/// defaults, the same ``ValueError``s). No I/O until the first call.
#[pyclass(module = "headway._native", name = "SharedBucket", frozen)]
pub(crate) struct PySharedBucket {
    inner: Arc<SharedBucket>,
    /// Names the running loop's socket for the awaitables (`wire.rs`).
    url: Py<PyString>,
}

methods! {
    PySharedBucket {
        /// Tokens per second.
        rate: f64 = |c| c.rate();
        /// The most it holds.
        burst: f64 = |c| c.burst();
        /// The Redis key it lives under.
        key: &str = |c| c.key();
    }

    #[new]
    #[pyo3(signature = (url, key, rate, burst=None))]
    fn new(
        py: Python<'_>,
        url: &str,
        key: &str,
        rate: &Bound<'_, PyAny>,
        burst: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        guard(|| {
            let rate = float_arg("rate", rate)?;
            let burst = opt(burst, |b| float_arg("burst", b))?;
            let inner = check(py, SharedBucket::new(url, key, rate, burst))?;
            Ok(PySharedBucket {
                inner: Arc::new(inner),
                url: PyString::intern(py, url).unbind(),
            })
        })
    }

    /// Whether `n` tokens are there now, taking them if they are. Blocks on
    /// the round trip to Redis, without the GIL.
    #[pyo3(signature = (n=None), text_signature = "($self, n=1.0)")]
    fn take(&self, py: Python<'_>, n: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let n = n_of(n)?;
        wait(py, self.inner.take(n))
    }

    /// ``take(n)`` as an awaitable.
    #[pyo3(signature = (n=None), text_signature = "($self, n=1.0)")]
    fn atake<'py>(
        &self,
        py: Python<'py>,
        n: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let n = n_of(n)?;
        let asked = check(py, self.inner.ask_take(n))?;
        wired(py, &self.url, &self.inner, asked.req, asked.pick)
    }

    /// Seconds until `n` tokens would be there, without taking them: 0 when
    /// they are, `math.inf` when they never will be.
    #[pyo3(signature = (n=None), text_signature = "($self, n=1.0)")]
    fn next(&self, py: Python<'_>, n: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
        let n = n_of(n)?;
        Ok(secs_out(wait(py, self.inner.next(n))?))
    }

    /// How many tokens are there now.
    fn tokens(&self, py: Python<'_>) -> PyResult<f64> {
        wait(py, self.inner.tokens())
    }

    /// Takes `n` tokens, sleeping (without blocking the loop) until they
    /// are there. ``ValueError`` when they never come (more than the burst,
    /// or a zero rate).
    #[pyo3(signature = (n=None), text_signature = "($self, n=1.0)")]
    fn wait<'py>(
        &self,
        py: Python<'py>,
        n: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let n = n_of(n)?;
        let b = self.inner.clone();
        awaitable(py, async move { b.wait(n).await })
    }

    fn __repr__(&self) -> String {
        format!(
            "SharedBucket(key={:?}, rate={:?}, burst={:?})",
            self.inner.key(),
            self.inner.rate(),
            self.inner.burst()
        )
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySharedBucket>()
}
