//! State-machine property tests for the flow primitives: random operation
//! sequences against a model, with the invariants checked after every step.

use std::collections::HashSet;

use headway_core::flow::{
    Backoff, Breaker, Bucket, Gate, Limits, Pool, SECOND, Taken, Ward, Window,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Take { dt: i64, roll: f64 },
    Made,
    Unmade { roll: f64 },
    Give { pick: usize, dt: i64 },
    Drop { pick: usize },
    Evict { dt: i64 },
    Close,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0i64..2 * SECOND, 0.0f64..1.0).prop_map(|(dt, roll)| Op::Take { dt, roll }),
        3 => Just(Op::Made),
        1 => (0.0f64..1.0).prop_map(|roll| Op::Unmade { roll }),
        3 => (any::<usize>(), 0i64..SECOND).prop_map(|(pick, dt)| Op::Give { pick, dt }),
        1 => any::<usize>().prop_map(|pick| Op::Drop { pick }),
        1 => (0i64..3 * SECOND).prop_map(|dt| Op::Evict { dt }),
        1 => Just(Op::Close),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn pool_accounts_for_every_item(
        size in 0i64..5, idle in 0i64..5, keep in 0i64..3, life in 0i64..5,
        warded in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let limits = Limits::new(size, idle, keep * SECOND, life * SECOND).unwrap();
        let ward = warded.then(|| Ward::new(Some(Breaker::default()), Some(Backoff::default())));
        let mut pool: Pool<u32> = Pool::new(limits, ward);
        let mut now = 0i64;
        let mut next_item = 0u32;
        let mut reserved = 0i64;
        let mut lent: Vec<u32> = vec![];
        let mut idle_m: Vec<u32> = vec![];
        let mut gone: HashSet<u32> = HashSet::new();
        let mut made: HashSet<u32> = HashSet::new();
        let hand_back = |x: u32, gone: &mut HashSet<u32>| {
            prop_assert!(gone.insert(x), "item {} handed back twice", x);
            Ok(())
        };
        for op in ops {
            match op {
                Op::Take { dt, roll } => {
                    now += dt;
                    match pool.take(now, roll) {
                        Taken::Ready(x) => {
                            let i = idle_m.iter().position(|&y| y == x);
                            prop_assert!(i.is_some(), "ready {} was not idle", x);
                            idle_m.remove(i.unwrap());
                            lent.push(x);
                        }
                        Taken::Stale(x) => {
                            let i = idle_m.iter().position(|&y| y == x);
                            prop_assert!(i.is_some(), "stale {} was not idle", x);
                            idle_m.remove(i.unwrap());
                            hand_back(x, &mut gone)?;
                        }
                        Taken::Make => reserved += 1,
                        Taken::Wait => prop_assert!(size > 0 && pool.live() >= size),
                        Taken::Later(d) => prop_assert!(warded && d > 0),
                        Taken::Shed => prop_assert!(warded),
                    }
                }
                Op::Made => {
                    if reserved > 0 {
                        reserved -= 1;
                        let x = next_item;
                        next_item += 1;
                        made.insert(x);
                        pool.made(x, now);
                        lent.push(x);
                    }
                }
                Op::Unmade { roll } => {
                    if reserved > 0 {
                        reserved -= 1;
                        pool.unmade(now, roll);
                    }
                }
                Op::Give { pick, dt } => {
                    if !lent.is_empty() {
                        now += dt;
                        let x = lent.remove(pick % lent.len());
                        if pool.give(x, now) { idle_m.push(x) } else { hand_back(x, &mut gone)? }
                    }
                }
                Op::Drop { pick } => {
                    if !lent.is_empty() {
                        let x = lent.remove(pick % lent.len());
                        pool.drop(&x);
                        hand_back(x, &mut gone)?;
                    }
                }
                Op::Evict { dt } => {
                    now += dt;
                    for x in pool.evict(now) {
                        let i = idle_m.iter().position(|&y| y == x);
                        prop_assert!(i.is_some(), "evicted {} was not idle", x);
                        idle_m.remove(i.unwrap());
                        hand_back(x, &mut gone)?;
                    }
                }
                Op::Close => {
                    let mut closed = pool.close();
                    closed.sort();
                    let mut expect = std::mem::take(&mut idle_m);
                    expect.sort();
                    prop_assert_eq!(&closed, &expect);
                    for x in closed { hand_back(x, &mut gone)?; }
                }
            }
            prop_assert_eq!(pool.idle(), idle_m.len() as i64);
            prop_assert_eq!(pool.busy(), lent.len() as i64 + reserved);
            prop_assert_eq!(pool.live(), pool.idle() + pool.busy());
            if size > 0 { prop_assert!(pool.live() <= size, "live {} above size {}", pool.live(), size); }
            if idle > 0 { prop_assert!(pool.idle() <= idle); }
        }
        let mut all: Vec<u32> = idle_m.iter().chain(lent.iter()).copied().chain(gone.iter().copied()).collect();
        all.sort();
        let mut m: Vec<u32> = made.into_iter().collect();
        m.sort();
        prop_assert_eq!(all, m, "every item made is idle, lent or handed back exactly once");
    }

    #[test]
    fn bucket_never_exceeds_rate_plus_burst(
        rate in 0.1f64..50.0, burst in 1.0f64..20.0,
        steps in proptest::collection::vec((0i64..SECOND / 4, 0.5f64..3.0), 1..200),
    ) {
        let mut b = Bucket::new(rate, Some(burst), 0).unwrap();
        let mut now = 0;
        let mut taken = 0.0;
        for (dt, n) in steps {
            now += dt;
            let before = b.tokens(now);
            prop_assert!(before <= burst + 1e-9 && before >= -1e-9);
            let wait = b.next(now, n);
            let ok = b.take(now, n);
            prop_assert_eq!(ok, wait == 0, "take agrees with next");
            if ok { taken += n; }
            // Over [0, now] at most burst + rate·now can pass.
            prop_assert!(taken <= burst + rate * now as f64 / 1e9 + 1e-6);
        }
    }

    #[test]
    fn window_is_exact(
        allow in 0i64..8, window in 1i64..5,
        steps in proptest::collection::vec(0i64..SECOND, 1..200),
    ) {
        let span = window * SECOND;
        let mut w = Window::new(allow, span).unwrap();
        let mut now = 0;
        let mut accepted: Vec<i64> = vec![];
        for dt in steps {
            now += dt;
            let inside = accepted.iter().filter(|&&s| s > now - span).count() as i64;
            prop_assert_eq!(w.left(now), allow - inside);
            let ok = w.take(now);
            prop_assert_eq!(ok, inside < allow);
            if ok { accepted.push(now); }
            else {
                let wait = w.next(now);
                prop_assert!(wait > 0);
                // After waiting, there is room.
                prop_assert!(allow == 0 || w.left(now + wait) >= 1);
            }
        }
    }

    #[test]
    fn gate_counts(limit in 0i64..6, ops in proptest::collection::vec(any::<bool>(), 1..100)) {
        let mut g = Gate::new(limit).unwrap();
        let mut held = 0i64;
        for enter in ops {
            if enter {
                let ok = g.enter();
                prop_assert_eq!(ok, held < limit);
                if ok { held += 1; }
            } else {
                g.leave();
                held = (held - 1).max(0);
            }
            prop_assert_eq!(g.held(), held);
            prop_assert!(g.held() <= limit);
        }
    }
}
