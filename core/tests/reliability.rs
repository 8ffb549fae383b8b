//! Reliability: quarantine of malformed messages, dead letters,
//! poison pills, graceful stop, and beat single-fire — on the in-memory
//! broker and on headway's Redis layout (a redis-server each test starts;
//! skipped without one unless `HEADWAY_REQUIRE_REDIS=1`).
//!
//! The process-level tests (a worker that aborts on a poison pill, two beats
//! with one SIGSTOPped) run this same test binary as child processes: the
//! `child` test is ignored, and does its part only when `HEADWAY_CHILD` is
//! set.

mod support;

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use headway_core::broker::{MemoryBroker, RedisBroker, RedisOptions};
use headway_core::task::{
    App, Broker, Clock, Every, Inspector, Message, Options, Policy, Rhythm, Seams, Sig, State,
    SystemClock, Worker, WorkerConfig, body,
};
use serde_json::{Map, Value, json};
use support::RedisServer;

/// One broker under test, and what keeps it alive.
enum Kit {
    Memory(Arc<MemoryBroker>),
    Redis(Arc<RedisBroker>, RedisServer),
}

impl Kit {
    fn name(&self) -> &'static str {
        match self {
            Kit::Memory(_) => "memory",
            Kit::Redis(..) => "redis",
        }
    }

    fn seams(&self) -> Seams {
        match self {
            Kit::Memory(b) => Seams {
                broker: b.clone(),
                backend: Some(b.clone()),
                counter: Some(b.clone()),
                inspector: Some(b.clone()),
            },
            Kit::Redis(b, _) => b.seams(),
        }
    }

    fn inspector(&self) -> Arc<dyn Inspector> {
        match self {
            Kit::Memory(b) => b.clone(),
            Kit::Redis(b, _) => b.clone(),
        }
    }

    fn broker(&self) -> Arc<dyn Broker> {
        match self {
            Kit::Memory(b) => b.clone(),
            Kit::Redis(b, _) => b.clone(),
        }
    }

    async fn push_raw(&self, queue: &str, raw: &[u8]) {
        match self {
            Kit::Memory(b) => b.push_raw(queue, raw),
            Kit::Redis(b, _) => b.push_raw(queue, raw).await.unwrap(),
        }
    }

    /// Another consumer on the same broker, whose lease runs out `lease`
    /// after it stops refreshing (memory: when told to, by `lose`).
    async fn consumer(&self, name: &str, lease: Duration) -> Arc<dyn Broker> {
        match self {
            Kit::Memory(b) => b.handle(name),
            Kit::Redis(_, s) => redis(s, name, lease, None).await,
        }
    }

    /// Makes consumer `name` (made by `consumer`, then dropped) lost.
    async fn lose(&self, name: &str, lease: Duration) {
        match self {
            Kit::Memory(b) => b.expire(name),
            Kit::Redis(_, s) => {
                // Dropped, it refreshes no more: wait for the lease to lapse.
                let key = format!("headway:{{poison}}:lease:{name}");
                let deadline = Instant::now() + lease * 10;
                while s.cli(&["EXISTS", &key]) != "0" {
                    assert!(Instant::now() < deadline, "{name}'s lease never lapsed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
}

async fn redis(
    s: &RedisServer,
    consumer: &str,
    lease: Duration,
    recover_every: Option<Duration>,
) -> Arc<RedisBroker> {
    RedisBroker::connect(
        &s.url(),
        RedisOptions {
            consumer: Some(consumer.into()),
            lease,
            recover_every,
            ..RedisOptions::default()
        },
        Arc::new(SystemClock),
    )
    .await
    .unwrap()
}

/// Memory, then Redis (when a redis-server is here).
async fn kits() -> Vec<Kit> {
    let mut out = vec![Kit::Memory(MemoryBroker::new(Arc::new(SystemClock)))];
    if let Some(s) = RedisServer::start() {
        let b = redis(&s, "main", Duration::from_secs(30), None).await;
        out.push(Kit::Redis(b, s));
    }
    out
}

fn worker(app: &App, config: WorkerConfig) -> (Worker, tokio::task::JoinHandle<()>) {
    let w = Worker::new(app.clone(), config).unwrap();
    let w2 = w.clone();
    (w, tokio::spawn(async move { w2.run().await.unwrap() }))
}

fn msg(id: &str, task: &str, q: &str) -> Message {
    Message::new(id.into(), task.into(), vec![], Map::new(), q.into())
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

/// Each malformed input, and the start of the reason it is quarantined for.
fn malformed() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let pickle = evil_pickle();
    let envelope = |ct: &str, body: &str| {
        format!(
            r#"{{"body":"{body}","content-encoding":"utf-8","content-type":"{ct}","headers":{{"lang":"py","task":"add","id":"env-1"}},"properties":{{"body_encoding":"base64","delivery_tag":"t1"}}}}"#
        )
        .into_bytes()
    };
    let mut big = vec![b' '; headway_core::task::MAX_MESSAGE_BYTES];
    big[0] = b'{';
    big.push(b'}');
    vec![
        (
            "raw bytes",
            b"\x00\x01\xfe\xff not a message".to_vec(),
            "not JSON",
        ),
        (
            "bad JSON",
            br#"{"id":"bj-1","task":"add","#.to_vec(),
            "bad JSON",
        ),
        (
            "no task name",
            br#"{"id":"nt-1","queue":"default","args":[1]}"#.to_vec(),
            "no task name",
        ),
        (
            "wrong protocol",
            envelope("application/json", "W1sxLDJdLHt9LHt9XQ=="),
            "wrong protocol",
        ),
        (
            "bad base64",
            envelope("application/json", "!!!not base64!!!"),
            "wrong protocol",
        ),
        (
            "pickle",
            pickle.clone(),
            "content type not allowed: a pickle",
        ),
        (
            "pickle in an envelope",
            envelope(
                "application/x-python-serialize",
                "gASVOgAAAAAAAACMBXBvc2l4lIwGc3lzdGVtlJOUjB90b3VjaCAvdG1wL2hlYWR3YXktcGlja2xlLXB3bmVklIWUUpQu",
            ),
            "content type not allowed: \"application/x-python-serialize\"",
        ),
        ("over the size cap", big, "too large"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_inputs_are_quarantined_and_the_next_message_starts_at_once() {
    let _ = std::fs::remove_file(PWNED);
    for kit in kits().await {
        let app = App::new(kit.seams(), Arc::new(SystemClock));
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
        // good 0, bad 0, good 1, bad 1, …, good n: pushed raw between good
        // messages, in queue order.
        let bad = malformed();
        let mut hs = Vec::new();
        for (i, (_, raw, _)) in bad.iter().enumerate() {
            hs.push(
                app.send("good", vec![json!(i)], Map::new(), Options::default())
                    .await
                    .unwrap(),
            );
            kit.push_raw("default", raw).await;
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
        // Every good one ran once, in order, each promptly after the last:
        // a quarantine does not hold the queue up.
        let got = starts.lock().unwrap().clone();
        let order: Vec<i64> = got.iter().map(|(i, _)| *i).collect();
        assert_eq!(
            order,
            (0..=bad.len() as i64).collect::<Vec<_>>(),
            "{}",
            kit.name()
        );
        let mut last = t0;
        for (i, at) in &got {
            let gap = at.duration_since(last);
            assert!(
                gap < Duration::from_secs(1),
                "{}: good {i} started {gap:?} after the previous",
                kit.name()
            );
            last = *at;
        }
        // Each bad one is a dead letter with its reason and its bytes.
        let insp = kit.inspector();
        assert_eq!(insp.dead_count("default").await.unwrap(), bad.len() as u64);
        let dead = insp.dead_letters("default", 100).await.unwrap();
        assert_eq!(dead.len(), bad.len());
        // Newest first.
        for ((what, raw, why), d) in bad.iter().zip(dead.iter().rev()) {
            assert!(
                d.reason.starts_with(why),
                "{}: {what}: {:?}",
                kit.name(),
                d.reason
            );
            // Its size, and its bytes up to the prefix a dead letter keeps.
            assert_eq!(d.size, raw.len(), "{what}");
            let kept = headway_core::task::dead::kept_prefix(raw);
            assert!(
                d.raw == kept,
                "{what}: its first bytes are kept as they were"
            );
            assert_eq!(d.queue, "default");
            assert!(d.at > 0);
        }
        let ids: Vec<Option<&str>> = dead.iter().rev().map(|d| d.id.as_deref()).collect();
        assert_eq!(ids[2], Some("nt-1"), "the id is kept when it can be read");
        assert_eq!(ids[3], Some("env-1"));
        assert_eq!(ids[0], None);
        assert!(
            !std::path::Path::new(PWNED).exists(),
            "a pickle was never unpickled"
        );
        // Nothing else is held or waiting.
        let info = insp.queues().await.unwrap();
        assert!(
            info.iter().all(|q| q.unacked == 0 && q.ready.is_empty()),
            "{info:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_listed_requeued_and_purged() {
    for kit in kits().await {
        let b = kit.broker();
        let insp = kit.inspector();
        let qs = vec!["q".to_string()];
        // Three quarantined: two readable ids and one without.
        kit.push_raw("q", br#"{"id":"d1","queue":"q"}"#).await;
        kit.push_raw("q", b"\x00junk").await;
        kit.push_raw("q", br#"{"id":"d3","queue":"q"}"#).await;
        let got = b.consume(&qs, 10, Duration::ZERO).await.unwrap();
        assert!(got.is_empty(), "{}: nothing runnable", kit.name());
        assert_eq!(insp.dead_count("q").await.unwrap(), 3);
        let all = insp.dead_letters("q", 10).await.unwrap();
        let ids: Vec<Option<&str>> = all.iter().map(|d| d.id.as_deref()).collect();
        assert_eq!(ids, [Some("d3"), None, Some("d1")], "newest first");
        assert_eq!(insp.dead_letters("q", 1).await.unwrap().len(), 1);
        assert!(insp.dead_letters("other", 10).await.unwrap().is_empty());
        // Re-queue one by id: it goes back as it was, and being still bad,
        // is quarantined again by the next claim.
        assert_eq!(b.requeue_dead("q", &["d1".into()], 10).await.unwrap(), 1);
        assert_eq!(b.requeue_dead("q", &["nope".into()], 10).await.unwrap(), 0);
        assert_eq!(insp.dead_count("q").await.unwrap(), 2);
        assert_eq!(
            insp.queues()
                .await
                .unwrap()
                .iter()
                .find(|i| i.name == "q")
                .unwrap()
                .ready
                .get(&0),
            Some(&1)
        );
        assert!(b.consume(&qs, 10, Duration::ZERO).await.unwrap().is_empty());
        let again = insp.dead_letters("q", 10).await.unwrap();
        assert_eq!(again[0].id.as_deref(), Some("d1"));
        assert_eq!(again[0].raw, br#"{"id":"d1","queue":"q"}"#);
        // Re-queue by limit, oldest first.
        assert_eq!(b.requeue_dead("q", &[], 1).await.unwrap(), 1);
        assert!(b.consume(&qs, 10, Duration::ZERO).await.unwrap().is_empty());
        let order: Vec<Option<String>> = insp
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
        assert_eq!(insp.dead_count("q").await.unwrap(), 0);
        // A good message re-queued from the dead runs, marked redelivered.
        kit.push_raw("q", &msg("ok1", "t", "q").to_json()).await;
        let d = b.consume(&qs, 1, Duration::ZERO).await.unwrap();
        assert_eq!(d.len(), 1);
        assert!(!d[0].redelivered);
        b.ack(vec![d[0].receipt.clone()]).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_pill_is_dead_lettered_after_three_lost_workers_while_work_flows() {
    for kit in kits().await {
        let app = App::new(kit.seams(), Arc::new(SystemClock));
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
        // A healthy worker on `default`, recovering every 50 ms (Redis; the
        // memory broker recovers when asked).
        let healthy: Arc<dyn Broker> = match &kit {
            Kit::Memory(b) => b.clone(),
            Kit::Redis(_, s) => {
                redis(
                    s,
                    "healthy",
                    Duration::from_secs(30),
                    Some(Duration::from_millis(50)),
                )
                .await
            }
        };
        let happ = App::new(
            Seams {
                broker: healthy.clone(),
                ..kit.seams()
            },
            Arc::new(SystemClock),
        );
        happ.register(
            "ok",
            app.policy_of("ok").unwrap(),
            app.registered("ok").unwrap().body.clone(),
        )
        .unwrap();
        let (w, h) = worker(&happ, WorkerConfig::default());
        kit.broker()
            .publish(vec![msg("pill", "pill", "poison")])
            .await
            .unwrap();
        let lease = Duration::from_millis(150);
        let poison = vec!["poison".to_string()];
        let mut sent = Vec::new();
        for round in 1..=3 {
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
            // A worker takes the pill and dies holding it.
            let name = format!("dying-{round}");
            let dying = kit.consumer(&name, lease).await;
            let deadline = Instant::now() + Duration::from_secs(5);
            let got = loop {
                let got = dying
                    .consume(&poison, 1, Duration::from_millis(100))
                    .await
                    .unwrap();
                if !got.is_empty() {
                    break got;
                }
                assert!(
                    Instant::now() < deadline,
                    "{}: round {round}: the pill never came back",
                    kit.name()
                );
            };
            assert_eq!(got[0].message.id, "pill");
            assert_eq!(got[0].redelivered, round > 1, "round {round}");
            drop(got);
            drop(dying);
            kit.lose(&name, lease).await;
            if let Kit::Memory(b) = &kit {
                b.recover().await.unwrap();
            }
        }
        // After the third lost worker it is a dead letter, not back on its
        // queue; the work on `default` all ran meanwhile.
        let insp = kit.inspector();
        let deadline = Instant::now() + Duration::from_secs(5);
        while insp.dead_count("poison").await.unwrap() == 0 {
            assert!(
                Instant::now() < deadline,
                "{}: never dead-lettered",
                kit.name()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let dead = insp.dead_letters("poison", 10).await.unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].reason, "worker lost ×3", "{}", kit.name());
        assert_eq!(dead[0].id.as_deref(), Some("pill"));
        assert_eq!(Message::from_json(&dead[0].raw).unwrap().id, "pill");
        assert!(
            kit.broker()
                .consume(&poison, 1, Duration::from_millis(50))
                .await
                .unwrap()
                .is_empty(),
            "not looping"
        );
        for hd in &sent {
            hd.get(Some(Duration::from_secs(10))).await.unwrap();
        }
        assert_eq!(done.load(Ordering::SeqCst), 30);
        // Re-queued by hand (the bug fixed), it is claimable again with a
        // fresh count.
        assert_eq!(
            kit.broker()
                .requeue_dead("poison", &["pill".into()], 1)
                .await
                .unwrap(),
            1
        );
        let back = kit
            .broker()
            .consume(&poison, 1, Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(back[0].message.id, "pill");
        assert!(back[0].redelivered);
        kit.broker()
            .ack(vec![back[0].receipt.clone()])
            .await
            .unwrap();
        w.stop(Duration::from_secs(1));
        h.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_finishes_in_flight_runs_and_gives_prefetched_back_at_once() {
    for kit in kits().await {
        for late in [true, false] {
            let app = App::new(kit.seams(), Arc::new(SystemClock));
            let started = Arc::new(AtomicU32::new(0));
            let s2 = started.clone();
            let task = if late { "slow_late" } else { "slow_early" };
            app.register(
                task,
                Policy {
                    acks_late: late,
                    ..Policy::default()
                },
                body(move |ctx, _| {
                    s2.fetch_add(1, Ordering::SeqCst);
                    async move {
                        tokio::time::sleep(Duration::from_millis(1200)).await;
                        Ok(json!(ctx.id))
                    }
                }),
            )
            .unwrap();
            let mut hs = Vec::new();
            for _ in 0..10 {
                hs.push(
                    app.send(task, vec![], Map::new(), Options::default())
                        .await
                        .unwrap(),
                );
            }
            // Two slots, eight held: two run, six wait prefetched, two are
            // left on the queue.
            let (w, h) = worker(
                &app,
                WorkerConfig {
                    concurrency: 2,
                    prefetch: Some(8),
                    ..WorkerConfig::default()
                },
            );
            let deadline = Instant::now() + Duration::from_secs(5);
            while started.load(Ordering::SeqCst) < 2 {
                assert!(Instant::now() < deadline);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let insp = kit.inspector();
            let ready = |info: &[headway_core::task::QueueInfo]| {
                info.iter()
                    .find(|q| q.name == "default")
                    .map_or(0, |q| q.ready.values().sum::<u64>())
            };
            // The prefetch lands: eight taken (the two running acked already
            // when early), two left on the queue.
            let want_held = if late { 8 } else { 6 };
            loop {
                let info = insp.queues().await.unwrap();
                let held = info
                    .iter()
                    .find(|q| q.name == "default")
                    .map_or(0, |q| q.unacked);
                if (ready(&info), held) == (2, want_held) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{} late={late}: never 2 ready and {want_held} held: {info:?}",
                    kit.name()
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let t0 = Instant::now();
            w.stop(Duration::from_secs(5));
            // Prefetched messages go back at once, long before the runs end.
            let back = Instant::now() + Duration::from_millis(500);
            loop {
                let info = insp.queues().await.unwrap();
                if ready(&info) == 8 {
                    break;
                }
                assert!(
                    Instant::now() < back,
                    "{} late={late}: prefetched not back: {info:?}",
                    kit.name()
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert!(
                t0.elapsed() < Duration::from_millis(600),
                "long before the runs end"
            );
            // The two in flight finish within the grace, are acked and stored.
            h.await.unwrap();
            let took = t0.elapsed();
            assert!(
                took >= Duration::from_millis(900) && took < Duration::from_secs(3),
                "{} late={late}: stop took {took:?}: the runs finish within the grace",
                kit.name()
            );
            assert_eq!(started.load(Ordering::SeqCst), 2, "nothing else started");
            let info = insp.queues().await.unwrap();
            let q = info.iter().find(|q| q.name == "default").unwrap();
            assert_eq!(
                (ready(&info), q.unacked),
                (8, 0),
                "{} late={late}",
                kit.name()
            );
            let mut succeeded = 0;
            for hd in &hs {
                if app.state_of(hd.id()).await.unwrap() == State::Success {
                    succeeded += 1;
                }
            }
            assert_eq!(succeeded, 2);
            // Nothing was lost: another worker runs the other eight.
            let (w2, h2) = worker(&app, WorkerConfig::default());
            for hd in &hs {
                hd.get(Some(Duration::from_secs(10))).await.unwrap();
            }
            w2.stop(Duration::from_secs(1));
            h2.await.unwrap();
            assert_eq!(started.load(Ordering::SeqCst), 10, "each ran once");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_run_whose_success_is_stored_is_not_run_again() {
    for kit in kits().await {
        let app = App::new(kit.seams(), Arc::new(SystemClock));
        let runs = Arc::new(AtomicU32::new(0));
        let r2 = runs.clone();
        app.register(
            "once",
            Policy {
                acks_late: true,
                ..Policy::default()
            },
            body(move |_, _| {
                r2.fetch_add(1, Ordering::SeqCst);
                async { Ok(json!("ran here")) }
            }),
        )
        .unwrap();
        let hd = app
            .send("once", vec![], Map::new(), Options::default())
            .await
            .unwrap();
        // It ran and stored its result, and its worker died before the ack:
        // the claim is handed back, marked redelivered.
        let b = kit.broker();
        let qs = vec!["default".to_string()];
        let got = b.consume(&qs, 1, Duration::ZERO).await.unwrap();
        let mut ok = headway_core::task::Outcome::new(hd.id(), State::Success, 1);
        ok.result = Some(json!("first"));
        app.backend().unwrap().store(vec![ok]).await.unwrap();
        b.reject(got[0].receipt.clone(), true).await.unwrap();
        // The redelivered claim is there, marked, before the worker starts.
        let info = kit.inspector().queues().await.unwrap();
        let q = info.iter().find(|q| q.name == "default").unwrap();
        assert_eq!(
            (q.ready.values().sum::<u64>(), q.unacked),
            (1, 0),
            "{}",
            kit.name()
        );
        let (w, h) = worker(&app, WorkerConfig::default());
        // What the worker did: it settled the claim (acked: nothing ready,
        // nothing held)…
        let deadline = Instant::now() + Duration::from_secs(5);
        while kit
            .inspector()
            .queues()
            .await
            .unwrap()
            .iter()
            .any(|q| q.unacked > 0 || !q.ready.is_empty())
        {
            assert!(Instant::now() < deadline, "{}: never settled", kit.name());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // …without running the body, which would have answered "ran here".
        assert_eq!(
            runs.load(Ordering::SeqCst),
            0,
            "{}: not run again",
            kit.name()
        );
        // Positive control: the same worker runs a message of the same task
        // that has no stored success, and its body's value is stored.
        let fresh = app
            .send("once", vec![], Map::new(), Options::default())
            .await
            .unwrap();
        assert_eq!(
            fresh.get(Some(Duration::from_secs(5))).await.unwrap(),
            json!("ran here"),
            "{}",
            kit.name()
        );
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{}", kit.name());
        w.stop(Duration::from_secs(1));
        h.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_publish_is_refused_naming_the_cap() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let b = RedisBroker::connect(
        &s.url(),
        RedisOptions {
            max_message_bytes: 1000,
            ..RedisOptions::default()
        },
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    let mut m = msg("big", "t", "q");
    m.args.push(json!("x".repeat(2000)));
    let e = b.publish(vec![msg("ok", "t", "q"), m]).await.unwrap_err();
    assert!(e.to_string().contains("max_message_bytes"), "{e}");
    assert_eq!(
        s.cli(&["LLEN", "headway:{q}:ready:0"]),
        "0",
        "nothing of the batch went"
    );
    for bad in [
        RedisOptions {
            max_message_bytes: 0,
            ..RedisOptions::default()
        },
        RedisOptions {
            max_deliveries: 0,
            ..RedisOptions::default()
        },
        RedisOptions {
            beat_lease: Duration::ZERO,
            ..RedisOptions::default()
        },
    ] {
        let e = RedisBroker::connect(&s.url(), bad, Arc::new(SystemClock))
            .await
            .unwrap_err();
        assert!(e.to_string().starts_with("invalid `"), "{e}");
    }
}

// ------------------------------------------------------------ beat

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beat_slots_fire_once_across_brokers_and_a_standby_takes_over() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let lease = Duration::from_millis(400);
    let open = |name: &'static str| {
        let url = s.url();
        async move {
            RedisBroker::connect(
                &url,
                RedisOptions {
                    consumer: Some(name.into()),
                    beat_lease: lease,
                    ..RedisOptions::default()
                },
                Arc::new(SystemClock),
            )
            .await
            .unwrap()
        }
    };
    let a = open("beat-a").await;
    let b = open("beat-b").await;
    assert!(a.claim_slot("e", 1000).await.unwrap());
    // The same slot, or an older one, is refused at once, by anyone.
    let t = Instant::now();
    assert!(!b.claim_slot("e", 1000).await.unwrap());
    assert!(!a.claim_slot("e", 1000).await.unwrap());
    assert!(!a.claim_slot("e", 500).await.unwrap());
    assert!(t.elapsed() < Duration::from_millis(300), "at once");
    assert_eq!(s.cli(&["GET", "headway:{beat}:beat:lease"]), "beat-a");
    // A newer slot while a leads and renews: b, standing by, waits a lease
    // for a to fire it, then gives up (a never fires slot 2000 here).
    let t = Instant::now();
    assert!(!b.claim_slot("e", 2000).await.unwrap());
    assert!(t.elapsed() >= lease, "{:?}", t.elapsed());
    // b waits, a fires it meanwhile: b learns it was fired.
    let b2 = b.clone();
    let waiting = tokio::spawn(async move { b2.claim_slot("e", 3000).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(a.claim_slot("e", 3000).await.unwrap());
    assert!(!waiting.await.unwrap());
    // a closes (a clean exit gives the lease up): b takes over at once.
    a.close().await;
    let t = Instant::now();
    assert!(b.claim_slot("e", 4000).await.unwrap());
    assert!(t.elapsed() < Duration::from_millis(300), "at once");
    assert_eq!(s.cli(&["GET", "headway:{beat}:beat:lease"]), "beat-b");
    // b is dropped without closing: its lease lapses, and c takes over
    // within one lease, firing the slot b never did.
    drop(b);
    let c = open("beat-c").await;
    let t = Instant::now();
    assert!(c.claim_slot("e", 5000).await.unwrap());
    assert!(
        t.elapsed() <= lease + Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(s.cli(&["HGET", "headway:{beat}:beat:fired", "e"]), "5000");
}

/// Runs this test binary as a child doing `role`.
fn spawn_child(role: &str, url: &str, name: &str, extra: &[(&str, &str)]) -> Child {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
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
    .stderr(Stdio::null());
    for (k, v) in extra {
        c.env(k, v);
    }
    c.spawn().expect("spawn the test binary as a child")
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

/// Asks a beat child to stop after its tick in progress.
fn stop_child(child: &mut Child) {
    drop(child.stdin.take());
}

/// The `FIRED <entry> <due>` lines a beat child printed, once it exited.
fn fired(child: &mut Child) -> Vec<(String, i64)> {
    stop_child(child);
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
            // libtest's "test child ... " may precede the first line.
            let mut p = l[l.find("FIRED ")? + 6..].split(' ');
            Some((p.next()?.to_string(), p.next()?.parse().ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_beat_processes_one_paused_past_its_lease_fire_each_slot_once() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let lease_key = "headway:{beat}:beat:lease";
    let fired_at = |entry: &str| -> i64 {
        s.cli(&["HGET", "headway:{beat}:beat:fired", entry])
            .parse()
            .unwrap_or(0)
    };
    // Polls `cond` every 20 ms for up to 10 s.
    let until = |what: &str, cond: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "never: {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let mut one = spawn_child("beat", &s.url(), "beat-1", &[]);
    // Beat 1 leads (it asks first: beat 2 starts once it holds the lease).
    until("beat-1 leads", &|| s.cli(&["GET", lease_key]) == "beat-1");
    let mut two = spawn_child("beat", &s.url(), "beat-2", &[]);
    // Beat 1 fires both entries a few times, then is paused past its lease
    // (600 ms): beat 2 takes over.
    until("beat-1 fires", &|| fired_at("a") > 0 && fired_at("b") > 0);
    let start_a = fired_at("a");
    until("beat-1 fires on", &|| fired_at("a") >= start_a + 400);
    signal(&one, "-STOP");
    until("beat-2 takes over", &|| {
        s.cli(&["GET", lease_key]) == "beat-2"
    });
    // Resumed, beat 1 ticks again while beat 2 fires on: the window in
    // which a paused beat that did not notice would fire (positive control:
    // beat 2 fires newer slots of both entries in it).
    let (a0, b0) = (fired_at("a"), fired_at("b"));
    signal(&one, "-CONT");
    until("beat-2 fires on after the resume", &|| {
        fired_at("a") >= a0 + 1000 && fired_at("b") >= b0 + 1200
    });
    stop_child(&mut one);
    stop_child(&mut two);
    let a = fired(&mut one);
    let b = fired(&mut two);
    assert!(
        !a.is_empty() && !b.is_empty(),
        "both led in turn: {a:?} {b:?}"
    );
    // Each (entry, due) once across both, and what went out is exactly that.
    let mut all: Vec<(String, i64)> = a.iter().chain(b.iter()).cloned().collect();
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "a slot fired twice: {a:?} {b:?}");
    let sent: usize = ["ready:0"]
        .iter()
        .map(|k| {
            s.cli(&["LLEN", &format!("headway:{{beats}}:{k}")])
                .parse::<usize>()
                .unwrap()
        })
        .sum();
    assert_eq!(sent, n, "one message per fire: {a:?} {b:?}");
    // The resumed beat fired nothing after it came back: every slot it fired
    // is older than the first the other fired.
    let first_b: BTreeMap<&str, i64> = b.iter().fold(BTreeMap::new(), |mut m, (e, d)| {
        m.entry(e.as_str()).or_insert(*d);
        m
    });
    for (e, d) in &a {
        assert!(
            *d < first_b[e.as_str()],
            "{e} {d} fired by the paused beat after the takeover"
        );
    }
    // And the slots between are all there but for the takeover window:
    // nothing was fired out of order.
    for (e, first) in &first_b {
        let mine: Vec<i64> = b.iter().filter(|(x, _)| x == e).map(|(_, d)| *d).collect();
        assert!(mine.windows(2).all(|w| w[0] < w[1]), "{e}: {mine:?}");
        assert_eq!(mine[0], *first);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_pill_that_aborts_its_worker_process_is_dead_lettered_after_three() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    // This process: a healthy worker on `default`, recovering every 100 ms.
    let b = redis(
        &s,
        "parent",
        Duration::from_secs(30),
        Some(Duration::from_millis(100)),
    )
    .await;
    let app = App::new(b.seams(), clock);
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
        let mut child = spawn_child("worker", &s.url(), &format!("child-{round}"), &[]);
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
        // Its claim comes back after its lease (300 ms) and the next sweep.
        let deadline = Instant::now() + Duration::from_secs(5);
        while s.cli(&["LLEN", "headway:{risky}:ready:0"]) == "0"
            && b.dead_count("risky").await.unwrap() == 0
        {
            assert!(Instant::now() < deadline, "never recovered");
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

/// Appends one line to the ledger: a file outside the broker, written with
/// O_APPEND so lines from several processes do not interleave.
fn ledger(path: &str, line: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(format!("{line}\n").as_bytes()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_a_worker_holding_50_acks_late_runs_loses_none() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let path = s.dir.join("ledger").to_string_lossy().into_owned();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let b = redis(
        &s,
        "survivor",
        Duration::from_secs(30),
        Some(Duration::from_millis(100)),
    )
    .await;
    let app = App::new(b.seams(), clock);
    let late = Policy {
        acks_late: true,
        ..Policy::default()
    };
    // The survivor's own work on another queue, running all along.
    let own = Arc::new(AtomicU32::new(0));
    let o2 = own.clone();
    app.register(
        "own",
        late.clone(),
        body(move |_, _| {
            o2.fetch_add(1, Ordering::SeqCst);
            async { Ok(Value::Null) }
        }),
    )
    .unwrap();
    let p2 = path.clone();
    app.register(
        "job",
        Policy {
            queue: "jobs".into(),
            ..late
        },
        body(move |ctx, _| {
            ledger(&p2, &format!("start {} survivor", ctx.id));
            async { Ok(Value::Null) }
        }),
    )
    .unwrap();
    let (wc, hc) = worker(
        &app,
        WorkerConfig {
            queues: vec!["other".into()],
            ..WorkerConfig::default()
        },
    );
    let mut own_hs = Vec::new();
    let mut jobs = Vec::new();
    for i in 0..50 {
        jobs.push(
            app.send("job", vec![json!(i)], Map::new(), Options::default())
                .await
                .unwrap(),
        );
    }
    // A worker process takes all 50 and holds them running…
    let mut child = spawn_child("holder", &s.url(), "holder", &[("HEADWAY_LEDGER", &path)]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = std::fs::read_to_string(&path).map_or(0, |t| t.lines().count());
        if n >= 50 {
            break;
        }
        assert!(Instant::now() < deadline, "the holder started {n} of 50");
        own_hs.push(
            app.send(
                "own",
                vec![],
                Map::new(),
                Options {
                    queue: Some("other".into()),
                    ..Options::default()
                },
            )
            .await
            .unwrap(),
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // …and is killed -9 with every one in flight.
    child.kill().unwrap();
    child.wait().unwrap();
    let (wb, hb) = worker(
        &app,
        WorkerConfig {
            queues: vec!["jobs".into()],
            ..WorkerConfig::default()
        },
    );
    for _ in 0..20 {
        own_hs.push(
            app.send(
                "own",
                vec![],
                Map::new(),
                Options {
                    queue: Some("other".into()),
                    ..Options::default()
                },
            )
            .await
            .unwrap(),
        );
    }
    for hd in jobs.iter().chain(&own_hs) {
        hd.get(Some(Duration::from_secs(10))).await.unwrap();
    }
    // The ledger: lost = enqueued − done = 0; each job ran at most twice
    // (once cut off, once whole); the survivor's own runs once each.
    let text = std::fs::read_to_string(&path).unwrap();
    let mut runs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for l in text.lines() {
        let mut p = l.split(' ').skip(1);
        let (id, who) = (p.next().unwrap(), p.next().unwrap());
        runs.entry(id.to_string())
            .or_default()
            .push(who.to_string());
    }
    assert_eq!(runs.len(), 50, "every job ran");
    for (id, who) in &runs {
        assert_eq!(
            who,
            &["holder", "survivor"],
            "{id}: cut off once, run again once"
        );
    }
    for hd in &jobs {
        assert_eq!(app.state_of(hd.id()).await.unwrap(), State::Success);
    }
    assert_eq!(
        own.load(Ordering::SeqCst) as usize,
        own_hs.len(),
        "its own runs untouched"
    );
    for (w, h) in [(wb, hb), (wc, hc)] {
        w.stop(Duration::from_secs(1));
        h.await.unwrap();
    }
}

/// An early ack is sent when a run is taken to run, not when its message
/// arrives: a worker killed -9 with 2 runs in flight and 18 prefetched
/// loses the 2 (at most once) and the other 18 run once elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_an_early_ack_worker_loses_only_what_it_had_started() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let path = s.dir.join("ledger").to_string_lossy().into_owned();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let b = redis(
        &s,
        "survivor",
        Duration::from_secs(30),
        Some(Duration::from_millis(100)),
    )
    .await;
    let app = App::new(b.seams(), clock);
    let p2 = path.clone();
    app.register(
        "early",
        Policy {
            queue: "early".into(),
            ..Policy::default()
        },
        body(move |ctx, _| {
            ledger(&p2, &format!("start {} survivor", ctx.id));
            async { Ok(Value::Null) }
        }),
    )
    .unwrap();
    let mut jobs = Vec::new();
    for i in 0..20 {
        jobs.push(
            app.send("early", vec![json!(i)], Map::new(), Options::default())
                .await
                .unwrap(),
        );
    }
    // A worker process (concurrency 2, prefetch 20) takes all 20 and starts 2…
    let mut child = spawn_child(
        "prefetcher",
        &s.url(),
        "prefetcher",
        &[("HEADWAY_LEDGER", &path)],
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let started = std::fs::read_to_string(&path).map_or(0, |t| t.lines().count());
        let ready = s.cli(&["LLEN", "headway:{early}:ready:0"]);
        let held = s.cli(&["LLEN", "headway:{early}:held:prefetcher"]);
        if started == 2 && ready == "0" && held == "18" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the prefetcher started {started}, {ready} ready, {held} held"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // …and is killed -9: the 18 it had not started are still its claims.
    child.kill().unwrap();
    child.wait().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let lost: HashSet<String> = text
        .lines()
        .map(|l| l.split(' ').nth(1).unwrap().to_string())
        .collect();
    assert_eq!(lost.len(), 2);
    let (w, h) = worker(
        &app,
        WorkerConfig {
            queues: vec!["early".into()],
            ..WorkerConfig::default()
        },
    );
    for hd in jobs.iter().filter(|hd| !lost.contains(hd.id())) {
        hd.get(Some(Duration::from_secs(10))).await.unwrap();
    }
    w.stop(Duration::from_secs(1));
    h.await.unwrap();
    // The ledger: the 2 started ran once, where they started; the 18 ran
    // once each, on the survivor. Nothing is left anywhere to run again.
    let text = std::fs::read_to_string(&path).unwrap();
    let mut runs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for l in text.lines() {
        let mut p = l.split(' ').skip(1);
        let (id, who) = (p.next().unwrap(), p.next().unwrap());
        runs.entry(id.to_string())
            .or_default()
            .push(who.to_string());
    }
    assert_eq!(runs.len(), 20, "every job started once somewhere");
    for (id, who) in &runs {
        let want = if lost.contains(id) {
            "prefetcher"
        } else {
            "survivor"
        };
        assert_eq!(who, &[want], "{id}");
    }
    for key in [
        "headway:{early}:ready:0",
        "headway:{early}:held:prefetcher",
        "headway:{early}:held:survivor",
    ] {
        assert_eq!(s.cli(&["LLEN", key]), "0", "{key}");
    }
    assert_eq!(s.cli(&["ZCARD", "headway:{early}:delayed"]), "0");
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
            let b = RedisBroker::connect(
                &url,
                RedisOptions {
                    consumer: Some(name),
                    beat_lease: Duration::from_millis(600),
                    ..RedisOptions::default()
                },
                clock.clone(),
            )
            .await
            .unwrap();
            let app = App::new(b.seams(), clock);
            let beat = app.beat();
            for (entry, every) in [("a", 200), ("b", 300)] {
                beat.add(
                    entry,
                    Sig::new("tick", vec![json!(entry)]).with_options(Options {
                        queue: Some("beats".into()),
                        ..Options::default()
                    }),
                    Rhythm::Every(Every::anchored(every, 0).unwrap()),
                )
                .unwrap();
            }
            // Stops (after the tick in progress, all of it printed) when the
            // parent closes stdin.
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let s2 = stop.clone();
            std::thread::spawn(move || {
                let mut line = String::new();
                let _ = std::io::stdin().read_line(&mut line);
                s2.store(true, Ordering::SeqCst);
            });
            while !stop.load(Ordering::SeqCst) {
                for f in beat.tick().await.unwrap() {
                    println!("FIRED {} {}", f.name, f.due);
                }
                let next = beat.pending().iter().map(|(_, at)| *at).min().unwrap();
                app.clock().sleep_until(next).await;
            }
        }
        "worker" => {
            let b = RedisBroker::connect(
                &url,
                RedisOptions {
                    consumer: Some(name),
                    lease: Duration::from_millis(300),
                    recover_every: None,
                    ..RedisOptions::default()
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
        "holder" => {
            let path = std::env::var("HEADWAY_LEDGER").unwrap();
            let b = RedisBroker::connect(
                &url,
                RedisOptions {
                    consumer: Some(name.clone()),
                    lease: Duration::from_millis(300),
                    recover_every: None,
                    ..RedisOptions::default()
                },
                clock.clone(),
            )
            .await
            .unwrap();
            let app = App::new(b.seams(), clock);
            app.register(
                "job",
                Policy {
                    queue: "jobs".into(),
                    acks_late: true,
                    ..Policy::default()
                },
                body(move |ctx, _| {
                    ledger(&path, &format!("start {} holder", ctx.id));
                    async {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        Ok(Value::Null)
                    }
                }),
            )
            .unwrap();
            let w = Worker::new(
                app,
                WorkerConfig {
                    queues: vec!["jobs".into()],
                    concurrency: 50,
                    prefetch: Some(50),
                    name: Some(name),
                },
            )
            .unwrap();
            w.run().await.unwrap();
        }
        "prefetcher" => {
            let path = std::env::var("HEADWAY_LEDGER").unwrap();
            let b = RedisBroker::connect(
                &url,
                RedisOptions {
                    consumer: Some(name.clone()),
                    lease: Duration::from_millis(300),
                    recover_every: None,
                    ..RedisOptions::default()
                },
                clock.clone(),
            )
            .await
            .unwrap();
            let app = App::new(b.seams(), clock);
            app.register(
                "early",
                Policy {
                    queue: "early".into(),
                    ..Policy::default()
                },
                body(move |ctx, _| {
                    ledger(&path, &format!("start {} prefetcher", ctx.id));
                    async {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        Ok(Value::Null)
                    }
                }),
            )
            .unwrap();
            let w = Worker::new(
                app,
                WorkerConfig {
                    queues: vec!["early".into()],
                    concurrency: 2,
                    prefetch: Some(20),
                    name: Some(name),
                },
            )
            .unwrap();
            w.run().await.unwrap();
        }
        other => panic!("unknown child role {other}"),
    }
}
