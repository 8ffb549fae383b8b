//! Reading Celery's task protocol v2 as a Celery worker would: the
//! envelope's content type and encoding, the v2 headers (times as ISO text,
//! numbers or kombu's typed datetimes), the body `[args, kwargs, embed]`,
//! and the signatures in it. Anything a Celery worker would refuse is a
//! [`CodecError`], never a panic: the bytes are another producer's.

use serde_json::{Map, Value};

use super::super::b64;
use super::super::typed::{self, parse_iso};
use super::dicts::SUBTASK_TYPE;
use super::{CodecError, LOST_HEADER, MODELLED, SIG_MODELLED, Sender, bad, carry_links};
use crate::task::message::{CONCURRENCY_KEY, Chord, Join, Message, Options, Sig, new_id};

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

pub(super) fn get_str(v: &Value, k: &str) -> Option<String> {
    v.get(k).and_then(Value::as_str).map(str::to_string)
}

fn body_json(text: &str) -> Result<Value, CodecError> {
    serde_json::from_str(text).map_err(|e| bad(format!("the body is not JSON: {e}")))
}

pub(super) fn time_field(h: &Value, k: &str) -> Result<Option<i64>, CodecError> {
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
pub(super) fn as_u32(v: Option<&Value>) -> Option<u32> {
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
        self.decode_value(env, None)
    }

    /// Decodes an envelope already parsed, taking it apart (nothing in it is
    /// copied); `body` is its body already read as JSON, when the caller
    /// has read it (a quarantine check does), so it is not read twice.
    pub fn decode_value(&self, env: Value, body: Option<Value>) -> Result<Decoded, CodecError> {
        let Value::Object(mut env) = env else {
            return Err(bad("the envelope is not an object"));
        };
        let ctype = env
            .get("content-type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if ctype != "application/json" {
            return Err(bad(format!(
                "content type {ctype:?} is not allowed (only application/json is accepted)"
            )));
        }
        let props = env.swap_remove("properties").unwrap_or(Value::Null);
        let headers = env.swap_remove("headers").unwrap_or(Value::Null);
        let base64 = props.get("body_encoding").and_then(Value::as_str) == Some("base64");
        let body = match (body, env.get("body")) {
            (Some(b), _) => b,
            (None, Some(Value::String(s))) if base64 => {
                let bytes =
                    b64::decode(s.as_bytes()).ok_or_else(|| bad("the body is not base64"))?;
                let text = String::from_utf8(bytes).map_err(|_| bad("the body is not UTF-8"))?;
                body_json(&text)?
            }
            (None, Some(Value::String(s))) => body_json(s)?,
            (None, Some(_)) => return Err(bad("the body is not a string")),
            (None, None) => return Err(bad("no body")),
        };
        typed::check(&body).map_err(|e| bad(e.to_string()))?;
        let info = props.get("delivery_info").unwrap_or(&Value::Null);
        let queue = get_str(info, "routing_key").unwrap_or_else(|| self.default_queue.clone());
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
        let mut message = self.decode_v2(headers, body, &queue)?;
        message.priority = priority;
        Ok(Decoded {
            message,
            tag,
            redelivered,
        })
    }

    pub(super) fn decode_v2(
        &self,
        h: Value,
        body: Value,
        queue: &str,
    ) -> Result<Message, CodecError> {
        let id = get_str(&h, "id").ok_or_else(|| bad("headers.id is missing"))?;
        let task = get_str(&h, "task").ok_or_else(|| bad("headers.task is missing"))?;
        let mut parts = match body {
            Value::Array(a) if a.len() == 3 => a,
            _ => return Err(bad("the body is not [args, kwargs, embed]")),
        };
        let mut embed = parts.pop().unwrap_or(Value::Null);
        let (kwargs, args) = (parts.pop(), parts.pop());
        let Some(Value::Array(args)) = args else {
            return Err(bad("args is not a list"));
        };
        let Some(Value::Object(kwargs)) = kwargs else {
            return Err(bad("kwargs is not an object"));
        };
        let mut m = Message::new(id, task, args, kwargs, self.model_queue(queue));
        m.eta = time_field(&h, "eta")?;
        m.expires = time_field(&h, "expires")?;
        m.retries = as_u32(h.get("retries")).unwrap_or(0);
        m.root_id = get_str(&h, "root_id");
        m.parent_id = get_str(&h, "parent_id");
        m.group = get_str(&h, "group");
        m.group_index = as_u32(h.get("group_index"));
        if let Value::Object(hm) = h {
            for (k, v) in hm {
                if !MODELLED.contains(&k.as_str())
                    && k != "redelivered"
                    && k != LOST_HEADER
                    && k != super::super::unknown::HANDBACK_HEADER
                {
                    m.carried_mut().headers.insert(k, v);
                }
            }
        }
        let mut list = |k: &str| -> Result<Vec<Value>, CodecError> {
            match embed.get_mut(k).map(Value::take) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(a)) => Ok(a),
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
        match s.get(SUBTASK_TYPE).and_then(Value::as_str) {
            None | Some("chain") => {}
            // A group or chord after a link of a chain: kept whole, run when
            // the link before it succeeds (see `dicts`).
            Some(kind @ ("group" | "chord")) => {
                let mut sig = Sig::new(task, Vec::new());
                if let Some(kw) = s.get("kwargs").and_then(Value::as_object) {
                    sig.kwargs = kw.clone();
                }
                sig.extra.insert(SUBTASK_TYPE.into(), Value::from(kind));
                return Ok(sig);
            }
            Some(_) => {
                return Err(bad(format!(
                    "a {} signature inside a chain is not supported",
                    s["subtask_type"]
                )));
            }
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

    pub(super) fn decode_options(&self, o: &Map<String, Value>) -> Result<Options, CodecError> {
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
            concurrency_key: o
                .get(CONCURRENCY_KEY)
                .and_then(Value::as_str)
                .map(str::to_string),
            dedupe_key: None,
            dedupe_ttl: None,
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
        // A signature that names no queue goes where this app routes its
        // task (a Celery producer's chord body names none: its own worker
        // would route it by `task_routes`), else to the default queue.
        let queue = o.queue.clone().or_else(|| {
            self.routes
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .and_then(|r| r(&head.task))
        });
        let mut m = Message::new(
            head.id.clone().unwrap_or_else(new_id),
            head.task.clone(),
            head.args.clone(),
            head.kwargs.clone(),
            queue.unwrap_or_else(|| "default".into()),
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
