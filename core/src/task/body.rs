//! What a task runs: a body, and what it is told about the run.
//!
//! A body takes JSON arguments and answers a JSON value or a [`Failure`]. The
//! bindings implement [`Body`] over a Python or JS callable; the core never
//! knows which language ran it, which is what lets one worker loop, one
//! retry rule and one canvas serve both.

use std::future::Future;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::clock::BoxFuture;
use super::state::Failure;

/// What a task body is told about the run it is in.
///
/// `retries` is how many attempts before this one failed, `attempt` is this
/// one counting from one, and `last` says whether a failure now is final — a
/// body that must not repeat a side effect checks it before doing the work
/// again.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Context {
    pub id: String,
    pub name: String,
    pub queue: String,
    pub retries: u32,
    pub attempt: u32,
    pub last: bool,
    /// The app's time when the run started (ms since the epoch).
    pub now: i64,
    /// The run's keyword arguments (Node reads them here).
    pub kwargs: Map<String, Value>,
    /// The first run of its canvas, and the one that sent it.
    pub root_id: Option<String>,
    pub parent_id: Option<String>,
    /// The run's soft time limit (ms), when it has one: the host raises
    /// `SoftTimeLimitExceeded` in the body once it passes (Celery's
    /// `request.timelimit[1]`).
    #[serde(default)]
    pub soft_time_limit: Option<i64>,
    /// The run's hard time limit (ms), when it has one: kept by the process
    /// pool, which kills the child (Celery's `request.timelimit[0]`).
    #[serde(default)]
    pub time_limit: Option<i64>,
    /// The worker running it (empty outside a worker): Node's worker
    /// events go to that worker.
    #[serde(default)]
    pub worker: String,
    /// What tracing needs about the run, when its app traces (see
    /// [`super::trace`]); `None` otherwise, at no cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<Box<super::trace::RunTrace>>,
    /// Whether a failure now goes again (see [`Context::state_after`]).
    #[serde(default)]
    pub rule: RetryRule,
    /// Where [`Context::update_state`] records a custom state: the app of
    /// the worker running it (none on a direct call or in a process-pool
    /// child; never serialised).
    #[serde(skip)]
    pub recorder: super::progress::Recorder,
    /// What else the message says (eta, group, chord, links) for Celery's
    /// `self.request`; `None` for a plain run (see [`super::request`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extras: Option<Box<super::request::RunExtras>>,
}

impl Context {
    /// What the run comes to when its body returns (`raised` None) or
    /// raises `raised`: the state a host's hooks and its run span report
    /// (Celery's `task_postrun` `state`, and which of `task_success`,
    /// `task_retry`, `task_failure` fires). The worker's own rule, from the
    /// same facts: a retry asked for within its budget, or a failure the
    /// policy retries with attempts left, is `RETRY`; a reject that
    /// requeues is `REJECTED`, an ignore `IGNORED` (Celery's names); any
    /// other failure is `FAILURE`.
    pub fn state_after(&self, raised: Option<&Failure>) -> &'static str {
        state_after(self.retries, &self.rule, raised)
    }
}

/// [`Context::state_after`] from its parts: `retries` the attempts before
/// this one, `rule` the task's (a host that keeps only these, as Node's
/// call array does, asks with them).
pub fn state_after(retries: u32, rule: &RetryRule, raised: Option<&Failure>) -> &'static str {
    use super::ask::{Ask, RetryVerdict};
    use super::state::State;
    let Some(f) = raised else {
        return State::Success.name();
    };
    let retried = match f.ask.as_deref() {
        Some(Ask::Retry(r)) => matches!(
            r.verdict(f, 0, retries, rule.budget, 0),
            RetryVerdict::Again { .. }
        ),
        Some(Ask::Reject { requeue: true }) => return "REJECTED",
        Some(Ask::Ignore) => return "IGNORED",
        Some(Ask::Reject { requeue: false }) => false,
        None => retries < rule.budget && rule.retries_on(f),
    };
    if retried {
        State::Retry.name()
    } else {
        State::Failure.name()
    }
}

/// What decides whether a failed run goes again, carried with the run (a
/// process-pool child and a host's hooks see it): the task's `retries`
/// and its `retry_for` / `dont_retry_for` filter.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RetryRule {
    pub budget: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retry_for: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dont_retry_for: Vec<String>,
}

impl RetryRule {
    /// The rule of `policy`.
    pub fn of(policy: &super::policy::Policy) -> RetryRule {
        RetryRule {
            budget: policy.retries,
            retry_for: policy.retry_for.clone(),
            dont_retry_for: policy.dont_retry_for.clone(),
        }
    }

    /// Whether failure `f` is one the filter retries (attempts aside).
    pub fn retries_on(&self, f: &Failure) -> bool {
        super::policy::retry_matches(&self.retry_for, &self.dont_retry_for, f)
    }
}

/// A task's body.
pub trait Body: Send + Sync + 'static {
    /// Runs once. The future may be dropped (a timeout, a terminate, a
    /// stopping worker): an implementation cancels what it can and discards a
    /// late answer.
    fn call(&self, ctx: Context, args: Vec<Value>) -> BoxFuture<'static, Result<Value, Failure>>;

    /// As [`Body::call`], for a worker's run that holds `slot`: a body may
    /// take it and free it as soon as its answer exists, before the run's
    /// task hears of it; what it leaves the worker frees when the call's
    /// future ends. A host body takes it: the host's thread frees it as it
    /// answers, and the next run waiting for a slot starts while this one
    /// is still being settled (see `HostQueue`).
    fn call_holding(
        &self,
        ctx: Context,
        args: Vec<Value>,
        slot: &mut Option<Slot>,
    ) -> BoxFuture<'static, Result<Value, Failure>> {
        let _ = slot;
        self.call(ctx, args)
    }

    /// The host queue its calls go to and their key, for a body that runs
    /// in a host language: a worker may then put its next run on deck
    /// (`deck`).
    fn host(&self) -> Option<(Arc<super::host::HostQueue>, Arc<str>)> {
        None
    }

    /// The host threads it runs on, when it runs on threads the core counts
    /// (a sync Python body): a worker stops claiming while all are stuck.
    fn runners(&self) -> Option<Arc<super::runners::Runners>> {
        None
    }
}

pub use super::deck::Slot;

/// A body from a Rust closure returning a future.
pub struct FnBody<F>(pub F);

impl<F, Fut> Body for FnBody<F>
where
    F: Fn(Context, Vec<Value>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, Failure>> + Send + 'static,
{
    fn call(&self, ctx: Context, args: Vec<Value>) -> BoxFuture<'static, Result<Value, Failure>> {
        Box::pin((self.0)(ctx, args))
    }
}

/// A shared body.
pub type SharedBody = Arc<dyn Body>;

/// A body from a closure: `body(|ctx, args| async move { Ok(json!(1)) })`.
pub fn body<F, Fut>(f: F) -> SharedBody
where
    F: Fn(Context, Vec<Value>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, Failure>> + Send + 'static,
{
    Arc::new(FnBody(f))
}
