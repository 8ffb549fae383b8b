//! Dead letters on Celery's layout stay small and findable: a quarantined
//! message keeps a prefix, its size and the reason — never the whole
//! payload — and a re-queue by id matches ids with `"` and `\` in them.
//! Each test starts its own redis-server; skipped without one unless
//! `HEADWAY_REQUIRE_REDIS=1`.

mod support;

use std::sync::Arc;
use std::time::Duration;

use headway_core::broker::celery::{CeleryBroker, CeleryOptions};
use headway_core::task::dead::DEAD_PREFIX_BYTES;
use headway_core::task::{Broker, Inspector, SystemClock};
use support::RedisServer;

fn opts() -> CeleryOptions {
    CeleryOptions {
        consumer: Some("dead".into()),
        restore_every: None,
        ..CeleryOptions::default()
    }
}

fn used_memory(s: &RedisServer) -> i64 {
    let info = s.cli(&["INFO", "memory"]);
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("INFO memory has used_memory")
}

async fn quarantine_a_50_mb_message(blocking: bool) {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let b = CeleryBroker::connect(&s.url(), opts(), Arc::new(SystemClock))
        .await
        .unwrap();
    let q = vec!["default".to_string()];
    let before = used_memory(&s);
    let big = {
        let mut v = br#"{"body": ""#.to_vec();
        v.resize(50 * 1024 * 1024, b'A');
        v
    };
    let size = big.len();
    if blocking {
        // The BRPOP path: the consumer waits on an empty queue first.
        let b2 = b.clone();
        let q2 = q.clone();
        let waiting =
            tokio::spawn(async move { b2.consume(&q2, 1, Duration::from_secs(5)).await.unwrap() });
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !s.cli(&["CLIENT", "LIST"]).contains("cmd=brpop") {
            assert!(
                std::time::Instant::now() < deadline,
                "the consumer never blocked"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        b.push_raw("default", &big).await.unwrap();
        drop(big);
        assert!(waiting.await.unwrap().is_empty());
    } else {
        b.push_raw("default", &big).await.unwrap();
        drop(big);
        assert!(b.consume(&q, 10, Duration::ZERO).await.unwrap().is_empty());
    }
    // Positive control: it is a dead letter, listed with its size (in the
    // reason) and a prefix of its bytes.
    assert_eq!(s.cli(&["LLEN", "celery"]), "0");
    assert_eq!(b.dead_count("default").await.unwrap(), 1);
    let d = b.dead_letters("default", 10).await.unwrap().remove(0);
    assert!(
        d.reason.starts_with(&format!("too large: {size} bytes")),
        "{}",
        d.reason
    );
    assert_eq!(d.raw.len(), DEAD_PREFIX_BYTES);
    assert!(d.raw.starts_with(br#"{"body": "AAAA"#));
    let el = s.cli(&["LINDEX", "headway.celery.dead:celery", "0"]);
    assert!(el.contains(&format!("\"size\":{size}")), "{}", &el[..200]);
    // A re-queue cannot put back part of a message: it stays.
    assert_eq!(b.requeue_dead("default", &[], 10).await.unwrap(), 0);
    assert_eq!(b.dead_count("default").await.unwrap(), 1);
    // The 50 MB crossed a client connection: Redis's cron gives its query
    // and Lua buffers back within a few seconds, so the growth is read until
    // it settles (a dead letter that kept the payload never would).
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let grown = used_memory(&s) - before;
        if grown < 2 * 1024 * 1024 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "quarantining {size} bytes grew Redis by {grown} bytes"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_50_mb_message_claimed_by_the_script_is_kept_as_a_prefix() {
    quarantine_a_50_mb_message(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_50_mb_message_taken_by_brpop_is_kept_as_a_prefix() {
    quarantine_a_50_mb_message(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_whose_id_has_quotes_and_backslashes_is_requeued_by_id() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let b = CeleryBroker::connect(&s.url(), opts(), Arc::new(SystemClock))
        .await
        .unwrap();
    let odd = r#"a"b\c"#;
    // A content type headway never reads, with an id it can read: a dead
    // letter whose header names the id.
    let env = |id: &str| {
        let id = serde_json::to_string(id).unwrap();
        format!(
            r#"{{"body": "", "content-encoding": "binary", "content-type": "application/x-python-serialize", "headers": {{"task": "t", "id": {id}}}, "properties": {{"body_encoding": "base64", "delivery_info": {{"exchange": "", "routing_key": "celery"}}, "priority": 0}}}}"#
        )
    };
    b.push_raw("default", env(odd).as_bytes()).await.unwrap();
    b.push_raw("default", env("plain").as_bytes())
        .await
        .unwrap();
    b.consume(&["default".to_string()], 10, Duration::ZERO)
        .await
        .unwrap();
    let dead = b.dead_letters("default", 10).await.unwrap();
    let mut ids: Vec<Option<&str>> = dead.iter().map(|d| d.id.as_deref()).collect();
    ids.sort();
    assert_eq!(ids, [Some(odd), Some("plain")]);
    // By id: only that one goes back, as its bytes.
    assert_eq!(
        b.requeue_dead("default", &[odd.to_string()], 10)
            .await
            .unwrap(),
        1
    );
    assert_eq!(s.cli(&["LLEN", "celery"]), "1");
    let back: serde_json::Value = serde_json::from_str(&s.cli(&["LINDEX", "celery", "0"])).unwrap();
    assert_eq!(back["headers"]["id"], serde_json::json!(odd));
    let left = b.dead_letters("default", 10).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].id.as_deref(), Some("plain"));
    // Positive control for the match: the plain id goes back by id too.
    assert_eq!(
        b.requeue_dead("default", &["plain".to_string()], 10)
            .await
            .unwrap(),
        1
    );
    assert_eq!(b.dead_count("default").await.unwrap(), 0);
}

/// A message over the size cap is listed with the size it had on the queue,
/// not the length of the prefix kept (both paths: the claim script's and
/// the BRPOP's), so `truncated()` tells the letter cannot be re-queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_cap_dead_letter_is_listed_with_its_real_size() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let b = CeleryBroker::connect(
        &s.url(),
        CeleryOptions {
            max_message_bytes: DEAD_PREFIX_BYTES + 100,
            ..opts()
        },
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    let q = vec!["default".to_string()];
    let size = 3 * DEAD_PREFIX_BYTES;
    let mut big = br#"{"body": ""#.to_vec();
    big.resize(size, b'B');
    // The claim script's path.
    b.push_raw("default", &big).await.unwrap();
    assert!(b.consume(&q, 10, Duration::ZERO).await.unwrap().is_empty());
    // The BRPOP's: the consumer waits on an empty queue first.
    let (b2, q2) = (b.clone(), q.clone());
    let waiting =
        tokio::spawn(async move { b2.consume(&q2, 1, Duration::from_secs(5)).await.unwrap() });
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !s.cli(&["CLIENT", "LIST"]).contains("cmd=brpop") {
        assert!(std::time::Instant::now() < deadline, "never blocked");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    b.push_raw("default", &big).await.unwrap();
    assert!(waiting.await.unwrap().is_empty());
    let letters = b.dead_letters("default", 10).await.unwrap();
    assert_eq!(letters.len(), 2);
    for d in letters {
        assert_eq!(d.raw.len(), DEAD_PREFIX_BYTES, "{}", d.reason);
        assert_eq!(d.size, size, "{}", d.reason);
        assert!(d.truncated());
    }
}
