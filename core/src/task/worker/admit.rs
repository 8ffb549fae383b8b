//! The limits a run shares with every worker on the broker, checked once it
//! has a slot: its concurrency key's room, then its task's global rate
//! (`crate::task::limits`).
//!
//! Neither wait holds what other runs could use:
//! - a run whose key is at its limit is *put off*: published again with a
//!   short eta (50 ms doubling to 1 s, [`limits::defer_delay`]) in place of
//!   its claim, in the broker's one retry step, so it is neither lost nor
//!   doubled, and the worker's slot and prefetch go to runs of other keys;
//! - a run over its global rate gives its slot back and sleeps for as long
//!   as the bucket says, still claimed and not acked: a worker that dies
//!   meanwhile has it recovered like any prefetched message. It then waits
//!   for a slot again and asks the bucket again.
//!
//! The key's permit is taken before the rate's token, so a run put off
//! never spends a token; it is renewed every third of its lease while the
//! run holds it, and given back when the body ends ([`Held`]'s drop). A
//! worker killed mid-run stops renewing, and the permit's lease runs out.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::task::deck::Slot;

use super::stop::{give_back, wait_true};
use super::{Shared, warn_run};
use crate::flow::{MILLI, Nanos};
use crate::task::limits::{self, GateOp, TaskLimits};
use crate::task::message::{Message, new_id};
use crate::task::policy::{Policy, RateScope, seeded};
use crate::task::spec::Receipt;
use crate::task::state::{BrokerErrorKind, Refused};

/// The longest a run sleeps for its rate before it looks again (a rate of
/// 0 never has a token; a remote command may change it).
const LONGEST: Nanos = 60 * crate::flow::SECOND;

/// What admitting a run came to.
pub(super) enum Admitted {
    /// It may run: its slot, and its key's permit if it has one.
    Run(Slot, Option<Held>),
    /// It was put off or given back: its claim is settled.
    Done,
}

/// A concurrency key's permit a run holds, renewed until dropped.
pub(super) struct Held {
    limits: Arc<dyn TaskLimits>,
    key: String,
    limit: u32,
    permit: String,
    renewer: tokio::task::JoinHandle<()>,
}

impl Held {
    fn start(limits: Arc<dyn TaskLimits>, key: String, limit: u32, permit: String) -> Held {
        let every = Duration::from_nanos(limits::renew_every(limits.lease()) as u64);
        let (l, k, p) = (limits.clone(), key.clone(), permit.clone());
        let renewer = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if !matches!(l.gate(&k, limit, GateOp::Renew, &p).await, Ok(true)) {
                    crate::log::warn(
                        "headway.worker",
                        format_args!(
                            "headway worker: could not renew a concurrency key's permit ({k}); its lease may run out while the run runs"
                        ),
                    );
                }
            }
        });
        Held {
            limits,
            key,
            limit,
            permit,
            renewer,
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.renewer.abort();
        let (l, k, p, n) = (
            self.limits.clone(),
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.permit),
            self.limit,
        );
        // Not given back (no runtime, Redis away): its lease runs out.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = l.gate(&k, n, GateOp::Release, &p).await;
            });
        }
    }
}

/// Whether `m` has shared limits to check: a concurrency key or a global
/// rate. Asked before [`admit`], whose future (its waits, its put-off) is
/// not worth making for the runs that have none.
pub(super) fn limited(m: &Message, policy: &Policy) -> bool {
    policy.rate_scope == RateScope::Global || m.concurrency_key().is_some()
}

/// Checks `m`'s shared limits holding `permit`; see the module docs.
/// `waited` is set when it gave its slot back to wait.
#[allow(clippy::too_many_arguments)]
pub(super) async fn admit(
    s: &Shared,
    m: &Message,
    receipt: &Receipt,
    policy: &Policy,
    permit: Slot,
    stopping: &mut watch::Receiver<bool>,
    waited: &mut bool,
) -> Result<Admitted, Refused> {
    let app = &s.app;
    if !limited(m, policy) {
        return Ok(Admitted::Run(permit, None));
    }
    let global = policy.rate_scope == RateScope::Global;
    let key = m.concurrency_key();
    let Some(l) = app.broker().task_limits() else {
        // Refused at send and at the worker's start; a message from another
        // sender on a broker that keeps no limits runs unlimited.
        warn_run(
            &s.name,
            &m.task,
            &m.id,
            "this broker keeps no shared task limits; running without them",
        );
        return Ok(Admitted::Run(permit, None));
    };
    let mut held = None;
    if let Some(k) = key {
        let gate = limits::key_key(l.namespace(), &m.task, k);
        let id = new_id();
        let limit = policy.key_limit();
        if !l.gate(&gate, limit, GateOp::Take, &id).await? {
            drop(permit);
            put_off(s, m, receipt).await?;
            return Ok(Admitted::Done);
        }
        held = Some(Held::start(l.clone(), gate, limit, id));
    }
    let mut permit = permit;
    let bucket = limits::rate_key(l.namespace(), &m.queue, &m.task);
    // Read again after every wait: a remote command may change the rate.
    while global && let Some(rate) = s.rate_of(&m.task, policy.rate) {
        let retuned = s.retuned.notified();
        tokio::pin!(retuned);
        retuned.as_mut().enable();
        let Some(wait) = l.take_rate(&bucket, rate.per_second()).await? else {
            break;
        };
        *waited = true;
        drop(permit);
        // Spread over a tenth more, so runs told the same wait do not ask
        // again in the same instant.
        let u = seeded(&m.id, app.now() as u32);
        let wait = wait.clamp(MILLI, LONGEST);
        let wait = wait.saturating_add((wait as f64 * 0.1 * u) as i64);
        let until = app.now().saturating_add(wait / MILLI + 1);
        tokio::select! {
            _ = app.clock().sleep_until(until) => {}
            _ = retuned => {}
            _ = wait_true(stopping) => {
                drop(held);
                give_back(app, m, receipt.clone(), false).await?;
                return Ok(Admitted::Done);
            }
        }
        permit = tokio::select! {
            p = s.slots.clone().acquire_owned() => s.deck.slot(p.map_err(|_| Refused::broker(BrokerErrorKind::Closed, "worker closed"))?),
            _ = wait_true(stopping) => {
                drop(held);
                give_back(app, m, receipt.clone(), false).await?;
                return Ok(Admitted::Done);
            }
        };
    }
    Ok(Admitted::Run(permit, held))
}

/// Publishes `m` again a little later in place of its claim, counting the
/// put-off.
async fn put_off(s: &Shared, m: &Message, receipt: &Receipt) -> Result<(), Refused> {
    let n = m.deferred();
    let mut next = m.clone();
    next.set_deferred(n.saturating_add(1));
    let delay = limits::defer_delay(n, seeded(&m.id, n));
    next.eta = Some(s.app.now().saturating_add(delay));
    s.app.broker().retry(receipt.clone(), next).await
}
