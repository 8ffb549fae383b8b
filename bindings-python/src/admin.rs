//! The admin interface for Python: the core's `Admin` behind two small
//! classes that `headway.admin` drives from ASGI.
//!
//! No rules here: the ASGI adapter hands over the method, the path with its
//! query, the headers and the body; the core answers the status, headers and
//! body, or the head of a live stream whose frames `_AdminStream.next` pumps.
//! Every wait runs on the core's runtime as an asyncio awaitable
//! (`future_into_py`), so the GIL is never held while the core works and a
//! cancelled await drops the Rust future with it.

use std::sync::Arc;

use headway_core::admin::{
    Admin, AdminConfig, EventStream, Reply, Request, StreamSlot, declared_over,
};
use headway_core::task::Host;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::app::PyApp;
use crate::guard;
use crate::rt::{panicked, rt};

/// One admin over one app. Internal: `headway.admin.asgi` wraps it.
#[pyclass(module = "headway._native", name = "_Admin", frozen)]
pub(crate) struct PyAdmin {
    inner: Admin,
}

methods! {
    PyAdmin {
        /// The token: the configured one or the generated one.
        token: &str = |c| c.token();
        /// Whether the token was generated (and so must be printed).
        token_generated: bool = |c| c.token_generated();
        /// Whether every change is refused.
        read_only: bool = |c| c.read_only();
        /// The most body bytes worth reading: past it the answer is 413 anyway.
        max_body: usize = |c| c.max_body();
    }

    /// An admin over `app` (a `headway._native._App`). `token` `None` or
    /// empty: one is generated (see `token_generated`). `max_body` `None`:
    /// the core's 64 KiB.
    #[new]
    #[pyo3(signature = (app, token=None, read_only=false, max_body=None, allowed_origins=None))]
    fn new(
        app: &Bound<'_, PyApp>,
        token: Option<String>,
        read_only: bool,
        max_body: Option<i64>,
        allowed_origins: Option<Vec<String>>,
    ) -> PyResult<Self> {
        guard(|| {
            rt()?;
            let max_body = AdminConfig::max_body_of(Host::Python, max_body.map(|n| n as f64))
                .map_err(|e| crate::rt::refused(app.py(), e))?;
            let cfg = AdminConfig {
                token,
                read_only,
                max_body,
                allowed_origins: allowed_origins.unwrap_or_default(),
            };
            let inner = Admin::new(app.get().core().clone(), cfg)
                .map_err(|e| crate::rt::refused(app.py(), e))?;
            Ok(PyAdmin { inner })
        })
    }

    /// Whether `headers` declare a body past `max_body` (the core's
    /// Content-Length rule): it is refused (413) whatever comes, so the
    /// adapter reads none of it.
    fn declares_over(&self, headers: Vec<(String, String)>) -> bool {
        declared_over(&headers, self.inner.max_body())
    }

    /// An awaitable answering `(status, headers, body, stream)`: `headers` a
    /// list of `(name, value)` strings, `body` bytes, `stream` an
    /// `_AdminStream` to pump after the head, or `None`. `mount` is where
    /// the admin is served (ASGI's `root_path`), `tls` whether the request
    /// came over https, `peer` the client's address (ASGI's `client`).
    #[pyo3(signature = (method, path, headers, body, mount=String::new(), tls=false, peer=None), text_signature = "($self, method, path, headers, body, mount='', tls=False, peer=None)")]
    #[allow(clippy::too_many_arguments)]
    fn handle<'py>(
        &self,
        py: Python<'py>,
        method: String,
        path: String,
        headers: Vec<(String, String)>,
        body: &[u8],
        mount: String,
        tls: bool,
        peer: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let rt = rt()?;
        let admin = self.inner.clone();
        let req = Request {
            method,
            path,
            headers,
            body: body.to_vec(),
            mount,
            tls,
            peer,
        };
        // Spawned, so a panic comes back as a JoinError (PanicError) rather
        // than unwinding through the loop's callback.
        let join = rt.spawn(async move { admin.handle(req).await });
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let reply = join.await.map_err(panicked)?;
            Ok(Answered(reply))
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "_Admin(read_only={}, max_body={})",
            if self.inner.read_only() {
                "True"
            } else {
                "False"
            },
            self.inner.max_body()
        )
    }
}

/// A reply, turned into Python on the loop that awaits it.
struct Answered(Reply);

impl<'py> IntoPyObject<'py> for Answered {
    type Target = PyTuple;
    type Output = Bound<'py, PyTuple>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let (head, stream) = match self.0 {
            Reply::Full(r) => (r, None),
            Reply::Stream(r, s) => (r, Some(s)),
        };
        let headers = PyList::empty(py);
        for (k, v) in &head.headers {
            headers.append((k.as_str(), v.as_str()))?;
        }
        let body = PyBytes::new(py, &head.body);
        let stream: Py<PyAny> = match stream {
            Some(s) => Py::new(
                py,
                PyAdminStream {
                    inner: Arc::new(StreamSlot::new(s)),
                },
            )?
            .into_any(),
            None => py.None(),
        };
        (head.status, headers, body, stream).into_pyobject(py)
    }
}

/// The frames of a live stream. Internal: the ASGI adapter awaits `next()`
/// until the client goes away, then calls `close()`, which drops the core's
/// stream (and its timer) at once.
#[pyclass(module = "headway._native", name = "_AdminStream", frozen)]
pub(crate) struct PyAdminStream {
    inner: Arc<StreamSlot<EventStream>>,
}

methods! {
    PyAdminStream {
        /// Whether `close()` was called.
        closed: bool = |c| c.closed();
    }

    /// An awaitable answering the next frame's bytes (the first at once, then
    /// one per core tick), or `None` once closed — also when `close()` comes
    /// while it waits (the core's `StreamSlot::next`). Cancelling the await
    /// drops the stream: a cancelled `next` means the client is gone.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        rt()?;
        let slot = self.inner.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let frame = slot
                .next()
                .await
                .map_err(|why| PyRuntimeError::new_err(format!("_AdminStream.next: {why}")))?;
            Ok(Frame(frame))
        })
    }

    /// Drops the stream and ends a `next()` waiting on it; every later
    /// `next()` answers `None`. Idempotent.
    fn close(&self) {
        self.inner.close();
    }
}

/// A frame as `bytes`, or `None`.
struct Frame(Option<Vec<u8>>);

impl<'py> IntoPyObject<'py> for Frame {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(match self.0 {
            Some(b) => PyBytes::new(py, &b).into_any(),
            None => py.None().into_bound(py),
        })
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyAdmin>()?;
    m.add_class::<PyAdminStream>()?;
    Ok(())
}
