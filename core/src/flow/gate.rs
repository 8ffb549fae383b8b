//! A count with a ceiling: the concurrency limit a server puts on itself.
//!
//! Unlike a rate, this has nothing to do with time: it is how many things are
//! happening at once. A server past its limit answers rather than queues,
//! which is what keeps a queue from becoming the outage (Little's law: a
//! bounded number in flight bounds the wait).

use super::error::Invalid;

/// A count with a ceiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    limit: i64,
    held: i64,
}

impl Gate {
    /// A gate nothing has entered. Refused: a negative limit.
    pub fn new(limit: i64) -> Result<Gate, Invalid> {
        if limit < 0 {
            return Err(Invalid::new("limit", "must not be negative"));
        }
        Ok(Gate { limit, held: 0 })
    }

    /// Whether there is room, taking it if there is.
    #[inline]
    pub fn enter(&mut self) -> bool {
        if self.held < self.limit {
            self.held += 1;
            true
        } else {
            false
        }
    }

    /// Give the room back. Leaving an empty gate does nothing: the count never
    /// goes below zero, so a double leave cannot open room that was never
    /// taken.
    #[inline]
    pub fn leave(&mut self) {
        if self.held > 0 {
            self.held -= 1;
        }
    }

    /// How many are inside.
    pub fn held(&self) -> i64 {
        self.held
    }

    /// The ceiling.
    pub fn limit(&self) -> i64 {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceiling() {
        let mut g = Gate::new(2).unwrap();
        assert!(g.enter());
        assert!(g.enter());
        assert!(!g.enter());
        assert_eq!(g.held(), 2);
        g.leave();
        assert!(g.enter());
        g.leave();
        g.leave();
        g.leave();
        assert_eq!(g.held(), 0);
        assert_eq!(Gate::new(-1).unwrap_err().arg, "limit");
        assert!(!Gate::new(0).unwrap().enter());
    }
}
