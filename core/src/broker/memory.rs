//! An in-process broker that is also a result store, a chord counter and an
//! inspector.
//!
//! Everything sits behind one mutex: every operation is a few map updates, so
//! a lock held for nanoseconds beats anything finer-grained, and a batch is
//! one lock. Delayed messages wait in a map ordered by eta and are moved to
//! their queue when the broker's clock (the app's) says they are due, so a
//! virtual clock drives them as well as the system clock does.
//!
//! Claimed messages are kept until acked; `reject(requeue)` puts one back at
//! the head of its queue, as RabbitMQ and kombu's Redis transport do, so a
//! message handed back by a stopping worker runs next rather than last.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use crate::task::clock::{BoxFuture, Clock};
use crate::task::message::Message;
use crate::task::spec::{
    Backend, Broker, Counter, Delivery, Inspector, Joined, QueueInfo, Receipt, RunEvent,
};

/// How many run events the memory broker keeps: the last thousand.
pub const EVENTS_KEPT: usize = 1000;
use crate::task::state::{Outcome, Refused, State};

/// Priority steps: 0 is claimed first (kombu's Redis order: lower first).
const STEPS: usize = 10;

#[derive(Default)]
struct Queue {
    steps: [VecDeque<Message>; STEPS],
    unacked: u64,
}

impl Queue {
    fn len(&self) -> usize {
        self.steps.iter().map(VecDeque::len).sum()
    }
}

fn step(m: &Message) -> usize {
    (m.priority.unwrap_or(0) as usize).min(STEPS - 1)
}

#[derive(Default)]
struct Inner {
    queues: HashMap<String, Queue>,
    /// (eta, seq) → message.
    delayed: BTreeMap<(i64, u64), Message>,
    unacked: HashMap<u64, Message>,
    revoked: HashMap<String, i64>,
    results: HashMap<String, Outcome>,
    chords: HashMap<String, (u32, HashSet<String>)>,
    events: VecDeque<RunEvent>,
    seq: u64,
}

impl Inner {
    fn queue(&mut self, name: &str) -> &mut Queue {
        if !self.queues.contains_key(name) {
            self.queues.insert(name.to_string(), Queue::default());
        }
        self.queues.get_mut(name).expect("just inserted")
    }

    fn push(&mut self, m: Message, now: i64) {
        match m.eta {
            Some(eta) if eta > now => {
                self.seq += 1;
                let seq = self.seq;
                self.queue(&m.queue);
                self.delayed.insert((eta, seq), m);
            }
            _ => {
                let s = step(&m);
                self.queue(&m.queue).steps[s].push_back(m);
            }
        }
    }

    fn promote(&mut self, now: i64) {
        while let Some(entry) = self.delayed.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let m = entry.remove();
            let s = step(&m);
            self.queue(&m.queue).steps[s].push_back(m);
        }
    }
}

/// A broker, result store, chord counter and inspector over maps.
pub struct MemoryBroker {
    inner: Mutex<Inner>,
    clock: Arc<dyn Clock>,
    published: Notify,
    stored: Notify,
}

impl MemoryBroker {
    /// An empty broker whose time comes from `clock` (the app's).
    pub fn new(clock: Arc<dyn Clock>) -> Arc<MemoryBroker> {
        Arc::new(MemoryBroker {
            inner: Mutex::new(Inner::default()),
            clock,
            published: Notify::new(),
            stored: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves maps that are still
        // consistent (every update is a single insert or remove), so a
        // poisoned lock is taken over rather than propagated.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn claim(&self, queues: &[String], max: usize) -> Vec<Delivery> {
        let now = self.clock.now();
        let mut g = self.lock();
        g.promote(now);
        let mut out = Vec::new();
        for name in queues {
            while out.len() < max {
                let Some(q) = g.queues.get_mut(name) else {
                    break;
                };
                let Some(m) = q.steps.iter_mut().find_map(VecDeque::pop_front) else {
                    break;
                };
                q.unacked += 1;
                g.seq += 1;
                let tag = g.seq;
                g.unacked.insert(tag, m.clone());
                out.push(Delivery {
                    receipt: Receipt {
                        queue: name.clone(),
                        tag,
                        token: tag,
                        raw: None,
                    },
                    redelivered: false,
                    message: m,
                });
            }
            if out.len() >= max {
                break;
            }
        }
        out
    }

    fn settle(g: &mut Inner, r: &Receipt) -> Option<Message> {
        let m = g.unacked.remove(&r.tag)?;
        if let Some(q) = g.queues.get_mut(&r.queue) {
            q.unacked = q.unacked.saturating_sub(1);
        }
        Some(m)
    }

    /// Messages ready on `queue` now (all priority steps), for tests.
    pub fn ready(&self, queue: &str) -> usize {
        let now = self.clock.now();
        let mut g = self.lock();
        g.promote(now);
        g.queues.get(queue).map_or(0, Queue::len)
    }

    /// Messages claimed and not settled, for tests.
    pub fn unacked(&self) -> usize {
        self.lock().unacked.len()
    }

    /// Messages waiting for an eta, for tests.
    pub fn delayed(&self) -> usize {
        self.lock().delayed.len()
    }
}

impl Broker for MemoryBroker {
    fn publish(&self, messages: Vec<Message>) -> BoxFuture<'_, Result<(), Refused>> {
        let now = self.clock.now();
        {
            let mut g = self.lock();
            for m in messages {
                g.push(m, now);
            }
        }
        self.published.notify_waiters();
        Box::pin(async { Ok(()) })
    }

    fn consume<'a>(
        &'a self,
        queues: &'a [String],
        max: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<Delivery>, Refused>> {
        Box::pin(async move {
            if max == 0 {
                return Ok(Vec::new());
            }
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                let published = self.published.notified();
                tokio::pin!(published);
                published.as_mut().enable();
                let moved = self.clock.moved();
                let got = self.claim(queues, max);
                if !got.is_empty() {
                    return Ok(got);
                }
                let now = tokio::time::Instant::now();
                if now >= deadline {
                    return Ok(got);
                }
                // Wake for a publish, a move of a virtual clock, the next eta
                // on the system clock, or the end of the wait.
                let mut until = deadline;
                if !self.clock.is_virtual()
                    && let Some(eta) = self.next_due(queues)
                {
                    let ms = (eta - self.clock.now()).max(0) as u64;
                    until = until.min(now + Duration::from_millis(ms));
                }
                tokio::select! {
                    _ = &mut published => {}
                    _ = moved => {}
                    _ = tokio::time::sleep_until(until) => {}
                }
            }
        })
    }

    fn ack(&self, receipts: Vec<Receipt>) -> BoxFuture<'_, Result<(), Refused>> {
        let mut g = self.lock();
        for r in &receipts {
            MemoryBroker::settle(&mut g, r);
        }
        Box::pin(async { Ok(()) })
    }

    fn reject(&self, receipt: Receipt, requeue: bool) -> BoxFuture<'_, Result<(), Refused>> {
        let mut g = self.lock();
        if let Some(m) = MemoryBroker::settle(&mut g, &receipt)
            && requeue
        {
            let s = step(&m);
            g.queue(&receipt.queue).steps[s].push_front(m);
            drop(g);
            self.published.notify_waiters();
        }
        Box::pin(async { Ok(()) })
    }

    fn retry(&self, receipt: Receipt, next: Message) -> BoxFuture<'_, Result<(), Refused>> {
        let now = self.clock.now();
        {
            let mut g = self.lock();
            MemoryBroker::settle(&mut g, &receipt);
            g.push(next, now);
        }
        self.published.notify_waiters();
        Box::pin(async { Ok(()) })
    }

    fn next_eta<'a>(&'a self, queues: &'a [String]) -> BoxFuture<'a, Result<Option<i64>, Refused>> {
        let eta = self.next_due(queues);
        Box::pin(async move { Ok(eta) })
    }

    fn revoke(&self, ids: Vec<String>, until: i64) -> BoxFuture<'_, Result<(), Refused>> {
        let mut g = self.lock();
        for id in ids {
            g.revoked.insert(id, until);
        }
        Box::pin(async { Ok(()) })
    }

    fn revoked<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<Vec<bool>, Refused>> {
        let now = self.clock.now();
        let g = self.lock();
        let out = ids
            .iter()
            .map(|id| g.revoked.get(id).is_some_and(|&until| until > now))
            .collect();
        Box::pin(async move { Ok(out) })
    }
}

impl MemoryBroker {
    fn next_due(&self, queues: &[String]) -> Option<i64> {
        let g = self.lock();
        g.delayed
            .iter()
            .find(|(_, m)| queues.contains(&m.queue))
            .map(|((eta, _), _)| *eta)
    }
}

impl Backend for MemoryBroker {
    fn store(&self, outcomes: Vec<Outcome>) -> BoxFuture<'_, Result<(), Refused>> {
        {
            let mut g = self.lock();
            for o in outcomes {
                match g.results.get(&o.id) {
                    Some(old) if old.state.is_final() => {}
                    _ => {
                        g.results.insert(o.id.clone(), o);
                    }
                }
            }
        }
        self.stored.notify_waiters();
        Box::pin(async { Ok(()) })
    }

    fn fetch<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Outcome>, Refused>> {
        let o = self.lock().results.get(id).cloned();
        Box::pin(async move { Ok(o) })
    }

    fn wait<'a>(
        &'a self,
        id: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Option<Outcome>, Refused>> {
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + timeout;
            loop {
                let stored = self.stored.notified();
                tokio::pin!(stored);
                stored.as_mut().enable();
                if let Some(o) = self.lock().results.get(id)
                    && o.state.is_final()
                {
                    return Ok(Some(o.clone()));
                }
                tokio::select! {
                    _ = &mut stored => {}
                    _ = tokio::time::sleep_until(deadline) => return Ok(None),
                }
            }
        })
    }
}

impl Counter for MemoryBroker {
    fn open(&self, key: &str, size: u32) -> BoxFuture<'_, Result<(), Refused>> {
        self.lock()
            .chords
            .entry(key.to_string())
            .or_insert_with(|| (size, HashSet::new()));
        Box::pin(async { Ok(()) })
    }

    fn arrive<'a>(
        &'a self,
        key: &'a str,
        part: &'a str,
        size: u32,
        callback: &'a Message,
    ) -> BoxFuture<'a, Result<Joined, Refused>> {
        let now = self.clock.now();
        let joined = {
            let mut g = self.lock();
            let entry = g
                .chords
                .entry(key.to_string())
                .or_insert_with(|| (size, HashSet::new()));
            let fresh = entry.1.insert(part.to_string());
            if fresh && entry.1.len() as u32 >= entry.0 {
                g.chords.remove(key);
                g.push(callback.clone(), now);
                Joined::Sent
            } else {
                Joined::Waiting
            }
        };
        if joined == Joined::Sent {
            self.published.notify_waiters();
        }
        Box::pin(async move { Ok(joined) })
    }
}

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
                delayed: g.delayed.values().filter(|m| &m.queue == name).count() as u64,
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
        for o in g.results.values() {
            *out.entry(o.state).or_insert(0) += 1;
        }
        Box::pin(async move { Ok(out) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::clock::VirtualClock;
    use serde_json::Map;

    fn msg(id: &str, q: &str) -> Message {
        Message::new(id.into(), "t".into(), vec![], Map::new(), q.into())
    }

    #[tokio::test]
    async fn fifo_priority_eta_and_requeue_at_head() {
        let clock = VirtualClock::new(1000);
        let b = MemoryBroker::new(clock.clone());
        let mut hi = msg("hi", "q");
        hi.priority = Some(0);
        let mut lo = msg("lo", "q");
        lo.priority = Some(5);
        let mut later = msg("later", "q");
        later.eta = Some(2000);
        b.publish(vec![lo, msg("a", "q"), hi, later]).await.unwrap();
        let qs = vec!["q".to_string()];
        let got = b.consume(&qs, 10, Duration::ZERO).await.unwrap();
        let ids: Vec<_> = got.iter().map(|d| d.message.id.as_str()).collect();
        assert_eq!(ids, ["a", "hi", "lo"]);
        assert_eq!(b.next_eta(&qs).await.unwrap(), Some(2000));
        b.reject(got[2].receipt.clone(), true).await.unwrap();
        b.ack(vec![got[0].receipt.clone(), got[1].receipt.clone()])
            .await
            .unwrap();
        assert_eq!(b.unacked(), 0);
        clock.advance_to(2000);
        let got = b.consume(&qs, 10, Duration::ZERO).await.unwrap();
        let ids: Vec<_> = got.iter().map(|d| d.message.id.as_str()).collect();
        assert_eq!(ids, ["later", "lo"]);
    }

    #[tokio::test]
    async fn results_are_write_once_for_final_states() {
        let b = MemoryBroker::new(VirtualClock::new(0));
        b.store(vec![Outcome::new("x", State::Started, 0)])
            .await
            .unwrap();
        b.store(vec![Outcome::new("x", State::Success, 1)])
            .await
            .unwrap();
        b.store(vec![Outcome::new("x", State::Failure, 2)])
            .await
            .unwrap();
        assert_eq!(b.fetch("x").await.unwrap().unwrap().state, State::Success);
        assert!(
            b.wait("y", Duration::from_millis(5))
                .await
                .unwrap()
                .is_none()
        );
    }

    #[tokio::test]
    async fn chord_counts_a_set() {
        let b = MemoryBroker::new(VirtualClock::new(0));
        let cb = msg("cb", "q");
        b.open("k", 2).await.unwrap();
        assert_eq!(b.arrive("k", "p1", 2, &cb).await.unwrap(), Joined::Waiting);
        assert_eq!(b.arrive("k", "p1", 2, &cb).await.unwrap(), Joined::Waiting);
        assert_eq!(b.arrive("k", "p2", 2, &cb).await.unwrap(), Joined::Sent);
        assert_eq!(b.ready("q"), 1);
    }

    #[tokio::test]
    async fn revoked_expire() {
        let clock = VirtualClock::new(0);
        let b = MemoryBroker::new(clock.clone());
        b.revoke(vec!["a".into()], 100).await.unwrap();
        let ids = vec!["a".to_string(), "b".to_string()];
        assert_eq!(b.revoked(&ids).await.unwrap(), vec![true, false]);
        clock.advance(100);
        assert_eq!(b.revoked(&ids).await.unwrap(), vec![false, false]);
    }

    #[tokio::test]
    async fn consume_wakes_on_publish() {
        let b = MemoryBroker::new(Arc::new(crate::task::clock::SystemClock));
        let b2 = b.clone();
        let t = tokio::spawn(async move {
            let qs = vec!["q".to_string()];
            b2.consume(&qs, 1, Duration::from_secs(5))
                .await
                .unwrap()
                .len()
        });
        tokio::task::yield_now().await;
        b.publish(vec![msg("a", "q")]).await.unwrap();
        assert_eq!(t.await.unwrap(), 1);
    }
}
