//! What a running worker shows and lets change while it runs: the runs it
//! holds (started or only reserved), its queues, its concurrency, and the
//! rate and time limits a remote command set for a task.
//!
//! Remote control (`task::remote`, Celery's `inspect` / `control`) reads
//! and changes a worker only through here, so a layout's pidbox and the own
//! layout's control channel see the same state and change it the same way.
//! A run is entered when it is claimed (Celery's *reserved*), marked when
//! its body starts (*active*), and leaves when its message is settled or
//! given back.

use crate::hashed::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::{Map, Value};

use super::{Shared, Worker};
use crate::task::message::Message;
use crate::task::policy::Rate;
use crate::task::spec::Delivery;
use crate::task::state::Refused;

/// One run a worker holds, as remote control shows it (Celery's
/// `Request.info()` fields).
#[derive(Debug, Clone, PartialEq)]
pub struct RunInfo {
    /// The run's id.
    pub id: String,
    /// The task's name.
    pub name: String,
    /// Its positional and keyword arguments.
    pub args: Vec<Value>,
    pub kwargs: Map<String, Value>,
    /// The queue it came from, its priority, whether it was redelivered.
    pub queue: String,
    pub priority: Option<u8>,
    pub redelivered: bool,
    /// When its body started (ms since the epoch); `None` while reserved.
    pub started: Option<i64>,
    /// Whether its message is acked (early ack, once started).
    pub acknowledged: bool,
    /// The process running its body: the child's pid on the process pool,
    /// this process's otherwise; `None` while reserved.
    pub pid: Option<u32>,
    /// The worker holding it.
    pub worker: String,
}

/// A run in the worker's table: its message as claimed (shared with the
/// run, not copied: a copy of its id, name, queue and arguments was five
/// allocations a run, for a table that is read only when remote control
/// asks) and what has happened to it since.
pub(super) struct Held {
    pub message: Arc<Message>,
    pub redelivered: bool,
    /// When its body started (ms since the epoch); `None` while reserved.
    pub started: Option<i64>,
    pub acknowledged: bool,
}

/// A task's limits as a remote command set them on this worker, over its
/// policy's: a message's own limits still come first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tuned {
    /// `Some(None)`: rate limit removed; `None`: the policy's.
    pub rate: Option<Option<Rate>>,
    /// `Some((soft, hard))` in ms: the policy's replaced.
    pub limits: Option<(Option<i64>, Option<i64>)>,
}

/// Takes a run off its worker's table when it ends, whatever the path.
pub(super) struct Entered {
    pub shared: Arc<Shared>,
    pub key: u64,
}

impl Drop for Entered {
    fn drop(&mut self) {
        self.shared.runs().remove(&self.key);
    }
}

impl Shared {
    pub(super) fn runs(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<u64, Held>> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn tuned(&self) -> std::sync::MutexGuard<'_, HashMap<String, Tuned>> {
        self.tuned.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A claimed message enters the table (reserved).
    pub(super) fn enter(self: &Arc<Self>, d: &Delivery) -> Entered {
        let key = self.next_run.fetch_add(1, Ordering::Relaxed);
        self.runs().insert(
            key,
            Held {
                message: d.message.clone(),
                redelivered: d.redelivered,
                started: None,
                acknowledged: false,
            },
        );
        Entered {
            shared: self.clone(),
            key,
        }
    }

    /// Its body starts now (`at`, ms); `acked` when its message was acked.
    pub(super) fn start(&self, key: u64, at: i64, acked: bool) {
        if let Some(h) = self.runs().get_mut(&key) {
            h.started = Some(at);
            h.acknowledged = acked;
        }
    }

    /// The rate a run of `task` takes: a remote command's, else `policy`.
    pub(super) fn rate_of(&self, task: &str, policy: Option<Rate>) -> Option<Rate> {
        match self.tuned().get(task).and_then(|t| t.rate) {
            Some(r) => r,
            None => policy,
        }
    }

    /// The (soft, hard) limits a run of `task` takes when its message
    /// carries none: a remote command's, else `policy`'s.
    pub(super) fn limits_of(
        &self,
        task: &str,
        policy: (Option<i64>, Option<i64>),
    ) -> (Option<i64>, Option<i64>) {
        self.tuned()
            .get(task)
            .and_then(|t| t.limits)
            .unwrap_or(policy)
    }

    /// Bodies running now.
    pub(super) fn active_count(&self) -> u64 {
        self.runs().values().filter(|h| h.started.is_some()).count() as u64
    }
}

impl Worker {
    /// Runs on deck now: made ready for a host body while every slot is
    /// busy, not started and not acked (`deck`).
    pub fn on_deck(&self) -> usize {
        self.shared.deck.waiting()
    }

    /// The runs it holds, in the order claimed: started ones (`active`)
    /// and those claimed and not started yet (`reserved`).
    pub fn runs(&self) -> Vec<RunInfo> {
        let s = &self.shared;
        let held: Vec<(Arc<Message>, bool, Option<i64>, bool)> = s
            .runs()
            .values()
            .map(|h| (h.message.clone(), h.redelivered, h.started, h.acknowledged))
            .collect();
        held.into_iter()
            .map(|(m, redelivered, started, acknowledged)| RunInfo {
                pid: started.map(|_| {
                    s.procs
                        .as_ref()
                        .and_then(|p| p.running(&m.id))
                        .unwrap_or_else(std::process::id)
                }),
                id: m.id.clone(),
                name: m.task.clone(),
                args: m.args.clone(),
                kwargs: m.kwargs.clone(),
                queue: m.queue.clone(),
                priority: m.priority,
                redelivered,
                started,
                acknowledged,
                worker: s.name.clone(),
            })
            .collect()
    }

    /// Sets `task`'s rate limit on this worker (`None`: no limit); its
    /// window starts afresh. Refused for a task it does not know.
    pub fn set_rate(&self, task: &str, rate: Option<Rate>) -> Result<(), Refused> {
        let s = &self.shared;
        if s.app.registered(task).is_none() {
            return Err(unknown(task));
        }
        // A rate of 0 runs is Celery's "no limit".
        let rate = rate.filter(|r| r.count > 0);
        s.tuned().entry(task.to_string()).or_default().rate = Some(rate);
        s.limiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(task);
        s.retuned.notify_waiters();
        Ok(())
    }

    /// Sets `task`'s soft and hard time limits (ms) on this worker, for
    /// runs whose message carries none. A hard limit is refused on the
    /// threads pool (nothing there could keep it), a non-positive one
    /// always.
    pub fn set_time_limits(
        &self,
        task: &str,
        soft: Option<i64>,
        hard: Option<i64>,
    ) -> Result<(), Refused> {
        let s = &self.shared;
        if s.app.registered(task).is_none() {
            return Err(unknown(task));
        }
        for (arg, v) in [("soft", soft), ("hard", hard)] {
            if v.is_some_and(|t| t <= 0) {
                return Err(Refused::Invalid(format!(
                    "invalid `{arg}` time limit: must be positive"
                )));
            }
        }
        if hard.is_some() && s.procs.is_none() {
            return Err(Refused::Invalid(format!(
                "invalid `hard` time limit: {}",
                super::hard_limit_needs_process(s.app.host())
            )));
        }
        s.tuned().entry(task.to_string()).or_default().limits = Some((soft, hard));
        Ok(())
    }

    /// Runs `n` more bodies at once (Celery's `pool_grow`): one more slot
    /// each, a runner thread or a child process more, and the prefetch
    /// grows by [`super::PREFETCH_MULTIPLIER`] a slot. Answers the new
    /// concurrency; refused unless it runs.
    pub fn grow(&self, n: usize) -> Result<usize, Refused> {
        let s = &self.shared;
        if n == 0 {
            return Err(Refused::Invalid("invalid `n`: must be at least 1".into()));
        }
        if *s.stopping.borrow() || !s.running.load(Ordering::SeqCst) {
            return Err(Refused::Invalid(
                "the worker is not running (or is stopping)".into(),
            ));
        }
        let now = s.concurrency.fetch_add(n, Ordering::SeqCst) + n;
        s.prefetch.fetch_add(
            n * super::slots_per(s.procs.is_some()) * super::PREFETCH_MULTIPLIER,
            Ordering::SeqCst,
        );
        match &s.procs {
            Some(p) => p.grow(n),
            None => {
                if let Some(g) = s.gate.get() {
                    g.grow(n);
                }
            }
        }
        s.slots.add_permits(n * super::slots_per(s.procs.is_some()));
        s.deck.grow(n);
        s.reshaped.send_modify(|v| *v += 1);
        Ok(now)
    }

    /// Runs `n` fewer bodies at once (Celery's `pool_shrink`): slots free
    /// now go at once, busy ones when their run ends; never below one.
    /// Answers the new concurrency; refused unless it runs.
    pub fn shrink(&self, n: usize) -> Result<usize, Refused> {
        let s = &self.shared;
        if n == 0 {
            return Err(Refused::Invalid("invalid `n`: must be at least 1".into()));
        }
        if !s.running.load(Ordering::SeqCst) {
            return Err(Refused::Invalid("the worker is not running".into()));
        }
        let mut cur = s.concurrency.load(Ordering::SeqCst);
        loop {
            if n >= cur {
                return Err(Refused::Invalid(format!(
                    "invalid `n`: the worker runs {cur} at once and keeps at least 1"
                )));
            }
            match s
                .concurrency
                .compare_exchange(cur, cur - n, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        let fewer = n * super::slots_per(s.procs.is_some()) * super::PREFETCH_MULTIPLIER;
        let _ = s
            .prefetch
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |p| {
                Some(p.saturating_sub(fewer).max(cur - n))
            });
        match &s.procs {
            Some(p) => p.shrink(n),
            None => {
                if let Some(g) = s.gate.get() {
                    g.shrink(n);
                }
            }
        }
        s.reshaped.send_modify(|v| *v += 1);
        let gone = n * super::slots_per(s.procs.is_some());
        // Slots and places on deck free now go at once; a busy slot, or a
        // place a run in line holds, as it comes free.
        s.deck.shrink(gone, n);
        Ok(cur - n)
    }

    /// Starts claiming from `queue` too (Celery's `add_consumer`); answers
    /// whether it is new.
    pub fn add_queue(&self, queue: &str) -> Result<bool, Refused> {
        if queue.is_empty() {
            return Err(Refused::Invalid(
                "invalid `queue`: needs a non-empty name".into(),
            ));
        }
        let mut q = self
            .shared
            .queues
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if q.iter().any(|x| x == queue) {
            return Ok(false);
        }
        q.push(queue.to_string());
        self.shared.reshaped.send_modify(|v| *v += 1);
        Ok(true)
    }

    /// Stops claiming from `queue` (Celery's `cancel_consumer`); what it
    /// holds from there still runs. Answers whether it claimed from it;
    /// refused for its last queue (a worker claims from at least one).
    pub fn cancel_queue(&self, queue: &str) -> Result<bool, Refused> {
        let mut q = self
            .shared
            .queues
            .write()
            .unwrap_or_else(|e| e.into_inner());
        let Some(i) = q.iter().position(|x| x == queue) else {
            return Ok(false);
        };
        if q.len() == 1 {
            return Err(Refused::Invalid(format!(
                "{queue:?} is the worker's last queue; a worker claims from at least one"
            )));
        }
        q.remove(i);
        self.shared.reshaped.send_modify(|v| *v += 1);
        Ok(true)
    }
}

fn unknown(task: &str) -> Refused {
    Refused::Invalid(format!("unknown task {task:?}"))
}
