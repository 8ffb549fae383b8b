//! The one bell of a JS environment, and the Promises it answers.
//!
//! The task side's futures run on the core's one tokio runtime. When one
//! finishes, its answer is pushed onto this environment's list of settled
//! tickets and the bell — one ThreadsafeFunction per environment — is rung,
//! at most once until JS drains: a burst of a thousand settled `get()`s costs
//! one event-loop wake-up and one native call (`_hubDrain`), which answers
//! them all as one JSON text. The same bell is what the core's `HostQueue`
//! rings when calls for JS bodies arrive (`app.rs`), so one wake-up serves
//! both.
//!
//! Lifetimes: the bell is *weak* — it keeps the
//! process alive only while a ticket is outstanding (a pending `get()`, a
//! running `worker.run()`): it is ref'd when the count of outstanding
//! tickets leaves zero and unref'd when it returns there. After
//! `worker.stop()` and the last answer nothing native keeps Node up.
//!
//! Every call that touches a broker first polls its future once on the JS
//! thread (inside the runtime's context): the in-memory broker answers at
//! once, so a send, a `get()` of a settled run or a `state()` costs no
//! thread hop, no ticket and no wake-up. Only a future still pending after
//! that poll is spawned and given a ticket.

use std::cell::{Cell, RefCell};
use std::fmt::Write;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;

use futures_util::FutureExt;
use headway_core::task::Refused;
use napi::bindgen_prelude::{Either3, Function};
use napi::sys;
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Env, Status};
use napi_derive::napi;

use super::{Refusal, lock, rt};

type Bell = ThreadsafeFunction<(), (), (), Status, false, true>;

/// What a finished future answers: a JSON text, or why not.
pub(crate) type Settled = Result<String, Refusal>;

/// The part of the hub tokio threads touch.
pub(crate) struct Shared {
    done: Mutex<Vec<(u32, Settled)>>,
    rung: AtomicBool,
    bell: Bell,
}

impl Shared {
    /// Wakes the JS thread, unless a wake-up is already on its way.
    pub(crate) fn ring(&self) {
        if !self.rung.swap(true, Ordering::AcqRel) {
            let _ = self.bell.call((), ThreadsafeFunctionCallMode::NonBlocking);
        }
    }

    fn push(&self, ticket: u32, s: Settled) {
        lock(&self.done).push((ticket, s));
        self.ring();
    }
}

/// One environment's hub (lives on its JS thread).
pub(crate) struct Hub {
    pub(crate) shared: Arc<Shared>,
    env: sys::napi_env,
    next: Cell<u32>,
    outstanding: Cell<u32>,
}

thread_local! {
    /// Each JS environment runs on its own thread (worker_threads too), so a
    /// thread-local is one hub per environment.
    static HUB: RefCell<Option<Rc<Hub>>> = const { RefCell::new(None) };
}

/// This environment's hub.
pub(crate) fn hub() -> napi::Result<Rc<Hub>> {
    HUB.with(|h| h.borrow().clone()).ok_or_else(|| {
        napi::Error::from_reason("headway: the task hub is not initialised (load headway first)")
    })
}

impl Hub {
    fn set_ref(&self, on: bool) {
        if self.shared.bell.aborted() {
            return;
        }
        let raw = self.shared.bell.raw();
        // SAFETY: called on the environment's own thread, and the bell is not
        // finalised (not aborted), so `raw` is live.
        unsafe {
            if on {
                sys::napi_ref_threadsafe_function(self.env, raw);
            } else {
                sys::napi_unref_threadsafe_function(self.env, raw);
            }
        }
    }

    /// A new ticket: the bell keeps the process alive until it is answered.
    pub(crate) fn ticket(&self) -> u32 {
        let t = self.next.get();
        self.next.set(t.wrapping_add(1).max(1));
        let n = self.outstanding.get();
        if n == 0 {
            self.set_ref(true);
        }
        self.outstanding.set(n + 1);
        t
    }
}

/// Installs the bell: `bell()` is called on the JS thread whenever settled
/// tickets or calls for bodies are waiting. Once per environment.
#[napi(js_name = "_hubInit", catch_unwind)]
pub fn hub_init(env: &Env, bell: Function<(), ()>) -> napi::Result<()> {
    if HUB.with(|h| h.borrow().is_some()) {
        return Ok(());
    }
    let tsfn: Bell = bell
        .build_threadsafe_function::<()>()
        .weak::<true>()
        .callee_handled::<false>()
        .build()?;
    let hub = Hub {
        shared: Arc::new(Shared {
            done: Mutex::new(Vec::new()),
            rung: AtomicBool::new(false),
            bell: tsfn,
        }),
        env: env.raw(),
        next: Cell::new(1),
        outstanding: Cell::new(0),
    };
    HUB.with(|h| *h.borrow_mut() = Some(Rc::new(hub)));
    Ok(())
}

/// Everything settled since the last drain, as one JSON text:
/// `[[ticket, 1, payload] | [ticket, 0, refusal], ...]`, or `null`. Clears
/// the bell first, so anything settling after this rings again.
#[napi(js_name = "_hubDrain", catch_unwind)]
pub fn hub_drain() -> napi::Result<Option<String>> {
    let hub = hub()?;
    hub.shared.rung.store(false, Ordering::Release);
    let done = std::mem::take(&mut *lock(&hub.shared.done));
    if done.is_empty() {
        return Ok(None);
    }
    hub.answered(done.len());
    Ok(Some(render(&done)))
}

impl Hub {
    /// `n` tickets were answered: when none is left the bell stops keeping
    /// the process alive.
    pub(crate) fn answered(&self, n: usize) {
        let left = self.outstanding.get().saturating_sub(n as u32);
        self.outstanding.set(left);
        if left == 0 {
            self.set_ref(false);
        }
    }
}

/// Settled tickets as the JSON text `_hubDrain` answers.
pub(crate) fn render(done: &[(u32, Settled)]) -> String {
    let mut out = String::with_capacity(done.len() * 48 + 2);
    out.push('[');
    for (i, (t, s)) in done.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('[');
        let _ = write!(out, "{t}");
        match s {
            Ok(text) => {
                out.push_str(",1,");
                out.push_str(text);
            }
            Err(r) => {
                out.push_str(",0,");
                out.push_str(&serde_json::to_string(r).unwrap_or_else(|_| "null".into()));
            }
        }
        out.push(']');
    }
    out.push(']');
    out
}

/// How many tickets wait for an answer (tests: nothing is left behind).
#[napi(js_name = "_hubOutstanding")]
pub fn hub_outstanding() -> napi::Result<u32> {
    Ok(hub()?.outstanding.get())
}

/// What a call that may finish at once answers JS: the payload text (done),
/// a ticket number (answered later through the bell), or a refusal.
pub(crate) type Answer = Either3<String, u32, Refusal>;

/// Polls `fut` once here; answers at once when it is ready (`now` renders
/// its value), else spawns it on the core's runtime and answers a ticket
/// whose payload `later` renders as JSON text.
pub(crate) fn drive_split<T, F>(
    fut: F,
    now: impl FnOnce(T) -> String,
    later: fn(T) -> String,
) -> napi::Result<Answer>
where
    T: Send + 'static,
    F: Future<Output = Result<T, Refused>> + Send + 'static,
{
    let rt = rt()?;
    let mut fut = Box::pin(fut);
    // No `release`: the event loop must never wait on Redis.
    if let Poll::Ready(v) = headway_core::runtime::poll_first(rt, fut.as_mut(), None) {
        return Ok(match v {
            Ok(v) => Either3::A(now(v)),
            Err(r) => Either3::C(Refusal::from(r)),
        });
    }
    let ticket = hub()?.ticket();
    spawn_ticketed(ticket, fut, later)?;
    Ok(Either3::B(ticket))
}

/// [`drive_split`] for a value rendered the same either way (most are:
/// JSON text the JS side parses however it arrived).
pub(crate) fn drive<T, F>(fut: F, render: fn(T) -> String) -> napi::Result<Answer>
where
    T: Send + 'static,
    F: Future<Output = Result<T, Refused>> + Send + 'static,
{
    drive_split(fut, render, render)
}

/// [`drive_split`] for a future whose only answer is that it is done:
/// `undefined` at once, `null` through a ticket.
pub(crate) fn drive_done<F>(fut: F) -> napi::Result<Answer>
where
    F: Future<Output = Result<(), Refused>> + Send + 'static,
{
    drive_split(fut, |()| String::new(), |()| "null".to_string())
}

/// Runs `fut` on the core's runtime, its answer (rendered by `later`)
/// settling `ticket` through the bell.
pub(crate) fn spawn_ticketed<T, F>(ticket: u32, fut: F, later: fn(T) -> String) -> napi::Result<()>
where
    T: Send + 'static,
    F: Future<Output = Result<T, Refused>> + Send + 'static,
{
    let shared = hub()?.shared.clone();
    rt()?.spawn(async move {
        let s = match AssertUnwindSafe(fut).catch_unwind().await {
            Ok(v) => v.map(later).map_err(Refusal::from),
            Err(p) => Err(Refusal::panic(p)),
        };
        shared.push(ticket, s);
    });
    Ok(())
}

/// The bell, for a `HostQueue` to ring when calls arrive.
pub(crate) fn bell() -> napi::Result<Arc<dyn Fn() + Send + Sync>> {
    let shared = hub()?.shared.clone();
    Ok(Arc::new(move || shared.ring()))
}

/// A value as JSON text (a non-finite number is `null`): the renderer of
/// every answer whose payload needs no shaping of its own.
pub(crate) fn json<T: serde::Serialize>(v: T) -> String {
    serde_json::to_string(&v).unwrap_or_else(|_| "null".into())
}

/// Panics inside a task-side future — at once (on the JS thread, inside the
/// first poll: a thrown `Error`) or after one yield (on the runtime: a
/// rejected Promise, code `PANIC`) — to prove neither aborts the process.
#[napi(js_name = "_taskPanic", catch_unwind)]
pub fn task_panic(later: bool) -> napi::Result<Answer> {
    drive_done(async move {
        if later {
            tokio::task::yield_now().await;
        }
        deliberate()
    })
}

fn deliberate() -> Result<(), Refused> {
    panic!("headway: a deliberate panic in a task future")
}
