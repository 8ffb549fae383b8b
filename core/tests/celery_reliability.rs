//! Reliability on Celery's layout (`broker::celery`): quarantine of malformed
//! envelopes into per-queue dead letters, listing / re-queueing / purging
//! them, poison pills dead-lettered after three lost holders (simulated, and
//! a real worker process that aborts), and beat single-fire with a lease
//! (two beats with unanchored rhythms in one process; two beat processes,
//! one SIGSTOPped past its lease). Each test starts its own redis-server;
//! skipped without one unless `HEADWAY_REQUIRE_REDIS=1`.
//!
//! The process-level tests run this same test binary as child processes:
//! the `child` test is ignored, and does its part only when `HEADWAY_CHILD`
//! is set.

mod support;

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use headway_core::broker::celery::{CeleryBroker, CeleryOptions};
use headway_core::task::{
    App, Broker, Clock, Every, Inspector, MAX_MESSAGE_BYTES, Message, Options, Policy, Rhythm, Sig,
    SystemClock, Worker, WorkerConfig, body,
};
use serde_json::{Map, Value, json};
use support::RedisServer;

async fn celery(s: &RedisServer, opts: CeleryOptions) -> Arc<CeleryBroker> {
    CeleryBroker::connect(&s.url(), opts, Arc::new(SystemClock))
        .await
        .unwrap()
}

fn named(name: &str) -> CeleryOptions {
    CeleryOptions {
        consumer: Some(name.into()),
        restore_every: None,
        ..CeleryOptions::default()
    }
}

fn worker(app: &App, config: WorkerConfig) -> (Worker, tokio::task::JoinHandle<()>) {
    let w = Worker::new(app.clone(), config).unwrap();
    let w2 = w.clone();
    (w, tokio::spawn(async move { w2.run().await.unwrap() }))
}

fn msg(id: &str, task: &str, q: &str) -> Message {
    Message::new(id.into(), task.into(), vec![], Map::new(), q.into())
}

fn b64(raw: &[u8]) -> String {
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

/// A kombu envelope as Celery writes one, with the given content type,
/// headers (JSON text) and body (already encoded).
fn envelope(ct: &str, headers: &str, body: &str, tag: &str) -> Vec<u8> {
    format!(
        r#"{{"body": "{body}", "content-encoding": "utf-8", "content-type": "{ct}", "headers": {headers}, "properties": {{"delivery_mode": 2, "delivery_info": {{"exchange": "", "routing_key": "celery"}}, "priority": 0, "body_encoding": "base64", "delivery_tag": "{tag}"}}}}"#
    )
    .into_bytes()
}

const PWNED: &str = "/tmp/headway-pickle-pwned";

/// `pickle.dumps(P(), protocol=4)` where `P.__reduce__` is
/// `(os.system, ("touch /tmp/headway-pickle-pwned",))`: unpickling it runs
/// a shell command.
fn evil_pickle() -> Vec<u8> {
    let hex = "8004953a000000000000008c05706f736978948c0673797374656d9493948c1f746f756368202f746d702f686561647761792d7069636b6c652d70776e656494859452942e";
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// Each malformed input, the start of its reason, and the id its dead
/// letter keeps.
fn malformed() -> Vec<(&'static str, Vec<u8>, &'static str, Option<&'static str>)> {
    let args = b64(b"[[1, 2], {}, {\"callbacks\": null, \"errbacks\": null, \"chain\": null, \"chord\": null}]");
    let v1 = b64(br#"{"task": "add", "id": "v1-1", "args": [1, 2], "kwargs": {}, "retries": 0, "eta": null}"#);
    let task = r#"{"lang": "py", "task": "add", "id": "env-1"}"#;
    let mut big = envelope("application/json", task, &args, "big");
    big.resize(MAX_MESSAGE_BYTES + 1, b' ');
    vec![
        (
            "raw bytes",
            b"\x00\x01\xfe\xff not a message".to_vec(),
            "not JSON",
            None,
        ),
        (
            "bad JSON",
            br#"{"body": "W10=", "content-type": "#.to_vec(),
            "bad JSON",
            None,
        ),
        (
            "bad base64",
            envelope("application/json", task, "!!!not base64!!!", "b64"),
            "bad message: the body is not base64",
            Some("env-1"),
        ),
        (
            "no task header",
            envelope(
                "application/json",
                r#"{"lang": "py", "id": "nt-1"}"#,
                &args,
                "nt",
            ),
            "no task name",
            Some("nt-1"),
        ),
        (
            "protocol 1",
            envelope("application/json", "{}", &v1, "v1"),
            "wrong protocol: Celery task protocol 1",
            Some("v1-1"),
        ),
        (
            "headway's own form",
            br#"{"id":"hw-1","task":"add","queue":"default","args":[1]}"#.to_vec(),
            "wrong protocol: a headway message",
            Some("hw-1"),
        ),
        (
            "pickle",
            evil_pickle(),
            "content type not allowed: a pickle",
            None,
        ),
        (
            "pickle in an envelope",
            envelope(
                "application/x-python-serialize",
                // A task this app runs: another's is handed back instead
                // (celery_unknown.rs), since a Celery worker may take pickle.
                r#"{"lang": "py", "task": "good", "id": "pk-1"}"#,
                "gASVOgAAAAAAAACMBXBvc2l4lIwGc3lzdGVtlJOUjB90b3VjaCAvdG1wL2hlYWR3YXktcGlja2xlLXB3bmVklIWUUpQu",
                "pk",
            ),
            "content type not allowed: \"application/x-python-serialize\"",
            Some("pk-1"),
        ),
        ("over the size cap", big, "too large", None),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_envelopes_are_quarantined_and_the_next_message_starts_at_once() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let _ = std::fs::remove_file(PWNED);
    let b = celery(&s, named("main")).await;
    let app = App::new(b.seams(), Arc::new(SystemClock));
    b.route_for(&app);
    let starts = Arc::new(Mutex::new(Vec::new()));
    let s2 = starts.clone();
    app.register(
        "good",
        Policy::default(),
        body(move |_, args| {
            s2.lock()
                .unwrap()
                .push((args[0].as_i64().unwrap(), Instant::now()));
            async { Ok(Value::Null) }
        }),
    )
    .unwrap();
    // good 0, bad 0, good 1, bad 1, …, good n, in queue order.
    let bad = malformed();
    let mut hs = Vec::new();
    for (i, (_, raw, _, _)) in bad.iter().enumerate() {
        hs.push(
            app.send("good", vec![json!(i)], Map::new(), Options::default())
                .await
                .unwrap(),
        );
        b.push_raw("default", raw).await.unwrap();
    }
    hs.push(
        app.send(
            "good",
            vec![json!(bad.len())],
            Map::new(),
            Options::default(),
        )
        .await
        .unwrap(),
    );
    let t0 = Instant::now();
    let (w, h) = worker(
        &app,
        WorkerConfig {
            concurrency: 1,
            prefetch: Some(1),
            ..WorkerConfig::default()
        },
    );
    for hd in &hs {
        hd.get(Some(Duration::from_secs(10))).await.unwrap();
    }
    w.stop(Duration::from_secs(1));
    h.await.unwrap();
    // Every good one ran once, in order, each within 1 s of the last.
    let got = starts.lock().unwrap().clone();
    let order: Vec<i64> = got.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, (0..=bad.len() as i64).collect::<Vec<_>>());
    let mut last = t0;
    for (i, at) in &got {
        let gap = at.duration_since(last);
        assert!(
            gap < Duration::from_secs(1),
            "good {i} started {gap:?} after the previous"
        );
        last = *at;
    }
    // Each bad one is a dead letter of its queue, newest first, with its
    // reason, its id when readable, and its bytes as they were.
    assert_eq!(b.dead_count("default").await.unwrap(), bad.len() as u64);
    let dead = b.dead_letters("default", 100).await.unwrap();
    assert_eq!(dead.len(), bad.len());
    for ((what, raw, why, id), d) in bad.iter().zip(dead.iter().rev()) {
        assert!(d.reason.starts_with(why), "{what}: {:?}", d.reason);
        assert_eq!(d.id.as_deref(), *id, "{what}");
        // Its bytes as they were, or their first 64 KiB for a bigger one.
        let kept = raw.len().min(headway_core::task::dead::DEAD_PREFIX_BYTES);
        assert_eq!(d.raw.len(), kept, "{what}");
        assert!(
            d.raw == raw[..kept],
            "{what}: its bytes are kept as they were"
        );
        assert_eq!(d.queue, "default");
        assert!(d.at > 0);
    }
    assert!(
        !std::path::Path::new(PWNED).exists(),
        "a pickle was never unpickled"
    );
    // Kept where a Celery worker never looks, and nothing left behind.
    assert_eq!(
        s.cli(&["LLEN", "headway.celery.dead:celery"]),
        bad.len().to_string()
    );
    assert_eq!(s.cli(&["HLEN", "unacked"]), "0");
    assert_eq!(s.cli(&["ZCARD", "unacked_index"]), "0");
    assert_eq!(s.cli(&["LLEN", "celery"]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_listed_requeued_and_purged() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let b = celery(&s, named("main")).await;
    let qs = vec!["q".to_string()];
    let pickled = |id: &str, tag: &str| {
        envelope(
            "application/x-python-serialize",
            &format!(r#"{{"task": "t", "id": "{id}"}}"#),
            "gAR=",
            tag,
        )
    };
    // Three quarantined: two readable ids and one without.
    b.push_raw("q", &pickled("d1", "t1")).await.unwrap();
    b.push_raw("q", b"\x00junk").await.unwrap();
    b.push_raw("q", &pickled("d3", "t3")).await.unwrap();
    let got = b.consume(&qs, 10, Duration::ZERO).await.unwrap();
    assert!(got.is_empty(), "nothing runnable");
    assert_eq!(b.dead_count("q").await.unwrap(), 3);
    let all = b.dead_letters("q", 10).await.unwrap();
    let ids: Vec<Option<&str>> = all.iter().map(|d| d.id.as_deref()).collect();
    assert_eq!(ids, [Some("d3"), None, Some("d1")], "newest first");
    assert_eq!(b.dead_letters("q", 1).await.unwrap().len(), 1);
    assert!(b.dead_letters("other", 10).await.unwrap().is_empty());
    assert_eq!(s.cli(&["HLEN", "unacked"]), "0", "out of `unacked`");
    // Re-queued by id: back on the queue as it was; still bad, it is
    // quarantined again by the next claim.
    assert_eq!(b.requeue_dead("q", &["d1".into()], 10).await.unwrap(), 1);
    assert_eq!(b.requeue_dead("q", &["nope".into()], 10).await.unwrap(), 0);
    assert_eq!(b.dead_count("q").await.unwrap(), 2);
    assert_eq!(s.cli(&["LLEN", "q"]), "1");
    assert!(b.consume(&qs, 10, Duration::ZERO).await.unwrap().is_empty());
    let again = b.dead_letters("q", 10).await.unwrap();
    assert_eq!(again[0].id.as_deref(), Some("d1"));
    assert_eq!(again[0].raw, pickled("d1", "t1"));
    // Re-queued by limit, oldest first.
    assert_eq!(b.requeue_dead("q", &[], 1).await.unwrap(), 1);
    assert!(b.consume(&qs, 10, Duration::ZERO).await.unwrap().is_empty());
    let order: Vec<Option<String>> = b
        .dead_letters("q", 10)
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(
        order,
        [None, Some("d1".to_string()), Some("d3".to_string())]
    );
    assert_eq!(b.purge_dead("q").await.unwrap(), 3);
    assert_eq!(b.purge_dead("q").await.unwrap(), 0);
    assert_eq!(b.dead_count("q").await.unwrap(), 0);
    assert_eq!(s.cli(&["EXISTS", "headway.celery.dead:q"]), "0");
    // A good envelope still runs.
    let good = b.sender().encode(&msg("ok1", "t", "q"), 0).json;
    b.push_raw("q", good.as_bytes()).await.unwrap();
    let d = b.consume(&qs, 1, Duration::ZERO).await.unwrap();
    assert_eq!(d[0].message.id, "ok1");
    assert!(!d[0].redelivered);
    b.ack(vec![d[0].receipt.clone()]).await.unwrap();

    // With a small cap: a publish over it is refused naming it, and one put
    // there by another producer is set aside unread — also when it arrives
    // while the consumer is blocked waiting (the BRPOP path).
    let small = celery(
        &s,
        CeleryOptions {
            max_message_bytes: 1000,
            ..named("small")
        },
    )
    .await;
    let mut m = msg("huge", "t", "q");
    m.args.push(json!("x".repeat(2000)));
    let e = small.publish(vec![m]).await.unwrap_err();
    assert!(e.to_string().contains("max_message_bytes"), "{e}");
    assert_eq!(s.cli(&["LLEN", "q"]), "0", "nothing went");
    let waiting = {
        let small = small.clone();
        tokio::spawn(async move {
            let qs = vec!["q".to_string()];
            small.consume(&qs, 1, Duration::from_secs(5)).await.unwrap()
        })
    };
    // Pushed once the consumer is blocked in BRPOP: the BRPOP path.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !s.cli(&["CLIENT", "LIST"]).contains("cmd=brpop") {
        assert!(Instant::now() < deadline, "the consumer never blocked");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut huge = vec![b'{'];
    huge.resize(2000, b' ');
    huge.push(b'}');
    small.push_raw("q", &huge).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while small.dead_count("q").await.unwrap() == 0 {
        assert!(Instant::now() < deadline, "the big one was never set aside");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let good = b.sender().encode(&msg("ok2", "t", "q"), 0).json;
    small.push_raw("q", good.as_bytes()).await.unwrap();
    let got = waiting.await.unwrap();
    assert_eq!(got[0].message.id, "ok2");
    let dead = small.dead_letters("q", 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        dead[0].reason,
        "too large: 2001 bytes (the cap is 1000 bytes)"
    );
    assert_eq!(dead[0].raw, huge);
    small.ack(vec![got[0].receipt.clone()]).await.unwrap();
    for bad in [
        CeleryOptions {
            max_message_bytes: 0,
            ..CeleryOptions::default()
        },
        CeleryOptions {
            max_deliveries: 0,
            ..CeleryOptions::default()
        },
        CeleryOptions {
            beat_lease: Duration::ZERO,
            ..CeleryOptions::default()
        },
    ] {
        let e = CeleryBroker::connect(&s.url(), bad, Arc::new(SystemClock))
            .await
            .unwrap_err();
        assert!(e.to_string().starts_with("invalid `"), "{e}");
    }
}

/// The envelope of the pill as it sits in a list now.
fn listed(s: &RedisServer, key: &str) -> Value {
    serde_json::from_str(&s.cli(&["LINDEX", key, "0"])).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_pill_is_dead_lettered_after_three_lost_holders_while_work_flows() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let vt = Duration::from_secs(1);
    // A healthy worker on `default` that restores every 100 ms.
    let healthy = celery(
        &s,
        CeleryOptions {
            visibility_timeout: vt,
            restore_every: Some(Duration::from_millis(100)),
            ..named("healthy")
        },
    )
    .await;
    let app = App::new(healthy.seams(), Arc::new(SystemClock));
    let done = Arc::new(AtomicU32::new(0));
    let d2 = done.clone();
    app.register(
        "ok",
        Policy {
            acks_late: true,
            ..Policy::default()
        },
        body(move |_, _| {
            d2.fetch_add(1, Ordering::SeqCst);
            async { Ok(Value::Null) }
        }),
    )
    .unwrap();
    let (w, h) = worker(&app, WorkerConfig::default());
    healthy
        .publish(vec![msg("pill", "pill", "poison")])
        .await
        .unwrap();
    let poison = vec!["poison".to_string()];
    let mut sent = Vec::new();
    for round in 1..=3u32 {
        for i in 0..10 {
            sent.push(
                app.send(
                    "ok",
                    vec![json!(round * 100 + i)],
                    Map::new(),
                    Options::default(),
                )
                .await
                .unwrap(),
            );
        }
        // A consumer takes the pill and is lost holding it.
        let dying = celery(
            &s,
            CeleryOptions {
                visibility_timeout: vt,
                ..named(&format!("dying-{round}"))
            },
        )
        .await;
        let got = dying
            .consume(&poison, 1, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(got[0].message.id, "pill", "round {round}");
        assert_eq!(got[0].redelivered, round > 1, "round {round}");
        drop(got);
        drop(dying);
        // The healthy one restores it past the visibility timeout, counting
        // the lost holder in the envelope — or, the third time, buries it.
        let deadline = Instant::now() + Duration::from_secs(5);
        while s.cli(&["LLEN", "poison"]) == "0" && healthy.dead_count("poison").await.unwrap() == 0
        {
            assert!(Instant::now() < deadline, "round {round}: never restored");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if round < 3 {
            assert_eq!(
                listed(&s, "poison")["headers"]["headway_lost"],
                json!(round),
                "the count rides in the envelope"
            );
        }
    }
    let dead = healthy.dead_letters("poison", 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason, "worker lost ×3");
    assert_eq!(dead[0].id.as_deref(), Some("pill"));
    let kept: Value = serde_json::from_slice(&dead[0].raw).unwrap();
    assert_eq!(kept["headers"]["redelivered"], json!(true));
    assert!(kept["headers"].get("headway_lost").is_none());
    assert_eq!(
        healthy.sender().decode(&dead[0].raw).unwrap().message.id,
        "pill"
    );
    assert_eq!(s.cli(&["LLEN", "poison"]), "0", "not looping");
    for hd in &sent {
        hd.get(Some(Duration::from_secs(10))).await.unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), 30, "the other work all ran");
    // Re-queued by hand (the bug fixed): claimable again, redelivered, with
    // a fresh count — the next loss is restored, not buried.
    assert_eq!(
        healthy
            .requeue_dead("poison", &["pill".into()], 1)
            .await
            .unwrap(),
        1
    );
    let again = celery(
        &s,
        CeleryOptions {
            visibility_timeout: vt,
            ..named("again")
        },
    )
    .await;
    let back = again.consume(&poison, 1, Duration::ZERO).await.unwrap();
    assert_eq!(back[0].message.id, "pill");
    assert!(back[0].redelivered);
    drop(back);
    drop(again);
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.cli(&["LLEN", "poison"]) == "0" {
        assert!(Instant::now() < deadline, "never restored");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(listed(&s, "poison")["headers"]["headway_lost"], json!(1));
    assert_eq!(healthy.dead_count("poison").await.unwrap(), 0);
    w.stop(Duration::from_secs(1));
    h.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_pill_that_aborts_its_worker_process_is_dead_lettered_after_three() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    // This process: a healthy worker on `default`, restoring every 100 ms.
    let b = celery(
        &s,
        CeleryOptions {
            visibility_timeout: Duration::from_secs(1),
            restore_every: Some(Duration::from_millis(100)),
            ..named("parent")
        },
    )
    .await;
    let app = App::new(b.seams(), Arc::new(SystemClock));
    let done = Arc::new(Mutex::new(HashSet::new()));
    let d2 = done.clone();
    app.register(
        "ok",
        Policy {
            acks_late: true,
            ..Policy::default()
        },
        body(move |ctx, _| {
            d2.lock().unwrap().insert(ctx.id.clone());
            async { Ok(Value::Null) }
        }),
    )
    .unwrap();
    let (w, h) = worker(&app, WorkerConfig::default());
    // The pill goes where only the children look; ok work everywhere.
    b.publish(vec![msg("pill", "pill", "risky")]).await.unwrap();
    let mut hs = Vec::new();
    let mut deaths = 0;
    for round in 0..6 {
        for i in 0..10 {
            hs.push(
                app.send(
                    "ok",
                    vec![json!(round * 10 + i)],
                    Map::new(),
                    Options::default(),
                )
                .await
                .unwrap(),
            );
        }
        if b.dead_count("risky").await.unwrap() > 0 {
            break;
        }
        let mut child = spawn_child("worker", &s.url(), &format!("child-{round}"));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                assert!(!st.success(), "the child died by the pill");
                deaths += 1;
                break;
            }
            assert!(Instant::now() < deadline, "the child never took the pill");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Its claim is restored past the visibility timeout (1 s).
        let deadline = Instant::now() + Duration::from_secs(5);
        while s.cli(&["LLEN", "risky"]) == "0" && b.dead_count("risky").await.unwrap() == 0 {
            assert!(Instant::now() < deadline, "never restored");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert_eq!(deaths, 3, "three workers died, no more");
    let dead = b.dead_letters("risky", 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason, "worker lost ×3");
    assert_eq!(dead[0].id.as_deref(), Some("pill"));
    for hd in &hs {
        hd.get(Some(Duration::from_secs(10))).await.unwrap();
    }
    assert_eq!(
        done.lock().unwrap().len(),
        hs.len(),
        "the other work all ran"
    );
    w.stop(Duration::from_secs(1));
    h.await.unwrap();
}

// ------------------------------------------------------------ beat

/// Runs a beat with `entries` (name, unanchored period ms) until `stop`,
/// answering what it fired: (entry, due).
async fn run_beat(app: &App, entries: &[(&str, i64)], stop: Arc<AtomicBool>) -> Vec<(String, i64)> {
    let beat = app.beat();
    for (entry, every) in entries {
        beat.add(
            entry,
            Sig::new("tick", vec![json!(entry)]).with_options(Options {
                queue: Some("beats".into()),
                ..Options::default()
            }),
            Rhythm::Every(Every::new(*every).unwrap()),
        )
        .unwrap();
    }
    let mut fired = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        for f in beat.tick().await.unwrap() {
            println!("FIRED {} {}", f.name, f.due);
            fired.push((f.name, f.due));
        }
        let next = beat.pending().iter().map(|(_, at)| *at).min().unwrap();
        let now = app.clock().now();
        let wait = (next - now).clamp(1, 50);
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    }
    fired
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_beats_with_unanchored_rhythms_fire_as_one() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let lease = Duration::from_millis(400);
    let open = |name: &str| {
        celery(
            &s,
            CeleryOptions {
                beat_lease: lease,
                ..named(name)
            },
        )
    };
    let a = open("beat-a").await;
    let b = open("beat-b").await;
    // The scheme itself: the same or an older slot is refused at once, by
    // anyone; a standby waits up to a lease for the leader.
    assert!(a.claim_slot("e", 1000).await.unwrap());
    let t = Instant::now();
    assert!(!b.claim_slot("e", 1000).await.unwrap());
    assert!(!a.claim_slot("e", 500).await.unwrap());
    assert!(t.elapsed() < Duration::from_millis(300), "at once");
    assert!(
        s.cli(&["GET", "headway.celery.beat.lease"])
            .starts_with("beat-a#")
    );
    let t = Instant::now();
    assert!(!b.claim_slot("e", 2000).await.unwrap());
    assert!(t.elapsed() >= lease, "{:?}", t.elapsed());
    // a closes (a clean exit gives the lease up): b takes over at once.
    a.close().await.unwrap();
    let t = Instant::now();
    assert!(b.claim_slot("e", 3000).await.unwrap());
    assert!(t.elapsed() < Duration::from_millis(300), "at once");
    b.close().await.unwrap();
    s.cli(&["FLUSHALL"]);

    // Two beats whose `Every` rhythms are not anchored, so their slots
    // never line up: without the lease both would fire every period.
    let a = open("beat-a").await;
    let b = open("beat-b").await;
    let (app_a, app_b) = (
        App::new(a.seams(), Arc::new(SystemClock)),
        App::new(b.seams(), Arc::new(SystemClock)),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let entries = [("x", 200), ("y", 300)];
    let ta = {
        let (app, stop) = (app_a.clone(), stop.clone());
        tokio::spawn(async move { run_beat(&app, &entries, stop).await })
    };
    tokio::time::sleep(Duration::from_millis(130)).await;
    let tb = {
        let (app, stop) = (app_b.clone(), stop.clone());
        tokio::spawn(async move { run_beat(&app, &entries, stop).await })
    };
    let run = Duration::from_millis(3000);
    tokio::time::sleep(run).await;
    stop.store(true, Ordering::SeqCst);
    let fa = ta.await.unwrap();
    let fb = tb.await.unwrap();
    assert!(fb.is_empty(), "the standby fired: {fb:?}");
    for (entry, every) in entries {
        let dues: Vec<i64> = fa
            .iter()
            .filter(|(e, _)| e == entry)
            .map(|(_, d)| *d)
            .collect();
        assert!(
            dues.windows(2).all(|w| w[1] - w[0] >= every),
            "{entry}: {dues:?}"
        );
        let most = (run.as_millis() as i64 + 200) / every + 1;
        assert!(
            dues.len() as i64 >= most - 3 && dues.len() as i64 <= most,
            "{entry}: {} fires in {run:?}",
            dues.len()
        );
    }
    assert_eq!(
        s.cli(&["LLEN", "beats"]),
        fa.len().to_string(),
        "one message per fire"
    );
}

/// Runs this test binary as a child doing `role`.
fn spawn_child(role: &str, url: &str, name: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("HEADWAY_CHILD", role)
        .env("HEADWAY_CHILD_URL", url)
        .env("HEADWAY_CHILD_NAME", name)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the test binary as a child")
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

/// The `FIRED <entry> <due>` lines a beat child printed, once it exited
/// (it stops when its stdin closes).
fn fired(child: &mut Child) -> Vec<(String, i64)> {
    drop(child.stdin.take());
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "a beat child did not stop");
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.stdout.take().unwrap();
    BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| {
            let mut p = l[l.find("FIRED ")? + 6..].split(' ');
            Some((p.next()?.to_string(), p.next()?.parse().ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_beat_processes_one_paused_past_its_lease_fire_as_one() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let mut one = spawn_child("beat", &s.url(), "beat-1");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !s
        .cli(&["GET", "headway.celery.beat.lease"])
        .starts_with("beat-1#")
    {
        assert!(Instant::now() < deadline, "beat-1 never led");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut two = spawn_child("beat", &s.url(), "beat-2");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    // Pause the leader past its lease (600 ms): the other takes over.
    signal(&one, "-STOP");
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(
        s.cli(&["GET", "headway.celery.beat.lease"])
            .starts_with("beat-2#"),
        "took over"
    );
    signal(&one, "-CONT");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let a = fired(&mut one);
    let b = fired(&mut two);
    assert!(
        !a.is_empty() && !b.is_empty(),
        "both led in turn: {a:?} {b:?}"
    );
    // What went out is exactly what was fired, and per entry the fires
    // form one timeline: the paused beat's all before the other's first —
    // it fired nothing after it came back — each beat's strictly in order.
    assert_eq!(
        s.cli(&["LLEN", "beats"]),
        (a.len() + b.len()).to_string(),
        "one message per fire: {a:?} {b:?}"
    );
    let first_b: BTreeMap<&str, i64> = b.iter().fold(BTreeMap::new(), |mut m, (e, d)| {
        m.entry(e.as_str()).or_insert(*d);
        m
    });
    for (e, d) in &a {
        assert!(
            first_b.get(e.as_str()).is_none_or(|f| d < f),
            "{e} {d} fired by the paused beat after the takeover: {a:?} {b:?}"
        );
    }
    for fires in [&a, &b] {
        for e in ["a", "b"] {
            let mine: Vec<i64> = fires
                .iter()
                .filter(|(x, _)| x == e)
                .map(|(_, d)| *d)
                .collect();
            assert!(mine.windows(2).all(|w| w[0] < w[1]), "{e}: {mine:?}");
        }
    }
    // While both ran, only one fired: no entry fired twice within a period.
    for (e, every) in [("a", 200), ("b", 300)] {
        let mut all: Vec<i64> = a
            .iter()
            .chain(b.iter())
            .filter(|(x, _)| x == e)
            .map(|(_, d)| *d)
            .collect();
        all.sort();
        let close = all.windows(2).filter(|w| w[1] - w[0] < every).count();
        assert!(close <= 1, "{e}: two beats fired together: {all:?}");
    }
}

/// Not a test on its own: what a child process does when one of the tests
/// above runs this binary with `HEADWAY_CHILD` set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn child() {
    let Ok(role) = std::env::var("HEADWAY_CHILD") else {
        return;
    };
    let url = std::env::var("HEADWAY_CHILD_URL").unwrap();
    let name = std::env::var("HEADWAY_CHILD_NAME").unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    match role.as_str() {
        "beat" => {
            let b = CeleryBroker::connect(
                &url,
                CeleryOptions {
                    beat_lease: Duration::from_millis(600),
                    ..named(&name)
                },
                clock.clone(),
            )
            .await
            .unwrap();
            let app = App::new(b.seams(), clock);
            // Stops (after the tick in progress) when the parent closes stdin.
            let stop = Arc::new(AtomicBool::new(false));
            let s2 = stop.clone();
            std::thread::spawn(move || {
                let mut line = String::new();
                let _ = std::io::stdin().read_line(&mut line);
                s2.store(true, Ordering::SeqCst);
            });
            run_beat(&app, &[("a", 200), ("b", 300)], stop).await;
        }
        "worker" => {
            let b = CeleryBroker::connect(
                &url,
                CeleryOptions {
                    visibility_timeout: Duration::from_secs(1),
                    ..named(&name)
                },
                clock.clone(),
            )
            .await
            .unwrap();
            let app = App::new(b.seams(), clock);
            let late = Policy {
                acks_late: true,
                ..Policy::default()
            };
            app.register("ok", late.clone(), body(|_, _| async { Ok(Value::Null) }))
                .unwrap();
            app.register(
                "pill",
                late,
                body(|_, _| async {
                    // What a segfault, an OOM kill or `exit` in a C
                    // extension looks like from outside.
                    std::process::abort();
                }),
            )
            .unwrap();
            let w = Worker::new(
                app,
                WorkerConfig {
                    queues: vec!["risky".into(), "default".into()],
                    concurrency: 1,
                    prefetch: Some(1),
                    name: None,
                },
            )
            .unwrap();
            w.run().await.unwrap();
        }
        other => panic!("unknown child role {other}"),
    }
}
