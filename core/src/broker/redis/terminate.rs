//! Terminates across processes: `revoke(terminate)` publishes the ids and
//! the signal on `P:terminate`, and every broker on this Redis under the
//! same prefix — each worker process's — hears it and tells its apps, so the
//! process running the run stops it.
//!
//! Why pub/sub and not a key: a terminate matters only while the run is
//! going, and the revoke itself is kept (`P:revoked:<id>`), so a run that
//! starts later is skipped anyway. A process whose pub/sub connection is
//! away at that instant does not hear it; the run it has then finishes (and
//! its result stands). The channel is a standing pattern subscription of
//! the shared waiters ([`crate::broker::link::Waiters::psubscribe`]): made
//! before `connect` answers and again on every new connection.
//!
//! The message is JSON, `{"ids": [...], "signal": "SIGTERM" | n}`: a name
//! where the signal has one (see [`crate::task::signal::to_wire`]).

use std::sync::Arc;

use serde_json::{Value, json};

use super::RedisBroker;
use crate::broker::link::Handler;
use crate::task::signal::{SIGTERM, from_wire, to_wire};
use crate::task::state::Refused;

/// The most ids one terminate message names that a hearer reads: a message
/// naming more is cut there (a revoke of thousands of ids at once is an
/// admin's bulk job, not a terminate of runs in progress).
pub const TERMINATE_IDS_MAX: usize = 10_000;

impl RedisBroker {
    /// `P:terminate`: the channel terminates are published on.
    pub(super) fn terminate_channel(&self) -> String {
        format!("{}terminate", self.prefix)
    }

    /// Revokes `ids` and publishes the terminate, in one pipeline.
    pub(super) async fn terminate_inner(
        &self,
        ids: Vec<String>,
        until: i64,
        signal: i32,
    ) -> Result<(), Refused> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut p = self.revoke_pipe(&ids, until);
        p.cmd("PUBLISH")
            .arg(self.terminate_channel())
            .arg(encode(&ids, signal))
            .ignore();
        self.run(&p, true).await.map(|_| ())
    }

    /// Subscribes the terminate channel for good: every terminate heard is
    /// told to this broker's apps. One that cannot be made now is made as
    /// soon as Redis is back.
    pub(super) async fn hear_terminates(self: &Arc<Self>) {
        let me = Arc::downgrade(self);
        let on: Handler = Arc::new(move |_, payload| {
            if let (Some(b), Some((ids, signal))) = (me.upgrade(), decode(payload)) {
                b.hearers.tell(&ids, signal);
            }
        });
        let pattern = glob_literal(&self.terminate_channel());
        let _ = self.waiters.psubscribe(&pattern, on).await;
    }
}

/// A terminate message.
pub fn encode(ids: &[String], signal: i32) -> String {
    json!({ "ids": ids, "signal": to_wire(signal) }).to_string()
}

/// A terminate message's ids and signal ([`SIGTERM`] when it names none
/// that is known); `None` when it is not one.
pub fn decode(raw: &[u8]) -> Option<(Vec<String>, i32)> {
    let v: Value = serde_json::from_slice(raw).ok()?;
    let ids: Vec<String> = v
        .get("ids")?
        .as_array()?
        .iter()
        .filter_map(|i| i.as_str().map(str::to_string))
        .take(TERMINATE_IDS_MAX)
        .collect();
    let signal = v.get("signal").and_then(from_wire).unwrap_or(SIGTERM);
    Some((ids, signal))
}

/// `s` as a Redis glob pattern matching exactly `s`: a prefix may hold
/// `*`, `?`, `[` or `\`, which a pattern would read as wildcards.
pub(super) fn glob_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 4);
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_reads_back() {
        let ids = vec!["a".to_string(), "b".to_string()];
        assert_eq!(decode(encode(&ids, 9).as_bytes()), Some((ids.clone(), 9)));
        assert_eq!(decode(encode(&ids, 40).as_bytes()), Some((ids, 40)));
        // No signal, or one not known: SIGTERM, as Celery's workers do.
        assert_eq!(
            decode(br#"{"ids": ["x"]}"#),
            Some((vec!["x".to_string()], SIGTERM))
        );
        assert_eq!(
            decode(br#"{"ids": ["x"], "signal": "NOPE"}"#),
            Some((vec!["x".to_string()], SIGTERM))
        );
        for bad in [&b"nope"[..], b"{}", br#"{"ids": "x"}"#] {
            assert_eq!(decode(bad), None);
        }
    }

    #[test]
    fn a_prefix_is_matched_literally() {
        assert_eq!(glob_literal("headway:terminate"), "headway:terminate");
        assert_eq!(glob_literal(r"a*b?[c]\d"), r"a\*b\?\[c\]\\d");
    }
}
