//! headway's own Redis layout where it meets a hostile or unusual Redis: a
//! result key Redis refuses to write (late acks wait for their result), a
//! huge message on a queue (a dead letter keeps a prefix, not the bytes),
//! ids that need JSON escaping in the scripts' dead-letter headers, a
//! Cluster node (refused at connect), and the minimal ACL that
//! docs/redis-layout.md documents (the broker runs under exactly it).

mod support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use headway_core::broker::{RedisBroker, RedisOptions};
use headway_core::task::{
    App, Backend, Broker, Clock, Message, Outcome, Policy, State, SystemClock,
    Worker, WorkerConfig, body,
};
use serde_json::{Map, Value};
use headway_core::task::spec::Round;
use support::RedisServer;

fn msg(id: &str, task: &str, q: &str) -> Message {
    Message::new(id.into(), task.into(), vec![], Map::new(), q.into())
}

async fn open_at(url: &str, consumer: &str, lease_ms: u64) -> Arc<RedisBroker> {
    RedisBroker::connect(
        url,
        RedisOptions {
            consumer: Some(consumer.into()),
            lease: Duration::from_millis(lease_ms),
            recover_every: None,
            ..RedisOptions::default()
        },
        Arc::new(SystemClock) as Arc<dyn Clock>,
    )
    .await
    .unwrap()
}

/// Polls `f` until it holds, failing with `what` after 10 s.
async fn until(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ------------------------------------------------ late acks wait for results

/// A run whose result Redis refuses to store (the key holds a set) is not
/// acked: its claim stays held by the live worker, and a recover after the
/// worker is gone hands it back. The other runs are stored and acked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acks_late_run_whose_store_fails_stays_held_and_the_others_land() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let b = open_at(&s.url(), "w1", 30_000).await;
    let app = App::new(b.seams(), Arc::new(SystemClock));
    let ran = Arc::new(Mutex::new(HashSet::new()));
    let r2 = ran.clone();
    app.register(
        "t",
        Policy {
            acks_late: true,
            ..Policy::default()
        },
        body(move |ctx, _| {
            r2.lock().unwrap().insert(ctx.id.clone());
            async { Ok(Value::from(7)) }
        }),
    )
    .unwrap();
    // The poisoned run's result key already holds a set: WRONGTYPE.
    s.cli(&["SADD", "headway:result:poison", "x"]);
    let ids = ["a1", "a2", "poison", "a3", "a4"];
    b.publish(ids.iter().map(|i| msg(i, "t", "default")).collect())
        .await
        .unwrap();
    let w = Worker::new(
        app.clone(),
        WorkerConfig {
            concurrency: 8,
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let w2 = w.clone();
    let h = tokio::spawn(async move { w2.run().await.unwrap() });
    until("every run ran and the others were stored and acked", async || {
        let mut stored = 0;
        for i in ["a1", "a2", "a3", "a4"] {
            if matches!(b.fetch(i).await, Ok(Some(o)) if o.state == State::Success) {
                stored += 1;
            }
        }
        stored == 4
            && ran.lock().unwrap().len() == 5
            && s.cli(&["LLEN", "headway:{default}:held:w1"]) == "1"
    })
    .await;
    // The one still held is the poisoned run's claim.
    let held = s.cli(&["LRANGE", "headway:{default}:held:w1", "0", "-1"]);
    assert!(held.contains("\"id\":\"poison\""), "held: {held}");
    assert_eq!(s.cli(&["TYPE", "headway:result:poison"]), "set");
    w.stop(Duration::from_secs(5));
    h.await.unwrap();
    b.close().await;
    // Another process recovers it: the run is delivered again.
    let b2 = open_at(&s.url(), "w2", 30_000).await;
    assert_eq!(b2.recover().await.unwrap(), 1);
    let got = b2
        .consume(&["default".to_string()], 10, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].message.id, "poison");
    assert!(got[0].redelivered);
}

/// One round of three runs, the middle one's result key poisoned: the other
/// two are stored and acked, the round does not fail, the middle claim
/// stays held; once the key is fixed the background task stores it and
/// acks the claim in the same step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_refused_store_in_a_round_holds_back_its_own_ack_only_and_is_retried() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    // A 300 ms lease: the background task ticks every 100 ms.
    let b = open_at(&s.url(), "w1", 300).await;
    b.publish(vec![msg("r1", "t", "q"), msg("r2", "t", "q"), msg("r3", "t", "q")])
        .await
        .unwrap();
    let got = b.claim(&["q".to_string()], 3, Duration::ZERO).await.unwrap();
    assert_eq!(got.len(), 3);
    s.cli(&["HSET", "headway:result:r2", "f", "v"]);
    let mut r = Round::default();
    for (i, c) in got.iter().enumerate() {
        let mut o = Outcome::new(c.delivery.message.id.clone(), State::Success, 1);
        o.result = Some(Value::from(i));
        r.outcomes.push(o);
        r.after.push((i, c.delivery.receipt.clone()));
    }
    r.ask.push("r1".into());
    let asked = b.round(r).unwrap().await.expect("the round itself succeeds");
    assert_eq!(asked, [false], "the revoked question is answered");
    for (id, v) in [("r1", 0), ("r3", 2)] {
        let o = b.fetch(id).await.unwrap().expect("stored");
        assert_eq!(o.result, Some(Value::from(v)));
    }
    let held = s.cli(&["LRANGE", "headway:{q}:held:w1", "0", "-1"]);
    assert_eq!(held.lines().count(), 1, "held: {held}");
    assert!(held.contains("\"id\":\"r2\""), "held: {held}");
    assert_eq!(s.cli(&["TYPE", "headway:result:r2"]), "hash");
    // The plain store refuses too, naming the result it could not store.
    let e = b
        .store(vec![Outcome::new("r2", State::Success, 1)])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("\"r2\"") && e.to_string().contains("WRONGTYPE"), "{e}");
    // Fixed: the retry stores it and acks its claim.
    s.cli(&["DEL", "headway:result:r2"]);
    until("the kept result is stored and its claim acked", async || {
        s.cli(&["LLEN", "headway:{q}:held:w1"]) == "0"
    })
    .await;
    let o = b.fetch("r2").await.unwrap().expect("stored by the retry");
    assert_eq!(o.result, Some(Value::from(1)));
}
