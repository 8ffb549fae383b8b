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
