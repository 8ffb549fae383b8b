//! Redis stopped for 5 s under load and started again, on
//! headway's own Redis layout and on Celery's layout.
//!
//! A redis-server with `appendonly yes` (`appendfsync always`, so every
//! acknowledged write survives a kill -9) is killed while producers in this
//! process keep sending and a worker process (this test binary run as a
//! child) keeps consuming `acks_late` tasks; it comes back on the same port
//! and dir 5 s later. The worker appends every execution — id, attempt,
//! worker, start, end — to a ledger file, outside the broker. From it:
//! `lost = enqueued − done − dead − revoked − expired` must be 0, and the
//! worker must consume again (and say so in its log).
//!
//! Skipped without redis-server unless `HEADWAY_REQUIRE_REDIS=1`. Each
//! layout takes about 20 s.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use headway_core::task::{
    App, Clock, Inspector, Options, Policy, Seams, SystemClock, Worker, WorkerConfig, body,
};
use serde_json::{Map, Value, json};
use support::RedisServer;
use support::kit::{Conn, Layout, Opts};

/// How long Redis is away.
const OUTAGE: Duration = Duration::from_secs(5);
/// Load before the outage, and after Redis is back.
const BEFORE: Duration = Duration::from_secs(3);
const AFTER: Duration = Duration::from_secs(4);
/// Producers, each sending one task every `GAP`: about 100 tasks/s.
const PRODUCERS: usize = 4;
const GAP: Duration = Duration::from_millis(40);

fn now_ms() -> i64 {
    SystemClock.now()
}

/// The seams of `layout` on `url`, for a process named `name`.
async fn open(layout: &str, url: &str, name: &str, consuming: bool) -> (Seams, Arc<dyn Inspector>) {
    let layout = Layout::parse(layout);
    let opts = match layout {
        // Recovery every 30 s by a consumer (nothing is lost here but
        // claims whose answer went with the connection).
        Layout::Redis => Opts {
            recover_every: consuming.then_some(Duration::from_secs(30)),
            ..Opts::named(name)
        },
        // Short, so a claim whose answer was lost with the connection is
        // restored within the test; the worker re-scores what it holds
        // every 750 ms.
        _ => Opts {
            recover_every: consuming.then_some(Duration::from_secs(1)),
            ..Opts::named(name).lease(Duration::from_secs(3))
        },
    };
    let b = Conn::open(layout, url, &opts).await.unwrap();
    (b.seams(), b.inspector())
}

/// The queue of the dead-letter check's positive control.
const CONTROL: &str = "control";

/// Puts bytes that are not a message on the queue [`CONTROL`] and claims
/// them, so the layout quarantines them: one dead letter.
async fn control_dead_letter(layout: &str, url: &str) {
    let queues = vec![CONTROL.to_string()];
    let b = Conn::open(Layout::parse(layout), url, &Opts::named("control"))
        .await
        .unwrap();
    b.push_raw(CONTROL, b"\x00 not a message").await;
    let got = b
        .broker()
        .consume(&queues, 1, Duration::ZERO)
        .await
        .unwrap();
    assert!(got.is_empty(), "{layout}: the control bytes were delivered");
}

/// Appends one line to the ledger (O_APPEND: whole lines).
fn ledger(path: &str, line: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(format!("{line}\n").as_bytes()).unwrap();
}

/// One execution as the ledger has it.
#[derive(Debug, Default, Clone)]
struct Run {
    attempt: u32,
    worker: String,
    start: i64,
    end: Option<i64>,
}

/// The ledger read back: id → its executions (by execution number).
fn read_ledger(path: &str) -> BTreeMap<String, BTreeMap<String, Run>> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out: BTreeMap<String, BTreeMap<String, Run>> = BTreeMap::new();
    for l in text.lines() {
        let p: Vec<&str> = l.split(' ').collect();
        let [what, id, attempt, exec, worker, at] = p[..] else {
            continue;
        };
        let at: i64 = at.parse().unwrap();
        let run = out
            .entry(id.to_string())
            .or_default()
            .entry(exec.to_string())
            .or_default();
        match what {
            "start" => {
                run.attempt = attempt.parse().unwrap();
                run.worker = worker.to_string();
                run.start = at;
            }
            "end" => run.end = Some(at),
            _ => {}
        }
    }
    out
}

fn spawn_worker(layout: &str, url: &str, path: &str, log: &std::path::Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("HEADWAY_CHILD", layout)
        .env("HEADWAY_CHILD_URL", url)
        .env("HEADWAY_LEDGER", path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(log).unwrap()))
        .spawn()
        .expect("spawn the test binary as a worker")
}

async fn outage(layout: &str) {
    let Some(mut s) = RedisServer::start_with(true) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("headway-outage-{layout}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ledger").to_string_lossy().into_owned();
    let log = dir.join("worker.log");
    let t0 = Instant::now();
    let t0_ms = now_ms();
    let mut child = spawn_worker(layout, &s.url(), &path, &log);
    let (seams, insp) = open(layout, &s.url(), "producer", false).await;
    let app = App::new(seams, Arc::new(SystemClock));

    // Producers send until the end of the load, recording what was
    // accepted; a send that fails raised (nothing silent) and is recorded
    // apart.
    let enqueued = Arc::new(Mutex::new(BTreeSet::new()));
    let refused = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut producers = Vec::new();
    for p in 0..PRODUCERS {
        let (app, enqueued, refused, stop) =
            (app.clone(), enqueued.clone(), refused.clone(), stop.clone());
        producers.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let id = format!("p{p}-{i}");
                i += 1;
                let opts = Options {
                    id: Some(id.clone()),
                    ..Options::default()
                };
                match app.send_task("job", vec![json!(i)], Map::new(), opts).await {
                    Ok(_) => {
                        enqueued.lock().unwrap().insert(id);
                    }
                    Err(e) => refused.lock().unwrap().push((id, e.to_string())),
                }
                tokio::time::sleep(GAP).await;
            }
        }));
    }
    // The worker is consuming (50 runs in its ledger), then the load goes
    // on for the rest of `BEFORE`.
    let deadline = Instant::now() + BEFORE * 3;
    loop {
        let before = read_ledger(&path).len();
        if before > 50 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{layout}: the worker ran {before} before the outage"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(BEFORE.saturating_sub(t0.elapsed())).await;
    // Redis goes away (kill -9: only what was fsynced survives), and comes
    // back on the same port and dir 5 s later.
    s.kill();
    let down_at = now_ms();
    tokio::time::sleep(OUTAGE).await;
    s.restart();
    let up_at = now_ms();
    tokio::time::sleep(AFTER).await;
    stop.store(true, Ordering::SeqCst);
    for p in producers {
        p.await.unwrap();
    }
    let enqueued = enqueued.lock().unwrap().clone();
    let refused = refused.lock().unwrap().clone();

    // Wait for the worker to finish every accepted task.
    let deadline = Instant::now() + Duration::from_secs(30);
    let runs = loop {
        let runs = read_ledger(&path);
        let done = enqueued
            .iter()
            .filter(|id| {
                runs.get(*id)
                    .is_some_and(|r| r.values().any(|x| x.end.is_some()))
            })
            .count();
        if done == enqueued.len() || Instant::now() >= deadline {
            break runs;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let dead = insp.dead_count("default").await.unwrap();
    // Positive control for the dead-letter check below: bytes that are not
    // a message, claimed on a queue of their own, are seen as one dead
    // letter by the same inspector.
    control_dead_letter(layout, &s.url()).await;
    let mut queues: BTreeSet<String> = insp
        .queues()
        .await
        .unwrap()
        .into_iter()
        .map(|q| q.name)
        .collect();
    queues.insert("default".into());
    queues.insert(CONTROL.into());
    let mut dead_by_queue = BTreeMap::new();
    for q in &queues {
        dead_by_queue.insert(q.clone(), insp.dead_count(q).await.unwrap());
    }
    let _ = child.kill();
    let _ = child.wait();
    let worker_log = std::fs::read_to_string(&log).unwrap_or_default();

    // The ledger: lost = enqueued − done − dead − revoked − expired.
    let done: BTreeSet<&String> = runs
        .iter()
        .filter(|(_, r)| r.values().any(|x| x.end.is_some()))
        .map(|(id, _)| id)
        .collect();
    let executions: usize = runs.values().map(BTreeMap::len).sum();
    let dup = executions - done.len();
    let (revoked, expired) = (0, 0); // none sent
    let lost = enqueued.len()
        - enqueued.iter().filter(|id| done.contains(id)).count()
        - dead as usize
        - revoked
        - expired;
    let resumed = runs
        .values()
        .flat_map(|r| r.values())
        .map(|r| r.start)
        .filter(|&t| t >= up_at)
        .min();
    eprintln!(
        "outage {layout}: enqueued {}, refused {}, done {}, executions {executions}, dup {dup}, dead {dead}, lost {lost}, down at +{} ms, consuming again {:?} ms after Redis was back, {:?} in all",
        enqueued.len(),
        refused.len(),
        done.len(),
        down_at - t0_ms,
        resumed.map(|t| t - up_at),
        t0.elapsed()
    );
    if std::env::var("HEADWAY_OUTAGE_LOG").as_deref() == Ok("1") {
        eprintln!("worker log ({layout}):\n{worker_log}");
    }
    let missing: Vec<&String> = enqueued
        .iter()
        .filter(|id| !done.contains(id))
        .take(10)
        .collect();
    assert_eq!(
        lost, 0,
        "{layout}: accepted and never done: {missing:?}\nworker log:\n{worker_log}"
    );
    // The workload has no poison: a dead letter on any queue is a failure
    // (a message the outage mangled, or a holder counted lost), not an
    // excuse for a missing run. The control queue's one shows the count
    // can see one.
    for (q, n) in &dead_by_queue {
        let want = u64::from(q == CONTROL);
        assert_eq!(
            *n, want,
            "{layout}: queue {q:?} has {n} dead letter(s)\nworker log:\n{worker_log}"
        );
    }
    // Nothing ran that was not sent (a refused send may have landed: it ran
    // or not, but it raised, so its producer knew).
    for id in &done {
        assert!(
            enqueued.contains(*id) || refused.iter().any(|(r, _)| r == *id),
            "{layout}: {id} ran but was never sent"
        );
    }
    assert!(
        enqueued.len() > 400,
        "{layout}: producers kept sending: {}",
        enqueued.len()
    );
    // Consumption resumed after the outage, and the worker said so.
    assert!(
        resumed.is_some(),
        "{layout}: nothing started after Redis was back\n{worker_log}"
    );
    assert!(
        worker_log.contains("broker is back; consuming again"),
        "{layout}: the worker did not log that it is back:\n{worker_log}"
    );
    assert!(
        worker_log.contains("resuming"),
        "{layout}: the broker did not log its reconnect:\n{worker_log}"
    );
    // A send during an outage shorter than the patience waits, and lands.
    assert!(
        refused.is_empty(),
        "{layout}: sends failed: {:?}",
        &refused[..refused.len().min(5)]
    );
    // Each ran at most a few times — at least once, not a loop — as its
    // first attempt (nothing failed), by the worker process.
    for (id, r) in &runs {
        assert!(r.len() <= 3, "{layout}: {id} ran {} times", r.len());
        for x in r.values() {
            assert_eq!(x.attempt, 1, "{layout}: {id}");
            assert!(x.worker.starts_with("outage-worker-"), "{layout}: {id}");
            assert!(x.end.is_none_or(|e| e >= x.start));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_layout_loses_nothing_when_redis_is_down_5_s_under_load() {
    outage("redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn celery_layout_loses_nothing_when_redis_is_down_5_s_under_load() {
    outage("celery").await;
}

/// Not a test on its own: the worker process the tests above run, on the
/// layout `HEADWAY_CHILD` names, until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn child() {
    let Ok(layout) = std::env::var("HEADWAY_CHILD") else {
        return;
    };
    // The worker logs through the `log` facade: to stderr, as a binding does.
    headway_core::log::sink::to_stderr(headway_core::log::sink::Format::Plain);
    let url = std::env::var("HEADWAY_CHILD_URL").unwrap();
    let path = std::env::var("HEADWAY_LEDGER").unwrap();
    let name = format!("outage-worker-{}", std::process::id());
    let (seams, _) = open(&layout, &url, &name, true).await;
    let app = App::new(seams, Arc::new(SystemClock));
    let who = name.clone();
    let execs = Arc::new(std::sync::atomic::AtomicU64::new(0));
    app.register(
        "job",
        Policy {
            acks_late: true,
            ..Policy::default()
        },
        body(move |ctx, args| {
            let (path, who) = (path.clone(), who.clone());
            let exec = execs.fetch_add(1, Ordering::SeqCst);
            async move {
                let run = format!("{} {} {exec} {who}", ctx.id, ctx.attempt);
                ledger(&path, &format!("start {run} {}", now_ms()));
                let ms = 5 + args[0].as_u64().unwrap_or(0) % 15;
                tokio::time::sleep(Duration::from_millis(ms)).await;
                ledger(&path, &format!("end {run} {}", now_ms()));
                Ok(Value::Null)
            }
        }),
    )
    .unwrap();
    let w = Worker::new(
        app,
        WorkerConfig {
            concurrency: 4,
            prefetch: Some(8),
            name: Some(name),
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    w.run().await.unwrap();
}
