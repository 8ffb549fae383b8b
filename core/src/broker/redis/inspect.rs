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
    /// its tally's buckets not yet ended (see `lua/store.lua`) — a fixed
    /// number of commands however many results are kept, where a SCAN of
    /// `P:result:*` was O(results). Ended buckets it finds are dropped.
    pub(super) async fn counts_inner(&self) -> Result<BTreeMap<State, u64>, Refused> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut p = ::redis::pipe();
        let mut tallies = self.tally_keys();
        let mut keys = Vec::with_capacity(State::ALL.len());
        for (s, index) in State::ALL.iter().zip(self.count_keys()) {
            match s.is_final().then(|| tallies.next()).flatten() {
                Some(tally) => {
                    p.cmd("ZRANGE").arg(&tally).arg(0).arg(-1).arg("WITHSCORES");
                    keys.push(Some(tally));
                }
                None => {
                    p.cmd("ZCOUNT")
                        .arg(index)
                        .arg(format!("({now}"))
                        .arg("+inf");
                    keys.push(None);
                }
            }
        }
        let got = self.run(&p, false).await?;
        let mut counts = BTreeMap::new();
        let mut ended = Vec::new();
        for ((s, tally), v) in State::ALL.iter().zip(keys).zip(&got) {
            let Some(tally) = tally else {
                if let Some(n) = int(v).filter(|n| *n > 0) {
                    counts.insert(*s, n as u64);
                }
                continue;
            };
            // Bucket, count pairs: flat in RESP2, a pair each in RESP3.
            let pairs: Vec<(&Value, &Value)> = match v {
                Value::Array(kv) if kv.iter().all(|x| matches!(x, Value::Array(_))) => kv
                    .iter()
                    .filter_map(|x| match x {
                        Value::Array(p) if p.len() == 2 => Some((&p[0], &p[1])),
                        _ => None,
                    })
                    .collect(),
                Value::Array(kv) => kv.chunks_exact(2).map(|p| (&p[0], &p[1])).collect(),
                _ => continue,
            };
            let mut live = 0u64;
            let mut past = Vec::new();
            for (f, n) in pairs {
                let (Some(end), Some(n)) = (int(f), count_of(n)) else {
                    continue;
                };
                if end > now {
                    live += n;
                } else if let Some(b) = bytes(f) {
                    past.push(b.to_vec());
                }
            }
            if live > 0 {
                counts.insert(*s, live);
            }
            if !past.is_empty() {
                ended.push((tally, past));
            }
        }
        if !ended.is_empty() {
            self.trim_tallies(ended).await;
        }
        Ok(counts)
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

/// A tally's count: a sorted set score (a whole number written as a
/// double, `"16"`; a double in RESP3).
pub(super) fn count_of(v: &Value) -> Option<u64> {
    match v {
        Value::Double(d) => Some(d.max(0.0) as u64),
        other => {
            let s = std::str::from_utf8(bytes(other)?).ok()?;
            Some(s.trim().parse::<f64>().ok()?.max(0.0) as u64)
        }
    }
}
