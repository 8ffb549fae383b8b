//! headway's Redis layout, against a redis-server each test starts itself:
//! claims, acks, rejects, leases and recovery, fencing, etas beyond the
//! lease, write-once results, chord counting, revokes, URLs and secrets.

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use headway_core::broker::redis::{EVENTS_KEPT, EVENTS_PER_ENTRY};
use headway_core::broker::{RedisBroker, RedisOptions};
use headway_core::task::{
    App, Backend, Broker, Clock, Counter, Inspector, Joined, Message, Options, Outcome, Policy,
    Refused, State, SystemClock, VirtualClock, Worker, WorkerConfig, body,
};
use serde_json::{Map, Value, json};
use support::RedisServer;

const START: i64 = 1_767_225_600_000;

fn msg(id: &str, q: &str) -> Message {
    Message::new(id.into(), "t".into(), vec![], Map::new(), q.into())
}

fn qs(q: &str) -> Vec<String> {
    vec![q.to_string()]
}

async fn open(
    server: &RedisServer,
    consumer: &str,
    lease_ms: u64,
    clock: Arc<dyn Clock>,
) -> Arc<RedisBroker> {
    RedisBroker::connect(
        &server.url(),
        RedisOptions {
            consumer: Some(consumer.into()),
            lease: Duration::from_millis(lease_ms),
            recover_every: None,
            ..RedisOptions::default()
        },
        clock,
    )
    .await
    .unwrap()
}

fn ids(ds: &[headway_core::task::Delivery]) -> Vec<String> {
    ds.iter().map(|d| d.message.id.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_moves_into_held_and_ack_removes() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let b = open(&s, "a", 30_000, VirtualClock::new(START)).await;
    b.publish(vec![msg("1", "q"), msg("2", "q"), msg("3", "q")])
        .await
        .unwrap();
    assert_eq!(s.cli(&["LLEN", "headway:{q}:ready:0"]), "3");
    let got = b.consume(&qs("q"), 2, Duration::ZERO).await.unwrap();
    assert_eq!(ids(&got), ["1", "2"], "FIFO");
    assert!(got.iter().all(|d| !d.redelivered));
    assert_ne!(got[0].receipt.token, got[1].receipt.token);
    assert_eq!(s.cli(&["LLEN", "headway:{q}:ready:0"]), "1");
    assert_eq!(s.cli(&["LLEN", "headway:{q}:held:a"]), "2");
    let info = b.queues().await.unwrap();
    assert_eq!(info.len(), 1);
    assert_eq!((info[0].unacked, info[0].ready.get(&0)), (2, Some(&1)));
    // One round trip acks both.
    b.ack(got.iter().map(|d| d.receipt.clone()).collect())
        .await
        .unwrap();
    assert_eq!(s.cli(&["LLEN", "headway:{q}:held:a"]), "0");
    let pttl: i64 = s.cli(&["PTTL", "headway:{q}:lease:a"]).parse().unwrap();
    assert!(pttl > 20_000, "lease set by the claim: {pttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_requeues_at_the_head_marked_or_drops() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let b = open(&s, "a", 30_000, VirtualClock::new(START)).await;
    let mut lo = msg("lo", "q");
    lo.priority = Some(5);
    b.publish(vec![msg("1", "q"), msg("2", "q"), lo])
        .await
        .unwrap();
    let got = b.consume(&qs("q"), 3, Duration::ZERO).await.unwrap();
    assert_eq!(ids(&got), ["1", "2", "lo"], "step 0 before step 5");
    b.reject(got[1].receipt.clone(), true).await.unwrap();
    b.reject(got[2].receipt.clone(), false).await.unwrap();
    b.publish(vec![msg("3", "q")]).await.unwrap();
    let again = b.consume(&qs("q"), 5, Duration::ZERO).await.unwrap();
    assert_eq!(
        ids(&again),
        ["2", "3"],
        "requeued at the head; dropped gone"
    );
    assert!(again[0].redelivered && !again[1].redelivered);
    assert_eq!(s.cli(&["LLEN", "headway:{q}:held:a"]), "3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consumers_on_one_queue_get_each_message_once() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let a = open(&s, "a", 30_000, clock.clone()).await;
    let b = open(&s, "b", 30_000, clock.clone()).await;
    let n = 400;
    let producer = open(&s, "p", 30_000, clock).await;
    let mut all = Vec::new();
    for i in 0..n {
        all.push(msg(&i.to_string(), "q"));
    }
    let run = |br: Arc<RedisBroker>| {
        tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut idle = 0;
            while idle < 3 {
                let got = br
                    .consume(&qs("q"), 7, Duration::from_millis(100))
                    .await
                    .unwrap();
                if got.is_empty() {
                    idle += 1;
                    continue;
                }
                idle = 0;
                seen.extend(ids(&got));
                br.ack(got.into_iter().map(|d| d.receipt).collect())
                    .await
                    .unwrap();
            }
            seen
        })
    };
    let (ha, hb) = (run(a), run(b));
    for chunk in all.chunks(50) {
        producer.publish(chunk.to_vec()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (sa, sb) = (ha.await.unwrap(), hb.await.unwrap());
    assert!(!sa.is_empty() && !sb.is_empty(), "both consumed");
    let mut union: Vec<String> = sa.iter().chain(sb.iter()).cloned().collect();
    assert_eq!(union.len(), n, "no message twice");
    union.sort();
    union.dedup();
    assert_eq!(union.len(), n, "every message once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_lease_is_recovered_and_live_one_left_alone() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let dead = open(&s, "dead", 300, clock.clone()).await;
    let live = open(&s, "live", 300, clock.clone()).await;
    let sweeper = open(&s, "sweeper", 300, clock).await;
    let mut ms = Vec::new();
    for i in 0..8 {
        ms.push(msg(&format!("m{i}"), "q"));
    }
    sweeper.publish(ms).await.unwrap();
    let held_dead = dead.consume(&qs("q"), 5, Duration::ZERO).await.unwrap();
    let held_live = live.consume(&qs("q"), 3, Duration::ZERO).await.unwrap();
    assert_eq!((held_dead.len(), held_live.len()), (5, 3));
    // Nobody's lease has run out: nothing to recover.
    assert_eq!(sweeper.recover().await.unwrap(), 0);
    // The dead consumer stops without acking: its refresh task ends with it.
    drop(held_dead);
    drop(dead);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while s.cli(&["EXISTS", "headway:{q}:lease:dead"]) != "0" {
        assert!(
            std::time::Instant::now() < deadline,
            "the dead lease never lapsed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        s.cli(&["EXISTS", "headway:{q}:lease:live"]),
        "1",
        "refreshed"
    );
    assert_eq!(
        sweeper.recover().await.unwrap(),
        5,
        "exactly the dead one's"
    );
    assert_eq!(sweeper.recover().await.unwrap(), 0, "once");
    assert_eq!(
        s.cli(&["LLEN", "headway:{q}:held:live"]),
        "3",
        "live left alone"
    );
    assert_eq!(s.cli(&["EXISTS", "headway:{q}:held:dead"]), "0");
    let back = sweeper.consume(&qs("q"), 10, Duration::ZERO).await.unwrap();
    assert_eq!(back.len(), 5);
    assert!(back.iter().all(|d| d.redelivered), "marked redelivered");
    let mut got = ids(&back);
    got.sort();
    assert_eq!(got, ["m0", "m1", "m2", "m3", "m4"]);
    // The live consumer still settles its own.
    live.ack(held_live.into_iter().map(|d| d.receipt).collect())
        .await
        .unwrap();
    assert_eq!(s.cli(&["LLEN", "headway:{q}:held:live"]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_consumer_never_recovers_its_own_claims() {
    // Redis away longer than the lease lapses every lease, live ones too;
    // the first process back must not hand back what it is still running.
    let Some(s) = RedisServer::start() else {
        return;
    };
    let clock = VirtualClock::new(START);
    let a = open(&s, "a", 30_000, clock.clone()).await;
    let other = open(&s, "other", 30_000, clock.clone()).await;
    a.publish(vec![msg("x", "q")]).await.unwrap();
    let held = a.consume(&qs("q"), 1, Duration::ZERO).await.unwrap();
    s.cli(&["DEL", "headway:{q}:lease:a"]);
    assert_eq!(a.recover().await.unwrap(), 0, "not its own");
    assert_eq!(s.cli(&["LLEN", "headway:{q}:held:a"]), "1");
    assert_eq!(s.cli(&["LLEN", "headway:{q}:ready:0"]), "0");
    // Another process sees a consumer whose lease lapsed: that one it takes.
    assert_eq!(other.recover().await.unwrap(), 1);
    assert_eq!(s.cli(&["LLEN", "headway:{q}:ready:0"]), "1");
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_token_makes_a_stale_settle_a_no_op() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let clock = VirtualClock::new(START);
    let a = open(&s, "a", 30_000, clock.clone()).await;
    let other = open(&s, "other", 30_000, clock.clone()).await;
    a.publish(vec![msg("x", "q")]).await.unwrap();
    let first = a.consume(&qs("q"), 1, Duration::ZERO).await.unwrap();
    // a's lease is lost (a black-holed consumer) and its claim recovered…
    s.cli(&["DEL", "headway:{q}:lease:a"]);
    assert_eq!(other.recover().await.unwrap(), 1);
    // …and the same consumer claims the same message again, new token.
    let second = a.consume(&qs("q"), 1, Duration::ZERO).await.unwrap();
    assert_eq!(ids(&second), ["x"]);
    assert!(second[0].redelivered);
    assert!(second[0].receipt.token > first[0].receipt.token);
    // The stale receipt settles nothing: not an ack, a requeue or a retry.
    a.ack(vec![first[0].receipt.clone()]).await.unwrap();
    a.reject(first[0].receipt.clone(), true).await.unwrap();
    let mut next = msg("x", "q");
    next.retries = 1;
    a.retry(first[0].receipt.clone(), next).await.unwrap();
    assert_eq!(s.cli(&["LLEN", "headway:{q}:held:a"]), "1");
    assert_eq!(s.cli(&["LLEN", "headway:{q}:ready:0"]), "0");
    assert_eq!(s.cli(&["ZCARD", "headway:{q}:delayed"]), "0");
    // The live receipt does.
    a.ack(vec![second[0].receipt.clone()]).await.unwrap();
    assert_eq!(s.cli(&["LLEN", "headway:{q}:held:a"]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_settles_and_publishes_in_one_step() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let clock = VirtualClock::new(START);
    let b = open(&s, "a", 30_000, clock.clone()).await;
    b.publish(vec![msg("x", "q")]).await.unwrap();
    let got = b.consume(&qs("q"), 1, Duration::ZERO).await.unwrap();
    let mut next = (*got[0].message).clone();
    next.retries = 1;
    next.eta = Some(START + 5_000);
    b.retry(got[0].receipt.clone(), next).await.unwrap();
    assert_eq!(s.cli(&["LLEN", "headway:{q}:held:a"]), "0");
    assert_eq!(b.next_eta(&qs("q")).await.unwrap(), Some(START + 5_000));
    assert!(
        b.consume(&qs("q"), 1, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    clock.advance(5_000);
    let again = b.consume(&qs("q"), 1, Duration::ZERO).await.unwrap();
    assert_eq!(again[0].message.retries, 1);
    assert_eq!(b.next_eta(&qs("q")).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eta_three_leases_out_runs_exactly_once() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let lease = 300;
    let b = open(&s, "w1", lease, clock.clone()).await;
    // A second consumer recovering eagerly: the one who would duplicate.
    let watcher = RedisBroker::connect(
        &s.url(),
        RedisOptions {
            consumer: Some("w2".into()),
            lease: Duration::from_millis(lease),
            recover_every: Some(Duration::from_millis(50)),
            ..RedisOptions::default()
        },
        clock.clone(),
    )
    .await
    .unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let mut workers = Vec::new();
    for br in [b.clone(), watcher.clone()] {
        let app = App::new(br.seams(), clock.clone());
        let r2 = runs.clone();
        app.register(
            "once",
            Policy {
                acks_late: true,
                ..Policy::default()
            },
            body(move |_, _| {
                r2.fetch_add(1, Ordering::SeqCst);
                async { Ok(json!("ran")) }
            }),
        )
        .unwrap();
        let w = Worker::new(app.clone(), WorkerConfig::default()).unwrap();
        let w2 = w.clone();
        workers.push((w, tokio::spawn(async move { w2.run().await.unwrap() }), app));
    }
    let app = &workers[0].2;
    let hd = app
        .send(
            "once",
            vec![],
            Map::new(),
            Options {
                countdown: Some(3 * lease as i64),
                ..Options::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        hd.get(Some(Duration::from_secs(5))).await.unwrap(),
        json!("ran")
    );
    // Two more leases of recovering and claiming: still once. The window is
    // two dead consumers' claims recovered one after the other (positive
    // control: the recovery that would duplicate an eta a consumer held
    // ran in it, twice).
    for round in 0..2 {
        let ghost = open(&s, "ghost", lease, clock.clone()).await;
        ghost.publish(vec![msg("probe", "probe")]).await.unwrap();
        let probe = ghost
            .consume(&qs("probe"), 1, Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(ids(&probe), ["probe"], "round {round}");
        drop((probe, ghost));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while s.cli(&["LLEN", "headway:{probe}:ready:0"]) != "1" {
            assert!(std::time::Instant::now() < deadline, "never recovered");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        s.cli(&["DEL", "headway:{probe}:ready:0"]);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    for (w, h, _) in workers {
        w.stop(Duration::from_secs(1));
        h.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_store_of_many_keys_keeps_each_state_count_once() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let b = open(&s, "a", 30_000, VirtualClock::new(START)).await;
    // One call: a key written twice (STARTED, then SUCCESS), fresh keys in
    // two states, and a key already there (RETRY, then FAILURE).
    b.store(vec![Outcome::new("r", State::Retry, 1)])
        .await
        .unwrap();
    b.store(vec![
        Outcome::new("k", State::Started, 2),
        Outcome::new("a", State::Success, 2),
        Outcome::new("k", State::Success, 3),
        Outcome::new("f", State::Failure, 3),
        Outcome::new("r", State::Failure, 3),
        Outcome::new("c", State::Success, 3),
    ])
    .await
    .unwrap();
    let counts = b.counts().await.unwrap();
    let count = |st: State| counts.get(&st).copied().unwrap_or(0);
    assert_eq!(count(State::Success), 3, "{counts:?}");
    assert_eq!(count(State::Failure), 2, "{counts:?}");
    assert_eq!(
        count(State::Started),
        0,
        "k left STARTED's index: {counts:?}"
    );
    assert_eq!(count(State::Retry), 0, "r left RETRY's index: {counts:?}");
    assert_eq!(b.fetch("k").await.unwrap().unwrap().state, State::Success);
    assert_eq!(b.fetch("r").await.unwrap().unwrap().state, State::Failure);
    // Write-once within one call too: a final state is not overwritten.
    b.store(vec![
        Outcome::new("a", State::Failure, 4),
        Outcome::new("n", State::Success, 4),
    ])
    .await
    .unwrap();
    assert_eq!(b.fetch("a").await.unwrap().unwrap().state, State::Success);
    let counts = b.counts().await.unwrap();
    assert_eq!(counts.get(&State::Success).copied(), Some(4), "{counts:?}");
    assert_eq!(counts.get(&State::Failure).copied(), Some(2), "{counts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_are_write_once_and_waiters_are_woken() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let b = open(&s, "a", 30_000, VirtualClock::new(START)).await;
    b.store(vec![Outcome::new("x", State::Started, 1)])
        .await
        .unwrap();
    assert_eq!(b.fetch("x").await.unwrap().unwrap().state, State::Started);
    let mut ok = Outcome::new("x", State::Success, 2);
    ok.result = Some(json!(42));
    b.store(vec![ok.clone()]).await.unwrap();
    b.store(vec![Outcome::new("x", State::Failure, 3)])
        .await
        .unwrap();
    b.store(vec![Outcome::new("x", State::Retry, 4)])
        .await
        .unwrap();
    assert_eq!(b.fetch("x").await.unwrap(), Some(ok));
    let ttl: i64 = s.cli(&["PTTL", "headway:result:x"]).parse().unwrap();
    assert!(
        ttl > 86_000_000 && ttl <= 86_400_000,
        "result_expires: {ttl}"
    );
    assert_eq!(b.counts().await.unwrap().get(&State::Success), Some(&1));
    // A waiter is woken by the store, long before its timeout.
    let b2 = b.clone();
    let waiter = tokio::spawn(async move {
        let t = std::time::Instant::now();
        let o = b2.wait("y", Duration::from_secs(20)).await.unwrap();
        (o, t.elapsed())
    });
    until_subscribed(&s, "headway:result:y", 1);
    b.store(vec![Outcome::new("y", State::Received, 1)])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !waiter.is_finished(),
        "a non-final state does not end the wait"
    );
    b.store(vec![Outcome::new("y", State::Revoked, 2)])
        .await
        .unwrap();
    let (o, took) = waiter.await.unwrap();
    assert_eq!(o.unwrap().state, State::Revoked);
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(
        b.wait("z", Duration::from_millis(50))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chord_counts_a_set_and_sends_the_callback_once() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let b = open(&s, "a", 30_000, VirtualClock::new(START)).await;
    let cb = msg("cb", "cbq");
    b.open("k", 3).await.unwrap();
    assert_eq!(b.arrive("k", "p1", 3, &cb).await.unwrap(), Joined::Waiting);
    assert_eq!(b.arrive("k", "p2", 3, &cb).await.unwrap(), Joined::Waiting);
    // A redelivered part does not count twice.
    assert_eq!(b.arrive("k", "p2", 3, &cb).await.unwrap(), Joined::Waiting);
    assert_eq!(s.cli(&["LLEN", "headway:{cbq}:ready:0"]), "0");
    assert_eq!(b.arrive("k", "p3", 3, &cb).await.unwrap(), Joined::Sent);
    // Late redeliveries after the callback went: still once.
    assert_eq!(b.arrive("k", "p3", 3, &cb).await.unwrap(), Joined::Waiting);
    assert_eq!(b.arrive("k", "p9", 3, &cb).await.unwrap(), Joined::Waiting);
    let got = b.consume(&qs("cbq"), 10, Duration::ZERO).await.unwrap();
    assert_eq!(ids(&got), ["cb"]);
    // A one-part chord whose part is redelivered.
    let cb1 = msg("cb1", "cbq");
    assert_eq!(b.arrive("k1", "p", 1, &cb1).await.unwrap(), Joined::Sent);
    assert_eq!(b.arrive("k1", "p", 1, &cb1).await.unwrap(), Joined::Waiting);
    assert_eq!(
        b.consume(&qs("cbq"), 10, Duration::ZERO)
            .await
            .unwrap()
            .len(),
        1
    );
    let ttl: i64 = s.cli(&["PTTL", "headway:{cbq}:chord:k"]).parse().unwrap();
    assert!(ttl > 0, "the sent mark expires: {ttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_ids_expire() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let clock = VirtualClock::new(START);
    let b = open(&s, "a", 30_000, clock.clone()).await;
    b.revoke(vec!["a".into()], START + 100).await.unwrap();
    let asked = vec!["a".to_string(), "b".to_string()];
    assert_eq!(b.revoked(&asked).await.unwrap(), vec![true, false]);
    // Another process sees it: it lives in Redis.
    let c = open(&s, "c", 30_000, clock.clone()).await;
    assert_eq!(c.revoked(&asked).await.unwrap(), vec![true, false]);
    let ttl: i64 = s.cli(&["PTTL", "headway:revoked:a"]).parse().unwrap();
    assert!(ttl > 0 && ttl <= 100, "expires with the revoke: {ttl}");
    clock.advance(100);
    assert_eq!(b.revoked(&asked).await.unwrap(), vec![false, false]);
}

/// GETs Redis has run since it started (each revoked mark a claim reads is
/// one).
fn gets(s: &RedisServer) -> u64 {
    let stats = s.cli(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_get:calls="))
        .map_or(0, |rest| {
            rest.split(',').next().unwrap_or("0").parse().unwrap_or(0)
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_reads_revoked_marks_only_while_a_revoke_is_in_force() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let clock = VirtualClock::new(START);
    let b = open(&s, "a", 30_000, clock.clone()).await;
    let flags = |got: &[headway_core::task::spec::Claimed]| -> Vec<(String, Option<bool>)> {
        got.iter()
            .map(|c| (c.delivery.message.id.clone(), c.revoked))
            .collect()
    };
    let no = |ids: &[&str]| -> Vec<(String, Option<bool>)> {
        ids.iter().map(|i| (i.to_string(), Some(false))).collect()
    };
    // Nothing ever revoked: the claims are known not revoked, and no mark
    // is read.
    b.publish(vec![msg("1", "q"), msg("2", "q")]).await.unwrap();
    let before = gets(&s);
    let got = b.claim(&qs("q"), 2, Duration::ZERO).await.unwrap();
    assert_eq!(flags(&got), no(&["1", "2"]));
    assert_eq!(gets(&s), before, "no revoke in force: no mark read");
    // A revoke in force: every claim's mark is read, and the revoked one
    // is flagged (the positive control of the count above).
    b.revoke(vec!["4".into()], START + 100).await.unwrap();
    b.publish(vec![msg("3", "q"), msg("4", "q")]).await.unwrap();
    let before = gets(&s);
    let got = b.claim(&qs("q"), 2, Duration::ZERO).await.unwrap();
    assert_eq!(
        flags(&got),
        [
            ("3".to_string(), Some(false)),
            ("4".to_string(), Some(true))
        ]
    );
    assert_eq!(gets(&s), before + 2, "a revoke in force: each mark read");
    // An earlier end does not shorten the latest: still in force at +50.
    b.revoke(vec!["6".into()], START + 10).await.unwrap();
    clock.advance(50);
    b.publish(vec![msg("5", "q"), msg("6", "q")]).await.unwrap();
    let before = gets(&s);
    let got = b.claim(&qs("q"), 2, Duration::ZERO).await.unwrap();
    assert_eq!(flags(&got), no(&["5", "6"]), "6's revoke ended at +10");
    assert_eq!(gets(&s), before + 2);
    // Every revoke over: no mark read again.
    clock.advance(50);
    b.publish(vec![msg("7", "q"), msg("8", "q")]).await.unwrap();
    let before = gets(&s);
    let got = b.claim(&qs("q"), 2, Duration::ZERO).await.unwrap();
    assert_eq!(flags(&got), no(&["7", "8"]));
    assert_eq!(gets(&s), before, "every revoke over: no mark read");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn urls_auth_db_and_redaction() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let clock: Arc<dyn Clock> = VirtualClock::new(START);
    s.cli(&[
        "ACL",
        "SETUSER",
        "app",
        "on",
        ">p@ss:w/rd",
        "~headway:*",
        "&*",
        "+@all",
    ]);
    let url = format!("redis://app:p%40ss%3Aw%2Frd@127.0.0.1:{}/2", s.port);
    let b = RedisBroker::connect(&url, RedisOptions::default(), clock.clone())
        .await
        .unwrap();
    assert_eq!(
        b.url().to_string(),
        format!("redis://app:***@127.0.0.1:{}/2", s.port)
    );
    assert!(!format!("{b:?}").contains("w/rd"));
    b.publish(vec![msg("1", "q")]).await.unwrap();
    // It went to database 2, as the URL says.
    assert_eq!(s.cli(&["-n", "2", "LLEN", "headway:{q}:ready:0"]), "1");
    assert_eq!(s.cli(&["-n", "0", "LLEN", "headway:{q}:ready:0"]), "0");

    // A wrong password is refused, and the refusal does not show it.
    let wrong = format!("redis://app:hunter22@127.0.0.1:{}/2", s.port);
    let e = RedisBroker::connect(&wrong, RedisOptions::default(), clock.clone())
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, Refused::Broker(_)), "{e:?}");
    assert!(
        text.contains("app:***@") && !text.contains("hunter22"),
        "{text}"
    );
    // Nobody listening: refused, redacted.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let e = RedisBroker::connect(
        &format!("redis://u:hunter22@127.0.0.1:{port}"),
        RedisOptions::default(),
        clock.clone(),
    )
    .await
    .unwrap_err();
    assert!(!e.to_string().contains("hunter22"), "{e}");
    // TLS fails closed against a server that does not speak it.
    let e = RedisBroker::connect(
        &format!("rediss://u:hunter22@127.0.0.1:{}", s.port),
        RedisOptions::default(),
        clock.clone(),
    )
    .await
    .unwrap_err();
    assert!(
        e.to_string().starts_with("broker error: rediss://u:***@"),
        "{e}"
    );
    // Bad input is refused naming the argument.
    for (url, opts, what) in [
        ("http://h", RedisOptions::default(), "`url`"),
        (
            "redis://h",
            RedisOptions {
                prefix: "a{b}".into(),
                ..RedisOptions::default()
            },
            "`prefix`",
        ),
        (
            "redis://h",
            RedisOptions {
                consumer: Some("x{y}".into()),
                ..RedisOptions::default()
            },
            "`consumer`",
        ),
    ] {
        let e = RedisBroker::connect(url, opts, clock.clone())
            .await
            .unwrap_err();
        assert!(e.to_string().contains(what), "{e}");
    }
    let bad_queue = b.publish(vec![msg("1", "a{b}")]).await.unwrap_err();
    assert!(bad_queue.to_string().contains("`queue`"), "{bad_queue}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_redis_with_aof_loses_nothing() {
    let Some(mut s) = RedisServer::start_with(true) else {
        return;
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let b = RedisBroker::connect(
        &s.url(),
        RedisOptions {
            consumer: Some("w".into()),
            ..RedisOptions::default()
        },
        clock.clone(),
    )
    .await
    .unwrap();
    let app = App::new(b.seams(), clock);
    let runs = Arc::new(Mutex::new(Vec::new()));
    let r2 = runs.clone();
    for (name, late) in [("early", false), ("late", true)] {
        let r2 = r2.clone();
        app.register(
            name,
            Policy {
                acks_late: late,
                ..Policy::default()
            },
            body(move |ctx, _| {
                r2.lock().unwrap().push(ctx.id.clone());
                async {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    Ok(Value::Null)
                }
            }),
        )
        .unwrap();
    }
    let n = 300;
    let mut hs = Vec::new();
    for i in 0..n {
        let name = if i % 2 == 0 { "early" } else { "late" };
        hs.push(
            app.send(name, vec![], Map::new(), Options::default())
                .await
                .unwrap(),
        );
    }
    let w = Worker::new(
        app.clone(),
        WorkerConfig {
            concurrency: 4,
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let w2 = w.clone();
    let h = tokio::spawn(async move { w2.run().await.unwrap() });
    // Mid-run: kill -9 and start again on the same port and dir.
    while runs.lock().unwrap().len() < n / 4 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    s.restart();
    for hd in &hs {
        assert_eq!(
            hd.get(Some(Duration::from_secs(30))).await.unwrap(),
            Value::Null
        );
    }
    let ran: HashSet<String> = runs.lock().unwrap().iter().cloned().collect();
    assert_eq!(ran.len(), n, "every message ran");
    let info = b.queues().await.unwrap();
    assert!(
        info.iter().all(|q| q.ready.is_empty() && q.unacked == 0),
        "{info:?}"
    );
    w.stop(Duration::from_secs(1));
    h.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_claim_wakes_for_other_steps_etas_and_queues() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let b = open(&s, "a", 30_000, clock.clone()).await;
    let p = open(&s, "p", 30_000, clock.clone()).await;
    let wait = Duration::from_secs(5);
    let quick = Duration::from_millis(1500);
    // Another priority step: the marker on step 0 wakes the BLMOVE.
    let b2 = b.clone();
    let t = std::time::Instant::now();
    let h = tokio::spawn(async move { b2.consume(&qs("q"), 5, wait).await.unwrap() });
    until_blocked(&s);
    let mut lo = msg("lo", "q");
    lo.priority = Some(7);
    p.publish(vec![lo]).await.unwrap();
    assert_eq!(ids(&h.await.unwrap()), ["lo"]);
    assert!(t.elapsed() < quick, "{:?}", t.elapsed());
    // A new eta while blocked: woken, then blocks until it is due.
    let b2 = b.clone();
    let t = std::time::Instant::now();
    let h = tokio::spawn(async move { b2.consume(&qs("q"), 5, wait).await.unwrap() });
    until_blocked(&s);
    let mut later = msg("later", "q");
    // Timed from when the eta is set: the clock counts whole milliseconds,
    // so a due message may come up to one before 300 have passed.
    let set = std::time::Instant::now();
    later.eta = Some(clock.now() + 300);
    p.publish(vec![later]).await.unwrap();
    assert_eq!(ids(&h.await.unwrap()), ["later"]);
    let took = set.elapsed();
    assert!(
        took >= Duration::from_millis(299) && t.elapsed() < quick,
        "{took:?}"
    );
    // A second queue: seen within the slice.
    let b2 = b.clone();
    let t = std::time::Instant::now();
    let h = tokio::spawn(async move {
        let two = vec!["q".to_string(), "r".to_string()];
        b2.consume(&two, 5, wait).await.unwrap()
    });
    until_blocked(&s);
    p.publish(vec![msg("on-r", "r")]).await.unwrap();
    assert_eq!(ids(&h.await.unwrap()), ["on-r"]);
    assert!(t.elapsed() < quick, "{:?}", t.elapsed());
}

/// Claims and acks from `q` until `got` holds `want` ids (or 5 s pass),
/// failing on an id delivered twice.
async fn claim_each_once(b: &RedisBroker, q: &str, want: usize, got: &mut HashSet<String>) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while got.len() < want && std::time::Instant::now() < deadline {
        let ds = b
            .consume(&qs(q), want, Duration::from_millis(100))
            .await
            .unwrap();
        for d in ds {
            assert!(got.insert(d.message.id.clone()), "delivered twice");
            b.ack(vec![d.receipt]).await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_claim_loses_nothing() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let b = open(&s, "a", 30_000, clock.clone()).await;
    let p = open(&s, "p", 30_000, clock).await;
    let mut got = HashSet::new();
    let mut cancelled = 0;
    for i in 0..20 {
        // Cancelled while blocked in BLMOVE, as a stopping worker's is…
        match tokio::time::timeout(
            Duration::from_millis(20),
            b.consume(&qs("q"), 5, Duration::from_millis(300)),
        )
        .await
        {
            Err(_) => cancelled += 1,
            Ok(ds) => {
                for d in ds.unwrap() {
                    got.insert(d.message.id.clone());
                    b.ack(vec![d.receipt]).await.unwrap();
                }
            }
        }
        // …and a message arrives while the BLMOVE is still waiting.
        p.publish(vec![msg(&format!("m{i}"), "q")]).await.unwrap();
    }
    assert!(cancelled > 0);
    // Every one is claimable: none stays held by a claim nobody took.
    claim_each_once(&b, "q", 20, &mut got).await;
    assert_eq!(got.len(), 20);
    assert_eq!(s.cli(&["LLEN", "headway:{q}:held:a"]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_cut_short_with_its_script_sent_loses_nothing() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let b = open(&s, "a", 30_000, clock).await;
    // The queue is known to the consumer (its first claim registers it).
    let first = b.consume(&qs("q"), 5, Duration::from_millis(1)).await;
    assert!(first.unwrap().is_empty());
    let five: Vec<Message> = (0..5).map(|i| msg(&format!("m{i}"), "q")).collect();
    b.publish(five).await.unwrap();
    // Writes paused: the claim script is sent and waits in Redis while the
    // consume is cut short, as a stopping worker's is; then it runs, moving
    // the five into this live consumer's held list.
    assert_eq!(s.cli(&["CLIENT", "PAUSE", "300", "WRITE"]), "OK");
    let cut = tokio::time::timeout(
        Duration::from_millis(100),
        b.consume(&qs("q"), 5, Duration::from_millis(10)),
    )
    .await;
    assert!(cut.is_err(), "the claim waited out the pause");
    // Every one is claimable again, once each, by the same consumer.
    let mut got = HashSet::new();
    claim_each_once(&b, "q", 5, &mut got).await;
    assert_eq!(got.len(), 5, "claimed again: {got:?}");
    assert_eq!(s.cli(&["LLEN", "headway:{q}:held:a"]), "0");
}

/// Not a timed test: a probe to run by hand in release mode
/// (`cargo test --release -p headway-core --test redis_broker -- --ignored
/// --nocapture throughput`). Prints the enqueue rate from one producer and
/// the drain rate of a pre-filled queue of no-op tasks with results stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn throughput() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let b = RedisBroker::connect(&s.url(), RedisOptions::default(), clock.clone())
        .await
        .unwrap();
    let app = App::new(b.seams(), clock);
    app.register(
        "noop",
        Policy::default(),
        body(|_, _| async { Ok(Value::Null) }),
    )
    .unwrap();
    let n = 20_000;
    let t = std::time::Instant::now();
    let mut batch = Vec::with_capacity(1000);
    for i in 0..n {
        batch.push(Message::new(
            format!("id-{i}"),
            "noop".into(),
            vec![],
            Map::new(),
            "default".into(),
        ));
        if batch.len() == 1000 {
            b.publish(std::mem::take(&mut batch)).await.unwrap();
        }
    }
    let enq = t.elapsed();
    let t = std::time::Instant::now();
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
    while w.settled() < n as u64 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let drain = t.elapsed();
    let cpu = |info: &str, key: &str| -> f64 {
        info.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let info = s.cli(&["INFO", "cpu"]);
    eprintln!(
        "redis-server cpu so far: user {:.2}s sys {:.2}s (drain wall {:.2}s)",
        cpu(&info, "used_cpu_user:"),
        cpu(&info, "used_cpu_sys:"),
        drain.as_secs_f64()
    );
    // One-at-a-time round trip: send, wait for the result.
    let mut rtts = Vec::new();
    for _ in 0..500 {
        let t = std::time::Instant::now();
        let hd = app
            .send("noop", vec![], Map::new(), Options::default())
            .await
            .unwrap();
        hd.get(Some(Duration::from_secs(5))).await.unwrap();
        rtts.push(t.elapsed());
    }
    rtts.sort();
    eprintln!(
        "redis throughput: enqueue {:.0}/s (batches of 1000), drain {:.0}/s (concurrency 8, results stored), round trip p50 {:?} p99 {:?}",
        n as f64 / enq.as_secs_f64(),
        n as f64 / drain.as_secs_f64(),
        rtts[rtts.len() / 2],
        rtts[rtts.len() * 99 / 100]
    );
    w.stop(Duration::from_secs(1));
    h.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_events_go_to_a_capped_stream() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let b = open(&s, "a", 30_000, VirtualClock::new(START)).await;
    assert!(b.recent(10).await.unwrap().is_empty());
    let ev = |i: i64| headway_core::task::RunEvent {
        id: format!("id-{i}"),
        task: "t".into(),
        state: headway_core::task::State::Success,
        at: START + i,
        worker: "w".into(),
        retries: 0,
        runtime: Some(1),
        args: "[]".into(),
        detail: Some("<b>1</b>".into()),
    };
    b.record((0..5).map(ev).collect()).await.unwrap();
    let got = b.recent(3).await.unwrap();
    assert_eq!(
        got.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        ["id-4", "id-3", "id-2"],
        "newest first"
    );
    assert_eq!(got[0], ev(4));
    // One round's events are one entry of the log.
    assert_eq!(s.cli(&["XLEN", "headway:events"]), "1");
    // More than an entry holds: entries of EVENTS_PER_ENTRY, read back
    // newest first across them, and `recent` answers no more than asked.
    b.record((5..45).map(ev).collect()).await.unwrap();
    assert_eq!(
        s.cli(&["XLEN", "headway:events"]),
        (1 + 40usize.div_ceil(EVENTS_PER_ENTRY)).to_string()
    );
    let got = b.recent(100).await.unwrap();
    let want: Vec<String> = (0..45).rev().map(|i| format!("id-{i}")).collect();
    assert_eq!(got.iter().map(|e| e.id.clone()).collect::<Vec<_>>(), want);
    assert_eq!(b.recent(20).await.unwrap().len(), 20);
    // Entries of one event after full ones: pages sized by what was seen
    // still read every event asked for, in order, and stop at the oldest.
    for i in 45..75 {
        b.record(vec![ev(i)]).await.unwrap();
    }
    let got = b.recent(60).await.unwrap();
    let want: Vec<String> = (15..75).rev().map(|i| format!("id-{i}")).collect();
    assert_eq!(got.iter().map(|e| e.id.clone()).collect::<Vec<_>>(), want);
    assert_eq!(b.recent(1000).await.unwrap().len(), 75);
    // The cap counts events, not entries: full entries trim the log to
    // about EVENTS_KEPT events (Redis trims whole nodes of 100 entries).
    let many: Vec<_> = (0..2 * EVENTS_KEPT as i64).map(ev).collect();
    b.record(many).await.unwrap();
    let entries: usize = s.cli(&["XLEN", "headway:events"]).trim().parse().unwrap();
    let kept = entries * EVENTS_PER_ENTRY;
    assert!(
        (EVENTS_KEPT..EVENTS_KEPT + 101 * EVENTS_PER_ENTRY).contains(&kept),
        "{entries} entries"
    );
}

/// Polls `PUBSUB NUMSUB ch` until it reports `n` subscribers (2 s deadline).
/// Waits until a client is blocked (a claim in BLMOVE).
fn until_blocked(s: &RedisServer) {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while !s.cli(&["INFO", "clients"]).contains("blocked_clients:1") {
        assert!(std::time::Instant::now() < deadline, "no claim blocked");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn until_subscribed(s: &RedisServer, ch: &str, n: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        let out = s.cli(&["PUBSUB", "NUMSUB", ch]);
        if out.lines().nth(1).and_then(|l| l.trim().parse().ok()) == Some(n) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not subscribed: {out}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_store_publishes_its_value_and_a_refused_one_publishes_nothing() {
    use futures_util::StreamExt;
    let Some(s) = RedisServer::start() else {
        return;
    };
    let b = open(&s, "a", 30_000, VirtualClock::new(START)).await;
    let ch = "headway:result:d";
    let mut ps = redis::Client::open(s.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    ps.subscribe(ch).await.unwrap();
    ps.subscribe("headway:result:big").await.unwrap();
    b.store(vec![Outcome::new("d", State::Started, 1)])
        .await
        .unwrap();
    let mut ok = Outcome::new("d", State::Success, 2);
    ok.result = Some(json!("first"));
    b.store(vec![ok.clone()]).await.unwrap();
    // A late duplicate, alone and in a batch with a first write: refused,
    // and it publishes nothing.
    let mut late = Outcome::new("d", State::Failure, 3);
    late.result = Some(json!("late"));
    b.store(vec![late.clone()]).await.unwrap();
    let mut big = Outcome::new("big", State::Success, 4);
    big.result = Some(json!("x".repeat(70 * 1024)));
    b.store(vec![late, big.clone()]).await.unwrap();
    s.cli(&["PUBLISH", ch, "end"]);
    let mut stream = ps.on_message();
    let mut got = Vec::new();
    loop {
        let m = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("the end marker arrives")
            .unwrap();
        let p = m.get_payload_bytes().to_vec();
        if p == b"end" {
            break;
        }
        got.push((m.get_channel_name().to_string(), p));
    }
    let held = s.cli(&["GET", ch]);
    assert!(held.starts_with("SUCCESS|"), "{held}");
    assert_eq!(
        got,
        [
            (ch.to_string(), held.into_bytes()),
            // Over the cap: just the wake-up.
            ("headway:result:big".to_string(), b"1".to_vec()),
        ]
    );
    assert_eq!(b.fetch("d").await.unwrap(), Some(ok.clone()));
    assert_eq!(b.wait("d", Duration::from_secs(1)).await.unwrap(), Some(ok));
    assert_eq!(
        b.wait("big", Duration::from_secs(1)).await.unwrap(),
        Some(big)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_answers_from_the_notification_without_a_get() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let b = open(&s, "a", 30_000, VirtualClock::new(START)).await;
    let ch = "headway:result:n";
    // A wake-up alone: the waiter looks (nothing there) and waits on.
    let b2 = b.clone();
    let w = tokio::spawn(async move { b2.wait("n", Duration::from_millis(500)).await });
    until_subscribed(&s, ch, 1);
    s.cli(&["PUBLISH", ch, "1"]);
    assert_eq!(w.await.unwrap().unwrap(), None);
    // The wait left its channel.
    until_subscribed(&s, ch, 0);
    // A notification carrying a final value answers the wait, though the
    // key holds nothing: proof the waiter did not need a GET.
    let b2 = b.clone();
    let w = tokio::spawn(async move { b2.wait("n", Duration::from_secs(10)).await });
    until_subscribed(&s, ch, 1);
    let mut o = Outcome::new("n", State::Success, 5);
    o.result = Some(json!(7));
    let carried = format!("SUCCESS|{}", serde_json::to_string(&o).unwrap());
    s.cli(&["PUBLISH", ch, &carried]);
    let t = std::time::Instant::now();
    assert_eq!(w.await.unwrap().unwrap(), Some(o));
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(s.cli(&["EXISTS", ch]), "0");
}
