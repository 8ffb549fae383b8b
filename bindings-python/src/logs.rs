//! The core's log records, handed to Python's `logging`.
//!
//! The core delivers them in order on its `headway-log` thread; this file
//! only converts one to the callback's arguments (the `headway._log`
//! function that calls `logging.getLogger(target).log(...)`), and passes the
//! level, the flush and the line formats through. A record that comes while
//! the interpreter is finalizing is dropped.

use std::time::Duration;

use headway_core::log::sink::{self, Format};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Hands every record to `callback(level, logger, message, worker, task,
/// id, ts)`.
#[pyfunction]
fn log_to(callback: Py<PyAny>) {
    sink::deliver(move |r| {
        Python::try_attach(|py| {
            let args = (
                r.level_name(),
                &r.target,
                &r.message,
                r.worker.as_deref(),
                r.task.as_deref(),
                r.id.as_deref(),
                r.at_ms as f64 / 1000.0,
            );
            if let Err(e) = callback.call1(py, args) {
                e.write_unraisable(py, None);
            }
        });
    });
}

/// Sets the level of the core's records (`debug`, `info`, `warning`, ...);
/// answers its name as `logging` spells it.
#[pyfunction]
fn log_level(level: &str) -> PyResult<&'static str> {
    let l = sink::parse_level(level).map_err(PyValueError::new_err)?;
    sink::set_level(l);
    Ok(sink::filter_name(l))
}

/// Waits up to `timeout` seconds for the records made so far to reach
/// `logging`; answers whether they did.
#[pyfunction]
fn log_flush(py: Python<'_>, timeout: f64) -> bool {
    let t = Duration::from_secs_f64(timeout.clamp(0.0, 3600.0));
    py.detach(|| sink::flush(t))
}

/// One line in `format` (`text` or `json`), the same as the Node CLI's.
#[pyfunction]
#[pyo3(signature = (format, ts, level, logger, message, worker=None, task=None, id=None))]
#[allow(clippy::too_many_arguments)]
fn log_line(
    format: &str,
    ts: f64,
    level: &str,
    logger: &str,
    message: &str,
    worker: Option<&str>,
    task: Option<&str>,
    id: Option<&str>,
) -> PyResult<String> {
    let f = sink::parse_format(format).map_err(PyValueError::new_err)?;
    let line = sink::Line {
        ts,
        level,
        logger,
        message,
        worker,
        task,
        id,
    };
    Ok(line.format(f))
}

/// The format names, checked (`--log-format`).
#[pyfunction]
fn log_format(format: &str) -> PyResult<String> {
    Ok(
        match sink::parse_format(format).map_err(PyValueError::new_err)? {
            Format::Json => "json",
            _ => "text",
        }
        .to_string(),
    )
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(log_to, m)?)?;
    m.add_function(wrap_pyfunction!(log_level, m)?)?;
    m.add_function(wrap_pyfunction!(log_flush, m)?)?;
    m.add_function(wrap_pyfunction!(log_line, m)?)?;
    m.add_function(wrap_pyfunction!(log_format, m)?)?;
    Ok(())
}
