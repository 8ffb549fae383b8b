//! headway's own layout through Redis Sentinel: a primary, a replica and
//! three sentinels of the test's own.
//!
//! - A drain across a `kill -9` of the primary: producers send with
//!   `?wait=1`, a worker runs `acks_late` tasks, the primary dies; the
//!   sentinels promote the replica and both follow it. Every send that was
//!   confirmed runs (nothing lost), duplicates are counted and bounded, the
//!   primary the sentinels name did change (positive control), and with
//!   the old primary back as a replica, `?wait=1` sends are confirmed again.
//! - A graceful failover (`SENTINEL FAILOVER`): the old primary stays up as
//!   a replica and answers writes READONLY; the link asks the sentinels
//!   again and the next write lands on the new primary.
//!
//! Skipped without redis-server unless `HEADWAY_REQUIRE_REDIS=1`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use headway_core::broker::{RedisBroker, RedisOptions};
use headway_core::task::{App, Options, Policy, SystemClock, Worker, WorkerConfig, body};
use serde_json::{Map, Value, json};
use support::sentinel::{Sentinels, until};

async fn broker(url: &str, name: &str, lease: Duration) -> Arc<RedisBroker> {
    let o = RedisOptions {
        consumer: Some(name.into()),
        lease,
        recover_every: Some(lease),
        ..RedisOptions::default()
    };
    RedisBroker::connect(url, o, Arc::new(SystemClock))
        .await
        .unwrap()
}

fn app(b: &Arc<RedisBroker>) -> App {
    App::new(b.seams(), Arc::new(SystemClock))
}

async fn send(app: &App, id: &str) -> Result<(), String> {
    let opts = Options {
        id: Some(id.into()),
        ..Options::default()
    };
    app.send_task("job", vec![json!(1)], Map::new(), opts)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_across_a_kill_of_the_primary_finishes_on_the_new_primary() {
    let Some(mut s) = Sentinels::start() else {
        return;
    };
    let first = s.primary_port().expect("a primary named");
    let waited = s.url("?wait=1&wait_timeout=500");
    let plain = s.url("");

    // The worker: runs are counted by id, outside the broker.
    let runs: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
    let wb = broker(&plain, "sentinel-worker", Duration::from_secs(2)).await;
    let wapp = app(&wb);
    let r = runs.clone();
    wapp.register(
        "job",
        Policy {
            acks_late: true,
            ..Policy::default()
        },
        body(move |ctx, _| {
            let r = r.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(3)).await;
                *r.lock().unwrap().entry(ctx.id.clone()).or_default() += 1;
                Ok(Value::Null)
            }
        }),
    )
    .unwrap();
    let w = Worker::new(
        wapp,
        WorkerConfig {
            concurrency: 4,
            prefetch: Some(8),
            name: Some("sentinel-worker".into()),
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let w2 = w.clone();
    let running = tokio::spawn(async move { w2.run().await.unwrap() });

    // Two producers send with ?wait=1, recording what was confirmed and
    // what was refused (and why).
    let pb = broker(&waited, "sentinel-producer", Duration::from_secs(30)).await;
    let papp = app(&pb);
    let confirmed = Arc::new(Mutex::new(BTreeSet::new()));
    let refused = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut producers = Vec::new();
    for p in 0..2 {
        let (papp, confirmed, refused, stop) = (
            papp.clone(),
            confirmed.clone(),
            refused.clone(),
            stop.clone(),
        );
        producers.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                let id = format!("p{p}-{i}");
                i += 1;
                match send(&papp, &id).await {
                    Ok(()) => {
                        confirmed.lock().unwrap().insert(id);
                    }
                    Err(e) => refused.lock().unwrap().push((id, e)),
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }));
    }
    let count = |c: &Arc<Mutex<BTreeSet<String>>>| c.lock().unwrap().len();
    let t = Instant::now();
    while count(&confirmed) < 100 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "sends confirmed before the kill"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before_kill = count(&confirmed);

    // kill -9 of the primary; the sentinels promote the replica.
    s.node(first).kill();
    until(
        Duration::from_secs(30),
        "the sentinels name a new primary",
        || s.primary_port().is_some_and(|p| p != first),
    );
    let second = s.primary_port().unwrap();
    assert_ne!(first, second, "positive control: the primary changed");
    // With no replica left, ?wait=1 cannot be met: sends are refused,
    // naming `wait` (and not confirmed).
    let t = Instant::now();
    loop {
        let r = refused.lock().unwrap().clone();
        if r.iter().any(|(_, e)| e.contains("`wait`")) {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no send refused for want of a replica: {:?}",
            &r[..r.len().min(3)]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The old primary comes back (empty); the sentinels make it a replica
    // of the new one, and ?wait=1 sends are confirmed again.
    s.node(first).restart();
    let after_restart = count(&confirmed);
    let t = Instant::now();
    while count(&confirmed) < after_restart + 50 {
        assert!(
            t.elapsed() < Duration::from_secs(40),
            "no ?wait=1 send confirmed once the old primary is a replica"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for p in producers {
        p.await.unwrap();
    }
    let confirmed = confirmed.lock().unwrap().clone();
    let refused = refused.lock().unwrap().clone();

    // The drain: every confirmed send runs, on the new primary.
    let t = Instant::now();
    loop {
        let ran = runs.lock().unwrap().clone();
        let missing: Vec<&String> = confirmed
            .iter()
            .filter(|id| !ran.contains_key(*id))
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{} confirmed sends never ran (lost): {:?}",
            missing.len(),
            &missing[..missing.len().min(10)]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    w.stop(Duration::from_secs(2));
    running.await.unwrap();
    let ran = runs.lock().unwrap().clone();
    let executions: u32 = ran.values().sum();
    let dup = executions as usize - ran.len();
    eprintln!(
        "sentinel drain: confirmed {} ({before_kill} before the kill), refused {}, \
         ran {}, executions {executions}, duplicates {dup}, primary {first} -> {second}",
        confirmed.len(),
        refused.len(),
        ran.len()
    );
    // Nothing ran that was not sent; a refused send may have run (it was
    // not confirmed either way).
    for id in ran.keys() {
        assert!(
            confirmed.contains(id) || refused.iter().any(|(r, _)| r == id),
            "{id} ran but was never sent"
        );
    }
    // Duplicates are bounded: a run whose ack was lost with the old
    // primary runs again, once; never a loop.
    for (id, n) in &ran {
        assert!(*n <= 2, "{id} ran {n} times");
    }
    assert!(dup <= 50, "{dup} duplicates");
    // Every refusal is the broker's own words: the wait, or the failover.
    for (_, e) in &refused {
        assert!(e.contains("redis+sentinel://"), "the URL is named: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_failover_is_followed_after_readonly() {
    let Some(s) = Sentinels::start() else {
        return;
    };
    let first = s.primary_port().unwrap();
    let b = broker(&s.url(""), "graceful", Duration::from_secs(30)).await;
    let a = app(&b);
    send(&a, "before").await.unwrap();
    assert_eq!(
        s.ask(
            s.ports[1],
            &["SENTINEL", "FAILOVER", support::sentinel::MASTER]
        ),
        "OK"
    );
    until(
        Duration::from_secs(30),
        "the sentinels name a new primary",
        || s.primary_port().is_some_and(|p| p != first),
    );
    // The old primary demotes itself a moment after the sentinels name the
    // new one: wait until it refuses writes.
    let old = s.nodes.iter().find(|n| n.port == first).unwrap();
    until(Duration::from_secs(20), "the old primary a replica", || {
        old.cli(&["ROLE"]).starts_with("slave")
    });
    let second = s.primary_port().unwrap();
    // The link's connection still goes to the old primary: the write is
    // answered READONLY, the link asks the sentinels again and the send
    // lands on the new primary (patiently: within the patience).
    send(&a, "after").await.unwrap();
    let new = s.nodes.iter().find(|n| n.port == second).unwrap();
    let ready = new.cli(&["LRANGE", "headway:{default}:ready:0", "0", "-1"]);
    assert!(
        ready.contains("\"after\""),
        "the new primary has it: {ready}"
    );
    assert!(
        ready.contains("\"before\""),
        "and what was replicated: {ready}"
    );
}

/// Celery's layout and a shared limit on the same Sentinel URL follow a
/// `kill -9` of the primary too: both dial through the one link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn celery_layout_and_a_shared_limit_follow_a_kill_of_the_primary() {
    use headway_core::broker::celery::{CeleryBroker, CeleryOptions};
    use headway_core::limit::SharedBucket;

    let Some(mut s) = Sentinels::start() else {
        return;
    };
    let first = s.primary_port().unwrap();
    let url = s.url("");
    // ?wait= is the own layout's: Celery's refuses it, naming it.
    let e = CeleryBroker::connect(
        &s.url("?wait=1"),
        CeleryOptions::default(),
        Arc::new(SystemClock),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("`?wait=`"), "{e}");
    let Err(e) = SharedBucket::new(&s.url("?wait=1"), "k", 1.0, None) else {
        panic!("a limit with ?wait= is refused");
    };
    let e = e.to_string();
    assert!(e.contains("`?wait=`"), "{e}");

    // A master the sentinels do not watch is refused at connect, named.
    let wrong = url.replace("/mymaster/", "/nope/");
    let e = RedisBroker::connect(&wrong, RedisOptions::default(), Arc::new(SystemClock))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("knows no master named \"nope\""), "{e}");

    let o = CeleryOptions {
        consumer: Some("celery-sentinel".into()),
        ..CeleryOptions::default()
    };
    let cb = CeleryBroker::connect(&url, o, Arc::new(SystemClock))
        .await
        .unwrap();
    let capp = App::new(cb.seams(), Arc::new(SystemClock));
    capp.register(
        "mul",
        Policy::default(),
        body(|_, args| async move {
            Ok(json!(
                args[0].as_i64().unwrap_or(0) * args[1].as_i64().unwrap_or(0)
            ))
        }),
    )
    .unwrap();
    let w = Worker::new(capp.clone(), WorkerConfig::default()).unwrap();
    let w2 = w.clone();
    let running = tokio::spawn(async move { w2.run().await.unwrap() });
    let bucket = SharedBucket::new(&url, "sentinel-bucket", 1000.0, Some(1000.0)).unwrap();
    let mul = |a: i64, b: i64| {
        let capp = capp.clone();
        async move {
            let h = capp
                .send_task(
                    "mul",
                    vec![json!(a), json!(b)],
                    Map::new(),
                    Options::default(),
                )
                .await
                .unwrap();
            h.get(Some(Duration::from_secs(30))).await.unwrap()
        }
    };
    assert_eq!(mul(6, 7).await, json!(42));
    assert!(bucket.take(1.0).await.unwrap());

    s.node(first).kill();
    until(
        Duration::from_secs(30),
        "the sentinels name a new primary",
        || s.primary_port().is_some_and(|p| p != first),
    );
    let second = s.primary_port().unwrap();
    assert_ne!(first, second, "positive control: the primary changed");
    // Sent, run and answered on the new primary; the limit answers there.
    assert_eq!(mul(3, 5).await, json!(15));
    assert!(bucket.take(1.0).await.unwrap());
    let new = s.nodes.iter().find(|n| n.port == second).unwrap();
    assert!(
        new.cli(&["KEYS", "*sentinel-bucket*"])
            .contains("sentinel-bucket"),
        "the limit's key is on the new primary"
    );
    w.stop(Duration::from_secs(2));
    running.await.unwrap();
}
