//! Future etas on Celery's layout stay bounded: a worker facing 100 000
//! messages due in an hour holds at most `max_held_etas` of them (it stops
//! claiming, as Celery's prefetch does), re-scores what it holds in chunks,
//! and no Redis command it sends blocks the server for 50 ms or more
//! (SLOWLOG, and a PING loop beside it). Starts its own redis-server;
//! skipped without one unless `HEADWAY_REQUIRE_REDIS=1`.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use headway_core::broker::celery::{CeleryBroker, CeleryOptions, MAX_HELD_ETAS};
use headway_core::task::{
    App, Broker, Clock, Message, Policy, SystemClock, Worker, WorkerConfig, body,
};
use serde_json::{Map, Value};
use support::RedisServer;

const N: usize = 100_000;

/// PINGs `c` until `stop`, answering the round trips (ms) over 50.
async fn ping_loop(
    mut c: redis::aio::MultiplexedConnection,
    stop: Arc<AtomicBool>,
) -> (u64, Vec<u128>) {
    let (mut n, mut slow) = (0u64, Vec::new());
    while !stop.load(Ordering::SeqCst) {
        let t = Instant::now();
        let _: String = redis::cmd("PING").query_async(&mut c).await.unwrap();
        let ms = t.elapsed().as_millis();
        if ms >= 50 {
            slow.push(ms);
        }
        n += 1;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    (n, slow)
}

fn slowlog_len(s: &RedisServer) -> u64 {
    s.cli(&["SLOWLOG", "LEN"]).parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_future_etas_are_held_bounded_and_redis_never_blocks() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let b = CeleryBroker::connect(
        &s.url(),
        CeleryOptions {
            consumer: Some("etas".into()),
            restore_every: None,
            // Re-scored every 500 ms: several rounds within the test.
            visibility_timeout: Duration::from_secs(2),
            ..CeleryOptions::default()
        },
        clock.clone(),
    )
    .await
    .unwrap();
    let eta = clock.now() + 3_600_000;
    for chunk in 0..(N / 5000) {
        let batch: Vec<Message> = (0..5000)
            .map(|i| {
                let mut m = Message::new(
                    format!("e{}", chunk * 5000 + i),
                    "later".into(),
                    vec![],
                    Map::new(),
                    "default".into(),
                );
                m.eta = Some(eta);
                m
            })
            .collect();
        b.publish(batch).await.unwrap();
    }
    assert_eq!(s.cli(&["LLEN", "celery"]), N.to_string());
    assert_eq!(
        s.cli(&["CONFIG", "SET", "slowlog-log-slower-than", "50000"]),
        "OK"
    );
    s.cli(&["SLOWLOG", "RESET"]);
    let client = redis::Client::open(s.url()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let pinger = tokio::spawn(ping_loop(
        client.get_multiplexed_async_connection().await.unwrap(),
        stop.clone(),
    ));
    let app = App::new(b.seams(), clock.clone());
    b.route_for(&app);
    app.register(
        "later",
        Policy::default(),
        body(|_, _| async { Ok(Value::Null) }),
    )
    .unwrap();
    let w = Worker::new(app.clone(), WorkerConfig::default()).unwrap();
    let w2 = w.clone();
    let h = tokio::spawn(async move { w2.run().await.unwrap() });
    // It fills up to the cap…
    let deadline = Instant::now() + Duration::from_secs(30);
    while b.held_etas() < MAX_HELD_ETAS {
        assert!(Instant::now() < deadline, "held only {}", b.held_etas());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // …and everything it holds is re-scored after that (two rounds).
    let filled = clock.now() as f64 / 1000.0;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let low: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg("unacked_index")
            .arg(0)
            .arg(0)
            .arg("WITHSCORES")
            .query_async(&mut client.get_multiplexed_async_connection().await.unwrap())
            .await
            .unwrap();
        if low.first().is_some_and(|(_, score)| *score > filled + 0.6) {
            break;
        }
        assert!(Instant::now() < deadline, "the holds were never re-scored");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Bounded: the rest waits on the queue, not in this process.
    let held = b.held_etas();
    assert!(
        (MAX_HELD_ETAS..MAX_HELD_ETAS + 1000).contains(&held),
        "held {held}"
    );
    let queued: usize = s.cli(&["LLEN", "celery"]).parse().unwrap();
    assert_eq!(queued + held, N, "each message on the queue or held");
    assert_eq!(s.cli(&["HLEN", "unacked"]), held.to_string());
    stop.store(true, Ordering::SeqCst);
    let (pings, slow) = pinger.await.unwrap();
    w.stop(Duration::from_secs(2));
    h.await.unwrap();
    assert_eq!(
        slowlog_len(&s),
        0,
        "a command took 50 ms or more: {}",
        s.cli(&["SLOWLOG", "GET", "5"])
    );
    assert!(pings > 100, "the PING loop ran ({pings})");
    assert!(
        slow.is_empty(),
        "PING round trips of 50 ms or more: {slow:?} of {pings}"
    );
    // Positive controls: a command that blocks 80 ms is seen by both.
    let stop = Arc::new(AtomicBool::new(false));
    let pinger = tokio::spawn(ping_loop(
        client.get_multiplexed_async_connection().await.unwrap(),
        stop.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(20)).await;
    // (A script spinning 80 ms: DEBUG SLEEP is off by default in Redis 7.)
    let spin = "local t = redis.call('TIME') local t0 = t[1] * 1e6 + t[2] \
        repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] - t0 >= 80000 return 1";
    s.cli(&["EVAL", spin, "0"]);
    tokio::time::sleep(Duration::from_millis(20)).await;
    stop.store(true, Ordering::SeqCst);
    let (_, slow) = pinger.await.unwrap();
    assert_eq!(slowlog_len(&s), 1, "the control is in the slowlog");
    assert!(!slow.is_empty(), "the PING loop sees an 80 ms block");
}
