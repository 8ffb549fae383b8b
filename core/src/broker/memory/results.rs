//! Results and chord counts: the memory broker as a [`Backend`] and a
//! [`Counter`].
//!
//! Why here: both are write-once maps with waiters woken by one notify, and
//! apart from the queues they share nothing with claiming.

use crate::hashed::HashSet;
use std::collections::hash_map::Entry;
use std::time::Duration;

use super::MemoryBroker;
use super::state::{Inner, Kept, Stored};
use crate::task::clock::{BoxFuture, Clock};
use crate::task::message::Message;
use crate::task::spec::{Backend, Counter, Joined};
use crate::task::state::{Outcome, Refused};

impl Backend for MemoryBroker {
    fn store(&self, outcomes: Vec<Outcome>) -> BoxFuture<'_, Result<(), Refused>> {
        let now = kept_now();
        let until = now.saturating_add(self.expires());
        let mut g = self.lock();
        g.expire(now);
        for o in outcomes {
            if g.results
                .get(o.id.as_str())
                .is_some_and(|r| r.outcome.state.is_final())
            {
                continue;
            }
            // Woken under the results' lock, which a wait takes to look:
            // it finds the result put in below.
            self.shared.waits.wake([o.id.as_str()]);
            let id: std::sync::Arc<str> = o.id.as_str().into();
            g.results
                .insert(id.clone(), Box::new(Stored { outcome: o, until }));
            g.expiry.push_back((until, Kept::Result(id)));
        }
        drop(g);
        crate::task::clock::done()
    }

    fn fetch<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Outcome>, Refused>> {
        let o = self.lock().result(id, kept_now()).cloned();
        Box::pin(async move { Ok(o) })
    }

    fn wait<'a>(
        &'a self,
        id: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Option<Outcome>, Refused>> {
        let look = move || {
            let g = self.lock();
            g.result(id, kept_now())
                .filter(|o| o.state.is_final())
                .cloned()
        };
        Box::pin(async move { Ok(self.shared.waits.wait_final(id, timeout, look).await) })
    }

    fn forget<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<(), Refused>> {
        let mut g = self.lock();
        for id in ids {
            g.results.remove(id.as_str());
        }
        crate::task::clock::done()
    }
}

/// The time results and chord counts are kept by (epoch ms): the
/// system's, whatever the app's clock, as Redis keeps them by its own — a
/// test that moves a virtual clock days ahead to reach an eta must still
/// find the results stored before the jump, on either broker.
fn kept_now() -> i64 {
    crate::task::clock::SystemClock.now()
}

impl MemoryBroker {
    /// How long a result and a chord count are kept (ms).
    fn expires(&self) -> i64 {
        i64::try_from(self.shared.opts.result_expires.as_millis()).unwrap_or(i64::MAX)
    }
}

impl Inner {
    /// Chord `key`'s count, made (to go after `expires` ms) if there is
    /// none.
    fn chord(
        &mut self,
        key: &str,
        size: u32,
        now: i64,
        expires: i64,
    ) -> &mut (u32, HashSet<String>) {
        self.expire(now);
        match self.chords.entry(key.to_string()) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                self.expiry
                    .push_back((now.saturating_add(expires), Kept::Chord(key.to_string())));
                e.insert((size, HashSet::default()))
            }
        }
    }

    /// Run `id`'s result, unless its time is up at `now`: one past its
    /// time and not yet dropped (drops happen at stores) is gone all the
    /// same, as on Redis.
    fn result(&self, id: &str, now: i64) -> Option<&Outcome> {
        self.results
            .get(id)
            .filter(|r| r.until > now)
            .map(|r| &r.outcome)
    }
}

/// What a chord's part set holds once its callback was sent.
const CHORD_SENT: &str = "~sent";

impl Counter for MemoryBroker {
    fn open(&self, key: &str, size: u32) -> BoxFuture<'_, Result<(), Refused>> {
        self.lock().chord(key, size, kept_now(), self.expires());
        crate::task::clock::done()
    }

    fn arrive<'a>(
        &'a self,
        key: &'a str,
        part: &'a str,
        size: u32,
        callback: &'a Message,
    ) -> BoxFuture<'a, Result<Joined, Refused>> {
        let now = self.now();
        let joined = {
            let mut g = self.lock();
            let entry = g.chord(key, size, kept_now(), self.expires());
            // A sent chord keeps only its mark (as Redis's `~sent`), kept as
            // long as the results are: a redelivered part arriving after the
            // callback went must not start a count that could send it again.
            let fresh = !entry.1.contains(CHORD_SENT) && entry.1.insert(part.to_string());
            if fresh && entry.1.len() as u32 >= entry.0 {
                entry.1.clear();
                entry.1.insert(CHORD_SENT.to_string());
                g.push(callback.clone(), now);
                Joined::Sent
            } else {
                Joined::Waiting
            }
        };
        if joined == Joined::Sent {
            self.shared.published.notify_waiters();
        }
        Box::pin(async move { Ok(joined) })
    }
}
