//! The task suite, written against the seams so it runs unchanged on every
//! broker: each test takes an app maker. Memory and headway's Redis layout
//! run here (Redis on a redis-server the test starts; skipped without one);
//! Celery's layout and RabbitMQ (`amqp`) add their makers to `brokers()`,
//! and headway's layout runs again on a Redis Cluster of the test's own
//! (three primaries, three replicas).

mod support;

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use headway_core::broker::{RedisBroker, RedisOptions};
use headway_core::task::{
    App, Canvas, Clock, Failure, Options, Policy, Refused, Sig, State, VirtualClock, Worker,
    WorkerConfig, body,
};
use serde_json::{Map, Value, json};

const START: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

/// An app on a fresh broker, and whatever must live as long as the test
/// (a redis-server); `None` when the broker cannot run here (skipped).
type Made = Option<(App, Box<dyn Any + Send>)>;
type Maker = fn(Arc<VirtualClock>) -> Pin<Box<dyn Future<Output = Made> + Send>>;

fn brokers() -> Vec<(&'static str, Maker)> {
    vec![
        ("memory", |c| {
            Box::pin(
                async move { Some((App::memory(Some(c)), Box::new(()) as Box<dyn Any + Send>)) },
            )
        }),
        ("redis", |c| Box::pin(redis_app(c))),
        ("redis-acl", |c| Box::pin(redis_acl_app(c))),
        ("celery", |c| Box::pin(celery_app(c))),
        ("redis-cluster", |c| Box::pin(cluster_app(c))),
        ("amqp", |c| Box::pin(amqp_app(c))),
    ]
}

/// headway's Redis layout on a Redis Cluster of the test's own (three
/// primaries, three replicas): the suite's queues, results and chords are
/// spread over its slots.
async fn cluster_app(clock: Arc<VirtualClock>) -> Made {
    let cluster = support::cluster::Cluster::start()?;
    let b = RedisBroker::connect(&cluster.url(""), RedisOptions::default(), clock.clone())
        .await
        .expect("connect to the test's Redis Cluster");
    Some((App::new(b.seams(), clock), Box::new(cluster)))
}

/// RabbitMQ on Celery's AMQP topology (a vhost of the test's own), results
/// and chords in Celery's Redis store on a redis-server of the test's own.
async fn amqp_app(clock: Arc<VirtualClock>) -> Made {
    let vhost = support::rabbit::Vhost::new()?;
    let server = support::RedisServer::start()?;
    let clk: Arc<dyn Clock> = clock.clone();
    let on = headway_core::broker::Target::url("broker", &vhost.url())
        .unwrap()
        .connect(&clk)
        .await
        .expect("connect to the test's vhost");
    let store = headway_core::broker::target::backend_store("backend", &server.url(), &on, &clk)
        .await
        .expect("connect to the test's redis-server");
    Some((on.app(&store, clk), Box::new((server, vhost, on))))
}

/// Celery's Redis layout (`broker::celery`) on a redis-server of the test's
/// own, so both layouts are held to the same behaviour.
async fn celery_app(clock: Arc<VirtualClock>) -> Made {
    let server = support::RedisServer::start()?;
    let b = headway_core::broker::celery::CeleryBroker::connect(
        &server.url(),
        headway_core::broker::celery::CeleryOptions::default(),
        clock.clone(),
    )
    .await
    .expect("connect to the test's redis-server");
    Some((App::new(b.seams(), clock), Box::new(server)))
}

/// headway's Redis layout on a redis-server of the test's own, the app's
/// virtual clock passed into its scripts.
async fn redis_app(clock: Arc<VirtualClock>) -> Made {
    let server = support::RedisServer::start()?;
    let b = RedisBroker::connect(&server.url(), RedisOptions::default(), clock.clone())
        .await
        .expect("connect to the test's redis-server");
    Some((App::new(b.seams(), clock), Box::new(server)))
}

/// headway's Redis layout as a user with exactly the minimal ACL that
/// docs/redis-layout.md documents (its `ACL SETUSER` line, read from the
/// doc): whatever the suite does must be allowed by it.
async fn redis_acl_app(clock: Arc<VirtualClock>) -> Made {
    let server = support::RedisServer::start()?;
    let doc = include_str!("../../docs/redis-layout.md");
    let line = doc
        .lines()
        .find(|l| l.starts_with("ACL SETUSER <user> "))
        .expect("docs/redis-layout.md has the ACL SETUSER line");
    let line = line.replace("<user>", "hw").replace("<password>", "pw");
    let args: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(server.cli(&args), "OK", "{line}");
    let url = format!("redis://hw:pw@127.0.0.1:{}", server.port);
    let b = RedisBroker::connect(&url, RedisOptions::default(), clock.clone())
        .await
        .expect("connect as the ACL user");
    Some((App::new(b.seams(), clock), Box::new(server)))
}

fn t(secs: u64) -> Option<Duration> {
    Some(Duration::from_secs(secs))
}

fn add(app: &App) {
    app.register(
        "add",
        Policy::default(),
        body(|_ctx, args| async move {
            let a = args.first().and_then(Value::as_i64).unwrap_or(0);
            let b = args.get(1).and_then(Value::as_i64).unwrap_or(0);
            Ok(json!(a + b))
        }),
    )
    .unwrap();
}

fn worker(app: &App, concurrency: usize) -> (Worker, tokio::task::JoinHandle<()>) {
    let w = Worker::new(
        app.clone(),
        WorkerConfig {
            concurrency,
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let w2 = w.clone();
    let h = tokio::spawn(async move { w2.run().await.unwrap() });
    (w, h)
}

/// Waits (polling, up to 5 s) for `cond`, failing the test naming `what`.
async fn until(what: &str, cond: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn each(test: impl AsyncFn(App, Arc<VirtualClock>)) {
    for (name, make) in brokers() {
        let clock = VirtualClock::new(START);
        let Some((app, keep)) = make(clock.clone()).await else {
            eprintln!("{name}: skipped");
            continue;
        };
        // Named in the output, so a failure says on which broker.
        eprintln!("on {name}");
        test(app, clock).await;
        drop(keep);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_and_get() {
    each(async |app, _| {
        add(&app);
        let (w, h) = worker(&app, 2);
        let hd = app
            .send(
                "add",
                vec![json!(2), json!(3)],
                Map::new(),
                Options::default(),
            )
            .await
            .unwrap();
        assert_eq!(hd.get(t(5)).await.unwrap(), json!(5));
        assert_eq!(hd.state().await.unwrap(), State::Success);
        assert_eq!(app.handle(hd.id()).get(t(1)).await.unwrap(), json!(5));
        w.stop(Duration::from_secs(1));
        h.await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_names_and_send_task() {
    each(async |app, _| {
        add(&app);
        let e = app
            .send("nope", vec![], Map::new(), Options::default())
            .await
            .unwrap_err();
        assert_eq!(e, Refused::UnknownTask("nope".into()));
        // send_task sends to any name; nobody here runs it.
        let hd = app
            .send_task("elsewhere.task", vec![], Map::new(), Options::default())
            .await
            .unwrap();
        assert_eq!(hd.state().await.unwrap(), State::Pending);
        assert_eq!(
            hd.get(Some(Duration::from_millis(20))).await.unwrap_err(),
            Refused::Timeout
        );
        // A worker that receives it records it failed rather than dropping it.
        let (w, h) = worker(&app, 1);
        match hd.get(t(5)).await.unwrap_err() {
            Refused::Failed(f) => assert_eq!(f.kind, "NotRegistered"),
            other => panic!("{other:?}"),
        }
        assert_eq!(app.task_names(), vec!["add".to_string()]);
        w.stop(Duration::from_secs(1));
        h.await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_then_succeed_with_context() {
    each(async |app, clock| {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let policy = Policy {
            retries: 2,
            backoff: headway_core::task::RetryBackoff::fixed(30_000).unwrap(),
            ..Policy::default()
        };
        app.register(
            "flaky",
            policy,
            body(move |ctx, _| {
                let s2 = s2.clone();
                async move {
                    s2.lock()
                        .unwrap()
                        .push((ctx.attempt, ctx.retries, ctx.last, ctx.now));
                    if ctx.attempt < 2 {
                        Err(Failure::new("IOError", "try again"))
                    } else {
                        Ok(json!("ok"))
                    }
                }
            }),
        )
        .unwrap();
        let (w, h) = worker(&app, 1);
        let hd = app
            .send("flaky", vec![], Map::new(), Options::default())
            .await
            .unwrap();
        assert_eq!(hd.get(t(5)).await.unwrap(), json!("ok"));
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2);
        assert_eq!((seen[0].0, seen[0].1, seen[0].2), (1, 0, false));
        assert_eq!((seen[1].0, seen[1].1, seen[1].2), (2, 1, false));
        // The retry waited its backoff on the virtual clock.
        assert_eq!(seen[1].3 - seen[0].3, 30_000);
        assert!(clock.now() >= START + 30_000);
        w.stop(Duration::from_secs(1));
        h.await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_budget_runs_out() {
    each(async |app, _| {
        let runs = Arc::new(AtomicU32::new(0));
        let r2 = runs.clone();
        let policy = Policy {
            retries: 2,
            ..Policy::default()
        };
        app.register(
            "bad",
            policy,
            body(move |ctx, _| {
                r2.fetch_add(1, Ordering::SeqCst);
                async move {
                    Err(Failure::new(
                        "ValueError",
                        format!("attempt {} last {}", ctx.attempt, ctx.last),
                    ))
                }
            }),
        )
        .unwrap();
        let (w, h) = worker(&app, 1);
        let hd = app
            .send("bad", vec![], Map::new(), Options::default())
            .await
            .unwrap();
        match hd.get(t(5)).await.unwrap_err() {
            Refused::Failed(f) => {
                assert_eq!(f.kind, "ValueError");
                assert_eq!(f.message, "attempt 3 last true");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        assert_eq!(hd.state().await.unwrap(), State::Failure);
        w.stop(Duration::from_secs(1));
        h.await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_before_run_and_expired() {
    each(async |app, _| {
        let runs = Arc::new(AtomicU32::new(0));
        let r2 = runs.clone();
        app.register(
            "count",
            Policy::default(),
            body(move |_, _| {
                r2.fetch_add(1, Ordering::SeqCst);
                async { Ok(Value::Null) }
            }),
        )
        .unwrap();
        let a = app
            .send("count", vec![], Map::new(), Options::default())
            .await
            .unwrap();
        a.revoke(false).await.unwrap();
        let b = app
            .send(
                "count",
                vec![],
                Map::new(),
                Options {
                    expires: Some(START - 1),
                    ..Options::default()
                },
            )
            .await
            .unwrap();
        let c = app
            .send("count", vec![], Map::new(), Options::default())
            .await
            .unwrap();
        let (w, h) = worker(&app, 1);
        c.get(t(5)).await.unwrap();
        assert!(matches!(
            a.get(t(5)).await.unwrap_err(),
            Refused::Revoked(_)
        ));
        assert!(matches!(
            b.get(t(5)).await.unwrap_err(),
            Refused::Revoked(_)
        ));
        assert_eq!(a.state().await.unwrap(), State::Revoked);
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        w.stop(Duration::from_secs(1));
        h.await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eta_order() {
    each(async |app, _| {
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let o2 = order.clone();
        app.register(
            "note",
            Policy::default(),
            body(move |ctx, args| {
                o2.lock().unwrap().push((args[0].clone(), ctx.now));
                async { Ok(Value::Null) }
            }),
        )
        .unwrap();
        let mut hs = vec![];
        for (label, countdown) in [("c", 3000), ("a", 1000), ("b", 2000)] {
            let o = Options {
                countdown: Some(countdown),
                ..Options::default()
            };
            hs.push(
                app.send("note", vec![json!(label)], Map::new(), o)
                    .await
                    .unwrap(),
            );
        }
        let (w, h) = worker(&app, 1);
        for hd in &hs {
            hd.get(t(5)).await.unwrap();
        }
        let got = order.lock().unwrap().clone();
        let labels: Vec<_> = got
            .iter()
            .map(|(l, _)| l.as_str().unwrap().to_string())
            .collect();
        assert_eq!(labels, ["a", "b", "c"]);
        assert!(got[0].1 >= START + 1000 && got[2].1 >= START + 3000);
        w.stop(Duration::from_secs(1));
        h.await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chain_group_chord() {
    each(async |app, _| {
        add(&app);
        app.register(
            "total",
            Policy::default(),
            body(|_, args| async move {
                let list = args[0].as_array().cloned().unwrap_or_default();
                Ok(json!(list.iter().filter_map(Value::as_i64).sum::<i64>()))
            }),
        )
        .unwrap();
        let (w, h) = worker(&app, 4);
        let s = |a: i64, b: i64| Canvas::Sig(Sig::new("add", vec![json!(a), json!(b)]));
        let s1 = |a: i64| Canvas::Sig(Sig::new("add", vec![json!(a)]));
        // chain: (1+2) → +10 → immutable (5+5)... then +1
        let chained = app
            .send_canvas(Canvas::Chain(vec![s(1, 2), s1(10), s1(100)]))
            .await
            .unwrap();
        assert_eq!(chained.get(t(5)).await.unwrap(), json!(113));
        let imm = app
            .send_canvas(Canvas::Chain(vec![
                s(1, 2),
                Canvas::Sig(Sig::new("add", vec![json!(5), json!(5)]).immutable()),
            ]))
            .await
            .unwrap();
        assert_eq!(imm.get(t(5)).await.unwrap(), json!(10));
        // group: in order; a chain inside stays a chain.
        let grouped = app
            .send_canvas(Canvas::Group(vec![
                s(1, 1),
                Canvas::Chain(vec![s(2, 2), s1(1)]),
                s(3, 3),
            ]))
            .await
            .unwrap();
        assert_eq!(grouped.get(t(5)).await.unwrap(), json!([2, 5, 6]));
        // chord
        let joined = app
            .send_canvas(Canvas::Chord(
                vec![s(1, 1), s(2, 2), Canvas::Chain(vec![s(3, 3), s1(1)])],
                Box::new(Canvas::Sig(Sig::new("total", vec![]))),
            ))
            .await
            .unwrap();
        assert_eq!(joined.get(t(5)).await.unwrap(), json!(13));
        // group at the head of a chain is a chord
        let upgraded = app
            .send_canvas(Canvas::Chain(vec![
                Canvas::Group(vec![s(1, 0), s(2, 0)]),
                Canvas::Sig(Sig::new("total", vec![])),
                s1(1000),
            ]))
            .await
            .unwrap();
        assert_eq!(upgraded.get(t(5)).await.unwrap(), json!(1003));
        // empty chord calls back with []
        let empty = app
            .send_canvas(Canvas::Chord(
                vec![],
                Box::new(Canvas::Sig(Sig::new("total", vec![]))),
            ))
            .await
            .unwrap();
        assert_eq!(empty.get(t(5)).await.unwrap(), json!(0));
        // a group later in a chain is given the link's result; with more
        // after it, it is a chord (Celery's upgrade)
        let total = || Canvas::Sig(Sig::new("total", vec![]));
        let mid = Canvas::Chain(vec![s(1, 2), Canvas::Group(vec![s1(10), s1(20)]), total()]);
        assert_eq!(
            app.send_canvas(mid).await.unwrap().get(t(5)).await.unwrap(),
            json!(36)
        );
        let last = Canvas::Chain(vec![s(1, 2), Canvas::Group(vec![s1(10), s1(20)])]);
        assert_eq!(last_get(&app, last).await, json!([13, 23]));
        let chord = Canvas::Chord(vec![s1(1), s1(2)], Box::new(total()));
        let then = Canvas::Chain(vec![s(1, 2), chord.clone(), s1(100)]);
        assert_eq!(last_get(&app, then).await, json!(109));
        // a chord at the head of a chain takes the rest into its callback
        let head = Canvas::Chain(vec![
            Canvas::Chord(vec![s(1, 1), s(2, 2)], Box::new(total())),
            s1(5),
        ]);
        assert_eq!(last_get(&app, head).await, json!(11));
        // link / link_error callbacks (Celery's apply_async(link=…))
        let fixed = |a: i64, id: &str| {
            let o = Options {
                id: Some(id.into()),
                ..Options::default()
            };
            Canvas::Sig(Sig::new("add", vec![json!(a)]).with_options(o))
        };
        let linked = Sig::new("add", vec![json!(1), json!(2)]).link(&fixed(100, "cb-1"));
        assert_eq!(last_get(&app, Canvas::Sig(linked)).await, json!(3));
        assert_eq!(app.handle("cb-1").get(t(5)).await.unwrap(), json!(103));
        w.stop(Duration::from_secs(1));
        h.await.unwrap();
    })
    .await;
}

async fn last_get(app: &App, c: Canvas) -> Value {
    app.send_canvas(c).await.unwrap().get(t(5)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_and_errbacks() {
    each(async |app, _| {
        add(&app);
        app.register(
            "echo",
            Policy::default(),
            body(|_, args| async move { Ok(json!(args)) }),
        )
        .unwrap();
        app.register(
            "boom",
            Policy::default(),
            body(|_, _| async move { Err(Failure::new("ValueError", "no")) }),
        )
        .unwrap();
        let (w, h) = worker(&app, 2);
        let cb = |id: &str| {
            let o = Options {
                id: Some(id.into()),
                ..Options::default()
            };
            Canvas::Sig(Sig::new("echo", vec![json!("x")]).with_options(o))
        };
        // Two success links go out as a group, each given the result; the
        // errback is not sent on a success.
        let ok = Sig::new("add", vec![json!(2), json!(3)])
            .link(&cb("ok-1"))
            .link(&cb("ok-2"))
            .link_error(&cb("never"));
        let hd = app.send_canvas(Canvas::Sig(ok)).await.unwrap();
        assert_eq!(hd.get(t(5)).await.unwrap(), json!(5));
        // Celery's children and date_done.
        assert_eq!(hd.children().await.unwrap(), ["ok-1", "ok-2"]);
        assert!(hd.date_done().await.unwrap().is_some_and(|at| at >= START));
        assert_eq!(app.handle("ok-1").get(t(5)).await.unwrap(), json!([5, "x"]));
        assert_eq!(app.handle("ok-2").get(t(5)).await.unwrap(), json!([5, "x"]));
        // A failure sends its errback with its id, not its links.
        let bad = Sig::new("boom", vec![])
            .link(&cb("never"))
            .link_error(&cb("err-1"));
        let hd = app.send_canvas(Canvas::Sig(bad)).await.unwrap();
        assert!(hd.get(t(5)).await.is_err());
        assert_eq!(
            app.handle("err-1").get(t(5)).await.unwrap(),
            json!([hd.id(), "x"])
        );
        // A link on a chain's link travels with it.
        let linked = Sig::new("add", vec![json!(10)]).link(&cb("chain-cb"));
        let c = Canvas::Chain(vec![
            Canvas::Sig(Sig::new("add", vec![json!(1), json!(1)])),
            Canvas::Sig(linked),
        ]);
        let hd = app.send_canvas(c).await.unwrap();
        assert_eq!(hd.get(t(5)).await.unwrap(), json!(12));
        assert_eq!(
            app.handle("chain-cb").get(t(5)).await.unwrap(),
            json!([12, "x"])
        );
        assert_eq!(app.handle("never").state().await.unwrap(), State::Pending);
        // The chain's last link knows its parent, which lists it as a child.
        let parent = hd.parent().expect("a chain's last link has a parent");
        assert!(parent.parent().is_none());
        assert_eq!(parent.children().await.unwrap(), [hd.id()]);
        assert_eq!(hd.children().await.unwrap(), ["chain-cb"]);
        // forget: the stored result goes, the run reads PENDING; the control
        // beside it stays.
        parent.forget().await.unwrap();
        assert_eq!(parent.state().await.unwrap(), State::Pending);
        assert!(parent.date_done().await.unwrap().is_none());
        assert_eq!(hd.state().await.unwrap(), State::Success);
        w.stop(Duration::from_secs(1));
        h.await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_parts_fail_what_waits() {
    each(async |app, _| {
        add(&app);
        app.register(
            "boom",
            Policy::default(),
            body(|_, _| async { Err(Failure::new("KeyError", "nope")) }),
        )
        .unwrap();
        let (w, h) = worker(&app, 2);
        let s = |a: i64| Canvas::Sig(Sig::new("add", vec![json!(a), json!(1)]));
        let boom = Canvas::Sig(Sig::new("boom", vec![]));
        let chord = app
            .send_canvas(Canvas::Chord(vec![s(1), boom.clone()], Box::new(s(0))))
            .await
            .unwrap();
        match chord.get(t(5)).await.unwrap_err() {
            Refused::Failed(f) => assert_eq!(f.kind, "ChordError"),
            other => panic!("{other:?}"),
        }
        let chain = app
            .send_canvas(Canvas::Chain(vec![s(1), boom, s(2)]))
            .await
            .unwrap();
        match chain.get(t(5)).await.unwrap_err() {
            Refused::Failed(f) => assert_eq!(f.kind, "KeyError"),
            other => panic!("{other:?}"),
        }
        w.stop(Duration::from_secs(1));
        h.await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_and_terminate() {
    each(async |app, _| {
        let policy = Policy {
            timeout: Some(50),
            ..Policy::default()
        };
        app.register("hang", policy, body(|_, _| std::future::pending()))
            .unwrap();
        let running = Arc::new(AtomicU32::new(0));
        let r2 = running.clone();
        app.register(
            "hang2",
            Policy::default(),
            body(move |_, _| {
                r2.fetch_add(1, Ordering::SeqCst);
                std::future::pending()
            }),
        )
        .unwrap();
        let (w, h) = worker(&app, 2);
        let hd = app
            .send("hang", vec![], Map::new(), Options::default())
            .await
            .unwrap();
        match hd.get(t(5)).await.unwrap_err() {
            Refused::Failed(f) => assert_eq!(f.kind, "TimeoutError"),
            other => panic!("{other:?}"),
        }
        let hd2 = app
            .send("hang2", vec![], Map::new(), Options::default())
            .await
            .unwrap();
        // Wait until it is running, then terminate it.
        until("hang2 runs", || running.load(Ordering::SeqCst) == 1).await;
        hd2.revoke(true).await.unwrap();
        assert!(matches!(
            hd2.get(t(5)).await.unwrap_err(),
            Refused::Revoked(_)
        ));
        w.stop(Duration::from_secs(1));
        h.await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_gives_back_what_it_held() {
    each(async |app, _| {
        let runs = Arc::new(AtomicU32::new(0));
        let r2 = runs.clone();
        let policy = Policy {
            acks_late: true,
            ..Policy::default()
        };
        // Runs hang while `hang` is set (the first worker's); then succeed.
        let hang = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let hang2 = hang.clone();
        app.register(
            "slow",
            policy,
            body(move |ctx, _| {
                r2.fetch_add(1, Ordering::SeqCst);
                let first = hang2.load(Ordering::SeqCst);
                async move {
                    if first {
                        std::future::pending::<()>().await;
                    }
                    Ok(json!(ctx.id))
                }
            }),
        )
        .unwrap();
        let mut hs = vec![];
        for _ in 0..6 {
            hs.push(
                app.send("slow", vec![], Map::new(), Options::default())
                    .await
                    .unwrap(),
            );
        }
        let (w, h) = worker(&app, 2);
        // Both slots taken; the other four wait (prefetched or queued).
        until("two runs start", || runs.load(Ordering::SeqCst) >= 2).await;
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        w.stop(Duration::from_millis(50));
        tokio::time::timeout(Duration::from_secs(2), h)
            .await
            .unwrap()
            .unwrap();
        // Nothing was lost: a second worker runs all six.
        hang.store(false, Ordering::SeqCst);
        let (w2, h2) = worker(&app, 6);
        for hd in &hs {
            assert_eq!(hd.get(t(5)).await.unwrap(), json!(hd.id()));
        }
        w2.stop(Duration::from_secs(1));
        h2.await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_per_worker() {
    each(async |app, clock| {
        let stamps = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s2 = stamps.clone();
        let policy = Policy {
            rate: Some(headway_core::task::Rate::parse("2/m").unwrap()),
            ..Policy::default()
        };
        app.register(
            "limited",
            policy,
            body(move |ctx, _| {
                s2.lock().unwrap().push(ctx.now);
                async { Ok(Value::Null) }
            }),
        )
        .unwrap();
        let mut hs = vec![];
        for _ in 0..5 {
            hs.push(
                app.send("limited", vec![], Map::new(), Options::default())
                    .await
                    .unwrap(),
            );
        }
        let (w, h) = worker(&app, 1);
        for hd in &hs {
            hd.get(t(5)).await.unwrap();
        }
        let got = stamps.lock().unwrap().clone();
        assert_eq!(got.len(), 5);
        // At most two in any minute.
        for i in 2..got.len() {
            assert!(got[i] - got[i - 2] >= 60_000, "{got:?}");
        }
        assert!(clock.now() >= START + 120_000);
        w.stop(Duration::from_secs(1));
        h.await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_config_is_refused() {
    each(async |app, _| {
        assert!(
            Worker::new(
                app.clone(),
                WorkerConfig {
                    concurrency: 0,
                    ..WorkerConfig::default()
                }
            )
            .is_err()
        );
        assert!(
            Worker::new(
                app.clone(),
                WorkerConfig {
                    queues: vec![],
                    ..WorkerConfig::default()
                }
            )
            .is_err()
        );
        let o = Options {
            priority: Some(12),
            ..Options::default()
        };
        assert!(matches!(
            app.send_task("x", vec![], Map::new(), o).await,
            Err(Refused::Invalid(_))
        ));
        let p = Policy {
            timeout: Some(-1),
            ..Policy::default()
        };
        assert!(
            app.register("x", p, body(|_, _| async { Ok(Value::Null) }))
                .is_err()
        );
    })
    .await;
}

/// Waits (polling, up to 5 s) for the run's state name to be `want`.
async fn state_named(hd: &headway_core::task::Handle, want: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let now = hd.state_name().await.unwrap();
        if now == want {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "never {want}: {now}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_states_while_a_run_runs() {
    each(async |app, _| {
        let release = Arc::new(tokio::sync::Notify::new());
        let refusals = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (r2, e2) = (release.clone(), refusals.clone());
        app.register(
            "long",
            Policy::default(),
            body(move |ctx, _| {
                let (r2, e2) = (r2.clone(), e2.clone());
                async move {
                    // A ready state or no name is refused, naming why; the
                    // run goes on.
                    for bad in ["SUCCESS", "REVOKED", ""] {
                        let e = ctx.update_state(bad, json!(1)).await.unwrap_err();
                        e2.lock().unwrap().push(e.to_string());
                    }
                    let wait = r2.notified();
                    ctx.update_state("PROGRESS", json!({"done": 3, "of": 7}))
                        .await
                        .map_err(|e| Failure::new("Refused", e.to_string()))?;
                    wait.await;
                    Ok(json!("all done"))
                }
            }),
        )
        .unwrap();
        app.register(
            "boom",
            Policy::default(),
            body(|_, _| async { Err(Failure::new("ValueError", "bad input")) }),
        )
        .unwrap();
        add(&app);
        let (w, h) = worker(&app, 2);
        // A failure's info is its error.
        let boom = app
            .send("boom", vec![], Map::new(), Options::default())
            .await
            .unwrap();
        assert!(matches!(boom.get(t(5)).await, Err(Refused::Failed(_))));
        assert_eq!(boom.state_name().await.unwrap(), "FAILURE");
        let info = boom.info().await.unwrap();
        assert_eq!(
            (&info["kind"], &info["message"]),
            (&json!("ValueError"), &json!("bad input"))
        );
        let hd = app
            .send("long", vec![], Map::new(), Options::default())
            .await
            .unwrap();
        state_named(&hd, "PROGRESS").await;
        assert_eq!(hd.info().await.unwrap(), json!({"done": 3, "of": 7}));
        // The custom state is STARTED to the core's rules: not ready.
        assert_eq!(hd.state().await.unwrap(), State::Started);
        let errs = refusals.lock().unwrap().clone();
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(errs[0].contains("\"SUCCESS\" is a ready state"), "{errs:?}");
        assert!(errs[1].contains("\"REVOKED\" is a ready state"), "{errs:?}");
        assert!(errs[2].contains("non-empty"), "{errs:?}");
        // A set answers its unsettled part's custom name, and every info.
        let done = app
            .send(
                "add",
                vec![json!(1), json!(1)],
                Map::new(),
                Options::default(),
            )
            .await
            .unwrap();
        assert_eq!(done.get(t(5)).await.unwrap(), json!(2));
        let set = headway_core::task::Handle::of(
            app.clone(),
            vec![done.id().to_string(), hd.id().to_string()],
            true,
        );
        assert_eq!(set.state_name().await.unwrap(), "PROGRESS");
        assert_eq!(set.info().await.unwrap(), json!([2, {"done": 3, "of": 7}]));
        // Released, the final state overwrites it.
        release.notify_one();
        assert_eq!(hd.get(t(5)).await.unwrap(), json!("all done"));
        assert_eq!(hd.state_name().await.unwrap(), "SUCCESS");
        assert_eq!(hd.info().await.unwrap(), json!("all done"));
        // A late record never overwrites a final state; one before any is
        // stored shows (the positive control).
        app.record_state(hd.id(), "long", 0, "PROGRESS", json!(9))
            .await
            .unwrap();
        assert_eq!(hd.state_name().await.unwrap(), "SUCCESS");
        let other = app.handle("not-sent-yet");
        assert_eq!(other.state_name().await.unwrap(), "PENDING");
        assert_eq!(other.info().await.unwrap(), Value::Null);
        app.record_state(other.id(), "long", 0, "PROGRESS", json!(9))
            .await
            .unwrap();
        assert_eq!(other.state_name().await.unwrap(), "PROGRESS");
        assert_eq!(other.info().await.unwrap(), json!(9));
        assert!(matches!(
            app.record_state(other.id(), "long", 0, "FAILURE", json!(9))
                .await,
            Err(Refused::Invalid(_))
        ));
        w.stop(Duration::from_secs(1));
        h.await.unwrap();
    })
    .await;
}
