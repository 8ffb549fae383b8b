//! Terminate marks: the ids a `revoke(terminate=true)` asked this process to
//! stop, each kept for [`TERMINATE_KEEP`] of the app's clock.
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

use std::collections::HashMap;

/// How long a terminate mark waits to be taken: 60 s of the app's clock,
/// far beyond the moment between a run's revoked check and its wait
/// starting, and short enough that a burst of marks for runs elsewhere is
/// gone within the minute.
pub const TERMINATE_KEEP: i64 = 60_000;

/// Ids asked to terminate, each with when its mark expires (ms).
#[derive(Debug, Default)]
pub(crate) struct Marks {
    until: HashMap<String, i64>,
}

impl Marks {
    /// Marks `ids` at `now`, dropping every mark already expired.
    pub(crate) fn mark(&mut self, ids: &[String], now: i64) {
        self.until.retain(|_, until| *until > now);
        let until = now.saturating_add(TERMINATE_KEEP);
        for id in ids {
            self.until.insert(id.clone(), until);
        }
    }

    /// Whether `id` is marked and unexpired at `now`, forgetting its mark
    /// either way.
    pub(crate) fn take(&mut self, id: &str, now: i64) -> bool {
        self.until.remove(id).is_some_and(|until| until > now)
    }

    /// How many marks are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.until.len()
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
        m.mark(&ids, 1_000);
        assert_eq!(m.len(), 10_000);
        // Within the keep a mark is taken, once.
        assert!(m.take("run-1", 1_000 + TERMINATE_KEEP - 1));
        assert!(!m.take("run-1", 1_000 + TERMINATE_KEEP - 1));
        // Past it, an expired mark is not taken...
        assert!(!m.take("run-2", 1_000 + TERMINATE_KEEP));
        // ...and the next mark drops every expired one.
        m.mark(&["late".to_string()], 1_000 + TERMINATE_KEEP);
        assert_eq!(m.len(), 1);
        assert!(m.take("late", 1_000 + TERMINATE_KEEP));
    }

    #[tokio::test]
    async fn an_apps_terminate_marks_expire_on_its_clock() {
        let clock = VirtualClock::new(1_000_000);
        let app = App::memory(Some(clock.clone()));
        let ids: Vec<String> = (0..10_000).map(|i| format!("gone-{i}")).collect();
        app.revoke(&ids, true).await.unwrap();
        assert_eq!(app.terminate_marks(), 10_000);
        // Positive control: a fresh mark is taken.
        assert!(app.take_terminate("gone-7"));
        clock.advance(TERMINATE_KEEP);
        assert!(!app.take_terminate("gone-8"), "an expired mark was taken");
        app.revoke(&["new".to_string()], true).await.unwrap();
        assert_eq!(app.terminate_marks(), 1, "expired marks were kept");
    }
}
