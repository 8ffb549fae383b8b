//! RabbitMQ on Celery's AMQP topology, over a real RabbitMQ (a vhost of
//! each test's own; skipped without one unless HEADWAY_REQUIRE_RABBITMQ=1),
//! results in Celery's Redis format on a redis-server of the test's own.
//! `tests-py/test_amqp_celery.py` runs real Celery workers beside it.

mod support;

use std::sync::Arc;
use std::time::Duration;

use headway_core::broker::target::backend_store;
use headway_core::broker::{Connected, Store, Target};
use headway_core::task::{
    App, Canvas, Clock, Message, Options, Policy, Sig, State, Worker, WorkerConfig, body,
};
use serde_json::{Map, Value, json};
use support::rabbit::Vhost;

fn system() -> Arc<dyn Clock> {
    headway_core::task::clock::system()
}

async fn broker(url: &str) -> Connected {
    Target::url("broker", url)
        .unwrap()
        .connect(&system())
        .await
        .unwrap()
}

async fn app_on(vh: &Vhost, redis: &support::RedisServer) -> (App, Connected) {
    let on = broker(&vh.url()).await;
    let store = backend_store("backend", &redis.url(), &on, &system())
        .await
        .unwrap();
    (on.app(&store, system()), on)
}

fn add(app: &App, policy: Policy) {
    app.register(
        "tasks.add",
        policy,
        body(|_ctx, args| async move {
            let a = args.first().and_then(Value::as_i64).unwrap_or(0);
            let b = args.get(1).and_then(Value::as_i64).unwrap_or(0);
            Ok(json!(a + b))
        }),
    )
    .unwrap();
}

fn worker(app: &App, prefetch: usize) -> (Worker, tokio::task::JoinHandle<()>) {
    let w = Worker::new(
        app.clone(),
        WorkerConfig {
            concurrency: 2,
            prefetch: Some(prefetch),
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let w2 = w.clone();
    (w, tokio::spawn(async move { w2.run().await.unwrap() }))
}

fn msg(id: &str) -> Message {
    Message::new(
        id.into(),
        "tasks.add".into(),
        vec![json!(1), json!(2)],
        Map::new(),
        "default".into(),
    )
}

/// Polls `cond` (up to 10 s), failing naming `what`.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn qs() -> Vec<String> {
    vec!["default".to_string()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_is_confirmed_on_celerys_topology() {
    let Some(vh) = Vhost::new() else { return };
    let b = broker(&vh.url()).await;
    b.broker().publish(vec![msg("m1")]).await.unwrap();
    // Returned: it is in RabbitMQ, persistent, on the durable `celery`
    // queue bound to the durable direct exchange `celery` by its name.
    let queues = vh.list("queues", &["name", "durable", "arguments", "messages"]);
    assert!(
        queues
            .iter()
            .any(|r| r[0] == "celery" && r[1] == "true" && r[3] == "1"),
        "{queues:?}"
    );
    let ex = vh.list("exchanges", &["name", "type", "durable"]);
    assert!(
        ex.iter()
            .any(|r| r[0] == "celery" && r[1] == "direct" && r[2] == "true"),
        "{ex:?}"
    );
    let bind = vh.list(
        "bindings",
        &["source_name", "destination_name", "routing_key"],
    );
    assert!(
        bind.iter()
            .any(|r| r[0] == "celery" && r[1] == "celery" && r[2] == "celery"),
        "{bind:?}"
    );
    // The inspector reads RabbitMQ's count of the queue.
    let Connected::Amqp(a) = &b else { panic!() };
    let qs_seen = headway_core::task::Inspector::queues(&**a).await.unwrap();
    assert_eq!(qs_seen.len(), 1, "{qs_seen:?}");
    assert_eq!(qs_seen[0].name, "default");
    assert_eq!(qs_seen[0].ready.values().sum::<u64>(), 1);
    // The message reads back as sent, with Celery's properties.
    let got = b
        .broker()
        .consume(&qs(), 10, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].message.id, "m1");
    assert_eq!(got[0].message.queue, "default");
    assert!(!got[0].redelivered);
    b.broker().ack(vec![got[0].receipt.clone()]).await.unwrap();
    until("acked", || {
        vh.list("queues", &["name", "messages"])
            .iter()
            .any(|r| r[0] == "celery" && r[1] == "0")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prefetch_bounds_what_a_consumer_holds_and_a_lost_consumer_gives_it_back() {
    let Some(vh) = Vhost::new() else { return };
    let b = broker(&vh.url()).await;
    let all: Vec<Message> = (0..6).map(|i| msg(&format!("p{i}"))).collect();
    b.broker().publish(all).await.unwrap();
    let got = b
        .broker()
        .consume(&qs(), 2, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(!got.is_empty() && got.len() <= 2, "{}", got.len());
    // basic.qos: RabbitMQ hands this consumer no more than 2 unacked.
    counts(&vh, 4, 2).await;
    // Not acked, and the connection closes: RabbitMQ requeues them, and the
    // next consumer sees them marked redelivered (positive control: the
    // never-delivered ones are not).
    let Connected::Amqp(a) = &b else { panic!() };
    a.close().await.unwrap();
    drop(b);
    let c = broker(&vh.url()).await;
    let mut seen = Vec::new();
    while seen.len() < 6 {
        let got = c
            .broker()
            .consume(&qs(), 6, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(!got.is_empty(), "only {} came back", seen.len());
        for d in got {
            seen.push((d.message.id.clone(), d.redelivered));
            c.broker().ack(vec![d.receipt]).await.unwrap();
        }
    }
    let redelivered = seen.iter().filter(|(_, r)| *r).count();
    assert_eq!(redelivered, 2, "{seen:?}");
}

/// Waits until RabbitMQ counts `ready` and `unacked` messages on `celery`.
async fn counts(vh: &Vhost, ready: usize, unacked: usize) {
    let (r, u) = (ready.to_string(), unacked.to_string());
    until(&format!("{ready} ready, {unacked} unacked"), || {
        vh.list(
            "queues",
            &["name", "messages_ready", "messages_unacknowledged"],
        )
        .iter()
        .any(|row| row[0] == "celery" && row[1] == r && row[2] == u)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_window_follows_the_workers_reach_up_and_down() {
    let Some(vh) = Vhost::new() else { return };
    let b = broker(&vh.url()).await;
    let all: Vec<Message> = (0..40).map(|i| msg(&format!("r{i}"))).collect();
    b.broker().publish(all).await.unwrap();
    let mut held = b
        .broker()
        .consume(&qs(), 2, Duration::from_secs(5))
        .await
        .unwrap();
    // Control: the window is the first claim's, 2.
    counts(&vh, 38, 2).await;
    // The reach rises to 10: RabbitMQ sends up to 10 unacked.
    b.broker().reach(&qs(), 10);
    counts(&vh, 30, 10).await;
    // It falls to 4: once everything held is acked, 4 come. The window's
    // basic.qos goes out on a task of its own: acked before RabbitMQ has
    // it, the refill would use the old window (10 unacked, not 4).
    b.broker().reach(&qs(), 4);
    until("the channel's window is 4", || {
        vh.list("channels", &["global_prefetch_count"])
            .iter()
            .any(|r| r[0] == "4")
    })
    .await;
    while held.len() < 10 {
        let got = b
            .broker()
            .consume(&qs(), 10, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(!got.is_empty(), "only {} of 10 delivered", held.len());
        held.extend(got);
    }
    b.broker()
        .ack(held.drain(..).map(|d| d.receipt).collect())
        .await
        .unwrap();
    counts(&vh, 26, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_requeues_or_drops_and_an_eta_is_held_until_due() {
    let Some(vh) = Vhost::new() else { return };
    let b = broker(&vh.url()).await;
    let br = b.broker();
    br.publish(vec![msg("r1")]).await.unwrap();
    let got = br.consume(&qs(), 1, Duration::from_secs(5)).await.unwrap();
    br.reject(got[0].receipt.clone(), true).await.unwrap();
    let again = br.consume(&qs(), 1, Duration::from_secs(5)).await.unwrap();
    assert_eq!(again[0].message.id, "r1");
    assert!(again[0].redelivered);
    br.reject(again[0].receipt.clone(), false).await.unwrap();
    assert!(
        br.consume(&qs(), 1, Duration::from_millis(300))
            .await
            .unwrap()
            .is_empty()
    );
    // An eta 1.5 s ahead: received at once, held (unacked) until due.
    let mut later = msg("eta");
    let now = system().now();
    later.eta = Some(now + 1500);
    br.publish(vec![later, msg("now")]).await.unwrap();
    let first = br.consume(&qs(), 2, Duration::from_secs(5)).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].message.id, "now");
    assert_eq!(br.next_eta(&qs()).await.unwrap(), Some(now + 1500));
    until("the eta is held unacked", || {
        vh.list("queues", &["name", "messages_unacknowledged"])
            .iter()
            .any(|r| r[0] == "celery" && r[1] == "2")
    })
    .await;
    let due = br.consume(&qs(), 2, Duration::from_secs(5)).await.unwrap();
    assert_eq!(due[0].message.id, "eta");
    assert!(system().now() >= now + 1500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_sends_results_land_in_celerys_redis_format() {
    let Some(vh) = Vhost::new() else { return };
    let Some(redis) = support::RedisServer::start() else {
        return;
    };
    let (app, _on) = app_on(&vh, &redis).await;
    add(&app, Policy::default());
    let (w, h) = worker(&app, 4);
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
    let meta: Value =
        serde_json::from_str(&redis.cli(&["GET", &format!("celery-task-meta-{}", hd.id())]))
            .unwrap();
    assert_eq!(meta["status"], json!("SUCCESS"));
    assert_eq!(meta["result"], json!(5));
    // acks_late: the message stays unacked until the result is stored.
    let late = Policy {
        acks_late: true,
        ..Policy::default()
    };
    // The body holds until the test has seen its message unacked: a fixed
    // sleep raced `rabbitmqctl`, which takes seconds on a loaded machine.
    let seen = Arc::new(tokio::sync::Notify::new());
    let hold = seen.clone();
    app.register(
        "tasks.slow",
        late,
        body(move |_ctx, _args| {
            let hold = hold.clone();
            async move {
                hold.notified().await;
                Ok(json!("done"))
            }
        }),
    )
    .unwrap();
    let slow = app
        .send("tasks.slow", vec![], Map::new(), Options::default())
        .await
        .unwrap();
    until("the late-acked run is held unacked", || {
        vh.list("queues", &["name", "messages_unacknowledged"])
            .iter()
            .any(|r| r[0] == "celery" && r[1] == "1")
    })
    .await;
    seen.notify_one();
    assert_eq!(
        slow.get(Some(Duration::from_secs(10))).await.unwrap(),
        json!("done")
    );
    until("acked after the result", || {
        vh.list("queues", &["name", "messages", "messages_unacknowledged"])
            .iter()
            .any(|r| r[0] == "celery" && r[1] == "0" && r[2] == "0")
    })
    .await;
    // A chain and a chord through RabbitMQ, joined in Redis.
    let s = |args: Vec<Value>| Canvas::Sig(Sig::new("tasks.add", args));
    let ch = app
        .send_canvas(Canvas::Chain(vec![
            s(vec![json!(1), json!(1)]),
            s(vec![json!(10)]),
        ]))
        .await
        .unwrap();
    assert_eq!(
        ch.get(Some(Duration::from_secs(10))).await.unwrap(),
        json!(12)
    );
    app.register(
        "tasks.total",
        Policy::default(),
        body(|_ctx, args| async move {
            let sum: i64 = args
                .first()
                .and_then(Value::as_array)
                .map_or(0, |a| a.iter().filter_map(Value::as_i64).sum());
            Ok(json!(sum))
        }),
    )
    .unwrap();
    let parts = (1..=3).map(|i| s(vec![json!(i), json!(i)])).collect();
    let cb = Canvas::Sig(Sig::new("tasks.total", vec![]));
    let chord = app
        .send_canvas(Canvas::Chord(parts, Box::new(cb)))
        .await
        .unwrap();
    assert_eq!(
        chord.get(Some(Duration::from_secs(10))).await.unwrap(),
        json!(12)
    );
    w.stop(Duration::from_secs(5));
    h.await.unwrap();
    let _ = State::Success;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_is_heard_over_the_pidbox() {
    let Some(vh) = Vhost::new() else { return };
    let a = broker(&vh.url()).await;
    let b = broker(&vh.url()).await;
    let until_ms = system().now() + 60_000;
    a.broker()
        .revoke(vec!["gone".into()], until_ms)
        .await
        .unwrap();
    let ids = vec!["gone".to_string(), "kept".to_string()];
    let mut heard = vec![false, false];
    for _ in 0..100 {
        heard = b.broker().revoked(&ids).await.unwrap();
        if heard[0] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(heard, vec![true, false]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_results_come_back_to_the_caller() {
    let Some(vh) = Vhost::new() else { return };
    let on = broker(&vh.url()).await;
    let store = backend_store("backend", "rpc://", &on, &system())
        .await
        .unwrap();
    assert!(matches!(store, Store::In(Connected::Rpc(_))));
    let app = on.app(&store, system());
    add(&app, Policy::default());
    let (w, h) = worker(&app, 4);
    let hd = app
        .send(
            "tasks.add",
            vec![json!(20), json!(22)],
            Map::new(),
            Options::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        hd.get(Some(Duration::from_secs(10))).await.unwrap(),
        json!(42)
    );
    w.stop(Duration::from_secs(5));
    h.await.unwrap();
    // rpc:// beside another broker is refused, naming the argument.
    let mem = Target::memory().connect(&system()).await.unwrap();
    let e = backend_store("backend", "rpc://", &mem, &system())
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("`backend`") && e.to_string().contains("amqp"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_broker_is_refused_with_the_password_hidden() {
    let e = Target::url("broker", "amqp://u:s3cret@127.0.0.1:1/v")
        .unwrap()
        .connect(&system())
        .await
        .unwrap_err();
    let m = e.to_string();
    assert!(m.contains("unreachable") && !m.contains("s3cret"), "{m}");
    let e = Target::url("broker", "amqp://u:s3cret@h:0/").unwrap_err();
    assert!(!e.to_string().contains("s3cret"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_is_made_again_and_the_worker_consumes_on() {
    let Some(vh) = Vhost::new() else { return };
    let Some(redis) = support::RedisServer::start() else {
        return;
    };
    let (app, _on) = app_on(&vh, &redis).await;
    add(&app, Policy::default());
    let (w, h) = worker(&app, 4);
    let first = app
        .send(
            "tasks.add",
            vec![json!(1), json!(1)],
            Map::new(),
            Options::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        first.get(Some(Duration::from_secs(10))).await.unwrap(),
        json!(2)
    );
    // The broker drops every connection of the vhost (what a RabbitMQ
    // restart or a network cut does to a client).
    let out = std::process::Command::new("rabbitmqctl")
        .args(["-q", "close_all_connections", "-p", &vh.name, "test"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // The next send dials again (after the backoff) and the worker's
    // consumers are made again: the run completes.
    let mut sent = None;
    for _ in 0..100 {
        match app
            .send(
                "tasks.add",
                vec![json!(2), json!(2)],
                Map::new(),
                Options::default(),
            )
            .await
        {
            Ok(h) => {
                sent = Some(h);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let second = sent.expect("a send succeeds after the reconnect");
    assert_eq!(
        second.get(Some(Duration::from_secs(20))).await.unwrap(),
        json!(4)
    );
    w.stop(Duration::from_secs(5));
    h.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_declared_otherwise_is_refused_by_name_and_the_rest_goes_on() {
    let Some(vh) = Vhost::new() else { return };
    let plain = broker(&vh.url()).await;
    plain.broker().publish(vec![msg("a")]).await.unwrap();
    // Celery's task_queue_max_priority on one side only: RabbitMQ refuses
    // the second declaration, and the error says which queue and why.
    let prio = broker(&format!("{}?max_priority=10", vh.url())).await;
    let e = prio.broker().publish(vec![msg("b")]).await.unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("\"celery\"") && m.contains("x-max-priority"),
        "{m}"
    );
    // The same broker publishes on to a queue it agrees with.
    let mut other = msg("c");
    other.queue = "other".into();
    prio.broker().publish(vec![other]).await.unwrap();
    let args = vh.list("queues", &["name", "arguments", "messages"]);
    assert!(
        args.iter()
            .any(|r| r[0] == "other" && r[1].contains("x-max-priority") && r[2] == "1"),
        "{args:?}"
    );
    assert!(
        args.iter().any(|r| r[0] == "celery" && r[2] == "1"),
        "only the agreeing send landed: {args:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_workers_channel_closes_once_its_runs_are_settled() {
    let Some(vh) = Vhost::new() else { return };
    let b = broker(&vh.url()).await;
    let br = b.broker();
    br.publish(vec![msg("s1"), msg("s2")]).await.unwrap();
    let got = br.consume(&qs(), 1, Duration::from_secs(5)).await.unwrap();
    let channels = || vh.list("channels", &["number"]).len();
    // Publishing, pidbox and this consumer's channel.
    until("three channels", || channels() == 3).await;
    // Released with one run still to settle (prefetch 1: nothing else was
    // delivered to it): its channel stays for that run's settle.
    assert_eq!(br.stopped(&qs()).await.unwrap(), 0);
    assert_eq!(channels(), 3);
    br.ack(vec![got[0].receipt.clone()]).await.unwrap();
    until("the released channel closed", || channels() == 2).await;
    until("one message back, one acked", || {
        vh.list("queues", &["name", "messages"])
            .iter()
            .any(|r| r[0] == "celery" && r[1] == "1")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beats_on_rabbitmq_fire_each_slot_once_through_the_redis_store() {
    let Some(vh) = Vhost::new() else { return };
    let Some(redis) = support::RedisServer::start() else {
        return;
    };
    let (a, _on_a) = app_on(&vh, &redis).await;
    let (b, _on_b) = app_on(&vh, &redis).await;
    assert!(a.broker().claim_slot("tick", 1_000).await.unwrap());
    assert!(!b.broker().claim_slot("tick", 1_000).await.unwrap());
    // Positive control: the next slot is the leader's to fire too.
    assert!(a.broker().claim_slot("tick", 2_000).await.unwrap());
    // Without a store every claim is granted (one beat per broker then).
    let bare = broker(&vh.url()).await;
    assert!(bare.broker().claim_slot("tick", 1_000).await.unwrap());
}
