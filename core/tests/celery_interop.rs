//! headway against a REAL Celery 5.5 on one redis-server: tasks, chains,
//! chords, failures, typed values, etas, revokes (a Celery client's
//! terminate included) and dead consumers'
//! reservations, each in both directions. The Celery side is
//! `interop/celery_app.py` (a worker) and `interop/drive.py` (a producer),
//! run by the Python named in `HEADWAY_CELERY_PYTHON` or found in
//! `interop/.venv` (`bash interop/run.sh` makes it).
//!
//! Without such a Python, when `HEADWAY_REQUIRE_CELERY=1` or
//! `HEADWAY_REQUIRE_REDIS=1` (CI sets the latter for every test), the first
//! test makes `interop/.venv` with `celery[redis]>=5.5,<5.6` as run.sh does
//! (`python3 -m venv`, then pip), and every test fails if that cannot be
//! done — so CI cannot pass these by skipping. Otherwise each test prints
//! why it is skipped and passes.

mod support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use headway_core::broker::celery::{CeleryBroker, CeleryOptions};
use headway_core::task::{
    App, Canvas, Failure, Message, Options, Policy, Refused, Sig, State, SystemClock, Worker,
    WorkerConfig, body,
};
use serde_json::{Map, Value, json};

fn interop_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../interop")
}

/// A Python that can import Celery ≥ 5.5, or why there is none.
fn python() -> Result<PathBuf, String> {
    let candidates: Vec<PathBuf> = match std::env::var("HEADWAY_CELERY_PYTHON") {
        Ok(p) if !p.is_empty() => vec![PathBuf::from(p)],
        _ => vec![interop_dir().join(".venv/bin/python")],
    };
    for p in candidates {
        let ok = Command::new(&p)
            .args([
                "-c",
                "import celery,sys; v=tuple(int(x) for x in celery.__version__.split('.')[:2]); sys.exit(0 if v>=(5,5) else 1)",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if ok {
            return Ok(p);
        }
    }
    Err(
        "no Python with Celery >= 5.5 (run `bash interop/run.sh`, or set HEADWAY_CELERY_PYTHON)"
            .into(),
    )
}

/// One scenario's world: a redis-server, the Celery side's Python, and a
/// Celery worker when started. Everything is killed on drop.
struct World {
    server: support::RedisServer,
    py: PathBuf,
    vt: f64,
    celery: Option<Child>,
}

fn required() -> Option<&'static str> {
    ["HEADWAY_REQUIRE_CELERY", "HEADWAY_REQUIRE_REDIS"]
        .into_iter()
        .find(|v| std::env::var(v).as_deref() == Ok("1"))
}

/// Makes `interop/.venv` with Celery the way `interop/run.sh` does, once
/// per test run (the tests of this file share it): the answer is the
/// Python, or why it could not be made.
fn provision() -> Result<PathBuf, String> {
    static MADE: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    MADE.get_or_init(|| {
        if let Ok(p) = python() {
            return Ok(p);
        }
        if std::env::var("HEADWAY_CELERY_PYTHON").is_ok_and(|p| !p.is_empty()) {
            return Err("HEADWAY_CELERY_PYTHON names a Python without Celery >= 5.5".into());
        }
        let venv = interop_dir().join(".venv");
        eprintln!("making {} with celery[redis]>=5.5,<5.6", venv.display());
        let _ = std::fs::remove_dir_all(&venv);
        let run = |c: &mut Command, what: &str| -> Result<(), String> {
            let out = c.output().map_err(|e| format!("{what}: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "{what} failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                ))
            }
        };
        run(
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
            "python3 -m venv",
        )?;
        run(
            Command::new(venv.join("bin/pip")).args([
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "celery[redis]>=5.5,<5.6",
            ]),
            "pip install celery[redis]>=5.5,<5.6",
        )?;
        python()
    })
    .clone()
}

fn world(vt: f64) -> Option<World> {
    let found = match required() {
        Some(_) => provision(),
        None => python(),
    };
    let py = match found {
        Ok(p) => p,
        Err(why) => {
            if let Some(var) = required() {
                panic!("{var}=1 but {why}");
            }
            eprintln!("skipped: {why}");
            return None;
        }
    };
    let server = support::RedisServer::start()?;
    Some(World {
        server,
        py,
        vt,
        celery: None,
    })
}

impl Drop for World {
    fn drop(&mut self) {
        self.kill_celery();
    }
}

impl World {
    fn url(&self) -> String {
        format!("{}/0", self.server.url())
    }

    /// Celery's own CLI on the interop app: `celery -A celery_app <args>`.
    fn celery(&self, args: &[&str]) -> std::process::Output {
        self.py()
            .args(["-m", "celery", "-A", "celery_app"])
            .args(args)
            .output()
            .expect("run Celery's CLI")
    }

    fn py(&self) -> Command {
        let mut c = Command::new(&self.py);
        c.current_dir(interop_dir())
            .env("HEADWAY_INTEROP_URL", self.url())
            .env("HEADWAY_INTEROP_VT", self.vt.to_string())
            .env("PYTHONDONTWRITEBYTECODE", "1");
        c
    }

    /// Starts a real Celery worker on queue `celery` (solo pool, one task at
    /// a time) and waits until it runs a task.
    fn start_celery(&mut self, sleep: f64, wait_ready: bool) {
        let log = std::fs::File::create(self.server.dir.join("celery.log")).unwrap();
        let child = self
            .py()
            .env("HEADWAY_INTEROP_SLEEP", sleep.to_string())
            .args([
                "-m",
                "celery",
                "-A",
                "celery_app",
                "worker",
                "-P",
                "solo",
                "-Q",
                "celery",
                "-n",
                "celery@interop",
                "--without-mingle",
                "--without-gossip",
                "--loglevel=INFO",
            ])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start a Celery worker");
        self.celery = Some(child);
        if wait_ready {
            let id = self.drive("send", json!({"name": "tasks.add", "args": [0, 0]}))["id"]
                .as_str()
                .unwrap()
                .to_string();
            let got = self.drive("get", json!({"id": id, "timeout": 30}));
            assert_eq!(
                got["ok"],
                json!(0),
                "the Celery worker did not start: {got}\n{}",
                self.celery_log()
            );
            self.server.cli(&["DEL", "ledger"]);
        }
    }

    fn kill_celery(&mut self) {
        if let Some(mut c) = self.celery.take() {
            let _ = c.kill(); // SIGKILL
            let _ = c.wait();
        }
    }

    fn celery_log(&self) -> String {
        std::fs::read_to_string(self.server.dir.join("celery.log")).unwrap_or_default()
    }

    /// Runs one `drive.py` command and answers its JSON line.
    fn drive(&self, cmd: &str, arg: Value) -> Value {
        let out = self
            .py()
            .args(["drive.py", cmd, &arg.to_string()])
            .output()
            .expect("run drive.py");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().last().unwrap_or("");
        serde_json::from_str(line).unwrap_or_else(|_| {
            panic!(
                "drive.py {cmd} {arg}: {}\n{}",
                text,
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }

    /// What the Celery side ran, in order.
    fn ledger(&self) -> Vec<Value> {
        self.server
            .cli(&["LRANGE", "ledger", "0", "-1"])
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    async fn headway(&self, ran: &Ran) -> (App, Arc<CeleryBroker>) {
        let b = CeleryBroker::connect(
            &self.url(),
            CeleryOptions {
                visibility_timeout: Duration::from_secs_f64(self.vt),
                ..CeleryOptions::default()
            },
            Arc::new(SystemClock),
        )
        .await
        .expect("connect");
        let app = App::new(b.seams(), Arc::new(SystemClock));
        b.route_for(&app);
        hw_tasks(&app, ran);
        (app, b)
    }
}

/// The terminates a broker told: (ids, signal), in order.
type Heard = Arc<Mutex<Vec<(Vec<String>, i32)>>>;

/// What the headway side ran: (task, args, ms since the epoch).
type Ran = Arc<Mutex<Vec<(String, Vec<Value>, i64)>>>;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn hw_tasks(app: &App, ran: &Ran) {
    let hw = Policy {
        queue: "hw".into(),
        ..Policy::default()
    };
    let reg = |name: &'static str, policy: Policy, f: fn(&[Value]) -> Result<Value, Failure>| {
        let ran = ran.clone();
        app.register(
            name,
            policy,
            body(move |_ctx, args| {
                ran.lock()
                    .unwrap()
                    .push((name.to_string(), args.clone(), now_ms()));
                let r = f(&args);
                async move { r }
            }),
        )
        .unwrap();
    };
    let int = |v: &Value| v.as_i64().unwrap_or(0);
    let _ = int;
    reg("hw.add", hw.clone(), |a| {
        Ok(json!(
            a.first().and_then(Value::as_i64).unwrap_or(0)
                + a.get(1).and_then(Value::as_i64).unwrap_or(0)
        ))
    });
    reg("hw.mul", hw.clone(), |a| {
        Ok(json!(
            a.first().and_then(Value::as_i64).unwrap_or(0)
                * a.get(1).and_then(Value::as_i64).unwrap_or(0)
        ))
    });
    reg("hw.tsum", hw.clone(), |a| {
        let list = a
            .first()
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        Ok(json!(list.iter().filter_map(Value::as_i64).sum::<i64>()))
    });
    reg("hw.boom", hw.clone(), |a| {
        let mut f = Failure::new(
            "ValueError",
            a.first().and_then(Value::as_str).unwrap_or("boom"),
        );
        f.module = Some("builtins".into());
        Err(f)
    });
    reg("hw.echo", hw.clone(), |a| Ok(Value::Array(a.to_vec())));
    reg(
        "shared.work",
        Policy {
            acks_late: true,
            ..Policy::default()
        },
        |a| {
            Ok(json!(format!(
                "headway:{}",
                a.first().and_then(Value::as_str).unwrap_or("")
            )))
        },
    );
}

fn run_worker(app: &App, queues: &[&str]) -> (Worker, tokio::task::JoinHandle<()>) {
    let w = Worker::new(
        app.clone(),
        WorkerConfig {
            queues: queues.iter().map(|q| q.to_string()).collect(),
            concurrency: 2,
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let w2 = w.clone();
    (w, tokio::spawn(async move { w2.run().await.unwrap() }))
}

async fn stop(w: Worker, h: tokio::task::JoinHandle<()>) {
    w.stop(Duration::from_secs(2));
    let _ = tokio::time::timeout(Duration::from_secs(5), h).await;
}

fn sig(task: &str, args: Vec<Value>, queue: Option<&str>) -> Canvas {
    Canvas::Sig(Sig::new(task, args).with_options(Options {
        queue: queue.map(str::to_string),
        ..Options::default()
    }))
}

const T: Option<Duration> = Some(Duration::from_secs(30));

fn sides(w: &World, ran: &Ran) -> String {
    let c: Vec<String> = w
        .ledger()
        .iter()
        .map(|e| format!("celery:{}", e["task"].as_str().unwrap_or("?")))
        .collect();
    let h: Vec<String> = ran
        .lock()
        .unwrap()
        .iter()
        .map(|r| format!("headway:{}", r.0))
        .collect();
    format!("celery ran {c:?}; headway ran {h:?}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_both_ways() {
    let Some(mut w) = world(3600.0) else { return };
    w.start_celery(0.0, true);
    let ran = Ran::default();
    let (app, _b) = w.headway(&ran).await;
    let (wk, h) = run_worker(&app, &["hw"]);
    // headway → Celery: a task only Celery runs, its result read in headway.
    let hd = app
        .send_task(
            "tasks.add",
            vec![json!(2), json!(3)],
            Map::new(),
            Options::default(),
        )
        .await
        .unwrap();
    assert_eq!(hd.get(T).await.unwrap(), json!(5));
    // Celery → headway: AsyncResult.get() wakes with headway's value.
    let id = w.drive(
        "send",
        json!({"name": "hw.add", "args": [20, 22], "queue": "hw"}),
    )["id"]
        .clone();
    assert_eq!(w.drive("get", json!({"id": id}))["ok"], json!(42));
    println!("{}", sides(&w, &ran));
    stop(wk, h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chains_alternate_sides_both_ways() {
    let Some(mut w) = world(3600.0) else { return };
    w.start_celery(0.0, true);
    let ran = Ran::default();
    let (app, _b) = w.headway(&ran).await;
    let (wk, h) = run_worker(&app, &["hw"]);
    // ((1 + 2) * 10 + 5) * 2 = 70: Celery, headway, Celery, headway.
    let hd = app
        .send_canvas(Canvas::Chain(vec![
            sig("tasks.add", vec![json!(1), json!(2)], None),
            sig("hw.mul", vec![json!(10)], None),
            sig("tasks.add", vec![json!(5)], None),
            sig("hw.mul", vec![json!(2)], None),
        ]))
        .await
        .unwrap();
    assert_eq!(hd.get(T).await.unwrap(), json!(70));
    assert_eq!(w.drive("get", json!({"id": hd.id()}))["ok"], json!(70));
    let celery: Vec<String> = w
        .ledger()
        .iter()
        .map(|e| e["task"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(celery, ["tasks.add", "tasks.add"]);
    println!("headway → : {}", sides(&w, &ran));
    // The other way: headway first, built by Celery's canvas.
    ran.lock().unwrap().clear();
    w.server.cli(&["DEL", "ledger"]);
    let spec = json!({"chain": [
        {"sig": "hw.add", "args": [1, 2], "queue": "hw"},
        {"sig": "tasks.mul", "args": [10]},
        {"sig": "hw.add", "args": [5], "queue": "hw"},
        {"sig": "tasks.mul", "args": [2]},
    ]});
    let id = w.drive("canvas", spec)["id"].clone();
    assert_eq!(w.drive("get", json!({"id": id}))["ok"], json!(70));
    let hw: Vec<String> = ran.lock().unwrap().iter().map(|r| r.0.clone()).collect();
    assert_eq!(hw, ["hw.add", "hw.add"]);
    println!("celery → : {}", sides(&w, &ran));
    stop(wk, h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chords_cross_sides_both_ways() {
    let Some(mut w) = world(3600.0) else { return };
    w.start_celery(0.0, true);
    let ran = Ran::default();
    let (app, _b) = w.headway(&ran).await;
    let (wk, h) = run_worker(&app, &["hw"]);
    // headway sends: parts on Celery, callback on headway.
    let hd = app
        .send_canvas(Canvas::Chord(
            (1..=3)
                .map(|i| sig("tasks.add", vec![json!(i), json!(i)], None))
                .collect(),
            Box::new(sig("hw.tsum", vec![], None)),
        ))
        .await
        .unwrap();
    assert_eq!(hd.get(T).await.unwrap(), json!(12));
    // headway sends: parts on headway, callback on Celery.
    let hd = app
        .send_canvas(Canvas::Chord(
            (1..=3)
                .map(|i| sig("hw.mul", vec![json!(i), json!(10)], None))
                .collect(),
            Box::new(sig("tasks.tsum", vec![], None)),
        ))
        .await
        .unwrap();
    assert_eq!(hd.get(T).await.unwrap(), json!(60));
    assert_eq!(w.drive("get", json!({"id": hd.id()}))["ok"], json!(60));
    println!("headway → : {}", sides(&w, &ran));
    // Celery sends: parts on headway, callback on Celery; and the reverse.
    let id = w.drive(
        "canvas",
        json!({"chord": [
            {"sig": "hw.add", "args": [1, 1], "queue": "hw"},
            {"sig": "hw.add", "args": [2, 2], "queue": "hw"},
        ], "body": {"sig": "tasks.tsum"}}),
    )["id"]
        .clone();
    assert_eq!(w.drive("get", json!({"id": id}))["ok"], json!(6));
    let id = w.drive(
        "canvas",
        json!({"chord": [
            {"sig": "tasks.add", "args": [1, 1]},
            {"sig": "tasks.add", "args": [2, 2]},
            {"sig": "tasks.add", "args": [3, 3]},
        ], "body": {"sig": "hw.tsum", "queue": "hw"}}),
    )["id"]
        .clone();
    assert_eq!(w.drive("get", json!({"id": id}))["ok"], json!(12));
    let ordered: Vec<Value> = ran
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.0 == "hw.tsum")
        .map(|r| r.1[0].clone())
        .collect();
    assert_eq!(
        ordered.last().unwrap(),
        &json!([2, 4, 6]),
        "results in part order"
    );
    println!("celery → : {}", sides(&w, &ran));
    // A failed part fails the callback, on either side.
    let hd = app
        .send_canvas(Canvas::Chord(
            vec![
                sig("tasks.add", vec![json!(1), json!(1)], None),
                sig("tasks.boom", vec![json!("part")], None),
            ],
            Box::new(sig("hw.tsum", vec![], None)),
        ))
        .await
        .unwrap();
    match hd.get(T).await {
        Err(Refused::Failed(f)) => assert_eq!(f.kind, "ChordError"),
        other => panic!("{other:?}"),
    }
    stop(wk, h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_read_both_ways() {
    let Some(mut w) = world(3600.0) else { return };
    w.start_celery(0.0, true);
    let ran = Ran::default();
    let (app, _b) = w.headway(&ran).await;
    let (wk, h) = run_worker(&app, &["hw"]);
    let hd = app
        .send_task(
            "tasks.boom",
            vec![json!("bad input")],
            Map::new(),
            Options::default(),
        )
        .await
        .unwrap();
    match hd.get(T).await {
        Err(Refused::Failed(f)) => {
            assert_eq!(
                (f.kind.as_str(), f.message.as_str()),
                ("ValueError", "bad input")
            );
            assert_eq!(f.module.as_deref(), Some("builtins"));
            assert!(f.traceback.unwrap().contains("Traceback"));
        }
        other => panic!("{other:?}"),
    }
    let id = w.drive(
        "send",
        json!({"name": "hw.boom", "args": ["from headway"], "queue": "hw"}),
    )["id"]
        .clone();
    let got = w.drive("get", json!({"id": id}));
    assert_eq!(got["error"], json!("ValueError"), "{got}");
    assert_eq!(got["module"], json!("builtins"));
    assert_eq!(got["args"], json!(["'from headway'"]));
    stop(wk, h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_values_round_trip() {
    let Some(mut w) = world(3600.0) else { return };
    w.start_celery(0.0, true);
    let ran = Ran::default();
    let (app, _b) = w.headway(&ran).await;
    let (wk, h) = run_worker(&app, &["hw"]);
    // Celery's datetime, UUID, Decimal and bytes through a headway body and
    // back: still those types in Python.
    let got = w.drive("typed", json!({"queue": "hw"}));
    assert_eq!(
        got,
        json!({"datetime": true, "uuid": true, "decimal": true, "bytes": true})
    );
    // headway's typed values (kombu's wire shape) through a Celery body.
    use headway_core::broker::celery::Typed;
    let args = vec![
        Typed::datetime_ms(1_767_225_600_123).to_value(),
        Typed::uuid("12345678-1234-5678-1234-567812345678")
            .unwrap()
            .to_value(),
        Typed::Decimal("2.50".into()).to_value(),
        Typed::Bytes(vec![0xff, 1]).to_value(),
    ];
    let hd = app
        .send_task("tasks.echo", args.clone(), Map::new(), Options::default())
        .await
        .unwrap();
    let v = hd.get(T).await.unwrap();
    assert_eq!(v["types"], json!(["datetime", "UUID", "Decimal", "bytes"]));
    assert_eq!(v["args"], Value::Array(args));
    stop(wk, h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etas_both_ways() {
    let Some(mut w) = world(3600.0) else { return };
    w.start_celery(0.0, true);
    let ran = Ran::default();
    let (app, _b) = w.headway(&ran).await;
    let (wk, h) = run_worker(&app, &["hw"]);
    let sent = now_ms();
    let hd = app
        .send_task(
            "tasks.add",
            vec![json!(1), json!(1)],
            Map::new(),
            Options {
                countdown: Some(3000),
                ..Options::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(hd.get(T).await.unwrap(), json!(2));
    let at = w.ledger()[0]["at"].as_f64().unwrap();
    assert!((at * 1000.0) as i64 >= sent + 3000, "Celery ran it early");
    let sent = now_ms();
    let id = w.drive(
        "send",
        json!({"name": "hw.add", "args": [2, 2], "queue": "hw", "countdown": 3}),
    )["id"]
        .clone();
    assert_eq!(w.drive("get", json!({"id": id}))["ok"], json!(4));
    let at = ran.lock().unwrap()[0].2;
    assert!(at >= sent + 3000 - 50, "headway ran it early");
    println!("{}", sides(&w, &ran));
    stop(wk, h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revokes_both_ways() {
    let Some(mut w) = world(3600.0) else { return };
    w.start_celery(0.0, true);
    let ran = Ran::default();
    let (app, b) = w.headway(&ran).await;
    let (wk, h) = run_worker(&app, &["hw"]);
    // headway revokes a task a Celery worker holds for its eta.
    let hd = app
        .send_task(
            "tasks.add",
            vec![json!(1), json!(1)],
            Map::new(),
            Options {
                countdown: Some(4000),
                ..Options::default()
            },
        )
        .await
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while w.server.cli(&["HLEN", "unacked"]) != "1" && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    hd.revoke(false).await.unwrap();
    assert_eq!(
        hd.get(T).await.unwrap_err(),
        Refused::Revoked(hd.id().to_string())
    );
    assert!(w.ledger().is_empty(), "Celery ran a revoked task");
    // Celery revokes a task a headway worker holds for its eta.
    let id = w.drive(
        "send",
        json!({"name": "hw.add", "args": [2, 2], "queue": "hw", "countdown": 4}),
    )["id"]
        .as_str()
        .unwrap()
        .to_string();
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let q = headway_core::task::Inspector::queues(&*b).await.unwrap();
        if q.iter().any(|q| q.name == "hw" && q.delayed == 1) || Instant::now() > until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    w.drive("revoke", json!({"id": id}));
    let got = w.drive("get", json!({"id": id}));
    assert_eq!(got["error"], json!("TaskRevokedError"), "{got}");
    assert!(ran.lock().unwrap().is_empty(), "headway ran a revoked task");
    assert_eq!(app.state_of(&id).await.unwrap(), State::Revoked);
    stop(wk, h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_celery_clients_terminate_stops_a_headway_run() {
    let Some(w) = world(3600.0) else { return };
    let ran = Ran::default();
    let (app, b) = w.headway(&ran).await;
    // A run that goes until released; what the broker hears, with the
    // signal.
    let started = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let release = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (s2, r2) = (started.clone(), release.clone());
    app.register(
        "hw.hang",
        Policy {
            queue: "hw".into(),
            ..Policy::default()
        },
        body(move |_, _| {
            s2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let release = r2.clone();
            async move {
                while !release.load(std::sync::atomic::Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Ok(json!("released"))
            }
        }),
    )
    .unwrap();
    let heard: Heard = Arc::default();
    let h2 = heard.clone();
    headway_core::task::Broker::on_terminate(
        &*b,
        Arc::new(move |ids: &[String], signal| {
            h2.lock().unwrap().push((ids.to_vec(), signal));
            true
        }),
    );
    let (wk, h) = run_worker(&app, &["hw"]);
    let send = |w: &World| {
        w.drive("send", json!({"name": "hw.hang", "queue": "hw"}))["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let doomed = send(&w);
    let spared = send(&w);
    let until = Instant::now() + Duration::from_secs(10);
    while started.load(std::sync::atomic::Ordering::SeqCst) < 2 {
        assert!(Instant::now() < until, "the runs never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Celery 5.5's own `app.control.revoke(id, terminate=True, signal=...)`.
    let sent = Instant::now();
    w.drive(
        "revoke",
        json!({"id": doomed, "terminate": true, "signal": "SIGKILL"}),
    );
    while app.state_of(&doomed).await.unwrap() != State::Revoked {
        assert!(
            sent.elapsed() < Duration::from_secs(2),
            "not REVOKED within 2 s of the revoke"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(*heard.lock().unwrap(), vec![(vec![doomed.clone()], 9)]);
    let got = w.drive("get", json!({"id": doomed}));
    assert_eq!(got["error"], json!("TaskRevokedError"), "{got}");
    // Positive control: the spared run was not stopped, and finishes.
    assert!(!app.state_of(&spared).await.unwrap().is_final());
    release.store(true, std::sync::atomic::Ordering::SeqCst);
    let got = w.drive("get", json!({"id": spared}));
    assert_eq!(got["ok"], json!("released"), "{got}");
    stop(wk, h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn celerys_dead_reservation_runs_on_headway() {
    let Some(mut w) = world(2.0) else { return };
    w.start_celery(60.0, true);
    let ran = Ran::default();
    let id = w.drive("send", json!({"name": "shared.work", "args": ["x"]}))["id"]
        .as_str()
        .unwrap()
        .to_string();
    let until = Instant::now() + Duration::from_secs(20);
    while w.ledger().is_empty() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !w.ledger().is_empty(),
        "Celery never started it:\n{}",
        w.celery_log()
    );
    w.kill_celery(); // -9 mid-run: acks_late, so it stays in `unacked`
    assert_eq!(w.server.cli(&["HLEN", "unacked"]), "1");
    let (app, b) = w.headway(&ran).await;
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert_eq!(headway_core::task::Broker::recover(&*b).await.unwrap(), 1);
    let (wk, h) = run_worker(&app, &["default"]);
    assert_eq!(app.handle(&id).get(T).await.unwrap(), json!("headway:x"));
    assert_eq!(w.drive("get", json!({"id": id}))["ok"], json!("headway:x"));
    assert_eq!(w.server.cli(&["HLEN", "unacked"]), "0");
    stop(wk, h).await;
}

/// The child half of `headways_dead_reservation_runs_on_celery`: claims one
/// message and waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_claims_and_waits() {
    let Ok(url) = std::env::var("HEADWAY_INTEROP_CHILD_URL") else {
        return;
    };
    // The worker logs through the `log` facade: to stderr, as a binding does.
    headway_core::log::sink::to_stderr(headway_core::log::sink::Format::Plain);
    let b = CeleryBroker::connect(
        &url,
        CeleryOptions {
            visibility_timeout: Duration::from_secs(2),
            ..CeleryOptions::default()
        },
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    let qs = vec!["default".to_string()];
    let got = headway_core::task::Broker::consume(&*b, &qs, 1, Duration::from_secs(10))
        .await
        .unwrap();
    println!("claimed {}", got[0].message.id);
    tokio::time::sleep(Duration::from_secs(600)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headways_dead_reservation_runs_on_celery() {
    let Some(mut w) = world(2.0) else { return };
    let ran = Ran::default();
    let (app, _b) = w.headway(&ran).await;
    let hd = app
        .send_task(
            "shared.work",
            vec![json!("y")],
            Map::new(),
            Options::default(),
        )
        .await
        .unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_claims_and_waits",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("HEADWAY_INTEROP_CHILD_URL", w.url())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let claimed = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("claimed "))
        .expect("the child claims");
    assert!(
        claimed.ends_with(&format!("claimed {}", hd.id())),
        "{claimed}"
    );
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert_eq!(w.server.cli(&["HLEN", "unacked"]), "1");
    // Past the visibility timeout by its score (headway scores a hold in
    // whole seconds rounded up: up to a second younger than its claim).
    let score: f64 = w
        .server
        .cli(&["ZRANGE", "unacked_index", "0", "0", "WITHSCORES"])
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .expect("the hold's score");
    let unix = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    while unix() < score + 2.2 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A Celery worker restores it at start (kombu's restore_visible) and runs it.
    w.start_celery(0.0, false);
    assert_eq!(
        hd.get(T).await.unwrap(),
        json!("celery:y"),
        "{}",
        w.celery_log()
    );
    assert_eq!(w.server.cli(&["HLEN", "unacked"]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priorities_honoured_across_sides() {
    let Some(mut w) = world(3600.0) else { return };
    let ran = Ran::default();
    let (app, _b) = w.headway(&ran).await;
    // headway publishes 9 then 0; a Celery worker started after takes 0 first.
    for (p, label) in [(9u8, "low"), (5, "mid"), (0, "high")] {
        app.send_task(
            "tasks.add",
            vec![json!(label), json!("")],
            Map::new(),
            Options {
                priority: Some(p),
                ..Options::default()
            },
        )
        .await
        .unwrap();
    }
    w.start_celery(0.0, false);
    let until = Instant::now() + Duration::from_secs(30);
    while w.ledger().len() < 3 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let order: Vec<String> = w
        .ledger()
        .iter()
        .map(|e| e["args"][0].as_str().unwrap().to_string())
        .collect();
    assert_eq!(order, ["'high'", "'mid'", "'low'"]);
    // Celery publishes 9 then 0; a headway worker started after takes 0 first.
    for (p, x) in [(9, 9), (3, 3), (0, 0)] {
        w.drive(
            "send",
            json!({"name": "hw.add", "args": [x, 0], "queue": "hw", "priority": p}),
        );
    }
    let wk = Worker::new(
        app.clone(),
        WorkerConfig {
            queues: vec!["hw".into()],
            concurrency: 1,
            prefetch: Some(1),
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let w2 = wk.clone();
    let h = tokio::spawn(async move { w2.run().await.unwrap() });
    let until = Instant::now() + Duration::from_secs(20);
    while ran.lock().unwrap().len() < 3 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let order: Vec<Value> = ran.lock().unwrap().iter().map(|r| r.1[0].clone()).collect();
    assert_eq!(order, [json!(0), json!(3), json!(9)]);
    stop(wk, h).await;
}

/// A raw Celery signature dict, as Celery writes one into `embed`.
fn raw_sig(task: &str, args: Value, queue: &str, immutable: bool) -> Value {
    json!({"task": task, "args": args, "kwargs": {}, "options": {"queue": queue},
           "subtask_type": null, "immutable": immutable})
}

/// The messages on Celery queue list `q`, oldest first, decoded.
fn queued(server: &support::RedisServer, b: &CeleryBroker, q: &str) -> Vec<Message> {
    let mut out: Vec<Message> = server
        .cli(&["LRANGE", q, "0", "-1"])
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| b.sender().decode(l.as_bytes()).unwrap().message)
        .collect();
    out.reverse(); // LPUSH in, RPOP out
    out
}

/// Celery `link` / `link_error` callbacks on a headway-run task, at the wire:
/// sent as Celery 5.5 sends them (`trace.py`, `_call_task_errbacks`).
/// Needs a redis-server, not Celery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_sent_as_celery_sends_them() {
    let Some(server) = support::RedisServer::start() else {
        return;
    };
    let url = format!("{}/0", server.url());
    let b = CeleryBroker::connect(&url, CeleryOptions::default(), Arc::new(SystemClock))
        .await
        .unwrap();
    let app = App::new(b.seams(), Arc::new(SystemClock));
    b.route_for(&app);
    let ran = Ran::default();
    hw_tasks(&app, &ran);
    let hw = |id: &str, task: &str, args: Vec<Value>| {
        Message::new(id.into(), task.into(), args, Map::new(), "hw".into())
    };
    // A success with two links (one immutable, one with a link of its own)
    // and an errback that must not run.
    let mut ok = hw("ok-1", "hw.add", vec![json!(2), json!(3)]);
    let mut nested = raw_sig("tasks.add", json!([100]), "cb", false);
    nested["options"]["link"] = json!([raw_sig("tasks.echo", json!([]), "cb", false)]);
    ok.carried_mut().callbacks = vec![nested, raw_sig("tasks.add", json!([7]), "cb", true)];
    ok.carried_mut().errbacks = vec![raw_sig("tasks.echo", json!(["no"]), "cb", false)];
    // A failure with two errbacks (one immutable) and a link that must not run.
    let mut bad = hw("bad-1", "hw.boom", vec![json!("x")]);
    bad.root_id = Some("root-1".into());
    bad.carried_mut().callbacks = vec![raw_sig("tasks.add", json!([1]), "eb", false)];
    bad.carried_mut().errbacks = vec![
        raw_sig("tasks.echo", json!(["err"]), "eb", false),
        raw_sig("tasks.echo", json!(["imm"]), "eb", true),
    ];
    // One link of a success alone is not grouped; a bad signature is skipped.
    let mut one = hw("one-1", "hw.add", vec![json!(1), json!(1)]);
    one.carried_mut().callbacks = vec![raw_sig("tasks.add", json!([0]), "one", false)];
    // A chain whose second link (a Celery signature) has a link_error of
    // its own: it travels with the link a headway worker sends on.
    let mut chained = hw("ch-1", "hw.add", vec![json!(1), json!(2)]);
    let mut next = Sig::new("hw.boom", vec![]);
    next.id = Some("ch-2".into());
    next.extra.insert(
        "link_error".into(),
        json!([raw_sig("tasks.echo", json!([]), "chain", false)]),
    );
    chained.chain = vec![next];
    let mut revoked = hw("rev-1", "hw.boom", vec![json!("never")]);
    revoked.carried_mut().errbacks = vec![raw_sig("tasks.echo", json!([]), "rev", false)];
    headway_core::task::Broker::publish(&*b, vec![ok, bad, one, chained, revoked])
        .await
        .unwrap();
    headway_core::task::Broker::revoke(&*b, vec!["rev-1".into()], now_ms() + 3_600_000)
        .await
        .unwrap();
    let (wk, h) = run_worker(&app, &["hw"]);
    let until = Instant::now() + Duration::from_secs(20);
    while ["cb", "eb", "one", "chain"]
        .iter()
        .map(|q| {
            server
                .cli(&["LLEN", q])
                .trim()
                .parse::<usize>()
                .unwrap_or(0)
        })
        .sum::<usize>()
        < 6
        && Instant::now() < until
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(app.state_of("rev-1").await.unwrap(), State::Revoked);
    stop(wk, h).await;

    let cb = queued(&server, &b, "cb");
    assert_eq!(cb.len(), 2, "two links, no errback: {cb:?}");
    assert_eq!(
        (cb[0].task.as_str(), &cb[0].args),
        ("tasks.add", &vec![json!(5), json!(100)])
    );
    assert_eq!(
        (cb[1].task.as_str(), &cb[1].args),
        ("tasks.add", &vec![json!(7)])
    );
    for (i, m) in cb.iter().enumerate() {
        assert_eq!(m.parent_id.as_deref(), Some("ok-1"));
        assert_eq!(m.root_id.as_deref(), Some("ok-1"));
        assert!(m.group.is_some(), "several links go out as a group");
        assert_eq!(m.group_index, Some(i as u32));
        assert_ne!(m.id, "ok-1");
    }
    assert_eq!(cb[0].group, cb[1].group);
    let carried = cb[0]
        .carried
        .as_ref()
        .expect("the link's own link is carried");
    assert_eq!(carried.callbacks[0]["task"], json!("tasks.echo"));

    let eb = queued(&server, &b, "eb");
    assert_eq!(eb.len(), 2, "two errbacks, no link: {eb:?}");
    assert_eq!(eb[0].args, vec![json!("bad-1"), json!("err")]);
    assert_eq!(eb[1].args, vec![json!("imm")]);
    for (i, m) in eb.iter().enumerate() {
        assert_eq!(m.task, "tasks.echo");
        assert_eq!(m.parent_id.as_deref(), Some("bad-1"));
        assert_eq!(m.root_id.as_deref(), Some("root-1"));
        assert_eq!(
            m.group_index,
            Some(i as u32),
            "errbacks always go as a group"
        );
    }

    let one = queued(&server, &b, "one");
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].args, vec![json!(2), json!(0)]);
    assert_eq!((one[0].group.as_ref(), one[0].group_index), (None, None));
    assert_eq!(
        server.cli(&["LLEN", "rev"]).trim(),
        "0",
        "a revoke sends no errback"
    );

    let chain = queued(&server, &b, "chain");
    assert_eq!(chain.len(), 1, "the chain link's errback: {chain:?}");
    assert_eq!(chain[0].args, vec![json!("ch-2")]);
    assert_eq!(chain[0].parent_id.as_deref(), Some("ch-2"));
    assert_eq!(chain[0].root_id.as_deref(), Some("ch-1"));
}

/// Celery sends `link` / `link_error` with a task a headway worker runs; a
/// real Celery worker runs the callbacks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn celery_links_run_after_headway_tasks() {
    let Some(mut w) = world(3600.0) else { return };
    w.start_celery(0.0, true);
    let ran = Ran::default();
    let (_app, _b) = w.headway(&ran).await;
    let (wk, h) = run_worker(&_app, &["hw"]);
    let ok = w.drive(
        "send",
        json!({"name": "hw.add", "args": [2, 3], "queue": "hw",
               "link": [{"sig": "tasks.add", "args": [100]}],
               "link_error": [{"sig": "tasks.echo", "args": ["no"]}]}),
    )["id"]
        .clone();
    let bad = w.drive(
        "send",
        json!({"name": "hw.boom", "args": ["x"], "queue": "hw",
               "link": [{"sig": "tasks.add", "args": [1]}],
               "link_error": [{"sig": "tasks.echo", "args": ["err"]},
                              {"sig": "tasks.echo", "args": ["imm"], "immutable": true}]}),
    )["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(w.drive("get", json!({"id": ok}))["ok"], json!(5));
    assert_eq!(
        w.drive("get", json!({"id": bad}))["error"],
        json!("ValueError")
    );
    let until = Instant::now() + Duration::from_secs(20);
    while w.ledger().len() < 3 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut got: Vec<(String, Value)> = w
        .ledger()
        .iter()
        .map(|e| (e["task"].as_str().unwrap().to_string(), e["args"].clone()))
        .collect();
    got.sort_by_key(|g| g.1.to_string());
    println!("{}", sides(&w, &ran));
    let mut want = vec![
        ("tasks.add".to_string(), json!(["5", "100"])),
        (
            "tasks.echo".to_string(),
            json!([format!("'{bad}'"), "'err'"]),
        ),
        ("tasks.echo".to_string(), json!(["'imm'"])),
    ];
    want.sort_by_key(|g| g.1.to_string());
    assert_eq!(got, want);
    stop(wk, h).await;
}

/// Drain rates on Celery's layout: a headway worker against a Celery worker
/// (prefork, 2 processes) on the same queue type. `cargo test --test
/// celery_interop -- --ignored drain_rates --nocapture`, or
/// `bash interop/run.sh --ignored drain_rates`. Prints both and the ratio.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run it by name"]
async fn drain_rates() {
    let Some(w) = world(3600.0) else { return };
    let n_hw: usize = 20_000;
    let n_celery: usize = 2_000;
    let ran = Ran::default();
    let (app, _b) = w.headway(&ran).await;
    let quiet = Policy {
        ignore_result: true,
        ..Policy::default()
    };
    app.register("bench.noop", quiet, body(|_, _| async { Ok(Value::Null) }))
        .unwrap();
    let msgs: Vec<_> = (0..n_hw)
        .map(|i| {
            headway_core::task::Message::new(
                headway_core::task::new_id(),
                "bench.noop".into(),
                vec![json!(i)],
                Map::new(),
                "default".into(),
            )
        })
        .collect();
    for chunk in msgs.chunks(1000) {
        headway_core::task::Broker::publish(app.broker().as_ref(), chunk.to_vec())
            .await
            .unwrap();
    }
    let started = Instant::now();
    let wk = Worker::new(
        app.clone(),
        WorkerConfig {
            queues: vec!["default".into()],
            concurrency: 8,
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let w2 = wk.clone();
    let h = tokio::spawn(async move { w2.run().await.unwrap() });
    while wk.settled() < n_hw as u64 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let hw_rate = n_hw as f64 / started.elapsed().as_secs_f64();
    stop(wk, h).await;
    // Celery: the same no-op, published by Celery, drained by a prefork worker.
    let out = w
        .py()
        .args(["bench.py", &n_celery.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let celery_rate: f64 = text
        .trim()
        .lines()
        .last()
        .unwrap_or("0")
        .parse()
        .unwrap_or(0.0);
    println!(
        "drain on Celery's layout: headway {hw_rate:.0} msg/s, Celery {celery_rate:.0} msg/s, ratio {:.1}x\n{}",
        hw_rate / celery_rate.max(1e-9),
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// `celery inspect ping` / `registered` / `stats`, Celery's own CLI, answered
/// by a headway worker on Celery's layout — and not by the same process
/// before its worker runs (a producer is no node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn celerys_inspect_is_answered_by_a_headway_worker() {
    let Some(w) = world(3600.0) else { return };
    let ran = Ran::default();
    let (app, b) = w.headway(&ran).await;
    let inspect = |what: &str| {
        let out = w.celery(&["inspect", what, "--json", "-t", "3"]);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    // No worker yet: nobody answers.
    let (ok, out, err) = inspect("ping");
    assert!(!ok, "answered without a worker: {out} {err}");
    let (wk, h) = run_worker(&app, &["hw"]);
    let node = b.node().to_string();
    let (ok, out, err) = inspect("ping");
    assert!(ok, "{out}\n{err}");
    let v: Value = serde_json::from_str(out.trim().lines().last().unwrap_or(""))
        .unwrap_or_else(|_| panic!("{out}"));
    assert_eq!(v[&node], json!({"ok": "pong"}), "{out}");
    let (ok, out, err) = inspect("registered");
    assert!(ok, "{out}\n{err}");
    let v: Value = serde_json::from_str(out.trim().lines().last().unwrap_or("")).unwrap();
    let names = v[&node].as_array().unwrap_or_else(|| panic!("{out}"));
    assert!(names.iter().any(|n| n == "hw.add"), "{out}");
    let (ok, out, _) = inspect("stats");
    assert!(ok, "{out}");
    let v: Value = serde_json::from_str(out.trim().lines().last().unwrap_or("")).unwrap();
    assert_eq!(v[&node]["pid"], json!(std::process::id()), "{out}");
    stop(wk, h).await;
}

/// Celery's events from a headway worker, read by Celery's own
/// `celery events --dump`: the worker comes online and beats, and a run is
/// received, started and succeeds; off by default, turned on by Celery's
/// `enable_events` control command (as Flower does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn celery_events_dump_shows_a_headway_workers_events() {
    let Some(w) = world(3600.0) else { return };
    let ran = Ran::default();
    let (app, b) = w.headway(&ran).await;
    assert!(!b.task_events(), "events are off until asked");
    let log = w.server.dir.join("events.log");
    let mut dump = w
        .py()
        .env("PYTHONUNBUFFERED", "1")
        .args(["-m", "celery", "-A", "celery_app", "events", "--dump"])
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start celery events --dump");
    // worker-online is sent once, at start, on a fanout that keeps nothing
    // for a late subscriber: the worker starts once the dumper is capturing.
    let until = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("starting capture")
    {
        assert!(Instant::now() < until, "celery events --dump did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (wk, h) = run_worker(&app, &["hw"]);
    // Celery's own broadcast turns them on (Flower sends the same).
    let until = Instant::now() + Duration::from_secs(20);
    while !b.task_events() {
        assert!(Instant::now() < until, "enable_events was not heard");
        w.celery(&["control", "enable_events", "-t", "2"]);
    }
    let id = w.drive(
        "send",
        json!({"name": "hw.add", "args": [2, 3], "queue": "hw"}),
    )["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(w.drive("get", json!({"id": id}))["ok"], json!(5));
    let node = b.node().to_string();
    let until = Instant::now() + Duration::from_secs(20);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let have = |what: &str| text.lines().any(|l| l.contains(&node) && l.contains(what));
        // The dumper's words: "heartbeat", "task received", ...
        if have("] heartbeat: ")
            && have(&format!("task received: hw.add({id}) args=[2, 3]"))
            && have(&format!("task started: hw.add({id})"))
            && have(&format!("task succeeded: hw.add({id})"))
        {
            break text;
        }
        assert!(
            Instant::now() < until,
            "events missing from the dump:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // worker-online, as the dumper words it.
    assert!(
        text.contains(&format!("{node} [")) && text.contains("] started: active="),
        "{text}"
    );
    assert!(text.contains("result=5"), "{text}");
    stop(wk, h).await;
    let _ = dump.kill();
    let _ = dump.wait();
}

/// `celery control shutdown`, Celery's own CLI, stops a headway worker
/// gracefully: it ran a task before the command (the positive control),
/// and its run ends after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn celerys_control_shutdown_stops_a_headway_worker() {
    let Some(w) = world(3600.0) else { return };
    let ran = Ran::default();
    let (app, _b) = w.headway(&ran).await;
    let (_wk, h) = run_worker(&app, &["hw"]);
    // The positive control: it runs a task first.
    let id = w.drive(
        "send",
        json!({"name": "hw.add", "args": [1, 1], "queue": "hw"}),
    )["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(w.drive("get", json!({"id": id}))["ok"], json!(2));
    assert!(!h.is_finished());
    w.celery(&["control", "shutdown", "-t", "2"]);
    let until = Instant::now() + Duration::from_secs(15);
    while !h.is_finished() {
        assert!(Instant::now() < until, "the worker did not stop");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    h.await.unwrap();
}

/// `celery inspect scheduled` lists the etas a headway worker holds, and
/// `inspect revoked` the ids it remembers revoked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn celerys_inspect_lists_held_etas_and_revoked_ids() {
    let Some(w) = world(3600.0) else { return };
    let ran = Ran::default();
    let (app, b) = w.headway(&ran).await;
    let (wk, h) = run_worker(&app, &["hw"]);
    let node = b.node().to_string();
    let later = w.drive(
        "send",
        json!({"name": "hw.add", "args": [4, 5], "queue": "hw", "countdown": 600}),
    )["id"]
        .as_str()
        .unwrap()
        .to_string();
    let gone = w.drive(
        "send",
        json!({"name": "hw.add", "args": [1, 1], "queue": "hw", "countdown": 600}),
    )["id"]
        .as_str()
        .unwrap()
        .to_string();
    w.drive("revoke", json!({"id": gone}));
    let answer = |what: &str| -> Value {
        let out = w.celery(&["inspect", what, "--json", "-t", "3"]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        serde_json::from_str(text.trim().lines().last().unwrap_or(""))
            .unwrap_or_else(|_| panic!("{text}"))
    };
    let until = Instant::now() + Duration::from_secs(20);
    let scheduled = loop {
        let v = answer("scheduled");
        let ids: Vec<String> = v[&node]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| e["request"]["id"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        if ids.contains(&later) {
            break v;
        }
        assert!(Instant::now() < until, "the eta was never listed: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let entry = scheduled[&node]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["request"]["id"] == json!(later))
        .unwrap()
        .clone();
    assert_eq!(entry["request"]["name"], json!("hw.add"), "{entry}");
    assert_eq!(entry["request"]["args"], json!([4, 5]), "{entry}");
    assert!(
        entry["eta"].as_str().is_some_and(|e| e.contains('T')),
        "{entry}"
    );
    let revoked = answer("revoked");
    let ids = revoked[&node]
        .as_array()
        .unwrap_or_else(|| panic!("{revoked}"));
    assert!(ids.contains(&json!(gone)), "{revoked}");
    // The positive control: the held eta is not among the revoked.
    assert!(!ids.contains(&json!(later)), "{revoked}");
    stop(wk, h).await;
}

/// Celery's CLI's answer on one line of `--json` output, for `node`.
fn cli_answer(w: &World, args: &[&str], node: &str) -> Value {
    let mut all = args.to_vec();
    all.extend(["--json", "-t", "3"]);
    let out = w.celery(&all);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let v: Value =
        serde_json::from_str(text.trim().lines().last().unwrap_or("")).unwrap_or_else(|_| {
            panic!(
                "celery {args:?}: {text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    // `inspect` answers `{node: answer}`; `control` a list of those.
    match v {
        Value::Array(a) => a
            .into_iter()
            .find_map(|e| e.get(node).cloned())
            .unwrap_or(Value::Null),
        v => v.get(node).cloned().unwrap_or(Value::Null),
    }
}

/// Registers `hw.hold`, whose body waits for a permit of the answer.
fn hold_task(app: &App) -> Arc<tokio::sync::Semaphore> {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let g = gate.clone();
    app.register(
        "hw.hold",
        Policy {
            queue: "hw".into(),
            ..Policy::default()
        },
        body(move |_ctx, args| {
            let g = g.clone();
            async move {
                g.acquire().await.unwrap().forget();
                Ok(Value::Array(args))
            }
        }),
    )
    .unwrap();
    gate
}

async fn send_to(app: &App, task: &str, args: Vec<Value>, queue: &str) -> String {
    app.send(
        task,
        args,
        Map::new(),
        Options {
            queue: Some(queue.into()),
            ..Options::default()
        },
    )
    .await
    .unwrap()
    .id()
    .to_string()
}

/// `celery inspect active` / `reserved` / `active_queues` / `conf` /
/// `report`, Celery's own CLI, answered by a headway worker from what it
/// holds: one run active, one reserved behind it (concurrency 1); both
/// empty once they finish (the positive control the lists are live).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn celerys_inspect_active_and_reserved_show_a_headway_workers_runs() {
    let Some(w) = world(3600.0) else { return };
    let ran = Ran::default();
    let (app, b) = w.headway(&ran).await;
    let gate = hold_task(&app);
    let wk = Worker::new(
        app.clone(),
        WorkerConfig {
            queues: vec!["hw".into()],
            concurrency: 1,
            prefetch: Some(2),
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let w2 = wk.clone();
    let h = tokio::spawn(async move { w2.run().await.unwrap() });
    let node = b.node().to_string();
    let one = send_to(&app, "hw.hold", vec![json!(1)], "hw").await;
    let two = send_to(&app, "hw.hold", vec![json!(2)], "hw").await;
    let until = Instant::now() + Duration::from_secs(20);
    let (active, reserved) = loop {
        let a = cli_answer(&w, &["inspect", "active"], &node);
        let r = cli_answer(&w, &["inspect", "reserved"], &node);
        if a.as_array().is_some_and(|x| x.len() == 1) && r.as_array().is_some_and(|x| x.len() == 1)
        {
            break (a[0].clone(), r[0].clone());
        }
        assert!(
            Instant::now() < until,
            "never one active, one reserved: {a} {r}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let ids = [active["id"].clone(), reserved["id"].clone()];
    assert!(
        ids.contains(&json!(one)) && ids.contains(&json!(two)),
        "{ids:?}"
    );
    assert_eq!(active["name"], json!("hw.hold"), "{active}");
    assert_eq!(active["type"], json!("hw.hold"), "{active}");
    assert_eq!(active["hostname"], json!(node), "{active}");
    assert_eq!(active["worker_pid"], json!(std::process::id()), "{active}");
    assert_eq!(active["acknowledged"], json!(true), "{active}");
    assert!(
        active["time_start"].as_f64().is_some_and(|t| t > 1e9),
        "{active}"
    );
    assert_eq!(
        active["delivery_info"]["routing_key"],
        json!("hw"),
        "{active}"
    );
    assert_eq!(reserved["time_start"], Value::Null, "{reserved}");
    assert_eq!(reserved["acknowledged"], json!(false), "{reserved}");
    // The queues consumed, as kombu's Queue.as_dict shows them.
    let queues = cli_answer(&w, &["inspect", "active_queues"], &node);
    assert_eq!(queues[0]["name"], json!("hw"), "{queues}");
    assert_eq!(queues[0]["exchange"]["type"], json!("direct"), "{queues}");
    // Flower's `conf`, and the bug report.
    let conf = cli_answer(&w, &["inspect", "conf"], &node);
    assert_eq!(conf["broker_url"], json!(w.url()), "{conf}");
    let report = cli_answer(&w, &["inspect", "report"], &node);
    assert!(
        report["ok"].as_str().is_some_and(|r| r.contains("headway")),
        "{report}"
    );
    // Both finish: nothing active or reserved.
    gate.add_permits(2);
    for id in [&one, &two] {
        app.handle(id)
            .get(Some(Duration::from_secs(20)))
            .await
            .unwrap();
    }
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let a = cli_answer(&w, &["inspect", "active"], &node);
        let r = cli_answer(&w, &["inspect", "reserved"], &node);
        if a == json!([]) && r == json!([]) {
            break;
        }
        assert!(Instant::now() < until, "still held: {a} {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop(wk, h).await;
}

/// `celery control rate_limit`, `time_limit`, `add_consumer`,
/// `cancel_consumer`, `pool_grow`, `pool_shrink`, Celery's own CLI, change
/// a running headway worker, each seen in what it does next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn celerys_control_commands_change_a_headway_worker() {
    let Some(w) = world(3600.0) else { return };
    let ran = Ran::default();
    let (app, b) = w.headway(&ran).await;
    let (wk, h) = run_worker(&app, &["hw"]);
    let node = b.node().to_string();
    // Positive control: it answers at all.
    let until = Instant::now() + Duration::from_secs(20);
    while cli_answer(&w, &["inspect", "ping"], &node) != json!({"ok": "pong"}) {
        assert!(Instant::now() < until, "no pong");
    }

    // rate_limit: one hw.add an hour; the second waits, then runs once
    // the limit is lifted.
    let r = cli_answer(&w, &["control", "rate_limit", "hw.add", "1/h"], &node);
    assert_eq!(r, json!({"ok": "new rate limit set successfully"}));
    let first = send_to(&app, "hw.add", vec![json!(1), json!(2)], "hw").await;
    assert_eq!(
        app.handle(&first)
            .get(Some(Duration::from_secs(20)))
            .await
            .unwrap(),
        json!(3)
    );
    let second = send_to(&app, "hw.add", vec![json!(2), json!(2)], "hw").await;
    assert!(
        app.handle(&second)
            .get(Some(Duration::from_millis(800)))
            .await
            .is_err(),
        "the rate let a second run through within the hour"
    );
    let r = cli_answer(&w, &["control", "rate_limit", "hw.add", "0"], &node);
    assert_eq!(r, json!({"ok": "rate limit disabled successfully"}));
    assert_eq!(
        app.handle(&second)
            .get(Some(Duration::from_secs(20)))
            .await
            .unwrap(),
        json!(4)
    );
    let r = cli_answer(&w, &["control", "rate_limit", "no.such", "1/s"], &node);
    assert_eq!(r, json!({"error": "unknown task \"no.such\""}));

    // time_limit: a soft limit is taken; a hard one needs the process
    // pool, and says so.
    let r = cli_answer(&w, &["control", "time_limit", "hw.add", "5"], &node);
    assert_eq!(r, json!({"ok": "time limits set successfully"}));
    let r = cli_answer(&w, &["control", "time_limit", "hw.add", "5", "10"], &node);
    assert!(
        r["error"]
            .as_str()
            .is_some_and(|e| e.contains("process pool")),
        "{r}"
    );

    // add_consumer: a run on `extra` waits until the worker consumes it.
    let waiting = send_to(&app, "hw.add", vec![json!(5), json!(5)], "extra").await;
    assert!(
        app.handle(&waiting)
            .get(Some(Duration::from_millis(500)))
            .await
            .is_err(),
        "ran from a queue not consumed"
    );
    let r = cli_answer(&w, &["control", "add_consumer", "extra"], &node);
    assert_eq!(r, json!({"ok": "add consumer extra"}));
    assert_eq!(
        app.handle(&waiting)
            .get(Some(Duration::from_secs(20)))
            .await
            .unwrap(),
        json!(10)
    );
    let queues = cli_answer(&w, &["inspect", "active_queues"], &node);
    let names: Vec<&str> = queues
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|q| q["name"].as_str())
        .collect();
    assert_eq!(names, vec!["hw", "extra"], "{queues}");
    let r = cli_answer(&w, &["control", "cancel_consumer", "extra"], &node);
    assert_eq!(r, json!({"ok": "no longer consuming from extra"}));
    assert_eq!(wk.queues(), vec!["hw".to_string()]);

    // pool_grow / pool_shrink: the concurrency `inspect stats` shows.
    let conc = || cli_answer(&w, &["inspect", "stats"], &node)["pool"]["max-concurrency"].clone();
    assert_eq!(conc(), json!(2));
    let r = cli_answer(&w, &["control", "pool_grow", "3"], &node);
    assert_eq!(r, json!({"ok": "pool will grow"}));
    assert_eq!(conc(), json!(5));
    let r = cli_answer(&w, &["control", "pool_shrink", "4"], &node);
    assert_eq!(r, json!({"ok": "pool will shrink"}));
    assert_eq!(conc(), json!(1));
    let r = cli_answer(&w, &["control", "pool_shrink", "1"], &node);
    assert!(
        r["error"]
            .as_str()
            .is_some_and(|e| e.contains("at least 1")),
        "{r}"
    );
    // Still runs.
    let last = send_to(&app, "hw.add", vec![json!(3), json!(3)], "hw").await;
    assert_eq!(
        app.handle(&last)
            .get(Some(Duration::from_secs(20)))
            .await
            .unwrap(),
        json!(6)
    );
    stop(wk, h).await;
}

/// `celery control heartbeat` makes a headway worker send a heartbeat at
/// once, even with task events off; a producer with Celery's
/// `task_send_sent_event` sends `task-sent`, one without does not — both
/// read by Celery's own `celery events --dump`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn celery_events_dump_shows_a_remote_heartbeat_and_task_sent() {
    let Some(w) = world(3600.0) else { return };
    let ran = Ran::default();
    let (app, b) = w.headway(&ran).await;
    assert!(!b.task_events());
    let log = w.server.dir.join("events.log");
    let mut dump = w
        .py()
        .env("PYTHONUNBUFFERED", "1")
        .args(["-m", "celery", "-A", "celery_app", "events", "--dump"])
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start celery events --dump");
    let (wk, h) = run_worker(&app, &["hw"]);
    let node = b.node().to_string();
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    // Events off: the heartbeat comes only when asked (the dumper may start
    // late, so ask until one shows).
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let r = w.celery(&["control", "heartbeat", "-t", "1"]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        if read()
            .lines()
            .any(|l| l.contains(&node) && l.contains("] heartbeat: "))
        {
            break;
        }
        assert!(Instant::now() < until, "no heartbeat: {}", read());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!b.task_events(), "a heartbeat turns nothing on");
    // task-sent: the same app without the option sends none; a producer
    // with it sends one for its message.
    let quiet = send_to(&app, "hw.add", vec![json!(1), json!(1)], "hw").await;
    let loud_b = CeleryBroker::connect(
        &w.url(),
        CeleryOptions {
            task_send_sent_event: true,
            ..CeleryOptions::default()
        },
        Arc::new(SystemClock),
    )
    .await
    .expect("connect");
    let loud_app = App::new(loud_b.seams(), Arc::new(SystemClock));
    let loud = loud_app
        .send_task(
            "hw.add",
            vec![json!(2), json!(2)],
            Map::new(),
            Options {
                queue: Some("hw".into()),
                ..Options::default()
            },
        )
        .await
        .unwrap()
        .id()
        .to_string();
    assert_eq!(
        app.handle(&loud)
            .get(Some(Duration::from_secs(20)))
            .await
            .unwrap(),
        json!(4)
    );
    let until = Instant::now() + Duration::from_secs(20);
    let text = loop {
        let text = read();
        if text.contains(&format!("task sent: hw.add({loud})")) {
            break text;
        }
        assert!(Instant::now() < until, "no task sent:\n{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(!text.contains(&quiet), "{text}");
    stop(wk, h).await;
    let _ = dump.kill();
    let _ = dump.wait();
}
