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

use headway_core::flow::millis::{ms, ns};
use headway_core::limit::tokens::tokens;
use headway_core::limit::{Asked, Limit, SharedBucket, SharedGate, SharedWindow};
use headway_core::task::Refused;
use napi_derive::napi;

use crate::raw::invalid_arg;
use crate::tasks::hub::{Answer, drive, json};
use crate::wire::{call, call_with, wire_for};

/// A JS number that must be an integer (the core's `millis::int`), its
/// refusal thrown as an `InvalidArg` (`lib/limits.js` makes it a
/// `RangeError`).
fn int_arg(name: &'static str, x: f64) -> napi::Result<i64> {
    headway_core::flow::millis::int(name, x)
        .map_err(|e| napi::Error::new(napi::Status::InvalidArg, e.to_string()))
}

/// Nanoseconds as milliseconds; never (`i64::MAX`) is `null`.
fn ms_json(span: i64) -> String {
    json(ms(span))
}

/// A limit in Redis (`lib/limits.js` wraps it): the core's value, and the
/// number of the event loop's socket for its URL (`lib/wire.js`). The
/// class's own methods follow the `;`.
macro_rules! shared {
    ($(#[doc = $doc:literal])* $ty:ident, $core:ident; $($own:tt)*) => {
        $(#[doc = $doc])*
        #[napi]
        pub struct $ty {
            inner: Arc<$core>,
            wire: Option<u32>,
        }

        impl $ty {
            /// What the core made of the constructor's arguments.
            fn made(url: &str, made: Result<$core, Refused>) -> napi::Result<Self> {
                Ok($ty {
                    inner: Arc::new(made.map_err(invalid_arg)?),
                    wire: wire_for(url),
                })
            }

            /// A call asked of the core, made on the event loop's socket or
            /// the shared link, its answer rendered as JSON text.
            fn call<T: Send + 'static>(
                &self,
                asked: Result<Asked<<$core as Limit>::Answer, T>, Refused>,
                render: fn(T) -> String,
            ) -> napi::Result<Answer> {
                call(self.wire, &self.inner, asked, render)
            }
        }

        #[napi]
        impl $ty {
            #[napi(getter)]
            pub fn key(&self) -> String {
                self.inner.key().to_string()
            }

            /// The number of the event loop's socket for this limit's URL,
            /// or `null` when calls take the shared link.
            #[napi(getter)]
            pub fn wire(&self) -> Option<u32> {
                self.wire
            }

            $($own)*
        }
    };
}

shared! {
    /// A token bucket in Redis (`lib/limits.js`'s `SharedBucket`).
    NativeSharedBucket, SharedBucket;

    #[napi(constructor, catch_unwind)]
    pub fn new(url: String, key: String, rate: f64, burst: Option<f64>) -> napi::Result<Self> {
        Self::made(&url, SharedBucket::new(&url, &key, rate, burst))
    }

    #[napi(getter)]
    pub fn rate(&self) -> f64 {
        self.inner.rate()
    }

    #[napi(getter)]
    pub fn burst(&self) -> f64 {
        self.inner.burst()
    }

    #[napi(catch_unwind)]
    pub fn take(&self, n: Option<f64>) -> napi::Result<Answer> {
        self.call(self.inner.ask_take(tokens(n)), json)
    }

    #[napi(catch_unwind)]
    pub fn next(&self, n: Option<f64>) -> napi::Result<Answer> {
        self.call(self.inner.ask_next(tokens(n)), ms_json)
    }

    #[napi(catch_unwind)]
    pub fn tokens(&self) -> napi::Result<Answer> {
        self.call(Ok(self.inner.ask_tokens()), json)
    }

    #[napi(catch_unwind)]
    pub fn wait(&self, n: Option<f64>) -> napi::Result<Answer> {
        let (b, n) = (self.inner.clone(), tokens(n));
        drive(async move { b.wait(n).await }, json)
    }
}

shared! {
    /// A sliding window in Redis (`lib/limits.js`'s `SharedWindow`).
    NativeSharedWindow, SharedWindow;

    /// `per` in milliseconds.
    #[napi(constructor, catch_unwind)]
    pub fn new(url: String, key: String, limit: f64, per: f64) -> napi::Result<Self> {
        let limit = int_arg("limit", limit)?;
        Self::made(&url, SharedWindow::new(&url, &key, limit, ns(per)))
    }

    #[napi(getter)]
    pub fn limit(&self) -> i64 {
        self.inner.limit()
    }

    #[napi(getter)]
    pub fn per(&self) -> f64 {
        ms(self.inner.per())
    }

    #[napi(catch_unwind)]
    pub fn take(&self) -> napi::Result<Answer> {
        self.call(Ok(self.inner.ask_take()), json)
    }

    #[napi(catch_unwind)]
    pub fn left(&self) -> napi::Result<Answer> {
        self.call(Ok(self.inner.ask_left()), json)
    }

    #[napi(catch_unwind)]
    pub fn next(&self) -> napi::Result<Answer> {
        self.call(Ok(self.inner.ask_next()), ms_json)
    }

    #[napi(catch_unwind)]
    pub fn wait(&self) -> napi::Result<Answer> {
        let w = self.inner.clone();
        drive(async move { w.wait().await }, json)
    }
}

shared! {
    /// A concurrency gate in Redis (`lib/limits.js`'s `SharedGate`).
    NativeSharedGate, SharedGate;

    /// `lease` in milliseconds (`null`: the core's default).
    #[napi(constructor, catch_unwind)]
    pub fn new(url: String, key: String, n: f64, lease: Option<f64>) -> napi::Result<Self> {
        let n = int_arg("n", n)?;
        Self::made(&url, SharedGate::new(&url, &key, n, lease.map(ns)))
    }

    #[napi(getter)]
    pub fn limit(&self) -> i64 {
        self.inner.limit()
    }

    #[napi(getter)]
    pub fn lease(&self) -> f64 {
        ms(self.inner.lease())
    }

    #[napi(catch_unwind)]
    pub fn take(&self) -> napi::Result<Answer> {
        let (req, pick) = self.inner.ask_take_new();
        call_with(self.wire, &self.inner, req, pick, json)
    }

    #[napi(catch_unwind)]
    pub fn release(&self, permit: String) -> napi::Result<Answer> {
        self.call(Ok(self.inner.ask_release(&permit)), json)
    }

    #[napi(catch_unwind)]
    pub fn renew(&self, permit: String) -> napi::Result<Answer> {
        self.call(Ok(self.inner.ask_renew(&permit)), json)
    }

    #[napi(catch_unwind)]
    pub fn held(&self) -> napi::Result<Answer> {
        self.call(Ok(self.inner.ask_held()), json)
    }
}
