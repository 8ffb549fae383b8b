//! Requests from the JS in `lib/` (JSON text) into the core's values.
//!
//! The JS in `lib/` has already checked types and turned `Date`s into epoch ms;
//! the requests are the core's spec types as `specs::json` reads them (the
//! field names live there once), and every refusal is the core's.
//! A request that does not parse means the JS in `lib/` and this file disagree —
//! a bug, reported as such rather than guessed round.

use headway_core::broker::celery::js as typed;
use headway_core::task::specs::json::{CanvasSpec, RhythmSpec};
use headway_core::task::{
    BackoffSpec, Canvas, Host, Options, Policy, PolicySpec, RetryBackoff, Rhythm, SendSpec,
    SpecError, WorkerConfig, WorkerSpec,
};
use napi_derive::napi;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::Refusal;

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

/// Parses `text` (values from `lib/json.js`) as `T`, its markers (a `Date`,
/// bytes) made the core's typed values first.
pub(crate) fn parse_typed<T: DeserializeOwned>(what: &str, text: &str) -> Result<T, Refusal> {
    let mut v: Value = parse(what, text)?;
    if typed::marked(text) {
        typed::from_js(&mut v);
    }
    T::deserialize(v).map_err(|e| garbled(what, e))
}

/// Per-send options (the core's `SendSpec`, read as `specs::json` says)
/// as the core's `Options` (every range is the core's).
pub(crate) fn options(o: Option<SendSpec>) -> Result<Options, Refusal> {
    // Node's instants are absolute already: the clock is never read.
    Ok(o.unwrap_or_default().options(Host::Node, || 0)?)
}

/// A send: `[name, args, kwargs | null, options | null, trace?]`, `trace`
/// what OpenTelemetry's propagator injected inside the send's span.
#[derive(Debug, Deserialize)]
pub(crate) struct SendIn(
    pub String,
    pub Vec<Value>,
    pub Option<Map<String, Value>>,
    pub Option<SendSpec>,
    #[serde(default)] pub Option<Map<String, Value>>,
);

/// `{fixed}` or `{base, cap, jitter}`; what is omitted is the core's.
pub(crate) fn backoff_text(text: &str) -> Result<RetryBackoff, Refusal> {
    Ok(parse::<BackoffSpec>("backoff", text)?.build(Host::Node)?)
}

/// A task's policy: what is omitted is the core's default.
pub(crate) fn policy(text: &str) -> Result<Policy, Refusal> {
    Ok(parse::<PolicySpec>("policy", text)?.build(Host::Node)?)
}

/// Whether a worker on `pool` runs its bodies in children, and so needs the
/// command that starts one (the core's `specs::is_process_pool`).
#[napi(js_name = "_processPool")]
pub fn process_pool(pool: String) -> bool {
    headway_core::task::specs::is_process_pool(&pool)
}

/// The parent's Node flags (`process.execArgv`) a child of the process
/// pool repeats (the core's `procs::node_flags`).
#[napi(js_name = "_childFlags")]
pub fn child_flags(exec_argv: Vec<String>) -> Vec<String> {
    headway_core::task::procs::node_flags(&exec_argv)
}

/// A worker's configuration: what is omitted is the core's default, and
/// every check (the pool's name, a hard limit without the process pool) is
/// the core's.
pub(crate) fn worker(text: &str) -> Result<WorkerConfig, Refusal> {
    Ok(parse::<WorkerSpec>("worker", text)?.build(Host::Node)?)
}

/// `{every, anchor}`, `{cron, tz}` or `{at}`.
pub(crate) fn rhythm(text: &str) -> Result<Rhythm, Refusal> {
    let r: RhythmSpec = parse("rhythm", text)?;
    r.build().map_err(|e| Refusal::invalid(e.to_string()))
}

/// A canvas tree (the core's `CanvasSpec`), its options checked by the core.
pub(crate) fn canvas(text: &str) -> Result<Canvas, Refusal> {
    Ok(parse_typed::<CanvasSpec>("canvas", text)?.build(Host::Node)?)
}
