//! Celery's remote control and events on RabbitMQ, read off the wire with
//! a plain AMQP client as kombu would read them (a vhost of each test's
//! own; skipped without RabbitMQ unless HEADWAY_REQUIRE_RABBITMQ=1).
//! `tests-py/test_amqp_remote.py` asks with Celery's own CLI and
//! `EventReceiver`.

mod support;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use headway_core::broker::target::backend_store;
use headway_core::broker::{Connected, Target};
use headway_core::task::{App, Clock, Options, Policy, Worker, WorkerConfig, body};
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};
use serde_json::{Map, Value, json};
use support::rabbit::Vhost;

fn system() -> Arc<dyn Clock> {
    headway_core::task::clock::system()
}

async fn app_on(url: &str, redis: &support::RedisServer) -> (App, Connected) {
    let on = Target::url("broker", url)
        .unwrap()
        .task_send_sent_event(true)
        .connect(&system())
        .await
        .unwrap();
    let store = backend_store("backend", &redis.url(), &on, &system())
        .await
        .unwrap();
    (on.app(&store, system()), on)
}

/// A consumer of a fresh exclusive queue bound to `exchange` (declared as
/// Celery declares it) with `key`.
async fn listen(
    conn: &Connection,
    exchange: &str,
    kind: ExchangeKind,
    durable: bool,
    key: &str,
) -> lapin::Consumer {
    let ch = conn.create_channel().await.unwrap();
    let opts = ExchangeDeclareOptions {
        durable,
        ..Default::default()
    };
    ch.exchange_declare(exchange.into(), kind, opts, FieldTable::default())
        .await
        .unwrap();
    let q = ch
        .queue_declare(
            "".into(),
            QueueDeclareOptions {
                exclusive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    ch.queue_bind(
        q.name().clone(),
        exchange.into(),
        key.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.basic_consume(
        q.name().clone(),
        "".into(),
        BasicConsumeOptions {
            no_ack: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap()
}

/// The next message on `c` within 10 s: (routing key, headers, body).
async fn next(c: &mut lapin::Consumer, what: &str) -> (String, Map<String, Value>, Value) {
    let d = tokio::time::timeout(Duration::from_secs(10), c.next())
        .await
        .unwrap_or_else(|_| panic!("never: {what}"))
        .unwrap()
        .unwrap();
    let mut headers = Map::new();
    if let Some(h) = d.properties.headers() {
        for (k, v) in h.inner() {
            let v = match v {
                AMQPValue::LongString(s) => json!(s.to_string()),
                AMQPValue::LongLongInt(n) => json!(n),
                AMQPValue::LongInt(n) => json!(n),
                other => json!(format!("{other:?}")),
            };
            headers.insert(k.to_string(), v);
        }
    }
    assert_eq!(
        d.properties.content_type().as_ref().map(|s| s.as_str()),
        Some("application/json"),
        "{what}"
    );
    let body: Value = serde_json::from_slice(&d.data).unwrap();
    (d.routing_key.to_string(), headers, body)
}

/// Publishes a Celery control command as kombu's `Mailbox._publish` does.
async fn ask(conn: &Connection, method: &str, destination: Value, ticket: &str) {
    let ch = conn.create_channel().await.unwrap();
    let body = json!({
        "method": method, "arguments": {}, "destination": destination,
        "pattern": null, "matcher": null, "ticket": ticket,
        "reply_to": {"exchange": "reply.celery.pidbox", "routing_key": "oid-1"},
    });
    let mut h = FieldTable::default();
    h.insert("clock".into(), AMQPValue::LongLongInt(1));
    h.insert("expires".into(), AMQPValue::LongInt(0));
    let props = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_content_encoding("utf-8".into())
        .with_headers(h);
    ch.basic_publish(
        "celery.pidbox".into(),
        "".into(),
        BasicPublishOptions::default(),
        body.to_string().as_bytes(),
        props,
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_answers_celerys_control_and_sends_its_events_on_rabbitmq() {
    let Some(vh) = Vhost::new() else { return };
    let Some(redis) = support::RedisServer::start() else {
        return;
    };
    let client = Connection::connect(&vh.url(), ConnectionProperties::default())
        .await
        .unwrap();
    let mut events = listen(&client, "celeryev", ExchangeKind::Topic, true, "#").await;
    let mut replies = listen(
        &client,
        "reply.celery.pidbox",
        ExchangeKind::Direct,
        false,
        "oid-1",
    )
    .await;
    let (app, on) = app_on(&vh.url(), &redis).await;
    let Connected::Amqp(broker) = &on else {
        panic!("not amqp")
    };
    let node = broker.node().to_string();
    app.register(
        "tasks.add",
        Policy::default(),
        body(|_ctx, args| async move {
            Ok(json!(args.iter().filter_map(Value::as_i64).sum::<i64>()))
        }),
    )
    .unwrap();
    app.enable_task_events().unwrap();
    let w = Worker::new(
        app.clone(),
        WorkerConfig {
            concurrency: 2,
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let w2 = w.clone();
    let h = tokio::spawn(async move { w2.run().await.unwrap() });
    // The first event is the worker's coming online: it runs now.
    let (key, headers, online) = next(&mut events, "worker-online").await;
    assert_eq!(
        (key.as_str(), online["type"].as_str()),
        ("worker.online", Some("worker-online"))
    );
    assert_eq!(headers["hostname"], json!(node));
    assert_eq!(online["hostname"], json!(node));
    assert_eq!(online["sw_ident"], json!("headway"));
    // Not for this node: unanswered; for every node: answered, and the
    // reply carries the ticket.
    ask(&client, "ping", json!(["nobody@nowhere"]), "t-other").await;
    ask(&client, "ping", Value::Null, "t-all").await;
    let (key, headers, reply) = next(&mut replies, "the ping's reply").await;
    assert_eq!(key, "oid-1");
    assert_eq!(headers["ticket"], json!("t-all"));
    assert_eq!(reply, json!({ node.as_str(): {"ok": "pong"} }));
    // An unknown command is answered as Celery's worker answers it.
    ask(&client, "nope", Value::Null, "t-nope").await;
    let (_, headers, reply) = next(&mut replies, "the unknown command's reply").await;
    assert_eq!(headers["ticket"], json!("t-nope"));
    assert_eq!(reply[&node]["error"], json!("No such key: 'nope'"));
    // A run's events, in order, after the producer's task-sent.
    let hd = app
        .send(
            "tasks.add",
            vec![json!(2), json!(3)],
            Map::new(),
            Options::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        hd.get(Some(Duration::from_secs(10))).await.unwrap(),
        json!(5)
    );
    let mut kinds = Vec::new();
    while kinds.last().map(String::as_str) != Some("task-succeeded") {
        let (key, _, ev) = next(&mut events, "the run's events").await;
        if ev["uuid"] == json!(hd.id()) {
            assert_eq!(key, ev["type"].as_str().unwrap().replace('-', "."));
            kinds.push(ev["type"].as_str().unwrap().to_string());
            if ev["type"] == "task-succeeded" {
                assert_eq!(ev["result"], json!("5"));
            }
            if ev["type"] == "task-sent" {
                assert_eq!(ev["routing_key"], json!("celery"));
            }
        }
    }
    assert_eq!(
        kinds,
        [
            "task-sent",
            "task-received",
            "task-started",
            "task-succeeded"
        ]
    );
    w.stop(Duration::from_secs(5));
    h.await.unwrap();
}

/// `n` messages of `tasks.add` with no arguments, ids `m0`, `m1`, ...
fn adds(n: usize) -> Vec<headway_core::task::Message> {
    (0..n)
        .map(|i| {
            headway_core::task::Message::new(
                format!("m{i}"),
                "tasks.add".into(),
                vec![],
                Map::new(),
                "default".into(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_of_acks_never_covers_a_message_still_held() {
    let Some(vh) = Vhost::new() else { return };
    let on = Target::url("broker", &vh.url())
        .unwrap()
        .connect(&system())
        .await
        .unwrap();
    let b = on.broker();
    b.publish(adds(5)).await.unwrap();
    let qs = vec!["default".to_string()];
    let mut got = Vec::new();
    while got.len() < 5 {
        got.extend(b.consume(&qs, 5, Duration::from_secs(5)).await.unwrap());
    }
    let unacked = || {
        vh.list("queues", &["name", "messages_unacknowledged"])
            .iter()
            .find(|r| r[0] == "celery")
            .map(|r| r[1].clone())
            .unwrap_or_default()
    };
    let wait_for = |want: &'static str| {
        let unacked = &unacked;
        async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                let now = unacked();
                if now == want {
                    return;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "unacked {now}, want {want}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    wait_for("5").await;
    // The two lowest in a row (one frame, `multiple`) and the fourth: the
    // third and the fifth stay unacked.
    let r = |i: usize| got[i].receipt.clone();
    b.ack(vec![r(1), r(0), r(3)]).await.unwrap();
    wait_for("2").await;
    // The fifth alone, then the third: none is left, and the queue is empty.
    b.ack(vec![r(4)]).await.unwrap();
    wait_for("1").await;
    b.ack(vec![r(2)]).await.unwrap();
    wait_for("0").await;
    let ready = vh.list("queues", &["name", "messages"]);
    assert!(
        ready.iter().any(|r| r[0] == "celery" && r[1] == "0"),
        "{ready:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gathered_acks_land_without_more_work_and_a_close_sends_them() {
    let Some(vh) = Vhost::new() else { return };
    let connect = || async {
        Target::url("broker", &vh.url())
            .unwrap()
            .connect(&system())
            .await
            .unwrap()
    };
    let on = connect().await;
    let b = on.broker();
    b.publish(adds(40)).await.unwrap();
    let qs = vec!["default".to_string()];
    let unacked = || {
        vh.list("queues", &["name", "messages_unacknowledged", "messages"])
            .iter()
            .find(|r| r[0] == "celery")
            .map(|r| (r[1].clone(), r[2].clone()))
            .unwrap_or_default()
    };
    let wait_for = |want: (&'static str, &'static str)| {
        let unacked = &unacked;
        async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                let now = unacked();
                if (now.0.as_str(), now.1.as_str()) == want {
                    return;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "unacked and messages {now:?}, want {want:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    // A prefetch of 64: acks are gathered sixteen to a frame. Thirty-seven
    // acked one by one (two frames' worth and five over) all land, the last
    // five with nothing else to wait for; the three held stay unacked.
    let mut got = Vec::new();
    while got.len() < 40 {
        got.extend(b.consume(&qs, 64, Duration::from_secs(5)).await.unwrap());
    }
    for d in &got[..37] {
        b.ack(vec![d.receipt.clone()]).await.unwrap();
    }
    wait_for(("3", "3")).await;
    // Two more acked and the connection closed at once: the close sends
    // them first, and only the last one held goes back, redelivered.
    b.ack(vec![got[37].receipt.clone(), got[38].receipt.clone()])
        .await
        .unwrap();
    drop(got);
    on.close().await.unwrap();
    wait_for(("0", "1")).await;
    let on = connect().await;
    let b = on.broker();
    let mut again = Vec::new();
    while again.is_empty() {
        again.extend(b.consume(&qs, 64, Duration::from_secs(5)).await.unwrap());
    }
    assert!(again.iter().all(|d| d.redelivered));
    b.ack(again.iter().map(|d| d.receipt.clone()).collect())
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    wait_for(("0", "0")).await;
}
