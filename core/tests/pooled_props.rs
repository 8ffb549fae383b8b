//! Property tests of the drivers' machines: `Acquires` (the acquire loop
//! around a `Pool`) and `Attempts` (the retry loop), over random sequences.
//!
//! A model driver acts on every answer at once — opens, closes, parks — and
//! runs each woken ticket until it parks again or is over. After every step:
//! nobody waits while the pool has room, parked tickets are served in the
//! order they parked, and every item is accounted for.

use std::collections::{HashSet, VecDeque};

use headway_core::flow::{
    Acquires, Attempts, Backoff, Failed, Jitter, Limits, Next, Pool, SECOND, Step, Ticket,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// A new acquire.
    Acquire,
    /// A held item comes back (`broken`: dropped).
    Give { pick: usize, broken: bool },
    /// A parked acquire leaves (cancelled).
    Leave { pick: usize },
    /// A held item's open fails instead (only when one is opening).
    FailOpen,
    /// Time passes (deadlines).
    Tick { dt: i64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Acquire),
        4 => (any::<usize>(), prop::bool::weighted(0.2))
            .prop_map(|(pick, broken)| Op::Give { pick, broken }),
        1 => any::<usize>().prop_map(|pick| Op::Leave { pick }),
        1 => Just(Op::FailOpen),
        1 => (0i64..SECOND).prop_map(|dt| Op::Tick { dt }),
    ]
}

struct Model {
    pool: Pool<u32>,
    acq: Acquires,
    now: i64,
    next_item: u32,
    held: Vec<u32>,
    /// Tickets in the order they first parked, not yet over.
    parked_order: VecDeque<Ticket>,
    /// Tickets told to open and not yet answered.
    opening: Vec<Ticket>,
    served: Vec<Ticket>,
}

impl Model {
    /// Runs `t` until it parks, opens, or is over.
    fn run(&mut self, t: Ticket) {
        loop {
            match self.acq.step(&mut self.pool, t, self.now, 0.5) {
                Step::Hand(item) => {
                    self.held.push(item);
                    self.over(t, true);
                    return;
                }
                Step::Open => {
                    self.opening.push(t);
                    return;
                }
                Step::Close(_) => {}
                Step::Sleep(_) => panic!("no ward, no sleep"),
                Step::Park(u, _) => {
                    assert_eq!(u, t);
                    if !self.parked_order.contains(&t) {
                        self.parked_order.push_back(t);
                    }
                    return;
                }
                Step::Fail(f) => {
                    assert!(matches!(f, Failed::Full { .. }), "{f:?}");
                    self.over(t, false);
                    return;
                }
            }
        }
    }

    fn over(&mut self, t: Ticket, served: bool) {
        if let Some(i) = self.parked_order.iter().position(|&u| u == t) {
            if served {
                // First parked, first served: nobody parked earlier is still
                // waiting when a later one is served.
                assert_eq!(i, 0, "ticket {t} served before {:?}", self.parked_order);
                self.served.push(t);
            }
            self.parked_order.remove(i);
        }
    }

    fn drain(&mut self) {
        loop {
            let woken = self.acq.wakes();
            if woken.is_empty() {
                break;
            }
            for t in woken {
                self.run(t);
            }
        }
        // Open everything asked for (FailOpen fails one before this).
        while let Some(t) = self.opening.pop() {
            let item = self.next_item;
            self.next_item += 1;
            assert!(self.acq.opened(&mut self.pool, t, item, self.now));
            self.held.push(item);
            self.over(t, true);
            let woken = self.acq.wakes();
            for t in woken {
                self.run(t);
            }
        }
    }

    fn check(&self) {
        assert_eq!(self.pool.live(), self.pool.idle() + self.held.len() as i64);
        assert_eq!(self.pool.busy(), self.held.len() as i64);
        assert_eq!(self.acq.parked(), self.parked_order.len());
        if self.acq.parked() > 0 {
            assert_eq!(
                self.pool.room(),
                0,
                "a waiter parked while the pool has room"
            );
        }
        let unique: HashSet<_> = self.held.iter().collect();
        assert_eq!(unique.len(), self.held.len());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn acquires_serve_in_order_and_strand_nobody(
        size in 1i64..4, idle in 0i64..4, timeout in prop::option::of(0i64..3 * SECOND),
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let mut m = Model {
            pool: Pool::new(Limits::new(size, idle, 0, 0).unwrap(), None),
            acq: Acquires::new(timeout).unwrap(),
            now: 0,
            next_item: 0,
            held: vec![],
            parked_order: VecDeque::new(),
            opening: vec![],
            served: vec![],
        };
        for op in ops {
            match op {
                Op::Acquire => {
                    let t = m.acq.begin(m.now);
                    m.run(t);
                }
                Op::Give { pick, broken } => {
                    if !m.held.is_empty() {
                        let item = m.held.swap_remove(pick % m.held.len());
                        m.acq.give(&mut m.pool, item, m.now, broken);
                    }
                }
                Op::Leave { pick } => {
                    if !m.parked_order.is_empty() {
                        let t = m.parked_order[pick % m.parked_order.len()];
                        m.acq.end(&mut m.pool, t);
                        m.over(t, false);
                    }
                }
                Op::FailOpen => {
                    if let Some(t) = m.opening.pop() {
                        m.acq.unopened(&mut m.pool, t, m.now, 0.5);
                    }
                }
                Op::Tick { dt } => {
                    m.now += dt;
                    // Every parked ticket past its deadline fails when its
                    // timer fires; the driver steps it.
                    let late: Vec<_> = m.parked_order.iter().copied().collect();
                    for t in late {
                        m.run(t);
                    }
                }
            }
            m.drain();
            m.check();
        }
        // Everything comes back: nobody is left parked.
        while let Some(item) = m.held.pop() {
            m.acq.give(&mut m.pool, item, m.now, false);
            m.drain();
            m.check();
        }
        prop_assert_eq!(m.acq.parked(), 0);
        prop_assert_eq!(m.acq.active(), 0);
    }

    #[test]
    fn attempts_follow_the_backoff(
        attempts in 1i32..6,
        draws in prop::collection::vec(0.0f64..1.0, 6),
        fails_at in prop::option::of(0usize..6),
    ) {
        let b = Backoff::new(SECOND / 10, 2.0, SECOND, attempts, Jitter::Decorrelated).unwrap();
        let want = b.schedule(&draws);
        let mut a = Attempts::new(b, 0);
        let mut slept = vec![];
        for (i, &u) in draws.iter().enumerate() {
            let retryable = fails_at != Some(i);
            match a.failed(retryable, false, u) {
                Next::Sleep(d) => slept.push(d),
                Next::Retry => slept.push(0),
                Next::Fail => break,
            }
        }
        let n = match fails_at {
            Some(i) => i.min(want.len()),
            None => want.len(),
        };
        prop_assert_eq!(&slept[..], &want[..n]);
        prop_assert!(a.made() as usize <= draws.len());
    }
}
