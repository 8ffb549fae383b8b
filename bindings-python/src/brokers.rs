//! `RedisBroker`, and what a `broker=` / `backend=` argument is.
//!
//! The core's `Target` decides what a URL means, connects once on the clock
//! of the first app that uses it and refuses another; this converts Python
//! values (seconds, `None`) and maps the refusals.

use headway_core::broker::{Connected, Layout, Store, Target};
use headway_core::task::celery_conf::{self, SendOption};
use headway_core::task::{Clock, Host};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt};
use std::sync::Arc;

use crate::app::backoff_out;
use crate::rt::wait;
use crate::times::span_ms;
use crate::{guard, invalid, opt, wrong_type};

/// A broker, result store and chord counter on Redis.
///
/// `RedisBroker(url, consumer=None, prefix="headway:", lease=30.0)` is
/// headway's own layout (`docs/redis-layout.md`): per-consumer held lists
/// kept alive by a lease — 30 s, BullMQ's lock duration — so what a worker
/// that died was holding comes back by `recover()` (run by every live broker
/// once per lease, and callable). `consumer` names this process's claims
/// (default: host, pid and a random suffix; it must be unique among live
/// processes). `RedisBroker.celery(url, consumer=None,
/// visibility_timeout=3600.0)` speaks Celery's layout and message format, so
/// one queue is shared with Celery workers and producers; the visibility
/// timeout is kombu's default.
///
/// It connects on first use, with the clock of the `App` it is given to.
#[pyclass(module = "headway._native", name = "RedisBroker", frozen)]
pub(crate) struct PyRedisBroker {
    target: Target,
}

#[pymethods]
impl PyRedisBroker {
    #[new]
    #[pyo3(signature = (url, consumer=None, prefix="headway:", lease=None), text_signature = "(url, consumer=None, prefix='headway:', lease=30.0)")]
    fn new(
        url: &str,
        consumer: Option<String>,
        prefix: &str,
        lease: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        guard(|| {
            let lease = opt(lease, |v| span_ms("lease", v))?;
            let t = Target::headway(url, consumer, Some(prefix.to_string()), lease);
            Ok(PyRedisBroker {
                target: t.map_err(invalid)?,
            })
        })
    }

    /// Celery's Redis layout and message format on `url`, so headway and
    /// Celery workers share queues, results and chords.
    /// `visibility_timeout` (seconds): how long a claim may stay unacked
    /// before any consumer's restore hands it back — kombu's 3600 s.
    /// `task_send_sent_event`: a `task-sent` event for each message sent
    /// (Celery's setting of that name). `master_name`: with Celery's
    /// Sentinel URL (`sentinel://h1:26379;sentinel://h2:26379`), the master
    /// the sentinels watch. `result_expires` (seconds): how long results
    /// live — Celery's 1 day when None; 0 keeps them for ever.
    #[staticmethod]
    #[pyo3(signature = (url, consumer=None, visibility_timeout=None, *, task_send_sent_event=false, master_name=None, result_expires=None), text_signature = "(url, consumer=None, visibility_timeout=3600.0, *, task_send_sent_event=False, master_name=None, result_expires=None)")]
    fn celery(
        url: &str,
        consumer: Option<String>,
        visibility_timeout: Option<&Bound<'_, PyAny>>,
        task_send_sent_event: bool,
        master_name: Option<String>,
        result_expires: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        guard(|| {
            let vt = opt(visibility_timeout, |v| span_ms("visibility_timeout", v))?;
            let expires = opt(result_expires, |v| span_ms("result_expires", v))?;
            let t = Target::celery_on(url, master_name.as_deref(), consumer, vt)
                .map(|t| t.task_send_sent_event(task_send_sent_event))
                .and_then(|t| match expires {
                    Some(ms) => t.result_expires(Some(ms)),
                    None => Ok(t),
                });
            Ok(PyRedisBroker {
                target: t.map_err(invalid)?,
            })
        })
    }

    /// The URL, password redacted.
    #[getter]
    fn url(&self) -> &str {
        self.target.shown()
    }

    /// `"headway"` for headway's layout, `"celery"` for Celery's.
    #[getter]
    fn layout(&self) -> &'static str {
        self.target.layout().name()
    }

    /// Hands back what consumers whose lease (or visibility timeout) ran out
    /// were holding, and answers how many messages went back.
    fn recover(&self, py: Python<'_>) -> PyResult<usize> {
        guard(|| wait(py, self.target.recover()))
    }

    /// Lets go of this consumer's claims so another consumer takes them now
    /// rather than after the lease: call it after the worker stopped.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        guard(|| wait(py, self.target.close()).map(|_| ()))
    }

    fn __repr__(&self) -> String {
        let url = crate::host::quoted(self.target.shown());
        match self.target.layout() {
            Layout::Headway(o) => format!(
                "RedisBroker({url}, prefix={}, lease={})",
                crate::host::quoted(&o.prefix),
                o.lease.as_secs_f64()
            ),
            Layout::Celery(o) => format!(
                "RedisBroker.celery({url}, visibility_timeout={})",
                o.visibility_timeout.as_secs_f64()
            ),
            other => format!("RedisBroker({url}, layout={:?})", other.name()),
        }
    }
}

/// The broker a `broker=` / `backend=` argument names, connected on `clock`.
pub(crate) fn connect_arg(
    py: Python<'_>,
    name: &str,
    obj: &Bound<'_, PyAny>,
    clock: &Arc<dyn Clock>,
) -> PyResult<Connected> {
    let t = if obj.is_none() {
        // Omitted: the core's default broker.
        Target::url_or_default(name, None).map_err(invalid)?
    } else if let Ok(s) = obj.extract::<String>() {
        Target::url(name, &s).map_err(invalid)?
    } else if let Ok(b) = obj.cast::<PyRedisBroker>() {
        b.get().target.clone()
    } else {
        let what = r#"a URL ("memory://", "redis://host:port/db") or a headway.RedisBroker"#;
        return Err(wrong_type(name, what, obj));
    };
    wait(py, t.connect(clock))
}

/// Where an app on `on` keeps results when `backend=` is `obj` (a URL or a
/// `RedisBroker`): a URL means what the core's `backend_store` says beside
/// that broker (Celery's stores beside RabbitMQ).
pub(crate) fn backend_arg(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    on: &Connected,
    clock: &Arc<dyn Clock>,
) -> PyResult<Store> {
    if let Ok(s) = obj.extract::<String>() {
        let store = headway_core::broker::target::backend_store("backend", &s, on, clock);
        return wait(py, store);
    }
    Ok(Store::In(connect_arg(py, "backend", obj, clock)?))
}

/// The broker a Celery app's `broker_url` names — `"memory"`, `"redis"`
/// or `"amqp"` — with its `result_backend` (None: the broker's store)
/// checked beside it: the core's one rule for `headway.celery` and a served
/// Celery app alike. `ValueError` naming the setting.
#[pyfunction]
#[pyo3(signature = (url, backend=None))]
fn _celery_broker(url: &str, backend: Option<&str>) -> PyResult<&'static str> {
    celery_conf::broker(url, backend)
        .map(|b| b.name())
        .map_err(PyValueError::new_err)
}

/// The queue Celery sends task `name` to (the core's `route`): `own`, the
/// task's `queue` option, else the first of `routes` (`task_routes`) whose
/// glob matches, else `default_queue`. `TypeError` for routes that are not
/// a mapping.
#[pyfunction]
#[pyo3(signature = (name, own, routes, default_queue))]
fn _celery_route(
    name: &str,
    own: Option<&str>,
    routes: &Bound<'_, PyAny>,
    default_queue: &str,
) -> PyResult<String> {
    let routes = crate::json::to_json("task_routes", "task_routes", routes)?;
    celery_conf::route(name, own, &routes, default_queue).map_err(PyTypeError::new_err)
}

/// Celery's `rate_limit` (`"10/m"`, or a number per second) as headway's
/// rate text (the core's reading); None for none.
#[pyfunction]
fn _celery_rate(v: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    let v = crate::json::to_json("rate_limit", "rate_limit", v)?;
    Ok(celery_conf::rate_limit(&v))
}

/// Celery's `apply_async` options as headway's send options, as the core's
/// `send_option` reads each name (a numeric `expires` is seconds from now:
/// a `timedelta` here); `link`, `link_error` and `headers` are left for the
/// signature. `TypeError` naming an option headway does not have.
#[pyfunction]
fn _celery_send_options<'py>(options: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyDict>> {
    let py = options.py();
    let out = PyDict::new(py);
    for (k, v) in options.iter() {
        let key: String = k.extract()?;
        let how = celery_conf::send_option(&key).map_err(PyTypeError::new_err)?;
        if v.is_none() {
            continue;
        }
        let seconds = how == SendOption::Expires
            && !v.is_instance_of::<PyBool>()
            && (v.is_instance_of::<PyInt>() || v.is_instance_of::<PyFloat>());
        match how {
            SendOption::Same | SendOption::Expires if seconds => {
                // timedelta(days, seconds): `v` seconds.
                let td = crate::json::kinds(py)?.timedelta.bind(py).call1((0, v))?;
                out.set_item(k, td)?;
            }
            SendOption::Same | SendOption::Expires => out.set_item(k, v)?,
            // `queue` wins over `routing_key`, whichever came first.
            SendOption::Queue if !out.contains("queue")? => out.set_item("queue", v)?,
            SendOption::Queue | SendOption::Signature | SendOption::Wire => {}
        }
    }
    Ok(out)
}

/// A `headway.celery` task's `autoretry_for` as headway's policy, Celery's
/// options as the core reads them (`celery_conf::autoretry`): `(retries,
/// backoff)`, the backoff a `Fixed` or an `Exponential`. `options` are the
/// task's `retry_*` options with its `max_retries` and
/// `default_retry_delay`. `TypeError` naming what headway.celery does not
/// take, `ValueError` for a backoff out of range.
#[pyfunction]
fn _celery_autoretry<'py>(
    task: &str,
    options: &Bound<'py, PyAny>,
) -> PyResult<(u32, Bound<'py, PyAny>)> {
    let o = crate::json::to_json("options", "options", options)?;
    let auto = celery_conf::autoretry(task, &o).map_err(PyTypeError::new_err)?;
    let backoff = auto.backoff.build(Host::Python).map_err(invalid)?;
    Ok((auto.retries, backoff_out(options.py(), backoff)?))
}

/// Refuses the `@app.task` options among `names` that `headway.celery`
/// does not have (`TypeError` naming them, the core's list).
#[pyfunction]
fn _celery_task_options(names: Vec<String>) -> PyResult<()> {
    celery_conf::task_options(&names).map_err(PyTypeError::new_err)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRedisBroker>()?;
    m.add_function(wrap_pyfunction!(_celery_broker, m)?)?;
    m.add_function(wrap_pyfunction!(_celery_route, m)?)?;
    m.add_function(wrap_pyfunction!(_celery_rate, m)?)?;
    m.add_function(wrap_pyfunction!(_celery_send_options, m)?)?;
    m.add_function(wrap_pyfunction!(_celery_task_options, m)?)?;
    m.add_function(wrap_pyfunction!(_celery_autoretry, m)?)?;
    m.add("_CELERY_FOREVER", celery_conf::FOREVER)?;
    m.add(
        "_CELERY_DEFAULTS",
        crate::json::dict(m.py(), &celery_conf::defaults())?,
    )?;
    Ok(())
}
