//! Remote control across processes on the own layout: `headway inspect`
//! and `headway control` (`task::control`) reach every process on this
//! Redis under the same prefix.
//!
//! The asker PUBLISHes the request on `P:control` with a fresh reply list
//! `P:control:reply:<ticket>` in it; every broker under the prefix hears it
//! (a standing pattern subscription, as for terminates) and pushes one
//! answer per app onto that list — the node's reply, or `{"node": null}`
//! from a process that is no node (no worker of the app runs there). PUBLISH
//! answers how many brokers heard, so the asker stops as soon as that many
//! answers are in, or at its timeout; the list expires on its own a minute
//! later. Why pub/sub and a list, not a stream: a command matters only to
//! the processes listening at that moment (as Celery's pidbox broadcast),
//! and the list keeps answers that arrive before the asker reads them.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::RedisBroker;
use super::terminate::glob_literal;
use crate::broker::link::Handler;
use crate::task::message::new_id;
use crate::task::state::Refused;

/// How long a reply list outlives its request: 60 s.
const REPLY_TTL_SECS: u64 = 60;

/// How often the asker looks at its reply list: 20 ms.
const LOOK_EVERY: Duration = Duration::from_millis(20);

impl RedisBroker {
    /// `P:control`: the channel remote commands are published on.
    fn control_channel(&self) -> String {
        format!("{}control", self.prefix)
    }

    /// Subscribes the control channel for good: each command heard is
    /// answered by this broker's apps onto the request's reply list.
    pub(super) async fn hear_controls(self: &Arc<Self>) {
        let me = Arc::downgrade(self);
        let on: Handler = Arc::new(move |_, payload| {
            let Some(b) = me.upgrade() else { return };
            let Ok(request) = serde_json::from_slice::<Value>(payload) else {
                return;
            };
            let Some(reply_to) = request.get("reply_to").and_then(Value::as_str) else {
                return;
            };
            // Only a list under this prefix: a request cannot make a
            // process write anywhere else.
            if !reply_to.starts_with(&format!("{}control:reply:", b.prefix)) {
                return;
            }
            let key = reply_to.to_string();
            let answers = b.answerers.answer(&request);
            let rt = b.rt.clone();
            rt.spawn(async move {
                let mut p = redis::pipe();
                for a in &answers {
                    p.rpush(&key, a.to_string()).ignore();
                }
                p.pexpire(&key, (REPLY_TTL_SECS * 1000) as i64).ignore();
                let _ = b.run(&p, false).await;
            });
        });
        let pattern = glob_literal(&self.control_channel());
        let _ = self.waiters.psubscribe(&pattern, on).await;
    }

    /// Publishes `request` and gathers the answers (see the module).
    pub(super) async fn control_inner(
        &self,
        mut request: Value,
        timeout: Duration,
    ) -> Result<Vec<Value>, Refused> {
        let key = format!("{}control:reply:{}", self.prefix, new_id());
        request["reply_to"] = json!(key);
        let heard = self
            .one(
                redis::cmd("PUBLISH")
                    .arg(self.control_channel())
                    .arg(request.to_string())
                    .clone(),
                true,
            )
            .await?;
        let heard: u64 = redis::from_redis_value(heard).unwrap_or(0);
        let deadline = tokio::time::Instant::now() + timeout;
        let mut got: Vec<String> = Vec::new();
        loop {
            let v = self
                .one(redis::cmd("LRANGE").arg(&key).arg(0).arg(-1).clone(), false)
                .await?;
            if let Ok(g) = redis::from_redis_value::<Vec<String>>(v) {
                got = g;
            }
            if heard > 0 && got.len() as u64 >= heard {
                break;
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                break;
            }
            tokio::time::sleep(LOOK_EVERY.min(deadline - now)).await;
        }
        let _ = self.one(redis::cmd("DEL").arg(&key).clone(), false).await;
        Ok(got
            .iter()
            .filter_map(|t| serde_json::from_str::<Value>(t).ok())
            .filter(|v| v.get("node").is_some_and(Value::is_string))
            .collect())
    }
}
