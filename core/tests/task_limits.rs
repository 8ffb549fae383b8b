//! Task limits shared by every worker on a broker (`task::limits`): a
//! global rate across two workers, runs per concurrency key, a dead
//! worker's permit lapsing, and a deduplicated send — on the memory broker
//! and both Redis layouts (each Redis one on a redis-server of the test's
//! own, two brokers on it standing for two processes).

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use headway_core::broker::MemoryBroker;
use headway_core::limit::GateOp;
use headway_core::task::limits;
use headway_core::task::policy::{Rate, RateScope};
use headway_core::task::spec::{Delivery, Receipt};
use headway_core::task::{App, Options, Policy, Worker, WorkerConfig, body};
use headway_core::task::{BoxFuture, Broker, Refused, Seams, SystemClock};
use serde_json::{Map, Value, json};
use support::kit::{Conn, Kit, Layout, Opts};

fn worker(app: &App, config: WorkerConfig) -> (Worker, tokio::task::JoinHandle<()>) {
    let w = Worker::new(app.clone(), config).unwrap();
    let w2 = w.clone();
    (w, tokio::spawn(async move { w2.run().await.unwrap() }))
}

/// A second app on the same store: another connection on Redis, another
/// consumer handle on memory.
async fn second(kit: &Kit, name: &str) -> App {
    kit.open(Opts::named(name)).await.app()
}

/// Runs started in `[0, window)` from the first start, by two workers of
/// two apps on one broker, with `scope`.
async fn started_in(kit: &Kit, scope: RateScope, window: Duration) -> usize {
    let starts: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let policy = Policy {
        rate: Some(Rate::parse("20/s").unwrap()),
        rate_scope: scope,
        ..Policy::default()
    };
    let apps = [kit.app(), second(kit, "other").await];
    for app in &apps {
        let s = starts.clone();
        app.register(
            "ping",
            policy.clone(),
            body(move |_, _| {
                s.lock().unwrap().push(Instant::now());
                async { Ok(Value::Null) }
            }),
        )
        .unwrap();
    }
    for _ in 0..300 {
        apps[0]
            .send("ping", vec![], Map::new(), Options::default())
            .await
            .unwrap();
    }
    let ws: Vec<_> = apps
        .iter()
        .map(|a| {
            worker(
                a,
                WorkerConfig {
                    concurrency: 4,
                    prefetch: Some(8),
                    ..WorkerConfig::default()
                },
            )
        })
        .collect();
    let deadline = Instant::now() + window + Duration::from_secs(10);
    let first = loop {
        if let Some(t) = starts.lock().unwrap().first() {
            break *t;
        }
        assert!(Instant::now() < deadline, "{}: nothing ran", kit.name());
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    tokio::time::sleep_until((first + window).into()).await;
    for (w, _) in &ws {
        w.stop(Duration::from_secs(2));
    }
    for (_, h) in ws {
        h.await.unwrap();
    }
    let got = starts.lock().unwrap();
    got.iter().filter(|t| **t < first + window).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_global_rate_holds_across_two_workers() {
    let window = Duration::from_secs(3);
    for kit in Kit::all(&Layout::ALL).await {
        // 20/s over 3 s with a burst of 20 (one second's worth): 80.
        let global = started_in(&kit, RateScope::Global, window).await;
        let bound = (20.0 * window.as_secs_f64() + 20.0) * 1.1;
        assert!(
            global as f64 <= bound && global >= 50,
            "{}: {global} runs started in {window:?} at a global 20/s",
            kit.name()
        );
        // The positive control: per worker, each lets its own 20/s through.
        let kit = Kit::start(kit.layout).await.unwrap();
        let each = started_in(&kit, RateScope::Worker, window).await;
        assert!(
            each as f64 >= 1.5 * 20.0 * window.as_secs_f64(),
            "{}: only {each} runs per worker",
            kit.name()
        );
    }
}

type Ledger = Arc<Mutex<Vec<(String, Instant, Instant)>>>;

/// Registers `slow` (sleeps 80 ms, records its key's start and end) on
/// `app` with a limit of `limit` runs per key.
fn slow(app: &App, ledger: &Ledger, limit: u32) {
    let l = ledger.clone();
    app.register(
        "slow",
        Policy {
            concurrency_limit: Some(limit),
            ..Policy::default()
        },
        body(move |_, args| {
            let l = l.clone();
            async move {
                let t0 = Instant::now();
                tokio::time::sleep(Duration::from_millis(80)).await;
                let key = args[0].as_str().unwrap().to_string();
                l.lock().unwrap().push((key, t0, Instant::now()));
                Ok(Value::Null)
            }
        }),
    )
    .unwrap();
}

/// The most runs of `key` in the ledger that overlapped at once.
fn most_at_once(ledger: &[(String, Instant, Instant)], key: Option<&str>) -> usize {
    let mut edges: Vec<(Instant, i32)> = Vec::new();
    for (k, a, b) in ledger {
        if key.is_none_or(|x| x == k) {
            edges.push((*a, 1));
            edges.push((*b, -1));
        }
    }
    // Ends before starts at the same instant.
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    most as usize
}

fn keyed(key: &str) -> Options {
    Options {
        concurrency_key: Some(key.into()),
        ..Options::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_concurrency_key_is_never_exceeded_and_other_keys_run_alongside() {
    for kit in Kit::all(&Layout::ALL).await {
        let ledger: Ledger = Arc::default();
        let apps = [kit.app(), second(&kit, "other").await];
        for app in &apps {
            slow(app, &ledger, 1);
        }
        let mut hs = Vec::new();
        for i in 0..6 {
            for key in ["cust-7", "cust-8"] {
                hs.push(
                    apps[i % 2]
                        .send("slow", vec![json!(key)], Map::new(), keyed(key))
                        .await
                        .unwrap(),
                );
            }
        }
        let ws: Vec<_> = apps
            .iter()
            .map(|a| {
                worker(
                    a,
                    WorkerConfig {
                        concurrency: 4,
                        ..WorkerConfig::default()
                    },
                )
            })
            .collect();
        for h in &hs {
            h.get(Some(Duration::from_secs(30))).await.unwrap();
        }
        for (w, _) in &ws {
            w.stop(Duration::from_secs(2));
        }
        for (_, h) in ws {
            h.await.unwrap();
        }
        let got = ledger.lock().unwrap().clone();
        assert_eq!(got.len(), 12, "{}: every run ran once", kit.name());
        for key in ["cust-7", "cust-8"] {
            assert_eq!(
                most_at_once(&got, Some(key)),
                1,
                "{}: {key} ran alongside itself",
                kit.name()
            );
        }
        // The positive control: the two keys did run at once.
        assert!(
            most_at_once(&got, None) >= 2,
            "{}: the keys never overlapped",
            kit.name()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_limit_of_two_lets_two_of_a_key_run() {
    let kit = Kit::start(Layout::Memory).await.unwrap();
    let ledger: Ledger = Arc::default();
    let app = kit.app();
    slow(&app, &ledger, 2);
    let mut hs = Vec::new();
    for _ in 0..6 {
        hs.push(
            app.send("slow", vec![json!("k")], Map::new(), keyed("k"))
                .await
                .unwrap(),
        );
    }
    let (w, h) = worker(
        &app,
        WorkerConfig {
            concurrency: 6,
            ..WorkerConfig::default()
        },
    );
    for hd in &hs {
        hd.get(Some(Duration::from_secs(30))).await.unwrap();
    }
    w.stop(Duration::from_secs(1));
    h.await.unwrap();
    let got = ledger.lock().unwrap().clone();
    assert_eq!(most_at_once(&got, Some("k")), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_holders_permit_lapses_with_its_lease() {
    // The own layout leases permits for its consumer lease (Celery's
    // layout for the shared gate's 30 s, too long to wait here).
    if let Some(kit) = Kit::start(Layout::Redis).await {
        let lease = Duration::from_millis(600);
        let conn = kit.open(Opts::named("short").lease(lease)).await;
        assert!(matches!(conn, Conn::Redis(_)));
        let app = conn.app();
        let ledger: Ledger = Arc::default();
        slow(&app, &ledger, 1);
        // A holder that died holding the key's only permit: taken, never
        // renewed or released.
        let l = app.broker().task_limits().unwrap();
        let gate = limits::key_key(l.namespace(), "slow", "k");
        assert!(l.gate(&gate, 1, GateOp::Take, "dead").await.unwrap());
        let t0 = Instant::now();
        let h = app
            .send("slow", vec![json!("k")], Map::new(), keyed("k"))
            .await
            .unwrap();
        let (w, wh) = worker(&app, WorkerConfig::default());
        h.get(Some(Duration::from_secs(20))).await.unwrap();
        let waited = ledger.lock().unwrap()[0].1 - t0;
        assert!(
            waited >= lease - Duration::from_millis(50),
            "{}: ran after {waited:?}, before the dead permit's lease ended",
            kit.name()
        );
        assert!(waited < lease + Duration::from_secs(3), "{}", kit.name());
        // The run's own permit was given back: the key is free again.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !l.gate(&gate, 1, GateOp::Take, "probe").await.unwrap() {
            assert!(Instant::now() < deadline, "the run's permit was kept");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        w.stop(Duration::from_secs(1));
        wh.await.unwrap();
    }
}

fn deduped(key: &str, ttl: i64) -> Options {
    Options {
        dedupe_key: Some(key.into()),
        dedupe_ttl: Some(ttl),
        ..Options::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deduplicated_send_answers_the_first_run_until_its_ttl() {
    for kit in Kit::all(&Layout::ALL).await {
        let runs: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
        let apps = [kit.app(), second(&kit, "other").await];
        for app in &apps {
            let r = runs.clone();
            app.register(
                "once",
                Policy::default(),
                body(move |ctx, _| {
                    *r.lock().unwrap().entry(ctx.id.clone()).or_default() += 1;
                    async { Ok(json!("done")) }
                }),
            )
            .unwrap();
        }
        let send = |i: usize, key: &str| {
            let app = apps[i].clone();
            let o = deduped(key, 700);
            async move {
                app.send("once", vec![], Map::new(), o)
                    .await
                    .unwrap()
                    .id()
                    .to_string()
            }
        };
        let first = send(0, "k").await;
        let again = send(1, "k").await;
        assert_eq!(first, again, "{}: a second send within the ttl", kit.name());
        // The positive control: another key sends its own run.
        let other = send(1, "j").await;
        assert_ne!(other, first, "{}", kit.name());
        let (w, h) = worker(&apps[0], WorkerConfig::default());
        for id in [&first, &other] {
            apps[0]
                .handle(id)
                .get(Some(Duration::from_secs(10)))
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(750)).await;
        let later = send(1, "k").await;
        assert_ne!(
            later,
            first,
            "{}: after the ttl a send runs again",
            kit.name()
        );
        apps[0]
            .handle(&later)
            .get(Some(Duration::from_secs(10)))
            .await
            .unwrap();
        w.stop(Duration::from_secs(1));
        h.await.unwrap();
        let r = runs.lock().unwrap().clone();
        assert_eq!(r.len(), 3, "{}: {r:?}", kit.name());
        assert!(r.values().all(|n| *n == 1), "{}: {r:?}", kit.name());
    }
}

#[tokio::test]
async fn a_dedupe_key_inside_a_canvas_is_refused() {
    let app = App::memory(None);
    app.register(
        "t",
        Policy::default(),
        body(|_, _| async { Ok(Value::Null) }),
    )
    .unwrap();
    let sig = headway_core::task::Sig::new("t", vec![]).with_options(deduped("k", 1000));
    let chain = headway_core::task::Canvas::Chain(vec![
        headway_core::task::Canvas::Sig(sig.clone()),
        headway_core::task::Canvas::Sig(headway_core::task::Sig::new("t", vec![])),
    ]);
    let e = app.send_canvas(chain).await.unwrap_err().to_string();
    assert!(e.contains("`dedupe_key`"), "{e}");
    // The positive control: the same signature sent alone is deduplicated.
    let a = app
        .send_canvas(headway_core::task::Canvas::Sig(sig.clone()))
        .await
        .unwrap();
    let b = app
        .send_canvas(headway_core::task::Canvas::Sig(sig))
        .await
        .unwrap();
    assert_eq!(a.id(), b.id());
}

/// A memory broker that keeps no task limits, as RabbitMQ's.
struct NoLimits(Arc<MemoryBroker>);

impl Broker for NoLimits {
    fn publish(&self, m: Vec<headway_core::task::Message>) -> BoxFuture<'_, Result<(), Refused>> {
        self.0.publish(m)
    }
    fn consume<'a>(
        &'a self,
        queues: &'a [String],
        max: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<Delivery>, Refused>> {
        self.0.consume(queues, max, wait)
    }
    fn ack(&self, r: Vec<Receipt>) -> BoxFuture<'_, Result<(), Refused>> {
        self.0.ack(r)
    }
    fn reject(&self, r: Receipt, requeue: bool) -> BoxFuture<'_, Result<(), Refused>> {
        self.0.reject(r, requeue)
    }
    fn next_eta<'a>(&'a self, q: &'a [String]) -> BoxFuture<'a, Result<Option<i64>, Refused>> {
        self.0.next_eta(q)
    }
    fn revoke(&self, ids: Vec<String>, until: i64) -> BoxFuture<'_, Result<(), Refused>> {
        self.0.revoke(ids, until)
    }
    fn revoked<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<Vec<bool>, Refused>> {
        self.0.revoked(ids)
    }
}

#[tokio::test]
async fn a_broker_that_keeps_no_limits_refuses_them_by_name() {
    let mem = MemoryBroker::new(Arc::new(SystemClock));
    let app = App::new(
        Seams {
            broker: Arc::new(NoLimits(mem.clone())),
            backend: Some(mem.clone()),
            counter: Some(mem.clone()),
            inspector: Some(mem),
        },
        Arc::new(SystemClock),
    );
    app.set_host(headway_core::task::Host::Node);
    app.register(
        "t",
        Policy::default(),
        body(|_, _| async { Ok(Value::Null) }),
    )
    .unwrap();
    fn refused<T>(r: Result<T, Refused>) -> String {
        match r {
            Err(Refused::Invalid(t)) => t,
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("accepted"),
        }
    }
    let e = refused(app.send("t", vec![], Map::new(), keyed("c")).await);
    assert!(e.contains("`concurrencyKey`"), "{e}");
    let e = refused(app.send("t", vec![], Map::new(), deduped("k", 1000)).await);
    assert!(e.contains("`dedupeKey`"), "{e}");
    // The positive control: a plain send and a plain worker are fine.
    app.send("t", vec![], Map::new(), Options::default())
        .await
        .unwrap();
    assert!(Worker::new(app.clone(), WorkerConfig::default()).is_ok());
    app.register(
        "g",
        Policy {
            rate: Some(Rate::parse("5/s").unwrap()),
            rate_scope: RateScope::Global,
            ..Policy::default()
        },
        body(|_, _| async { Ok(Value::Null) }),
    )
    .unwrap();
    let e = refused(Worker::new(app.clone(), WorkerConfig::default()).map(|_| ()));
    assert!(e.contains("`rateScope`"), "{e}");
}
