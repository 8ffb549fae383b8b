//! Storing results, with their runs' late acks in the same script call.
//!
//! Why here and not a pipeline of store-then-LREM: a pipeline runs every
//! command whatever the one before answered, so a late ack went out even
//! when its result could not be stored (a result key holding a set: Redis
//! answers WRONGTYPE), and the one script error failed the whole round —
//! every run in it reported a failure, and their claims, acked already,
//! could not be given back. Now `store.lua` stores each key on its own
//! (`redis.pcall`) and acks a run only after its result is stored.
//!
//! A result Redis refuses is kept here, its claim still held (so the lease
//! keeps it from other workers), and stored again by the background task
//! every tick (a third of the lease) until it lands — then the claim is
//! acked in the same script. If this process stops first, its claims are
//! recovered and the run is delivered again: nothing is acked unstored.

use ::redis::{Pipeline, Value};

use std::collections::{BTreeMap, HashSet};

use super::results::NOTIFY_CAP;
use super::settle::HELD_OLDEST_FIRST;
use super::wire::{bytes, int, stored};
use super::{EVENTS_KEPT, EVENTS_PER_ENTRY, RedisBroker, log};
use crate::broker::error::kind_of_text;
use crate::task::spec::{Receipt, Round, RunEvent};
use crate::task::state::{BrokerErrorKind, Outcome, Refused, State};

/// How many results one store script call writes: a round's worth, kept
/// short because Redis runs one script at a time.
const STORE_CHUNK: usize = 256;

/// The bucket of a final state's tally that a result expiring at `expires`
/// (ms) is counted in, named by its end (ms): buckets are a 1024th of the
/// result ttl wide, so a tally holds about 1024 fields at most, and a
/// result is counted until at most that long after it expired. The same
/// rule as `lua/store.lua`'s.
pub(super) fn tally_bucket(expires: u64, ttl: u64) -> u64 {
    let width = ttl.div_ceil(1024).max(1);
    expires.div_ceil(width) * width
}

/// A result Redis refused to write, with the late ack waiting for it.
pub(super) struct Unstored {
    pub(super) outcome: Outcome,
    pub(super) late: Option<Receipt>,
}

impl RedisBroker {
    /// Adds the store script calls for `items` (an outcome and the late ack
    /// to make once it is stored) to `p`, one per [`STORE_CHUNK`]; their
    /// replies are not ignored: see [`RedisBroker::stores_failed`].
    pub(super) fn add_stores(&self, p: &mut Pipeline, items: &[(&Outcome, Option<&Receipt>)]) {
        if self.cluster {
            // One key, its own slot: no count index, the late ack after
            // (see `acks_after`).
            for (o, _) in items {
                let mut c = ::redis::cmd("EVALSHA");
                c.arg(&self.scripts.store.sha)
                    .arg(1)
                    .arg(self.result_key(&o.id))
                    .arg(self.result_ms)
                    .arg(NOTIFY_CAP)
                    .arg("0")
                    .arg(stored(o))
                    .arg(if o.state.is_final() { "1" } else { "0" })
                    .arg("")
                    .arg("");
                p.add_command(c);
            }
            return;
        }
        for chunk in items.chunks(STORE_CHUNK) {
            let mut c = ::redis::cmd("EVALSHA");
            let tallies: Vec<String> = self.tally_keys().collect();
            c.arg(&self.scripts.store.sha)
                .arg(chunk.len() + State::ALL.len() + tallies.len());
            for (o, _) in chunk {
                c.arg(self.result_key(&o.id));
            }
            c.arg(self.count_keys().collect::<Vec<_>>());
            c.arg(tallies);
            c.arg(self.result_ms).arg(NOTIFY_CAP).arg("1");
            for (o, late) in chunk {
                c.arg(stored(o))
                    .arg(if o.state.is_final() { "1" } else { "0" });
                match late.and_then(|r| Some((r, r.raw.as_ref()?))) {
                    Some((r, el)) => c
                        .arg(self.key(&r.queue, "held:", &self.consumer))
                        .arg(&**el),
                    None => c.arg("").arg(""),
                };
            }
            p.add_command(c);
        }
    }

    /// Adds `events` to `p`: one XADD per [`EVENTS_PER_ENTRY`] of them onto
    /// the event log, each event a field `e` of the entry (newest first, as
    /// the log is read), capped near [`EVENTS_KEPT`] events: an entry of n
    /// events trims the log to about `EVENTS_KEPT / n` entries. Both a round
    /// and a lone `record` write them so.
    ///
    /// Why entries of several: one XADD per run was a tenth of Redis's CPU
    /// per task in a drain (3 µs inside the command, as much again to read
    /// and answer it), and a round carries the events of all its runs.
    pub(super) fn add_events(&self, p: &mut Pipeline, events: &[RunEvent]) -> Result<(), Refused> {
        if events.is_empty() {
            return Ok(());
        }
        let key = self.events_key();
        for chunk in events.chunks(EVENTS_PER_ENTRY) {
            let c = p
                .cmd("XADD")
                .arg(&key)
                .arg("MAXLEN")
                .arg("~")
                .arg(EVENTS_KEPT.div_ceil(chunk.len()))
                .arg("*");
            for e in chunk.iter().rev() {
                let json = serde_json::to_string(e)
                    .map_err(|e| Refused::broker(BrokerErrorKind::Data, e.to_string()))?;
                c.arg("e").arg(json);
            }
            c.ignore();
        }
        Ok(())
    }

    /// How many replies [`RedisBroker::add_stores`] adds for `n` items.
    pub(super) fn store_calls(&self, n: usize) -> usize {
        if self.cluster {
            n
        } else {
            n.div_ceil(STORE_CHUNK)
        }
    }

    /// On a Cluster, the late acks of results stored (a held list is in
    /// its queue's slot, a result in its own, so the store script cannot
    /// make them): made now, after the store answered. Failing, the claim
    /// stays held and comes back by the sweep or `recover()`; the run's
    /// stored result is found then, and it is not run again.
    pub(super) async fn acks_after<'a>(&self, late: impl Iterator<Item = &'a Receipt>) {
        if !self.cluster {
            return;
        }
        let mut p = ::redis::pipe();
        for rc in late {
            if let Some(el) = &rc.raw {
                p.cmd("LREM")
                    .arg(self.key(&rc.queue, "held:", &self.consumer))
                    .arg(HELD_OLDEST_FIRST)
                    .arg(&**el)
                    .ignore();
            }
        }
        if !p.is_empty()
            && let Err(e) = self.run(&p, true).await
        {
            log(&format!("{}: late acks after their results: {e}", self.url));
        }
    }

    /// On a Cluster, the count indexes of what the store calls for `items`
    /// wrote (each reply is the flag and the state the key held before):
    /// moved from the old state's index to the new one's, expiring with
    /// the result, as `store.lua` does on one Redis. Answers the replies as
    /// [`RedisBroker::stores_failed`] reads them (the flags only). Best
    /// effort: a count that failed to move is logged, the result stands.
    pub(super) async fn index_after(
        &self,
        replies: &[Value],
        items: &[(&Outcome, Option<&Receipt>)],
    ) -> Vec<Value> {
        if !self.cluster {
            return replies.to_vec();
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let expires = now + self.result_ms;
        let bucket = tally_bucket(expires, self.result_ms);
        let mut p = ::redis::pipe();
        let mut touched = HashSet::new();
        let mut tallied: BTreeMap<&str, i64> = BTreeMap::new();
        let mut flags = Vec::with_capacity(replies.len());
        for (r, (o, _)) in replies.iter().zip(items) {
            let (flag, was) = match r {
                Value::Array(a) => (a.first().cloned().unwrap_or(Value::Nil), a.get(1)),
                other => (other.clone(), None),
            };
            if int(&flag) == Some(1) {
                let key = self.result_key(&o.id);
                let new = o.state.name();
                if let Some(was) = was
                    .and_then(bytes)
                    .filter(|w| !w.is_empty() && *w != new.as_bytes())
                {
                    p.cmd("ZREM")
                        .arg(format!(
                            "{}count:{}",
                            self.prefix,
                            String::from_utf8_lossy(was)
                        ))
                        .arg(&key)
                        .ignore();
                }
                if o.state.is_final() {
                    *tallied.entry(new).or_default() += 1;
                } else {
                    p.cmd("ZADD")
                        .arg(format!("{}count:{new}", self.prefix))
                        .arg(expires)
                        .arg(&key)
                        .ignore();
                    touched.insert(new);
                }
            }
            flags.push(Value::Array(vec![flag]));
        }
        // Answered: a tally whose bucket this opened drops its ended ones.
        for (s, k) in &tallied {
            p.cmd("ZADD")
                .arg(self.tally_key(s))
                .arg("INCR")
                .arg(*k)
                .arg(bucket);
        }
        for s in touched {
            p.cmd("ZREMRANGEBYSCORE")
                .arg(format!("{}count:{s}", self.prefix))
                .arg("-inf")
                .arg(now)
                .ignore();
        }
        if p.is_empty() {
            return flags;
        }
        match self.run(&p, false).await {
            Ok(got) => {
                let opened = tallied
                    .iter()
                    .zip(&got)
                    .any(|((_, k), v)| int(v) == Some(*k));
                if opened {
                    self.trim_ended(now as i64).await;
                }
            }
            Err(e) => log(&format!(
                "{}: the count indexes were not updated: {e}",
                self.url
            )),
        }
        flags
    }

    /// On a Cluster, drops the ended buckets of every final state's tally
    /// (on one Redis the store script does it as it opens a bucket; reads
    /// them first: a tally is at most ~1 000 buckets).
    async fn trim_ended(&self, now: i64) {
        let keys: Vec<String> = self.tally_keys().collect();
        let mut p = ::redis::pipe();
        for k in &keys {
            p.cmd("ZRANGE").arg(k).arg(0).arg(-1);
        }
        let Ok(got) = self.run(&p, false).await else {
            return;
        };
        let mut p = ::redis::pipe();
        for (k, v) in keys.iter().zip(&got) {
            let Value::Array(bs) = v else { continue };
            let past: Vec<&[u8]> = bs
                .iter()
                .filter(|b| int(b).is_some_and(|end| end <= now))
                .filter_map(bytes)
                .collect();
            for chunk in past.chunks(1000) {
                p.cmd("ZREM").arg(k).arg(chunk).ignore();
            }
        }
        if !p.is_empty()
            && let Err(e) = self.run(&p, false).await
        {
            log(&format!(
                "{}: ended tally buckets not dropped: {e}",
                self.url
            ));
        }
    }

    /// Reads the store calls' replies: the index and Redis's reason for
    /// every item not stored (and so not acked).
    pub(super) fn stores_failed(replies: &[Value], n: usize) -> Vec<(usize, String)> {
        let mut bad = Vec::new();
        let mut i = 0;
        for r in replies {
            let flags: &[Value] = match r {
                Value::Array(a) => a,
                _ => &[],
            };
            for f in flags {
                if int(f).is_none_or(|x| x != 0 && x != 1) {
                    let why = bytes(f).map_or_else(
                        || format!("{f:?}"),
                        |b| String::from_utf8_lossy(b).into_owned(),
                    );
                    bad.push((i, why));
                }
                i += 1;
            }
        }
        // A reply that was short answered nothing for the rest: not stored.
        bad.extend((i..n).map(|k| (k, "no answer from the store script".to_string())));
        bad
    }

    /// Stores `outcomes` (no late acks), refusing with the first key Redis
    /// would not write.
    pub(super) async fn store_all(&self, outcomes: &[Outcome]) -> Result<(), Refused> {
        if outcomes.is_empty() {
            return Ok(());
        }
        let items: Vec<_> = outcomes.iter().map(|o| (o, None)).collect();
        let mut p = ::redis::pipe();
        self.add_stores(&mut p, &items);
        let got = self.run(&p, true).await?;
        let got = self.index_after(&got, &items).await;
        match Self::stores_failed(&got, items.len()).first() {
            None => Ok(()),
            Some((i, why)) => Err(Refused::broker(
                // The error Redis gave for the key, or the script
                // answering something else.
                match kind_of_text(why) {
                    BrokerErrorKind::Other => BrokerErrorKind::Script,
                    k => k,
                },
                format!(
                    "{}: the result of {:?} was not stored: {why}",
                    self.url, outcomes[*i].id
                ),
            )),
        }
    }

    /// Keeps results Redis refused (their claims stay held) for the
    /// background task to store again.
    pub(super) fn keep_unstored(&self, items: Vec<(Unstored, String)>) {
        if items.is_empty() {
            return;
        }
        for (u, why) in &items {
            log(&format!(
                "{}: the result of {:?} was not stored ({why}); its claim stays held and the store is retried",
                self.url, u.outcome.id
            ));
        }
        self.unstored().extend(items.into_iter().map(|(u, _)| u));
    }

    fn unstored(&self) -> std::sync::MutexGuard<'_, Vec<Unstored>> {
        self.unstored.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The background task's retry of kept results: stored and acked
    /// together, or kept again.
    pub(super) async fn retry_unstored(&self) {
        let kept = std::mem::take(&mut *self.unstored());
        if kept.is_empty() {
            return;
        }
        let items: Vec<_> = kept.iter().map(|u| (&u.outcome, u.late.as_ref())).collect();
        let mut p = ::redis::pipe();
        self.add_stores(&mut p, &items);
        let got = match self.run(&p, false).await {
            Ok(v) => v,
            Err(_) => {
                self.unstored().extend(kept);
                return;
            }
        };
        let got = self.index_after(&got, &items).await;
        let bad = Self::stores_failed(&got, kept.len());
        let mut again = Vec::new();
        let mut landed = Vec::new();
        let mut b = bad.into_iter().peekable();
        for (i, u) in kept.into_iter().enumerate() {
            if b.peek().is_some_and(|(k, _)| *k == i) {
                again.push((u, b.next().map(|(_, w)| w).unwrap_or_default()));
            } else if let Some(r) = u.late {
                landed.push(r);
            }
        }
        self.acks_after(landed.iter()).await;
        self.settled(landed.iter());
        if !again.is_empty() {
            log(&format!(
                "{}: {} result(s) still not stored ({}); their claims stay held",
                self.url,
                again.len(),
                again[0].1
            ));
            self.unstored().extend(again.into_iter().map(|(u, _)| u));
        }
    }

    /// The whole round in one pipeline: acks (LREM), stores with their
    /// late acks (the store script: a run is acked once its result is
    /// stored), events (XADD), revoked marks (GET). A result Redis refuses
    /// does not fail the round: it is kept and retried, its claim held.
    pub(super) async fn round_inner(&self, r: Round) -> Result<Vec<bool>, Refused> {
        let mut p = ::redis::pipe();
        // A late ack with no outcome to wait for is a plain ack.
        let orphans = r.after.iter().filter(|(i, _)| *i >= r.outcomes.len());
        for rc in r.acks.iter().chain(orphans.map(|(_, rc)| rc)) {
            if let Some(el) = &rc.raw {
                p.cmd("LREM")
                    .arg(self.key(&rc.queue, "held:", &self.consumer))
                    .arg(HELD_OLDEST_FIRST)
                    .arg(&**el)
                    .ignore();
            }
        }
        let mut late: Vec<Option<&Receipt>> = vec![None; r.outcomes.len()];
        for (i, rc) in &r.after {
            if let Some(l) = late.get_mut(*i) {
                *l = Some(rc);
            }
        }
        let items: Vec<_> = r.outcomes.iter().zip(late.iter().copied()).collect();
        self.add_stores(&mut p, &items);
        self.add_events(&mut p, &r.events)?;
        for id in &r.ask {
            p.cmd("GET").arg(self.revoked_key(id));
        }
        let got = self.run(&p, true).await?;
        let calls = self.store_calls(items.len()).min(got.len());
        let (stores, asked) = got.split_at(calls);
        let stores = self.index_after(stores, &items).await;
        let bad = Self::stores_failed(&stores, items.len());
        let failed: HashSet<usize> = bad.iter().map(|(i, _)| *i).collect();
        self.acks_after(
            r.after
                .iter()
                .filter(|(i, _)| *i < r.outcomes.len() && !failed.contains(i))
                .map(|(_, rc)| rc),
        )
        .await;
        self.settled(
            r.acks.iter().chain(
                r.after
                    .iter()
                    .filter(|(i, _)| !failed.contains(i))
                    .map(|(_, rc)| rc),
            ),
        );
        self.keep_unstored(
            bad.into_iter()
                .filter_map(|(i, why)| Some((unstored(r.outcomes.get(i)?, late[i]), why)))
                .collect(),
        );
        let now = self.clock.now();
        Ok(asked
            .iter()
            .map(|v| int(v).is_some_and(|until| until > now))
            .collect())
    }

    /// Forgets delivered claims that are settled now (the sweep may hand
    /// back what is held and not delivered).
    pub(super) fn settled<'a>(&self, receipts: impl Iterator<Item = &'a Receipt>) {
        let mut o = self.outs();
        for rc in receipts {
            if let Some(set) = o.get_mut(&*rc.queue) {
                set.remove(&rc.token);
            }
        }
    }
}

/// A late ack kept with its result: the receipt is cloned (its bytes are
/// shared).
pub(super) fn unstored(outcome: &Outcome, late: Option<&Receipt>) -> Unstored {
    Unstored {
        outcome: outcome.clone(),
        late: late.cloned(),
    }
}

#[cfg(test)]
mod tests {
    use super::tally_bucket;

    #[test]
    fn a_tally_bucket_ends_at_or_after_the_expiry_within_its_width() {
        // A day's ttl: buckets of 84 375 ms (a 1024th), named by their end.
        let day: u64 = 86_400_000;
        let w = day.div_ceil(1024);
        assert_eq!(
            tally_bucket(w * 10, day),
            w * 10,
            "an end is its own bucket"
        );
        assert_eq!(tally_bucket(w * 10 + 1, day), w * 11);
        for e in [1, 999, 1_767_225_600_123, 1_767_225_684_375] {
            let b = tally_bucket(e, day);
            assert!(b >= e && b - e < w && b.is_multiple_of(w), "{e} → {b}");
        }
        // A ttl under 1024 ms: buckets of one ms, the expiry itself.
        assert_eq!(tally_bucket(12_345, 100), 12_345);
    }
}
