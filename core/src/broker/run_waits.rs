//! Waits on results by run id, for result stores that hear results in this
//! process (the memory broker's store, the `rpc://` reply queue): a result
//! wakes only the waits on its own run.
//!
//! Why not one notify for the store: then every result woke every pending
//! `get()`, each of which looked and went back to sleep, so N pending gets
//! cost N² looks. On the memory broker with 10 000 gets pending a Node drain
//! ran 2.0k/s; with a notify per run 60k/s (`bench/tasks/runs/gets-memory.md`).
//!
//! Both stores wait the same way (look, sleep until a result for the run
//! is heard or the time is up, look again), so the wait is written here
//! once ([`RunWaits::wait_final`]); each store says only how it looks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// The waits on each run's result.
#[derive(Default)]
pub(crate) struct RunWaits {
    runs: Mutex<HashMap<String, (usize, Arc<Notify>)>>,
}

/// One wait's place among its run's waiters: left when dropped, however the
/// wait ends (the last one out removes the run's entry).
struct Waiting<'a> {
    waits: &'a RunWaits,
    id: &'a str,
    /// Notified when a result for the run is heard.
    notify: Arc<Notify>,
}

impl RunWaits {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (usize, Arc<Notify>)>> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Joins the waits on run `id`. Enable a `notified()` of the answer's
    /// notify before looking for the result, so a result heard between the
    /// look and the sleep is not missed.
    fn join<'a>(&'a self, id: &'a str) -> Waiting<'a> {
        let mut g = self.lock();
        let e = g
            .entry(id.to_string())
            .or_insert_with(|| (0, Arc::new(Notify::new())));
        e.0 += 1;
        Waiting {
            waits: self,
            id,
            notify: e.1.clone(),
        }
    }

    /// Waits up to `timeout` for run `id`'s final result: what `look`
    /// answers (the result if it is final, else `None`), looked at first
    /// and again each time a result for the run is heard. `None` when the
    /// time is up first.
    pub(crate) async fn wait_final<T>(
        &self,
        id: &str,
        timeout: Duration,
        look: impl Fn() -> Option<T>,
    ) -> Option<T> {
        let deadline = tokio::time::Instant::now() + timeout;
        let waiting = self.join(id);
        loop {
            let heard = waiting.notify.notified();
            tokio::pin!(heard);
            heard.as_mut().enable();
            if let Some(found) = look() {
                return Some(found);
            }
            tokio::select! {
                _ = &mut heard => {}
                _ = tokio::time::sleep_until(deadline) => return None,
            }
        }
    }

    /// Wakes the waits on each of `ids`. A store may call it under the lock
    /// its waits take to look (this type's own lock is never held while
    /// another is taken), then insert: a woken wait finds the result.
    pub(crate) fn wake<'i>(&self, ids: impl IntoIterator<Item = &'i str>) {
        let g = self.lock();
        if g.is_empty() {
            return;
        }
        for id in ids {
            if let Some((_, n)) = g.get(id) {
                n.notify_waiters();
            }
        }
    }

    /// How many runs have a wait on them.
    #[cfg(test)]
    pub(crate) fn runs(&self) -> usize {
        self.lock().len()
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut g = self.waits.lock();
        if let Some(e) = g.get_mut(self.id) {
            e.0 -= 1;
            if e.0 == 0 {
                g.remove(self.id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wake_reaches_its_own_runs_waits_only() {
        let waits = RunWaits::default();
        let (a1, a2, b) = (waits.join("a"), waits.join("a"), waits.join("b"));
        assert_eq!(waits.runs(), 2);
        let mut heard = [
            a1.notify.notified(),
            a2.notify.notified(),
            b.notify.notified(),
        ]
        .map(Box::pin);
        for n in &mut heard {
            n.as_mut().enable();
        }
        waits.wake(["a", "nobody"]);
        let polled = |n: &mut std::pin::Pin<Box<tokio::sync::futures::Notified<'_>>>| {
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            n.as_mut().poll(&mut cx).is_ready()
        };
        let [x, y, z] = &mut heard;
        assert!(polled(x) && polled(y), "both waits on a are woken");
        assert!(!polled(z), "the wait on b is not");
        drop(heard);
        drop((a1, a2));
        assert_eq!(waits.runs(), 1, "a's entry left with its last wait");
        drop(b);
        assert_eq!(waits.runs(), 0);
    }
}
