//! Dead letters: messages that cannot be decoded, are over the size cap, or
//! were held by too many lost consumers, kept per queue in `P{Q}:dead` with
//! a header saying why.
//!
//! Why kept, not dropped: a malformed message must neither block its queue
//! nor vanish unseen; the admin can read, re-queue or purge them.

use ::redis::Value;

use super::options::check_name;
use super::scripts::evalsha;
use super::wire::{bytes, int};
use super::{RedisBroker, log};
use crate::task::dead::{self, DEAD_KEPT, DeadLetter};
use crate::task::state::Refused;

/// A quarantined message as the scripts keep it: `<header JSON>\n<bytes>`,
/// the bytes only their first [`dead::DEAD_PREFIX_BYTES`], the header with
/// the whole size.
pub(super) fn dead_element(now: i64, step: u8, why: &dead::Undecodable, raw: &[u8]) -> Vec<u8> {
    let mut head = serde_json::json!({
        "at": now, "reason": why.reason, "step": step, "size": raw.len(),
    });
    if let Some(id) = &why.id {
        head["id"] = serde_json::Value::String(id.clone());
    }
    let mut out = serde_json::to_vec(&head).expect("a header always serialises");
    out.push(b'\n');
    out.extend_from_slice(dead::kept_prefix(raw));
    out
}

/// A dead letter read back; one kept before dead letters had headers is its
/// bytes alone.
pub(super) fn undead(queue: &str, el: &[u8]) -> DeadLetter {
    super::super::dead::read(queue, el, "unknown: kept before dead letters had reasons")
}

impl RedisBroker {
    /// Moves claims that do not decode from the held list to `P{Q}:dead`
    /// with their reasons (one script: fenced, capped), and logs why: a
    /// malformed message must neither block the queue nor vanish unseen.
    pub(super) async fn bury(&self, q: &str, items: Vec<(Vec<u8>, Vec<u8>, String)>) {
        let reasons: Vec<String> = items
            .iter()
            .map(|(_, _, r)| crate::log::shown(r).to_string())
            .collect();
        log(&format!(
            "queue {q:?}: quarantined {} message(s) in {}: {}",
            items.len(),
            self.key(q, "dead", ""),
            reasons.join("; ")
        ));
        let mut c = evalsha(&self.scripts.bury, &self.base(q));
        c.arg(&self.consumer);
        for (el, letter, _) in &items {
            c.arg(el.as_slice()).arg(letter.as_slice());
        }
        if let Err(e) = self.one(c, true).await {
            // Left in the held list: the sweep hands it back and the next
            // claim quarantines it again.
            log(&format!(
                "queue {q:?}: could not quarantine ({e}); retried at the next sweep"
            ));
        }
    }

    pub(super) async fn requeue_dead_inner(
        &self,
        queue: &str,
        ids: &[String],
        limit: usize,
    ) -> Result<usize, Refused> {
        check_name("queue", queue)?;
        if limit == 0 {
            return Ok(0);
        }
        let mut c = evalsha(&self.scripts.dead, &self.base(queue));
        c.arg("requeue").arg(limit);
        for id in ids {
            c.arg(id);
        }
        let n = int(&self.one(c, true).await?).unwrap_or(0).max(0) as usize;
        if n > 0 {
            log(&format!("queue {queue:?}: re-queued {n} dead letter(s)"));
        }
        Ok(n)
    }

    pub(super) async fn purge_dead_inner(&self, queue: &str) -> Result<usize, Refused> {
        check_name("queue", queue)?;
        let mut c = evalsha(&self.scripts.dead, &self.base(queue));
        c.arg("purge").arg(0);
        let n = int(&self.one(c, true).await?).unwrap_or(0).max(0) as usize;
        if n > 0 {
            log(&format!("queue {queue:?}: purged {n} dead letter(s)"));
        }
        Ok(n)
    }

    pub(super) async fn dead_letters_inner(
        &self,
        queue: &str,
        limit: usize,
    ) -> Result<Vec<DeadLetter>, Refused> {
        check_name("queue", queue)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let v = self
            .one(
                ::redis::cmd("LRANGE")
                    .arg(self.key(queue, "dead", ""))
                    .arg(0)
                    .arg(limit.min(DEAD_KEPT) as i64 - 1)
                    .clone(),
                false,
            )
            .await?;
        Ok(match v {
            Value::Array(a) => a
                .iter()
                .filter_map(bytes)
                .map(|el| undead(queue, el))
                .collect(),
            _ => Vec::new(),
        })
    }

    pub(super) async fn dead_count_inner(&self, queue: &str) -> Result<u64, Refused> {
        check_name("queue", queue)?;
        let v = self
            .one(
                ::redis::cmd("LLEN")
                    .arg(self.key(queue, "dead", ""))
                    .clone(),
                false,
            )
            .await?;
        Ok(int(&v).unwrap_or(0).max(0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::super::scripts::COMMON;
    use super::*;

    #[test]
    fn dead_letters_parse() {
        let why = dead::Undecodable {
            reason: "bad JSON: \"x\"\n".into(),
            id: Some("a".into()),
        };
        let el = dead_element(7, 3, &why, b"\x00raw\nbytes");
        let d = undead("q", &el);
        assert_eq!(
            (d.at, d.id.as_deref(), d.reason.as_str(), d.raw.as_slice()),
            (7, Some("a"), why.reason.as_str(), &b"\x00raw\nbytes"[..])
        );
        assert_eq!(undead("q", b"{\"a\":1}").raw, b"{\"a\":1}");
        // The scripts' cap is the Rust one.
        assert!(COMMON.contains(&format!("local DEAD_KEPT = {DEAD_KEPT}\n")));
        assert!(COMMON.contains(&format!(
            "local DEAD_PREFIX = {}\n",
            dead::DEAD_PREFIX_BYTES
        )));
        assert_eq!(d.size, d.raw.len());
        let big = vec![b'x'; dead::DEAD_PREFIX_BYTES + 10];
        let d = undead("q", &dead_element(7, 0, &why, &big));
        assert_eq!((d.raw.len(), d.size), (dead::DEAD_PREFIX_BYTES, big.len()));
        assert!(d.truncated());
    }
}
