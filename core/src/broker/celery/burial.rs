//! Moving messages to the dead letters on Celery's layout, and getting
//! them back. A message set aside must neither block its queue nor vanish
//! unseen: each move is one `bury.lua` step, fenced on its `unacked` entry,
//! and logged; a re-queue or purge is one `dead.lua` step over the list
//! (`headway.celery.dead:<queue>`, a key no Celery worker reads).

use super::CeleryBroker;
use crate::task::dead::DEAD_KEPT;
use crate::task::state::Refused;

/// One message on its way to the dead letters.
pub(super) struct Burial {
    /// Its `unacked` tag ("": it never got there).
    pub(super) tag: String,
    /// Its `unacked` entry as read, to compare before moving ("": presence).
    pub(super) entry: Vec<u8>,
    /// The dead letter ([`dead::element`]).
    pub(super) element: Vec<u8>,
    pub(super) reason: String,
}

impl CeleryBroker {
    /// Moves messages to `queue`'s dead letters, one `bury.lua` each
    /// (fenced on their `unacked` entries), and logs why: a message set
    /// aside must neither block the queue nor vanish unseen. Answers how
    /// many moved; one that could not (Redis away past the patience) is
    /// left where it was — in `unacked`, restored and quarantined again
    /// later — and logged.
    pub(super) async fn bury(&self, queue: &str, what: &str, items: Vec<Burial>) -> usize {
        if items.is_empty() {
            return 0;
        }
        let key = self.dead_key(queue);
        let reasons: Vec<String> = items
            .iter()
            .map(|b| crate::log::shown(&b.reason).to_string())
            .collect();
        self.log(&format!(
            "queue {queue:?}: {what} {} message(s) in {key}: {}",
            items.len(),
            reasons.join("; ")
        ));
        let mut n = 0;
        for b in &items {
            let mut inv = self.scripts.bury.prepare_invoke();
            inv.key(&self.keys.unacked)
                .key(&self.keys.index)
                .key(&key)
                .arg(&b.tag)
                .arg(b.entry.as_slice())
                .arg(b.element.as_slice())
                .arg(DEAD_KEPT);
            let inv = &inv;
            match self
                .link
                .patiently(true, |mut c| async move {
                    inv.invoke_async::<i64>(&mut c).await
                })
                .await
            {
                Ok(1) => n += 1,
                Ok(_) => {}
                Err(e) => self.log(&format!(
                    "queue {queue:?}: could not move a message to {key} ({e}){}",
                    if b.tag.is_empty() {
                        "; its bytes are lost"
                    } else {
                        "; it stays in `unacked` and is set aside again after a restore"
                    }
                )),
            }
        }
        n
    }

    /// Puts dead letters of `queue` back, oldest first, at most `limit`
    /// (only those whose id is in `ids` unless it is empty), each as its
    /// bytes at the back of the step list it came from, in one script. A
    /// poison pill was kept marked redelivered with its lost count taken
    /// off, so it goes back that way; quarantined bytes go back as they
    /// were (and are quarantined again if still bad).
    pub(super) async fn requeue_dead_letters(
        &self,
        queue: &str,
        ids: &[String],
        limit: usize,
    ) -> Result<usize, Refused> {
        if limit == 0 {
            return Ok(0);
        }
        self.remember_queue(queue);
        let mut inv = self.scripts.dead.prepare_invoke();
        inv.key(self.dead_key(queue));
        for &step in &self.opts.priority_steps {
            inv.key(self.queue_key(queue, step));
        }
        inv.arg("requeue")
            .arg(limit)
            .arg(self.opts.priority_steps.len());
        for &step in &self.opts.priority_steps {
            inv.arg(step);
        }
        for id in ids {
            inv.arg(id);
        }
        let n = self.run_dead(&inv).await?;
        if n > 0 {
            self.log(&format!("queue {queue:?}: re-queued {n} dead letter(s)"));
        }
        Ok(n)
    }

    /// Runs a prepared dead-letter script through a short outage; answers
    /// how many letters it moved or dropped.
    async fn run_dead(&self, inv: &redis::ScriptInvocation<'_>) -> Result<usize, Refused> {
        let n = self
            .link
            .patiently(true, |mut c| async move {
                inv.invoke_async::<i64>(&mut c).await
            })
            .await?;
        Ok(n.max(0) as usize)
    }

    /// Drops every dead letter of `queue`, in one script; answers how many.
    pub(super) async fn purge_dead_letters(&self, queue: &str) -> Result<usize, Refused> {
        let mut inv = self.scripts.dead.prepare_invoke();
        inv.key(self.dead_key(queue))
            .key(self.queue_key(queue, 0))
            .arg("purge")
            .arg(0)
            .arg(0);
        let n = self.run_dead(&inv).await?;
        if n > 0 {
            self.log(&format!("queue {queue:?}: purged {n} dead letter(s)"));
        }
        Ok(n)
    }
}
