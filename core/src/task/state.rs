//! States, outcomes and the ways a run can be refused.
//!
//! State names are Celery's, so a result written by either side reads the same
//! in the other and on any dashboard built for Celery.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a run is doing, in Celery's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "UPPERCASE")]
pub enum State {
    /// Not known to have been received (also: unknown id).
    Pending,
    /// Taken by a worker, not started.
    Received,
    /// Running.
    Started,
    /// Failed, and sent again with an eta.
    Retry,
    /// Finished with a value.
    Success,
    /// Failed for good.
    Failure,
    /// Will not run: revoked, expired or terminated.
    Revoked,
}

impl State {
    /// Every state, in lifecycle order.
    pub const ALL: [State; 7] = [
        State::Pending,
        State::Received,
        State::Started,
        State::Retry,
        State::Success,
        State::Failure,
        State::Revoked,
    ];

    /// Celery's name (`"SUCCESS"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            State::Pending => "PENDING",
            State::Received => "RECEIVED",
            State::Started => "STARTED",
            State::Retry => "RETRY",
            State::Success => "SUCCESS",
            State::Failure => "FAILURE",
            State::Revoked => "REVOKED",
        }
    }

    /// A state by Celery's name.
    pub fn parse(name: &str) -> Option<State> {
        State::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Whether nothing will change it: success, failure, revoked. A stored
    /// result in one of these is never overwritten.
    pub fn is_final(self) -> bool {
        matches!(self, State::Success | State::Failure | State::Revoked)
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a body failed: the remote exception's type, message and traceback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The exception type's name (`ValueError`, `TypeError`, `TimeoutError`).
    pub kind: String,
    /// Its message.
    pub message: String,
    /// The traceback or stack text, when the body's language had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceback: Option<String>,
    /// The exception's module (Celery's `exc_module`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// What the body asked by raising it (retry, reject, ignore), when it
    /// raised one of those (`task::ask`); never stored with a result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask: Option<Box<super::ask::Ask>>,
    /// The raised value's type and the types it derives from, most specific
    /// first (Python `module.QualName` along the MRO, JS constructor names
    /// along the prototype chain), when the host read them: what a policy's
    /// `retry_for` matches; never stored with a result.
    #[serde(default, skip_serializing_if = "<[String]>::is_empty")]
    pub lineage: Box<[String]>,
}

impl Failure {
    /// The type of a thrown value whose type a host could not read (JS:
    /// `throw Object.create(null)`, a Proxy whose traps throw).
    pub const UNNAMED: &'static str = "Error";

    /// The message of a thrown value with no readable text: its message is
    /// not a string (or reading it threw) and turning it into text threw
    /// too. A fixed text, so such a run fails like any other instead of
    /// taking its worker down.
    pub const UNDESCRIBED: &'static str =
        "<the thrown value has no readable message: String() threw>";

    /// A failure from what a host could read of a thrown value: a type or
    /// message it could not read is [`Failure::UNNAMED`] /
    /// [`Failure::UNDESCRIBED`].
    pub fn thrown(
        kind: Option<String>,
        message: Option<String>,
        traceback: Option<String>,
    ) -> Failure {
        Failure {
            kind: kind.unwrap_or_else(|| Self::UNNAMED.to_owned()),
            message: message.unwrap_or_else(|| Self::UNDESCRIBED.to_owned()),
            traceback,
            module: None,
            ask: None,
            lineage: Box::default(),
        }
    }

    /// A failure with a type and a message.
    pub fn new(kind: impl Into<String>, message: impl Into<String>) -> Failure {
        Failure {
            kind: kind.into(),
            message: message.into(),
            traceback: None,
            module: None,
            ask: None,
            lineage: Box::default(),
        }
    }

    /// A call of `key` that reached a host whose registry has no body under
    /// it (the host's registry and the core's disagree).
    pub fn unregistered(host: super::Host, key: &str) -> Failure {
        let lang = if host == super::Host::Node {
            "JS"
        } else {
            "Python"
        };
        let text = format!("no {lang} body is registered as {key:?}");
        Failure::new("NotRegistered", text)
    }

    /// A Python body of `key` that is not `async def` but returned an
    /// awaitable: nothing would ever run it, so the run fails saying how to
    /// declare it.
    pub fn returned_awaitable(key: &str) -> Failure {
        Failure::new(
            "TypeError",
            format!(
                "{key}: the body returned an awaitable; declare it `async def` so headway runs it on its event loop"
            ),
        )
    }

    /// A run whose body's task the host cancelled (the core withdrew the
    /// call, or the host's loop ended under it).
    pub fn cancelled() -> Failure {
        Failure::new("CancelledError", "the run's task was cancelled")
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

/// What a result store holds for one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// The run's id.
    pub id: String,
    /// Where it is.
    pub state: State,
    /// The value, for a success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why, for a failure, a retry or a revoke.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Failure>,
    /// Attempts before this one that failed.
    #[serde(default)]
    pub retries: u32,
    /// The task's name, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// When it reached this state (ms since the epoch).
    #[serde(default)]
    pub at: i64,
    /// The state's name when a body named it itself (Celery's custom
    /// states, e.g. `PROGRESS`: see [`super::progress`]); `state` is then
    /// STARTED and `result` holds the body's meta.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom: Option<String>,
    /// The runs its success sent on — its `link` callbacks, its chain's
    /// next link (or a group's parts after it) — as Celery records a
    /// task's `children`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<String>,
}

impl Outcome {
    /// An outcome in `state` with nothing else.
    pub fn new(id: impl Into<String>, state: State, at: i64) -> Outcome {
        Outcome {
            id: id.into(),
            state,
            result: None,
            error: None,
            retries: 0,
            task: None,
            at,
            custom: None,
            children: Vec::new(),
        }
    }

    /// The state's name as a caller sees it: a custom state's own name,
    /// else Celery's name of `state`.
    pub fn state_name(&self) -> &str {
        self.custom.as_deref().unwrap_or(self.state.name())
    }
}

/// Why something on the task side did not answer a value.
#[derive(Debug, Clone, PartialEq)]
pub enum Refused {
    /// A body raised on its last attempt (or a chord part did).
    Failed(Failure),
    /// The wait ran out first.
    Timeout,
    /// The run was revoked, expired or terminated.
    Revoked(String),
    /// The app keeps no results, or there is no such run.
    Missing(String),
    /// No task is registered under the name.
    UnknownTask(String),
    /// The broker or the result store failed; its kind says how.
    Broker(BrokerError),
    /// An argument could not be accepted (named).
    Invalid(String),
}

impl Refused {
    /// The code the Node binding gives its `Error`s (`'FAILED'`, ...).
    pub fn code(&self) -> &'static str {
        match self {
            Refused::Failed(_) => "FAILED",
            Refused::Timeout => "TIMEOUT",
            Refused::Revoked(_) => "REVOKED",
            Refused::Missing(_) => "MISSING",
            Refused::UnknownTask(_) => "UNKNOWN_TASK",
            Refused::Broker(_) => "BROKER",
            Refused::Invalid(_) => "INVALID",
        }
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::Failed(e) => write!(f, "task failed: {e}"),
            Refused::Timeout => f.write_str("timed out waiting for the result"),
            Refused::Revoked(id) => write!(f, "task {id} was revoked"),
            Refused::Missing(why) => write!(f, "no result: {why}"),
            Refused::UnknownTask(name) => write!(f, "no task is registered as {name:?}"),
            Refused::Broker(e) => write!(f, "{e}"),
            Refused::Invalid(why) => write!(f, "{why}"),
        }
    }
}

impl std::error::Error for Refused {}

/// How a broker or result store failed: what a caller may act on (retry
/// later, page the operator, stop) without reading the message.
///
/// Decided once, where the failure is met: a Redis error by
/// [`crate::broker::error::kind_of`], the rest where they are made. The
/// bindings only map it (a Python subclass of `BrokerError`, a Node
/// error's `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BrokerErrorKind {
    /// The server could not be reached, the connection was lost, or a
    /// reply did not come in time. Worth trying again later.
    Connection,
    /// A Lua script failed, or a reply had a shape the caller did not
    /// expect.
    Script,
    /// The server answered with a refusal: out of memory, read-only, not
    /// authenticated, no permission, cannot persist.
    Server,
    /// This broker or worker was closed.
    Closed,
    /// A stored value could not be read (or a value could not be written
    /// as one).
    Data,
    /// None of the above.
    Other,
}

impl BrokerErrorKind {
    /// Every kind.
    pub const ALL: [BrokerErrorKind; 6] = [
        BrokerErrorKind::Connection,
        BrokerErrorKind::Script,
        BrokerErrorKind::Server,
        BrokerErrorKind::Closed,
        BrokerErrorKind::Data,
        BrokerErrorKind::Other,
    ];

    /// Its code (`"CONNECTION"`, ...).
    pub fn code(self) -> &'static str {
        match self {
            BrokerErrorKind::Connection => "CONNECTION",
            BrokerErrorKind::Script => "SCRIPT",
            BrokerErrorKind::Server => "SERVER",
            BrokerErrorKind::Closed => "CLOSED",
            BrokerErrorKind::Data => "DATA",
            BrokerErrorKind::Other => "OTHER",
        }
    }

    /// Its name as the bindings show it (`"connection"`, ...): the code in
    /// lower case.
    pub fn name(self) -> &'static str {
        match self {
            BrokerErrorKind::Connection => "connection",
            BrokerErrorKind::Script => "script",
            BrokerErrorKind::Server => "server",
            BrokerErrorKind::Closed => "closed",
            BrokerErrorKind::Data => "data",
            BrokerErrorKind::Other => "other",
        }
    }
}

impl fmt::Display for BrokerErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A broker or result store failure: its kind and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerError {
    /// How it failed.
    pub kind: BrokerErrorKind,
    /// What happened (a URL in it is redacted).
    pub text: String,
}

impl BrokerError {
    /// A failure of `kind`.
    pub fn new(kind: BrokerErrorKind, text: impl Into<String>) -> BrokerError {
        BrokerError {
            kind,
            text: text.into(),
        }
    }
}

impl fmt::Display for BrokerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "broker error: {}", self.text)
    }
}

impl std::error::Error for BrokerError {}

/// A text alone is of kind [`BrokerErrorKind::Other`].
impl From<String> for BrokerError {
    fn from(text: String) -> Self {
        BrokerError::new(BrokerErrorKind::Other, text)
    }
}

/// A text alone is of kind [`BrokerErrorKind::Other`].
impl From<&str> for BrokerError {
    fn from(text: &str) -> Self {
        BrokerError::new(BrokerErrorKind::Other, text)
    }
}

impl From<BrokerError> for Refused {
    fn from(e: BrokerError) -> Self {
        Refused::Broker(e)
    }
}

impl Refused {
    /// A broker failure of `kind`.
    pub fn broker(kind: BrokerErrorKind, text: impl Into<String>) -> Refused {
        Refused::Broker(BrokerError::new(kind, text))
    }

    /// The broker failure's kind, when this is one.
    pub fn broker_kind(&self) -> Option<BrokerErrorKind> {
        match self {
            Refused::Broker(e) => Some(e.kind),
            _ => None,
        }
    }
}

impl From<super::PolicyError> for Refused {
    fn from(e: super::PolicyError) -> Self {
        Refused::Invalid(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hosts_own_failures_and_their_words() {
        let f = Failure::unregistered(crate::task::Host::Python, "add");
        assert_eq!(
            (f.kind.as_str(), f.message.as_str()),
            ("NotRegistered", "no Python body is registered as \"add\"")
        );
        let f = Failure::unregistered(crate::task::Host::Node, "add");
        assert_eq!(f.message, "no JS body is registered as \"add\"");
        let f = Failure::returned_awaitable("add");
        assert!(
            f.kind == "TypeError" && f.message.starts_with("add: the body returned an awaitable")
        );
        assert_eq!(Failure::cancelled().kind, "CancelledError");
    }

    #[test]
    fn names_round_trip() {
        for s in State::ALL {
            assert_eq!(State::parse(s.name()), Some(s));
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.name())
            );
        }
        assert!(State::Success.is_final() && !State::Retry.is_final());
        assert_eq!(Refused::Timeout.code(), "TIMEOUT");
    }

    #[test]
    fn a_broker_error_keeps_its_text_and_code() {
        let e = Refused::broker(BrokerErrorKind::Server, "redis://h:6379/0: OOM");
        assert_eq!(e.to_string(), "broker error: redis://h:6379/0: OOM");
        assert_eq!(e.code(), "BROKER");
        assert_eq!(e.broker_kind(), Some(BrokerErrorKind::Server));
        // A bare text is Other, and reads as it did.
        let bare = Refused::Broker("worker closed".into());
        assert_eq!(bare.to_string(), "broker error: worker closed");
        assert_eq!(bare.broker_kind(), Some(BrokerErrorKind::Other));
        assert_eq!(Refused::Timeout.broker_kind(), None);
        for k in BrokerErrorKind::ALL {
            assert_eq!(k.name().to_uppercase(), k.code());
        }
    }
}
