//! The Inspector seam on Celery's layout: queue depths per step, result
//! counts by state (a bounded SCAN: Celery keeps no index), this consumer,
//! run events and dead letters. Run events are buffered and written a
//! batch at a time: one round trip each would cost as much as a settle.

use std::collections::BTreeMap;

use super::{CeleryBroker, dead, result};
use crate::task::clock::BoxFuture;
use crate::task::dead::{DEAD_KEPT, DeadLetter};
use crate::task::spec::{ConsumerInfo, Inspector, QueueInfo, RunEvent};
use crate::task::state::{Refused, State};

/// How many run events are kept.
pub(super) const EVENTS_KEPT: isize = 1000;

impl CeleryBroker {
    /// Writes buffered run events in one pipeline (the recorder flushes at
    /// 256, the background loop every 250 ms or so, `recent` before reading).
    pub(super) async fn flush_events(&self) -> Result<(), Refused> {
        let batch = std::mem::take(&mut *self.events.lock().unwrap_or_else(|e| e.into_inner()));
        if batch.is_empty() {
            return Ok(());
        }
        let mut p = redis::pipe();
        p.lpush(&self.keys.events, &batch).ignore();
        p.ltrim(&self.keys.events, 0, EVENTS_KEPT - 1).ignore();
        let (epoch, mut c) = self.link.conn().await?;
        match p.query_async::<()>(&mut c).await {
            Ok(()) => Ok(()),
            Err(e) => Err(self.link.fail(epoch, &e)),
        }
    }
}

impl Inspector for CeleryBroker {
    fn queues(&self) -> BoxFuture<'_, Result<Vec<QueueInfo>, Refused>> {
        Box::pin(async move {
            let mut names: Vec<String> = self.lock().queues.iter().cloned().collect();
            names.sort();
            if names.is_empty() {
                // An empty pipeline is an error to Redis ("empty command").
                return Ok(Vec::new());
            }
            let mut p = redis::pipe();
            for q in &names {
                for &s in &self.opts.priority_steps {
                    p.llen(self.queue_key(q, s));
                }
            }
            let (epoch, mut c) = self.link.conn().await?;
            let lens: Vec<u64> = match p.query_async(&mut c).await {
                Ok(v) => v,
                Err(e) => return Err(self.link.fail(epoch, &e)),
            };
            let g = self.lock();
            let steps = self.opts.priority_steps.len();
            Ok(names
                .iter()
                .enumerate()
                .map(|(i, q)| QueueInfo {
                    name: q.clone(),
                    ready: self
                        .opts
                        .priority_steps
                        .iter()
                        .zip(&lens[i * steps..(i + 1) * steps])
                        .filter(|(_, n)| **n > 0)
                        .map(|(s, n)| (*s, *n))
                        .collect(),
                    delayed: g.held.values().filter(|d| &d.message.queue == q).count() as u64,
                    unacked: g.out.values().filter(|h| &h.queue == q).count() as u64,
                })
                .collect())
        })
    }

    fn counts(&self) -> BoxFuture<'_, Result<BTreeMap<State, u64>, Refused>> {
        Box::pin(async move {
            let (epoch, mut c) = self.link.conn().await?;
            let pattern = format!("{}celery-task-meta-*", self.keys.result_prefix);
            let mut cursor: u64 = 0;
            let mut out = BTreeMap::new();
            let mut seen = 0usize;
            loop {
                let (next, keys): (u64, Vec<String>) = match redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(500)
                    .query_async(&mut c)
                    .await
                {
                    Ok(v) => v,
                    Err(e) => return Err(self.link.fail(epoch, &e)),
                };
                if !keys.is_empty() {
                    let vals: Vec<Option<Vec<u8>>> =
                        match redis::cmd("MGET").arg(&keys).query_async(&mut c).await {
                            Ok(v) => v,
                            Err(e) => return Err(self.link.fail(epoch, &e)),
                        };
                    for v in vals.into_iter().flatten() {
                        if let Ok(o) = result::decode_meta("", &v) {
                            *out.entry(o.state).or_insert(0) += 1;
                        }
                    }
                }
                seen += keys.len();
                cursor = next;
                // Bounded: an admin page must not walk a million keys.
                if cursor == 0 || seen >= 100_000 {
                    break;
                }
            }
            Ok(out)
        })
    }

    fn consumers(&self) -> BoxFuture<'_, Result<Vec<ConsumerInfo>, Refused>> {
        let g = self.lock();
        let holding = g.out.values().map(|h| h.id.clone()).collect();
        let info = ConsumerInfo {
            name: self.facts.node.clone(),
            lease_until: None,
            holding,
        };
        Box::pin(async move { Ok(vec![info]) })
    }

    fn record(&self, events: Vec<RunEvent>) -> BoxFuture<'_, Result<(), Refused>> {
        super::events::runs(self, &events);
        let full = {
            let mut buf = self.events.lock().unwrap_or_else(|e| e.into_inner());
            // A run's receipt and start are Celery events only; the log
            // keeps what runs came to.
            buf.extend(
                events
                    .iter()
                    .filter(|e| !matches!(e.state, State::Received | State::Started))
                    .filter_map(|e| serde_json::to_string(e).ok()),
            );
            buf.len() >= 256
        };
        Box::pin(async move {
            if full {
                self.flush_events().await?;
            }
            Ok(())
        })
    }

    fn wants_run_starts(&self) -> bool {
        self.task_events()
    }

    fn dead_letters<'a>(
        &'a self,
        queue: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<DeadLetter>, Refused>> {
        Box::pin(async move {
            if limit == 0 {
                return Ok(Vec::new());
            }
            let (epoch, mut c) = self.link.conn().await?;
            let raw: Vec<Vec<u8>> = match redis::cmd("LRANGE")
                .arg(self.dead_key(queue))
                .arg(0)
                .arg(limit.min(DEAD_KEPT) as i64 - 1)
                .query_async(&mut c)
                .await
            {
                Ok(v) => v,
                Err(e) => return Err(self.link.fail(epoch, &e)),
            };
            Ok(raw.iter().map(|el| dead::letter(queue, el)).collect())
        })
    }

    fn dead_count<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, Result<u64, Refused>> {
        Box::pin(async move {
            let (epoch, mut c) = self.link.conn().await?;
            match redis::cmd("LLEN")
                .arg(self.dead_key(queue))
                .query_async::<u64>(&mut c)
                .await
            {
                Ok(n) => Ok(n),
                Err(e) => Err(self.link.fail(epoch, &e)),
            }
        })
    }

    fn recent(&self, limit: usize) -> BoxFuture<'_, Result<Vec<RunEvent>, Refused>> {
        Box::pin(async move {
            if limit == 0 {
                return Ok(Vec::new());
            }
            self.flush_events().await?;
            let (epoch, mut c) = self.link.conn().await?;
            let raw: Vec<String> = match redis::cmd("LRANGE")
                .arg(&self.keys.events)
                .arg(0)
                .arg(limit as i64 - 1)
                .query_async(&mut c)
                .await
            {
                Ok(v) => v,
                Err(e) => return Err(self.link.fail(epoch, &e)),
            };
            Ok(raw
                .iter()
                .filter_map(|r| serde_json::from_str(r).ok())
                .collect())
        })
    }
}
