//! `schedule`: jobs on rhythms inside one process, no broker.
//!
//! The core's `Scheduler` keeps the timetable (the beat's, so they agree on
//! when something is due) and calls a job; here a job is a `HostQueue` body
//! (`Scheduler::add_body`), so a JS job is called on the JS thread through
//! the same bell and batches as a task body, told about its run by a context
//! whose `name` is the job's and `now` the time it was due.

use std::sync::Arc;

use headway_core::task::{HostQueue, Scheduler};
use napi_derive::napi;

use super::app::NativeHost;
use super::codec::rhythm;
use super::hub::{Answer, drive, drive_done, json};
use super::time::NativeClock;
use super::{Refusal, ms};

/// The core's scheduler (`lib/tasks.js`'s `Scheduler` wraps it).
#[napi]
pub struct NativeScheduler {
    inner: Scheduler,
    host: Arc<HostQueue>,
}

#[napi]
impl NativeScheduler {
    #[napi(constructor, catch_unwind)]
    pub fn new(clock: &NativeClock) -> napi::Result<Self> {
        let host = NativeHost::queue()?;
        Ok(NativeScheduler {
            inner: Scheduler::new(clock.clock.clone()),
            host,
        })
    }

    /// The queue its jobs are called from.
    #[napi(getter)]
    pub fn host(&self) -> NativeHost {
        NativeHost::of(&self.host)
    }

    /// Adds (or replaces) the job `name` on a rhythm (JSON). `null`, or why
    /// not.
    #[napi(catch_unwind)]
    pub fn add(&self, name: String, spec: String) -> Option<Refusal> {
        rhythm(&spec)
            .and_then(|r| Ok(self.inner.add_body(&name, self.host.body(&name), r)?))
            .err()
    }

    /// Removes the job `name`; `false` when there was none.
    #[napi]
    pub fn remove(&self, name: String) -> bool {
        self.inner.remove(&name)
    }

    /// `[[name, at], ...]`, soonest first (epoch ms).
    #[napi]
    pub fn pending(&self) -> String {
        json(self.inner.pending())
    }

    /// How the job `name` has gone, as JSON `{"fired", "failed", "skipped",
    /// "lastError"}` (the core's `Tally`); `null` for an unknown name.
    #[napi]
    pub fn stats(&self, name: String) -> Option<String> {
        Some(json(self.inner.stats(&name)?.tally()))
    }

    /// Calls what is due now and waits for those calls; answers `[[name,
    /// due], ...]`.
    #[napi(catch_unwind)]
    pub fn tick(&self) -> napi::Result<Answer> {
        let s = self.inner.clone();
        drive(
            async move { Ok::<_, headway_core::task::Refused>(s.tick().await) },
            json,
        )
    }

    /// Calls due jobs and sleeps until the next, until `stop()` (or until
    /// the clock reaches `until`, epoch ms).
    #[napi(catch_unwind)]
    pub fn run(&self, until: Option<f64>) -> napi::Result<Answer> {
        let s = self.inner.clone();
        let until = until.map(ms);
        drive_done(async move {
            s.run(until).await;
            Ok(())
        })
    }

    /// Stops `run` after the tick in progress.
    #[napi]
    pub fn stop(&self) {
        self.inner.stop();
    }
}
