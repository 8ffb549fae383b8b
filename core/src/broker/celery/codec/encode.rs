//! Writing Celery's task protocol v2 in kombu's envelope: every object in
//! the key order Celery writes (an ordered tree, `J`, since a
//! `serde_json::Map` sorts its keys), every value as Python's `json.dumps`
//! writes it, so a capture of a headway message reads like a Celery one.

use serde_json::{Value, json};

use super::super::b64;
use super::super::pyjson::{repr_args, repr_kwargs, write_str, write_value};
use super::super::typed::iso;
use super::dicts::SUBTASK_TYPE;
use super::{SIG_MODELLED, Sender, V2_HEADERS};
use crate::task::message::{Chord, Message, Options, Sig, new_id};

/// An ordered JSON tree: what the writer needs, since a `serde_json::Map`
/// sorts its keys and Celery's key order is part of the format.
pub(super) enum J {
    V(Value),
    Ref(&'static str),
    O(Vec<(&'static str, J)>),
    OwnedO(Vec<(String, J)>),
    A(Vec<J>),
}

/// `{"k": v, ...}` in Python's `json.dumps` spacing, for either kind of key.
fn write_object<'a>(out: &mut String, fields: impl Iterator<Item = (&'a str, &'a J)>) {
    out.push('{');
    for (i, (k, v)) in fields.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_str(out, k);
        out.push_str(": ");
        write_j(out, v);
    }
    out.push('}');
}

pub(super) fn write_j(out: &mut String, j: &J) {
    match j {
        J::V(v) => write_value(out, v),
        J::Ref(s) => write_str(out, s),
        J::O(fields) => write_object(out, fields.iter().map(|(k, v)| (*k, v))),
        J::OwnedO(fields) => write_object(out, fields.iter().map(|(k, v)| (k.as_str(), v))),
        J::A(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_j(out, v);
            }
            out.push(']');
        }
    }
}

pub(super) fn opt_str(s: &Option<String>) -> J {
    match s {
        Some(s) => J::V(Value::String(s.clone())),
        None => J::V(Value::Null),
    }
}

/// One encoded message: the envelope's JSON text and its delivery tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    /// The JSON text LPUSHed onto the queue list.
    pub json: String,
    /// `properties.delivery_tag`: the key of its `unacked` entry once claimed.
    pub tag: String,
}

impl Sender {
    /// Encodes `m` as Celery protocol v2 in a kombu envelope, with a fresh
    /// delivery tag. `now` (ms) turns `expires` into kombu's relative
    /// `properties.expiration`.
    pub fn encode(&self, m: &Message, now: i64) -> Encoded {
        self.encode_tagged(m, now, new_id())
    }

    /// [`Sender::encode`] with a given delivery tag (golden tests).
    pub fn encode_tagged(&self, m: &Message, now: i64, tag: String) -> Encoded {
        let body = self.body(m);
        let mut out = String::with_capacity(body.len() * 4 / 3 + 1024);
        let body64 = b64::encode(body.as_bytes());
        let queue = self.wire_queue(&m.queue).to_string();
        // A chain's last link carries the group and the chord (see the
        // module doc), so the head's group headers are empty then.
        let (group, group_index) = if m.chain.is_empty() {
            (m.group.clone(), m.group_index)
        } else {
            (None, None)
        };
        let carried = |k: &str| m.carried_header(k).cloned();
        let mut headers: Vec<(String, J)> = Vec::with_capacity(24);
        for k in V2_HEADERS {
            let v = match k {
                "lang" => J::Ref("py"),
                "task" => J::V(json!(m.task)),
                "id" => J::V(json!(m.id)),
                "eta" => J::V(m.eta.map_or(Value::Null, |t| json!(iso(t)))),
                "expires" => J::V(m.expires.map_or(Value::Null, |t| json!(iso(t)))),
                "group" => opt_str(&group),
                "group_index" => J::V(group_index.map_or(Value::Null, |i| json!(i))),
                "retries" => J::V(json!(m.retries)),
                "root_id" => J::V(json!(m.root_id.clone().unwrap_or_else(|| m.id.clone()))),
                "parent_id" => opt_str(&m.parent_id),
                "shadow" => J::V(carried(k).unwrap_or(Value::Null)),
                "timelimit" => J::V(carried(k).unwrap_or_else(|| json!([null, null]))),
                "argsrepr" => J::V(carried(k).unwrap_or_else(|| json!(repr_args(&m.args)))),
                "kwargsrepr" => J::V(carried(k).unwrap_or_else(|| json!(repr_kwargs(&m.kwargs)))),
                "origin" => J::V(carried(k).unwrap_or_else(|| json!(self.origin))),
                "ignore_result" => J::V(carried(k).unwrap_or(Value::Bool(false))),
                "replaced_task_nesting" => J::V(carried(k).unwrap_or_else(|| json!(0))),
                "stamped_headers" => J::V(carried(k).unwrap_or(Value::Null)),
                "stamps" => J::V(carried(k).unwrap_or_else(|| json!({}))),
                _ => unreachable!(),
            };
            headers.push((k.to_string(), v));
        }
        if let Some(c) = &m.carried {
            for (k, v) in &c.headers {
                if !V2_HEADERS.contains(&k.as_str()) {
                    headers.push((k.clone(), J::V(v.clone())));
                }
            }
        }
        let mut props: Vec<(&'static str, J)> = vec![
            ("correlation_id", J::V(json!(m.id))),
            ("reply_to", J::V(json!(self.reply_to))),
            ("delivery_mode", J::V(json!(2))),
        ];
        if let Some(exp) = m.expires {
            let left = exp.saturating_sub(now).max(0);
            props.push(("expiration", J::V(json!(left.to_string()))));
        }
        props.push((
            "delivery_info",
            J::O(vec![
                ("exchange", J::Ref("")),
                ("routing_key", J::V(json!(queue))),
            ]),
        ));
        props.push(("priority", J::V(json!(m.priority.unwrap_or(0)))));
        props.push(("body_encoding", J::Ref("base64")));
        props.push(("delivery_tag", J::V(json!(tag))));
        let env = J::O(vec![
            ("body", J::V(Value::String(body64))),
            ("content-encoding", J::Ref("utf-8")),
            ("content-type", J::Ref("application/json")),
            ("headers", J::OwnedO(headers)),
            ("properties", J::O(props)),
        ]);
        write_j(&mut out, &env);
        Encoded { json: out, tag }
    }

    /// The body JSON text: `[args, kwargs, embed]`.
    pub fn body(&self, m: &Message) -> String {
        let chain: Option<Vec<J>> = if m.chain.is_empty() {
            None
        } else {
            let last = m.chain.len() - 1;
            let mut v: Vec<J> = m
                .chain
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let tail_of_chord = if i == last {
                        Some((m.group.as_deref(), m.group_index, m.chord.as_deref()))
                    } else {
                        None
                    };
                    self.sig(s, tail_of_chord)
                })
                .collect();
            v.reverse();
            Some(v)
        };
        let chord = if m.chain.is_empty() {
            m.chord.as_ref().map(|c| self.callback_sig(&c.callback))
        } else {
            None
        };
        let list = |v: &[Value]| {
            if v.is_empty() {
                J::V(Value::Null)
            } else {
                J::V(Value::Array(v.to_vec()))
            }
        };
        let none: &[Value] = &[];
        let (cbs, ebs) = match &m.carried {
            Some(c) => (c.callbacks.as_slice(), c.errbacks.as_slice()),
            None => (none, none),
        };
        let embed = J::O(vec![
            ("callbacks", list(cbs)),
            ("errbacks", list(ebs)),
            ("chain", chain.map_or(J::V(Value::Null), J::A)),
            ("chord", chord.unwrap_or(J::V(Value::Null))),
        ]);
        let body = J::A(vec![
            J::V(Value::Array(m.args.clone())),
            J::V(Value::Object(m.kwargs.clone())),
            embed,
        ]);
        let mut out = String::with_capacity(256);
        write_j(&mut out, &body);
        out
    }

    /// A signature dict for a chain link; the last link of a chord part also
    /// carries the chord.
    pub(super) fn sig(
        &self,
        s: &Sig,
        chord: Option<(Option<&str>, Option<u32>, Option<&Chord>)>,
    ) -> J {
        let mut opts: Vec<(String, J)> = Vec::new();
        let id = s.id.clone().or_else(|| s.options.id.clone());
        opts.push((
            "task_id".into(),
            J::V(id.map_or(Value::Null, Value::String)),
        ));
        opts.push((
            "reply_to".into(),
            J::V(
                s.extra
                    .get("reply_to")
                    .cloned()
                    .unwrap_or_else(|| json!(self.reply_to)),
            ),
        ));
        let mut o = s.options.clone();
        if o.queue.is_none()
            && let Some(r) = self
                .routes
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
        {
            o.queue = r(&s.task);
        }
        self.options(&o, &mut opts);
        for (k, v) in &s.extra {
            if k != "reply_to" && k != SUBTASK_TYPE && !SIG_MODELLED.contains(&k.as_str()) {
                opts.push((k.clone(), J::V(v.clone())));
            }
        }
        if let Some((group, index, c)) = chord {
            if let Some(g) = group {
                opts.push(("group_id".into(), J::V(json!(g))));
            }
            if let Some(c) = c {
                opts.push(("chord".into(), self.callback_sig(&c.callback)));
            }
            if let Some(i) = index {
                opts.push(("group_index".into(), J::V(json!(i))));
            }
        }
        J::O(vec![
            ("task", J::V(json!(s.task))),
            ("args", J::V(Value::Array(s.args.clone()))),
            ("kwargs", J::V(Value::Object(s.kwargs.clone()))),
            ("options", J::OwnedO(opts)),
            (
                "subtask_type",
                J::V(s.extra.get(SUBTASK_TYPE).cloned().unwrap_or(Value::Null)),
            ),
            ("immutable", J::V(json!(s.immutable))),
        ])
    }

    pub(super) fn options(&self, o: &Options, opts: &mut Vec<(String, J)>) {
        if let Some(q) = &o.queue {
            opts.push(("queue".into(), J::V(json!(self.wire_queue(q)))));
        }
        if let Some(p) = o.priority {
            opts.push(("priority".into(), J::V(json!(p))));
        }
        if let Some(eta) = o.eta {
            opts.push(("eta".into(), J::V(json!(iso(eta)))));
        } else if let Some(c) = o.countdown {
            opts.push(("countdown".into(), J::V(json!(c as f64 / 1000.0))));
        }
        if let Some(e) = o.expires {
            opts.push(("expires".into(), J::V(json!(iso(e)))));
        }
        if let Some(k) = &o.concurrency_key {
            opts.push((crate::task::message::CONCURRENCY_KEY.into(), J::V(json!(k))));
        }
    }

    /// The signature dict of a chord's callback: a plain signature, or a
    /// `celery.chain` one when the callback has a tail.
    pub(super) fn callback_sig(&self, cb: &Message) -> J {
        let immutable = cb.join.as_ref().is_some_and(|j| j.immutable);
        let head = self.message_sig(cb, immutable);
        if cb.chain.is_empty() {
            return head;
        }
        let mut tasks = vec![head];
        tasks.extend(cb.chain.iter().map(|s| self.sig(s, None)));
        J::O(vec![
            ("task", J::Ref("celery.chain")),
            ("args", J::V(json!([]))),
            ("kwargs", J::O(vec![("tasks", J::A(tasks))])),
            ("options", J::O(vec![("task_id", J::V(Value::Null))])),
            ("subtask_type", J::Ref("chain")),
            ("immutable", J::V(json!(false))),
        ])
    }

    /// A message (a chord callback's head) as a signature dict.
    pub(super) fn message_sig(&self, m: &Message, immutable: bool) -> J {
        let mut opts: Vec<(String, J)> = vec![
            ("task_id".into(), J::V(json!(m.id))),
            ("reply_to".into(), J::V(json!(self.reply_to))),
        ];
        if m.queue != "default" {
            opts.push(("queue".into(), J::V(json!(m.queue))));
        }
        let o = Options {
            eta: m.eta,
            expires: m.expires,
            priority: m.priority,
            ..Options::default()
        };
        self.options(&o, &mut opts);
        if let Some(c) = &m.carried {
            for (k, v) in [("link", &c.callbacks), ("link_error", &c.errbacks)] {
                if !v.is_empty() {
                    opts.push((k.into(), J::V(Value::Array(v.clone()))));
                }
            }
        }
        J::O(vec![
            ("task", J::V(json!(m.task))),
            ("args", J::V(Value::Array(m.args.clone()))),
            ("kwargs", J::V(Value::Object(m.kwargs.clone()))),
            ("options", J::OwnedO(opts)),
            ("subtask_type", J::V(Value::Null)),
            ("immutable", J::V(json!(immutable))),
        ])
    }
}

/// The text of an `unacked` hash entry, as kombu's `QoS.append` writes it:
/// `[envelope, exchange, routing_key]`.
pub fn unacked_entry(envelope: &str, exchange: &str, routing_key: &str) -> String {
    let mut out = String::with_capacity(envelope.len() + 32);
    out.push('[');
    out.push_str(envelope);
    out.push_str(", ");
    write_str(&mut out, exchange);
    out.push_str(", ");
    write_str(&mut out, routing_key);
    out.push(']');
    out
}
