//! Tracing: what a send and a run tell OpenTelemetry, decided once.
//!
//! The bindings only call their language's OpenTelemetry API (start a span,
//! inject the current context into a dict, extract one, record an
//! exception). Everything that could differ between Python and Node — the
//! span names, their attribute keys and values, which headers carry the
//! context and where a message keeps them — is here, so a trace looks the
//! same whichever language sent or ran the task.
//!
//! The names follow opentelemetry-instrumentation-celery, so a trace can
//! cross between a Celery process instrumented with it and a headway one:
//! a send is a PRODUCER span `apply_async/<task>`, a run a CONSUMER span
//! `run/<task>` whose parent is the context the message carries. That
//! context travels as W3C `traceparent` / `tracestate` entries among the
//! message's carried headers ([`super::message::Carried::headers`]): on
//! Celery's layout those are the protocol-v2 message headers, where the
//! Celery instrumentation injects them and where a Celery worker reads them
//! back (`task.request.traceparent`); on the memory broker and headway's
//! own Redis layout they travel inside the message. A retry keeps them
//! (its run is another child of the same send), and a chain's next link
//! inherits them (the chain stays one trace).
//!
//! Cost: an app traces only when its binding turned tracing on
//! ([`super::App::set_tracing`], done when an OpenTelemetry tracer provider
//! is set up); otherwise a run's context carries no trace part and a send
//! adds nothing to a message.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::body::Context;
use super::message::Message;

/// The W3C trace-context header naming the parent span.
pub const TRACEPARENT: &str = "traceparent";
/// The W3C trace-context header carrying vendor state.
pub const TRACESTATE: &str = "tracestate";
/// The headers a message carries the trace context in, and the only ones
/// taken from what a binding's propagator injected.
pub const HEADERS: [&str; 2] = [TRACEPARENT, TRACESTATE];

/// What the Celery instrumentation calls the operation (`celery.action`).
pub const ACTION: &str = "celery.action";
/// The task's name.
pub const TASK_NAME: &str = "celery.task_name";
/// The run's id (the message id).
pub const MESSAGE_ID: &str = "messaging.message.id";
/// The queue (Celery's routing key).
pub const DESTINATION: &str = "messaging.destination";
/// The run's correlation id, which Celery sets to the task id.
pub const CONVERSATION_ID: &str = "messaging.conversation_id";
/// The worker that ran it.
pub const HOSTNAME: &str = "celery.hostname";
/// Attempts before this one that failed (set only when above zero).
pub const RETRIES: &str = "celery.retries";
/// What the run came to: SUCCESS, RETRY or FAILURE.
pub const STATE: &str = "celery.state";
/// Why a run is retried: the failure's text.
pub const RETRY_REASON: &str = "celery.retry.reason";

/// The operation a span stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A send: OpenTelemetry's `SpanKind.PRODUCER`.
    Producer,
    /// A run: OpenTelemetry's `SpanKind.CONSUMER`.
    Consumer,
}

impl Kind {
    /// The kind's name, as both OpenTelemetry APIs spell the enum member.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Producer => "PRODUCER",
            Kind::Consumer => "CONSUMER",
        }
    }
}

/// A span to start: its name, kind and first attributes.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub name: String,
    pub kind: Kind,
    /// Keys and values (strings or integers), in a stable order.
    pub attributes: Vec<(&'static str, Value)>,
}

/// What a run's span is told when the body is done.
#[derive(Debug, Clone, PartialEq)]
pub struct End {
    /// Attributes to add (the run's state, a retry's reason).
    pub attributes: Vec<(&'static str, Value)>,
    /// Whether the span's status is ERROR, with the exception recorded as
    /// an event: whenever the body raised, a retried attempt included.
    pub error: bool,
}

/// The trace part of a run's [`Context`]: present only when its app traces.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunTrace {
    /// The context the message carried (`traceparent`, `tracestate`), for
    /// the binding's propagator to extract; empty when the sender did not
    /// trace.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub carrier: Map<String, Value>,
}

impl Span {
    /// `[name, kind, {attributes}]`, for a binding that takes JSON.
    pub fn to_json(&self) -> Value {
        Value::Array(vec![
            Value::from(self.name.as_str()),
            Value::from(self.kind.name()),
            object(&self.attributes),
        ])
    }
}

fn object(attrs: &[(&'static str, Value)]) -> Value {
    Value::Object(
        attrs
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect(),
    )
}

/// A traced run's span and both of its possible ends as one JSON value, for
/// a binding that is handed its calls as JSON (Node): `[name, kind,
/// {attributes}, {carrier}, {attributes on success}, {attributes on
/// failure}, reason key | null]` — the reason key names the attribute the
/// failure's text goes in (a retry's), and a failure's status is ERROR.
/// `None` when the run is not traced.
pub fn run_plan(ctx: &Context) -> Option<Value> {
    let t = ctx.trace.as_deref()?;
    let Value::Array(mut out) = run_span(ctx).to_json() else {
        return None;
    };
    out.push(Value::Object(t.carrier.clone()));
    out.push(object(&run_end(ctx, None, "").attributes));
    // A plain failure's end; a host whose body raised an ask, or whose task
    // filters what it retries, asks the core with the failure instead.
    let (attrs, reason) =
        without_reason(run_end(ctx, Some(&super::state::Failure::new("", "")), ""));
    out.push(attrs);
    out.push(reason.map_or(Value::Null, Value::from));
    Some(Value::Array(out))
}

/// A failed end for a host that fills in the failure's text itself: its
/// attributes but the reason, and the key the text goes in (a retry's
/// reason) or `None`. One split, so a run's plan and a failure asked about
/// later ([`after_failure`]) name the same attributes.
fn without_reason(end: End) -> (Value, Option<&'static str>) {
    let reason = end
        .attributes
        .iter()
        .any(|(k, _)| *k == RETRY_REASON)
        .then_some(RETRY_REASON);
    let attrs: Vec<_> = end
        .attributes
        .into_iter()
        .filter(|(k, _)| *k != RETRY_REASON)
        .collect();
    (object(&attrs), reason)
}

/// What a run that raised `raised` comes to, for a host that keeps only the
/// attempts before it and the task's rule (Node's call array, which hands
/// them back with a failure when a listener or a span asks): `[state,
/// {span attributes}, reason key | null]`, the state
/// [`super::body::state_after`]'s and the rest as [`run_plan`]'s failure
/// end, but for this failure (an ask, a filter on what is retried).
pub fn after_failure(
    retries: u32,
    rule: &super::body::RetryRule,
    raised: &super::state::Failure,
) -> Value {
    let state = super::body::state_after(retries, rule, Some(raised));
    let (attrs, reason) = without_reason(end_of(state, ""));
    Value::Array(vec![
        Value::from(state),
        attrs,
        reason.map_or(Value::Null, Value::from),
    ])
}

/// The span of a send of `task` as run `id` to `queue`.
pub fn send_span(task: &str, id: &str, queue: &str) -> Span {
    Span {
        name: format!("apply_async/{task}"),
        kind: Kind::Producer,
        attributes: vec![
            (ACTION, Value::from("apply_async")),
            (MESSAGE_ID, Value::from(id)),
            (TASK_NAME, Value::from(task)),
            (DESTINATION, Value::from(queue)),
        ],
    }
}

/// The span of the run `ctx` describes.
pub fn run_span(ctx: &Context) -> Span {
    let mut attributes = vec![
        (ACTION, Value::from("run")),
        (MESSAGE_ID, Value::from(ctx.id.as_str())),
        (CONVERSATION_ID, Value::from(ctx.id.as_str())),
        (TASK_NAME, Value::from(ctx.name.as_str())),
        (DESTINATION, Value::from(ctx.queue.as_str())),
    ];
    if !ctx.worker.is_empty() {
        attributes.push((HOSTNAME, Value::from(ctx.worker.as_str())));
    }
    if ctx.retries > 0 {
        attributes.push((RETRIES, Value::from(ctx.retries)));
    }
    Span {
        name: format!("run/{}", ctx.name),
        kind: Kind::Consumer,
        attributes,
    }
}

/// What a run's span is told when its body returned (`raised` None) or
/// raised `raised` (`reason` its text): the state the worker will record.
pub fn run_end(ctx: &Context, raised: Option<&super::state::Failure>, reason: &str) -> End {
    end_of(ctx.state_after(raised), reason)
}

/// What a run's span is told once its state is known (`state`, a Celery
/// state name; `reason` the failure's text).
pub fn end_of(state: &'static str, reason: &str) -> End {
    let mut attributes = vec![(STATE, Value::from(state))];
    if state == super::state::State::Retry.name() {
        attributes.push((RETRY_REASON, Value::from(reason)));
    }
    End {
        attributes,
        error: state != super::state::State::Success.name(),
    }
}

/// Takes the trace-context entries of what a propagator injected (other
/// keys, and values that are not strings, are left out); `None` when none
/// is left, so an untraced send adds nothing to its message.
pub fn headers_of(injected: Map<String, Value>) -> Option<Map<String, Value>> {
    let kept: Map<String, Value> = injected
        .into_iter()
        .filter(|(k, v)| HEADERS.contains(&k.as_str()) && v.is_string())
        .collect();
    (!kept.is_empty()).then_some(kept)
}

/// Puts trace headers on a message (replacing any it carried).
pub fn carry(m: &mut Message, headers: &Map<String, Value>) {
    let c = m.carried_mut();
    for (k, v) in headers {
        c.headers.insert(k.clone(), v.clone());
    }
}

/// The trace headers a message carries (empty when none).
pub fn carried(m: &Message) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some(c) = m.carried.as_deref() {
        for k in HEADERS {
            if let Some(v @ Value::String(_)) = c.headers.get(k) {
                out.insert(k.to_string(), v.clone());
            }
        }
    }
    out
}

/// Copies the trace headers of `from` onto `to` (a chain's next link).
pub fn inherit(from: &Message, to: &mut Message) {
    let h = carried(from);
    if !h.is_empty() {
        carry(to, &h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx(retries: u32, last: bool) -> Context {
        Context {
            id: "i".into(),
            name: "tasks.add".into(),
            queue: "q".into(),
            retries,
            attempt: retries + 1,
            last,
            now: 0,
            kwargs: Map::new(),
            root_id: None,
            parent_id: None,
            soft_time_limit: None,
            time_limit: None,
            worker: "w@h".into(),
            trace: None,
            // `last` as the rule: one attempt left unless it is the last.
            rule: crate::task::body::RetryRule {
                budget: if last { retries } else { retries + 1 },
                ..Default::default()
            },
            recorder: Default::default(),
            extras: None,
        }
    }

    #[test]
    fn names_follow_the_celery_instrumentation() {
        let s = send_span("tasks.add", "i", "q");
        assert_eq!(s.name, "apply_async/tasks.add");
        assert_eq!(s.kind.name(), "PRODUCER");
        assert_eq!(s.attributes[0], (ACTION, json!("apply_async")));
        let r = run_span(&ctx(0, false));
        assert_eq!(r.name, "run/tasks.add");
        assert_eq!(r.kind, Kind::Consumer);
        assert!(!r.attributes.iter().any(|(k, _)| *k == RETRIES));
        let r = run_span(&ctx(2, false));
        assert!(r.attributes.contains(&(RETRIES, json!(2))));
        assert!(r.attributes.contains(&(HOSTNAME, json!("w@h"))));
    }

    #[test]
    fn the_end_says_the_state_and_a_retrys_reason() {
        let boom = crate::task::state::Failure::new("ValueError", "boom");
        let e = run_end(&ctx(0, false), Some(&boom), "boom");
        assert!(e.error);
        assert_eq!(
            e.attributes,
            vec![(STATE, json!("RETRY")), (RETRY_REASON, json!("boom"))]
        );
        let e = run_end(&ctx(0, true), Some(&boom), "boom");
        assert_eq!(e.attributes, vec![(STATE, json!("FAILURE"))]);
        let e = run_end(&ctx(0, true), None, "");
        assert!(!e.error);
        assert_eq!(e.attributes, vec![(STATE, json!("SUCCESS"))]);
    }

    #[test]
    fn a_run_plan_holds_both_ends() {
        assert_eq!(run_plan(&ctx(0, false)), None);
        let mut c = ctx(0, false);
        c.trace = Some(Box::default());
        let p = run_plan(&c).unwrap();
        assert_eq!(p[0], "run/tasks.add");
        assert_eq!(p[1], "CONSUMER");
        assert_eq!(p[4], json!({"celery.state": "SUCCESS"}));
        assert_eq!(p[5], json!({"celery.state": "RETRY"}));
        assert_eq!(p[6], RETRY_REASON);
        // The last attempt (no budget left): a failure is for good.
        c.rule.budget = 0;
        let p = run_plan(&c).unwrap();
        assert_eq!(p[5], json!({"celery.state": "FAILURE"}));
        assert_eq!(p[6], Value::Null);
    }

    #[test]
    fn after_a_failure_the_state_and_where_its_text_goes() {
        let c = ctx(0, false);
        let boom = crate::task::state::Failure::new("ValueError", "boom");
        assert_eq!(
            after_failure(0, &c.rule, &boom),
            json!(["RETRY", {"celery.state": "RETRY"}, RETRY_REASON])
        );
        // No attempts left: a failure for good, no reason to fill in.
        assert_eq!(
            after_failure(c.rule.budget, &c.rule, &boom),
            json!(["FAILURE", {"celery.state": "FAILURE"}, null])
        );
        // An ignore the body asked for.
        let ignored = crate::task::ask::Ask::failure(boom, &json!({"ask": "ignore"}));
        assert_eq!(after_failure(0, &c.rule, &ignored)[0], "IGNORED");
    }

    #[test]
    fn only_trace_context_entries_are_carried() {
        let got = headers_of(
            json!({"traceparent": "00-a-b-01", "baggage": "k=v", "tracestate": 3})
                .as_object()
                .unwrap()
                .clone(),
        )
        .unwrap();
        assert_eq!(got.len(), 1);
        assert!(headers_of(Map::new()).is_none());
        let mut m = Message::new("i".into(), "t".into(), vec![], Map::new(), "q".into());
        assert!(carried(&m).is_empty());
        carry(&mut m, &got);
        let mut n = Message::new("j".into(), "t".into(), vec![], Map::new(), "q".into());
        inherit(&m, &mut n);
        assert_eq!(carried(&n)["traceparent"], "00-a-b-01");
        let back = Message::from_json(&n.to_json()).unwrap();
        assert_eq!(carried(&back), carried(&n));
    }
}
