//! A concurrency gate shared by every process that names the same key:
//! [`flow::Gate`]'s rules, run in Redis by `lua/gate.lua`, with one thing
//! the in-process gate does not need — a lease.
//!
//! In one process a holder that dies takes its room with it, because the
//! gate dies too. Across processes the gate outlives a holder that crashed
//! mid-request, and a plain count would keep that room taken for ever. So
//! each room is a *permit* whose lease ends `lease` after it was taken (or
//! last renewed); an ended lease is room again. A holder that works longer
//! than its lease renews it ([`SharedGate::renew`]), and releasing names the
//! permit, so a late release of a permit that already ran out cannot give
//! back somebody else's room.

use std::sync::LazyLock;

use redis::{Script, Value};

use super::store::{Req, Store};
use super::{Asked, Limit, Micros, clock_arg, limit_impl, micros_up, script};
use crate::flow::{self, Nanos, SECOND};
use crate::task::state::Refused;

const SOURCE: &str = script!("gate.lua");
static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(SOURCE));

/// A permit's lease when none is given: 30 s, the task queue's own lease
/// (BullMQ's lock duration), long for a request, short for an outage.
pub const LEASE: Nanos = 30 * SECOND;

/// What one call to the script answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateAnswer {
    /// Whether the op did what it asks (a permit taken, released, renewed).
    pub ok: bool,
    /// How many permits are held after the call.
    pub held: i64,
    /// How long until the earliest lease ends (`None`: none is held).
    pub soonest: Option<Nanos>,
}

/// What the script is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateOp {
    Take,
    Release,
    Renew,
    Held,
}

impl GateOp {
    fn arg(self) -> &'static str {
        match self {
            GateOp::Take => "take",
            GateOp::Release => "release",
            GateOp::Renew => "renew",
            GateOp::Held => "held",
        }
    }
}

/// At most `n` permits held at once, in Redis under one key.
#[derive(Clone)]
pub struct SharedGate {
    store: Store,
    limit: i64,
    lease: Nanos,
    limit_arg: String,
    lease_arg: String,
}

impl SharedGate {
    /// The gate `key` on the Redis at `url`: no I/O, the first call
    /// connects. `n` is refused as [`flow::Gate::new`] refuses a limit (a
    /// negative one); `lease` (`None`: [`LEASE`]) must be positive, and is
    /// counted in whole microseconds, rounded up. Also refused: a bad URL,
    /// an empty key.
    pub fn new(url: &str, key: &str, n: i64, lease: Option<Nanos>) -> Result<Self, Refused> {
        flow::Gate::new(n).map_err(|e| super::invalid(super::renamed(e, "n", "n")))?;
        let lease = lease.unwrap_or(LEASE);
        if lease <= 0 {
            return Err(Refused::Invalid("invalid `lease`: must be positive".into()));
        }
        let store = Store::new(url, "gate", key)?;
        Ok(Self::on(store, n, lease))
    }

    /// A gate of `n` permits leased for `lease` (both checked), kept in
    /// `store`.
    pub(crate) fn on(store: Store, n: i64, lease: Nanos) -> Self {
        SharedGate {
            store,
            limit: n,
            lease,
            limit_arg: n.to_string(),
            lease_arg: micros_up(lease).to_string(),
        }
    }

    /// The most permits held at once.
    pub fn limit(&self) -> i64 {
        self.limit
    }

    /// How long a permit is held unless renewed.
    pub fn lease(&self) -> Nanos {
        self.lease
    }

    /// The Redis key it lives under.
    pub fn key(&self) -> &str {
        self.store.key()
    }

    /// A permit when there is room (a fresh id, to release or renew), else
    /// `None`.
    pub async fn take(&self) -> Result<Option<String>, Refused> {
        let (req, pick) = self.ask_take_new();
        Ok(pick(self.send(req).await?))
    }

    /// Gives the permit's room back: whether it was held. A permit released
    /// twice, or whose lease ran out, gives back nothing.
    pub async fn release(&self, permit: &str) -> Result<bool, Refused> {
        self.made(self.ask_release(permit)).await
    }

    /// Starts the permit's lease again: whether it was still held (a
    /// permit whose lease ran out is not, and may not come back).
    pub async fn renew(&self, permit: &str) -> Result<bool, Refused> {
        self.made(self.ask_renew(permit)).await
    }

    /// How many permits are held now.
    pub async fn held(&self) -> Result<i64, Refused> {
        self.made(self.ask_held()).await
    }

    /// One call to the script at `now` (microseconds; `None` reads Redis
    /// `TIME`). An explicit `now` is for tests, and leaves the key without
    /// an expiry.
    #[doc(hidden)]
    pub async fn call(
        &self,
        op: GateOp,
        permit: &str,
        now: Option<Micros>,
    ) -> Result<GateAnswer, Refused> {
        self.send(self.ask(op, permit, now)).await
    }

    /// [`Self::take`] of `permit` ([`new_permit`]), asked: whether it was
    /// taken.
    pub fn ask_take(&self, permit: &str) -> Asked<GateAnswer, bool> {
        Asked {
            req: self.ask(GateOp::Take, permit, None),
            pick: |a| a.ok,
        }
    }

    /// [`Self::take`], asked: a fresh permit's take, answered as the
    /// permit when taken. Made again after a lost socket, the call names
    /// the same permit.
    pub fn ask_take_new(
        &self,
    ) -> (
        Req,
        impl FnOnce(GateAnswer) -> Option<String> + Send + 'static,
    ) {
        let permit = new_permit();
        let Asked { req, pick } = self.ask_take(&permit);
        (req, move |a| pick(a).then_some(permit))
    }

    /// [`Self::release`], asked.
    pub fn ask_release(&self, permit: &str) -> Asked<GateAnswer, bool> {
        Asked {
            req: self.ask(GateOp::Release, permit, None),
            pick: |a| a.ok,
        }
    }

    /// [`Self::renew`], asked.
    pub fn ask_renew(&self, permit: &str) -> Asked<GateAnswer, bool> {
        Asked {
            req: self.ask(GateOp::Renew, permit, None),
            pick: |a| a.ok,
        }
    }

    /// [`Self::held`], asked.
    pub fn ask_held(&self) -> Asked<GateAnswer, i64> {
        Asked {
            req: self.ask(GateOp::Held, "", None),
            pick: |a| a.held,
        }
    }

    /// [`Self::call`]'s script call (the methods' asks are made of it).
    fn ask(&self, op: GateOp, permit: &str, now: Option<Micros>) -> Req {
        let now = clock_arg(now);
        self.store.req(
            SOURCE,
            &SCRIPT,
            &[op.arg(), &self.limit_arg, &self.lease_arg, permit, &now],
        )
    }
}

limit_impl!(SharedGate, GateAnswer, |me, v| {
    let (ok, held, soonest): (i64, i64, i64) = me.store.typed(v)?;
    Ok(GateAnswer {
        ok: ok == 1,
        held,
        soonest: (soonest >= 0).then(|| soonest.saturating_mul(1000)),
    })
});

/// A fresh permit id for [`SharedGate::ask`]'s take.
pub fn new_permit() -> String {
    crate::task::message::new_id()
}
