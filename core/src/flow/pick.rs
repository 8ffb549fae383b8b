//! Choosing between pools: the power of two random choices.
//!
//! Asking the least-loaded of all pools makes every client rush the same one
//! the moment it looks best; asking a random one ignores load. Drawing two and
//! asking the better is nearly as good as knowing all of them and herds
//! nobody (Mitzenmacher, "The Power of Two Choices in Randomized Load
//! Balancing"; what Finagle and Envoy's least-request balancer do).

use super::{Nanos, Pool};

/// What [`pick`] compares: how much a pool refuses and how much is in use.
pub trait Load {
    /// The breaker's refusal now, in [0, 1).
    fn refusal(&self, now: Nanos) -> f64;
    /// How many are lent or being made.
    fn busy(&self) -> i64;
}

impl<T: Clone + PartialEq> Load for Pool<T> {
    fn refusal(&self, now: Nanos) -> f64 {
        Pool::refusal(self, now)
    }
    fn busy(&self) -> i64 {
        Pool::busy(self)
    }
}

impl<L: Load + ?Sized> Load for &L {
    fn refusal(&self, now: Nanos) -> f64 {
        (**self).refusal(now)
    }
    fn busy(&self) -> i64 {
        (**self).busy()
    }
}

fn slot(draw: f64, len: usize) -> usize {
    let i = (super::unit(draw) * len as f64).floor() as usize;
    i.min(len - 1)
}

/// Which pool to ask: the ones at `floor(first·len)` and `floor(second·len)`
/// are compared; the lower refusal wins, then the lower busy count, then the
/// first. `None` when there are no pools.
pub fn pick<L: Load>(pools: &[L], now: Nanos, first: f64, second: f64) -> Option<usize> {
    if pools.is_empty() {
        return None;
    }
    let a = slot(first, pools.len());
    let b = slot(second, pools.len());
    let (ra, rb) = (pools[a].refusal(now), pools[b].refusal(now));
    if rb < ra || (rb == ra && pools[b].busy() < pools[a].busy()) {
        Some(b)
    } else {
        Some(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct L(f64, i64);
    impl Load for L {
        fn refusal(&self, _: Nanos) -> f64 {
            self.0
        }
        fn busy(&self) -> i64 {
            self.1
        }
    }

    #[test]
    fn lower_refusal_then_busy_then_first() {
        let p = [L(0.5, 0), L(0.1, 9), L(0.1, 3), L(0.1, 3)];
        assert_eq!(pick(&p, 0, 0.0, 0.3), Some(1));
        assert_eq!(pick(&p, 0, 0.3, 0.6), Some(2));
        assert_eq!(pick(&p, 0, 0.8, 0.6), Some(3));
        assert_eq!(pick(&p, 0, 0.6, 0.8), Some(2));
        // Draws out of range are clamped.
        assert_eq!(pick(&p, 0, 1.0, -2.0), Some(3));
        assert_eq!(pick(&p, 0, f64::NAN, 0.0), Some(0));
    }
}
