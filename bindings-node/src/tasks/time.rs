//! Task-side time: the clock an app reads, and the rhythm and backoff
//! helpers.
//!
//! Instants are epoch milliseconds as JS numbers (the JS in `lib/` turns a `Date`
//! into one with `getTime()`); spans are milliseconds.

use std::sync::Arc;

use headway_core::task::clock;
use headway_core::task::{Clock, RetryBackoff, Rhythm, VirtualClock};
use napi::bindgen_prelude::Either;
use napi_derive::napi;

use super::codec::{backoff_text, rhythm};
use super::{Refusal, either, ms};

/// The clock an app, a broker or a scheduler reads: the system clock, or a
/// virtual one that sleeping advances (`testing.VirtualClock`).
#[napi]
pub struct NativeClock {
    pub(crate) clock: Arc<dyn Clock>,
    virt: Option<Arc<VirtualClock>>,
}

#[napi]
impl NativeClock {
    /// The system clock.
    #[napi(factory)]
    pub fn system() -> Self {
        NativeClock {
            clock: clock::system(),
            virt: None,
        }
    }

    /// A virtual clock reading `start` (epoch ms) until something moves it.
    #[napi(factory, js_name = "virtualAt")]
    pub fn virtual_at(start: f64) -> Self {
        let v = VirtualClock::new(ms(start));
        NativeClock {
            clock: v.clone(),
            virt: Some(v),
        }
    }

    /// Now, in epoch ms.
    #[napi]
    pub fn now(&self) -> f64 {
        self.clock.now() as f64
    }

    /// Moves a virtual clock forward by `by` ms (a negative step does
    /// nothing: time here never runs backwards).
    #[napi]
    pub fn advance(&self, by: f64) {
        if let Some(v) = &self.virt {
            v.advance(ms(by));
        }
    }

    /// Moves a virtual clock to `at` (epoch ms) if that is later.
    #[napi(js_name = "advanceTo")]
    pub fn advance_to(&self, at: f64) {
        if let Some(v) = &self.virt {
            v.advance_to(ms(at));
        }
    }
}

/// A rhythm request (`{every, anchor}`, `{cron, tz}`, `{at}`) as the core
/// reads it, as JSON text: a crontab line with its zone filled in (the
/// core's `Cron::DEFAULT_TZ` when none was named), any other as given; or
/// why the core refuses it.
#[napi(js_name = "_rhythmNorm", catch_unwind)]
pub fn rhythm_norm(spec: String) -> Either<String, Refusal> {
    either(rhythm(&spec).map(|r| match r {
        Rhythm::Cron(c) => serde_json::json!({"cron": c.expr(), "tz": c.tz_name()}).to_string(),
        _ => spec,
    }))
}

/// The first time the rhythm fires at or after `now` (epoch ms); `null`
/// when it never does.
#[napi(js_name = "_rhythmFirst", catch_unwind)]
pub fn rhythm_first(spec: String, now: f64) -> Either<Option<f64>, Refusal> {
    either(rhythm(&spec).map(|r| r.first(ms(now)).map(|t| t as f64)))
}

/// The first time the rhythm fires strictly after `at` — pass the time that
/// was due, which is how a late tick keeps the phase; `null` when never.
#[napi(js_name = "_rhythmAfter", catch_unwind)]
pub fn rhythm_after(spec: String, at: f64) -> Either<Option<f64>, Refusal> {
    either(rhythm(&spec).map(|r| r.after(ms(at)).map(|t| t as f64)))
}

/// A backoff request (`{fixed}` or `{base, cap, jitter}`) as the core reads
/// it, defaults filled in, as the JSON of `lib/clock.js`'s properties:
/// `{kind: "fixed", delay}` or `{kind: "exponential", base, cap, jitter}`;
/// or why the core refuses it.
#[napi(js_name = "_backoffNorm", catch_unwind)]
pub fn backoff_norm(spec: String) -> Either<String, Refusal> {
    either(backoff_text(&spec).map(|b| match b {
        RetryBackoff::Fixed { delay } => format!("{{\"kind\":\"fixed\",\"delay\":{delay}}}"),
        RetryBackoff::Exponential { base, cap, jitter } => format!(
            "{{\"kind\":\"exponential\",\"base\":{base},\"cap\":{cap},\"jitter\":{jitter}}}"
        ),
    }))
}

/// The wait in ms before attempt `attempt` (the first is 1 and never waits)
/// of the run `id`: the jitter is derived from the id and the attempt, the
/// same on every machine and in both languages.
#[napi(js_name = "_backoffWait", catch_unwind)]
pub fn backoff_wait(spec: String, attempt: u32, id: String) -> Either<f64, Refusal> {
    either(backoff_text(&spec).map(|b| b.delay(attempt, &id) as f64))
}
