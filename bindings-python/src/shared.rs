//! `SharedBucket`, `SharedWindow` and `SharedGate`: the core's
//! `limit::Shared*`. A plain method blocks on the round trip with the GIL
//! released; an `a…` method is its awaitable.

use std::sync::Arc;

use headway_core::limit::{SharedBucket, SharedGate, SharedWindow};
use headway_core::task::Refused;
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::limit::tokens_arg;
use crate::rt::{awaitable, check, wait};
use crate::wire::wired;
use crate::{float_arg, guard, int_arg, opt, secs_out, span_arg};

/// A shared limit's class: the core's value, and the URL that names the
/// running loop's socket for its awaitables (`wire.rs`).
macro_rules! shared {
    ($(#[doc = $doc:literal])* $ty:ident, $name:literal, $core:ty) => {
        $(#[doc = $doc])*
        #[pyclass(module = "headway._native", name = $name, frozen)]
        pub(crate) struct $ty {
            inner: Arc<$core>,
            url: Py<PyString>,
        }

        impl $ty {
            /// What the core made of the constructor's arguments.
            fn made(py: Python<'_>, url: &str, made: Result<$core, Refused>) -> PyResult<Self> {
                Ok($ty {
                    inner: Arc::new(check(py, made)?),
                    url: PyString::intern(py, url).unbind(),
                })
            }
        }
    };
}

shared! {
    /// A token bucket shared by every process (Python or Node) that names the
    /// same `key` on the Redis at `url`: ``Bucket``'s rules, run in Redis on
    /// Redis's clock. `rate` and `burst` as ``Bucket`` takes them (the same
    /// defaults, the same ``ValueError``s). No I/O until the first call.
    PySharedBucket, "SharedBucket", SharedBucket
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
            Self::made(py, url, SharedBucket::new(url, key, rate, burst))
        })
    }

    /// Whether `n` tokens are there now, taking them if they are. Blocks on
    /// the round trip to Redis, without the GIL.
    #[pyo3(signature = (n=None), text_signature = "($self, n=1.0)")]
    fn take(&self, py: Python<'_>, n: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let n = tokens_arg(n)?;
        wait(py, self.inner.take(n))
    }

    /// ``take(n)`` as an awaitable.
    #[pyo3(signature = (n=None), text_signature = "($self, n=1.0)")]
    fn atake<'py>(
        &self,
        py: Python<'py>,
        n: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let n = tokens_arg(n)?;
        let asked = check(py, self.inner.ask_take(n))?;
        wired(py, &self.url, &self.inner, asked.req, asked.pick)
    }

    /// Seconds until `n` tokens would be there, without taking them: 0 when
    /// they are, `math.inf` when they never will be.
    #[pyo3(signature = (n=None), text_signature = "($self, n=1.0)")]
    fn next(&self, py: Python<'_>, n: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
        let n = tokens_arg(n)?;
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
        let n = tokens_arg(n)?;
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

shared! {
    /// A sliding window shared by every process (Python or Node) that names the
    /// same `key` on the Redis at `url`: at most `limit` events in any
    /// `per`-long stretch (seconds or a ``timedelta``), ``Window``'s rules run
    /// in Redis on Redis's clock (microseconds: `per` is rounded up to one). A
    /// negative `limit` or a `per` that is not positive raises ``ValueError``.
    /// No I/O until the first call.
    PySharedWindow, "SharedWindow", SharedWindow
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
            Self::made(py, url, SharedWindow::new(url, key, limit, per))
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

shared! {
    /// A concurrency gate shared by every process (Python or Node) that names
    /// the same `key` on the Redis at `url`: at most `n` permits held at once,
    /// ``Gate``'s rules run in Redis. A permit is held for `lease` seconds (or
    /// a ``timedelta``) unless renewed, so a holder that crashed gives its room
    /// back when the lease ends. A negative `n` or a `lease` that is not
    /// positive raises ``ValueError``. No I/O until the first call.
    PySharedGate, "SharedGate", SharedGate
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
            Self::made(py, url, SharedGate::new(url, key, n, lease))
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
    m.add_class::<PySharedBucket>()?;
    m.add_class::<PySharedWindow>()?;
    m.add_class::<PySharedGate>()
}
