//! The task app: registry, sending, canvas, handles, workers and the beat.
//!
//! Underscore classes (`_App`, `_Worker`, `_Beat`) are driven by the
//! `headway` package, which adds the decorator, the task objects and the
//! threads; `Handle`, `Fixed` and `Exponential` are public as they are.

use std::sync::Arc;

use headway_core::task::{
    App, BackoffSpec, Beat, Canvas, ChildCommand, Clock, Handle, Host, Options, PolicySpec,
    RateSpec, Refused, RetryBackoff, SendSpec, Sig, SignalSpec, State, Worker, WorkerSpec,
};
use pyo3::PyTraverseError;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;
use pyo3::types::{PyBool, PyDict, PyInt, PyList, PyString, PyTuple};
use serde_json::Value;

use headway_core::broker::{Connected, Store};

use crate::brokers::connect_arg;
use crate::dead::{PyDeadLetter, Raw, limit_arg};
use crate::host::{Entry, PyHost};
use crate::json;
use crate::rt::{Answer, check, refused, rt, run_until_stopped, wait};
use crate::times::{
    clock_arg, instant_arg, instant_out, named_instants, rhythm_arg, secs, span_ms, when_arg,
};
use crate::{guard, int_arg, invalid, opt, some, type_name, wrong_type};
use headway_core::task::specs;

/// A `signal` argument: a name or an int (`signal.SIGKILL` is one), read
/// by the core; `None` is the core's default.
fn signal_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<i32> {
    let name: String;
    let spec = match some(obj) {
        None => None,
        Some(o) if o.is_instance_of::<PyString>() => {
            name = o.extract()?;
            Some(SignalSpec::Name(&name))
        }
        // A huge int is out of range however big: the core says so.
        Some(o) if o.is_instance_of::<PyInt>() && !o.is_instance_of::<PyBool>() => Some(
            SignalSpec::Number(o.extract::<i64>().map_or(f64::INFINITY, |n| n as f64)),
        ),
        Some(o) => return Err(wrong_type("signal", "a str or an int", o)),
    };
    headway_core::task::signal::parse(Host::Python, spec).map_err(invalid)
}

// ---------------------------------------------------------------- backoffs

/// The same wait before every retry: `delay` seconds (or a `timedelta`).
/// A negative delay raises `ValueError`.
#[pyclass(module = "headway._native", name = "Fixed", frozen)]
pub(crate) struct PyFixed {
    inner: RetryBackoff,
}

methods! {
    PyFixed, eq {
        /// The wait, in seconds.
        delay: f64 = |c| secs(c.base());
    }

    #[new]
    fn new(delay: &Bound<'_, PyAny>) -> PyResult<Self> {
        guard(|| {
            Ok(PyFixed {
                inner: BackoffSpec::Fixed {
                    delay: span_ms("delay", delay)?,
                }
                .build(Host::Python)
                .map_err(invalid)?,
            })
        })
    }

    /// Seconds waited before attempt `attempt` of run `task_id` (the first
    /// attempt is 1 and never waits).
    fn wait_before(&self, attempt: u32, task_id: &str) -> f64 {
        secs(self.inner.delay(attempt, task_id))
    }

    fn __repr__(&self) -> String {
        format!("Fixed({})", self.delay())
    }
}

/// A wait doubling from `base` to `cap` seconds. With `jitter` it is spread
/// over [0, ceiling] (full jitter, AWS's measured best), the draw derived
/// from the task id and the attempt, so a task waits the same on every
/// machine and in both languages, and a test can assert it.
///
/// The defaults, 1 s doubling to 10 min, jittered, are moontask's preset
/// (Celery's `retry_backoff_max` is also 600 s). Negative values raise
/// `ValueError`.
#[pyclass(module = "headway._native", name = "Exponential", frozen)]
pub(crate) struct PyExponential {
    inner: RetryBackoff,
}

methods! {
    PyExponential, eq {
        /// The first retry's ceiling, in seconds.
        base: f64 = |c| secs(c.base());
        /// No wait is longer, in seconds.
        cap: f64 = |c| secs(c.cap());
        /// Whether the wait is spread over [0, ceiling].
        jitter: bool = |c| c.jittered();
    }

    #[new]
    #[pyo3(signature = (base=None, cap=None, jitter=None), text_signature = "(base=1.0, cap=600.0, jitter=True)")]
    fn new(
        base: Option<&Bound<'_, PyAny>>,
        cap: Option<&Bound<'_, PyAny>>,
        jitter: Option<bool>,
    ) -> PyResult<Self> {
        guard(|| {
            let spec = BackoffSpec::Exponential {
                base: opt(base, |b| span_ms("base", b))?,
                cap: opt(cap, |c| span_ms("cap", c))?,
                jitter,
            };
            Ok(PyExponential {
                inner: spec.build(Host::Python).map_err(invalid)?,
            })
        })
    }

    /// Seconds waited before attempt `attempt` of run `task_id` (the first
    /// attempt is 1 and never waits).
    fn wait_before(&self, attempt: u32, task_id: &str) -> f64 {
        secs(self.inner.delay(attempt, task_id))
    }

    fn __repr__(&self) -> String {
        format!(
            "Exponential(base={}, cap={}, jitter={})",
            self.base(),
            self.cap(),
            if self.jitter() { "True" } else { "False" }
        )
    }
}

/// A built backoff as its Python class.
pub(crate) fn backoff_out(py: Python<'_>, b: RetryBackoff) -> PyResult<Bound<'_, PyAny>> {
    Ok(match b {
        RetryBackoff::Fixed { .. } => Bound::new(py, PyFixed { inner: b })?.into_any(),
        RetryBackoff::Exponential { .. } => Bound::new(py, PyExponential { inner: b })?.into_any(),
    })
}

fn backoff_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<BackoffSpec>> {
    let Some(o) = some(obj) else { return Ok(None) };
    if let Ok(f) = o.cast::<PyFixed>() {
        return Ok(Some(f.get().inner.into()));
    }
    if let Ok(e) = o.cast::<PyExponential>() {
        return Ok(Some(e.get().inner.into()));
    }
    Err(wrong_type(
        "backoff",
        "headway.Fixed or headway.Exponential",
        o,
    ))
}

fn rate_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<RateSpec>> {
    let Some(o) = some(obj) else { return Ok(None) };
    if let Ok(s) = o.cast::<PyString>() {
        return Ok(Some(RateSpec::Text(s.to_str()?.to_string())));
    }
    if let Ok(d) = o.cast::<PyDict>() {
        let count = d.get_item("count")?.map(|c| int_arg("rate.count", &c));
        let per = d.get_item("per")?.map(|p| span_ms("rate.per", &p));
        return Ok(Some(RateSpec::Parts {
            count: count.transpose()?.map(|c| c as f64),
            per: per.transpose()?,
        }));
    }
    let what = r#"a string like "10/m" or a dict {"count": 10, "per": 60.0}"#;
    Err(wrong_type("rate", what, o))
}

// ---------------------------------------------------------------- options

/// An optional span argument in ms (`None` stays `None`).
fn ms_arg(name: &'static str, o: Option<&Bound<'_, PyAny>>) -> PyResult<Option<i64>> {
    opt(o, |t| span_ms(name, t))
}

/// A send's options as the package hands them over: a dict holding some of
/// the core's `SEND_OPTIONS` (omitted or `None`: none given). The core
/// names a key that is no option, and decides what each value may be.
fn options(app: &App, owner: &str, d: Option<&Bound<'_, PyAny>>) -> PyResult<Options> {
    let Some(d) = some(d) else {
        return Ok(Options::default());
    };
    let d = d.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{owner}: options must be a dict, not {}",
            type_name(d)
        ))
    })?;
    for k in d.keys() {
        let k: String = k.extract()?;
        specs::send_option_key(Host::Python, owner, &k).map_err(PyTypeError::new_err)?;
    }
    let item = |name: &str| d.get_item(name);
    let when = |name: &'static str| opt(item(name)?.as_ref(), |e| when_arg(name, e, true));
    let text = |name: &str| {
        opt(item(name)?.as_ref(), |t| {
            t.extract::<String>()
                .map_err(|_| wrong_type(name, "a str", t))
        })
    };
    let spec = SendSpec {
        eta: when("eta")?,
        countdown: ms_arg("countdown", item("countdown")?.as_ref())?,
        expires: when("expires")?,
        queue: text("queue")?,
        priority: opt(item("priority")?.as_ref(), |p| int_arg("priority", p))?.map(|p| p as f64),
        id: text("task_id")?,
        concurrency_key: text("concurrency_key")?,
        dedupe_key: text("dedupe_key")?,
        dedupe_ttl: ms_arg("dedupe_ttl", item("dedupe_ttl")?.as_ref())?,
    };
    spec.options(Host::Python, || app.now()).map_err(invalid)
}

/// A canvas tree from the package — `("sig", name, args, kwargs, immutable,
/// options)`, `("chain", [...])`, `("group", [...])`, `("chord", [...],
/// callback)` — as the core's `Canvas`, converted once at send.
fn canvas_of(app: &App, tree: &Bound<'_, PyAny>) -> PyResult<Canvas> {
    let t = tree.cast::<PyTuple>().map_err(|_| {
        PyTypeError::new_err(format!(
            "a canvas node must be a tuple, not {}",
            type_name(tree)
        ))
    })?;
    let kind: String = t.get_item(0)?.extract()?;
    let list = |i: usize| -> PyResult<Vec<Canvas>> {
        let items = t.get_item(i)?;
        let mut out = Vec::new();
        for x in items.try_iter()? {
            out.push(canvas_of(app, &x?)?);
        }
        Ok(out)
    };
    match kind.as_str() {
        "sig" => {
            let name: String = t.get_item(1)?.extract()?;
            let args = json::args(&name, &t.get_item(2)?)?;
            let kw = t.get_item(3)?;
            let kwargs = json::kwargs(&name, Some(&kw))?;
            let immutable: bool = t.get_item(4)?.extract()?;
            let opts = options(app, &name, Some(&t.get_item(5)?))?;
            let mut sig = Sig::new(name, args).with_kwargs(kwargs).with_options(opts);
            if immutable {
                sig = sig.immutable();
            }
            if let Ok(h) = t.get_item(8)
                && !h.is_none()
            {
                let v = json::to_json(&sig.task, "headers", &h)?;
                if !v.is_object() {
                    return Err(PyTypeError::new_err(format!(
                        "{}: headers must be a dict, not {}",
                        sig.task,
                        type_name(&h)
                    )));
                }
                sig.extra.insert("headers".into(), v);
            }
            for (i, errors) in [(6, false), (7, true)] {
                let Ok(links) = t.get_item(i) else { continue };
                if links.is_none() {
                    continue;
                }
                for l in links.try_iter()? {
                    let l = canvas_of(app, &l?)?;
                    sig = if errors {
                        sig.link_error(&l)
                    } else {
                        sig.link(&l)
                    };
                }
            }
            Ok(Canvas::Sig(sig))
        }
        "chain" => Ok(Canvas::Chain(list(1)?)),
        "group" => Ok(Canvas::Group(list(1)?)),
        "chord" => {
            let parts = list(1)?;
            let cb = canvas_of(app, &t.get_item(2)?)?;
            Ok(Canvas::Chord(parts, Box::new(cb)))
        }
        other => Err(PyValueError::new_err(format!(
            "unknown canvas node {other:?}"
        ))),
    }
}

// ---------------------------------------------------------------- Handle

/// A run, or a set of runs (a group), to wait on, look at or revoke.
///
/// `get(timeout=None)` blocks (Ctrl-C still works) and answers the value, a
/// group's list of values in order, or raises why it will not come:
/// `TaskFailed`, `Revoked`, `Timeout` (the wait ran out; `timeout` is real
/// seconds), `Missing`. `await handle` is the same without blocking a
/// thread. `state()` answers Celery's state names.
#[pyclass(module = "headway._native", name = "Handle", frozen, generic)]
pub(crate) struct PyHandle {
    pub(crate) inner: Handle,
}

methods! {
    PyHandle {
        /// The run's id (a group's first part).
        id: &str = |c| c.id();
        /// Every id it waits on, in order (one, or a group's parts).
        ids: Vec<String> = |c| c.ids().to_vec();
        /// The previous link, when it is a chain's link sent here (Celery's
        /// `parent`), else None.
        parent: Option<PyHandle> = |c| c.parent().map(|inner| PyHandle { inner });
    }

    /// Waits for the value (a group: the list, in order). `timeout` is real
    /// seconds (float or `timedelta`); `None` waits for ever.
    #[pyo3(signature = (timeout=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let t = specs::wait(opt(timeout, |t| span_ms("timeout", t))?);
            json::to_py(py, &wait(py, self.inner.get(t))?)
        })
    }

    /// What the run is doing now, without waiting: `"PENDING"`,
    /// `"RECEIVED"`, `"STARTED"`, `"RETRY"`, `"SUCCESS"`, `"FAILURE"`,
    /// `"REVOKED"`, or a custom state its body recorded with
    /// `ctx.update_state` (e.g. `"PROGRESS"`). A group: FAILURE once any
    /// part failed, REVOKED once any was revoked, SUCCESS once all
    /// succeeded, else the first unsettled part's state.
    fn state(&self, py: Python<'_>) -> PyResult<String> {
        guard(|| wait(py, self.inner.state_name()))
    }

    /// What the run says about itself now, without waiting (Celery's
    /// `AsyncResult.info`): the value once it succeeded, the meta of a
    /// custom state its body recorded, the error as a dict (`kind`,
    /// `message`, `traceback`, `module`) for a failure, a retry or a
    /// revoke, and None while nothing is stored. A group: the list of its
    /// parts', in order.
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        guard(|| json::to_py(py, &wait(py, self.inner.info())?))
    }

    /// When it reached its final state (an aware UTC `datetime`; Celery's
    /// `date_done`), None before or when nothing is stored.
    fn date_done<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        guard(|| {
            wait(py, self.inner.date_done())?
                .map(|ms| crate::times::instant_out(py, ms))
                .transpose()
        })
    }

    /// The runs its success sent on — its `link` callbacks, its chain's
    /// next link — as handles (Celery's `children`); empty before.
    fn children(&self, py: Python<'_>) -> PyResult<Vec<PyHandle>> {
        let app = self.inner.app_of();
        guard(|| {
            Ok(wait(py, self.inner.children())?
                .into_iter()
                .map(|id| PyHandle {
                    inner: app.handle(&id),
                })
                .collect())
        })
    }

    /// Removes what is stored of it (Celery's `forget()`): it then reads
    /// as PENDING.
    fn forget(&self, py: Python<'_>) -> PyResult<()> {
        guard(|| wait(py, self.inner.forget()))
    }

    /// Revokes it: it will not start anywhere the broker reaches. With
    /// `terminate`, a run in progress stops — in whichever process on the
    /// broker runs it — and is recorded REVOKED (an async body is
    /// cancelled; a sync body's late result is discarded). `signal` names
    /// the signal a terminate carries.
    #[pyo3(signature = (terminate=false, signal=None), text_signature = "($self, terminate=False, signal='SIGTERM')")]
    fn revoke(
        &self,
        py: Python<'_>,
        terminate: bool,
        signal: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        guard(|| {
            let signal = signal_arg(signal)?;
            wait(py, self.inner.revoke_with(terminate, signal))
        })
    }

    /// Whether it has settled for good (SUCCESS, FAILURE or REVOKED).
    fn ready(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.state_of(py)?.is_final())
    }

    /// Whether it succeeded.
    fn successful(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.state_of(py)? == State::Success)
    }

    /// Whether it failed for good.
    fn failed(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.state_of(py)? == State::Failure)
    }

    fn __await__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        rt()?;
        let h = self.inner.clone();
        let fut = pyo3_async_runtimes::tokio::future_into_py(py, async move {
            Ok(Answer(h.get(None).await))
        })?;
        fut.call_method0("__await__")
    }

    fn __repr__(&self) -> String {
        if self.inner.is_set() {
            format!("Handle(group of {})", self.inner.ids().len())
        } else {
            format!("Handle({})", crate::host::quoted(self.inner.id()))
        }
    }

    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<Py<PyAny>> {
        crate::convert::richcmp(other, op, |o: &PyHandle| self.inner.ids() == o.inner.ids())
    }

    fn __hash__(&self) -> u64 {
        crate::convert::hash_debug(&self.inner.ids())
    }
}

impl PyHandle {
    fn state_of(&self, py: Python<'_>) -> PyResult<State> {
        guard(|| wait(py, self.inner.state()))
    }
}

// ---------------------------------------------------------------- Worker

/// How the `headway` package starts a process-pool child: `(program, args,
/// env)`.
type ChildArgs = (String, Vec<String>, Vec<(String, String)>);

/// The core's worker. Internal: `headway.Worker` adds the runner threads.
#[pyclass(module = "headway._native", name = "_Worker", frozen)]
pub(crate) struct PyWorker {
    inner: Worker,
}

methods! {
    PyWorker {
        /// Its name (logs, the admin page).
        name: &str = |c| c.name();
        /// The queues it claims from.
        queues: Vec<String> = |c| c.queues().to_vec();
        /// How many bodies run at once.
        concurrency: usize = |c| c.concurrency();
        /// The most messages it holds unsettled.
        prefetch: usize = |c| c.prefetch();
        /// How many messages it has settled.
        settled: u64 = |c| c.settled();
        /// Whether stop was called.
        stopping: bool = |c| c.is_stopping();
        /// The pids of its children (none on the threads pool).
        child_pids: Vec<u32> = |c| c.procs().map(|p| p.pids()).unwrap_or_default();
        /// `"process"` when its bodies run in child processes, else `"threads"`.
        pool: &'static str = |c| c.pool_name();
    }

    /// Runs until stopped, blocking this thread with the GIL released. On
    /// Ctrl-C it stops gracefully (`grace` seconds for runs in progress),
    /// waits for that, and raises the `KeyboardInterrupt`; a second Ctrl-C
    /// stops waiting.
    fn run(&self, py: Python<'_>, grace: &Bound<'_, PyAny>) -> PyResult<()> {
        guard(|| {
            let grace = specs::grace(Some(span_ms("grace", grace)?));
            let w = self.inner.clone();
            run_until_stopped(py, async move { w.run().await }, || self.inner.stop(grace))
        })
    }

    /// An awaitable that runs it on the shared runtime until stopped.
    fn run_future<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        rt()?;
        let w = self.inner.clone();
        // Resolves to `None` (JSON's null) or raises the refusal.
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            Ok(Answer(w.run().await.map(|()| Value::Null)))
        })
    }

    /// Stops claiming, gives prefetched messages back, waits up to `grace`
    /// seconds for runs in progress, then cancels and gives back the rest.
    /// Returns at once; `run` returns when it is all done.
    fn stop(&self, grace: &Bound<'_, PyAny>) -> PyResult<()> {
        guard(|| span_ms("grace", grace).map(|g| self.inner.stop(specs::grace(Some(g)))))
    }
}

// ---------------------------------------------------------------- Beat

/// The core's beat. Internal: `headway.Beat` wraps it.
#[pyclass(module = "headway._native", name = "_Beat", frozen)]
pub(crate) struct PyBeat {
    inner: Beat,
    app: App,
}

#[pymethods]
impl PyBeat {
    /// Schedules task `task` (a name) with `args`/`kwargs` under `name`
    /// (replacing an entry of that name) on `schedule`.
    #[pyo3(signature = (name, task, args, kwargs, schedule, options=None))]
    fn add(
        &self,
        name: &str,
        task: &str,
        args: &Bound<'_, PyAny>,
        kwargs: Option<&Bound<'_, PyAny>>,
        schedule: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        guard(|| {
            let rhythm = rhythm_arg("schedule", schedule)?;
            let a = json::args(task, args)?;
            let kw = json::kwargs(task, kwargs)?;
            let opts = self::options(&self.app, task, options)?;
            let sig = Sig::new(task, a).with_kwargs(kw).with_options(opts);
            let py = args.py();
            check(py, self.inner.add(name, sig, rhythm))
        })
    }

    /// Removes the entry `name`; `False` when there was none.
    fn remove(&self, name: &str) -> bool {
        self.inner.remove(name)
    }

    /// Entry names and when each fires next (aware UTC `datetime`), soonest
    /// first.
    fn pending<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        named_instants(py, self.inner.pending())
    }

    /// Sends what is due now: `(name, due, handle)` for each send.
    fn tick<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        guard(|| {
            let items = wait(py, self.inner.tick())?
                .into_iter()
                .map(|f| {
                    Ok((
                        f.name,
                        instant_out(py, f.due)?,
                        Py::new(py, PyHandle { inner: f.handle })?,
                    ))
                })
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)
        })
    }

    /// Sends due entries and sleeps until the next, until `stop()` — or,
    /// with `until` (an instant), until the app's clock reaches it. Blocks
    /// with the GIL released; Ctrl-C stops it and raises.
    #[pyo3(signature = (until=None))]
    fn run(&self, py: Python<'_>, until: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        guard(|| {
            let until = opt(until, |u| instant_arg("until", u))?;
            let b = self.inner.clone();
            run_until_stopped(py, async move { b.run(until).await }, || self.inner.stop())
        })
    }

    /// Stops `run` after the tick in progress.
    fn stop(&self) {
        self.inner.stop();
    }
}

// ---------------------------------------------------------------- App

/// The core's app. Internal: `headway.App` wraps it.
#[pyclass(module = "headway._native", name = "_App", frozen)]
pub(crate) struct PyApp {
    app: App,
    /// The host the app's bodies are served from.
    #[pyo3(get)]
    host: Py<PyHost>,
    /// The broker it is on, for raw pushes.
    raw: Raw,
}

impl PyApp {
    /// The core app, for other native classes that work on it (the admin).
    pub(crate) fn core(&self) -> &App {
        &self.app
    }
}

/// The broker an app is on and where it keeps its results.
fn footing(
    py: Python<'_>,
    broker: &Bound<'_, PyAny>,
    backend: Option<&Bound<'_, PyAny>>,
    clock: &Arc<dyn Clock>,
) -> PyResult<(Connected, Store)> {
    let on = connect_arg(py, "broker", broker, clock)?;
    let store = match some(backend) {
        None => Store::Broker,
        Some(b) if b.is_exact_instance_of::<PyBool>() => {
            if b.is_truthy()? {
                return Err(PyValueError::new_err(
                    "invalid `backend`: True is not a store; pass None (the broker's), False (none) or a URL",
                ));
            }
            Store::Nowhere
        }
        Some(b) => crate::brokers::backend_arg(py, b, &on, clock)?,
    };
    Ok((on, store))
}

#[pymethods]
impl PyApp {
    #[new]
    #[pyo3(signature = (broker, backend=None, clock=None))]
    fn new(
        py: Python<'_>,
        broker: &Bound<'_, PyAny>,
        backend: Option<&Bound<'_, PyAny>>,
        clock: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        guard(|| {
            rt()?;
            let clock = clock_arg(clock)?;
            let (on, store) = footing(py, broker, backend, &clock)?;
            let app = on.app(&store, clock);
            app.set_host(Host::Python);
            Ok(PyApp {
                app,
                host: Py::new(py, PyHost::new())?,
                raw: on,
            })
        })
    }

    /// The app's time, in epoch seconds.
    fn now(&self) -> f64 {
        secs(self.app.now())
    }

    /// Registers `func` under `name` with a policy (replacing an earlier one);
    /// answers the queue its runs go to. What is `None` is the core's default.
    #[pyo3(signature = (name, func, *, bind=false, is_async=false, queue=None, retries=None, backoff=None, timeout=None, acks_late=None, ignore_result=None, rate=None, time_limit=None, soft_time_limit=None, reject_on_worker_lost=None, retry_for=None, dont_retry_for=None, rate_scope=None, concurrency_limit=None))]
    #[allow(clippy::too_many_arguments)]
    fn register(
        &self,
        py: Python<'_>,
        name: &str,
        func: Py<PyAny>,
        bind: bool,
        is_async: bool,
        queue: Option<String>,
        retries: Option<i64>,
        backoff: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        acks_late: Option<bool>,
        ignore_result: Option<bool>,
        rate: Option<&Bound<'_, PyAny>>,
        time_limit: Option<&Bound<'_, PyAny>>,
        soft_time_limit: Option<&Bound<'_, PyAny>>,
        reject_on_worker_lost: Option<bool>,
        retry_for: Option<&Bound<'_, PyAny>>,
        dont_retry_for: Option<&Bound<'_, PyAny>>,
        rate_scope: Option<String>,
        concurrency_limit: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<String> {
        guard(|| {
            let spec = PolicySpec {
                retry_for: type_names("retry_for", retry_for)?,
                dont_retry_for: type_names("dont_retry_for", dont_retry_for)?,
                queue,
                retries: retries.map(|r| r as f64),
                backoff: backoff_arg(backoff)?,
                timeout: opt(timeout, |t| span_ms("timeout", t))?,
                acks_late,
                ignore_result,
                rate: rate_arg(rate)?,
                rate_scope,
                concurrency_limit: opt(concurrency_limit, |n| int_arg("concurrency_limit", n))?
                    .map(|n| n as f64),
                time_limit: ms_arg("time_limit", time_limit)?,
                soft_time_limit: ms_arg("soft_time_limit", soft_time_limit)?,
                reject_on_worker_lost,
            };
            let policy = spec.build(Host::Python).map_err(invalid)?;
            // Checked before the body is kept under it.
            headway_core::task::specs::name(Host::Python, name).map_err(invalid)?;
            let queue = policy.queue.clone();
            let body = self.host.get().inner.insert(
                name,
                Entry {
                    func,
                    bind,
                    is_async,
                },
            );
            check(py, self.app.register(name, policy, body))?;
            Ok(queue)
        })
    }

    /// Publishes a run of `name` with `options` (a dict, see `options`);
    /// with `known`, a name this app has not registered is refused
    /// (`UnknownTask`).
    #[pyo3(signature = (name, args, kwargs=None, options=None, *, known=true, trace=None))]
    #[allow(clippy::too_many_arguments)]
    fn send(
        &self,
        py: Python<'_>,
        name: &str,
        args: &Bound<'_, PyAny>,
        kwargs: Option<&Bound<'_, PyAny>>,
        options: Option<&Bound<'_, PyAny>>,
        known: bool,
        trace: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyHandle> {
        guard(|| {
            rt()?;
            if known && !self.app.has_task(name) {
                return Err(refused(py, Refused::UnknownTask(name.to_string())));
            }
            let a = json::args(name, args)?;
            let kw = json::kwargs(name, kwargs)?;
            let opts = self::options(&self.app, name, options)?;
            let trace = trace.map(crate::trace::carrier_arg);
            let inner = wait(py, self.app.send_traced(name, a, kw, opts, known, trace))?;
            Ok(PyHandle { inner })
        })
    }

    /// The span a traced send of `name` is: `(name, kind, attributes,
    /// task_id)`, the run's id fixed here when `task_id` is None.
    #[pyo3(signature = (name, queue=None, task_id=None))]
    fn send_span<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        queue: Option<String>,
        task_id: Option<String>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let mut o = Options {
            queue,
            id: task_id,
            ..Options::default()
        };
        let span = self.app.send_span(name, &mut o);
        let id = o.id.unwrap_or_default();
        let (n, k, a) = crate::trace::span_parts(py, &span)?;
        PyTuple::new(py, [n, k, a, PyString::new(py, &id).into_any()])
    }

    /// Turns tracing of the app's runs on or off (`headway` turns it on
    /// when OpenTelemetry has a tracer provider).
    fn set_tracing(&self, on: bool) {
        self.app.set_tracing(on);
    }

    /// Whether the app's runs are traced.
    #[getter]
    fn tracing(&self) -> bool {
        self.app.tracing()
    }

    /// Publishes a canvas tree (see `canvas_of`) and answers its handle.
    fn send_canvas(&self, py: Python<'_>, tree: &Bound<'_, PyAny>) -> PyResult<PyHandle> {
        guard(|| {
            let canvas = canvas_of(&self.app, tree)?;
            let inner = wait(py, self.app.send_canvas(canvas))?;
            Ok(PyHandle { inner })
        })
    }

    /// A handle on the run `id`, sent by anyone.
    fn handle(&self, id: &str) -> PyHandle {
        PyHandle {
            inner: self.app.handle(id),
        }
    }

    /// Every registered name, sorted.
    fn task_names(&self) -> Vec<String> {
        self.app.task_names()
    }

    /// Turns Celery's events on (`headway worker -E`).
    fn enable_task_events(&self, py: Python<'_>) -> PyResult<()> {
        crate::rt::check(py, self.app.enable_task_events())
    }

    /// Serves the app's Prometheus metrics at `http://host:port/metrics`
    /// until the process ends; answers the port (the one chosen for 0).
    fn serve_metrics(&self, py: Python<'_>, host: &str, port: i64) -> PyResult<u16> {
        let server = crate::rt::check(
            py,
            headway_core::task::metrics::serve(self.app.clone(), host, port),
        )?;
        Ok(server.addr.port())
    }

    /// `headway inspect|control` (the CLI): `command` is the command as
    /// the core's parser wrote it (`cli_parse`), sent to every node of the
    /// app and their answers gathered, as `(exit status, stdout text,
    /// stderr text)`; refused (ValueError) for a bad command, before
    /// anything is sent.
    fn remote(&self, py: Python<'_>, command: &str) -> PyResult<(i32, String, String)> {
        let ask =
            headway_core::task::control::CliAsk::parse(command).map_err(|r| refused(py, r))?;
        let p = wait(py, ask.run(&self.app))?;
        Ok((p.code, p.out, p.err))
    }

    /// A worker over `queues` (the core's `["default"]` when `None`). On
    /// `pool="process"` its children are started with `child`, a
    /// `(program, args, env)` the `headway` package makes.
    #[pyo3(signature = (queues=None, concurrency=None, prefetch=None, name=None, *, pool=None, child=None, max_tasks_per_child=None, max_memory_per_child=None, time_limit=None, soft_time_limit=None, prefetch_multiplier=None))]
    #[allow(clippy::too_many_arguments)]
    fn worker(
        &self,
        queues: Option<Vec<String>>,
        concurrency: Option<i64>,
        prefetch: Option<i64>,
        name: Option<String>,
        pool: Option<String>,
        child: Option<ChildArgs>,
        max_tasks_per_child: Option<i64>,
        max_memory_per_child: Option<i64>,
        time_limit: Option<&Bound<'_, PyAny>>,
        soft_time_limit: Option<&Bound<'_, PyAny>>,
        prefetch_multiplier: Option<i64>,
    ) -> PyResult<PyWorker> {
        guard(|| {
            let spec = WorkerSpec {
                queues,
                concurrency: concurrency.map(|c| c as f64),
                prefetch: prefetch.map(|p| p as f64),
                prefetch_multiplier: prefetch_multiplier.map(|m| m as f64),
                name,
                pool,
                child: child.map(|(program, args, env)| ChildCommand { program, args, env }),
                max_tasks_per_child: max_tasks_per_child.map(|k| k as f64),
                max_memory_per_child: max_memory_per_child.map(|k| k as f64),
                time_limit: ms_arg("time_limit", time_limit)?,
                soft_time_limit: ms_arg("soft_time_limit", soft_time_limit)?,
            };
            let cfg = spec.build(Host::Python).map_err(invalid)?;
            Ok(PyWorker {
                inner: self.app.worker(cfg).map_err(invalid)?,
            })
        })
    }

    /// In a process-pool child: serves the parent's runs (fd 3) on this
    /// thread until the parent closes the socket. Sync bodies run here;
    /// async ones on the app's loop (through the core's body).
    fn serve_child(&self, py: Python<'_>) -> PyResult<()> {
        rt()?;
        crate::host::serve_child(py, &self.host.get().inner, &self.app)
    }

    /// A new beat on this app.
    fn beat(&self) -> PyBeat {
        PyBeat {
            inner: self.app.beat(),
            app: self.app.clone(),
        }
    }

    /// Revokes runs by id; with `terminate`, stops them where they run,
    /// with `signal`.
    #[pyo3(signature = (ids, terminate=false, signal=None), text_signature = "($self, ids, terminate=False, signal='SIGTERM')")]
    fn revoke(
        &self,
        py: Python<'_>,
        ids: Vec<String>,
        terminate: bool,
        signal: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        guard(|| {
            let signal = signal_arg(signal)?;
            wait(py, self.app.revoke_with(&ids, terminate, signal))
        })
    }

    /// The dead letters of `queue`, newest first, at most `limit`.
    #[pyo3(signature = (queue, limit=None))]
    fn dead_letters(
        &self,
        py: Python<'_>,
        queue: String,
        limit: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<PyDeadLetter>> {
        guard(|| {
            let limit = limit_arg(limit, headway_core::task::dead::DEAD_LISTED)?;
            let listed = headway_core::task::dead_listed::dead_letters(&self.app, &queue, limit);
            wait(py, listed)?
                .into_iter()
                .map(|d| PyDeadLetter::new(py, d))
                .collect()
        })
    }

    /// How many dead letters `queue` keeps now.
    fn dead_count(&self, py: Python<'_>, queue: String) -> PyResult<u64> {
        let counted = headway_core::task::dead_listed::dead_count(&self.app, &queue);
        wait(py, counted)
    }

    /// Puts dead letters of `queue` back on it, oldest first: at most
    /// `limit` (all when `None`), only those whose id is in `ids` when given.
    #[pyo3(signature = (queue, limit=None, ids=None))]
    fn requeue_dead(
        &self,
        py: Python<'_>,
        queue: String,
        limit: Option<&Bound<'_, PyAny>>,
        ids: Option<Vec<String>>,
    ) -> PyResult<usize> {
        guard(|| {
            let limit = limit_arg(limit, usize::MAX)?;
            let ids = ids.unwrap_or_default();
            wait(py, self.app.broker().requeue_dead(&queue, &ids, limit))
        })
    }

    /// Drops every dead letter of `queue` for good; answers how many.
    fn purge_dead(&self, py: Python<'_>, queue: String) -> PyResult<usize> {
        guard(|| wait(py, self.app.broker().purge_dead(&queue)))
    }

    /// Puts `data` on `queue` as another producer would, unchecked (tests
    /// and tools): a worker decodes it when it claims it, and quarantines
    /// it as a dead letter if it is not a message headway runs.
    fn _push_raw(&self, py: Python<'_>, queue: String, data: Vec<u8>) -> PyResult<()> {
        guard(|| wait(py, self.raw.push(&queue, &data)))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.host)
    }
}

/// JSON for a value in a test helper: round-trips `obj` through the same
/// conversion task arguments take (raises like a send would).
#[pyfunction]
fn _json_roundtrip<'py>(py: Python<'py>, obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let v: Value = json::to_json("value", "value", obj)?;
    json::to_py(py, &v)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyFixed>()?;
    m.add_class::<PyExponential>()?;
    m.add_class::<PyHandle>()?;
    m.add_class::<PyWorker>()?;
    m.add_class::<PyBeat>()?;
    m.add_class::<PyApp>()?;
    m.add_function(wrap_pyfunction!(_json_roundtrip, m)?)?;
    m.add("GRACE", secs(headway_core::task::specs::GRACE))?;
    Ok(())
}

/// Exception types a policy names (`retry_for=ConnectionError` or a tuple
/// of types) as the core's names, `module.QualName` — how a raised
/// exception's lineage is written (`rt::failure_of`). None when not given.
fn type_names(arg: &str, v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<String>>> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    let one = |t: &Bound<'_, PyAny>| -> PyResult<String> {
        let ty = t.cast::<pyo3::types::PyType>().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "{arg}: expected an exception class or a tuple of them, got {}",
                t.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        })?;
        Ok(format!("{}.{}", ty.module()?, ty.qualname()?))
    };
    if let Ok(t) = v.cast::<pyo3::types::PyTuple>() {
        return t
            .iter()
            .map(|x| one(&x))
            .collect::<PyResult<Vec<_>>>()
            .map(Some);
    }
    one(v).map(|n| Some(vec![n]))
}
