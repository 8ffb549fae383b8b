//! The process pool with real child processes: this test binary starts
//! itself again as the child (`child_main` below, chosen by an environment
//! variable), so the children run Rust bodies through the same wire and
//! supervision a Python or Node child does.
//!
//! What is checked: runs land in distinct children; a hard time limit kills
//! a spinning child and fails the run with `TimeLimitExceeded` while the next
//! run succeeds in a new child; a child that exits mid-run fails that run with
//! `WorkerLostError` (or puts it back with `acks_late` and
//! `reject_on_worker_lost`); children are recycled after
//! `max_tasks_per_child` runs; a terminate stops a run in its child; a child
//! that cannot start makes the worker's `run` fail with the reason; a hard
//! limit on the threads pool is refused.

mod support;

use std::time::{Duration, Instant};

use headway_core::task::{
    App, ChildCommand, Failure, Host, Options, Policy, Pool, ProcSpec, Refused, Worker,
    WorkerConfig, WorkerSpec, body,
};
use serde_json::{Map, Value, json};

const CHILD: &str = "HEADWAY_PROCS_TEST_CHILD";

/// The bodies, registered alike in the parent (for their policies) and in
/// each child (to run them).
fn register(app: &App, policy: &dyn Fn(&str) -> Policy) {
    let reg = |name: &str, b| app.register(name, policy(name), b).unwrap();
    reg("pid", body(|_, _| async { Ok(json!(std::process::id())) }));
    reg(
        "spin",
        body(|_, _| async {
            #[allow(clippy::empty_loop)]
            loop {}
        }),
    );
    reg(
        "sleep",
        body(|_, args: Vec<Value>| async move {
            let ms = args.first().and_then(Value::as_u64).unwrap_or(0);
            std::thread::sleep(Duration::from_millis(ms));
            Ok(json!(std::process::id()))
        }),
    );
    reg(
        "exit",
        body(|_, _| async {
            std::process::exit(3);
        }),
    );
    // Exits the first time (a marker file says it did), returns after.
    reg(
        "exit_once",
        body(|_, args: Vec<Value>| async move {
            let marker = args[0].as_str().unwrap().to_string();
            if std::fs::metadata(&marker).is_err() {
                std::fs::write(&marker, b"x").unwrap();
                std::process::exit(4);
            }
            Ok(json!("second time"))
        }),
    );
    reg(
        "fail",
        body(|_, _| async { Err(Failure::new("ValueError", "bad input")) }),
    );
}

fn plain(_: &str) -> Policy {
    Policy::default()
}

/// When this binary runs as a child: serve the parent on fd 3, then exit.
#[test]
fn child_main() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let app = App::memory(None);
        register(&app, &plain);
        // SAFETY: the parent passed its socket as fd 3.
        unsafe { headway_core::task::procs::child::serve_fd(app).await }.unwrap();
    });
    std::process::exit(0);
}

fn child_command() -> ChildCommand {
    ChildCommand {
        program: std::env::current_exe().unwrap().display().to_string(),
        args: vec![
            "--exact".into(),
            "child_main".into(),
            "--nocapture".into(),
            "--quiet".into(),
            "--test-threads=1".into(),
        ],
        env: vec![(CHILD.into(), "1".into())],
    }
}

fn spec(max_tasks: Option<u64>) -> ProcSpec {
    let c = child_command();
    ProcSpec {
        program: c.program,
        args: c.args,
        env: c.env,
        max_tasks_per_child: max_tasks,
        max_memory_per_child: None,
    }
}

struct Running {
    app: App,
    worker: Worker,
    done: tokio::task::JoinHandle<Result<(), Refused>>,
}

fn start(policy: &dyn Fn(&str) -> Policy, concurrency: usize, max_tasks: Option<u64>) -> Running {
    let app = App::memory(None);
    register(&app, policy);
    let worker = Worker::new(
        app.clone(),
        WorkerConfig {
            concurrency,
            pool: Pool::Process(spec(max_tasks)),
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let w = worker.clone();
    let done = tokio::spawn(async move { w.run().await });
    Running { app, worker, done }
}

impl Running {
    async fn send(&self, name: &str, args: Vec<Value>) -> headway_core::task::Handle {
        self.app
            .send(name, args, Map::new(), Options::default())
            .await
            .unwrap()
    }

    async fn stop(self) {
        self.worker.stop(Duration::from_secs(5));
        self.done.await.unwrap().unwrap();
    }
}

const WAIT: Option<Duration> = Some(Duration::from_secs(20));

fn failure(r: Result<Value, Refused>) -> Failure {
    match r {
        Err(Refused::Failed(f)) => f,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_go_to_distinct_children_and_failures_cross_intact() {
    let r = start(&plain, 2, None);
    // Two long runs at once land in two children.
    let a = r.send("sleep", vec![json!(300)]).await;
    let b = r.send("sleep", vec![json!(300)]).await;
    let (pa, pb) = (a.get(WAIT).await.unwrap(), b.get(WAIT).await.unwrap());
    assert_ne!(pa, pb, "both runs went to one child");
    assert_ne!(pa, json!(std::process::id()), "a run went to the parent");
    let f = failure(r.send("fail", vec![]).await.get(WAIT).await);
    assert_eq!(
        (f.kind.as_str(), f.message.as_str()),
        ("ValueError", "bad input")
    );
    assert_eq!(r.worker.procs().unwrap().pids().len(), 2);
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hard_time_limit_kills_the_child_and_the_next_run_succeeds() {
    let limited = |name: &str| Policy {
        time_limit: (name == "spin").then_some(500),
        ..Policy::default()
    };
    let r = start(&limited, 1, None);
    let before = r.send("pid", vec![]).await.get(WAIT).await.unwrap();
    let t = Instant::now();
    let f = failure(r.send("spin", vec![]).await.get(WAIT).await);
    assert_eq!(f.kind, "TimeLimitExceeded", "{f:?}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    // The next run succeeds, in a new child.
    let after = r.send("pid", vec![]).await.get(WAIT).await.unwrap();
    assert_ne!(before, after, "the spinning child was not replaced");
    assert_eq!(r.worker.procs().unwrap().started(), 2);
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_dies_mid_run_fails_that_run_and_is_replaced() {
    let r = start(&plain, 1, None);
    let f = failure(r.send("exit", vec![]).await.get(WAIT).await);
    assert_eq!(f.kind, "WorkerLostError");
    assert!(f.message.contains("exitcode 3"), "{}", f.message);
    // Positive control: the pool goes on.
    assert!(r.send("pid", vec![]).await.get(WAIT).await.is_ok());
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_on_worker_lost_puts_the_run_back() {
    let dir = std::env::temp_dir().join(format!("headway-procs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let marker = dir.join("exit_once").display().to_string();
    let _ = std::fs::remove_file(&marker);
    let late = |_: &str| Policy {
        acks_late: true,
        reject_on_worker_lost: true,
        ..Policy::default()
    };
    let r = start(&late, 1, None);
    let h = r.send("exit_once", vec![json!(marker)]).await;
    assert_eq!(h.get(WAIT).await.unwrap(), json!("second time"));
    assert!(
        std::fs::metadata(&marker).is_ok(),
        "the first attempt never ran"
    );
    r.stop().await;
    // Without the flag the same crash fails the run.
    let _ = std::fs::remove_file(&marker);
    let r = start(&plain, 1, None);
    let f = failure(
        r.send("exit_once", vec![json!(marker)])
            .await
            .get(WAIT)
            .await,
    );
    assert_eq!(f.kind, "WorkerLostError");
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_are_recycled_after_max_tasks_per_child() {
    let r = start(&plain, 1, Some(2));
    let mut pids = Vec::new();
    for _ in 0..4 {
        pids.push(r.send("pid", vec![]).await.get(WAIT).await.unwrap());
    }
    assert_eq!(pids[0], pids[1]);
    assert_ne!(pids[1], pids[2]);
    assert_eq!(pids[2], pids[3]);
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminate_stops_the_run_in_its_child() {
    let r = start(&plain, 1, None);
    let procs = r.worker.procs().unwrap().clone();
    let in_child = |id: String| {
        let procs = procs.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(10);
            while procs.running(&id).is_none() {
                assert!(Instant::now() < deadline, "the run never reached a child");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    let h = r.send("sleep", vec![json!(30_000)]).await;
    in_child(h.id().to_string()).await;
    let t = Instant::now();
    r.app.revoke(&[h.id().to_string()], true).await.unwrap();
    assert!(matches!(h.get(WAIT).await, Err(Refused::Revoked(_))));
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // The pool still runs.
    assert!(r.send("pid", vec![]).await.get(WAIT).await.is_ok());
    // The signal asked for is the one the child gets: SIGKILL ends it at
    // once, and the next run is in a new child.
    let before = r.worker.procs().unwrap().pids();
    let h = r.send("sleep", vec![json!(30_000)]).await;
    in_child(h.id().to_string()).await;
    r.app
        .revoke_with(&[h.id().to_string()], true, 9)
        .await
        .unwrap();
    assert!(matches!(h.get(WAIT).await, Err(Refused::Revoked(_))));
    let after = r.send("pid", vec![]).await.get(WAIT).await.unwrap();
    assert!(
        !before.contains(&(after.as_u64().unwrap() as u32)),
        "{before:?} {after}"
    );
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_cannot_start_fails_the_workers_run_with_the_reason() {
    let app = App::memory(None);
    let worker = Worker::new(
        app,
        WorkerConfig {
            concurrency: 1,
            pool: Pool::Process(ProcSpec {
                program: "/bin/false".into(),
                args: vec![],
                env: vec![],
                max_tasks_per_child: None,
                max_memory_per_child: None,
            }),
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let e = worker.run().await.unwrap_err().to_string();
    assert!(e.contains("exited before it was ready (exitcode 1)"), "{e}");
}

#[test]
fn a_hard_limit_needs_the_process_pool() {
    let app = App::memory(None);
    let limited = |_: &str| Policy {
        time_limit: Some(1000),
        ..Policy::default()
    };
    register(&app, &limited);
    let e = Worker::new(app.clone(), WorkerConfig::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("process pool"), "{e}");
    // Per worker too, spelled per host; a soft limit alone is fine.
    let e = WorkerSpec {
        time_limit: Some(1000),
        ..WorkerSpec::default()
    }
    .build(Host::Python)
    .unwrap_err();
    assert_eq!(e.arg(), "time_limit");
    assert!(
        WorkerSpec {
            soft_time_limit: Some(1000),
            ..WorkerSpec::default()
        }
        .build(Host::Node)
        .is_ok()
    );
    let e = WorkerSpec {
        pool: Some("forks".into()),
        ..WorkerSpec::default()
    }
    .build(Host::Node)
    .unwrap_err();
    assert_eq!(e.arg(), "pool");
    let e = WorkerSpec {
        max_tasks_per_child: Some(3.0),
        ..WorkerSpec::default()
    }
    .build(Host::Node)
    .unwrap_err();
    assert_eq!(e.arg(), "maxTasksPerChild");
    // `prefork` is Celery's name for it.
    let ok = WorkerSpec {
        pool: Some("prefork".into()),
        child: Some(child_command()),
        max_tasks_per_child: Some(3.0),
        ..WorkerSpec::default()
    }
    .build(Host::Python)
    .unwrap();
    assert!(matches!(
        ok.pool,
        Pool::Process(ProcSpec {
            max_tasks_per_child: Some(3),
            ..
        })
    ));
}

/// A remote `pool_grow` starts more children and `pool_shrink` lets them
/// go (idle ones at once, busy ones when their run ends, not replaced);
/// `inspect active` names the child running each run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_process_pool_grows_and_shrinks_remotely() {
    use headway_core::task::remote::{Command, Node, Reply};
    let r = start(&plain, 1, None);
    let until = |what: &str, pids: usize, w: &Worker| {
        let (what, w) = (what.to_string(), w.clone());
        async move {
            let end = std::time::Instant::now() + Duration::from_secs(20);
            while w.procs().unwrap().pids().len() != pids {
                assert!(std::time::Instant::now() < end, "never: {what}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    until("one child", 1, &r.worker).await;
    let node = loop {
        if let Some(n) = Node::here(&r.app) {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(
        node.run(&Command::PoolGrow(2)).unwrap(),
        Reply::Done("pool will grow".into())
    );
    until("three children", 3, &r.worker).await;
    assert_eq!(r.worker.concurrency(), 3);
    // Three sleeps run at once, each in a child of its own.
    let hs = [
        r.send("sleep", vec![json!(600)]).await,
        r.send("sleep", vec![json!(600)]).await,
        r.send("sleep", vec![json!(600)]).await,
    ];
    let active = loop {
        match node.run(&Command::Active).unwrap() {
            Reply::Runs(a) if a.len() == 3 => break a,
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    };
    let mut pids: Vec<u32> = active.iter().map(|a| a.pid.unwrap()).collect();
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(pids.len(), 3, "{active:?}");
    assert!(!pids.contains(&std::process::id()));
    for h in &hs {
        let pid = h.get(WAIT).await.unwrap().as_u64().unwrap() as u32;
        assert!(pids.contains(&pid));
    }
    // Shrunk by two: two children go, none replaced.
    node.run(&Command::PoolShrink(2)).unwrap();
    until("one child again", 1, &r.worker).await;
    assert_eq!(r.worker.concurrency(), 1);
    assert!(r.send("pid", vec![]).await.get(WAIT).await.is_ok());
    r.stop().await;
}

/// On Celery's layout with task events on, a run whose child died and whose
/// task asks for its message back (`acks_late` + `reject_on_worker_lost`)
/// sends Celery's `task-rejected` (`requeue` true) — and a run that
/// succeeds sends none (the positive control: its `task-succeeded` comes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_child_died_sends_celerys_task_rejected() {
    use futures_util::StreamExt;
    let Some(server) = support::RedisServer::start() else {
        return;
    };
    let url = format!("{}/0", server.url());
    let b = headway_core::broker::celery::CeleryBroker::connect(
        &url,
        headway_core::broker::celery::CeleryOptions {
            task_events: true,
            ..Default::default()
        },
        std::sync::Arc::new(headway_core::task::SystemClock),
    )
    .await
    .unwrap();
    let app = App::new(
        b.seams(),
        std::sync::Arc::new(headway_core::task::SystemClock),
    );
    b.route_for(&app);
    let late = |_: &str| Policy {
        acks_late: true,
        reject_on_worker_lost: true,
        ..Policy::default()
    };
    register(&app, &late);
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut sub = client.get_async_pubsub().await.unwrap();
    sub.psubscribe("*celeryev/task.*").await.unwrap();
    let mut events = sub.into_on_message();
    let worker = Worker::new(
        app.clone(),
        WorkerConfig {
            queues: vec!["celery".into()],
            concurrency: 1,
            pool: Pool::Process(spec(None)),
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let w = worker.clone();
    let done = tokio::spawn(async move { w.run().await });
    let dir = std::env::temp_dir().join(format!("headway-rejected-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let marker = dir.join("exit_once").display().to_string();
    let _ = std::fs::remove_file(&marker);
    let opts = || Options {
        queue: Some("celery".into()),
        ..Options::default()
    };
    let h = app
        .send("exit_once", vec![json!(marker)], Map::new(), opts())
        .await
        .unwrap();
    assert_eq!(h.get(WAIT).await.unwrap(), json!("second time"));
    let ok = app.send("pid", vec![], Map::new(), opts()).await.unwrap();
    ok.get(WAIT).await.unwrap();
    // Read the events until the second run's success: by then the first
    // run's rejection went out (events go in order).
    let mut rejected = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let m = tokio::time::timeout_at(deadline, events.next())
            .await
            .expect("the events came")
            .unwrap();
        let env: Value = serde_json::from_slice(m.get_payload_bytes()).unwrap();
        let body = env["body"].as_str().unwrap();
        let body: Value = serde_json::from_slice(&unbase64(body)).unwrap();
        if body["type"] == "task-rejected" {
            rejected.push((body["uuid"].clone(), body["requeue"].clone()));
        }
        if body["type"] == "task-succeeded" && body["uuid"] == json!(ok.id()) {
            break;
        }
    }
    assert_eq!(rejected, vec![(json!(h.id()), json!(true))]);
    worker.stop(Duration::from_secs(5));
    done.await.unwrap().unwrap();
}

/// Standard base64 (kombu's body encoding), for reading events.
fn unbase64(text: &str) -> Vec<u8> {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes().filter(|c| *c != b'=') {
        acc = (acc << 6) | A.iter().position(|a| *a == c).expect("base64") as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}
