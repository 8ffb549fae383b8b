//! Task policies, send options and worker settings as the bindings receive
//! them: raw, optional fields in the core's units, checked and defaulted here.
//!
//! Why a layer of its own: a default, a range or an error text written in
//! each binding drifts (the priority range once had three copies, a Node
//! `prefetch` of -1 was said to need "at least 1"). Here each exists once,
//! and every binding gets the same answer. A binding converts host values
//! into a spec — seconds or a `timedelta` into milliseconds, a JS number or
//! a Python int into an `f64` count — and refuses only what is the wrong
//! *type*; whether a value is in range is decided here.
//!
//! An error names the argument as the caller wrote it: [`Host`] says whose
//! spelling (`acks_late` in Python and Rust, `acksLate` in Node; a send's
//! `task_id` is Node's `id`). No text here prints a span, so none depends on
//! the host's unit (seconds in Python, milliseconds in Node).

use std::fmt;

use super::message::Options;
use super::policy::{Policy, PolicyError, Rate, RateScope, RetryBackoff};
use super::procs::ProcSpec;
use super::state::Refused;
use super::worker::{Pool, WorkerConfig, hard_limit_needs_process};

#[path = "specs_json.rs"]
pub mod json;

/// Whose spelling an error uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    /// The core's own names (snake_case).
    Rust,
    /// snake_case, as the core.
    Python,
    /// camelCase; a send's id is `id`.
    Node,
}

impl Host {
    /// `arg` (the core's name) as this host spells it.
    pub fn spell(self, arg: &'static str) -> &'static str {
        match (self, arg) {
            (Host::Node, "acks_late") => "acksLate",
            (Host::Node, "ignore_result") => "ignoreResult",
            (Host::Node, "task_id") => "id",
            (Host::Node, "time_limit") => "timeLimit",
            (Host::Node, "soft_time_limit") => "softTimeLimit",
            (Host::Node, "reject_on_worker_lost") => "rejectOnWorkerLost",
            (Host::Node, "retry_for") => "retryFor",
            (Host::Node, "dont_retry_for") => "dontRetryFor",
            (Host::Node, "max_tasks_per_child") => "maxTasksPerChild",
            (Host::Node, "prefetch_multiplier") => "prefetchMultiplier",
            (Host::Node, "max_memory_per_child") => "maxMemoryPerChild",
            (Host::Node, "rate_scope") => "rateScope",
            (Host::Node, "concurrency_limit") => "concurrencyLimit",
            (Host::Node, "concurrency_key") => "concurrencyKey",
            (Host::Node, "dedupe_key") => "dedupeKey",
            (Host::Node, "dedupe_ttl") => "dedupeTtl",
            (Host::Node, "max_body") => "maxBody",
            (Host::Node, "visibility_timeout") => "visibilityTimeout",
            (Host::Node, "master_name") => "masterName",
            (Host::Node, "evict_every") => "evictEvery",
            (Host::Node, "last_error") => "lastError",
            _ => arg,
        }
    }

    /// Why a broker target was refused, its option named as this host
    /// spells it (`visibilityTimeout` for Node; the core's own text for
    /// Python).
    pub fn target_refused(self, e: &crate::broker::TargetError) -> String {
        use crate::broker::TargetError;
        match e {
            TargetError::Invalid { arg, why } => TargetError::Invalid {
                arg: self.spell(arg),
                why,
            }
            .to_string(),
            e => e.to_string(),
        }
    }
}

/// An argument that cannot be accepted, named as the host spells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// Whose spelling [`SpecError::arg`] answers.
    pub host: Host,
    /// The argument, as the core spells it.
    pub name: &'static str,
    /// What was wrong with it.
    pub why: String,
}

impl SpecError {
    pub(crate) fn new(host: Host, name: &'static str, why: impl Into<String>) -> SpecError {
        SpecError {
            host,
            name,
            why: why.into(),
        }
    }

    /// The argument as the caller wrote it.
    pub fn arg(&self) -> &'static str {
        self.host.spell(self.name)
    }

    /// A policy knob the core refused, named for `host`.
    pub fn policy(host: Host, e: PolicyError) -> SpecError {
        SpecError::new(host, e.arg, e.why)
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid `{}`: {}", self.arg(), self.why)
    }
}

impl std::error::Error for SpecError {}

impl From<SpecError> for Refused {
    fn from(e: SpecError) -> Refused {
        Refused::Invalid(e.to_string())
    }
}

/// A priority's range (0, first, to 9).
pub const PRIORITY_RANGE: &str = "must be 0 to 9";
/// A count that may be 0 (retries, a rate's count, prefetch, a limit).
pub const WHOLE: &str = "must be a whole number, 0 or more";
/// A worker's concurrency.
pub const AT_LEAST_ONE: &str = "must be a whole number, at least 1";
/// A queue name.
pub const NOT_EMPTY: &str = "must not be empty";

/// A task's, a beat entry's or a job's name: not empty.
pub fn name(host: Host, name: &str) -> Result<(), SpecError> {
    if name.is_empty() {
        return Err(SpecError::new(host, "name", NOT_EMPTY));
    }
    Ok(())
}

/// `x` as a whole number in `0..=max`, else `why`.
fn whole(host: Host, name: &'static str, x: f64, max: f64, why: &str) -> Result<f64, SpecError> {
    if x.is_finite() && x.fract() == 0.0 && (0.0..=max).contains(&x) {
        Ok(x)
    } else {
        Err(SpecError::new(host, name, why))
    }
}

/// A count in `0..=u32::MAX`.
fn count32(host: Host, name: &'static str, x: f64, why: &str) -> Result<u32, SpecError> {
    Ok(whole(host, name, x, u32::MAX as f64, why)? as u32)
}

/// A count in `0..` (saturating at `usize::MAX`).
fn count(host: Host, name: &'static str, x: f64, why: &str) -> Result<usize, SpecError> {
    Ok(whole(host, name, x, f64::INFINITY, why)? as usize)
}

/// A limit on how many items an answer lists (dead letters): a whole
/// number, 0 or more; `none` when absent.
pub fn limit(host: Host, x: Option<f64>, none: usize) -> Result<usize, SpecError> {
    match x {
        None => Ok(none),
        Some(x) => count(host, "limit", x, WHOLE),
    }
}

// ---------------------------------------------------------------- backoff

/// A retry backoff as given: a fixed wait, or an exponential one whose
/// omitted parts are [`RetryBackoff::default`]'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackoffSpec {
    /// The same wait every time (ms).
    Fixed { delay: i64 },
    /// Doubling from `base` to `cap` (ms), jittered or not.
    Exponential {
        base: Option<i64>,
        cap: Option<i64>,
        jitter: Option<bool>,
    },
}

impl From<RetryBackoff> for BackoffSpec {
    /// A backoff already built (and so already checked).
    fn from(b: RetryBackoff) -> BackoffSpec {
        match b {
            RetryBackoff::Fixed { delay } => BackoffSpec::Fixed { delay },
            RetryBackoff::Exponential { base, cap, jitter } => BackoffSpec::Exponential {
                base: Some(base),
                cap: Some(cap),
                jitter: Some(jitter),
            },
        }
    }
}

impl BackoffSpec {
    /// The backoff, or why not.
    pub fn build(self, host: Host) -> Result<RetryBackoff, SpecError> {
        let bad = |e| SpecError::policy(host, e);
        match self {
            BackoffSpec::Fixed { delay } => RetryBackoff::fixed(delay).map_err(bad),
            BackoffSpec::Exponential { base, cap, jitter } => {
                let RetryBackoff::Exponential {
                    base: b0,
                    cap: c0,
                    jitter: j0,
                } = RetryBackoff::default()
                else {
                    unreachable!("the default backoff is exponential")
                };
                RetryBackoff::exponential(
                    base.unwrap_or(b0),
                    cap.unwrap_or(c0),
                    jitter.unwrap_or(j0),
                )
                .map_err(bad)
            }
        }
    }
}

// ---------------------------------------------------------------- rate

/// A rate as given: Celery's notation (`"10/m"`), or a count per window.
#[derive(Debug, Clone, PartialEq)]
pub enum RateSpec {
    /// `"10/s"`, `"100/m"`, `"5/h"`, `"1/d"`, or a bare number per second.
    Text(String),
    /// `count` runs per `per` ms; both are needed.
    Parts {
        count: Option<f64>,
        per: Option<i64>,
    },
}

impl RateSpec {
    /// The rate, or why not.
    pub fn build(self, host: Host) -> Result<Rate, SpecError> {
        let bad = |e| SpecError::policy(host, e);
        match self {
            RateSpec::Text(t) => Rate::parse(&t).map_err(bad),
            RateSpec::Parts {
                count: Some(count),
                per: Some(per),
            } => {
                let count = count32(
                    host,
                    "rate",
                    count,
                    "`count` must be a whole number, 0 or more",
                )?;
                Rate::new(count, per).map_err(bad)
            }
            RateSpec::Parts { .. } => Err(SpecError::new(host, "rate", "needs `count` and `per`")),
        }
    }
}

// ---------------------------------------------------------------- policy

/// A task's policy as given: what is `None` is [`Policy::default`]'s
/// (read from JSON as [`json`] says).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicySpec {
    pub queue: Option<String>,
    /// How many times a failed run is tried again (a whole number).
    #[serde(deserialize_with = "json::num")]
    pub retries: Option<f64>,
    pub backoff: Option<BackoffSpec>,
    /// How long one run may take (ms).
    #[serde(deserialize_with = "json::span")]
    pub timeout: Option<i64>,
    pub acks_late: Option<bool>,
    pub ignore_result: Option<bool>,
    pub rate: Option<RateSpec>,
    /// `"worker"` (the default) or `"global"`.
    pub rate_scope: Option<String>,
    /// Runs of one concurrency key at once (a whole number, at least 1).
    #[serde(deserialize_with = "json::num")]
    pub concurrency_limit: Option<f64>,
    /// The hard time limit (ms).
    #[serde(deserialize_with = "json::span")]
    pub time_limit: Option<i64>,
    /// The soft time limit (ms).
    #[serde(deserialize_with = "json::span")]
    pub soft_time_limit: Option<i64>,
    pub reject_on_worker_lost: Option<bool>,
    /// Type names whose failures are retried (Celery's `autoretry_for`).
    pub retry_for: Option<Vec<String>>,
    /// Type names whose failures never are (`dont_autoretry_for`).
    pub dont_retry_for: Option<Vec<String>>,
}

impl PolicySpec {
    /// The policy, or why not.
    pub fn build(self, host: Host) -> Result<Policy, SpecError> {
        let d = Policy::default();
        let retries = match self.retries {
            None => d.retries,
            Some(r) => count32(host, "retries", r, WHOLE)?,
        };
        let rate_scope = match self.rate_scope {
            None => d.rate_scope,
            Some(t) => RateScope::parse(&t).map_err(|e| SpecError::policy(host, e))?,
        };
        let concurrency_limit = match self.concurrency_limit {
            None => d.concurrency_limit,
            Some(n) => match count32(host, "concurrency_limit", n, AT_LEAST_ONE)? {
                0 => return Err(SpecError::new(host, "concurrency_limit", AT_LEAST_ONE)),
                n => Some(n),
            },
        };
        let policy = Policy {
            queue: self.queue.unwrap_or(d.queue),
            retries,
            backoff: match self.backoff {
                None => d.backoff,
                Some(b) => b.build(host)?,
            },
            timeout: self.timeout.or(d.timeout),
            acks_late: self.acks_late.unwrap_or(d.acks_late),
            ignore_result: self.ignore_result.unwrap_or(d.ignore_result),
            rate: match self.rate {
                None => d.rate,
                Some(r) => Some(r.build(host)?),
            },
            rate_scope,
            concurrency_limit,
            time_limit: self.time_limit.or(d.time_limit),
            soft_time_limit: self.soft_time_limit.or(d.soft_time_limit),
            reject_on_worker_lost: self
                .reject_on_worker_lost
                .unwrap_or(d.reject_on_worker_lost),
            retry_for: self.retry_for.unwrap_or(d.retry_for),
            dont_retry_for: self.dont_retry_for.unwrap_or(d.dont_retry_for),
        };
        policy.check().map_err(|e| SpecError::policy(host, e))?;
        Ok(policy)
    }
}

// ---------------------------------------------------------------- send

/// Why an instant given as a datetime without a time zone (a Python
/// `datetime` with no `tzinfo`; a JS `Date` is always absolute) is refused:
/// read as local time, the same code would schedule differently on two
/// machines. Every instant argument — a send's `eta`, a retry's, a clock's
/// or a rhythm's — refuses it with this text, after the argument's name.
pub const NAIVE: &str = "must be a timezone-aware datetime (a naive one is read as local \
                         time, which differs between machines); use \
                         datetime(..., tzinfo=timezone.utc)";

/// An instant as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Absolute (ms since the epoch).
    At(i64),
    /// This long from the send (ms).
    In(i64),
}

impl When {
    fn at(self, now: &mut impl FnMut() -> i64) -> i64 {
        match self {
            When::At(ms) => ms,
            When::In(ms) => now().saturating_add(ms),
        }
    }
}

/// Per-send options as given (`apply_async`'s, a signature's; read from
/// JSON as [`json`] says).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct SendSpec {
    #[serde(deserialize_with = "json::instant")]
    pub eta: Option<When>,
    /// This long from the send (ms).
    #[serde(deserialize_with = "json::span")]
    pub countdown: Option<i64>,
    #[serde(deserialize_with = "json::instant")]
    pub expires: Option<When>,
    pub queue: Option<String>,
    /// 0 (first) to 9 (a whole number).
    pub priority: Option<f64>,
    /// The run's id (Python's `task_id`, Node's `id`).
    pub id: Option<String>,
    /// The key whose runs the task's `concurrency_limit` counts.
    pub concurrency_key: Option<String>,
    /// A second send with this key within `dedupe_ttl` answers the first
    /// run instead of sending.
    pub dedupe_key: Option<String>,
    /// How long a dedupe key holds (ms); [`DEDUPE_TTL`] when not given.
    #[serde(deserialize_with = "json::span")]
    pub dedupe_ttl: Option<i64>,
}

/// How long a `dedupe_key` holds when no `dedupe_ttl` is given (ms): an
/// hour, longer than most queues take to drain and short enough that a
/// forgotten key does not block a send for a day.
pub const DEDUPE_TTL: i64 = 3_600_000;

impl SendSpec {
    /// The core's options; a relative instant counts from `now()` (read at
    /// most once, and only if one is relative).
    ///
    /// A priority must fit the message (a whole number, 0 to 255); that it is
    /// at most 9 and that a queue name is not empty is checked when a run is
    /// sent ([`check_options`]), as for a Rust caller.
    pub fn options(self, host: Host, mut now: impl FnMut() -> i64) -> Result<Options, SpecError> {
        let mut at = None;
        let mut now = move || *at.get_or_insert_with(&mut now);
        let priority = match self.priority {
            None => None,
            Some(p) => Some(whole(host, "priority", p, u8::MAX as f64, PRIORITY_RANGE)? as u8),
        };
        for (arg, key) in [
            ("concurrency_key", &self.concurrency_key),
            ("dedupe_key", &self.dedupe_key),
        ] {
            if key.as_deref() == Some("") {
                return Err(SpecError::new(host, arg, NOT_EMPTY));
            }
        }
        let dedupe_ttl = match (&self.dedupe_key, self.dedupe_ttl) {
            (None, Some(_)) => return Err(ttl_without_key(host)),
            (_, Some(t)) if t <= 0 => {
                return Err(SpecError::new(host, "dedupe_ttl", "must be positive"));
            }
            (Some(_), t) => Some(t.unwrap_or(DEDUPE_TTL)),
            (None, None) => None,
        };
        Ok(Options {
            queue: self.queue,
            eta: self.eta.map(|w| w.at(&mut now)),
            countdown: self.countdown,
            expires: self.expires.map(|w| w.at(&mut now)),
            priority,
            id: self.id,
            concurrency_key: self.concurrency_key,
            dedupe_key: self.dedupe_key,
            dedupe_ttl,
        })
    }
}

/// A `dedupe_ttl` given without a `dedupe_key`.
fn ttl_without_key(host: Host) -> SpecError {
    let why = format!("needs a `{}`", host.spell("dedupe_key"));
    SpecError::new(host, "dedupe_ttl", why)
}

/// The per-send options a signature or a beat entry carries as a mapping
/// (Python's `options` dict), in the core's spelling and order;
/// [`Host::spell`] gives a host's.
pub const SEND_OPTIONS: [&str; 9] = [
    "eta",
    "countdown",
    "expires",
    "queue",
    "priority",
    "task_id",
    "concurrency_key",
    "dedupe_key",
    "dedupe_ttl",
];

/// Refuses a key of `owner`'s send-options mapping that names no send
/// option, listing those that exist as `host` spells them. Kept here so a
/// typo (`coutdown`) is refused with the same words in every binding
/// rather than silently dropped by one of them. The answer is the text of
/// a type error (a key is not a value out of range), the key quoted as the
/// host quotes a string (`'k'` in Python, `"k"` in Node).
pub fn send_option_key(host: Host, owner: &str, key: &str) -> Result<(), String> {
    if SEND_OPTIONS.iter().any(|o| host.spell(o) == key) {
        return Ok(());
    }
    let expected: Vec<&str> = SEND_OPTIONS.iter().map(|o| host.spell(o)).collect();
    let q = if host == Host::Node { '"' } else { '\'' };
    Err(format!(
        "{owner}: unexpected option {q}{key}{q} (expected one of {})",
        expected.join(", ")
    ))
}

/// What a send refuses in its options: a priority above 9, an empty queue.
pub fn check_options(host: Host, o: &Options) -> Result<(), SpecError> {
    if let Some(p) = o.priority
        && p > 9
    {
        return Err(SpecError::new(host, "priority", PRIORITY_RANGE));
    }
    if let Some(q) = &o.queue
        && q.is_empty()
    {
        return Err(SpecError::new(host, "queue", NOT_EMPTY));
    }
    for (arg, key) in [
        ("concurrency_key", &o.concurrency_key),
        ("dedupe_key", &o.dedupe_key),
    ] {
        if key.as_deref() == Some("") {
            return Err(SpecError::new(host, arg, NOT_EMPTY));
        }
    }
    match (&o.dedupe_key, o.dedupe_ttl) {
        (None, Some(_)) => Err(ttl_without_key(host)),
        (_, Some(t)) if t <= 0 => Err(SpecError::new(host, "dedupe_ttl", "must be positive")),
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------- worker

/// How long a worker's stop lets runs in progress finish when the caller
/// names no grace (ms): 10 s (moontask's; about what a supervisor waits
/// between SIGTERM and SIGKILL).
pub const GRACE: i64 = 10_000;

/// The grace a worker's stop gives from the ms a caller named: none is
/// [`GRACE`], and a negative one is none at all (runs in progress are
/// cancelled at once) rather than a refusal, since a stop must not fail.
pub fn grace(ms: Option<i64>) -> std::time::Duration {
    std::time::Duration::from_millis(ms.unwrap_or(GRACE).max(0) as u64)
}

/// How long a wait for a result (`Handle::get`) waits from the ms a caller
/// named: `None` for ever, and a negative span waits nothing (answers what
/// is there now) rather than a refusal, as a negative grace is none.
pub fn wait(ms: Option<i64>) -> Option<std::time::Duration> {
    ms.map(|ms| std::time::Duration::from_millis(ms.max(0) as u64))
}

/// A worker's settings as given: what is `None` is
/// [`WorkerConfig::default`]'s (read from JSON as [`json`] says).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkerSpec {
    /// The queues to consume, each entry split at commas (Celery's `-Q
    /// a,b`), trimmed, empty names dropped; at least one must be left.
    pub queues: Option<Vec<String>>,
    /// How many bodies run at once (a whole number, at least 1).
    #[serde(deserialize_with = "json::num")]
    pub concurrency: Option<f64>,
    /// How many messages it may hold unsettled (a whole number).
    #[serde(deserialize_with = "json::num")]
    pub prefetch: Option<f64>,
    /// Celery's `worker_prefetch_multiplier`: when `prefetch` is not given,
    /// it is `concurrency` × this (a whole number, at least 1; Celery's 0,
    /// no limit, is refused: a worker holds only what it accounts for).
    #[serde(deserialize_with = "json::num")]
    pub prefetch_multiplier: Option<f64>,
    pub name: Option<String>,
    /// `"threads"` (the default), `"process"` or Celery's `"prefork"`.
    pub pool: Option<String>,
    /// How the host starts a child of the process pool (the binding's own
    /// command: `python -m headway._child ...`, `node lib/child.js ...`).
    pub child: Option<ChildCommand>,
    /// Runs after which a child is replaced (a whole number, at least 1).
    #[serde(deserialize_with = "json::num")]
    pub max_tasks_per_child: Option<f64>,
    /// Resident KiB past which a child is replaced (a whole number, at least 1).
    #[serde(deserialize_with = "json::num")]
    pub max_memory_per_child: Option<f64>,
    /// The hard time limit (ms) of a task that sets none.
    #[serde(deserialize_with = "json::span")]
    pub time_limit: Option<i64>,
    /// The soft time limit (ms) of a task that sets none.
    #[serde(deserialize_with = "json::span")]
    pub soft_time_limit: Option<i64>,
}

/// How a binding starts one child of the process pool (read from JSON as
/// `{program, args, env}` by a binding that sends it so).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChildCommand {
    pub program: String,
    pub args: Vec<String>,
    /// Variables set for the child on top of the parent's environment.
    pub env: Vec<(String, String)>,
}

/// A pool's name.
pub const POOL_NAMES: &str =
    "must be \"threads\" or \"process\" (\"prefork\" is accepted for \"process\")";
/// A prefetch multiplier's range.
pub const MULTIPLIER: &str =
    "must be a whole number, at least 1 (Celery's 0, no limit, is not supported)";
/// Queues given, none named.
pub const NO_QUEUES: &str = "must name at least one queue";

/// Whether `pool` names the process pool (`"process"`, or Celery's
/// `"prefork"`): the pool a binding hands the command that starts a child.
pub fn is_process_pool(pool: &str) -> bool {
    matches!(pool, "process" | "prefork")
}

/// A per-child limit without the process pool, in `host`'s words for
/// asking for it.
pub fn needs_process(host: Host) -> String {
    format!(
        "applies to the process pool only ({})",
        crate::task::worker::process_pool_option(host)
    )
}

impl WorkerSpec {
    /// The worker's configuration, or why not.
    pub fn build(self, host: Host) -> Result<WorkerConfig, SpecError> {
        let d = WorkerConfig::default();
        let concurrency = match self.concurrency {
            None => d.concurrency,
            Some(c) => match count(host, "concurrency", c, AT_LEAST_ONE)? {
                0 => return Err(SpecError::new(host, "concurrency", AT_LEAST_ONE)),
                n => n,
            },
        };
        let multiplier = match self.prefetch_multiplier {
            None => None,
            Some(m) => match count(host, "prefetch_multiplier", m, MULTIPLIER)? {
                0 => return Err(SpecError::new(host, "prefetch_multiplier", MULTIPLIER)),
                n => Some(n),
            },
        };
        let prefetch = match (self.prefetch, multiplier) {
            (Some(p), _) => Some(count(host, "prefetch", p, WHOLE)?),
            (None, Some(m)) => Some(concurrency.saturating_mul(m)),
            (None, None) => d.prefetch,
        };
        let per_child = |arg: &'static str, x: Option<f64>| -> Result<Option<u64>, SpecError> {
            match x {
                None => Ok(None),
                Some(x) => match count(host, arg, x, AT_LEAST_ONE)? {
                    0 => Err(SpecError::new(host, arg, AT_LEAST_ONE)),
                    n => Ok(Some(n as u64)),
                },
            }
        };
        let max_tasks_per_child = per_child("max_tasks_per_child", self.max_tasks_per_child)?;
        let max_memory_per_child = per_child("max_memory_per_child", self.max_memory_per_child)?;
        let process = match self.pool.as_deref() {
            None | Some("threads") => false,
            Some(p) if is_process_pool(p) => true,
            Some(_) => return Err(SpecError::new(host, "pool", POOL_NAMES)),
        };
        let pool = if process {
            let child = self
                .child
                .ok_or_else(|| SpecError::new(host, "pool", "this host cannot start children"))?;
            Pool::Process(ProcSpec {
                program: child.program,
                args: child.args,
                env: child.env,
                max_tasks_per_child,
                max_memory_per_child,
            })
        } else {
            for (arg, set) in [
                ("max_tasks_per_child", max_tasks_per_child.is_some()),
                ("max_memory_per_child", max_memory_per_child.is_some()),
            ] {
                if set {
                    return Err(SpecError::new(host, arg, needs_process(host)));
                }
            }
            if self.time_limit.is_some() {
                return Err(SpecError::new(
                    host,
                    "time_limit",
                    hard_limit_needs_process(host),
                ));
            }
            Pool::Threads
        };
        for (arg, limit) in [
            ("time_limit", self.time_limit),
            ("soft_time_limit", self.soft_time_limit),
        ] {
            if let Some(t) = limit
                && t <= 0
            {
                return Err(SpecError::new(host, arg, "must be positive"));
            }
        }
        let queues = match self.queues {
            None => d.queues,
            Some(given) => {
                let names: Vec<String> = given
                    .iter()
                    .flat_map(|q| q.split(','))
                    .map(str::trim)
                    .filter(|q| !q.is_empty())
                    .map(String::from)
                    .collect();
                if names.is_empty() {
                    return Err(SpecError::new(host, "queues", NO_QUEUES));
                }
                names
            }
        };
        Ok(WorkerConfig {
            queues,
            concurrency,
            prefetch,
            name: self.name.or(d.name),
            pool,
            time_limit: self.time_limit,
            soft_time_limit: self.soft_time_limit,
        })
    }
}

#[cfg(test)]
#[path = "specs_tests.rs"]
mod tests;
