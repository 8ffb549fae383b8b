//! Publishing: one Lua script (or, for messages with no eta on step 0, one
//! LPUSH) per queue and chunk, so a queue's part of a publish is stored
//! whole or not at all; with `?wait=N` a publish is
//! confirmed only once N replicas have it.
//!
//! Why chunks: Redis runs one script at a time, so a publish of thousands
//! is cut into scripts of [`CHUNK`] messages that each stay short.

use std::collections::HashSet;

use ::redis::Pipeline;

use super::RedisBroker;
use super::options::check_name;
use super::scripts::evalsha;
use super::wire::{step_arg, step_of};
use crate::broker::link::Conn;
use crate::task::message::Message;
use crate::task::state::{BrokerError, BrokerErrorKind, Refused};

/// How many messages one publish script carries: keeps each script short
/// (Redis runs one at a time) and Lua's stack small.
pub(super) const CHUNK: usize = 500;

impl RedisBroker {
    pub(super) async fn publish_inner(&self, messages: Vec<Message>) -> Result<(), Refused> {
        if messages.is_empty() {
            return Ok(());
        }
        let mut p = ::redis::pipe();
        self.publish_cmds(&mut p, &messages)?;
        let mut queues: Vec<&str> = messages.iter().map(|m| m.queue.as_str()).collect();
        queues.sort_unstable();
        queues.dedup();
        self.sent(&mut p, &queues).await
    }

    /// Runs a send's pipeline; with `?wait=N`, `WAIT N timeout` after it on
    /// the same connection, and a send fewer than N replicas acknowledged
    /// is refused (not confirmed: it may or may not survive a failover).
    async fn sent(&self, p: &mut Pipeline, queues: &[&str]) -> Result<(), Refused> {
        let Some(w) = self.url.wait else {
            return self.run(p, true).await.map(|_| ());
        };
        let acked = if self.cluster {
            self.waited_on_cluster(p, queues, w).await?
        } else {
            p.cmd("WAIT")
                .arg(w.replicas)
                .arg(w.timeout.as_millis() as u64);
            let got = self.run(p, true).await?;
            match got.last() {
                Some(::redis::Value::Int(n)) => *n,
                _ => -1,
            }
        };
        if acked >= i64::from(w.replicas) {
            return Ok(());
        }
        Err(Refused::Broker(BrokerError::new(
            BrokerErrorKind::Server,
            format!(
                "{}: `wait`: {} of the {} replicas asked for acknowledged the send within \
                 {} ms; the send is not confirmed (it may or may not survive a failover)",
                self.url,
                acked.max(0),
                w.replicas,
                w.timeout.as_millis()
            ),
        )))
    }

    /// Adds `SADD P:queues` for queues this process has not registered yet.
    pub(super) fn register(&self, p: &mut Pipeline, queues: &[&str]) {
        let epoch = self.link.epoch();
        let mut k = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if k.0 != epoch {
            *k = (epoch, HashSet::new());
        }
        for q in queues {
            if !k.1.contains(*q) {
                k.1.insert(q.to_string());
                p.cmd("SADD").arg(self.queues_key()).arg(*q).ignore();
            }
        }
    }

    pub(super) fn publish_cmds(
        &self,
        p: &mut Pipeline,
        messages: &[Message],
    ) -> Result<(), Refused> {
        // Per queue, in order; chunks keep each script short.
        let mut by: Vec<(&str, Vec<&Message>)> = Vec::new();
        for m in messages {
            check_name("queue", &m.queue)?;
            match by.iter_mut().find(|(q, _)| *q == m.queue) {
                Some((_, v)) => v.push(m),
                None => by.push((&m.queue, vec![m])),
            }
        }
        let qs: Vec<&str> = by.iter().map(|(q, _)| *q).collect();
        self.register(p, &qs);
        let now = self.now_arg();
        let mut encoded = Vec::with_capacity(messages.len());
        for (q, ms) in by {
            for m in ms {
                let json = m.to_json();
                if json.len() > self.max_bytes {
                    return Err(Refused::Invalid(format!(
                        "invalid `message` {:?}: {} bytes encoded, over the `max_message_bytes` cap of {}",
                        crate::task::spec::truncate(m.id.clone(), 64),
                        json.len(),
                        self.max_bytes
                    )));
                }
                encoded.push((q, m, json));
            }
        }
        for chunk in encoded.chunk_by(|a, b| a.0 == b.0) {
            let base = self.base(chunk[0].0);
            for part in chunk.chunks(CHUNK) {
                // Messages with no eta on step 0 (the common send) are what
                // the script would LPUSH one by one, in order, with nothing
                // to ring: one LPUSH of them all is the same write, atomic,
                // and costs Redis a tenth of a script call (a delay() loop:
                // 15 µs of Redis CPU per send in the script, 2 in LPUSH).
                if part
                    .iter()
                    .all(|(_, m, _)| m.eta.is_none() && step_of(m) == 0)
                {
                    let c = p.cmd("LPUSH").arg(self.key(chunk[0].0, "ready:", "0"));
                    for (_, _, json) in part {
                        c.arg(json.as_slice());
                    }
                    c.ignore();
                    continue;
                }
                let mut c = evalsha(&self.scripts.publish, &base);
                c.arg(&now);
                for (_, m, json) in part {
                    c.arg(step_arg(step_of(m)))
                        .arg(m.eta.map(|e| e.to_string()).unwrap_or_default())
                        .arg(json.as_slice());
                }
                p.add_command(c).ignore();
            }
        }
        Ok(())
    }

    /// Puts `raw` on `queue` (priority step 0, at the tail) as another
    /// producer would, unchecked: it is decoded when claimed, and
    /// quarantined if it is not a message headway will run. For tests and
    /// tools; an app publishes with [`Broker::publish`].
    pub async fn push_raw(&self, queue: &str, raw: &[u8]) -> Result<(), Refused> {
        check_name("queue", queue)?;
        let mut p = ::redis::pipe();
        self.register(&mut p, &[queue]);
        p.cmd("LPUSH")
            .arg(self.key(queue, "ready:", "0"))
            .arg(raw)
            .ignore();
        self.sent(&mut p, &[queue]).await
    }
}

impl RedisBroker {
    /// On a Cluster: runs the send, then `WAIT` on the primary of each
    /// queue's slot, over the connection the send went on (the cluster
    /// client keeps one per node); answers the fewest replicas any slot's
    /// write reached, -1 when the connection changed in between (nothing
    /// can be said of the send's writes).
    async fn waited_on_cluster(
        &self,
        p: &Pipeline,
        queues: &[&str],
        w: super::Wait,
    ) -> Result<i64, Refused> {
        use ::redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
        self.run(p, true).await?;
        let sent_on = self.link.epoch();
        let (epoch, c) = self.link.conn().await?;
        let Conn::Cluster(mut c) = c else {
            return Ok(-1);
        };
        if epoch != sent_on {
            return Ok(-1);
        }
        let mut least = i64::MAX;
        for q in queues {
            let route = Route::with_key(self.base(q), SlotAddr::Master);
            let mut wait = ::redis::cmd("WAIT");
            wait.arg(w.replicas).arg(w.timeout.as_millis() as u64);
            let got = c
                .route_command(
                    wait,
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                )
                .await
                .map_err(|e| self.link.fail(epoch, &e))?;
            least = least.min(match got {
                ::redis::Value::Int(n) => n,
                _ => -1,
            });
        }
        Ok(if least == i64::MAX { -1 } else { least })
    }
}
