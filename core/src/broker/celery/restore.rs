//! Putting a held message back (kombu's `restore_by_tag`): a reject with
//! requeue, a release at shutdown, a restore of a lost holder's claim, and
//! the hand-back of a task this consumer does not run. The last two count
//! in the envelope itself (`headway_lost`, `x-headway-handbacks`), so the
//! count travels with the message whoever holds it next and nothing is left
//! behind when anyone acks it; a message whose count reaches its limit goes
//! to the dead letters instead of looping for ever.

use std::collections::HashSet;

use serde_json::Value;

use super::burial::Burial;
use super::{CeleryBroker, codec, dead, pyjson, unknown};
use crate::task::dead::lost_reason;
use crate::task::message::new_id;
use crate::task::state::Refused;

/// What became of a restored tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Restored {
    /// Back on its queue.
    Back,
    /// In the dead letters.
    Dead,
    /// Not there any more (settled or restored by someone else).
    Gone,
}

/// What a put-back counts in the envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Count {
    /// Nothing: a reject or a release.
    None,
    /// One more lost holder (`headway_lost`, up to `max_deliveries`).
    Lost,
    /// One more hand-back of a task this consumer does not run
    /// (`x-headway-handbacks`, up to `max_handbacks`).
    HandBack,
}

impl CeleryBroker {
    /// kombu's `restore_by_tag`: the `unacked` entry of `tag` back onto its
    /// queue with `redelivered` set — at the back (`leftmost`, LPUSH) for a
    /// reject, at the front (RPUSH) for a restore. [`Restored::Gone`] when
    /// the entry was gone (settled or restored by someone else).
    ///
    /// With `lost` (a restore of a holder that is gone) the envelope's
    /// `headway_lost` header counts one more lost holder, and a message
    /// whose count reaches `max_deliveries` goes to its queue's dead
    /// letters instead ("worker lost ×N"), marked redelivered with the
    /// count taken off — the bytes a re-queue puts back.
    pub(super) async fn restore_tag(
        &self,
        tag: &str,
        leftmost: bool,
        lost: bool,
    ) -> Result<Restored, Refused> {
        let count = if lost { Count::Lost } else { Count::None };
        self.put_back(tag, leftmost, count).await
    }

    /// [`CeleryBroker::restore_tag`], counting in the envelope as `count`
    /// says.
    pub(super) async fn put_back(
        &self,
        tag: &str,
        leftmost: bool,
        count_in: Count,
    ) -> Result<Restored, Refused> {
        let lost = count_in != Count::None;
        let (header, limit) = match count_in {
            Count::HandBack => (unknown::HANDBACK_HEADER, u64::from(self.opts.max_handbacks)),
            _ => (codec::LOST_HEADER, u64::from(self.opts.max_deliveries)),
        };
        let entry: Option<Vec<u8>> = {
            let mut get = redis::cmd("HGET");
            get.arg(&self.keys.unacked).arg(tag);
            let get = &get;
            self.link
                .patiently(true, |mut c| async move { get.query_async(&mut c).await })
                .await?
        };
        let Some(entry) = entry else {
            return Ok(Restored::Gone);
        };
        let parsed: Option<(Value, String, String)> =
            serde_json::from_slice::<Value>(&entry).ok().and_then(|v| {
                let a = v.as_array()?;
                Some((
                    a.first()?.clone(),
                    a.get(1)?.as_str()?.to_string(),
                    a.get(2)?.as_str()?.to_string(),
                ))
            });
        let Some((mut env, _exchange, rk)) = parsed else {
            let reason = "bad message: an unreadable `unacked` entry".to_string();
            let element = dead::element(self.facts.clock.now(), &reason, 0, None, &entry);
            let q = self.opts.default_queue.clone();
            let q = self.facts.sender.model_queue(&q);
            self.bury(
                &q,
                "quarantined",
                vec![Burial {
                    tag: tag.to_string(),
                    entry: entry.clone(),
                    element,
                    reason,
                }],
            )
            .await;
            return Ok(Restored::Dead);
        };
        let mut count = 0u64;
        if lost
            && !env.get("headers").is_some_and(Value::is_object)
            && let Some(o) = env.as_object_mut()
        {
            // Somewhere to count in, so even a headerless envelope cannot
            // loop for ever.
            o.insert("headers".into(), Value::Object(serde_json::Map::new()));
        }
        if let Some(h) = env.get_mut("headers").and_then(Value::as_object_mut) {
            h.insert("redelivered".into(), Value::Bool(true));
            if lost {
                count = h
                    .get(header)
                    .and_then(Value::as_u64)
                    .unwrap_or(0)
                    .saturating_add(1);
                h.insert(header.into(), Value::from(count));
            }
        }
        if let Some(di) = env
            .get_mut("properties")
            .and_then(|p| p.get_mut("delivery_info"))
            .and_then(Value::as_object_mut)
        {
            di.insert("redelivered".into(), Value::Bool(true));
        }
        let priority = env
            .get("properties")
            .and_then(|p| p.get("priority"))
            .and_then(Value::as_u64)
            .map(|p| p.min(9) as u8);
        let step = self.step_of(priority);
        if lost && count >= limit {
            let task = env
                .get("headers")
                .and_then(|h| h.get("task"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if let Some(h) = env.get_mut("headers").and_then(Value::as_object_mut) {
                h.shift_remove(header);
            }
            let id = env
                .get("headers")
                .and_then(|h| h.get("id"))
                .and_then(Value::as_str)
                .map(str::to_string);
            let times = count.min(u64::from(u32::MAX)) as u32;
            let (reason, what) = match count_in {
                Count::HandBack => (
                    unknown::handed_back_reason(&task, times),
                    "dead-lettered a message no consumer here runs:",
                ),
                _ => (lost_reason(times), "dead-lettered a poison pill:"),
            };
            let raw = pyjson::dumps(&env);
            let element = dead::element_whole(
                self.facts.clock.now(),
                &reason,
                step,
                id.as_deref(),
                raw.as_bytes(),
            );
            let q = self.facts.sender.model_queue(&rk);
            let n = self
                .bury(
                    &q,
                    what,
                    vec![Burial {
                        tag: tag.to_string(),
                        entry,
                        element,
                        reason,
                    }],
                )
                .await;
            return Ok(if n == 1 {
                Restored::Dead
            } else {
                Restored::Gone
            });
        }
        let key = if step == 0 {
            format!("{}{rk}", self.opts.global_keyprefix)
        } else {
            format!("{}{rk}{}{step}", self.opts.global_keyprefix, self.opts.sep)
        };
        let pushed = pyjson::dumps(&env);
        let mut inv = self.scripts.restore.prepare_invoke();
        inv.key(&self.keys.unacked)
            .key(&self.keys.index)
            .key(&key)
            .arg(tag)
            .arg(&entry)
            .arg(&pushed)
            .arg(if leftmost { "l" } else { "r" });
        let inv = &inv;
        let n = self
            .link
            .patiently(true, |mut c| async move {
                inv.invoke_async::<i64>(&mut c).await
            })
            .await?;
        Ok(if n == 1 {
            Restored::Back
        } else {
            Restored::Gone
        })
    }

    /// kombu's `restore_visible` under `unacked_mutex`: every claim older
    /// than `visibility_timeout` that this consumer does not hold goes back
    /// to the front of its queue, marked redelivered, with one more lost
    /// holder counted in its `headway_lost` header. One whose count reaches
    /// `max_deliveries` (3) goes to its queue's dead letters instead
    /// ("worker lost ×3") and is not counted. A Celery worker's restore
    /// keeps the header but does not add to it (see `docs/celery.md`).
    pub(super) async fn restore_visible(&self) -> Result<usize, Refused> {
        let token = new_id();
        let (epoch, mut c) = self.link.conn().await?;
        let got: Option<String> = match redis::cmd("SET")
            .arg(&self.keys.mutex)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(self.opts.unacked_mutex_expire.as_millis() as u64)
            .query_async(&mut c)
            .await
        {
            Ok(v) => v,
            Err(e) => return Err(self.link.fail(epoch, &e)),
        };
        if got.is_none() {
            // kombu's MutexHeld: someone else is restoring right now.
            return Ok(0);
        }
        let ceil = self.now_secs() - self.opts.visibility_timeout.as_secs_f64();
        let mut q = redis::cmd("ZREVRANGEBYSCORE");
        q.arg(&self.keys.index).arg(ceil).arg(0);
        if let Some(n) = self.opts.unacked_restore_limit {
            q.arg("LIMIT").arg(0).arg(n);
        }
        let tags: Result<Vec<String>, _> = q.query_async(&mut c).await;
        let mut n = 0;
        let result = match tags {
            Err(e) => Err(self.link.fail(epoch, &e)),
            Ok(tags) => {
                let mut mine: HashSet<String> =
                    self.lock().out.values().map(|h| h.tag.clone()).collect();
                mine.extend(self.owed_tags());
                let mut r = Ok(());
                for t in tags.iter().filter(|t| !mine.contains(*t)) {
                    match self.restore_tag(t, false, true).await {
                        Ok(Restored::Back) => n += 1,
                        Ok(_) => {}
                        Err(e) => {
                            r = Err(e);
                            break;
                        }
                    }
                }
                r
            }
        };
        let _: Result<i64, _> = self
            .scripts
            .unlock
            .key(&self.keys.mutex)
            .arg(&token)
            .invoke_async(&mut c)
            .await;
        result.map(|()| n)
    }
}
