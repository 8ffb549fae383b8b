//! Dead letters as JSON text for the JS in `lib/`, and raw bytes pushed
//! onto a queue as another producer would, for tests and tools.
//!
//! Listing, counting, re-queueing and purging are the core's (`Inspector`,
//! `Broker`); this only converts.

use headway_core::task::{DeadLetter, Host};

/// The concrete broker behind an app's seams, for `_pushRaw` (the core's).
pub(crate) use headway_core::broker::Raw;

/// Dead letters as one JSON text: `[{"queue", "id", "reason", "at",
/// "raw", "size"}, ...]`, `raw` as a string of one char per byte (U+0000 to U+00FF)
/// that `Buffer.from(raw, 'latin1')` turns back into the bytes.
pub(crate) fn letters_json(letters: Vec<DeadLetter>) -> String {
    let v: Vec<serde_json::Value> = letters
        .into_iter()
        .map(|d| {
            let raw: String = d.raw.iter().map(|&b| char::from(b)).collect();
            serde_json::json!({
                "queue": d.queue,
                "id": d.id,
                "reason": d.reason,
                "at": d.at,
                "raw": raw,
                "size": d.size,
            })
        })
        .collect();
    serde_json::to_string(&v).unwrap_or_else(|_| "[]".into())
}

/// A JS count (`limit`; the JS in `lib/` checks the type), in the core's
/// range, refused as a `RANGE` (Node's `ERR_OUT_OF_RANGE`). `null`: `none`.
pub(crate) fn count(limit: Option<f64>, none: usize) -> Result<usize, super::Refusal> {
    headway_core::task::specs::limit(Host::Node, limit, none)
        .map_err(|e| super::Refusal::range(e.to_string()))
}
