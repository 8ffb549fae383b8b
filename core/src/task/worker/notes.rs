//! Notes on the process pool's runs, for a binding whose events fire in
//! the worker's process.
//!
//! On the threads pool a host fires its language's run events beside the
//! body (Python's `headway.signals`, Node's worker events). On the process
//! pool the body runs in a child: Python's signals fire there, as Celery's
//! do in a prefork child, but a Node `Worker`'s listeners live in the
//! parent, as BullMQ's sandboxed processors' events do. So the worker notes
//! each process-pool run's start and what it came to, from the same facts
//! the metrics count, and hands the note to the observer a binding set.
//! Nothing is noted (nothing cloned) while no observer is set.

use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::{Map, Value};

use super::{Shared, Worker};
use crate::task::message::Message;
use crate::task::state::{Failure, State};

/// A process-pool run's start (`what` = `"active"`) or what it came to
/// (`"SUCCESS"`, `"RETRY"`, `"FAILURE"`), with the run it is about.
#[derive(Debug, Clone, Serialize)]
pub struct RunNote {
    pub what: &'static str,
    pub id: String,
    pub name: String,
    pub queue: String,
    pub attempt: u32,
    pub retries: u32,
    pub args: Vec<Value>,
    pub kwargs: Map<String, Value>,
    /// A success's value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// A failure's kind and message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
}

/// Called with each note, on the worker's runtime: it must not block.
pub type Observer = Arc<dyn Fn(RunNote) + Send + Sync>;

/// The observer a binding set, if any.
#[derive(Default)]
pub(super) struct Notes(Mutex<Option<Observer>>);

impl Notes {
    fn get(&self) -> Option<Observer> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Worker {
    /// Sets (or with `None` clears) what is told of each run on the process
    /// pool: its start and what it came to. On the threads pool nothing is
    /// noted (the host sees those runs itself).
    pub fn observe(&self, observer: Option<Observer>) {
        *self
            .shared
            .notes
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = observer;
    }
}

impl Shared {
    /// Notes `what` of the run of `m` (args `args`), when an observer is set
    /// and the run is on the process pool.
    pub(super) fn note(
        &self,
        m: &Message,
        what: &'static str,
        outcome: Option<Result<&Value, &Failure>>,
    ) {
        if self.procs.is_none() {
            return;
        }
        let Some(o) = self.notes.get() else { return };
        let (value, failure) = match outcome {
            Some(Ok(v)) => (Some(v.clone()), None),
            Some(Err(f)) => (None, Some(f.clone())),
            None => (None, None),
        };
        o(RunNote {
            what,
            id: m.id.clone(),
            name: m.task.clone(),
            queue: m.queue.clone(),
            attempt: m.retries.saturating_add(1),
            retries: m.retries,
            args: m.args.clone(),
            kwargs: m.kwargs.clone(),
            value,
            failure,
        });
    }
}

/// The note's name for what a failure came to.
pub(super) fn failed_as(retried: bool) -> &'static str {
    if retried {
        State::Retry.name()
    } else {
        State::Failure.name()
    }
}
