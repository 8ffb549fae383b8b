//! A job on a rhythm inside one process, with no broker behind it.
//!
//! For a service that needs a periodic job and no queue — what node-cron or
//! APScheduler are reached for. The [`Scheduler`] keeps the same
//! [`Timetable`] the beat keeps, so the two agree on when something is due,
//! and calls the job directly instead of sending a message.
//!
//! Two rules from APScheduler's defaults: a job still running when it is due
//! again is skipped for that slot (`max_instances = 1`), and a slot missed
//! while the process was busy or asleep fires once, not once per missed slot
//! (`coalesce = True`). A job that fails is logged and counted; the rhythm
//! goes on.
//!
//! A job is usually a host-language function: [`Scheduler::add_body`] runs a
//! task [`Body`] (a `HostQueue` body in the bindings) as a job, told about
//! its run by a [`Context`] whose `name` is the job's and `now` the time it
//! was due — so a Python or JS job runs on the same threads and batches as a
//! task body, and both bindings call it the same way.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, watch};

use super::body::{Body, Context};
use super::clock::{BoxFuture, Clock};
use super::rhythm::Rhythm;
use super::state::{Failure, Refused};
use super::timetable::Timetable;

/// What a scheduler calls: the job's name and the time it was due.
pub trait Job: Send + Sync + 'static {
    fn fire(&self, name: &str, due: i64) -> BoxFuture<'static, Result<(), Failure>>;
}

/// A task body as a job: called with no arguments, its answer dropped.
struct BodyJob {
    body: Arc<dyn Body>,
}

impl Job for BodyJob {
    fn fire(&self, name: &str, due: i64) -> BoxFuture<'static, Result<(), Failure>> {
        // A firing is a direct call of its own, due at `due`.
        let ctx = Context::direct(
            format!("{name}@{due}"),
            name.to_string(),
            String::new(),
            due,
        );
        let call = self.body.call(ctx, Vec::new());
        Box::pin(async move { call.await.map(|_| ()) })
    }
}

struct Slot {
    job: Arc<dyn Job>,
    running: Arc<AtomicBool>,
    stats: Arc<Stats>,
}

/// How a job has gone.
#[derive(Debug, Default)]
pub struct Stats {
    /// Times it was called.
    pub fired: AtomicU64,
    /// Times it failed.
    pub failed: AtomicU64,
    /// Slots skipped because it was still running.
    pub skipped: AtomicU64,
    /// The last failure.
    pub last_error: Mutex<Option<Failure>>,
}

/// [`Stats`] read at one moment, for a binding to hand out (as JSON in
/// the specs' wire names: `{fired, failed, skipped, lastError}`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tally {
    pub fired: u64,
    pub failed: u64,
    pub skipped: u64,
    /// The last failure, as text.
    pub last_error: Option<String>,
}

impl Tally {
    /// The tally as a JSON object, its keys spelled as `host` spells them
    /// (`last_error`; Node's `lastError`, what its serde form says too).
    pub fn json(&self, host: super::Host) -> serde_json::Map<String, serde_json::Value> {
        let mut o = serde_json::Map::new();
        o.insert("fired".into(), self.fired.into());
        o.insert("failed".into(), self.failed.into());
        o.insert("skipped".into(), self.skipped.into());
        o.insert(
            host.spell("last_error").into(),
            self.last_error.clone().into(),
        );
        o
    }
}

impl Stats {
    /// The counts and the last failure now.
    pub fn tally(&self) -> Tally {
        Tally {
            fired: self.fired.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
            last_error: self
                .last_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .map(|f| f.to_string()),
        }
    }
}

/// Jobs on rhythms inside one process. Cheap to clone (shared).
#[derive(Clone)]
pub struct Scheduler {
    clock: Arc<dyn Clock>,
    table: Arc<Mutex<Timetable>>,
    jobs: Arc<Mutex<HashMap<String, Slot>>>,
    stop: watch::Sender<bool>,
    changed: Arc<Notify>,
}

impl Scheduler {
    /// A scheduler reading `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Scheduler {
        Scheduler {
            clock,
            table: Arc::new(Mutex::new(Timetable::new())),
            jobs: Arc::new(Mutex::new(HashMap::new())),
            stop: watch::channel(false).0,
            changed: Arc::new(Notify::new()),
        }
    }

    /// Adds (or replaces) the job `name` on `rhythm`.
    pub fn add(&self, name: &str, job: Arc<dyn Job>, rhythm: Rhythm) -> Result<(), Refused> {
        super::specs::name(super::specs::Host::Rust, name)?;
        let now = self.clock.now();
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .add(name, rhythm, now);
        self.jobs.lock().unwrap_or_else(|e| e.into_inner()).insert(
            name.to_string(),
            Slot {
                job,
                running: Arc::new(AtomicBool::new(false)),
                stats: Arc::new(Stats::default()),
            },
        );
        self.changed.notify_waiters();
        Ok(())
    }

    /// Adds (or replaces) the job `name` on `rhythm`: `body` called with no
    /// arguments and a context naming the job and the time it was due.
    pub fn add_body(&self, name: &str, body: Arc<dyn Body>, rhythm: Rhythm) -> Result<(), Refused> {
        self.add(name, Arc::new(BodyJob { body }), rhythm)
    }

    /// Removes the job `name`; `false` when there was none.
    pub fn remove(&self, name: &str) -> bool {
        self.jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name)
    }

    /// Job names and when each fires next, soonest first.
    pub fn pending(&self) -> Vec<(String, i64)> {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pending()
    }

    /// How the job `name` has gone.
    pub fn stats(&self, name: &str) -> Option<Arc<Stats>> {
        self.jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .map(|s| s.stats.clone())
    }

    /// Calls what is due now, waits for those calls, and answers
    /// (name, due) of each call made.
    pub async fn tick(&self) -> Vec<(String, i64)> {
        let now = self.clock.now();
        let due = self
            .table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .due(now);
        let mut calls = Vec::new();
        let mut fired = Vec::new();
        {
            let jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
            for (name, at) in due {
                let Some(slot) = jobs.get(&name) else {
                    continue;
                };
                if slot.running.swap(true, Ordering::SeqCst) {
                    slot.stats.skipped.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                slot.stats.fired.fetch_add(1, Ordering::Relaxed);
                let fut = slot.job.fire(&name, at);
                let running = slot.running.clone();
                let stats = slot.stats.clone();
                let label = name.clone();
                calls.push(tokio::spawn(async move {
                    let r = fut.await;
                    running.store(false, Ordering::SeqCst);
                    if let Err(f) = r {
                        crate::log::warn(
                            "headway.beat",
                            format_args!("headway schedule: job {label:?} failed: {f}"),
                        );
                        stats.failed.fetch_add(1, Ordering::Relaxed);
                        *stats.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(f);
                    }
                }));
                fired.push((name, at));
            }
        }
        for c in calls {
            let _ = c.await;
        }
        fired
    }

    /// Calls due jobs and sleeps until the next, until `stop` (or, with
    /// `until`, until the clock reaches it).
    pub async fn run(&self, until: Option<i64>) {
        self.stop.send_replace(false);
        let mut stop = self.stop.subscribe();
        loop {
            if *stop.borrow_and_update() {
                return;
            }
            self.tick().await;
            if let Some(u) = until
                && self.clock.now() >= u
            {
                return;
            }
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let next = self
                .table
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .next_wake();
            let wake = match (next, until) {
                (Some(n), Some(u)) => Some(n.min(u)),
                (n, u) => n.or(u),
            };
            let clock = self.clock.clone();
            match wake {
                Some(at) => {
                    tokio::select! {
                        _ = clock.sleep_until(at) => {}
                        _ = &mut changed => {}
                        _ = stop.changed() => {}
                    }
                }
                None => {
                    tokio::select! {
                        _ = &mut changed => {}
                        _ = stop.changed() => {}
                    }
                }
            }
        }
    }

    /// Stops after the tick in progress.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::Host;

    #[test]
    fn a_tally_spelled_for_each_host() {
        let t = Tally {
            fired: 3,
            failed: 1,
            skipped: 0,
            last_error: Some("boom".into()),
        };
        let py = t.json(Host::Python);
        assert_eq!(py["fired"], 3);
        assert_eq!(py["last_error"], "boom");
        let node = serde_json::Value::Object(t.json(Host::Node));
        assert_eq!(node, serde_json::to_value(&t).unwrap());
        let quiet = Tally {
            last_error: None,
            ..t
        };
        assert!(quiet.json(Host::Python)["last_error"].is_null());
    }
}
