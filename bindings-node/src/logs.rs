//! The core's log records, for Node: written to stderr as they happen (the
//! default, and the CLI's `--log-format`), or handed to the JS function
//! that calls the app's `logger` (`lib/logs.js`).
//!
//! A record reaches JS as the core's JSON line, parsed there: one value to
//! convert, and records are rare. The function is weak, so it never keeps
//! the process alive; records made after the environment ended are dropped.

use headway_core::log::sink::{self, Format};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Status, bindgen_prelude::Function};
use napi_derive::napi;

type Forward = ThreadsafeFunction<String, (), String, Status, false, true>;

fn invalid(e: String) -> napi::Error {
    napi::Error::new(Status::InvalidArg, e)
}

/// `callback` as a function any thread may call with a line of text: the
/// call is queued for the event loop, never waited on, and dropped once
/// the environment has ended. Weak, so it never keeps the process alive.
pub(crate) fn forward(
    callback: Function<String, ()>,
) -> napi::Result<impl Fn(String) + Send + Sync + 'static> {
    let tsfn: Forward = callback
        .build_threadsafe_function::<String>()
        .weak::<true>()
        .callee_handled::<false>()
        .build()?;
    Ok(move |line| {
        let _ = tsfn.call(line, ThreadsafeFunctionCallMode::NonBlocking);
    })
}

/// Hands every record, as its JSON line, to `callback`.
#[napi(js_name = "_logTo", catch_unwind)]
pub fn log_to(callback: Function<String, ()>) -> napi::Result<()> {
    let send = forward(callback)?;
    sink::deliver(move |r| send(r.line(Format::Json)));
    Ok(())
}

/// Writes every record to stderr: the message alone (no `format`, the
/// default), or as the CLI's `--log-format` says (`text` or `json`).
#[napi(js_name = "_logStderr", catch_unwind)]
pub fn log_stderr(format: Option<String>) -> napi::Result<()> {
    let f = format.map_or(Ok(Format::Plain), |f| sink::parse_format(&f));
    sink::to_stderr(f.map_err(invalid)?);
    Ok(())
}

/// Sets the level of the core's records (`debug`, `info`, `warning`,
/// `error`, `critical`); answers its name (`WARNING`, ...).
#[napi(js_name = "_logLevel", catch_unwind)]
pub fn log_level(level: String) -> napi::Result<String> {
    let l = sink::parse_level(&level).map_err(invalid)?;
    sink::set_level(l);
    Ok(sink::filter_name(l).to_string())
}
