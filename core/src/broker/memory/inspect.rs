//! The memory broker as an [`Inspector`]: queue sizes, counts per state,
//! consumers and their claims, recent events and dead letters.
//!
//! Why apart: read-only views over the shared maps, each one lock.

use std::collections::BTreeMap;

use super::{EVENTS_KEPT, MemoryBroker};
use crate::task::clock::BoxFuture;
use crate::task::dead::DeadLetter;
use crate::task::spec::{ConsumerInfo, Inspector, QueueInfo, RunEvent};
use crate::task::state::{Refused, State};

impl Inspector for MemoryBroker {
    fn queues(&self) -> BoxFuture<'_, Result<Vec<QueueInfo>, Refused>> {
        let g = self.lock();
        let mut out: Vec<QueueInfo> = g
            .queues
            .iter()
            .map(|(name, q)| QueueInfo {
                name: name.clone(),
                ready: q
                    .steps
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| !s.is_empty())
                    .map(|(i, s)| (i as u8, s.len() as u64))
                    .collect(),
                delayed: q.delayed.len() as u64,
                unacked: q.unacked,
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Box::pin(async move { Ok(out) })
    }

    fn record(&self, events: Vec<RunEvent>) -> BoxFuture<'_, Result<(), Refused>> {
        let mut g = self.lock();
        for e in events {
            if g.events.len() >= EVENTS_KEPT {
                g.events.pop_front();
            }
            g.events.push_back(e);
        }
        Box::pin(async { Ok(()) })
    }

    fn recent(&self, limit: usize) -> BoxFuture<'_, Result<Vec<RunEvent>, Refused>> {
        let out: Vec<RunEvent> = self
            .lock()
            .events
            .iter()
            .rev()
            .take(limit)
            .cloned()
            .collect();
        Box::pin(async move { Ok(out) })
    }

    fn counts(&self) -> BoxFuture<'_, Result<BTreeMap<State, u64>, Refused>> {
        let g = self.lock();
        let mut out = BTreeMap::new();
        for r in g.results.values() {
            *out.entry(r.outcome.state).or_insert(0) += 1;
        }
        Box::pin(async move { Ok(out) })
    }

    /// Every consumer that has claimed, with what it holds (oldest claim
    /// first). A live one's lease never runs out by itself: `i64::MAX`;
    /// one made to expire has none.
    fn consumers(&self) -> BoxFuture<'_, Result<Vec<ConsumerInfo>, Refused>> {
        let g = self.lock();
        let out = g
            .consumers
            .iter()
            .map(|c| ConsumerInfo {
                name: c.to_string(),
                lease_until: (!g.expired.iter().any(|(x, _)| x == c)).then_some(i64::MAX),
                holding: g
                    .unacked
                    .values()
                    .filter(|h| h.consumer == *c)
                    .map(|h| h.message.id.clone())
                    .collect(),
            })
            .collect();
        Box::pin(async move { Ok(out) })
    }

    fn dead_letters<'a>(
        &'a self,
        queue: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<DeadLetter>, Refused>> {
        let out = self.lock().queues.get(queue).map_or_else(Vec::new, |q| {
            q.dead
                .iter()
                .take(limit)
                .map(|d| d.letter.clone())
                .collect()
        });
        Box::pin(async move { Ok(out) })
    }

    fn dead_count<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, Result<u64, Refused>> {
        let n = self
            .lock()
            .queues
            .get(queue)
            .map_or(0, |q| q.dead.len() as u64);
        Box::pin(async move { Ok(n) })
    }
}
