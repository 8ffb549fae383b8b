//! The shared limits against the in-process ones: random sequences of
//! calls through the Lua scripts (on a redis-server of the test's own) and
//! through `flow::Bucket` / `Window` / `Gate`, told the same times, with
//! every answer compared exactly — floats to the bit.
//!
//! The common clock: each script takes an explicit `now` (microseconds)
//! here instead of reading Redis `TIME`, and the in-process limit is told
//! the same instant in nanoseconds (`now × 1000`). The clock starts where
//! Redis's does today (1.7e15 µs), so the scripts' arithmetic is tested at
//! the magnitudes it runs at, and it sometimes steps backwards.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};

use headway_core::flow::{Bucket, Gate, Window};
use headway_core::limit::{GateOp, SharedBucket, SharedGate, SharedWindow};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use support::RedisServer;

const T0: i64 = 1_733_000_000_000_000;

fn key() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("prop-{}", N.fetch_add(1, Ordering::SeqCst))
}

/// A step of the clock in microseconds: mostly forward, small and large,
/// sometimes back.
fn dt() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => 0i64..2_000,
        3 => 0i64..3_000_000,
        1 => Just(0i64),
        1 => -50_000i64..0,
    ]
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: 200,
        failure_persistence: None,
        ..Config::default()
    })
}

#[test]
fn bucket_answers_as_in_process() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    let rt = headway_core::runtime::runtime().unwrap();
    let rates = prop::sample::select(vec![0.0, 0.5, 1.0, 3.0, 7.3, 10.0, 1000.0, 123_456.7]);
    let bursts = prop::option::of(prop::sample::select(vec![0.2, 1.0, 2.0, 2.5, 5.0, 40.0]));
    let ns = prop::sample::select(vec![0.0, 0.5, 1.0, 1.0, 1.0, 2.0, 1.5, 3.0, 100.0]);
    let ops = prop::collection::vec((dt(), ns, any::<bool>()), 1..60);
    runner()
        .run(&(rates, bursts, ops), |(rate, burst, ops)| {
            let shared = SharedBucket::new(&url, &key(), rate, burst).unwrap();
            // A missing key is a bucket full as of the first take (the
            // first write): the in-process one starts there too, and a look
            // before it sees a full bucket.
            let mut local: Option<Bucket> = None;
            let mut now = T0;
            for (i, (dt, n, take)) in ops.into_iter().enumerate() {
                now += dt;
                let a = rt.block_on(shared.call(n, take, Some(now))).unwrap();
                let t = now * 1000;
                let mut fresh = Bucket::new(rate, burst, t).unwrap();
                prop_assert_eq!(shared.burst(), fresh.burst());
                if take && local.is_none() {
                    local = Some(fresh);
                }
                let model = local.as_mut().unwrap_or(&mut fresh);
                let taken = take && model.take(t, n);
                prop_assert_eq!(a.taken, taken, "step {}: take({}, {})", i, now, n);
                prop_assert_eq!(a.wait, model.next(t, n), "step {}: next", i);
                prop_assert_eq!(
                    a.tokens.to_bits(),
                    model.tokens(t).to_bits(),
                    "step {}: tokens {} vs {}",
                    i,
                    a.tokens,
                    model.tokens(t)
                );
            }
            Ok(())
        })
        .unwrap();
    drop(server);
}

#[test]
fn window_answers_as_in_process() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    let rt = headway_core::runtime::runtime().unwrap();
    // Windows in whole microseconds (a shared window's resolution).
    let pers = prop::sample::select(vec![1i64, 1_000, 250_000, 1_000_000, 2_500_000]);
    let ops = prop::collection::vec((dt(), any::<bool>()), 1..60);
    runner()
        .run(&(0i64..6, pers, ops), |(limit, per_us, ops)| {
            let shared = SharedWindow::new(&url, &key(), limit, per_us * 1000).unwrap();
            let mut local = Window::new(limit, per_us * 1000).unwrap();
            let mut now = T0;
            for (i, (dt, take)) in ops.into_iter().enumerate() {
                now += dt;
                let a = rt.block_on(shared.call(take, Some(now))).unwrap();
                let t = now * 1000;
                let taken = take && local.take(t);
                prop_assert_eq!(a.taken, taken, "step {}: take at {}", i, now);
                prop_assert_eq!(a.wait, local.next(t), "step {}: next", i);
                prop_assert_eq!(a.left, local.left(t), "step {}: left", i);
            }
            Ok(())
        })
        .unwrap();
    drop(server);
}

#[derive(Debug, Clone)]
enum GateStep {
    Take,
    /// Releases the held permit at this index (mod the count).
    Release(usize),
    /// Releases a permit released before: gives back nothing.
    Again,
    Renew(usize),
    Held,
}

#[test]
fn gate_answers_as_in_process() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    let rt = headway_core::runtime::runtime().unwrap();
    let step = prop_oneof![
        4 => Just(GateStep::Take),
        3 => any::<usize>().prop_map(GateStep::Release),
        1 => Just(GateStep::Again),
        1 => any::<usize>().prop_map(GateStep::Renew),
        1 => Just(GateStep::Held),
    ];
    let ops = prop::collection::vec((0i64..1_000_000, step), 1..60);
    runner()
        .run(&(0i64..5, ops), |(n, ops)| {
            // Leases far longer than any sequence: the in-process gate has
            // none (expiry is tested on its own, below).
            let shared = SharedGate::new(&url, &key(), n, Some(i64::MAX / 4)).unwrap();
            let mut local = Gate::new(n).unwrap();
            let mut held: Vec<String> = Vec::new();
            let mut gone: Vec<String> = Vec::new();
            let mut now = T0;
            for (i, (dt, s)) in ops.into_iter().enumerate() {
                now += dt;
                let call = |op, p: &str| rt.block_on(shared.call(op, p, Some(now))).unwrap();
                match s {
                    GateStep::Take => {
                        let p = format!("p{i}");
                        let a = call(GateOp::Take, &p);
                        prop_assert_eq!(a.ok, local.enter(), "step {}: take", i);
                        if a.ok {
                            held.push(p);
                        }
                    }
                    GateStep::Release(k) if !held.is_empty() => {
                        let p = held.remove(k % held.len());
                        prop_assert!(call(GateOp::Release, &p).ok, "step {}: release", i);
                        local.leave();
                        gone.push(p);
                    }
                    GateStep::Again if !gone.is_empty() => {
                        let p = gone[0].clone();
                        prop_assert!(!call(GateOp::Release, &p).ok, "step {}: again", i);
                    }
                    GateStep::Renew(k) if !held.is_empty() => {
                        let p = held[k % held.len()].clone();
                        prop_assert!(call(GateOp::Renew, &p).ok, "step {}: renew", i);
                    }
                    _ => {}
                }
                let a = call(GateOp::Held, "");
                prop_assert_eq!(a.held, local.held(), "step {}: held", i);
            }
            Ok(())
        })
        .unwrap();
    drop(server);
}

#[test]
fn gate_lease_ends_and_renews() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let rt = headway_core::runtime::runtime().unwrap();
    let g = SharedGate::new(&server.url(), "lease", 1, Some(10_000_000)).unwrap(); // 10 ms
    rt.block_on(async {
        let at = |us| Some(T0 + us);
        assert!(g.call(GateOp::Take, "a", at(0)).await.unwrap().ok);
        let full = g.call(GateOp::Take, "b", at(1)).await.unwrap();
        assert!(!full.ok);
        assert_eq!(full.soonest, Some(9_999_000));
        // Renewed at 5 ms: held until 15 ms.
        assert!(g.call(GateOp::Renew, "a", at(5_000)).await.unwrap().ok);
        assert!(!g.call(GateOp::Take, "b", at(14_999)).await.unwrap().ok);
        // The lease ended: room again, and the late holder gives back nothing.
        let b = g.call(GateOp::Take, "b", at(15_000)).await.unwrap();
        assert!(b.ok);
        assert_eq!(b.held, 1);
        assert!(!g.call(GateOp::Release, "a", at(15_001)).await.unwrap().ok);
        assert!(!g.call(GateOp::Renew, "a", at(15_002)).await.unwrap().ok);
        assert!(g.call(GateOp::Release, "b", at(15_003)).await.unwrap().ok);
        assert_eq!(g.call(GateOp::Held, "", at(15_004)).await.unwrap().held, 0);
    });
}

#[test]
fn a_buckets_expiry_moves_only_when_it_must_and_an_old_hash_is_a_full_bucket() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    let rt = headway_core::runtime::runtime().unwrap();
    rt.block_on(async {
        let c = redis::Client::open(url.as_str()).unwrap();
        let mut c = c.get_multiplexed_async_connection().await.unwrap();
        // A bucket an older headway kept as a hash of texts: read as full,
        // and written over.
        let b = SharedBucket::new(&url, "moves", 1.0, Some(10.0)).unwrap();
        let _: () = redis::cmd("HSET")
            .arg(b.key())
            .arg("t")
            .arg("0")
            .arg("a")
            .arg("1")
            .query_async(&mut c)
            .await
            .unwrap();
        assert!(b.take(5.0).await.unwrap(), "a full bucket");
        let kind: String = redis::cmd("TYPE")
            .arg(b.key())
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(kind, "string");
        let pttl = |c: &mut redis::aio::MultiplexedConnection| {
            let mut c = c.clone();
            let key = b.key().to_string();
            async move {
                redis::cmd("PTTL")
                    .arg(key)
                    .query_async::<i64>(&mut c)
                    .await
                    .unwrap()
            }
        };
        // Full again in 5 s: the expiry set to 2 s past that.
        let first = pttl(&mut c).await;
        assert!((6_000..=7_000).contains(&first), "{first}");
        // A little more taken: full in 5.1 s, still under the expiry less a
        // second — kept, not set again (it only ran down).
        assert!(b.take(0.1).await.unwrap());
        let kept = pttl(&mut c).await;
        assert!(kept <= first && kept > 6_000, "{first} then {kept}");
        // Four more: full in 9.1 s, past it — moved to 2 s beyond.
        assert!(b.take(4.0).await.unwrap());
        let moved = pttl(&mut c).await;
        assert!((10_000..=11_100).contains(&moved), "{moved}");
        let left = b.tokens().await.unwrap();
        assert!((0.9..1.0).contains(&left), "{left}");
    });
}

#[test]
fn real_clock_and_expiry() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    let rt = headway_core::runtime::runtime().unwrap();
    rt.block_on(async {
        // 10 a second, a burst of 2: two at once, a third not yet, and
        // the wait it is told is enough.
        let b = SharedBucket::new(&url, "real", 10.0, Some(2.0)).unwrap();
        assert!(b.take(1.0).await.unwrap());
        assert!(b.take(1.0).await.unwrap());
        let wait = b.next(1.0).await.unwrap();
        assert!(wait > 0 && wait <= 100_000_000, "{wait}");
        b.wait(1.0).await.unwrap();
        let err = b.wait(3.0).await.unwrap_err();
        assert!(err.to_string().contains("`n`"), "{err}");
        // The key expires one to two seconds after the bucket is full
        // again (at most 200 ms from now): set two seconds past that when
        // it must move, kept while it is still a second past.
        let c = redis::Client::open(url.as_str()).unwrap();
        let mut c = c.get_multiplexed_async_connection().await.unwrap();
        let ttl: i64 = redis::cmd("PTTL")
            .arg(b.key())
            .query_async(&mut c)
            .await
            .unwrap();
        assert!((1000..=2200).contains(&ttl), "{ttl}");

        let w = SharedWindow::new(&url, "real", 2, 50_000_000).unwrap(); // 50 ms
        assert!(w.take().await.unwrap());
        assert!(w.take().await.unwrap());
        assert!(!w.take().await.unwrap());
        assert_eq!(w.left().await.unwrap(), 0);
        let wait = w.next().await.unwrap();
        assert!(wait > 0 && wait <= 50_000_000, "{wait}");
        w.wait().await.unwrap();
        let ttl: i64 = redis::cmd("PTTL")
            .arg(w.key())
            .query_async(&mut c)
            .await
            .unwrap();
        assert!((1000..=1050).contains(&ttl), "{ttl}");

        let g = SharedGate::new(&url, "real", 1, None).unwrap();
        let p = g.take().await.unwrap().expect("room");
        assert_eq!(g.take().await.unwrap(), None);
        assert_eq!(g.held().await.unwrap(), 1);
        assert!(g.release(&p).await.unwrap());
        assert!(!g.release(&p).await.unwrap());
        assert!(g.take().await.unwrap().is_some());
    });
}

#[test]
fn unreachable_redis_is_a_broker_refusal() {
    let rt = headway_core::runtime::runtime().unwrap();
    // A port nobody listens on (bound, then let go).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let b = SharedBucket::new(&format!("redis://127.0.0.1:{port}"), "k", 1.0, None).unwrap();
    let err = rt.block_on(b.take(1.0)).unwrap_err();
    assert_eq!(
        err.broker_kind(),
        Some(headway_core::task::BrokerErrorKind::Connection),
        "{err}"
    );
}

#[test]
fn survives_a_redis_restart() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let rt = headway_core::runtime::runtime().unwrap();
    let b = SharedBucket::new(&server.url(), "restart", 0.001, Some(1.0)).unwrap();
    rt.block_on(async {
        assert!(b.take(1.0).await.unwrap());
        assert!(!b.take(1.0).await.unwrap());
    });
    // A new server on the same port has neither the key nor the script:
    // the link reconnects, the script is loaded again (NOSCRIPT), and the
    // missing key is a full bucket.
    server.restart();
    rt.block_on(async {
        assert!(b.take(1.0).await.unwrap());
        assert!(!b.take(1.0).await.unwrap());
    });
}
