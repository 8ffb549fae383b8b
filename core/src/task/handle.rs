//! A run, or a set of runs, a caller can wait on and look at.

use std::time::Duration;

use serde_json::Value;

use super::app::App;
use super::state::{Refused, State};

/// A run or a set of runs: wait on it, look at it, revoke it.
#[derive(Clone)]
pub struct Handle {
    app: App,
    ids: Vec<String>,
    all: bool,
    /// A chain's earlier links, first first: its [`Handle::parent`]s.
    parents: Vec<String>,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("ids", &self.ids)
            .field("all", &self.all)
            .finish()
    }
}

impl Handle {
    pub(crate) fn new(app: App, ids: Vec<String>, all: bool) -> Handle {
        Handle {
            app,
            ids,
            all,
            parents: Vec::new(),
        }
    }

    /// The same handle whose parents are `parents` (a chain's earlier
    /// links, first first).
    pub(crate) fn with_parents(mut self, parents: Vec<String>) -> Handle {
        self.parents = parents;
        self
    }

    /// A handle over `ids` of `app`; `all` makes `get` answer the list of
    /// results in the order of `ids` (moontask's `Handle::of`). What a
    /// binding that keeps only the ids on its side rebuilds a set from.
    pub fn of(app: App, ids: Vec<String>, all: bool) -> Handle {
        Handle::new(app, ids, all)
    }

    /// The run before it, when it is a chain's link sent by this process
    /// (Celery's `AsyncResult.parent`): the previous link, whose own parent
    /// is the one before.
    pub fn parent(&self) -> Option<Handle> {
        let (last, rest) = self.parents.split_last()?;
        Some(Handle::new(self.app.clone(), vec![last.clone()], false).with_parents(rest.to_vec()))
    }

    /// When the run reached its final state (ms since the epoch; Celery's
    /// `date_done`), `None` while it has not or nothing is stored. A set
    /// answers its first run's.
    pub async fn date_done(&self) -> Result<Option<i64>, Refused> {
        let Some(b) = self.app.backend() else {
            return Err(Refused::Missing("the app keeps no results".into()));
        };
        Ok(b.fetch(self.id())
            .await?
            .filter(|o| o.state.is_final())
            .map(|o| o.at))
    }

    /// The runs its success sent on (Celery's `AsyncResult.children`): its
    /// `link` callbacks and its chain's next link, once stored; empty
    /// before. A set answers every part's, in order.
    pub async fn children(&self) -> Result<Vec<String>, Refused> {
        let Some(b) = self.app.backend() else {
            return Err(Refused::Missing("the app keeps no results".into()));
        };
        let mut out = Vec::new();
        for id in &self.ids {
            if let Some(o) = b.fetch(id).await? {
                out.extend(o.children);
            }
        }
        Ok(out)
    }

    /// Removes what is stored of the run or the set (Celery's
    /// `AsyncResult.forget()`): afterwards it reads as PENDING.
    pub async fn forget(&self) -> Result<(), Refused> {
        let Some(b) = self.app.backend() else {
            return Err(Refused::Missing("the app keeps no results".into()));
        };
        b.forget(&self.ids).await
    }

    /// The app it belongs to.
    pub fn app_of(&self) -> &App {
        &self.app
    }

    /// The ids it waits on.
    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// The single id (the first, for a set).
    pub fn id(&self) -> &str {
        self.ids.first().map_or("", String::as_str)
    }

    /// Whether `get` answers the list of every run's value, in order.
    pub fn is_set(&self) -> bool {
        self.all
    }

    /// Waits for the run and answers its value, or refuses with why it will
    /// not arrive: `Failed` when a body raised on its last attempt, `Revoked`,
    /// `Timeout` when `timeout` passed first (real time), `Missing` when the
    /// app keeps no results. A set answers the list of values in order, and
    /// the whole `timeout` covers the whole set.
    pub async fn get(&self, timeout: Option<Duration>) -> Result<Value, Refused> {
        if !self.all {
            return self.app.result_of(self.id(), timeout).await;
        }
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let mut out = Vec::with_capacity(self.ids.len());
        for id in &self.ids {
            let left = deadline.map(|d| d.saturating_duration_since(tokio::time::Instant::now()));
            out.push(self.app.result_of(id, left).await?);
        }
        Ok(Value::Array(out))
    }

    /// What the run is doing now, without waiting. A set reports FAILURE once
    /// any part failed, REVOKED once any was revoked, SUCCESS once every part
    /// succeeded, and otherwise the state of the first unsettled run.
    pub async fn state(&self) -> Result<State, Refused> {
        if !self.all {
            return self.app.state_of(self.id()).await;
        }
        let mut states = Vec::with_capacity(self.ids.len());
        for id in &self.ids {
            states.push(self.app.state_of(id).await?);
        }
        Ok(aggregate(&states))
    }

    /// The name of [`Handle::state`], as a caller sees it: a custom state a
    /// body recorded (`PROGRESS`: see [`super::progress`]) answers its own
    /// name, every other state Celery's. A set answers as
    /// [`Handle::state`] does, with the first unsettled part's own name.
    pub async fn state_name(&self) -> Result<String, Refused> {
        let mut parts = Vec::with_capacity(self.ids.len());
        for id in self.ids.iter().take(if self.all { usize::MAX } else { 1 }) {
            parts.push(match self.app.outcome_of(id).await? {
                Some(o) => (o.state, o.custom),
                None => (State::Pending, None),
            });
        }
        let states: Vec<State> = parts.iter().map(|(s, _)| *s).collect();
        let state = aggregate(&states);
        let custom = (!state.is_final())
            .then(|| parts.into_iter().find(|(s, _)| *s == state))
            .flatten()
            .and_then(|(_, c)| c);
        Ok(custom.unwrap_or_else(|| state.name().to_string()))
    }

    /// What the run says about itself now, without waiting (Celery's
    /// `AsyncResult.info`): the value once it succeeded, the meta of a
    /// custom state a body recorded, the error for a failure, a retry or a
    /// revoke, null while nothing is stored (see [`super::progress::info_of`]).
    /// A set answers the list of its parts', in order.
    pub async fn info(&self) -> Result<Value, Refused> {
        if !self.all {
            return self.app.info_of(self.id()).await;
        }
        let mut out = Vec::with_capacity(self.ids.len());
        for id in &self.ids {
            out.push(self.app.info_of(id).await?);
        }
        Ok(Value::Array(out))
    }

    /// Revokes the run or the set; with `terminate`, a run in progress
    /// stops with SIGTERM, here or in another process on the broker (see
    /// [`App::revoke`]).
    pub async fn revoke(&self, terminate: bool) -> Result<(), Refused> {
        self.app.revoke(&self.ids, terminate).await
    }

    /// [`Handle::revoke`] naming the signal a terminate carries (see
    /// [`App::revoke_with`]).
    pub async fn revoke_with(&self, terminate: bool, signal: i32) -> Result<(), Refused> {
        self.app.revoke_with(&self.ids, terminate, signal).await
    }
}

/// A set's state from its parts' (see [`Handle::state`]).
pub fn aggregate(states: &[State]) -> State {
    if states.contains(&State::Failure) {
        State::Failure
    } else if states.contains(&State::Revoked) {
        State::Revoked
    } else if let Some(s) = states.iter().find(|s| **s != State::Success) {
        *s
    } else {
        State::Success
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_state() {
        use State::*;
        assert_eq!(aggregate(&[Success, Failure, Pending]), Failure);
        assert_eq!(aggregate(&[Success, Revoked]), Revoked);
        assert_eq!(aggregate(&[Success, Started, Pending]), Started);
        assert_eq!(aggregate(&[Success, Success]), Success);
        assert_eq!(aggregate(&[]), Success);
    }
}
