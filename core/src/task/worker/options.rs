//! How a worker is set up, and the checks on it.
//!
//! Every check on a worker's settings lives here, in one place, so the rules
//! (at least one slot, at least one named queue, a prefetch never below the
//! concurrency) are read and changed together, and a binding never repeats
//! them.

use crate::task::procs::ProcSpec;
use crate::task::state::Refused;

/// Celery's `worker_prefetch_multiplier`: a worker holds four messages per
/// slot, enough to keep every slot fed without starving other workers.
pub const PREFETCH_MULTIPLIER: usize = 4;

/// How a worker is set up.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The queues to claim from, in order (`["default"]`).
    pub queues: Vec<String>,
    /// How many bodies run at once (4, moontask's preset).
    pub concurrency: usize,
    /// How many messages it may hold unsettled (`concurrency × 4` when
    /// `None`). Never below `concurrency`.
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

/// Why a hard time limit is refused on the threads pool.
pub const HARD_LIMIT_NEEDS_PROCESS: &str = "a hard time limit needs the process pool (pool=\"process\"): a body running on a thread cannot be stopped; use `soft_time_limit`, or run this worker with the process pool";

/// A `WorkerConfig` once checked, its defaults filled in.
pub(super) struct Options {
    pub queues: Vec<String>,
    pub concurrency: usize,
    pub prefetch: usize,
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
    let prefetch = config
        .prefetch
        .unwrap_or(config.concurrency * PREFETCH_MULTIPLIER)
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
            "invalid `time_limit`: {HARD_LIMIT_NEEDS_PROCESS}"
        )));
    }
    let name = config
        .name
        .unwrap_or_else(|| format!("worker-{}", &crate::task::message::new_id()[..8]));
    Ok(Options {
        queues: config.queues,
        concurrency: config.concurrency,
        prefetch,
        name,
        pool: config.pool,
        time_limit: config.time_limit,
        soft_time_limit: config.soft_time_limit,
    })
}
