//! `SharedGate`: the core's `limit::SharedGate`. `take()` blocks on the
//! round trip with the GIL released; `atake()` is its awaitable.

use std::sync::Arc;

use headway_core::limit::SharedGate;
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::rt::{check, wait};
use crate::wire::wired;
use crate::{guard, int_arg, opt, secs_out, span_arg};

/// A concurrency gate shared by every process (Python or Node) that names
/// the same `key` on the Redis at `url`: at most `n` permits held at once,
/// ``Gate``'s rules run in Redis. A permit is held for `lease` seconds (or
/// a ``timedelta``) unless renewed, so a holder that crashed gives its room
/// back when the lease ends. A negative `n` or a `lease` that is not
/// positive raises ``ValueError``. No I/O until the first call.
#[pyclass(module = "headway._native", name = "SharedGate", frozen)]
pub(crate) struct PySharedGate {
    inner: Arc<SharedGate>,
    /// Names the running loop's socket for the awaitables (`wire.rs`).
    url: Py<PyString>,
}

methods! {
    PySharedGate {
        /// The most permits held at once.
        limit: i64 = |c| c.limit();
        /// How long a permit is held unless renewed, in seconds.
        lease: f64 = |c| secs_out(c.lease());
        /// The Redis key it lives under.
        key: &str = |c| c.key();
    }

    #[new]
    #[pyo3(signature = (url, key, n, lease=None), text_signature = "(url, key, n, lease=30.0)")]
    fn new(
        py: Python<'_>,
        url: &str,
        key: &str,
        n: &Bound<'_, PyAny>,
        lease: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        guard(|| {
            let n = int_arg("n", n)?;
            let lease = opt(lease, |l| span_arg("lease", l))?;
            let inner = check(py, SharedGate::new(url, key, n, lease))?;
            Ok(PySharedGate {
                inner: Arc::new(inner),
                url: PyString::intern(py, url).unbind(),
            })
        })
    }

    /// A permit (a string, to ``release`` or ``renew``) when there is room,
    /// else ``None``. Blocks on the round trip to Redis, without the GIL.
    fn take(&self, py: Python<'_>) -> PyResult<Option<String>> {
        wait(py, self.inner.take())
    }

    /// ``take()`` as an awaitable.
    fn atake<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (req, pick) = self.inner.ask_take_new();
        wired(py, &self.url, &self.inner, req, pick)
    }

    /// Gives the permit's room back: whether it was held. A permit released
    /// twice, or whose lease ran out, gives back nothing.
    fn release(&self, py: Python<'_>, permit: String) -> PyResult<bool> {
        wait(py, self.inner.release(&permit))
    }

    /// ``release(permit)`` as an awaitable.
    fn arelease<'py>(&self, py: Python<'py>, permit: String) -> PyResult<Bound<'py, PyAny>> {
        let asked = self.inner.ask_release(&permit);
        wired(py, &self.url, &self.inner, asked.req, asked.pick)
    }

    /// Starts the permit's lease again: whether it was still held (one whose
    /// lease ran out is not, and does not come back).
    fn renew(&self, py: Python<'_>, permit: String) -> PyResult<bool> {
        wait(py, self.inner.renew(&permit))
    }

    /// How many permits are held now.
    fn held(&self, py: Python<'_>) -> PyResult<i64> {
        wait(py, self.inner.held())
    }

    fn __repr__(&self) -> String {
        format!(
            "SharedGate(key={:?}, limit={}, lease={:?})",
            self.inner.key(),
            self.inner.limit(),
            secs_out(self.inner.lease())
        )
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySharedGate>()
}
