//! Dead letters: what a broker sets aside instead of running, and why.
//!
//! Two things end up here rather than loop or vanish:
//! - **Quarantine**: bytes on a queue that are not a message headway will
//!   run — raw bytes, bad JSON, no task name, another protocol's envelope, a
//!   content type other than JSON such as pickle (never deserialised), or
//!   more than the size cap. [`decode`] is the one decoder every headway
//!   layout uses, so each refuses the same inputs for the same reasons.
//! - **Poison pills**: a message whose consumer was lost while holding it
//!   [`MAX_DELIVERIES`] times ("worker lost ×3"), found when the broker
//!   recovers the lost consumer's claims.
//!
//! Decoding is JSON into plain data and nothing else: no name in a message
//! is imported, resolved or looked up anywhere but the app's own registry
//! (a map), so no message can make headway run code it was not given.

use serde_json::Value;

use super::message::Message;

/// The size cap for one message: 16 MiB. Above any sane task payload (Celery
/// and kombu set none; SQS caps at 256 KiB, Pub/Sub at 10 MB) and far below
/// what stalls a Redis (its bulk strings cap at 512 MB): a message bigger
/// than this is a bug or an attack, and a worker must not load it.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// How many times a consumer may be lost holding one message before it is
/// dead-lettered as a poison pill: 3, between BullMQ's
/// `maxStalledCount` (1) and RabbitMQ quorum queues' `delivery-limit` (20):
/// one crash can be bad luck, three in a row is the message.
pub const MAX_DELIVERIES: u32 = 3;

/// How many dead letters a queue keeps (the oldest go first): 10 000, enough
/// to see a pattern, bounded so a flood of junk cannot fill the broker.
pub const DEAD_KEPT: usize = 10_000;

/// How much of a quarantined message's bytes its dead letter keeps: the
/// first 64 KiB. Enough to see what the bytes were (a header, the start of a
/// body); never the whole of a message that was refused for its size or
/// shape, so a flood of 50 MB junk cannot fill the broker's memory through
/// its dead letters. Every layout (memory, headway's Redis layout,
/// Celery's) keeps this prefix with the message's full size and the reason.
/// A poison pill ("worker lost ×N": a message that decoded, within the size
/// cap) is kept whole, so it can be re-queued once the task is fixed.
pub const DEAD_PREFIX_BYTES: usize = 64 * 1024;

/// The part of a quarantined message's bytes a dead letter keeps (see
/// [`DEAD_PREFIX_BYTES`]).
pub fn kept_prefix(raw: &[u8]) -> &[u8] {
    &raw[..raw.len().min(DEAD_PREFIX_BYTES)]
}

/// How many dead letters a listing answers when not told how many: 100, the
/// newest — a screenful to see why messages are failing; the count says how
/// many more there are. Python's `dead_letters`, Node's `deadLetters` and
/// the admin all take it from here.
pub const DEAD_LISTED: usize = 100;

/// One message set aside rather than run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The queue it was claimed from.
    pub queue: String,
    /// Its task id, when it could be read.
    pub id: Option<String>,
    /// Why: `"too large: …"`, `"not JSON: …"`, `"bad JSON: …"`,
    /// `"content type not allowed: …"`, `"wrong protocol: …"`,
    /// `"no task name"`, `"no id"`, `"bad message: …"` or
    /// `"worker lost ×N"`.
    pub reason: String,
    /// When it was set aside (ms since the epoch, the broker's clock).
    pub at: i64,
    /// Its bytes as they were on the queue, so it can be inspected or
    /// re-queued as it was — for a quarantined message only the first
    /// [`DEAD_PREFIX_BYTES`] of them (then `raw.len() < size`).
    pub raw: Vec<u8>,
    /// How many bytes the message had on the queue (`raw` may be a prefix).
    pub size: usize,
}

impl DeadLetter {
    /// Whether `raw` is only a prefix of the message (it cannot be
    /// re-queued as it was).
    pub fn truncated(&self) -> bool {
        self.raw.len() < self.size
    }

    /// The letter with `size` set to its whole `raw`'s length (a letter
    /// that keeps all its bytes).
    pub fn sized(mut self) -> DeadLetter {
        self.size = self.raw.len();
        self
    }
}

/// Why bytes on a queue are not a message headway will run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undecodable {
    /// The reason a dead letter records (see [`DeadLetter::reason`]).
    pub reason: String,
    /// The task id, when the bytes were JSON with one.
    pub id: Option<String>,
}

/// How long a reason or an id taken from a message may be: enough to read,
/// short enough that a log line cannot be flooded by one bad message.
const TEXT_MAX: usize = 200;

fn cut(s: &str) -> String {
    super::spec::truncate(s.to_string(), TEXT_MAX)
}

fn refuse(reason: impl Into<String>, id: Option<String>) -> Undecodable {
    Undecodable {
        reason: cut(&reason.into()),
        id,
    }
}

/// The reason a poison pill is dead-lettered with: `worker lost ×N`.
pub fn lost_reason(times: u32) -> String {
    format!("worker lost \u{d7}{times}")
}

/// Decodes headway's own wire form (the JSON of [`Message`]), or says why
/// the bytes are to be quarantined.
///
/// Checked in this order, so the cheapest refusal wins and nothing big is
/// parsed: the size cap (`max_bytes`), a pickle's protocol byte, that it
/// starts like a JSON object, then the JSON itself. A valid message with an
/// empty task name or id is refused too: nothing could run it or store its
/// result. Parsing is serde_json's, whose recursion limit (128) bounds the
/// depth, and whose allocations are proportional to the input.
pub fn decode(raw: &[u8], max_bytes: usize) -> Result<Message, Undecodable> {
    sniff(raw, max_bytes)?;
    match Message::from_json(raw) {
        Ok(m) if m.task.is_empty() => Err(refuse("no task name", non_empty(m.id))),
        Ok(m) if m.id.is_empty() => Err(refuse("no id", None)),
        Ok(m) => Ok(m),
        Err(e) => Err(diagnose(raw, &e)),
    }
}

/// The checks both decoders (headway's and the Celery layout's) make before
/// parsing: the size cap, then the first byte — nothing, a pickle (never
/// deserialised), or anything but a JSON object is refused unread.
pub fn sniff(raw: &[u8], max_bytes: usize) -> Result<(), Undecodable> {
    if raw.len() > max_bytes {
        return Err(refuse(
            format!(
                "too large: {} bytes (the cap is {max_bytes} bytes)",
                raw.len()
            ),
            None,
        ));
    }
    let first = raw.iter().position(|b| !b.is_ascii_whitespace());
    match first.map(|i| raw[i]) {
        None => return Err(refuse("not JSON: empty", None)),
        // Pickle protocols 2 to 5 open with PROTO (0x80): Celery's
        // `application/x-python-serialize`. Never deserialised.
        Some(0x80) => {
            return Err(refuse(
                "content type not allowed: a pickle (never deserialised; only JSON is accepted)",
                None,
            ));
        }
        Some(b'{') => {}
        Some(_) => {
            return Err(refuse(
                "not JSON: raw bytes that do not start a JSON object",
                None,
            ));
        }
    }
    Ok(())
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then(|| cut(&s))
}

/// Why bytes that start like an object are not a message: the slow path,
/// taken only for what is quarantined.
fn diagnose(raw: &[u8], typed: &serde_json::Error) -> Undecodable {
    let v: Value = match serde_json::from_slice(raw) {
        Ok(v) => v,
        Err(e) => return refuse(format!("bad JSON: {e}"), None),
    };
    let Value::Object(o) = &v else {
        return refuse("not JSON: not an object", None);
    };
    // The id: headway's at the top, a kombu envelope's in its headers.
    let id = o
        .get("id")
        .or_else(|| o.get("headers").and_then(|h| h.get("id")))
        .and_then(Value::as_str)
        .and_then(|s| non_empty(s.to_string()));
    // A kombu envelope (Celery's layout) on a headway queue: say which, and
    // never look inside a body whose content type is not JSON.
    if o.contains_key("content-type") || (o.contains_key("body") && o.contains_key("properties")) {
        let ct = o.get("content-type").and_then(Value::as_str).unwrap_or("");
        if ct != "application/json" {
            return refuse(
                format!(
                    "content type not allowed: {:?} (never deserialised; only JSON is accepted)",
                    cut(ct)
                ),
                id,
            );
        }
        return refuse(
            "wrong protocol: a kombu (Celery) envelope on a headway queue",
            id,
        );
    }
    match o.get("task") {
        None | Some(Value::Null) => return refuse("no task name", id),
        Some(Value::String(s)) if s.is_empty() => return refuse("no task name", id),
        Some(Value::String(_)) => {}
        Some(_) => return refuse("no task name: `task` is not a string", id),
    }
    match o.get("id") {
        Some(Value::String(s)) if !s.is_empty() => {}
        _ => return refuse("no id", None),
    }
    refuse(format!("bad message: {typed}"), id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn why(raw: &[u8]) -> String {
        decode(raw, 1024).unwrap_err().reason
    }

    #[test]
    fn refuses_each_kind_with_its_reason() {
        let good = br#"{"id":"a","task":"t","queue":"q"}"#;
        assert_eq!(decode(good, 1024).unwrap().task, "t");
        assert!(why(&[b'{'; 2000]).starts_with("too large: 2000 bytes"));
        assert!(why(b"").starts_with("not JSON"));
        assert!(why(b"\x00\xff\xfe").starts_with("not JSON"));
        assert!(why(b"\x80\x04\x95\x10").starts_with("content type not allowed: a pickle"));
        assert!(why(b"cos\nsystem\n(S'touch x'\ntR.").starts_with("not JSON"));
        assert!(why(b"{\"id\":").starts_with("bad JSON"));
        assert!(why(b"[1,2]").starts_with("not JSON"));
        let e = decode(br#"{"id":"a","queue":"q"}"#, 1024).unwrap_err();
        assert_eq!(
            (e.reason.as_str(), e.id.as_deref()),
            ("no task name", Some("a"))
        );
        assert_eq!(why(br#"{"id":"a","task":"","queue":"q"}"#), "no task name");
        assert_eq!(why(br#"{"id":"","task":"t","queue":"q"}"#), "no id");
        assert!(why(br#"{"id":"a","task":"t"}"#).starts_with("bad message: missing field `queue`"));
        assert!(
            why(br#"{"body":"gAR=","content-type":"application/x-python-serialize","properties":{}}"#)
                .starts_with("content type not allowed: \"application/x-python-serialize\"")
        );
        assert!(
            why(br#"{"body":"e30=","content-type":"application/json","properties":{}}"#)
                .starts_with("wrong protocol")
        );
        assert_eq!(lost_reason(3), "worker lost ×3");
    }

    #[test]
    fn reasons_and_ids_are_bounded() {
        let long = format!(r#"{{"id":"{}","queue":"q"}}"#, "x".repeat(5000));
        let e = decode(long.as_bytes(), 1 << 20).unwrap_err();
        assert!(e.id.unwrap().len() <= TEXT_MAX + 3);
        assert!(e.reason.len() <= TEXT_MAX + 3);
    }
}
