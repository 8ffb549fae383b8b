//! Tasks a headway consumer does not run, on a queue it shares with Celery
//! workers: handed back (a pickle too: a Celery worker may take pickle),
//! each hand-back counted in the envelope, dead-lettered after
//! `max_handbacks`; the names logged are bounded. Each test starts its own
//! redis-server; skipped without one unless `HEADWAY_REQUIRE_REDIS=1`.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use headway_core::broker::celery::{CeleryBroker, CeleryOptions, HANDBACK_HEADER};
use headway_core::task::{
    App, Broker, Inspector, Message, Policy, SystemClock, Worker, WorkerConfig, body,
};
use serde_json::{Map, Value, json};
use support::RedisServer;

fn opts(max_handbacks: u32) -> CeleryOptions {
    CeleryOptions {
        consumer: Some("unknown".into()),
        restore_every: None,
        max_handbacks,
        ..CeleryOptions::default()
    }
}

fn msg(id: &str, task: &str) -> Message {
    Message::new(id.into(), task.into(), vec![], Map::new(), "default".into())
}

fn qs() -> Vec<String> {
    vec!["default".to_string()]
}

async fn setup(s: &RedisServer, max: u32) -> (Arc<CeleryBroker>, App, Arc<AtomicU32>) {
    let b = CeleryBroker::connect(&s.url(), opts(max), Arc::new(SystemClock))
        .await
        .unwrap();
    let app = App::new(b.seams(), Arc::new(SystemClock));
    b.route_for(&app);
    let ran = Arc::new(AtomicU32::new(0));
    let r2 = ran.clone();
    app.register(
        "mine",
        Policy::default(),
        body(move |_, _| {
            r2.fetch_add(1, Ordering::SeqCst);
            async { Ok(Value::Null) }
        }),
    )
    .unwrap();
    (b, app, ran)
}

/// The hand-back count of the envelope at the head of the queue's list.
fn handbacks(s: &RedisServer) -> Option<u64> {
    let v: Value = serde_json::from_str(&s.cli(&["LINDEX", "celery", "0"])).ok()?;
    v["headers"][HANDBACK_HEADER].as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_backs_are_counted_and_the_message_is_dead_lettered_after_the_limit() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let (b, _app, _) = setup(&s, 3).await;
    b.publish(vec![msg("c1", "theirs"), msg("m1", "mine")])
        .await
        .unwrap();
    let got = b.consume(&qs(), 10, Duration::ZERO).await.unwrap();
    let ids: Vec<&str> = got.iter().map(|d| d.message.id.as_str()).collect();
    assert_eq!(ids, ["m1"], "its own task is delivered");
    assert_eq!(
        s.cli(&["LLEN", "celery"]),
        "1",
        "the other is back on the queue"
    );
    assert_eq!(handbacks(&s), Some(1));
    assert!(
        b.consume(&qs(), 10, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(handbacks(&s), Some(2));
    assert_eq!(b.dead_count("default").await.unwrap(), 0);
    // The third hand-back is the limit: a dead letter, not the queue.
    assert!(
        b.consume(&qs(), 10, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(s.cli(&["LLEN", "celery"]), "0");
    assert_eq!(s.cli(&["HLEN", "unacked"]), "1", "only m1 is held");
    let dead = b.dead_letters("default", 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id.as_deref(), Some("c1"));
    assert!(
        dead[0].reason.contains("\"theirs\" handed back \u{d7}3"),
        "{}",
        dead[0].reason
    );
    // Kept whole, the count taken off: a re-queue starts afresh.
    let env: Value = serde_json::from_slice(&dead[0].raw).unwrap();
    assert!(env["headers"].get(HANDBACK_HEADER).is_none());
    assert_eq!(b.requeue_dead("default", &[], 10).await.unwrap(), 1);
    assert_eq!(handbacks(&s), None);
    assert_eq!(s.cli(&["LLEN", "celery"]), "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_worker_keeps_handing_back_while_its_own_tasks_run() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let (b, app, ran) = setup(&s, 100).await;
    b.publish(vec![msg("c1", "theirs")]).await.unwrap();
    let w = Worker::new(app.clone(), WorkerConfig::default()).unwrap();
    let w2 = w.clone();
    let h = tokio::spawn(async move { w2.run().await.unwrap() });
    // Handed back again and again, and on the queue each time it is seen.
    let deadline = Instant::now() + Duration::from_secs(10);
    while handbacks(&s).is_none_or(|n| n < 2) {
        assert!(Instant::now() < deadline, "never handed back twice");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Positive control: the worker is live and runs its own tasks.
    b.publish(vec![msg("m1", "mine")]).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while ran.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "its own task never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    w.stop(Duration::from_secs(2));
    h.await.unwrap();
    b.close().await.unwrap();
    // Nothing lost: the other consumer's message is on the queue.
    assert_eq!(s.cli(&["LLEN", "celery"]), "1");
    assert_eq!(s.cli(&["HLEN", "unacked"]), "0");
    let v: Value = serde_json::from_str(&s.cli(&["LINDEX", "celery", "0"])).unwrap();
    assert_eq!(v["headers"]["id"], json!("c1"));
    assert_eq!(b.dead_count("default").await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_names_logged_are_bounded() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let (b, _app, _) = setup(&s, 100).await;
    let flood: Vec<Message> = (0..1100)
        .map(|i| msg(&format!("f{i}"), &format!("name-{i}\n")))
        .collect();
    b.publish(flood).await.unwrap();
    assert!(
        b.consume(&qs(), 2000, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    // Every one handed back (positive control: more names than the bound
    // went through), but only the first 1024 names remembered.
    assert_eq!(s.cli(&["LLEN", "celery"]), "1100");
    assert_eq!(b.unknown_names_logged(), 1024);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pickle_for_another_consumers_task_is_handed_back_not_quarantined() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let (b, _app, _) = setup(&s, 100).await;
    let pickle = |id: &str, task: &str| {
        format!(
            r#"{{"body": "gASVAAAAAAAAAAAu", "content-encoding": "binary", "content-type": "application/x-python-serialize", "headers": {{"lang": "py", "task": "{task}", "id": "{id}"}}, "properties": {{"delivery_info": {{"exchange": "", "routing_key": "celery"}}, "priority": 0, "body_encoding": "base64", "delivery_tag": "{id}"}}}}"#
        )
    };
    b.push_raw("default", pickle("p1", "theirs").as_bytes())
        .await
        .unwrap();
    assert!(
        b.consume(&qs(), 10, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(s.cli(&["LLEN", "celery"]), "1", "handed back");
    assert_eq!(handbacks(&s), Some(1));
    assert_eq!(b.dead_count("default").await.unwrap(), 0);
    // Positive control: a pickle for a task this app runs is quarantined
    // (headway never unpickles).
    s.cli(&["DEL", "celery"]);
    b.push_raw("default", pickle("p2", "mine").as_bytes())
        .await
        .unwrap();
    assert!(
        b.consume(&qs(), 10, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(s.cli(&["LLEN", "celery"]), "0");
    let dead = b.dead_letters("default", 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert!(dead[0].reason.starts_with("content type not allowed"));
}
