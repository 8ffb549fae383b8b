//! The runtime bridge: the core's one tokio runtime, blocking on it without
//! holding the GIL, and the core's `Refused` as Python exceptions.
//!
//! Every sync entry point that waits on the core goes through [`block`]: it
//! polls the future once while attached (the in-memory broker answers at
//! once, so a send costs no GIL release), then waits detached in slices of
//! [`SLICE`], re-attaching between slices to run `py.check_signals()` — so
//! Ctrl-C interrupts a blocking `get()` and the GIL is never held while the
//! core works.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use headway_core::task::ask::Ask;
use headway_core::task::{BrokerErrorKind, Failure, Refused};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use serde_json::Value;
use tokio::runtime::Runtime;

use crate::PanicError;

/// How long a blocking wait stays detached before it looks at signals:
/// 100 ms: short enough that Ctrl-C is felt at once (a person notices
/// 200 ms), long enough that an idle wait costs nothing measurable.
pub(crate) const SLICE: Duration = Duration::from_millis(100);

/// The shared runtime, or a `RuntimeError` in a forked child (tokio's
/// threads do not survive `fork()`: use the `spawn` or `forkserver` start
/// methods).
pub(crate) fn rt() -> PyResult<&'static Runtime> {
    let rt =
        headway_core::runtime::runtime().map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    // pyo3-async-runtimes (`await handle`, `run_async`) runs on this same
    // runtime rather than building a second one. Once; later calls are no-ops.
    static SHARED: std::sync::Once = std::sync::Once::new();
    SHARED.call_once(|| {
        let _ = pyo3_async_runtimes::tokio::init_with_runtime(rt);
    });
    Ok(rt)
}

/// Runs `fut` to completion on the shared runtime without holding the GIL,
/// checking for signals between slices (a pending `KeyboardInterrupt` is
/// raised and the future dropped).
pub(crate) fn block<F>(py: Python<'_>, fut: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let rt = rt()?;
    let mut fut = pin!(fut);
    if let Poll::Ready(v) = headway_core::runtime::poll_first(rt, fut.as_mut(), Some(release)) {
        return Ok(v);
    }
    loop {
        let got = py.detach(|| headway_core::runtime::wait_here(rt, fut.as_mut(), SLICE));
        if let Some(v) = got {
            return Ok(v);
        }
        py.check_signals()?;
    }
}

/// Runs `job` on the shared runtime until it ends, the GIL released, for
/// a worker's, a beat's or a scheduler's `run()`. At the first Ctrl-C
/// (a signal check that raises) it calls `stop` and goes on waiting for
/// the job to wind down; a second raises at once. Raises the job's own
/// refusal first, then the first signal's error.
pub(crate) fn run_until_stopped(
    py: Python<'_>,
    job: impl Future<Output = Result<(), Refused>> + Send + 'static,
    stop: impl Fn(),
) -> PyResult<()> {
    let rt = rt()?;
    let mut join = rt.spawn(job);
    let mut interrupted: Option<PyErr> = None;
    loop {
        let got =
            py.detach(|| rt.block_on(async { tokio::time::timeout(SLICE, &mut join).await.ok() }));
        if let Some(r) = got {
            check(py, r.map_err(panicked)?)?;
            return interrupted.map_or(Ok(()), Err);
        }
        if let Err(e) = py.check_signals() {
            if interrupted.is_some() {
                return Err(e);
            }
            stop();
            interrupted = Some(e);
        }
    }
}

/// Lets the GIL go while the calling thread waits on a Redis round trip it
/// makes itself (`poll_first`), so other Python threads run meanwhile.
fn release(wait: &mut dyn FnMut()) {
    struct SameThread<'a>(&'a mut dyn FnMut());
    // SAFETY: `detach` runs the closure on this thread before it returns;
    // nothing crosses threads.
    unsafe impl Send for SameThread<'_> {}
    let f = SameThread(wait);
    // SAFETY: only `block` asks for this, inside its first poll, on a thread
    // attached to Python (it holds a `Python` token).
    unsafe { Python::assume_attached() }.detach(move || {
        let f = f;
        (f.0)()
    });
}

/// The core's `Refused` as the matching `headway` exception (the classes of
/// `headway._errors`). One match over every variant: a new variant in the
/// core fails to compile here rather than falling through to a generic
/// error (polars' `error.rs` rule).
pub(crate) fn refused(py: Python<'_>, r: Refused) -> PyErr {
    let class = |name: &str| py.import("headway._errors")?.getattr(name);
    // The core's words, for the classes that carry only a message.
    let text = r.to_string();
    let made = match r {
        Refused::Failed(f) => {
            class("TaskFailed").and_then(|c| c.call1((f.kind, f.message, f.traceback, f.module)))
        }
        Refused::Timeout => class("Timeout").and_then(|c| c.call1((text,))),
        Refused::Revoked(id) => class("Revoked").and_then(|c| c.call1((id,))),
        Refused::Missing(_) => class("Missing").and_then(|c| c.call1((text,))),
        Refused::UnknownTask(name) => class("UnknownTask").and_then(|c| c.call1((name,))),
        Refused::Broker(b) => {
            let name = match b.kind {
                BrokerErrorKind::Connection => "BrokerConnectionError",
                BrokerErrorKind::Script => "BrokerScriptError",
                BrokerErrorKind::Server => "BrokerServerError",
                BrokerErrorKind::Closed => "BrokerClosedError",
                BrokerErrorKind::Data => "BrokerDataError",
                BrokerErrorKind::Other => "BrokerError",
            };
            class(name).and_then(|c| c.call1((b.to_string(), b.kind.name())))
        }
        Refused::Invalid(why) => return PyValueError::new_err(why),
    };
    match made {
        Ok(exc) => PyErr::from_value(exc),
        Err(err) => err,
    }
}

/// [`block`] on a call of the core's, its refusal raised as [`check`] does.
pub(crate) fn wait<T: Send>(
    py: Python<'_>,
    fut: impl Future<Output = Result<T, Refused>> + Send,
) -> PyResult<T> {
    check(py, block(py, fut)?)
}

/// `Err(Refused)` as an exception, for `?`.
pub(crate) fn check<T>(py: Python<'_>, r: Result<T, Refused>) -> PyResult<T> {
    r.map_err(|e| refused(py, e))
}

/// A Python exception raised by a body, as the core's `Failure`: the type's
/// name, `str(e)`, the formatted traceback and the type's module — what
/// `TaskFailed` shows on the caller's side.
pub(crate) fn failure_of(py: Python<'_>, err: &PyErr) -> Failure {
    let value = err.value(py);
    let ty = value.get_type();
    let kind = ty
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".into());
    let message = value
        .str()
        .map(|s| s.to_string())
        .unwrap_or_else(|_| "<str() failed>".into());
    let module = ty.module().ok().map(|m| m.to_string());
    let traceback = format_traceback(py, err).ok();
    let raised = Failure {
        kind,
        message,
        traceback,
        module,
        ask: None,
        lineage: lineage(&ty).into(),
    };
    // `headway.Retry`, `Reject`, `Ignore` (and `Context.retry`) ask
    // something of the run: `_headway_ask()` answers what, in ms, and the
    // exception to record (`exc`), converted here; the core checks it.
    match value.getattr("_headway_ask") {
        Ok(f) if f.is_callable() => match asked(py, &f) {
            Ok(ask) => Ask::failure(raised, &ask),
            Err(e) => Failure::new("TypeError", format!("{}: {}", raised.kind, e.value(py))),
        },
        _ => raised,
    }
}

/// `ty` and its bases along the MRO, most specific first, as
/// `module.QualName` (`object` left out: every type has it).
fn lineage(ty: &Bound<'_, PyType>) -> Vec<String> {
    ty.mro()
        .iter()
        .filter_map(|t| {
            let t = t.cast::<PyType>().ok()?;
            let q = t.qualname().ok()?.to_string();
            let m = t.module().ok()?.to_string();
            (q != "object").then(|| format!("{m}.{q}"))
        })
        .collect()
}

/// What `_headway_ask()` answers, as the core's JSON: `(dict, exc | None)`.
fn asked(py: Python<'_>, f: &Bound<'_, PyAny>) -> PyResult<Value> {
    let (ask, exc): (Bound<'_, PyAny>, Bound<'_, PyAny>) = f.call0()?.extract()?;
    let mut v = crate::json::to_json("ask", "ask", &ask)?;
    if !exc.is_none() {
        let cause = failure_of(py, &PyErr::from_value(exc));
        if let (Value::Object(o), Ok(c)) = (&mut v, serde_json::to_value(cause)) {
            o.insert("cause".into(), c);
        }
    }
    Ok(v)
}

static FORMAT_EXCEPTION: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn format_traceback(py: Python<'_>, err: &PyErr) -> PyResult<String> {
    let f = FORMAT_EXCEPTION.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        Ok(py
            .import("traceback")?
            .getattr("format_exception")?
            .unbind())
    })?;
    // The three-argument form: on 3.11 a fetched error keeps its traceback
    // beside the value, not in `__traceback__`.
    let lines = f
        .bind(py)
        .call1((err.get_type(py), err.value(py), err.traceback(py)))?;
    let joined = pyo3::types::PyString::new(py, "").call_method1("join", (lines,))?;
    joined.extract()
}

/// What a result wait answers, turned into Python on the loop that awaits
/// it (pyo3-async-runtimes converts it attached).
pub(crate) struct Answer(pub(crate) Result<Value, Refused>);

impl<'py> IntoPyObject<'py> for Answer {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.0 {
            Ok(v) => crate::json::to_py(py, &v),
            Err(r) => Err(refused(py, r)),
        }
    }
}

/// A Rust panic caught in a spawned task, as `PanicError`.
pub(crate) fn panicked(e: tokio::task::JoinError) -> PyErr {
    if e.is_panic() {
        PanicError::new_err(headway_core::runtime::panicked(&*e.into_panic()))
    } else {
        PyRuntimeError::new_err("headway's runtime cancelled the task (is the process exiting?)")
    }
}

/// [`awaitable`] of a call whose answer is already converted: a Python
/// value, or the error converting it.
pub(crate) fn awaitable_any<'py, T, F>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = Result<PyResult<T>, Refused>> + Send + 'static,
    T: for<'a> pyo3::IntoPyObject<'a> + Send + 'static,
{
    let join = rt()?.spawn(fut);
    pyo3_async_runtimes::tokio::future_into_py(py, async move {
        match join.await.map_err(panicked)? {
            Ok(v) => v,
            Err(r) => Err(Python::attach(|py| refused(py, r))),
        }
    })
}

/// A core call as a Python awaitable: spawned on the shared runtime (a
/// panic comes back as `PanicError`), its `Refused` raised as the matching
/// exception. What every `a…` method of the shared limits returns.
pub(crate) fn awaitable<'py, T, F>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = Result<T, Refused>> + Send + 'static,
    T: for<'a> pyo3::IntoPyObject<'a> + Send + 'static,
{
    awaitable_any(py, async move { fut.await.map(Ok) })
}
