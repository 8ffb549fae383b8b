//! `Acquires` and `Attempts`: the core's acquire and retry loops, for the
//! pure-Python drivers (`Pooled`, `@retry`) to act on.
//!
//! The drivers sleep, open, close and wait; which caller is served next,
//! when one gives up and whether to try again are the core's. Answers are
//! small tuples, cheap to build and to unpack in a `while` loop; instants
//! are `time.monotonic()` seconds.

use headway_core::flow::{self, Failed, Step, Unit};
use pyo3::IntoPyObjectExt;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::backoff::PyBackoff;
use crate::pool::{Obj, PyPool, limits_or_default, objs};
use crate::{clock, draw_arg, expect, guard, opt, secs_out, span_arg};

/// What `Acquires.step` answers: `(HAND, item)`, `(OPEN, None)`,
/// `(CLOSE, item)`, `(SLEEP, seconds)`, `(PARK, deadline or None)`. An
/// acquire that gives up raises instead (see [`failure`]).
const HAND: u8 = 0;
const OPEN: u8 = 1;
const CLOSE: u8 = 2;
const SLEEP: u8 = 3;
const PARK: u8 = 4;

/// A failed acquire as what the driver raises, with the core's message: the
/// core's `timeout` is `headway.PoolTimeout`, its `shed` `headway.ShedError`,
/// `closed` a `RuntimeError`.
fn failure(py: Python<'_>, f: Failed, message: String) -> PyErr {
    let class = match f.error() {
        "timeout" => "PoolTimeout",
        "shed" => "ShedError",
        _ => return PyRuntimeError::new_err(message),
    };
    let made = py
        .import("headway._errors")
        .and_then(|m| m.getattr(class)?.call1((message,)));
    made.map_or_else(|e| e, PyErr::from_value)
}

/// The acquires of one `Pool`: who is served next (first parked, first
/// served), who parks, who gives up. Every method takes the pool it keeps
/// the queue for.
#[pyclass(module = "headway._native", name = "Acquires")]
pub(crate) struct PyAcquires {
    inner: flow::Acquires,
}

fn pool_of<'py>(pool: &Bound<'py, PyAny>) -> PyResult<PyRefMut<'py, PyPool>> {
    Ok(expect::<PyPool>("pool", "Pool", pool)?.borrow_mut())
}

methods! {
    PyAcquires {
        /// Seconds an acquire waits before failing (`None`: for ever).
        timeout: Option<f64> = |c| c.timeout().map(secs_out);
        /// The evict timer's period in seconds (0: no timer).
        evict_every: f64 = |c| secs_out(c.evict_every());
        /// Whether there are tickets to wake.
        has_wakes: bool = |c| c.has_wakes();
        /// How many acquires are parked.
        parked: usize = |c| c.parked();
        /// Whether `close` has run.
        closed: bool = |c| c.is_closed();
    }

    /// `timeout`: seconds an acquire waits (`None`: for ever). `evict_every`:
    /// the evict timer's period (omitted: the core's choice for `limits`).
    /// A negative one raises `ValueError` naming it.
    #[new]
    #[pyo3(signature = (timeout=None, evict_every=None, limits=None))]
    fn new(
        timeout: Option<&Bound<'_, PyAny>>,
        evict_every: Option<&Bound<'_, PyAny>>,
        limits: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        guard(|| {
            let span = |name, o: Option<&Bound<'_, PyAny>>| opt(o, |t| span_arg(name, t));
            let inner = flow::Acquires::driving(
                &limits_or_default(limits)?,
                span("timeout", timeout)?,
                span("evict_every", evict_every)?,
            )
            .map_err(crate::invalid)?;
            Ok(PyAcquires { inner })
        })
    }

    /// `(item,)`, a fresh idle item lent, when nobody is queued ahead; else
    /// `None` (a tuple, so a pooled `None` is still an item).
    fn quick(&mut self, pool: &Bound<'_, PyAny>) -> PyResult<Option<(Py<PyAny>,)>> {
        guard(|| {
            let mut pool = pool_of(pool)?;
            Ok(self.inner.quick(&mut pool.inner, clock()).map(|o| (o.0,)))
        })
    }

    /// A new acquire's ticket; its deadline runs from now.
    fn begin(&mut self) -> u64 {
        self.inner.begin(clock())
    }

    /// What to do next for `ticket` (see the module's answers); raises when
    /// the acquire gives up.
    #[pyo3(signature = (pool, ticket, roll=None))]
    fn step(
        &mut self,
        py: Python<'_>,
        pool: &Bound<'_, PyAny>,
        ticket: u64,
        roll: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(u8, Py<PyAny>)> {
        guard(|| {
            let roll = draw_arg("roll", roll)?;
            let mut pool = pool_of(pool)?;
            Ok(
                match self.inner.step(&mut pool.inner, ticket, clock(), roll) {
                    Step::Hand(o) => (HAND, o.0),
                    Step::Open => (OPEN, py.None()),
                    Step::Close(o) => (CLOSE, o.0),
                    Step::Sleep(d) => (SLEEP, secs_out(d).into_py_any(py)?),
                    Step::Park(_, deadline) => (PARK, deadline.map(secs_out).into_py_any(py)?),
                    Step::Fail(f) => return Err(failure(py, f, self.inner.message(f, Unit::Seconds))),
                },
            )
        })
    }

    /// Register what `OPEN` opened; `False` when the pool closed meanwhile
    /// (close the item and fail as closed).
    fn opened(
        &mut self,
        pool: &Bound<'_, PyAny>,
        ticket: u64,
        item: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        guard(|| {
            let mut pool = pool_of(pool)?;
            let item = Obj(item.clone().unbind());
            Ok(self.inner.opened(&mut pool.inner, ticket, item, clock()))
        })
    }

    /// Opening failed: the ward counts it.
    #[pyo3(signature = (pool, ticket, roll=None))]
    fn unopened(
        &mut self,
        pool: &Bound<'_, PyAny>,
        ticket: u64,
        roll: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        guard(|| {
            let roll = draw_arg("roll", roll)?;
            let mut pool = pool_of(pool)?;
            self.inner.unopened(&mut pool.inner, ticket, clock(), roll);
            Ok(())
        })
    }

    /// The caller left; nothing for a ticket already over.
    fn end(&mut self, pool: &Bound<'_, PyAny>, ticket: u64) -> PyResult<()> {
        guard(|| {
            let mut pool = pool_of(pool)?;
            self.inner.end(&mut pool.inner, ticket);
            Ok(())
        })
    }

    /// An item comes back (`broken`: dropped); whether to close it.
    fn give(
        &mut self,
        pool: &Bound<'_, PyAny>,
        item: &Bound<'_, PyAny>,
        broken: bool,
    ) -> PyResult<bool> {
        guard(|| {
            let mut pool = pool_of(pool)?;
            let item = Obj(item.clone().unbind());
            Ok(self.inner.give(&mut pool.inner, item, clock(), broken))
        })
    }

    /// The evict timer's sweep: idle items past their age, to close.
    fn evict<'py>(
        &mut self,
        py: Python<'py>,
        pool: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        guard(|| objs(py, self.inner.evict(&mut pool_of(pool)?.inner, clock())))
    }

    /// Shut down: the idle items to close; every parked ticket is woken.
    fn close<'py>(
        &mut self,
        py: Python<'py>,
        pool: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        guard(|| objs(py, self.inner.close(&mut pool_of(pool)?.inner)))
    }

    /// The tickets to wake now, in order.
    fn wakes(&mut self) -> Vec<u64> {
        self.inner.wakes()
    }
}

/// One call's run of attempts under a `Backoff`: after each failure,
/// `failed()` answers the seconds to sleep before calling again (0: at
/// once), or `None`: give up and raise.
#[pyclass(module = "headway._native", name = "Attempts")]
pub(crate) struct PyAttempts {
    inner: flow::Attempts,
}

methods! {
    PyAttempts {
        /// How many attempts have been made.
        made: i32 = |c| c.made();
    }

    #[new]
    #[pyo3(signature = (backoff, made=0))]
    fn new(backoff: &Bound<'_, PyAny>, made: i32) -> PyResult<Self> {
        guard(|| {
            let b = expect::<PyBackoff>("backoff", "Backoff", backoff)?
                .get()
                .inner;
            Ok(PyAttempts {
                inner: flow::Attempts::new(b, made),
            })
        })
    }

    /// The attempt failed: seconds to sleep before the next, or `None`.
    #[pyo3(signature = (retryable=true, stopped=false, u=None))]
    fn failed(
        &mut self,
        retryable: bool,
        stopped: bool,
        u: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<f64>> {
        guard(|| {
            let u = draw_arg("u", u)?;
            Ok(match self.inner.failed(retryable, stopped, u) {
                flow::Next::Sleep(d) => Some(secs_out(d)),
                flow::Next::Retry => Some(0.0),
                flow::Next::Fail => None,
            })
        })
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyAcquires>()?;
    m.add_class::<PyAttempts>()?;
    Ok(())
}
