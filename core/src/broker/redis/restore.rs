//! Giving claims back: `recover` hands back what consumers whose lease
//! expired held (marked redelivered, dead-lettered after too many), and the
//! sweep hands back what this consumer's held list has that nobody here
//! holds (a stray BLMOVE result, a claim whose answer was lost).
//!
//! Why both: recover covers a dead process, the sweep a live one that lost
//! a reply; the fencing tokens make either safe to run at any time.

use std::sync::atomic::Ordering;

use ::redis::{Cmd, Value};

use super::scripts::evalsha;
use super::wire::{bytes, int};
use super::{RedisBroker, log};
use crate::task::state::Refused;

impl RedisBroker {
    pub(super) fn recover_cmd(&self, q: &str) -> Cmd {
        let mut c = evalsha(&self.scripts.recover, &self.base(q));
        // Its own name: a live process never recovers what it holds itself,
        // even when its lease lapsed (Redis was away longer than the lease);
        // a restart under the same name gets its old claims back by `sweep`.
        c.arg(self.max_deliveries)
            .arg(self.now_arg())
            .arg(&self.consumer);
        c
    }

    /// Hands back what this consumer's held list has that nobody here
    /// holds: a stray BLMOVE result, or a claim whose answer was lost.
    pub(super) async fn sweep(&self, q: &str) -> Result<i64, Refused> {
        let _gate = self.gate.write().await;
        let mut c = evalsha(&self.scripts.sweep, &self.base(q));
        c.arg(&self.consumer);
        if let Some(set) = self.outs().get(q) {
            for t in set {
                c.arg(*t);
            }
        }
        let n = int(&self.one(c, true).await?).unwrap_or(0);
        if n > 0 {
            log(&format!(
                "queue {q:?}: handed back {n} claim(s) whose answer was lost or never taken"
            ));
        }
        Ok(n)
    }

    /// After a reconnect, sweeps every queue this consumer claims from once.
    pub(super) async fn sweep_after_reconnect(&self) {
        let epoch = self.link.epoch();
        if self.swept.swap(epoch, Ordering::SeqCst) != epoch && epoch > 1 {
            let queues: Vec<String> = self.touched().iter().cloned().collect();
            for q in &queues {
                let _ = self.sweep(q).await;
            }
        }
    }

    pub(super) async fn recover_inner(&self) -> Result<usize, Refused> {
        let v = self
            .one(
                ::redis::cmd("SMEMBERS").arg(self.queues_key()).clone(),
                false,
            )
            .await?;
        let names: Vec<Vec<u8>> = match v {
            Value::Array(a) | Value::Set(a) => a
                .iter()
                .filter_map(|x| bytes(x).map(<[u8]>::to_vec))
                .collect(),
            _ => Vec::new(),
        };
        if names.is_empty() {
            return Ok(0);
        }
        let mut p = ::redis::pipe();
        for q in &names {
            let q = String::from_utf8_lossy(q);
            p.add_command(self.recover_cmd(&q));
        }
        let got = self.run(&p, true).await?;
        Ok(got.iter().filter_map(int).sum::<i64>().max(0) as usize)
    }
}
