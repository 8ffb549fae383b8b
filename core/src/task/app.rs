//! The object every other type hangs off: the registry, the seams and the
//! clock.
//!
//! An app owns a broker, an optional result store, an optional chord counter
//! and the clock the task side reads instead of the system clock. Nothing here
//! is global: two apps in one process do not see each other's tasks.

use crate::hashed::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::Notify;

use super::body::SharedBody;
use super::canvas::Canvas;
use super::clock::{Clock, SystemClock};
use super::handle::Handle;
use super::message::{Message, Options, Sig, new_id};
use super::policy::Policy;
use super::spec::{Backend, Broker, Counter, Inspector};
use super::specs::Host;
use super::state::{Outcome, Refused, State};
use crate::broker::MemoryBroker;

/// How long a revoke is remembered: three hours, Celery's `REVOKE_EXPIRES`
/// (10800 s) — long enough for any queued copy to be claimed and skipped.
pub const REVOKE_KEEP: i64 = 3 * 3600 * 1000;

/// A registered task: its policy and its body.
#[derive(Clone)]
pub struct Registered {
    pub policy: Policy,
    pub body: SharedBody,
}

pub(crate) struct AppInner {
    pub(crate) broker: Arc<dyn Broker>,
    pub(crate) backend: Option<Arc<dyn Backend>>,
    pub(crate) counter: Option<Arc<dyn Counter>>,
    pub(crate) inspector: Option<Arc<dyn Inspector>>,
    pub(crate) clock: Arc<dyn Clock>,
    tasks: RwLock<HashMap<String, Arc<Registered>>>,
    /// Ids asked to terminate, and the bell running runs listen to.
    terminating: Mutex<super::terminate::Marks>,
    pub(crate) terminate_bell: Notify,
    /// What its workers in this process settled (`metrics`).
    metrics: super::metrics::Metrics,
    /// Whether its runs are traced (`set_tracing`).
    tracing: std::sync::atomic::AtomicBool,
    /// Whose spelling its refusals use (`set_host`).
    host: std::sync::atomic::AtomicU8,
}

/// The registry, the seams and the clock. Cheap to clone (shared).
#[derive(Clone)]
pub struct App {
    pub(crate) inner: Arc<AppInner>,
}

/// The seams an app is built on.
pub struct Seams {
    pub broker: Arc<dyn Broker>,
    pub backend: Option<Arc<dyn Backend>>,
    pub counter: Option<Arc<dyn Counter>>,
    pub inspector: Option<Arc<dyn Inspector>>,
}

impl Seams {
    /// All four seams answered by one value (a broker that is also its
    /// own store, counter and inspector, as every Redis layout is).
    pub fn all<T: Broker + Backend + Counter + Inspector + 'static>(one: &Arc<T>) -> Seams {
        Seams {
            broker: one.clone(),
            backend: Some(one.clone()),
            counter: Some(one.clone()),
            inspector: Some(one.clone()),
        }
    }
}

impl App {
    /// An app on `seams` reading `clock`.
    ///
    /// The store and the counter are optional: an app without a store runs
    /// tasks nobody waits on (`get` answers `Missing`), and one without a
    /// counter refuses to build a chord.
    pub fn new(seams: Seams, clock: Arc<dyn Clock>) -> App {
        let app = App {
            inner: Arc::new(AppInner {
                broker: seams.broker,
                backend: seams.backend,
                counter: seams.counter,
                inspector: seams.inspector,
                clock,
                tasks: RwLock::new(HashMap::default()),
                terminating: Mutex::new(super::terminate::Marks::default()),
                terminate_bell: Notify::new(),
                metrics: super::metrics::Metrics::default(),
                tracing: std::sync::atomic::AtomicBool::new(false),
                host: std::sync::atomic::AtomicU8::new(0),
            }),
        };
        // Terminates other processes broadcast reach this app's runs; held
        // weakly, so the broker does not keep a dropped app alive.
        let weak = Arc::downgrade(&app.inner);
        app.inner.broker.on_terminate(Arc::new(move |ids, signal| {
            let Some(inner) = weak.upgrade() else {
                return false;
            };
            App { inner }.mark_terminate(ids, signal);
            true
        }));
        // Remote commands other processes send (`task::control`), answered
        // while a worker of this app runs here.
        let weak = Arc::downgrade(&app.inner);
        app.inner.broker.on_control(Arc::new(move |request| {
            let inner = weak.upgrade()?;
            Some(super::control::answer(&App { inner }, request))
        }));
        app
    }

    /// Names the arguments in what it refuses as `host` spells them (a
    /// binding says so once, when it makes the app).
    pub fn set_host(&self, host: Host) {
        let n = match host {
            Host::Rust => 0,
            Host::Python => 1,
            Host::Node => 2,
        };
        self.inner
            .host
            .store(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whose spelling its refusals use: the core's unless a binding said.
    pub fn host(&self) -> Host {
        match self.inner.host.load(std::sync::atomic::Ordering::Relaxed) {
            1 => Host::Python,
            2 => Host::Node,
            _ => Host::Rust,
        }
    }

    /// An app on a fresh in-memory broker that is also its store, counter and
    /// inspector; the system clock when `clock` is `None`.
    pub fn memory(clock: Option<Arc<dyn Clock>>) -> App {
        let clock = clock.unwrap_or_else(|| Arc::new(SystemClock));
        let b = MemoryBroker::new(clock.clone());
        App::new(
            Seams {
                broker: b.clone(),
                backend: Some(b.clone()),
                counter: Some(b.clone()),
                inspector: Some(b),
            },
            clock,
        )
    }

    /// The app's time (ms since the epoch).
    pub fn now(&self) -> i64 {
        self.inner.clock.now()
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// The broker.
    pub fn broker(&self) -> &Arc<dyn Broker> {
        &self.inner.broker
    }

    /// The result store, if any.
    pub fn backend(&self) -> Option<&Arc<dyn Backend>> {
        self.inner.backend.as_ref()
    }

    /// Turns Celery's events on for the app's broker (a worker's `-E`):
    /// refused, naming the layout, on a broker that sends none.
    pub fn enable_task_events(&self) -> Result<(), Refused> {
        if self.inner.broker.set_task_events(true) {
            Ok(())
        } else {
            Err(Refused::Invalid(
                "task events (-E) are Celery's: they need a broker on Celery's layout".into(),
            ))
        }
    }

    /// What this process's workers of the app settled (Prometheus text:
    /// `metrics::render`).
    pub fn metrics(&self) -> &super::metrics::Metrics {
        &self.inner.metrics
    }

    /// Turns tracing of this app's runs on or off: on, a run's
    /// [`Context::trace`](super::body::Context::trace) carries what its
    /// message carried for the binding to open a span with
    /// ([`super::trace`]). Off (the default) costs a run nothing. A binding
    /// turns it on when the host's OpenTelemetry has a tracer provider and
    /// the app was not made with tracing off.
    pub fn set_tracing(&self, on: bool) {
        self.inner
            .tracing
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether this app's runs are traced.
    pub fn tracing(&self) -> bool {
        self.inner
            .tracing
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The span a traced send of `name` with `options` is, fixing the run's
    /// id in `options` (a fresh one when none was given) so the span can
    /// name the message before it exists.
    pub fn send_span(&self, name: &str, options: &mut Options) -> super::trace::Span {
        let id = options.id.get_or_insert_with(new_id).clone();
        let queue = options
            .queue
            .clone()
            .or_else(|| self.policy_of(name).map(|p| p.queue))
            .unwrap_or_else(|| "default".to_string());
        super::trace::send_span(name, &id, &queue)
    }

    /// The inspector, if any.
    pub fn inspector(&self) -> Option<&Arc<dyn Inspector>> {
        self.inner.inspector.as_ref()
    }

    /// Registers `body` under `name`. Registering twice replaces the first,
    /// which is what lets a test run one task under two policies.
    pub fn register(&self, name: &str, policy: Policy, body: SharedBody) -> Result<(), Refused> {
        super::specs::name(super::specs::Host::Rust, name)?;
        policy.check()?;
        self.inner
            .tasks
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), Arc::new(Registered { policy, body }));
        Ok(())
    }

    /// The registration under `name`.
    pub fn registered(&self, name: &str) -> Option<Arc<Registered>> {
        self.inner
            .tasks
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// The policy registered under `name`.
    pub fn policy_of(&self, name: &str) -> Option<Policy> {
        self.registered(name).map(|r| r.policy.clone())
    }

    /// Whether a body is registered under `name`.
    pub fn has_task(&self, name: &str) -> bool {
        self.inner
            .tasks
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(name)
    }

    /// Every registered name, sorted so a page listing them is stable.
    pub fn task_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .inner
            .tasks
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        v.sort();
        v
    }

    /// The message one signature stands for, with its queue resolved and its
    /// times made absolute.
    pub(crate) fn message_of(&self, sig: &Sig) -> Message {
        let o = &sig.options;
        let queue = o
            .queue
            .clone()
            .or_else(|| self.policy_of(&sig.task).map(|p| p.queue))
            .unwrap_or_else(|| "default".to_string());
        let id = sig
            .id
            .clone()
            .or_else(|| o.id.clone())
            .unwrap_or_else(new_id);
        let mut m = Message::new(
            id,
            sig.task.clone(),
            sig.args.clone(),
            sig.kwargs.clone(),
            queue,
        );
        m.eta = o
            .eta
            .or_else(|| o.countdown.map(|c| self.now().saturating_add(c)));
        m.expires = o.expires;
        m.priority = o.priority;
        if let Some(k) = &o.concurrency_key {
            m.set_concurrency_key(k);
        }
        m
    }

    /// Publishes a run of the task called `name`, which this app must have
    /// registered: a queue that accepts work nobody can run only moves the
    /// failure to a worker.
    pub async fn send(
        &self,
        name: &str,
        args: Vec<Value>,
        kwargs: Map<String, Value>,
        options: Options,
    ) -> Result<Handle, Refused> {
        self.send_traced(name, args, kwargs, options, true, None)
            .await
    }

    /// [`App::send`] (`known`) or [`App::send_task`], the message carrying
    /// `trace`: what the binding's OpenTelemetry propagator injected inside
    /// the send's span ([`App::send_span`]); only its trace-context entries
    /// are kept ([`super::trace::headers_of`]).
    pub async fn send_traced(
        &self,
        name: &str,
        args: Vec<Value>,
        kwargs: Map<String, Value>,
        options: Options,
        known: bool,
        trace: Option<Map<String, Value>>,
    ) -> Result<Handle, Refused> {
        if known && !self.has_task(name) {
            return Err(Refused::UnknownTask(name.to_string()));
        }
        super::specs::check_options(self.host(), &options)?;
        let sig = Sig::new(name, args)
            .with_kwargs(kwargs)
            .with_options(options);
        self.send_canvas_traced(Canvas::Sig(sig), trace).await
    }

    /// Publishes a run of any task name, for tasks another process (a Celery
    /// worker, say) runs: Celery's `send_task`.
    pub async fn send_task(
        &self,
        name: &str,
        args: Vec<Value>,
        kwargs: Map<String, Value>,
        options: Options,
    ) -> Result<Handle, Refused> {
        self.send_traced(name, args, kwargs, options, false, None)
            .await
    }

    /// Publishes a canvas and answers a handle on what it waits for: a
    /// chain's last link, a group's parts in order, a chord's callback.
    pub async fn send_canvas(&self, canvas: Canvas) -> Result<Handle, Refused> {
        self.send_canvas_traced(canvas, None).await
    }

    /// [`App::send_canvas`], every message it publishes carrying `trace`
    /// (see [`App::send_traced`]).
    pub async fn send_canvas_traced(
        &self,
        canvas: Canvas,
        trace: Option<Map<String, Value>>,
    ) -> Result<Handle, Refused> {
        let mut canvas = canvas;
        let claim = super::dedupe::claim_of(self, &mut canvas)?;
        if let Some(c) = &claim
            && let Some(first) = c.limits.dedupe(&c.key, &c.id, c.ttl).await?
        {
            // A send with this key within its ttl: the first run answers.
            return Ok(self.handle(&first));
        }
        let h = trace.and_then(super::trace::headers_of);
        let planned = self
            .publish_planned_with(canvas, |m| {
                if let Some(h) = &h {
                    super::trace::carry(m, h);
                }
            })
            .await;
        let plan = match (planned, claim) {
            (Ok(p), _) => p,
            (Err(e), Some(c)) => {
                // Nothing was sent: the key must not answer a run that
                // does not exist.
                let _ = c.limits.undedupe(&c.key, &c.id).await;
                return Err(e);
            }
            (Err(e), None) => return Err(e),
        };
        Ok(Handle::new(self.clone(), plan.wait, plan.all).with_parents(plan.parents))
    }

    /// Plans `canvas`, lets `each` amend every message it publishes, opens
    /// its chords' counters and publishes it (a worker sending a group or
    /// chord that follows a chain's link).
    /// Answers the ids published.
    pub(crate) async fn publish_planned(
        &self,
        canvas: Canvas,
        mut each: impl FnMut(&mut Message),
    ) -> Result<Vec<String>, Refused> {
        let mut ids = Vec::new();
        self.publish_planned_with(canvas, |m| {
            each(m);
            ids.push(m.id.clone());
        })
        .await?;
        Ok(ids)
    }

    async fn publish_planned_with(
        &self,
        canvas: Canvas,
        mut each: impl FnMut(&mut Message),
    ) -> Result<super::canvas::Plan, Refused> {
        let mut plan = canvas.plan(self)?;
        for m in &mut plan.publish {
            each(m);
        }
        if !plan.opens.is_empty() {
            let counter =
                self.inner.counter.as_ref().ok_or_else(|| {
                    Refused::Invalid("a chord needs an app with a counter".into())
                })?;
            // Opened before any part is published: a part that finished first
            // would otherwise find no counter.
            for (key, size) in &plan.opens {
                counter.open(key, *size).await?;
            }
        }
        let publish = std::mem::take(&mut plan.publish);
        self.inner.broker.publish(publish).await?;
        Ok(plan)
    }

    /// A worker of this app.
    pub fn worker(
        &self,
        config: super::worker::WorkerConfig,
    ) -> Result<super::worker::Worker, Refused> {
        super::worker::Worker::new(self.clone(), config)
    }

    /// A beat on this app with nothing scheduled.
    pub fn beat(&self) -> super::beat::Beat {
        super::beat::Beat::new(self.clone())
    }

    /// A handle on a run some other process sent.
    pub fn handle(&self, id: &str) -> Handle {
        Handle::new(self.clone(), vec![id.to_string()], false)
    }

    /// Revokes runs: they will not start anywhere the broker reaches, and
    /// with `terminate` a run in progress stops — in this process, and in
    /// every other process on a broker that reaches them (both Redis
    /// layouts) — and is recorded REVOKED. The signal is SIGTERM; see
    /// [`App::revoke_with`].
    pub async fn revoke(&self, ids: &[String], terminate: bool) -> Result<(), Refused> {
        self.revoke_with(ids, terminate, super::signal::SIGTERM)
            .await
    }

    /// [`App::revoke`] naming the signal a terminate carries (1 to 64; see
    /// [`super::signal::parse`] for names): what stops the run reads it
    /// (a process pool kills its child with it). Refused, naming `signal`,
    /// when it is out of range.
    pub async fn revoke_with(
        &self,
        ids: &[String],
        terminate: bool,
        signal: i32,
    ) -> Result<(), Refused> {
        let signal = super::signal::check(super::specs::Host::Rust, signal)?;
        let until = self.now().saturating_add(REVOKE_KEEP);
        if terminate {
            self.inner
                .broker
                .terminate(ids.to_vec(), until, signal)
                .await?;
            self.mark_terminate(ids, signal);
        } else {
            self.inner.broker.revoke(ids.to_vec(), until).await?;
        }
        Ok(())
    }

    /// Marks `ids` to terminate with `signal` here, and rings the bell the
    /// running runs listen to.
    pub(crate) fn mark_terminate(&self, ids: &[String], signal: i32) {
        if ids.is_empty() {
            return;
        }
        let now = self.now();
        self.inner
            .terminating
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .mark(ids, signal, now);
        self.inner.terminate_bell.notify_waiters();
    }

    /// The signal `id` was asked to terminate with within the last
    /// [`TERMINATE_KEEP`](super::terminate::TERMINATE_KEEP), if it was (and
    /// forgets the ask).
    pub(crate) fn take_terminate(&self, id: &str) -> Option<i32> {
        let now = self.now();
        self.inner
            .terminating
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(id, now)
    }

    /// How many terminate marks are kept (they expire: see
    /// [`TERMINATE_KEEP`](super::terminate::TERMINATE_KEEP)).
    #[cfg(test)]
    pub(crate) fn terminate_marks(&self) -> usize {
        self.inner
            .terminating
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Resolves once `id` is asked to terminate, with the signal asked for.
    pub(crate) async fn terminated(&self, id: &str) -> i32 {
        loop {
            let bell = self.inner.terminate_bell.notified();
            tokio::pin!(bell);
            bell.as_mut().enable();
            if let Some(signal) = self.take_terminate(id) {
                return signal;
            }
            bell.await;
        }
    }

    /// Stores outcomes when the app has a store.
    pub(crate) async fn store(&self, outcomes: Vec<Outcome>) -> Result<(), Refused> {
        match &self.inner.backend {
            Some(b) if !outcomes.is_empty() => b.store(outcomes).await,
            _ => Ok(()),
        }
    }

    /// The state of one run without waiting: PENDING when nothing is stored.
    pub async fn state_of(&self, id: &str) -> Result<State, Refused> {
        match &self.inner.backend {
            Some(b) => Ok(b.fetch(id).await?.map_or(State::Pending, |o| o.state)),
            None => Err(Refused::Missing("the app keeps no results".into())),
        }
    }

    /// What is stored for one run, without waiting (`None`: nothing yet).
    pub async fn outcome_of(&self, id: &str) -> Result<Option<Outcome>, Refused> {
        match &self.inner.backend {
            Some(b) => b.fetch(id).await,
            None => Err(Refused::Missing("the app keeps no results".into())),
        }
    }

    /// Waits for one run, answering its value or why it will not come.
    pub async fn result_of(&self, id: &str, timeout: Option<Duration>) -> Result<Value, Refused> {
        let b = self
            .inner
            .backend
            .as_ref()
            .ok_or_else(|| Refused::Missing("the app keeps no results".into()))?;
        let wait = timeout.unwrap_or(Duration::from_secs(10 * 365 * 86_400));
        match b.wait(id, wait).await? {
            None => Err(Refused::Timeout),
            Some(o) => outcome_value(o),
        }
    }
}

/// A final outcome as a value or a refusal.
pub(crate) fn outcome_value(o: Outcome) -> Result<Value, Refused> {
    match o.state {
        State::Success => Ok(o.result.unwrap_or(Value::Null)),
        State::Failure => {
            Err(Refused::Failed(o.error.unwrap_or_else(|| {
                super::state::Failure::new("Failure", "no detail stored")
            })))
        }
        State::Revoked => Err(Refused::Revoked(o.id)),
        _ => Err(Refused::Timeout),
    }
}
