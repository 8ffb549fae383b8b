//! Memory-broker throughput with a Rust no-op body: send → settled.
//!
//! Run: `cargo bench -p headway-core --bench tasks [-- N]`. Publishes N
//! messages in batches, runs one worker until all are settled, and prints
//! tasks per second for the whole path (publish, claim, ack, run, store),
//! with the heap allocations each run made on the way (count and bytes),
//! the cost a no-op run is mostly made of.
//!
//! mimalloc is the allocator, as in both bindings (glibc's malloc, whose
//! consolidation of freed chunks showed as a tenth of this drain's CPU, is
//! not what a user runs). `CONCURRENCY` and `PREFETCH` in the environment
//! replace the worker's 64 and 1024.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use headway_core::task::{App, Message, Policy, WorkerConfig, body, new_id};
use serde_json::{Map, Value, json};

/// mimalloc, counting what is allocated.
struct Counted;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counted {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(l.size() as u64, Ordering::Relaxed);
        unsafe { mimalloc::MiMalloc.alloc(l) }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { mimalloc::MiMalloc.dealloc(p, l) }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(size as u64, Ordering::Relaxed);
        unsafe { mimalloc::MiMalloc.realloc(p, l, size) }
    }
}

#[global_allocator]
static ALLOC: Counted = Counted;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200_000);
    let (concurrency, prefetch) = (env_or("CONCURRENCY", 64), env_or("PREFETCH", 1024));
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
                    concurrency,
                    prefetch: Some(prefetch),
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
            let (allocs, bytes) = (
                ALLOCS.load(Ordering::Relaxed),
                BYTES.load(Ordering::Relaxed),
            );
            let w2 = w.clone();
            let run = tokio::spawn(async move { w2.run().await });
            while (w.settled() as usize) < n / batch * batch {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let total = start.elapsed();
            let n = (n / batch * batch) as f64;
            let allocs = (ALLOCS.load(Ordering::Relaxed) - allocs) as f64 / n;
            let bytes = (BYTES.load(Ordering::Relaxed) - bytes) as f64 / n;
            w.stop(Duration::from_secs(1));
            run.await.unwrap().unwrap();
            println!(
                "rust no-op, {label}: {n} tasks, publish {:.0}/s, send→settled {:.0} tasks/s \
                 (concurrency {concurrency}, prefetch {prefetch}; per run: {allocs:.1} allocations, {bytes:.0} bytes)",
                n / published.as_secs_f64(),
                n / total.as_secs_f64()
            );
        }
    });
}
