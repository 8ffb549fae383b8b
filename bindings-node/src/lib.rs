//! The native addon behind `require('headway')`.
//!
//! It converts values and maps errors; every rule is `headway-core`'s. The
//! public classes live in `lib/`, which wraps the functions here:
//! - [`raw`]: raw Node-API callbacks (one call per method, no unwrap), the
//!   slabs that hold core values by id, and the error mapping
//!   (`TypeError`/`RangeError` with Node's codes; a panic becomes an `Error`);
//! - [`flow`]: `_flow()`, the functions for `Limits`, `Breaker`, `Backoff`,
//!   `Ward`, `Pool`, `pick`, `Bucket`, `Window` and `Gate`;
//! - [`shared`]: `NativeSharedBucket`, `NativeSharedWindow`, `NativeSharedGate`
//!   (the core's limits in Redis), for `lib/limits.js`;
//! - [`tasks`]: the task queue (`NativeApp`, workers, beats, the scheduler,
//!   clocks, Redis brokers) and the hub that answers its Promises, for
//!   `lib/tasks.js`.
#![deny(clippy::all)]
// napi-derive registers exports only outside `cfg(test)`, so in the unit-test
// build the factories look unused.
#![cfg_attr(test, allow(dead_code))]

mod acquires;
mod admin;
mod cli;
mod flow;
mod logs;
mod raw;
mod shared;
mod tasks;
mod wire;

use napi_derive::napi;

/// mimalloc for every Rust allocation of the addon (the core's messages,
/// outcomes and futures among them): a task allocates on the JS thread and
/// both tokio threads, which glibc's arenas serve with a grow-and-trim
/// mprotect(2) dance. On the task benchmark's run phase it took this
/// machine from 40–70 k to 85–120 k tasks/s under the same load
/// (bench/tasks/bench.mjs). Node's own allocations are untouched.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The crate's version, which the tests check against `package.json`.
#[napi]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// How many levels of containers a task's value may nest (the core's
/// `task::depth::MAX_DEPTH`): `lib/json.js` refuses deeper ones, as Python does.
#[napi(js_name = "_jsonMaxDepth")]
pub fn json_max_depth() -> u32 {
    headway_core::task::depth::MAX_DEPTH as u32
}

/// An empty call with two numbers through `#[napi]`'s generated glue, for
/// the benchmark to compare with the raw floor (`_flow().noop`).
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
