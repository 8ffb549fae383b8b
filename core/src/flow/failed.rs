//! Why an acquire gave up, and the one text every driver raises for it.
//!
//! The drivers differ only in the unit a host measures spans in (Python
//! seconds, Node milliseconds) and in the error type each reason maps to;
//! the words, what they show and how numbers are rounded are here.

use super::Nanos;

/// Why an acquire gave up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Failed {
    /// The deadline passed while the pool was full (`live` at that moment).
    Full {
        /// How many were live.
        live: i64,
    },
    /// The ward holds makes for longer than the deadline leaves.
    Held {
        /// The hold it answered.
        delay: Nanos,
    },
    /// The ward's breaker refused the make: fail fast.
    Shed {
        /// The breaker's refusal then, in [0, 1).
        refusal: f64,
    },
    /// The pool was closed.
    Closed,
}

/// The unit a host shows spans in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Float seconds (`30.0 s`), as Python spells a span.
    Seconds,
    /// Milliseconds (`30000 ms`), as Node spells one.
    Millis,
}

impl Unit {
    /// A span as the host wrote it: `30.0 s`, `30000 ms`.
    pub fn exact(self, ns: Nanos) -> String {
        match self {
            Unit::Seconds => format!("{:?} s", ns as f64 / 1e9),
            Unit::Millis => format!("{} ms", ns as f64 / 1e6),
        }
    }

    /// A span rounded to the millisecond: `0.250 s`, `250 ms`.
    pub fn rounded(self, ns: Nanos) -> String {
        match self {
            Unit::Seconds => format!("{:.3} s", ns as f64 / 1e9),
            Unit::Millis => format!("{:.0} ms", ns as f64 / 1e6),
        }
    }
}

impl Failed {
    /// The reason's name: `full`, `held`, `shed` or `closed`. A driver maps
    /// `full` and `held` to its timeout error, `shed` to its fail-fast one.
    pub fn kind(&self) -> &'static str {
        match self {
            Failed::Full { .. } => "full",
            Failed::Held { .. } => "held",
            Failed::Shed { .. } => "shed",
            Failed::Closed => "closed",
        }
    }

    /// What the driver raises for it: `timeout` (its timeout error) for
    /// `full` and `held` alike, `shed` (its fail-fast one), or `closed`.
    pub fn error(&self) -> &'static str {
        match self {
            Failed::Full { .. } | Failed::Held { .. } => "timeout",
            Failed::Shed { .. } => "shed",
            Failed::Closed => "closed",
        }
    }

    /// What the driver raises, given the acquire's `timeout` and the host's
    /// unit.
    pub fn message(&self, timeout: Option<Nanos>, unit: Unit) -> String {
        let within = || match timeout {
            Some(t) => format!("no item within {}", unit.exact(t)),
            None => "no item".to_string(),
        };
        match *self {
            Failed::Full { live } => format!("{}: the pool is full ({live} live)", within()),
            Failed::Held { delay } => format!(
                "{}: makes are held for {} after failures",
                within(),
                unit.rounded(delay)
            ),
            Failed::Shed { refusal } => format!(
                "the breaker refuses {}% of makes: failing fast",
                (refusal * 100.0).round() as i64
            ),
            Failed::Closed => "the pool is closed".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::{MILLI, SECOND};

    #[test]
    fn messages_in_either_unit() {
        let full = Failed::Full { live: 3 };
        assert_eq!(
            full.message(Some(30 * SECOND), Unit::Seconds),
            "no item within 30.0 s: the pool is full (3 live)"
        );
        assert_eq!(
            full.message(Some(30 * MILLI), Unit::Millis),
            "no item within 30 ms: the pool is full (3 live)"
        );
        assert_eq!(
            Failed::Held { delay: 250 * MILLI }.message(Some(SECOND / 20), Unit::Seconds),
            "no item within 0.05 s: makes are held for 0.250 s after failures"
        );
        assert_eq!(
            Failed::Held { delay: 250 * MILLI }.message(Some(100 * MILLI), Unit::Millis),
            "no item within 100 ms: makes are held for 250 ms after failures"
        );
        assert_eq!(
            Failed::Shed { refusal: 0.888 }.message(None, Unit::Millis),
            "the breaker refuses 89% of makes: failing fast"
        );
        assert_eq!(
            Failed::Closed.message(None, Unit::Seconds),
            "the pool is closed"
        );
        assert_eq!(
            Failed::Full { live: 1 }.message(None, Unit::Seconds),
            "no item: the pool is full (1 live)"
        );
        assert_eq!(Failed::Shed { refusal: 0.5 }.kind(), "shed");
        assert_eq!(Failed::Held { delay: 1 }.error(), "timeout");
    }
}
