//! `Limits`, `Breaker`, `Ward`, `Pool`, the six `take` answers and `pick`.
//!
//! A pooled item is any Python object, recognised on its way back by
//! identity (`is`): the core's `PartialEq` is given a pointer comparison, and
//! its `Clone` a reference-count increment.

use headway_core::flow::{self, Taken};
use pyo3::IntoPyObjectExt;
use pyo3::PyClass;
use pyo3::PyTraverseError;
use pyo3::exceptions::PyTypeError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyList, PyTuple};

use crate::backoff::PyBackoff;
use crate::convert::richcmp;
use crate::{
    draw_arg, float_arg, given, guard, int_arg, invalid, now_arg, opt, secs_out, span_arg,
    type_name, wrong_type,
};

/// A pooled Python object, compared by identity.
pub(crate) struct Obj(pub(crate) Py<PyAny>);

impl Clone for Obj {
    fn clone(&self) -> Self {
        // SAFETY: the core clones an item only inside a `Pool` method, and
        // every `Pool` method runs attached to the interpreter (it is called
        // from Python and never detaches), so the reference count may be
        // touched here.
        let py = unsafe { Python::assume_attached() };
        Obj(self.0.clone_ref(py))
    }
}

impl PartialEq for Obj {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_ptr() == other.0.as_ptr()
    }
}

/// Items the core let go of, as the list of their Python objects.
pub(crate) fn objs(py: Python<'_>, items: Vec<Obj>) -> PyResult<Bound<'_, PyList>> {
    PyList::new(py, items.into_iter().map(|o| o.0))
}

/// A `limits` argument: omitted or `None` is the core's default.
pub(crate) fn limits_or_default(obj: Option<&Bound<'_, PyAny>>) -> PyResult<flow::Limits> {
    Ok(given::<PyLimits>("limits", "Limits", obj)?
        .map_or_else(flow::Limits::default, |l| l.get().inner))
}

// ---------------------------------------------------------------- Limits

/// The limits a pool holds itself to.
///
/// `size`: most live at once, counting those being made (0: no limit).
/// `idle`: most sitting unused (0: no limit). `keep`: idle age at which an item
/// retires, in seconds (0: never). `life`: total age at which it retires (0:
/// never). Spans are float seconds or `datetime.timedelta`.
///
/// The defaults: ten live, ten idle, thirty minutes idle, no maximum age. Ten
/// is HikariCP's and Go database/sql's default pool size; thirty minutes is
/// database/sql's `SetConnMaxIdleTime` as most deployments set it; idle equal
/// to size is database/sql's behaviour, so a pool that grew under load does
/// not throw its connections away at once. Negative values raise `ValueError`.
#[pyclass(module = "headway._native", name = "Limits", frozen)]
pub(crate) struct PyLimits {
    pub(crate) inner: flow::Limits,
}

methods! {
    PyLimits, eq {
        /// Most live at once (0: no limit).
        size: i64 = |c| c.size();
        /// Most idle at once (0: no limit).
        idle: i64 = |c| c.idle();
        /// Idle age at which an item retires, in seconds (0: never).
        keep: f64 = |c| secs_out(c.keep());
        /// Total age at which an item retires, in seconds (0: never).
        life: f64 = |c| secs_out(c.life());
        /// How often a driver sweeps with `evict`, in seconds: the shorter of
        /// `keep` and `life`, at least one second (0: no timer).
        evict_every: f64 = |c| secs_out(c.evict_every());
    }

    #[new]
    #[pyo3(
        signature = (size=None, idle=None, keep=None, life=None),
        text_signature = "(size=10, idle=10, keep=1800.0, life=0.0)"
    )]
    fn new(
        size: Option<&Bound<'_, PyAny>>,
        idle: Option<&Bound<'_, PyAny>>,
        keep: Option<&Bound<'_, PyAny>>,
        life: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        guard(|| {
            let size = opt(size, |o| int_arg("size", o))?;
            let idle = opt(idle, |o| int_arg("idle", o))?;
            let keep = opt(keep, |o| span_arg("keep", o))?;
            let life = opt(life, |o| span_arg("life", o))?;
            // What is not given is the core's default.
            let inner = flow::Limits::given(size, idle, keep, life).map_err(invalid)?;
            Ok(PyLimits { inner })
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "Limits(size={}, idle={}, keep={:?}, life={:?})",
            self.inner.size(),
            self.inner.idle(),
            secs_out(self.inner.keep()),
            secs_out(self.inner.life())
        )
    }
}

// ---------------------------------------------------------------- Breaker

/// Client-side adaptive throttling (Google SRE book, "Handling Overload").
///
/// Over a sliding `window` (seconds) it counts requests and accepts, and
/// refuses locally `max(0, (requests − k·accepts) / (requests + 1))` of new
/// makes. The defaults are the book's: `k = 2` over two minutes — a backend
/// accepting half of what it is asked is never throttled, one accepting nothing
/// is asked ever more rarely, never not at all, which is how the client learns
/// it has recovered. `k` below 1 and a window that is not positive raise
/// `ValueError`.
#[pyclass(module = "headway._native", name = "Breaker", frozen)]
pub(crate) struct PyBreaker {
    inner: flow::Breaker,
}

methods! {
    PyBreaker {
        /// The multiplier on accepts.
        k: f64 = |c| c.k();
        /// The window's length, in seconds.
        window: f64 = |c| secs_out(c.window());
    }

    #[new]
    #[pyo3(signature = (k=None, window=None), text_signature = "(k=2.0, window=120.0)")]
    fn new(k: Option<&Bound<'_, PyAny>>, window: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        guard(|| {
            let k = opt(k, |o| float_arg("k", o))?;
            let window = opt(window, |o| span_arg("window", o))?;
            let inner = flow::Breaker::given(k, window).map_err(invalid)?;
            Ok(PyBreaker { inner })
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "Breaker(k={:?}, window={:?})",
            self.inner.k(),
            secs_out(self.inner.window())
        )
    }
}

// ---------------------------------------------------------------- Ward

/// What stands between a pool and a backend that is failing; both parts
/// optional.
///
/// A `Breaker` answers *what share* of makes to refuse (`take` answers
/// `Shed`). A `Backoff` answers *how long* to hold makes after failures: after
/// `n` failed makes in a row the next is held for `backoff.delay(n, roll)`
/// from the failure (`take` answers `Later(remaining)`); `made` resets it.
#[pyclass(module = "headway._native", name = "Ward", frozen)]
pub(crate) struct PyWard {
    inner: flow::Ward,
}

methods! {
    PyWard {
        /// The breaker, if any (a copy).
        breaker: Option<PyBreaker> = |c| c.breaker().map(|b| PyBreaker { inner: b.clone() });
        /// The backoff, if any.
        backoff: Option<PyBackoff> = |c| c.backoff().map(|b| PyBackoff { inner: *b });
        /// Failed makes in a row.
        failures: i32 = |c| c.failures();
    }

    #[new]
    #[pyo3(signature = (breaker=None, backoff=None))]
    fn new(
        breaker: Option<&Bound<'_, PyAny>>,
        backoff: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        guard(|| {
            let breaker = given::<PyBreaker>("breaker", "Breaker", breaker)?;
            let backoff = given::<PyBackoff>("backoff", "Backoff", backoff)?;
            let breaker = breaker.map(|b| b.get().inner.clone());
            let backoff = backoff.map(|b| b.get().inner);
            Ok(PyWard {
                inner: flow::Ward::new(breaker, backoff),
            })
        })
    }

    /// The breaker's refusal at `now`, in [0, 1); 0 without a breaker.
    #[pyo3(signature = (now=None))]
    fn refusal(&self, now: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
        guard(|| Ok(self.inner.refusal(now_arg(now)?)))
    }

    fn __repr__(&self) -> String {
        let part = |b: bool, s: &str| if b { s.to_string() } else { "None".into() };
        format!(
            "Ward(breaker={}, backoff={}, failures={})",
            part(self.inner.breaker().is_some(), "Breaker(...)"),
            part(self.inner.backoff().is_some(), "Backoff(...)"),
            self.inner.failures()
        )
    }
}

// ---------------------------------------------------------------- answers

static MAKE: PyOnceLock<Py<Make>> = PyOnceLock::new();
static WAIT: PyOnceLock<Py<Wait>> = PyOnceLock::new();
static SHED: PyOnceLock<Py<Shed>> = PyOnceLock::new();

fn single<T: PyClass + Into<PyClassInitializer<T>>>(
    py: Python<'_>,
    cell: &'static PyOnceLock<Py<T>>,
    make: fn() -> T,
) -> PyResult<Py<T>> {
    if let Some(v) = cell.get(py) {
        return Ok(v.clone_ref(py));
    }
    let v = Py::new(py, make())?;
    Ok(cell.get_or_init(py, || v).clone_ref(py))
}

/// `take` answered: an idle item, now lent to you. Use it, then `give` it back
/// (or `drop` it if it broke).
#[pyclass(module = "headway._native", name = "Ready", frozen, generic)]
pub(crate) struct Ready {
    /// The item.
    #[pyo3(get)]
    item: Py<PyAny>,
}

/// `take` answered: an idle item too old to use, already out of the pool and
/// its count. Close it and take again; it is handed back rather than skipped
/// so nothing it holds leaks when the evict timer has not run.
#[pyclass(module = "headway._native", name = "Stale", frozen, generic)]
pub(crate) struct Stale {
    /// The item.
    #[pyo3(get)]
    item: Py<PyAny>,
}

macro_rules! item_answer {
    ($ty:ident, $name:literal) => {
        #[pymethods]
        impl $ty {
            #[new]
            fn new(item: Py<PyAny>) -> Self {
                $ty { item }
            }

            #[classattr]
            fn __match_args__() -> (&'static str,) {
                ("item",)
            }

            fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
                Ok(format!("{}({})", $name, self.item.bind(py).repr()?))
            }

            fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<Py<PyAny>> {
                let py = other.py();
                let Ok(o) = other.cast::<$ty>() else {
                    return Ok(py.NotImplemented());
                };
                let (a, b) = (self.item.bind(py), o.get().item.bind(py));
                let same = a.is(b) || a.eq(b)?;
                match op {
                    CompareOp::Eq => same.into_py_any(py),
                    CompareOp::Ne => (!same).into_py_any(py),
                    _ => Ok(py.NotImplemented()),
                }
            }

            fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
                Ok(self.item.bind(py).hash()? ^ ($name.len() as isize))
            }

            fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
                visit.call(&self.item)
            }
        }
    };
}

item_answer!(Ready, "Ready");
item_answer!(Stale, "Stale");

/// `take` answered: there is room for another, and it is reserved. Open one,
/// then call `made(item)` — or `unmade()` if opening failed, so the room is
/// free again.
#[pyclass(module = "headway._native", name = "Make", frozen)]
pub(crate) struct Make;

/// `take` answered: the pool is at `size`. Not a queue: the pool has no
/// runtime, so the caller decides — queue, time out, or try another pool.
#[pyclass(module = "headway._native", name = "Wait", frozen)]
pub(crate) struct Wait;

/// `take` answered: the ward's breaker refused this make. Fail fast: the
/// backend is refusing most of what it is asked.
#[pyclass(module = "headway._native", name = "Shed", frozen)]
pub(crate) struct Shed;

macro_rules! unit_answer {
    ($ty:ident, $name:literal, $cell:ident, $hash:literal) => {
        #[pymethods]
        impl $ty {
            /// The one instance (answers carry nothing, so they are shared).
            #[new]
            fn new(py: Python<'_>) -> PyResult<Py<Self>> {
                single(py, &$cell, || $ty)
            }

            #[classattr]
            fn __match_args__(py: Python<'_>) -> Bound<'_, PyTuple> {
                PyTuple::empty(py)
            }

            fn __repr__(&self) -> &'static str {
                concat!($name, "()")
            }

            fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<Py<PyAny>> {
                richcmp(other, op, |_: &$ty| true)
            }

            fn __hash__(&self) -> isize {
                $hash
            }
        }
    };
}

unit_answer!(Make, "Make", MAKE, 0x6d616b65);
unit_answer!(Wait, "Wait", WAIT, 0x77616974);
unit_answer!(Shed, "Shed", SHED, 0x73686564);

/// `take` answered: the ward holds makes after a failure; try again after
/// `delay` seconds.
#[pyclass(module = "headway._native", name = "Later", frozen)]
pub(crate) struct Later {
    /// Seconds still to wait.
    #[pyo3(get)]
    delay: f64,
}

#[pymethods]
impl Later {
    #[new]
    fn new(delay: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Later {
            delay: float_arg("delay", delay)?,
        })
    }

    #[classattr]
    fn __match_args__() -> (&'static str,) {
        ("delay",)
    }

    fn __repr__(&self) -> String {
        format!("Later({:?})", self.delay)
    }

    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<Py<PyAny>> {
        richcmp(other, op, |o: &Later| self.delay == o.delay)
    }

    fn __hash__(&self) -> u64 {
        self.delay.to_bits()
    }
}

/// A core answer as its Python class.
fn answer(py: Python<'_>, t: Taken<Obj>) -> PyResult<Py<PyAny>> {
    Ok(match t {
        Taken::Ready(o) => Py::new(py, Ready { item: o.0 })?.into_any(),
        Taken::Stale(o) => Py::new(py, Stale { item: o.0 })?.into_any(),
        Taken::Make => single(py, &MAKE, || Make)?.into_any(),
        Taken::Wait => single(py, &WAIT, || Wait)?.into_any(),
        Taken::Shed => single(py, &SHED, || Shed)?.into_any(),
        Taken::Later(ns) => Py::new(
            py,
            Later {
                delay: secs_out(ns),
            },
        )?
        .into_any(),
    })
}

// ---------------------------------------------------------------- Pool

/// The bookkeeping of holding a limited number of things.
///
/// It does not open, close or wait — the caller (or `headway.Pooled`) does.
/// `take` answers one of six classes: `Ready(item)`, `Stale(item)`, `Make()`,
/// `Wait()`, `Later(delay)`, `Shed()`. Newest first: the most recently
/// returned item is handed out first, so the oldest age past `keep` and the
/// pool shrinks after a burst. A stale idle item comes back as `Stale`, never
/// skipped. A lent item is recognised by identity (`is`) and keeps its birth
/// through every loan, so `life` retires an item reused all along. Any object
/// can be pooled, hashable or not.
///
/// Every `now` is float seconds from any origin (omitted: `time.monotonic()`);
/// every `roll` a draw in [0, 1) (omitted: the binding's RNG).
#[pyclass(module = "headway._native", name = "Pool", generic)]
pub(crate) struct PyPool {
    pub(crate) inner: flow::Pool<Obj>,
}

methods! {
    PyPool {
        /// How many exist: idle, lent, and being made.
        live: i64 = |c| c.live();
        /// How many sit idle.
        idle: i64 = |c| c.idle();
        /// How many are lent out or being made.
        busy: i64 = |c| c.busy();
        /// A copy of its ward as it stands (with its failure count), or `None`.
        ward: Option<PyWard> = |c| c.ward().map(|w| PyWard { inner: w.clone() });
    }

    #[new]
    #[pyo3(signature = (limits=None, ward=None))]
    fn new(limits: Option<&Bound<'_, PyAny>>, ward: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        guard(|| {
            let limits = limits_or_default(limits)?;
            let ward = given::<PyWard>("ward", "Ward", ward)?.map(|w| w.get().inner.clone());
            Ok(PyPool {
                inner: flow::Pool::new(limits, ward),
            })
        })
    }

    /// Shows the garbage collector every item the pool holds, idle and lent,
    /// so a cycle through a pooled item (one that holds its own pool) is
    /// collected.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        for item in self.inner.items() {
            visit.call(&item.0)?;
        }
        Ok(())
    }

    /// Breaks such a cycle: the pool forgets everything it holds.
    fn __clear__(&mut self) {
        let limits = *self.inner.limits();
        let ward = self.inner.ward().cloned();
        self.inner = flow::Pool::new(limits, ward);
    }

    /// Take one, be told to make one or to wait — or be handed one too old to
    /// use. `roll` is the draw the ward's breaker decides with.
    #[pyo3(signature = (now=None, roll=None))]
    fn take(
        &mut self,
        py: Python<'_>,
        now: Option<&Bound<'_, PyAny>>,
        roll: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        guard(|| {
            let now = now_arg(now)?;
            let roll = draw_arg("roll", roll)?;
            answer(py, self.inner.take(now, roll))
        })
    }

    /// Register an item opened after `take` answered `Make`: lent, born now.
    /// It fills the reserved room and tells the ward the backend is alive.
    #[pyo3(signature = (item, now=None))]
    fn made(&mut self, item: &Bound<'_, PyAny>, now: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        guard(|| {
            let now = now_arg(now)?;
            self.inner.made(Obj(item.clone().unbind()), now);
            Ok(())
        })
    }

    /// Say the item `take` reserved room for could not be made: the room is
    /// free again and the ward counts a failure (`roll` draws its hold).
    /// Without it a factory that failed once would shrink the pool for good.
    #[pyo3(signature = (now=None, roll=None))]
    fn unmade(
        &mut self,
        now: Option<&Bound<'_, PyAny>>,
        roll: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        guard(|| {
            let now = now_arg(now)?;
            let roll = draw_arg("roll", roll)?;
            self.inner.unmade(now, roll);
            Ok(())
        })
    }

    /// Hand one back, keeping the birth it was lent with. `False` means the
    /// pool did not keep it — enough idle already, past its `life`, or a
    /// stranger with no room — and you should close it. An item never
    /// registered by `made` fills the room `take` reserved and is born now.
    #[pyo3(signature = (item, now=None))]
    fn give(&mut self, item: &Bound<'_, PyAny>, now: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        guard(|| {
            let now = now_arg(now)?;
            Ok(self.inner.give(Obj(item.clone().unbind()), now))
        })
    }

    /// Say a lent item is not coming back because it broke; this keeps the
    /// live count honest (a broken item would otherwise hold a slot for ever).
    fn drop(&mut self, item: &Bound<'_, PyAny>) -> PyResult<()> {
        guard(|| {
            self.inner.drop(&Obj(item.clone().unbind()));
            Ok(())
        })
    }

    /// Every idle item past `keep` or `life`, out of the pool, for you to
    /// close. Call it on a timer; `take` checks ages too, so a late timer
    /// strands nothing.
    #[pyo3(signature = (now=None))]
    fn evict<'py>(
        &mut self,
        py: Python<'py>,
        now: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        guard(|| {
            let now = now_arg(now)?;
            objs(py, self.inner.evict(now))
        })
    }

    /// Everything idle, emptied out for you to close: what a shutdown does.
    /// Lent items are the borrowers'; each comes back through `give`.
    fn close<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        guard(|| objs(py, self.inner.close()))
    }

    /// The ward's breaker refusal at `now`, in [0, 1); 0 without one. Reads,
    /// counts nothing.
    #[pyo3(signature = (now=None))]
    fn refusal(&self, now: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
        guard(|| Ok(self.inner.refusal(now_arg(now)?)))
    }

    /// The limits it holds itself to.
    #[getter]
    fn limits(&self) -> PyLimits {
        PyLimits {
            inner: *self.inner.limits(),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "Pool(live={}, idle={}, busy={})",
            self.inner.live(),
            self.inner.idle(),
            self.inner.busy()
        )
    }
}

// ---------------------------------------------------------------- pick

/// Which pool to ask, by two random choices (Mitzenmacher, "The Power of Two
/// Choices"; what Finagle and Envoy do): the pools at `floor(first·len)` and
/// `floor(second·len)` are compared, lower `refusal(now)` wins, then lower
/// `busy`, then the first. `None` when there are no pools. Draws omitted come
/// from the binding's RNG.
#[pyfunction]
#[pyo3(signature = (pools, now=None, first=None, second=None))]
fn pick(
    pools: &Bound<'_, PyAny>,
    now: Option<&Bound<'_, PyAny>>,
    first: Option<&Bound<'_, PyAny>>,
    second: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<usize>> {
    guard(|| {
        let now = now_arg(now)?;
        let first = draw_arg("first", first)?;
        let second = draw_arg("second", second)?;
        let seq: Vec<Bound<'_, PyAny>> = pools
            .try_iter()
            .map_err(|_| wrong_type("pools", "a sequence of Pool", pools))?
            .collect::<PyResult<_>>()?;
        let mut refs = Vec::with_capacity(seq.len());
        for (i, p) in seq.iter().enumerate() {
            let pool = p.cast::<PyPool>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "`pools` must hold only Pool; item {i} is {}",
                    type_name(p)
                ))
            })?;
            refs.push(pool.try_borrow()?);
        }
        let inner: Vec<&flow::Pool<Obj>> = refs.iter().map(|r| &r.inner).collect();
        Ok(flow::pick(&inner, now, first, second))
    })
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyLimits>()?;
    m.add("TAKE_TIMEOUT", secs_out(flow::TAKE_TIMEOUT))?;
    m.add_class::<PyBreaker>()?;
    m.add_class::<PyWard>()?;
    m.add_class::<PyPool>()?;
    m.add_class::<Ready>()?;
    m.add_class::<Stale>()?;
    m.add_class::<Make>()?;
    m.add_class::<Wait>()?;
    m.add_class::<Later>()?;
    m.add_class::<Shed>()?;
    m.add_function(wrap_pyfunction!(pick, m)?)?;
    Ok(())
}
