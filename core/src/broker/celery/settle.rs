//! Settling on Celery's layout: ack, reject, retry, and what a settle that
//! could not reach Redis becomes. A receipt names its message by the tag it
//! is held under in `unacked`, and a settle takes that tag out of
//! `unacked` and its index (kombu's `basic_ack`); one that cannot land
//! within the patience is kept ([`Owed`]) and retried by the background
//! task, since each is idempotent — a worker that finished a run must not
//! see it run again because Redis restarted meanwhile.

use super::CeleryBroker;
use super::restore::Restored;
use crate::task::message::Message;
use crate::task::spec::Receipt;
use crate::task::state::Refused;

/// A settle or a hand-back that could not reach Redis within the patience:
/// kept, and retried by the background task until it lands (each is
/// idempotent: an `unacked` entry is removed once, a push happens once).
#[derive(Debug, Clone)]
pub(super) enum Owed {
    /// Acks (or drops) of these tags.
    Drop(Vec<String>),
    /// A reject with requeue, or a release: the tag back on its queue.
    Restore(String, bool),
    /// An envelope a BRPOP took whose hold did not land: back to the front
    /// of the list it came from.
    PushBack(String, Vec<u8>),
}

impl CeleryBroker {
    /// Acks: each receipt's tag out of `unacked` and its index, kept to
    /// retry when Redis is away.
    pub(super) async fn ack_all(&self, receipts: Vec<Receipt>) -> Result<(), Refused> {
        let tags = self.settle_local(&receipts);
        if tags.is_empty() {
            return Ok(());
        }
        if let Err(e) = self.drop_tags(&tags).await {
            self.owe(Owed::Drop(tags), &e);
        }
        Ok(())
    }

    /// A reject: the message back at the end of its queue (`requeue`) or
    /// dropped, kept to retry when Redis is away.
    pub(super) async fn reject_one(&self, receipt: Receipt, requeue: bool) -> Result<(), Refused> {
        let tags = self.settle_local(std::slice::from_ref(&receipt));
        let Some(tag) = tags.into_iter().next() else {
            return Ok(());
        };
        let r = if requeue {
            self.restore_tag(&tag, true, false).await.map(|_| ())
        } else {
            self.drop_tags(std::slice::from_ref(&tag)).await
        };
        if let Err(e) = r {
            let owed = if requeue {
                Owed::Restore(tag, true)
            } else {
                Owed::Drop(vec![tag])
            };
            self.owe(owed, &e);
        }
        Ok(())
    }

    /// A retry: the next attempt published and the claim acked in one
    /// MULTI, so neither happens without the other. Fenced, as on the other
    /// layouts: a claim this consumer no longer holds (settled, given back,
    /// another consumer's) publishes nothing, so a late retry cannot double
    /// the run.
    pub(super) async fn retry_one(&self, receipt: Receipt, next: Message) -> Result<(), Refused> {
        let tags = self.settle_local(std::slice::from_ref(&receipt));
        if tags.is_empty() {
            return Ok(());
        }
        let (key, enc) = self.encode(&next);
        let mut p = redis::pipe();
        p.atomic()
            .lpush(key, enc.json)
            .ignore()
            .zrem(&self.keys.index, &tags)
            .ignore()
            .hdel(&self.keys.unacked, &tags)
            .ignore();
        self.link.pipe(&p).await
    }

    pub(super) async fn drop_tags(&self, tags: &[String]) -> Result<(), Refused> {
        let mut p = redis::pipe();
        p.atomic()
            .zrem(&self.keys.index, tags)
            .hdel(&self.keys.unacked, tags);
        self.link.pipe(&p).await
    }

    /// Keeps a settle that could not land, for the background task.
    pub(super) fn owe(&self, what: Owed, why: &Refused) {
        self.log(&format!(
            "{why}; a settle is kept to retry when Redis is back"
        ));
        self.owed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(what);
    }

    /// Retries kept settles (the background task, each round).
    pub(super) async fn pay(&self) {
        let owed: Vec<Owed> =
            std::mem::take(&mut *self.owed.lock().unwrap_or_else(|e| e.into_inner()));
        if owed.is_empty() {
            return;
        }
        let n = owed.len();
        let mut left = Vec::new();
        for (i, o) in owed.iter().enumerate() {
            let r = match o {
                Owed::Drop(tags) => self.drop_tags(tags).await,
                Owed::Restore(tag, leftmost) => {
                    self.restore_tag(tag, *leftmost, false).await.map(|_| ())
                }
                Owed::PushBack(key, raw) => {
                    let mut p = redis::pipe();
                    p.rpush(key, raw.as_slice()).ignore();
                    self.link.pipe(&p).await
                }
            };
            if r.is_err() {
                left.extend(owed[i..].iter().cloned());
                break;
            }
        }
        if left.is_empty() {
            self.log(&format!("{n} kept settle(s) landed"));
        } else {
            self.owed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(left);
        }
    }

    /// The tags kept settles name: still this consumer's, so neither
    /// re-scored away nor restored by its own `recover()`.
    pub(super) fn owed_tags(&self) -> Vec<String> {
        let g = self.owed.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for o in g.iter() {
            match o {
                Owed::Drop(tags) => out.extend(tags.iter().cloned()),
                Owed::Restore(tag, _) => out.push(tag.clone()),
                Owed::PushBack(..) => {}
            }
        }
        out
    }

    /// Gives back everything this consumer holds (etas waiting, claims not
    /// settled) to the front of their queues, as kombu's `restore_unacked`
    /// does at a warm shutdown. Answers how many went back.
    pub async fn release(&self) -> Result<usize, Refused> {
        let tags: Vec<String> = {
            let mut g = self.lock();
            g.held.clear();
            g.inbox.clear();
            g.out.drain().map(|(_, h)| h.tag).collect()
        };
        let mut n = 0;
        for t in tags {
            if self.restore_tag(&t, false, false).await? == Restored::Back {
                n += 1;
            }
        }
        Ok(n)
    }

    /// The `unacked` tags `receipts` settle, each taken out of what this
    /// consumer holds. A receipt names its message by that tag (`raw`);
    /// its local number is only this instance's, and a receipt from
    /// another instance (or a stale one) may carry a number this one uses
    /// for another message — so a receipt settles only when this consumer
    /// holds its tag under its number. One it does not hold (another
    /// consumer's, already settled, given back) names nothing here, as on
    /// the other layouts: settling it would take a message from under the
    /// consumer that holds it.
    pub(super) fn settle_local(&self, receipts: &[Receipt]) -> Vec<String> {
        let mut g = self.lock();
        receipts
            .iter()
            .filter_map(|r| {
                let tag = String::from_utf8_lossy(r.raw.as_deref()?).into_owned();
                if g.out.get(&r.tag).is_none_or(|h| h.tag != tag) {
                    return None;
                }
                g.out.remove(&r.tag);
                Some(tag)
            })
            .collect()
    }
}
