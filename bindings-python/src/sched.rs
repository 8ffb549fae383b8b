//! `headway.schedule`: jobs on rhythms inside one process, no broker.
//!
//! The core's `Scheduler` keeps the timetable (the beat's, so they agree on
//! when something is due) and calls a job; here a job is a `HostQueue` body
//! (`Scheduler::add_body`), so a Python job runs on the same runner threads
//! and asyncio pump as a task body, told about its run by the same `Context`
//! (`name`, `now` = the time it was due).

use headway_core::task::{Host, Scheduler};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::host::{Entry, PyHost};
use crate::rt::{block, rt, run_until_stopped};
use crate::times::{clock_arg, instant_arg, named_instants, rhythm_arg};
use crate::{guard, opt};

/// The core's scheduler. Internal: `headway.schedule.Scheduler` wraps it.
#[pyclass(module = "headway._native", name = "_Scheduler", frozen)]
pub(crate) struct PyScheduler {
    inner: Scheduler,
    /// The host its jobs are served from.
    #[pyo3(get)]
    host: Py<PyHost>,
}

#[pymethods]
impl PyScheduler {
    #[new]
    #[pyo3(signature = (clock=None))]
    fn new(py: Python<'_>, clock: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        guard(|| {
            rt()?;
            let clock = clock_arg(clock)?;
            Ok(PyScheduler {
                inner: Scheduler::new(clock),
                host: Py::new(py, PyHost::new())?,
            })
        })
    }

    /// Adds (or replaces) the job `name`: `func()` on `rhythm`.
    fn add(
        &self,
        name: &str,
        func: Py<PyAny>,
        is_async: bool,
        rhythm: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        guard(|| {
            let r = rhythm_arg("rhythm", rhythm)?;
            let body = self.host.get().inner.insert(
                name,
                Entry {
                    func,
                    bind: false,
                    is_async,
                },
            );
            self.inner.add_body(name, body, r).map_err(crate::invalid)
        })
    }

    /// Removes the job `name`; `False` when there was none.
    fn remove(&self, name: &str) -> bool {
        self.inner.remove(name)
    }

    /// Job names and when each fires next (aware UTC `datetime`), soonest
    /// first.
    fn pending<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        named_instants(py, self.inner.pending())
    }

    /// Calls what is due now, waits for those calls, and answers `(name,
    /// due)` of each call made.
    fn tick<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        guard(|| {
            let fired = block(py, self.inner.tick())?;
            named_instants(py, fired)
        })
    }

    /// Calls due jobs and sleeps until the next, until `stop()` (or, with
    /// `until`, until the clock reaches it). Ctrl-C stops it and raises.
    #[pyo3(signature = (until=None))]
    fn run(&self, py: Python<'_>, until: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        guard(|| {
            let until = opt(until, |u| instant_arg("until", u))?;
            let s = self.inner.clone();
            let job = async move {
                s.run(until).await;
                Ok(())
            };
            run_until_stopped(py, job, || self.inner.stop())
        })
    }

    /// Stops `run` after the tick in progress.
    fn stop(&self) {
        self.inner.stop();
    }

    /// How the job `name` has gone: `{"fired", "failed", "skipped",
    /// "last_error"}` (`None` for an unknown name).
    fn stats<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Option<Bound<'py, PyDict>>> {
        let tally = self.inner.stats(name).map(|s| s.tally().json(Host::Python));
        tally.map(|t| crate::json::dict(py, &t)).transpose()
    }

    fn __traverse__(&self, visit: pyo3::gc::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        visit.call(&self.host)
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyScheduler>()?;
    Ok(())
}
