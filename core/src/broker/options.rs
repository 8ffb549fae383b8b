//! What the Redis layouts' options share: the limits both have (dead
//! letters, the size cap, the beat lease), checked by one rule with one
//! wording, and the helper every other check is written with.
//!
//! Why shared: an option both layouts take must not be refused on one and
//! accepted on the other, nor refused in other words.

use std::time::Duration;

use crate::task::state::Refused;

/// Refuses option `name` unless `ok`, saying the `rule` it breaks.
pub(crate) fn need(ok: bool, name: &str, rule: &str) -> Result<(), Refused> {
    if ok {
        Ok(())
    } else {
        Err(Refused::Invalid(format!("invalid `{name}`: {rule}")))
    }
}

/// The limits both layouts take: `max_deliveries` and `max_message_bytes`
/// at least 1, `beat_lease` at least 30 ms.
pub(crate) fn limits(
    max_deliveries: u32,
    max_message_bytes: usize,
    beat_lease: Duration,
) -> Result<(), Refused> {
    need(max_deliveries > 0, "max_deliveries", "must be at least 1")?;
    need(
        max_message_bytes > 0,
        "max_message_bytes",
        "must be at least 1",
    )?;
    need(
        beat_lease >= Duration::from_millis(30),
        "beat_lease",
        "must be at least 30 ms",
    )
}
