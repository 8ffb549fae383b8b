//! The four seams a broker implements: [`Broker`], [`Backend`], [`Counter`],
//! [`Inspector`].
//!
//! The app, the worker and the canvas speak only these, so the in-memory
//! broker, headway's Redis layout and Celery's Redis layout are
//! interchangeable and one test suite runs against all of them. Each call
//! takes a batch where a broker can do the batch in one round trip: a worker
//! settles many messages per wake-up, and a Redis broker pipelines them.

use std::collections::BTreeMap;
use std::time::Duration;

use super::clock::BoxFuture;
use super::dead::DeadLetter;
use super::message::Message;
use super::state::{Outcome, Refused, State};
use super::terminate::OnTerminate;

/// Asked each remote command a broker hears: `None` once its app is gone
/// (it is then forgotten), else this app's answer, if it is a node the
/// command is for (`Some(None)`: it is not).
pub type OnControl = std::sync::Arc<
    dyn Fn(&serde_json::Value) -> Option<Option<(String, serde_json::Value)>> + Send + Sync,
>;

/// A broker's proof that a consumer holds a message: opaque to the app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// The queue it was claimed from (shared: a receipt is copied for each
    /// settle a run makes, and a claimed batch's receipts share one name).
    pub queue: std::sync::Arc<str>,
    /// The broker's tag for the claim.
    pub tag: u64,
    /// A fencing token: a settle carrying a token older than the claim's is a
    /// no-op, so a consumer whose work was recovered cannot settle it late.
    pub token: u64,
    /// The raw bytes as claimed, for brokers that settle by value.
    pub raw: Option<std::sync::Arc<[u8]>>,
}

/// A message a consumer holds, with the receipt to settle it by.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Shared, not copied: a broker that keeps what it handed out until it
    /// is settled (the memory broker's claims) and the worker's table of
    /// the runs it holds read the same message.
    pub message: std::sync::Arc<Message>,
    pub receipt: Receipt,
    /// Whether the broker knows it was handed out before (requeued,
    /// recovered): the worker then checks for a stored result first.
    pub redelivered: bool,
}

/// A message claimed with what the broker already checked at receipt, so a
/// worker asks nothing again for it: see [`Broker::claim`].
#[derive(Debug, Clone)]
pub struct Claimed {
    pub delivery: Delivery,
    /// Whether it is revoked, when the broker looked in the same step
    /// (`None`: it did not; the worker asks [`Broker::revoked`]).
    pub revoked: Option<bool>,
}

/// One round of a worker's writes and questions, for [`Broker::round`].
#[derive(Debug, Clone, Default)]
pub struct Round {
    /// Outcomes to store (as [`Backend::store`]).
    pub outcomes: Vec<Outcome>,
    /// Run events to record (as [`Inspector::record`]).
    pub events: Vec<RunEvent>,
    /// Claims to ack; they do not wait for the outcomes.
    pub acks: Vec<Receipt>,
    /// Claims to ack after their run's outcome is stored (late acks), each
    /// with the index in `outcomes` of that outcome: a broker acks a claim
    /// only once its outcome is stored, and one outcome it cannot store
    /// holds back that claim alone.
    pub after: Vec<(usize, Receipt)>,
    /// Ids whose revoked status is asked (as [`Broker::revoked`]).
    pub ask: Vec<String>,
}

/// What the last part of a chord learns from [`Counter::arrive`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Joined {
    /// Parts are still missing (or this part had arrived before).
    Waiting,
    /// This arrival completed the chord: the caller publishes the callback.
    Last,
    /// This arrival completed the chord and the counter has published the
    /// callback itself, in the same atomic step.
    Sent,
}

/// Where messages wait and who holds them.
pub trait Broker: Send + Sync + 'static {
    /// Publishes messages; one with an `eta` in the future waits for it.
    fn publish(&self, messages: Vec<Message>) -> BoxFuture<'_, Result<(), Refused>>;

    /// Claims up to `max` due messages from `queues` (earlier queues first,
    /// higher priority first), waiting up to `wait` for the first. An empty
    /// answer means nothing came.
    fn consume<'a>(
        &'a self,
        queues: &'a [String],
        max: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<Delivery>, Refused>>;

    /// [`Broker::consume`] with the receipt's revoked check done in the
    /// same step where the broker can (one round trip for both); a claim
    /// it did not look at answers `revoked: None` and the worker asks
    /// [`Broker::revoked`]. The default looks at none.
    fn claim<'a>(
        &'a self,
        queues: &'a [String],
        max: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<Claimed>, Refused>> {
        Box::pin(async move {
            Ok(self
                .consume(queues, max, wait)
                .await?
                .into_iter()
                .map(|delivery| Claimed {
                    delivery,
                    revoked: None,
                })
                .collect())
        })
    }

    /// A worker's round — stores, events, acks and revoked questions of many
    /// runs — in one step (one pipeline, one round trip), answering the
    /// revoked status of `round.ask` in order. Only asked of a broker that
    /// is also the app's result store and event log. The default gives the
    /// round back: the worker then makes the separate calls.
    #[allow(clippy::type_complexity)]
    fn round(&self, round: Round) -> Result<BoxFuture<'_, Result<Vec<bool>, Refused>>, Round> {
        Err(round)
    }

    /// Whether every call completes without I/O and cannot be lost in
    /// flight (the memory broker): a worker then writes through it as each
    /// run ends rather than gathering its writes into rounds, which exist
    /// to save round trips this broker does not make.
    fn local(&self) -> bool {
        false
    }

    /// Whether an `ack` completes in the call, the broker sending it on its
    /// own (RabbitMQ's gathers a channel's acks into frames itself): a
    /// worker's early ack then goes to it straight from the run, not
    /// through the writer's rounds. A local broker's does too.
    fn acks_at_once(&self) -> bool {
        self.local()
    }

    /// Settles claims for good.
    fn ack(&self, receipts: Vec<Receipt>) -> BoxFuture<'_, Result<(), Refused>>;

    /// Gives a claim back: onto its queue again with `requeue`, dropped
    /// without.
    fn reject(&self, receipt: Receipt, requeue: bool) -> BoxFuture<'_, Result<(), Refused>>;

    /// Settles a claim by publishing its next attempt in its place, in one
    /// step where the broker can, so a retry is neither lost nor doubled.
    fn retry(&self, receipt: Receipt, next: Message) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(async move {
            self.publish(vec![next]).await?;
            self.ack(vec![receipt]).await
        })
    }

    /// The earliest eta waiting for `queues`, if any: what a worker on a
    /// virtual clock advances to when it has nothing else to do.
    fn next_eta<'a>(&'a self, queues: &'a [String]) -> BoxFuture<'a, Result<Option<i64>, Refused>>;

    /// Marks runs revoked until `until` (ms since the epoch), so a worker that
    /// claims one later — even one that was down when it was sent — skips it.
    fn revoke(&self, ids: Vec<String>, until: i64) -> BoxFuture<'_, Result<(), Refused>>;

    /// Which of `ids` are revoked now.
    fn revoked<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<Vec<bool>, Refused>>;

    /// Revokes as [`Broker::revoke`] and asks every process on this broker
    /// to stop a run of `ids` in progress with `signal`: each tells its
    /// [`Broker::on_terminate`] hearers. A terminate is not kept — a
    /// process not listening at that moment does not hear it; the revoke
    /// is kept. The default only revokes: a broker no other process
    /// reaches has nobody else to tell, and the app marks its own runs.
    fn terminate(
        &self,
        ids: Vec<String>,
        until: i64,
        signal: i32,
    ) -> BoxFuture<'_, Result<(), Refused>> {
        let _ = signal;
        self.revoke(ids, until)
    }

    /// What it keeps of the limits its workers share
    /// ([`super::limits`]): a task's global rate, its concurrency keys, a
    /// send's dedupe key. `None` (the default): it keeps none, and what
    /// needs them is refused naming the option.
    fn task_limits(&self) -> Option<std::sync::Arc<dyn super::limits::TaskLimits>> {
        None
    }

    /// Turns Celery's events on or off, where the broker sends them (the
    /// Celery layout); answers whether it does.
    fn set_task_events(&self, on: bool) -> bool {
        let _ = on;
        false
    }

    /// Sends a remote command (`task::control`'s request) to every process
    /// on this broker and gathers their answers (`{"node", "reply"}` each)
    /// for up to `timeout`, or until every process answered. `None` when no
    /// other process reaches this broker (memory): the app answers itself.
    fn control(
        &self,
        request: serde_json::Value,
        timeout: std::time::Duration,
    ) -> Option<BoxFuture<'_, Result<Vec<serde_json::Value>, Refused>>> {
        let _ = (request, timeout);
        None
    }

    /// Adds `answer` to those asked each remote command this broker hears
    /// (see [`Broker::control`]); each app adds itself when it is made.
    /// The default hears nothing.
    fn on_control(&self, answer: OnControl) {
        let _ = answer;
    }

    /// A worker gave message `id` back (`requeue`) or dropped it as a
    /// Celery worker's reject does: the Celery layout sends `task-rejected`
    /// when task events are on. The default does nothing.
    fn rejected(&self, id: &str, requeue: bool) {
        let _ = (id, requeue);
    }

    /// The prefetch a worker claims `queues` against is now `prefetch`. A
    /// broker that pushes messages to its consumers (RabbitMQ's
    /// `basic.qos`) sets its window to it, so what it sends ahead follows
    /// the worker's reach as a claim does on a broker the worker pulls
    /// from; those ignore it (the default).
    fn reach(&self, queues: &[String], prefetch: usize) {
        let _ = (queues, prefetch);
    }

    /// Sends a worker heartbeat event now, where the broker sends events
    /// (Celery's `heartbeat` control); answers whether it did.
    fn heartbeat_now(&self) -> bool {
        false
    }

    /// A worker on this broker stopped: where the broker sends worker
    /// events, `worker-offline` goes out now when it was this process's
    /// last (as a Celery worker sends it on shutdown), in order after the
    /// events before it; resolves once it is out. The default does
    /// nothing.
    fn worker_stopped(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    /// Adds `hear` to those told of every terminate this broker hears
    /// (see [`Broker::terminate`]); each app adds itself when it is made.
    /// The default hears nothing.
    fn on_terminate(&self, hear: OnTerminate) {
        let _ = hear;
    }

    /// Claims the right to fire beat entry `entry` for the slot due at `due`:
    /// `true` for exactly one caller per (entry, due) across every beat on
    /// this broker. A broker only one process can reach grants every claim.
    fn claim_slot<'a>(&'a self, entry: &'a str, due: i64) -> BoxFuture<'a, Result<bool, Refused>> {
        let _ = (entry, due);
        Box::pin(async { Ok(true) })
    }

    /// Hands back what consumers whose lease ran out were holding, and
    /// answers how many. Brokers without leases answer 0.
    ///
    /// A message whose holder was lost this way `max_deliveries` times (3,
    /// [`super::dead::MAX_DELIVERIES`]) goes to its queue's dead letters with
    /// the reason `worker lost ×N` instead, and is not counted: a message
    /// that kills every worker that runs it must not loop for ever.
    fn recover(&self) -> BoxFuture<'_, Result<usize, Refused>> {
        Box::pin(async { Ok(0) })
    }

    /// A worker consuming `queues` stopped: gives back to their queues what
    /// this broker claimed for them and no consumer took (a claim that
    /// finishes in a task of its own may land after its consumer left).
    /// Answers how many went back. Brokers whose claims hand everything to
    /// the caller answer 0.
    fn stopped<'a>(&'a self, queues: &'a [String]) -> BoxFuture<'a, Result<usize, Refused>> {
        let _ = queues;
        Box::pin(async { Ok(0) })
    }

    /// Puts dead letters of `queue` back on it, oldest first, at most
    /// `limit`; only those whose id is in `ids` unless `ids` is empty. Each
    /// goes back as it was (its bytes), marked redelivered, with its count
    /// of lost workers reset — what an operator does after fixing the task
    /// or the producer. Answers how many went back. Brokers that keep no
    /// dead letters answer 0.
    fn requeue_dead<'a>(
        &'a self,
        queue: &'a str,
        ids: &'a [String],
        limit: usize,
    ) -> BoxFuture<'a, Result<usize, Refused>> {
        let _ = (queue, ids, limit);
        Box::pin(async { Ok(0) })
    }

    /// Drops every dead letter of `queue` for good, answering how many.
    fn purge_dead<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, Result<usize, Refused>> {
        let _ = queue;
        Box::pin(async { Ok(0) })
    }
}

/// Where results are kept.
pub trait Backend: Send + Sync + 'static {
    /// Stores outcomes. A stored final state (success, failure, revoked) is
    /// never overwritten: the first to settle wins, so a redelivered run
    /// cannot turn a success into a failure.
    fn store(&self, outcomes: Vec<Outcome>) -> BoxFuture<'_, Result<(), Refused>>;

    /// The outcome of `id`, if any is stored.
    fn fetch<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Outcome>, Refused>>;

    /// Waits up to `timeout` for `id` to reach a final state and answers it
    /// (`None`: the wait ran out). Woken by the store, not by polling.
    fn wait<'a>(
        &'a self,
        id: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Option<Outcome>, Refused>>;

    /// Removes the stored outcomes of `ids` (Celery's
    /// `AsyncResult.forget()`): a fetch then finds nothing, and a later
    /// store of one of them is kept again.
    fn forget<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<(), Refused>>;
}

/// Counts the parts of a chord.
pub trait Counter: Send + Sync + 'static {
    /// Opens the count for a chord of `size` parts, at send, before any part
    /// can finish.
    fn open(&self, key: &str, size: u32) -> BoxFuture<'_, Result<(), Refused>>;

    /// Records that `part` finished. Parts are counted as a set, so a
    /// redelivered part cannot count twice; exactly one arrival answers
    /// `Last` or `Sent`. A counter that can publishes `callback` in the same
    /// step and answers `Sent`.
    fn arrive<'a>(
        &'a self,
        key: &'a str,
        part: &'a str,
        size: u32,
        callback: &'a Message,
    ) -> BoxFuture<'a, Result<Joined, Refused>>;
}

/// One queue as an inspector sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueInfo {
    /// Its name.
    pub name: String,
    /// Ready to be claimed, per priority step (step → count).
    pub ready: BTreeMap<u8, u64>,
    /// Waiting for an eta.
    pub delayed: u64,
    /// Claimed and not settled.
    pub unacked: u64,
}

/// One consumer as an inspector sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerInfo {
    /// Its name.
    pub name: String,
    /// When its lease runs out (ms since the epoch), for brokers with leases.
    pub lease_until: Option<i64>,
    /// The ids it holds.
    pub holding: Vec<String>,
}

/// One thing that happened to a run, as workers record it for any admin page
/// to read — in another process too, when the broker is shared.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunEvent {
    /// The run's id.
    pub id: String,
    /// The task's name.
    pub task: String,
    /// The state it reached.
    pub state: State,
    /// When (ms since the epoch).
    pub at: i64,
    /// The worker that recorded it.
    pub worker: String,
    /// Attempts before this one that failed.
    pub retries: u32,
    /// How long the run took (ms), for runs that ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<i64>,
    /// The arguments, as JSON text, truncated to [`EVENT_TEXT_MAX`] bytes.
    pub args: String,
    /// The result as JSON text, or the error with its traceback, truncated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A run's event as a worker makes it: what its [`RunEvent`] is read from.
/// An inspector that keeps events in memory keeps this, sharing the
/// run's message, and makes the event's copies and JSON texts only when it
/// is read (a Rust no-op drain on the memory broker made five allocations
/// and two JSON texts a run for events nobody read).
#[derive(Debug, Clone)]
pub struct RunNote {
    /// The run's message: its id, task, retries and arguments.
    pub message: std::sync::Arc<Message>,
    /// The state it reached.
    pub state: State,
    /// When (ms since the epoch).
    pub at: i64,
    /// The worker that recorded it.
    pub worker: std::sync::Arc<str>,
    /// How long the run took (ms), for runs that ran.
    pub runtime: Option<i64>,
    /// What the event's `detail` is made from.
    pub detail: Detail,
}

/// What a [`RunNote`]'s detail is made from: nothing, a text (an error and
/// its traceback), or a result (shown as JSON).
#[derive(Debug, Clone)]
pub enum Detail {
    None,
    Text(String),
    Value(serde_json::Value),
}

impl RunNote {
    /// The event it reads as: the arguments and the detail as text, each
    /// truncated to [`EVENT_TEXT_MAX`].
    pub fn event(&self) -> RunEvent {
        let m = &self.message;
        let detail = match &self.detail {
            Detail::None => None,
            Detail::Text(t) => Some(t.clone()),
            Detail::Value(v) => serde_json::to_string(v).ok(),
        };
        RunEvent {
            id: m.id.clone(),
            task: m.task.clone(),
            state: self.state,
            at: self.at,
            worker: self.worker.to_string(),
            retries: m.retries,
            runtime: self.runtime,
            args: truncate(
                serde_json::to_string(&m.args).unwrap_or_default(),
                EVENT_TEXT_MAX,
            ),
            detail: detail.map(|d| truncate(d, EVENT_TEXT_MAX)),
        }
    }
}

/// How much of a run's args or detail an event keeps: 2 KiB, enough to
/// recognise a run on a page without turning the event log into a copy of
/// every payload.
pub const EVENT_TEXT_MAX: usize = 2048;

/// Cuts `text` to at most `max` bytes on a character boundary, marking the
/// cut with `…`.
pub fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// What an admin page or a test reads about a broker.
pub trait Inspector: Send + Sync + 'static {
    /// Every queue known, sorted by name.
    fn queues(&self) -> BoxFuture<'_, Result<Vec<QueueInfo>, Refused>>;
    /// How many stored outcomes are in each state.
    fn counts(&self) -> BoxFuture<'_, Result<BTreeMap<State, u64>, Refused>>;
    /// The consumers known, with their leases and what they hold.
    fn consumers(&self) -> BoxFuture<'_, Result<Vec<ConsumerInfo>, Refused>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    /// Whether it wants a run's start recorded too (a `Started` run event,
    /// which costs a record): Celery's `task-started` event (its
    /// `task-received` the Celery layout sends itself, when the message
    /// reaches the consumer). The default wants only what runs came to.
    fn wants_run_starts(&self) -> bool {
        false
    }
    /// Records run events (a bounded log: the oldest fall off).
    fn record(&self, events: Vec<RunEvent>) -> BoxFuture<'_, Result<(), Refused>> {
        let _ = events;
        crate::task::clock::done()
    }
    /// Records runs' events as workers make them ([`RunNote`]); by default
    /// each is read as its [`RunEvent`] and [`Inspector::record`]ed.
    fn record_notes(&self, notes: Vec<RunNote>) -> BoxFuture<'_, Result<(), Refused>> {
        self.record(notes.iter().map(RunNote::event).collect())
    }
    /// The most recent run events, newest first, at most `limit`.
    fn recent(&self, limit: usize) -> BoxFuture<'_, Result<Vec<RunEvent>, Refused>> {
        let _ = limit;
        Box::pin(async { Ok(Vec::new()) })
    }
    /// The dead letters of `queue`, newest first, at most `limit`: what was
    /// quarantined or dead-lettered as a poison pill, with why and its bytes.
    fn dead_letters<'a>(
        &'a self,
        queue: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<DeadLetter>, Refused>> {
        let _ = (queue, limit);
        Box::pin(async { Ok(Vec::new()) })
    }
    /// How many dead letters `queue` keeps now.
    fn dead_count<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, Result<u64, Refused>> {
        let _ = queue;
        Box::pin(async { Ok(0) })
    }
}
