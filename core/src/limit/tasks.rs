//! [`TaskLimits`] on Redis, for both Redis layouts: a task's global rate is
//! a [`SharedBucket`], a concurrency key a [`SharedGate`] (leased, so a
//! killed worker's room comes back), a dedupe key a string that expires
//! (`lua/dedupe.lua`). Every script runs on the broker's own link, so a
//! limit follows the broker through a Sentinel failover or a Cluster.
//!
//! The clock is Redis's `TIME`, as for every shared limit; on a virtual
//! clock (tests) the app's now is passed instead, as the own layout's
//! scripts do.

use std::sync::{Arc, LazyLock};

use redis::Script;

use super::store::{Linked, Store};
use super::{GateOp, SharedBucket, SharedGate};
use crate::flow::{self, MILLI, Nanos};
use crate::task::clock::{BoxFuture, Clock};
use crate::task::limits::TaskLimits;
use crate::task::state::Refused;

static DEDUPE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/dedupe.lua")));

/// A Redis broker's task limits.
pub(crate) struct RedisTaskLimits {
    link: Arc<dyn Linked>,
    ns: String,
    lease: Nanos,
    clock: Arc<dyn Clock>,
}

impl RedisTaskLimits {
    /// Limits on `link` under namespace `ns`, concurrency permits leased
    /// for `lease`; `clock` is the broker's (virtual: its now is passed).
    pub(crate) fn new(
        link: Arc<dyn Linked>,
        ns: String,
        lease: Nanos,
        clock: Arc<dyn Clock>,
    ) -> Arc<RedisTaskLimits> {
        Arc::new(RedisTaskLimits {
            link,
            ns,
            lease,
            clock,
        })
    }

    fn now(&self) -> Option<super::Micros> {
        self.clock
            .is_virtual()
            .then(|| self.clock.now().saturating_mul(1000))
    }
}

impl TaskLimits for RedisTaskLimits {
    fn take_rate<'a>(
        &'a self,
        key: &'a str,
        rate: f64,
    ) -> BoxFuture<'a, Result<Option<Nanos>, Refused>> {
        Box::pin(async move {
            let model = flow::Bucket::new(rate, None, 0).map_err(super::invalid)?;
            let b = SharedBucket::on(Store::on(self.link.clone(), "bucket", key), &model);
            let a = b.call(1.0, true, self.now()).await?;
            Ok((!a.taken).then_some(a.wait))
        })
    }

    fn gate<'a>(
        &'a self,
        key: &'a str,
        limit: u32,
        op: GateOp,
        permit: &'a str,
    ) -> BoxFuture<'a, Result<bool, Refused>> {
        Box::pin(async move {
            let g = SharedGate::on(
                Store::on(self.link.clone(), "gate", key),
                limit as i64,
                self.lease,
            );
            Ok(g.call(op, permit, self.now()).await?.ok)
        })
    }

    fn dedupe<'a>(
        &'a self,
        key: &'a str,
        id: &'a str,
        ttl: i64,
    ) -> BoxFuture<'a, Result<Option<String>, Refused>> {
        Box::pin(async move {
            let s = Store::on(self.link.clone(), "dedupe", key);
            let ttl = ttl.max(1).to_string();
            s.run(&DEDUPE, &["claim", id, &ttl]).await
        })
    }

    fn undedupe<'a>(&'a self, key: &'a str, id: &'a str) -> BoxFuture<'a, Result<(), Refused>> {
        Box::pin(async move {
            let s = Store::on(self.link.clone(), "dedupe", key);
            let _: Option<String> = s.run(&DEDUPE, &["drop", id, "1"]).await?;
            Ok(())
        })
    }

    fn lease(&self) -> Nanos {
        self.lease.max(MILLI)
    }

    fn namespace(&self) -> &str {
        &self.ns
    }
}
