//! Key names of the layout (see `docs/redis-layout.md`).
//!
//! Why one place: every key of queue `Q` is derived from `P{Q}:`, so the
//! queue lives in one Cluster slot; a key built anywhere else could miss
//! the hash tag.

use super::RedisBroker;
use crate::task::state::State;

impl RedisBroker {
    /// `P{Q}:` — the base every key of queue `Q` is derived from.
    pub(super) fn base(&self, q: &str) -> String {
        let mut s = String::with_capacity(self.prefix.len() + q.len() + 3);
        s.push_str(&self.prefix);
        s.push('{');
        s.push_str(q);
        s.push_str("}:");
        s
    }

    pub(super) fn key(&self, q: &str, what: &str, tail: &str) -> String {
        let mut s = self.base(q);
        s.push_str(what);
        s.push_str(tail);
        s
    }

    pub(super) fn result_key(&self, id: &str) -> String {
        format!("{}result:{id}", self.prefix)
    }

    pub(super) fn revoked_key(&self, id: &str) -> String {
        format!("{}revoked:{id}", self.prefix)
    }

    /// One sorted set, one member (`latest`) scored with the latest end
    /// of any revoke: while it is past, no revoked mark is live, and a claim
    /// reads none.
    pub(super) fn revokes_key(&self) -> String {
        format!("{}revokes", self.prefix)
    }

    pub(super) fn queues_key(&self) -> String {
        format!("{}queues", self.prefix)
    }

    pub(super) fn events_key(&self) -> String {
        format!("{}events", self.prefix)
    }

    /// The seven count indexes `P:count:<STATE>`, in [`State::ALL`] order,
    /// which the store script keeps (see `lua/store.lua`).
    pub(super) fn count_keys(&self) -> impl Iterator<Item = String> + '_ {
        State::ALL
            .iter()
            .map(|s| format!("{}count:{}", self.prefix, s.name()))
    }

    /// The three tallies `P:tally:<STATE>` of the final states, in
    /// [`State::ALL`] order, which the store script keeps (see
    /// `lua/store.lua`).
    pub(super) fn tally_keys(&self) -> impl Iterator<Item = String> + '_ {
        State::ALL
            .iter()
            .filter(|s| s.is_final())
            .map(|s| self.tally_key(s.name()))
    }

    /// A final state's tally, `P:tally:<STATE>`.
    pub(super) fn tally_key(&self, state: &str) -> String {
        format!("{}tally:{state}", self.prefix)
    }

    /// What scripts take as now: the app's time on a virtual clock, else
    /// empty (the script reads Redis TIME).
    pub(super) fn now_arg(&self) -> String {
        if self.clock.is_virtual() {
            self.clock.now().to_string()
        } else {
            String::new()
        }
    }
}
