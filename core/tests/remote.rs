//! Remote control at the core's level (`task::remote`): what a node answers
//! from its workers' live state, and the controls that change a running
//! worker — on the memory broker, so only the mechanism is under test (the
//! layouts' transports have their own tests).

use std::sync::Arc;
use std::time::Duration;

use headway_core::task::remote::{Command, Node, Reply, reply_json};
use headway_core::task::{App, Options, Policy, Rate, Worker, WorkerConfig, body};
use serde_json::{Map, Value, json};
use tokio::sync::Semaphore;

/// Waits (polling, up to 10 s) for `cond`, failing the test naming `what`.
async fn until(what: &str, cond: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// An app whose `wait` task holds its body until the gate gives a permit,
/// and a `fast` task that answers at once.
fn app() -> (App, Arc<Semaphore>) {
    let app = App::memory(None);
    let gate = Arc::new(Semaphore::new(0));
    let g = gate.clone();
    app.register(
        "wait",
        Policy::default(),
        body(move |_ctx, args| {
            let g = g.clone();
            async move {
                g.acquire().await.unwrap().forget();
                Ok(args.first().cloned().unwrap_or(Value::Null))
            }
        }),
    )
    .unwrap();
    app.register(
        "fast",
        Policy::default(),
        body(|_ctx, _| async move { Ok(json!("ok")) }),
    )
    .unwrap();
    (app, gate)
}

fn start(app: &App, config: WorkerConfig) -> (Worker, tokio::task::JoinHandle<()>) {
    let w = Worker::new(app.clone(), config).unwrap();
    let w2 = w.clone();
    (w, tokio::spawn(async move { w2.run().await.unwrap() }))
}

fn runs(node: &Node, c: Command) -> Vec<headway_core::task::RunInfo> {
    match node.run(&c).unwrap() {
        Reply::Runs(r) => r,
        other => panic!("{other:?}"),
    }
}

async fn send(app: &App, task: &str, arg: Value, queue: &str) -> String {
    app.send(
        task,
        vec![arg],
        Map::new(),
        Options {
            queue: Some(queue.into()),
            ..Options::default()
        },
    )
    .await
    .unwrap()
    .id()
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_shows_active_and_reserved_runs_and_only_while_a_worker_runs() {
    let (app, gate) = app();
    // No worker: no node (a producer answers nothing).
    assert!(Node::here(&app).is_none());
    let (w, h) = start(
        &app,
        WorkerConfig {
            concurrency: 1,
            prefetch: Some(3),
            name: Some("w1".into()),
            ..WorkerConfig::default()
        },
    );
    let first = send(&app, "wait", json!(1), "default").await;
    let second = send(&app, "wait", json!(2), "default").await;
    until("a node", || Node::here(&app).is_some()).await;
    let node = Node::here(&app).unwrap();
    until("one active, one reserved", || {
        runs(&node, Command::Active).len() == 1 && runs(&node, Command::Reserved).len() == 1
    })
    .await;
    let active = runs(&node, Command::Active);
    let a = &active[0];
    let reserved = runs(&node, Command::Reserved);
    // Which of the two got the slot first is the runtime's choice.
    let (held, arg) = if a.id == first {
        (second.clone(), json!(1))
    } else {
        (first.clone(), json!(2))
    };
    assert_eq!(a.name, "wait");
    assert_eq!(a.args, vec![arg]);
    assert_eq!(a.worker, "w1");
    assert_eq!(a.pid, Some(std::process::id()));
    assert!(a.started.is_some() && a.acknowledged);
    assert_eq!(reserved[0].id, held);
    assert!(reserved[0].started.is_none() && reserved[0].pid.is_none());
    // The own layouts' JSON: Celery's field names.
    let j = reply_json(node.run(&Command::Active));
    assert_eq!(j[0]["id"], json!(a.id));
    assert_eq!(j[0]["worker_pid"], json!(std::process::id()));
    assert!(j[0]["time_start"].as_f64().unwrap() > 1e9);
    // Both finish: nothing held.
    gate.add_permits(2);
    until("nothing held", || {
        runs(&node, Command::Active).is_empty() && runs(&node, Command::Reserved).is_empty()
    })
    .await;
    assert_eq!(reply_json(node.run(&Command::Ping)), json!({"ok": "pong"}));
    assert_eq!(
        reply_json(node.run(&Command::Registered)),
        json!(["fast", "wait"])
    );
    assert_eq!(
        reply_json(node.run(&Command::Other("nope".into()))),
        json!({"error": "No such key: 'nope'"})
    );
    // Shutdown stops it; the node is gone.
    assert_eq!(
        node.run(&Command::Shutdown).unwrap(),
        Reply::Done("shutting down 1 worker(s)".into())
    );
    tokio::time::timeout(Duration::from_secs(10), h)
        .await
        .unwrap()
        .unwrap();
    assert!(w.is_stopping());
    assert!(Node::here(&app).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_set_remotely_holds_runs_and_lifting_it_frees_them() {
    let (app, _gate) = app();
    let (w, h) = start(&app, WorkerConfig::default());
    until("a node", || Node::here(&app).is_some()).await;
    let node = Node::here(&app).unwrap();
    // Positive control: unlimited, two runs finish.
    for i in 0..2 {
        let id = send(&app, "fast", json!(i), "default").await;
        app.handle(&id)
            .get(Some(Duration::from_secs(10)))
            .await
            .unwrap();
    }
    let c = Command::parse(
        "rate_limit",
        &json!({"task_name": "fast", "rate_limit": "1/h"}),
    )
    .unwrap();
    assert_eq!(
        c,
        Command::RateLimit {
            task: "fast".into(),
            rate: Some(Rate::parse("1/h").unwrap())
        }
    );
    assert_eq!(
        reply_json(node.run(&c)),
        json!({"ok": "new rate limit set successfully"})
    );
    // One run per hour: the first goes, the second waits.
    let one = send(&app, "fast", json!(1), "default").await;
    app.handle(&one)
        .get(Some(Duration::from_secs(10)))
        .await
        .unwrap();
    let two = send(&app, "fast", json!(2), "default").await;
    until("the second reserved", || {
        runs(&node, Command::Reserved).iter().any(|r| r.id == two)
    })
    .await;
    assert!(
        app.handle(&two)
            .get(Some(Duration::from_millis(300)))
            .await
            .is_err(),
        "held by the rate"
    );
    // Lifted: it runs at once (the waiting run reads the rate again).
    let lift = Command::parse(
        "rate_limit",
        &json!({"task_name": "fast", "rate_limit": ""}),
    )
    .unwrap();
    assert_eq!(
        reply_json(node.run(&lift)),
        json!({"ok": "rate limit disabled successfully"})
    );
    app.handle(&two)
        .get(Some(Duration::from_secs(10)))
        .await
        .unwrap();
    // Refusals name what was wrong.
    let unknown = Command::parse(
        "rate_limit",
        &json!({"task_name": "nope", "rate_limit": "1/s"}),
    )
    .unwrap();
    assert_eq!(
        reply_json(node.run(&unknown)),
        json!({"error": "unknown task \"nope\""})
    );
    let e = Command::parse(
        "rate_limit",
        &json!({"task_name": "fast", "rate_limit": "x/y"}),
    )
    .unwrap_err();
    assert!(e.to_string().contains("Invalid rate limit string"), "{e}");
    w.stop(Duration::from_secs(5));
    h.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_grow_and_shrink_change_how_many_run_at_once() {
    let (app, gate) = app();
    let (w, h) = start(
        &app,
        WorkerConfig {
            concurrency: 1,
            prefetch: Some(1),
            ..WorkerConfig::default()
        },
    );
    until("a node", || Node::here(&app).is_some()).await;
    let node = Node::here(&app).unwrap();
    for i in 0..3 {
        send(&app, "wait", json!(i), "default").await;
    }
    until("one active", || runs(&node, Command::Active).len() == 1).await;
    // Grown by 2: three run at once.
    let grow = Command::parse("pool_grow", &json!({"n": 2})).unwrap();
    assert_eq!(reply_json(node.run(&grow)), json!({"ok": "pool will grow"}));
    assert_eq!((w.concurrency(), w.prefetch()), (3, 9));
    until("three active", || runs(&node, Command::Active).len() == 3).await;
    // Shrunk by 2 while all three run: the busy slots go as they end.
    let shrink = Command::parse("pool_shrink", &json!({"n": "2"})).unwrap();
    assert_eq!(
        reply_json(node.run(&shrink)),
        json!({"ok": "pool will shrink"})
    );
    assert_eq!(w.concurrency(), 1);
    gate.add_permits(3);
    until("all done", || runs(&node, Command::Active).is_empty()).await;
    for i in 0..3 {
        send(&app, "wait", json!(i), "default").await;
    }
    until("one active again", || {
        runs(&node, Command::Active).len() == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(runs(&node, Command::Active).len(), 1, "one slot left");
    // Never below one slot.
    assert_eq!(
        reply_json(node.run(&Command::PoolShrink(1))),
        json!({"error": "invalid `n`: the worker runs 1 at once and keeps at least 1"})
    );
    assert!(Command::parse("pool_grow", &json!({"n": 0})).is_err());
    gate.add_permits(3);
    w.stop(Duration::from_secs(5));
    h.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_added_and_cancelled_change_the_queues_claimed() {
    let (app, _gate) = app();
    let (w, h) = start(&app, WorkerConfig::default());
    until("a node", || Node::here(&app).is_some()).await;
    let node = Node::here(&app).unwrap();
    // Not consumed yet: a run sent to "extra" waits.
    let waiting = send(&app, "fast", json!(1), "extra").await;
    assert!(
        app.handle(&waiting)
            .get(Some(Duration::from_millis(300)))
            .await
            .is_err()
    );
    let add = Command::parse("add_consumer", &json!({"queue": "extra"})).unwrap();
    assert_eq!(
        reply_json(node.run(&add)),
        json!({"ok": "add consumer extra"})
    );
    app.handle(&waiting)
        .get(Some(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(
        reply_json(node.run(&Command::ActiveQueues)),
        json!([{"name": "default"}, {"name": "extra"}])
    );
    // Cancelled: "default" is no longer claimed; "extra" still is.
    let cancel = Command::parse("cancel_consumer", &json!({"queue": "default"})).unwrap();
    assert_eq!(
        reply_json(node.run(&cancel)),
        json!({"ok": "no longer consuming from default"})
    );
    assert_eq!(w.queues(), vec!["extra".to_string()]);
    let left = send(&app, "fast", json!(2), "default").await;
    let served = send(&app, "fast", json!(3), "extra").await;
    app.handle(&served)
        .get(Some(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(
        app.handle(&left)
            .get(Some(Duration::from_millis(300)))
            .await
            .is_err()
    );
    // The last queue stays.
    let last = Command::parse("cancel_consumer", &json!({"queue": "extra"})).unwrap();
    assert!(
        reply_json(node.run(&last))["error"]
            .as_str()
            .unwrap()
            .contains("last queue")
    );
    w.stop(Duration::from_secs(5));
    h.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_limits_set_remotely_apply_and_a_hard_one_needs_processes() {
    let app = App::memory(None);
    app.register(
        "soft",
        Policy::default(),
        body(|ctx, _| async move { Ok(json!(ctx.soft_time_limit)) }),
    )
    .unwrap();
    let (w, h) = start(&app, WorkerConfig::default());
    until("a node", || Node::here(&app).is_some()).await;
    let node = Node::here(&app).unwrap();
    let before = send(&app, "soft", json!(0), "default").await;
    let got = app
        .handle(&before)
        .get(Some(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(got, Value::Null, "no limit before");
    let c = Command::parse("time_limit", &json!({"task_name": "soft", "soft": 1.5})).unwrap();
    assert_eq!(
        reply_json(node.run(&c)),
        json!({"ok": "time limits set successfully"})
    );
    let after = send(&app, "soft", json!(0), "default").await;
    let got = app
        .handle(&after)
        .get(Some(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(got, json!(1500));
    let hard = Command::parse(
        "time_limit",
        &json!({"task_name": "soft", "soft": 1, "hard": 2}),
    )
    .unwrap();
    assert!(
        reply_json(node.run(&hard))["error"]
            .as_str()
            .unwrap()
            .contains("process pool")
    );
    assert!(Command::parse("time_limit", &json!({"task_name": "soft", "soft": -1})).is_err());
    w.stop(Duration::from_secs(5));
    h.await.unwrap();
}

mod support;

use headway_core::task::control;
use support::kit::{Kit, Layout, Opts};

/// `headway inspect` / `control` on the own layouts: an app on a broker of
/// its own (another process, on Redis) asks; the node where the worker runs
/// answers, and nobody answers before it runs (the positive control is the
/// answer after). On Celery's layout the ask is refused naming Celery's
/// CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_own_layouts_control_channel_reaches_the_node_where_the_worker_runs() {
    for kit in Kit::all(&Layout::ALL).await {
        let name = kit.name();
        let a = kit.app();
        let asker = kit.open(Opts::named("asker")).await.app();
        a.register(
            "fast",
            Policy::default(),
            body(|_ctx, _| async move { Ok(json!("ok")) }),
        )
        .unwrap();
        let t = Duration::from_millis(500);
        if kit.layout == Layout::Celery {
            let e = control::ask(&asker, "ping", &json!({}), None, t)
                .await
                .unwrap_err()
                .to_string();
            assert!(e.contains("celery inspect"), "{name}: {e}");
            continue;
        }
        let none = control::ask(&asker, "ping", &json!({}), None, t)
            .await
            .unwrap();
        assert!(none.is_empty(), "{name}: answered with no worker: {none:?}");
        let (w, h) = start(
            &a,
            WorkerConfig {
                name: Some("the-worker".into()),
                ..WorkerConfig::default()
            },
        );
        until("a node", || Node::here(&a).is_some()).await;
        let started = std::time::Instant::now();
        let got = control::ask(&asker, "ping", &json!({}), None, Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(
            got,
            vec![(control::node_name(), json!({"ok": "pong"}))],
            "{name}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{name}: waited for the timeout though every process answered"
        );
        // A destination: the worker's name reaches it, another does not.
        let only = vec!["the-worker".to_string()];
        let got = control::ask(&asker, "registered", &json!({}), Some(&only), t)
            .await
            .unwrap();
        assert_eq!(got[0].1, json!(["fast"]), "{name}");
        let other = vec!["someone-else".to_string()];
        let got = control::ask(&asker, "ping", &json!({}), Some(&other), t)
            .await
            .unwrap();
        assert!(got.is_empty(), "{name}: {got:?}");
        // A control through the CLI's path: printed, and it took.
        let p = control::cli(
            &asker,
            "control",
            "pool-grow",
            &["2".to_string()],
            Some(5.0),
            None,
            false,
        )
        .await
        .unwrap();
        assert_eq!(p.code, 0, "{name}: {p:?}");
        assert!(p.out.contains("OK pool will grow"), "{name}: {p:?}");
        assert_eq!(w.concurrency(), 6, "{name}");
        let p = control::cli(
            &asker,
            "control",
            "rate-limit",
            &["nope".to_string(), "1/s".to_string()],
            Some(5.0),
            None,
            true,
        )
        .await
        .unwrap();
        assert_eq!(p.code, 1, "{name}: {p:?}");
        assert!(p.out.contains("unknown task"), "{name}: {p:?}");
        // Shutdown: the worker stops, and then nobody answers.
        let p = control::cli(&asker, "control", "shutdown", &[], Some(5.0), None, false)
            .await
            .unwrap();
        assert!(p.out.contains("shutting down 1 worker(s)"), "{name}: {p:?}");
        tokio::time::timeout(Duration::from_secs(15), h)
            .await
            .unwrap()
            .unwrap();
        let p = control::cli(&asker, "inspect", "ping", &[], Some(0.3), None, false)
            .await
            .unwrap();
        assert_eq!(p.code, 1, "{name}: {p:?}");
        assert!(p.err.contains("No nodes replied"), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_does_not_run_refuses_to_grow_or_shrink() {
    let (app, _gate) = app();
    let w = Worker::new(app.clone(), WorkerConfig::default()).unwrap();
    let e = w.grow(1).unwrap_err().to_string();
    assert!(e.contains("not running"), "{e}");
    assert!(w.shrink(1).unwrap_err().to_string().contains("not running"));
    // The positive control: running, it grows.
    let w2 = w.clone();
    let h = tokio::spawn(async move { w2.run().await.unwrap() });
    until("a node", || Node::here(&app).is_some()).await;
    assert_eq!(w.grow(1).unwrap(), 5);
    w.stop(Duration::from_secs(5));
    h.await.unwrap();
}
