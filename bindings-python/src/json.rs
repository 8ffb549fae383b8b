//! Python values ↔ `serde_json::Value`: what a task's arguments and results
//! travel as.
//!
//! Accepted: `dict` (str keys), `list`, `tuple` (sent as a list), `str`,
//! `int` (64-bit signed or unsigned), `float` (finite), `bool`, `None`, and
//! their subclasses (an `IntEnum` is an int, a `str` enum a string); and the
//! values kombu's JSON types — `datetime`, `date`, `time`, `uuid.UUID`,
//! `Decimal`, `bytes`/`bytearray` — sent as kombu writes them (the core's
//! [`Typed`]: `{"__type__": ..., "__value__": ...}`) and read back as the
//! same Python types, on every broker, so a Celery worker sees a datetime
//! where a headway producer sent one, and the other way round.
//! Anything else is a `TypeError` naming where it was found — `add: args[1]
//! is a set` — raised at send time, never a silent drop or a `str()` of it:
//! a message that changed shape on the way is worse than one refused.
//! A value that contains itself, or nests deeper than the core's
//! `depth::MAX_DEPTH` (100), is a `ValueError` naming where, in the core's words: the
//! walk below is recursive, and without the check such a value would
//! overflow the thread's stack and take the process down.

use headway_core::broker::celery::Typed;
use headway_core::task::value_path::{self, Path};
use headway_core::task::{Host, depth};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType,
};
use serde_json::{Map, Number, Value};

use crate::type_name;

/// The classes of `datetime`, `uuid` and `decimal` the binding reads and
/// makes — kombu's typed values, instants and spans — imported once; and
/// the epoch as an aware `datetime`, what an instant is counted from.
pub(crate) struct Kinds {
    pub(crate) datetime: Py<PyType>,
    date: Py<PyType>,
    time: Py<PyType>,
    pub(crate) timedelta: Py<PyType>,
    uuid: Py<PyType>,
    decimal: Py<PyType>,
    pub(crate) epoch: Py<PyAny>,
}

static KINDS: PyOnceLock<Kinds> = PyOnceLock::new();

pub(crate) fn kinds(py: Python<'_>) -> PyResult<&Kinds> {
    KINDS.get_or_try_init(py, || {
        let dt = py.import("datetime")?;
        let get = |m: &Bound<'_, PyModule>, n: &str| -> PyResult<Py<PyType>> {
            Ok(m.getattr(n)?.cast_into::<PyType>()?.unbind())
        };
        let utc = dt.getattr("timezone")?.getattr("utc")?;
        let datetime = get(&dt, "datetime")?;
        let epoch = datetime
            .bind(py)
            .call((1970, 1, 1, 0, 0, 0, 0, utc), None)?;
        Ok(Kinds {
            date: get(&dt, "date")?,
            time: get(&dt, "time")?,
            timedelta: get(&dt, "timedelta")?,
            uuid: get(&py.import("uuid")?, "UUID")?,
            decimal: get(&py.import("decimal")?, "Decimal")?,
            epoch: epoch.unbind(),
            datetime,
        })
    })
}

/// A value of one of kombu's types as its typed wire object; `None` when
/// `obj` is none of them.
fn typed_out(obj: &Bound<'_, PyAny>) -> PyResult<Option<Value>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Some(Typed::Bytes(b.as_bytes().to_vec()).to_value()));
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(Some(Typed::Bytes(b.to_vec()).to_value()));
    }
    let k = kinds(obj.py())?;
    let iso = || -> PyResult<String> { obj.call_method0("isoformat")?.extract() };
    // datetime before date: a datetime is a date.
    let t = if obj.is_instance(k.datetime.bind(obj.py()))? {
        Typed::DateTime(iso()?)
    } else if obj.is_instance(k.date.bind(obj.py()))? {
        Typed::Date(iso()?)
    } else if obj.is_instance(k.time.bind(obj.py()))? {
        Typed::Time(iso()?)
    } else if obj.is_instance(k.uuid.bind(obj.py()))? {
        Typed::Uuid(obj.getattr("hex")?.extract()?)
    } else if obj.is_instance(k.decimal.bind(obj.py()))? {
        Typed::Decimal(obj.str()?.to_str()?.to_owned())
    } else {
        return Ok(None);
    };
    Ok(Some(t.to_value()))
}

/// A typed wire object as its Python value; `None` when `o` is not one (or
/// is one kombu would refuse: it then stays a dict).
fn typed_in<'py>(py: Python<'py>, v: &Value) -> PyResult<Option<Bound<'py, PyAny>>> {
    let Ok(Some(t)) = Typed::from_value(v) else {
        return Ok(None);
    };
    let k = kinds(py)?;
    // A text Python's parsers refuse (the core's are more lenient) leaves
    // the object a dict rather than failing the read of a whole result.
    let made: PyResult<Bound<'py, PyAny>> = (|| {
        Ok(match t {
            Typed::DateTime(s) => k.datetime.bind(py).call_method1("fromisoformat", (s,))?,
            // kombu reads a date through datetime.fromisoformat(...).date().
            Typed::Date(s) => k
                .datetime
                .bind(py)
                .call_method1("fromisoformat", (s,))?
                .call_method0("date")?,
            Typed::Time(s) => k.time.bind(py).call_method1("fromisoformat", (s,))?,
            // UUID's first parameter is `hex`.
            Typed::Uuid(hex) => k.uuid.bind(py).call1((hex,))?,
            Typed::Decimal(s) => k.decimal.bind(py).call1((s,))?,
            Typed::Bytes(b) => PyBytes::new(py, &b).into_any(),
        })
    })();
    Ok(made.ok())
}

/// The containers enclosing the value being converted, outermost first (by
/// address): a value that is one of them again is circular, and their count
/// is its depth.
type Open = Vec<usize>;

/// Enters the container `obj` at `path`: refuses it when it is one of its
/// own enclosing containers, or nests past the core's limit.
fn enter(owner: &str, path: &Path<'_>, obj: &Bound<'_, PyAny>, open: &mut Open) -> PyResult<()> {
    let me = obj.as_ptr() as usize;
    if let Some(i) = open.iter().position(|&o| o == me) {
        let first = path.ancestor(i + 1).text(Host::Python);
        return Err(PyValueError::new_err(depth::circular_text(
            owner,
            &path.text(Host::Python),
            &first,
        )));
    }
    if depth::too_deep(open.len() + 1) {
        let text = depth::too_deep_text(owner, &path.text(Host::Python));
        return Err(PyValueError::new_err(text));
    }
    open.push(me);
    Ok(())
}

fn refuse(owner: &str, path: &Path<'_>, obj: &Bound<'_, PyAny>) -> PyErr {
    let text = value_path::uncarried_text(owner, &path.text(Host::Python), &type_name(obj));
    PyTypeError::new_err(text)
}

/// A Python value as JSON; `owner` (the task's name) and `root` (the
/// value's own name: `result`, `meta`) name it in errors.
pub(crate) fn to_json(owner: &str, root: &str, obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    value(owner, &Path::Root(root), obj, &mut Vec::new())
}

fn value(owner: &str, path: &Path<'_>, obj: &Bound<'_, PyAny>, open: &mut Open) -> PyResult<Value> {
    if obj.is_none() {
        return Ok(Value::Null);
    }
    // Exact types first: they are nearly every value, and the checks are a
    // pointer comparison each.
    if let Ok(s) = obj.cast_exact::<PyString>() {
        return Ok(Value::String(s.to_str()?.to_owned()));
    }
    if obj.is_exact_instance_of::<PyBool>() {
        return Ok(Value::Bool(obj.is_truthy()?));
    }
    if obj.is_instance_of::<PyInt>() {
        return int(owner, path, obj);
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        let v = f.value();
        return Number::from_f64(v).map(Value::Number).ok_or_else(|| {
            PyValueError::new_err(value_path::not_finite_text(
                owner,
                &path.text(Host::Python),
                v,
            ))
        });
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(s.to_str()?.to_owned()));
    }
    if let Ok(l) = obj.cast::<PyList>() {
        return items(owner, path, obj, l.iter(), l.len(), open);
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return items(owner, path, obj, t.iter(), t.len(), open);
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        return Ok(Value::Object(members(owner, path, d, open)?));
    }
    if let Some(v) = typed_out(obj)? {
        return Ok(v);
    }
    Err(refuse(owner, path, obj))
}

/// A list's or a tuple's items as a JSON list.
fn items<'py>(
    owner: &str,
    path: &Path<'_>,
    obj: &Bound<'py, PyAny>,
    it: impl Iterator<Item = Bound<'py, PyAny>>,
    len: usize,
    open: &mut Open,
) -> PyResult<Value> {
    enter(owner, path, obj, open)?;
    let mut out = Vec::with_capacity(len);
    for (i, item) in it.enumerate() {
        out.push(value(owner, &Path::Index(path, i), &item, open)?);
    }
    open.pop();
    Ok(Value::Array(out))
}

fn int(owner: &str, path: &Path<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    if let Ok(i) = obj.extract::<i64>() {
        return Ok(Value::Number(i.into()));
    }
    if let Ok(u) = obj.extract::<u64>() {
        return Ok(Value::Number(u.into()));
    }
    let text = value_path::wide_int_text(owner, &path.text(Host::Python));
    Err(PyValueError::new_err(text))
}

/// A dict with str keys as a JSON object.
fn members(
    owner: &str,
    path: &Path<'_>,
    d: &Bound<'_, PyDict>,
    open: &mut Open,
) -> PyResult<Map<String, Value>> {
    enter(owner, path, d.as_any(), open)?;
    let mut out = Map::new();
    for (k, v) in d.iter() {
        let Ok(key) = k.cast::<PyString>() else {
            let text = value_path::key_type_text(owner, &path.text(Host::Python), &type_name(&k));
            return Err(PyTypeError::new_err(text));
        };
        let key = key.to_str()?;
        let v = value(owner, &Path::Key(path, key), &v, open)?;
        out.insert(key.to_owned(), v);
    }
    open.pop();
    Ok(out)
}

/// Positional arguments (any iterable of values) as a JSON list.
pub(crate) fn args(owner: &str, obj: &Bound<'_, PyAny>) -> PyResult<Vec<Value>> {
    if obj.is_instance_of::<PyTuple>() || obj.is_instance_of::<PyList>() {
        // A tuple or a list is always an array.
        if let Value::Array(a) = to_json(owner, "args", obj)? {
            return Ok(a);
        }
    }
    Err(PyTypeError::new_err(format!(
        "{owner}: `args` must be a tuple or a list, not {}",
        type_name(obj)
    )))
}

/// Keyword arguments (a dict with str keys, or None) as a JSON object.
pub(crate) fn kwargs(owner: &str, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Map<String, Value>> {
    match crate::some(obj) {
        None => Ok(Map::new()),
        Some(o) => match o.cast::<PyDict>() {
            Ok(d) => members(owner, &Path::Root("kwargs"), d, &mut Vec::new()),
            Err(_) => Err(PyTypeError::new_err(format!(
                "{owner}: `kwargs` must be a dict, not {}",
                type_name(o)
            ))),
        },
    }
}

/// A JSON value as a Python object.
pub(crate) fn to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else {
                PyFloat::new(py, n.as_f64().unwrap_or(f64::NAN)).into_any()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(a) => {
            let items = a
                .iter()
                .map(|x| to_py(py, x))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any()
        }
        Value::Object(o) => {
            // Only a two-key object can be a typed value: one length check
            // keeps every other dict on the fast path.
            if o.len() == 2
                && let Some(t) = typed_in(py, v)?
            {
                return Ok(t);
            }
            dict(py, o)?.into_any()
        }
    })
}

/// A JSON object as a dict.
pub(crate) fn dict<'py>(py: Python<'py>, o: &Map<String, Value>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in o {
        d.set_item(k, to_py(py, v)?)?;
    }
    Ok(d)
}
