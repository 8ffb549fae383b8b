//! What an admin page reads: queues, counts and run events.

use std::time::Duration;

use headway_core::task::{App, Failure, Options, Policy, State, VirtualClock, WorkerConfig, body};
use serde_json::{Map, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_record_run_events() {
    let app = App::memory(Some(VirtualClock::new(1_000_000)));
    app.register(
        "ok",
        Policy::default(),
        body(|_, a| async move { Ok(json!(a.len())) }),
    )
    .unwrap();
    app.register(
        "bad",
        Policy::default(),
        body(|_, _| async { Err(Failure::new("ValueError", "<b>no</b>")) }),
    )
    .unwrap();
    let long = "x".repeat(10_000);
    let a = app
        .send("ok", vec![json!(long)], Map::new(), Options::default())
        .await
        .unwrap();
    let b = app
        .send("bad", vec![], Map::new(), Options::default())
        .await
        .unwrap();
    let insp = app.inspector().unwrap().clone();
    let q = insp.queues().await.unwrap();
    assert_eq!(q[0].name, "default");
    assert_eq!(q[0].ready.get(&0), Some(&2));
    let w = app.worker(WorkerConfig::default()).unwrap();
    let w2 = w.clone();
    let h = tokio::spawn(async move { w2.run().await });
    a.get(Some(Duration::from_secs(5))).await.unwrap();
    let _ = b.get(Some(Duration::from_secs(5))).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while insp.recent(10).await.unwrap().len() < 2 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let ev = insp.recent(10).await.unwrap();
    assert_eq!(ev.len(), 2);
    let ok = ev.iter().find(|e| e.id == a.id()).unwrap();
    assert_eq!(ok.state, State::Success);
    assert!(ok.args.len() <= 2048 + 3 && ok.args.ends_with('…'));
    let bad = ev.iter().find(|e| e.id == b.id()).unwrap();
    assert_eq!(bad.state, State::Failure);
    assert!(bad.detail.as_deref().unwrap().contains("ValueError"));
    let counts = insp.counts().await.unwrap();
    assert_eq!(counts.get(&State::Success), Some(&1));
    assert_eq!(counts.get(&State::Failure), Some(&1));
    w.stop(Duration::from_secs(1));
    h.await.unwrap().unwrap();
}
