//! A message's way out of a consumer: ack, reject, requeue.
//!
//! A receipt names the channel that delivered it (its serial). A delivery
//! tag means nothing on another channel, and a channel that closed took
//! its unacked messages back to their queues (RabbitMQ requeues them,
//! marked redelivered), so a settle for a channel that is gone is dropped:
//! the message will come again, and a redelivered run whose result is
//! stored is not run twice.

use lapin::options::{BasicAckOptions, BasicRejectOptions};

use super::AmqpBroker;
use crate::task::spec::Receipt;
use crate::task::state::Refused;

impl AmqpBroker {
    fn channel_of(&self, r: &Receipt) -> Option<lapin::Channel> {
        self.lock()
            .channels
            .get(&r.token)
            .filter(|c| c.status().connected())
            .cloned()
    }

    pub(super) async fn ack_all(&self, receipts: Vec<Receipt>) -> Result<(), Refused> {
        for r in receipts {
            let Some(ch) = self.channel_of(&r) else {
                continue;
            };
            let _done = Settled(self, r.token);
            // An ack on a channel closed under us is moot: RabbitMQ
            // requeued the message.
            if let Err(e) = ch.basic_ack(r.tag, BasicAckOptions::default()).await
                && ch.status().connected()
            {
                return Err(super::conn::refused(self.conn.url(), "cannot ack", &e));
            }
        }
        Ok(())
    }

    pub(super) async fn reject_one(&self, r: Receipt, requeue: bool) -> Result<(), Refused> {
        let Some(ch) = self.channel_of(&r) else {
            return Ok(());
        };
        let _done = Settled(self, r.token);
        match ch.basic_reject(r.tag, BasicRejectOptions { requeue }).await {
            Err(e) if ch.status().connected() => {
                Err(super::conn::refused(self.conn.url(), "cannot reject", &e))
            }
            _ => Ok(()),
        }
    }
}

/// Counts one settle of channel `.1` when dropped (after the settle went
/// out, or failed), so a released channel closes after its last one.
struct Settled<'a>(&'a AmqpBroker, u64);

impl Drop for Settled<'_> {
    fn drop(&mut self) {
        self.0.settled(self.1, 1);
    }
}
