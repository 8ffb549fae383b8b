//! `schedule`: jobs on rhythms inside one process, no broker.
//!
//! The core's `Scheduler` keeps the timetable (the beat's, so they agree on
//! when something is due) and calls a `Job`; here a job is a `HostQueue`
//! body, so a JS job is called on the JS thread through the same bell and
//! batches as a task body, told about its run by a context whose `name` is
//! the job's and `now` the time it was due.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use headway_core::task::{Body, BoxFuture, Context, Failure, HostQueue, Job, Scheduler};
use napi_derive::napi;
use serde_json::Map;

use super::app::NativeHost;
use super::codec::rhythm;
use super::hub::{Answer, bell, drive};
use super::time::NativeClock;
use super::{Refusal, ms};

struct HostJob {
    body: Arc<dyn Body>,
}

impl Job for HostJob {
    fn fire(&self, name: &str, due: i64) -> BoxFuture<'static, Result<(), Failure>> {
        let ctx = Context {
            id: format!("{name}@{due}"),
            name: name.to_string(),
            queue: String::new(),
            retries: 0,
            attempt: 1,
            last: true,
            now: due,
            kwargs: Map::new(),
            root_id: None,
            parent_id: None,
        };
        let call = self.body.call(ctx, Vec::new());
        Box::pin(async move { call.await.map(|_| ()) })
    }
}

/// The core's scheduler (`tasks.js`'s `Scheduler` wraps it).
#[napi]
pub struct NativeScheduler {
    inner: Scheduler,
    host: Arc<HostQueue>,
}

#[napi]
impl NativeScheduler {
    #[napi(constructor, catch_unwind)]
    pub fn new(clock: &NativeClock) -> napi::Result<Self> {
        let host = HostQueue::new();
        host.set_bell(Some(bell()?));
        Ok(NativeScheduler {
            inner: Scheduler::new(clock.clock.clone()),
            host,
        })
    }

    /// The queue its jobs are called from.
    #[napi(getter)]
    pub fn host(&self) -> NativeHost {
        NativeHost {
            q: self.host.clone(),
        }
    }

    /// Adds (or replaces) the job `name` on a rhythm (JSON). `null`, or why
    /// not.
    #[napi(catch_unwind)]
    pub fn add(&self, name: String, spec: String) -> Option<Refusal> {
        let r = match rhythm(&spec) {
            Ok(r) => r,
            Err(e) => return Some(e),
        };
        let body = self.host.body(&name);
        self.inner
            .add(&name, Arc::new(HostJob { body }), r)
            .err()
            .map(Refusal::from)
    }

    /// Removes the job `name`; `false` when there was none.
    #[napi]
    pub fn remove(&self, name: String) -> bool {
        self.inner.remove(&name)
    }

    /// `[[name, at], ...]`, soonest first (epoch ms).
    #[napi]
    pub fn pending(&self) -> String {
        let v = self.inner.pending();
        serde_json::to_string(&v).unwrap_or_else(|_| "[]".into())
    }

    /// How the job `name` has gone, as JSON `{"fired", "failed", "skipped",
    /// "lastError"}`; `null` for an unknown name.
    #[napi]
    pub fn stats(&self, name: String) -> Option<String> {
        let s = self.inner.stats(&name)?;
        let last = s
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|f| f.to_string());
        Some(
            serde_json::json!({
                "fired": s.fired.load(Ordering::Relaxed),
                "failed": s.failed.load(Ordering::Relaxed),
                "skipped": s.skipped.load(Ordering::Relaxed),
                "lastError": last,
            })
            .to_string(),
        )
    }

    /// Calls what is due now and waits for those calls; answers `[[name,
    /// due], ...]`.
    #[napi(catch_unwind)]
    pub fn tick(&self) -> napi::Result<Answer> {
        let s = self.inner.clone();
        let render = |v: Vec<(String, i64)>| serde_json::to_string(&v).unwrap_or_default();
        drive(
            async move { Ok::<_, headway_core::task::Refused>(s.tick().await) },
            render,
            render,
        )
    }

    /// Calls due jobs and sleeps until the next, until `stop()` (or until
    /// the clock reaches `until`, epoch ms).
    #[napi(catch_unwind)]
    pub fn run(&self, until: Option<f64>) -> napi::Result<Answer> {
        let s = self.inner.clone();
        let until = until.map(ms);
        drive(
            async move {
                s.run(until).await;
                Ok::<_, headway_core::task::Refused>(())
            },
            |()| String::new(),
            |()| "null".to_string(),
        )
    }

    /// Stops `run` after the tick in progress.
    #[napi]
    pub fn stop(&self) {
        self.inner.stop();
    }
}
