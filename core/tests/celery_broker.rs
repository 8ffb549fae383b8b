//! Celery's Redis layout, checked key by key on a redis-server of the
//! test's own (no Python needed; `celery_interop.rs` runs a real Celery).
//! Times come from a virtual clock, so visibility timeouts and etas of an
//! hour pass in microseconds.

mod support;

use std::sync::Arc;
use std::time::Duration;

use headway_core::broker::celery::{CeleryBroker, CeleryOptions};
use headway_core::task::{
    Backend, Broker, Clock, Counter, Failure, Inspector, Joined, Message, Outcome, State,
    VirtualClock,
};
use serde_json::{Map, Value, json};

const START: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z
const HOUR: i64 = 3_600_000;

async fn broker(s: &support::RedisServer, clock: &Arc<VirtualClock>) -> Arc<CeleryBroker> {
    CeleryBroker::connect(&s.url(), CeleryOptions::default(), clock.clone())
        .await
        .unwrap()
}

fn msg(id: &str, task: &str, queue: &str) -> Message {
    Message::new(
        id.into(),
        task.into(),
        vec![json!(1)],
        Map::new(),
        queue.into(),
    )
}

/// Waits (polling, 5 s at most) until `ok`.
async fn until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// [`until`] with an async condition.
async fn until_async<F: std::future::Future<Output = bool>>(what: &str, mut ok: impl FnMut() -> F) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !ok().await {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn qs(q: &str) -> Vec<String> {
    vec![q.to_string()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_steps_fifo_and_the_unacked_pair() {
    let Some(s) = support::RedisServer::start() else {
        return;
    };
    let clock = VirtualClock::new(START);
    let b = broker(&s, &clock).await;
    let mut batch = Vec::new();
    for (id, p) in [
        ("p9", 9),
        ("p4", 4),
        ("a", 0),
        ("p7", 7),
        ("b", 0),
        ("p2", 2),
    ] {
        let mut m = msg(id, "t", "default");
        m.priority = Some(p);
        batch.push(m);
    }
    b.publish(batch).await.unwrap();
    // kombu's keys: the bare queue for 0-2, `\x06\x16<step>` for 3, 6, 9.
    assert_eq!(s.cli(&["LLEN", "celery"]), "3");
    assert_eq!(s.cli(&["LLEN", "celery\x06\x163"]), "1");
    assert_eq!(s.cli(&["LLEN", "celery\x06\x166"]), "1");
    assert_eq!(s.cli(&["LLEN", "celery\x06\x169"]), "1");
    let got = b.consume(&qs("default"), 10, Duration::ZERO).await.unwrap();
    let ids: Vec<&str> = got.iter().map(|d| d.message.id.as_str()).collect();
    assert_eq!(
        ids,
        ["a", "b", "p2", "p4", "p7", "p9"],
        "lower step first, FIFO within"
    );
    // Each claim sits in `unacked` as [envelope, exchange, routing_key].
    assert_eq!(s.cli(&["HLEN", "unacked"]), "6");
    assert_eq!(s.cli(&["ZCARD", "unacked_index"]), "6");
    let tag = String::from_utf8(got[0].receipt.raw.as_ref().unwrap().to_vec()).unwrap();
    let entry: Value = serde_json::from_str(&s.cli(&["HGET", "unacked", &tag])).unwrap();
    assert_eq!(entry[1], json!(""));
    assert_eq!(entry[2], json!("celery"));
    // Held under a tag of headway's own, not the envelope's `delivery_tag`
    // (which may be missing or shared); the envelope is kept as sent.
    assert!(entry[0]["properties"]["delivery_tag"].is_string());
    assert_ne!(entry[0]["properties"]["delivery_tag"], json!(tag));
    let score: f64 = s.cli(&["ZSCORE", "unacked_index", &tag]).parse().unwrap();
    assert_eq!(
        (score * 1000.0).round() as i64,
        START,
        "scored at claim time"
    );
    // Between whole seconds a hold is scored with the next one, an integer
    // (a float score made each claim's ZADD several times dearer to Redis):
    // it looks younger by under a second, so it is never restored early.
    clock.advance(1);
    b.publish(vec![msg("late", "t", "default")]).await.unwrap();
    let late = b.consume(&qs("default"), 1, Duration::ZERO).await.unwrap();
    let tag = String::from_utf8(late[0].receipt.raw.as_ref().unwrap().to_vec()).unwrap();
    assert_eq!(
        s.cli(&["ZSCORE", "unacked_index", &tag]),
        (START / 1000 + 1).to_string(),
        "the next whole second"
    );
    b.ack(late.iter().map(|d| d.receipt.clone()).collect())
        .await
        .unwrap();
    // ack removes both; reject without requeue too; with requeue it goes to
    // the back (LPUSH), marked redelivered.
    b.ack(vec![got[0].receipt.clone()]).await.unwrap();
    b.reject(got[1].receipt.clone(), false).await.unwrap();
    b.publish(vec![msg("c", "t", "default")]).await.unwrap();
    b.reject(got[2].receipt.clone(), true).await.unwrap();
    assert_eq!(s.cli(&["HLEN", "unacked"]), "3");
    let again = b.consume(&qs("default"), 10, Duration::ZERO).await.unwrap();
    let ids: Vec<&str> = again.iter().map(|d| d.message.id.as_str()).collect();
    assert_eq!(ids, ["c", "p2"]);
    assert!(again[1].redelivered && !again[0].redelivered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_restores_dead_consumers_claims_under_the_mutex() {
    let Some(s) = support::RedisServer::start() else {
        return;
    };
    let clock = VirtualClock::new(START);
    let dead = broker(&s, &clock).await;
    dead.publish(vec![msg("x", "t", "q"), msg("y", "t", "q")])
        .await
        .unwrap();
    let held = dead.consume(&qs("q"), 1, Duration::ZERO).await.unwrap();
    assert_eq!(held[0].message.id, "x");
    drop(held);
    drop(dead); // its re-scoring stops with it: as good as killed
    let live = broker(&s, &clock).await;
    assert_eq!(
        live.recover().await.unwrap(),
        0,
        "not yet past the visibility timeout"
    );
    clock.advance(HOUR + 1);
    // Another restorer holds kombu's mutex: nothing happens (MutexHeld).
    s.cli(&["SET", "unacked_mutex", "someone", "PX", "300000"]);
    assert_eq!(live.recover().await.unwrap(), 0);
    s.cli(&["DEL", "unacked_mutex"]);
    assert_eq!(live.recover().await.unwrap(), 1);
    assert_eq!(s.cli(&["EXISTS", "unacked_mutex"]), "0", "released");
    // Restored to the front (RPUSH): consumed before y.
    let got = live.consume(&qs("q"), 2, Duration::ZERO).await.unwrap();
    let ids: Vec<&str> = got.iter().map(|d| d.message.id.as_str()).collect();
    assert_eq!(ids, ["x", "y"]);
    assert!(got[0].redelivered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_eta_is_rescored_so_nobody_restores_it() {
    let Some(s) = support::RedisServer::start() else {
        return;
    };
    let clock = VirtualClock::new(START);
    let a = broker(&s, &clock).await;
    let other = broker(&s, &clock).await;
    let mut m = msg("later", "t", "default");
    m.eta = Some(START + 3 * HOUR);
    a.publish(vec![m]).await.unwrap();
    // Claimed and held, the Celery way: in `unacked`, not handed out.
    assert!(
        a.consume(&qs("default"), 5, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(s.cli(&["HLEN", "unacked"]), "1");
    assert_eq!(
        a.next_eta(&qs("default")).await.unwrap(),
        Some(START + 3 * HOUR)
    );
    let q = a.queues().await.unwrap();
    assert_eq!(q[0].delayed, 1);
    // Three visibility timeouts pass; the holder re-scores as it lives.
    for _ in 0..3 {
        clock.advance(HOUR - 1000);
        assert_eq!(a.heartbeat().await.unwrap(), 1);
        assert_eq!(
            other.recover().await.unwrap(),
            0,
            "a live holder's eta is not restored"
        );
    }
    clock.advance_to(START + 3 * HOUR);
    let got = a.consume(&qs("default"), 5, Duration::ZERO).await.unwrap();
    assert_eq!(got.len(), 1);
    a.ack(vec![got[0].receipt.clone()]).await.unwrap();
    assert_eq!(s.cli(&["HLEN", "unacked"]), "0");
    assert_eq!(s.cli(&["LLEN", "celery"]), "0", "ran once, never restored");
    // Without re-scoring (a dead holder) the eta is restored like Celery's.
    let mut m = msg("orphan", "t", "default");
    m.eta = Some(clock.now() + 3 * HOUR);
    a.publish(vec![m]).await.unwrap();
    assert!(
        a.consume(&qs("default"), 5, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    drop(a);
    clock.advance(HOUR + 1);
    assert_eq!(other.recover().await.unwrap(), 1);
    // release() gives back what a stopping consumer holds at once.
    let c = broker(&s, &clock).await;
    assert!(
        c.consume(&qs("default"), 5, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(c.close().await.unwrap(), 1);
    assert_eq!(s.cli(&["LLEN", "celery"]), "1");
    assert_eq!(s.cli(&["HLEN", "unacked"]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_messages_are_dropped_and_kept_aside() {
    let Some(s) = support::RedisServer::start() else {
        return;
    };
    let clock = VirtualClock::new(START);
    let b = broker(&s, &clock).await;
    s.cli(&["LPUSH", "celery", "not json at all"]);
    s.cli(&[
        "LPUSH",
        "celery",
        r#"{"body": "x", "content-type": "application/x-python-serialize", "properties": {"delivery_tag": "p1", "delivery_info": {"exchange": "", "routing_key": "celery"}}}"#,
    ]);
    b.publish(vec![msg("ok", "t", "default")]).await.unwrap();
    let got = b.consume(&qs("default"), 5, Duration::ZERO).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].message.id, "ok");
    assert_eq!(
        s.cli(&["HLEN", "unacked"]),
        "1",
        "the pickle one is not left unacked"
    );
    // Both set aside in the queue's dead letters, with their reasons.
    assert_eq!(s.cli(&["LLEN", "headway.celery.dead:celery"]), "2");
    let dead = b.dead_letters("default", 10).await.unwrap();
    assert!(dead[0].reason.starts_with("content type not allowed"));
    assert!(dead[1].reason.starts_with("not JSON"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn celerys_default_queue_answers_to_both_its_names() {
    // `default` is Celery's `celery` list: a worker naming it either way
    // takes what was sent to it either way (it once claimed and then kept
    // what it took when named `celery`, so nothing ran).
    let Some(s) = support::RedisServer::start() else {
        return;
    };
    let clock = VirtualClock::new(START);
    let b = broker(&s, &clock).await;
    let mut later = msg("later", "t", "celery");
    later.eta = Some(START + HOUR);
    b.publish(vec![
        msg("a", "t", "celery"),
        msg("b", "t", "default"),
        later,
    ])
    .await
    .unwrap();
    assert_eq!(s.cli(&["LLEN", "celery"]), "3", "all three on the one list");
    for names in [qs("celery"), qs("default")] {
        let got = b.consume(&names, 10, Duration::ZERO).await.unwrap();
        let ids: Vec<&str> = got.iter().map(|d| d.message.id.as_str()).collect();
        if names[0] == "celery" {
            assert_eq!(ids, ["a", "b"], "{names:?}");
            // The eta is held for its due time, by either name.
            assert_eq!(b.next_eta(&names).await.unwrap(), Some(START + HOUR));
            b.ack(got.into_iter().map(|d| d.receipt).collect())
                .await
                .unwrap();
        } else {
            assert!(ids.is_empty(), "{ids:?}");
            assert_eq!(b.next_eta(&names).await.unwrap(), Some(START + HOUR));
        }
    }
    clock.advance(HOUR);
    let got = b.consume(&qs("celery"), 10, Duration::ZERO).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].message.id, "later");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_are_celerys_meta_and_final_states_stay() {
    let Some(s) = support::RedisServer::start() else {
        return;
    };
    let clock = VirtualClock::new(START);
    let b = broker(&s, &clock).await;
    let mut o = Outcome::new("r1", State::Success, START);
    o.result = Some(json!({"b": 1, "a": [1.5, "é"]}));
    b.store(vec![o]).await.unwrap();
    assert_eq!(
        s.cli(&["GET", "celery-task-meta-r1"]),
        r#"{"status": "SUCCESS", "result": {"b": 1, "a": [1.5, "\u00e9"]}, "traceback": null, "children": [], "date_done": "2026-01-01T00:00:00+00:00", "task_id": "r1"}"#
    );
    let ttl: i64 = s.cli(&["TTL", "celery-task-meta-r1"]).parse().unwrap();
    assert!((86_390..=86_400).contains(&ttl), "SETEX result_expires");
    let mut f = Outcome::new("r1", State::Failure, START);
    f.error = Some(Failure::new("ValueError", "late"));
    b.store(vec![f]).await.unwrap();
    assert_eq!(b.fetch("r1").await.unwrap().unwrap().state, State::Success);
    // A state that is not final is written over, its expiry renewed.
    b.store(vec![Outcome::new("r3", State::Started, START)])
        .await
        .unwrap();
    s.cli(&["EXPIRE", "celery-task-meta-r3", "100"]);
    b.store(vec![Outcome::new("r3", State::Success, START)])
        .await
        .unwrap();
    assert_eq!(b.fetch("r3").await.unwrap().unwrap().state, State::Success);
    let ttl: i64 = s.cli(&["TTL", "celery-task-meta-r3"]).parse().unwrap();
    assert!((86_390..=86_400).contains(&ttl), "renewed: {ttl}");
    // A Celery worker's write (SETEX + PUBLISH) wakes a waiter.
    let b2 = b.clone();
    let w = tokio::spawn(async move { b2.wait("r2", Duration::from_secs(10)).await });
    // Written once the waiter listens on the key's channel.
    until("the waiter's subscription", || {
        s.cli(&["PUBSUB", "NUMSUB", "celery-task-meta-r2"])
            .lines()
            .nth(1)
            .is_some_and(|n| n.trim() != "0")
    })
    .await;
    let meta = r#"{"status": "FAILURE", "result": {"exc_type": "KeyError", "exc_message": ["k"], "exc_module": "builtins"}, "traceback": "Traceback\nKeyError: 'k'\n", "children": [], "date_done": "2026-12-02T09:04:33.649639+00:00", "task_id": "r2"}"#;
    s.cli(&["SETEX", "celery-task-meta-r2", "86400", meta]);
    s.cli(&["PUBLISH", "celery-task-meta-r2", meta]);
    let started = std::time::Instant::now();
    let o = w.await.unwrap().unwrap().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "woken by the publish, not a poll"
    );
    let e = o.error.unwrap();
    assert_eq!((e.kind.as_str(), e.message.as_str()), ("KeyError", "k"));
    assert_eq!(b.counts().await.unwrap()[&State::Failure], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chord_members_are_celerys_and_the_last_part_sends_the_callback() {
    let Some(s) = support::RedisServer::start() else {
        return;
    };
    let clock = VirtualClock::new(START);
    let b = broker(&s, &clock).await;
    let mut cb = msg("cb", "tsum", "default");
    cb.args = vec![];
    b.open("g", 2).await.unwrap();
    assert_eq!(s.cli(&["GET", "celery-taskset-meta-g.s"]), "2");
    // Parts as Celery sends them: group g, group_index i, embed.chord.
    let mut parts = Vec::new();
    for (i, id) in ["p0", "p1"].iter().enumerate() {
        let mut m = msg(id, "add", "default");
        m.group = Some("g".into());
        m.group_index = Some(i as u32);
        m.chord = Some(Box::new(headway_core::task::Chord {
            key: "g".into(),
            size: 2,
            callback: Box::new(cb.clone()),
        }));
        parts.push(m);
    }
    b.publish(parts).await.unwrap();
    let got = b.consume(&qs("default"), 5, Duration::ZERO).await.unwrap();
    assert_eq!(got.len(), 2);
    for (id, v) in [("p1", 20), ("p0", 10)] {
        let mut o = Outcome::new(id, State::Success, START);
        o.result = Some(json!(v));
        b.store(vec![o]).await.unwrap();
    }
    let callback = &got[0].message.chord.as_ref().unwrap().callback;
    assert_eq!(
        b.arrive("g", "p1", 2, callback).await.unwrap(),
        Joined::Waiting
    );
    assert_eq!(
        s.cli(&["ZRANGE", "celery-taskset-meta-g.j", "0", "-1", "WITHSCORES"]),
        "[1, \"p1\", \"SUCCESS\", 20]\n1"
    );
    // A redelivered part adds the same member: it does not count twice.
    assert_eq!(
        b.arrive("g", "p1", 2, callback).await.unwrap(),
        Joined::Waiting
    );
    assert_eq!(
        b.arrive("g", "p0", 2, callback).await.unwrap(),
        Joined::Sent
    );
    assert_eq!(s.cli(&["EXISTS", "celery-taskset-meta-g.s"]), "0", "closed");
    let sent = b.consume(&qs("default"), 5, Duration::ZERO).await.unwrap();
    assert_eq!(sent[0].message.id, "cb");
    assert_eq!(
        sent[0].message.args,
        vec![json!([10, 20])],
        "in group-index order"
    );
    assert_eq!(sent[0].message.parent_id.as_deref(), Some("p0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revokes_travel_over_the_pidbox_and_persist() {
    let Some(s) = support::RedisServer::start() else {
        return;
    };
    let clock = VirtualClock::new(START);
    let a = broker(&s, &clock).await;
    let b = broker(&s, &clock).await;
    let ids = vec![
        "6192a3c5-aeef-45a0-b931-c63afc72ece0".to_string(),
        "mine".to_string(),
    ];
    // Celery's own revoke broadcast, as captured.
    let celery = r#"{"body": "eyJtZXRob2QiOiAicmV2b2tlIiwgImFyZ3VtZW50cyI6IHsidGFza19pZCI6ICI2MTkyYTNjNS1hZWVmLTQ1YTAtYjkzMS1jNjNhZmM3MmVjZTAiLCAidGVybWluYXRlIjogZmFsc2UsICJzaWduYWwiOiAiU0lHVEVSTSJ9LCAiZGVzdGluYXRpb24iOiBudWxsLCAicGF0dGVybiI6IG51bGwsICJtYXRjaGVyIjogbnVsbH0=", "content-encoding": "utf-8", "content-type": "application/json", "headers": {"clock": 1, "expires": 0}, "properties": {"delivery_mode": 2, "delivery_info": {"exchange": "celery.pidbox", "routing_key": ""}, "priority": 0, "body_encoding": "base64", "delivery_tag": "f4e3cdf1-e623-4aa7-bb38-aada6483a72c"}}"#;
    assert_eq!(
        s.cli(&["PUBLISH", "/0.celery.pidbox", celery]),
        "2",
        "both subscribed"
    );
    until_async("a hears Celery's revoke", || async {
        a.revoked(&ids).await.unwrap() == [true, false]
    })
    .await;
    // headway's revoke reaches the other consumer, and outlives a restart.
    a.revoke(vec!["mine".into()], START + HOUR).await.unwrap();
    until_async("b hears headway's revoke", || async {
        b.revoked(&ids).await.unwrap() == [true, true]
    })
    .await;
    let late = broker(&s, &clock).await;
    assert_eq!(late.revoked(&ids[1..]).await.unwrap(), [true]);
    clock.advance(HOUR);
    assert_eq!(late.revoked(&ids[1..]).await.unwrap(), [false], "expired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_this_app_does_not_run_go_back_for_another_consumer() {
    use headway_core::broker::celery::UnknownTasks;
    use headway_core::task::{App, Policy, body};
    let Some(s) = support::RedisServer::start() else {
        return;
    };
    let clock = VirtualClock::new(START);
    for mode in [UnknownTasks::Requeue, UnknownTasks::Fail] {
        s.cli(&["FLUSHALL"]);
        let b = CeleryBroker::connect(
            &s.url(),
            CeleryOptions {
                unknown_tasks: mode,
                ..CeleryOptions::default()
            },
            clock.clone(),
        )
        .await
        .unwrap();
        let app = App::new(b.seams(), clock.clone());
        b.route_for(&app);
        app.register(
            "mine",
            Policy::default(),
            body(|_, _| async { Ok(json!(1)) }),
        )
        .unwrap();
        b.publish(vec![
            msg("c1", "celery.only", "default"),
            msg("m1", "mine", "default"),
        ])
        .await
        .unwrap();
        let got = b.consume(&qs("default"), 5, Duration::ZERO).await.unwrap();
        let ids: Vec<&str> = got.iter().map(|d| d.message.id.as_str()).collect();
        match mode {
            UnknownTasks::Requeue => {
                assert_eq!(ids, ["m1"]);
                assert_eq!(s.cli(&["LLEN", "celery"]), "1", "back on the queue");
                assert_eq!(s.cli(&["HLEN", "unacked"]), "1", "only m1 is held");
            }
            UnknownTasks::Fail => assert_eq!(ids, ["c1", "m1"]),
        }
    }
}

/// A receipt names its message by the tag it is held under in `unacked`,
/// not only by the claiming broker's local number: a receipt handed to
/// another broker instance (whose own local numbers start at 1 too) never
/// settles the message that instance holds under the same number — nor the
/// message it came with, which is the other instance's claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receipt_from_another_instance_never_settles_the_wrong_message() {
    let Some(s) = support::RedisServer::start() else {
        return;
    };
    let clock = VirtualClock::new(START);
    let a = broker(&s, &clock).await;
    let b = broker(&s, &clock).await;
    a.publish(vec![msg("m-a", "t", "default"), msg("m-b", "t", "default")])
        .await
        .unwrap();
    let da = a.consume(&qs("default"), 1, Duration::ZERO).await.unwrap();
    let db = b.consume(&qs("default"), 1, Duration::ZERO).await.unwrap();
    assert_eq!((da.len(), db.len()), (1, 1));
    let (ra, rb) = (da[0].receipt.clone(), db[0].receipt.clone());
    // Both instances numbered their first claim alike.
    assert_eq!(ra.tag, rb.tag);
    let tag_of = |r: &headway_core::task::Receipt| {
        String::from_utf8(r.raw.as_deref().unwrap().to_vec()).unwrap()
    };
    let (ta, tb) = (tag_of(&ra), tag_of(&rb));
    assert_ne!(ta, tb);
    // b's receipt, settled through a: a no-op, as on the other layouts.
    a.ack(vec![rb.clone()]).await.unwrap();
    assert_eq!(
        s.cli(&["HEXISTS", "unacked", &tb]),
        "1",
        "b's message still b's"
    );
    assert_eq!(
        s.cli(&["HEXISTS", "unacked", &ta]),
        "1",
        "a's message still held"
    );
    let holding = a.consumers().await.unwrap().remove(0).holding;
    assert_eq!(
        holding,
        vec![da[0].message.id.clone()],
        "a still holds its own"
    );
    // A stale reject the same way touches neither message.
    a.reject(rb.clone(), true).await.unwrap();
    assert_eq!(s.cli(&["HEXISTS", "unacked", &ta]), "1");
    assert_eq!(s.cli(&["HEXISTS", "unacked", &tb]), "1");
    // Each instance's own receipt still settles its own message.
    a.ack(vec![ra]).await.unwrap();
    assert_eq!(s.cli(&["HEXISTS", "unacked", &ta]), "0");
    assert!(a.consumers().await.unwrap().remove(0).holding.is_empty());
    b.ack(vec![rb]).await.unwrap();
    assert_eq!(s.cli(&["HEXISTS", "unacked", &tb]), "0");
}

/// Consumer A claims m; consumer B settles A's receipt — ack, reject, retry
/// — and m stays A's: held in `unacked`, listed as A's, on no queue, no
/// next attempt published. Memory and the own layout ignore such a settle;
/// so does Celery's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_consumers_settle_never_takes_a_claim_from_its_holder() {
    let Some(s) = support::RedisServer::start() else {
        return;
    };
    let clock = VirtualClock::new(START);
    let a = broker(&s, &clock).await;
    let b = broker(&s, &clock).await;
    a.publish(vec![msg("m", "t", "default")]).await.unwrap();
    let da = a.consume(&qs("default"), 1, Duration::ZERO).await.unwrap();
    assert_eq!(da.len(), 1);
    let r = da[0].receipt.clone();
    let tag = String::from_utf8(r.raw.as_deref().unwrap().to_vec()).unwrap();
    b.ack(vec![r.clone()]).await.unwrap();
    b.reject(r.clone(), false).await.unwrap();
    b.reject(r.clone(), true).await.unwrap();
    b.retry(r.clone(), msg("m-next", "t", "default"))
        .await
        .unwrap();
    assert_eq!(s.cli(&["HEXISTS", "unacked", &tag]), "1", "m still held");
    assert_eq!(s.cli(&["ZCARD", "unacked_index"]), "1");
    assert_eq!(s.cli(&["LLEN", "celery"]), "0", "nothing (re)published");
    assert_eq!(
        a.consumers().await.unwrap().remove(0).holding,
        vec!["m".to_string()],
        "m still A's"
    );
    // A's own ack still settles it.
    a.ack(vec![r]).await.unwrap();
    assert_eq!(s.cli(&["HLEN", "unacked"]), "0");
}

/// A retry is fenced as on the other layouts: once its receipt is no longer
/// held (acked, rejected, given back) it publishes nothing, so a late
/// retry cannot double a run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_of_a_receipt_no_longer_held_publishes_nothing() {
    let Some(s) = support::RedisServer::start() else {
        return;
    };
    let clock = VirtualClock::new(START);
    let b = broker(&s, &clock).await;
    b.publish(vec![msg("m", "t", "default"), msg("n", "t", "default")])
        .await
        .unwrap();
    let d = b.consume(&qs("default"), 2, Duration::ZERO).await.unwrap();
    assert_eq!(d.len(), 2);
    // Acked, then a late retry of the same receipt.
    b.ack(vec![d[0].receipt.clone()]).await.unwrap();
    b.retry(d[0].receipt.clone(), msg("m-2", "t", "default"))
        .await
        .unwrap();
    // Given back (a stopping worker), then a late retry.
    assert_eq!(b.release().await.unwrap(), 1);
    b.retry(d[1].receipt.clone(), msg("n-2", "t", "default"))
        .await
        .unwrap();
    let again = b.consume(&qs("default"), 10, Duration::ZERO).await.unwrap();
    let ids: Vec<&str> = again.iter().map(|d| d.message.id.as_str()).collect();
    assert_eq!(ids, ["n"], "only the given-back claim, no next attempt");
    // A retry of a receipt still held publishes its next attempt and
    // settles the claim, together.
    b.retry(again[0].receipt.clone(), msg("n-2", "t", "default"))
        .await
        .unwrap();
    let next = b.consume(&qs("default"), 10, Duration::ZERO).await.unwrap();
    let ids: Vec<&str> = next.iter().map(|d| d.message.id.as_str()).collect();
    assert_eq!(ids, ["n-2"]);
    assert_eq!(s.cli(&["HLEN", "unacked"]), "1", "only n-2 is held");
}
