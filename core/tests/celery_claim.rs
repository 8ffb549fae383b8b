//! The claim on Celery's layout: every envelope a claim pops is held under
//! a tag headway made, whatever the envelope says about its own
//! `delivery_tag` (none, or one another envelope shares), and a message is
//! at every instant either on its queue or in `unacked`. Each test starts
//! its own redis-server; skipped without one unless `HEADWAY_REQUIRE_REDIS=1`.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use headway_core::broker::celery::{CeleryBroker, CeleryOptions};
use headway_core::task::{
    App, Broker, Policy, SystemClock, VirtualClock, Worker, WorkerConfig, body,
};
use serde_json::{Value, json};
use support::RedisServer;

fn opts() -> CeleryOptions {
    CeleryOptions {
        consumer: Some("claimer".into()),
        restore_every: None,
        ..CeleryOptions::default()
    }
}

/// A Celery envelope for `add(i)` with id `id`, its `delivery_tag` as given
/// (`None`: the property is absent, as some non-Python producers send it).
fn envelope(id: &str, i: usize, tag: Option<&str>) -> Vec<u8> {
    let body = headway_b64(format!("[[{i}], {{}}, {{\"callbacks\": null, \"errbacks\": null, \"chain\": null, \"chord\": null}}]").as_bytes());
    let tag = tag.map_or(String::new(), |t| format!(", \"delivery_tag\": \"{t}\""));
    format!(
        r#"{{"body": "{body}", "content-encoding": "utf-8", "content-type": "application/json", "headers": {{"lang": "py", "task": "add", "id": "{id}", "retries": 0}}, "properties": {{"correlation_id": "{id}", "delivery_mode": 2, "delivery_info": {{"exchange": "", "routing_key": "celery"}}, "priority": 0, "body_encoding": "base64"{tag}}}}}"#
    )
    .into_bytes()
}

fn headway_b64(raw: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in raw.chunks(3) {
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

async fn wait_for(what: &str, secs: u64, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_envelopes_without_a_delivery_tag_all_run_once_at_concurrency_32() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let b = CeleryBroker::connect(&s.url(), opts(), Arc::new(SystemClock))
        .await
        .unwrap();
    for i in 0..100 {
        b.push_raw("default", &envelope(&format!("id-{i}"), i, None))
            .await
            .unwrap();
    }
    let app = App::new(b.seams(), Arc::new(SystemClock));
    b.route_for(&app);
    let runs: Arc<Mutex<HashMap<i64, u32>>> = Arc::default();
    let r2 = runs.clone();
    app.register(
        "add",
        Policy::default(),
        body(move |_, args| {
            *r2.lock()
                .unwrap()
                .entry(args[0].as_i64().unwrap())
                .or_default() += 1;
            async { Ok(Value::Null) }
        }),
    )
    .unwrap();
    let w = Worker::new(
        app.clone(),
        WorkerConfig {
            concurrency: 32,
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let w2 = w.clone();
    let h = tokio::spawn(async move { w2.run().await.unwrap() });
    wait_for("100 distinct runs", 20, || {
        runs.lock().unwrap().len() == 100
    })
    .await;
    // Everything is acked: the worker's settles have reached Redis.
    wait_for("an empty `unacked`", 10, || {
        s.cli(&["HLEN", "unacked"]) == "0"
    })
    .await;
    w.stop(Duration::from_secs(2));
    h.await.unwrap();
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 100);
    assert!(runs.values().all(|n| *n == 1), "each ran once: {runs:?}");
    assert_eq!(s.cli(&["LLEN", "celery"]), "0");
    assert_eq!(s.cli(&["ZCARD", "unacked_index"]), "0");
    assert_eq!(s.cli(&["LLEN", "headway.celery.dead:celery"]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_envelopes_with_one_delivery_tag_are_held_apart_and_both_restored() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let clock = VirtualClock::new(1_767_225_600_000);
    let a = envelope("twin-a", 1, Some("same-tag"));
    let bb = envelope("twin-b", 2, Some("same-tag"));
    let dead = CeleryBroker::connect(&s.url(), opts(), clock.clone())
        .await
        .unwrap();
    dead.push_raw("default", &a).await.unwrap();
    dead.push_raw("default", &bb).await.unwrap();
    let got = dead
        .consume(&["default".to_string()], 10, Duration::ZERO)
        .await
        .unwrap();
    let ids: Vec<&str> = got.iter().map(|d| d.message.id.as_str()).collect();
    assert_eq!(ids, ["twin-a", "twin-b"]);
    // Two entries, each under a tag of headway's, each the envelope as sent.
    assert_eq!(s.cli(&["HLEN", "unacked"]), "2");
    assert_eq!(s.cli(&["ZCARD", "unacked_index"]), "2");
    let tags: Vec<String> = got
        .iter()
        .map(|d| String::from_utf8(d.receipt.raw.as_ref().unwrap().to_vec()).unwrap())
        .collect();
    assert_ne!(tags[0], tags[1]);
    for (t, raw) in tags.iter().zip([&a, &bb]) {
        let entry: Value = serde_json::from_str(&s.cli(&["HGET", "unacked", t])).unwrap();
        let sent: Value = serde_json::from_slice(raw).unwrap();
        assert_eq!(entry[0], sent, "held as sent");
    }
    // Killed while holding both: a restore puts both back, each with its
    // own envelope (the tag it was sent with, its own id and body).
    drop(got);
    drop(dead);
    let live = CeleryBroker::connect(&s.url(), opts(), clock.clone())
        .await
        .unwrap();
    clock.advance(3_600_000 + 1);
    assert_eq!(live.recover().await.unwrap(), 2);
    assert_eq!(s.cli(&["HLEN", "unacked"]), "0");
    assert_eq!(s.cli(&["LLEN", "celery"]), "2");
    let mut back = Vec::new();
    for i in 0..2 {
        let v: Value = serde_json::from_str(&s.cli(&["LINDEX", "celery", &i.to_string()])).unwrap();
        back.push(v);
    }
    for (v, raw) in back.iter().zip([&a, &bb]) {
        let mut sent: Value = serde_json::from_slice(raw).unwrap();
        // kombu's restore marks it redelivered, and nothing else changes.
        sent["headers"]["redelivered"] = json!(true);
        sent["properties"]["delivery_info"]["redelivered"] = json!(true);
        sent["headers"]["headway_lost"] = json!(1);
        assert!(back.contains(&sent), "{sent} restored as it was: {back:?}");
        let _ = v;
    }
    let again = live
        .consume(&["default".to_string()], 10, Duration::ZERO)
        .await
        .unwrap();
    let mut ids: Vec<&str> = again.iter().map(|d| d.message.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["twin-a", "twin-b"]);
    // Acking one leaves the other held.
    live.ack(vec![again[0].receipt.clone()]).await.unwrap();
    assert_eq!(s.cli(&["HLEN", "unacked"]), "1");
    assert_eq!(s.cli(&["ZCARD", "unacked_index"]), "1");
}

/// A watcher counts, over and over, how many messages are on the queue plus
/// in `unacked`, each count in one MULTI (one instant), while a consumer
/// claims them a few at a time: the sum never drops. Positive control: a
/// claim done kombu's way (an RPOP, then the hold in a second step) is seen
/// with a message in neither place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_has_no_gap_a_watcher_could_see() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    const N: usize = 3000;
    let b = CeleryBroker::connect(&s.url(), opts(), Arc::new(SystemClock))
        .await
        .unwrap();
    let client = redis::Client::open(s.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let mut p = redis::pipe();
    for i in 0..N {
        p.lpush(
            "celery",
            envelope(&format!("g-{i}"), i, Some(&format!("t-{i}"))),
        )
        .ignore();
    }
    p.query_async::<()>(&mut c).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (low, looks) = {
        let halt = stop.clone();
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        let watcher = tokio::spawn(async move {
            let (mut low, mut looks) = (usize::MAX, 0u64);
            while !halt.load(Ordering::SeqCst) {
                let (q, h): (usize, usize) = redis::pipe()
                    .atomic()
                    .llen("celery")
                    .hlen("unacked")
                    .query_async(&mut c)
                    .await
                    .unwrap();
                low = low.min(q + h);
                looks += 1;
            }
            (low, looks)
        });
        let mut taken = 0;
        while taken < N {
            taken += b
                .consume(&["default".to_string()], 7, Duration::ZERO)
                .await
                .unwrap()
                .len();
        }
        stop.store(true, Ordering::SeqCst);
        let seen = watcher.await.unwrap();
        // The kombu way, as a control: pop, then hold in a second step —
        // the same count sees the popped message in neither place.
        let mut kc = client.get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("LPUSH")
            .arg("celery")
            .arg("k")
            .query_async(&mut kc)
            .await
            .unwrap();
        let raw: String = redis::cmd("RPOP")
            .arg("celery")
            .query_async(&mut kc)
            .await
            .unwrap();
        let (q, h): (usize, usize) = redis::pipe()
            .atomic()
            .llen("celery")
            .hlen("unacked")
            .query_async(&mut kc)
            .await
            .unwrap();
        assert_eq!(q + h, N, "the control's popped message is in neither place");
        let _: () = redis::cmd("HSET")
            .arg("unacked")
            .arg(&raw)
            .arg(&raw)
            .query_async(&mut kc)
            .await
            .unwrap();
        seen
    };
    assert!(looks > 50, "the watcher looked often enough ({looks})");
    assert!(
        low >= N,
        "at some instant only {low} of {N} messages were anywhere"
    );
}

/// The `unacked` entry of an envelope is the same whether the hold read its
/// `delivery_info` with plain finds (kombu's own form, compact JSON, no
/// escapes) or decoded the envelope with cjson (escapes, another key order,
/// `delivery_info` named twice or nowhere, not JSON): run here through
/// `unacked.lua` itself, the decode written out beside it. Positive
/// control: the plain finds are what read kombu's form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_reads_delivery_info_as_cjson_would() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let lib = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/broker/lua/unacked.lua"
    ))
    .unwrap();
    let script = format!(
        "{lib}\n{}",
        r#"
local raw, rk = ARGV[1], ARGV[2]
local found = fast_info(raw) ~= nil
local ok, env = pcall(cjson.decode, raw)
local decoded = false
if ok and type(env) == 'table' then
  local ex = ''
  local di = type(env['properties']) == 'table' and env['properties']['delivery_info']
  if type(di) == 'table' then
    if type(di['exchange']) == 'string' then ex = di['exchange'] end
    if type(di['routing_key']) == 'string' then rk = di['routing_key'] end
  end
  decoded = '[' .. raw .. ', ' .. cjson.encode(ex) .. ', ' .. cjson.encode(rk) .. ']'
end
return {unacked_entry(raw, rk) or false, decoded, found and 1 or 0}
"#
    );
    let client = redis::Client::open(s.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let kombu = String::from_utf8(envelope("k-1", 1, Some("t-1"))).unwrap();
    let cases: [(&str, String, bool); 9] = [
        ("kombu's form", kombu, true),
        (
            "compact, a slash and UTF-8",
            r#"{"body":"x","properties":{"delivery_info":{"exchange":"ex/1","routing_key":"q/é"}}}"#.into(),
            true,
        ),
        (
            "empty names",
            r#"{"body": "x", "properties": {"delivery_info": {"exchange": "", "routing_key": ""}}}"#.into(),
            true,
        ),
        (
            "the name quoted inside the body",
            r#"{"body": "\"delivery_info\": {\"exchange\": \"Z\", \"routing_key\": \"Z\"}", "properties": {"delivery_info": {"exchange": "P", "routing_key": "P"}}}"#.into(),
            true,
        ),
        (
            "named twice",
            r#"{"headers": {"delivery_info": {"exchange": "H", "routing_key": "H"}}, "properties": {"delivery_info": {"exchange": "P", "routing_key": "P"}}}"#.into(),
            false,
        ),
        (
            "an escape",
            r#"{"properties": {"delivery_info": {"exchange": "a\"b", "routing_key": "q"}}}"#.into(),
            false,
        ),
        (
            "another key order",
            r#"{"properties": {"delivery_info": {"routing_key": "q", "exchange": "e"}}}"#.into(),
            false,
        ),
        ("none", r#"{"body": "x", "properties": {}}"#.into(), false),
        (
            "not JSON",
            r#"garbage "delivery_info": {"exchange": "e", "routing_key": "q"}"#.into(),
            false,
        ),
    ];
    for (what, raw, fast) in cases {
        let (entry, decoded, found): (Option<Vec<u8>>, Option<Vec<u8>>, i64) = redis::cmd("EVAL")
            .arg(&script)
            .arg(0)
            .arg(&raw)
            .arg("dflt")
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(entry, decoded, "{what}: the entries differ");
        assert_eq!(found == 1, fast, "{what}: read by the plain finds or not");
    }
}
