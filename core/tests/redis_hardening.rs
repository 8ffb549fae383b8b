//! headway's own Redis layout where it meets a hostile or unusual Redis: a
//! result key Redis refuses to write (late acks wait for their result), a
//! huge message on a queue (a dead letter keeps a prefix, not the bytes),
//! ids that need JSON escaping in the scripts' dead-letter headers, a
//! Cluster node (refused at connect), and the minimal ACL that
//! docs/redis-layout.md documents (the broker runs under exactly it).

mod support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use headway_core::broker::{RedisBroker, RedisOptions};
use headway_core::task::spec::Round;
use headway_core::task::{
    App, Backend, Broker, Clock, Inspector, Message, Outcome, Policy, State, SystemClock, Worker,
    WorkerConfig, body,
};
use serde_json::{Map, Value};
use support::RedisServer;

fn msg(id: &str, task: &str, q: &str) -> Message {
    Message::new(id.into(), task.into(), vec![], Map::new(), q.into())
}

async fn open_at(url: &str, consumer: &str, lease_ms: u64) -> Arc<RedisBroker> {
    RedisBroker::connect(
        url,
        RedisOptions {
            consumer: Some(consumer.into()),
            lease: Duration::from_millis(lease_ms),
            recover_every: None,
            ..RedisOptions::default()
        },
        Arc::new(SystemClock) as Arc<dyn Clock>,
    )
    .await
    .unwrap()
}

/// Polls `f` until it holds, failing with `what` after 10 s.
async fn until(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ------------------------------------------------ late acks wait for results

/// A run whose result Redis refuses to store (the key holds a set) is not
/// acked: its claim stays held by the live worker, and a recover after the
/// worker is gone hands it back. The other runs are stored and acked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acks_late_run_whose_store_fails_stays_held_and_the_others_land() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let b = open_at(&s.url(), "w1", 30_000).await;
    let app = App::new(b.seams(), Arc::new(SystemClock));
    let ran = Arc::new(Mutex::new(HashSet::new()));
    let r2 = ran.clone();
    app.register(
        "t",
        Policy {
            acks_late: true,
            ..Policy::default()
        },
        body(move |ctx, _| {
            r2.lock().unwrap().insert(ctx.id.clone());
            async { Ok(Value::from(7)) }
        }),
    )
    .unwrap();
    // The poisoned run's result key already holds a set: WRONGTYPE.
    s.cli(&["SADD", "headway:result:poison", "x"]);
    let ids = ["a1", "a2", "poison", "a3", "a4"];
    b.publish(ids.iter().map(|i| msg(i, "t", "default")).collect())
        .await
        .unwrap();
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
    until(
        "every run ran and the others were stored and acked",
        async || {
            let mut stored = 0;
            for i in ["a1", "a2", "a3", "a4"] {
                if matches!(b.fetch(i).await, Ok(Some(o)) if o.state == State::Success) {
                    stored += 1;
                }
            }
            stored == 4
                && ran.lock().unwrap().len() == 5
                && s.cli(&["LLEN", "headway:{default}:held:w1"]) == "1"
        },
    )
    .await;
    // The one still held is the poisoned run's claim.
    let held = s.cli(&["LRANGE", "headway:{default}:held:w1", "0", "-1"]);
    assert!(held.contains("\"id\":\"poison\""), "held: {held}");
    assert_eq!(s.cli(&["TYPE", "headway:result:poison"]), "set");
    w.stop(Duration::from_secs(5));
    h.await.unwrap();
    b.close().await;
    // Another process recovers it: the run is delivered again.
    let b2 = open_at(&s.url(), "w2", 30_000).await;
    assert_eq!(b2.recover().await.unwrap(), 1);
    let got = b2
        .consume(&["default".to_string()], 10, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].message.id, "poison");
    assert!(got[0].redelivered);
}

/// One round of three runs, the middle one's result key poisoned: the other
/// two are stored and acked, the round does not fail, the middle claim
/// stays held; once the key is fixed the background task stores it and
/// acks the claim in the same step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_refused_store_in_a_round_holds_back_its_own_ack_only_and_is_retried() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    // A 300 ms lease: the background task ticks every 100 ms.
    let b = open_at(&s.url(), "w1", 300).await;
    b.publish(vec![
        msg("r1", "t", "q"),
        msg("r2", "t", "q"),
        msg("r3", "t", "q"),
    ])
    .await
    .unwrap();
    let got = b
        .claim(&["q".to_string()], 3, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(got.len(), 3);
    s.cli(&["HSET", "headway:result:r2", "f", "v"]);
    let mut r = Round::default();
    for (i, c) in got.iter().enumerate() {
        let mut o = Outcome::new(c.delivery.message.id.clone(), State::Success, 1);
        o.result = Some(Value::from(i));
        r.outcomes.push(o);
        r.after.push((i, c.delivery.receipt.clone()));
    }
    r.ask.push("r1".into());
    let asked = b
        .round(r)
        .unwrap()
        .await
        .expect("the round itself succeeds");
    assert_eq!(asked, [false], "the revoked question is answered");
    for (id, v) in [("r1", 0), ("r3", 2)] {
        let o = b.fetch(id).await.unwrap().expect("stored");
        assert_eq!(o.result, Some(Value::from(v)));
    }
    let held = s.cli(&["LRANGE", "headway:{q}:held:w1", "0", "-1"]);
    assert_eq!(held.lines().count(), 1, "held: {held}");
    assert!(held.contains("\"id\":\"r2\""), "held: {held}");
    assert_eq!(s.cli(&["TYPE", "headway:result:r2"]), "hash");
    // The plain store refuses too, naming the result it could not store.
    let e = b
        .store(vec![Outcome::new("r2", State::Success, 1)])
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("\"r2\"") && e.to_string().contains("WRONGTYPE"),
        "{e}"
    );
    // Fixed: the retry stores it and acks its claim.
    s.cli(&["DEL", "headway:result:r2"]);
    until(
        "the kept result is stored and its claim acked",
        async || s.cli(&["LLEN", "headway:{q}:held:w1"]) == "0",
    )
    .await;
    let o = b.fetch("r2").await.unwrap().expect("stored by the retry");
    assert_eq!(o.result, Some(Value::from(1)));
}

// ------------------------------------------------ ids that need escaping

/// An id holding `"` and `\`: the scripts' dead-letter headers encode it
/// (cjson), read it back whole, and re-queue by it; the inspector lists it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_with_quotes_and_backslashes_survive_dead_letters_and_listings() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let odd = r#"a"b\c"#;
    // A poison pill: lost with its consumer once (max_deliveries 1), buried
    // by the recover script, which builds the header in Lua.
    let mk = |consumer: &str| RedisOptions {
        consumer: Some(consumer.into()),
        lease: Duration::from_millis(50),
        recover_every: None,
        max_deliveries: 1,
        ..RedisOptions::default()
    };
    let a = RedisBroker::connect(&s.url(), mk("a"), Arc::new(SystemClock))
        .await
        .unwrap();
    a.publish(vec![msg(odd, "t", "q")]).await.unwrap();
    let got = a
        .consume(&["q".to_string()], 1, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(got[0].message.id, odd);
    // The holder listing reads the id out of the held element.
    let cs = a.consumers().await.unwrap();
    assert_eq!(cs[0].holding, [odd.to_string()], "{cs:?}");
    a.close().await;
    let b = RedisBroker::connect(&s.url(), mk("b"), Arc::new(SystemClock))
        .await
        .unwrap();
    until("a's lease lapsed and its claim was recovered", async || {
        b.recover().await.unwrap();
        b.dead_count("q").await.unwrap() == 1
    })
    .await;
    // A quarantined message with the same kind of id (no task name), whose
    // header the client writes.
    let odd2 = r#"x\"y"#;
    b.push_raw("q", br#"{"id":"x\\\"y","queue":"q"}"#)
        .await
        .unwrap();
    assert!(
        b.consume(&["q".to_string()], 1, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    let ds = b.dead_letters("q", 10).await.unwrap();
    assert_eq!(ds.len(), 2);
    assert_eq!(ds[0].id.as_deref(), Some(odd2), "{ds:?}");
    assert_eq!(ds[0].reason, "no task name");
    assert_eq!(ds[1].id.as_deref(), Some(odd), "{ds:?}");
    assert_eq!(ds[1].reason, "worker lost ×1");
    let raw = s.cli(&["LINDEX", "headway:{q}:dead", "1"]);
    let head: Value = serde_json::from_str(raw.lines().next().unwrap()).unwrap();
    assert_eq!(
        head["id"], odd,
        "the header is JSON with the id whole: {raw}"
    );
    // Re-queue by id: only the listed one goes back, and it decodes.
    assert_eq!(
        b.requeue_dead("q", &[odd.to_string()], 10).await.unwrap(),
        1
    );
    assert_eq!(b.dead_count("q").await.unwrap(), 1);
    let back = b
        .consume(&["q".to_string()], 1, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(back[0].message.id, odd);
    assert_eq!(
        b.requeue_dead("q", &[odd2.to_string()], 10).await.unwrap(),
        1
    );
    assert_eq!(b.dead_count("q").await.unwrap(), 0);
}

// ------------------------------------------------ oversized messages

fn used_memory(s: &RedisServer) -> i64 {
    let info = s.cli(&["INFO", "memory"]);
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .expect("INFO memory has used_memory")
        .trim()
        .parse()
        .unwrap()
}

const BIG: usize = 50 * 1024 * 1024;

/// A 50 MB message put on a queue by another producer is quarantined by
/// the claim script keeping a 64 KiB prefix, its size and the reason: Redis
/// holds about what it held before the push, not 50 MB more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantined_50_mb_message_keeps_a_prefix_not_the_payload() {
    use headway_core::task::dead::DEAD_PREFIX_BYTES;
    let Some(s) = RedisServer::start() else {
        return;
    };
    let b = open_at(&s.url(), "w", 30_000).await;
    // Touch the queue first, so its keys and the scripts are there.
    assert!(
        b.consume(&["q".to_string()], 1, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    let before = used_memory(&s);
    let junk = vec![b'{'; BIG];
    b.push_raw("q", &junk).await.unwrap();
    // Control: while on the queue, it weighs its 50 MB.
    assert!(used_memory(&s) - before > 40 * 1024 * 1024);
    assert!(
        b.consume(&["q".to_string()], 1, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    let ds = b.dead_letters("q", 10).await.unwrap();
    assert_eq!(ds.len(), 1);
    assert_eq!(ds[0].size, BIG);
    assert_eq!(ds[0].raw.len(), DEAD_PREFIX_BYTES);
    assert!(ds[0].truncated());
    assert!(
        ds[0].reason.starts_with(&format!("too large: {BIG} bytes")),
        "{}",
        ds[0].reason
    );
    // The 50 MB crossed the broker's connection: Redis's cron shrinks that
    // client's query buffer once it has been idle two seconds, so the growth
    // is read until it settles (a dead letter that kept the payload never
    // would).
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let grew = used_memory(&s) - before;
        if grew < 2 * 1024 * 1024 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Redis grew by {grew} bytes"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A prefix is not a message: re-queueing leaves it where it is.
    assert_eq!(b.requeue_dead("q", &[], 10).await.unwrap(), 0);
    assert_eq!(b.dead_count("q").await.unwrap(), 1);
}

/// A message that is not JSON, quarantined by the client after the claim
/// (under the size cap), keeps a prefix too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantined_undecodable_message_keeps_a_prefix() {
    use headway_core::task::dead::DEAD_PREFIX_BYTES;
    let Some(s) = RedisServer::start() else {
        return;
    };
    let b = open_at(&s.url(), "w", 30_000).await;
    let junk = vec![b'z'; 1024 * 1024];
    b.push_raw("q", &junk).await.unwrap();
    assert!(
        b.consume(&["q".to_string()], 1, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    let ds = b.dead_letters("q", 10).await.unwrap();
    assert_eq!(
        (ds[0].size, ds[0].raw.len()),
        (junk.len(), DEAD_PREFIX_BYTES)
    );
    assert!(ds[0].reason.starts_with("not JSON"), "{}", ds[0].reason);
    assert!(ds[0].truncated());
}

/// The memory broker keeps the same: a prefix, the size, the reason.
#[tokio::test]
async fn the_memory_broker_keeps_a_prefix_of_a_quarantined_message() {
    use headway_core::broker::MemoryBroker;
    use headway_core::task::dead::DEAD_PREFIX_BYTES;
    let b = MemoryBroker::new(Arc::new(SystemClock));
    b.push_raw("q", &vec![b'{'; BIG]);
    b.push_raw("q", &vec![b'z'; 100 * 1024]);
    assert!(
        b.consume(&["q".to_string()], 2, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    let ds = b.dead_letters("q", 10).await.unwrap();
    assert_eq!(ds.len(), 2);
    let big = ds.iter().find(|d| d.size == BIG).expect("the big one");
    assert_eq!(big.raw.len(), DEAD_PREFIX_BYTES);
    assert!(big.reason.starts_with("too large"), "{}", big.reason);
    let small = ds.iter().find(|d| d.size == 100 * 1024).expect("the other");
    assert_eq!(small.raw.len(), DEAD_PREFIX_BYTES);
    assert!(small.reason.starts_with("not JSON"));
    assert_eq!(b.requeue_dead("q", &[], 10).await.unwrap(), 0);
    assert_eq!(b.dead_count("q").await.unwrap(), 2);
}

// ------------------------------------------------ Redis Cluster

/// A redis-server of this test's own, with or without `cluster-enabled`,
/// behind a password; killed on drop.
struct Node {
    port: u16,
    dir: std::path::PathBuf,
    child: std::process::Child,
}

impl Node {
    fn start(cluster: bool) -> Option<Node> {
        // Only to learn whether redis-server is here (skip or fail as the
        // other Redis tests do).
        RedisServer::start()?;
        // Cluster nodes also listen on port + 10000 (the bus).
        let port = loop {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let p = l.local_addr().unwrap().port();
            if p != 6379
                && p < 55_000
                && std::net::TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok()
            {
                break p;
            }
        };
        let dir = std::env::temp_dir().join(format!("headway-node-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = std::process::Command::new("redis-server");
        c.args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(["--appendonly", "no", "--requirepass", "pw-s3cret"])
        .arg("--dir")
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
        if cluster {
            c.args(["--cluster-enabled", "yes", "--cluster-config-file"])
                .arg(dir.join("nodes.conf"));
        }
        let n = Node {
            port,
            dir,
            child: c.spawn().expect("start redis-server"),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not listen");
            std::thread::sleep(Duration::from_millis(10));
        }
        Some(n)
    }

    fn url(&self) -> String {
        format!("redis://default:pw-s3cret@127.0.0.1:{}", self.port)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn both_layouts(url: &str) -> [Result<(), headway_core::task::Refused>; 2] {
    use headway_core::broker::celery::{CeleryBroker, CeleryOptions};
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let own = RedisBroker::connect(url, RedisOptions::default(), clock.clone())
        .await
        .map(|_| ());
    let celery = CeleryBroker::connect(url, CeleryOptions::default(), clock)
        .await
        .map(|_| ());
    [own, celery]
}

/// Both layouts refuse a Cluster node named by `redis://` at connect, with
/// an error naming the URL (its password hidden) and `redis+cluster://`; the
/// same harness without `cluster-enabled` connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_is_refused_at_connect_by_both_layouts() {
    let Some(plain) = Node::start(false) else {
        return;
    };
    for r in both_layouts(&plain.url()).await {
        r.expect("a standalone server connects");
    }
    let node = Node::start(true).unwrap();
    for r in both_layouts(&node.url()).await {
        let e = r.expect_err("a Cluster node is refused");
        let text = e.to_string();
        assert_eq!(e.code(), "INVALID", "{text}");
        assert!(
            text.contains("name the Cluster with redis+cluster://"),
            "{text}"
        );
        assert!(
            text.contains(&format!("redis://default:***@127.0.0.1:{}", node.port)),
            "{text}"
        );
        assert!(!text.contains("pw-s3cret"), "{text}");
    }
}

// ------------------------------------------------ the documented ACL

/// Makes user `hw` (password `pw`) with exactly the `ACL SETUSER` line of
/// docs/redis-layout.md, and answers its URL.
fn acl_user(s: &RedisServer) -> String {
    let doc = include_str!("../../docs/redis-layout.md");
    let line = doc
        .lines()
        .find(|l| l.starts_with("ACL SETUSER <user> "))
        .expect("docs/redis-layout.md has the ACL SETUSER line")
        .replace("<user>", "hw")
        .replace("<password>", "pw");
    let args: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(s.cli(&args), "OK", "{line}");
    format!("redis://hw:pw@127.0.0.1:{}", s.port)
}

/// What the task suite (`tasks.rs`, broker `redis-acl`) does not reach, as
/// the documented ACL's user: dead letters (quarantine, list, re-queue,
/// purge), recovery, the inspector and admin (stats, holders, events,
/// counts), beat slots, chords, revokes, retries, etas, waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_allows_every_broker_operation() {
    use headway_core::task::{Counter, Joined, RunEvent};
    let Some(s) = RedisServer::start() else {
        return;
    };
    let url = acl_user(&s);
    // Control: the user can do nothing outside the prefix.
    assert!(
        s.cli(&["--user", "hw", "--pass", "pw", "SET", "other", "1"])
            .contains("NOPERM")
    );
    assert!(
        s.cli(&["ACL", "LOG"]).contains("other"),
        "denials are logged"
    );
    assert_eq!(s.cli(&["ACL", "LOG", "RESET"]), "OK");
    let a = open_at(&url, "a", 30_000).await;
    let q = vec!["q".to_string()];
    let mut later = msg("later", "t", "q");
    later.eta = Some(SystemClock.now() + 60_000);
    a.publish(vec![msg("m1", "t", "q"), msg("m2", "t", "q"), later])
        .await
        .unwrap();
    let got = a.consume(&q, 2, Duration::ZERO).await.unwrap();
    assert_eq!(got.len(), 2);
    a.reject(got[1].receipt.clone(), true).await.unwrap();
    let mut next = (*got[0].message).clone();
    next.retries += 1;
    a.retry(got[0].receipt.clone(), next).await.unwrap();
    let info = a.queues().await.unwrap();
    assert_eq!(info[0].delayed, 1, "{info:?}");
    let got = a.claim(&q, 10, Duration::ZERO).await.unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(a.consumers().await.unwrap()[0].holding.len(), 2);
    a.ack(got.iter().map(|c| c.delivery.receipt.clone()).collect())
        .await
        .unwrap();
    // Results: a waiter subscribed before the store is woken by it.
    let waiter = {
        let a = a.clone();
        tokio::spawn(async move { a.wait("m1", Duration::from_secs(10)).await })
    };
    a.store(vec![Outcome::new("m1", State::Success, 1)])
        .await
        .unwrap();
    assert_eq!(
        waiter.await.unwrap().unwrap().unwrap().state,
        State::Success
    );
    assert_eq!(a.counts().await.unwrap().get(&State::Success), Some(&1));
    a.record(vec![RunEvent {
        id: "m1".into(),
        task: "t".into(),
        state: State::Success,
        at: 1,
        worker: "w".into(),
        retries: 0,
        runtime: None,
        args: String::new(),
        detail: None,
    }])
    .await
    .unwrap();
    assert_eq!(a.recent(10).await.unwrap().len(), 1);
    a.revoke(vec!["m2".into()], SystemClock.now() + 60_000)
        .await
        .unwrap();
    assert_eq!(a.revoked(&["m2".to_string()]).await.unwrap(), [true]);
    let cb = msg("cb", "t", "q");
    assert_eq!(a.arrive("k", "p1", 2, &cb).await.unwrap(), Joined::Waiting);
    assert_eq!(a.arrive("k", "p2", 2, &cb).await.unwrap(), Joined::Sent);
    assert!(a.claim_slot("entry", 1_000).await.unwrap());
    // Dead letters: one quarantined by the client, listed, re-queued, purged.
    a.push_raw("q", b"\x00junk").await.unwrap();
    let got = a.consume(&q, 10, Duration::ZERO).await.unwrap();
    assert_eq!(
        got.len(),
        1,
        "the chord's callback; the junk is quarantined"
    );
    a.ack(vec![got[0].receipt.clone()]).await.unwrap();
    assert_eq!(a.dead_count("q").await.unwrap(), 1);
    assert_eq!(a.dead_letters("q", 10).await.unwrap()[0].raw, b"\x00junk");
    assert_eq!(a.requeue_dead("q", &[], 10).await.unwrap(), 1);
    assert!(a.consume(&q, 10, Duration::ZERO).await.unwrap().is_empty());
    assert_eq!(a.purge_dead("q").await.unwrap(), 1);
    // Recovery of a consumer gone.
    let b = open_at(&url, "b", 30_000).await;
    a.publish(vec![msg("m3", "t", "q")]).await.unwrap();
    assert_eq!(b.consume(&q, 1, Duration::ZERO).await.unwrap().len(), 1);
    b.close().await;
    assert_eq!(a.recover().await.unwrap(), 1);
    let got = a.consume(&q, 1, Duration::ZERO).await.unwrap();
    assert!(got[0].redelivered);
    a.close().await;
    // Nothing was denied on the way, not even inside a script whose error
    // was only logged.
    assert_eq!(s.cli(&["ACL", "LOG"]), "", "denied");
}

/// The task limits (docs/limits.md, "Task limits") as the documented ACL's
/// user: a global rate's bucket, a concurrency key's gate (take, renew,
/// release), a dedupe key's claim and its drop — every command their
/// scripts call is in the line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_allows_the_task_limits() {
    use headway_core::limit::GateOp;
    use headway_core::task::limits;
    let Some(s) = RedisServer::start() else {
        return;
    };
    let url = acl_user(&s);
    let a = open_at(&url, "a", 30_000).await;
    let l = a.task_limits().expect("a Redis broker keeps task limits");
    let ns = l.namespace().to_string();
    let bucket = limits::rate_key(&ns, "q", "t");
    assert_eq!(l.take_rate(&bucket, 1.0).await.unwrap(), None);
    assert!(l.take_rate(&bucket, 1.0).await.unwrap().is_some());
    let gate = limits::key_key(&ns, "t", "k");
    assert!(l.gate(&gate, 1, GateOp::Take, "p").await.unwrap());
    assert!(!l.gate(&gate, 1, GateOp::Take, "q").await.unwrap());
    assert!(l.gate(&gate, 1, GateOp::Renew, "p").await.unwrap());
    assert!(l.gate(&gate, 1, GateOp::Release, "p").await.unwrap());
    let key = limits::dedupe_key(&ns, "t", "k");
    assert_eq!(l.dedupe(&key, "one", 10_000).await.unwrap(), None);
    assert_eq!(
        l.dedupe(&key, "two", 10_000).await.unwrap().as_deref(),
        Some("one")
    );
    l.undedupe(&key, "one").await.unwrap();
    assert_eq!(l.dedupe(&key, "three", 10_000).await.unwrap(), None);
}
