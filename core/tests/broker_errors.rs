//! A broker failure says what kind it is, in both Redis layouts: a Redis
//! nobody answers is a connection failure (try again later), one that
//! refuses every write is a server failure (somebody must look), a wrong
//! password too. The texts stay as they were.

mod support;

use std::net::TcpListener;

use headway_core::broker::{Store, Target};
use headway_core::task::clock::system;
use headway_core::task::{BrokerErrorKind, Policy, Refused, body};
use serde_json::{Map, json};
use support::RedisServer;

/// Both layouts at `url`.
fn targets(url: &str) -> [Target; 2] {
    [
        Target::headway(url, Some("k".into()), Some("kinds:".into()), None).unwrap(),
        Target::celery(url, Some("k".into()), None).unwrap(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_redis_is_a_connection_error() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    for t in targets(&format!("redis://127.0.0.1:{port}/0")) {
        let e = t.connect(&system()).await.unwrap_err();
        assert_eq!(e.broker_kind(), Some(BrokerErrorKind::Connection), "{e}");
        assert_eq!(e.code(), "BROKER");
        assert!(e.to_string().starts_with("broker error: "), "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_out_of_memory_is_a_server_error() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    for t in targets(&s.url()) {
        let clock = system();
        let app = t.connect(&clock).await.unwrap().app(&Store::Broker, clock);
        app.register(
            "echo",
            Policy::default(),
            body(|_, a| async move { Ok(a[0].clone()) }),
        )
        .unwrap();
        // Every write refused: noeviction, and more in use than allowed.
        s.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
        s.cli(&["CONFIG", "SET", "maxmemory", "1"]);
        let got = app
            .send("echo", vec![json!(1)], Map::new(), Default::default())
            .await;
        s.cli(&["CONFIG", "SET", "maxmemory", "0"]);
        let e = got.expect_err("a send to a full Redis is refused");
        assert_eq!(e.broker_kind(), Some(BrokerErrorKind::Server), "{e}");
        assert!(e.to_string().contains("OOM"), "{e}");
        t.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_a_server_error() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    s.cli(&["ACL", "SETUSER", "app", "on", ">right", "~*", "&*", "+@all"]);
    for t in targets(&format!("redis://app:wrong@127.0.0.1:{}/0", s.port)) {
        match t.connect(&system()).await {
            Err(e @ Refused::Broker(_)) => {
                assert_eq!(e.broker_kind(), Some(BrokerErrorKind::Server), "{e}");
                assert!(!e.to_string().contains("wrong"), "{e}");
            }
            other => panic!("{other:?}"),
        }
    }
}
