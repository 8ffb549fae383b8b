//! Every Redis key and channel name the Celery layout uses, in one place:
//! kombu's (`unacked`, `unacked_index`, `unacked_mutex`, the queue lists per
//! priority step, the pidbox channel), Celery's result backend's
//! (`celery-task-meta-<id>`, `celery-taskset-meta-<gid>…`) and headway's own
//! additions, all under `headway.celery.` so no Celery process ever reads
//! or writes them. A name is the contract with Celery: built here only.

use super::{CeleryBroker, CeleryOptions, pidbox};

/// The fixed keys of one broker, built once from its options.
pub(super) struct Keys {
    pub(super) unacked: String,
    pub(super) index: String,
    pub(super) mutex: String,
    pub(super) revoked: String,
    pub(super) events: String,
    pub(super) dead: String,
    pub(super) beat_lease: String,
    pub(super) beat_fired: String,
    pub(super) pidbox: String,
    pub(super) pidbox_patterns: Vec<String>,
    pub(super) result_prefix: String,
}

impl Keys {
    /// The keys for `opts` on database `db` (the pidbox channel names it).
    /// Result keys take `result_keyprefix` with `_` added unless it ends in
    /// one of `:_-.`, as Celery's backend does.
    pub(super) fn new(opts: &CeleryOptions, db: i64) -> Keys {
        let p = &opts.global_keyprefix;
        let mut rp = opts.result_keyprefix.clone();
        if !rp.is_empty() && !rp.ends_with([':', '_', '-', '.']) {
            rp.push('_');
        }
        let base = pidbox::channel("", db);
        let mut patterns = vec![base.clone()];
        if !p.is_empty() {
            patterns.push(format!("{p}{base}"));
        }
        Keys {
            unacked: format!("{p}unacked"),
            index: format!("{p}unacked_index"),
            mutex: format!("{p}unacked_mutex"),
            revoked: format!("{p}headway.celery.revoked"),
            events: format!("{p}headway.celery.events"),
            dead: format!("{p}headway.celery.dead:"),
            beat_lease: format!("{p}headway.celery.beat.lease"),
            beat_fired: format!("{p}headway.celery.beat.fired"),
            pidbox: pidbox::channel(p, db),
            pidbox_patterns: patterns,
            result_prefix: rp,
        }
    }
}

impl CeleryBroker {
    /// The list key of `queue` (a headway name) at `step`.
    pub fn queue_key(&self, queue: &str, step: u8) -> String {
        let q = self.facts.sender.wire_queue(queue);
        if step == 0 {
            format!("{}{q}", self.opts.global_keyprefix)
        } else {
            format!("{}{q}{}{step}", self.opts.global_keyprefix, self.opts.sep)
        }
    }

    /// The step a priority goes to: the largest step not above it (kombu's
    /// `priority()`), priorities clamped to 0..=9.
    pub fn step_of(&self, priority: Option<u8>) -> u8 {
        let p = priority.unwrap_or(0).min(9);
        *self
            .opts
            .priority_steps
            .iter()
            .rev()
            .find(|&&s| s <= p)
            .unwrap_or(&0)
    }

    /// The key of `id`'s result: `celery-task-meta-<id>`.
    pub fn meta_key(&self, id: &str) -> String {
        format!("{}celery-task-meta-{id}", self.keys.result_prefix)
    }

    /// A chord's key: `celery-taskset-meta-<gid><suffix>`.
    pub fn group_key(&self, gid: &str, suffix: &str) -> String {
        format!(
            "{}celery-taskset-meta-{gid}{suffix}",
            self.keys.result_prefix
        )
    }

    /// The dead-letter list of `queue` (a headway name):
    /// `headway.celery.dead:<Celery queue name>`, a key no Celery worker
    /// reads (see `docs/celery.md`).
    pub fn dead_key(&self, queue: &str) -> String {
        format!("{}{}", self.keys.dead, self.facts.sender.wire_queue(queue))
    }

    /// `queues` by their headway names (Celery's default queue, `celery`
    /// unless configured, is `default`).
    pub(super) fn model_queues(&self, queues: &[String]) -> Vec<String> {
        queues
            .iter()
            .map(|q| self.facts.sender.model_queue(q))
            .collect()
    }
}
