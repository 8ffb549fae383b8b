//! Etas on Celery's layout: a message with an eta in the future is claimed
//! and held in memory until due, as a Celery worker holds it (in
//! `unacked`, run from a timer). Three things keep that bounded:
//!
//! - **A cap** (`max_held_etas`): past it the consumer stops claiming, as
//!   Celery's prefetch stops a worker (Celery counts held etas against its
//!   prefetch, with a warning). Messages behind them wait on the queue,
//!   where any consumer can take them, rather than in this process's
//!   memory.
//! - **Re-scoring in chunks**: the index entries of everything held are
//!   re-scored [`RESCORE_CHUNK`] tags per script call, so no one call holds
//!   Redis for long however much is held.
//! - **No loop over everything held per step**: what is due is found by
//!   range in the eta-ordered map, and holds that vanished are dropped in
//!   one pass.

use std::collections::{HashSet, VecDeque};

use super::CeleryBroker;
use crate::task::spec::Delivery;
use crate::task::state::Refused;

/// How many etas a consumer holds at most by default: 10 000 — far above
/// a worker's prefetch, small enough that holding them costs megabytes.
pub const MAX_HELD_ETAS: usize = 10_000;

/// How many tags one re-score call takes: a few milliseconds of Redis time.
pub(super) const RESCORE_CHUNK: usize = 1000;

impl CeleryBroker {
    /// How many etas this consumer holds now (claimed, not yet due).
    pub fn held_etas(&self) -> usize {
        self.lock().held.len()
    }

    /// How many more messages a claim may take: none once the held etas
    /// reach the cap, else `max`.
    pub(super) fn claim_room(&self, max: usize) -> usize {
        if self.lock().held.len() >= self.opts.max_held_etas {
            0
        } else {
            max
        }
    }

    /// What is ready to hand out: claimed messages in the inbox, then held
    /// etas that have come due.
    pub(super) fn take_ready(&self, queues: &[String], max: usize) -> Vec<Delivery> {
        // A claimed message carries its headway queue name, where Celery's
        // default queue is `default`: a worker that named it by its Celery
        // name (`celery`) must still take what it claimed.
        let queues = &self.model_queues(queues);
        let now = self.facts.clock.now();
        let mut g = self.lock();
        let mut out = Vec::new();
        let mut keep = VecDeque::new();
        while let Some(d) = g.inbox.pop_front() {
            if out.len() < max && queues.contains(&d.message.queue) {
                out.push(d);
            } else {
                keep.push_back(d);
            }
        }
        g.inbox = keep;
        // Only what is due is looked at: the map is ordered by eta.
        let due: Vec<(i64, u64)> = g
            .held
            .range(..(now.saturating_add(1), 0))
            .filter(|(_, d)| queues.contains(&d.message.queue))
            .take(max - out.len())
            .map(|(k, _)| *k)
            .collect();
        out.extend(due.into_iter().filter_map(|k| g.held.remove(&k)));
        out
    }

    pub(super) fn next_held(&self, queues: &[String]) -> Option<i64> {
        let queues = &self.model_queues(queues);
        let g = self.lock();
        g.held
            .iter()
            .find(|(_, d)| queues.contains(&d.message.queue))
            .map(|((eta, _), _)| *eta)
    }

    /// Re-scores the index entries of everything this consumer holds, and
    /// forgets holds whose entries are gone (another consumer restored them
    /// while this one could not reach Redis; its copy is queued again).
    /// Runs every `visibility_timeout / 4` on its own; public so a test on a
    /// virtual clock can drive it.
    pub async fn heartbeat(&self) -> Result<usize, Refused> {
        let tags: Vec<(u64, String)> = {
            let g = self.lock();
            g.out.iter().map(|(k, h)| (*k, h.tag.clone())).collect()
        };
        // Settles kept through an outage are still this consumer's to make.
        let owed = self.owed_tags();
        if tags.is_empty() && owed.is_empty() {
            return Ok(0);
        }
        let (epoch, mut c) = self.link.conn().await?;
        let all: Vec<&String> = tags.iter().map(|(_, t)| t).chain(owed.iter()).collect();
        let mut gone: Vec<String> = Vec::new();
        for chunk in all.chunks(RESCORE_CHUNK) {
            let mut inv = self.scripts.rescore.prepare_invoke();
            inv.key(&self.keys.index).arg(self.index_score());
            for t in chunk {
                inv.arg(*t);
            }
            match inv.invoke_async::<Vec<String>>(&mut c).await {
                Ok(v) => gone.extend(v),
                Err(e) => return Err(self.link.fail(epoch, &e)),
            }
        }
        if !gone.is_empty() {
            let gone: HashSet<&String> = gone.iter().collect();
            let locals: HashSet<u64> = tags
                .iter()
                .filter(|(_, t)| gone.contains(t))
                .map(|(l, _)| *l)
                .collect();
            let mut g = self.lock();
            for l in &locals {
                g.out.remove(l);
            }
            // One pass each, whatever vanished.
            g.held.retain(|(_, l), _| !locals.contains(l));
            g.inbox.retain(|d| !locals.contains(&d.receipt.tag));
        }
        Ok((tags.len() + owed.len()).saturating_sub(gone.len()))
    }
}
