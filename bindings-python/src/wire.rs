//! The asyncio loop's own socket for the shared limits' awaitables
//! (`headway/_wire.py`): the core's `limit::wire::Wire`, one per URL per
//! running loop.
//!
//! Why: an awaitable made on the core's runtime (`rt::awaitable`) crosses
//! threads twice — the loop hands the call to a runtime thread, and the
//! answer comes back through `call_soon_threadsafe`, a write to the loop's
//! self-pipe — where redis-py's asyncio client pays one wake-up, the reply
//! arriving on the loop's own socket. Here the loop's socket carries the
//! call and the reply is read on the loop; `bench/limits` measures both.
//!
//! No rules here: what is written, what a reply means, which URLs a
//! socket serves and what a lost socket means are the core's. This file
//! queues a call on the wire (or makes it on the shared link when the core
//! says the wire is down), resolves each call's asyncio future with the
//! core's reading of its reply, and hands back, as awaitables on the
//! shared link, the calls a lost socket carried.

use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use headway_core::limit::wire::{Fed, Wire};
use headway_core::limit::{Limit, Req, Waiting};
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyString};

use crate::rt::{awaitable_any, refused};

/// A call on the wire: the future its awaiter holds, and the core's
/// reading of its reply as a Python value.
struct Call {
    fut: Py<PyAny>,
    waiting: Waiting<PyResult<Py<PyAny>>>,
}

/// One connection's rules for one loop (`_wire.py`'s `_Conn` holds it).
#[pyclass(module = "headway._native", name = "_Wire", frozen)]
pub(crate) struct PyWire {
    inner: Mutex<Wire<Call>>,
}

impl PyWire {
    fn lock(&self) -> MutexGuard<'_, Wire<Call>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[pymethods]
impl PyWire {
    /// The wire for `url`, or None when the core serves that URL on the
    /// shared link only (TLS, Sentinel, Cluster).
    #[staticmethod]
    fn open(py: Python<'_>, url: &str) -> PyResult<Option<PyWire>> {
        match Wire::new(url) {
            Ok(w) => Ok(w.map(|w| PyWire {
                inner: Mutex::new(w),
            })),
            Err(r) => Err(refused(py, r)),
        }
    }

    /// Where the socket goes, and how long it may stay silent while calls
    /// wait: `(host, port, seconds)`.
    fn address(&self) -> (String, u16, f64) {
        let w = self.lock();
        let (host, port) = w.address();
        (host.to_string(), port, w.timeout().as_secs_f64())
    }

    /// The bytes to write now and whether the socket must be made first,
    /// or None.
    fn flush<'py>(&self, py: Python<'py>) -> Option<(Bound<'py, PyBytes>, bool)> {
        let (text, dial) = self.lock().flush()?;
        Some((PyBytes::new(py, text.as_bytes()), dial))
    }

    /// Bytes the socket read: the futures they answer are resolved.
    /// Answers 0, 1 when bytes wait to be written (a call sent again), or
    /// -1 when the socket is done (close it; `lost` follows).
    fn feed(&self, py: Python<'_>, data: &[u8]) -> PyResult<i32> {
        let (fed, unsent) = {
            let mut w = self.lock();
            let fed = w.feed(data);
            (fed, w.unsent())
        };
        let answers = match fed {
            Fed::Answers(a) => a,
            Fed::Broken => return Ok(-1),
        };
        for (c, reply) in answers {
            let answer = match c.waiting.finish(reply) {
                Ok(v) => v,
                Err(r) => Err(refused(py, r)),
            };
            settle(py, &c.fut, answer)?;
        }
        Ok(i32::from(unsent))
    }

    /// Whether calls wait for replies (a silent socket then is a dead one).
    fn busy(&self) -> bool {
        self.lock().busy()
    }

    /// The socket closed (or was given up): each call it carried, as
    /// `(future, awaitable)` — the awaitable the same call made on the
    /// shared link. `random` in [0, 1) draws the backoff's jitter.
    fn lost(&self, py: Python<'_>, random: f64) -> PyResult<Vec<(Py<PyAny>, Py<PyAny>)>> {
        let handed = self.lock().lost(Instant::now(), random);
        handed
            .into_iter()
            .map(|(req, c)| Ok((c.fut, awaitable_any(py, c.waiting.again(req))?.unbind())))
            .collect()
    }
}

/// Resolves `fut` with `answer` unless its awaiter gave it up (cancelled).
fn settle(py: Python<'_>, fut: &Py<PyAny>, answer: PyResult<Py<PyAny>>) -> PyResult<()> {
    let fut = fut.bind(py);
    if fut.call_method0(pyo3::intern!(py, "done"))?.is_truthy()? {
        return Ok(());
    }
    match answer {
        Ok(v) => fut.call_method1(pyo3::intern!(py, "set_result"), (v,))?,
        Err(e) => fut.call_method1(pyo3::intern!(py, "set_exception"), (e.value(py),))?,
    };
    Ok(())
}

static FUTURE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// One of `limit`'s methods, awaited: on the running loop's socket for
/// `url` when the core serves the URL there and the wire is up, else on
/// the shared link. `pick` reads the method's part of the answer.
pub(crate) fn wired<'py, L, T>(
    py: Python<'py>,
    url: &Py<PyString>,
    limit: &L,
    req: Req,
    pick: impl FnOnce(L::Answer) -> T + Send + 'static,
) -> PyResult<Bound<'py, PyAny>>
where
    L: Limit,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let future = FUTURE.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        Ok(py.import("headway._wire")?.getattr("future")?.unbind())
    })?;
    let to_py =
        move |a: L::Answer| -> PyResult<Py<PyAny>> { Python::attach(|py| pick(a).into_py_any(py)) };
    let waiting = Waiting::new(limit.clone(), to_py);
    let got = future.bind(py).call1((url.bind(py),))?;
    if got.is_none() {
        return awaitable_any(py, waiting.again(req));
    }
    let (wire, fut): (Bound<'py, PyWire>, Bound<'py, PyAny>) = got.extract()?;
    let c = Call {
        fut: fut.clone().unbind(),
        waiting,
    };
    match wire.get().lock().push(Instant::now(), req, c) {
        Ok(()) => Ok(fut),
        Err((req, c)) => awaitable_any(py, c.waiting.again(req)),
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyWire>()
}
