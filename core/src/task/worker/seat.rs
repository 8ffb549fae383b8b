//! Waiting to start: a slot, or a place on deck.
//!
//! A run that finds every slot busy waits for one — or, when its body is
//! a host's (a Python or JS callable on the threads pool) and it needs
//! none of the steps a run on deck skips, takes a place on deck
//! ([`crate::task::deck`]): its call is built, not queued and not acked,
//! and the slot a host's answer frees hands it over on that host's thread,
//! so the runner that answered takes its next call in the same step.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use super::Shared;
use super::admit::limited;
use super::run::{RECHECK_AFTER, Taken};
use super::stop::wait_true;
use super::writer::{AckSent, Writer};
use crate::task::app::Registered;
use crate::task::body::Context;
use crate::task::deck::{Hand, Place, Slot, Ticket};
use crate::task::message::Message;
use crate::task::state::Failure;

/// A slot, and whether the run waited for it.
pub(super) type Seat = (Slot, bool);

/// What a run waiting to start got: a slot, or a place on deck.
pub(super) enum Got {
    Seat(Seat),
    Place(Place),
}

/// Whether a run of `reg` may wait on deck (`deck`): a host body on
/// threads, with none of the steps a run on deck skips — shared limits,
/// a per-worker rate, a chord's parts to collect, a time limit (timed
/// from the hand-over), Celery's task-started event, every runner stuck.
pub(super) fn deckable(s: &Shared, m: &Message, reg: &Registered) -> bool {
    let policy = &reg.policy;
    s.procs.is_none()
        && reg.body.host().is_some()
        && m.join.is_none()
        && !limited(m, policy)
        && s.rate_of(&m.task, policy.rate).is_none()
        && policy.timeout.is_none()
        && s.time_limit.is_none()
        && s.soft_time_limit.is_none()
        && s.limits_of(&m.task, (policy.soft_time_limit, policy.time_limit)) == (None, None)
        && m.time_limits() == (None, None)
        && s.gate.get().is_none_or(|g| g.healthy())
        && !s.app.inspector().is_some_and(|i| i.wants_run_starts())
}

/// Waits for a slot, or for a place on deck when `deckable` says the run
/// may wait there (asked only when no slot is free); `None` when the
/// worker stops first (the message, not acked yet whatever the policy, is
/// then handed back: a prefetched message is not taken).
///
/// A free slot is taken without a future; the wait for one is boxed, so a
/// run's state machine does not carry its few hundred bytes (a run's
/// future is allocated and copied whole at its start: see [`Parts`]).
pub(super) async fn slot_of(s: &Shared, deckable: impl FnOnce() -> bool) -> Option<Got> {
    if let Some(slot) = s.deck.try_slot() {
        return Some(Got::Seat((slot, false)));
    }
    let deckable = deckable();
    if deckable && let Ok(place) = s.deck.room().clone().try_acquire_owned() {
        return Some(Got::Place(place));
    }
    Box::pin(slot_wait(s, deckable)).await
}

async fn slot_wait(s: &Shared, deckable: bool) -> Option<Got> {
    let mut stopping = s.stopping.subscribe();
    let room = s.deck.room().clone();
    tokio::select! {
        p = s.slots.clone().acquire_owned() => p.ok().map(|p| Got::Seat((s.deck.slot(p), true))),
        p = room.acquire_owned(), if deckable => p.ok().map(Got::Place),
        _ = wait_true(&mut stopping) => None,
    }
}

/// What handing a run on deck over tells its task: when it started, and
/// its early ack.
#[derive(Default)]
pub(super) struct Handover {
    pub(super) at: AtomicI64,
    pub(super) acked: Mutex<Option<AckSent>>,
}

/// A run on deck (`deck`), from its place in line to its body's answer:
/// handed over when a slot frees — on the freeing thread while it is
/// fresh, else here after the revoked check a run that waited makes — or
/// given back at a stop while still in line.
#[allow(clippy::too_many_arguments)]
pub(super) async fn on_deck(
    s: &Arc<Shared>,
    w: &Arc<Writer>,
    m: &Arc<Message>,
    t: &Taken<'_>,
    (ctx, args): (Context, Vec<Value>),
    place: Place,
    (over, ticket): (&Arc<Handover>, &Arc<Ticket>),
    (back, revoked_late): (&AtomicBool, &AtomicBool),
    stopping: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<Value, Failure> {
    let Some((queue, key)) = t.body.host() else {
        return Err(Failure::new("WorkerLost", "not a host body"));
    };
    let early = !t.policy.acks_late;
    let (reply, mut rx) = tokio::sync::oneshot::channel();
    let started: Box<dyn FnOnce(bool) + Send> = {
        let (s, w, over, receipt, run) =
            (s.clone(), w.clone(), over.clone(), t.receipt.clone(), t.key);
        Box::new(move |ack| {
            let now = s.app.now();
            over.at.store(now, Ordering::Relaxed);
            s.start(run, now, early);
            if ack && early {
                *over.acked.lock().unwrap_or_else(|e| e.into_inner()) = Some(w.ack_soon(receipt));
            }
        })
    };
    let hand = Hand {
        ticket: ticket.clone(),
        queue: queue.clone(),
        key,
        ctx,
        args,
        reply,
        started,
        rt: tokio::runtime::Handle::current(),
    };
    let fresh = RECHECK_AFTER.saturating_sub(s.app.now().saturating_sub(t.checked));
    let fresh_until = std::time::Instant::now() + Duration::from_millis(fresh.max(0) as u64);
    let mut turn = Some(s.deck.hold(place, fresh_until, hand));
    let mut guard = Leave {
        s,
        queue: &queue,
        ticket,
        armed: true,
    };
    let r = loop {
        tokio::select! {
            biased;
            r = &mut rx => break r.unwrap_or_else(|_| {
                Err(Failure::new("WorkerLost", "the host runner has stopped"))
            }),
            got = async { turn.as_mut().expect("waiting for its turn").await }, if turn.is_some() => {
                turn = None;
                // Handed over on the freeing thread, or its slot sent here.
                if let Ok((slot, hand)) = got {
                    // Every runner stuck: wait for one rather than ack a
                    // call nobody takes; a stop gives it back meanwhile.
                    if let Some(g) = s.gate.get()
                        && !g.healthy()
                    {
                        let healthy = tokio::select! {
                            _ = g.until_healthy() => true,
                            _ = wait_true(stopping) => false,
                        };
                        if !healthy {
                            drop((slot, hand));
                            s.deck.leave(ticket);
                            back.store(true, Ordering::Relaxed);
                            break Err(Failure::new("Stopping", "the worker is stopping"));
                        }
                    }
                    // Long on deck: a revoke sent meanwhile still stops it.
                    if matches!(w.take(None, Some(m.id.clone())).await, Ok(true)) {
                        drop((slot, hand));
                        revoked_late.store(true, Ordering::Relaxed);
                        break Err(Failure::new("Revoked", "revoked before it ran"));
                    }
                    let _ = hand.go(slot, true);
                }
            }
            _ = wait_true(stopping), if !ticket.handed() => {
                // A stop gives back what waits on deck: not acked, not
                // started.
                if s.deck.leave(ticket) {
                    back.store(true, Ordering::Relaxed);
                    break Err(Failure::new("Stopping", "the worker is stopping"));
                }
            }
        }
    };
    guard.armed = false;
    r
}

/// Takes a run on deck out of line if its future is dropped (terminated,
/// cancelled), and withdraws its call if it was handed over.
struct Leave<'a> {
    s: &'a Shared,
    queue: &'a crate::task::host::HostQueue,
    ticket: &'a Arc<Ticket>,
    armed: bool,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        if self.armed && !self.s.deck.leave(self.ticket) {
            crate::task::deck::Deck::withdraw(self.queue, self.ticket);
        }
    }
}
