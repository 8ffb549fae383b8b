//! The memory broker as an [`Inspector`]: queue sizes, counts per state,
//! consumers and their claims, recent events and dead letters.
//!
//! Why apart: read-only views over the shared maps, each one lock.

use std::collections::BTreeMap;

use super::state::Logged;
use super::{EVENTS_KEPT, MemoryBroker};
use crate::task::clock::BoxFuture;
use crate::task::dead::DeadLetter;
use crate::task::spec::{ConsumerInfo, Inspector, QueueInfo, RunEvent, RunNote};
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
        self.log(events.into_iter().map(Logged::Event));
        crate::task::clock::done()
    }

    /// Kept as they are, sharing the runs' messages: read as events only
    /// when asked ([`Inspector::recent`]).
    fn record_notes(&self, notes: Vec<RunNote>) -> BoxFuture<'_, Result<(), Refused>> {
        self.log(notes.into_iter().map(Logged::Note));
        crate::task::clock::done()
    }

    fn recent(&self, limit: usize) -> BoxFuture<'_, Result<Vec<RunEvent>, Refused>> {
        let out: Vec<RunEvent> = self
            .lock()
            .events
            .iter()
            .rev()
            .take(limit)
            .map(Logged::event)
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

impl MemoryBroker {
    /// Keeps `events`, the oldest falling off past [`EVENTS_KEPT`].
    fn log(&self, events: impl Iterator<Item = Logged>) {
        let mut g = self.lock();
        for e in events {
            if g.events.len() >= EVENTS_KEPT {
                g.events.pop_front();
            }
            g.events.push_back(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Map, json};

    use super::*;
    use crate::task::clock::VirtualClock;
    use crate::task::message::Message;
    use crate::task::spec::{Detail, EVENT_TEXT_MAX};

    fn note(id: &str, args: Vec<serde_json::Value>, detail: Detail) -> RunNote {
        RunNote {
            message: Arc::new(Message::new(
                id.into(),
                "t".into(),
                args,
                Map::new(),
                "q".into(),
            )),
            state: State::Success,
            at: 5,
            worker: "w1".into(),
            runtime: Some(2),
            detail,
        }
    }

    #[tokio::test]
    async fn notes_read_back_as_the_events_they_make_newest_first() {
        let b = MemoryBroker::new(VirtualClock::new(0));
        let whole = note("a", vec![json!(1)], Detail::Text("boom".into())).event();
        b.record(vec![whole.clone()]).await.unwrap();
        let long = "x".repeat(EVENT_TEXT_MAX * 2);
        b.record_notes(vec![note(
            "b",
            vec![json!(long)],
            Detail::Value(json!({"ok": true})),
        )])
        .await
        .unwrap();
        let got = b.recent(10).await.unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1], whole, "a recorded event reads back as it was");
        let e = &got[0];
        assert_eq!(
            (e.id.as_str(), e.task.as_str(), e.worker.as_str()),
            ("b", "t", "w1")
        );
        assert_eq!(
            (e.state, e.at, e.runtime, e.retries),
            (State::Success, 5, Some(2), 0)
        );
        assert_eq!(e.detail.as_deref(), Some(r#"{"ok":true}"#));
        // The arguments as JSON, cut to the event's bound.
        assert!(e.args.starts_with("[\"xxx"), "{}", &e.args[..10]);
        assert!(e.args.len() <= EVENT_TEXT_MAX + '…'.len_utf8());
    }

    #[tokio::test]
    async fn the_log_keeps_the_last_thousand() {
        let b = MemoryBroker::new(VirtualClock::new(0));
        let notes = (0..EVENTS_KEPT + 5)
            .map(|i| note(&i.to_string(), Vec::new(), Detail::None))
            .collect();
        b.record_notes(notes).await.unwrap();
        let got = b.recent(usize::MAX).await.unwrap();
        assert_eq!(got.len(), EVENTS_KEPT);
        assert_eq!(got[0].id, (EVENTS_KEPT + 4).to_string());
        assert_eq!(got[EVENTS_KEPT - 1].id, "5");
        assert_eq!(got[0].detail, None);
    }
}
