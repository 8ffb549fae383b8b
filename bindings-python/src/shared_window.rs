//! `SharedWindow`: the core's `limit::SharedWindow`. `take()` blocks on the
//! round trip with the GIL released; `atake()` is its awaitable.

use std::sync::Arc;

use headway_core::limit::SharedWindow;
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::rt::{awaitable, check, wait};
use crate::wire::wired;
use crate::{guard, int_arg, secs_out, span_arg};

/// A sliding window shared by every process (Python or Node) that names the
/// same `key` on the Redis at `url`: at most `limit` events in any
/// `per`-long stretch (seconds or a ``timedelta``), ``Window``'s rules run
/// in Redis on Redis's clock (microseconds: `per` is rounded up to one). A
/// negative `limit` or a `per` that is not positive raises ``ValueError``.
/// No I/O until the first call.
#[pyclass(module = "headway._native", name = "SharedWindow", frozen)]
pub(crate) struct PySharedWindow {
    inner: Arc<SharedWindow>,
    /// Names the running loop's socket for the awaitables (`wire.rs`).
    url: Py<PyString>,
}

methods! {
    PySharedWindow {
        /// The most events in any window.
        limit: i64 = |c| c.limit();
        /// The window's length, in seconds.
        per: f64 = |c| secs_out(c.per());
        /// The Redis key it lives under.
        key: &str = |c| c.key();
    }

    #[new]
    fn new(
        py: Python<'_>,
        url: &str,
        key: &str,
        limit: &Bound<'_, PyAny>,
        per: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        guard(|| {
            let limit = int_arg("limit", limit)?;
            let per = span_arg("per", per)?;
            let inner = check(py, SharedWindow::new(url, key, limit, per))?;
            Ok(PySharedWindow {
                inner: Arc::new(inner),
                url: PyString::intern(py, url).unbind(),
            })
        })
    }

    /// Whether an event is within the quota now, counting it if it is.
    /// Blocks on the round trip to Redis, without the GIL.
    fn take(&self, py: Python<'_>) -> PyResult<bool> {
        wait(py, self.inner.take())
    }

    /// ``take()`` as an awaitable.
    fn atake<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let asked = self.inner.ask_take();
        wired(py, &self.url, &self.inner, asked.req, asked.pick)
    }

    /// How many events remain in the window now.
    fn left(&self, py: Python<'_>) -> PyResult<i64> {
        wait(py, self.inner.left())
    }

    /// Seconds until there is room: 0 when there is, `math.inf` when
    /// `limit` is 0.
    fn next(&self, py: Python<'_>) -> PyResult<f64> {
        Ok(secs_out(wait(py, self.inner.next())?))
    }

    /// Counts an event, sleeping (without blocking the loop) until there
    /// is room. ``ValueError`` when `limit` is 0.
    fn wait<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let w = self.inner.clone();
        awaitable(py, async move { w.wait().await })
    }

    fn __repr__(&self) -> String {
        format!(
            "SharedWindow(key={:?}, limit={}, per={:?})",
            self.inner.key(),
            self.inner.limit(),
            secs_out(self.inner.per())
        )
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySharedWindow>()
}
