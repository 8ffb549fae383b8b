//! How far a worker's prefetch reaches: a prefetch left to the worker
//! claims past its floor (four per slot) while runs are short and stays on
//! it while they are long; a given prefetch is kept exactly. Observed at
//! the broker: the largest claim the worker asked for.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use headway_core::broker::MemoryBroker;
use headway_core::task::spec::Claimed;
use headway_core::task::{
    App, BoxFuture, Broker, Delivery, Message, Options, Policy, Receipt, Refused, Seams,
    SystemClock, Worker, WorkerConfig, body,
};
use serde_json::{Map, Value, json};

/// The memory broker, recording the largest claim asked of it.
struct Asks {
    inner: Arc<MemoryBroker>,
    largest: AtomicUsize,
}

impl Broker for Asks {
    fn publish(&self, messages: Vec<Message>) -> BoxFuture<'_, Result<(), Refused>> {
        self.inner.publish(messages)
    }
    fn consume<'a>(
        &'a self,
        queues: &'a [String],
        max: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<Delivery>, Refused>> {
        self.inner.consume(queues, max, wait)
    }
    fn claim<'a>(
        &'a self,
        queues: &'a [String],
        max: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<Claimed>, Refused>> {
        self.largest.fetch_max(max, Ordering::SeqCst);
        self.inner.claim(queues, max, wait)
    }
    fn ack(&self, receipts: Vec<Receipt>) -> BoxFuture<'_, Result<(), Refused>> {
        self.inner.ack(receipts)
    }
    fn reject(&self, receipt: Receipt, requeue: bool) -> BoxFuture<'_, Result<(), Refused>> {
        self.inner.reject(receipt, requeue)
    }
    fn next_eta<'a>(&'a self, queues: &'a [String]) -> BoxFuture<'a, Result<Option<i64>, Refused>> {
        self.inner.next_eta(queues)
    }
    fn revoke(&self, ids: Vec<String>, until: i64) -> BoxFuture<'_, Result<(), Refused>> {
        self.inner.revoke(ids, until)
    }
    fn revoked<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<Vec<bool>, Refused>> {
        self.inner.revoked(ids)
    }
}

/// Drains `n` runs of a body lasting `run` at concurrency 1 with
/// `prefetch`; answers the largest claim the worker asked for.
async fn largest_claim(n: usize, run: Duration, prefetch: Option<usize>) -> usize {
    let mem = MemoryBroker::new(Arc::new(SystemClock));
    let asks = Arc::new(Asks {
        inner: mem.clone(),
        largest: AtomicUsize::new(0),
    });
    let app = App::new(
        Seams {
            broker: asks.clone(),
            backend: Some(mem.clone()),
            counter: Some(mem.clone()),
            inspector: Some(mem.clone()),
        },
        Arc::new(SystemClock),
    );
    app.register(
        "t",
        Policy::default(),
        body(move |_, _| async move {
            if !run.is_zero() {
                tokio::time::sleep(run).await;
            }
            Ok(Value::Null)
        }),
    )
    .unwrap();
    for i in 0..n {
        app.send("t", vec![json!(i)], Map::new(), Options::default())
            .await
            .unwrap();
    }
    let w = Worker::new(
        app.clone(),
        WorkerConfig {
            concurrency: 1,
            prefetch,
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let w2 = w.clone();
    let h = tokio::spawn(async move { w2.run().await.unwrap() });
    let deadline = Instant::now() + Duration::from_secs(60);
    while w.settled() < n as u64 {
        assert!(Instant::now() < deadline, "the drain never ended");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    w.stop(Duration::from_secs(1));
    h.await.unwrap();
    asks.largest.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_prefetch_reaches_past_its_floor_while_runs_are_short() {
    // Concurrency 1: a floor of 4, a ceiling of 32. No-op runs finish
    // thousands a second, so 2 ms of them is past the floor.
    let reached = largest_claim(20_000, Duration::ZERO, None).await;
    assert!(reached > 4, "short runs: the largest claim was {reached}");
    assert!(reached <= 32, "past the ceiling: {reached}");
    // The control: the same drain with the prefetch given never asks more.
    let kept = largest_claim(20_000, Duration::ZERO, Some(4)).await;
    assert!(kept <= 4, "a given prefetch of 4 claimed {kept}");
    assert!(kept >= 1, "the control drained without claiming");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_of_a_few_ms_keep_the_floor() {
    // 3 ms a run at concurrency 1: at most ~333 runs a second, under one
    // run per 2 ms window: the reach never leaves the floor of 4.
    let floor = largest_claim(300, Duration::from_millis(3), None).await;
    assert!(floor <= 4, "3 ms runs claimed {floor} at once");
    assert!(floor >= 1, "the drain claimed nothing");
}
