//! The bodies of headway's fuzz targets, one function per target: every
//! decoder a claim, a revoke broadcast or a result read runs on bytes that
//! someone else wrote.
//!
//! Each takes arbitrary bytes and must not panic, hang or allocate more
//! than a small multiple of its input; each also checks what must hold of
//! what it accepts. They are called by the cargo-fuzz binaries in
//! `fuzz_targets/` (nightly, libFuzzer) and by `core/tests/fuzz_smoke.rs`
//! (stable, seeded mutations), which includes this file as a module — so it
//! uses nothing but `headway_core` and `std`.

use std::sync::OnceLock;

use headway_core::broker::RedisUrl;
use headway_core::broker::celery::{Sender, pidbox, result};
use headway_core::task::dead;
use headway_core::task::{Cron, Rhythm};

/// headway's own message decoder, the one every headway layout claims
/// through: an answer for any bytes; what it accepts re-encodes to bytes it
/// accepts again, with the same id and task; the size cap holds exactly.
pub fn message(data: &[u8]) {
    match dead::decode(data, 1 << 20) {
        Ok(m) => {
            assert!(!m.id.is_empty() && !m.task.is_empty());
            let (id, task, again) = (m.id.clone(), m.task.clone(), m.to_json());
            drop(m);
            let back = dead::decode(&again, usize::MAX).expect("what decodes re-decodes");
            assert_eq!((back.id, back.task), (id, task));
        }
        Err(e) => {
            assert!(!e.reason.is_empty());
            // Bounded: one bad message cannot flood a log line.
            assert!(e.reason.len() <= 210, "{}", e.reason.len());
            assert!(e.id.as_ref().is_none_or(|id| id.len() <= 210));
        }
    }
    if !data.is_empty() {
        let e = dead::decode(data, data.len() - 1).expect_err("over the cap");
        assert!(e.reason.starts_with("too large"), "{}", e.reason);
    }
}

/// Standard base64 with padding, for seeds (the fuzz crate uses nothing
/// but `headway_core` and `std`).
fn b64(text: &str) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in text.as_bytes().chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn sender() -> &'static Sender {
    static S: OnceLock<Sender> = OnceLock::new();
    S.get_or_init(|| Sender::this_process("celery"))
}

/// The Celery envelope decoder (kombu JSON envelope, protocol v2 body):
/// an answer for any bytes; what it accepts encodes to an envelope it
/// accepts again, naming the same run.
pub fn celery(data: &[u8]) {
    let s = sender();
    if let Ok(d) = s.decode(data) {
        let enc = s.encode(&d.message, 1_767_225_600_000);
        let back = s
            .decode(enc.json.as_bytes())
            .expect("what it encodes it decodes");
        assert_eq!(back.message.id, d.message.id);
        assert_eq!(back.message.task, d.message.task);
    }
}

/// The Celery layout's claim-path decoder (`broker::celery::dead::decode`):
/// the size cap, the first-byte sniff (nothing, a pickle, not an object),
/// then the envelope — content type, headway's own form, Celery's protocol
/// 1, the task and id headers, the body (base64 or not) — then the codec.
/// An answer for any bytes; a refusal has a bounded reason; what it accepts
/// encodes to an envelope it accepts again, naming the same run.
pub fn celery_dead(data: &[u8]) {
    let s = sender();
    match headway_core::broker::celery::dead::decode(s, data, 1 << 20) {
        Ok(d) => {
            assert!(!d.message.id.is_empty() && !d.message.task.is_empty());
            let enc = s.encode(&d.message, 1_767_225_600_000);
            let back =
                headway_core::broker::celery::dead::decode(s, enc.json.as_bytes(), usize::MAX)
                    .expect("what it encodes it decodes");
            assert_eq!(back.message.id, d.message.id);
            assert_eq!(back.message.task, d.message.task);
        }
        Err(e) => {
            assert!(!e.reason.is_empty());
            assert!(e.reason.len() <= 210, "{}", e.reason.len());
            assert!(e.id.as_ref().is_none_or(|id| id.len() <= 210));
        }
    }
    if !data.is_empty() {
        let e = headway_core::broker::celery::dead::decode(s, data, data.len() - 1)
            .expect_err("over the cap");
        assert!(e.reason.starts_with("too large"), "{}", e.reason);
    }
}

/// The pidbox (remote control) parser a Celery-layout consumer runs on
/// every broadcast: an answer for any bytes; asking whether a command is
/// for this node never panics, whatever its `expires`; a revoke it reads
/// writes back to one naming the same ids.
pub fn pidbox(data: &[u8]) {
    let Some(c) = pidbox::decode(data) else {
        return;
    };
    for now in [0.0, 1_767_225_600.0, f64::MAX] {
        let _ = c.is_for("celery@host", now);
    }
    let _ = pidbox::describe(&c);
    let signal = c.signal.unwrap_or(headway_core::task::SIGTERM);
    let env = pidbox::revoke_envelope(&c.ids, c.terminate.then_some(signal), 1);
    let back = pidbox::decode(env.as_bytes()).expect("what it writes it reads");
    assert_eq!((back.method.as_str(), &back.ids), ("revoke", &c.ids));
    assert_eq!(back.terminate, c.terminate);
    assert_eq!(back.signal, Some(signal));
}

/// The Celery result meta parser (`celery-task-meta-<id>`), which reads
/// what any Celery process stored: an answer for any bytes; what it reads
/// writes back to a meta it reads again in the same state, for the same id.
pub fn result_meta(data: &[u8]) {
    let Ok(o) = result::decode_meta("fuzz-id", data) else {
        return;
    };
    let meta = result::encode_meta(&o, None, None);
    let back = result::decode_meta("other-id", meta.as_bytes()).expect("what it writes it reads");
    assert_eq!((back.state, &back.id), (o.state, &o.id));
}

/// The time zones the cron target picks from by its first byte (or the
/// input names its own after a newline).
const ZONES: [&str; 6] = [
    "UTC",
    "Europe/Paris",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
    "Pacific/Chatham",
];

/// The cron parser (`Cron::new`) and its search: an answer for any line and
/// zone name; an accepted line's next time is strictly later than the time
/// asked about, and at or after `now` for a first time.
pub fn cron(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (expr, tz) = match text.split_once('\n') {
        Some((e, z)) => (e, z),
        None => (
            text,
            ZONES[data.first().map_or(0, |b| *b as usize) % ZONES.len()],
        ),
    };
    let Ok(c) = Cron::new(expr, tz) else {
        return;
    };
    let r = Rhythm::Cron(c);
    // A few instants the input picks: around 2026, and DST edges.
    let seed = data
        .iter()
        .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(*b as u64));
    let now = 1_767_225_600_000 + (seed % (3 * 365 * 86_400_000)) as i64;
    if let Some(first) = r.first(now) {
        assert!(first >= now, "first {first} before now {now}");
        let mut at = first;
        for _ in 0..3 {
            match r.after(at) {
                Some(next) => {
                    assert!(next > at, "after({at}) = {next}");
                    at = next;
                }
                None => break,
            }
        }
    }
}

/// The Redis URL parser: an answer for any text; a password never shows in
/// what it prints or in a refusal; what it prints parses back to the same
/// place.
pub fn url(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The password part as written, when the input has one: a refusal must
    // not quote it.
    let secret = text
        .split_once("://")
        .and_then(|(_, rest)| rest.rsplit_once('@'))
        .and_then(|(auth, _)| auth.split_once(':'))
        .map(|(_, p)| p)
        .filter(|p| !p.is_empty() && text.matches(*p).count() == 1);
    match RedisUrl::parse(text) {
        Ok(u) => {
            // What it prints does not depend on the password at all.
            let shown = u.to_string();
            let mut other = u.clone();
            other.password = other.password.as_ref().map(|_| "\u{1}another".to_string());
            assert_eq!(shown, other.to_string());
            assert_eq!(format!("{u:?}"), format!("{other:?}"));
            let back = RedisUrl::parse(&shown).expect("what it prints parses");
            assert_eq!(
                (back.tls, &back.host, back.port, back.db),
                (u.tls, &u.host, u.port, u.db)
            );
            assert_eq!(back.username, u.username);
        }
        Err(e) => {
            let why = e.to_string();
            assert!(why.starts_with("invalid `url`"), "{why}");
            // The password's place, marked: a refusal never quotes it. (A
            // `%` in it could change the answer; then nothing is checked.)
            if let Some(p) = secret.filter(|p| !p.contains('%')) {
                let mark = "\u{1}".repeat(p.len());
                if let Err(e2) = RedisUrl::parse(&text.replacen(p, &mark, 1)) {
                    let why2 = e2.to_string();
                    assert!(
                        !why2.contains('\u{1}'),
                        "a refusal quoted the password: {why2:?}"
                    );
                }
            }
        }
    }
}

/// Seeds: valid inputs of each target, the edges of their numbers, and
/// known-bad inputs from other projects' bug trackers.
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    let s = |v: &[&str]| v.iter().map(|x| x.as_bytes().to_vec()).collect::<Vec<_>>();
    match target {
        "message" => s(&[
            r#"{"id":"a","task":"add","args":[1,2],"kwargs":{},"queue":"default"}"#,
            r#"{"id":"b","task":"t","queue":"q","eta":1767225600000,"retries":2,"priority":5,"chain":[{"task":"mul","args":[2]}],"chord":{"key":"k","size":2,"callback":{"id":"c","task":"cb","queue":"q"}}}"#,
            r#"{"id":"c","task":"t","queue":"q","join":{"parts":["a","b"],"immutable":true},"headers":{"x":[1,{"y":null}]}}"#,
            r#"{"body":"W1tdLHt9LHt9XQ==","content-type":"application/x-python-serialize","properties":{}}"#,
            "{\"id\":\"d\",\"task\":\"t\",\"queue\":\"q\",\"args\":[\"\\ud83d\\ude00\",1e308,-0.0]}",
            r#"{"id":"e","task":"t","queue":"q","retries":4294967295,"eta":9223372036854775807,"expires":-9223372036854775808,"chain":[{"task":"n","options":{"countdown":9223372036854775807}}]}"#,
        ]),
        "celery" => {
            let body = "W1s0LCA0XSwge30sIHsiY2FsbGJhY2tzIjogbnVsbCwgImVycmJhY2tzIjogbnVsbCwgImNoYWluIjogbnVsbCwgImNob3JkIjogbnVsbH1d";
            vec![
                format!(
                    r#"{{"body": "{body}", "content-encoding": "utf-8", "content-type": "application/json", "headers": {{"lang": "py", "task": "tasks.add", "id": "6f1d7e5c-3c43-4b0e-9d52-8d7f0d1d4b1a", "shadow": null, "eta": null, "expires": null, "group": null, "group_index": null, "retries": 0, "timelimit": [null, null], "root_id": "6f1d7e5c-3c43-4b0e-9d52-8d7f0d1d4b1a", "parent_id": null, "argsrepr": "(4, 4)", "kwargsrepr": "{{}}", "origin": "gen1@host", "ignore_result": false}}, "properties": {{"correlation_id": "6f1d7e5c-3c43-4b0e-9d52-8d7f0d1d4b1a", "reply_to": "r", "delivery_mode": 2, "delivery_info": {{"exchange": "", "routing_key": "celery"}}, "priority": 0, "body_encoding": "base64", "delivery_tag": "t"}}}}"#
                )
                .into_bytes(),
                format!(
                    r#"{{"body": "{body}", "content-type": "application/json", "headers": {{"task": "t", "id": "x", "eta": "2026-01-01T00:00:00+00:00", "expires": {{"__type__": "datetime", "__value__": "2026-01-02T00:00:00"}}}}, "properties": {{"body_encoding": "base64", "delivery_info": {{"routing_key": "q"}}}}}}"#
                )
                .into_bytes(),
                // Numbers at the edges: an expiry long gone (its re-encoded
                // `expiration` is a difference), an eta past year 9999, a
                // retry count past u32, a countdown of 1e300 s.
                format!(
                    r#"{{"body": "{body}", "content-type": "application/json", "headers": {{"task": "t", "id": "x", "eta": 1e300, "expires": -1e300, "retries": 1e300, "group_index": -1}}, "properties": {{"body_encoding": "base64", "priority": 1e300, "delivery_info": {{"routing_key": "q"}}}}}}"#
                )
                .into_bytes(),
                format!(
                    r#"{{"body": "{edge}", "content-type": "application/json", "headers": {{"task": "t", "id": "y"}}, "properties": {{"body_encoding": "base64"}}}}"#,
                    edge = b64(r#"[[], {}, {"chain": [{"task": "n", "options": {"countdown": 1e300, "eta": "9999-12-31T23:59:59.999999+00:00", "expires": -1e300}}], "chord": null}]"#)
                )
                .into_bytes(),
            ]
        }
        "celery_dead" => {
            let mut v = seeds("celery");
            v.extend(s(&[
                // Protocol 1: the task in the body, no task header.
                r#"{"body": "eyJ0YXNrIjogInQiLCAiaWQiOiAiaSIsICJhcmdzIjogW10sICJrd2FyZ3MiOiB7fX0=", "content-type": "application/json", "headers": {}, "properties": {"body_encoding": "base64"}}"#,
                // A pickle envelope, and a bare pickle.
                r#"{"body": "gAR9lC4=", "content-type": "application/x-python-serialize", "headers": {"task": "t", "id": "p"}, "properties": {"body_encoding": "base64"}}"#,
                // headway's own form on a Celery queue.
                r#"{"id":"a","task":"add","args":[1,2],"kwargs":{},"queue":"default"}"#,
                // A body that is not base64, one that is not JSON, a plain one.
                r#"{"body": "!!", "content-type": "application/json", "headers": {"task": "t", "id": "b"}, "properties": {"body_encoding": "base64"}}"#,
                r#"{"body": "bm90IGpzb24=", "content-type": "application/json", "headers": {"task": "t", "id": "b"}, "properties": {"body_encoding": "base64"}}"#,
                r#"{"body": "[[1], {}, {}]", "content-type": "application/json", "headers": {"task": "t", "id": "c"}, "properties": {}}"#,
                "  \n\t",
                "[]",
            ]));
            v.push(vec![0x80, 0x04, 0x95, 0x10, 0x00]);
            v
        }
        "pidbox" => s(&[
            // Captured from `app.control.revoke(id)` on Celery 5.5.3.
            r#"{"body": "eyJtZXRob2QiOiAicmV2b2tlIiwgImFyZ3VtZW50cyI6IHsidGFza19pZCI6ICI2MTkyYTNjNS1hZWVmLTQ1YTAtYjkzMS1jNjNhZmM3MmVjZTAiLCAidGVybWluYXRlIjogZmFsc2UsICJzaWduYWwiOiAiU0lHVEVSTSJ9LCAiZGVzdGluYXRpb24iOiBudWxsLCAicGF0dGVybiI6IG51bGwsICJtYXRjaGVyIjogbnVsbH0=", "content-encoding": "utf-8", "content-type": "application/json", "headers": {"clock": 1, "expires": 1796202274.6628244}, "properties": {"delivery_mode": 2, "delivery_info": {"exchange": "celery.pidbox", "routing_key": ""}, "priority": 0, "body_encoding": "base64", "delivery_tag": "f4e3cdf1-e623-4aa7-bb38-aada6483a72c"}}"#,
            r#"{"body": "{\"method\": \"revoke\", \"arguments\": {\"task_id\": [\"a\", \"b\", 7], \"terminate\": true}, \"destination\": [\"celery@h\", null]}", "headers": {"expires": -1e300}, "properties": {}}"#,
            r#"{"body": "{\"method\": \"ping\"}", "headers": {"expires": 1e300}, "properties": {"body_encoding": "utf-8"}}"#,
        ]),
        "result_meta" => s(&[
            r#"{"status": "SUCCESS", "result": 5, "traceback": null, "children": [], "date_done": "2026-12-02T09:04:32.629000+00:00", "task_id": "d907925e"}"#,
            r#"{"status": "FAILURE", "result": {"exc_type": "ValueError", "exc_message": ["bad", 7], "exc_module": "builtins"}, "traceback": "Traceback ...\nValueError: ('bad', 7)\n", "children": [], "date_done": "2026-12-02T09:04:32.636999+00:00", "task_id": "847b"}"#,
            r#"{"status": "REVOKED", "result": {"exc_type": "TaskRevokedError", "exc_message": ["expired"], "exc_module": "celery.exceptions"}, "traceback": null, "date_done": "9999-12-31T23:59:59+00:00", "task_id": "r"}"#,
            r#"{"status": "RETRY", "result": null, "retries": 4294967296, "date_done": null}"#,
            r#"{"status": "REJECTED", "result": null, "task_id": 5}"#,
            r#"{"status": "IGNORED"}"#,
            r#"{"status": "STARTED", "result": {"pid": 1, "hostname": "h"}, "date_done": "0001-01-01T00:00:00"}"#,
        ]),
        "cron" => s(&[
            "*/15 * * * *",
            "30 2 * * *\nEurope/Paris",
            "0 0 29 2 1",
            "0 0 - 2,5,8,11 ?",
            "TZ=TZ=TZ=",
            "@hourly",
            "0-59/7 1-23/3 1,15,L * MON-FRI\nAmerica/New_York",
            // Once a timeout: an empty list item.
            "30 , * * *\nEurope/Paris",
        ]),
        "url" => s(&[
            "redis://127.0.0.1",
            "rediss://app:p%40ss%3Aw0rd@cache.example:6380/3",
            "redis://[::1]:7000/2",
            "redis://:secret@h/",
            "redis://u:hunter2@h:99999",
            "redis://u:hun%zzter2@h",
        ]),
        _ => Vec::new(),
    }
}
