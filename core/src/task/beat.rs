//! The beat: sends tasks on rhythms.
//!
//! A beat holds named entries (a task signature and a [`Rhythm`]) in a
//! [`Timetable`] and, every tick, sends the ones whose time has come. It keeps
//! the phase: an hourly entry fires at the same minute every hour even after a
//! late tick, because the next time is computed from the time that was due,
//! not from the time the tick happened. On a virtual clock its sleeps advance
//! the clock, so an hour of beats runs in milliseconds.
//!
//! Before sending, a beat asks the broker to claim the (entry, due time)
//! slot: the in-memory broker always grants it, and a shared broker grants it
//! once across every beat process, so two beats never both fire a
//! slot.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, watch};

use super::app::App;
use super::handle::Handle;
use super::message::Sig;
use super::rhythm::Rhythm;
use super::state::Refused;
use super::timetable::Timetable;

struct Inner {
    table: Timetable,
    sigs: HashMap<String, Sig>,
}

/// Sends tasks on rhythms. Cheap to clone (shared).
#[derive(Clone)]
pub struct Beat {
    app: App,
    inner: Arc<Mutex<Inner>>,
    stop: watch::Sender<bool>,
    changed: Arc<Notify>,
}

/// One send a tick made.
#[derive(Debug, Clone)]
pub struct Fired {
    /// The entry's name.
    pub name: String,
    /// The time it was due (ms since the epoch).
    pub due: i64,
    /// The run it sent.
    pub handle: Handle,
}

impl Beat {
    /// A beat on `app` with nothing scheduled.
    pub fn new(app: App) -> Beat {
        Beat {
            app,
            inner: Arc::new(Mutex::new(Inner {
                table: Timetable::new(),
                sigs: HashMap::new(),
            })),
            stop: watch::channel(false).0,
            changed: Arc::new(Notify::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Schedules `sig` under `name` (replacing an entry of that name). The
    /// name identifies the entry, not the task: one task may be scheduled
    /// twice under two names.
    pub fn add(&self, name: &str, sig: Sig, rhythm: Rhythm) -> Result<(), Refused> {
        super::specs::name(super::specs::Host::Rust, name)?;
        let now = self.app.now();
        {
            let mut g = self.lock();
            g.table.add(name, rhythm, now);
            g.sigs.insert(name.to_string(), sig);
        }
        self.changed.notify_waiters();
        Ok(())
    }

    /// Removes the entry `name`; `false` when there was none.
    pub fn remove(&self, name: &str) -> bool {
        let mut g = self.lock();
        g.sigs.remove(name);
        g.table.remove(name)
    }

    /// Entry names and when each fires next, soonest first.
    pub fn pending(&self) -> Vec<(String, i64)> {
        self.lock().table.pending()
    }

    /// Sends what is due now and answers what it sent.
    pub async fn tick(&self) -> Result<Vec<Fired>, Refused> {
        let now = self.app.now();
        let due: Vec<(String, i64, Sig)> = {
            let mut g = self.lock();
            let due = g.table.due(now);
            due.into_iter()
                .filter_map(|(name, at)| g.sigs.get(&name).cloned().map(|s| (name, at, s)))
                .collect()
        };
        let mut out = Vec::with_capacity(due.len());
        for (name, due, sig) in due {
            if !self.app.broker().claim_slot(&name, due).await? {
                continue;
            }
            let handle = self
                .app
                .send_task(
                    &sig.task,
                    sig.args.clone(),
                    sig.kwargs.clone(),
                    sig.options.clone(),
                )
                .await?;
            out.push(Fired { name, due, handle });
        }
        Ok(out)
    }

    /// Sends due entries and sleeps until the next, until `stop` (or, with
    /// `until`, until the app's clock reaches it — what a test on a virtual
    /// clock runs to).
    pub async fn run(&self, until: Option<i64>) -> Result<(), Refused> {
        self.stop.send_replace(false);
        let mut stop = self.stop.subscribe();
        loop {
            if *stop.borrow_and_update() {
                return Ok(());
            }
            self.tick().await?;
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let next = self.lock().table.next_wake();
            let wake = match (next, until) {
                (Some(n), Some(u)) => Some(n.min(u)),
                (n, u) => n.or(u),
            };
            if let Some(u) = until
                && self.app.now() >= u
            {
                return Ok(());
            }
            let clock = self.app.clock().clone();
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
