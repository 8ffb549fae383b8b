//! The bodies of headway's fuzz targets (issue 7), one function per target.
//!
//! Each takes arbitrary bytes and must not panic, hang or allocate more
//! than a small multiple of its input; each also checks what must hold of
//! what it accepts. They are called by the cargo-fuzz binaries in
//! `fuzz_targets/` (nightly, libFuzzer) and by `core/tests/fuzz_smoke.rs`
//! (stable, seeded mutations), which includes this file as a module — so it
//! uses nothing but `headway_core` and `std`.

use std::sync::OnceLock;

use headway_core::broker::RedisUrl;
use headway_core::broker::celery::Sender;
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

/// Seeds: valid inputs of each target and the known-bad ones from other
/// projects' bug trackers (RELIABILITY.md, "Property and fuzz targets").
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    let s = |v: &[&str]| v.iter().map(|x| x.as_bytes().to_vec()).collect::<Vec<_>>();
    match target {
        "message" => s(&[
            r#"{"id":"a","task":"add","args":[1,2],"kwargs":{},"queue":"default"}"#,
            r#"{"id":"b","task":"t","queue":"q","eta":1767225600000,"retries":2,"priority":5,"chain":[{"task":"mul","args":[2]}],"chord":{"key":"k","size":2,"callback":{"id":"c","task":"cb","queue":"q"}}}"#,
            r#"{"id":"c","task":"t","queue":"q","join":{"parts":["a","b"],"immutable":true},"headers":{"x":[1,{"y":null}]}}"#,
            r#"{"body":"W1tdLHt9LHt9XQ==","content-type":"application/x-python-serialize","properties":{}}"#,
            "{\"id\":\"d\",\"task\":\"t\",\"queue\":\"q\",\"args\":[\"\\ud83d\\ude00\",1e308,-0.0]}",
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
            ]
        }
        "cron" => s(&[
            "*/15 * * * *",
            "30 2 * * *\nEurope/Paris",
            "0 0 29 2 1",
            "0 0 - 2,5,8,11 ?",
            "TZ=TZ=TZ=",
            "@hourly",
            "0-59/7 1-23/3 1,15,L * MON-FRI\nAmerica/New_York",
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
