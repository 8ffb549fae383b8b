//! The app: registry, sending, handles; the body queue JS drains; workers
//! and beats.
//!
//! A registered JS body is a core `HostQueue` body (the one mechanism both
//! bindings use): a run pushes a call and waits for its answer. The queue's
//! bell is the environment's hub bell, so calls arriving wake the JS thread
//! once; `lib/host.js` then drains them with one `take(max)` per batch, runs
//! each body (sync, or an awaited Promise), and answers the batch with one
//! `finish(ok, failed)`. Calls the core withdrew after JS took them (a
//! timeout, a terminate, a stop past its grace) come back from
//! `cancelled()`, so an async body's `ctx.signal` can abort.

use std::io::Write;
use std::sync::Arc;

use headway_core::broker::celery::js as typed;
use headway_core::task::ask::Ask;
use headway_core::task::specs::json::CanvasSpec;
use headway_core::task::{
    App, Beat, Call, Canvas, Failure, Handle, Host, HostQueue, Refused, SignalSpec, Worker,
};
use headway_core::task::{dead_listed, progress};
use napi::Env;
use napi::bindgen_prelude::{Either, Unknown};
use napi_derive::napi;
use serde_json::Value;

use super::codec::{self, SendIn, garbled, parse, parse_typed};
use super::dead::{Raw, count, letters_json};
use super::hub::{Answer, bell, drive, drive_done, drive_split, json};
use super::time::NativeClock;
use super::{Refusal, brokers::NativeSeams, either, lock, ms};

// ---------------------------------------------------------------- host

/// The calls waiting for JS bodies of one app (or one scheduler).
#[napi]
pub struct NativeHost {
    q: Arc<HostQueue>,
    /// How `swap` takes the next batch (core's `Taker`).
    taker: std::sync::Mutex<headway_core::task::Taker>,
}

/// A comma, then `v` as JSON: the next field of a call.
fn then_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    out.push(b',');
    // Serialising a `Value` or a `str` into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, v);
}

/// Calls as one JSON text: `[[seq, key, id, queue, retries, attempt, last,
/// now, args, kwargs | null, rootId | null, parentId | null, softTimeLimit |
/// null, timeLimit | null, worker, [retries, rule], trace?], ...]` (`trace` only
/// on a traced run: `trace::run_plan`).
fn encode_calls(calls: &[Call]) -> String {
    let mut out = Vec::with_capacity(calls.len() * 160 + 2);
    out.push(b'[');
    for (i, c) in calls.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let x = &c.ctx;
        let _ = write!(out, "[{}", c.seq);
        then_json(&mut out, &*c.key);
        then_json(&mut out, &x.id);
        then_json(&mut out, &x.queue);
        // Into the buffer, no intermediate String.
        let _ = write!(
            out,
            ",{},{},{},{},",
            x.retries,
            x.attempt,
            u8::from(x.last),
            x.now
        );
        typed::write_js(&mut out, &c.args);
        out.push(b',');
        if x.kwargs.is_empty() {
            out.extend_from_slice(b"null");
        } else {
            typed::write_js(&mut out, &x.kwargs);
        }
        then_json(&mut out, &x.root_id);
        then_json(&mut out, &x.parent_id);
        then_json(&mut out, &x.soft_time_limit);
        then_json(&mut out, &x.time_limit);
        then_json(&mut out, &x.worker);
        // What decides what a failure comes to: the attempts so far and
        // the task's retry rule, handed back with the failure
        // (`_afterFailure`) when a listener or a span asks.
        // `[retries, rule]`, written borrowed (no value built per call).
        then_json(&mut out, &(x.retries, &x.rule));
        // The run's span when its app traces (`trace::run_plan`); else
        // nothing, so an untraced call costs no bytes.
        if let Some(plan) = headway_core::task::trace::run_plan(x) {
            then_json(&mut out, &plan);
        }
        out.push(b']');
    }
    out.push(b']');
    // serde_json writes UTF-8 only.
    String::from_utf8(out).unwrap_or_default()
}

/// A custom state's name as JS gives it: none is the core's `PROGRESS`
/// (`ctx.progress()`).
fn state_name(state: Option<String>) -> String {
    state.unwrap_or_else(|| progress::PROGRESS.to_string())
}

/// Checks a custom state's name where no run records it (a scheduler
/// job's context: the core's rule, nothing stored): `null`, or why not.
#[napi(js_name = "_checkState", catch_unwind)]
pub fn check_state(state: Option<String>) -> Option<Refusal> {
    progress::check_name(&state_name(state))
        .err()
        .map(Refusal::from)
}

/// What `lib/host.js` reads of a thrown value (its `thrown()`): type,
/// message, stack (a type or message JS could not read is null), what the
/// body asked by throwing it (a `TaskRetry`, `Reject` or `Ignore`;
/// `task::ask`) or null, and the constructor names along its prototype chain
/// (its lineage).
type Thrown = (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<Value>,
    Vec<String>,
);

/// A thrown value as the core's failure.
fn thrown((kind, message, stack, ask, lineage): Thrown) -> Failure {
    let mut f = Failure::thrown(kind, message, stack);
    f.lineage = lineage.into();
    match ask {
        Some(a) => Ask::failure(f, &a),
        None => f,
    }
}

/// What a run that threw comes to, for its worker's events and its span:
/// `rule` is the call's `[retries, rule]` (as the core put it in the call),
/// `failed` `[type, message, stack, ask, lineage]`; answers the core's
/// `trace::after_failure`: `[state, {span attributes}, the attribute the
/// failure's text goes in | null]`.
#[napi(js_name = "_afterFailure", catch_unwind)]
pub fn after_failure(rule: String, failed: String) -> napi::Result<String> {
    let (retries, rule): (u32, headway_core::task::body::RetryRule) =
        serde_json::from_str(&rule).map_err(|e| bug("rule", e))?;
    let f = thrown(serde_json::from_str(&failed).map_err(|e| bug("failure", e))?);
    Ok(headway_core::task::trace::after_failure(retries, &rule, &f).to_string())
}

/// A batch of answers as JS sends them (see `NativeHost::finish`).
fn answers(ok: String, failed: String) -> napi::Result<Vec<(u64, Result<Value, Failure>)>> {
    let mut results = Vec::new();
    if !ok.is_empty() {
        let mut v: Vec<(u64, Value)> = serde_json::from_str(&ok).map_err(|e| bug("answers", e))?;
        if typed::marked(&ok) {
            v.iter_mut().for_each(|(_, x)| typed::from_js(x));
        }
        results.extend(v.into_iter().map(|(s, v)| (s, Ok(v))));
    }
    if !failed.is_empty() {
        let v: Vec<(u64, Thrown)> =
            serde_json::from_str(&failed).map_err(|e| bug("failures", e))?;
        results.extend(v.into_iter().map(|(s, t)| (s, Err(thrown(t)))));
    }
    Ok(results)
}

impl NativeHost {
    /// A body queue whose arriving calls ring this environment's bell.
    pub(crate) fn queue() -> napi::Result<Arc<HostQueue>> {
        let q = HostQueue::new();
        q.set_bell(Some(bell()?));
        Ok(q)
    }

    /// JS's side of `q`, with a taker of its own.
    pub(crate) fn of(q: &Arc<HostQueue>) -> NativeHost {
        NativeHost {
            q: q.clone(),
            taker: Default::default(),
        }
    }
}

#[napi]
impl NativeHost {
    /// Answers a batch: `ok` is `[[seq, value], ...]`, `failed` is `[[seq,
    /// [type | null, message | null, stack | null, ask | null, lineage]],
    /// ...]` (either may be empty; a null type or message is one JS could
    /// not read, answered as the core's `Failure::UNNAMED` /
    /// `Failure::UNDESCRIBED`). A call the core stopped waiting for is
    /// dropped.
    #[napi(catch_unwind)]
    pub fn finish(&self, ok: String, failed: String) -> napi::Result<()> {
        self.q.finish_many(answers(ok, failed)?);
        Ok(())
    }

    /// `finish(ok, failed)`, then up to `max` calls as JSON text (see
    /// `encode_calls`; `null` when none came), taken by core's `Taker`: in
    /// one crossing, what a host does between batches (core's
    /// `HostQueue::swap`).
    #[napi(catch_unwind)]
    pub fn swap(&self, ok: String, failed: String, max: u32) -> napi::Result<Option<String>> {
        let results = answers(ok, failed)?;
        let calls = self
            .q
            .swap(results, &mut lock(&self.taker), max.max(1) as usize);
        Ok((!calls.is_empty()).then(|| encode_calls(&calls)))
    }

    /// Calls JS took that the core no longer waits for: their bodies should
    /// be cancelled (`ctx.signal` aborts), and their answers are discarded.
    #[napi]
    pub fn cancelled(&self) -> Vec<f64> {
        self.q.cancelled().into_iter().map(|s| s as f64).collect()
    }

    /// Calls JS took that passed their soft time limit since the last ask:
    /// their `ctx.signal` aborts with `SoftTimeLimitExceeded`, and their
    /// bodies go on (the answer still counts).
    #[napi]
    pub fn softened(&self) -> Vec<f64> {
        self.q.softened().into_iter().map(|s| s as f64).collect()
    }
}

// ---------------------------------------------------------------- app

/// Publishes a run for the bare `sender` function (`fast.rs`): `req` is
/// `[name, args, kwargs, options, trace?]`. With `known`, a name the app has
/// not registered is refused (`UNKNOWN_TASK`); without, it is Celery's
/// `send_task`. Answers the run's id.
pub(crate) fn send_answer(app: &App, req: &str, known: bool) -> napi::Result<Answer> {
    refusing(|| {
        let SendIn(name, mut args, mut kwargs, opts, trace) = parse::<SendIn>("send", req)?;
        if typed::marked(req) {
            args.iter_mut().for_each(typed::from_js);
            kwargs.iter_mut().for_each(typed::from_js_map);
        }
        let opts = codec::options(opts)?;
        let app = app.clone();
        let kwargs = kwargs.unwrap_or_default();
        Ok(drive_split(
            async move {
                app.send_traced(&name, args, kwargs, opts, known, trace)
                    .await
            },
            |h| h.id().to_string(),
            |h| json(h.id()),
        ))
    })
}

/// The registry, the seams and the clock (`lib/tasks.js`'s `App` wraps it).
#[napi]
pub struct NativeApp {
    app: App,
    host: Arc<HostQueue>,
    /// The broker it is on, for raw pushes.
    raw: Raw,
}

impl NativeApp {
    /// The core app, for other native classes that work on it (the admin).
    pub(crate) fn core(&self) -> &App {
        &self.app
    }

    /// `f` on the handle `ids` names (the set they list when `all`); ids
    /// that are no JSON list are refused.
    fn with_handle(
        &self,
        ids: &str,
        all: bool,
        f: impl FnOnce(Handle) -> napi::Result<Answer>,
    ) -> napi::Result<Answer> {
        refusing(|| Ok(f(handle_of(&self.app, ids, all)?)))
    }
}

/// A request from `lib/host.js` that does not parse, thrown.
fn bug(what: &str, e: serde_json::Error) -> napi::Error {
    napi::Error::from_reason(garbled(what, e).message)
}

fn handle_of(app: &App, ids: &str, all: bool) -> Result<Handle, Refusal> {
    if all {
        let ids: Vec<String> = parse("handle", ids)?;
        Ok(Handle::of(app.clone(), ids, true))
    } else {
        Ok(app.handle(ids))
    }
}

/// A handle as `lib/handles.js` makes one again: `{"ids": [...], "all": bool}`.
fn handle_json(h: Handle) -> String {
    serde_json::json!({"ids": h.ids(), "all": h.is_set()}).to_string()
}

/// Runs `f`, a refusal it meets on the way (`?`) answered as JS's refusal
/// rather than thrown.
fn refusing(f: impl FnOnce() -> Result<napi::Result<Answer>, Refusal>) -> napi::Result<Answer> {
    f().unwrap_or_else(|r| Ok(napi::bindgen_prelude::Either3::C(r)))
}

#[napi]
impl NativeApp {
    /// An app on `seams` (consumed) reading `clock`.
    #[napi(constructor, catch_unwind)]
    pub fn new(seams: &NativeSeams, clock: &NativeClock) -> napi::Result<Self> {
        let (on, store) = seams.take().ok_or_else(|| {
            napi::Error::from_reason("headway: these seams were already given to an App")
        })?;
        let host = NativeHost::queue()?;
        let app = on.app(&store, clock.clock.clone());
        app.set_host(Host::Node);
        Ok(NativeApp { app, host, raw: on })
    }

    /// The queue its JS bodies are served from.
    #[napi(getter)]
    pub fn host(&self) -> NativeHost {
        NativeHost::of(&self.host)
    }

    /// Registers (or replaces) the body `name` with a policy (JSON, see
    /// `codec::policy`). `null`, or why not.
    #[napi(catch_unwind)]
    pub fn register(&self, name: String, policy: String) -> Option<Refusal> {
        codec::policy(&policy)
            .and_then(|p| Ok(self.app.register(&name, p, self.host.body(&name))?))
            .err()
    }

    /// The span a traced send of `name` is: `[name, kind, {attributes},
    /// id]`, the run's id fixed here when `id` is null.
    #[napi(js_name = "sendSpan", catch_unwind)]
    pub fn send_span(&self, name: String, queue: Option<String>, id: Option<String>) -> String {
        let mut o = headway_core::task::Options {
            queue,
            id,
            ..Default::default()
        };
        let span = self.app.send_span(&name, &mut o);
        let mut v = span.to_json();
        if let Value::Array(a) = &mut v {
            a.push(Value::from(o.id.unwrap_or_default()));
        }
        v.to_string()
    }

    /// Turns tracing of the app's runs on or off (`lib/tracing.js` turns it
    /// on when OpenTelemetry has a tracer provider).
    #[napi(js_name = "setTracing")]
    pub fn set_tracing(&self, on: bool) {
        self.app.set_tracing(on);
    }

    /// `send(req, known)` as a bare Node-API function bound to this app (see
    /// `fast.rs`): what `Task.send` calls.
    #[napi(catch_unwind)]
    pub fn sender<'e>(&self, env: &'e Env) -> napi::Result<Unknown<'e>> {
        let f = super::fast::sender(env.raw(), self.app.clone())?;
        // SAFETY: a function value just made in `env`.
        Ok(unsafe { Unknown::from_raw_unchecked(env.raw(), f) })
    }

    /// Publishes a canvas tree (see `codec::canvas`); answers
    /// `{"ids": [...], "all": bool}`.
    #[napi(js_name = "sendCanvas", catch_unwind)]
    pub fn send_canvas(&self, tree: String) -> napi::Result<Answer> {
        refusing(|| {
            let canvas = codec::canvas(&tree)?;
            let app = self.app.clone();
            Ok(drive(
                async move { app.send_canvas(canvas).await },
                handle_json,
            ))
        })
    }

    /// Asks the run (or the set) `what`, the core's `Handle` method of
    /// that name: `get` (its value, a set's the list, waiting at most
    /// `timeout` real ms; `null`: for ever), `state` (a state name, a
    /// custom one a body recorded too), `info`, `dateDone` (epoch ms or
    /// null), `children` (the ids its success sent on) or `forget`.
    /// Answers JSON text (`state` at once: the bare name).
    #[napi(catch_unwind)]
    pub fn ask(
        &self,
        ids: String,
        all: bool,
        what: String,
        timeout: Option<f64>,
    ) -> napi::Result<Answer> {
        self.with_handle(&ids, all, |h| match what.as_str() {
            "get" => {
                let t = headway_core::task::specs::wait(timeout.map(ms));
                drive(async move { h.get(t).await }, typed::text_js)
            }
            "state" => drive_split(async move { h.state_name().await }, |s| s, json),
            "info" => drive(async move { h.info().await }, typed::text_js),
            "dateDone" => drive(async move { h.date_done().await }, json),
            "children" => drive(async move { h.children().await }, json),
            "forget" => drive_done(async move { h.forget().await }),
            _ => Err(napi::Error::from_reason(format!(
                "headway: a handle has no {what:?} (a bug)"
            ))),
        })
    }

    /// Records custom state `state` (none: the core's `PROGRESS`) with
    /// `meta` (JSON text from `lib/json.js`) for run `id` of `task` after
    /// `retries` failed attempts (the core's `App::record_state`).
    #[napi(catch_unwind)]
    pub fn update_state(
        &self,
        id: String,
        task: String,
        retries: u32,
        state: Option<String>,
        meta: String,
    ) -> napi::Result<Answer> {
        let state = state_name(state);
        refusing(|| {
            let v: Value = parse_typed("meta", &meta)?;
            let app = self.app.clone();
            Ok(drive_done(async move {
                app.record_state(&id, &task, retries, &state, v).await
            }))
        })
    }

    /// Revokes the run (or the set); with `terminate`, a run in progress
    /// stops wherever it runs, with `signal` (a name or a number, read by
    /// the core; none: SIGTERM).
    #[napi(catch_unwind)]
    pub fn revoke(
        &self,
        ids: String,
        all: bool,
        terminate: bool,
        signal: Option<Either<String, f64>>,
    ) -> napi::Result<Answer> {
        refusing(|| {
            let h = handle_of(&self.app, &ids, all)?;
            let spec = signal.as_ref().map(|s| match s {
                Either::A(name) => SignalSpec::Name(name),
                Either::B(n) => SignalSpec::Number(*n),
            });
            let signal = headway_core::task::signal::parse(Host::Node, spec)?;
            Ok(drive_done(
                async move { h.revoke_with(terminate, signal).await },
            ))
        })
    }

    /// The dead letters of `queue`, newest first, at most `limit`: JSON
    /// text (see `dead::letters_json`).
    #[napi(js_name = "deadLetters", catch_unwind)]
    pub fn dead_letters(&self, queue: String, limit: Option<f64>) -> napi::Result<Answer> {
        refusing(|| {
            let limit = count(limit, headway_core::task::dead::DEAD_LISTED)?;
            let app = self.app.clone();
            Ok(drive(
                async move { dead_listed::dead_letters(&app, &queue, limit).await },
                letters_json,
            ))
        })
    }

    /// How many dead letters `queue` keeps now.
    #[napi(js_name = "deadCount", catch_unwind)]
    pub fn dead_count(&self, queue: String) -> napi::Result<Answer> {
        let app = self.app.clone();
        drive(
            async move { dead_listed::dead_count(&app, &queue).await },
            json,
        )
    }

    /// Puts dead letters of `queue` back on it, oldest first: at most
    /// `limit` (`null`: all), only those whose id is in `ids` when given.
    #[napi(js_name = "requeueDead", catch_unwind)]
    pub fn requeue_dead(
        &self,
        queue: String,
        limit: Option<f64>,
        ids: Option<Vec<String>>,
    ) -> napi::Result<Answer> {
        refusing(|| {
            let limit = count(limit, usize::MAX)?;
            let ids = ids.unwrap_or_default();
            let b = self.app.broker().clone();
            Ok(drive(
                async move { b.requeue_dead(&queue, &ids, limit).await },
                json,
            ))
        })
    }

    /// Drops every dead letter of `queue` for good; answers how many.
    #[napi(js_name = "purgeDead", catch_unwind)]
    pub fn purge_dead(&self, queue: String) -> napi::Result<Answer> {
        let b = self.app.broker().clone();
        drive(async move { b.purge_dead(&queue).await }, json)
    }

    /// Puts `data` on `queue` as another producer would, unchecked (tests
    /// and tools): a worker quarantines it if it is not a message.
    #[napi(js_name = "_pushRaw", catch_unwind)]
    pub fn push_raw(
        &self,
        queue: String,
        data: napi::bindgen_prelude::Buffer,
    ) -> napi::Result<Answer> {
        let raw = self.raw.clone();
        let data = data.to_vec();
        drive_done(async move { raw.push(&queue, &data).await })
    }

    /// Every registered name, sorted.
    #[napi(js_name = "taskNames")]
    pub fn task_names(&self) -> Vec<String> {
        self.app.task_names()
    }

    /// Turns Celery's events on (`headway worker -E`): null, or why not.
    #[napi(js_name = "enableTaskEvents", catch_unwind)]
    pub fn enable_task_events(&self) -> Option<Refusal> {
        self.app.enable_task_events().err().map(Refusal::from)
    }

    /// Serves the app's Prometheus metrics at `http://host:port/metrics`
    /// until the process ends: the port (the one chosen for 0), or why not.
    #[napi(js_name = "serveMetrics", catch_unwind)]
    pub fn serve_metrics(&self, host: String, port: f64) -> Either<u32, Refusal> {
        either(
            headway_core::task::metrics::serve(self.app.clone(), &host, ms(port))
                .map(|s| u32::from(s.addr.port())),
        )
    }

    /// `headway inspect|control` (the CLI): `ask` is the command as JSON
    /// (core's `control::CliAsk`); answers JSON `{code, out, err}` once the
    /// nodes' answers are gathered, or why not (a bad command is refused
    /// before anything is sent).
    #[napi(catch_unwind)]
    pub fn remote(&self, ask: String) -> napi::Result<Answer> {
        let app = self.app.clone();
        drive(
            async move {
                let ask = headway_core::task::control::CliAsk::parse(&ask)?;
                ask.run(&app).await
            },
            json,
        )
    }

    /// The app's time, epoch ms.
    #[napi]
    pub fn now(&self) -> f64 {
        self.app.now() as f64
    }

    /// A worker set up by `spec` (JSON, see `codec::worker`): on the event
    /// loop, or on the process pool when `spec.pool` says so (then
    /// `spec.child` is how `lib/child.js` is started).
    #[napi(catch_unwind)]
    pub fn worker(&self, spec: String) -> Either<NativeWorker, Refusal> {
        either(codec::worker(&spec).and_then(|cfg| {
            Ok(NativeWorker {
                w: self.app.worker(cfg)?,
            })
        }))
    }

    /// In a child of the process pool (`lib/child.js`): serves the parent on
    /// fd 3 — each run it hands over goes through this app's body queue to
    /// the event loop, as in a worker — and answers (a ticket) when the
    /// parent closes the socket. Hidden: only `lib/child.js` calls it, after
    /// it checked that fd 3 is a socket it was given.
    #[napi(js_name = "_serveChild", catch_unwind)]
    pub fn serve_child(&self) -> napi::Result<Answer> {
        let app = self.app.clone();
        drive_done(async move {
            // SAFETY: `lib/child.js` calls this once, in a process the
            // pool started with its socket as fd 3, which nothing else
            // in the process owns.
            unsafe { headway_core::task::procs::child::serve_fd(app) }
                .await
                .map_err(|e| {
                    Refused::Invalid(format!("the process pool's socket (fd 3) failed: {e}"))
                })
        })
    }

    /// A new beat on this app.
    #[napi]
    pub fn beat(&self) -> NativeBeat {
        NativeBeat {
            beat: self.app.beat(),
        }
    }
}

// ---------------------------------------------------------------- worker

/// The core's worker.
#[napi]
pub struct NativeWorker {
    w: Worker,
}

#[napi]
impl NativeWorker {
    /// Runs until stopped; answers (a ticket) once every message it held is
    /// settled or given back.
    #[napi(catch_unwind)]
    pub fn run(&self) -> napi::Result<Answer> {
        let w = self.w.clone();
        drive_done(async move { w.run().await })
    }

    /// Stops claiming, gives prefetched messages back, waits up to `grace`
    /// ms (the core's `specs::grace`: none is `GRACE`) for runs in progress, then
    /// cancels and gives back the rest. Returns at once; `run` answers when
    /// it is all done.
    #[napi]
    pub fn stop(&self, grace: Option<f64>) {
        self.w.stop(headway_core::task::specs::grace(grace.map(ms)));
    }

    #[napi(getter)]
    pub fn name(&self) -> String {
        self.w.name().to_string()
    }
    #[napi(getter)]
    pub fn queues(&self) -> Vec<String> {
        self.w.queues().to_vec()
    }
    #[napi(getter)]
    pub fn concurrency(&self) -> u32 {
        self.w.concurrency() as u32
    }
    #[napi(getter)]
    pub fn prefetch(&self) -> u32 {
        self.w.prefetch() as u32
    }
    /// `"process"` when its bodies run in child processes, else `"threads"`
    /// (this event loop).
    #[napi(getter)]
    pub fn pool(&self) -> &'static str {
        self.w.pool_name()
    }
    /// The pids of its child processes now (none on the threads pool).
    #[napi(getter)]
    pub fn child_pids(&self) -> Vec<u32> {
        self.w.procs().map(|p| p.pids()).unwrap_or_default()
    }
    #[napi(getter)]
    pub fn settled(&self) -> f64 {
        self.w.settled() as f64
    }
    #[napi(getter)]
    pub fn stopping(&self) -> bool {
        self.w.is_stopping()
    }

    /// Hands each process-pool run's note (its start, what it came to) to
    /// `callback` as JSON, for the worker's events; `null` stops it. The
    /// function is weak: it never keeps the process alive.
    #[napi(js_name = "_observe", catch_unwind)]
    pub fn observe(
        &self,
        callback: Option<napi::bindgen_prelude::Function<String, ()>>,
    ) -> napi::Result<()> {
        let Some(callback) = callback else {
            self.w.observe(None);
            return Ok(());
        };
        let send = crate::logs::forward(callback)?;
        self.w.observe(Some(Arc::new(move |note| {
            if let Ok(j) = serde_json::to_string(&note) {
                send(j);
            }
        })));
        Ok(())
    }
}

// ---------------------------------------------------------------- beat

/// The core's beat.
#[napi]
pub struct NativeBeat {
    beat: Beat,
}

#[napi]
impl NativeBeat {
    /// Schedules an entry `[name, {"sig": [...]}]` (the signature as in a
    /// canvas tree), replacing one of that name, on a rhythm (JSON, see
    /// `codec::rhythm`). `null`, or why not.
    #[napi(catch_unwind)]
    pub fn add(&self, entry: String, rhythm: String) -> Option<Refusal> {
        let go = || -> Result<(), Refusal> {
            let (name, tree): (String, CanvasSpec) = parse_typed("beat entry", &entry)?;
            let Canvas::Sig(sig) = tree.build(Host::Node)? else {
                return Err(garbled("beat entry", "not a signature"));
            };
            let r = codec::rhythm(&rhythm)?;
            self.beat.add(&name, sig, r).map_err(Refusal::from)
        };
        go().err()
    }

    /// Removes the entry `name`; `false` when there was none.
    #[napi]
    pub fn remove(&self, name: String) -> bool {
        self.beat.remove(&name)
    }

    /// `[[name, at], ...]`, soonest first (epoch ms).
    #[napi]
    pub fn pending(&self) -> String {
        json(self.beat.pending())
    }

    /// Sends what is due now; answers `[[name, due, id], ...]`.
    #[napi(catch_unwind)]
    pub fn tick(&self) -> napi::Result<Answer> {
        let b = self.beat.clone();
        let render = |fired: Vec<headway_core::task::Fired>| {
            json(
                fired
                    .into_iter()
                    .map(|f| (f.name, f.due, f.handle.id().to_string()))
                    .collect::<Vec<_>>(),
            )
        };
        drive(async move { b.tick().await }, render)
    }

    /// Sends due entries and sleeps until the next, until `stop()` (or until
    /// the app's clock reaches `until`, epoch ms).
    #[napi(catch_unwind)]
    pub fn run(&self, until: Option<f64>) -> napi::Result<Answer> {
        let b = self.beat.clone();
        let until = until.map(ms);
        drive_done(async move { b.run(until).await })
    }

    /// Stops `run` after the tick in progress.
    #[napi]
    pub fn stop(&self) {
        self.beat.stop();
    }
}
