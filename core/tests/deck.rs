//! Runs on deck (`task/deck.rs`): with every slot busy, a worker makes its
//! next host call ready without starting or acking it, and the host's
//! answer hands it over at once. The host here is the test itself, taking
//! and answering calls from a `HostQueue` as a binding does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use headway_core::task::host::Taker;
use headway_core::task::{App, Handle, HostQueue, Options, Policy, State, Worker, WorkerConfig};
use serde_json::{Map, json};

async fn until(what: impl Fn() -> bool, why: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !what() {
        assert!(Instant::now() < deadline, "timed out waiting: {why}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn unacked(app: &App) -> u64 {
    app.inspector().unwrap().queues().await.unwrap()[0].unacked
}

async fn ready(app: &App) -> u64 {
    app.inspector().unwrap().queues().await.unwrap()[0]
        .ready
        .values()
        .sum()
}

/// A worker of concurrency 1 on `app`, running.
fn one_slot_worker(app: &App) -> Worker {
    holding(app, None)
}

/// A worker of concurrency 1 on `app` with `prefetch`, running.
fn holding(app: &App, prefetch: Option<usize>) -> Worker {
    let w = app
        .worker(WorkerConfig {
            concurrency: 1,
            prefetch,
            ..WorkerConfig::default()
        })
        .unwrap();
    let w2 = w.clone();
    tokio::spawn(async move { w2.run().await });
    w
}

/// A run's value, waited for.
async fn got(h: &Handle) -> serde_json::Value {
    h.get(Some(Duration::from_secs(5))).await.unwrap()
}

/// The first call, taken by the host (this test), once the `behind` runs
/// sent after it wait on deck.
async fn first_and_on_deck(
    q: &HostQueue,
    w: &Worker,
    behind: usize,
) -> Vec<headway_core::task::Call> {
    until(|| q.len() == 1, "the first call").await;
    let first = q.take(1);
    until(|| w.on_deck() == behind, "the next runs on deck").await;
    first
}

/// An app on the memory broker whose task `t` is a host body on `q`, its
/// runs `sent`, and a worker of concurrency 1 running.
async fn one_slot(n: usize) -> (App, Arc<HostQueue>, Worker, Vec<Handle>) {
    one_slot_holding(n, None).await
}

/// `one_slot`, its worker's prefetch `prefetch`.
async fn one_slot_holding(
    n: usize,
    prefetch: Option<usize>,
) -> (App, Arc<HostQueue>, Worker, Vec<Handle>) {
    let app = App::memory(None);
    let q = HostQueue::new();
    app.register("t", Policy::default(), q.body("t")).unwrap();
    let mut sent = Vec::new();
    for i in 0..n {
        sent.push(
            app.send("t", vec![json!(i)], Map::new(), Options::default())
                .await
                .unwrap(),
        );
    }
    let w = holding(&app, prefetch);
    (app, q, w, sent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_hands_the_run_on_deck_over_and_only_then_acks_it() {
    let (app, q, w, sent) = one_slot(2).await;
    let first = first_and_on_deck(&q, &w, 1).await;
    assert_eq!(first[0].args, vec![json!(0)]);
    // On deck: not queued for the host, not acked (a worker killed now
    // would have it delivered again), not started.
    assert_eq!(q.len(), 0, "a run on deck is not queued for the host");
    assert_eq!(unacked(&app).await, 1, "the run on deck is not acked");
    let started: Vec<bool> = w.runs().iter().map(|r| r.started.is_some()).collect();
    assert_eq!(started, vec![true, false]);

    // The answer hands it over in the same call: queued, started, acked.
    q.finish_many(vec![(first[0].seq, Ok(json!("a")))]);
    let second = q.take(1);
    assert_eq!(second.len(), 1, "handed over by the answer itself");
    assert_eq!(second[0].args, vec![json!(1)]);
    assert_eq!(w.on_deck(), 0);
    until(|| w.runs().len() == 1, "the first run over").await;
    assert!(w.runs()[0].started.is_some(), "started at the hand-over");
    assert_eq!(unacked(&app).await, 0, "acked at the hand-over");
    q.finish(second[0].seq, Ok(json!("b")));
    assert_eq!(got(&sent[0]).await, json!("a"));
    assert_eq!(got(&sent[1]).await, json!("b"));
    w.stop(Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_takes_the_run_its_answer_hands_over_without_ringing_the_bell() {
    let (_app, q, w, sent) = one_slot(3).await;
    let rings = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let r2 = rings.clone();
    q.set_bell(Some(Arc::new(move || {
        r2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    })));
    let rung = || rings.load(std::sync::atomic::Ordering::SeqCst);
    let first = first_and_on_deck(&q, &w, 2).await;
    let mut taker = Taker::default();

    // Answered and taken in one swap: the handed-over call is taken there,
    // and the host, already awake, is not rung for it.
    let before = rung();
    let second = q.swap(vec![(first[0].seq, Ok(json!("a")))], &mut taker, 8);
    assert_eq!(second.len(), 1, "handed over inside the swap");
    assert_eq!(second[0].args, vec![json!(1)]);
    assert_eq!(rung(), before, "no bell for a call the swap took");
    assert_eq!(w.on_deck(), 1, "the third run still on deck");

    // Positive control: the same hand-over by an answer alone (no take
    // follows) rings.
    q.finish_many(vec![(second[0].seq, Ok(json!("b")))]);
    assert_eq!(rung(), before + 1, "the bell for a call nobody takes yet");
    let third = q.take(1);
    assert_eq!(third[0].args, vec![json!(2)]);
    q.finish(third[0].seq, Ok(json!("c")));
    for (h, v) in sent.iter().zip(["a", "b", "c"]) {
        assert_eq!(got(h).await, json!(v));
    }
    w.stop(Duration::from_secs(1));
}

/// A slot has four places on deck (`deck::PER_SLOT`): with all of them filled, each
/// answer hands the next run over in the same swap, one after another,
/// with no visit of the runtime between them (nothing is left to refill
/// the deck: every run sent is on it). The prefetch is given: at the
/// default floor of four a slot, one is running and three wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_keeps_its_places_on_deck_full_and_each_answer_hands_the_next_over() {
    const PER_SLOT: usize = 4;
    let (_app, q, w, sent) = one_slot_holding(1 + PER_SLOT, Some(16)).await;
    let first = first_and_on_deck(&q, &w, PER_SLOT).await;
    assert_eq!(q.len(), 0, "runs on deck are not queued for the host");
    let mut taker = Taker::default();
    let mut answer = first[0].seq;
    for i in 1..=PER_SLOT {
        let next = q.swap(vec![(answer, Ok(json!(i - 1)))], &mut taker, 8);
        assert_eq!(next.len(), 1, "the answer handed the next run over");
        assert_eq!(next[0].args, vec![json!(i)]);
        assert_eq!(w.on_deck(), PER_SLOT - i);
        answer = next[0].seq;
    }
    q.finish(answer, Ok(json!(PER_SLOT)));
    for (i, h) in sent.iter().enumerate() {
        assert_eq!(got(h).await, json!(i));
    }
    w.stop(Duration::from_secs(1));
}

/// A shrink under a backlog takes effect: a slot it took away while busy
/// is not handed to the next run on deck as it frees, and the deck keeps
/// only the places of the slots left. (A freed slot goes straight to the
/// deck's line, so a shrink that waited on the semaphore for its busy slots
/// waited while any run was on deck: under a backlog, for ever.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shrink_under_a_backlog_runs_fewer_at_once() {
    let app = App::memory(None);
    let q = HostQueue::new();
    app.register("t", Policy::default(), q.body("t")).unwrap();
    let mut sent = Vec::new();
    for i in 0..16 {
        let h = app.send("t", vec![json!(i)], Map::new(), Options::default());
        sent.push(h.await.unwrap());
    }
    let w = app
        .worker(WorkerConfig {
            concurrency: 2,
            prefetch: Some(32),
            ..WorkerConfig::default()
        })
        .unwrap();
    let w2 = w.clone();
    tokio::spawn(async move { w2.run().await });
    until(|| q.len() == 2, "two calls").await;
    let calls = q.take(2);
    until(|| w.on_deck() == 8, "four places a slot, filled").await;
    assert_eq!(w.shrink(1).unwrap(), 1);

    // Both answered: one slot is gone, so one run is handed over, not two.
    q.finish_many(
        calls
            .iter()
            .map(|c| (c.seq, Ok(c.args[0].clone())))
            .collect(),
    );
    assert_eq!(q.len(), 1, "the shrunk worker's one slot, handed over");
    // Then one at a time, in order; the deck comes down to one slot's
    // four places and stays there while runs are left to fill it.
    for i in 2..16 {
        until(|| q.len() == 1, "the next call").await;
        let c = q.take(8);
        assert_eq!(c.len(), 1, "one at once");
        assert_eq!(c[0].args, vec![json!(i)], "in order");
        if (6..12).contains(&i) {
            until(|| w.on_deck() == 4, "one slot's places on deck").await;
        }
        assert!(
            w.on_deck() <= 4 || i < 6,
            "more than one slot's places on deck"
        );
        q.finish(c[0].seq, Ok(json!(i)));
    }
    for (i, h) in sent.iter().enumerate() {
        assert_eq!(got(h).await, json!(i));
    }
    w.stop(Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_gives_back_the_run_on_deck_at_once_and_waits_for_the_running_one() {
    let (app, q, w, sent) = one_slot(2).await;
    let first = first_and_on_deck(&q, &w, 1).await;
    w.stop(Duration::from_secs(10));
    // Given back while the first still runs: ready again, never started.
    let t = Instant::now();
    while ready(&app).await != 1 {
        assert!(t.elapsed() < Duration::from_secs(5), "not given back");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(w.on_deck(), 0);
    assert_eq!(q.len(), 0, "never reached the host");
    q.finish(first[0].seq, Ok(json!("a")));
    assert_eq!(got(&sent[0]).await, json!("a"));
    assert_eq!(sent[1].state().await.unwrap(), State::Pending);

    // Positive control: another worker runs what was given back.
    let w2 = one_slot_worker(&app);
    until(|| q.len() == 1, "the given-back run's call").await;
    let c = q.take(1);
    assert_eq!(c[0].args, vec![json!(1)]);
    q.finish(c[0].seq, Ok(json!("b")));
    assert_eq!(got(&sent[1]).await, json!("b"));
    w2.stop(Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_long_on_deck_is_checked_for_a_revoke_before_its_hand_over() {
    let (app, q, w, sent) = one_slot(3).await;
    let first = first_and_on_deck(&q, &w, 2).await;
    // Past the revoked-check interval (100 ms) on deck, then revoked.
    tokio::time::sleep(Duration::from_millis(150)).await;
    sent[1].revoke(false).await.unwrap();
    q.finish(first[0].seq, Ok(json!("a")));
    // The revoked run never reaches the host; the third does (positive
    // control: the slot went on).
    until(|| q.len() == 1, "the third call").await;
    let c = q.take(1);
    assert_eq!(
        c[0].args,
        vec![json!(2)],
        "the revoked run reached the host"
    );
    q.finish(c[0].seq, Ok(json!("c")));
    assert_eq!(got(&sent[2]).await, json!("c"));
    assert_eq!(sent[1].state().await.unwrap(), State::Revoked);
    assert_eq!(unacked(&app).await, 0);
    w.stop(Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminate_takes_a_run_off_the_deck_and_it_never_runs() {
    let (app, q, w, sent) = one_slot(2).await;
    let first = first_and_on_deck(&q, &w, 1).await;
    sent[1].revoke(true).await.unwrap();
    until(|| w.on_deck() == 0, "off the deck").await;
    q.finish(first[0].seq, Ok(json!("a")));
    assert_eq!(got(&sent[0]).await, json!("a"));
    let t = Instant::now();
    while sent[1].state().await.unwrap() != State::Revoked {
        assert!(t.elapsed() < Duration::from_secs(5), "not recorded revoked");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(q.len(), 0, "a terminated run on deck reached the host");
    assert_eq!(unacked(&app).await, 0);
    w.stop(Duration::from_secs(1));
}

/// A worker grown by remote control hands its new slot to the run on deck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_added_goes_to_the_run_on_deck() {
    let (_app, q, w, sent) = one_slot(2).await;
    let first = first_and_on_deck(&q, &w, 1).await;
    w.grow(1).unwrap();
    assert_eq!(w.on_deck(), 0, "handed over by the grow");
    let second = q.take(1);
    assert_eq!(second[0].args, vec![json!(1)]);
    q.finish_many(vec![
        (first[0].seq, Ok(json!("a"))),
        (second[0].seq, Ok(json!("b"))),
    ]);
    assert_eq!(got(&sent[1]).await, json!("b"));
    w.stop(Duration::from_secs(1));
}

/// A slot freed by a body abandoned at its timeout, when that left every
/// runner stuck, does not hand the run on deck to the host: it is neither
/// queued nor acked until a runner is free again.
///
/// With a timeout of 60 ms the run is fresh on deck when the slot frees
/// (handed over, or not, by the freeing thread); with 150 ms it is past the
/// revoked-check interval and its own task decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_runner_stuck_the_run_on_deck_waits_unacked() {
    for ms in [60, 150] {
        every_runner_stuck(ms).await;
    }
}

async fn every_runner_stuck(ms: i64) {
    let app = App::memory(None);
    let q = HostQueue::new();
    let timeout = Policy {
        timeout: Some(ms),
        ..Policy::default()
    };
    app.register("hang", timeout, q.body("hang")).unwrap();
    app.register("t", Policy::default(), q.body("t")).unwrap();
    // One runner staffed, so one stuck thread is replaced and two stuck
    // are every thread allowed (the host here is this test).
    q.runners().staff(1);
    let send = |name: &'static str, arg| {
        let app = app.clone();
        async move {
            app.send(name, vec![arg], Map::new(), Options::default())
                .await
                .unwrap()
        }
    };
    let hangs = [send("hang", json!(0)).await, send("hang", json!(1)).await];
    let w = one_slot_worker(&app);
    let mut stuck = Vec::new();
    for h in &hangs {
        until(|| q.len() == 1, "a hanging call").await;
        stuck.extend(q.take(1));
        if stuck.len() == 2 {
            break;
        }
        let err = h.get(Some(Duration::from_secs(5))).await.unwrap_err();
        assert!(err.to_string().contains("TimeoutError"), "{err}");
    }
    // The second hangs; the next run waits on deck for its slot.
    let next = send("t", json!(2)).await;
    until(|| w.on_deck() == 1, "the next run on deck").await;
    let err = hangs[1]
        .get(Some(Duration::from_secs(5)))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("TimeoutError"), "{err}");
    assert!(!q.runners().healthy(), "every runner stuck");
    until(|| w.on_deck() == 0, "its slot went to the run on deck").await;
    for _ in 0..20 {
        assert_eq!(q.len(), 0, "handed to a host with every runner stuck");
        assert_eq!(unacked(&app).await, 1, "acked with every runner stuck");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // A stuck call returns: a runner is free, and the run is handed over.
    q.finish(stuck[0].seq, Ok(json!(null)));
    until(|| q.len() == 1, "the next call").await;
    let c = q.take(1);
    assert_eq!(c[0].args, vec![json!(2)]);
    q.finish(c[0].seq, Ok(json!("b")));
    assert_eq!(got(&next).await, json!("b"));
    w.stop(Duration::from_secs(1));
}
