//! What a `broker=` argument means: every scheme, the options of each
//! layout, the refusals (each naming the argument, later schemes by name),
//! redaction of every URL shown, and one connection per target and clock.
//! Redis tests start their own redis-server; skipped without one unless
//! `HEADWAY_REQUIRE_REDIS=1`.

mod support;

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use headway_core::broker::{Connected, Layout, Store, Target, TargetError, redact};
use headway_core::task::clock::{same, system};
use headway_core::task::{App, Clock, Policy, Refused, VirtualClock, WorkerConfig, body};
use serde_json::{Map, Value, json};
use support::RedisServer;

const START: i64 = 1_767_225_600_000;

fn invalid(r: Result<Target, TargetError>) -> (TargetError, String) {
    let e = r.unwrap_err();
    let text = e.to_string();
    match Refused::from(e.clone()) {
        Refused::Invalid(m) => assert_eq!(m, text),
        other => panic!("a refused URL is Invalid, not {other:?}"),
    }
    (e, text)
}

/// Runs `name` with `args` on a worker of `app` and answers its result.
async fn run_once(app: &App, name: &str, args: Vec<Value>) -> Result<Value, Refused> {
    let w = app.worker(WorkerConfig::default()).unwrap();
    let w2 = w.clone();
    let running = tokio::spawn(async move { w2.run().await.unwrap() });
    let h = app.send(name, args, Map::new(), Default::default()).await?;
    let r = h.get(Some(Duration::from_secs(10))).await;
    w.stop(Duration::from_secs(1));
    running.await.unwrap();
    r
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn memory_by_url_in_any_case() {
    for u in ["memory://", "memory", "MEMORY://", "Memory"] {
        let t = Target::url("broker", u).unwrap();
        assert!(matches!(t.layout(), Layout::Memory), "{u}");
        assert_eq!(t.layout().name(), "memory");
        assert_eq!(t.shown(), "memory://");
    }
    let (_, m) = invalid(Target::url("broker", "memory://elsewhere"));
    assert!(m.starts_with("invalid `broker`:"), "{m}");
}

#[test]
fn no_broker_named_is_the_memory_broker() {
    assert_eq!(Target::DEFAULT_URL, "memory://");
    let t = Target::url_or_default("broker", None).unwrap();
    assert!(matches!(t.layout(), Layout::Memory));
    let given = Target::url_or_default("broker", Some("redis://127.0.0.1:1/0")).unwrap();
    assert_eq!(given.layout().name(), "headway");
    let (_, m) = invalid(Target::url_or_default("broker", Some("nope://")));
    assert!(m.starts_with("invalid `broker`:"), "{m}");
}

#[test]
fn redis_urls_are_headways_layout_with_its_defaults() {
    for (u, shown) in [
        ("redis://localhost", "redis://localhost:6379/0"),
        ("rediss://h:7000/3", "rediss://h:7000/3"),
        ("redis://user:pw@h/2", "redis://user:***@h:6379/2"),
    ] {
        let t = Target::url("broker", u).unwrap();
        assert_eq!(t.shown(), shown);
        let Layout::Headway(o) = t.layout() else {
            panic!("{u} is headway's layout");
        };
        assert_eq!(o.prefix, "headway:");
        assert_eq!(o.lease, Duration::from_secs(30));
        assert_eq!(o.recover_every, Some(o.lease));
        assert_eq!(o.consumer, None);
        assert_eq!(t.layout().name(), "headway");
    }
    // A scheme in capitals is seen as Redis, and refused by the URL's rules.
    let (e, m) = invalid(Target::url("broker", "REDIS://h"));
    assert!(matches!(e, TargetError::Url(_)), "{e:?}");
    assert!(m.starts_with("invalid `url`"), "{m}");
}

#[test]
fn headway_options() {
    let t = Target::headway(
        "redis://h/1",
        Some("me".into()),
        Some("x:".into()),
        Some(1500),
    )
    .unwrap();
    let Layout::Headway(o) = t.layout() else {
        panic!("headway's layout")
    };
    assert_eq!(o.consumer.as_deref(), Some("me"));
    assert_eq!(o.prefix, "x:");
    assert_eq!(o.lease, Duration::from_millis(1500));
    assert_eq!(o.recover_every, Some(Duration::from_millis(1500)));
    for bad in [0, -1] {
        let (e, m) = invalid(Target::headway("redis://h", None, None, Some(bad)));
        assert_eq!(
            e,
            TargetError::Invalid {
                arg: "lease",
                why: "must be positive"
            }
        );
        assert_eq!(m, "invalid `lease`: must be positive");
    }
    let (_, m) = invalid(Target::headway("http://nope", None, None, None));
    assert!(m.starts_with("invalid `url`"), "{m}");
    let (_, m) = invalid(Target::headway("memory://", None, None, None));
    assert!(m.starts_with("invalid `url`"), "{m}");
}

#[test]
fn celery_options() {
    let t = Target::celery("redis://h/4", Some("w1".into()), Some(60_000)).unwrap();
    assert_eq!(t.layout().name(), "celery");
    assert_eq!(t.shown(), "redis://h:6379/4");
    let Layout::Celery(o) = t.layout() else {
        panic!("Celery's layout")
    };
    assert_eq!(o.consumer.as_deref(), Some("w1"));
    assert_eq!(o.visibility_timeout, Duration::from_secs(60));
    let Layout::Celery(d) = Target::celery("redis://h", None, None)
        .unwrap()
        .layout()
        .clone()
    else {
        panic!("Celery's layout")
    };
    assert_eq!(d.visibility_timeout, Duration::from_secs(3600));
    let (_, m) = invalid(Target::celery("redis://h", None, Some(-1)));
    assert_eq!(m, "invalid `visibility_timeout`: must be positive");
    let (_, m) = invalid(Target::celery("redis://:pw@h:0", None, None));
    assert!(m.starts_with("invalid `url`") && !m.contains("pw"), "{m}");
}

#[test]
fn amqp_schemes_are_brokers_and_others_are_refused_naming_what_is_accepted() {
    // RabbitMQ's schemes are brokers: parsed, the password redacted.
    for (u, shown) in [
        ("amqp://u:secret@h/", "amqp://u:***@h:5672/%2F"),
        (
            "pyamqp://guest@localhost//",
            "pyamqp://guest:***@localhost:5672/%2F",
        ),
        ("AMQPS://u:secret@h:5671/vh", "amqps://u:***@h:5671/vh"),
    ] {
        let t = Target::url("broker", u).unwrap();
        assert_eq!(t.layout().name(), "amqp");
        assert_eq!(t.shown(), shown);
        assert!(!format!("{t:?}").contains("secret"));
    }
    // A scheme that is no broker at all is refused, its password hidden.
    let (e, m) = invalid(Target::url("broker", "kafka://u:secret@h/"));
    assert!(matches!(e, TargetError::NotBroker { .. }), "{e:?}");
    assert!(m.contains("amqp://") && !m.contains("secret"), "{m}");
}

#[test]
fn sentinel_urls_name_the_layouts() {
    // headway's layout through Sentinel, from a bare URL or by name.
    let t = Target::url(
        "broker",
        "redis+sentinel://:pw@s1,s2:26380/mymaster/1?wait=1",
    )
    .unwrap();
    assert!(matches!(t.layout(), Layout::Headway(_)));
    assert_eq!(
        t.shown(),
        "redis+sentinel://:***@s1:26379,s2:26380/mymaster/1?wait=1&wait_timeout=1000"
    );
    assert!(Target::url("broker", "rediss+sentinel://s1/m").is_ok());
    // And on a Cluster, named by its seeds.
    let t = Target::url("broker", "redis+cluster://:pw@a:7000,b:7001/").unwrap();
    assert!(matches!(t.layout(), Layout::Headway(_)));
    assert_eq!(t.shown(), "redis+cluster://:***@a:7000,b:7001/");
    // Celery's Sentinel URL needs the master's name, given apart.
    let (_, m) = invalid(Target::url("broker", "sentinel://s1:26379"));
    assert!(
        m.contains("master_name") && m.starts_with("invalid `broker`"),
        "{m}"
    );
    let t = Target::celery_on(
        "sentinel://:pw@s1:26379/2;sentinel://s2:26380",
        Some("mymaster"),
        None,
        None,
    )
    .unwrap();
    assert!(matches!(t.layout(), Layout::Celery(_)));
    assert_eq!(
        t.shown(),
        "redis+sentinel://:***@s1:26379,s2:26380/mymaster/2"
    );
    let (_, m) = invalid(Target::celery_on("sentinel://s1", None, None, None));
    assert!(m.starts_with("invalid `master_name`"), "{m}");
    // Bad values of the new URL parts are refused, naming them.
    let (_, m) = invalid(Target::headway(
        "redis+sentinel://s1/m?wait=x",
        None,
        None,
        None,
    ));
    assert!(m.contains("`wait` must be"), "{m}");
    let (_, m) = invalid(Target::headway("redis+sentinel://s1,s2", None, None, None));
    assert!(m.contains("names the master"), "{m}");
}

#[test]
fn anything_else_is_not_a_broker_and_names_the_argument() {
    for (arg, u) in [
        ("broker", "nonsense"),
        ("backend", "http://u:secret@h/"),
        ("broker", ""),
        ("backend", "kafka://h"),
    ] {
        let (e, m) = invalid(Target::url(arg, u));
        assert!(matches!(e, TargetError::NotBroker { .. }), "{e:?}");
        assert!(m.starts_with(&format!("invalid `{arg}`:")), "{m}");
        assert!(
            m.ends_with("is not memory://, redis://, rediss:// or amqp://"),
            "{m}"
        );
        assert!(!m.contains("secret"), "{m}");
    }
}

#[test]
fn redaction() {
    for (u, shown) in [
        ("amqp://u:secret@h/", "amqp://u:***@h/"),
        ("redis://:secret@h:1/0", "redis://:***@h:1/0"),
        ("redis://secret@h", "redis://***@h"),
        ("redis://u:p@ss@h", "redis://u:***@h"),
        ("u:secret@h", "u:***@h"),
        ("secret@h", "***@h"),
        ("redis://h:1/0", "redis://h:1/0"),
        ("memory://", "memory://"),
        ("", ""),
    ] {
        assert_eq!(redact(u), shown, "{u}");
    }
    // Debug shows the layout and the URL redacted, never the password.
    let t = Target::headway("redis://u:hunter2@h/0", None, None, None).unwrap();
    let d = format!("{t:?}");
    assert!(
        d.contains("headway") && d.contains("u:***@h") && !d.contains("hunter2"),
        "{d}"
    );
    let t = Target::celery("redis://:hunter2@h/0", None, None).unwrap();
    let d = format!("{t:?}");
    assert!(d.contains("celery") && !d.contains("hunter2"), "{d}");
}

#[tokio::test]
async fn memory_connects_once_per_clock_and_refuses_another() {
    let clock: Arc<dyn Clock> = VirtualClock::new(START);
    let t = Target::memory();
    assert!(t.connection().is_none());
    assert_eq!(
        t.close().await.unwrap(),
        0,
        "closing before connecting is nothing"
    );
    let a = t.connect(&clock).await.unwrap();
    let b = t.connect(&clock).await.unwrap();
    let (Connected::Memory(a), Connected::Memory(b)) = (a, b) else {
        panic!("memory")
    };
    assert!(Arc::ptr_eq(&a, &b), "one connection per clock");
    // A clone shares the connection.
    let Some(Connected::Memory(c)) = t.clone().connection() else {
        panic!("connected")
    };
    assert!(Arc::ptr_eq(&a, &c));
    match t.connect(&system()).await {
        Err(Refused::Invalid(m)) => assert_eq!(
            m,
            "this RedisBroker is already connected on another clock; build one per App"
        ),
        other => panic!("another clock is refused: {other:?}"),
    }
    // Two virtual clocks at one instant are still two clocks.
    let twin: Arc<dyn Clock> = VirtualClock::new(START);
    assert!(!same(&clock, &twin));
    assert!(t.connect(&twin).await.is_err());
    // Without an app, the clock it serves.
    assert!(t.connect_any().await.is_ok());
    assert_eq!(t.recover().await.unwrap(), 0);
    // A fresh target from the same URL is a fresh broker.
    let Connected::Memory(d) = Target::url("broker", "memory://")
        .unwrap()
        .connect(&clock)
        .await
        .unwrap()
    else {
        panic!("memory")
    };
    assert!(!Arc::ptr_eq(&a, &d));
}

#[tokio::test]
async fn an_unconnected_target_serves_the_system_clock() {
    let t = Target::memory();
    t.connect_any().await.unwrap();
    assert!(t.connect(&system()).await.is_ok());
    let v: Arc<dyn Clock> = VirtualClock::new(START);
    assert!(t.connect(&v).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_where_results_go() {
    let clock: Arc<dyn Clock> = VirtualClock::new(START);
    let c = Target::memory().connect(&clock).await.unwrap();
    let other = Target::memory().connect(&clock).await.unwrap();
    assert!(c.seams_with(&Store::Broker).backend.is_some());
    let none = c.seams_with(&Store::Nowhere);
    assert!(none.backend.is_none() && none.counter.is_some());
    let Connected::Memory(o) = &other else {
        panic!("memory")
    };
    let elsewhere = c.seams_with(&Store::In(other.clone()));
    let theirs: Arc<dyn headway_core::task::Backend> = o.clone();
    assert!(std::ptr::addr_eq(
        Arc::as_ptr(elsewhere.backend.as_ref().unwrap()),
        Arc::as_ptr(&theirs)
    ));

    // An app on it runs and keeps its result where it was told.
    let app = c.app(&Store::Broker, clock.clone());
    app.register(
        "add",
        Policy::default(),
        body(|_, a| async move { Ok(json!(a[0].as_i64().unwrap() + a[1].as_i64().unwrap())) }),
    )
    .unwrap();
    assert_eq!(
        run_once(&app, "add", vec![json!(2), json!(3)])
            .await
            .unwrap(),
        json!(5)
    );
    let app = c.app(&Store::Nowhere, clock);
    app.register(
        "add",
        Policy::default(),
        body(|_, _| async { Ok(json!(0)) }),
    )
    .unwrap();
    assert!(matches!(
        run_once(&app, "add", vec![]).await,
        Err(Refused::Missing(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_is_a_url_to_an_app() {
    assert!(
        headway_core::broker::target::open("memory://", None)
            .await
            .is_ok()
    );
    match headway_core::broker::target::open("sentinel://u:secret@h/", None).await {
        Err(Refused::Invalid(m)) => {
            assert!(
                m.contains("broker") && m.contains("sentinel") && !m.contains("secret"),
                "{m}"
            );
        }
        _ => panic!("sentinel is not a broker here"),
    }
    assert!(
        headway_core::broker::target::open("nonsense", None)
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_redis_is_a_broker_error_without_the_password() {
    let url = format!("redis://:hunter2@127.0.0.1:{}/0", closed_port());
    for t in [
        Target::url("broker", &url).unwrap(),
        Target::celery(&url, None, None).unwrap(),
    ] {
        match t.connect(&system()).await {
            Err(Refused::Broker(m)) => assert!(!m.text.contains("hunter2"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(t.connection().is_none(), "a failed connect is not kept");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_connects_once_per_clock() {
    let Some(s) = RedisServer::start() else {
        return;
    };
    let clock: Arc<dyn Clock> = VirtualClock::new(START);
    for t in [
        Target::headway(&s.url(), Some("a".into()), Some("tg:".into()), None).unwrap(),
        Target::celery(&s.url(), Some("a".into()), None).unwrap(),
    ] {
        let first = t.connect(&clock).await.unwrap();
        let again = t.connect(&clock).await.unwrap();
        match (&first, &again) {
            (Connected::Headway(a), Connected::Headway(b)) => assert!(Arc::ptr_eq(a, b)),
            (Connected::Celery(a), Connected::Celery(b)) => assert!(Arc::ptr_eq(a, b)),
            other => panic!("{other:?}"),
        }
        assert!(t.connect(&system()).await.is_err(), "one clock per target");
        assert_eq!(t.recover().await.unwrap(), 0);
        let app = first.app(&Store::Broker, clock.clone());
        app.register(
            "echo",
            Policy::default(),
            body(|_, a| async move { Ok(a[0].clone()) }),
        )
        .unwrap();
        assert_eq!(
            run_once(&app, "echo", vec![json!("hi")]).await.unwrap(),
            json!("hi")
        );
        t.close().await.unwrap();
    }
}
