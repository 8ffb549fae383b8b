//! The task queue half of the core, for `bindings-node/lib/`.
//!
//! Values cross as JSON text: `lib/tasks.js` checks types and builds one JSON
//! request per call (arguments, options, a policy, a canvas tree), the
//! native side parses it with serde and hands it to the core, and answers
//! come back as JSON text that V8 parses in one go. One string each way is
//! cheaper than a Node-API call per field, and it is the same path a
//! message's arguments take through a broker anyway.
//!
//! - [`hub`]: the environment's bell and the Promises it answers;
//! - [`codec`]: requests (options, policies, rhythms, canvases) into core
//!   values, refusals out;
//! - [`app`]: `NativeApp` (registry, sending, handles), the body queue JS
//!   drains, workers and beats;
//! - [`time`]: `NativeClock` (the system clock or a virtual one) and the
//!   rhythm and backoff helpers;
//! - [`brokers`]: `NativeRedis` (headway's Redis layout or Celery's) and the
//!   seams an app is built on;
//! - [`sched`]: the broker-less in-process scheduler;
//! - [`dead`]: dead letters as JSON text, and raw pushes for tests;
//! - [`fast`]: `send` as a bare Node-API function, the one per-message call.
//!
//! kombu's typed values (`datetime`, `bytes`, ...) cross as the markers
//! `lib/json.js` makes `Date`s and `Buffer`s of, and back: the core's
//! `broker::celery::js`.
//!
//! No rule lives here: every default and every check is the core's; this
//! converts units (ms as JS numbers, rounded) and maps refusals.

// A `Refusal` is a few strings: it travels only on the failure path, once
// per refused call, so boxing it would buy nothing.
#![allow(clippy::result_large_err)]

pub(crate) mod app;
pub(crate) mod brokers;
pub(crate) mod codec;
pub(crate) mod dead;
pub(crate) mod fast;
pub(crate) mod hub;
pub(crate) mod sched;
pub(crate) mod time;

use headway_core::task::Refused;
use napi_derive::napi;
use serde::Serialize;

/// Why a task-side call did not answer a value, as `lib/errors.js` turns it into
/// an `Error` with a `code`: the core's `Refused::code()` (`FAILED`,
/// `TIMEOUT`, `REVOKED`, `MISSING`, `UNKNOWN_TASK`, `BROKER`, `INVALID`),
/// `RANGE` for a number out of the core's range, or `PANIC` for a Rust
/// panic caught in a spawned future.
#[napi(object)]
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Refusal {
    pub code: String,
    pub message: String,
    /// FAILED: the remote error's type name (`TypeError`, `ValueError`).
    pub remote_type: Option<String>,
    /// FAILED: its message.
    pub remote_message: Option<String>,
    /// FAILED: its stack or traceback text.
    pub remote_traceback: Option<String>,
    /// FAILED: its module, when the remote side had one (Python).
    pub remote_module: Option<String>,
    /// REVOKED: the run's id; UNKNOWN_TASK: the name.
    pub id: Option<String>,
    /// BROKER: the core's `BrokerErrorKind::name()` (`connection`, ...).
    pub kind: Option<String>,
}

impl Refusal {
    fn bare(code: &str, message: String) -> Refusal {
        Refusal {
            code: code.to_string(),
            message,
            ..Default::default()
        }
    }

    /// A Rust panic caught in a spawned future.
    pub(crate) fn panic(payload: Box<dyn std::any::Any + Send>) -> Refusal {
        Refusal::bare("PANIC", headway_core::runtime::panicked(&*payload))
    }

    /// An argument the core cannot accept.
    pub(crate) fn invalid(why: impl Into<String>) -> Refusal {
        Refusal::bare("INVALID", why.into())
    }

    /// A number outside the core's range (`lib/errors.js` throws Node's
    /// `ERR_OUT_OF_RANGE`).
    pub(crate) fn range(why: impl Into<String>) -> Refusal {
        Refusal::bare("RANGE", why.into())
    }
}

impl From<Refused> for Refusal {
    // One match over every variant: a new one in the core fails to compile
    // here rather than falling through (polars' `error.rs` rule).
    fn from(r: Refused) -> Refusal {
        let message = r.to_string();
        let code = r.code();
        let mut out = Refusal::bare(code, message);
        match r {
            Refused::Failed(f) => {
                out.remote_type = Some(f.kind);
                out.remote_message = Some(f.message);
                out.remote_traceback = f.traceback;
                out.remote_module = f.module;
            }
            Refused::Revoked(id) => out.id = Some(id),
            Refused::UnknownTask(name) => out.id = Some(name),
            Refused::Broker(b) => out.kind = Some(b.kind.name().to_string()),
            Refused::Timeout | Refused::Missing(_) | Refused::Invalid(_) => {}
        }
        out
    }
}

/// A core answer as JS takes it: the value, or the refusal `lib/errors.js`
/// turns into an `Error`.
pub(crate) fn either<T, E: Into<Refusal>>(
    r: Result<T, E>,
) -> napi::bindgen_prelude::Either<T, Refusal> {
    match r {
        Ok(v) => napi::bindgen_prelude::Either::A(v),
        Err(e) => napi::bindgen_prelude::Either::B(e.into()),
    }
}

/// `m`'s guard, a poisoned lock taken as it is: every writer here leaves
/// what it guards whole before anything can panic.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The core's one runtime. Node never forks without exec, so the core's
/// fork check (a `getpid` per call) is made once and the answer kept.
pub(crate) fn rt() -> napi::Result<&'static tokio::runtime::Runtime> {
    static RT: std::sync::OnceLock<&'static tokio::runtime::Runtime> = std::sync::OnceLock::new();
    if let Some(rt) = RT.get() {
        return Ok(rt);
    }
    let rt =
        headway_core::runtime::runtime().map_err(|e| napi::Error::from_reason(e.to_string()))?;
    Ok(RT.get_or_init(|| rt))
}

/// A JS number of milliseconds as the core's `i64`, rounded to the nearest
/// (`lib/tasks.js` refuses NaN; ±Infinity saturate).
pub(crate) fn ms(x: f64) -> i64 {
    x.round() as i64
}
