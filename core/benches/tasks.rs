//! Memory-broker throughput with a Rust no-op body: send → settled.
//!
//! Run: `cargo bench -p headway-core --bench tasks [-- N]`. Publishes N
//! messages in batches, runs one worker until all are settled, and prints
//! tasks per second for the whole path (publish, claim, ack, run, store).

use std::time::{Duration, Instant};

use headway_core::task::{App, Message, Policy, WorkerConfig, body, new_id};
use serde_json::{Map, Value, json};

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200_000);
    let rt = headway_core::runtime::runtime().expect("runtime");
    rt.block_on(async move {
        for (label, ignore) in [("results kept", false), ("ignore_result", true)] {
            let app = App::memory(None);
            let policy = Policy {
                ignore_result: ignore,
                ..Policy::default()
            };
            app.register("noop", policy, body(|_, _| async { Ok(Value::Null) }))
                .unwrap();
            let w = app
                .worker(WorkerConfig {
                    concurrency: 64,
                    prefetch: Some(1024),
                    ..WorkerConfig::default()
                })
                .unwrap();
            let start = Instant::now();
            let batch = 1000;
            for _ in 0..n / batch {
                let msgs: Vec<Message> = (0..batch)
                    .map(|i| {
                        Message::new(
                            new_id(),
                            "noop".into(),
                            vec![json!(i)],
                            Map::new(),
                            "default".into(),
                        )
                    })
                    .collect();
                app.broker().publish(msgs).await.unwrap();
            }
            let published = start.elapsed();
            let w2 = w.clone();
            let run = tokio::spawn(async move { w2.run().await });
            while (w.settled() as usize) < n / batch * batch {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let total = start.elapsed();
            w.stop(Duration::from_secs(1));
            run.await.unwrap().unwrap();
            let n = (n / batch * batch) as f64;
            println!(
                "rust no-op, {label}: {n} tasks, publish {:.0}/s, send→settled {:.0} tasks/s",
                n / published.as_secs_f64(),
                n / total.as_secs_f64()
            );
        }
    });
}
