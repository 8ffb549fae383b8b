//! Celery's `self.request` for a run: the fields a Celery task reads about
//! the run it is in, made once here from the message so a served Celery
//! app (`headway worker -A`) and `headway.celery`'s `Request` tell the same
//! thing, and no binding decides what a field holds.
//!
//! Most runs carry none of the rarer fields (eta, expires, group, chord,
//! links), so they ride in [`RunExtras`], boxed and `None` for a plain run:
//! one pointer in every [`Context`].

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::body::Context;
use super::canvas::Canvas;
use super::message::{Message, Sig};
use crate::broker::celery::codec::dicts;
use crate::broker::celery::typed::iso;

/// What a run's message says beyond [`Context`]'s own fields, for Celery's
/// `self.request`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunExtras {
    /// Not before this instant (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta: Option<i64>,
    /// Revoked as expired if not started by this instant (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<i64>,
    /// The group (or chord) the run is a part of, and its place in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_index: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// The chord's callback, as Celery's signature dict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chord: Option<Value>,
    /// `link` / `link_error` callbacks, as Celery's signature dicts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callbacks: Vec<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errbacks: Vec<Value>,
    /// The message's other headers (a custom `headers=`, Celery's `origin`,
    /// `shadow`, …): fields of Celery's request as well.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub headers: Map<String, Value>,
}

/// Request fields the message model or the run hold themselves: a custom
/// header of one of these names is not taken.
pub const MODEL_FIELDS: [&str; 20] = [
    "id",
    "task",
    "args",
    "kwargs",
    "retries",
    "eta",
    "expires",
    "group",
    "group_index",
    "chord",
    "callbacks",
    "errbacks",
    "delivery_info",
    "hostname",
    "root_id",
    "parent_id",
    "correlation_id",
    "reply_to",
    "timelimit",
    "is_eager",
];

impl RunExtras {
    /// The extras of message `m`; `None` when it has none.
    pub fn of(m: &Message) -> Option<Box<RunExtras>> {
        let links = m
            .carried
            .as_deref()
            .filter(|c| !c.callbacks.is_empty() || !c.errbacks.is_empty());
        let headers = m.carried.as_deref().filter(|c| !c.headers.is_empty());
        if m.eta.is_none()
            && m.expires.is_none()
            && m.group.is_none()
            && m.priority.is_none()
            && m.chord.is_none()
            && links.is_none()
            && headers.is_none()
        {
            return None;
        }
        let chord = m.chord.as_ref().map(|c| {
            let cb = &c.callback;
            let mut s = Sig::new(cb.task.clone(), cb.args.clone()).with_kwargs(cb.kwargs.clone());
            s.id = Some(cb.id.clone());
            s.immutable = cb.join.as_ref().is_some_and(|j| j.immutable);
            dicts::sig_dict(&Canvas::Sig(s))
        });
        Some(Box::new(RunExtras {
            eta: m.eta,
            expires: m.expires,
            group: m.group.clone(),
            group_index: m.group_index,
            priority: m.priority,
            chord,
            callbacks: links.map(|c| c.callbacks.clone()).unwrap_or_default(),
            errbacks: links.map(|c| c.errbacks.clone()).unwrap_or_default(),
            headers: headers.map(|c| c.headers.clone()).unwrap_or_default(),
        }))
    }
}

/// The queue's name as Celery knows it: headway's model calls a Celery
/// app's default queue `default`.
pub fn celery_queue<'a>(queue: &'a str, default_queue: &'a str) -> &'a str {
    if queue == "default" {
        default_queue
    } else {
        queue
    }
}

/// Celery's `self.request` fields for the run `ctx` describes, but for
/// `args` and `kwargs` (the host has them as its own values): `id`, `task`,
/// `retries`, `eta` and `expires` (ISO text, as Celery's request holds
/// them), `group`, `group_index`, `chord`, `callbacks`, `errbacks`,
/// `delivery_info` (`exchange`, `routing_key` — the queue under Celery's
/// name, `default_queue` for headway's `default` — `priority`,
/// `redelivered`), `hostname`, `root_id` (the run itself when it is a
/// root), `parent_id`, `correlation_id`, `reply_to`, `timelimit`
/// (`[hard, soft]` seconds), `is_eager`, `called_directly`.
pub fn celery_request(ctx: &Context, default_queue: &str) -> Map<String, Value> {
    let x = ctx.extras.as_deref();
    let secs = |ms: Option<i64>| ms.map(|ms| ms as f64 / 1000.0);
    let list = |v: Option<&Vec<Value>>| match v {
        Some(v) if !v.is_empty() => Value::Array(v.clone()),
        _ => Value::Null,
    };
    let fields = json!({
        "id": ctx.id,
        "task": ctx.name,
        "retries": ctx.retries,
        "eta": x.and_then(|x| x.eta).map(iso),
        "expires": x.and_then(|x| x.expires).map(iso),
        "group": x.and_then(|x| x.group.clone()),
        "group_index": x.and_then(|x| x.group_index),
        "chord": x.and_then(|x| x.chord.clone()),
        "callbacks": list(x.map(|x| &x.callbacks)),
        "errbacks": list(x.map(|x| &x.errbacks)),
        "delivery_info": {
            "exchange": "",
            "routing_key": celery_queue(&ctx.queue, default_queue),
            "priority": x.and_then(|x| x.priority),
            "redelivered": null,
        },
        "hostname": (!ctx.worker.is_empty()).then_some(&ctx.worker),
        "root_id": ctx.root_id.as_deref().unwrap_or(&ctx.id),
        "parent_id": ctx.parent_id,
        "correlation_id": ctx.id,
        "reply_to": null,
        "timelimit": [secs(ctx.time_limit), secs(ctx.soft_time_limit)],
        "is_eager": false,
        "called_directly": false,
    });
    let Value::Object(mut out) = fields else {
        unreachable!("a json! object")
    };
    for (k, v) in x.map(|x| &x.headers).into_iter().flatten() {
        if !out.contains_key(k) {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

/// Celery's `self.request` outside a run (a task called directly, as
/// Celery's empty request context): the fields [`celery_request`] answers,
/// each empty, and `called_directly` true. Kept beside it so the two field
/// lists cannot drift apart (a test holds them equal).
pub fn celery_request_direct() -> Map<String, Value> {
    let fields = json!({
        "id": null,
        "task": null,
        "retries": 0,
        "eta": null,
        "expires": null,
        "group": null,
        "group_index": null,
        "chord": null,
        "callbacks": null,
        "errbacks": null,
        "delivery_info": {},
        "hostname": null,
        "root_id": null,
        "parent_id": null,
        "correlation_id": null,
        "reply_to": null,
        "timelimit": [null, null],
        "is_eager": false,
        "called_directly": true,
    });
    let Value::Object(out) = fields else {
        unreachable!("a json! object")
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::message::{Carried, Chord};

    fn ctx(m: &Message) -> Context {
        Context {
            id: m.id.clone(),
            name: m.task.clone(),
            queue: m.queue.clone(),
            retries: 1,
            attempt: 2,
            last: false,
            now: 0,
            kwargs: Map::new(),
            root_id: None,
            parent_id: Some("p".into()),
            soft_time_limit: Some(1500),
            time_limit: None,
            worker: "w@h".into(),
            trace: None,
            rule: Default::default(),
            recorder: Default::default(),
            extras: RunExtras::of(m),
        }
    }

    #[test]
    fn a_plain_run_carries_no_extras_and_reads_as_celery_does() {
        let m = Message::new("i".into(), "t".into(), vec![], Map::new(), "default".into());
        assert!(RunExtras::of(&m).is_none());
        let r = celery_request(&ctx(&m), "celery");
        assert_eq!(r["root_id"], "i");
        assert_eq!(r["delivery_info"]["routing_key"], "celery");
        assert_eq!(r["timelimit"], json!([null, 1.5]));
        assert_eq!(r["eta"], Value::Null);
        assert_eq!(r["hostname"], "w@h");
    }

    #[test]
    fn a_direct_call_has_every_field_of_a_run_each_empty() {
        let m = Message::new("i".into(), "t".into(), vec![], Map::new(), "default".into());
        let run = celery_request(&ctx(&m), "celery");
        let direct = celery_request_direct();
        assert!(run.keys().eq(direct.keys()), "the same fields, in order");
        assert_eq!(direct["called_directly"], true);
        assert_eq!(run["called_directly"], false);
        assert_eq!(direct["retries"], 0);
        assert_eq!(direct["timelimit"], json!([null, null]));
    }

    #[test]
    fn eta_group_chord_and_links_are_told() {
        let mut m = Message::new("i".into(), "t".into(), vec![], Map::new(), "q".into());
        m.eta = Some(1_767_225_600_000);
        m.group = Some("g".into());
        m.group_index = Some(2);
        m.priority = Some(3);
        let cb = Message::new(
            "cb".into(),
            "total".into(),
            vec![],
            Map::new(),
            "default".into(),
        );
        m.chord = Some(Box::new(Chord {
            key: "g".into(),
            size: 3,
            callback: Box::new(cb),
        }));
        let mut headers = Map::new();
        headers.insert("tenant".into(), json!("t-7"));
        headers.insert("id".into(), json!("not the id"));
        m.carried = Some(Box::new(Carried {
            callbacks: vec![json!({"task": "x"})],
            headers,
            ..Carried::default()
        }));
        let r = celery_request(&ctx(&m), "celery");
        assert_eq!(r["eta"], "2026-01-01T00:00:00+00:00");
        assert_eq!(r["group"], "g");
        assert_eq!(r["group_index"], 2);
        assert_eq!(r["delivery_info"]["priority"], 3);
        assert_eq!(r["delivery_info"]["routing_key"], "q");
        assert_eq!(r["chord"]["task"], "total");
        assert_eq!(r["chord"]["options"]["task_id"], "cb");
        assert_eq!(r["callbacks"], json!([{"task": "x"}]));
        assert_eq!(r["errbacks"], Value::Null);
        // A custom header is a request field, never over the model's own.
        assert_eq!(r["tenant"], "t-7");
        assert_eq!(r["id"], "i");
    }
}
