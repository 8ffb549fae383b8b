//! The `headway._native` module: headway-core as Python classes — flow
//! control (pools, backoff, limiters) and the task queue (app, handles,
//! workers, beat, schedules, Redis brokers).
//!
//! This crate holds no rules. It converts values (float seconds and
//! `datetime.timedelta` to `i64` nanoseconds and back, Python objects to pool
//! items compared by identity), fills in what Python callers may omit (`now`
//! from a monotonic clock, draws from a fast RNG), and maps errors: the core's
//! `Invalid` becomes `ValueError` naming the argument, a value of the wrong
//! type `TypeError` naming the argument, and a Rust panic `PanicError` (a
//! `RuntimeError`). Every decision is the core's.

use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

/// mimalloc for every Rust allocation of the extension (the core's
/// messages, outcomes and futures): a run allocates on the tokio threads,
/// lapin's and Redis's I/O and the Python runner threads, which glibc's
/// arenas serve with more locking and trimming (malloc and free were about
/// a tenth of the worker's samples on the RabbitMQ drain,
/// bench/amqp/README.md). Python's own allocations are untouched.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A class's `#[pymethods]` whose plain read-only properties are each one
/// line, `name: Type = |inner| expression` (`inner` borrows the class's
/// `inner`), documented as any method; the block's other methods follow.
/// `Class, eq { ... }` also gives a frozen value class `==`, `!=` and
/// `hash()` by its `inner` (`convert::richcmp`, `convert::hash_debug`).
macro_rules! methods {
    ($ty:ty, eq { $($props:tt)* } $($own:tt)*) => {
        methods! { $ty { $($props)* }
            fn __richcmp__(
                &self,
                other: &Bound<'_, PyAny>,
                op: pyo3::pyclass::CompareOp,
            ) -> PyResult<Py<PyAny>> {
                crate::convert::richcmp(other, op, |o: &Self| self.inner == o.inner)
            }

            fn __hash__(&self) -> u64 {
                crate::convert::hash_debug(&self.inner)
            }

            $($own)*
        }
    };
    ($ty:ty { $($(#[doc = $doc:literal])* $name:ident: $out:ty = |$c:ident| $e:expr;)* } $($own:tt)*) => {
        #[pymethods]
        impl $ty {
            $(
                $(#[doc = $doc])*
                #[getter]
                fn $name(&self) -> $out {
                    let $c = &self.inner;
                    $e
                }
            )*
            $($own)*
        }
    };
}

mod admin;
mod app;
mod backoff;
mod brokers;
mod cli;
mod convert;
mod dead;
mod host;
mod json;
mod limit;
mod logs;
mod pool;
mod pooled;
mod rt;
mod sched;
mod shared;
mod soft;
mod times;
mod trace;
mod wire;

pub(crate) use convert::*;

pyo3::create_exception!(
    headway._native,
    PanicError,
    PyRuntimeError,
    "A Rust panic inside headway: a bug, never an answer.\n\nEvery native entry point \
     catches unwinding and raises this instead, so `except Exception` sees it and a \
     server loop survives it."
);

/// Runs `f`, turning a Rust panic into [`PanicError`].
///
/// pyo3 would turn an uncaught panic into its own `PanicException`, a
/// `BaseException` that `except Exception` does not catch; headway raises a
/// `RuntimeError` subclass instead, so one bug cannot take a worker loop down.
#[inline(always)]
pub(crate) fn guard<R>(f: impl FnOnce() -> PyResult<R>) -> PyResult<R> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => Err(PanicError::new_err(headway_core::runtime::panicked(
            &*payload,
        ))),
    }
}

/// A refusal of the core's — flow's `Invalid`, a spec's `SpecError`, a
/// `RhythmError`, a broker `TargetError` — as a `ValueError` in the core's
/// words, which name the argument.
pub(crate) fn invalid(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// Panics on purpose, inside the same net every entry point uses: the test
/// that a Rust panic reaches Python as `PanicError` and nothing worse.
#[pyfunction]
fn _panic() -> PyResult<()> {
    guard(|| panic!("deliberate panic from headway._native._panic"))
}

/// Does nothing with two optional arguments: the floor a benchmark compares a
/// native call against (one pyo3 call with the same arguments).
#[pyfunction]
#[pyo3(signature = (a=None, b=None))]
fn _noop(a: Option<&Bound<'_, PyAny>>, b: Option<&Bound<'_, PyAny>>) {
    let _ = (a, b);
}

/// A class whose method does nothing: the floor for a native *method* call.
#[pyclass(module = "headway._native", name = "_Noop", frozen)]
struct Noop;

#[pymethods]
impl Noop {
    #[new]
    fn new() -> Self {
        Noop
    }

    /// Does nothing with two optional arguments.
    #[pyo3(signature = (a=None, b=None))]
    fn call(&self, a: Option<&Bound<'_, PyAny>>, b: Option<&Bound<'_, PyAny>>) {
        let _ = (a, b);
    }
}

/// Draws a fresh RNG seed; `headway` calls it in a forked child so that
/// workers forked from one parent do not all draw the same jitter.
#[pyfunction]
fn _reseed() {
    convert::reseed();
}

/// Reads the clock `now` defaults to: `time.monotonic()`'s, in seconds.
#[pyfunction]
fn _now() -> f64 {
    secs_out(clock())
}

/// Whether `pool` names the process pool (`"process"`, or Celery's
/// `"prefork"`): the core's rule, so a worker knows to hand it the command
/// that starts a child.
#[pyfunction]
fn _process_pool(pool: &str) -> bool {
    headway_core::task::specs::is_process_pool(pool)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    convert::init_clock(py)?;
    convert::reseed();
    m.add("PanicError", py.get_type::<PanicError>())?;
    m.add_function(wrap_pyfunction!(_panic, m)?)?;
    m.add_function(wrap_pyfunction!(_noop, m)?)?;
    m.add_function(wrap_pyfunction!(_reseed, m)?)?;
    m.add_function(wrap_pyfunction!(_now, m)?)?;
    m.add_function(wrap_pyfunction!(_process_pool, m)?)?;
    m.add_class::<Noop>()?;
    pool::register(m)?;
    pooled::register(m)?;
    backoff::register(m)?;
    limit::register(m)?;
    shared::register(m)?;
    wire::register(m)?;
    times::register(m)?;
    host::register(m)?;
    app::register(m)?;
    dead::register(m)?;
    brokers::register(m)?;
    sched::register(m)?;
    admin::register(m)?;
    logs::register(m)?;
    cli::register(m)?;
    Ok(())
}
