//! The native addon behind `require('headway')`.
//!
//! It converts values and maps errors; every rule is `headway-core`'s. The
//! public classes live in `index.js`, which wraps the factories here:
//! - [`raw`]: bound functions (one Node-API call per method, no unwrap) and
//!   the error mapping (`TypeError`/`RangeError` with Node's codes; a panic
//!   becomes an `Error`);
//! - [`units`]: milliseconds to nanoseconds and back;
//! - [`flow`]: the factories for `Limits`, `Breaker`, `Backoff`, `Ward`,
//!   `Pool`, `pick`, `Bucket`, `Window` and `Gate`.
#![deny(clippy::all)]
// napi-derive registers exports only outside `cfg(test)`, so in the unit-test
// build the factories look unused.
#![cfg_attr(test, allow(dead_code))]

mod flow;
mod raw;
mod units;

use napi_derive::napi;
use raw::{Bound, bound, factory};

/// The crate's version, which `index.js` checks against `package.json`.
#[napi]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

bound!(noop_cb, (), 2, |s, e, a| {
    let _ = e.f64(a[0], "a")?;
    let _ = e.f64(a[1], "b")?;
    e.bool(true)
});

/// The benchmark's floor: a bound function that reads two numbers and
/// answers `true` — the same call `Bucket.take` makes, doing nothing.
#[napi(js_name = "_floor", catch_unwind)]
pub fn floor(env: &napi::Env) -> napi::Result<napi::Unknown<'_>> {
    factory(env, |env| {
        Bound::new(env, ())?
            .func(c"noop", Some(noop_cb))
            .map(Bound::finish)
    })
}

/// How many native flow objects are alive: the finalizer test's probe.
#[napi(js_name = "_alive")]
pub fn alive() -> f64 {
    raw::alive() as f64
}

/// The same empty call through `#[napi]`'s generated glue, for comparison.
#[napi(js_name = "_noopNapi", catch_unwind)]
pub fn noop(_a: f64, _b: f64) -> bool {
    true
}

/// Panics, to prove a Rust panic in a `#[napi]` function becomes a thrown
/// `Error` rather than an abort.
#[napi(js_name = "_panic", catch_unwind)]
pub fn panic_now() {
    panic!("headway: a deliberate panic");
}

fn deliberate() -> raw::Ret {
    panic!("headway: a deliberate panic in a bound function")
}

bound!(panic_cb, (), 0, |s, e, a| deliberate());

/// A bound function that panics, to prove the same for [`raw::call`].
#[napi(js_name = "_panicBound", catch_unwind)]
pub fn panic_bound(env: &napi::Env) -> napi::Result<napi::Unknown<'_>> {
    factory(env, |env| {
        Bound::new(env, ())?
            .func(c"panic", Some(panic_cb))
            .map(Bound::finish)
    })
}
