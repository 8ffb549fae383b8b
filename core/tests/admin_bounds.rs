//! The admin's memory stays bounded: an audit entry keeps counts, never the
//! ids a bulk change named, so [`AUDIT_KEPT`] entries stay a few hundred
//! KiB whatever was re-queued or purged.

use std::sync::Arc;
use std::time::Duration;

use headway_core::admin::{AUDIT_KEPT, Admin, AdminConfig, Reply, Request, Response};
use headway_core::broker::MemoryBroker;
use headway_core::task::{App, Clock, Refused, Seams, SystemClock, Worker, WorkerConfig};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

const T: &str = "s3cret-token-for-tests";
const QUEUE: &str = "bulk";

fn app_and_broker() -> (App, Arc<MemoryBroker>) {
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
    (app, b)
}

async fn call(a: &Admin, req: Request) -> Response {
    match a.handle(req).await {
        Reply::Full(r) => r,
        Reply::Stream(..) => panic!("expected a full response"),
    }
}

fn post(path: &str, body: &Value) -> Request {
    Request::new("POST", path)
        .header("Authorization", format!("Bearer {T}"))
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(body).unwrap())
}

fn body_json(r: &Response) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

async fn dead_count(a: &Admin) -> u64 {
    let r = call(
        a,
        Request::new("GET", format!("/api/dead?queue={QUEUE}&limit=1"))
            .header("Authorization", format!("Bearer {T}")),
    )
    .await;
    body_json(&r)["count"].as_u64().unwrap()
}

/// A worker quarantines `n` messages that are not runs; answers once the
/// queue keeps all of them as dead letters.
async fn bury(app: &App, b: &MemoryBroker, a: &Admin, n: u64) {
    for i in 0..n {
        b.push_raw(QUEUE, format!("not a run {i}").as_bytes());
    }
    let w: Worker = app
        .worker(WorkerConfig {
            name: Some("w1".into()),
            queues: vec![QUEUE.into()],
            ..WorkerConfig::default()
        })
        .unwrap();
    let w2 = w.clone();
    let h: JoinHandle<Result<(), Refused>> = tokio::spawn(async move { w2.run().await });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while dead_count(a).await < n {
        assert!(tokio::time::Instant::now() < deadline, "never buried {n}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    w.stop(Duration::from_secs(5));
    h.await.unwrap().unwrap();
}

fn audit_sizes(log: &Value) -> Vec<(String, usize)> {
    log["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_string(),
                serde_json::to_vec(e).unwrap().len(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_changes_keep_small_audit_entries() {
    let (app, b) = app_and_broker();
    let a = Admin::new(
        app.clone(),
        AdminConfig {
            token: Some(T.into()),
            // Room for the most ids of the longest kind in one body.
            max_body: 1 << 20,
            ..AdminConfig::default()
        },
    )
    .unwrap();
    bury(&app, &b, &a, 10_000).await;

    // The most ids one re-queue may name, each as long as an id may be.
    let ids: Vec<String> = (0..1000).map(|i| format!("{i:0>256}")).collect();
    let r = call(
        &a,
        post("/api/dead/requeue", &json!({"queue": QUEUE, "ids": ids})),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    // The answer still names them; the audit keeps their count.
    assert_eq!(body_json(&r)["ids"].as_array().unwrap().len(), 1000);
    // All 10 000 back on the queue, then all of them dead again and purged.
    let r = call(&a, post("/api/dead/requeue", &json!({"queue": QUEUE}))).await;
    assert_eq!(body_json(&r)["requeued"], 10_000, "{r:?}");
    bury(&app, &b, &a, 10_000).await;
    let r = call(&a, post("/api/dead/purge", &json!({"queue": QUEUE}))).await;
    assert_eq!(body_json(&r)["purged"], 10_000, "{r:?}");
    // A revoke of the longest id allowed.
    let long = "r".repeat(256);
    let r = call(
        &a,
        post("/api/revoke", &json!({"id": long, "terminate": true})),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");

    let log = body_json(
        &call(
            &a,
            Request::new("GET", "/api/audit").header("Authorization", format!("Bearer {T}")),
        )
        .await,
    );
    let sizes = audit_sizes(&log);
    assert_eq!(
        sizes.iter().map(|(a, _)| a.as_str()).collect::<Vec<_>>(),
        ["revoke", "dead.purge", "dead.requeue", "dead.requeue"]
    );
    for (action, size) in &sizes {
        assert!(*size < 1024, "{action} keeps {size} bytes in the audit log");
    }
    // What the entries keep: counts, not the ids.
    let named = &log["audit"][3]["outcome"];
    assert_eq!(named["ids_count"], 1000, "{named}");
    assert!(named.get("ids").is_none());
    assert_eq!(log["audit"][2]["outcome"]["requeued"], 10_000);
    assert_eq!(log["audit"][1]["outcome"]["purged"], 10_000);
    // So the whole log, full, is a few hundred KiB at most.
    let worst = sizes.iter().map(|(_, s)| *s).max().unwrap();
    assert!(worst * AUDIT_KEPT < 600 * 1024, "{worst} B × {AUDIT_KEPT}");
}
