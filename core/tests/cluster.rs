//! Redis Cluster: a real one of the test's own, three primaries and three
//! replicas.
//!
//! - The shared limits run on it (`redis+cluster://` seeds): each limit's
//!   script touches one key, so any slot serves it; limits whose keys are
//!   in different slots (on different primaries) answer alike. After a
//!   `kill -9` of the primary serving one limit's key, its replica takes
//!   over and the limit answers again, its state kept.
//! - headway's own layout runs on it: tasks, a retry, a chain and a chord
//!   whose tasks are on queues in different slots (on different primaries:
//!   checked), the claims of a worker that died come back by `recover()`,
//!   and a `kill -9` of the primary of a queue's slot under a running
//!   worker loses no send confirmed with `?wait=1` (its replica takes over,
//!   and the worker drains there).
//! - Celery's layout refuses a `redis+cluster://` URL at connect, naming it
//!   (kombu has no Cluster either).
//!
//! Skipped without redis-server unless `HEADWAY_REQUIRE_REDIS=1`.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use headway_core::broker::celery::{CeleryBroker, CeleryOptions};
use headway_core::broker::{RedisBroker, RedisOptions};
use headway_core::flow::SECOND;
use headway_core::limit::SharedWindow;
use headway_core::task::State;
use headway_core::task::spec::{Broker, Inspector};
use headway_core::task::{
    App, Canvas, Failure, Options, Policy, Sig, SystemClock, Worker, WorkerConfig, body,
};
use serde_json::{Map, Value, json};
use support::cluster::Cluster;
use support::sentinel::until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_limits_run_on_a_cluster_and_through_a_primary_failover() {
    let Some(mut c) = Cluster::start() else {
        return;
    };
    let url = c.url("");
    // Keys on different primaries (positive control: the spread is real).
    let names: Vec<String> = (0..12).map(|i| format!("cl-{i}")).collect();
    let owners: BTreeSet<u16> = names
        .iter()
        .map(|n| c.primary_of(&format!("headway:limit:window:{n}")).unwrap())
        .collect();
    assert!(owners.len() >= 2, "keys on several primaries: {owners:?}");
    let windows: Vec<SharedWindow> = names
        .iter()
        .map(|n| SharedWindow::new(&url, n, 3, 60 * SECOND).unwrap())
        .collect();
    for w in &windows {
        for _ in 0..2 {
            assert!(w.take().await.unwrap(), "allowed within the window");
        }
    }
    // The primary of the first limit's key dies; its replica takes over.
    let key = format!("headway:limit:window:{}", names[0]);
    let first = c.primary_of(&key).unwrap();
    c.replicated(first);
    c.kill(first);
    until(Duration::from_secs(30), "a replica promoted", || {
        c.primary_of(&key).is_some_and(|p| p != first)
    });
    // The limit answers again (a take during the failover may be refused
    // as a connection error: the caller hears it), with its state: one
    // more allowed, then refused (3 per window).
    let t = Instant::now();
    let third = loop {
        match windows[0].take().await {
            Ok(allowed) => break allowed,
            Err(e) => {
                assert!(
                    t.elapsed() < Duration::from_secs(30),
                    "the limit never answered after the failover: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert!(third, "the third take is allowed: the replica kept two");
    assert!(!windows[0].take().await.unwrap(), "the fourth is refused");
    // The others answer too, on their primaries.
    for w in &windows[1..] {
        assert!(w.take().await.unwrap());
        assert!(!w.take().await.unwrap());
    }
}

#[tokio::test]
async fn celery_layout_refuses_a_cluster_url_naming_it() {
    let url = "redis+cluster://:secret@127.0.0.1:1,127.0.0.1:2/";
    let e = CeleryBroker::connect(url, CeleryOptions::default(), Arc::new(SystemClock))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Celery's layout does not run on Redis Cluster"),
        "{e}"
    );
    assert!(!e.contains("secret"), "{e}");
}

async fn broker(url: &str, name: &str, lease: Duration) -> Arc<RedisBroker> {
    let o = RedisOptions {
        consumer: Some(name.into()),
        lease,
        recover_every: None,
        ..RedisOptions::default()
    };
    RedisBroker::connect(url, o, Arc::new(SystemClock))
        .await
        .unwrap()
}

fn on(queue: &str) -> Policy {
    Policy {
        queue: queue.into(),
        acks_late: true,
        ..Policy::default()
    }
}

fn register(app: &App) {
    app.register(
        "add",
        on("qa"),
        body(
            |_, args| async move { Ok(json!(args.iter().filter_map(Value::as_i64).sum::<i64>())) },
        ),
    )
    .unwrap();
    app.register(
        "total",
        on("qb"),
        body(|_, args| async move {
            let list = args[0].as_array().cloned().unwrap_or_default();
            Ok(json!(list.iter().filter_map(Value::as_i64).sum::<i64>()))
        }),
    )
    .unwrap();
    app.register(
        "flaky",
        Policy {
            retries: 3,
            backoff: headway_core::task::RetryBackoff::fixed(20).unwrap(),
            ..on("qc")
        },
        body(|ctx, _| async move {
            if ctx.attempt < 3 {
                return Err(Failure::new("Again", "not yet"));
            }
            Ok(json!(ctx.attempt))
        }),
    )
    .unwrap();
}

fn worker(app: &App) -> (Worker, tokio::task::JoinHandle<()>) {
    let w = Worker::new(
        app.clone(),
        WorkerConfig {
            queues: vec!["qa".into(), "qb".into(), "qc".into()],
            concurrency: 4,
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let w2 = w.clone();
    (w, tokio::spawn(async move { w2.run().await.unwrap() }))
}

const T: Option<Duration> = Some(Duration::from_secs(20));

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_own_layout_runs_tasks_chains_and_chords_across_slots() {
    let Some(c) = Cluster::start() else {
        return;
    };
    let slots: BTreeSet<u16> = ["qa", "qb", "qc"]
        .iter()
        .map(|q| c.primary_of(&format!("headway:{{{q}}}:ready:0")).unwrap())
        .collect();
    assert!(
        slots.len() >= 2,
        "the queues are on several primaries: {slots:?}"
    );
    let b = broker(&c.url(""), "cl-worker", Duration::from_secs(30)).await;
    let app = App::new(b.seams(), Arc::new(SystemClock));
    register(&app);
    let (w, running) = worker(&app);
    let s = |a: i64, b: i64| Canvas::Sig(Sig::new("add", vec![json!(a), json!(b)]));
    let h = app
        .send_task(
            "add",
            vec![json!(2), json!(3)],
            Map::new(),
            Options::default(),
        )
        .await
        .unwrap();
    assert_eq!(h.get(T).await.unwrap(), json!(5));
    // A retry: the next attempt is published by the settle script.
    let h = app
        .send_task("flaky", vec![], Map::new(), Options::default())
        .await
        .unwrap();
    assert_eq!(h.get(T).await.unwrap(), json!(3));
    // A chain and a chord whose links are on other queues (slots).
    let chained = app
        .send_canvas(Canvas::Chain(vec![
            s(1, 2),
            Canvas::Sig(Sig::new("add", vec![json!(10)])),
        ]))
        .await
        .unwrap();
    assert_eq!(chained.get(T).await.unwrap(), json!(13));
    let joined = app
        .send_canvas(Canvas::Chord(
            vec![s(1, 1), s(2, 2), s(3, 3)],
            Box::new(Canvas::Sig(Sig::new("total", vec![]))),
        ))
        .await
        .unwrap();
    assert_eq!(joined.get(T).await.unwrap(), json!(12));
    // A revoked task does not run (the worker asks: the claim cannot read
    // a mark in another slot); its neighbour does (positive control).
    let opts = |id: &str| Options {
        id: Some(id.into()),
        countdown: Some(300),
        ..Options::default()
    };
    let r = app
        .send_task("add", vec![json!(1)], Map::new(), opts("gone"))
        .await
        .unwrap();
    app.revoke(&["gone".to_string()], false).await.unwrap();
    let kept = app
        .send_task("add", vec![json!(7)], Map::new(), opts("kept"))
        .await
        .unwrap();
    assert_eq!(kept.get(T).await.unwrap(), json!(7));
    let e = r.get(Some(Duration::from_secs(2))).await.unwrap_err();
    assert!(e.to_string().to_lowercase().contains("revoked"), "{e}");
    // The inspector across nodes: the per-state counts (their indexes in
    // slots of their own) and the queues.
    let counts = b.counts().await.unwrap();
    let ok = counts.get(&State::Success).copied().unwrap_or(0);
    assert!(ok >= 8, "successes counted: {counts:?}");
    assert!(
        counts.get(&State::Revoked).copied().unwrap_or(0) >= 1,
        "{counts:?}"
    );
    let queues: BTreeSet<String> = b
        .queues()
        .await
        .unwrap()
        .into_iter()
        .map(|q| q.name)
        .collect();
    for q in ["qa", "qb", "qc"] {
        assert!(queues.contains(q), "{queues:?}");
    }
    w.stop(Duration::from_secs(2));
    running.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_workers_claims_come_back_on_a_cluster() {
    let Some(c) = Cluster::start() else {
        return;
    };
    let url = c.url("");
    let producer = broker(&url, "cl-producer", Duration::from_secs(30)).await;
    let papp = App::new(producer.seams(), Arc::new(SystemClock));
    register(&papp);
    let mut handles = Vec::new();
    for i in 0..3 {
        handles.push(
            papp.send_task(
                "add",
                vec![json!(i), json!(100)],
                Map::new(),
                Options::default(),
            )
            .await
            .unwrap(),
        );
    }
    // A consumer claims them and dies holding them (dropped: no ack, no
    // close, its lease stops being refreshed).
    let dead = broker(&url, "cl-dead", Duration::from_millis(500)).await;
    let got = dead
        .consume(&["qa".to_string()], 10, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(got.len(), 3, "the dying consumer held all three");
    drop(got);
    drop(dead);
    // Another consumer recovers them once the lease ran out, and runs them.
    let live = broker(&url, "cl-live", Duration::from_secs(30)).await;
    let t = Instant::now();
    let mut back = 0;
    while back < 3 {
        assert!(t.elapsed() < Duration::from_secs(20), "recovered {back}");
        back += live.recover().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(back, 3);
    let app = App::new(live.seams(), Arc::new(SystemClock));
    register(&app);
    let (w, running) = worker(&app);
    for (i, h) in handles.iter().enumerate() {
        assert_eq!(h.get(T).await.unwrap(), json!(i as i64 + 100));
    }
    w.stop(Duration::from_secs(2));
    running.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_of_a_primary_loses_no_send_confirmed_with_wait() {
    let Some(mut c) = Cluster::start() else {
        return;
    };
    let key = "headway:{qa}:ready:0";
    let first = c.primary_of(key).unwrap();
    let producer = broker(
        &c.url("?wait=1&wait_timeout=500"),
        "cl-p",
        Duration::from_secs(30),
    )
    .await;
    let papp = App::new(producer.seams(), Arc::new(SystemClock));
    register(&papp);
    // A worker runs through the failover (a short lease: what it held on
    // the old primary and the replica did not see settled is swept back
    // within one).
    let b = broker(&c.url(""), "cl-w", Duration::from_secs(2)).await;
    let app = App::new(b.seams(), Arc::new(SystemClock));
    register(&app);
    let (w, running) = worker(&app);
    let mut confirmed = Vec::new();
    let mut refused = Vec::new();
    for i in 0..60 {
        if i == 40 {
            // The primary of qa's slot dies under the sends.
            c.kill(first);
        }
        match papp
            .send_task("add", vec![json!(i)], Map::new(), Options::default())
            .await
        {
            Ok(h) => confirmed.push((i, h)),
            Err(e) => refused.push(e.to_string()),
        }
    }
    until(Duration::from_secs(30), "a replica promoted", || {
        c.primary_of(key).is_some_and(|p| p != first)
    });
    assert_ne!(
        c.primary_of(key),
        Some(first),
        "positive control: the primary changed"
    );
    assert!(
        confirmed.len() >= 40,
        "the sends before the kill were confirmed"
    );
    // With its replica promoted, the slot has no replica left: ?wait=1
    // refuses, naming it.
    assert!(
        refused.iter().any(|e| e.contains("`wait`")) || confirmed.len() == 60,
        "{refused:?}"
    );
    // The drain, on the new primary: every confirmed send runs, and a
    // send after the failover (no wait asked) runs too.
    for (i, h) in &confirmed {
        assert_eq!(h.get(T).await.unwrap(), json!(i), "confirmed send {i} ran");
    }
    let after = app
        .send_task("add", vec![json!(1000)], Map::new(), Options::default())
        .await
        .unwrap();
    assert_eq!(after.get(T).await.unwrap(), json!(1000));
    eprintln!(
        "cluster kill: {} confirmed, {} refused, primary {first} -> {:?}",
        confirmed.len(),
        refused.len(),
        c.primary_of(key)
    );
    w.stop(Duration::from_secs(2));
    running.await.unwrap();
}
