//! Remote control, layout-neutral: what a node (a process where workers of
//! an app run) answers to an `inspect` or a `control` command, from its
//! workers' live state.
//!
//! Operators know Celery's commands (`celery inspect active`, `celery
//! control rate_limit`, Flower's buttons), so the commands, their argument
//! names and their meaning are Celery's. How a command reaches a node and
//! how its answer travels back is a layout's business: Celery's layout
//! answers on kombu's pidbox in Celery's reply format
//! (`broker/celery/control.rs`), the own layouts on their control channel
//! (`task/control.rs`). Both decode a command into a [`Command`] and ask
//! [`Node::run`], so what a command does — which workers it reaches, what
//! it refuses and why — is decided once, here.
//!
//! A node is only a node while a worker of the app runs in it
//! ([`Node::here`]): a producer answers nothing, so a liveness probe is
//! never answered by a process that runs no task.

use serde_json::{Map, Value, json};

use super::App;
use super::policy::Rate;
use super::runners;
use super::state::Refused;
use super::worker::{RunInfo, Worker};

/// A remote command, with Celery's names for it and its arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// `inspect ping`: the liveness probe.
    Ping,
    /// `inspect active`: the runs whose body runs now.
    Active,
    /// `inspect reserved`: the runs claimed and not started yet.
    Reserved,
    /// `inspect scheduled`: the messages with an eta held here.
    Scheduled,
    /// `inspect stats`.
    Stats,
    /// `inspect registered`: the task names.
    Registered,
    /// `inspect active_queues`: the queues consumed.
    ActiveQueues,
    /// `control rate_limit <task> <rate>`: `None` (an empty rate or 0)
    /// removes the limit.
    RateLimit {
        task: String,
        rate: Option<Rate>,
    },
    /// `control time_limit <task> <soft> [hard]` (ms each).
    TimeLimit {
        task: String,
        soft: Option<i64>,
        hard: Option<i64>,
    },
    /// `control pool_grow [n]` / `pool_shrink [n]`.
    PoolGrow(usize),
    PoolShrink(usize),
    /// `control add_consumer <queue>` / `cancel_consumer <queue>`.
    AddConsumer(String),
    CancelConsumer(String),
    /// `control heartbeat`: a worker heartbeat event now.
    Heartbeat,
    /// `control shutdown`: a warm shutdown of the node's workers.
    Shutdown,
    /// Any other name: the layout may know it (Celery's `revoked`,
    /// `conf`, ...), or answers it is unknown.
    Other(String),
}

/// Why a command could not be read, naming the argument.
fn bad(method: &str, what: &str) -> Refused {
    Refused::Invalid(format!("invalid `{method}` command: {what}"))
}

fn text_arg(args: &Value, name: &str) -> Option<String> {
    match args.get(name)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Seconds (a number, or text as Celery's CLI may send it) as ms.
fn secs_arg(method: &str, args: &Value, name: &str) -> Result<Option<i64>, Refused> {
    let secs = match args.get(name) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
        Some(_) => None,
    };
    match secs {
        Some(s) if s.is_finite() && s > 0.0 && s < 1e12 => Ok(Some((s * 1000.0).ceil() as i64)),
        _ => Err(bad(
            method,
            &format!("`{name}` must be a positive number of seconds"),
        )),
    }
}

fn count_arg(method: &str, args: &Value) -> Result<usize, Refused> {
    let n = match args.get("n") {
        None | Some(Value::Null) => return Ok(1),
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.trim().parse::<u64>().ok(),
        Some(_) => None,
    };
    match n {
        Some(n) if (1..=10_000).contains(&n) => Ok(n as usize),
        _ => Err(bad(method, "`n` must be a whole number from 1 to 10000")),
    }
}

/// Celery's rate notation as its `rate_limit` control takes it: `"10/m"`,
/// a bare number per second; empty, `"0"` or null removes the limit.
pub fn parse_rate(text: Option<&str>) -> Result<Option<Rate>, Refused> {
    let t = text.map(str::trim).unwrap_or("");
    if t.is_empty() {
        return Ok(None);
    }
    let r =
        Rate::parse(t).map_err(|e| Refused::Invalid(format!("Invalid rate limit string: {e}")))?;
    Ok((r.count > 0).then_some(r))
}

impl Command {
    /// A command from its method name and its arguments (a JSON object,
    /// Celery's argument names).
    pub fn parse(method: &str, args: &Value) -> Result<Command, Refused> {
        let task = |m: &str| {
            text_arg(args, "task_name")
                .filter(|t| !t.is_empty())
                .ok_or_else(|| bad(m, "needs `task_name`"))
        };
        let queue = |m: &str| {
            text_arg(args, "queue")
                .filter(|t| !t.is_empty())
                .ok_or_else(|| bad(m, "needs `queue`"))
        };
        Ok(match method {
            "ping" => Command::Ping,
            "active" | "dump_active" => Command::Active,
            "reserved" | "dump_reserved" => Command::Reserved,
            "scheduled" | "dump_schedule" => Command::Scheduled,
            "stats" => Command::Stats,
            "registered" | "dump_tasks" => Command::Registered,
            "active_queues" => Command::ActiveQueues,
            "rate_limit" => Command::RateLimit {
                task: task(method)?,
                rate: parse_rate(text_arg(args, "rate_limit").as_deref())?,
            },
            "time_limit" => Command::TimeLimit {
                task: task(method)?,
                soft: secs_arg(method, args, "soft")?,
                hard: secs_arg(method, args, "hard")?,
            },
            "pool_grow" => Command::PoolGrow(count_arg(method, args)?),
            "pool_shrink" => Command::PoolShrink(count_arg(method, args)?),
            "add_consumer" => Command::AddConsumer(queue(method)?),
            "cancel_consumer" => Command::CancelConsumer(queue(method)?),
            "heartbeat" => Command::Heartbeat,
            "shutdown" => Command::Shutdown,
            other => Command::Other(other.to_string()),
        })
    }
}

/// What a node answers, before a layout shapes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Pong,
    /// Runs (active or reserved), in claim order.
    Runs(Vec<RunInfo>),
    /// Task names, sorted.
    Names(Vec<String>),
    /// Queues consumed, in order, each once.
    Queues(Vec<String>),
    Stats(Stats),
    /// A control done, in words (Celery's `{"ok": ...}`).
    Done(String),
    /// Nothing to say (Celery's `heartbeat` answers `None`).
    Nothing,
    /// A command for the layout to answer (`Command::Other`).
    Layout(String),
}

/// One worker, as `inspect stats` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerStats {
    pub name: String,
    pub concurrency: usize,
    pub prefetch: usize,
    pub queues: Vec<String>,
    pub active: u64,
    pub held: u64,
    pub settled: u64,
    /// The process pool's children's pids (empty on threads).
    pub pids: Vec<u32>,
}

/// A node's `inspect stats`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    pub pid: u32,
    pub workers: Vec<WorkerStats>,
}

impl Stats {
    /// The sum of its workers' concurrency.
    pub fn concurrency(&self) -> usize {
        self.workers.iter().map(|w| w.concurrency).sum()
    }
}

/// The workers of an app running in this process, answering remote
/// commands.
pub struct Node {
    app: App,
    workers: Vec<Worker>,
}

impl Node {
    /// The node of `app` in this process; `None` while no worker of it
    /// runs here.
    pub fn here(app: &App) -> Option<Node> {
        let workers = runners::handles(app);
        (!workers.is_empty()).then(|| Node {
            app: app.clone(),
            workers,
        })
    }

    /// Its workers, in the order they started.
    pub fn workers(&self) -> &[Worker] {
        &self.workers
    }

    fn runs(&self, started: bool) -> Vec<RunInfo> {
        self.workers
            .iter()
            .flat_map(|w| w.runs())
            .filter(|r| r.started.is_some() == started)
            .collect()
    }

    /// The queues its workers consume, in order, each once.
    pub fn queues(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for q in self.workers.iter().flat_map(|w| w.queues()) {
            if !out.contains(&q) {
                out.push(q);
            }
        }
        out
    }

    /// Its `inspect stats`.
    pub fn stats(&self) -> Stats {
        let loads = runners::workers(&self.app);
        Stats {
            pid: std::process::id(),
            workers: self
                .workers
                .iter()
                .map(|w| {
                    let load = loads
                        .iter()
                        .find(|l| l.name == w.name())
                        .map(|l| l.load)
                        .unwrap_or_default();
                    WorkerStats {
                        name: w.name().to_string(),
                        concurrency: w.concurrency(),
                        prefetch: w.prefetch(),
                        queues: w.queues(),
                        active: load.active,
                        held: load.held,
                        settled: w.settled(),
                        pids: w.procs().map(|p| p.pids()).unwrap_or_default(),
                    }
                })
                .collect(),
        }
    }

    /// Runs `c` on this node's workers. A control reaches every worker of
    /// the app here; refused (with why) when none could do it — an unknown
    /// task, a hard limit on the threads pool, a shrink below one slot.
    pub fn run(&self, c: &Command) -> Result<Reply, Refused> {
        let each = |f: &dyn Fn(&Worker) -> Result<(), Refused>| -> Result<(), Refused> {
            let mut first = None;
            let mut any = false;
            for w in &self.workers {
                match f(w) {
                    Ok(()) => any = true,
                    Err(e) => first = first.or(Some(e)),
                }
            }
            match (any, first) {
                (false, Some(e)) => Err(e),
                _ => Ok(()),
            }
        };
        Ok(match c {
            Command::Ping => Reply::Pong,
            Command::Active => Reply::Runs(self.runs(true)),
            Command::Reserved => Reply::Runs(self.runs(false)),
            Command::Registered => {
                let mut names = self.app.task_names();
                names.sort();
                Reply::Names(names)
            }
            Command::ActiveQueues => Reply::Queues(self.queues()),
            Command::Stats => Reply::Stats(self.stats()),
            Command::RateLimit { task, rate } => {
                each(&|w| w.set_rate(task, *rate))?;
                Reply::Done(match rate {
                    Some(_) => "new rate limit set successfully".into(),
                    None => "rate limit disabled successfully".into(),
                })
            }
            Command::TimeLimit { task, soft, hard } => {
                each(&|w| w.set_time_limits(task, *soft, *hard))?;
                Reply::Done("time limits set successfully".into())
            }
            Command::PoolGrow(n) => {
                each(&|w| w.grow(*n).map(|_| ()))?;
                Reply::Done("pool will grow".into())
            }
            Command::PoolShrink(n) => {
                each(&|w| w.shrink(*n).map(|_| ()))?;
                Reply::Done("pool will shrink".into())
            }
            Command::AddConsumer(q) => {
                each(&|w| w.add_queue(q).map(|_| ()))?;
                Reply::Done(format!("add consumer {q}"))
            }
            Command::CancelConsumer(q) => {
                each(&|w| w.cancel_queue(q).map(|_| ()))?;
                Reply::Done(format!("no longer consuming from {q}"))
            }
            Command::Heartbeat => {
                self.app.broker().heartbeat_now();
                Reply::Nothing
            }
            Command::Shutdown => {
                let n = runners::stop_workers(&self.app);
                Reply::Done(format!("shutting down {n} worker(s)"))
            }
            // Scheduled messages are held by the layout (Celery's holds
            // its etas; the own layouts keep them in the broker).
            Command::Scheduled => Reply::Layout("scheduled".into()),
            Command::Other(m) => Reply::Layout(m.clone()),
        })
    }
}

/// A run as headway's own layouts show it: Celery's `Request.info()`
/// fields where they apply, the queue and worker by name.
pub fn run_json(r: &RunInfo) -> Value {
    json!({
        "id": r.id,
        "name": r.name,
        "args": r.args,
        "kwargs": r.kwargs,
        "queue": r.queue,
        "priority": r.priority,
        "redelivered": r.redelivered,
        "time_start": r.started.map(|ms| ms as f64 / 1000.0),
        "acknowledged": r.acknowledged,
        "worker_pid": r.pid,
        "worker": r.worker,
    })
}

/// A node's stats as the own layouts show them.
pub fn stats_json(s: &Stats) -> Value {
    json!({
        "pid": s.pid,
        "pool": {"max-concurrency": s.concurrency()},
        "workers": s.workers.iter().map(|w| json!({
            "name": w.name,
            "concurrency": w.concurrency,
            "prefetch": w.prefetch,
            "queues": w.queues,
            "active": w.active,
            "held": w.held,
            "settled": w.settled,
            "processes": w.pids,
        })).collect::<Vec<_>>(),
    })
}

/// The answer for `method` that no layout knows, in Celery's words.
pub fn unknown(method: &str) -> Value {
    json!({"error": format!("No such key: '{method}'")})
}

/// A refusal as a reply (Celery's `{"error": ...}`).
pub fn refused(e: &Refused) -> Value {
    let text = match e {
        Refused::Invalid(t) => t.clone(),
        other => other.to_string(),
    };
    json!({ "error": text })
}

/// The reply as the own layouts send it (the Celery layout shapes its
/// own); `scheduled` is answered from `held` (the own layouts hold none:
/// their etas wait in the broker).
pub fn reply_json(r: Result<Reply, Refused>) -> Value {
    match r {
        Err(e) => refused(&e),
        Ok(Reply::Pong) => json!({"ok": "pong"}),
        Ok(Reply::Runs(runs)) => Value::Array(runs.iter().map(run_json).collect()),
        Ok(Reply::Names(n)) => json!(n),
        Ok(Reply::Queues(q)) => Value::Array(q.iter().map(|q| json!({ "name": q })).collect()),
        Ok(Reply::Stats(s)) => stats_json(&s),
        Ok(Reply::Done(t)) => json!({ "ok": t }),
        Ok(Reply::Nothing) => Value::Null,
        Ok(Reply::Layout(m)) if m == "scheduled" => Value::Array(Vec::new()),
        Ok(Reply::Layout(m)) => unknown(&m),
    }
}

/// The arguments of a command as an object (a missing one is `{}`).
pub fn arguments(v: Option<&Value>) -> Value {
    match v {
        Some(Value::Object(m)) => Value::Object(m.clone()),
        _ => Value::Object(Map::new()),
    }
}
