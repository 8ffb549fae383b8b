//! Celery's task protocol v2 inside kombu's JSON envelope, both ways.
//!
//! A message on a Celery queue is one JSON object (keys in this order):
//! `body` (base64 of the UTF-8 JSON `[args, kwargs, embed]`),
//! `content-encoding` `"utf-8"`, `content-type` `"application/json"`,
//! `headers` (the v2 task headers) and `properties` (`correlation_id`,
//! `reply_to`, `delivery_mode`, `delivery_info {exchange, routing_key}`,
//! `priority`, `body_encoding`, `delivery_tag`). Every piece is written the
//! way Python's `json.dumps` writes it ([`super::pyjson`]), so a capture of
//! a headway message reads like a capture of a Celery one.
//!
//! The mapping onto [`Message`]:
//! - `embed.chain` is the chain's tail **reversed** (Celery pops the next
//!   link off the end); headway keeps it next-first, so it is turned round
//!   both ways.
//! - A chord part that is a single task carries the callback signature in
//!   `embed.chord` and the chord's group id in the `group` header. A chord
//!   part that is a chain carries neither: Celery puts `group_id`,
//!   `group_index` and `chord` in the options of the chain's **last** link,
//!   and headway does the same (a headway worker moves the chord along the
//!   chain link by link, which is the same thing seen from the end).
//! - A chord callback that is itself a chain is a `celery.chain` signature
//!   with the links in `kwargs.tasks`, first link first.
//! - Headers headway does not act on (`shadow`, `timelimit`, `origin`,
//!   `stamps`, custom ones) go to [`Message::headers`] and come back out on
//!   a retry; `link`/`link_error` signatures to `callbacks`/`errbacks`.
//! - The queue headway calls `default` is Celery's `celery` (configurable):
//!   a headway app's default queue and a Celery app's default queue are then
//!   the same list.

use std::fmt;

use serde_json::{Map, Value, json};

use super::b64;
use super::pyjson::{repr_args, repr_kwargs, write_str, write_value};
use super::typed::{self, iso, parse_iso};
use crate::task::message::{Chord, Join, Message, Options, Sig, new_id};

/// Why a message on a Celery queue cannot be read: what a Celery worker
/// logs and drops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecError(pub String);

impl fmt::Debug for Sender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender")
            .field("origin", &self.origin)
            .field("reply_to", &self.reply_to)
            .field("default_queue", &self.default_queue)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "undecodable Celery message: {}", self.0)
    }
}

impl std::error::Error for CodecError {}

fn bad(why: impl Into<String>) -> CodecError {
    CodecError(why.into())
}

/// The v2 headers in the order Celery writes them. Everything else in a
/// message's headers is carried in [`Message::headers`].
const V2_HEADERS: [&str; 19] = [
    "lang",
    "task",
    "id",
    "shadow",
    "eta",
    "expires",
    "group",
    "group_index",
    "retries",
    "timelimit",
    "root_id",
    "parent_id",
    "argsrepr",
    "kwargsrepr",
    "origin",
    "ignore_result",
    "replaced_task_nesting",
    "stamped_headers",
    "stamps",
];

/// Headers the message model holds itself; never copied into `headers`.
/// The header headway counts lost holders in on Celery's layout (see
/// `CeleryBroker::recover`): not carried onto a retry, which is a new
/// delivery with a count of its own.
pub const LOST_HEADER: &str = "headway_lost";

const MODELLED: [&str; 10] = [
    "lang",
    "task",
    "id",
    "eta",
    "expires",
    "group",
    "group_index",
    "retries",
    "root_id",
    "parent_id",
];

/// Options of a signature the model holds itself.
const SIG_MODELLED: [&str; 10] = [
    "task_id",
    "queue",
    "eta",
    "countdown",
    "expires",
    "priority",
    "group_id",
    "group_index",
    "chord",
    "immutable",
];

/// An ordered JSON tree: what the writer needs, since a `serde_json::Map`
/// sorts its keys and Celery's key order is part of the format.
enum J {
    V(Value),
    Ref(&'static str),
    O(Vec<(&'static str, J)>),
    OwnedO(Vec<(String, J)>),
    A(Vec<J>),
}

fn write_j(out: &mut String, j: &J) {
    match j {
        J::V(v) => write_value(out, v),
        J::Ref(s) => write_str(out, s),
        J::O(fields) => {
            out.push('{');
            for (i, (k, v)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_str(out, k);
                out.push_str(": ");
                write_j(out, v);
            }
            out.push('}');
        }
        J::OwnedO(fields) => {
            out.push('{');
            for (i, (k, v)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_str(out, k);
                out.push_str(": ");
                write_j(out, v);
            }
            out.push('}');
        }
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

fn opt_str(s: &Option<String>) -> J {
    match s {
        Some(s) => J::V(Value::String(s.clone())),
        None => J::V(Value::Null),
    }
}

/// Task name → queue (a headway queue name), for chain links whose
/// signature names no queue.
pub type Router = std::sync::Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// What an encoder needs besides the message.
#[derive(Clone)]
pub struct Sender {
    /// Which queue a task name goes to when a signature names none (the
    /// app's policies, see [`super::CeleryBroker::route_for`]); `None`
    /// leaves such links to the receiving worker's default routing, as
    /// Celery's own signatures without a `queue` option are.
    pub routes: std::sync::Arc<std::sync::RwLock<Option<Router>>>,
    /// `headers.origin` for messages that carry none: `gen<pid>@<host>`,
    /// Celery's `anon_nodename()`.
    pub origin: String,
    /// `properties.reply_to` and signatures' `reply_to`: Celery's
    /// `app.thread_oid`, a per-app UUID (only RPC result backends read it).
    pub reply_to: String,
    /// The Celery queue headway's `default` queue stands for (`celery`).
    pub default_queue: String,
}

impl Sender {
    /// A sender for this process: origin `gen<pid>@<hostname>` and a fresh
    /// reply-to UUID.
    pub fn this_process(default_queue: &str) -> Sender {
        Sender {
            routes: Default::default(),
            origin: format!("gen{}@{}", std::process::id(), hostname()),
            reply_to: new_id(),
            default_queue: default_queue.to_string(),
        }
    }

    /// The Celery queue name for headway queue `q`.
    pub fn wire_queue<'a>(&'a self, q: &'a str) -> &'a str {
        if q == "default" {
            &self.default_queue
        } else {
            q
        }
    }

    /// The headway queue name for Celery queue `q`.
    pub fn model_queue(&self, q: &str) -> String {
        if q == self.default_queue {
            "default".to_string()
        } else {
            q.to_string()
        }
    }
}

/// This host's name, as Python's `socket.gethostname()` answers it on
/// Linux; `localhost` where it cannot be read.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "localhost".to_string())
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
    fn sig(&self, s: &Sig, chord: Option<(Option<&str>, Option<u32>, Option<&Chord>)>) -> J {
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
            if k != "reply_to" && !SIG_MODELLED.contains(&k.as_str()) {
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
            ("subtask_type", J::V(Value::Null)),
            ("immutable", J::V(json!(s.immutable))),
        ])
    }

    fn options(&self, o: &Options, opts: &mut Vec<(String, J)>) {
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
    }

    /// The signature dict of a chord's callback: a plain signature, or a
    /// `celery.chain` one when the callback has a tail.
    fn callback_sig(&self, cb: &Message) -> J {
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
    fn message_sig(&self, m: &Message, immutable: bool) -> J {
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

/// A message read off a Celery queue.
#[derive(Debug, Clone)]
pub struct Decoded {
    /// The run.
    pub message: Message,
    /// Its delivery tag (`properties.delivery_tag`).
    pub tag: Option<String>,
    /// kombu marked it restored (`headers.redelivered` or
    /// `delivery_info.redelivered`).
    pub redelivered: bool,
}

fn get_str(v: &Value, k: &str) -> Option<String> {
    v.get(k).and_then(Value::as_str).map(str::to_string)
}

fn time_field(h: &Value, k: &str) -> Result<Option<i64>, CodecError> {
    match h.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => parse_iso(s)
            .map(Some)
            .ok_or_else(|| bad(format!("headers.{k} is not an ISO-8601 time: {s:?}"))),
        // A typed datetime (kombu ≥ 5.3 writing a datetime object).
        Some(v @ Value::Object(_)) => match typed::Typed::from_value(v) {
            Ok(Some(t)) => Ok(t.epoch_ms()),
            _ => Err(bad(format!("headers.{k} is not a time"))),
        },
        Some(Value::Number(n)) => Ok(n.as_f64().and_then(secs_ms)),
        Some(_) => Err(bad(format!("headers.{k} is not a time"))),
    }
}

/// Seconds (a float, as Celery writes `countdown` and numeric times) as
/// whole ms, saturating at the ends of `i64`: 1e300 s is the end of time,
/// not an overflow. `None` for NaN or an infinity, which JSON cannot carry
/// but a typed caller could pass.
pub fn secs_ms(secs: f64) -> Option<i64> {
    // `as` saturates (and would make NaN 0, an instant long past).
    secs.is_finite().then_some((secs * 1000.0) as i64)
}

/// A count (`retries`, `group_index`, `priority`) as a `u32`: integers or
/// floats, saturating at 0 and `u32::MAX` rather than wrapping.
fn as_u32(v: Option<&Value>) -> Option<u32> {
    v.and_then(|v| {
        v.as_u64()
            .or_else(|| v.as_f64().map(|f| f as u64))
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
    })
    .map(|n| n.min(u32::MAX as u64) as u32)
}

impl Sender {
    /// Decodes one envelope as it sits on a queue list or in `unacked`.
    pub fn decode(&self, raw: &[u8]) -> Result<Decoded, CodecError> {
        let env: Value = serde_json::from_slice(raw).map_err(|e| bad(format!("not JSON: {e}")))?;
        self.decode_value(&env)
    }

    /// Decodes an envelope already parsed.
    pub fn decode_value(&self, env: &Value) -> Result<Decoded, CodecError> {
        if !env.is_object() {
            return Err(bad("the envelope is not an object"));
        }
        let ctype = get_str(env, "content-type").unwrap_or_default();
        if ctype != "application/json" {
            return Err(bad(format!(
                "content type {ctype:?} is not allowed (only application/json is accepted)"
            )));
        }
        let props = env.get("properties").cloned().unwrap_or(Value::Null);
        let headers = env.get("headers").cloned().unwrap_or(Value::Null);
        let body_text = match env.get("body") {
            Some(Value::String(s)) => {
                if get_str(&props, "body_encoding").as_deref() == Some("base64") {
                    let bytes =
                        b64::decode(s.as_bytes()).ok_or_else(|| bad("the body is not base64"))?;
                    String::from_utf8(bytes).map_err(|_| bad("the body is not UTF-8"))?
                } else {
                    s.clone()
                }
            }
            Some(_) => return Err(bad("the body is not a string")),
            None => return Err(bad("no body")),
        };
        let body: Value = serde_json::from_str(&body_text)
            .map_err(|e| bad(format!("the body is not JSON: {e}")))?;
        typed::check(&body).map_err(|e| bad(e.to_string()))?;
        let info = props.get("delivery_info").cloned().unwrap_or(Value::Null);
        let queue = get_str(&info, "routing_key").unwrap_or_else(|| self.default_queue.clone());
        let redelivered = headers.get("redelivered").and_then(Value::as_bool) == Some(true)
            || info.get("redelivered").and_then(Value::as_bool) == Some(true);
        let tag = get_str(&props, "delivery_tag");
        let priority = as_u32(props.get("priority"))
            .map(|p| p.min(255) as u8)
            .filter(|&p| p != 0);

        // Protocol 2 only: Celery's protocol 1 (the task in the body, no
        // `task` header) is refused, as headway refuses any other protocol.
        if headers.get("task").and_then(Value::as_str).is_none() {
            return Err(bad(
                "headers.task is missing (Celery task protocol 1 is not read)",
            ));
        }
        let mut message = self.decode_v2(&headers, &body, &queue)?;
        message.priority = priority;
        Ok(Decoded {
            message,
            tag,
            redelivered,
        })
    }

    fn decode_v2(&self, h: &Value, body: &Value, queue: &str) -> Result<Message, CodecError> {
        let id = get_str(h, "id").ok_or_else(|| bad("headers.id is missing"))?;
        let task = get_str(h, "task").ok_or_else(|| bad("headers.task is missing"))?;
        let parts = body
            .as_array()
            .filter(|a| a.len() == 3)
            .ok_or_else(|| bad("the body is not [args, kwargs, embed]"))?;
        let args = parts[0]
            .as_array()
            .cloned()
            .ok_or_else(|| bad("args is not a list"))?;
        let kwargs = parts[1]
            .as_object()
            .cloned()
            .ok_or_else(|| bad("kwargs is not an object"))?;
        let embed = &parts[2];
        let mut m = Message::new(id, task, args, kwargs, self.model_queue(queue));
        m.eta = time_field(h, "eta")?;
        m.expires = time_field(h, "expires")?;
        m.retries = as_u32(h.get("retries")).unwrap_or(0);
        m.root_id = get_str(h, "root_id");
        m.parent_id = get_str(h, "parent_id");
        m.group = get_str(h, "group");
        m.group_index = as_u32(h.get("group_index"));
        if let Some(hm) = h.as_object() {
            for (k, v) in hm {
                if !MODELLED.contains(&k.as_str())
                    && k != "redelivered"
                    && k != LOST_HEADER
                    && k != super::unknown::HANDBACK_HEADER
                {
                    m.carried_mut().headers.insert(k.clone(), v.clone());
                }
            }
        }
        let list = |k: &str| -> Result<Vec<Value>, CodecError> {
            match embed.get(k) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(a)) => Ok(a.clone()),
                Some(_) => Err(bad(format!("embed.{k} is not a list"))),
            }
        };
        let (callbacks, errbacks) = (list("callbacks")?, list("errbacks")?);
        if !callbacks.is_empty() || !errbacks.is_empty() {
            let c = m.carried_mut();
            c.callbacks = callbacks;
            c.errbacks = errbacks;
        }
        let mut wire_chain = list("chain")?;
        // The wire's first element is the chain's last link.
        if let Some(last) = wire_chain.first_mut()
            && let Some(opts) = last.get_mut("options").and_then(Value::as_object_mut)
            && let Some(cb) = opts.shift_remove("chord").filter(|c| !c.is_null())
        {
            let key = opts
                .shift_remove("group_id")
                .and_then(|g| g.as_str().map(str::to_string))
                .ok_or_else(|| bad("a chain link carries a chord but no group_id"))?;
            m.group_index = as_u32(opts.shift_remove("group_index").as_ref());
            m.group = Some(key.clone());
            m.chord = Some(Box::new(Chord {
                key,
                size: 0,
                callback: Box::new(self.callback_message(&cb)?),
            }));
        }
        m.chain = wire_chain
            .iter()
            .rev()
            .map(|s| self.decode_sig(s))
            .collect::<Result<_, _>>()?;
        if let Some(cb) = embed.get("chord").filter(|c| !c.is_null()) {
            let key = m
                .group
                .clone()
                .ok_or_else(|| bad("embed.chord is set but headers.group is not"))?;
            m.chord = Some(Box::new(Chord {
                key,
                size: 0,
                callback: Box::new(self.callback_message(cb)?),
            }));
        }
        Ok(m)
    }

    /// A chain link's signature dict as a [`Sig`].
    pub fn decode_sig(&self, s: &Value) -> Result<Sig, CodecError> {
        let task = get_str(s, "task").ok_or_else(|| bad("a signature has no task"))?;
        if s.get("subtask_type")
            .and_then(Value::as_str)
            .is_some_and(|t| t != "chain")
        {
            return Err(bad(format!(
                "a {} signature inside a chain is not supported",
                s["subtask_type"]
            )));
        }
        let args = s
            .get("args")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let kwargs = s
            .get("kwargs")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let immutable = s.get("immutable").and_then(Value::as_bool).unwrap_or(false);
        let empty = Map::new();
        let opts = s
            .get("options")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let mut sig = Sig::new(task, args).with_kwargs(kwargs);
        sig.immutable = immutable;
        sig.id = opts
            .get("task_id")
            .and_then(Value::as_str)
            .map(str::to_string);
        sig.options = self.decode_options(opts)?;
        for (k, v) in opts {
            if !SIG_MODELLED.contains(&k.as_str()) {
                sig.extra.insert(k.clone(), v.clone());
            }
        }
        Ok(sig)
    }

    fn decode_options(&self, o: &Map<String, Value>) -> Result<Options, CodecError> {
        let time = |k: &str| -> Option<i64> {
            match o.get(k) {
                Some(Value::String(s)) => parse_iso(s),
                Some(v @ Value::Object(_)) => typed::Typed::from_value(v)
                    .ok()
                    .flatten()
                    .and_then(|t| t.epoch_ms()),
                _ => None,
            }
        };
        Ok(Options {
            queue: o
                .get("queue")
                .and_then(|q| q.as_str().or_else(|| q.get("name").and_then(Value::as_str)))
                .map(|q| self.model_queue(q)),
            eta: time("eta"),
            countdown: o.get("countdown").and_then(Value::as_f64).and_then(secs_ms),
            expires: time("expires"),
            priority: as_u32(o.get("priority")).map(|p| p.min(9) as u8),
            id: None,
        })
    }

    /// A chord callback's signature dict as the message it will be.
    pub fn callback_message(&self, cb: &Value) -> Result<Message, CodecError> {
        let is_chain = cb.get("subtask_type").and_then(Value::as_str) == Some("chain")
            || cb.get("task").and_then(Value::as_str) == Some("celery.chain");
        let (head, tail) = if is_chain {
            let tasks = cb
                .get("kwargs")
                .and_then(|k| k.get("tasks"))
                .and_then(Value::as_array)
                .filter(|t| !t.is_empty())
                .ok_or_else(|| bad("a celery.chain callback has no tasks"))?;
            let mut sigs = tasks
                .iter()
                .map(|s| self.decode_sig(s))
                .collect::<Result<Vec<_>, _>>()?;
            let head = sigs.remove(0);
            (head, sigs)
        } else {
            if cb.get("subtask_type").and_then(Value::as_str).is_some() {
                return Err(bad(format!(
                    "a {} chord callback is not supported",
                    cb["subtask_type"]
                )));
            }
            (self.decode_sig(cb)?, Vec::new())
        };
        let o = &head.options;
        let mut m = Message::new(
            head.id.clone().unwrap_or_else(new_id),
            head.task.clone(),
            head.args.clone(),
            head.kwargs.clone(),
            o.queue.clone().unwrap_or_else(|| "default".into()),
        );
        m.eta = o.eta;
        m.expires = o.expires;
        m.priority = o.priority;
        m.chain = tail;
        m.join = Some(Join {
            parts: Vec::new(),
            immutable: head.immutable,
        });
        carry_links(&head.extra, &mut m);
        Ok(m)
    }
}

/// Celery `link` / `link_error` callbacks, applied as Celery 5.5 applies
/// them (`celery/app/trace.py` on success, `_call_task_errbacks` in
/// `celery/backends/base.py` on failure for good).
///
/// Each raw signature dict becomes one message: `arg` (the result, or the
/// failed task's id) is prepended to its args unless it is immutable, its
/// `parent_id` is the finished run, its `root_id` that run's root. Several
/// success links, and error links always, go out as a group (a fresh group
/// id, each its index), as Celery's `group(...).apply_async` does. A link's
/// own `link`/`link_error` options become the new message's callbacks. A
/// `celery.chain` link runs its first task with `arg` and carries the rest
/// as its chain. `message_of` turns a signature into a message (queue from
/// its options or the app's routing, `countdown` into an eta). Signatures
/// that cannot be read are answered as errors, one per bad link, and the
/// good ones are still returned.
pub fn apply_links(
    sigs: &[Value],
    arg: &Value,
    parent: &Message,
    grouped: bool,
    message_of: impl Fn(&Sig) -> Message,
) -> (Vec<Message>, Vec<CodecError>) {
    // Queue names are kept as written: a headway queue and its Celery name
    // encode to the same list either way.
    let plain = Sender {
        routes: Default::default(),
        origin: String::new(),
        reply_to: String::new(),
        default_queue: String::new(),
    };
    let group = (grouped && !sigs.is_empty()).then(new_id);
    let root = parent.root_id.clone().unwrap_or_else(|| parent.id.clone());
    let (mut out, mut bad_links) = (Vec::new(), Vec::new());
    for (i, raw) in sigs.iter().enumerate() {
        let (head, tail) = match plain.link_parts(raw) {
            Ok(p) => p,
            Err(e) => {
                bad_links.push(e);
                continue;
            }
        };
        let mut n = message_of(&head);
        if !head.immutable {
            n.args.insert(0, arg.clone());
        }
        n.chain = tail;
        n.root_id = Some(root.clone());
        n.parent_id = Some(parent.id.clone());
        if let Some(g) = &group {
            n.group = Some(g.clone());
            n.group_index = Some(i as u32);
        }
        carry_links(&head.extra, &mut n);
        out.push(n);
    }
    (out, bad_links)
}

/// Moves a signature's `link` / `link_error` options (a dict or a list of
/// them) onto the message it becomes, as Celery's `apply_async(link=…)`
/// puts them in the message's callbacks and errbacks.
pub fn carry_links(extra: &Map<String, Value>, m: &mut Message) {
    let as_list = |k: &str| match extra.get(k) {
        Some(Value::Array(a)) => a.clone(),
        Some(v @ Value::Object(_)) => vec![v.clone()],
        _ => Vec::new(),
    };
    let (cbs, ebs) = (as_list("link"), as_list("link_error"));
    if !cbs.is_empty() || !ebs.is_empty() {
        let c = m.carried_mut();
        c.callbacks = cbs;
        c.errbacks = ebs;
    }
}

impl Sender {
    /// A link's first signature and, for a `celery.chain` link, the rest.
    fn link_parts(&self, raw: &Value) -> Result<(Sig, Vec<Sig>), CodecError> {
        let kind = raw.get("subtask_type").and_then(Value::as_str);
        let is_chain = kind == Some("chain")
            || raw.get("task").and_then(Value::as_str) == Some("celery.chain");
        if !is_chain {
            if let Some(k) = kind {
                return Err(bad(format!("a {k:?} link callback is not supported")));
            }
            return Ok((self.decode_sig(raw)?, Vec::new()));
        }
        let tasks = raw
            .get("kwargs")
            .and_then(|k| k.get("tasks"))
            .and_then(Value::as_array)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| bad("a celery.chain link has no tasks"))?;
        let mut sigs = tasks
            .iter()
            .map(|s| self.decode_sig(s))
            .collect::<Result<Vec<_>, _>>()?;
        let head = sigs.remove(0);
        Ok((head, sigs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sender() -> Sender {
        Sender {
            routes: Default::default(),
            origin: "gen4242@host1".into(),
            reply_to: "7c1f9e0a-3b2d-3c4e-8f5a-6d7e8f9a0b1c".into(),
            default_queue: "celery".into(),
        }
    }

    #[test]
    fn add_delay_matches_the_fact_sheet_example() {
        let id = "d3b5f1a2-5c1e-4a8e-9f0b-2a7c6e4d1b90".to_string();
        let m = Message::new(
            id,
            "tasks.add".into(),
            vec![json!(2), json!(3)],
            Map::new(),
            "default".into(),
        );
        let e = sender().encode_tagged(&m, 0, "5a6b7c8d-9e0f-4a1b-8c2d-3e4f5a6b7c8d".into());
        let want = concat!(
            r#"{"body": "W1syLCAzXSwge30sIHsiY2FsbGJhY2tzIjogbnVsbCwgImVycmJhY2tzIjogbnVsbCwgImNoYWluIjogbnVsbCwgImNob3JkIjogbnVsbH1d", "#,
            r#""content-encoding": "utf-8", "content-type": "application/json", "#,
            r#""headers": {"lang": "py", "task": "tasks.add", "id": "d3b5f1a2-5c1e-4a8e-9f0b-2a7c6e4d1b90", "shadow": null, "eta": null, "#,
            r#""expires": null, "group": null, "group_index": null, "retries": 0, "timelimit": [null, null], "#,
            r#""root_id": "d3b5f1a2-5c1e-4a8e-9f0b-2a7c6e4d1b90", "parent_id": null, "argsrepr": "(2, 3)", "kwargsrepr": "{}", "#,
            r#""origin": "gen4242@host1", "ignore_result": false, "replaced_task_nesting": 0, "stamped_headers": null, "stamps": {}}, "#,
            r#""properties": {"correlation_id": "d3b5f1a2-5c1e-4a8e-9f0b-2a7c6e4d1b90", "reply_to": "7c1f9e0a-3b2d-3c4e-8f5a-6d7e8f9a0b1c", "#,
            r#""delivery_mode": 2, "delivery_info": {"exchange": "", "routing_key": "celery"}, "priority": 0, "#,
            r#""body_encoding": "base64", "delivery_tag": "5a6b7c8d-9e0f-4a1b-8c2d-3e4f5a6b7c8d"}}"#
        );
        assert_eq!(e.json, want);
        let d = sender().decode(e.json.as_bytes()).unwrap();
        assert_eq!(d.message.queue, "default");
        assert_eq!(
            d.tag.as_deref(),
            Some("5a6b7c8d-9e0f-4a1b-8c2d-3e4f5a6b7c8d")
        );
        assert_eq!(d.message.args, vec![json!(2), json!(3)]);
        assert_eq!(
            d.message.root_id.as_deref(),
            Some("d3b5f1a2-5c1e-4a8e-9f0b-2a7c6e4d1b90")
        );
    }

    #[test]
    fn refuses_what_celery_refuses() {
        let s = sender();
        assert!(s.decode(b"nope").is_err());
        assert!(s.decode(br#"{"body": "x", "content-type": "application/x-python-serialize", "properties": {}}"#).is_err());
        assert!(s.decode(br#"{"body": "!!", "content-type": "application/json", "headers": {"task": "t", "id": "i"}, "properties": {"body_encoding": "base64"}}"#).is_err());
        // [args, kwargs] without embed.
        let body = b64::encode(b"[[1], {}]");
        let raw = format!(
            r#"{{"body": "{body}", "content-type": "application/json", "headers": {{"task": "t", "id": "i"}}, "properties": {{"body_encoding": "base64"}}}}"#
        );
        assert!(s.decode(raw.as_bytes()).is_err());
    }
}
