//! One message, from receipt to the end of its body.
//!
//! The checks at receipt (revoked, expired, unknown, already done), then
//! taking it to run: a slot, a runner that is not stuck, the task's rate,
//! the early ack with a second revoked check, a chord's parts' results.
//! Every wait on the way gives the message back if the worker stops, since
//! a message not yet taken must not be lost or run late; what the run comes
//! to is `settle`'s.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use super::admit::{Admitted, admit, limited};
use super::follow::{arrive, collect, give_up};
use super::live::Entered;
use super::seat::{Got, Handover, deckable, on_deck, slot_of};
use super::settle::{Ran, event, failure_text, settle_late, settle_ran};
use super::stop::{give_back, wait_true};
use super::writer::{AckSent, Writer};
use super::{Shared, warn_run};
use crate::flow::{MILLI, Window};
use crate::log::shown;
use crate::task::app::Registered;
use crate::task::body::Context;
use crate::task::deck::{Place, Slot, Ticket};
use crate::task::message::Message;
use crate::task::policy::RateScope;
use crate::task::procs::{WORKER_LOST, timed_out};
use crate::task::spec::{Delivery, Receipt};
use crate::task::state::{Failure, Refused, State};

pub(super) async fn process(
    s: Arc<Shared>,
    w: Arc<Writer>,
    d: Box<Delivery>,
    revoked: bool,
    entered: Entered,
) {
    let receipt = d.receipt.clone();
    // Kept for the log records below, which name the run.
    let m = d.message.clone();
    let now = s.app.now();
    // A message the checks at receipt let through waits for its slot here,
    // in this small future, before the run's state machine exists: with
    // a prefetch of 1024 and 64 slots, a thousand runs wait at once, and
    // each holding its kilobytes of run state spread the drain over
    // megabytes (a Rust no-op drain on the memory broker, concurrency 64:
    // prefetch 64 ran 64k/s, 256 57k/s, 1024 44k/s).
    let ready = if let Some(reg) = plain(&s, &d, revoked, now) {
        match slot_of(&s, || deckable(&s, &d.message, &reg)).await {
            Some(got) => Some((got, reg)),
            None => {
                let back = give_back(&s.app, &d.message, d.receipt.clone(), false);
                if let Err(e) = Box::pin(back).await {
                    warn_run(
                        &s.name,
                        &m.task,
                        &m.id,
                        &format!(
                            "could not give it back at a stop ({e}); the broker's recovery will"
                        ),
                    );
                }
                drop(entered);
                s.over();
                return;
            }
        }
    } else {
        None
    };
    // Boxed: a run's state machine is kilobytes (every wait on its way),
    // and an unboxed one made every message's task that size, copied at
    // its spawn, its first poll and its end (a Rust no-op drain spent a
    // fifth of its CPU in memmove).
    if let Err(e) = Box::pin(take_and_run(&s, &w, *d, revoked, entered.key, now, ready)).await {
        // A claim that could not be settled goes back rather than sit held by
        // a live consumer for ever (a claim already acked is not affected:
        // the broker's fencing makes this a no-op).
        warn_run(
            &s.name,
            &m.task,
            &m.id,
            &format!(
                "could not settle a message ({}); giving it back",
                shown(&e.to_string())
            ),
        );
        if let Err(e) = s.app.broker().reject(receipt, true).await {
            warn_run(
                &s.name,
                &m.task,
                &m.id,
                &format!("could not give it back either ({e}); the broker's recovery will"),
            );
        }
    }
    drop(entered);
    s.over();
}

/// Whether every check at receipt passes `d` without a write (not revoked,
/// not expired at `now`, registered, not redelivered): such a message goes
/// straight to wait for its slot, with its task's registration (looked up
/// once a run).
fn plain(s: &Shared, d: &Delivery, revoked: bool, now: i64) -> Option<Arc<Registered>> {
    if revoked || d.redelivered || d.message.expires.is_some_and(|exp| exp <= now) {
        return None;
    }
    s.app.registered(&d.message.task)
}

/// Takes a claimed message to run and runs it, unless a check at receipt
/// (made at `now`) or a stop says otherwise; `ready` is the slot it
/// already waited for and its task's registration, when the checks at
/// receipt let it through ([`plain`]).
async fn take_and_run(
    s: &Arc<Shared>,
    w: &Arc<Writer>,
    d: Delivery,
    revoked: bool,
    key: u64,
    now: i64,
    ready: Option<(Got, Arc<Registered>)>,
) -> Result<(), Refused> {
    let app = &s.app;
    let Delivery {
        message: m,
        receipt,
        redelivered,
    } = d;

    // Checked at receipt: revoked, expired, unknown, done already. A
    // message `plain` let through (it waited for its slot) has nothing
    // to check.
    let (slot, reg) = match ready {
        Some((slot, reg)) => (Some(slot), reg),
        None => match Box::pin(at_receipt(s, &m, &receipt, revoked, now, redelivered)).await? {
            Some(reg) => (None, reg),
            None => return Ok(()),
        },
    };
    let Registered { policy, body } = &*reg;

    let mut stopping = s.stopping.subscribe();
    let acked: Mutex<Option<AckSent>> = Mutex::new(None);
    let (seat, place) = match slot {
        Some(Got::Seat(seat)) => (Some(seat), None),
        Some(Got::Place(place)) => (None, Some(place)),
        None => (None, None),
    };
    // A run on deck (`deckable`): none of the steps below applies to it,
    // and its early ack goes out as it is handed over.
    let (mut slot, held, checked, args) = if place.is_some() {
        (None, None, now, m.args.clone())
    } else {
        // Wait for a slot; a stopping worker hands the claim back instead (not
        // acked yet, whatever the policy: a prefetched message is not taken).
        let slot = match seat {
            Some(seat) => Some(seat),
            None => match slot_of(s, || false).await {
                Some(Got::Seat(seat)) => Some(seat),
                _ => None,
            },
        };
        let Some((permit, mut waited)) = slot else {
            return Box::pin(give_back(app, &m, receipt, false)).await;
        };
        // Every runner stuck: wait for one rather than hand it a call nobody
        // takes (`runners`).
        if let Some(g) = s.gate.get()
            && !g.healthy()
        {
            waited = true;
            let healthy = Box::pin(async {
                tokio::select! {
                    _ = g.until_healthy() => true,
                    _ = wait_true(&mut stopping) => false,
                }
            });
            if !healthy.await {
                drop(permit);
                return Box::pin(give_back(app, &m, receipt, false)).await;
            }
        }

        // The limits shared with every worker on the broker: the concurrency
        // key's room and the global rate (`admit`).
        let admitted = if limited(&m, policy) {
            Box::pin(admit(
                s,
                &m,
                &receipt,
                policy,
                permit,
                &mut stopping,
                &mut waited,
            ))
            .await?
        } else {
            Admitted::Run(permit, None)
        };
        let (permit, held) = match admitted {
            Admitted::Run(p, h) => (p, h),
            Admitted::Done => return Ok(()),
        };

        // Per-worker rate, read again after every wait: a remote command may
        // change it meanwhile (and wakes the waiters when it does).
        if policy.rate_scope == RateScope::Worker
            && s.rate_of(&m.task, policy.rate).is_some()
            && !Box::pin(rate_turn(s, &m.task, policy, &mut stopping, &mut waited)).await
        {
            drop(permit);
            return Box::pin(give_back(app, &m, receipt, false)).await;
        }

        // Taken to run: the early ack, and the revoked check again when it
        // waited (for a slot or its rate) longer than [`RECHECK_AFTER`] since
        // the claim's — one write, gathered with other runs' by the writer.
        // Acking here, not at receipt, means a worker killed with messages
        // prefetched loses none of them:
        // they are still held, and recovered (Celery acks when its pool
        // accepts the task, not when the message arrives).
        //
        // On the process pool the early ack waits for the child instead: the
        // run is checked here, then waits on deck for a child (`slots_per`),
        // and is acked as the child takes it — so a worker killed -9 still
        // loses only the runs its children had started.
        //
        // An early ack with no question to wait for goes out as the body
        // starts, not a round trip before it: the run's send-to-result time
        // loses that round trip, and if the ack does not land (the broker is
        // away), it is made again once the body is over, below. A worker
        // killed -9 in that window has its started run delivered again (never
        // lost).
        let pooled = s.procs.is_some();
        let early = (!policy.acks_late && !pooled).then(|| receipt.clone());
        //
        // A run handed out before waits for its ack: if its body killed the
        // last worker before that ack landed, this one lands before the body
        // runs again, so a poison pill kills at most two workers.
        let taken_at = app.now();
        let recheck = waited && taken_at.saturating_sub(now) > RECHECK_AFTER;
        let checked = if recheck { taken_at } else { now };
        if recheck || (redelivered && early.is_some()) {
            if Box::pin(w.take(early, recheck.then(|| m.id.clone()))).await? {
                drop(permit);
                return Box::pin(revoked_before(
                    s,
                    w,
                    &m,
                    receipt,
                    policy.acks_late || pooled,
                ))
                .await;
            }
        } else if let Some(ack) = early {
            *acked.lock().unwrap_or_else(|e| e.into_inner()) = Some(w.ack_soon(ack));
        }

        // A chord's callback collects its parts' results.
        let mut args = m.args.clone();
        if let Some(join) = &m.join {
            match Box::pin(collect(app, &join.parts)).await {
                Ok(results) => {
                    if !join.immutable {
                        args.insert(0, Value::Array(results));
                    }
                }
                Err(f) => {
                    drop(permit);
                    Box::pin(give_up(app, &m, State::Failure, f, None)).await?;
                    return Box::pin(settle_late(w, policy.acks_late, receipt)).await;
                }
            }
        }

        // The slot goes with the call to a host body, which frees it as its
        // answer comes (see `run_body`); what is left here is freed below.
        let slot = Some(permit);

        // Celery's task-started, when the broker sends it (its task-received
        // went out when the message reached the consumer).
        if app.inspector().is_some_and(|i| i.wants_run_starts()) {
            Box::pin(event(s, &m, State::Started, None, None)).await;
        }
        (slot, held, checked, args)
    };

    let BodyEnd {
        ran,
        started,
        handed,
        back,
        revoked_late,
    } = run_body(
        s,
        w,
        &m,
        &mut slot,
        Taken {
            policy,
            body,
            key,
            checked,
            receipt: &receipt,
            acked: &acked,
        },
        args,
        &mut stopping,
        place,
    )
    .await;
    // The body is over: it leaves the run table (not active any more, as
    // its slot is free) before the settle's writes, as the slot does, and
    // no longer counts against the prefetch while it settles.
    drop(slot);
    drop(held);
    s.runs().remove(&key);
    let _settling = Settling::new(s);
    if back {
        return Box::pin(give_back(app, &m, receipt, false)).await;
    }
    if revoked_late {
        return Box::pin(revoked_before(s, w, &m, receipt, true)).await;
    }
    if !handed {
        // It ended on deck (terminated, the worker stopping): it never
        // started, and its early ack never went out.
        if matches!(ran, Ran::Cancelled) {
            return Box::pin(give_back(app, &m, receipt, false)).await;
        }
        if !policy.acks_late {
            Box::pin(w.take(Some(receipt.clone()), None)).await?;
        }
    } else if let Some(sent) = acked.into_inner().unwrap_or_else(|e| e.into_inner())
        && !match sent {
            AckSent::Done(landed) => landed,
            AckSent::Coming(rx) => matches!(rx.await, Ok(Ok(_))),
        }
    {
        // The ack sent at the hand-over (or as the body started) did not
        // land (the broker was away): the run is over, so it is made until
        // it lands rather than the message left to run again.
        Box::pin(w.write(Vec::new(), None, Some(receipt.clone()))).await?;
    }

    settle_ran(s, w, m, receipt, policy, started, ran).await
}

/// The checks at receipt (made at `now`) of a message `plain` did not let
/// through: one revoked or expired is recorded as revoked, one of a task
/// not registered here as failed, and one redelivered that already
/// succeeded is not run again — each acked here (`None`). A message that
/// passes answers its task's registration. Its own future, boxed where it
/// is awaited: most messages never come here, and its waits would
/// otherwise be carried in every run's state machine.
async fn at_receipt(
    s: &Shared,
    m: &Arc<Message>,
    receipt: &Receipt,
    revoked: bool,
    now: i64,
    redelivered: bool,
) -> Result<Option<Arc<Registered>>, Refused> {
    let app = &s.app;
    let broker = app.broker();
    if revoked {
        let f = Failure::new("Revoked", "revoked before it ran");
        event(s, m, State::Revoked, None, Some(failure_text(&f))).await;
        Box::pin(give_up(app, m, State::Revoked, f, None)).await?;
        broker.ack(vec![receipt.clone()]).await?;
        return Ok(None);
    }
    if let Some(exp) = m.expires
        && exp <= now
    {
        let f = Failure::new("Expired", "expired before it ran");
        event(s, m, State::Revoked, None, Some(failure_text(&f))).await;
        Box::pin(give_up(app, m, State::Revoked, f, None)).await?;
        broker.ack(vec![receipt.clone()]).await?;
        return Ok(None);
    }
    let Some(reg) = app.registered(&m.task) else {
        warn_run(
            &s.name,
            &m.task,
            &m.id,
            &format!(
                "received unregistered task {:?}; recorded as failed",
                shown(&m.task)
            ),
        );
        Box::pin(give_up(
            app,
            m,
            State::Failure,
            Failure::new(
                "NotRegistered",
                format!("no task is registered as {:?} on this worker", m.task),
            ),
            None,
        ))
        .await?;
        event(
            s,
            m,
            State::Failure,
            None,
            Some(format!("NotRegistered: {:?}", m.task)),
        )
        .await;
        broker.ack(vec![receipt.clone()]).await?;
        return Ok(None);
    };
    // A redelivered run that already succeeded is not run again. Its chain
    // link and Celery links went out before its result was stored (below),
    // so they are not sent again; its chord arrival came after, so it is
    // made again (counted as a set) in case the first delivery died first.
    if redelivered
        && let Some(b) = app.backend()
        && let Some(o) = b.fetch(&m.id).await?
        && o.state == State::Success
    {
        Box::pin(arrive(app, m)).await?;
        broker.ack(vec![receipt.clone()]).await?;
        return Ok(None);
    }
    Ok(Some(reg))
}

/// Waits for the task's per-worker rate to let one more run start: `false`
/// when the worker stops first. Its own future, boxed where it is awaited:
/// most runs have no rate, and its waits would otherwise be carried in
/// every run's state machine.
async fn rate_turn(
    s: &Shared,
    task: &str,
    policy: &crate::task::policy::Policy,
    stopping: &mut tokio::sync::watch::Receiver<bool>,
    waited: &mut bool,
) -> bool {
    let app = &s.app;
    while let Some(rate) = s.rate_of(task, policy.rate) {
        let retuned = s.retuned.notified();
        tokio::pin!(retuned);
        retuned.as_mut().enable();
        let now_ns = app.now().saturating_mul(MILLI);
        let wait = {
            let mut l = s.limiters.lock().unwrap_or_else(|e| e.into_inner());
            let w = l.entry(task.to_string()).or_insert_with(|| {
                Window::new(rate.count as i64, rate.per.saturating_mul(MILLI)).expect("valid rate")
            });
            if w.take(now_ns) {
                None
            } else {
                Some(w.next(now_ns))
            }
        };
        match wait {
            None => return true,
            Some(ns) => {
                let until = app.now().saturating_add((ns / MILLI).max(1));
                *waited = true;
                tokio::select! {
                    _ = app.clock().sleep_until(until) => {}
                    _ = retuned => {}
                    _ = wait_true(stopping) => return false,
                }
            }
        }
    }
    true
}

/// What a run's body needs from its taking, besides the message.
pub(super) struct Taken<'a> {
    pub(super) policy: &'a crate::task::policy::Policy,
    pub(super) body: &'a crate::task::body::SharedBody,
    /// Its place in the worker's run table.
    pub(super) key: u64,
    /// When its revoked status was last read.
    pub(super) checked: i64,
    pub(super) receipt: &'a Receipt,
    /// The early ack sent as the body starts, if any.
    pub(super) acked: &'a Mutex<Option<AckSent>>,
}

/// How a run's body ended, and whether it got to start.
struct BodyEnd {
    ran: Ran,
    /// When it started.
    started: i64,
    /// Whether it reached its body (on the process pool, a child).
    handed: bool,
    /// Given back from the process pool's deck at a stop.
    back: bool,
    /// Revoked while it waited on the process pool's deck.
    revoked_late: bool,
}

/// Runs `m`'s body (on threads, or handed to a child of the process pool)
/// until it ends, is terminated or cancelled. Its own future, boxed where
/// it is awaited: a run's future is allocated and copied whole when the
/// run starts, and with the body's waits inline it was 2,968 bytes.
#[allow(clippy::too_many_arguments)]
async fn run_body(
    s: &Arc<Shared>,
    w: &Arc<Writer>,
    m: &Arc<Message>,
    slot: &mut Option<Slot>,
    t: Taken<'_>,
    args: Vec<Value>,
    stopping: &mut tokio::sync::watch::Receiver<bool>,
    place: Option<Place>,
) -> BodyEnd {
    let app = &s.app;
    let (policy, body, key, checked) = (t.policy, t.body, t.key, t.checked);
    let pooled = s.procs.is_some();
    let (carried_hard, carried_soft) = m.time_limits();
    let (tuned_soft, tuned_hard) =
        s.limits_of(&m.task, (policy.soft_time_limit, policy.time_limit));
    // One reading of the clock for the body's `now`, its start and the
    // table's (a no-op drain on the memory broker read it nine times a
    // run, ~5 % of its samples).
    let begun = app.now();
    let ctx = Context {
        id: m.id.clone(),
        name: m.task.clone(),
        queue: m.queue.clone(),
        retries: m.retries,
        attempt: m.retries.saturating_add(1),
        last: m.retries >= policy.retries,
        now: begun,
        kwargs: m.kwargs.clone(),
        root_id: m.root_id.clone(),
        parent_id: m.parent_id.clone(),
        soft_time_limit: carried_soft.or(tuned_soft).or(s.soft_time_limit),
        time_limit: carried_hard.or(tuned_hard).or(s.time_limit),
        worker: s.name.clone(),
        rule: crate::task::body::RetryRule::of(policy),
        recorder: crate::task::progress::Recorder::of(app.clone()),
        extras: crate::task::request::RunExtras::of(m),
        trace: app.tracing().then(|| {
            Box::new(crate::task::trace::RunTrace {
                carrier: crate::task::trace::carried(m),
            })
        }),
    };
    let mut cancel = s.cancel.subscribe();
    // On the process pool these are set at the hand-over to a child.
    let started = AtomicI64::new(begun);
    let handed = AtomicBool::new(!pooled);
    let revoked_late = AtomicBool::new(false);
    let back = AtomicBool::new(false);
    // On deck: set as it is handed over, on whichever thread does.
    let over = place
        .is_some()
        .then(|| (Arc::new(Handover::default()), Ticket::new()));
    let call = match (&s.procs, place, &over) {
        (None, Some(place), Some((over, ticket))) => {
            handed.store(false, Ordering::Relaxed);
            Box::pin(on_deck(
                s,
                w,
                m,
                &t,
                (ctx, args),
                place,
                (over, ticket),
                (&back, &revoked_late),
                stopping,
            )) as futures_util::future::BoxFuture<'_, Result<Value, Failure>>
        }
        (Some(p), ..) => Box::pin(async {
            // A stop gives back what waits on deck: not acked, not started.
            let idle = tokio::select! {
                biased;
                i = p.idle() => i?,
                _ = wait_true(stopping) => {
                    back.store(true, Ordering::Relaxed);
                    return Err(Failure::new("Stopping", "the worker is stopping"));
                }
            };
            // Long on deck: a revoke sent meanwhile still stops it.
            if app.now().saturating_sub(checked) > RECHECK_AFTER
                && matches!(w.take(None, Some(m.id.clone())).await, Ok(true))
            {
                revoked_late.store(true, Ordering::Relaxed);
                return Err(Failure::new("Revoked", "revoked before it ran"));
            }
            let now = app.now();
            started.store(now, Ordering::Relaxed);
            s.start(key, now, !policy.acks_late);
            s.note(m, "active", None);
            if !policy.acks_late {
                *t.acked.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(w.ack_soon(t.receipt.clone()));
            }
            handed.store(true, Ordering::Relaxed);
            Box::pin(p.run_on(idle, &m.task, ctx, args, policy.timeout)).await
        }) as futures_util::future::BoxFuture<'_, Result<Value, Failure>>,
        (None, ..) => {
            s.start(key, begun, !policy.acks_late);
            body.call_holding(ctx, args, slot)
        }
    };
    let ran = tokio::select! {
        r = async {
            match policy.timeout {
                // The process pool times the run from its hand-over.
                Some(ms) if !pooled => match tokio::time::timeout(Duration::from_millis(ms as u64), call).await {
                    Ok(r) => r,
                    Err(_) => Err(timed_out(ms)),
                },
                _ => call.await,
            }
        } => match r {
            Ok(v) => Ran::Value(v),
            // Celery's `reject_on_worker_lost`: the run's process died, and
            // the message goes back rather than failing.
            Err(f) if f.kind == WORKER_LOST && policy.acks_late && policy.reject_on_worker_lost => Ran::Rejected,
            Err(f) => Ran::Failed(f),
        },
        sig = app.terminated(&m.id) => {
            // On the process pool the run's child gets the signal asked
            // for; on threads the body is abandoned (it cannot be stopped).
            if let Some(p) = &s.procs {
                p.signal(&m.id, sig);
            }
            Ran::Terminated
        }
        _ = wait_true(&mut cancel) => Ran::Cancelled,
    };
    if let Some((over, ticket)) = &over {
        handed.store(ticket.handed(), Ordering::Relaxed);
        started.store(over.at.load(Ordering::Relaxed), Ordering::Relaxed);
        *t.acked.lock().unwrap_or_else(|e| e.into_inner()) =
            over.acked.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
    BodyEnd {
        ran,
        started: started.into_inner(),
        handed: handed.into_inner(),
        back: back.into_inner(),
        revoked_late: revoked_late.into_inner(),
    }
}

/// How long (ms) a run may wait since its last revoked check — for a slot,
/// its rate, a stuck runner, or on the process pool's deck for a child —
/// before the check is made again as it is taken: a check per run is a
/// round trip made while holding the slot, which a drain of short bodies
/// feels (a no-op Redis drain at the defaults went from 21-22k to
/// 25-26k/s without it: each of its runs waits a fraction of a millisecond
/// for a slot), while a run that waited out long bodies should not miss a
/// revoke sent meanwhile. A revoke sent less than this before a run is
/// taken may miss it, as one sent during the round trip would.
pub(super) const RECHECK_AFTER: i64 = 100;

/// Records `m` as revoked before it ran and settles its claim (acking it
/// when `owed`: an ack not made yet).
async fn revoked_before(
    s: &Shared,
    w: &Writer,
    m: &Arc<Message>,
    receipt: Receipt,
    owed: bool,
) -> Result<(), Refused> {
    let f = Failure::new("Revoked", "revoked before it ran");
    event(s, m, State::Revoked, None, Some(failure_text(&f))).await;
    Box::pin(give_up(&s.app, m, State::Revoked, f, None)).await?;
    Box::pin(settle_late(w, owed, receipt)).await
}

/// Counts a run as settling from its body's end until the run is over,
/// whichever way it ends: see [`Shared::settling`].
struct Settling<'a>(&'a Shared);

impl<'a> Settling<'a> {
    fn new(s: &'a Shared) -> Settling<'a> {
        s.settling.fetch_add(1, Ordering::SeqCst);
        s.freed.notify_one();
        Settling(s)
    }
}

impl Drop for Settling<'_> {
    fn drop(&mut self) {
        self.0.settling.fetch_sub(1, Ordering::SeqCst);
    }
}
