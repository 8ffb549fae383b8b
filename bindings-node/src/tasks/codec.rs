//! Requests from `tasks.js` (JSON text) into the core's values.
//!
//! `tasks.js` has already checked types and turned `Date`s into epoch ms;
//! what is left is to read the fields and let the core refuse what it must.
//! A request that does not parse means `tasks.js` and this file disagree —
//! a bug, reported as such rather than guessed round.

use headway_core::task::{
    Backoff, Canvas, Cron, Every, Options, Policy, Rate, Rhythm, RhythmError, Sig,
};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{Refusal, ms};

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

/// Per-send options as `tasks.js` spells them (instants in epoch ms).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OptsIn {
    eta: Option<f64>,
    countdown: Option<f64>,
    expires: Option<f64>,
    queue: Option<String>,
    priority: Option<f64>,
    id: Option<String>,
}

/// The core's `Options`. Ranges (priority 0 to 9, a non-empty queue) are the
/// core's checks, made when it sends.
pub(crate) fn options(o: Option<OptsIn>) -> Result<Options, Refusal> {
    let Some(o) = o else {
        return Ok(Options::default());
    };
    let priority = match o.priority {
        None => None,
        Some(p) => Some(
            u8::try_from(ms(p))
                .ok()
                .filter(|_| p.fract() == 0.0)
                .ok_or_else(|| Refusal::invalid("invalid `priority`: must be 0 to 9"))?,
        ),
    };
    Ok(Options {
        queue: o.queue,
        eta: o.eta.map(ms),
        countdown: o.countdown.map(ms),
        expires: o.expires.map(ms),
        priority,
        id: o.id,
    })
}

/// A send: `[name, args, kwargs | null, options | null]`.
#[derive(Debug, Deserialize)]
pub(crate) struct SendIn(
    pub String,
    pub Vec<Value>,
    pub Option<Map<String, Value>>,
    pub Option<OptsIn>,
);

#[derive(Debug, Deserialize)]
pub(crate) struct BackoffIn {
    fixed: Option<f64>,
    base: Option<f64>,
    cap: Option<f64>,
    jitter: Option<bool>,
}

/// `{fixed}` or `{base, cap, jitter}`; what is omitted is the core's
/// default (`Backoff::default()`: 1 s doubling to 10 min, jittered).
pub(crate) fn backoff(b: BackoffIn) -> Result<Backoff, Refusal> {
    let bad = |e: headway_core::task::PolicyError| Refusal::invalid(e.to_string());
    if let Some(d) = b.fixed {
        return Backoff::fixed(ms(d)).map_err(bad);
    }
    let Backoff::Exponential {
        base: b0,
        cap: c0,
        jitter: j0,
    } = Backoff::default()
    else {
        unreachable!("the default backoff is exponential")
    };
    Backoff::exponential(
        b.base.map_or(b0, ms),
        b.cap.map_or(c0, ms),
        b.jitter.unwrap_or(j0),
    )
    .map_err(bad)
}

pub(crate) fn backoff_text(text: &str) -> Result<Backoff, Refusal> {
    backoff(parse("backoff", text)?)
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
    retries: Option<f64>,
    backoff: Option<BackoffIn>,
    timeout: Option<f64>,
    acks_late: Option<bool>,
    ignore_result: Option<bool>,
    rate: Option<RateIn>,
}

/// A task's policy: what is omitted is `Policy::default()`'s.
pub(crate) fn policy(text: &str) -> Result<Policy, Refusal> {
    let p: PolicyIn = parse("policy", text)?;
    let d = Policy::default();
    let retries = match p.retries {
        None => d.retries,
        Some(r) => u32::try_from(ms(r))
            .ok()
            .filter(|_| r.fract() == 0.0)
            .ok_or_else(|| Refusal::invalid("invalid `retries`: must be 0 or more"))?,
    };
    let rate = match p.rate {
        None => None,
        Some(RateIn::Text(t)) => {
            Some(Rate::parse(&t).map_err(|e| Refusal::invalid(e.to_string()))?)
        }
        Some(RateIn::Obj { count, per }) => {
            let count = u32::try_from(ms(count))
                .ok()
                .filter(|_| count.fract() == 0.0)
                .ok_or_else(|| Refusal::invalid("invalid `rate`: `count` must be 0 or more"))?;
            Some(Rate::new(count, ms(per)).map_err(|e| Refusal::invalid(e.to_string()))?)
        }
    };
    let policy = Policy {
        queue: p.queue.unwrap_or(d.queue),
        retries,
        backoff: match p.backoff {
            None => d.backoff,
            Some(b) => backoff(b)?,
        },
        timeout: p.timeout.map(ms).or(d.timeout),
        acks_late: p.acks_late.unwrap_or(d.acks_late),
        ignore_result: p.ignore_result.unwrap_or(d.ignore_result),
        rate: rate.or(d.rate),
    };
    policy
        .check()
        .map_err(|e| Refusal::invalid(e.to_string()))?;
    Ok(policy)
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
        // "UTC" when omitted, as Python's `Cron("*/5 * * * *")` does.
        let tz = r.tz.as_deref().unwrap_or("UTC");
        return Ok(Rhythm::Cron(Cron::new(&expr, tz).map_err(rhythm_err)?));
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
    let Value::Array(mut a) = v else {
        return Err(garbled("canvas", "a node is not an array"));
    };
    let kind = a
        .first()
        .and_then(Value::as_str)
        .ok_or_else(|| garbled("canvas", "a node has no kind"))?
        .to_string();
    let mut take = |i: usize| -> Value { a.get_mut(i).map(Value::take).unwrap_or(Value::Null) };
    let list = |v: Value| -> Result<Vec<Canvas>, Refusal> {
        match v {
            Value::Array(items) => items.into_iter().map(canvas).collect(),
            _ => Err(garbled("canvas", "a list is not an array")),
        }
    };
    match kind.as_str() {
        "sig" => {
            let Value::String(name) = take(1) else {
                return Err(garbled("canvas", "a signature has no name"));
            };
            let args = match take(2) {
                Value::Array(a) => a,
                _ => return Err(garbled("canvas", "args is not an array")),
            };
            let kwargs = match take(3) {
                Value::Object(o) => o,
                Value::Null => Map::new(),
                _ => return Err(garbled("canvas", "kwargs is not an object")),
            };
            let immutable = take(4).as_bool().unwrap_or(false);
            let opts: Option<OptsIn> =
                serde_json::from_value(take(5)).map_err(|e| garbled("canvas", e))?;
            let mut sig = Sig::new(name, args)
                .with_kwargs(kwargs)
                .with_options(options(opts)?);
            if immutable {
                sig = sig.immutable();
            }
            Ok(Canvas::Sig(sig))
        }
        "chain" => Ok(Canvas::Chain(list(take(1))?)),
        "group" => Ok(Canvas::Group(list(take(1))?)),
        "chord" => {
            let parts = list(take(1))?;
            let cb = canvas(take(2))?;
            Ok(Canvas::Chord(parts, Box::new(cb)))
        }
        other => Err(garbled("canvas", format!("unknown node {other:?}"))),
    }
}
