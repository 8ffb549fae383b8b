//! What a finished run comes to.
//!
//! A success stores its result and sends what follows it; a failure within
//! the retry budget goes back as the next attempt; a failure for good, a
//! terminate or a cancel at stop each settle the claim their own way. The
//! order of the writes is the promise: links before the result, the chord's
//! arrival after it, the late ack last, so a redelivery neither loses nor
//! repeats a follow-up. Also the run events the admin page shows.

use std::sync::Arc;

use serde_json::Value;

use super::Shared;
use super::follow::{arrive, follows, give_up, send_links};
use super::notes::failed_as;
use super::stop::give_back;
use super::writer::Writer;
use crate::task::ask::{Ask, REJECTED, RetryVerdict};
use crate::task::clock::BoxFuture;
use crate::task::message::Message;
use crate::task::policy::Policy;
use crate::task::spec::{Detail, Receipt, RunNote};
use crate::task::state::{Failure, Outcome, Refused, State};

/// What one run came to.
pub(super) enum Ran {
    Value(Value),
    Failed(Failure),
    Terminated,
    Cancelled,
    /// Its process died and the task asks for the message back
    /// (`acks_late` + `reject_on_worker_lost`): Celery's reject, requeued.
    Rejected,
}

/// Acks `receipt` now when its task acks late; an early ack went out when
/// it was taken to run.
pub(super) async fn settle_late(w: &Writer, late: bool, receipt: Receipt) -> Result<(), Refused> {
    if late {
        w.write(Vec::new(), None, Some(receipt)).await
    } else {
        Ok(())
    }
}

/// Settles `m` by what its run came to (`started` when it began).
///
/// A value with nothing to follow it — most runs — settles with one write,
/// whose future is all this allocates; every other end goes through
/// [`settle_rest`], whose state machine (links, chords, retries, asks)
/// is kilobytes (a Rust no-op drain on the memory broker allocated 5.8 KB
/// per run for it).
pub(super) fn settle_ran<'a>(
    s: &'a Shared,
    w: &'a Writer,
    m: Arc<Message>,
    receipt: Receipt,
    policy: &'a Policy,
    started: i64,
    ran: Ran,
) -> BoxFuture<'a, Result<(), Refused>> {
    match ran {
        Ran::Value(v) if !follows(&m) => {
            let (mut outcomes, ev) = succeeded(s, &m, policy, started, &v);
            if let Some(o) = outcomes.first_mut() {
                o.result = Some(v);
            }
            let ack = policy.acks_late.then_some(receipt);
            Box::pin(w.write(outcomes, ev, ack))
        }
        ran => Box::pin(settle_rest(s, w, m, receipt, policy, started, ran)),
    }
}

/// What a success writes, once counted and noted: its outcome (none when
/// its result is ignored and nothing waits for it) and its event.
fn succeeded(
    s: &Shared,
    m: &Arc<Message>,
    policy: &Policy,
    started: i64,
    v: &Value,
) -> (Vec<Outcome>, Option<RunNote>) {
    let app = &s.app;
    let now = app.now();
    app.metrics()
        .settled(&m.task, State::Success, Some(now.saturating_sub(started)));
    s.note(m, State::Success.name(), Some(Ok(v)));
    // Made whole: a pushed-to empty vector reserves room for four.
    let outcomes = if !policy.ignore_result || m.chord.is_some() || m.group.is_some() {
        let mut o = Outcome::new(m.id.clone(), State::Success, now);
        o.retries = m.retries;
        o.task = Some(m.task.clone());
        vec![o]
    } else {
        Vec::new()
    };
    let ev = run_event(s, m, State::Success, Some(started), now, || {
        Detail::Value(v.clone())
    });
    (outcomes, ev)
}

/// [`settle_ran`] for every end but a value with nothing to follow it.
async fn settle_rest(
    s: &Shared,
    w: &Writer,
    m: Arc<Message>,
    receipt: Receipt,
    policy: &Policy,
    started: i64,
    ran: Ran,
) -> Result<(), Refused> {
    let app = &s.app;
    let took = Some(app.now().saturating_sub(started));
    if let Ran::Failed(f) = &ran
        && let Some(ask) = f.ask.clone()
    {
        return asked(s, w, m, receipt, policy, started, *ask, f.clone()).await;
    }
    // Decided once, before the failure's lineage (the host's reading of
    // its type, for the policy's filter) is dropped: it is never stored.
    let again = matches!(&ran, Ran::Failed(f) if retried(policy, &m, f));
    let ran = match ran {
        Ran::Failed(mut f) => {
            f.lineage = Box::default();
            Ran::Failed(f)
        }
        r => r,
    };
    match &ran {
        // Counted and noted by `succeeded`.
        Ran::Value(_) => {}
        Ran::Failed(f) => {
            // A failure for good is counted by `give_up`.
            if again {
                app.metrics().settled(&m.task, State::Retry, took);
            }
            s.note(&m, failed_as(again), Some(Err(f)));
        }
        // Counted by `give_up`.
        Ran::Terminated | Ran::Cancelled | Ran::Rejected => {}
    }
    match ran {
        Ran::Value(v) => {
            // Something follows (a chain, a chord, a Celery `link`; else
            // `settle_ran` wrote it alone, the ack after the result).
            let (mut outcomes, ev) = succeeded(s, &m, policy, started, &v);
            if let Some(o) = outcomes.first_mut() {
                o.result = Some(v.clone());
            }
            // Links before the result, the chord's arrival after it (its
            // callback reads the parts' results): a stored success means
            // the links were sent, so a redelivery does not send them twice.
            let children = send_links(app, &m, v).await?;
            if let Some(o) = outcomes.first_mut() {
                o.children = children;
            }
            w.write(outcomes, ev, None).await?;
            arrive(app, &m).await?;
            settle_late(w, policy.acks_late, receipt).await
        }
        Ran::Failed(f) if again => {
            let wait = policy.backoff_delay(m.retries.saturating_add(2), &m.id);
            let at = app.now().saturating_add(wait);
            retry_at(s, &m, receipt, policy, started, f, at).await
        }
        Ran::Failed(f) => {
            event(s, &m, State::Failure, Some(started), Some(failure_text(&f))).await;
            give_up(app, &m, State::Failure, f, took).await?;
            settle_late(w, policy.acks_late, receipt).await
        }
        Ran::Terminated => {
            let f = Failure::new("Terminated", "terminated while running");
            event(s, &m, State::Revoked, Some(started), Some(failure_text(&f))).await;
            give_up(app, &m, State::Revoked, f, took).await?;
            settle_late(w, policy.acks_late, receipt).await
        }
        Ran::Cancelled => give_back(app, &m, receipt, !policy.acks_late).await,
        Ran::Rejected => {
            app.broker().rejected(&m.id, true);
            give_back(app, &m, receipt, !policy.acks_late).await
        }
    }
}

/// Whether the failure `f` of `m`'s run is retried: attempts left, and a
/// failure the policy retries (`retry_for`, `dont_retry_for`).
fn retried(policy: &Policy, m: &Message, f: &Failure) -> bool {
    m.retries < policy.retries && policy.retries_on(f)
}

/// Records `f` as the run's RETRY and publishes its next attempt due `at`
/// (in the claim's place when it acks late).
async fn retry_at(
    s: &Shared,
    m: &Arc<Message>,
    receipt: Receipt,
    policy: &Policy,
    started: i64,
    f: Failure,
    at: i64,
) -> Result<(), Refused> {
    let app = &s.app;
    let mut next = Message::clone(m);
    next.retries = next.retries.saturating_add(1);
    next.eta = Some(at);
    event(s, m, State::Retry, Some(started), Some(failure_text(&f))).await;
    let mut o = Outcome::new(m.id.clone(), State::Retry, app.now());
    o.error = Some(f);
    o.retries = m.retries;
    o.task = Some(m.task.clone());
    app.store(vec![o]).await?;
    if policy.acks_late {
        app.broker().retry(receipt, next).await
    } else {
        app.broker().publish(vec![next]).await
    }
}

/// Settles a run whose body asked something of it (`task::ask`): a retry
/// on its own terms, a reject, an ignore.
#[allow(clippy::too_many_arguments)]
async fn asked(
    s: &Shared,
    w: &Writer,
    m: Arc<Message>,
    receipt: Receipt,
    policy: &Policy,
    started: i64,
    ask: Ask,
    raised: Failure,
) -> Result<(), Refused> {
    let app = &s.app;
    let took = Some(app.now().saturating_sub(started));
    match ask {
        Ask::Retry(r) => {
            let backoff = policy.backoff_delay(m.retries.saturating_add(2), &m.id);
            match r.verdict(&raised, app.now(), m.retries, policy.retries, backoff) {
                RetryVerdict::Again { at, record } => {
                    app.metrics().settled(&m.task, State::Retry, took);
                    s.note(&m, State::Retry.name(), Some(Err(&record)));
                    let mut m = Arc::unwrap_or_clone(m);
                    if let Some(a) = r.args {
                        m.args = a;
                    }
                    if let Some(k) = r.kwargs {
                        m.kwargs = k;
                    }
                    retry_at(s, &Arc::new(m), receipt, policy, started, record, at).await
                }
                RetryVerdict::Exhausted(f) => {
                    failed_for_good(s, w, &m, receipt, policy, started, f).await
                }
            }
        }
        // Celery's `Reject`: `task-rejected` where the broker sends events.
        Ask::Reject { requeue: true } => {
            app.broker().rejected(&m.id, true);
            give_back(app, &m, receipt, !policy.acks_late).await
        }
        Ask::Reject { requeue: false } => {
            app.broker().rejected(&m.id, false);
            let f = Failure {
                ask: None,
                lineage: Box::default(),
                kind: REJECTED.into(),
                ..raised
            };
            failed_for_good(s, w, &m, receipt, policy, started, f).await
        }
        Ask::Ignore => settle_late(w, policy.acks_late, receipt).await,
    }
}

/// A run an ask ended for good with `f`: noted, recorded, given up (its
/// chain and chord failed with it), then acked if it acks late.
async fn failed_for_good(
    s: &Shared,
    w: &Writer,
    m: &Arc<Message>,
    receipt: Receipt,
    policy: &Policy,
    started: i64,
    f: Failure,
) -> Result<(), Refused> {
    let took = Some(s.app.now().saturating_sub(started));
    s.note(m, State::Failure.name(), Some(Err(&f)));
    event(s, m, State::Failure, Some(started), Some(failure_text(&f))).await;
    give_up(&s.app, m, State::Failure, f, took).await?;
    settle_late(w, policy.acks_late, receipt).await
}

/// Records what happened to a run for admin pages, when the broker keeps a
/// log. A failure to record is not a failure of the run.
pub(super) async fn event(
    s: &Shared,
    m: &Arc<Message>,
    state: State,
    started: Option<i64>,
    detail: Option<String>,
) {
    let detail = || detail.map_or(Detail::None, Detail::Text);
    if let Some(ev) = run_event(s, m, state, started, s.app.now(), detail)
        && let Some(insp) = s.app.inspector()
    {
        let _ = insp.record_notes(vec![ev]).await;
    }
}

/// The event a run records at `now`, when the app has an inspector to keep
/// it (`detail` is only made then).
fn run_event(
    s: &Shared,
    m: &Arc<Message>,
    state: State,
    started: Option<i64>,
    now: i64,
    detail: impl FnOnce() -> Detail,
) -> Option<RunNote> {
    s.app.inspector()?;
    Some(RunNote {
        message: m.clone(),
        state,
        at: now,
        worker: s.named.clone(),
        runtime: started.map(|t| now - t),
        detail: detail(),
    })
}

pub(super) fn failure_text(f: &Failure) -> String {
    match &f.traceback {
        Some(tb) => format!("{f}\n{tb}"),
        None => f.to_string(),
    }
}
