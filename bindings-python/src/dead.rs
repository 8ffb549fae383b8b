//! Dead letters: what a worker set aside rather than ran, as
//! `headway.DeadLetter` values; and raw bytes pushed onto a queue as another
//! producer would, for tests and tools.
//!
//! Listing, counting, re-queueing and purging are the core's (`Inspector`,
//! `Broker`); this only converts.

use headway_core::task::{DeadLetter, Host};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes};

use crate::convert::int_arg;
use crate::times::instant_out;

/// The concrete broker behind an app's seams, for `_push_raw` (the core's).
pub(crate) use headway_core::broker::Raw;

/// One message set aside rather than run: from which queue, its task id
/// when it could be read, why, when (an aware UTC `datetime`, the broker's
/// clock) and its bytes as they were on the queue.
#[pyclass(module = "headway._native", name = "DeadLetter", frozen)]
pub(crate) struct PyDeadLetter {
    /// The queue it was claimed from.
    #[pyo3(get)]
    queue: String,
    /// Its task id, when it could be read.
    #[pyo3(get)]
    id: Option<String>,
    /// Why it was set aside (`"not JSON: …"`, `"worker lost ×3"`, …).
    #[pyo3(get)]
    reason: String,
    /// When it was set aside.
    #[pyo3(get)]
    at: Py<PyAny>,
    /// Its bytes as they were on the queue, or their first 64 KiB when it
    /// was quarantined for being too large or undecodable (`size` says how
    /// many there were).
    #[pyo3(get)]
    raw: Py<PyBytes>,
    /// How many bytes it was on the queue (more than `len(raw)` when only a
    /// prefix was kept).
    #[pyo3(get)]
    size: usize,
}

impl PyDeadLetter {
    pub(crate) fn new(py: Python<'_>, d: DeadLetter) -> PyResult<Self> {
        Ok(PyDeadLetter {
            at: instant_out(py, d.at)?.unbind(),
            raw: PyBytes::new(py, &d.raw).unbind(),
            size: d.size,
            queue: d.queue,
            id: d.id,
            reason: d.reason,
        })
    }
}

#[pymethods]
impl PyDeadLetter {
    fn __repr__(&self) -> String {
        format!(
            "DeadLetter(queue={}, id={}, reason={}, size={})",
            crate::host::quoted(&self.queue),
            self.id
                .as_deref()
                .map_or_else(|| "None".to_string(), crate::host::quoted),
            crate::host::quoted(&self.reason),
            self.size
        )
    }
}

/// A `limit` argument as a count: `TypeError` for what is not an int (a
/// bool included), `ValueError` for a negative one. `None` is `none`.
pub(crate) fn limit_arg(obj: Option<&Bound<'_, PyAny>>, none: usize) -> PyResult<usize> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(none);
    };
    if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err("`limit` must be an int, not bool"));
    }
    let n = int_arg("limit", obj)? as f64;
    headway_core::task::specs::limit(Host::Python, Some(n), none).map_err(crate::invalid)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDeadLetter>()
}
