//! `Jitter` and `Backoff`.

use headway_core::flow::{self, Jitter};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::{
    count_arg, draw_arg, float_arg, guard, invalid, opt, secs_out, span_arg, span_opt, wrong_type,
};

/// How much randomness goes into a delay (AWS, "Exponential Backoff and
/// Jitter").
///
/// A retry with no jitter makes every client that failed together try again
/// together, which is how one outage becomes a second one.
///
/// - `RIGID`: the ceiling, unchanged — reproducible; for a policy written
///   elsewhere that specifies no jitter.
/// - `FULL`: uniform over [0, ceiling] — spreads clients furthest; what gRPC
///   sleeps, and the default because AWS measured it best.
/// - `EQUAL`: ceiling/2 + uniform over [0, ceiling/2] — keeps a floor under the
///   wait.
/// - `DECORRELATED`: uniform over [base, min(cap, 3·previous)] — grows from
///   where it last landed rather than from the attempt number.
#[pyclass(module = "headway._native", name = "Jitter", eq, frozen, hash)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum PyJitter {
    #[pyo3(name = "RIGID")]
    Rigid,
    #[pyo3(name = "FULL")]
    Full,
    #[pyo3(name = "EQUAL")]
    Equal,
    #[pyo3(name = "DECORRELATED")]
    Decorrelated,
}

impl From<PyJitter> for Jitter {
    fn from(j: PyJitter) -> Jitter {
        match j {
            PyJitter::Rigid => Jitter::Rigid,
            PyJitter::Full => Jitter::Full,
            PyJitter::Equal => Jitter::Equal,
            PyJitter::Decorrelated => Jitter::Decorrelated,
        }
    }
}

impl From<Jitter> for PyJitter {
    fn from(j: Jitter) -> PyJitter {
        match j {
            Jitter::Rigid => PyJitter::Rigid,
            Jitter::Full => PyJitter::Full,
            Jitter::Equal => PyJitter::Equal,
            Jitter::Decorrelated => PyJitter::Decorrelated,
        }
    }
}

#[pymethods]
impl PyJitter {
    /// The member's name, as `enum.Enum` spells it (`"FULL"`).
    #[getter]
    fn name(&self) -> String {
        Jitter::from(*self).name().to_ascii_uppercase()
    }

    /// The lowercase name Node uses (`"full"`); `Backoff(jitter=...)` accepts
    /// it too.
    #[getter]
    fn value(&self) -> &'static str {
        Jitter::from(*self).name()
    }
}

/// When to try again, and how long to wait first.
///
/// The defaults are gRPC's documented retry policy: three attempts, 0.1 s
/// doubling (`factor=2.0`) to a 1 s `cap`, full jitter (maxAttempts 3,
/// initialBackoff 0.1 s, maxBackoff 1 s, backoffMultiplier 2; gRPC sleeps
/// uniformly over [0, cap]). Spans are float seconds or `datetime.timedelta`.
/// `jitter` is a `Jitter` or its name (`"full"`). A negative base or cap, a
/// factor below 1 or NaN, negative attempts raise `ValueError`.
#[pyclass(module = "headway._native", name = "Backoff", frozen)]
pub(crate) struct PyBackoff {
    pub(crate) inner: flow::Backoff,
}

fn jitter_arg(obj: &Bound<'_, PyAny>) -> PyResult<Jitter> {
    if let Ok(j) = obj.cast::<PyJitter>() {
        return Ok((*j.get()).into());
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Jitter::named(s.to_str()?).map_err(invalid);
    }
    Err(wrong_type("jitter", "a Jitter or its name", obj))
}

methods! {
    PyBackoff, eq {
        /// The first retry's ceiling, in seconds.
        base: f64 = |c| secs_out(c.base());
        /// What each ceiling is multiplied by.
        factor: f64 = |c| c.factor();
        /// No delay is ever longer, in seconds.
        cap: f64 = |c| secs_out(c.cap());
        /// How many attempts a call may make in all, the first included.
        attempts: i32 = |c| c.attempts();
        /// The strategy.
        jitter: PyJitter = |c| c.jitter().into();
    }

    #[new]
    #[pyo3(
        signature = (base=None, factor=None, cap=None, attempts=None, jitter=None),
        text_signature = "(base=0.1, factor=2.0, cap=1.0, attempts=3, jitter=Jitter.FULL)"
    )]
    fn new(
        base: Option<&Bound<'_, PyAny>>,
        factor: Option<&Bound<'_, PyAny>>,
        cap: Option<&Bound<'_, PyAny>>,
        attempts: Option<&Bound<'_, PyAny>>,
        jitter: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        guard(|| {
            let base = opt(base, |o| span_arg("base", o))?;
            let factor = opt(factor, |o| float_arg("factor", o))?;
            let cap = opt(cap, |o| span_arg("cap", o))?;
            let attempts = opt(attempts, |o| count_arg("attempts", o))?;
            let jitter = opt(jitter, jitter_arg)?;
            // What is not given is the core's default (gRPC's).
            let inner = flow::Backoff::given(base, factor, cap, attempts, jitter);
            Ok(PyBackoff {
                inner: inner.map_err(invalid)?,
            })
        })
    }

    /// The undelayed ceiling before the `retry`-th retry (the first is 1):
    /// `min(base·factor^(retry−1), cap)`, 0 for `retry < 1`. What a
    /// jitter-free client sleeps and what every strategy draws within.
    fn ceiling(&self, retry: &Bound<'_, PyAny>) -> PyResult<f64> {
        guard(|| Ok(secs_out(self.inner.ceiling(count_arg("retry", retry)?))))
    }

    /// Seconds to wait before the `retry`-th retry. `random` is a draw in
    /// [0, 1) (clamped into it; omitted: the binding's RNG) — the same draw
    /// gives the same delay. `previous` is the last delay, which only
    /// `DECORRELATED` reads (omitted: none yet, taken as `base`).
    #[pyo3(signature = (retry, random=None, previous=None))]
    fn delay(
        &self,
        retry: &Bound<'_, PyAny>,
        random: Option<&Bound<'_, PyAny>>,
        previous: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<f64> {
        guard(|| {
            let retry = count_arg("retry", retry)?;
            let random = draw_arg("random", random)?;
            let previous = span_opt("previous", previous, 0)?;
            Ok(secs_out(self.inner.delay(retry, random, previous)))
        })
    }

    /// Whether a call that has made `made` attempts may make another:
    /// `0 <= made < attempts`. Three attempts allow two retries.
    fn more(&self, made: &Bound<'_, PyAny>) -> PyResult<bool> {
        guard(|| Ok(self.inner.more(count_arg("made", made)?)))
    }

    /// Every delay a run of retries would wait — `attempts − 1` of them, in
    /// seconds — for a test or a log line explaining a plan. `randoms` are the
    /// draws in order; when they run short (or are omitted) the rest are 0,
    /// the low end of every strategy: the same plan on every call.
    #[pyo3(signature = (randoms=None))]
    fn schedule(&self, randoms: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<f64>> {
        guard(|| {
            let draws: Vec<f64> = match randoms {
                Some(r) if !r.is_none() => {
                    let it = r
                        .try_iter()
                        .map_err(|_| wrong_type("randoms", "a sequence of numbers", r))?;
                    it.map(|x| float_arg("randoms", &x?))
                        .collect::<PyResult<_>>()?
                }
                _ => Vec::new(),
            };
            Ok(self
                .inner
                .schedule(&draws)
                .into_iter()
                .map(secs_out)
                .collect())
        })
    }

    fn __repr__(&self) -> String {
        let b = &self.inner;
        format!(
            "Backoff(base={:?}, factor={:?}, cap={:?}, attempts={}, jitter=Jitter.{})",
            secs_out(b.base()),
            b.factor(),
            secs_out(b.cap()),
            b.attempts(),
            b.jitter().name().to_ascii_uppercase()
        )
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyJitter>()?;
    m.add_class::<PyBackoff>()?;
    Ok(())
}
