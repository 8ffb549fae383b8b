//! Promises of `docs/guarantees.md` that no other test held the code to:
//! a send that runs out of patience raises, a finished run's settle is kept
//! through an outage, a claim whose answer was lost is swept back, a
//! redelivered success does not repeat what follows it, the dead-letter cap,
//! what a worker's prefetch counts, and `rediss://` against a private CA.
//!
//! Each runs on the brokers its promise is made for: the in-memory broker,
//! headway's Redis layout, Celery's layout. Redis ones start a redis-server
//! of their own (skipped without one unless `HEADWAY_REQUIRE_REDIS=1`).
//! Every negative check ("not run twice", "refused") has its positive
//! control beside it.

mod support;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use headway_core::broker::celery::{CeleryBroker, CeleryOptions};
use headway_core::broker::{MemoryBroker, RedisBroker, RedisOptions};
use headway_core::task::spec::Claimed;
use headway_core::task::{
    App, Backend, BoxFuture, Broker, Canvas, DEAD_KEPT, Delivery, Inspector, Message, Options,
    Outcome, Policy, Receipt, Refused, Seams, Sig, State, SystemClock, Worker, WorkerConfig, body,
};
use serde_json::{Map, Value, json};
use support::RedisServer;

fn worker(app: &App, queues: &[&str]) -> (Worker, tokio::task::JoinHandle<()>) {
    let w = Worker::new(
        app.clone(),
        WorkerConfig {
            queues: queues.iter().map(|q| q.to_string()).collect(),
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let w2 = w.clone();
    (w, tokio::spawn(async move { w2.run().await.unwrap() }))
}

/// Waits (polling every 10 ms, up to `secs`) for `cond`, failing naming `what`.
async fn until<F: std::future::Future<Output = bool>>(what: &str, secs: u64, cond: impl Fn() -> F) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A queue's (ready, held) as the inspector sees it.
async fn depth(insp: &dyn Inspector, queue: &str) -> (u64, u64) {
    insp.queues()
        .await
        .unwrap()
        .iter()
        .find(|q| q.name == queue)
        .map_or((0, 0), |q| (q.ready.values().sum(), q.unacked))
}

async fn redis(url: &str, options: RedisOptions) -> Arc<RedisBroker> {
    RedisBroker::connect(url, options, Arc::new(SystemClock))
        .await
        .unwrap()
}

async fn celery(url: &str, options: CeleryOptions) -> Arc<CeleryBroker> {
    CeleryBroker::connect(url, options, Arc::new(SystemClock))
        .await
        .unwrap()
}

/// The seams of `layout` ("redis" or "celery") on `url`, with `patience`.
async fn layout_seams(layout: &str, url: &str, name: &str, patience: Duration) -> Seams {
    match layout {
        "redis" => redis(
            url,
            RedisOptions {
                consumer: Some(name.into()),
                patience,
                recover_every: None,
                ..RedisOptions::default()
            },
        )
        .await
        .seams(),
        "celery" => celery(
            url,
            CeleryOptions {
                consumer: Some(name.into()),
                patience,
                restore_every: None,
                ..CeleryOptions::default()
            },
        )
        .await
        .seams(),
        other => panic!("unknown layout {other}"),
    }
}

// ------------------------------------------------------------ patience

/// R, C: with Redis away longer than `patience`, a send raises a typed
/// error once the patience is spent — not before, and it does not hang;
/// with Redis back within the patience, the same send waits and lands.
async fn send_patience(layout: &str) {
    let Some(mut s) = RedisServer::start() else {
        return;
    };
    let patience = Duration::from_millis(1500);
    let app = App::new(
        layout_seams(layout, &s.url(), "sender", patience).await,
        Arc::new(SystemClock),
    );
    let send = |app: App, id: &'static str| async move {
        let opts = Options {
            id: Some(id.into()),
            ..Options::default()
        };
        app.send_task("t", vec![], Map::new(), opts).await
    };
    send(app.clone(), "before").await.unwrap();

    // Away for a third of the patience (the send starts after it went):
    // the send waits, and lands once Redis is back.
    s.kill();
    let app2 = app.clone();
    let h = tokio::spawn(async move {
        let t = Instant::now();
        (send(app2, "waited").await, t.elapsed())
    });
    tokio::time::sleep(patience / 3).await;
    s.restart();
    let (got, took) = h.await.unwrap();
    got.unwrap_or_else(|e| panic!("{layout}: a send within the patience raised: {e}"));
    assert!(
        took >= patience / 3 - Duration::from_millis(50),
        "{layout}: it waited for Redis, {took:?}"
    );
    let seams = layout_seams(layout, &s.url(), "reader", patience).await;
    let got = seams
        .broker
        .consume(&["default".to_string()], 10, Duration::from_secs(2))
        .await
        .unwrap();
    let ids: Vec<&str> = got.iter().map(|d| d.message.id.as_str()).collect();
    assert_eq!(ids, ["waited"], "{layout}: the restarted Redis has it");

    // Away for good: raises once the patience is spent, not before.
    s.kill();
    let t = Instant::now();
    let got = tokio::time::timeout(patience * 4, send(app.clone(), "refused"))
        .await
        .unwrap_or_else(|_| panic!("{layout}: the send hung past 4× its patience"));
    let took = t.elapsed();
    match got {
        Err(Refused::Broker(why)) => assert!(
            why.text.contains("127.0.0.1"),
            "{layout}: the error names the server: {why}"
        ),
        other => panic!("{layout}: expected a broker error, got {other:?}"),
    }
    assert!(
        took >= patience - Duration::from_millis(50),
        "{layout}: raised after {took:?}, before its patience of {patience:?}"
    );
    assert!(
        took < patience + Duration::from_millis(2500),
        "{layout}: raised {took:?} after the send, long past its patience"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_layout_send_raises_once_its_patience_is_spent() {
    send_patience("redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn celery_layout_send_raises_once_its_patience_is_spent() {
    send_patience("celery").await;
}

// ------------------------------------------------------------ kept settles

/// R, C: a run that finishes while Redis is away longer than the patience
/// keeps its settle: once Redis is back its result is stored and its
/// message acked — nothing lost, nothing run twice.
async fn settle_kept(layout: &str) {
    let Some(mut s) = RedisServer::start_with(true) else {
        return;
    };
    let patience = Duration::from_millis(500);
    let app = App::new(
        layout_seams(layout, &s.url(), "worker", patience).await,
        Arc::new(SystemClock),
    );
    let runs = Arc::new(AtomicU32::new(0));
    let gate = Arc::new(tokio::sync::Notify::new());
    let (r2, g2) = (runs.clone(), gate.clone());
    app.register(
        "job",
        Policy {
            acks_late: true,
            ..Policy::default()
        },
        body(move |_, args| {
            let n = r2.fetch_add(1, Ordering::SeqCst) + 1;
            let g = g2.clone();
            async move {
                if n == 1 {
                    g.notified().await;
                }
                Ok(json!({"ran": n, "arg": args[0]}))
            }
        }),
    )
    .unwrap();
    let hd = app
        .send("job", vec![json!(7)], Map::new(), Options::default())
        .await
        .unwrap();
    let (w, h) = worker(&app, &["default"]);
    until("the run starts", 5, || async {
        runs.load(Ordering::SeqCst) == 1
    })
    .await;
    // Redis goes away; the run finishes while it is away, and stays away
    // three patiences: every write of the settle is refused meanwhile.
    s.kill();
    gate.notify_one();
    tokio::time::sleep(patience * 3).await;
    s.restart();
    // The result lands and the claim is acked, with no second run.
    let reader = layout_seams(layout, &s.url(), "reader", patience).await;
    let backend = reader.backend.clone().unwrap();
    let insp = reader.inspector.clone().unwrap();
    until("the result is stored and the claim acked", 15, || async {
        let stored = backend
            .fetch(hd.id())
            .await
            .ok()
            .flatten()
            .is_some_and(|o| o.state == State::Success);
        stored && depth(&*insp, "default").await == (0, 0)
    })
    .await;
    let o = backend.fetch(hd.id()).await.unwrap().unwrap();
    assert_eq!(
        o.result,
        Some(json!({"ran": 1, "arg": 7})),
        "{layout}: the first run's value"
    );
    w.stop(Duration::from_secs(2));
    h.await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "{layout}: run once");
    assert_eq!(
        depth(&*insp, "default").await,
        (0, 0),
        "{layout}: nothing left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_layout_keeps_a_finished_runs_settle_through_an_outage() {
    settle_kept("redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn celery_layout_keeps_a_finished_runs_settle_through_an_outage() {
    settle_kept("celery").await;
}

// ------------------------------------------------------------ sweep

/// The claim script's source, as the broker sends it (common part first).
fn claim_script() -> String {
    format!(
        "{}\n{}",
        include_str!("../src/broker/redis/lua/common.lua"),
        include_str!("../src/broker/redis/lua/claim.lua")
    )
}

/// Runs the claim script in Redis for `consumer`, as a claim whose answer
/// never reached its process: the message is moved and stamped in Redis,
/// and nobody in the process knows.
fn claim_behind_its_back(s: &RedisServer, queue: &str, consumer: &str) {
    let base = format!("headway:{{{queue}}}:");
    let got = s.cli(&[
        "EVAL",
        &claim_script(),
        "1",
        &base,
        consumer,
        "1",
        "30000",
        "",
        "",
        "16777216",
    ]);
    assert!(got.contains("lost-1"), "the script claimed it: {got}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_answer_was_lost_is_swept_back() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let qs = vec!["q".to_string()];
    let held = "headway:{q}:held:c1";
    // The periodic sweep: every lease (here 300 ms).
    let b = redis(
        &s.url(),
        RedisOptions {
            consumer: Some("c1".into()),
            lease: Duration::from_millis(300),
            recover_every: None,
            ..RedisOptions::default()
        },
    )
    .await;
    assert!(b.consume(&qs, 1, Duration::ZERO).await.unwrap().is_empty());
    let keep = Message::new("kept".into(), "t".into(), vec![], Map::new(), "q".into());
    let lost = Message::new("lost-1".into(), "t".into(), vec![], Map::new(), "q".into());
    b.publish(vec![keep]).await.unwrap();
    let mine = b.consume(&qs, 1, Duration::ZERO).await.unwrap();
    assert_eq!(mine[0].message.id, "kept");
    b.publish(vec![lost]).await.unwrap();
    claim_behind_its_back(&s, "q", "c1");
    assert_eq!(s.cli(&["LLEN", held]), "2", "both held by c1 in Redis");
    // Swept back within a few leases, marked redelivered; the claim the
    // process got an answer for stays held (positive control: the sweep
    // tells them apart).
    until("the lost claim is swept back", 5, || async {
        s.cli(&["LLEN", "headway:{q}:ready:0"]) == "1"
    })
    .await;
    assert_eq!(s.cli(&["LLEN", held]), "1");
    assert!(s.cli(&["LRANGE", held, "0", "-1"]).contains("\"kept\""));
    let back = b.consume(&qs, 10, Duration::ZERO).await.unwrap();
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].message.id, "lost-1");
    assert!(back[0].redelivered, "marked redelivered");
    b.ack(vec![back[0].receipt.clone(), mine[0].receipt.clone()])
        .await
        .unwrap();
    assert_eq!(
        s.cli(&["LLEN", held]),
        "0",
        "the kept claim was still acked"
    );
    drop(b);

    // After a reconnect: the connection drops just after the script ran
    // (its answer lost with it). The lease is long, so only the reconnect's
    // sweep can hand it back.
    let b = redis(
        &s.url(),
        RedisOptions {
            consumer: Some("c2".into()),
            recover_every: None,
            ..RedisOptions::default()
        },
    )
    .await;
    assert!(b.consume(&qs, 1, Duration::ZERO).await.unwrap().is_empty());
    let lost = Message::new("lost-1".into(), "t".into(), vec![], Map::new(), "q".into());
    b.publish(vec![lost]).await.unwrap();
    claim_behind_its_back(&s, "q", "c2");
    s.cli(&["CLIENT", "KILL", "TYPE", "normal"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    let back = loop {
        // The first claim after the drop may fail (the dead connection);
        // the next reconnects and sweeps.
        if let Ok(got) = b.consume(&qs, 10, Duration::from_millis(100)).await
            && !got.is_empty()
        {
            break got;
        }
        assert!(Instant::now() < deadline, "the lost claim never came back");
    };
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].message.id, "lost-1");
    assert!(back[0].redelivered);
    b.ack(vec![back[0].receipt.clone()]).await.unwrap();
    assert_eq!(s.cli(&["LLEN", "headway:{q}:held:c2"]), "0");
}

// ------------------------------------------------------------ what the prefetch counts

/// A result store whose stores wait until the test lets them through.
struct HeldStores {
    inner: Arc<MemoryBroker>,
    gate: Arc<tokio::sync::Semaphore>,
}

impl Backend for HeldStores {
    fn store(&self, outcomes: Vec<Outcome>) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(async move {
            self.gate.acquire().await.unwrap().forget();
            self.inner.store(outcomes).await
        })
    }
    fn fetch<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Outcome>, Refused>> {
        self.inner.fetch(id)
    }
    fn wait<'a>(
        &'a self,
        id: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Option<Outcome>, Refused>> {
        self.inner.wait(id, timeout)
    }
    fn forget<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<(), Refused>> {
        self.inner.forget(ids)
    }
}

/// The prefetch counts the messages a worker has not finished running, as
/// Celery's does: runs whose results are still being stored leave room for
/// more to run, up to twice the prefetch unsettled. With every store held
/// back, a worker of prefetch 2 runs four bodies (it ran two when every
/// unsettled run counted), runs no fifth, and once the stores go through
/// settles all ten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_waiting_on_their_store_leave_room_in_the_prefetch() {
    let mem = MemoryBroker::new(Arc::new(SystemClock));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let app = App::new(
        Seams {
            broker: mem.clone(),
            backend: Some(Arc::new(HeldStores {
                inner: mem.clone(),
                gate: gate.clone(),
            })),
            counter: Some(mem.clone()),
            inspector: Some(mem.clone()),
        },
        Arc::new(SystemClock),
    );
    let ran = Arc::new(AtomicU32::new(0));
    let r2 = ran.clone();
    app.register(
        "t",
        Policy::default(),
        body(move |_, _| {
            r2.fetch_add(1, Ordering::SeqCst);
            async { Ok(Value::Null) }
        }),
    )
    .unwrap();
    let mut hs = Vec::new();
    for i in 0..10 {
        hs.push(
            app.send("t", vec![json!(i)], Map::new(), Options::default())
                .await
                .unwrap(),
        );
    }
    let w = Worker::new(
        app.clone(),
        WorkerConfig {
            concurrency: 1,
            prefetch: Some(2),
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let w2 = w.clone();
    let h = tokio::spawn(async move { w2.run().await.unwrap() });
    let t = Instant::now();
    until("four bodies ran with no store through", 5, || async {
        ran.load(Ordering::SeqCst) == 4
    })
    .await;
    // No fifth: four unsettled is the bound. Given ten times as long as
    // the four took (and at least 200 ms).
    tokio::time::sleep((t.elapsed() * 10).max(Duration::from_millis(200))).await;
    assert_eq!(ran.load(Ordering::SeqCst), 4);
    assert!(hs[0].state().await.unwrap() != State::Success);
    gate.add_permits(1000);
    for hd in &hs {
        hd.get(Some(Duration::from_secs(5))).await.unwrap();
    }
    assert_eq!(ran.load(Ordering::SeqCst), 10);
    w.stop(Duration::from_secs(1));
    h.await.unwrap();
}

// ------------------------------------------------------------ redelivered success

/// A broker that drops every ack: what a worker that died after its runs
/// stored their results and sent what follows, before it acked, leaves.
struct DropsAcks(Arc<dyn Broker>);

impl Broker for DropsAcks {
    fn publish(&self, messages: Vec<Message>) -> BoxFuture<'_, Result<(), Refused>> {
        self.0.publish(messages)
    }
    fn consume<'a>(
        &'a self,
        queues: &'a [String],
        max: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<Delivery>, Refused>> {
        self.0.consume(queues, max, wait)
    }
    fn claim<'a>(
        &'a self,
        queues: &'a [String],
        max: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<Claimed>, Refused>> {
        self.0.claim(queues, max, wait)
    }
    fn ack(&self, _: Vec<Receipt>) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(async { Ok(()) })
    }
    fn reject(&self, receipt: Receipt, requeue: bool) -> BoxFuture<'_, Result<(), Refused>> {
        self.0.reject(receipt, requeue)
    }
    fn next_eta<'a>(&'a self, queues: &'a [String]) -> BoxFuture<'a, Result<Option<i64>, Refused>> {
        self.0.next_eta(queues)
    }
    fn revoke(&self, ids: Vec<String>, until: i64) -> BoxFuture<'_, Result<(), Refused>> {
        self.0.revoke(ids, until)
    }
    fn revoked<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<Vec<bool>, Refused>> {
        self.0.revoked(ids)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_success_does_not_repeat_its_chain_link_or_chord_arrival() {
    let mut kits: Vec<(&str, Option<RedisServer>)> = vec![("memory", None)];
    if let Some(s) = RedisServer::start() {
        kits.push(("redis", Some(s)));
    }
    for (name, server) in kits {
        // The main seams, and a dying consumer's broker on the same store.
        let mem = MemoryBroker::new(Arc::new(SystemClock));
        let (main, dying): (Seams, Arc<dyn Broker>) = match &server {
            None => (
                Seams {
                    broker: mem.clone(),
                    backend: Some(mem.clone()),
                    counter: Some(mem.clone()),
                    inspector: Some(mem.clone()),
                },
                mem.handle("dying"),
            ),
            Some(s) => {
                let main = redis(
                    &s.url(),
                    RedisOptions {
                        consumer: Some("main".into()),
                        recover_every: None,
                        ..RedisOptions::default()
                    },
                )
                .await;
                let dying = redis(
                    &s.url(),
                    RedisOptions {
                        consumer: Some("dying".into()),
                        lease: Duration::from_millis(300),
                        recover_every: None,
                        ..RedisOptions::default()
                    },
                )
                .await;
                (main.seams(), dying)
            }
        };
        let runs = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let register = |app: &App| {
            let late = Policy {
                acks_late: true,
                ..Policy::default()
            };
            for task in ["head", "next", "part", "total"] {
                let r = runs.clone();
                app.register(
                    task,
                    late.clone(),
                    body(move |ctx, args| {
                        r.lock().unwrap().push(ctx.name.clone());
                        async move {
                            Ok(match ctx.name.as_str() {
                                "total" => json!(
                                    args[0]
                                        .as_array()
                                        .unwrap()
                                        .iter()
                                        .filter_map(Value::as_i64)
                                        .sum::<i64>()
                                ),
                                "next" => json!(args[0].as_i64().unwrap() + 100),
                                _ => args[0].clone(),
                            })
                        }
                    }),
                )
                .unwrap();
            }
        };
        // The same store and counter, with `broker` as the broker.
        let with = |broker: Arc<dyn Broker>| Seams {
            broker,
            backend: main.backend.clone(),
            counter: main.counter.clone(),
            inspector: main.inspector.clone(),
        };
        let app = App::new(with(main.broker.clone()), Arc::new(SystemClock));
        register(&app);
        let on = |q: &str| Options {
            queue: Some(q.into()),
            ..Options::default()
        };
        let chain = app
            .send_canvas(Canvas::Chain(vec![
                Canvas::Sig(Sig::new("head", vec![json!(1)])),
                Canvas::Sig(Sig::new("next", vec![]).with_options(on("next"))),
            ]))
            .await
            .unwrap();
        let chord = app
            .send_canvas(Canvas::Chord(
                vec![
                    Canvas::Sig(Sig::new("part", vec![json!(2)])),
                    Canvas::Sig(Sig::new("part", vec![json!(3)])),
                ],
                Box::new(Canvas::Sig(
                    Sig::new("total", vec![]).with_options(on("callback")),
                )),
            ))
            .await
            .unwrap();
        // A worker runs the head and both parts — results stored, the link
        // and the callback sent — and dies before acking any of them.
        let doomed = App::new(
            with(Arc::new(DropsAcks(dying.clone()))),
            Arc::new(SystemClock),
        );
        register(&doomed);
        let (w, h) = worker(&doomed, &["default"]);
        let insp = main.inspector.clone().unwrap();
        until("the first runs are done and followed", 10, || async {
            depth(&*insp, "next").await.0 == 1
                && depth(&*insp, "callback").await.0 == 1
                && depth(&*insp, "default").await == (0, 3)
        })
        .await;
        w.stop(Duration::from_secs(1));
        h.await.unwrap();
        drop((w, doomed, dying));
        // Its claims come back, redelivered.
        let recovered = match &server {
            None => {
                mem.expire("dying");
                main.broker.recover().await.unwrap()
            }
            Some(s) => {
                until("the dying lease lapses", 10, || async {
                    s.cli(&["EXISTS", "headway:{default}:lease:dying"]) == "0"
                })
                .await;
                main.broker.recover().await.unwrap()
            }
        };
        assert_eq!(recovered, 3, "{name}");
        assert_eq!(depth(&*insp, "default").await, (3, 0), "{name}");
        // A live worker settles the three redelivered runs.
        let (w, h) = worker(&app, &["default"]);
        until("the redelivered runs are settled", 10, || async {
            depth(&*insp, "default").await == (0, 0)
        })
        .await;
        w.stop(Duration::from_secs(1));
        h.await.unwrap();
        let mut ran = runs.lock().unwrap().clone();
        ran.sort();
        assert_eq!(ran, ["head", "part", "part"], "{name}: nothing ran again");
        // The link and the callback were sent once each: one message on
        // each queue (positive control: it is there, not zero).
        assert_eq!(
            depth(&*insp, "next").await,
            (1, 0),
            "{name}: the chain's next link"
        );
        assert_eq!(
            depth(&*insp, "callback").await,
            (1, 0),
            "{name}: the chord's callback"
        );
        // Both run once, with the right values.
        let (w, h) = worker(&app, &["next", "callback"]);
        assert_eq!(
            chain.get(Some(Duration::from_secs(5))).await.unwrap(),
            json!(101)
        );
        assert_eq!(
            chord.get(Some(Duration::from_secs(5))).await.unwrap(),
            json!(5)
        );
        w.stop(Duration::from_secs(1));
        h.await.unwrap();
        let mut all = runs.lock().unwrap().clone();
        all.sort();
        assert_eq!(all, ["head", "next", "part", "part", "total"], "{name}");
    }
}

// ------------------------------------------------------------ dead-letter cap

/// The broker under a dead-letter test, and how bytes are pushed onto it.
enum Pusher {
    Memory(Arc<MemoryBroker>),
    Redis(Arc<RedisBroker>),
    Celery(Arc<CeleryBroker>),
}

/// Puts `raws` on queue `q` as a foreign producer would, one at a time:
/// their order is what the cap is checked by.
async fn push_all(p: &Pusher, q: &str, raws: &[Vec<u8>]) {
    for r in raws {
        match p {
            Pusher::Memory(b) => b.push_raw(q, r),
            Pusher::Redis(b) => b.push_raw(q, r).await.unwrap(),
            Pusher::Celery(b) => b.push_raw(q, r).await.unwrap(),
        }
    }
}

/// Claims until `q` has nothing ready; none of it may be runnable. With
/// `total`, after every claim what is ready plus what is dead must be
/// `total`: nothing claimed vanishes on its way to the dead letters.
async fn claim_all(name: &str, b: &dyn Broker, insp: &dyn Inspector, q: &str, total: Option<u64>) {
    let qs = vec![q.to_string()];
    while depth(insp, q).await.0 > 0 {
        let got = b.consume(&qs, 1000, Duration::ZERO).await.unwrap();
        assert!(got.is_empty(), "{name}: none of it runnable");
        if let Some(total) = total {
            let (ready, held) = depth(insp, q).await;
            let dead = insp.dead_count(q).await.unwrap();
            assert_eq!(
                (ready + dead, held),
                (total, 0),
                "{name}: {ready} ready + {dead} dead: some vanished"
            );
        }
    }
}

/// Messages `from..to` with no task name: each is quarantined with its id.
fn nameless(from: usize, to: usize) -> Vec<Vec<u8>> {
    (from..to)
        .map(|i| format!(r#"{{"id":"d{i}","queue":"q"}}"#).into_bytes())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_letter_cap_keeps_the_newest_and_the_queue_flows() {
    let mut kits = vec![(
        "memory",
        Pusher::Memory(MemoryBroker::new(Arc::new(SystemClock))),
        None,
    )];
    if let Some(s) = RedisServer::start() {
        let b = redis(
            &s.url(),
            RedisOptions {
                consumer: Some("c".into()),
                recover_every: None,
                ..RedisOptions::default()
            },
        )
        .await;
        kits.push(("redis", Pusher::Redis(b), Some(s)));
    }
    if let Some(s) = RedisServer::start() {
        let b = celery(
            &s.url(),
            CeleryOptions {
                consumer: Some("c".into()),
                restore_every: None,
                ..CeleryOptions::default()
            },
        )
        .await;
        kits.push(("celery", Pusher::Celery(b), Some(s)));
    }
    let over = 5;
    for (name, p, _server) in kits {
        let (b, insp): (Arc<dyn Broker>, Arc<dyn Inspector>) = match &p {
            Pusher::Memory(m) => (m.clone(), m.clone()),
            Pusher::Redis(r) => (r.clone(), r.clone()),
            Pusher::Celery(c) => (c.clone(), c.clone()),
        };
        // Up to the cap, every letter is kept.
        push_all(&p, "q", &nameless(0, DEAD_KEPT)).await;
        claim_all(name, &*b, &*insp, "q", Some(DEAD_KEPT as u64)).await;
        assert_eq!(
            insp.dead_count("q").await.unwrap(),
            DEAD_KEPT as u64,
            "{name}"
        );
        let all = insp.dead_letters("q", DEAD_KEPT + 100).await.unwrap();
        assert_eq!(all.len(), DEAD_KEPT, "{name}");
        assert_eq!(all.last().unwrap().id.as_deref(), Some("d0"), "{name}");
        // Past it: the count stays at the cap, the oldest go first.
        let n = DEAD_KEPT + over;
        push_all(&p, "q", &nameless(DEAD_KEPT, n)).await;
        claim_all(name, &*b, &*insp, "q", None).await;
        assert_eq!(
            insp.dead_count("q").await.unwrap(),
            DEAD_KEPT as u64,
            "{name}: capped"
        );
        let kept = insp.dead_letters("q", DEAD_KEPT + 100).await.unwrap();
        assert_eq!(kept.len(), DEAD_KEPT, "{name}");
        let newest = format!("d{}", n - 1);
        let oldest = format!("d{over}");
        assert_eq!(kept[0].id.as_deref(), Some(newest.as_str()), "{name}");
        assert_eq!(
            kept.last().unwrap().id.as_deref(),
            Some(oldest.as_str()),
            "{name}: the {over} oldest went"
        );
        assert_eq!(
            b.requeue_dead("q", &["d0".into()], 1).await.unwrap(),
            0,
            "{name}: a letter past the cap is gone"
        );
        assert_eq!(
            b.requeue_dead("q", std::slice::from_ref(&oldest), 1)
                .await
                .unwrap(),
            1,
            "{name}: the oldest kept can be re-queued"
        );
        claim_all(name, &*b, &*insp, "q", None).await;
        // The queue still flows: a good message after the flood is claimed.
        let good = Message::new("good".into(), "t".into(), vec![], Map::new(), "q".into());
        b.publish(vec![good]).await.unwrap();
        let got = b
            .consume(&["q".to_string()], 10, Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(got.len(), 1, "{name}");
        assert_eq!(got[0].message.id, "good", "{name}");
        b.ack(vec![got[0].receipt.clone()]).await.unwrap();
        assert_eq!(b.purge_dead("q").await.unwrap(), DEAD_KEPT, "{name}");
    }
}

// ------------------------------------------------------------ rediss://

/// A redis-server serving TLS only, with its own CA; killed on drop.
struct TlsRedis {
    port: u16,
    dir: std::path::PathBuf,
    child: Child,
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("run openssl");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`<name>-ca.pem`, `<name>-ca.key`) in `dir`.
fn make_ca(dir: &std::path::Path, name: &str) {
    run(Command::new("openssl")
        .current_dir(dir)
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-keyout", &format!("{name}-ca.key")])
        .args(["-out", &format!("{name}-ca.pem")])
        .args(["-subj", &format!("/CN=headway test {name} CA")]));
}

/// Starts redis-server with TLS on a free port, its certificate for
/// 127.0.0.1 signed by a fresh CA; `None` (skip) without redis-server or
/// openssl, unless `HEADWAY_REQUIRE_REDIS=1`.
fn start_tls() -> Option<TlsRedis> {
    let have = |bin: &str| {
        Command::new(bin)
            .arg("version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    };
    // RedisServer::start says why it skips (or fails when required).
    drop(RedisServer::start()?);
    if !have("openssl") {
        assert!(
            std::env::var("HEADWAY_REQUIRE_REDIS").as_deref() != Ok("1"),
            "HEADWAY_REQUIRE_REDIS=1 but openssl (to make the test's CA) is not on PATH"
        );
        eprintln!("skipped: openssl is not on PATH");
        return None;
    }
    let dir = std::env::temp_dir().join(format!("headway-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    make_ca(&dir, "good");
    make_ca(&dir, "other");
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    run(Command::new("openssl")
        .current_dir(&dir)
        .args(["req", "-newkey", "rsa:2048", "-nodes"])
        .args(["-keyout", "server.key", "-out", "server.csr"])
        .args(["-subj", "/CN=127.0.0.1"]));
    run(Command::new("openssl")
        .current_dir(&dir)
        .args(["x509", "-req", "-in", "server.csr", "-days", "2"])
        .args([
            "-CA",
            "good-ca.pem",
            "-CAkey",
            "good-ca.key",
            "-CAcreateserial",
        ])
        .args(["-extfile", "san.ext", "-out", "server.pem"]));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = std::fs::File::create(dir.join("redis.log")).unwrap();
    let child = Command::new("redis-server")
        .current_dir(&dir)
        .args(["--port", "0", "--tls-port", &port.to_string()])
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args([
            "--tls-cert-file",
            "server.pem",
            "--tls-key-file",
            "server.key",
        ])
        .args([
            "--tls-ca-cert-file",
            "good-ca.pem",
            "--tls-auth-clients",
            "no",
        ])
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .expect("start redis-server");
    let mut t = TlsRedis { port, dir, child };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(st)) = t.child.try_wait() {
            panic!(
                "redis-server with --tls-port exited ({st}): built without TLS?\n{}",
                std::fs::read_to_string(t.dir.join("redis.log")).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "the TLS redis-server never listened"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    Some(t)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_with_a_private_ca_runs_a_task_and_another_ca_is_refused() {
    let Some(t) = start_tls() else {
        return;
    };
    let url = format!("rediss://127.0.0.1:{}", t.port);
    let pem = |name: &str| std::fs::read(t.dir.join(format!("{name}-ca.pem"))).unwrap();
    let connect = |ca: Option<Vec<u8>>| {
        let url = url.clone();
        async move {
            RedisBroker::connect(
                &url,
                RedisOptions {
                    tls_ca: ca,
                    recover_every: None,
                    ..RedisOptions::default()
                },
                Arc::new(SystemClock),
            )
            .await
        }
    };
    // With the CA that signed the server's certificate: a task end to end.
    let b = connect(Some(pem("good"))).await.unwrap();
    let app = App::new(b.seams(), Arc::new(SystemClock));
    app.register(
        "add",
        Policy::default(),
        body(|_, args| async move {
            Ok(json!(args[0].as_i64().unwrap() + args[1].as_i64().unwrap()))
        }),
    )
    .unwrap();
    let (w, h) = worker(&app, &["default"]);
    let hd = app
        .send(
            "add",
            vec![json!(2), json!(3)],
            Map::new(),
            Options::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        hd.get(Some(Duration::from_secs(5))).await.unwrap(),
        json!(5)
    );
    w.stop(Duration::from_secs(1));
    h.await.unwrap();
    // Without it (the platform's roots) or with another CA: refused at
    // connect, saying the certificate is not trusted.
    for (what, ca) in [("no CA", None), ("another CA", Some(pem("other")))] {
        let e = connect(ca).await.unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, Refused::Broker(_)), "{what}: {e:?}");
        assert!(
            text.contains("certificate") && text.contains(&url),
            "{what}: a clear error naming the server and its certificate: {text}"
        );
    }
    // A CA option with no certificate in it is refused naming the option,
    // not blamed on the server.
    let e = connect(Some(b"not a certificate".to_vec()))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Refused::Invalid(t) if t.starts_with("invalid `tls_ca`: ")),
        "{e:?}"
    );
}
