//! A dead letter as both Redis layouts keep it: `<header JSON>\n<bytes>`,
//! the header saying when, why, which message and how big it was.
//!
//! Why shared: the admin reads, re-queues and purges dead letters alike on
//! either layout (`lua/dead.lua` is shared the same way), so a letter reads
//! back by one rule. What each layout writes stays its own (the keys'
//! order is part of what its scripts read).

use crate::task::dead::DeadLetter;

#[derive(serde::Deserialize)]
struct Head {
    at: i64,
    reason: String,
    #[serde(default)]
    id: Option<String>,
    /// Absent in letters kept before sizes were: the bytes are whole.
    #[serde(default)]
    size: Option<usize>,
}

/// The letter `el` of `queue`'s dead letters, read back. One without a
/// header is its bytes alone, with `headless` as its reason.
pub(crate) fn read(queue: &str, el: &[u8], headless: &str) -> DeadLetter {
    if el.starts_with(b"{\"at\":")
        && let Some(nl) = el.iter().position(|c| *c == b'\n')
        && let Ok(h) = serde_json::from_slice::<Head>(&el[..nl])
    {
        return DeadLetter {
            queue: queue.to_string(),
            id: h.id,
            reason: h.reason,
            at: h.at,
            raw: el[nl + 1..].to_vec(),
            // The size it had on the queue: a quarantined message keeps
            // only a prefix of it.
            size: h.size.unwrap_or(el.len() - nl - 1),
        };
    }
    DeadLetter {
        queue: queue.to_string(),
        id: None,
        reason: headless.into(),
        at: 0,
        raw: el.to_vec(),
        size: el.len(),
    }
}
