//! The shared Redis plumbing (`broker::link`) against a real redis-server:
//! a patient call waits through a restart, an impatient one does not, and
//! waiters hear their channels — a pattern subscription also after Redis
//! came back, with nobody waiting to make it again.
//!
//! Skipped without redis-server unless `HEADWAY_REQUIRE_REDIS=1`.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use headway_core::broker::RedisUrl;
use headway_core::broker::link::{Dialer, Handler, Link, LinkSetup, Waiters};
use headway_core::flow::{Backoff, Jitter, MILLI};
use support::RedisServer;

fn link(url: &str, patience: Duration) -> Link {
    let parsed = RedisUrl::parse(url).unwrap();
    Link::new(LinkSetup {
        dialer: Arc::new(Dialer::direct(
            redis::Client::open(url).unwrap(),
            parsed.clone(),
        )),
        url: parsed,
        connect_timeout: Duration::from_secs(5),
        response_timeout: Duration::from_secs(30),
        backoff: Backoff::new(50 * MILLI, 2.0, 1_000 * MILLI, i32::MAX, Jitter::Rigid).unwrap(),
        seed: "test".into(),
        patience,
        label: "headway test link".into(),
    })
}

async fn set(l: &Link, patient: bool, v: &str) -> Result<(), headway_core::task::Refused> {
    l.patiently(patient, |mut c| async move {
        redis::cmd("SET")
            .arg("k")
            .arg(v)
            .query_async::<()>(&mut c)
            .await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patient_call_waits_through_a_restart_and_an_impatient_one_does_not() {
    let Some(mut s) = RedisServer::start() else {
        return;
    };
    let l = link(&s.url(), Duration::from_secs(10));
    set(&l, true, "1").await.unwrap();
    let first = l.epoch();
    s.kill();
    let err = set(&l, false, "2").await.unwrap_err();
    assert!(err.to_string().contains("127.0.0.1"), "{err}");
    let back = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        s.restart();
        s
    });
    set(&l, true, "3").await.unwrap();
    let s = back.join().unwrap();
    assert_eq!(s.cli(&["GET", "k"]), "3");
    assert!(l.epoch() > first, "a new connection after the restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_with_what_its_channel_carried() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let url = s.url();
    let w: Arc<Waiters<String>> = Waiters::new(
        redis::Client::open(url.as_str()).unwrap(),
        RedisUrl::parse(&url).unwrap(),
        Box::new(|b| Some(String::from_utf8_lossy(b).into_owned())),
    );
    let waiting = w.join("ch");
    {
        let woken = waiting.notify().notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        w.subscribe("ch").await.unwrap();
        assert_eq!(s.cli(&["PUBLISH", "ch", "hello"]), "1");
        tokio::time::timeout(Duration::from_secs(5), woken)
            .await
            .unwrap();
    }
    assert_eq!(w.got("ch").as_deref(), Some("hello"));
    // The last waiter out unsubscribes.
    drop(waiting);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while s.cli(&["PUBSUB", "NUMSUB", "ch"]) != "ch\n0" {
        assert!(std::time::Instant::now() < deadline, "still subscribed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_subscription_is_made_again_after_redis_comes_back() {
    let Some(mut s) = RedisServer::start() else {
        return;
    };
    let url = s.url();
    let w: Arc<Waiters<()>> = Waiters::new(
        redis::Client::open(url.as_str()).unwrap(),
        RedisUrl::parse(&url).unwrap(),
        Box::new(|_| None),
    );
    let heard: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let h = heard.clone();
    let handler: Handler = Arc::new(move |ch: &str, payload: &[u8]| {
        h.lock().unwrap().push((
            ch.to_string(),
            String::from_utf8_lossy(payload).into_owned(),
        ));
    });
    w.psubscribe("news.*", handler).await.unwrap();
    assert_eq!(s.cli(&["PUBLISH", "news.a", "one"]), "1");
    assert_eq!(s.cli(&["PUBLISH", "other", "no"]), "0");

    s.restart();
    // Nobody waits and nobody calls: the waiters reconnect by themselves
    // and subscribe the pattern again.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while s.cli(&["PUBLISH", "news.b", "two"]) != "1" {
        assert!(
            std::time::Instant::now() < deadline,
            "the pattern was not subscribed again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let got = heard.lock().unwrap().clone();
        if got.len() >= 2 {
            assert_eq!(
                got,
                vec![
                    ("news.a".to_string(), "one".to_string()),
                    ("news.b".to_string(), "two".to_string())
                ]
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "heard only {got:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

thread_local! {
    /// How often a caller on this thread waited inside `counting`: per
    /// thread, so tests running beside each other do not count each
    /// other's calls.
    static RELEASED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// `release` for `poll_first`: counts how often a caller waited here.
fn counting(wait: &mut dyn FnMut()) {
    RELEASED.set(RELEASED.get() + 1);
    wait()
}

/// One patient `SET` polled once the way a binding's blocking call starts:
/// `Ready` when it was answered on this thread.
fn first_poll(
    l: &Arc<Link>,
    v: &str,
    release: Option<headway_core::runtime::Release>,
) -> std::task::Poll<Result<(), headway_core::task::Refused>> {
    let rt = headway_core::runtime::runtime().unwrap();
    let mut fut = Box::pin(set(l, true, v));
    let first = headway_core::runtime::poll_first(rt, fut.as_mut(), release);
    if first.is_pending() {
        // Finish it on the shared runtime, as the binding does.
        rt.block_on(fut).unwrap();
    }
    first
}

#[test]
fn a_blocking_caller_makes_its_round_trip_on_its_own_thread() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let l = Arc::new(link(&s.url(), Duration::from_secs(5)));
    // The control: without `release` (the Node event loop) the call takes
    // the shared link — no connection of this thread's own, no wait here.
    // (Whether its first poll is `Pending` is a race with the runtime's
    // threads on a loaded machine, so that is not what is checked.)
    let _ = first_poll(&l, "shared", None);
    assert_eq!(l.locals(), 0);
    assert_eq!(RELEASED.get(), 0);
    assert_eq!(s.cli(&["GET", "k"]), "shared");
    // With it, on a thread in no runtime: answered within the first poll,
    // over this thread's own connection, waiting inside `release`.
    let l2 = l.clone();
    std::thread::spawn(move || {
        assert!(matches!(
            first_poll(&l2, "here", Some(counting)),
            std::task::Poll::Ready(Ok(()))
        ));
        assert!(matches!(
            first_poll(&l2, "again", Some(counting)),
            std::task::Poll::Ready(Ok(()))
        ));
        assert_eq!(l2.locals(), 1, "one connection per thread, kept");
        assert_eq!(RELEASED.get(), 2, "each call waited here");
    })
    .join()
    .unwrap();
    assert_eq!(s.cli(&["GET", "k"]), "again");
    // The thread ended: its connection went with it.
    assert_eq!(l.locals(), 0);
    // A runtime thread never blocks on a round trip of its own, even when
    // handed a `release`.
    let rt = headway_core::runtime::runtime().unwrap();
    let l3 = l.clone();
    let waited = rt.block_on(async move {
        tokio::spawn(async move {
            let before = RELEASED.get();
            let _ = first_poll_inside(&l3);
            RELEASED.get() - before
        })
        .await
        .unwrap()
    });
    assert_eq!(waited, 0);
    assert_eq!(l.locals(), 0);
}

/// A patient `SET` that first waits 5 ms (so its first poll is `Pending`
/// and its round trip comes later), on a thread of its own: whether that
/// round trip was made over the thread's own connection.
fn later_round_trip(l: &Arc<Link>, v: &'static str, wait_here: bool) -> bool {
    let l = l.clone();
    std::thread::spawn(move || {
        let rt = headway_core::runtime::runtime().unwrap();
        let mut fut = Box::pin(async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            set(&l, true, v).await
        });
        let first = headway_core::runtime::poll_first(rt, fut.as_mut(), Some(counting));
        assert!(
            first.is_pending(),
            "the sleep is not over at the first poll"
        );
        if wait_here {
            let got = headway_core::runtime::wait_here(rt, fut.as_mut(), Duration::from_secs(5));
            assert!(matches!(got, Some(Ok(()))));
        } else {
            rt.block_on(fut).unwrap();
        }
        l.locals() == 1
    })
    .join()
    .unwrap()
}

#[test]
fn a_blocking_callers_round_trips_after_its_first_poll_are_made_on_its_thread_too() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let l = Arc::new(link(&s.url(), Duration::from_secs(5)));
    // The control: the runtime's `block_on` finishes it on the shared link.
    assert!(!later_round_trip(&l, "shared", false));
    assert_eq!(s.cli(&["GET", "k"]), "shared");
    // `wait_here`: over the waiting thread's own connection.
    assert!(later_round_trip(&l, "here", true));
    assert_eq!(s.cli(&["GET", "k"]), "here");
    assert_eq!(l.locals(), 0, "the thread's connection ended with it");
}

fn first_poll_inside(l: &Arc<Link>) -> std::task::Poll<Result<(), headway_core::task::Refused>> {
    let rt = headway_core::runtime::runtime().unwrap();
    let mut fut = Box::pin(set(l, true, "inside"));
    headway_core::runtime::poll_first(rt, fut.as_mut(), Some(counting))
}

#[test]
fn a_blocking_callers_errors_are_the_shared_links_and_an_outage_falls_back_to_it() {
    let Some(mut s) = RedisServer::start() else {
        return;
    };
    let l = Arc::new(link(&s.url(), Duration::from_secs(10)));
    let rt = headway_core::runtime::runtime().unwrap();
    let l2 = l.clone();
    let handle = std::thread::spawn(move || {
        // A script error is the answer, at once, here.
        let mut fut = Box::pin(l2.patiently(true, |mut c| async move {
            redis::cmd("EVAL")
                .arg("return redis.error_reply('boom')")
                .arg(0)
                .query_async::<()>(&mut c)
                .await
        }));
        match headway_core::runtime::poll_first(rt, fut.as_mut(), Some(counting)) {
            std::task::Poll::Ready(Err(e)) => assert!(e.to_string().contains("boom"), "{e}"),
            other => panic!(
                "expected the script's error here, got {:?}",
                other.is_ready()
            ),
        }
        drop(fut);
        assert!(first_poll(&l2, "before", Some(counting)).is_ready());
    });
    handle.join().unwrap();
    // Redis goes away and comes back while a blocking caller waits: its
    // own connection is dead, so the call falls back to the shared link's
    // patient path, which answers once Redis is back.
    let (tx, rx) = std::sync::mpsc::channel();
    let l3 = l.clone();
    let caller = std::thread::spawn(move || {
        // The thread's own connection is made, then Redis dies under it.
        assert!(first_poll(&l3, "one", Some(counting)).is_ready());
        tx.send(()).unwrap();
        std::thread::park();
        first_poll(&l3, "after", Some(counting))
    });
    rx.recv().unwrap();
    s.kill();
    let back = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        s.restart();
        s
    });
    caller.thread().unpark();
    let first = caller.join().unwrap();
    assert!(
        first.is_pending(),
        "the dead connection was not used for the answer"
    );
    let s = back.join().unwrap();
    assert_eq!(s.cli(&["GET", "k"]), "after");
}

static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn at_most_max_local_threads_hold_a_connection_of_their_own() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let l = Arc::new(link(&s.url(), Duration::from_secs(5)));
    let n = headway_core::broker::link::MAX_LOCAL + 3;
    let gate = Arc::new(std::sync::Barrier::new(n + 1));
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let l = l.clone();
            let gate = gate.clone();
            std::thread::spawn(move || {
                // One call at a time (a crowd of calls at once would take
                // the shared link: the next test), each thread keeping its
                // connection.
                let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
                // Answered over a connection of its own: it waited here.
                // (A shared-link answer may also be ready at once by a race
                // with the runtime's threads, so readiness is not the test.)
                let ready = first_poll(&l, &format!("t{i}"), Some(counting)).is_ready();
                drop(turn);
                let here = RELEASED.get() == 1;
                assert!(ready || !here, "waited here but not answered");
                // Stay alive (and keep the connection) until all have called.
                gate.wait();
                here
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while l.locals() < headway_core::broker::link::MAX_LOCAL {
        assert!(
            std::time::Instant::now() < deadline,
            "only {} local",
            l.locals()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    gate.wait();
    let here = threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .filter(|h| *h)
        .count();
    assert_eq!(here, headway_core::broker::link::MAX_LOCAL);
    assert_eq!(l.locals(), 0);
}

static CROWDED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static CROWD_GO: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `release` that holds its thread inside its own round trip until
/// `CROWD_GO`, counting the threads so held.
fn held(wait: &mut dyn FnMut()) {
    RELEASED.set(RELEASED.get() + 1);
    CROWDED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    while !CROWD_GO.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
    wait()
}

#[test]
fn a_crowd_of_threads_in_round_trips_of_their_own_sends_the_next_call_to_the_shared_link() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let l = Arc::new(link(&s.url(), Duration::from_secs(5)));
    let crowd = headway_core::broker::link::CROWD;
    let held_threads: Vec<_> = (0..crowd)
        .map(|i| {
            let l = l.clone();
            std::thread::spawn(move || {
                let first = first_poll(&l, &format!("held{i}"), Some(held));
                (first.is_ready(), RELEASED.get())
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while CROWDED.load(std::sync::atomic::Ordering::SeqCst) < crowd {
        assert!(
            std::time::Instant::now() < deadline,
            "the crowd never formed"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // The crowd is in its round trips: the next call does not wait here,
    // and is answered all the same (by the shared link).
    let l2 = l.clone();
    let waited = std::thread::spawn(move || {
        let _ = first_poll(&l2, "crowded", Some(counting));
        RELEASED.get()
    })
    .join()
    .unwrap();
    assert_eq!(
        waited, 0,
        "a call past the crowd waited on a connection of its own"
    );
    assert_eq!(s.cli(&["GET", "k"]), "crowded");
    // Control: the crowd itself was answered here.
    CROWD_GO.store(true, std::sync::atomic::Ordering::SeqCst);
    for t in held_threads {
        assert_eq!(
            t.join().unwrap(),
            (true, 1),
            "a held thread was not answered here"
        );
    }
    // The crowd gone, a call waits here again.
    let l3 = l.clone();
    let (ready, waited) = std::thread::spawn(move || {
        let first = first_poll(&l3, "alone", Some(counting));
        (first.is_ready(), RELEASED.get())
    })
    .join()
    .unwrap();
    assert!(
        ready && waited == 1,
        "a lone call after the crowd did not wait here"
    );
    assert_eq!(s.cli(&["GET", "k"]), "alone");
}
