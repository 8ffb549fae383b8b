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
//!
//! It follows headway's Redis layout wherever the two can agree, so one
//! model-based test holds both to the same observable behaviour:
//! - each claim is held by a named consumer ([`MemoryBroker::handle`] gives a
//!   second consumer on the same broker, as a second process is on Redis); a
//!   settle by another consumer, or of a claim already settled or recovered,
//!   is a no-op (the receipt's tag fences it);
//! - a consumer's lease never runs out by itself (its process is the
//!   broker's), but [`MemoryBroker::expire`] makes it so, as a dying worker
//!   would, and `recover()` then hands back what it held — oldest claim at
//!   the head, marked redelivered — and dead-letters a message lost with its
//!   holder `max_deliveries` times ("worker lost ×3");
//! - a terminate is told to every app on the broker, on any of its
//!   handles, as a Redis layout tells every process on it;
//! - bytes pushed by [`MemoryBroker::push_raw`] go through the same decoder
//!   as a Redis claim ([`crate::task::dead::decode`]), and what does not
//!   decode is quarantined in the queue's dead letters.
//!
//! The code is split by concern: `state` (the maps), `claim` (claim,
//! settle, recover), `results` (results and chords) and `inspect`; this
//! file holds the broker, its options and the [`Broker`] seam.

mod claim;
mod inspect;
mod results;
mod state;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use crate::task::clock::{BoxFuture, Clock};
use crate::task::dead::{MAX_DELIVERIES, MAX_MESSAGE_BYTES};
use crate::task::message::Message;
use crate::task::spec::{Broker, Claimed, Delivery, Receipt};
use crate::task::state::Refused;

use state::{Entry, Inner, Payload, Queue, Shared};

/// How many run events the memory broker keeps: the last thousand.
pub const EVENTS_KEPT: usize = 1000;

/// The consumer name of a broker made by [`MemoryBroker::new`].
pub const LOCAL: &str = "local";

/// How a [`MemoryBroker`] is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryOptions {
    /// How many times a consumer may be lost holding a message before it is
    /// dead-lettered ([`MAX_DELIVERIES`], 3).
    pub max_deliveries: u32,
    /// The size cap for raw bytes pushed onto a queue
    /// ([`MAX_MESSAGE_BYTES`], 16 MiB). Published messages are values here,
    /// not bytes, so the cap is not checked on publish.
    pub max_message_bytes: usize,
    /// How long a result (and a chord's count) is kept after it is stored:
    /// one day, as on Redis (Celery's `result_expires`), counted by the
    /// system's time whatever the app's clock (as Redis counts by its
    /// own). Kept for ever before, a long-lived process on this broker grew
    /// by every run's outcome.
    pub result_expires: Duration,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        MemoryOptions {
            max_deliveries: MAX_DELIVERIES,
            max_message_bytes: MAX_MESSAGE_BYTES,
            result_expires: Duration::from_secs(86_400),
        }
    }
}

/// A broker, result store, chord counter and inspector over maps.
///
/// Each value is one consumer of a shared in-memory broker: `new` makes the
/// broker and its consumer [`LOCAL`], `handle` another consumer of it.
pub struct MemoryBroker {
    shared: Arc<Shared>,
    consumer: Arc<str>,
}

impl MemoryBroker {
    /// An empty broker whose time comes from `clock` (the app's).
    pub fn new(clock: Arc<dyn Clock>) -> Arc<MemoryBroker> {
        MemoryBroker::with_options(clock, MemoryOptions::default())
    }

    /// An empty broker set up by `opts`.
    pub fn with_options(clock: Arc<dyn Clock>, opts: MemoryOptions) -> Arc<MemoryBroker> {
        Arc::new(MemoryBroker {
            shared: Arc::new(Shared {
                inner: Mutex::new(Inner::default()),
                limits: crate::task::limits::Local::new(clock.clone()),
                clock,
                published: Notify::new(),
                waits: Default::default(),
                opts,
                hearers: Default::default(),
                answerers: Default::default(),
            }),
            consumer: Arc::from(LOCAL),
        })
    }

    /// Another consumer named `consumer` of this same broker: what a second
    /// worker process is on a shared broker. It sees the same queues,
    /// results and dead letters; its claims are its own.
    pub fn handle(&self, consumer: &str) -> Arc<MemoryBroker> {
        Arc::new(MemoryBroker {
            shared: self.shared.clone(),
            consumer: Arc::from(consumer),
        })
    }

    /// This consumer's name.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// How it was set up.
    pub fn options(&self) -> &MemoryOptions {
        &self.shared.opts
    }

    /// Makes `consumer`'s lease run out now, as a worker that died would:
    /// the next `recover()` hands back what it holds. A claim by it renews
    /// its lease (as on Redis), so it only stays lost if it stays quiet.
    pub fn expire(&self, consumer: &str) {
        let mut g = self.lock();
        let mine: Vec<(Arc<str>, String)> = g
            .leased
            .iter()
            .filter(|(c, _)| &**c == consumer)
            .cloned()
            .collect();
        g.expired.extend(mine);
    }

    /// Puts `raw` on `queue` as another producer would, unchecked: it is
    /// decoded when claimed, and quarantined if it is not a message.
    pub fn push_raw(&self, queue: &str, raw: &[u8]) {
        self.lock().queue(queue).steps[0].push_back(Entry {
            payload: Payload::Raw(Arc::from(raw)),
            raw: None,
            lost: 0,
            redelivered: false,
        });
        self.shared.published.notify_waiters();
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves maps that are still
        // consistent (every update is a single insert or remove), so a
        // poisoned lock is taken over rather than propagated.
        self.shared.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> i64 {
        self.shared.clock.now()
    }

    /// Messages ready on `queue` now (all priority steps), for tests.
    pub fn ready(&self, queue: &str) -> usize {
        let now = self.now();
        let mut g = self.lock();
        g.promote(queue, now);
        g.queues.get(queue).map_or(0, Queue::len)
    }

    /// Messages claimed and not settled, for tests.
    pub fn unacked(&self) -> usize {
        self.lock().unacked.len()
    }

    /// Messages waiting for an eta, for tests.
    pub fn delayed(&self) -> usize {
        self.lock().queues.values().map(|q| q.delayed.len()).sum()
    }
}

impl Broker for MemoryBroker {
    fn local(&self) -> bool {
        true
    }

    fn task_limits(&self) -> Option<Arc<dyn crate::task::limits::TaskLimits>> {
        Some(self.shared.limits.clone())
    }

    fn publish(&self, messages: Vec<Message>) -> BoxFuture<'_, Result<(), Refused>> {
        let now = self.now();
        {
            let mut g = self.lock();
            for m in messages {
                g.push(m, now);
            }
        }
        self.shared.published.notify_waiters();
        crate::task::clock::done()
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
                let published = self.shared.published.notified();
                tokio::pin!(published);
                published.as_mut().enable();
                let moved = self.shared.clock.moved();
                let (got, buried) = self.claim(queues, max);
                if !got.is_empty() {
                    return Ok(got);
                }
                let now = tokio::time::Instant::now();
                if now >= deadline {
                    return Ok(got);
                }
                // What was quarantined made room: look again at once rather
                // than wait for the next publish.
                if buried {
                    continue;
                }
                // Wake for a publish, a move of a virtual clock, the next eta
                // on the system clock, or the end of the wait.
                let mut until = deadline;
                if !self.shared.clock.is_virtual()
                    && let Some(eta) = self.next_due(queues)
                {
                    let ms = eta.saturating_sub(self.now()).max(0) as u64;
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
            self.settle(&mut g, r);
        }
        crate::task::clock::done()
    }

    fn reject(&self, receipt: Receipt, requeue: bool) -> BoxFuture<'_, Result<(), Refused>> {
        let mut g = self.lock();
        if let Some(h) = self.settle(&mut g, &receipt)
            && requeue
        {
            g.queue(&h.queue).steps[h.step].push_front(Entry {
                payload: Payload::Msg(h.message),
                raw: h.raw,
                lost: h.lost,
                redelivered: true,
            });
            drop(g);
            self.shared.published.notify_waiters();
        }
        crate::task::clock::done()
    }

    fn retry(&self, receipt: Receipt, next: Message) -> BoxFuture<'_, Result<(), Refused>> {
        let now = self.now();
        {
            let mut g = self.lock();
            // Fenced: a claim no longer held (recovered, settled) publishes
            // nothing, so a late retry cannot double the run.
            if self.settle(&mut g, &receipt).is_some() {
                g.push(next, now);
            }
        }
        self.shared.published.notify_waiters();
        crate::task::clock::done()
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
        crate::task::clock::done()
    }

    /// Every app on this broker hears it: an app on another handle is what
    /// a second process is on a shared broker.
    fn terminate(
        &self,
        ids: Vec<String>,
        until: i64,
        signal: i32,
    ) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(async move {
            self.revoke(ids.clone(), until).await?;
            self.shared.hearers.tell(&ids, signal);
            Ok(())
        })
    }

    fn on_terminate(&self, hear: crate::task::terminate::OnTerminate) {
        self.shared.hearers.add(hear);
    }

    /// Only this process reaches it: its apps answer at once.
    fn control(
        &self,
        request: serde_json::Value,
        timeout: Duration,
    ) -> Option<BoxFuture<'_, Result<Vec<serde_json::Value>, Refused>>> {
        let _ = timeout;
        let got = self.shared.answerers.answer(&request);
        Some(Box::pin(async move { Ok(got) }))
    }

    fn on_control(&self, answer: crate::task::spec::OnControl) {
        self.shared.answerers.add(answer);
    }

    /// A claim with its revoked checks made under the same lock, so the
    /// worker neither copies the ids nor asks again.
    fn claim<'a>(
        &'a self,
        queues: &'a [String],
        max: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<Claimed>, Refused>> {
        Box::pin(async move {
            let got = self.consume(queues, max, wait).await?;
            if got.is_empty() {
                return Ok(Vec::new());
            }
            let now = self.now();
            let g = self.lock();
            Ok(got
                .into_iter()
                .map(|delivery| Claimed {
                    revoked: Some(g.is_revoked(&delivery.message.id, now)),
                    delivery,
                })
                .collect())
        })
    }

    fn revoked<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<Vec<bool>, Refused>> {
        let now = self.now();
        let g = self.lock();
        let out = ids.iter().map(|id| g.is_revoked(id, now)).collect();
        Box::pin(async move { Ok(out) })
    }

    /// Two beats on one in-memory broker (one process) fire each entry's
    /// slots once: a slot is granted only if it is later than the latest one
    /// fired for that entry.
    fn claim_slot<'a>(&'a self, entry: &'a str, due: i64) -> BoxFuture<'a, Result<bool, Refused>> {
        let mut g = self.lock();
        let ok = match g.fired.get_mut(entry) {
            Some(last) if *last >= due => false,
            Some(last) => {
                *last = due;
                true
            }
            None => {
                g.fired.insert(entry.to_string(), due);
                true
            }
        };
        Box::pin(async move { Ok(ok) })
    }

    fn recover(&self) -> BoxFuture<'_, Result<usize, Refused>> {
        let n = self.recover_now();
        Box::pin(async move { Ok(n) })
    }

    fn requeue_dead<'a>(
        &'a self,
        queue: &'a str,
        ids: &'a [String],
        limit: usize,
    ) -> BoxFuture<'a, Result<usize, Refused>> {
        let mut n = 0;
        {
            let mut g = self.lock();
            if let Some(q) = g.queues.get_mut(queue) {
                let mut kept = VecDeque::with_capacity(q.dead.len());
                // Oldest (the back) first.
                while let Some(d) = q.dead.pop_back() {
                    // A prefix is not the message: it stays a dead letter.
                    let wanted = !d.letter.truncated()
                        && (ids.is_empty()
                            || d.letter.id.as_ref().is_some_and(|id| ids.contains(id)));
                    if n < limit && wanted {
                        q.steps[d.step].push_back(Entry {
                            payload: Payload::Raw(Arc::from(d.letter.raw)),
                            raw: None,
                            lost: 0,
                            redelivered: true,
                        });
                        n += 1;
                    } else {
                        kept.push_front(d);
                    }
                }
                q.dead = kept;
            }
        }
        if n > 0 {
            self.shared.published.notify_waiters();
        }
        Box::pin(async move { Ok(n) })
    }

    fn purge_dead<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, Result<usize, Refused>> {
        let n = self
            .lock()
            .queues
            .get_mut(queue)
            .map_or(0, |q| std::mem::take(&mut q.dead).len());
        Box::pin(async move { Ok(n) })
    }
}

impl MemoryBroker {
    fn next_due(&self, queues: &[String]) -> Option<i64> {
        let g = self.lock();
        queues
            .iter()
            .filter_map(|q| g.queues.get(q)?.delayed.keys().next().map(|k| k.0))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::clock::VirtualClock;
    use crate::task::spec::{Backend, Counter, Joined};
    use crate::task::state::{Outcome, State};
    use serde_json::Map;

    fn msg(id: &str, q: &str) -> Message {
        Message::new(id.into(), "t".into(), vec![], Map::new(), q.into())
    }

    /// A waker that counts its wakes.
    struct Count(std::sync::atomic::AtomicUsize);
    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn a_store_wakes_only_its_own_runs_waiters() {
        use std::sync::atomic::Ordering::SeqCst;
        use std::task::{Context, Poll, Waker};
        let b = MemoryBroker::new(VirtualClock::new(1000));
        let count = Arc::new(Count(0.into()));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let mut wait = b.wait("mine", Duration::from_secs(3600));
        assert!(wait.as_mut().poll(&mut cx).is_pending());
        assert_eq!(b.shared.waits.runs(), 1);
        // Others' results: this wait is not woken (it was, once per store,
        // when every wait shared one notify).
        for i in 0..100 {
            b.store(vec![Outcome::new(
                format!("other-{i}"),
                State::Success,
                1000,
            )])
            .await
            .unwrap();
        }
        assert_eq!(count.0.load(SeqCst), 0);
        // The positive control: its own result wakes it, and it answers.
        b.store(vec![Outcome::new("mine", State::Success, 1000)])
            .await
            .unwrap();
        assert_eq!(count.0.load(SeqCst), 1);
        let Poll::Ready(Ok(Some(o))) = wait.as_mut().poll(&mut cx) else {
            panic!("not answered");
        };
        assert_eq!((o.id.as_str(), o.state), ("mine", State::Success));
        drop(wait);
        // Its place among the waiters is gone with it.
        assert_eq!(b.shared.waits.runs(), 0);
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
    async fn results_and_chord_counts_expire_by_the_systems_time() {
        // The app's clock is virtual and moved far ahead: results are kept
        // by the system's time, as Redis keeps them.
        let clock = VirtualClock::new(0);
        let b = MemoryBroker::with_options(
            clock.clone(),
            MemoryOptions {
                result_expires: Duration::from_millis(300),
                ..MemoryOptions::default()
            },
        );
        let cb = msg("cb", "q");
        b.store(vec![Outcome::new("old", State::Success, 0)])
            .await
            .unwrap();
        b.open("k", 2).await.unwrap();
        assert_eq!(b.arrive("k", "p1", 2, &cb).await.unwrap(), Joined::Waiting);
        clock.advance(10 * 86_400_000);
        // Positive control: kept across the virtual jump, until its time.
        assert!(b.fetch("old").await.unwrap().is_some());
        assert_eq!(b.arrive("k", "p1", 2, &cb).await.unwrap(), Joined::Waiting);
        let stored = std::time::Instant::now();
        let deadline = stored + Duration::from_secs(5);
        // Gone once its time is up, read before any store drops it.
        while b.fetch("old").await.unwrap().is_some() {
            assert!(std::time::Instant::now() < deadline, "never expired");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(stored.elapsed() >= Duration::from_millis(250));
        b.store(vec![Outcome::new("new", State::Success, 0)])
            .await
            .unwrap();
        assert!(b.fetch("old").await.unwrap().is_none());
        assert_eq!(b.fetch("new").await.unwrap().unwrap().state, State::Success);
        // The chord's count went with it (dropped at that store): a part
        // arriving now starts a new count, so one more does not send it.
        assert_eq!(b.arrive("k", "p2", 2, &cb).await.unwrap(), Joined::Waiting);
        assert_eq!(b.ready("q"), 0);
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
