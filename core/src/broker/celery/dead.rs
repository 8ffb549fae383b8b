//! Quarantine and dead letters on Celery's layout: which bytes on a Celery
//! queue a headway consumer refuses, why, and how a dead letter is kept.
//!
//! [`decode`] is to Celery's layout what [`crate::task::dead::decode`] is to
//! headway's own: one decoder, the cheapest refusal first, the same reasons
//! ([`crate::task::DeadLetter::reason`]) for the same kinds of input. Checked
//! in this order, so nothing big is parsed and nothing is deserialised but
//! JSON: the size cap, a pickle's protocol byte, that it starts like a JSON
//! object, the JSON, the content type (only `application/json`: a pickle
//! envelope is never unpickled, since nothing here can), another protocol
//! (headway's own message, Celery's task protocol 1), the task name and id,
//! then the body (base64, JSON `[args, kwargs, embed]`).
//!
//! A dead letter is kept as `<header JSON>\n<bytes>` — the same form as on
//! headway's own layout, so both read back the same way — in the list
//! `headway.celery.dead:<queue>` (the queue's Celery name), newest at the
//! head, capped at [`crate::task::DEAD_KEPT`].

use serde_json::Value;

use super::b64;
use super::codec::{Decoded, Sender};
use crate::task::dead::{DEAD_PREFIX_BYTES, DeadLetter, Undecodable};

/// How long a reason or an id taken from a message may be: as on headway's
/// own layout, enough to read, short enough that one bad message cannot
/// flood a log line.
const TEXT_MAX: usize = 200;

fn cut(s: &str) -> String {
    crate::task::spec::truncate(s.to_string(), TEXT_MAX)
}

fn refuse(reason: impl Into<String>, id: Option<String>) -> Undecodable {
    Undecodable {
        reason: cut(&reason.into()),
        id,
    }
}

fn text(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).filter(|s| !s.is_empty()).map(cut)
}

/// Decodes one envelope as it sits on a Celery queue, or says why it is to
/// be quarantined. `max_bytes` is the size cap
/// ([`crate::task::MAX_MESSAGE_BYTES`] by default).
pub fn decode(sender: &Sender, raw: &[u8], max_bytes: usize) -> Result<Decoded, Undecodable> {
    crate::task::dead::sniff(raw, max_bytes)?;
    let env: Value = match serde_json::from_slice(raw) {
        Ok(v) => v,
        Err(e) => return Err(refuse(format!("bad JSON: {e}"), None)),
    };
    let Value::Object(o) = &env else {
        return Err(refuse("not JSON: not an object", None));
    };
    let headers = o.get("headers");
    let id = text(headers.and_then(|h| h.get("id"))).or_else(|| text(o.get("id")));
    // headway's own wire form (no envelope) on a Celery queue.
    if !o.contains_key("body") && o.contains_key("task") {
        return Err(refuse(
            "wrong protocol: a headway message (not a kombu envelope) on a Celery queue",
            id,
        ));
    }
    let ct = o.get("content-type").and_then(Value::as_str).unwrap_or("");
    if ct != "application/json" {
        return Err(refuse(
            format!(
                "content type not allowed: {:?} (never deserialised; only JSON is accepted)",
                cut(ct)
            ),
            id,
        ));
    }
    let task = headers.and_then(|h| h.get("task"));
    match task {
        Some(Value::String(s)) if !s.is_empty() => {}
        Some(Value::String(_)) => return Err(refuse("no task name", id)),
        Some(v) if !v.is_null() => {
            return Err(refuse("no task name: `headers.task` is not a string", id));
        }
        _ => {
            // No task header: Celery's protocol 1 keeps the task in the body.
            let v1 = body_json(o).ok().and_then(|b| {
                let b = b.as_object()?;
                Some((b.contains_key("task"), text(b.get("id"))))
            });
            return Err(match v1 {
                Some((true, v1_id)) => refuse(
                    "wrong protocol: Celery task protocol 1 (only protocol 2 is read)",
                    id.or(v1_id),
                ),
                _ => refuse("no task name", id),
            });
        }
    }
    if text(headers.and_then(|h| h.get("id"))).is_none() {
        return Err(refuse("no id", None));
    }
    let body = match body_json(o) {
        Ok(b) => b,
        Err(why) => return Err(refuse(format!("bad message: {why}"), id)),
    };
    sender
        .decode_value(env, Some(body))
        .map_err(|e| refuse(format!("bad message: {e}"), id))
}

/// The body as JSON, read as the codec reads it (base64 when
/// `properties.body_encoding` says so), or why it cannot be.
fn body_json(o: &serde_json::Map<String, Value>) -> Result<Value, &'static str> {
    let base64 = o
        .get("properties")
        .and_then(|p| p.get("body_encoding"))
        .and_then(Value::as_str)
        == Some("base64");
    let Some(Value::String(s)) = o.get("body") else {
        return Err("the body is not a string");
    };
    if base64 {
        let bytes = b64::decode(s.as_bytes()).ok_or("the body is not base64")?;
        serde_json::from_slice(&bytes).map_err(|_| "the body is not JSON")
    } else {
        serde_json::from_str(s).map_err(|_| "the body is not JSON")
    }
}

/// A quarantined message's dead letter as the Celery layout keeps it:
/// `<header JSON>\n<prefix>`, the header's keys in the order `at`,
/// `reason`, `step`, `id`, `size` (what the re-queue script reads: the step
/// to go back to, the id to match, and whether the bytes are whole). Only
/// the first [`DEAD_PREFIX_BYTES`] are kept, with the size: bytes no
/// consumer could read are kept to be looked at, and a 50 MB one must not
/// cost the broker 50 MB more for as long as it is kept.
pub(crate) fn element(at: i64, reason: &str, step: u8, id: Option<&str>, raw: &[u8]) -> Vec<u8> {
    let kept = &raw[..raw.len().min(DEAD_PREFIX_BYTES)];
    assemble(at, reason, step, id, raw.len(), kept)
}

/// A poison pill's dead letter: as [`element`], with the whole message
/// (a message that was read and ran, under the size cap), so a re-queue
/// can put it back as it was.
pub(crate) fn element_whole(
    at: i64,
    reason: &str,
    step: u8,
    id: Option<&str>,
    raw: &[u8],
) -> Vec<u8> {
    assemble(at, reason, step, id, raw.len(), raw)
}

fn assemble(
    at: i64,
    reason: &str,
    step: u8,
    id: Option<&str>,
    size: usize,
    kept: &[u8],
) -> Vec<u8> {
    let mut head = serde_json::Map::new();
    head.insert("at".into(), Value::from(at));
    head.insert("reason".into(), Value::from(reason));
    head.insert("step".into(), Value::from(step));
    if let Some(id) = id {
        head.insert("id".into(), Value::from(id));
    }
    head.insert("size".into(), Value::from(size));
    let mut out = serde_json::to_vec(&Value::Object(head)).expect("a header always serialises");
    out.push(b'\n');
    out.extend_from_slice(kept);
    out
}

/// A dead letter read back.
pub(crate) fn letter(queue: &str, el: &[u8]) -> DeadLetter {
    super::super::dead::read(queue, el, "unknown: a dead letter without a header")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sender() -> Sender {
        Sender::this_process("celery")
    }

    fn env(ct: &str, headers: &str, body: &str) -> Vec<u8> {
        format!(
            r#"{{"body": "{body}", "content-encoding": "utf-8", "content-type": "{ct}", "headers": {headers}, "properties": {{"body_encoding": "base64", "delivery_tag": "t"}}}}"#
        )
        .into_bytes()
    }

    fn why(raw: &[u8]) -> Undecodable {
        decode(&sender(), raw, 4096).unwrap_err()
    }

    #[test]
    fn refuses_each_kind_with_its_reason() {
        let s = sender();
        let m = crate::task::Message::new(
            "i1".into(),
            "t".into(),
            vec![],
            Default::default(),
            "default".into(),
        );
        let good = s.encode(&m, 0).json;
        assert_eq!(decode(&s, good.as_bytes(), 4096).unwrap().message.id, "i1");
        assert!(
            decode(&s, good.as_bytes(), 10)
                .unwrap_err()
                .reason
                .starts_with("too large")
        );
        assert!(why(b"").reason.starts_with("not JSON: empty"));
        assert!(why(b"\x00\xff").reason.starts_with("not JSON"));
        assert!(
            why(b"\x80\x04\x95")
                .reason
                .starts_with("content type not allowed: a pickle")
        );
        assert!(why(b"{\"body\":").reason.starts_with("bad JSON"));
        let h = r#"{"task": "t", "id": "x1"}"#;
        let pickled = why(&env("application/x-python-serialize", h, "gAR="));
        assert!(
            pickled
                .reason
                .starts_with("content type not allowed: \"application/x-python-serialize\""),
            "{}",
            pickled.reason
        );
        assert_eq!(pickled.id.as_deref(), Some("x1"));
        let b64 = why(&env("application/json", h, "!!not base64!!"));
        assert_eq!(b64.reason, "bad message: the body is not base64");
        let args = b64::encode(b"[[1], {}, {}]");
        let no_task = why(&env("application/json", r#"{"id": "x2"}"#, &args));
        assert_eq!(
            (no_task.reason.as_str(), no_task.id.as_deref()),
            ("no task name", Some("x2"))
        );
        let v1 = b64::encode(br#"{"task": "add", "id": "v1-1", "args": [1, 2], "kwargs": {}}"#);
        let p1 = why(&env("application/json", "{}", &v1));
        assert!(
            p1.reason
                .starts_with("wrong protocol: Celery task protocol 1")
        );
        assert_eq!(p1.id.as_deref(), Some("v1-1"));
        let no_id = why(&env("application/json", r#"{"task": "t"}"#, &args));
        assert_eq!(no_id.reason, "no id");
        let own = why(br#"{"id":"h1","task":"t","queue":"default"}"#);
        assert!(own.reason.starts_with("wrong protocol: a headway message"));
        let short = why(&env("application/json", h, &b64::encode(b"[[1], {}]")));
        assert!(
            short.reason.starts_with("bad message: "),
            "{}",
            short.reason
        );
    }

    #[test]
    fn mutated_envelopes_never_panic_and_reasons_stay_bounded() {
        let s = sender();
        let m = crate::task::Message::new(
            "i1".into(),
            "t".into(),
            vec![serde_json::json!([1, {"a": "é"}])],
            Default::default(),
            "default".into(),
        );
        let good = s.encode(&m, 0).json.into_bytes();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..5000 {
            let mut b = good.clone();
            for _ in 0..(x % 4 + 1) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if b.is_empty() {
                    break;
                }
                let i = (x as usize) % b.len();
                match x % 3 {
                    0 => b[i] = (x >> 8) as u8,
                    1 => {
                        b.remove(i);
                    }
                    _ => b.truncate(i.max(1)),
                }
            }
            if let Err(e) = decode(&s, &b, 1 << 20) {
                assert!(!e.reason.is_empty() && e.reason.len() <= TEXT_MAX + 3);
                assert!(e.id.is_none_or(|id| id.len() <= TEXT_MAX + 3));
            }
        }
    }

    #[test]
    fn letters_round_trip() {
        let el = element(7, "bad JSON: \"x\"", 3, Some("a\"b"), b"\x00raw\nbytes");
        let d = letter("q", &el);
        assert_eq!(
            (d.at, d.id.as_deref(), d.reason.as_str(), d.raw.as_slice()),
            (7, Some("a\"b"), "bad JSON: \"x\"", &b"\x00raw\nbytes"[..])
        );
        assert!(el.starts_with(br#"{"at":7,"reason":"#));
        assert_eq!(letter("q", b"junk").raw, b"junk");
        // A quarantined message keeps a prefix and its size; a poison pill
        // keeps its bytes whole.
        let big = vec![b'x'; DEAD_PREFIX_BYTES + 10];
        let el = element(1, "too large", 0, None, &big);
        let d = letter("q", &el);
        assert_eq!(d.raw.len(), DEAD_PREFIX_BYTES);
        assert_eq!(d.size, big.len());
        assert!(d.truncated());
        let head: Value =
            serde_json::from_slice(&el[..el.iter().position(|c| *c == b'\n').unwrap()]).unwrap();
        assert_eq!(head["size"], Value::from(big.len()));
        assert_eq!(
            letter("q", &element_whole(1, "lost", 0, None, &big))
                .raw
                .len(),
            big.len()
        );
    }
}
