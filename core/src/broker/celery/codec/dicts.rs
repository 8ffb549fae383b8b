//! Canvases as Celery signature dicts, both ways.
//!
//! Two things travel inside a message as a whole canvas rather than as the
//! message model's single runs: a `link` / `link_error` callback
//! (`apply_async(link=…)`), and a group or chord that follows a link of a
//! chain (`a | group(b, c) | d`, which Celery runs as `a` then the chord
//! `group(b, c) → d` given `a`'s result). Both are written as the dict
//! Celery's own `Signature` serialises to — `task`, `args`, `kwargs`,
//! `options`, `subtask_type`, `immutable`, a group's members in
//! `kwargs.tasks`, a chord's in `kwargs.header` / `kwargs.body` — so a
//! Celery worker reading a headway message runs them, headway's worker runs
//! what a Celery client wrote, and the own layouts carry the same value.
//!
//! A nested group or chord in a chain's tail is a [`Sig`] whose task is
//! `celery.group` / `celery.chord` and whose `extra` holds the
//! `subtask_type`; [`nested`] and [`canvas_of_nested`] convert. Names of
//! queues are kept as written (as for links): a dict names a queue only when
//! its signature did.

use serde_json::{Map, Value, json};

use super::{CodecError, Sender, bad};
use crate::broker::celery::typed::iso;
use crate::task::canvas::Canvas;
use crate::task::message::{Options, Sig};

/// The `extra` key that marks a [`Sig`] standing for a nested canvas.
pub const SUBTASK_TYPE: &str = "subtask_type";

fn plain() -> Sender {
    Sender {
        routes: Default::default(),
        origin: String::new(),
        reply_to: String::new(),
        default_queue: String::new(),
    }
}

fn options_dict(id: Option<&String>, o: &Options, extra: &Map<String, Value>) -> Value {
    let mut m = Map::new();
    if let Some(id) = id.or(o.id.as_ref()) {
        m.insert("task_id".into(), json!(id));
    }
    if let Some(q) = &o.queue {
        m.insert("queue".into(), json!(q));
    }
    if let Some(p) = o.priority {
        m.insert("priority".into(), json!(p));
    }
    if let Some(eta) = o.eta {
        m.insert("eta".into(), json!(iso(eta)));
    } else if let Some(c) = o.countdown {
        m.insert("countdown".into(), json!(c as f64 / 1000.0));
    }
    if let Some(e) = o.expires {
        m.insert("expires".into(), json!(iso(e)));
    }
    if let Some(k) = &o.concurrency_key {
        m.insert(crate::task::message::CONCURRENCY_KEY.into(), json!(k));
    }
    for (k, v) in extra {
        if k != SUBTASK_TYPE {
            m.insert(k.clone(), v.clone());
        }
    }
    Value::Object(m)
}

fn composite(task: &str, kind: &str, kwargs: Value) -> Value {
    json!({
        "task": task,
        "args": [],
        "kwargs": kwargs,
        "options": {},
        "subtask_type": kind,
        "immutable": false,
    })
}

/// The Celery signature dict of `c`.
pub fn sig_dict(c: &Canvas) -> Value {
    match c {
        Canvas::Sig(s) => json!({
            "task": s.task,
            "args": s.args,
            "kwargs": s.kwargs,
            "options": options_dict(s.id.as_ref(), &s.options, &s.extra),
            "subtask_type": s.extra.get(SUBTASK_TYPE).cloned().unwrap_or(Value::Null),
            "immutable": s.immutable,
        }),
        Canvas::Chain(links) => composite(
            "celery.chain",
            "chain",
            json!({ "tasks": links.iter().map(sig_dict).collect::<Vec<_>>() }),
        ),
        Canvas::Group(parts) => group_dict(parts),
        Canvas::Chord(parts, cb) => composite(
            "celery.chord",
            "chord",
            json!({ "header": group_dict(parts), "body": sig_dict(cb), "kwargs": {} }),
        ),
    }
}

fn group_dict(parts: &[Canvas]) -> Value {
    composite(
        "celery.group",
        "group",
        json!({ "tasks": parts.iter().map(sig_dict).collect::<Vec<_>>() }),
    )
}

/// The canvas a Celery signature dict stands for: a plain signature, or a
/// `chain`, `group` or `chord` of them, nested as deep as they come.
pub fn canvas_of(v: &Value) -> Result<Canvas, CodecError> {
    let kind = v.get(SUBTASK_TYPE).and_then(Value::as_str);
    let list = |outer: &Value, what: &str| -> Result<Vec<Canvas>, CodecError> {
        outer
            .get("kwargs")
            .and_then(|k| k.get("tasks"))
            .and_then(Value::as_array)
            .ok_or_else(|| bad(format!("a {what} signature has no kwargs.tasks list")))?
            .iter()
            .map(canvas_of)
            .collect()
    };
    match kind {
        None => Ok(Canvas::Sig(plain().decode_sig(v)?)),
        Some("chain") => {
            let links = list(v, "chain")?;
            if links.is_empty() {
                return Err(bad("a chain signature has no tasks"));
            }
            Ok(Canvas::Chain(links))
        }
        Some("group") => Ok(Canvas::Group(list(v, "group")?)),
        Some("chord") => {
            let kw = v
                .get("kwargs")
                .ok_or_else(|| bad("a chord signature has no kwargs"))?;
            let header = kw
                .get("header")
                .ok_or_else(|| bad("a chord signature has no header"))?;
            let parts = match header.get(SUBTASK_TYPE).and_then(Value::as_str) {
                Some("group") => list(header, "group")?,
                _ => match header {
                    Value::Array(a) => a.iter().map(canvas_of).collect::<Result<_, _>>()?,
                    one => vec![canvas_of(one)?],
                },
            };
            let body = kw
                .get("body")
                .filter(|b| !b.is_null())
                .ok_or_else(|| bad("a chord signature has no body"))?;
            Ok(Canvas::Chord(parts, Box::new(canvas_of(body)?)))
        }
        Some(other) => Err(bad(format!("a {other:?} signature is not supported"))),
    }
}

/// The chain link standing for the group or chord `c`: a signature of
/// `celery.group` / `celery.chord` whose kwargs are Celery's. Its ids must
/// already be fixed (the caller waits on them).
pub fn nested(c: &Canvas) -> Sig {
    let d = sig_dict(c);
    let kind = d[SUBTASK_TYPE].clone();
    let mut s = Sig::new(d["task"].as_str().unwrap_or_default(), Vec::new());
    if let Value::Object(kw) = &d["kwargs"] {
        s.kwargs = kw.clone();
    }
    s.extra.insert(SUBTASK_TYPE.into(), kind);
    s
}

/// Whether chain link `s` is a nested group or chord ([`nested`]).
pub fn is_nested(s: &Sig) -> bool {
    matches!(
        s.extra.get(SUBTASK_TYPE).and_then(Value::as_str),
        Some("group" | "chord")
    )
}

/// The canvas a nested chain link ([`nested`], or one a Celery client
/// wrote) stands for.
pub fn canvas_of_nested(s: &Sig) -> Result<Canvas, CodecError> {
    canvas_of(&sig_dict(&Canvas::Sig(s.clone())))
}

/// Adds `link` to signature `s`'s `link` (or, with `errors`, `link_error`)
/// callbacks, as Celery's `sig.link(…)` / `apply_async(link=…)`.
pub fn add_link(s: &mut Sig, link: &Canvas, errors: bool) {
    let key = if errors { "link_error" } else { "link" };
    let d = sig_dict(link);
    match s.extra.get_mut(key) {
        Some(Value::Array(a)) => a.push(d),
        Some(one @ Value::Object(_)) => {
            let first = one.take();
            *one = Value::Array(vec![first, d]);
        }
        _ => {
            s.extra.insert(key.into(), Value::Array(vec![d]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(t: &str, a: i64) -> Canvas {
        Canvas::Sig(Sig::new(t, vec![json!(a)]))
    }

    #[test]
    fn a_chord_goes_to_a_dict_and_back() {
        let c = Canvas::Chord(
            vec![
                sig("add", 1),
                Canvas::Chain(vec![sig("add", 2), sig("mul", 3)]),
            ],
            Box::new(sig("tsum", 0)),
        );
        let d = sig_dict(&c);
        assert_eq!(d["subtask_type"], "chord");
        assert_eq!(d["kwargs"]["header"]["subtask_type"], "group");
        assert_eq!(d["kwargs"]["body"]["task"], "tsum");
        assert_eq!(canvas_of(&d).unwrap(), c);
    }

    #[test]
    fn a_nested_link_keeps_its_kind_and_comes_back() {
        let g = Canvas::Group(vec![sig("a", 1), sig("b", 2)]);
        let n = nested(&g);
        assert!(is_nested(&n));
        assert_eq!(n.task, "celery.group");
        assert_eq!(canvas_of_nested(&n).unwrap(), g);
        assert!(!is_nested(&Sig::new("a", vec![])));
    }

    #[test]
    fn an_unknown_kind_or_a_chord_without_body_is_refused_by_name() {
        let e = canvas_of(&json!({"task": "x", "subtask_type": "xmap"})).unwrap_err();
        assert!(e.0.contains("\"xmap\""), "{e}");
        let e = canvas_of(&json!({"task": "celery.chord", "subtask_type": "chord",
            "kwargs": {"header": [], "body": null}}))
        .unwrap_err();
        assert!(e.0.contains("no body"), "{e}");
    }

    #[test]
    fn links_add_up() {
        let mut s = Sig::new("a", vec![]);
        add_link(&mut s, &sig("b", 1), false);
        add_link(&mut s, &sig("c", 1), false);
        add_link(&mut s, &sig("e", 1), true);
        assert_eq!(s.extra["link"].as_array().unwrap().len(), 2);
        assert_eq!(s.extra["link_error"][0]["task"], "e");
    }
}
