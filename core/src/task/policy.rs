//! Everything about how a task is run, retried and confirmed.
//!
//! Each default is the safe side of its choice (moontask): no retries, since a
//! retry repeats the side effects of the first attempt; no timeout, since a
//! hung task is visible in the queue rather than silently cut; acknowledge on
//! receipt, since a message not redelivered when a worker dies is the cheaper
//! mistake for idempotent work. `acks_late` flips that last one for work that
//! must not be lost (Celery's `acks_late`, Sidekiq Pro's `super_fetch`).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::state::Failure;

/// A policy knob that cannot be accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// The knob, as the public API spells it.
    pub arg: &'static str,
    /// What was wrong with it.
    pub why: String,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid `{}`: {}", self.arg, self.why)
    }
}

impl std::error::Error for PolicyError {}

fn bad(arg: &'static str, why: impl Into<String>) -> PolicyError {
    PolicyError {
        arg,
        why: why.into(),
    }
}

/// How long to wait before the next attempt of a failed run: a task's
/// retry policy, carried in its messages. Not [`crate::flow::Backoff`],
/// the sans-I/O delay machine of the flow half (its own jitters, drawn by
/// the caller); this one is seeded by the task id, so a retried run waits
/// the same in every worker and binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RetryBackoff {
    /// The same wait every time (ms).
    Fixed { delay: i64 },
    /// Doubling from `base` to `cap` (ms). With `jitter` the wait is spread
    /// over [0, ceiling] — full jitter, AWS's measured best — so a thousand
    /// workers failing together do not retry in the same millisecond.
    Exponential { base: i64, cap: i64, jitter: bool },
}

impl Default for RetryBackoff {
    /// Exponential from 1 s to 10 min, jittered (moontask's preset; Celery's
    /// `retry_backoff_max` is also 600 s).
    fn default() -> Self {
        RetryBackoff::Exponential {
            base: 1_000,
            cap: 600_000,
            jitter: true,
        }
    }
}

/// A draw in [0, 1) derived from a task id and an attempt number.
///
/// FNV-1a over the id's bytes and the attempt, then the SplitMix64
/// finaliser, top 53 bits. The same id and attempt give the same draw on
/// every machine and in every binding, which is what lets a test assert a
/// retry's wait and makes a retried task wait the same wherever it fails.
pub fn seeded(seed: &str, attempt: u32) -> f64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in seed.bytes().chain(attempt.to_le_bytes()) {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    (h >> 11) as f64 / (1u64 << 53) as f64
}

impl RetryBackoff {
    /// A fixed wait; refused when negative.
    pub fn fixed(delay: i64) -> Result<RetryBackoff, PolicyError> {
        if delay < 0 {
            return Err(bad("delay", "must not be negative"));
        }
        Ok(RetryBackoff::Fixed { delay })
    }

    /// An exponential wait; refused when `base` or `cap` is negative.
    pub fn exponential(base: i64, cap: i64, jitter: bool) -> Result<RetryBackoff, PolicyError> {
        if base < 0 {
            return Err(bad("base", "must not be negative"));
        }
        if cap < 0 {
            return Err(bad("cap", "must not be negative"));
        }
        Ok(RetryBackoff::Exponential { base, cap, jitter })
    }

    /// The first retry's wait before any jitter (ms): a fixed backoff's
    /// delay, an exponential one's base.
    pub fn base(&self) -> i64 {
        match *self {
            RetryBackoff::Fixed { delay } => delay,
            RetryBackoff::Exponential { base, .. } => base,
        }
    }

    /// The longest wait (ms): a fixed backoff's delay, an exponential
    /// one's cap.
    pub fn cap(&self) -> i64 {
        match *self {
            RetryBackoff::Fixed { delay } => delay,
            RetryBackoff::Exponential { cap, .. } => cap,
        }
    }

    /// Whether the waits are spread by jitter (a fixed backoff's never are).
    pub fn jittered(&self) -> bool {
        matches!(self, RetryBackoff::Exponential { jitter: true, .. })
    }

    /// The wait before attempt `attempt`, the first attempt being 1 (which
    /// never waits: nothing has failed yet). `seed` is the task id.
    pub fn delay(&self, attempt: u32, seed: &str) -> i64 {
        if attempt <= 1 {
            return 0;
        }
        match *self {
            RetryBackoff::Fixed { delay } => delay,
            RetryBackoff::Exponential { base, cap, jitter } => {
                let grown = (base as f64) * 2f64.powi((attempt - 2).min(1023) as i32);
                let ceiling = if grown >= cap as f64 {
                    cap
                } else {
                    grown as i64
                };
                if jitter {
                    (ceiling as f64 * seeded(seed, attempt)) as i64
                } else {
                    ceiling
                }
            }
        }
    }
}

/// How fast one task may go on one worker: `count` runs per `per` ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rate {
    /// Runs allowed in any window.
    pub count: u32,
    /// The window's length (ms).
    pub per: i64,
}

impl Rate {
    /// A rate; refused when `per` is not positive, or longer than the
    /// worker's limiter can count in nanoseconds (`i64::MAX` ns, 292 years).
    pub fn new(count: u32, per: i64) -> Result<Rate, PolicyError> {
        if per <= 0 {
            return Err(bad("rate", "the window must be positive"));
        }
        if per > i64::MAX / 1_000_000 {
            // No value in the text: the caller's unit (seconds in Python)
            // is not the core's.
            return Err(bad("rate", "the window is longer than 292 years"));
        }
        Ok(Rate { count, per })
    }

    /// Celery's notation: `"10/s"`, `"100/m"`, `"5/h"`, or a bare number
    /// meaning per second.
    pub fn parse(text: &str) -> Result<Rate, PolicyError> {
        let t = text.trim();
        let (n, unit) = match t.split_once('/') {
            Some((n, u)) => (n.trim(), u.trim()),
            None => (t, "s"),
        };
        let count: u32 = n
            .parse()
            .map_err(|_| bad("rate", format!("{text:?} is not like \"10/m\"")))?;
        let per = match unit {
            "s" | "sec" | "second" => 1_000,
            "m" | "min" | "minute" => 60_000,
            "h" | "hour" => 3_600_000,
            "d" | "day" => 86_400_000,
            _ => {
                return Err(bad(
                    "rate",
                    format!("{text:?}: the unit must be s, m, h or d"),
                ));
            }
        };
        Rate::new(count, per)
    }
}

/// Whom a task's [`Rate`] holds for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RateScope {
    /// Each worker on its own (Celery's `rate_limit`): `n` workers let `n`
    /// times the rate through. The default.
    #[default]
    Worker,
    /// Every worker on the same broker together: one token bucket in the
    /// broker (`docs/limits.md`, "Task limits").
    Global,
}

impl RateScope {
    /// `"worker"` or `"global"`.
    pub fn parse(text: &str) -> Result<RateScope, PolicyError> {
        match text {
            "worker" => Ok(RateScope::Worker),
            "global" => Ok(RateScope::Global),
            _ => Err(bad(
                "rate_scope",
                format!("{text:?}: must be \"worker\" or \"global\""),
            )),
        }
    }

    /// Its name, as [`RateScope::parse`] reads it.
    pub fn name(self) -> &'static str {
        match self {
            RateScope::Worker => "worker",
            RateScope::Global => "global",
        }
    }
}

impl Rate {
    /// Tokens a second, for a token bucket ([`crate::flow::Bucket`]'s
    /// rules; its default burst, one second's worth, at least 1).
    pub fn per_second(self) -> f64 {
        self.count as f64 * 1000.0 / self.per as f64
    }
}

/// Everything about how a task is run, retried and confirmed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    /// Where its messages go: `"default"`.
    pub queue: String,
    /// How many times a failed run is tried again: 0.
    pub retries: u32,
    /// The wait between attempts.
    pub backoff: RetryBackoff,
    /// How long one run may take (ms): no limit.
    pub timeout: Option<i64>,
    /// Confirm after the run instead of on receipt: false.
    pub acks_late: bool,
    /// Keep no result: false.
    pub ignore_result: bool,
    /// Runs per window: no limit.
    pub rate: Option<Rate>,
    /// Whom `rate` holds for: each worker on its own (the default), or
    /// every worker on the broker together.
    #[serde(default)]
    pub rate_scope: RateScope,
    /// At most this many runs sent with one `concurrency_key` run at once,
    /// across every worker on the broker (1 when a run names a key and this
    /// is not set). Runs sent without a key are not limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_limit: Option<u32>,
    /// Celery's hard `time_limit` (ms): past it the run's child process is
    /// killed and the run fails with `TimeLimitExceeded`. Only the process
    /// pool can keep it: a thread cannot be stopped. No limit by default.
    #[serde(default)]
    pub time_limit: Option<i64>,
    /// Celery's `soft_time_limit` (ms): past it `SoftTimeLimitExceeded` is
    /// raised inside the body (Node: `ctx.signal` aborts), which may catch it
    /// and clean up. No limit by default.
    #[serde(default)]
    pub soft_time_limit: Option<i64>,
    /// With `acks_late`, a run whose process died under it (`WorkerLostError`)
    /// goes back to its queue instead of failing: Celery's
    /// `reject_on_worker_lost`. False, as Celery's.
    #[serde(default)]
    pub reject_on_worker_lost: bool,
    /// Which failures are retried (Celery's `autoretry_for`): the names of
    /// types a failure's type is or derives from. Empty: every failure is
    /// (within `retries`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retry_for: Vec<String>,
    /// Which failures are never retried, even when `retry_for` names one of
    /// their bases (Celery's `dont_autoretry_for`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dont_retry_for: Vec<String>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            queue: "default".into(),
            retries: 0,
            backoff: RetryBackoff::default(),
            timeout: None,
            acks_late: false,
            ignore_result: false,
            rate: None,
            rate_scope: RateScope::Worker,
            concurrency_limit: None,
            time_limit: None,
            soft_time_limit: None,
            reject_on_worker_lost: false,
            retry_for: Vec::new(),
            dont_retry_for: Vec::new(),
        }
    }
}

impl Policy {
    /// Refuses a policy that cannot work: an empty queue name, a timeout or a
    /// time limit that is not positive.
    pub fn check(&self) -> Result<(), PolicyError> {
        if self.queue.is_empty() {
            return Err(bad("queue", super::specs::NOT_EMPTY));
        }
        if let Some(t) = self.timeout
            && t <= 0
        {
            return Err(bad("timeout", "must be positive"));
        }
        if self.rate_scope == RateScope::Global && self.rate.is_none() {
            return Err(bad("rate_scope", "\"global\" needs a `rate`"));
        }
        if self.concurrency_limit == Some(0) {
            return Err(bad(
                "concurrency_limit",
                "must be a whole number, at least 1",
            ));
        }
        for (arg, list) in [
            ("retry_for", &self.retry_for),
            ("dont_retry_for", &self.dont_retry_for),
        ] {
            if list.iter().any(|n| n.is_empty()) {
                return Err(bad(arg, "names a type with an empty name"));
            }
        }
        for (arg, limit) in [
            ("time_limit", self.time_limit),
            ("soft_time_limit", self.soft_time_limit),
        ] {
            if let Some(t) = limit
                && t <= 0
            {
                return Err(bad(arg, "must be positive"));
            }
        }
        Ok(())
    }

    /// Whether failure `f` is one this policy retries (attempts left
    /// aside): not named by `dont_retry_for`, and named by `retry_for` when
    /// that names any. A name matches a type of `f`'s lineage written out
    /// (`myapp.errors.Flaky`) or by its last part (`ConnectionError`
    /// matches `builtins.ConnectionError`); a failure whose lineage the
    /// host could not read is matched by its `kind`.
    pub fn retries_on(&self, f: &Failure) -> bool {
        retry_matches(&self.retry_for, &self.dont_retry_for, f)
    }

    /// How many runs of one concurrency key may run at once: the policy's
    /// `concurrency_limit`, 1 when it sets none.
    pub fn key_limit(&self) -> u32 {
        self.concurrency_limit.unwrap_or(1)
    }

    /// The wait before attempt `attempt` of the run `seed`.
    pub fn backoff_delay(&self, attempt: u32, seed: &str) -> i64 {
        self.backoff.delay(attempt, seed)
    }
}

/// Whether failure `f` passes a retry filter: not named by `dont`, and
/// named by `want` when that names any (see [`Policy::retries_on`]).
pub fn retry_matches(want: &[String], dont: &[String], f: &Failure) -> bool {
    let names: Vec<&str> = if f.lineage.is_empty() {
        vec![f.kind.as_str()]
    } else {
        f.lineage.iter().map(String::as_str).collect()
    };
    let named = |list: &[String]| {
        list.iter().any(|w| {
            names
                .iter()
                .any(|n| n == w || n.rsplit('.').next() == Some(w.as_str()))
        })
    };
    !named(dont) && (want.is_empty() || named(want))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backoffs_parts() {
        let f = RetryBackoff::Fixed { delay: 30_000 };
        assert_eq!((f.base(), f.cap(), f.jittered()), (30_000, 30_000, false));
        let e = RetryBackoff::default();
        assert_eq!((e.base(), e.cap(), e.jittered()), (1_000, 600_000, true));
        let rigid = RetryBackoff::Exponential {
            base: 5,
            cap: 9,
            jitter: false,
        };
        assert!(!rigid.jittered());
    }

    #[test]
    fn defaults() {
        let p = Policy::default();
        assert_eq!(p.queue, "default");
        assert_eq!(p.retries, 0);
        assert_eq!(
            p.backoff,
            RetryBackoff::Exponential {
                base: 1000,
                cap: 600_000,
                jitter: true
            }
        );
        assert!(!p.acks_late && !p.ignore_result);
        assert!(p.timeout.is_none() && p.rate.is_none());
    }

    #[test]
    fn seeded_is_stable_and_spread() {
        assert_eq!(seeded("abc", 2), seeded("abc", 2));
        assert_ne!(seeded("abc", 2), seeded("abc", 3));
        // Pinned so every binding and machine agrees.
        assert_eq!(seeded("task-1", 2), seeded("task-1", 2));
        let mean: f64 = (0..1000)
            .map(|i| seeded(&format!("id-{i}"), 2))
            .sum::<f64>()
            / 1000.0;
        assert!((mean - 0.5).abs() < 0.05, "{mean}");
        for i in 0..1000 {
            let r = seeded(&i.to_string(), i);
            assert!((0.0..1.0).contains(&r));
        }
    }

    #[test]
    fn exponential_and_fixed() {
        let e = RetryBackoff::exponential(1000, 5000, false).unwrap();
        assert_eq!(e.delay(0, "x"), 0);
        assert_eq!(e.delay(1, "x"), 0);
        assert_eq!(e.delay(2, "x"), 1000);
        assert_eq!(e.delay(3, "x"), 2000);
        assert_eq!(e.delay(5, "x"), 5000);
        assert_eq!(e.delay(400, "x"), 5000);
        let j = RetryBackoff::exponential(1000, 5000, true).unwrap();
        let d = j.delay(3, "x");
        assert_eq!(d, (2000.0 * seeded("x", 3)) as i64);
        assert_eq!(RetryBackoff::fixed(500).unwrap().delay(7, "y"), 500);
        assert!(RetryBackoff::fixed(-1).is_err());
        assert_eq!(
            RetryBackoff::exponential(-1, 1, true).unwrap_err().arg,
            "base"
        );
    }

    #[test]
    fn rates() {
        assert_eq!(
            Rate::parse("10/m").unwrap(),
            Rate {
                count: 10,
                per: 60_000
            }
        );
        assert_eq!(
            Rate::parse("5/s").unwrap(),
            Rate {
                count: 5,
                per: 1000
            }
        );
        assert_eq!(
            Rate::parse("7").unwrap(),
            Rate {
                count: 7,
                per: 1000
            }
        );
        assert_eq!(Rate::parse("2/h").unwrap().per, 3_600_000);
        assert!(Rate::parse("x/m").is_err());
        assert!(Rate::parse("3/y").is_err());
        assert!(Rate::new(1, 0).is_err());
        let e = Rate::new(1, i64::MAX).unwrap_err();
        assert_eq!(e.arg, "rate");
        assert!(e.why.contains("292 years"), "{e}");
        assert!(Rate::new(1, i64::MAX / 1_000_000).is_ok());
    }

    #[test]
    fn retry_for_matches_a_type_or_its_bases_by_full_or_last_name() {
        let mut f = Failure::new("ConnectionRefusedError", "no");
        f.lineage = [
            "builtins.ConnectionRefusedError".into(),
            "builtins.ConnectionError".into(),
            "builtins.OSError".into(),
            "builtins.Exception".into(),
        ]
        .into();
        let any = Policy::default();
        assert!(any.retries_on(&f), "no filter: every failure");
        let on = |r: &[&str], d: &[&str]| Policy {
            retry_for: r.iter().map(|s| s.to_string()).collect(),
            dont_retry_for: d.iter().map(|s| s.to_string()).collect(),
            ..Policy::default()
        };
        assert!(
            on(&["ConnectionError"], &[]).retries_on(&f),
            "a base, by its last name"
        );
        assert!(
            on(&["builtins.OSError"], &[]).retries_on(&f),
            "a base, written out"
        );
        assert!(!on(&["ValueError"], &[]).retries_on(&f));
        assert!(!on(&["OSError"], &["ConnectionRefusedError"]).retries_on(&f));
        assert!(
            !on(&[], &["Exception"]).retries_on(&f),
            "dont alone excludes"
        );
        assert!(
            !on(&["builtins.Connection"], &[]).retries_on(&f),
            "no prefix match"
        );
        // No lineage (a host that could not read it): the kind.
        let bare = Failure::new("RangeError", "x");
        assert!(on(&["RangeError"], &[]).retries_on(&bare));
        assert!(!on(&["TypeError"], &[]).retries_on(&bare));
        let bad = on(&[""], &[]);
        assert_eq!(bad.check().unwrap_err().arg, "retry_for");
    }

    #[test]
    fn check() {
        let p = Policy {
            timeout: Some(0),
            ..Policy::default()
        };
        assert_eq!(p.check().unwrap_err().arg, "timeout");
        let q = Policy {
            queue: String::new(),
            ..Policy::default()
        };
        assert_eq!(q.check().unwrap_err().arg, "queue");
    }

    #[test]
    fn scopes_and_key_limits() {
        assert_eq!(RateScope::parse("global").unwrap(), RateScope::Global);
        assert_eq!(RateScope::parse("worker").unwrap(), RateScope::Worker);
        assert_eq!(RateScope::default(), RateScope::Worker);
        let e = RateScope::parse("cluster").unwrap_err();
        assert_eq!(e.arg, "rate_scope");
        assert!(e.why.contains("\"cluster\""), "{e}");
        let global = Policy {
            rate_scope: RateScope::Global,
            ..Policy::default()
        };
        assert_eq!(global.check().unwrap_err().arg, "rate_scope");
        let ok = Policy {
            rate: Some(Rate::parse("100/s").unwrap()),
            ..global
        };
        assert!(ok.check().is_ok());
        let zero = Policy {
            concurrency_limit: Some(0),
            ..Policy::default()
        };
        assert_eq!(zero.check().unwrap_err().arg, "concurrency_limit");
        assert_eq!(Policy::default().key_limit(), 1);
        let three = Policy {
            concurrency_limit: Some(3),
            ..Policy::default()
        };
        assert_eq!(three.key_limit(), 3);
        assert_eq!(Rate::parse("100/s").unwrap().per_second(), 100.0);
        assert_eq!(Rate::parse("30/m").unwrap().per_second(), 0.5);
    }
}
