//! Publishing on Celery's layout: a message is encoded as Celery's task
//! protocol v2 in kombu's envelope and LPUSHed onto the list of its queue's
//! priority step, as a Celery producer does, so a Celery worker takes it as
//! one of its own. The size cap is checked before anything is sent.

use super::CeleryBroker;
use super::codec::Encoded;
use crate::task::message::Message;
use crate::task::state::Refused;

impl CeleryBroker {
    /// Publishes `messages`, chord callbacks with their results
    /// ([`CeleryBroker::materialize`]), in one pipeline; refused whole when
    /// one is over the size cap.
    pub(super) async fn publish_all(&self, messages: Vec<Message>) -> Result<(), Refused> {
        if messages.is_empty() {
            return Ok(());
        }
        let mut ready = Vec::with_capacity(messages.len());
        for m in messages {
            if let Some(m) = self.materialize(m).await? {
                ready.push(m);
            }
        }
        let mut p = redis::pipe();
        for m in &ready {
            let (key, enc) = self.encode(m);
            if enc.json.len() > self.opts.max_message_bytes {
                return Err(Refused::Invalid(format!(
                    "invalid `message` {:?}: {} bytes encoded, over the `max_message_bytes` cap of {}",
                    crate::task::spec::truncate(m.id.clone(), 64),
                    enc.json.len(),
                    self.opts.max_message_bytes
                )));
            }
            p.lpush(key, enc.json).ignore();
        }
        for m in &ready {
            self.remember_queue(&m.queue);
        }
        self.link.pipe(&p).await?;
        if self.opts.task_send_sent_event {
            for m in &ready {
                super::events::sent(self, m);
            }
        }
        Ok(())
    }

    /// Encodes `m` for its queue: (queue key, envelope).
    pub(super) fn encode(&self, m: &Message) -> (String, Encoded) {
        let key = self.queue_key(&m.queue, self.step_of(m.priority));
        (key, self.facts.sender.encode(m, self.facts.clock.now()))
    }

    /// Puts `raw` on `queue` (its step-0 list, at the back) as another
    /// producer would, unchecked: it is decoded when claimed, and
    /// quarantined if it is not a message headway will run. For tests and
    /// tools; an app publishes with [`Broker::publish`].
    pub async fn push_raw(&self, queue: &str, raw: &[u8]) -> Result<(), Refused> {
        self.remember_queue(queue);
        let mut p = redis::pipe();
        p.lpush(self.queue_key(queue, 0), raw).ignore();
        self.link.pipe(&p).await
    }
}
