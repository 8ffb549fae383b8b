//! What a Celery-layout broker is built with: kombu's Redis transport
//! options and Celery's result backend settings that matter for sharing a
//! Redis with Celery, each with Celery's default, plus headway's own limits
//! (dead letters, hand-backs, held etas, beat lease, patience). Kept apart
//! so the defaults and their checks can be read in one place.

use std::time::Duration;

use super::super::options::{limits, need};
use super::{eta, unknown};
use crate::task::dead::{MAX_DELIVERIES, MAX_MESSAGE_BYTES};
use crate::task::state::Refused;

/// kombu's Redis transport options and Celery's result backend settings
/// that matter for sharing a Redis with Celery.
#[derive(Debug, Clone, PartialEq)]
pub struct CeleryOptions {
    /// This consumer's node name (pidbox destinations, the inspector):
    /// `headway@<hostname>` when `None`, like Celery's `celery@<hostname>`.
    pub consumer: Option<String>,
    /// How long a claim may stay unacked before any consumer's restore puts
    /// it back: 3600 s, kombu's `visibility_timeout` default.
    pub visibility_timeout: Duration,
    /// The priority steps: `[0, 3, 6, 9]`, kombu's `PRIORITY_STEPS`.
    pub priority_steps: Vec<u8>,
    /// Between a queue's name and its step: `"\x06\x16"`, kombu's `sep`.
    pub sep: String,
    /// Before every transport key and channel: `""`, kombu's
    /// `global_keyprefix`.
    pub global_keyprefix: String,
    /// Before every result key (`result_backend_transport_options`
    /// `global_keyprefix`; `_` is added unless it ends in `:_-.`): `""`.
    pub result_keyprefix: String,
    /// How long results and chord keys live: 1 day, Celery's
    /// `result_expires`. `None` keeps them forever.
    pub result_expires: Option<Duration>,
    /// The Celery queue headway's `default` queue is: `celery`, Celery's
    /// `task_default_queue`.
    pub default_queue: String,
    /// How long the `unacked_mutex` may be held: 300 s, kombu's
    /// `unacked_mutex_expire`.
    pub unacked_mutex_expire: Duration,
    /// How many entries one restore takes: all (`None`), kombu's
    /// `unacked_restore_limit`.
    pub unacked_restore_limit: Option<usize>,
    /// How long a revoke is remembered: 10800 s, Celery's
    /// `CELERY_WORKER_REVOKE_EXPIRES`.
    pub revoke_keep: Duration,
    /// What a consumer does with a task name its app does not register
    /// (once [`CeleryBroker::route_for`] has told it the app): hand it back
    /// for another consumer — a Celery worker on the same queue — by
    /// default, logging the name once.
    pub unknown_tasks: UnknownTasks,
    /// How often a consuming broker runs [`Broker::recover`] by itself, the
    /// first time as soon as it consumes: 100 s, what a Celery worker's
    /// timer amounts to (`maybe_restore_messages` every 10 s, scanning on
    /// every 10th call). `None`: only when called.
    pub restore_every: Option<Duration>,
    /// How many times a message's holder may be lost (its claim restored by
    /// [`Broker::recover`]) before the next restore dead-letters it as a
    /// poison pill instead ([`MAX_DELIVERIES`], 3). Counted in the
    /// envelope's `headway_lost` header; every headway process restoring
    /// one queue should agree on it.
    pub max_deliveries: u32,
    /// The size cap for one envelope ([`MAX_MESSAGE_BYTES`], 16 MiB): a
    /// publish of a bigger one is refused, and a bigger one put on a queue
    /// by another producer goes to the dead letters unparsed (by the claim
    /// script, never sent to the consumer).
    pub max_message_bytes: usize,
    /// How long a beat leads without renewing: 30 s, as on headway's own
    /// layout (BullMQ's lock duration). Renewed every third of it by the
    /// broker's own task; a standby beat takes over within one `beat_lease`
    /// of the leader dying or pausing.
    pub beat_lease: Duration,
    /// How long a write (publish, ack, result, restore) waits for Redis to
    /// come back before it is refused: 10 s, as on headway's own layout —
    /// long enough for a restart, short enough that a caller learns.
    pub patience: Duration,
    /// PEM roots to verify a `rediss://` server against instead of the
    /// platform's (a private CA), as on headway's own layout.
    pub tls_ca: Option<Vec<u8>>,
    /// How many times a message for a task the app does not run is handed
    /// back (counted in its `x-headway-handbacks` header) before the next
    /// hand-back dead-letters it instead: [`unknown::MAX_HANDBACKS`], 100.
    pub max_handbacks: u32,
    /// How many etas a consumer holds in memory at most
    /// ([`eta::MAX_HELD_ETAS`], 10 000): past it, it stops claiming until
    /// one comes due, as Celery's prefetch stops a worker.
    pub max_held_etas: usize,
    /// Whether Celery's events go out (`events`): `false`, as Celery's
    /// `worker_send_task_events` (`-E` turns them on); Celery's
    /// `enable_events` control command turns them on too.
    pub task_events: bool,
    /// Whether a `task-sent` event goes out for each message published
    /// (Celery's `task_send_sent_event`): `false`, as in Celery.
    pub task_send_sent_event: bool,
}

/// What a consumer does with a message for a task its app does not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnknownTasks {
    /// Put it back at the end of its queue for another consumer (the
    /// default: a queue shared with Celery workers carries their tasks too).
    #[default]
    Requeue,
    /// Hand it to the worker, which records FAILURE `NotRegistered` as a
    /// Celery worker does.
    Fail,
}

impl Default for CeleryOptions {
    fn default() -> Self {
        CeleryOptions {
            consumer: None,
            visibility_timeout: Duration::from_secs(3600),
            priority_steps: vec![0, 3, 6, 9],
            sep: "\x06\x16".into(),
            global_keyprefix: String::new(),
            result_keyprefix: String::new(),
            result_expires: Some(Duration::from_secs(86_400)),
            default_queue: "celery".into(),
            unacked_mutex_expire: Duration::from_secs(300),
            unacked_restore_limit: None,
            revoke_keep: Duration::from_secs(10_800),
            unknown_tasks: UnknownTasks::Requeue,
            restore_every: Some(Duration::from_secs(100)),
            max_deliveries: MAX_DELIVERIES,
            max_message_bytes: MAX_MESSAGE_BYTES,
            beat_lease: Duration::from_secs(30),
            patience: Duration::from_secs(10),
            tls_ca: None,
            max_handbacks: unknown::MAX_HANDBACKS,
            max_held_etas: eta::MAX_HELD_ETAS,
            task_events: false,
            task_send_sent_event: false,
        }
    }
}

impl CeleryOptions {
    pub(super) fn check(&self) -> Result<(), Refused> {
        if self.visibility_timeout.is_zero() {
            return Err(Refused::Invalid(
                "invalid `visibility_timeout`: must be positive".into(),
            ));
        }
        if self.priority_steps.is_empty()
            || self.priority_steps[0] != 0
            || self.priority_steps.windows(2).any(|w| w[0] >= w[1])
            || self.priority_steps.iter().any(|&s| s > 9)
        {
            return Err(Refused::Invalid(
                "invalid `priority_steps`: must rise from 0 and stay within 0..=9".into(),
            ));
        }
        if self.sep.is_empty() {
            return Err(Refused::Invalid("invalid `sep`: must not be empty".into()));
        }
        if self.default_queue.is_empty() {
            return Err(Refused::Invalid(
                "invalid `default_queue`: must not be empty".into(),
            ));
        }
        need(
            self.max_held_etas > 0,
            "max_held_etas",
            "must be at least 1",
        )?;
        need(
            self.max_handbacks > 0,
            "max_handbacks",
            "must be at least 1",
        )?;
        limits(self.max_deliveries, self.max_message_bytes, self.beat_lease)
    }
}
