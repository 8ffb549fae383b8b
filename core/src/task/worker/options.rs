//! How a worker is set up, and the checks on it.
//!
//! Every check on a worker's settings lives here, in one place, so the rules
//! (at least one slot, at least one named queue, a prefetch never below the
//! concurrency) are read and changed together, and a binding never repeats
//! them.

use crate::task::procs::ProcSpec;
use crate::task::specs::Host;
use crate::task::state::Refused;

/// Celery's `worker_prefetch_multiplier`: a worker holds four messages per
/// slot, enough to keep every slot fed without starving other workers. On
/// the process pool a unit of concurrency has two slots ([`slots_per`]),
/// so a `-c 2` worker holds 16: with 8, half its holds were the runs in its
/// children and on deck, and it claimed in fours (a claim script per four
/// runs; a no-op drain at `-c 2` ran 8.2–9.1k/s against 10.6–11.4k/s).
pub const PREFETCH_MULTIPLIER: usize = 4;

/// Slots per unit of concurrency: one on the threads pool; two on the
/// process pool, where each child has a run *on deck* — checked for revoke
/// and waiting for the child, not acked — so a child that answers is handed
/// its next run at once. Without it the child sat idle through the next
/// run's take (a round trip to the broker) after every run: a no-op drain
/// at concurrency 2 on Redis ran 4.5k/s against 6.5k/s with it on a loaded
/// machine, and each round carried one run's writes instead of several
/// (Redis's CPU per run 83 µs against 56 µs). The early ack still goes out
/// when the child takes the run, so a worker killed -9 loses no more runs
/// than it has children (`run`).
pub(super) fn slots_per(process_pool: bool) -> usize {
    if process_pool { 2 } else { 1 }
}

/// How a worker is set up.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The queues to claim from, in order (`["default"]`).
    pub queues: Vec<String>,
    /// How many bodies run at once (4, moontask's preset).
    pub concurrency: usize,
    /// How many messages it may hold not finished running (`concurrency ×
    /// 4` when `None`, reaching further while runs are short: `reach`).
    /// Never below `concurrency`.
    pub prefetch: Option<usize>,
    /// A name for logs and the admin page.
    pub name: Option<String>,
    /// Where bodies run: the host's threads (the default) or child
    /// processes.
    pub pool: Pool,
    /// The hard time limit (ms) of a task that sets none (Celery's
    /// `--time-limit`). Needs [`Pool::Process`].
    pub time_limit: Option<i64>,
    /// The soft time limit (ms) of a task that sets none.
    pub soft_time_limit: Option<i64>,
}

/// Where a worker's bodies run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Pool {
    /// On the host's runner threads (Python) or event loop (Node), in the
    /// worker's own process.
    #[default]
    Threads,
    /// In `concurrency` child processes started by the spec (`process`,
    /// Celery's `prefork`).
    Process(ProcSpec),
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            queues: vec!["default".into()],
            concurrency: 4,
            prefetch: None,
            name: None,
            pool: Pool::Threads,
            time_limit: None,
            soft_time_limit: None,
        }
    }
}

/// Why a hard time limit is refused on the threads pool, in `host`'s
/// words: how it asks for the process pool, and its name for the soft
/// limit.
pub fn hard_limit_needs_process(host: Host) -> String {
    format!(
        "a hard time limit needs the process pool ({}): a body running on a thread \
         cannot be stopped; use `{}`, or run this worker with the process pool",
        process_pool_option(host),
        host.spell("soft_time_limit")
    )
}

/// How `host` asks a worker for the process pool.
pub fn process_pool_option(host: Host) -> &'static str {
    match host {
        Host::Rust => "Pool::Process",
        Host::Python => "pool=\"process\"",
        Host::Node => "pool: 'process'",
    }
}

/// A `WorkerConfig` once checked, its defaults filled in.
pub(super) struct Options {
    pub queues: Vec<String>,
    pub concurrency: usize,
    pub prefetch: usize,
    /// Whether the prefetch was left to the worker (`reach`).
    pub reach: bool,
    pub name: String,
    pub pool: Pool,
    pub time_limit: Option<i64>,
    pub soft_time_limit: Option<i64>,
}

/// Checks `config` and fills in its defaults.
pub(super) fn check(config: WorkerConfig) -> Result<Options, Refused> {
    if config.concurrency == 0 {
        return Err(Refused::Invalid(format!(
            "invalid `concurrency`: {}",
            crate::task::specs::AT_LEAST_ONE
        )));
    }
    if config.queues.is_empty() || config.queues.iter().any(String::is_empty) {
        return Err(Refused::Invalid(
            "invalid `queues`: needs at least one non-empty name".into(),
        ));
    }
    let reach = config.prefetch.is_none();
    let prefetch = config
        .prefetch
        .unwrap_or(
            config.concurrency
                * slots_per(matches!(config.pool, Pool::Process(_)))
                * PREFETCH_MULTIPLIER,
        )
        .max(config.concurrency);
    for (arg, limit) in [
        ("time_limit", config.time_limit),
        ("soft_time_limit", config.soft_time_limit),
    ] {
        if let Some(t) = limit
            && t <= 0
        {
            return Err(Refused::Invalid(format!(
                "invalid `{arg}`: must be positive"
            )));
        }
    }
    if config.time_limit.is_some() && config.pool == Pool::Threads {
        return Err(Refused::Invalid(format!(
            "invalid `time_limit`: {}",
            hard_limit_needs_process(Host::Rust)
        )));
    }
    let name = config
        .name
        .unwrap_or_else(|| format!("worker-{}", &crate::task::message::new_id()[..8]));
    Ok(Options {
        queues: config.queues,
        concurrency: config.concurrency,
        prefetch,
        reach,
        name,
        pool: config.pool,
        time_limit: config.time_limit,
        soft_time_limit: config.soft_time_limit,
    })
}
