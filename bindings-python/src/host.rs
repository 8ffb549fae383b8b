//! Python bodies, called through the core's `HostQueue` in batches.
//!
//! The core never calls Python from a tokio thread. A registered body is a
//! `HostQueue` body: a run pushes a call and waits for its answer. Python
//! threads take the calls:
//! - **sync bodies**: runner threads (as many as the worker's concurrency)
//!   serve in the core's `Crew`, which decides which thread runs calls and
//!   when another joins (one watcher waits with the GIL released; a stream
//!   of fast bodies runs on one thread, one GIL crossing per busy stretch);
//!   this file gives it the GIL's release and one call's run, answering
//!   each call as it returns, so a slow body never holds back a fast one's
//!   result;
//! - **async bodies**: a pump thread takes calls in batches and hands each
//!   batch to an asyncio loop with one `call_soon_threadsafe`; the loop
//!   starts a task per call and answers from its done callback. Calls the
//!   core withdrew (a timeout, a terminate, a stop) are reported by
//!   `cancelled()`; the pump hands them to the loop, which cancels their tasks.
//!
//! A sync body cannot be interrupted: when the core stops waiting for it, its
//! late answer is discarded by `finish`, and its thread, stuck until the body
//! returns, is replaced: the runners are staffed in the core's `Runners`
//! ledger (`staff`), a hiring thread starts what `hire` answers, and a thread
//! back from an abandoned call asks `retire` whether it is one too many. How
//! many, up to what cap, and when the worker is unhealthy are the core's
//! decisions; this file only starts and ends threads.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use headway_core::task::Host as HostLang;
use headway_core::task::{Body, Call, Context, Crew, Failure, HostQueue, Next, Runners};
use pyo3::PyTraverseError;
use pyo3::exceptions::PyLookupError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyTuple};
use serde_json::Value;

use crate::json;
use crate::rt::{SLICE, failure_of};
use crate::times::instant_out;

/// How many async calls one pump wake-up hands to the loop at most.
const ASYNC_BATCH: usize = 256;

/// A registered body.
pub(crate) struct Entry {
    pub(crate) func: Py<PyAny>,
    pub(crate) bind: bool,
    pub(crate) is_async: bool,
}

/// The queues and the registry one app (or one scheduler) serves from.
pub(crate) struct Host {
    pub(crate) sync_q: Arc<HostQueue>,
    pub(crate) async_q: Arc<HostQueue>,
    entries: RwLock<HashMap<String, Arc<Entry>>>,
    soft: crate::soft::Soft,
}

impl Host {
    pub(crate) fn new() -> Arc<Host> {
        Arc::new(Host {
            sync_q: HostQueue::new(),
            async_q: HostQueue::new(),
            entries: RwLock::new(HashMap::new()),
            soft: crate::soft::Soft::default(),
        })
    }

    fn entry(&self, key: &str) -> Option<Arc<Entry>> {
        self.entries
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    /// Registers `func` under `key` and answers the core body that queues
    /// its calls (on the sync or the async queue).
    pub(crate) fn insert(&self, key: &str, entry: Entry) -> Arc<dyn Body> {
        let q = if entry.is_async {
            &self.async_q
        } else {
            &self.sync_q
        };
        let body = q.body(key);
        self.entries
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_string(), Arc::new(entry));
        body
    }
}

// ---------------------------------------------------------------- Context

/// What a task body is told about the run it is in.
///
/// `retries` is how many attempts before this one failed, `attempt` is this
/// one counting from 1, and `last` says whether a failure now is final — a
/// body that must not repeat a side effect checks it before doing the work
/// again. `now` is the app's time when the run started (aware UTC
/// `datetime`). Passed first to a `bind=True` body; `headway.current()`
/// answers it anywhere inside a run.
#[pyclass(module = "headway._native", name = "Context", frozen)]
pub(crate) struct PyCtx {
    pub(crate) inner: Context,
}

methods! {
    PyCtx {
        /// The run's id (also its result's key; a retry keeps it).
        id: &str = |c| &c.id;
        /// The task's registered name.
        name: &str = |c| &c.name;
        /// The queue the message came from.
        queue: &str = |c| &c.queue;
        /// The name of the worker running it (empty outside a worker).
        worker: &str = |c| &c.worker;
        /// Attempts before this one that failed.
        retries: u32 = |c| c.retries;
        /// This attempt, counting from 1.
        attempt: u32 = |c| c.attempt;
        /// Whether a failure now is final (no retry follows).
        last: bool = |c| c.last;
        /// The first run of the canvas this run belongs to, if any.
        root_id: Option<&str> = |c| c.root_id.as_deref();
        /// The run that sent this one (the previous link of a chain), if any.
        parent_id: Option<&str> = |c| c.parent_id.as_deref();
        /// The run's soft time limit in seconds (its task's, else its
        /// worker's), or None.
        soft_time_limit: Option<f64> = |c| c.soft_time_limit.map(|ms| ms as f64 / 1000.0);
        /// The run's hard time limit in seconds, or None.
        time_limit: Option<f64> = |c| c.time_limit.map(|ms| ms as f64 / 1000.0);
    }

    /// What the run comes to if its body returns (`exc` None) or raises
    /// `exc`: `SUCCESS`, `RETRY`, `FAILURE`, `REJECTED` or `IGNORED` (the
    /// core's rule, for `headway.signals`).
    #[pyo3(signature = (exc=None))]
    fn _state_after(&self, py: Python<'_>, exc: Option<Bound<'_, PyAny>>) -> &'static str {
        let f = exc.map(|e| failure_of(py, &PyErr::from_value(e)));
        self.inner.state_after(f.as_ref())
    }
    /// Asks for this run to be retried on its own terms, as Celery's
    /// `self.retry`: raises `headway.TaskRetry(countdown=, eta=,
    /// max_retries=, exc=)`, which the body lets propagate.
    #[pyo3(signature = (*, countdown=None, eta=None, max_retries=None, exc=None))]
    fn retry(
        &self,
        py: Python<'_>,
        countdown: Option<Bound<'_, PyAny>>,
        eta: Option<Bound<'_, PyAny>>,
        max_retries: Option<Bound<'_, PyAny>>,
        exc: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let kw = PyDict::new(py);
        kw.set_item("countdown", countdown)?;
        kw.set_item("eta", eta)?;
        kw.set_item("max_retries", max_retries)?;
        kw.set_item("exc", exc)?;
        let e = py
            .import("headway._errors")?
            .getattr("TaskRetry")?
            .call((), Some(&kw))?;
        Err(PyErr::from_value(e))
    }
    /// Records a custom state for this run while it runs (Celery's
    /// `self.update_state`): `state` a name such as `"PROGRESS"` (not
    /// SUCCESS, FAILURE or REVOKED, not empty: `ValueError`), `meta` any
    /// JSON value (`TypeError` otherwise). `handle.state()` then answers the
    /// name and `handle.info()` the meta, until the run's final state
    /// overwrites them. Blocks until stored; stores nothing on a direct call
    /// or when the app keeps no results; `ValueError` in a process-pool
    /// child.
    #[pyo3(signature = (state, meta=None))]
    fn update_state(
        &self,
        py: Python<'_>,
        state: &str,
        meta: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let meta = match meta {
            Some(m) => json::to_json(&self.inner.name, "meta", &m)?,
            None => Value::Null,
        };
        crate::rt::wait(py, self.inner.update_state(state, meta))
    }
    /// The run's span when its app traces: `(name, kind, attributes,
    /// carrier)`, the carrier what the message carried for the propagator
    /// to extract; None when the app does not trace.
    fn _trace<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let Some(t) = &self.inner.trace else {
            return Ok(None);
        };
        let span = headway_core::task::trace::run_span(&self.inner);
        let (n, k, a) = crate::trace::span_parts(py, &span)?;
        let carrier = crate::json::dict(py, &t.carrier)?;
        Ok(Some(PyTuple::new(py, [n, k, a, carrier.into_any()])?))
    }
    /// What the run's span is told when the body returned (`exc` None) or
    /// raised `exc` (`reason` its text): `(attributes, error)`.
    #[pyo3(signature = (exc, reason))]
    fn _trace_end<'py>(
        &self,
        py: Python<'py>,
        exc: Option<Bound<'py, PyAny>>,
        reason: &str,
    ) -> PyResult<(Bound<'py, PyDict>, bool)> {
        let f = exc.map(|e| failure_of(py, &PyErr::from_value(e)));
        let end = headway_core::task::trace::run_end(&self.inner, f.as_ref(), reason);
        Ok((crate::trace::attributes(py, &end.attributes)?, end.error))
    }
    /// The app's time when the run started, as an aware UTC `datetime`.
    #[getter]
    fn now<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        instant_out(py, self.inner.now)
    }
    /// The run's keyword arguments (a fresh dict).
    #[getter]
    fn kwargs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        json::dict(py, &self.inner.kwargs)
    }
    /// Celery's `self.request` fields for this run but `args` and
    /// `kwargs`, the queue named as Celery names it (`default_queue` for
    /// headway's `default`).
    fn _celery_request<'py>(
        &self,
        py: Python<'py>,
        default_queue: &str,
    ) -> PyResult<Bound<'py, PyDict>> {
        json::dict(
            py,
            &headway_core::task::request::celery_request(&self.inner, default_queue),
        )
    }
    fn __repr__(&self) -> String {
        let c = &self.inner;
        format!(
            "Context(id={}, name={}, queue={}, retries={}, attempt={}, last={})",
            quoted(&c.id),
            quoted(&c.name),
            quoted(&c.queue),
            c.retries,
            c.attempt,
            if c.last { "True" } else { "False" }
        )
    }
}

/// `s` as Python's `repr` of a plain string spells it.
pub(crate) fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

// One slot per thread, replaced per call: its size does not matter, and
// boxing the context would cost an allocation per run.
#[allow(clippy::large_enum_variant)]
enum Current {
    Rust(Context),
    Py(Py<PyCtx>),
}

thread_local! {
    /// The run a sync body on this thread is in.
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
}

/// The context variable async bodies read: set in each task's context.
pub(crate) static CURRENT_VAR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

pub(crate) fn current_var(py: Python<'_>) -> PyResult<&Py<PyAny>> {
    CURRENT_VAR.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        let kw = PyDict::new(py);
        kw.set_item("default", py.None())?;
        Ok(py
            .import("contextvars")?
            .getattr("ContextVar")?
            .call(("headway.current",), Some(&kw))?
            .unbind())
    })
}

/// The `Context` of the run this code is inside — a sync body, an async
/// body, or anything either calls. `LookupError` outside a run.
#[pyfunction]
pub(crate) fn current(py: Python<'_>) -> PyResult<Py<PyCtx>> {
    let v = current_var(py)?.bind(py).call_method0("get")?;
    if !v.is_none() {
        return Ok(v.cast_into::<PyCtx>()?.unbind());
    }
    CURRENT.with(|c| {
        let mut slot = c.borrow_mut();
        // A sync body's context becomes its Python object on first ask.
        let p = match slot.take() {
            Some(Current::Py(p)) => p,
            Some(Current::Rust(ctx)) => Py::new(py, PyCtx { inner: ctx })?,
            None => {
                return Err(PyLookupError::new_err(
                    "headway.current() was called outside a task run",
                ));
            }
        };
        let out = p.clone_ref(py);
        *slot = Some(Current::Py(p));
        Ok(out)
    })
}

/// Celery's `self.request` outside a run (headway.celery's `Request` of a
/// direct call), as the core words it beside a run's.
#[pyfunction]
fn _celery_request_direct(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    json::dict(py, &headway_core::task::request::celery_request_direct())
}

/// A `Context` for a direct call of a `bind=True` task (`task(...)` runs
/// the body here, not on a worker): first attempt, last, the app's now.
#[pyfunction]
fn _direct_context(id: String, name: String, queue: String, now: f64) -> PyCtx {
    let now = (now * 1000.0).round() as i64;
    PyCtx {
        inner: Context::direct(id, name, queue, now),
    }
}

/// Restores the previous current run when a body returns (or unwinds).
struct Restore(Option<Current>);

impl Drop for Restore {
    fn drop(&mut self) {
        let prev = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = prev);
    }
}

// ---------------------------------------------------------------- serving

/// A stop flag shared by one worker's threads, and their turn-taking.
#[pyclass(module = "headway._native", name = "_Flag", frozen)]
pub(crate) struct PyFlag {
    pub(crate) inner: Arc<Crew>,
}

#[pymethods]
impl PyFlag {
    #[new]
    fn new() -> Self {
        PyFlag {
            inner: Arc::new(Crew::new()),
        }
    }
    /// Asks the threads serving with it to stop.
    fn set(&self) {
        self.inner.stop_all();
    }
    /// Whether it was set.
    fn is_set(&self) -> bool {
        self.inner.stopped()
    }
}

/// A call's keyword arguments as Python takes them: None when there are none.
fn kwargs_of<'py>(
    py: Python<'py>,
    kwargs: &serde_json::Map<String, Value>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    (!kwargs.is_empty())
        .then(|| json::dict(py, kwargs))
        .transpose()
}

/// A call's positional arguments as a tuple, `first` (a bound body's
/// context) before them.
fn args_tuple<'py>(
    py: Python<'py>,
    first: Option<Bound<'py, PyAny>>,
    args: &[Value],
) -> PyResult<Bound<'py, PyTuple>> {
    let mut items = Vec::with_capacity(args.len() + 1);
    items.extend(first);
    for a in args {
        items.push(json::to_py(py, a)?);
    }
    PyTuple::new(py, items)
}

fn run_sync(py: Python<'_>, host: &Host, call: Call) -> bool {
    let Call {
        seq,
        key,
        ctx,
        args,
    } = call;
    let result = match host.entry(&key) {
        None => Err(Failure::unregistered(HostLang::Python, &key)),
        Some(e) => {
            host.soft.running(seq);
            let r = call_sync(py, &e, &key, ctx, &args);
            host.soft.ran(py, seq);
            r
        }
    };
    host.sync_q.finish(seq, result)
}

/// A process-pool child's loop, on its main thread: takes a run from the
/// parent (blocking, the GIL released), runs a sync body right here under
/// its soft limit, or an async one through the core's body (the loop's
/// thread runs it), and answers. Ends when the parent closes the socket.
pub(crate) fn serve_child(
    py: Python<'_>,
    host: &Arc<Host>,
    app: &headway_core::task::App,
) -> PyResult<()> {
    use headway_core::task::procs::child::{Conn, SoftTimer, not_registered};
    let io = |e: std::io::Error| pyo3::exceptions::PyOSError::new_err(e.to_string());
    // SAFETY: `python -m headway._child` is started by the core's process
    // pool with its socket on fd 3, and nothing else uses it.
    let mut conn = py.detach(|| unsafe { Conn::open() }).map_err(io)?;
    // The class the app's module registered (a served Celery app's is
    // Celery's too), looked up once the app is loaded.
    let exc: Py<PyAny> = py
        .import("headway._errors")?
        .getattr("_raised_soft")?
        .call0()?
        .unbind();
    let fired = host.clone();
    let timer = SoftTimer::new(move |seq| {
        Python::try_attach(|py| fired.soft.soften(py, &[seq], exc.bind(py)));
    })
    .map_err(io)?;
    while let Some(job) = py.detach(|| conn.take()).map_err(io)? {
        let (seq, soft) = (job.seq, job.ctx.soft_time_limit);
        let r = match host.entry(&job.key) {
            Some(e) if !e.is_async => {
                if let Some(ms) = soft {
                    timer.arm(seq, ms);
                }
                host.soft.running(seq);
                let r = call_sync(py, &e, &job.key, job.ctx, &job.args);
                host.soft.ran(py, seq);
                timer.disarm();
                r
            }
            _ => {
                let reg = app.registered(&job.key);
                py.detach(|| match reg {
                    Some(reg) => crate::rt::rt()
                        .map_err(|e| Failure::new("RuntimeError", e.to_string()))
                        .and_then(|rt| rt.block_on(reg.body.call(job.ctx, job.args))),
                    None => Err(not_registered(&job.key)),
                })
            }
        };
        py.detach(|| conn.answer(seq, r)).map_err(io)?;
    }
    Ok(())
}

/// A serving thread's place in the core's count: it leaves when the thread
/// ends, unless it retired (already uncounted).
struct Seat {
    runners: Arc<Runners>,
    counted: bool,
}

impl Drop for Seat {
    fn drop(&mut self) {
        if self.counted {
            self.runners.leave();
        }
    }
}

/// The function `headway.signals` installs while any task signal has a
/// receiver: called on the body's thread, the run current, as `hook("pre",
/// name, args, kwargs, None, True)` before a sync body and `hook("post",
/// name, args, kwargs, value_or_exception, returned)` after it — the same
/// call `_serve` makes around an async body, so the hook reads the run's id
/// and what it came to (`Context._state_after`) one way for both. None: no
/// call, no cost but a read lock.
static TASK_HOOK: RwLock<Option<Py<PyAny>>> = RwLock::new(None);

/// Installs (or, with None, removes) the task hook (`headway.signals`).
#[pyfunction]
#[pyo3(signature = (hook=None))]
pub(crate) fn _set_task_hook(hook: Option<Py<PyAny>>) {
    *TASK_HOOK.write().unwrap_or_else(|e| e.into_inner()) = hook;
}

fn task_hook(py: Python<'_>) -> Option<Py<PyAny>> {
    TASK_HOOK
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(|h| h.clone_ref(py))
}

/// One call of the task hook; what it raises is reported as unraisable
/// (a receiver's error never fails the run).
fn fire(
    py: Python<'_>,
    hook: &Py<PyAny>,
    (phase, key): (&str, &str),
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
    (out, returned): (Option<Bound<'_, PyAny>>, bool),
) {
    let r = hook.call1(py, (phase, key, args, kwargs, out, returned));
    if let Err(err) = r {
        err.write_unraisable(py, None);
    }
}

fn call_sync(
    py: Python<'_>,
    e: &Entry,
    key: &str,
    ctx: Context,
    args: &[Value],
) -> Result<Value, Failure> {
    let hook = task_hook(py);
    let prepared = (|| -> PyResult<_> {
        let kwargs = kwargs_of(py, &ctx.kwargs)?;
        let (first, current) = if e.bind {
            let p = Py::new(py, PyCtx { inner: ctx })?;
            (Some(p.bind(py).clone().into_any()), Current::Py(p))
        } else {
            (None, Current::Rust(ctx))
        };
        Ok((args_tuple(py, first, args)?, kwargs, current))
    })();
    let (tuple, kwargs, current) = prepared.map_err(|err| failure_of(py, &err))?;
    let prev = CURRENT.with(|c| c.borrow_mut().replace(current));
    let restore = Restore(prev);
    // The hook sees the run's own arguments (not a bound body's context).
    let hooked = hook.map(|h| {
        let own = if e.bind {
            tuple.get_slice(1, tuple.len())
        } else {
            tuple.clone()
        };
        fire(py, &h, ("pre", key), &own, kwargs.as_ref(), (None, true));
        (h, own)
    });
    let ret = e.func.bind(py).call(tuple, kwargs.as_ref());
    if let Some((h, own)) = &hooked {
        let out = match &ret {
            Ok(v) => v.clone(),
            Err(err) => err.value(py).clone().into_any(),
        };
        let returned = ret.is_ok();
        fire(
            py,
            h,
            ("post", key),
            own,
            kwargs.as_ref(),
            (Some(out), returned),
        );
    }
    drop(restore);
    match ret {
        Ok(v) => result_json(py, key, &v),
        Err(err) => Err(failure_of(py, &err)),
    }
}

/// A body's return value as JSON, or the failure saying why it cannot be.
pub(crate) fn result_json(
    py: Python<'_>,
    key: &str,
    v: &Bound<'_, PyAny>,
) -> Result<Value, Failure> {
    match json::to_json(key, "result", v) {
        Ok(j) => Ok(j),
        Err(err) => {
            if v.hasattr("__await__").unwrap_or(false) {
                if v.hasattr("close").unwrap_or(false) {
                    let _ = v.call_method0("close");
                }
                return Err(Failure::returned_awaitable(key));
            }
            Err(failure_of(py, &err))
        }
    }
}

/// The queues and registry of an app or a scheduler, served by Python
/// threads. Internal: `headway` drives it.
#[pyclass(module = "headway._native", name = "_Host", frozen)]
pub(crate) struct PyHost {
    pub(crate) inner: Arc<Host>,
}

#[pymethods]
impl PyHost {
    #[new]
    pub(crate) fn new() -> Self {
        PyHost { inner: Host::new() }
    }

    /// Whether any sync body is registered.
    fn has_sync(&self) -> bool {
        self.inner
            .entries
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .any(|e| !e.is_async)
    }

    /// Counts `n` runner threads the caller is about to start (each then
    /// calls `serve`).
    fn staff(&self, n: usize) {
        self.inner.sync_q.runners().staff(n);
    }

    /// The caller no longer asks for its `n` runners (it stopped).
    fn unstaff(&self, n: usize) {
        self.inner.sync_q.runners().unstaff(n);
    }

    /// How many replacement runner threads to start now (each then calls
    /// `serve`), waiting up to a slice with the GIL released; 0 when none is
    /// wanted or `flag` is set. They are counted already: one that cannot
    /// start is given back with `leave`.
    fn hire(&self, py: Python<'_>, flag: &PyFlag) -> usize {
        if flag.inner.stopped() {
            return 0;
        }
        let r = self.inner.sync_q.runners().clone();
        py.detach(|| r.hire(SLICE))
    }

    /// Raises `exc` (`SoftTimeLimitExceeded`) in each sync body past its
    /// soft time limit, until `flag` is set: waits a slice at a time with
    /// the GIL released.
    fn soften(&self, py: Python<'_>, flag: &PyFlag, exc: &Bound<'_, PyAny>) {
        let host = self.inner.clone();
        while !flag.inner.stopped() {
            let seqs = py.detach(|| host.sync_q.softened_blocking(SLICE));
            if !seqs.is_empty() {
                host.soft.soften(py, &seqs, exc);
            }
        }
    }

    /// Sets up a process-pool child: with each soft limit also raise signal
    /// `sig` in this process (it wakes the main thread out of a blocking
    /// call).
    fn as_child(&self, sig: i32) {
        self.inner.soft.wake_with(sig);
    }

    /// A runner counted by `staff` or `hire` that never served.
    fn leave(&self) {
        self.inner.sync_q.runners().leave();
    }

    /// The sync runners' health: `healthy` (false while every thread is
    /// stuck in a body past its timeout and no more may start), `why`,
    /// `runners` (staffed), `threads`, `stuck`, `stuck_cap`.
    fn runners<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        json::dict(py, &self.inner.sync_q.runners().health().json())
    }

    /// Serves sync calls on this thread until `flag` is set: blocks with the
    /// GIL released, then runs calls attached for as long as they keep coming.
    /// Ends early when, back from a call the core abandoned, the core says
    /// the thread is one too many.
    fn serve(&self, py: Python<'_>, flag: &PyFlag) {
        let host = self.inner.clone();
        let mut seat = Seat {
            runners: host.sync_q.runners().clone(),
            counted: true,
        };
        flag.inner.serve(
            &host.sync_q,
            |wait| py.detach(wait),
            |c| {
                if run_sync(py, &host, c) && seat.runners.retire() {
                    seat.counted = false;
                    return Next::Leave;
                }
                Next::Go
            },
        );
    }

    /// Serves async calls until `flag` is set: takes them in batches with the
    /// GIL released and hands each batch to `deliver(batch)` — a list of
    /// `(seq, name, func, args, kwargs, context)` — and each list of
    /// withdrawn calls to `cancel(seqs)`. Both run on this thread and are
    /// expected to post to the loop (`call_soon_threadsafe`).
    fn pump(
        &self,
        py: Python<'_>,
        flag: &PyFlag,
        deliver: &Bound<'_, PyAny>,
        cancel: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let host = self.inner.clone();
        let crew = flag.inner.clone();
        loop {
            let stopping = crew.stopped();
            let calls = if stopping {
                Vec::new()
            } else {
                py.detach(|| host.async_q.take_blocking(ASYNC_BATCH, SLICE))
            };
            let gone = host.async_q.cancelled();
            if !gone.is_empty() {
                cancel.call1((gone,))?;
            }
            if stopping {
                return Ok(());
            }
            if calls.is_empty() {
                continue;
            }
            let mut seqs = Vec::with_capacity(calls.len());
            let batch = PyList::empty(py);
            for c in calls {
                let Call {
                    seq,
                    key,
                    ctx,
                    args,
                } = c;
                let Some(e) = host.entry(&key) else {
                    host.async_q
                        .finish(seq, Err(Failure::unregistered(HostLang::Python, &key)));
                    continue;
                };
                let item = (|| -> PyResult<Bound<'_, PyTuple>> {
                    let kwargs = kwargs_of(py, &ctx.kwargs)?;
                    let p = Bound::new(py, PyCtx { inner: ctx })?.into_any();
                    let args = args_tuple(py, e.bind.then(|| p.clone()), &args)?;
                    (seq, &*key, e.func.bind(py), args, kwargs, p).into_pyobject(py)
                })();
                match item {
                    Ok(t) => {
                        seqs.push(seq);
                        batch.append(t)?;
                    }
                    Err(err) => {
                        host.async_q.finish(seq, Err(failure_of(py, &err)));
                    }
                }
            }
            if seqs.is_empty() {
                continue;
            }
            if let Err(err) = deliver.call1((batch,)) {
                let f = failure_of(py, &err);
                host.async_q
                    .finish_many(seqs.into_iter().map(|s| (s, Err(f.clone()))).collect());
            }
        }
    }

    /// Answers async call `seq` of task `name` with its return value.
    fn finish(&self, py: Python<'_>, seq: u64, name: &str, value: &Bound<'_, PyAny>) {
        let r = result_json(py, name, value);
        self.inner.async_q.finish(seq, r);
    }

    /// Answers async call `seq` with the exception its body raised.
    fn fail(&self, py: Python<'_>, seq: u64, exc: &Bound<'_, PyAny>) {
        let err = PyErr::from_value(exc.clone());
        self.inner.async_q.finish(seq, Err(failure_of(py, &err)));
    }

    /// Answers async call `seq` as cancelled (its task was cancelled).
    fn cancelled(&self, seq: u64) {
        self.inner.async_q.finish(seq, Err(Failure::cancelled()));
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        let g = match self.inner.entries.try_read() {
            Ok(g) => g,
            Err(_) => return Ok(()),
        };
        for e in g.values() {
            visit.call(&e.func)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        if let Ok(mut g) = self.inner.entries.write() {
            g.clear();
        }
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyCtx>()?;
    m.add_class::<PyFlag>()?;
    m.add_class::<PyHost>()?;
    m.add_function(wrap_pyfunction!(current, m)?)?;
    m.add_function(wrap_pyfunction!(_direct_context, m)?)?;
    m.add_function(wrap_pyfunction!(_celery_request_direct, m)?)?;
    m.add_function(wrap_pyfunction!(_set_task_hook, m)?)?;
    m.add("_CURRENT", current_var(py)?.clone_ref(py))?;
    Ok(())
}
