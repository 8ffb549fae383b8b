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
}

impl Context {
    /// What the run comes to when its body returns (`ok`) or raises: the
    /// state a host's hooks report (Celery's `task_postrun` `state`, and
    /// which of `task_success`, `task_retry`, `task_failure` fires) — a
    /// failure with attempts left is retried.
    pub fn state_after(&self, ok: bool) -> super::state::State {
        use super::state::State;
        if ok {
            State::Success
        } else if self.last {
            State::Failure
        } else {
            State::Retry
        }
    }
}

/// A task's body.
pub trait Body: Send + Sync + 'static {
    /// Runs once. The future may be dropped (a timeout, a terminate, a
    /// stopping worker): an implementation cancels what it can and discards a
    /// late answer.
    fn call(&self, ctx: Context, args: Vec<Value>) -> BoxFuture<'static, Result<Value, Failure>>;

    /// The host threads it runs on, when it runs on threads the core counts
    /// (a sync Python body): a worker stops claiming while all are stuck.
    fn runners(&self) -> Option<Arc<super::runners::Runners>> {
        None
    }
}

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
