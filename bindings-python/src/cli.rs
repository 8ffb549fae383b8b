//! The `headway` command line's parse (core's `task::cli`): argv in, the
//! command as JSON out; `_cli.py` loads the app and starts it. And the lines
//! it prints (core's `task::banner`): a line's name and fields in, its text
//! out.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Reads the words after `headway` (core's parser, as Node's CLI):
/// `{"kind": "help", "text"}` or `{"kind": "run", "command", ...}` as JSON;
/// `ValueError` with the text naming what was wrong, usage included.
#[pyfunction]
fn cli_parse(argv: Vec<String>) -> PyResult<String> {
    headway_core::task::cli::parse_json("python", &argv).map_err(PyValueError::new_err)
}

/// The printed line `line` from its fields as a JSON object (core's text,
/// as Node's CLI prints it); `ValueError` naming a bad name or field.
#[pyfunction]
fn banner(line: &str, fields: &str) -> PyResult<String> {
    headway_core::task::banner::text_json(line, fields).map_err(PyValueError::new_err)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(cli_parse, m)?)?;
    m.add_function(wrap_pyfunction!(banner, m)?)
}
