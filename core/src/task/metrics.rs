//! Prometheus metrics: what this process's workers did, what its brokers
//! hold, in Prometheus' text format (version 0.0.4).
//!
//! Counted as runs settle, per app: `headway_tasks_total{task,state}` and
//! `headway_task_runtime_seconds{task}` (a histogram). Read at scrape time:
//! each running worker's `headway_worker_active` and
//! `headway_worker_prefetched`, each queue's `headway_queue_depth` (ready),
//! `headway_queue_delayed`, `headway_queue_unacked` and
//! `headway_dead_letters` (from the app's inspector, one round of broker
//! calls per scrape, none per run), and the process's
//! `headway_broker_reconnects_total`. One text for the admin's `/metrics`
//! and for the worker's own port (`metrics::serve`), whichever language.
//!
//! Counting costs one uncontended lock and a map lookup per settled run
//! (the task's name is the key, borrowed, so nothing is allocated after a
//! task's first run).

use std::collections::BTreeMap;

use crate::hashed::HashMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::app::App;
use super::state::{Refused, State};

/// The runtime histogram's upper bounds, seconds: Prometheus clients'
/// defaults, and longer ones for the minutes a task may take.
pub const BUCKETS: [f64; 17] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0,
    3600.0,
];

/// Broker connections made again after they were lost, in this process.
static RECONNECTS: AtomicU64 = AtomicU64::new(0);

/// Counts a broker connection made again (the Redis link's).
pub(crate) fn reconnected() {
    RECONNECTS.fetch_add(1, Ordering::Relaxed);
}

#[derive(Default)]
struct TaskCounts {
    by_state: [u64; State::ALL.len()],
    buckets: [u64; BUCKETS.len()],
    /// Runs timed, and their total, ms.
    timed: u64,
    sum_ms: i64,
}

/// An app's counters.
#[derive(Default)]
pub struct Metrics {
    tasks: Mutex<HashMap<String, TaskCounts>>,
}

impl Metrics {
    /// A run of `task` settled as `state`; `runtime_ms` when it ran.
    pub fn settled(&self, task: &str, state: State, runtime_ms: Option<i64>) {
        let mut t = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        let c = match t.get_mut(task) {
            Some(c) => c,
            None => t.entry(task.to_string()).or_default(),
        };
        if let Some(i) = State::ALL.iter().position(|s| *s == state) {
            c.by_state[i] += 1;
        }
        if let Some(ms) = runtime_ms {
            let ms = ms.max(0);
            let secs = ms as f64 / 1000.0;
            if let Some(i) = BUCKETS.iter().position(|b| secs <= *b) {
                c.buckets[i] += 1;
            }
            c.timed += 1;
            c.sum_ms = c.sum_ms.saturating_add(ms);
        }
    }
}

/// A label value, escaped as the text format asks.
fn label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for ch in v.chars() {
        match ch {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn seconds(x: f64) -> String {
    if x.is_finite() && x.fract() == 0.0 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

/// One gauge, a line per queue.
fn by_queue(out: &mut String, name: &str, help: &str, rows: Vec<(&str, u64)>) {
    head(out, name, "gauge", help);
    for (q, v) in rows {
        let _ = writeln!(out, "{name}{{queue=\"{}\"}} {v}", label(q));
    }
}

/// The app's metrics as Prometheus text.
pub async fn render(app: &App) -> Result<String, Refused> {
    let mut out = String::new();
    {
        let t = app
            .metrics()
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let sorted: BTreeMap<&String, &TaskCounts> = t.iter().collect();
        head(
            &mut out,
            "headway_tasks_total",
            "counter",
            "Runs this process's workers settled, by task and state.",
        );
        for (task, c) in &sorted {
            for (i, state) in State::ALL.iter().enumerate() {
                if c.by_state[i] > 0 {
                    let _ = writeln!(
                        out,
                        "headway_tasks_total{{task=\"{}\",state=\"{}\"}} {}",
                        label(task),
                        state.name(),
                        c.by_state[i]
                    );
                }
            }
        }
        head(
            &mut out,
            "headway_task_runtime_seconds",
            "histogram",
            "How long runs took in their bodies, by task.",
        );
        for (task, c) in &sorted {
            if c.timed == 0 {
                continue;
            }
            let task = label(task);
            let mut cum = 0u64;
            for (i, b) in BUCKETS.iter().enumerate() {
                cum += c.buckets[i];
                let _ = writeln!(
                    out,
                    "headway_task_runtime_seconds_bucket{{task=\"{task}\",le=\"{}\"}} {cum}",
                    seconds(*b)
                );
            }
            let _ = writeln!(
                out,
                "headway_task_runtime_seconds_bucket{{task=\"{task}\",le=\"+Inf\"}} {}",
                c.timed
            );
            let _ = writeln!(
                out,
                "headway_task_runtime_seconds_sum{{task=\"{task}\"}} {}",
                c.sum_ms as f64 / 1000.0
            );
            let _ = writeln!(
                out,
                "headway_task_runtime_seconds_count{{task=\"{task}\"}} {}",
                c.timed
            );
        }
    }
    let workers = super::runners::workers(app);
    head(
        &mut out,
        "headway_worker_active",
        "gauge",
        "Bodies running now, by worker.",
    );
    for w in &workers {
        let _ = writeln!(
            out,
            "headway_worker_active{{worker=\"{}\"}} {}",
            label(&w.name),
            w.load.active
        );
    }
    head(
        &mut out,
        "headway_worker_prefetched",
        "gauge",
        "Messages claimed and not yet running, by worker.",
    );
    for w in &workers {
        let _ = writeln!(
            out,
            "headway_worker_prefetched{{worker=\"{}\"}} {}",
            label(&w.name),
            w.load.held.saturating_sub(w.load.active)
        );
    }
    if let Some(i) = app.inspector() {
        let queues = i.queues().await?;
        let mut dead = Vec::with_capacity(queues.len());
        for q in &queues {
            dead.push(i.dead_count(&q.name).await?);
        }
        let rows = |f: &dyn Fn(usize) -> u64| -> Vec<(&str, u64)> {
            queues
                .iter()
                .enumerate()
                .map(|(i, q)| (q.name.as_str(), f(i)))
                .collect()
        };
        by_queue(
            &mut out,
            "headway_queue_depth",
            "Messages ready to be claimed, by queue.",
            rows(&|i| queues[i].ready.values().sum()),
        );
        by_queue(
            &mut out,
            "headway_queue_delayed",
            "Messages waiting for their eta, by queue.",
            rows(&|i| queues[i].delayed),
        );
        by_queue(
            &mut out,
            "headway_queue_unacked",
            "Messages claimed and not settled, by queue.",
            rows(&|i| queues[i].unacked),
        );
        by_queue(
            &mut out,
            "headway_dead_letters",
            "Dead letters kept, by queue.",
            rows(&|i| dead[i]),
        );
    }
    head(
        &mut out,
        "headway_broker_reconnects_total",
        "counter",
        "Broker connections made again after they were lost, in this process.",
    );
    let _ = writeln!(
        out,
        "headway_broker_reconnects_total {}",
        RECONNECTS.load(Ordering::Relaxed)
    );
    Ok(out)
}

/// The content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A worker's own metrics port (`headway worker --metrics-port`): a small
/// HTTP/1.1 server answering `GET /metrics` with [`render`], nothing else,
/// one request per connection, on the shared runtime.
pub struct MetricsServer {
    /// Where it listens (the port chosen when 0 was asked).
    pub addr: std::net::SocketAddr,
    task: tokio::task::AbortHandle,
}

impl MetricsServer {
    /// Stops listening.
    pub fn close(&self) {
        self.task.abort();
    }
}

/// Serves `app`'s metrics on `host:port` (port 0: any free one; a port
/// outside 0..=65535 is refused naming it).
pub fn serve(app: App, host: &str, port: i64) -> Result<MetricsServer, Refused> {
    let port = u16::try_from(port).map_err(|_| {
        Refused::Invalid(format!("the metrics port must be 0 to 65535, not {port}"))
    })?;
    let why = |e: std::io::Error| {
        Refused::Invalid(format!(
            "cannot serve metrics on {}:{port}: {e}",
            crate::log::shown(host)
        ))
    };
    let rt = crate::runtime::runtime().map_err(|e| Refused::Invalid(e.to_string()))?;
    let std = std::net::TcpListener::bind((host, port)).map_err(why)?;
    std.set_nonblocking(true).map_err(why)?;
    let addr = std.local_addr().map_err(why)?;
    let listener = {
        let _in = rt.enter();
        tokio::net::TcpListener::from_std(std).map_err(why)?
    };
    let task = rt.spawn(async move {
        loop {
            match listener.accept().await {
                Ok((sock, _)) => {
                    tokio::spawn(answer(app.clone(), sock));
                }
                // Out of descriptors, say: try again shortly.
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            }
        }
    });
    Ok(MetricsServer {
        addr,
        task: task.abort_handle(),
    })
}

/// How much of a request it reads at most.
const REQUEST_MAX: usize = 8192;

async fn answer(app: App, mut sock: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = Vec::with_capacity(1024);
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        let mut chunk = [0u8; 1024];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < REQUEST_MAX {
            match sock.read(&mut chunk).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        true
    })
    .await;
    if !matches!(read, Ok(true)) {
        return;
    }
    let line = String::from_utf8_lossy(&buf);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, ctype, body) = if path != "/metrics" {
        (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "only /metrics is served here\n".to_string(),
        )
    } else if method != "GET" && method != "HEAD" {
        (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "use GET\n".to_string(),
        )
    } else {
        match render(&app).await {
            Ok(t) => ("200 OK", CONTENT_TYPE, t),
            Err(e) => (
                "503 Service Unavailable",
                "text/plain; charset=utf-8",
                format!("{e}\n"),
            ),
        }
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = sock.write_all(head.as_bytes()).await;
    if method != "HEAD" {
        let _ = sock.write_all(body.as_bytes()).await;
    }
    let _ = sock.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_escaped_and_runs_fall_in_their_bucket() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        let m = Metrics::default();
        m.settled("t", State::Success, Some(3));
        m.settled("t", State::Success, Some(700));
        m.settled("t", State::Failure, None);
        let t = m.tasks.lock().unwrap();
        let c = &t["t"];
        assert_eq!(
            c.by_state[State::ALL
                .iter()
                .position(|s| *s == State::Success)
                .unwrap()],
            2
        );
        assert_eq!(c.buckets[0], 1, "3 ms is under 5 ms");
        assert_eq!(
            c.buckets[BUCKETS.iter().position(|b| *b == 1.0).unwrap()],
            1
        );
        assert_eq!((c.timed, c.sum_ms), (2, 703));
    }
}
