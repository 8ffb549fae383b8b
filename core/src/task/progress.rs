//! Custom states: what a body records about itself while it runs.
//!
//! A long run tells its callers how far it got the way Celery's
//! `self.update_state(state="PROGRESS", meta={...})` does: the body names a
//! state and a JSON meta, and they are stored where the run's result will be,
//! so `state()` answers that name and `info()` that meta until the final
//! state overwrites them. The rule for a name, its error text and what
//! `info()` answers are here, once, for both bindings.
//!
//! Why a custom state is an [`Outcome`] in STARTED with its name in
//! [`Outcome::custom`] and the meta in `result`, not a new [`State`]: the
//! result stores, their per-state counts and every state rule (a final state
//! is never overwritten; a redelivered run whose stored state is not final
//! runs again) keep working unchanged, on every layout. Celery's layout
//! writes the name as the meta's `status` and the meta as its `result`
//! (Celery's own format, so Celery's `AsyncResult(id).state` and `.info`
//! read it), and reads any status headway has no name for back as a custom
//! state — a Celery task's PROGRESS reads the same as headway's.
//!
//! Where a body cannot record: a direct call (`task(...)` in-process) has
//! no run to record for, and an app without a result store keeps nothing —
//! both accept the call and store nothing, as Celery's disabled backend
//! does. A body in a process-pool child is refused with an error: its
//! parent stores the run's outcomes, and the child has no path to it for a
//! state mid-run (so nothing is silently dropped).

use serde_json::Value;

use super::app::App;
use super::state::{Outcome, Refused, State};

/// The state a binding's `progress(meta)` shorthand records (Celery's
/// conventional name for it).
pub const PROGRESS: &str = "PROGRESS";

/// The longest state name accepted, in bytes: a name is a label on a
/// dashboard, not a payload (the meta carries the data).
pub const STATE_NAME_MAX: usize = 128;

/// Checks a custom state's name: not empty, at most [`STATE_NAME_MAX`]
/// bytes, and not a ready state (SUCCESS, FAILURE, REVOKED: those only the
/// run's end sets, and a stored one is never overwritten).
pub fn check_name(name: &str) -> Result<(), Refused> {
    if name.is_empty() {
        return Err(Refused::Invalid(
            "state must be a non-empty name (e.g. \"PROGRESS\")".into(),
        ));
    }
    if name.len() > STATE_NAME_MAX {
        return Err(Refused::Invalid(format!(
            "state must be at most {STATE_NAME_MAX} bytes, got {}",
            name.len()
        )));
    }
    if State::parse(name).is_some_and(State::is_final) {
        return Err(Refused::Invalid(format!(
            "state {name:?} is a ready state (SUCCESS, FAILURE, REVOKED): only the run's end sets it; name a custom state such as \"PROGRESS\""
        )));
    }
    Ok(())
}

/// The outcome stored for run `id` of `task` (after `retries` failed
/// attempts) recording state `name` with `meta` at `at`: STARTED with the
/// name as [`Outcome::custom`] (none when the name is STARTED itself) and
/// `meta` as its result.
pub fn outcome(
    id: &str,
    task: &str,
    retries: u32,
    name: &str,
    meta: Value,
    at: i64,
) -> Result<Outcome, Refused> {
    check_name(name)?;
    let mut o = Outcome::new(id, State::Started, at);
    o.custom = (name != State::Started.name()).then(|| name.to_string());
    o.result = Some(meta);
    o.retries = retries;
    o.task = (!task.is_empty()).then(|| task.to_string());
    Ok(o)
}

/// What `info()` answers for a stored outcome (Celery's `AsyncResult.info`):
/// the value for a success, the meta of a custom state (or STARTED), the
/// error — `{"kind", "message", "traceback"?, "module"?}` — for a failure,
/// a retry or a revoke, and null when nothing is stored.
pub fn info_of(o: Option<&Outcome>) -> Value {
    let Some(o) = o else {
        return Value::Null;
    };
    match o.state {
        State::Failure | State::Retry | State::Revoked => match &o.error {
            Some(f) => serde_json::to_value(f).unwrap_or(Value::Null),
            None => o.result.clone().unwrap_or(Value::Null),
        },
        _ => o.result.clone().unwrap_or(Value::Null),
    }
}

/// The app a run's body records its states through: set by the worker that
/// runs it, absent on a direct call and in a process-pool child (never
/// serialised: a child gets none). Always equal, so a context compares by
/// what it says about the run.
#[derive(Clone, Default)]
pub struct Recorder(pub(crate) Option<App>);

impl Recorder {
    /// Records through `app`.
    pub fn of(app: App) -> Recorder {
        Recorder(Some(app))
    }
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Recorder(app)"
        } else {
            "Recorder(none)"
        })
    }
}

impl PartialEq for Recorder {
    fn eq(&self, _: &Recorder) -> bool {
        true
    }
}

impl App {
    /// Records that run `id` of `task` is in custom state `name` with
    /// `meta` (see the module docs): refused with [`Refused::Invalid`] for a
    /// name [`check_name`] refuses; nothing is
    /// stored when the app keeps no results. A final state stored already
    /// stays (the store's rule).
    pub async fn record_state(
        &self,
        id: &str,
        task: &str,
        retries: u32,
        name: &str,
        meta: Value,
    ) -> Result<(), Refused> {
        if super::procs::child::in_child() {
            // A body in a process-pool child: its parent stores it (before
            // the run's answer), whichever way the binding called.
            check_name(name)?;
            return super::procs::child::say_state(id, name, meta);
        }
        let o = outcome(id, task, retries, name, meta, self.now())?;
        self.store(vec![o]).await
    }

    /// What `info()` answers for run `id` (see [`info_of`]); refused with
    /// [`Refused::Missing`] when the app keeps no results.
    pub async fn info_of(&self, id: &str) -> Result<Value, Refused> {
        Ok(info_of(self.outcome_of(id).await?.as_ref()))
    }
}

impl super::body::Context {
    /// Records that this run is in custom state `name` with `meta` (Celery's
    /// `update_state`): through the worker's app, or — on a direct call —
    /// checked and not stored; refused in a process-pool child.
    pub async fn update_state(&self, name: &str, meta: Value) -> Result<(), Refused> {
        match &self.recorder.0 {
            Some(app) => {
                app.record_state(&self.id, &self.name, self.retries, name, meta)
                    .await
            }
            None => {
                check_name(name)?;
                if super::procs::child::in_child() {
                    // The parent stores it (before the run's answer).
                    return super::procs::child::say_state(&self.id, name, meta);
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_a_body_may_use() {
        for ok in ["PROGRESS", "STARTED", "PENDING", "x", "Mixed case"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["SUCCESS", "FAILURE", "REVOKED"] {
            let e = check_name(bad).unwrap_err();
            assert!(matches!(e, Refused::Invalid(_)));
            assert!(e.to_string().contains("ready state"), "{e}");
            assert!(e.to_string().contains(bad), "{e}");
        }
        assert!(
            check_name("")
                .unwrap_err()
                .to_string()
                .contains("non-empty")
        );
        let long = "P".repeat(STATE_NAME_MAX + 1);
        assert!(check_name(&long).unwrap_err().to_string().contains("128"));
        assert!(check_name(&long[1..]).is_ok());
    }

    #[test]
    fn a_custom_state_is_started_with_its_name_and_meta() {
        let o = outcome("i", "t", 2, "PROGRESS", json!({"done": 3}), 9).unwrap();
        assert_eq!(
            (o.state, o.state_name(), o.retries, o.at),
            (State::Started, "PROGRESS", 2, 9)
        );
        assert_eq!(info_of(Some(&o)), json!({"done": 3}));
        let s = outcome("i", "t", 0, "STARTED", json!(1), 0).unwrap();
        assert_eq!((s.custom.clone(), s.state_name()), (None, "STARTED"));
        assert!(outcome("i", "t", 0, "SUCCESS", json!(1), 0).is_err());
    }

    #[test]
    fn info_answers_the_value_the_meta_or_the_error() {
        assert_eq!(info_of(None), Value::Null);
        let mut ok = Outcome::new("i", State::Success, 0);
        ok.result = Some(json!([1, 2]));
        assert_eq!(info_of(Some(&ok)), json!([1, 2]));
        let mut bad = Outcome::new("i", State::Failure, 0);
        bad.error = Some(super::super::state::Failure::new("ValueError", "no"));
        assert_eq!(
            info_of(Some(&bad)),
            json!({"kind": "ValueError", "message": "no"})
        );
        assert_eq!(
            info_of(Some(&Outcome::new("i", State::Pending, 0))),
            Value::Null
        );
    }
}
