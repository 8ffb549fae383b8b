//! When to try again, and how long to wait first.
//!
//! A retry with no jitter makes every client that failed together try again
//! together, which is how one outage becomes a second one. The four strategies
//! are the ones AWS's "Exponential Backoff and Jitter" names and measures;
//! the defaults are gRPC's documented retry policy.

use super::error::{Invalid, finite, span};
use super::{MILLI, Nanos, SECOND, nanos, unit};

/// How much randomness goes into a delay.
///
/// | strategy | delay | why |
/// |---|---|---|
/// | `Rigid` | the ceiling, unchanged | reproducible; a policy written elsewhere may specify no jitter |
/// | `Full` | uniform over [0, ceiling] | spreads clients furthest; what gRPC sleeps; the default (AWS measured it best) |
/// | `Equal` | ceiling/2 + uniform over [0, ceiling/2] | keeps a floor under the wait |
/// | `Decorrelated` | uniform over [base, min(cap, 3·previous)] | grows from where it last landed rather than from the attempt number |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Jitter {
    Rigid,
    #[default]
    Full,
    Equal,
    Decorrelated,
}

impl Jitter {
    /// The lowercase name the bindings use (`"full"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Jitter::Rigid => "rigid",
            Jitter::Full => "full",
            Jitter::Equal => "equal",
            Jitter::Decorrelated => "decorrelated",
        }
    }

    /// A jitter by its name, case-insensitively; `None` for any other text.
    pub fn parse(name: &str) -> Option<Jitter> {
        match name.to_ascii_lowercase().as_str() {
            "rigid" | "none" => Some(Jitter::Rigid),
            "full" => Some(Jitter::Full),
            "equal" => Some(Jitter::Equal),
            "decorrelated" => Some(Jitter::Decorrelated),
            _ => None,
        }
    }

    /// A jitter argument by its name (see [`Jitter::parse`]), refused with
    /// the names it may take.
    pub fn named(name: &str) -> Result<Jitter, Invalid> {
        Jitter::parse(name).ok_or(Invalid::new(
            "jitter",
            "must be one of rigid, full, equal, decorrelated",
        ))
    }
}

/// When to try again, and how long to wait first.
///
/// The preset ([`Backoff::default`]) is gRPC's: three attempts, 100 ms doubling
/// to a 1 s ceiling, full jitter (maxAttempts 3, initialBackoff 0.1 s,
/// maxBackoff 1 s, backoffMultiplier 2; gRPC sleeps uniformly over [0, cap]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    base: Nanos,
    factor: f64,
    cap: Nanos,
    attempts: i32,
    jitter: Jitter,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: 100 * MILLI,
            factor: 2.0,
            cap: SECOND,
            attempts: 3,
            jitter: Jitter::Full,
        }
    }
}

impl Backoff {
    /// A backoff by its five knobs.
    ///
    /// Refused: a negative `base` or `cap`, a `factor` that is NaN, infinite or
    /// below 1 (a shrinking backoff is a bug, not a policy), negative
    /// `attempts`.
    pub fn new(
        base: Nanos,
        factor: f64,
        cap: Nanos,
        attempts: i32,
        jitter: Jitter,
    ) -> Result<Backoff, Invalid> {
        span("base", base)?;
        span("cap", cap)?;
        finite("factor", factor)?;
        if factor < 1.0 {
            return Err(Invalid::new("factor", "must be at least 1"));
        }
        if attempts < 0 {
            return Err(Invalid::new("attempts", "must not be negative"));
        }
        Ok(Backoff {
            base,
            factor,
            cap,
            attempts,
            jitter,
        })
    }

    /// [`Backoff::new`] with each knob not given at [`Backoff::default`]'s
    /// value (gRPC's): what `Backoff()` with some options means in either
    /// binding.
    pub fn given(
        base: Option<Nanos>,
        factor: Option<f64>,
        cap: Option<Nanos>,
        attempts: Option<i32>,
        jitter: Option<Jitter>,
    ) -> Result<Backoff, Invalid> {
        let d = Backoff::default();
        Backoff::new(
            base.unwrap_or(d.base),
            factor.unwrap_or(d.factor),
            cap.unwrap_or(d.cap),
            attempts.unwrap_or(d.attempts),
            jitter.unwrap_or(d.jitter),
        )
    }

    /// The first retry's ceiling.
    pub fn base(&self) -> Nanos {
        self.base
    }
    /// What each ceiling is multiplied by.
    pub fn factor(&self) -> f64 {
        self.factor
    }
    /// No delay is ever longer.
    pub fn cap(&self) -> Nanos {
        self.cap
    }
    /// How many attempts a call may make in all, the first included.
    pub fn attempts(&self) -> i32 {
        self.attempts
    }
    /// The strategy.
    pub fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// The undelayed ceiling before the `retry`-th retry, the first being 1:
    /// `min(base · factor^(retry−1), cap)`, and 0 for `retry < 1`.
    ///
    /// This is what a jitter-free client sleeps and what every other strategy
    /// draws within, so it is public: comparing this library against a policy
    /// written elsewhere compares this.
    pub fn ceiling(&self, retry: i32) -> Nanos {
        if retry < 1 {
            return 0;
        }
        let grown = self.base as f64 * self.factor.powi(retry - 1);
        if grown >= self.cap as f64 {
            self.cap
        } else {
            nanos(grown)
        }
    }

    /// How long to wait before the `retry`-th retry.
    ///
    /// `random` is a draw in [0, 1) the caller makes (clamped into it); the
    /// same draw gives the same delay, which is what makes a retry sequence
    /// testable. `previous` is what the last delay turned out to be, which only
    /// `Decorrelated` reads (0: none yet, taken as `base`).
    pub fn delay(&self, retry: i32, random: f64, previous: Nanos) -> Nanos {
        if retry < 1 {
            return 0;
        }
        let r = unit(random);
        match self.jitter {
            Jitter::Rigid => self.ceiling(retry),
            Jitter::Full => nanos(self.ceiling(retry) as f64 * r),
            Jitter::Equal => {
                let half = self.ceiling(retry) as f64 / 2.0;
                nanos(half + half * r)
            }
            Jitter::Decorrelated => {
                let lo = self.base.min(self.cap) as f64;
                let prev = if previous > 0 { previous } else { self.base };
                let hi = (self.cap as f64).min(3.0 * prev as f64).max(lo);
                nanos(lo + (hi - lo) * r)
            }
        }
    }

    /// Whether a call that has made `made` attempts may make another:
    /// `0 <= made < attempts`. The first attempt is 1, so three attempts allow
    /// two retries.
    pub fn more(&self, made: i32) -> bool {
        made >= 0 && made < self.attempts
    }

    /// Every delay a run of retries would wait — the `attempts − 1` of them —
    /// for a test or a log line explaining a plan. Draws are taken in order;
    /// when they run short the rest are 0, the low end of every strategy.
    pub fn schedule(&self, randoms: &[f64]) -> Vec<Nanos> {
        let steps = (self.attempts - 1).max(0) as usize;
        let mut out = Vec::with_capacity(steps);
        let mut previous = 0;
        for i in 0..steps {
            let d = self.delay(
                i as i32 + 1,
                randoms.get(i).copied().unwrap_or(0.0),
                previous,
            );
            out.push(d);
            previous = d;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knobs_not_given_are_the_defaults() {
        assert_eq!(
            Backoff::given(None, None, None, None, None),
            Ok(Backoff::default())
        );
        let b = Backoff::given(None, Some(3.0), None, Some(5), None).unwrap();
        let d = Backoff::default();
        assert_eq!((b.base(), b.factor(), b.cap()), (d.base(), 3.0, d.cap()));
        assert_eq!((b.attempts(), b.jitter()), (5, d.jitter()));
        assert_eq!(
            Backoff::given(None, None, None, Some(-1), None)
                .unwrap_err()
                .arg,
            "attempts"
        );
    }

    #[test]
    fn jitter_by_name() {
        assert_eq!(Jitter::named("FULL"), Ok(Jitter::Full));
        assert_eq!(Jitter::named("none"), Ok(Jitter::Rigid));
        assert_eq!(Jitter::named("wobbly").unwrap_err().arg, "jitter");
    }

    fn ms(n: i64) -> Nanos {
        n * MILLI
    }

    #[test]
    fn defaults_are_grpc() {
        let b = Backoff::default();
        assert_eq!(b.base(), ms(100));
        assert_eq!(b.factor(), 2.0);
        assert_eq!(b.cap(), SECOND);
        assert_eq!(b.attempts(), 3);
        assert_eq!(b.jitter(), Jitter::Full);
    }

    #[test]
    fn ceiling_doubles_to_cap() {
        let b = Backoff::default();
        assert_eq!(b.ceiling(0), 0);
        assert_eq!(b.ceiling(-3), 0);
        assert_eq!(b.ceiling(1), ms(100));
        assert_eq!(b.ceiling(2), ms(200));
        assert_eq!(b.ceiling(4), ms(800));
        assert_eq!(b.ceiling(5), SECOND);
        assert_eq!(b.ceiling(1000), SECOND);
    }

    #[test]
    fn each_jitter() {
        let mk = |j| Backoff::new(ms(100), 2.0, SECOND, 5, j).unwrap();
        assert_eq!(mk(Jitter::Rigid).delay(2, 0.9, 0), ms(200));
        assert_eq!(mk(Jitter::Full).delay(2, 0.5, 0), ms(100));
        assert_eq!(mk(Jitter::Full).delay(2, 0.0, 0), 0);
        assert_eq!(mk(Jitter::Equal).delay(2, 0.0, 0), ms(100));
        assert_eq!(mk(Jitter::Equal).delay(2, 0.5, 0), ms(150));
        // Decorrelated: uniform over [base, min(cap, 3·previous)].
        assert_eq!(mk(Jitter::Decorrelated).delay(1, 0.0, 0), ms(100));
        assert_eq!(mk(Jitter::Decorrelated).delay(1, 0.5, 0), ms(200));
        assert_eq!(mk(Jitter::Decorrelated).delay(3, 0.5, ms(200)), ms(350));
        assert_eq!(mk(Jitter::Decorrelated).delay(3, 0.5, ms(900)), ms(550));
        // Every strategy waits nothing before retry 0.
        for j in [
            Jitter::Rigid,
            Jitter::Full,
            Jitter::Equal,
            Jitter::Decorrelated,
        ] {
            assert_eq!(mk(j).delay(0, 0.5, 0), 0);
        }
    }

    #[test]
    fn draws_are_clamped() {
        let b = Backoff::default();
        assert!(b.delay(1, 1.0, 0) < ms(100));
        assert!(b.delay(1, 7.0, 0) < ms(100));
        assert_eq!(b.delay(1, -1.0, 0), 0);
        assert_eq!(b.delay(1, f64::NAN, 0), 0);
    }

    #[test]
    fn more_counts_attempts() {
        let b = Backoff::default();
        assert!(!b.more(-1));
        assert!(b.more(0));
        assert!(b.more(1));
        assert!(b.more(2));
        assert!(!b.more(3));
    }

    #[test]
    fn schedule_fills_missing_draws_with_zero() {
        let b = Backoff::new(ms(100), 2.0, SECOND, 4, Jitter::Full).unwrap();
        assert_eq!(b.schedule(&[1.0 - f64::EPSILON, 0.5]).len(), 3);
        assert_eq!(b.schedule(&[0.5, 0.5]), vec![ms(50), ms(100), 0]);
        let rigid = Backoff::new(ms(100), 2.0, SECOND, 3, Jitter::Rigid).unwrap();
        assert_eq!(rigid.schedule(&[]), vec![ms(100), ms(200)]);
        let none = Backoff::new(ms(100), 2.0, SECOND, 0, Jitter::Rigid).unwrap();
        assert!(none.schedule(&[]).is_empty());
    }

    #[test]
    fn decorrelated_schedule_chains_previous() {
        let b = Backoff::new(ms(100), 2.0, SECOND, 4, Jitter::Decorrelated).unwrap();
        assert_eq!(
            b.schedule(&[0.5, 0.5, 0.5]),
            vec![ms(200), ms(350), ms(550)]
        );
    }

    #[test]
    fn refuses_bad_knobs() {
        assert_eq!(
            Backoff::new(-1, 2.0, SECOND, 3, Jitter::Full)
                .unwrap_err()
                .arg,
            "base"
        );
        assert_eq!(
            Backoff::new(1, f64::NAN, SECOND, 3, Jitter::Full)
                .unwrap_err()
                .arg,
            "factor"
        );
        assert_eq!(
            Backoff::new(1, 0.5, SECOND, 3, Jitter::Full)
                .unwrap_err()
                .arg,
            "factor"
        );
        assert_eq!(
            Backoff::new(1, 2.0, -5, 3, Jitter::Full).unwrap_err().arg,
            "cap"
        );
        assert_eq!(
            Backoff::new(1, 2.0, 5, -3, Jitter::Full).unwrap_err().arg,
            "attempts"
        );
    }

    #[test]
    fn jitter_names_round_trip() {
        for j in [
            Jitter::Rigid,
            Jitter::Full,
            Jitter::Equal,
            Jitter::Decorrelated,
        ] {
            assert_eq!(Jitter::parse(j.name()), Some(j));
        }
        assert_eq!(Jitter::parse("FULL"), Some(Jitter::Full));
        assert_eq!(Jitter::parse("wobbly"), None);
    }
}
