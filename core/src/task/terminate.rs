//! Terminate marks: the ids a `revoke(terminate=true)` — made here or in
//! another process on the broker — asked this process to stop, each with the
//! signal it named, kept for [`TERMINATE_KEEP`] of the
//! app's clock; and the [`Hearers`] a broker tells when a terminate comes
//! from another process.
//!
//! A mark only matters to a run in progress here: the run's `terminated`
//! wait takes it at once when the bell rings (or when it starts waiting, if
//! the mark came first). A run that is not here — on another worker, long
//! finished, or never sent — never takes its mark, so a plain set grew by
//! every id ever terminated from an admin that runs for months. Marks now
//! expire: whatever has not been taken within the keep is dropped at the
//! next mark, and an expired mark is never taken. A run that starts after
//! the keep is skipped anyway: the broker keeps the revoke itself for
//! `REVOKE_KEEP`.
//!
//! Every app marks the ids a terminate names whether the run is here or
//! not: the app that revokes cannot know which process runs it, so a broker
//! that reaches other processes broadcasts the terminate, and each app on
//! that broker marks it (see [`Hearers`]). Only the process running the run
//! takes its mark; the others' expire.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How long a terminate mark waits to be taken: 60 s of the app's clock,
/// far beyond the moment between a run's revoked check and its wait
/// starting, and short enough that a burst of marks for runs elsewhere is
/// gone within the minute.
pub const TERMINATE_KEEP: i64 = 60_000;

/// Ids asked to terminate, each with when its mark expires (ms) and the
/// signal asked for.
#[derive(Debug, Default)]
pub(crate) struct Marks {
    until: HashMap<String, (i64, i32)>,
}

impl Marks {
    /// Marks `ids` with `signal` at `now`, dropping every mark already
    /// expired.
    pub(crate) fn mark(&mut self, ids: &[String], signal: i32, now: i64) {
        self.until.retain(|_, (until, _)| *until > now);
        let until = now.saturating_add(TERMINATE_KEEP);
        for id in ids {
            self.until.insert(id.clone(), (until, signal));
        }
    }

    /// The signal `id` is marked with, if marked and unexpired at `now`,
    /// forgetting its mark either way.
    pub(crate) fn take(&mut self, id: &str, now: i64) -> Option<i32> {
        self.until
            .remove(id)
            .filter(|(until, _)| *until > now)
            .map(|(_, signal)| signal)
    }

    /// How many marks are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.until.len()
    }
}

/// Told the ids and the signal of every terminate a broker hears (from any
/// process on it, this one's included); answers `false` once whoever it
/// tells is gone (its app was dropped), and is forgotten then.
pub type OnTerminate = Arc<dyn Fn(&[String], i32) -> bool + Send + Sync>;

/// The apps a broker tells of the terminates it hears: each app on a broker
/// adds itself when it is made ([`crate::task::Broker::on_terminate`]).
#[derive(Default)]
pub struct Hearers {
    all: Mutex<Vec<OnTerminate>>,
}

impl Hearers {
    /// Adds `hear`.
    pub fn add(&self, hear: OnTerminate) {
        self.lock().push(hear);
    }

    /// Tells every hearer of a terminate of `ids` with `signal`, forgetting
    /// those that are gone.
    pub fn tell(&self, ids: &[String], signal: i32) {
        // Called outside the lock: a hearer may take locks of its own.
        let all: Vec<OnTerminate> = self.lock().clone();
        let gone: Vec<OnTerminate> = all.into_iter().filter(|h| !h(ids, signal)).collect();
        if !gone.is_empty() {
            self.lock()
                .retain(|h| !gone.iter().any(|g| Arc::ptr_eq(g, h)));
        }
    }

    /// How many hearers are kept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no hearer is kept.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<OnTerminate>> {
        self.all.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl std::fmt::Debug for Hearers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hearers({})", self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::{App, VirtualClock};

    #[test]
    fn marks_expire_after_their_keep() {
        let mut m = Marks::default();
        let ids: Vec<String> = (0..10_000).map(|i| format!("run-{i}")).collect();
        m.mark(&ids, 15, 1_000);
        assert_eq!(m.len(), 10_000);
        // Within the keep a mark is taken, once, with its signal.
        assert_eq!(m.take("run-1", 1_000 + TERMINATE_KEEP - 1), Some(15));
        assert_eq!(m.take("run-1", 1_000 + TERMINATE_KEEP - 1), None);
        // Past it, an expired mark is not taken...
        assert_eq!(m.take("run-2", 1_000 + TERMINATE_KEEP), None);
        // ...and the next mark drops every expired one.
        m.mark(&["late".to_string()], 9, 1_000 + TERMINATE_KEEP);
        assert_eq!(m.len(), 1);
        assert_eq!(m.take("late", 1_000 + TERMINATE_KEEP), Some(9));
    }

    #[tokio::test]
    async fn an_apps_terminate_marks_expire_on_its_clock() {
        let clock = VirtualClock::new(1_000_000);
        let app = App::memory(Some(clock.clone()));
        let ids: Vec<String> = (0..10_000).map(|i| format!("gone-{i}")).collect();
        app.revoke(&ids, true).await.unwrap();
        assert_eq!(app.terminate_marks(), 10_000);
        // Positive control: a fresh mark is taken.
        assert_eq!(app.take_terminate("gone-7"), Some(crate::task::SIGTERM));
        clock.advance(TERMINATE_KEEP);
        assert_eq!(
            app.take_terminate("gone-8"),
            None,
            "an expired mark was taken"
        );
        app.revoke(&["new".to_string()], true).await.unwrap();
        assert_eq!(app.terminate_marks(), 1, "expired marks were kept");
    }

    #[tokio::test]
    async fn a_terminate_keeps_its_signal_and_a_bad_one_is_refused() {
        let app = App::memory(None);
        let id = vec!["r".to_string()];
        app.revoke_with(&id, true, 9).await.unwrap();
        assert_eq!(app.take_terminate("r"), Some(9));
        let e = app.revoke_with(&id, true, 0).await.unwrap_err();
        assert!(e.to_string().contains("`signal`"), "{e}");
        // A revoke without terminate marks nothing, whatever its signal.
        app.revoke_with(&id, false, 9).await.unwrap();
        assert_eq!(app.take_terminate("r"), None);
    }

    #[test]
    fn hearers_forget_whoever_is_gone() {
        let h = Hearers::default();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let h2 = heard.clone();
        h.add(Arc::new(move |ids: &[String], sig| {
            h2.lock().unwrap().push((ids.to_vec(), sig));
            true
        }));
        h.add(Arc::new(|_: &[String], _| false));
        assert_eq!(h.len(), 2);
        h.tell(&["a".to_string()], 9);
        assert_eq!(h.len(), 1, "the gone hearer was kept");
        h.tell(&["b".to_string()], 15);
        assert_eq!(
            *heard.lock().unwrap(),
            vec![(vec!["a".to_string()], 9), (vec!["b".to_string()], 15)]
        );
    }
}
