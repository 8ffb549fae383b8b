//! Chords on Celery's layout, as Celery's Redis backend keeps them:
//! `celery-taskset-meta-<gid>.j` (a sorted set of `[1, id, state, result]`
//! members scored by group index), `.t` and `.s`. Whichever side finishes
//! the last part sends the callback with the results in group order
//! (`arrive.lua`, then `fire.lua` once); a failed part fails the callback
//! with `ChordError`, as a Celery worker does.

use serde_json::Value;

use super::{CeleryBroker, Local, pyjson, result};
use crate::task::clock::BoxFuture;
use crate::task::message::Message;
use crate::task::spec::{Counter, Joined};
use crate::task::state::{Failure, Outcome, Refused, State};

/// How many chord parts' group indexes are remembered between receipt and
/// arrival: enough for any prefetch, small enough to bound memory.
pub(super) const PARTS_KEPT: usize = 65_536;

impl Local {
    /// Remembers a chord part's group index from its receipt until it
    /// arrives (its member is scored by it), forgetting the oldest past
    /// [`PARTS_KEPT`].
    pub(super) fn note_part(&mut self, id: &str, index: Option<u32>) {
        if self.parts.insert(id.to_string(), index).is_none() {
            self.parts_order.push_back(id.to_string());
            while self.parts_order.len() > PARTS_KEPT {
                if let Some(old) = self.parts_order.pop_front() {
                    self.parts.remove(&old);
                }
            }
        }
    }
}

impl CeleryBroker {
    /// Makes this a result store for another transport: a chord's callback
    /// is published through `broker` (RabbitMQ) rather than pushed onto a
    /// Redis list, which no consumer of that transport reads.
    pub fn send_callbacks_through(&self, broker: std::sync::Weak<dyn crate::task::spec::Broker>) {
        *self.via.write().unwrap_or_else(|e| e.into_inner()) = Some(broker);
    }

    fn callbacks_via(&self) -> Option<std::sync::Arc<dyn crate::task::spec::Broker>> {
        self.via
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(|w| w.upgrade())
    }

    /// The last part of a chord finished: send its callback, or fail it.
    pub(super) async fn complete_chord(
        &self,
        key: &str,
        part: &str,
        members: Vec<Vec<u8>>,
        callback: &Message,
    ) -> Result<(), Refused> {
        let mut results = Vec::with_capacity(members.len());
        let mut failed: Option<Failure> = None;
        for raw in &members {
            let m: Value = serde_json::from_slice(raw).map_err(|e| {
                Refused::broker(
                    crate::task::BrokerErrorKind::Data,
                    format!("bad chord member: {e}"),
                )
            })?;
            let tid = m.get(1).and_then(Value::as_str).unwrap_or("?").to_string();
            let state = m.get(2).and_then(Value::as_str).unwrap_or("");
            let r = m.get(3).cloned().unwrap_or(Value::Null);
            if matches!(state, "FAILURE" | "REVOKED") {
                let f = result::failure_of(&r, None);
                failed.get_or_insert_with(|| {
                    Failure::new(
                        "ChordError",
                        format!("Dependency {tid} raised {}({:?})", f.kind, f.message),
                    )
                });
            }
            results.push(r);
        }
        if let Some(f) = failed {
            let now = self.facts.clock.now();
            let mut all = Vec::new();
            let mut o = Outcome::new(callback.id.clone(), State::Failure, now);
            o.task = Some(callback.task.clone());
            o.error = Some(f.clone());
            all.push(o);
            for s in &callback.chain {
                if let Some(id) = &s.id {
                    let mut o = Outcome::new(id.clone(), State::Failure, now);
                    o.error = Some(f.clone());
                    all.push(o);
                }
            }
            return self.store_all(&all).await;
        }
        let mut cb = callback.clone();
        let immutable = cb.join.take().is_some_and(|j| j.immutable);
        if !immutable {
            cb.args.insert(0, Value::Array(results));
        }
        cb.parent_id = Some(part.to_string());
        if let Some(via) = self.callbacks_via() {
            // Results here, messages elsewhere (RabbitMQ): the finisher that
            // closes the chord sends the callback through that broker. A
            // crash between the two loses the callback, as Celery's own
            // `on_chord_part_return` would.
            let (epoch, mut c) = self.link.conn().await?;
            let r: Result<i64, _> = self
                .scripts
                .close
                .key(self.group_key(key, ".j"))
                .key(self.group_key(key, ".t"))
                .key(self.group_key(key, ".s"))
                .invoke_async(&mut c)
                .await;
            return match r {
                Ok(1) => via.publish(vec![cb]).await,
                Ok(_) => Ok(()),
                Err(e) => Err(self.link.fail(epoch, &e)),
            };
        }
        let (qkey, enc) = self.encode(&cb);
        let (epoch, mut c) = self.link.conn().await?;
        let r: Result<i64, _> = self
            .scripts
            .fire
            .key(self.group_key(key, ".j"))
            .key(self.group_key(key, ".t"))
            .key(self.group_key(key, ".s"))
            .key(qkey)
            .arg(enc.json)
            .invoke_async(&mut c)
            .await;
        match r {
            Ok(_) => Ok(()),
            Err(e) => Err(self.link.fail(epoch, &e)),
        }
    }

    /// A chord callback published directly (an empty chord, or a counter
    /// that answered `Last`) carries its results as Celery's do: prepended
    /// as one list argument, since a Celery worker knows no `join`. A part
    /// that did not succeed fails the callback with `ChordError` instead.
    pub(crate) async fn materialize(&self, mut m: Message) -> Result<Option<Message>, Refused> {
        let Some(join) = m.join.take() else {
            return Ok(Some(m));
        };
        let mut results = Vec::with_capacity(join.parts.len());
        for id in &join.parts {
            match self.fetch_outcome(id).await? {
                Some(o) if o.state == State::Success => {
                    results.push(o.result.unwrap_or(Value::Null))
                }
                other => {
                    let why = other
                        .and_then(|o| o.error.map(|e| e.to_string()))
                        .unwrap_or_else(|| "no result".into());
                    let mut o = Outcome::new(m.id.clone(), State::Failure, self.facts.clock.now());
                    o.task = Some(m.task.clone());
                    o.error = Some(Failure::new(
                        "ChordError",
                        format!("Dependency {id} raised {why}"),
                    ));
                    self.store_all(&[o]).await?;
                    return Ok(None);
                }
            }
        }
        if !join.immutable {
            m.args.insert(0, Value::Array(results));
        }
        Ok(Some(m))
    }
}

impl Counter for CeleryBroker {
    fn open(&self, key: &str, size: u32) -> BoxFuture<'_, Result<(), Refused>> {
        let skey = self.group_key(key, ".s");
        Box::pin(async move {
            // Celery's `set_chord_size`: its `set`, i.e. SETEX + PUBLISH.
            let ex = self.expires_secs();
            let mut p = redis::pipe();
            if ex > 0 {
                p.set_ex(&skey, size, ex).ignore();
            } else {
                p.set(&skey, size).ignore();
            }
            p.publish(&skey, size).ignore();
            let (epoch, mut c) = self.link.conn().await?;
            match p.query_async::<()>(&mut c).await {
                Ok(()) => Ok(()),
                Err(e) => Err(self.link.fail(epoch, &e)),
            }
        })
    }

    fn arrive<'a>(
        &'a self,
        key: &'a str,
        part: &'a str,
        _size: u32,
        callback: &'a Message,
    ) -> BoxFuture<'a, Result<Joined, Refused>> {
        Box::pin(async move {
            let index = {
                let mut g = self.lock();
                g.parts.remove(part).flatten()
            };
            let stored = self.fetch_outcome(part).await?;
            let (state, value) = match &stored {
                Some(o) => (o.state, o.clone()),
                None => {
                    let mut o = Outcome::new(part, State::Success, self.facts.clock.now());
                    o.result = Some(Value::Null);
                    (State::Success, o)
                }
            };
            let mut member = String::from("[1, ");
            pyjson::write_str(&mut member, part);
            member.push_str(", ");
            pyjson::write_str(&mut member, state.name());
            member.push_str(", ");
            result::write_result(&mut member, &value);
            member.push(']');
            let score = index.map_or("+inf".to_string(), |i| i.to_string());
            let (epoch, mut c) = self.link.conn().await?;
            let r: Result<Vec<redis::Value>, _> = self
                .scripts
                .arrive
                .key(self.group_key(key, ".j"))
                .key(self.group_key(key, ".t"))
                .key(self.group_key(key, ".s"))
                .arg(member)
                .arg(score)
                .arg(self.expires_secs())
                .invoke_async(&mut c)
                .await;
            let reply = match r {
                Ok(v) => v,
                Err(e) => return Err(self.link.fail(epoch, &e)),
            };
            if reply.len() <= 3 {
                return Ok(Joined::Waiting);
            }
            let members: Vec<Vec<u8>> = reply[3..]
                .iter()
                .filter_map(|v| match v {
                    redis::Value::BulkString(b) => Some(b.clone()),
                    _ => None,
                })
                .collect();
            self.complete_chord(key, part, members, callback).await?;
            Ok(Joined::Sent)
        })
    }
}
