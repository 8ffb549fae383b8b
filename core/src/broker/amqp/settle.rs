//! A message's way out of a consumer: ack, reject, requeue.
//!
//! A receipt names the channel that delivered it (its serial). A delivery
//! tag means nothing on another channel, and a channel that closed took
//! its unacked messages back to their queues (RabbitMQ requeues them,
//! marked redelivered), so a settle for a channel that is gone is dropped:
//! the message will come again, and a redelivered run whose result is
//! stored is not run twice.
//!
//! A worker acks a round of receipts at a time. Each channel keeps the set
//! of tags it delivered and nobody settled (what RabbitMQ counts unacked
//! there); the receipts that are the lowest of that set, in a row, go as
//! one `basic.ack` with `multiple` — so a round of early acks, taken in
//! delivery order, is one frame, while a tag still held (a prefetched
//! message not taken, a held eta, an acks-late run still running) is never
//! covered by it. The rest go one by one, all sent before any is waited on.

use lapin::options::{BasicAckOptions, BasicRejectOptions};

use super::AmqpBroker;
use crate::task::spec::Receipt;
use crate::task::state::Refused;

/// One channel's part of an ack round: the channel, an ack with
/// `multiple` up to a tag (and how many it covers), and the tags acked one
/// by one.
struct Acks {
    serial: u64,
    channel: lapin::Channel,
    upto: Option<(u64, usize)>,
    single: Vec<u64>,
}

impl AmqpBroker {
    fn channel_of(&self, r: &Receipt) -> Option<lapin::Channel> {
        self.lock()
            .channels
            .get(&r.token)
            .filter(|c| c.status().connected())
            .cloned()
    }

    /// Takes `tags` out of channel `serial`'s unacked set (they are being
    /// settled); answers the channel when it is live.
    pub(super) fn unacked_channel(&self, serial: u64, tags: &[u64]) -> Option<lapin::Channel> {
        let mut g = self.lock();
        if let Some(set) = g.unacked.get_mut(&serial) {
            for t in tags {
                set.remove(t);
            }
        }
        g.channels
            .get(&serial)
            .filter(|c| c.status().connected())
            .cloned()
    }

    /// Plans the acks of `receipts`, per channel (receipts of channels gone
    /// are dropped: RabbitMQ requeued those).
    fn plan_acks(&self, receipts: &[Receipt]) -> Vec<Acks> {
        let mut by: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
        for r in receipts {
            by.entry(r.token).or_default().push(r.tag);
        }
        let mut g = self.lock();
        let mut out = Vec::with_capacity(by.len());
        for (serial, mut tags) in by {
            let Some(channel) = g
                .channels
                .get(&serial)
                .filter(|c| c.status().connected())
                .cloned()
            else {
                continue;
            };
            tags.sort_unstable();
            tags.dedup();
            let set = g.unacked.entry(serial).or_default();
            // The receipts that are the lowest unacked tags, in a row.
            let mut upto = None;
            let mut n = 0usize;
            let mut i = 0usize;
            while i < tags.len() {
                match set.first() {
                    Some(&low) if low == tags[i] => {
                        set.pop_first();
                        upto = Some(low);
                        n += 1;
                        i += 1;
                    }
                    _ => break,
                }
            }
            let single: Vec<u64> = tags[i..].to_vec();
            for t in &single {
                set.remove(t);
            }
            let (upto, single) = match (upto, n) {
                // One alone goes as a plain ack.
                (Some(t), 1) => (None, std::iter::once(t).chain(single).collect()),
                (Some(t), n) => (Some((t, n)), single),
                (None, _) => (None, single),
            };
            out.push(Acks {
                serial,
                channel,
                upto,
                single,
            });
        }
        out
    }

    pub(super) async fn ack_all(&self, receipts: Vec<Receipt>) -> Result<(), Refused> {
        let plans = self.plan_acks(&receipts);
        let mut sends = Vec::new();
        let mut what = Vec::new();
        for p in &plans {
            if let Some((tag, n)) = p.upto {
                what.push((p.serial, n, &p.channel));
                sends.push(p.channel.basic_ack(tag, BasicAckOptions { multiple: true }));
            }
            for &tag in &p.single {
                what.push((p.serial, 1, &p.channel));
                sends.push(p.channel.basic_ack(tag, BasicAckOptions::default()));
            }
        }
        // Every frame goes out on the first poll; then the answers.
        let results = futures_util::future::join_all(sends).await;
        let mut first = None;
        for ((serial, n, ch), r) in what.into_iter().zip(results) {
            self.settled(serial, n);
            // An ack on a channel closed under us is moot: RabbitMQ
            // requeued the message.
            if let Err(e) = r
                && ch.status().connected()
                && first.is_none()
            {
                first = Some(super::conn::refused(self.conn.url(), "cannot ack", &e));
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    pub(super) async fn reject_one(&self, r: Receipt, requeue: bool) -> Result<(), Refused> {
        if self.channel_of(&r).is_none() {
            return Ok(());
        }
        let Some(ch) = self.unacked_channel(r.token, &[r.tag]) else {
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
