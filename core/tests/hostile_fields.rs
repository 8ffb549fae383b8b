//! Messages whose numbers sit at the edges of their types: a retry count of
//! `u32::MAX`, an eta or expiry at `i64::MAX`/`i64::MIN` ms, a countdown of
//! 1e300 seconds. Any producer can put such a message on a queue, so the
//! worker and the codecs must treat them as data — saturate, refuse with a
//! reason, or hold — and never panic, wrap or overflow. Tests build in debug
//! (overflow checks on), where a forgotten `+` is a panic.
//!
//! Each message is pushed as raw bytes onto the memory broker, the way
//! another producer would put it there, and run by a real worker.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use headway_core::broker::MemoryBroker;
use headway_core::broker::celery::Sender;
use headway_core::broker::celery::result::decode_meta;
use headway_core::task::{
    App, Clock, Failure, Outcome, Policy, RetryBackoff, Seams, State, SystemClock, VirtualClock,
    Worker, WorkerConfig, body,
};
use serde_json::{Value, json};

const START: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

/// An app on a fresh memory broker (also its store, counter, inspector).
fn app_on(clock: Arc<dyn Clock>) -> (App, Arc<MemoryBroker>) {
    let b = MemoryBroker::new(clock.clone());
    let app = App::new(
        Seams {
            broker: b.clone(),
            backend: Some(b.clone()),
            counter: Some(b.clone()),
            inspector: Some(b.clone()),
        },
        clock,
    );
    (app, b)
}

fn start(app: &App) -> (Worker, tokio::task::JoinHandle<()>) {
    let w = Worker::new(
        app.clone(),
        WorkerConfig {
            concurrency: 1,
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let w2 = w.clone();
    (w, tokio::spawn(async move { w2.run().await.unwrap() }))
}

async fn stop(w: Worker, h: tokio::task::JoinHandle<()>) {
    w.stop(Duration::from_secs(1));
    h.await.expect("the worker loop did not panic");
}

/// Polls the store until `id` has a final outcome; `None` at the deadline.
async fn final_outcome(app: &App, id: &str) -> Option<Outcome> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Some(o) = app.backend().unwrap().fetch(id).await.unwrap()
            && o.state.is_final()
        {
            return Some(o);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

/// Polls until `cond` holds; false at the deadline.
async fn until(cond: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cond()
}

/// A task that always fails, counting its runs, with `retries` retries and
/// a fixed 1 s backoff.
fn failing(app: &App, retries: u32) -> Arc<AtomicU32> {
    let runs = Arc::new(AtomicU32::new(0));
    let r = runs.clone();
    app.register(
        "fail",
        Policy {
            retries,
            backoff: RetryBackoff::fixed(1000).unwrap(),
            ..Policy::default()
        },
        body(move |_, _| {
            r.fetch_add(1, Ordering::SeqCst);
            async { Err(Failure::new("ValueError", "no")) }
        }),
    )
    .unwrap();
    runs
}

/// A task that succeeds, counting its runs.
fn fine(app: &App, name: &str) -> Arc<AtomicU32> {
    let runs = Arc::new(AtomicU32::new(0));
    let r = runs.clone();
    app.register(
        name,
        Policy::default(),
        body(move |_, _| {
            r.fetch_add(1, Ordering::SeqCst);
            async { Ok(json!("ok")) }
        }),
    )
    .unwrap();
    runs
}

fn raw(v: Value) -> Vec<u8> {
    serde_json::to_vec(&v).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_at_u32_max_fail_for_good_without_overflow() {
    let clock = VirtualClock::new(START);
    let (app, b) = app_on(clock);
    let runs = failing(&app, 3);
    b.push_raw(
        "default",
        &raw(json!({"id": "r-max", "task": "fail", "queue": "default", "retries": u32::MAX})),
    );
    // Positive control: an ordinary first attempt retries.
    b.push_raw(
        "default",
        &raw(json!({"id": "r-0", "task": "fail", "queue": "default"})),
    );
    let (w, h) = start(&app);
    let o = final_outcome(&app, "r-max")
        .await
        .expect("a run at u32::MAX retries is recorded, not lost to a panic");
    assert_eq!(o.state, State::Failure, "the retry budget is spent");
    assert_eq!(o.retries, u32::MAX);
    let c = final_outcome(&app, "r-0").await.expect("the control ends");
    assert_eq!((c.state, c.retries), (State::Failure, 3));
    // r-max ran once; r-0 ran its first attempt and three retries.
    assert!(until(|| runs.load(Ordering::SeqCst) == 5).await);
    stop(w, h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_retry_below_u32_max_saturates() {
    let clock = VirtualClock::new(START);
    let (app, b) = app_on(clock);
    let runs = failing(&app, u32::MAX);
    b.push_raw(
        "default",
        &raw(json!({"id": "r", "task": "fail", "queue": "default", "retries": u32::MAX - 1})),
    );
    let (w, h) = start(&app);
    let o = final_outcome(&app, "r")
        .await
        .expect("the retry is published and its attempt recorded");
    assert_eq!(o.state, State::Failure);
    assert_eq!(o.retries, u32::MAX, "one retry, then the budget says no");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    stop(w, h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expires_at_the_ends_of_time() {
    let clock = VirtualClock::new(START);
    let (app, b) = app_on(clock);
    let runs = fine(&app, "ok");
    for (id, expires) in [
        ("past", i64::MIN),
        ("future", i64::MAX),
        ("y9999", 253_402_300_799_999),
    ] {
        b.push_raw(
            "default",
            &raw(json!({"id": id, "task": "ok", "queue": "default", "expires": expires})),
        );
    }
    let (w, h) = start(&app);
    let past = final_outcome(&app, "past").await.unwrap();
    assert_eq!(past.state, State::Revoked);
    assert_eq!(past.error.unwrap().kind, "Expired");
    for id in ["future", "y9999"] {
        assert_eq!(final_outcome(&app, id).await.unwrap().state, State::Success);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    stop(w, h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_future_eta_is_held_on_the_system_clock() {
    let (app, b) = app_on(Arc::new(SystemClock));
    let runs = fine(&app, "ok");
    b.push_raw(
        "default",
        &raw(json!({"id": "far", "task": "ok", "queue": "default", "eta": i64::MAX})),
    );
    b.push_raw(
        "default",
        &raw(json!({"id": "now", "task": "ok", "queue": "default", "eta": i64::MIN})),
    );
    let (w, h) = start(&app);
    // The control (an eta long past) runs; the far one waits its turn.
    assert_eq!(
        final_outcome(&app, "now").await.unwrap().state,
        State::Success
    );
    assert!(until(|| b.delayed() == 1).await);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(app.backend().unwrap().fetch("far").await.unwrap().is_none());
    stop(w, h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_far_future_eta_saturates() {
    // A virtual clock jumps to the eta when nothing else is due; the retry's
    // eta (now + backoff) is then past i64::MAX and saturates there.
    let clock = VirtualClock::new(START);
    let (app, b) = app_on(clock.clone());
    let runs = failing(&app, 2);
    b.push_raw(
        "default",
        &raw(json!({"id": "late", "task": "fail", "queue": "default", "eta": i64::MAX - 10})),
    );
    let (w, h) = start(&app);
    let o = final_outcome(&app, "late")
        .await
        .expect("both retries run, at the end of time");
    assert_eq!((o.state, o.retries), (State::Failure, 2));
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert_eq!(clock.now(), i64::MAX);
    stop(w, h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chain_countdowns_at_the_ends_of_i64() {
    let clock = VirtualClock::new(START);
    let (app, b) = app_on(clock.clone());
    fine(&app, "ok");
    let next = fine(&app, "next");
    b.push_raw(
        "default",
        &raw(json!({"id": "a", "task": "ok", "queue": "default",
            "chain": [{"task": "next", "id": "a2", "options": {"countdown": i64::MAX}}]})),
    );
    b.push_raw(
        "default",
        &raw(json!({"id": "b", "task": "ok", "queue": "default",
            "chain": [{"task": "next", "id": "b2", "options": {"countdown": i64::MIN}}]})),
    );
    let (w, h) = start(&app);
    // A countdown of -i64::MAX ms is due at once; one of i64::MAX ms is held
    // until the end of time (a virtual clock gets there when idle).
    assert_eq!(
        final_outcome(&app, "b2").await.unwrap().state,
        State::Success
    );
    assert_eq!(
        final_outcome(&app, "a").await.unwrap().state,
        State::Success
    );
    assert_eq!(
        final_outcome(&app, "a2").await.unwrap().state,
        State::Success
    );
    assert_eq!(next.load(Ordering::SeqCst), 2);
    assert_eq!(clock.now(), i64::MAX);
    stop(w, h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_countdown_of_i64_max_is_held_on_the_system_clock() {
    let (app, b) = app_on(Arc::new(SystemClock));
    fine(&app, "ok");
    let next = fine(&app, "next");
    b.push_raw(
        "default",
        &raw(json!({"id": "a", "task": "ok", "queue": "default",
            "chain": [{"task": "next", "id": "a2", "options": {"countdown": i64::MAX}}]})),
    );
    let (w, h) = start(&app);
    assert_eq!(
        final_outcome(&app, "a").await.unwrap().state,
        State::Success
    );
    assert!(
        until(|| b.delayed() == 1).await,
        "the next link is published and held"
    );
    assert_eq!(next.load(Ordering::SeqCst), 0);
    stop(w, h).await;
}

/// A Celery envelope with the given headers (merged over sane ones) and
/// body embed.
fn celery_env(headers: Value, embed: Value) -> Vec<u8> {
    let body = serde_json::to_string(&json!([[], {}, embed])).unwrap();
    let mut h = json!({"lang": "py", "task": "t", "id": "c1", "retries": 0});
    for (k, v) in headers.as_object().unwrap() {
        h[k] = v.clone();
    }
    raw(json!({
        "body": body,
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": h,
        "properties": {"delivery_info": {"routing_key": "celery"}, "delivery_tag": "x"},
    }))
}

#[test]
fn celery_numeric_times_and_counts_saturate_and_re_encode() {
    let s = Sender::this_process("celery");
    let link = |countdown: Value| {
        json!({"task": "n", "args": [], "kwargs": {}, "options": {"countdown": countdown},
               "subtask_type": null, "immutable": false})
    };
    let env = celery_env(
        json!({"eta": 1e300, "expires": -1e300, "retries": 1e300, "group_index": -5}),
        json!({"chain": [link(json!(1e300)), link(json!(-1e300)), link(json!(-0.0))]}),
    );
    let d = s.decode(&env).expect("a message at the edges decodes");
    let m = &d.message;
    assert_eq!(m.eta, Some(i64::MAX));
    assert_eq!(m.expires, Some(i64::MIN));
    assert_eq!(m.retries, u32::MAX);
    // Chain links are stored next first: the wire's last element first.
    let cd: Vec<_> = m.chain.iter().map(|s| s.options.countdown).collect();
    assert_eq!(cd, [Some(0), Some(i64::MIN), Some(i64::MAX)]);
    // Re-encoding (what a retry or a restore does) must not overflow: the
    // expiry is long gone, the eta as late as Python can write a time.
    let e = s.encode(m, START);
    let v: Value = serde_json::from_str(&e.json).unwrap();
    assert_eq!(v["properties"]["expiration"], "0");
    assert_eq!(v["headers"]["eta"], "9999-12-31T23:59:59.999000+00:00");
    assert_eq!(v["headers"]["expires"], "0001-01-01T00:00:00+00:00");
    let back = s
        .decode(e.json.as_bytes())
        .expect("what it encodes decodes");
    assert!(back.message.eta.unwrap() > START, "a far eta stays far");
    assert!(
        back.message.expires.unwrap() < START,
        "a past expiry stays past"
    );
    assert_eq!(back.message.retries, u32::MAX);
}

#[test]
fn celery_string_times_past_year_9999_are_refused_with_a_reason() {
    let s = Sender::this_process("celery");
    for bad in ["+275760-09-13T00:00:00+00:00", "99999-01-01T00:00:00"] {
        let e = s
            .decode(&celery_env(json!({"eta": bad}), json!({})))
            .expect_err(bad);
        assert!(e.to_string().contains("headers.eta"), "{e}");
    }
    let ok = s
        .decode(&celery_env(
            json!({"eta": "9999-12-31T23:59:59.999999+00:00"}),
            json!({}),
        ))
        .unwrap();
    assert_eq!(ok.message.eta, Some(253_402_300_799_999));
}

#[test]
fn celery_result_meta_retries_saturate() {
    let meta = |r: Value| {
        raw(
            json!({"status": "RETRY", "result": null, "traceback": null, "children": [],
                   "date_done": null, "task_id": "x", "retries": r}),
        )
    };
    let o = decode_meta("x", &meta(json!(1u64 << 32))).unwrap();
    assert_eq!(o.retries, u32::MAX, "2^32 is not 0 retries");
    assert_eq!(decode_meta("x", &meta(json!(7))).unwrap().retries, 7);
    let far = raw(
        json!({"status": "SUCCESS", "result": 1, "date_done": "9999-12-31T23:59:59+00:00", "task_id": "x"}),
    );
    assert_eq!(decode_meta("x", &far).unwrap().at, 253_402_300_799_000);
}
