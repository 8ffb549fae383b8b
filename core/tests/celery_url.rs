//! One Redis URL means the same on both layouts: the Celery layout builds
//! its client from the parsed URL (percent-decoded credentials, ACL users)
//! and never shows a password — percent-encoded or one character long — in
//! an error, a Debug or a Display. Each test starts its own redis-server;
//! skipped without one unless `HEADWAY_REQUIRE_REDIS=1`.

mod support;

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use headway_core::broker::celery::{CeleryBroker, CeleryOptions};
use headway_core::broker::{RedisBroker, RedisOptions};
use headway_core::task::{Broker, Message, SystemClock};
use serde_json::Map;
use support::RedisServer;

fn opts() -> CeleryOptions {
    CeleryOptions {
        consumer: Some("url".into()),
        restore_every: None,
        patience: Duration::from_millis(200),
        ..CeleryOptions::default()
    }
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Asserts no form of the password is in `text`.
fn clean(text: &str, forms: &[&str]) {
    for f in forms {
        assert!(!text.contains(f), "{f:?} shown in: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_never_appears_in_an_error_encoded_or_one_character_long() {
    let port = closed_port();
    for (userinfo, forms) in [
        (
            "app:p%40ss%40word",
            &["p%40ss", "p@ss", "ss%40word", "ss@word"][..],
        ),
        (":s3cr%3At", &["s3cr%3At", "s3cr:t", "cr%3A"][..]),
        ("app:Q", &[":Q@", "Q@127"][..]),
        (":%7C", &["%7C", "|@", ":|"][..]),
    ] {
        let url = format!("redis://{userinfo}@127.0.0.1:{port}/0");
        let e = CeleryBroker::connect(&url, opts(), Arc::new(SystemClock))
            .await
            .unwrap_err();
        let shown = format!("{e} {e:?}");
        assert!(shown.contains("cannot reach"), "{shown}");
        assert!(
            shown.contains(":***@127.0.0.1"),
            "the URL is shown redacted: {shown}"
        );
        clean(&shown, forms);
    }
    // Bad URLs are refused without quoting the userinfo either.
    let e = CeleryBroker::connect(
        "redis://app:p%40ss@h:99999/0",
        opts(),
        Arc::new(SystemClock),
    )
    .await
    .unwrap_err();
    clean(&format!("{e} {e:?}"), &["p%40ss", "p@ss"]);
}

async fn round_trip_celery(url: &str) {
    let b = CeleryBroker::connect(url, opts(), Arc::new(SystemClock))
        .await
        .unwrap();
    let shown = format!("{b:?}");
    assert!(shown.contains("***"), "{shown}");
    b.publish(vec![Message::new(
        "c1".into(),
        "t".into(),
        vec![],
        Map::new(),
        "default".into(),
    )])
    .await
    .unwrap();
    let got = b
        .consume(&["default".to_string()], 1, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(got[0].message.id, "c1");
}

async fn round_trip_redis(url: &str) {
    let b = RedisBroker::connect(url, RedisOptions::default(), Arc::new(SystemClock))
        .await
        .unwrap();
    b.publish(vec![Message::new(
        "r1".into(),
        "t".into(),
        vec![],
        Map::new(),
        "default".into(),
    )])
    .await
    .unwrap();
    let got = b
        .consume(&["default".to_string()], 1, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(got[0].message.id, "r1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_and_a_requirepass_authenticate_on_both_layouts() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    // An ACL user whose password needs percent-encoding in a URL.
    assert_eq!(
        s.cli(&[
            "ACL", "SETUSER", "app", "on", ">p@ss:w", "~*", "&*", "+@all"
        ]),
        "OK"
    );
    let user = format!("redis://app:p%40ss%3Aw@127.0.0.1:{}/0", s.port);
    round_trip_celery(&user).await;
    round_trip_redis(&user).await;
    // Positive control: a wrong password is refused, and not shown.
    let wrong = format!("redis://app:n0pe%40x@127.0.0.1:{}/0", s.port);
    let e = CeleryBroker::connect(&wrong, opts(), Arc::new(SystemClock))
        .await
        .unwrap_err();
    clean(&format!("{e} {e:?}"), &["n0pe", "%40x"]);
    // `requirepass`: the default user's password, a password-only URL.
    let client = redis::Client::open(s.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("r@q")
        .query_async(&mut c)
        .await
        .unwrap();
    let pass = format!("redis://:r%40q@127.0.0.1:{}/1", s.port);
    round_trip_celery(&pass).await;
    round_trip_redis(&pass).await;
    let e = CeleryBroker::connect(&s.url(), opts(), Arc::new(SystemClock))
        .await
        .unwrap_err();
    assert!(
        format!("{e}").to_lowercase().contains("auth"),
        "no password is refused: {e}"
    );
}
