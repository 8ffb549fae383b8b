//! The core's spans as Python values, for `headway._tracing` to hand to
//! OpenTelemetry (names, kinds and attributes are the core's).

use headway_core::task::trace::Span;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use serde_json::{Map, Value};

/// A span's name, kind name and attributes dict.
pub(crate) fn span_parts<'py>(
    py: Python<'py>,
    span: &Span,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    Ok((
        PyString::new(py, &span.name).into_any(),
        PyString::new(py, span.kind.name()).into_any(),
        attributes(py, &span.attributes)?.into_any(),
    ))
}

/// Attributes as a dict of str to str or int.
pub(crate) fn attributes<'py>(
    py: Python<'py>,
    attrs: &[(&'static str, Value)],
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in attrs {
        d.set_item(*k, crate::json::to_py(py, v)?)?;
    }
    Ok(d)
}

/// What a propagator injected: its string entries (the core keeps the
/// trace-context ones).
pub(crate) fn carrier_arg(d: &Bound<'_, PyDict>) -> Map<String, Value> {
    d.iter()
        .filter_map(|(k, v)| {
            Some((
                k.extract::<String>().ok()?,
                Value::String(v.extract().ok()?),
            ))
        })
        .collect()
}
