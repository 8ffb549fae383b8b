//! What the admin page reads: queue sizes, stored outcomes per state,
//! consumers and what they hold, and the run event log.
//!
//! Why scripts and indexes: a queue's sizes come from one script per queue
//! (its ten steps, delayed and held lists), counts from one ZCOUNT per state
//! — a fixed number of commands however much Redis holds.

use std::collections::BTreeMap;

use ::redis::Value;

use super::RedisBroker;
use super::scripts::evalsha;
use super::wire::{STEPS, bytes, int};
use crate::task::spec::{ConsumerInfo, QueueInfo, RunEvent};
use crate::task::state::{Refused, State};

/// How many run events the Redis layout keeps: about ten thousand, in a
/// stream trimmed with `MAXLEN ~` (Redis trims whole nodes, so a little more
/// may stay) — enough for an admin page's recent runs, bounded whatever the
/// traffic.
pub const EVENTS_KEPT: usize = 10_000;

/// How many run events one entry of the event log carries at most: a
/// round's events go in one XADD. Bounded so the log's cap, counted in
/// entries, stays near [`EVENTS_KEPT`] events (at worst, entries of one
/// event after entries of this many keep sixteen times as many until the
/// next full entry trims them).
pub const EVENTS_PER_ENTRY: usize = 16;

impl RedisBroker {
    /// The queues this prefix has seen, sorted.
    async fn queue_names(&self) -> Result<Vec<String>, Refused> {
        let v = self
            .one(
                ::redis::cmd("SMEMBERS").arg(self.queues_key()).clone(),
                false,
            )
            .await?;
        let mut names: Vec<String> = match v {
            Value::Array(a) | Value::Set(a) => a
                .iter()
                .filter_map(|x| bytes(x).map(|b| String::from_utf8_lossy(b).into_owned()))
                .collect(),
            _ => Vec::new(),
        };
        names.sort();
        Ok(names)
    }

    pub(super) async fn stats(&self) -> Result<Vec<QueueInfo>, Refused> {
        let names = self.queue_names().await?;
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut p = ::redis::pipe();
        for q in &names {
            p.add_command(evalsha(&self.scripts.stats, &self.base(q)));
        }
        let got = self.run(&p, false).await?;
        Ok(names
            .into_iter()
            .zip(got)
            .map(|(name, v)| {
                let n: Vec<u64> = match v {
                    Value::Array(a) => a
                        .iter()
                        .map(|x| int(x).unwrap_or(0).max(0) as u64)
                        .collect(),
                    _ => Vec::new(),
                };
                let at = |i: usize| n.get(i).copied().unwrap_or(0);
                QueueInfo {
                    name,
                    ready: (0..STEPS)
                        .filter(|s| at(*s as usize) > 0)
                        .map(|s| (s, at(s as usize)))
                        .collect(),
                    delayed: at(STEPS as usize),
                    unacked: at(STEPS as usize + 1),
                }
            })
            .collect())
    }

    /// Stored outcomes per state: for a state a result may leave, one
    /// ZCOUNT of its index's entries not yet expired; for a final state,
    /// the sum of its tally's buckets not yet ended (see `lua/store.lua`,
    /// which drops the ended ones) — a fixed number of commands however
    /// many results are kept, where a SCAN of `P:result:*` was O(results).
    pub(super) async fn counts_inner(&self) -> Result<BTreeMap<State, u64>, Refused> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut p = ::redis::pipe();
        for (s, index) in State::ALL.iter().zip(self.count_keys()) {
            if s.is_final() {
                p.cmd("ZRANGE")
                    .arg(self.tally_key(s.name()))
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES");
            } else {
                p.cmd("ZCOUNT")
                    .arg(index)
                    .arg(format!("({now}"))
                    .arg("+inf");
            }
        }
        let got = self.run(&p, false).await?;
        Ok(State::ALL
            .iter()
            .zip(&got)
            .filter_map(|(s, v)| {
                let n = match v {
                    // Bucket end, count, bucket end, count...
                    Value::Array(kv) if s.is_final() => kv
                        .chunks_exact(2)
                        .filter(|b| int(&b[0]).is_some_and(|end| end > now))
                        .filter_map(|b| int(&b[1]))
                        .sum(),
                    other => int(other)?,
                };
                (n > 0).then_some((*s, n as u64))
            })
            .collect())
    }

    pub(super) async fn consumers_inner(&self) -> Result<Vec<ConsumerInfo>, Refused> {
        let names = self.queue_names().await?;
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut p = ::redis::pipe();
        for q in &names {
            p.add_command(evalsha(&self.scripts.holders, &self.base(q)));
        }
        let now = self.clock.now();
        let mut by: BTreeMap<String, ConsumerInfo> = BTreeMap::new();
        for v in self.run(&p, false).await? {
            let Value::Array(cs) = v else { continue };
            for c in cs {
                let Value::Array(f) = c else { continue };
                let Some(name) = f.first().and_then(bytes) else {
                    continue;
                };
                let name = String::from_utf8_lossy(name).into_owned();
                let pttl = f.get(1).and_then(int).unwrap_or(-2);
                let info = by.entry(name.clone()).or_insert_with(|| ConsumerInfo {
                    name,
                    lease_until: Some(i64::MAX),
                    holding: Vec::new(),
                });
                // The earliest lease of its queues; none once one is gone.
                info.lease_until = match (info.lease_until, pttl > 0) {
                    (Some(u), true) => Some(u.min(now + pttl)),
                    _ => None,
                };
                if let Some(Value::Array(ids)) = f.get(2) {
                    info.holding.extend(
                        ids.iter()
                            .filter_map(bytes)
                            .map(|b| String::from_utf8_lossy(b).into_owned()),
                    );
                }
            }
        }
        Ok(by.into_values().collect())
    }

    pub(super) async fn record_inner(&self, events: Vec<RunEvent>) -> Result<(), Refused> {
        if events.is_empty() {
            return Ok(());
        }
        let mut p = ::redis::pipe();
        self.add_events(&mut p, &events)?;
        self.run(&p, false).await.map(|_| ())
    }

    /// The newest `limit` events, newest first. An entry holds one event or
    /// up to [`EVENTS_PER_ENTRY`], so the log is read in pages from the
    /// newest entry back, each page sized by the events per entry seen so
    /// far (the first by the fullest entries): reading `limit` entries at
    /// once could fetch and parse sixteen times the events asked for, on
    /// every tick of an admin page.
    pub(super) async fn recent_inner(&self, limit: usize) -> Result<Vec<RunEvent>, Refused> {
        let mut out = Vec::new();
        // Where the next page starts: "+" (the newest), then just before
        // the oldest entry read ("(" makes it exclusive).
        let mut from = "+".to_string();
        let (mut entries_seen, mut events_seen) = (0usize, 0usize);
        while out.len() < limit {
            let want = limit - out.len();
            let per = if entries_seen == 0 {
                EVENTS_PER_ENTRY
            } else {
                events_seen.div_ceil(entries_seen).max(1)
            };
            let count = want.div_ceil(per).max(1);
            let v = self
                .one(
                    ::redis::cmd("XREVRANGE")
                        .arg(self.events_key())
                        .arg(&from)
                        .arg("-")
                        .arg("COUNT")
                        .arg(count)
                        .clone(),
                    false,
                )
                .await?;
            let Value::Array(page) = v else { break };
            for entry in &page {
                // [id, [field, value, ...]], its events newest first.
                let Value::Array(parts) = entry else { continue };
                let Some(Value::Array(fields)) = parts.get(1) else {
                    continue;
                };
                entries_seen += 1;
                for pair in fields.chunks(2) {
                    if let [Value::BulkString(f), Value::BulkString(val)] = pair
                        && f.as_slice() == b"e"
                    {
                        events_seen += 1;
                        if let Ok(ev) = serde_json::from_slice::<RunEvent>(val) {
                            out.push(ev);
                        }
                    }
                }
            }
            // The oldest entry was read, or none names where to go on.
            let last = match page.last() {
                Some(Value::Array(parts)) if page.len() == count => parts.first().and_then(bytes),
                _ => None,
            };
            let Some(id) = last else { break };
            from = format!("({}", String::from_utf8_lossy(id));
        }
        out.truncate(limit);
        Ok(out)
    }
}
