//! How a [`RedisBroker`](super::RedisBroker) is set up: its options, their
//! checks, the consumer name and the redis-rs client built from a URL.
//!
//! Why apart: every refusal of a bad option names the option, and they are
//! all made here, before anything connects.

use std::time::Duration;

use super::super::options::limits;
use crate::task::dead::{MAX_DELIVERIES, MAX_MESSAGE_BYTES};
use crate::task::state::Refused;

/// How a [`RedisBroker`] is set up.
#[derive(Clone)]
pub struct RedisOptions {
    /// This process's consumer name: its held lists and lease keys are
    /// named after it. Must be unique among live processes. `None`: host,
    /// pid and a random suffix.
    pub consumer: Option<String>,
    /// Put before every key (`"headway:"`), so one Redis can host other data
    /// and an ACL can be limited to `headway:*`.
    pub prefix: String,
    /// How long a consumer's claims survive it without a refresh: 30 s,
    /// BullMQ's default lock duration. Refreshed every third of it.
    pub lease: Duration,
    /// How long results are kept: one day, Celery's `result_expires`.
    pub result_expires: Duration,
    /// How often this broker runs `recover()` by itself (`Some(lease)`:
    /// a dead consumer's claims are back within two leases). `None`: only
    /// when called.
    pub recover_every: Option<Duration>,
    /// How long a write waits for Redis to come back before it is refused:
    /// 10 s, long enough for a restart, short enough that a caller learns.
    pub patience: Duration,
    /// PEM roots to verify a `rediss://` server against instead of the
    /// platform's (a private CA).
    pub tls_ca: Option<Vec<u8>>,
    /// How many times a consumer may be lost holding a message before
    /// `recover()` dead-letters it as a poison pill
    /// ([`MAX_DELIVERIES`], 3). Every process recovering one queue should
    /// agree on it.
    pub max_deliveries: u32,
    /// The size cap for one message ([`MAX_MESSAGE_BYTES`], 16 MiB): a
    /// publish of a bigger one is refused, and a bigger one put on a queue
    /// by another producer is dead-lettered by the claim script without
    /// ever being sent to a worker.
    pub max_message_bytes: usize,
    /// How long a beat leads without renewing (30 s, the same as the
    /// consumer lease: BullMQ's lock duration). Renewed every third of it
    /// by the broker's own task; a standby beat takes over within one
    /// `beat_lease` of the leader dying or pausing.
    pub beat_lease: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            consumer: None,
            prefix: "headway:".into(),
            lease: Duration::from_secs(30),
            result_expires: Duration::from_secs(86_400),
            recover_every: Some(Duration::from_secs(30)),
            patience: Duration::from_secs(10),
            tls_ca: None,
            max_deliveries: MAX_DELIVERIES,
            max_message_bytes: MAX_MESSAGE_BYTES,
            beat_lease: Duration::from_secs(30),
        }
    }
}

impl std::fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisOptions")
            .field("consumer", &self.consumer)
            .field("prefix", &self.prefix)
            .field("lease", &self.lease)
            .field("result_expires", &self.result_expires)
            .field("recover_every", &self.recover_every)
            .field("patience", &self.patience)
            .field("tls_ca", &self.tls_ca.as_ref().map(|_| "<pem>"))
            .field("max_deliveries", &self.max_deliveries)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("beat_lease", &self.beat_lease)
            .finish()
    }
}

impl RedisOptions {
    /// Refuses an option out of range, naming it.
    pub(super) fn check(&self) -> Result<(), Refused> {
        let options = self;
        if options.prefix.contains(['{', '}']) {
            return Err(Refused::Invalid(
                "invalid `prefix`: must not contain `{` or `}` (the queue's hash tag must be the first)".into(),
            ));
        }
        if options.lease < Duration::from_millis(30) {
            return Err(Refused::Invalid(
                "invalid `lease`: must be at least 30 ms".into(),
            ));
        }
        if options.result_expires < Duration::from_millis(1) {
            return Err(Refused::Invalid(
                "invalid `result_expires`: must be positive".into(),
            ));
        }
        limits(
            options.max_deliveries,
            options.max_message_bytes,
            options.beat_lease,
        )
    }
}

pub(super) fn check_name(what: &str, name: &str) -> Result<(), Refused> {
    if name.is_empty() || name.contains(['{', '}']) {
        return Err(Refused::Invalid(format!(
            "invalid `{what}`: {name:?} must be non-empty and without `{{` or `}}` (they would break the queue's hash tag)"
        )));
    }
    Ok(())
}

pub(super) fn default_consumer() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "host".into())
        .replace(['{', '}', ':'], "-");
    let id = crate::task::message::new_id();
    format!("{host}-{}-{}", std::process::id(), &id[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_break_the_hash_tag_are_refused() {
        assert!(check_name("queue", "a{b}").is_err());
        assert!(check_name("queue", "").is_err());
        assert!(check_name("queue", "celery.high").is_ok());
    }
}
