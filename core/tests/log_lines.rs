//! What a worker prints about a message cannot be steered by the message.
//!
//! A task name or id holding a newline, an ANSI escape, or a megabyte must
//! come out as one bounded, escaped line: a forged `[ERROR]` line, a
//! repainted terminal or a 1 MB log line per message are what a publisher
//! could otherwise cause. The worker logs through the `log` facade; the
//! child installs the core's stderr sink (as the Node binding does), so the
//! test runs itself again as a child process (the same test, with
//! `HEADWAY_LOG_LINES_CHILD` set), feeds that child's worker hostile
//! messages, and reads the child's stderr.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use headway_core::broker::MemoryBroker;
use headway_core::task::{
    App, Clock, Inspector, Policy, Seams, State, SystemClock, Worker, WorkerConfig, body,
};
use serde_json::json;

const CHILD: &str = "HEADWAY_LOG_LINES_CHILD";
const FORGED: &str = "\n[ERROR] forged line\x1b[31m\u{202e}";
const MB: usize = 1 << 20;

/// The longest line the parent accepts: a log line's fixed text and a few
/// values of at most 128 escaped characters each.
const LINE_MAX: usize = 4096;

async fn child() {
    headway_core::log::sink::to_stderr(headway_core::log::sink::Format::Plain);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
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
    app.register("ok", Policy::default(), body(|_, _| async { Ok(json!(1)) }))
        .unwrap();
    let big = "y".repeat(MB);
    // An unregistered name: the worker warns about it.
    let name = format!("x{FORGED}{big}");
    b.push_raw(
        "default",
        &serde_json::to_vec(&json!({"id": "u1", "task": name, "queue": "default"})).unwrap(),
    );
    // A registered task whose id is hostile, carrying a Celery `link` the
    // worker cannot send: it warns naming the id and the link's kind.
    let id = format!("id{FORGED}{big}");
    let kind = format!("k{FORGED}{big}");
    b.push_raw(
        "default",
        &serde_json::to_vec(&json!({"id": id, "task": "ok", "queue": "default",
            "carried": {"callbacks": [{"task": "cb", "subtask_type": kind}]}}))
        .unwrap(),
    );
    // Bytes that are not a message: dead-lettered, with its reason logged.
    b.push_raw(
        "default",
        &serde_json::to_vec(
            &json!({"id": "d", "task": "ok", "queue": "default", "priority": FORGED}),
        )
        .unwrap(),
    );
    let w = Worker::new(app.clone(), WorkerConfig::default()).unwrap();
    let w2 = w.clone();
    let h = tokio::spawn(async move { w2.run().await.unwrap() });
    let deadline = Instant::now() + Duration::from_secs(20);
    let store = app.backend().unwrap();
    loop {
        let u = store.fetch("u1").await.unwrap().map(|o| o.state);
        let k = store.fetch(&id).await.unwrap().map(|o| o.state);
        let dead = b.dead_count("default").await.unwrap();
        if u == Some(State::Failure) && k == Some(State::Success) && dead == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the child's runs did not end: {u:?} {k:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    w.stop(Duration::from_secs(1));
    h.await.unwrap();
}

#[test]
fn message_text_prints_as_one_bounded_escaped_line() {
    if std::env::var_os(CHILD).is_some() {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(child());
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "message_text_prints_as_one_bounded_escaped_line",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .expect("run the test binary as a child");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the child failed: {}\n{}",
        out.status,
        &err[..err.len().min(4000)]
    );
    // Each warning was printed (positive controls for the checks below).
    let has = |needle: &str| err.lines().any(|l| l.contains(needle));
    assert!(has("received unregistered task"), "{err:.2000}");
    assert!(has("a callback of"), "{err:.2000}");
    assert!(has("dead-lettered a message"), "{err:.2000}");
    // ... escaped: the forged text is there, on the warning's own line.
    assert!(
        has("x\\n[ERROR] forged line\\u{1b}[31m\\u{202e}yyy"),
        "{err:.2000}"
    );
    assert!(has("id\\n[ERROR] forged line"), "{err:.2000}");
    assert!(
        has(&format!("({} bytes)", MB + 1 + FORGED.len())),
        "{err:.2000}"
    );
    // ... and nothing else: no forged line, no escape, no huge line.
    for l in err.lines() {
        assert!(!l.starts_with("[ERROR]"), "a forged line: {l:.300}");
        assert!(l.len() <= LINE_MAX, "a line of {} bytes: {l:.300}", l.len());
    }
    assert!(!err.contains('\x1b') && !err.contains('\u{202e}'));
}
