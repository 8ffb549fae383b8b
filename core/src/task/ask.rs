//! What a body can ask of its run besides succeeding or failing: to be
//! retried now on its own terms, to be rejected, or to be ignored —
//! Celery's `self.retry(...)`, `Reject(requeue=...)` and `Ignore`, Node's
//! `ctx.retry({...})`, `ctx.reject(...)` and `ctx.ignore()`.
//!
//! A body asks by raising (throwing) what its binding gives it for that;
//! the binding converts it to an [`Ask`] carried on the run's [`Failure`],
//! and the worker's settle step decides from it and the task's policy, the
//! same for every language:
//!
//! - **retry**: the run goes again after `countdown` ms or at `eta` (else
//!   after the policy's backoff), while the attempts so far are fewer than
//!   `max_retries` (else the policy's `retries`). Past that budget the run
//!   fails with the failure it carried (`cause`, as Celery re-raises the
//!   `exc` given to `retry`) or, without one, `MaxRetriesExceededError`.
//!   A retry asked for is made whatever the policy's retry filter says: the
//!   body asked.
//! - **reject**: with `requeue`, the message goes back to its queue as it
//!   was (another worker may take it); without, it is set aside in the
//!   dead letters with the reason, where Celery's Redis transport drops it:
//!   a message is never lost because a body declined it.
//! - **ignore**: the run ends with nothing stored and no state recorded (a
//!   body that settled elsewhere, as Celery's `Ignore`).
//!
//! The bindings pass what the body gave, in their units converted to ms;
//! the checks on it (a negative countdown, an eta that is not a time) are
//! here, and a bad ask fails the run with a `TypeError` naming the field.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::state::Failure;

/// A body's ask (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ask", rename_all = "snake_case")]
pub enum Ask {
    Retry(RetryAsk),
    Reject { requeue: bool },
    Ignore,
}

/// A retry asked for: when, within which budget, recording what.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryAsk {
    /// Run again after this many ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub countdown: Option<i64>,
    /// Run again at this time (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta: Option<i64>,
    /// The budget of attempts for this ask, in place of the policy's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// The failure to record now, and to fail with past the budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Box<Failure>>,
}

/// The failure kind of a retry asked for past its budget with no cause.
pub const MAX_RETRIES_EXCEEDED: &str = "MaxRetriesExceededError";

/// The failure kind a run records while it waits to be retried on its ask
/// (Celery's `Retry`).
pub const RETRY: &str = "Retry";

/// The failure kind of a run whose body rejected it without a requeue
/// (Celery's `Reject`): it fails for good, and the caller sees why.
pub const REJECTED: &str = "Reject";

impl Ask {
    /// An ask from the JSON a binding made of what the body raised:
    /// `{"ask": "retry", "countdown": ms, "eta": ms, "max_retries": n,
    /// "cause": {failure}}`, `{"ask": "reject", "requeue": bool}`,
    /// `{"ask": "ignore"}`. Numbers may come as floats (JS has no other);
    /// each is checked and named when wrong.
    pub fn parse(v: &Value) -> Result<Ask, String> {
        let o = v
            .as_object()
            .ok_or_else(|| format!("an ask is an object, not {v}"))?;
        let kind = o.get("ask").and_then(Value::as_str).unwrap_or("");
        let ms = |name: &str| -> Result<Option<i64>, String> {
            match o.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Number(n)) => {
                    let f = n.as_f64().unwrap_or(f64::NAN);
                    if !f.is_finite() || f < 0.0 || f > i64::MAX as f64 / 2.0 {
                        // No value echoed: it is in ms here, in seconds
                        // where a Python body gave it.
                        Err(format!("`{name}` must be finite and not negative"))
                    } else {
                        Ok(Some(f.round() as i64))
                    }
                }
                Some(other) => Err(format!("`{name}` must be a number or a time, got {other}")),
            }
        };
        match kind {
            "retry" => {
                let countdown = ms("countdown")?;
                let eta = ms("eta")?;
                if countdown.is_some() && eta.is_some() {
                    return Err("give `countdown` or `eta`, not both".into());
                }
                let max_retries = match o.get("max_retries") {
                    None | Some(Value::Null) => None,
                    Some(Value::Number(n)) => match n.as_f64() {
                        Some(f) if f.is_finite() && f >= 0.0 && f.fract() == 0.0 => {
                            Some(f.min(u32::MAX as f64) as u32)
                        }
                        _ => {
                            return Err(format!(
                                "`max_retries` must be a whole number ≥ 0, got {n}"
                            ));
                        }
                    },
                    Some(other) => {
                        return Err(format!(
                            "`max_retries` must be a whole number ≥ 0, got {other}"
                        ));
                    }
                };
                let cause = match o.get("cause") {
                    None | Some(Value::Null) => None,
                    Some(c) => {
                        let mut f = serde_json::from_value::<Failure>(c.clone())
                            .map_err(|e| format!("`cause` is not a failure: {e}"))?;
                        // A cause records a failure; it asks nothing
                        // itself, and its lineage is not stored.
                        f.ask = None;
                        f.lineage = Box::default();
                        Some(Box::new(f))
                    }
                };
                Ok(Ask::Retry(RetryAsk {
                    countdown,
                    eta,
                    max_retries,
                    cause,
                }))
            }
            "reject" => match o.get("requeue") {
                None | Some(Value::Null) => Ok(Ask::Reject { requeue: false }),
                Some(Value::Bool(b)) => Ok(Ask::Reject { requeue: *b }),
                Some(other) => Err(format!("`requeue` must be true or false, got {other}")),
            },
            "ignore" => Ok(Ask::Ignore),
            other => Err(format!(
                "unknown ask {other:?}: expected \"retry\", \"reject\" or \"ignore\""
            )),
        }
    }

    /// The failure a run that asked `ask` carries: `raised` (what the body
    /// raised, its type and traceback) with the ask on it; a bad ask is a
    /// `TypeError` naming what was wrong, with no ask.
    pub fn failure(raised: Failure, ask: &Value) -> Failure {
        match Ask::parse(ask) {
            Ok(a) => Failure {
                ask: Some(Box::new(a)),
                ..raised
            },
            Err(why) => Failure::new("TypeError", format!("{}: {why}", raised.kind)),
        }
    }
}

/// What a run whose body asked to be retried comes to, given the attempts
/// before it and the task's budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryVerdict {
    /// Publish the next attempt at this time (ms since the epoch), and
    /// record this failure meanwhile.
    Again { at: i64, record: Failure },
    /// The budget is spent: fail for good with this.
    Exhausted(Failure),
}

impl RetryAsk {
    /// The verdict: `raised` what the body raised, `now` the app's time,
    /// `retries` the attempts before this one, `budget` the policy's
    /// retries, `backoff` the policy's wait (ms) when the ask names no time.
    pub fn verdict(
        &self,
        raised: &Failure,
        now: i64,
        retries: u32,
        budget: u32,
        backoff: i64,
    ) -> RetryVerdict {
        let max = self.max_retries.unwrap_or(budget);
        let cause = self.cause.as_deref().cloned();
        if retries >= max {
            return RetryVerdict::Exhausted(cause.unwrap_or_else(|| {
                Failure::new(
                    MAX_RETRIES_EXCEEDED,
                    format!(
                        "Can't retry {} [retries: {retries}, max: {max}]",
                        raised.kind
                    ),
                )
            }));
        }
        let at = match (self.countdown, self.eta) {
            (Some(c), _) => now.saturating_add(c),
            (None, Some(e)) => e,
            (None, None) => now.saturating_add(backoff),
        };
        let record = cause.unwrap_or_else(|| Failure {
            kind: RETRY.into(),
            ask: None,
            lineage: Box::default(),
            ..raised.clone()
        });
        RetryVerdict::Again { at, record }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn asks_parse_and_bad_fields_are_named() {
        assert_eq!(
            Ask::parse(&json!({"ask": "retry", "countdown": 1500.4})).unwrap(),
            Ask::Retry(RetryAsk {
                countdown: Some(1500),
                ..RetryAsk::default()
            })
        );
        assert_eq!(
            Ask::parse(&json!({"ask": "reject", "requeue": true})).unwrap(),
            Ask::Reject { requeue: true }
        );
        assert_eq!(Ask::parse(&json!({"ask": "ignore"})).unwrap(), Ask::Ignore);
        for (bad, named) in [
            (json!({"ask": "retry", "countdown": -1}), "`countdown`"),
            (json!({"ask": "retry", "countdown": "soon"}), "`countdown`"),
            (
                json!({"ask": "retry", "eta": 1, "countdown": 1}),
                "not both",
            ),
            (json!({"ask": "retry", "max_retries": 1.5}), "`max_retries`"),
            (json!({"ask": "retry", "cause": 3}), "`cause`"),
            (json!({"ask": "reject", "requeue": "yes"}), "`requeue`"),
            (json!({"ask": "later"}), "unknown ask"),
            (json!(7), "an object"),
        ] {
            let e = Ask::parse(&bad).unwrap_err();
            assert!(e.contains(named), "{bad}: {e}");
        }
    }

    #[test]
    fn a_bad_ask_fails_the_run_with_a_type_error() {
        let f = Ask::failure(
            Failure::new("Retry", "x"),
            &json!({"ask": "retry", "countdown": -5}),
        );
        assert_eq!(f.kind, "TypeError");
        assert!(f.ask.is_none());
        assert!(f.message.contains("`countdown`"), "{}", f.message);
    }

    #[test]
    fn a_retry_goes_again_within_its_budget_and_fails_past_it() {
        let raised = Failure::new("Retry", "Retry in 2s");
        let ask = RetryAsk {
            countdown: Some(2000),
            max_retries: Some(2),
            ..RetryAsk::default()
        };
        // The ask's budget (2), not the policy's (0).
        match ask.verdict(&raised, 1000, 1, 0, 50) {
            RetryVerdict::Again { at, record } => {
                assert_eq!(at, 3000);
                assert_eq!(record.kind, RETRY);
            }
            v => panic!("{v:?}"),
        }
        match ask.verdict(&raised, 1000, 2, 0, 50) {
            RetryVerdict::Exhausted(f) => assert_eq!(f.kind, MAX_RETRIES_EXCEEDED),
            v => panic!("{v:?}"),
        }
        // With a cause: recorded while waiting, and failed with past the budget.
        let with = RetryAsk {
            cause: Some(Box::new(Failure::new("IOError", "disk"))),
            ..RetryAsk::default()
        };
        match with.verdict(&raised, 1000, 0, 1, 50) {
            RetryVerdict::Again { at, record } => {
                assert_eq!(at, 1050, "no time named: the policy's backoff");
                assert_eq!(record.kind, "IOError");
            }
            v => panic!("{v:?}"),
        }
        match with.verdict(&raised, 1000, 1, 1, 50) {
            RetryVerdict::Exhausted(f) => assert_eq!(f.kind, "IOError"),
            v => panic!("{v:?}"),
        }
    }
}
