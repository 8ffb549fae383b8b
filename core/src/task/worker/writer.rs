//! The writer: many runs' writes, one round trip.
//!
//! Under load, a store, an event and an ack per run would each be a round
//! trip; gathered, a round carries whatever is waiting when the last one
//! came back, so the cost per run falls as load rises while a lone run
//! still writes at once (no timer). A finished run's write is retried until
//! it lands, because giving the message back instead would run it twice.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;

use super::stop::wait_true;
use super::warn;
use crate::task::app::App;
use crate::task::clock::BoxFuture;
use crate::task::spec::{Receipt, Round, RunNote};
use crate::task::state::{BrokerErrorKind, Outcome, Refused};

/// How many gathered jobs the writer sends in one go at most.
const WRITE_BATCH: usize = 512;
/// How many of its rounds may be in flight at once. One: what arrives while
/// a round is out goes in the next, so under load each round carries more
/// (a Python drain on Redis: 17 µs of Redis CPU per task against 21–22 µs
/// with two in flight), while a lone write still goes out at once.
const WRITE_ROUNDS: usize = 1;
/// How many take rounds may be in flight at once. One, for the same reason:
/// with four, the Rust drain on Redis spent more CPU per task (smaller
/// rounds) and was no faster.
const TAKE_ROUNDS: usize = 1;

/// The answer to an ack sent without waiting ([`Writer::ack_soon`]): on a
/// local broker, whose ack completes in the call, the answer itself (a
/// channel for it was an allocation a run); else the writer's answer to
/// come.
pub(super) enum AckSent {
    /// Whether it landed.
    Done(bool),
    Coming(oneshot::Receiver<Result<bool, Refused>>),
}

/// One run's writes or question, for the writer to gather with others'.
pub(super) struct Job {
    outcomes: Vec<Outcome>,
    event: Option<RunNote>,
    /// Settled after `outcomes` land (at once when there are none).
    ack: Option<Receipt>,
    /// An id whose revoked status is asked.
    ask: Option<String>,
    done: oneshot::Sender<Result<bool, Refused>>,
}

/// A run's way to the writer: two lanes, because a take holds a slot while
/// it waits and a write does not.
#[derive(Clone)]
pub(super) struct Writer {
    pub(super) writes: mpsc::UnboundedSender<Job>,
    pub(super) takes: mpsc::UnboundedSender<Job>,
    /// Set when the grace is over: a write still failing then gives up.
    pub(super) cancel: watch::Receiver<bool>,
    pub(super) name: Arc<str>,
    /// The app, when its broker is [`local`](crate::task::spec::Broker::local)
    /// and also its result store and event log: writes then go straight to
    /// it, with no job, channel, answer or round between (a Rust no-op drain
    /// on the memory broker: each run's write otherwise woke the writer and
    /// was woken by its answer).
    pub(super) direct: Option<App>,
    /// The app, when its broker's ack completes in the call
    /// ([`acks_at_once`](crate::task::spec::Broker::acks_at_once)): an
    /// early ack then goes to it straight from the run.
    pub(super) acks: Option<App>,
}

/// The app to write through directly, when its broker allows it (see
/// [`Writer::direct`]).
pub(super) fn direct(app: &App) -> Option<App> {
    (app.broker().local() && fused(app)).then(|| app.clone())
}

impl Writer {
    async fn send(
        lane: &mpsc::UnboundedSender<Job>,
        job: Job,
        rx: oneshot::Receiver<Result<bool, Refused>>,
    ) -> Result<bool, Refused> {
        lane.send(job).map_err(|_| {
            Refused::broker(BrokerErrorKind::Closed, "the worker's writer has stopped")
        })?;
        rx.await.map_err(|_| {
            Refused::broker(BrokerErrorKind::Closed, "the worker's writer has stopped")
        })?
    }

    /// Stores `outcomes` and records `event`, then acks `ack`. A write the
    /// broker refuses (Redis away longer than its patience) is sent again,
    /// backing off, until it lands or the worker's grace is over: the run
    /// has finished, and giving its message back instead would run it
    /// twice.
    pub(super) fn write(
        &self,
        outcomes: Vec<Outcome>,
        event: Option<RunNote>,
        ack: Option<Receipt>,
    ) -> BoxFuture<'_, Result<(), Refused>> {
        if outcomes.is_empty() && event.is_none() && ack.is_none() {
            return crate::task::clock::done();
        }
        match &self.direct {
            Some(app) => Box::pin(write_direct(app, outcomes, event, ack)),
            None => Box::pin(self.write_queued(outcomes, event, ack)),
        }
    }

    /// [`Writer::write`] through the writer's rounds.
    async fn write_queued(
        &self,
        outcomes: Vec<Outcome>,
        event: Option<RunNote>,
        ack: Option<Receipt>,
    ) -> Result<(), Refused> {
        let mut cancel = self.cancel.clone();
        let mut failures = 0u32;
        loop {
            let (done, rx) = oneshot::channel();
            let job = Job {
                outcomes: outcomes.clone(),
                event: event.clone(),
                ack: ack.clone(),
                ask: None,
                done,
            };
            self.writes.send(job).map_err(|_| {
                Refused::broker(BrokerErrorKind::Closed, "the worker's writer has stopped")
            })?;
            let e = match rx.await {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(e @ Refused::Broker(_))) if !*cancel.borrow() => e,
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(Refused::broker(
                        BrokerErrorKind::Closed,
                        "the worker's writer has stopped",
                    ));
                }
            };
            failures += 1;
            if failures == 1 {
                warn(
                    &self.name,
                    &format!("could not store a finished run ({e}); retrying until it lands"),
                );
            }
            let wait = Duration::from_millis(50 << failures.min(6));
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = wait_true(&mut cancel) => {}
            }
        }
    }

    /// Acks `ack` without waiting for the broker's answer: the process
    /// pool's hand-over of a run to its child. The answer comes on the
    /// receiver.
    pub(super) fn ack_soon(&self, ack: Receipt) -> AckSent {
        if let Some(app) = self.direct.as_ref().or(self.acks.as_ref()) {
            // A local broker's ack completes in the call (RabbitMQ's
            // gathered one too); one that did not is counted as not
            // landed, and made again after the run.
            return AckSent::Done(matches!(
                app.broker().ack(vec![ack]).now_or_never(),
                Some(Ok(()))
            ));
        }
        let (done, rx) = oneshot::channel();
        let job = Job {
            outcomes: Vec::new(),
            event: None,
            ack: Some(ack),
            ask: None,
            done,
        };
        // A writer gone drops the job, and the receiver answers an error.
        let _ = self.takes.send(job);
        AckSent::Coming(rx)
    }

    /// Acks `ack` and answers whether `ask` is revoked now (`false` when
    /// not asked), in one job.
    pub(super) async fn take(
        &self,
        ack: Option<Receipt>,
        ask: Option<String>,
    ) -> Result<bool, Refused> {
        if let Some(app) = &self.direct {
            if let Some(a) = ack {
                app.broker().ack(vec![a]).await?;
            }
            return match ask {
                Some(id) => Ok(app.broker().revoked(&[id]).await?.first() == Some(&true)),
                None => Ok(false),
            };
        }
        let (done, rx) = oneshot::channel();
        let job = Job {
            outcomes: Vec::new(),
            event: None,
            ack,
            ask,
            done,
        };
        Self::send(&self.takes, job, rx).await
    }
}

/// [`Writer::write`] straight to a local broker: in the order a round keeps,
/// the result, then the ack.
async fn write_direct(
    app: &App,
    outcomes: Vec<Outcome>,
    event: Option<RunNote>,
    ack: Option<Receipt>,
) -> Result<(), Refused> {
    app.store(outcomes).await?;
    if let (Some(ev), Some(i)) = (event, app.inspector()) {
        let _ = i.record_notes(vec![ev]).await;
    }
    match ack {
        Some(a) => app.broker().ack(vec![a]).await,
        None => Ok(()),
    }
}

/// Gathers the runs' writes and questions: whatever is waiting when it
/// looks goes out as one round (one store, one record, one ack, one revoked
/// lookup, side by side), so under load there is about one round trip per
/// batch, while a lone run's write goes out at once — no timer.
///
/// Takes (an early ack, a revoked check before running) and writes come in
/// on two lanes, each with its own limit of rounds in flight: a run waits on
/// its take holding a slot, so a take never queues behind a round of results
/// in flight; it goes out at once, pipelined on the same connection. When
/// both lanes have room, a round carries what waits on both: a slot whose
/// run just ended writes its result and takes its next message at the same
/// moment, and one round trip for the two rather than two took a no-op drain
/// at concurrency 2 on Redis (`bench/procs`, 5 000 runs) from 6.6–6.8k/s to
/// 7.5–9.1k/s on the process pool. A round that carries writes does not
/// count against the takes' limit: with it counted, a take waited behind a
/// store and the same drain fell to 3.5–4.9k/s.
pub(super) async fn write_loop(
    app: App,
    mut writes: mpsc::UnboundedReceiver<Job>,
    mut takes: mpsc::UnboundedReceiver<Job>,
) {
    // The rounds in flight, and whether each carries writes and takes.
    let mut rounds: JoinSet<()> = JoinSet::new();
    let mut carried: HashMap<tokio::task::Id, (bool, bool)> = HashMap::new();
    let (mut w_in, mut t_in) = (0usize, 0usize);
    let (mut w_open, mut t_open) = (true, true);
    while w_open || t_open || !rounds.is_empty() {
        let first = tokio::select! {
            biased;
            Some(done) = rounds.join_next_with_id(), if !rounds.is_empty() => {
                // A round that panicked is counted out all the same.
                let id = match done {
                    Ok((id, ())) => id,
                    Err(e) => e.id(),
                };
                if let Some((w, t)) = carried.remove(&id) {
                    w_in -= usize::from(w);
                    t_in -= usize::from(t);
                }
                continue;
            }
            got = takes.recv(), if t_open && t_in < TAKE_ROUNDS => match got {
                Some(j) => (None, Some(j)),
                None => { t_open = false; continue; }
            },
            got = writes.recv(), if w_open && w_in < WRITE_ROUNDS => match got {
                Some(j) => (Some(j), None),
                None => { w_open = false; continue; }
            },
            else => break,
        };
        // The first job's sender woke this task, and the scheduler runs the
        // task woken last first: yield once so the runs woken with it (by
        // the same reply, the same freed slots) put their jobs in this
        // round, not the next (the Rust drain on Redis: 26k/s against
        // 20k/s).
        tokio::task::yield_now().await;
        let (mut batch, mut carries_w, mut carries_t) = (Vec::new(), false, false);
        let (w_first, t_first) = first;
        if let Some(j) = t_first {
            batch.push(j);
            carries_t = true;
        }
        if let Some(j) = w_first {
            batch.push(j);
            carries_w = true;
        }
        if t_in < TAKE_ROUNDS {
            carries_t |= gather(&mut takes, &mut batch);
        }
        if w_in < WRITE_ROUNDS {
            carries_w |= gather(&mut writes, &mut batch);
        }
        // A round that carries writes counts against the writes' limit
        // only: a take arriving while it is out goes at once, in a round of
        // its own, rather than wait behind a store.
        let carries_t = carries_t && !carries_w;
        w_in += usize::from(carries_w);
        t_in += usize::from(carries_t);
        let id = rounds.spawn(write_round(app.clone(), batch)).id();
        carried.insert(id, (carries_w, carries_t));
    }
}

/// Moves what waits in `jobs` into `batch`, up to [`WRITE_BATCH`] in all;
/// answers whether it moved any.
fn gather(jobs: &mut mpsc::UnboundedReceiver<Job>, batch: &mut Vec<Job>) -> bool {
    let before = batch.len();
    while batch.len() < WRITE_BATCH {
        match jobs.try_recv() {
            Ok(j) => batch.push(j),
            Err(_) => break,
        }
    }
    batch.len() > before
}

/// Whether the broker is also the app's result store and event log (one
/// object behind the seams), so a round can go to it whole.
fn fused(app: &App) -> bool {
    let me = Arc::as_ptr(app.broker()) as *const u8;
    app.backend()
        .is_some_and(|b| Arc::as_ptr(b) as *const u8 == me)
        && app
            .inspector()
            .is_none_or(|i| Arc::as_ptr(i) as *const u8 == me)
}

async fn write_round(app: App, batch: Vec<Job>) {
    let broker = app.broker();
    let mut r = Round::default();
    let mut replies = Vec::with_capacity(batch.len());
    for j in batch {
        let stores = !j.outcomes.is_empty();
        if let Some(a) = j.ack {
            if stores {
                // Acked once the run's last outcome is stored.
                r.after.push((r.outcomes.len() + j.outcomes.len() - 1, a))
            } else {
                r.acks.push(a)
            }
        }
        let asked = j.ask.is_some();
        r.ask.extend(j.ask);
        r.outcomes.extend(j.outcomes);
        r.events.extend(j.event.as_ref().map(RunNote::event));
        replies.push((j.done, stores, asked));
    }
    // One call when the broker takes the round whole; else side by side.
    let r = if fused(&app) {
        match broker.round(r) {
            Ok(call) => {
                let got = call.await;
                let mut looked = got.as_ref().map(|v| v.iter());
                for (done, _, asked) in replies {
                    let _ = done.send(match &mut looked {
                        Ok(it) => Ok(asked && it.next().copied().unwrap_or(false)),
                        Err(e) => Err(e.clone()),
                    });
                }
                return;
            }
            Err(r) => r,
        }
    } else {
        r
    };
    let Round {
        outcomes,
        events,
        acks: bare,
        after,
        ask: ids,
    } = r;
    let (stored, acked, revoked, _) = tokio::join!(
        async {
            if outcomes.is_empty() {
                Ok(())
            } else {
                app.store(outcomes).await
            }
        },
        async {
            if bare.is_empty() {
                Ok(())
            } else {
                broker.ack(bare).await
            }
        },
        async {
            if ids.is_empty() {
                Ok(Vec::new())
            } else {
                broker.revoked(&ids).await
            }
        },
        async {
            if let Some(i) = app.inspector()
                && !events.is_empty()
            {
                let _ = i.record(events).await;
            }
        },
    );
    let late = match &stored {
        Ok(()) if !after.is_empty() => {
            broker
                .ack(after.into_iter().map(|(_, a)| a).collect())
                .await
        }
        _ => Ok(()),
    };
    let mut looked = revoked.as_ref().map(|v| v.iter());
    for (done, stores, asked) in replies {
        let r = if asked {
            match &mut looked {
                Ok(it) => Ok(it.next().copied().unwrap_or(false)),
                Err(e) => Err(e.clone()),
            }
        } else if stores {
            stored.clone().and_then(|_| late.clone()).map(|_| false)
        } else {
            acked.clone().map(|_| false)
        };
        let _ = done.send(r);
    }
}
