//! `RedisBroker`: headway's own Redis layout, or Celery's.
//!
//! The object holds the URL and options and connects on first use with the
//! clock of the app that uses it (the Redis scripts read the app's time when
//! it is virtual), so it can be built before the `App` it is given to. One
//! broker object serves one clock: an app on another clock is refused.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use headway_core::broker::celery::{CeleryBroker, CeleryOptions};
use headway_core::broker::{MemoryBroker, RedisBroker, RedisOptions, RedisUrl};
use headway_core::task::{Broker, Clock, Seams};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::dead::Raw;
use crate::rt::{block, check};
use crate::times::{SYSTEM, same_clock, span_ms};
use crate::{guard, type_name};

#[derive(Clone)]
enum Kind {
    Native { options: RedisOptions },
    Celery { options: CeleryOptions },
}

#[derive(Clone)]
enum Connected {
    Native(Arc<RedisBroker>),
    Celery(Arc<CeleryBroker>),
}

impl Connected {
    fn seams(&self) -> Seams {
        match self {
            Connected::Native(b) => b.seams(),
            Connected::Celery(b) => b.seams(),
        }
    }

    fn broker(&self) -> Arc<dyn Broker> {
        match self {
            Connected::Native(b) => b.clone(),
            Connected::Celery(b) => b.clone(),
        }
    }
}

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
    /// The URL as given (with its password), to connect with.
    dial: String,
    /// The URL as shown (password redacted).
    shown: String,
    kind: Kind,
    connected: Mutex<Option<(Connected, Arc<dyn Clock>)>>,
}

impl PyRedisBroker {
    fn checked_url(url: &str) -> PyResult<String> {
        let parsed = RedisUrl::parse(url).map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(parsed.to_string())
    }

    /// The connected broker for `clock`, connecting now if needed.
    pub(crate) fn connect(&self, py: Python<'_>, clock: &Arc<dyn Clock>) -> PyResult<Made> {
        let c = self.connection(py, clock)?;
        Ok(Made {
            seams: c.seams(),
            raw: Some(match &c {
                Connected::Native(b) => Raw::Native(b.clone()),
                Connected::Celery(b) => Raw::Celery(b.clone()),
            }),
            celery: match c {
                Connected::Celery(b) => Some(b),
                Connected::Native(_) => None,
            },
        })
    }

    fn connection(&self, py: Python<'_>, clock: &Arc<dyn Clock>) -> PyResult<Connected> {
        if let Some((c, at)) = &*self.connected.lock().unwrap_or_else(|e| e.into_inner()) {
            if !same_clock(at, clock) {
                return Err(PyValueError::new_err(
                    "this RedisBroker is already connected on another clock; build one per App",
                ));
            }
            return Ok(c.clone());
        }
        let url = self.dial.clone();
        let kind = self.kind.clone();
        let clk = clock.clone();
        let made = block(py, async move {
            match kind {
                Kind::Native { options } => RedisBroker::connect(&url, options, clk)
                    .await
                    .map(Connected::Native),
                Kind::Celery { options } => CeleryBroker::connect(&url, options, clk)
                    .await
                    .map(Connected::Celery),
            }
        })?;
        let made = check(py, made)?;
        let mut g = self.connected.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((c, _)) = &*g {
            return Ok(c.clone());
        }
        *g = Some((made.clone(), clock.clone()));
        Ok(made)
    }

    fn any_connection(&self, py: Python<'_>) -> PyResult<Connected> {
        let clock = self
            .connected
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|(_, c)| c.clone())
            .unwrap_or_else(|| SYSTEM.clone());
        self.connection(py, &clock)
    }
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
            let shown = Self::checked_url(url)?;
            let lease = match lease {
                Some(l) if !l.is_none() => span_ms("lease", l)?,
                _ => 30_000,
            };
            if lease <= 0 {
                return Err(PyValueError::new_err("invalid `lease`: must be positive"));
            }
            let lease = Duration::from_millis(lease as u64);
            let options = RedisOptions {
                consumer,
                prefix: prefix.to_string(),
                lease,
                // A dead consumer's claims are back within two leases.
                recover_every: Some(lease),
                ..RedisOptions::default()
            };
            Ok(PyRedisBroker {
                dial: url.to_string(),
                shown,
                kind: Kind::Native { options },
                connected: Mutex::new(None),
            })
        })
    }

    /// Celery's Redis layout and message format on `url`, so headway and
    /// Celery workers share queues, results and chords.
    /// `visibility_timeout` (seconds): how long a claim may stay unacked
    /// before any consumer's restore hands it back — kombu's 3600 s.
    #[staticmethod]
    #[pyo3(signature = (url, consumer=None, visibility_timeout=None), text_signature = "(url, consumer=None, visibility_timeout=3600.0)")]
    fn celery(
        url: &str,
        consumer: Option<String>,
        visibility_timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        guard(|| {
            let shown = Self::checked_url(url)?;
            let mut options = CeleryOptions {
                consumer,
                ..CeleryOptions::default()
            };
            if let Some(v) = visibility_timeout
                && !v.is_none()
            {
                let ms = span_ms("visibility_timeout", v)?;
                if ms <= 0 {
                    return Err(PyValueError::new_err(
                        "invalid `visibility_timeout`: must be positive",
                    ));
                }
                options.visibility_timeout = Duration::from_millis(ms as u64);
            }
            Ok(PyRedisBroker {
                dial: url.to_string(),
                shown,
                kind: Kind::Celery { options },
                connected: Mutex::new(None),
            })
        })
    }

    /// The URL, password redacted.
    #[getter]
    fn url(&self) -> &str {
        &self.shown
    }

    /// `"headway"` for headway's layout, `"celery"` for Celery's.
    #[getter]
    fn layout(&self) -> &'static str {
        match self.kind {
            Kind::Native { .. } => "headway",
            Kind::Celery { .. } => "celery",
        }
    }

    /// Hands back what consumers whose lease (or visibility timeout) ran out
    /// were holding, and answers how many messages went back.
    fn recover(&self, py: Python<'_>) -> PyResult<usize> {
        guard(|| {
            let b = self.any_connection(py)?.broker();
            let r = block(py, async move { b.recover().await })?;
            check(py, r)
        })
    }

    /// Lets go of this consumer's claims so another consumer takes them now
    /// rather than after the lease: call it after the worker stopped.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        guard(|| {
            let c = self
                .connected
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .map(|(c, _)| c.clone());
            let Some(c) = c else { return Ok(()) };
            let r = block(py, async move {
                match c {
                    Connected::Native(b) => {
                        b.close().await;
                        Ok(0)
                    }
                    Connected::Celery(b) => b.close().await,
                }
            })?;
            check(py, r).map(|_| ())
        })
    }

    fn __repr__(&self) -> String {
        match &self.kind {
            Kind::Native { options } => format!(
                "RedisBroker({}, prefix={}, lease={})",
                crate::host::quoted(&self.shown),
                crate::host::quoted(&options.prefix),
                options.lease.as_secs_f64()
            ),
            Kind::Celery { options } => format!(
                "RedisBroker.celery({}, visibility_timeout={})",
                crate::host::quoted(&self.shown),
                options.visibility_timeout.as_secs_f64()
            ),
        }
    }
}

/// What a `broker=` / `backend=` argument made: the seams, the Celery
/// broker behind them when it is one (it routes links by the app's queues),
/// and the concrete broker, for raw pushes.
pub(crate) struct Made {
    pub(crate) seams: Seams,
    pub(crate) celery: Option<Arc<CeleryBroker>>,
    pub(crate) raw: Option<Raw>,
}

/// The seams for a `broker=` / `backend=` argument on `clock`.
pub(crate) fn seams_arg(
    py: Python<'_>,
    name: &str,
    obj: &Bound<'_, PyAny>,
    clock: &Arc<dyn Clock>,
) -> PyResult<Made> {
    if let Ok(s) = obj.extract::<String>() {
        let lower = s.to_ascii_lowercase();
        if lower == "memory://" || lower == "memory" {
            let b = MemoryBroker::new(clock.clone());
            return Ok(Made {
                seams: Seams {
                    broker: b.clone(),
                    backend: Some(b.clone()),
                    counter: Some(b.clone()),
                    inspector: Some(b.clone()),
                },
                celery: None,
                raw: Some(Raw::Memory(b)),
            });
        }
        if lower.starts_with("redis://") || lower.starts_with("rediss://") {
            let b = PyRedisBroker::new(&s, None, "headway:", None)?;
            return b.connect(py, clock);
        }
        return Err(PyValueError::new_err(format!(
            "invalid `{name}`: {:?} is not memory://, redis:// or rediss://",
            redact(&s)
        )));
    }
    if let Ok(b) = obj.cast::<PyRedisBroker>() {
        return b.get().connect(py, clock);
    }
    Err(PyTypeError::new_err(format!(
        "`{name}` must be a URL (\"memory://\", \"redis://host:port/db\") or a headway.RedisBroker, not {}",
        type_name(obj)
    )))
}

/// A URL-ish text with anything between `//` and `@` hidden.
fn redact(s: &str) -> String {
    match (s.find("//"), s.rfind('@')) {
        (Some(a), Some(b)) if b > a => format!("{}***{}", &s[..a + 2], &s[b..]),
        _ => s.to_string(),
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRedisBroker>()?;
    Ok(())
}
