//! A body that panics ends its own run and nothing else: the runs claimed
//! in the same batch finish, and the worker keeps claiming (the panicked
//! run is counted over, so the worker's room is not short by one for ever).

use std::time::{Duration, Instant};

use headway_core::task::{App, Failure, Options, Policy, State, Worker, WorkerConfig, body};
use serde_json::{Map, Value, json};

async fn drain_around_a_panic(concurrency: usize, prefetch: usize, oks: usize) {
    let app = App::memory(None);
    app.register(
        "boom",
        Policy::default(),
        body(|_, _| async {
            if std::env::var_os("HEADWAY_NEVER_SET").is_none() {
                panic!("a body that panics");
            }
            Ok::<Value, Failure>(Value::Null)
        }),
    )
    .unwrap();
    app.register(
        "ok",
        Policy::default(),
        body(|_, args| async move { Ok(args[0].clone()) }),
    )
    .unwrap();
    // The panicking run sits in the middle of the first batch.
    let mut handles = Vec::new();
    for i in 0..oks {
        if i == oks.min(prefetch) / 2 {
            app.send("boom", vec![], Map::new(), Options::default())
                .await
                .unwrap();
        }
        let h = app
            .send("ok", vec![json!(i)], Map::new(), Options::default())
            .await
            .unwrap();
        handles.push(h);
    }
    let w = Worker::new(
        app.clone(),
        WorkerConfig {
            concurrency,
            prefetch: Some(prefetch),
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let w2 = w.clone();
    let run = tokio::spawn(async move { w2.run().await.unwrap() });
    for (i, h) in handles.iter().enumerate() {
        let v = h
            .get(Some(Duration::from_secs(20)))
            .await
            .unwrap_or_else(|e| panic!("run {i} beside the panicking one did not finish: {e}"));
        assert_eq!(v, json!(i));
        assert_eq!(h.state().await.unwrap(), State::Success);
    }
    // Every run, the panicked one too, is counted over.
    let deadline = Instant::now() + Duration::from_secs(20);
    while w.settled() < oks as u64 + 1 {
        assert!(
            Instant::now() < deadline,
            "settled {} of {}",
            w.settled(),
            oks + 1
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    w.stop(Duration::from_secs(1));
    run.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_run_leaves_its_batch_mates_running() {
    drain_around_a_panic(4, 16, 12).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_run_leaves_room_to_claim_more() {
    // A prefetch of one: had the panicked run stayed counted as held, the
    // worker would never claim again.
    drain_around_a_panic(1, 1, 20).await;
}
