//! A message's way out of a consumer: ack, reject, requeue.
//!
//! A receipt names the channel that delivered it (its serial). A delivery
//! tag means nothing on another channel, and a channel that closed took
//! its unacked messages back to their queues (RabbitMQ requeues them,
//! marked redelivered), so a settle for a channel that is gone is dropped:
//! the message will come again, and a redelivered run whose result is
//! stored is not run twice.
//!
//! Acks are gathered per channel and go out together: when a channel's
//! gathered acks reach a quarter of its worker's prefetch, or at most
//! [`ACK_DELAY`] after the first of them. Each channel keeps the set of
//! tags it delivered and nobody settled (what RabbitMQ counts unacked
//! there); the gathered tags below the lowest of that set go as one
//! `basic.ack` with `multiple` — so a run of early acks, taken in delivery
//! order, is one frame, while a tag still held (a prefetched message not
//! taken, a held eta, an acks-late run still running) is never covered by
//! it. The rest go one by one. RabbitMQ's CPU per message falls with the
//! messages a frame acks (a bare consumer: 51-64 µs a message acked one
//! by one, 15-30 µs at 4-16 a frame), and so do lapin's frames and its I/O
//! thread's wake-ups; rounds of the writer's takes (one round in flight,
//! answered when lapin wrote the frame) covered 3 messages a frame.
//!
//! A message is still acked only once it is taken to run, never before:
//! the gathering only delays the frame, by [`ACK_DELAY`] at most, and a
//! worker killed -9 in that window has those runs delivered again, as one
//! killed while its ack was on the wire (at least once; a redelivered run
//! whose result is stored is not run again). A message that was delivered
//! before (a poison pill may have killed its last worker) is acked at once
//! and the ack awaited, so its body runs only once the ack is written.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::FutureExt;
use lapin::options::{BasicAckOptions, BasicRejectOptions};

use super::{AmqpBroker, Local};
use crate::task::spec::Receipt;
use crate::task::state::Refused;

/// How long a gathered ack waits at most for others to share its frame.
pub(super) const ACK_DELAY: Duration = Duration::from_millis(1);

/// The acks gathered and not sent yet.
#[derive(Default)]
pub(super) struct Gathered {
    /// Channel serial → tags to ack.
    tags: std::collections::HashMap<u64, Vec<u64>>,
    /// When the oldest gathered ack was gathered.
    since: Option<tokio::time::Instant>,
    /// Whether the task that sends them after [`ACK_DELAY`] is running.
    timed: bool,
}

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

    pub(super) async fn ack_all(&self, receipts: Vec<Receipt>) -> Result<(), Refused> {
        let (plans, wait) = {
            let mut g = self.lock();
            let mut again = false;
            let mut full = false;
            for r in &receipts {
                if !g.channels.contains_key(&r.token) {
                    // RabbitMQ requeued it with its channel.
                    continue;
                }
                // Settled already, and counted then (an ack made again
                // after one that seemed not to land): a second ack of a
                // tag would close the channel.
                let Some(before) = g.unacked.get_mut(&r.token).and_then(|s| s.remove(&r.tag))
                else {
                    continue;
                };
                again |= before;
                let tags = g.gathered.tags.entry(r.token).or_default();
                tags.push(r.tag);
                let n = tags.len();
                full |= n >= gather_limit(&g, r.token);
            }
            if g.gathered.tags.is_empty() {
                return Ok(());
            }
            if again || full {
                (plan_acks(&mut g), again)
            } else {
                if g.gathered.since.is_none() {
                    g.gathered.since = Some(tokio::time::Instant::now());
                }
                if !g.gathered.timed
                    && let Some(me) = self.me.upgrade()
                {
                    g.gathered.timed = true;
                    tokio::spawn(send_when_due(me));
                }
                (Vec::new(), false)
            }
        };
        self.send_acks(plans, wait).await
    }

    /// Sends every gathered ack now (a channel about to be given back or a
    /// connection about to close).
    pub(super) async fn flush_acks(&self) {
        let plans = plan_acks(&mut self.lock());
        let _ = self.send_acks(plans, true).await;
    }

    /// Writes the frames of `plans`; with `wait`, answers once lapin wrote
    /// them, else as soon as they are handed to it.
    async fn send_acks(&self, plans: Vec<Acks>, wait: bool) -> Result<(), Refused> {
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
        if !wait {
            // The first poll hands each frame to lapin's I/O thread; what
            // it answers later is moot (an ack on a channel that closed:
            // RabbitMQ requeued the message).
            for ((serial, n, _), send) in what.into_iter().zip(sends) {
                let _ = send.now_or_never();
                self.settled(serial, n);
            }
            return Ok(());
        }
        // Every frame goes out on the first poll, and is counted settled
        // then (a caller that stops waiting leaves no count behind); then
        // the answers.
        let mut all = std::pin::pin!(futures_util::future::join_all(sends));
        let early = all.as_mut().now_or_never();
        for (serial, n, _) in &what {
            self.settled(*serial, *n);
        }
        let results = match early {
            Some(r) => r,
            None => all.await,
        };
        let mut first = None;
        for ((_, _, ch), r) in what.into_iter().zip(results) {
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

/// How many acks channel `serial` gathers before they go: a quarter of its
/// worker's prefetch (one at a prefetch under eight), so RabbitMQ's window
/// is refilled long before the worker's inbox runs dry.
fn gather_limit(g: &Local, serial: u64) -> usize {
    g.groups
        .values()
        .find(|gr| gr.serial == serial)
        .map_or(1, |gr| (gr.prefetch as usize / 4).max(1))
}

/// Sends what was gathered once the oldest gathered ack waited
/// [`ACK_DELAY`]; ends when nothing is left gathered.
async fn send_when_due(me: std::sync::Arc<AmqpBroker>) {
    loop {
        let due = {
            let mut g = me.lock();
            match g.gathered.since {
                Some(t) => t + ACK_DELAY,
                None => {
                    g.gathered.timed = false;
                    return;
                }
            }
        };
        tokio::time::sleep_until(due).await;
        let plans = {
            let mut g = me.lock();
            match g.gathered.since {
                Some(t) if t + ACK_DELAY <= tokio::time::Instant::now() => plan_acks(&mut g),
                _ => continue,
            }
        };
        let _ = me.send_acks(plans, false).await;
    }
}

/// Plans the frames of every gathered ack, per channel (those of channels
/// gone are dropped: RabbitMQ requeued those), and empties the gathering.
fn plan_acks(g: &mut Local) -> Vec<Acks> {
    g.gathered.since = None;
    let gathered = std::mem::take(&mut g.gathered.tags);
    let mut out = Vec::with_capacity(gathered.len());
    for (serial, mut tags) in gathered {
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
        // Below the lowest tag still unacked, every tag is settled: one
        // frame with `multiple` covers the gathered ones there.
        let low = g
            .unacked
            .get(&serial)
            .and_then(BTreeMap::first_key_value)
            .map_or(u64::MAX, |(&t, _)| t);
        let below = tags.partition_point(|&t| t < low);
        let (upto, single) = match below {
            0 => (None, tags),
            // One alone goes as a plain ack.
            1 => (None, tags),
            n => (Some((tags[n - 1], n)), tags.split_off(n)),
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

/// Counts one settle of channel `.1` when dropped (after the settle went
/// out, or failed), so a released channel closes after its last one.
struct Settled<'a>(&'a AmqpBroker, u64);

impl Drop for Settled<'_> {
    fn drop(&mut self) {
        self.0.settled(self.1, 1);
    }
}
