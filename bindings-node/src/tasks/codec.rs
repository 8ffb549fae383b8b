//! Requests from the JS in `lib/` (JSON text) into the core's values.
//!
//! The JS in `lib/` has already checked types and turned `Date`s into epoch ms;
//! what is left is to read the fields and let the core refuse what it must.
//! A request that does not parse means the JS in `lib/` and this file disagree —
//! a bug, reported as such rather than guessed round.

use headway_core::task::specs::When;
use headway_core::task::{
    BackoffSpec, Canvas, ChildCommand, Cron, Every, Host, Options, Policy, PolicySpec, RateSpec,
    RetryBackoff, Rhythm, RhythmError, SendSpec, Sig, SpecError, WorkerConfig, WorkerSpec,
};
use napi_derive::napi;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::{Refusal, ms};

impl From<SpecError> for Refusal {
    fn from(e: SpecError) -> Refusal {
        Refusal::invalid(e.to_string())
    }
}

/// A request that does not parse.
pub(crate) fn garbled(what: &str, e: impl std::fmt::Display) -> Refusal {
    Refusal::invalid(format!(
        "headway: a malformed {what} request reached the native side ({e}); this is a bug"
    ))
}

/// Parses `text` as `T`.
pub(crate) fn parse<'a, T: Deserialize<'a>>(what: &str, text: &'a str) -> Result<T, Refusal> {
    serde_json::from_str(text).map_err(|e| garbled(what, e))
}

/// A JS number as `lib/` writes it into a request: JSON has no ±Infinity, so
/// those travel as the strings `"Infinity"` / `"-Infinity"` and reach the
/// core as the numbers they are, for it to take or refuse (`lib/` refuses
/// NaN itself).
#[derive(Debug, Clone, Copy)]
struct Num(f64);

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Num, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum N {
            F(f64),
            S(String),
        }
        match N::deserialize(d)? {
            N::F(x) => Ok(Num(x)),
            N::S(s) if s == "Infinity" => Ok(Num(f64::INFINITY)),
            N::S(s) if s == "-Infinity" => Ok(Num(f64::NEG_INFINITY)),
            N::S(s) => Err(serde::de::Error::custom(format!("{s:?} is not a number"))),
        }
    }
}

/// A [`Num`] given, as the number it is.
fn num(n: Option<Num>) -> Option<f64> {
    n.map(|Num(x)| x)
}

/// Per-send options as the JS in `lib/` spells them (instants in epoch ms).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OptsIn {
    eta: Option<f64>,
    countdown: Option<f64>,
    expires: Option<f64>,
    queue: Option<String>,
    priority: Option<f64>,
    id: Option<String>,
    #[serde(rename = "concurrencyKey")]
    concurrency_key: Option<String>,
    #[serde(rename = "dedupeKey")]
    dedupe_key: Option<String>,
    #[serde(rename = "dedupeTtl")]
    dedupe_ttl: Option<f64>,
}

/// The core's `Options` (every range is the core's, in `specs`).
pub(crate) fn options(o: Option<OptsIn>) -> Result<Options, Refusal> {
    let Some(o) = o else {
        return Ok(Options::default());
    };
    let spec = SendSpec {
        eta: o.eta.map(|t| When::At(ms(t))),
        countdown: o.countdown.map(ms),
        expires: o.expires.map(|t| When::At(ms(t))),
        queue: o.queue,
        priority: o.priority,
        id: o.id,
        concurrency_key: o.concurrency_key,
        dedupe_key: o.dedupe_key,
        dedupe_ttl: o.dedupe_ttl.map(ms),
    };
    // Node's instants are absolute already: the clock is never read.
    Ok(spec.options(Host::Node, || 0)?)
}

/// A send: `[name, args, kwargs | null, options | null, trace?]`, `trace`
/// what OpenTelemetry's propagator injected inside the send's span.
#[derive(Debug, Deserialize)]
pub(crate) struct SendIn(
    pub String,
    pub Vec<Value>,
    pub Option<Map<String, Value>>,
    pub Option<OptsIn>,
    #[serde(default)] pub Option<Map<String, Value>>,
);

#[derive(Debug, Deserialize)]
pub(crate) struct BackoffIn {
    fixed: Option<f64>,
    base: Option<f64>,
    cap: Option<f64>,
    jitter: Option<bool>,
}

impl BackoffIn {
    fn spec(self) -> BackoffSpec {
        match self.fixed {
            Some(d) => BackoffSpec::Fixed { delay: ms(d) },
            None => BackoffSpec::Exponential {
                base: self.base.map(ms),
                cap: self.cap.map(ms),
                jitter: self.jitter,
            },
        }
    }
}

/// `{fixed}` or `{base, cap, jitter}`; what is omitted is the core's.
pub(crate) fn backoff_text(text: &str) -> Result<RetryBackoff, Refusal> {
    let b: BackoffIn = parse("backoff", text)?;
    Ok(b.spec().build(Host::Node)?)
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RateIn {
    Text(String),
    Obj { count: f64, per: f64 },
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PolicyIn {
    queue: Option<String>,
    retries: Option<Num>,
    backoff: Option<BackoffIn>,
    timeout: Option<Num>,
    acks_late: Option<bool>,
    ignore_result: Option<bool>,
    rate: Option<RateIn>,
    time_limit: Option<Num>,
    soft_time_limit: Option<Num>,
    reject_on_worker_lost: Option<bool>,
    retry_for: Option<Vec<String>>,
    dont_retry_for: Option<Vec<String>>,
    rate_scope: Option<String>,
    concurrency_limit: Option<Num>,
}

/// A task's policy: what is omitted is the core's default.
pub(crate) fn policy(text: &str) -> Result<Policy, Refusal> {
    let p: PolicyIn = parse("policy", text)?;
    let spec = PolicySpec {
        queue: p.queue,
        retries: num(p.retries),
        backoff: p.backoff.map(BackoffIn::spec),
        timeout: num(p.timeout).map(ms),
        acks_late: p.acks_late,
        ignore_result: p.ignore_result,
        rate: p.rate.map(|r| match r {
            RateIn::Text(t) => RateSpec::Text(t),
            RateIn::Obj { count, per } => RateSpec::Parts {
                count: Some(count),
                per: Some(ms(per)),
            },
        }),
        time_limit: num(p.time_limit).map(ms),
        soft_time_limit: num(p.soft_time_limit).map(ms),
        reject_on_worker_lost: p.reject_on_worker_lost,
        retry_for: p.retry_for,
        dont_retry_for: p.dont_retry_for,
        rate_scope: p.rate_scope,
        concurrency_limit: num(p.concurrency_limit),
    };
    Ok(spec.build(Host::Node)?)
}

/// A worker's options as `lib/tasks.js` spells them (spans in ms).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct WorkerIn {
    queues: Option<Vec<String>>,
    concurrency: Option<Num>,
    prefetch: Option<Num>,
    prefetch_multiplier: Option<Num>,
    name: Option<String>,
    pool: Option<String>,
    /// How `lib/child.js` is started for the process pool: the program,
    /// its arguments and variables set on top of the parent's environment.
    child: Option<ChildCommand>,
    max_tasks_per_child: Option<Num>,
    max_memory_per_child: Option<Num>,
    time_limit: Option<Num>,
    soft_time_limit: Option<Num>,
}

/// Whether a worker on `pool` runs its bodies in children, and so needs the
/// command that starts one (the core's `specs::is_process_pool`).
#[napi(js_name = "_processPool")]
pub fn process_pool(pool: String) -> bool {
    headway_core::task::specs::is_process_pool(&pool)
}

/// A worker's configuration: what is omitted is the core's default, and
/// every check (the pool's name, a hard limit without the process pool) is
/// the core's.
pub(crate) fn worker(text: &str) -> Result<WorkerConfig, Refusal> {
    let w: WorkerIn = parse("worker", text)?;
    let spec = WorkerSpec {
        queues: w.queues,
        concurrency: num(w.concurrency),
        prefetch: num(w.prefetch),
        prefetch_multiplier: num(w.prefetch_multiplier),
        name: w.name,
        pool: w.pool,
        child: w.child,
        max_tasks_per_child: num(w.max_tasks_per_child),
        max_memory_per_child: num(w.max_memory_per_child),
        time_limit: num(w.time_limit).map(ms),
        soft_time_limit: num(w.soft_time_limit).map(ms),
    };
    Ok(spec.build(Host::Node)?)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RhythmIn {
    every: Option<f64>,
    anchor: Option<f64>,
    cron: Option<String>,
    tz: Option<String>,
    at: Option<f64>,
}

fn rhythm_err(e: RhythmError) -> Refusal {
    Refusal::invalid(e.to_string())
}

/// `{every, anchor}`, `{cron, tz}` or `{at}`.
pub(crate) fn rhythm(text: &str) -> Result<Rhythm, Refusal> {
    let r: RhythmIn = parse("rhythm", text)?;
    if let Some(i) = r.every {
        let e = match r.anchor {
            Some(a) => Every::anchored(ms(i), ms(a)),
            None => Every::new(ms(i)),
        }
        .map_err(rhythm_err)?;
        return Ok(Rhythm::Every(e));
    }
    if let Some(expr) = r.cron {
        let cron = Cron::in_zone(&expr, r.tz.as_deref()).map_err(rhythm_err)?;
        return Ok(Rhythm::Cron(cron));
    }
    if let Some(a) = r.at {
        return Ok(Rhythm::At(ms(a)));
    }
    Err(garbled("rhythm", "no kind"))
}

/// A canvas tree: `["sig", name, args, kwargs | null, immutable, options |
/// null]`, `["chain", [...]]`, `["group", [...]]`, `["chord", [...],
/// callback]`.
pub(crate) fn canvas(v: Value) -> Result<Canvas, Refusal> {
    type SigIn = (
        String,
        String,
        Vec<Value>,
        Option<Map<String, Value>>,
        bool,
        Option<OptsIn>,
    );
    let bad = |e: serde_json::Error| garbled("canvas", e);
    let kind = v
        .get(0)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let list = |v: Value| -> Result<Vec<Canvas>, Refusal> {
        let items: Vec<Value> = serde_json::from_value(v).map_err(bad)?;
        items.into_iter().map(canvas).collect()
    };
    match kind.as_str() {
        "sig" => {
            let (_, name, args, kwargs, immutable, opts): SigIn =
                serde_json::from_value(v).map_err(bad)?;
            let sig = Sig::new(name, args)
                .with_kwargs(kwargs.unwrap_or_default())
                .with_options(options(opts)?);
            Ok(Canvas::Sig(if immutable { sig.immutable() } else { sig }))
        }
        "chain" | "group" => {
            let (_, parts): (String, Value) = serde_json::from_value(v).map_err(bad)?;
            let parts = list(parts)?;
            Ok(if kind == "chain" {
                Canvas::Chain(parts)
            } else {
                Canvas::Group(parts)
            })
        }
        "chord" => {
            let (_, parts, callback): (String, Value, Value) =
                serde_json::from_value(v).map_err(bad)?;
            Ok(Canvas::Chord(list(parts)?, Box::new(canvas(callback)?)))
        }
        other => Err(garbled("canvas", format!("unknown node {other:?}"))),
    }
}
