//! Redis throughput probe: headway's own layout and Celery's, on a
//! redis-server of its own (a free loopback port, never 6379).
//!
//! Run: `cargo bench -p headway-core --bench redis [-- N [CONCURRENCY]]`
//! (N = 20 000, concurrency 8). For each layout it pre-fills N no-op
//! messages (batches of 1000), drains them with one worker, results stored,
//! then times 1000 one-at-a-time send → result round trips. It prints
//! enqueue/s, drain/s, round trip p50/p99, and the CPU the client and
//! redis-server spent per drained message.
//! `HEADWAY_BENCH_LAYOUT=headway|celery` runs one layout only.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use headway_core::broker::celery::{CeleryBroker, CeleryOptions};
use headway_core::broker::redis::{RedisBroker, RedisOptions};
use headway_core::task::{
    App, Clock, Message, Options, Policy, SystemClock, Worker, WorkerConfig, body,
};
use serde_json::{Map, Value};

struct Server {
    port: u16,
    child: Child,
    dir: std::path::PathBuf,
}

impl Server {
    fn start() -> Server {
        let port = loop {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
            let p = l.local_addr().unwrap().port();
            if p != 6379 {
                break p;
            }
        };
        let dir = std::env::temp_dir().join(format!("headway-bench-redis-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&dir)
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server (is it on PATH?)");
        let s = Server { port, child, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while s.cli(&["PING"]).trim() != "PONG" {
            assert!(Instant::now() < deadline, "redis-server did not answer");
            std::thread::sleep(Duration::from_millis(10));
        }
        s
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// redis-server's CPU seconds so far (user + sys).
    fn cpu(&self) -> f64 {
        let info = self.cli(&["INFO", "cpu"]);
        ["used_cpu_user:", "used_cpu_sys:"]
            .iter()
            .map(|k| {
                info.lines()
                    .find_map(|l| l.strip_prefix(k))
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .unwrap_or(0.0)
            })
            .sum()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// This process's CPU seconds so far (user + sys), from /proc.
fn own_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 (1-based); `after` starts at 3.
    (ticks(11) + ticks(12)) / 100.0
}

async fn probe(label: &str, app: App, server: &Server, n: usize, concurrency: usize) {
    app.register(
        "noop",
        Policy::default(),
        body(|_, _| async { Ok(Value::Null) }),
    )
    .unwrap();
    let t = Instant::now();
    let mut batch = Vec::with_capacity(1000);
    for i in 0..n {
        batch.push(Message::new(
            format!("{label}-{i}"),
            "noop".into(),
            vec![],
            Map::new(),
            "default".into(),
        ));
        if batch.len() == 1000 {
            app.broker()
                .publish(std::mem::take(&mut batch))
                .await
                .unwrap();
        }
    }
    if !batch.is_empty() {
        app.broker().publish(batch).await.unwrap();
    }
    let enq = t.elapsed();
    let w = Worker::new(
        app.clone(),
        WorkerConfig {
            concurrency,
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    server.cli(&["CONFIG", "RESETSTAT"]);
    let (cpu0, rcpu0) = (own_cpu(), server.cpu());
    let t = Instant::now();
    let w2 = w.clone();
    let h = tokio::spawn(async move { w2.run().await.unwrap() });
    while w.settled() < n as u64 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let drain = t.elapsed();
    let (cpu1, rcpu1) = (own_cpu(), server.cpu());
    if std::env::var_os("HEADWAY_BENCH_STATS").is_some() {
        // Where redis-server's time went during the drain, by command.
        for l in server.cli(&["INFO", "commandstats"]).lines() {
            if l.starts_with("cmdstat_") {
                println!("  {l}");
            }
        }
    }
    let mut rtts = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let t = Instant::now();
        let hd = app
            .send("noop", vec![], Map::new(), Options::default())
            .await
            .unwrap();
        hd.get(Some(Duration::from_secs(5))).await.unwrap();
        rtts.push(t.elapsed());
    }
    rtts.sort();
    w.stop(Duration::from_secs(1));
    h.await.unwrap();
    let per = |s: f64| s * 1e6 / n as f64;
    println!(
        "{label}: enqueue {:.0}/s, drain {:.0}/s (concurrency {concurrency}, results stored), \
         round trip p50 {:.0} µs p99 {:.0} µs; per drained message: client {:.1} µs CPU, redis {:.1} µs CPU",
        n as f64 / enq.as_secs_f64(),
        n as f64 / drain.as_secs_f64(),
        rtts[rtts.len() / 2].as_secs_f64() * 1e6,
        rtts[rtts.len() * 99 / 100].as_secs_f64() * 1e6,
        per(cpu1 - cpu0),
        per(rcpu1 - rcpu0),
    );
}

fn main() {
    let nums: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let n = nums.first().copied().unwrap_or(20_000);
    let concurrency = nums.get(1).copied().unwrap_or(8);
    let only = std::env::var("HEADWAY_BENCH_LAYOUT").ok();
    let rt = headway_core::runtime::runtime().expect("runtime");
    rt.block_on(async move {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        if only.as_deref().is_none_or(|l| l == "headway") {
            let s = Server::start();
            let b = RedisBroker::connect(&s.url(), RedisOptions::default(), clock.clone())
                .await
                .unwrap();
            probe(
                "headway layout",
                App::new(b.seams(), clock.clone()),
                &s,
                n,
                concurrency,
            )
            .await;
        }
        if only.as_deref().is_none_or(|l| l == "celery") {
            let s = Server::start();
            let b = CeleryBroker::connect(&s.url(), CeleryOptions::default(), clock.clone())
                .await
                .unwrap();
            probe(
                "celery layout",
                App::new(b.seams(), clock.clone()),
                &s,
                n,
                concurrency,
            )
            .await;
        }
    });
}
