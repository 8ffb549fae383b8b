//! `SharedBucket`, `SharedWindow` and `SharedGate`: the core's
//! `limit::Shared*` behind `NativeShared*`, which `lib/limits.js` wraps.
//!
//! No rules here: a constructor converts milliseconds to nanoseconds and
//! hands everything to the core, which checks it (a refusal is thrown as an
//! `InvalidArg` error that `lib/limits.js` makes a `RangeError`); each call
//! is asked of the core and made by `wire::call` — on the event loop's own
//! socket or the shared link — answered as JSON text; a number of
//! milliseconds is `null` for never. `wait()` loops in the core, on the
//! shared link.

use std::sync::Arc;

use headway_core::limit::tokens::tokens;
use headway_core::limit::{SharedBucket, SharedGate, SharedWindow};
use napi_derive::napi;

use crate::raw::invalid_arg;
use crate::tasks::hub::{Answer, drive, json};
use crate::units::{ms, ns};
use crate::wire::{call, call_with, wire_for};

/// A JS number that must be an integer (`units::int`), its refusal thrown
/// as `refused` throws.
fn int_arg(name: &'static str, x: f64) -> napi::Result<i64> {
    crate::units::int(name, x).map_err(|f| match f {
        crate::raw::Fail::Range(arg, why) => {
            napi::Error::new(napi::Status::InvalidArg, format!("invalid `{arg}`: {why}"))
        }
        other => napi::Error::from_reason(format!("{other:?}")),
    })
}

/// Nanoseconds as milliseconds; never (`i64::MAX`) is `null`.
fn ms_json(span: i64) -> String {
    json(ms(span))
}

/// A token bucket in Redis (`lib/limits.js`'s `SharedBucket`).
#[napi]
pub struct NativeSharedBucket {
    inner: Arc<SharedBucket>,
    wire: Option<u32>,
}

#[napi]
impl NativeSharedBucket {
    #[napi(constructor, catch_unwind)]
    pub fn new(url: String, key: String, rate: f64, burst: Option<f64>) -> napi::Result<Self> {
        let inner = SharedBucket::new(&url, &key, rate, burst).map_err(invalid_arg)?;
        Ok(NativeSharedBucket {
            inner: Arc::new(inner),
            wire: wire_for(&url),
        })
    }

    #[napi(getter)]
    pub fn rate(&self) -> f64 {
        self.inner.rate()
    }

    #[napi(getter)]
    pub fn burst(&self) -> f64 {
        self.inner.burst()
    }

    #[napi(getter)]
    pub fn key(&self) -> String {
        self.inner.key().to_string()
    }

    /// The number of the event loop's socket for this limit's URL
    /// (`lib/wire.js`), or `null` when calls take the shared link.
    #[napi(getter)]
    pub fn wire(&self) -> Option<u32> {
        self.wire
    }

    #[napi(catch_unwind)]
    pub fn take(&self, n: Option<f64>) -> napi::Result<Answer> {
        call(self.wire, &self.inner, self.inner.ask_take(tokens(n)), json)
    }

    #[napi(catch_unwind)]
    pub fn next(&self, n: Option<f64>) -> napi::Result<Answer> {
        let ask = self.inner.ask_next(tokens(n));
        call(self.wire, &self.inner, ask, ms_json)
    }

    #[napi(catch_unwind)]
    pub fn tokens(&self) -> napi::Result<Answer> {
        call(self.wire, &self.inner, Ok(self.inner.ask_tokens()), json)
    }

    #[napi(catch_unwind)]
    pub fn wait(&self, n: Option<f64>) -> napi::Result<Answer> {
        let (b, n) = (self.inner.clone(), tokens(n));
        drive(async move { b.wait(n).await }, json)
    }
}

/// A sliding window in Redis (`lib/limits.js`'s `SharedWindow`).
#[napi]
pub struct NativeSharedWindow {
    inner: Arc<SharedWindow>,
    wire: Option<u32>,
}

#[napi]
impl NativeSharedWindow {
    /// `per` in milliseconds.
    #[napi(constructor, catch_unwind)]
    pub fn new(url: String, key: String, limit: f64, per: f64) -> napi::Result<Self> {
        let limit = int_arg("limit", limit)?;
        let inner = SharedWindow::new(&url, &key, limit, ns(per)).map_err(invalid_arg)?;
        Ok(NativeSharedWindow {
            inner: Arc::new(inner),
            wire: wire_for(&url),
        })
    }

    #[napi(getter)]
    pub fn limit(&self) -> i64 {
        self.inner.limit()
    }

    #[napi(getter)]
    pub fn per(&self) -> f64 {
        ms(self.inner.per())
    }

    #[napi(getter)]
    pub fn key(&self) -> String {
        self.inner.key().to_string()
    }

    /// The number of the event loop's socket for this limit's URL
    /// (`lib/wire.js`), or `null` when calls take the shared link.
    #[napi(getter)]
    pub fn wire(&self) -> Option<u32> {
        self.wire
    }

    #[napi(catch_unwind)]
    pub fn take(&self) -> napi::Result<Answer> {
        call(self.wire, &self.inner, Ok(self.inner.ask_take()), json)
    }

    #[napi(catch_unwind)]
    pub fn left(&self) -> napi::Result<Answer> {
        call(self.wire, &self.inner, Ok(self.inner.ask_left()), json)
    }

    #[napi(catch_unwind)]
    pub fn next(&self) -> napi::Result<Answer> {
        call(self.wire, &self.inner, Ok(self.inner.ask_next()), ms_json)
    }

    #[napi(catch_unwind)]
    pub fn wait(&self) -> napi::Result<Answer> {
        let w = self.inner.clone();
        drive(async move { w.wait().await }, json)
    }
}

/// A concurrency gate in Redis (`lib/limits.js`'s `SharedGate`).
#[napi]
pub struct NativeSharedGate {
    inner: Arc<SharedGate>,
    wire: Option<u32>,
}

#[napi]
impl NativeSharedGate {
    /// `lease` in milliseconds (`null`: the core's default).
    #[napi(constructor, catch_unwind)]
    pub fn new(url: String, key: String, n: f64, lease: Option<f64>) -> napi::Result<Self> {
        let n = int_arg("n", n)?;
        let inner = SharedGate::new(&url, &key, n, lease.map(ns)).map_err(invalid_arg)?;
        Ok(NativeSharedGate {
            inner: Arc::new(inner),
            wire: wire_for(&url),
        })
    }

    #[napi(getter)]
    pub fn limit(&self) -> i64 {
        self.inner.limit()
    }

    #[napi(getter)]
    pub fn lease(&self) -> f64 {
        ms(self.inner.lease())
    }

    #[napi(getter)]
    pub fn key(&self) -> String {
        self.inner.key().to_string()
    }

    /// The number of the event loop's socket for this limit's URL
    /// (`lib/wire.js`), or `null` when calls take the shared link.
    #[napi(getter)]
    pub fn wire(&self) -> Option<u32> {
        self.wire
    }

    #[napi(catch_unwind)]
    pub fn take(&self) -> napi::Result<Answer> {
        let (req, pick) = self.inner.ask_take_new();
        call_with(self.wire, &self.inner, req, pick, json)
    }

    #[napi(catch_unwind)]
    pub fn release(&self, permit: String) -> napi::Result<Answer> {
        call(
            self.wire,
            &self.inner,
            Ok(self.inner.ask_release(&permit)),
            json,
        )
    }

    #[napi(catch_unwind)]
    pub fn renew(&self, permit: String) -> napi::Result<Answer> {
        call(
            self.wire,
            &self.inner,
            Ok(self.inner.ask_renew(&permit)),
            json,
        )
    }

    #[napi(catch_unwind)]
    pub fn held(&self) -> napi::Result<Answer> {
        call(self.wire, &self.inner, Ok(self.inner.ask_held()), json)
    }
}
