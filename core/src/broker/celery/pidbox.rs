//! Revoke over Celery's remote-control broadcast (kombu's pidbox).
//!
//! `app.control.revoke(id)` publishes one kombu envelope on the fanout
//! exchange `celery.pidbox`, which kombu's Redis transport turns into
//! `PUBLISH /<db>.celery.pidbox <envelope>`. The body is
//! `{"method": "revoke", "arguments": {"task_id": id | [ids], "terminate":
//! false, "signal": "SIGTERM"}, "destination": null | [nodes], "pattern":
//! null, "matcher": null}`; the headers are `{"clock": n, "expires":
//! <unix seconds deadline, or 0 for none>}`. Nothing is stored: a worker not
//! subscribed at that moment never hears it, so every worker keeps its own
//! expiring revoked set (Celery's `LimitedSet`, 3 h).

use serde_json::{Value, json};

use super::b64;
use super::pyjson::{dumps, write_str, write_value};
use crate::task::message::new_id;
use crate::task::signal::{SIGTERM, from_wire, to_wire};

/// The channel a revoke is published on: `/<db>.celery.pidbox`, behind the
/// transport's `global_keyprefix` as kombu prefixes PUBLISH.
pub fn channel(prefix: &str, db: i64) -> String {
    format!("{prefix}/{db}.celery.pidbox")
}

/// The envelope of a revoke broadcast to every worker; with `terminate`
/// (a signal number) it asks whoever runs one of `ids` to stop it with that
/// signal, sent by name where it has one (`"SIGKILL"`), as Celery's
/// `revoke(terminate=True, signal=...)` sends it. `clock` is the sender's
/// Lamport clock. `expires` 0: Celery's own broadcast gives a one-second
/// deadline by the sender's clock, which drops the revoke on any worker
/// whose clock is a second ahead; 0 is kombu's "no deadline".
pub fn revoke_envelope(ids: &[String], terminate: Option<i32>, clock: u64) -> String {
    let body = revoke_body(ids, terminate);
    let mut out = String::with_capacity(body.len() * 2 + 256);
    out.push_str("{\"body\": ");
    write_str(&mut out, &b64::encode(body.as_bytes()));
    out.push_str(", \"content-encoding\": \"utf-8\", \"content-type\": \"application/json\", \"headers\": {\"clock\": ");
    out.push_str(&clock.to_string());
    out.push_str(", \"expires\": 0}, \"properties\": {\"delivery_mode\": 2, \"delivery_info\": {\"exchange\": \"celery.pidbox\", \"routing_key\": \"\"}, \"priority\": 0, \"body_encoding\": \"base64\", \"delivery_tag\": ");
    write_str(&mut out, &new_id());
    out.push_str("}}");
    out
}

/// The body of a revoke broadcast (see [`revoke_envelope`]), as JSON
/// text: what an AMQP transport publishes as the message body itself.
pub fn revoke_body(ids: &[String], terminate: Option<i32>) -> String {
    let task_id = if ids.len() == 1 {
        json!(ids[0])
    } else {
        json!(ids)
    };
    let mut body = String::from("{\"method\": \"revoke\", \"arguments\": {\"task_id\": ");
    write_value(&mut body, &task_id);
    body.push_str(", \"terminate\": ");
    body.push_str(if terminate.is_some() { "true" } else { "false" });
    body.push_str(", \"signal\": ");
    write_value(&mut body, &to_wire(terminate.unwrap_or(SIGTERM)));
    body.push_str("}, \"destination\": null, \"pattern\": null, \"matcher\": null}");
    body
}

/// A control command read off the pidbox channel.
#[derive(Debug, Clone, PartialEq)]
pub struct Control {
    /// `revoke`, `terminate`, `ping`, ...
    pub method: String,
    /// The ids a revoke names.
    pub ids: Vec<String>,
    /// Whether a revoke asks to terminate running tasks.
    pub terminate: bool,
    /// The signal it names (`"SIGKILL"`, `"KILL"` or a number), if one
    /// this side knows; a terminate without one uses SIGTERM, as Celery's
    /// workers do.
    pub signal: Option<i32>,
    /// The nodes it is for (`None`: every node).
    pub destination: Option<Vec<String>>,
    /// Its `expires` header (Unix seconds; 0: none).
    pub expires: f64,
    /// Where the sender waits for replies (`reply_to`: the exchange and
    /// the routing key), and the ticket a reply carries; `None` for a
    /// broadcast that wants none (a revoke).
    pub reply_to: Option<(String, String)>,
    pub ticket: Option<String>,
    /// Its arguments, as sent.
    pub arguments: Value,
}

impl Control {
    /// Whether this node should act on it at `now_secs`.
    pub fn is_for(&self, node: &str, now_secs: f64) -> bool {
        let live = self.expires <= 0.0 || now_secs <= self.expires;
        let ours = self
            .destination
            .as_ref()
            .is_none_or(|d| d.iter().any(|n| n == node));
        live && ours
    }
}

/// Reads a pidbox envelope; `None` when it is not one.
pub fn decode(raw: &[u8]) -> Option<Control> {
    let env: Value = serde_json::from_slice(raw).ok()?;
    let body = env.get("body")?.as_str()?;
    let body: Value = if env
        .get("properties")
        .and_then(|p| p.get("body_encoding"))
        .and_then(Value::as_str)
        == Some("base64")
    {
        serde_json::from_slice(&b64::decode(body.as_bytes())?).ok()?
    } else {
        serde_json::from_str(body).ok()?
    };
    let method = body.get("method")?.as_str()?.to_string();
    let args = body.get("arguments").cloned().unwrap_or(Value::Null);
    let ids = match args.get("task_id") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    };
    let destination = body.get("destination").and_then(Value::as_array).map(|a| {
        a.iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    });
    let reply_to = body.get("reply_to").and_then(|r| {
        Some((
            r.get("exchange")?.as_str()?.to_string(),
            r.get("routing_key")?.as_str()?.to_string(),
        ))
    });
    Some(Control {
        reply_to,
        ticket: body
            .get("ticket")
            .and_then(Value::as_str)
            .map(str::to_string),
        method,
        ids,
        terminate: args.get("terminate").is_some_and(truthy),
        signal: args.get("signal").and_then(from_wire),
        arguments: args.clone(),
        destination,
        expires: env
            .get("headers")
            .and_then(|h| h.get("expires"))
            .and_then(Value::as_f64)
            .unwrap_or(0.0),
    })
}

/// Whether `v` is true as Python reads it: Flower sends `"terminate": 1`
/// (its `strtobool` answers 1, passed straight to `control.revoke`), Celery
/// `true`; a non-zero number, a non-empty string, list or object count too.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// The body of a reply to a control command, as kombu's
/// `Mailbox._publish_reply` sends it: `{node: reply}`, as JSON text.
pub fn reply_body(node: &str, reply: &Value) -> String {
    let mut body = String::new();
    write_value(&mut body, &json!({ node: reply }));
    body
}

/// The envelope of a reply to a control command on kombu's Redis
/// transport, as `Mailbox._publish_reply` writes it: the body
/// `{node: reply}`, the ticket and the sender's Lamport clock in the
/// headers, bound for the reply exchange with the asker's routing key.
pub(crate) fn reply_envelope(r: &super::node::ControlReply) -> String {
    let env = json!({
        "body": b64::encode(r.body.as_bytes()),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {"ticket": r.ticket, "clock": r.clock},
        "properties": {
            "delivery_mode": 1,
            "delivery_info": {"exchange": r.exchange, "routing_key": r.routing_key},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": new_id(),
        },
    });
    dumps(&env)
}

/// The set kombu's Redis transport keeps an exchange's bindings in.
pub fn bindings_key(prefix: &str, exchange: &str) -> String {
    format!("{prefix}_kombu.binding.{exchange}")
}

/// The queues among an exchange's `bindings` (kombu's members,
/// `routing_key\x06\x16pattern\x06\x16queue`) that a direct publish
/// with `routing_key` reaches.
pub fn bound_queues(bindings: &[String], routing_key: &str) -> Vec<String> {
    let mut out: Vec<String> = bindings
        .iter()
        .filter_map(|m| {
            let mut parts = m.split("\x06\x16");
            let rk = parts.next()?;
            let _pattern = parts.next()?;
            let queue = parts.next()?;
            (rk == routing_key && !queue.is_empty()).then(|| queue.to_string())
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The body of a revoke as JSON text, for tests and logs.
pub fn describe(c: &Control) -> String {
    dumps(&json!({"method": c.method, "ids": c.ids}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_celerys_own_revoke() {
        // Captured from `app.control.revoke(id)` on Celery 5.5.3.
        let raw = br#"{"body": "eyJtZXRob2QiOiAicmV2b2tlIiwgImFyZ3VtZW50cyI6IHsidGFza19pZCI6ICI2MTkyYTNjNS1hZWVmLTQ1YTAtYjkzMS1jNjNhZmM3MmVjZTAiLCAidGVybWluYXRlIjogZmFsc2UsICJzaWduYWwiOiAiU0lHVEVSTSJ9LCAiZGVzdGluYXRpb24iOiBudWxsLCAicGF0dGVybiI6IG51bGwsICJtYXRjaGVyIjogbnVsbH0=", "content-encoding": "utf-8", "content-type": "application/json", "headers": {"clock": 1, "expires": 1796202274.6628244}, "properties": {"delivery_mode": 2, "delivery_info": {"exchange": "celery.pidbox", "routing_key": ""}, "priority": 0, "body_encoding": "base64", "delivery_tag": "f4e3cdf1-e623-4aa7-bb38-aada6483a72c"}}"#;
        let c = decode(raw).unwrap();
        assert_eq!(c.method, "revoke");
        assert_eq!(
            c.ids,
            vec!["6192a3c5-aeef-45a0-b931-c63afc72ece0".to_string()]
        );
        assert!(!c.terminate && c.destination.is_none());
        assert!(c.is_for("x", 1796202274.0));
        assert!(!c.is_for("x", 1796202275.0));
    }

    /// The body (base64 inside the envelope) of `env`, as text.
    fn body_of(env: &str) -> String {
        let v: Value = serde_json::from_str(env).unwrap();
        String::from_utf8(b64::decode(v["body"].as_str().unwrap().as_bytes()).unwrap()).unwrap()
    }

    #[test]
    fn writes_the_body_celery_writes() {
        // Captured from `app.control.revoke(id, terminate=True,
        // signal="SIGKILL")` on Celery 5.5.3 (`app.control.terminate(id)`
        // sends the same with "SIGTERM").
        let raw = br#"{"body": "eyJtZXRob2QiOiAicmV2b2tlIiwgImFyZ3VtZW50cyI6IHsidGFza19pZCI6ICI2MTkyYTNjNS1hZWVmLTQ1YTAtYjkzMS1jNjNhZmM3MmVjZTAiLCAidGVybWluYXRlIjogdHJ1ZSwgInNpZ25hbCI6ICJTSUdLSUxMIn0sICJkZXN0aW5hdGlvbiI6IG51bGwsICJwYXR0ZXJuIjogbnVsbCwgIm1hdGNoZXIiOiBudWxsfQ==", "content-encoding": "utf-8", "content-type": "application/json", "headers": {"clock": 1, "expires": 1796369717.596125}, "properties": {"delivery_mode": 2, "delivery_info": {"exchange": "celery.pidbox", "routing_key": ""}, "priority": 0, "body_encoding": "base64", "delivery_tag": "9bb21e7a-0b4b-486e-a090-d034071687d7"}}"#;
        let c = decode(raw).unwrap();
        let id = vec!["6192a3c5-aeef-45a0-b931-c63afc72ece0".to_string()];
        assert_eq!((c.method.as_str(), &c.ids), ("revoke", &id));
        assert!(c.terminate);
        assert_eq!(c.signal, Some(9));
        // What headway writes is the same body, byte for byte, with and
        // without terminate (the plain one is the capture above).
        let captured = body_of(std::str::from_utf8(raw).unwrap());
        assert_eq!(body_of(&revoke_envelope(&id, Some(9), 1)), captured);
        let plain = captured
            .replace("true", "false")
            .replace("SIGKILL", "SIGTERM");
        assert_eq!(body_of(&revoke_envelope(&id, None, 1)), plain);
        // A signal without a name here goes as its number, which Celery's
        // `signum` takes as it is.
        assert!(body_of(&revoke_envelope(&id, Some(40), 1)).contains(r#""signal": 40}"#));
    }

    #[test]
    fn reads_a_celery_terminate() {
        // `revoke(id, terminate=True)`, and Celery's names as a client may
        // write them: "KILL" (its `signum` adds the SIG), or a number.
        for (signal, want) in [
            (r#""SIGTERM""#, Some(15)),
            (r#""KILL""#, Some(9)),
            ("2", Some(2)),
            ("null", None),
            (r#""SIGNOPE""#, None),
        ] {
            let body = format!(
                r#"{{"method": "revoke", "arguments": {{"task_id": ["a", "b"], "terminate": true, "signal": {signal}}}, "destination": null, "pattern": null, "matcher": null}}"#
            );
            let env = json!({
                "body": b64::encode(body.as_bytes()),
                "headers": {"clock": 1, "expires": 0},
                "properties": {"body_encoding": "base64"},
            });
            let c = decode(env.to_string().as_bytes()).unwrap();
            assert!(c.terminate, "{signal}");
            assert_eq!(c.ids, vec!["a".to_string(), "b".to_string()]);
            assert_eq!(c.signal, want, "{signal}");
        }
    }

    #[test]
    fn reads_an_inspect_and_writes_the_reply_kombu_reads() {
        // The body `celery inspect ping` sends (Celery 5.5), reply_to and
        // ticket included.
        let body = r#"{"method": "ping", "arguments": {}, "destination": null, "pattern": null, "matcher": null, "ticket": "t-1", "reply_to": {"exchange": "reply.celery.pidbox", "routing_key": "oid-9"}}"#;
        let env = json!({
            "body": b64::encode(body.as_bytes()),
            "headers": {"clock": 1, "expires": 0},
            "properties": {"body_encoding": "base64"},
        });
        let c = decode(env.to_string().as_bytes()).unwrap();
        assert_eq!(c.method, "ping");
        assert_eq!(c.ticket.as_deref(), Some("t-1"));
        assert_eq!(
            c.reply_to,
            Some(("reply.celery.pidbox".to_string(), "oid-9".to_string()))
        );
        let r = reply_envelope(&super::super::node::ControlReply {
            exchange: "reply.celery.pidbox".into(),
            routing_key: "oid-9".into(),
            ticket: "t-1".into(),
            clock: 4,
            body: reply_body("n@h", &json!({"ok": "pong"})),
        });
        let v: Value = serde_json::from_str(&r).unwrap();
        assert_eq!(v["headers"]["ticket"], "t-1");
        assert_eq!(v["properties"]["delivery_info"]["routing_key"], "oid-9");
        assert_eq!(body_of(&r), r#"{"n@h": {"ok": "pong"}}"#);
        let members = vec![
            "oid-9\x06\x16\x06\x16oid-9.reply.celery.pidbox".to_string(),
            "other\x06\x16\x06\x16other.reply.celery.pidbox".to_string(),
        ];
        assert_eq!(
            bound_queues(&members, "oid-9"),
            vec!["oid-9.reply.celery.pidbox"]
        );
        assert!(bound_queues(&members, "nobody").is_empty());
        assert_eq!(
            bindings_key("p:", "reply.celery.pidbox"),
            "p:_kombu.binding.reply.celery.pidbox"
        );
    }

    #[test]
    fn writes_what_it_reads() {
        let ids = vec!["a".to_string(), "b".to_string()];
        let env = revoke_envelope(&ids, Some(9), 3);
        let c = decode(env.as_bytes()).unwrap();
        assert_eq!(c.ids, ids);
        assert!(c.terminate && c.is_for("n", 1e12));
        assert_eq!(c.signal, Some(9));
        let plain = decode(revoke_envelope(&ids, None, 4).as_bytes()).unwrap();
        assert!(!plain.terminate);
        let body: Value = serde_json::from_str(&env).unwrap();
        assert_eq!(
            body["properties"]["delivery_info"]["exchange"],
            "celery.pidbox"
        );
        assert_eq!(channel("", 0), "/0.celery.pidbox");
        assert!(describe(&c).contains("revoke"));
    }
}
