//! A model-based property test: one random sequence of broker
//! operations — send, raw push, claim, ack, reject, retry, lease expiry,
//! recover, revoke, dead-letter re-queue, clock step — applied to the
//! in-memory broker and to headway's Redis layout (a redis-server the test
//! starts) must leave the same observable state after every step: the same
//! claims in the same order with the same redelivered marks, the same queue
//! depths, holdings, dead letters and revokes. And at every step no message
//! is held by two consumers, which is stronger than "never leased to two
//! live consumers"; at the end every message is drained exactly once.
//!
//! Cases are few and short (`HEADWAY_MODEL_CASES`, default 64, up to 50
//! operations each) so the test runs in seconds; a failure prints the
//! shrunk sequence.

mod support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use headway_core::broker::memory::MemoryOptions;
use headway_core::broker::{MemoryBroker, RedisBroker, RedisOptions};
use headway_core::task::{Broker, Delivery, Inspector, Message, QueueInfo, Receipt, VirtualClock};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::Map;
use support::RedisServer;

const START: i64 = 1_767_225_600_000;
const QUEUES: [&str; 2] = ["q0", "q1"];
const CONSUMERS: [&str; 3] = ["c0", "c1", "c2"];
/// Small, so a raw push can go over it.
const CAP: usize = 512;
/// Two lost workers make a poison pill here (3 by default), so short cases
/// reach it.
const DELIVERIES: u32 = 2;

/// What the cases exercised, printed at the end, so a change that makes the
/// generator miss a path (no poison pill ever reached, say) shows.
static SEEN: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];
const CLAIMED: usize = 0;
const RECOVERED: usize = 1;
const POISONED: usize = 2;
const QUARANTINED: usize = 3;
const REQUEUED: usize = 4;

fn saw(what: usize, n: u64) {
    SEEN[what].fetch_add(n, Ordering::Relaxed);
}

#[derive(Debug, Clone)]
enum Op {
    Send {
        q: usize,
        low: bool,
        eta: Option<u16>,
    },
    Raw {
        q: usize,
        kind: u8,
    },
    Claim {
        c: usize,
        qs: usize,
        max: usize,
    },
    Ack {
        c: usize,
        pick: usize,
    },
    Reject {
        c: usize,
        pick: usize,
        requeue: bool,
    },
    Retry {
        c: usize,
        pick: usize,
        eta: Option<u16>,
    },
    Expire {
        c: usize,
    },
    Recover,
    Revoke {
        pick: usize,
    },
    Step {
        ms: u16,
    },
    Requeue {
        q: usize,
        limit: usize,
        by_id: bool,
    },
    /// A worker dies holding what it claimed: claim one, expire, recover.
    Crash {
        c: usize,
        q: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let eta = prop::option::weighted(0.3, 1u16..3000);
    prop_oneof![
        4 => (0..2usize, any::<bool>(), eta.clone()).prop_map(|(q, low, eta)| Op::Send { q, low, eta }),
        1 => (0..2usize, 0..4u8).prop_map(|(q, kind)| Op::Raw { q, kind }),
        5 => (0..3usize, 0..3usize, 1..4usize).prop_map(|(c, qs, max)| Op::Claim { c, qs, max }),
        3 => (0..3usize, any::<usize>()).prop_map(|(c, pick)| Op::Ack { c, pick }),
        2 => (0..3usize, any::<usize>(), any::<bool>())
            .prop_map(|(c, pick, requeue)| Op::Reject { c, pick, requeue }),
        1 => (0..3usize, any::<usize>(), eta).prop_map(|(c, pick, eta)| Op::Retry { c, pick, eta }),
        2 => (0..3usize).prop_map(|c| Op::Expire { c }),
        2 => Just(Op::Recover),
        1 => any::<usize>().prop_map(|pick| Op::Revoke { pick }),
        2 => (1..2500u16).prop_map(|ms| Op::Step { ms }),
        1 => (0..2usize, 1..4usize, any::<bool>())
            .prop_map(|(q, limit, by_id)| Op::Requeue { q, limit, by_id }),
        2 => (0..3usize, 0..2usize).prop_map(|(c, q)| Op::Crash { c, q }),
    ]
}

/// Both brokers' consumers, on one virtual clock.
struct Pair {
    clock: Arc<VirtualClock>,
    mem: Vec<Arc<MemoryBroker>>,
    red: Vec<Arc<RedisBroker>>,
    /// Every receipt ever handed out (live or stale), the memory one and the
    /// Redis one side by side, with the message it was for.
    receipts: Vec<(Message, Receipt, Receipt)>,
    sent: Vec<String>,
    n: usize,
}

type R<T> = Result<T, TestCaseError>;

fn fail(why: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(why.to_string())
}

fn claimed(ds: &[Delivery]) -> Vec<(String, bool)> {
    ds.iter()
        .map(|d| (d.message.id.clone(), d.redelivered))
        .collect()
}

/// Queue depths without the queues that hold nothing (a Redis queue is
/// known once claimed from; a memory one once published to).
fn depths(info: Vec<QueueInfo>) -> Vec<QueueInfo> {
    info.into_iter()
        .filter(|q| !q.ready.is_empty() || q.delayed > 0 || q.unacked > 0)
        .collect()
}

impl Pair {
    async fn new(server: &RedisServer, conn: &mut redis::aio::MultiplexedConnection) -> Pair {
        let _: () = redis::cmd("FLUSHALL").query_async(conn).await.unwrap();
        let clock = VirtualClock::new(START);
        let base = MemoryBroker::with_options(
            clock.clone(),
            MemoryOptions {
                max_message_bytes: CAP,
                max_deliveries: DELIVERIES,
            },
        );
        let mut mem = Vec::new();
        let mut red = Vec::new();
        // The consumers, then a sweeper that claims nothing and runs the
        // recovers: a consumer never recovers its own claims, so a sweeper
        // sees every lapsed one.
        for c in CONSUMERS.iter().chain(&["sweeper"]) {
            mem.push(base.handle(c));
            red.push(
                RedisBroker::connect(
                    &server.url(),
                    RedisOptions {
                        consumer: Some((*c).into()),
                        // Nothing lapses or refreshes by itself during a
                        // case: expiry is an operation.
                        lease: Duration::from_secs(120),
                        beat_lease: Duration::from_secs(120),
                        recover_every: None,
                        max_message_bytes: CAP,
                        max_deliveries: DELIVERIES,
                        ..RedisOptions::default()
                    },
                    clock.clone(),
                )
                .await
                .unwrap(),
            );
        }
        let p = Pair {
            clock,
            mem,
            red,
            receipts: Vec::new(),
            sent: Vec::new(),
            n: 0,
        };
        // Every consumer claims from every queue once, so each Redis broker
        // has registered its queues (its first claim also recovers them).
        for c in 0..CONSUMERS.len() {
            for q in QUEUES {
                let qs = vec![q.to_string()];
                assert!(
                    p.mem[c]
                        .consume(&qs, 1, Duration::ZERO)
                        .await
                        .unwrap()
                        .is_empty()
                );
                assert!(
                    p.red[c]
                        .consume(&qs, 1, Duration::ZERO)
                        .await
                        .unwrap()
                        .is_empty()
                );
            }
        }
        p
    }

    fn pick(&self, pick: usize) -> Option<(Message, Receipt, Receipt)> {
        if self.receipts.is_empty() {
            return None;
        }
        Some(self.receipts[pick % self.receipts.len()].clone())
    }

    async fn apply(&mut self, op: &Op, conn: &mut redis::aio::MultiplexedConnection) -> R<()> {
        match *op {
            Op::Send { q, low, eta } => {
                self.n += 1;
                let id = format!("m{}", self.n);
                let mut m =
                    Message::new(id.clone(), "t".into(), vec![], Map::new(), QUEUES[q].into());
                m.priority = low.then_some(5);
                m.eta = eta.map(|e| self.clock_now() + e as i64);
                self.sent.push(id);
                self.mem[0].publish(vec![m.clone()]).await.map_err(fail)?;
                self.red[0].publish(vec![m]).await.map_err(fail)?;
            }
            Op::Raw { q, kind } => {
                self.n += 1;
                let raw: Vec<u8> = match kind {
                    0 => b"\x00\x01 junk".to_vec(),
                    1 => format!(r#"{{"id":"r{}","queue":"{}"}}"#, self.n, QUEUES[q]).into_bytes(),
                    2 => {
                        let mut b = vec![b' '; CAP + 10];
                        b[0] = b'{';
                        b
                    }
                    // A good message, as another producer wrote it.
                    _ => {
                        self.sent.push(format!("r{}", self.n));
                        format!(
                            r#"{{"id":"r{}","task":"t","queue":"{}","args":[1]}}"#,
                            self.n, QUEUES[q]
                        )
                        .into_bytes()
                    }
                };
                self.mem[0].push_raw(QUEUES[q], &raw);
                self.red[0].push_raw(QUEUES[q], &raw).await.map_err(fail)?;
            }
            Op::Claim { c, qs, max } => {
                let names: Vec<String> = match qs {
                    0 => vec!["q0".into()],
                    1 => vec!["q1".into()],
                    _ => vec!["q1".into(), "q0".into()],
                };
                let a = self.mem[c]
                    .consume(&names, max, Duration::ZERO)
                    .await
                    .map_err(fail)?;
                let b = self.red[c]
                    .consume(&names, max, Duration::ZERO)
                    .await
                    .map_err(fail)?;
                prop_assert_eq!(claimed(&a), claimed(&b), "claims differ");
                saw(CLAIMED, a.len() as u64);
                for (x, y) in a.into_iter().zip(b) {
                    prop_assert_eq!(&x.message, &y.message);
                    self.receipts.push((x.message, x.receipt, y.receipt));
                }
            }
            Op::Ack { c, pick } => {
                if let Some((_, a, b)) = self.pick(pick) {
                    self.mem[c].ack(vec![a]).await.map_err(fail)?;
                    self.red[c].ack(vec![b]).await.map_err(fail)?;
                }
            }
            Op::Reject { c, pick, requeue } => {
                if let Some((_, a, b)) = self.pick(pick) {
                    self.mem[c].reject(a, requeue).await.map_err(fail)?;
                    self.red[c].reject(b, requeue).await.map_err(fail)?;
                }
            }
            Op::Retry { c, pick, eta } => {
                if let Some((m, a, b)) = self.pick(pick) {
                    let mut next = m.clone();
                    next.retries += 1;
                    next.eta = eta.map(|e| self.clock_now() + e as i64);
                    self.mem[c].retry(a, next.clone()).await.map_err(fail)?;
                    self.red[c].retry(b, next).await.map_err(fail)?;
                }
            }
            Op::Expire { c } => {
                self.mem[0].expire(CONSUMERS[c]);
                for q in QUEUES {
                    let key = format!("headway:{{{q}}}:lease:{}", CONSUMERS[c]);
                    let _: () = redis::cmd("DEL").arg(key).query_async(conn).await.unwrap();
                }
            }
            Op::Recover => {
                let s = CONSUMERS.len();
                let a = self.mem[s].recover().await.map_err(fail)?;
                let b = self.red[s].recover().await.map_err(fail)?;
                prop_assert_eq!(a, b, "recovered counts differ");
                saw(RECOVERED, a as u64);
            }
            Op::Revoke { pick } => {
                if !self.sent.is_empty() {
                    let id = self.sent[pick % self.sent.len()].clone();
                    // Well inside the Redis key's real-time expiry.
                    let until = self.clock_now() + 10_000;
                    self.mem[0]
                        .revoke(vec![id.clone()], until)
                        .await
                        .map_err(fail)?;
                    self.red[0].revoke(vec![id], until).await.map_err(fail)?;
                }
            }
            Op::Step { ms } => self.clock.advance(ms as i64),
            Op::Crash { c, q } => {
                Box::pin(self.apply(&Op::Claim { c, qs: q, max: 1 }, conn)).await?;
                Box::pin(self.apply(&Op::Expire { c }, conn)).await?;
                Box::pin(self.apply(&Op::Recover, conn)).await?;
            }
            Op::Requeue { q, limit, by_id } => {
                let ids: Vec<String> = if by_id {
                    let d = self.mem[0]
                        .dead_letters(QUEUES[q], 100)
                        .await
                        .map_err(fail)?;
                    d.iter().filter_map(|d| d.id.clone()).take(1).collect()
                } else {
                    Vec::new()
                };
                let a = self.mem[0]
                    .requeue_dead(QUEUES[q], &ids, limit)
                    .await
                    .map_err(fail)?;
                let b = self.red[0]
                    .requeue_dead(QUEUES[q], &ids, limit)
                    .await
                    .map_err(fail)?;
                prop_assert_eq!(a, b, "re-queued counts differ");
                saw(REQUEUED, a as u64);
            }
        }
        Ok(())
    }

    fn clock_now(&self) -> i64 {
        use headway_core::task::Clock;
        self.clock.now()
    }

    /// The observable state of both, compared; and no message held twice.
    async fn check(&self) -> R<()> {
        let qa = depths(self.mem[0].queues().await.map_err(fail)?);
        let qb = depths(self.red[0].queues().await.map_err(fail)?);
        prop_assert_eq!(qa, qb, "queue depths differ");
        for q in QUEUES {
            let da: Vec<_> = self.mem[0].dead_letters(q, 1000).await.map_err(fail)?;
            let db: Vec<_> = self.red[0].dead_letters(q, 1000).await.map_err(fail)?;
            prop_assert_eq!(da, db, "dead letters of {} differ", q);
            prop_assert_eq!(
                self.mem[0].dead_count(q).await.map_err(fail)?,
                self.red[0].dead_count(q).await.map_err(fail)?
            );
        }
        let holds = |cs: Vec<headway_core::task::ConsumerInfo>| -> BTreeMap<String, Vec<String>> {
            cs.into_iter()
                .filter(|c| !c.holding.is_empty())
                .map(|c| {
                    let mut h = c.holding;
                    h.sort();
                    (c.name, h)
                })
                .collect()
        };
        let ha = holds(self.mem[0].consumers().await.map_err(fail)?);
        let hb = holds(self.red[0].consumers().await.map_err(fail)?);
        prop_assert_eq!(&ha, &hb, "holdings differ");
        let mut seen = HashSet::new();
        for ids in ha.values() {
            for id in ids {
                prop_assert!(
                    seen.insert(id.clone()),
                    "{} is held by two consumers: {:?}",
                    id,
                    ha
                );
            }
        }
        let ra = self.mem[0].revoked(&self.sent).await.map_err(fail)?;
        let rb = self.red[0].revoked(&self.sent).await.map_err(fail)?;
        prop_assert_eq!(ra, rb, "revokes differ");
        Ok(())
    }

    /// Everyone is lost, everything recovered and due: a fresh claim drains
    /// the same messages from both, each once.
    async fn drain(&mut self, conn: &mut redis::aio::MultiplexedConnection) -> R<()> {
        for c in 0..CONSUMERS.len() {
            self.apply(&Op::Expire { c }, conn).await?;
        }
        self.apply(&Op::Recover, conn).await?;
        self.clock.advance(1_000_000);
        let all: Vec<String> = QUEUES.iter().map(|q| q.to_string()).collect();
        let mut drained: HashMap<String, u32> = HashMap::new();
        // A claim can come back empty-handed when all it took was
        // quarantined: done after two empty ones in a row.
        let mut empty = 0;
        while empty < 2 {
            let a = self.mem[0]
                .consume(&all, 50, Duration::ZERO)
                .await
                .map_err(fail)?;
            let b = self.red[0]
                .consume(&all, 50, Duration::ZERO)
                .await
                .map_err(fail)?;
            prop_assert_eq!(claimed(&a), claimed(&b), "drains differ");
            if a.is_empty() {
                empty += 1;
                continue;
            }
            empty = 0;
            for d in &a {
                *drained.entry(d.message.id.clone()).or_default() += 1;
            }
            self.mem[0]
                .ack(a.into_iter().map(|d| d.receipt).collect())
                .await
                .map_err(fail)?;
            self.red[0]
                .ack(b.into_iter().map(|d| d.receipt).collect())
                .await
                .map_err(fail)?;
        }
        for (id, n) in &drained {
            prop_assert_eq!(*n, 1, "{} drained {} times", id, n);
        }
        self.check().await?;
        let qa = depths(self.mem[0].queues().await.map_err(fail)?);
        prop_assert!(qa.is_empty(), "left over: {:?}", qa);
        Ok(())
    }
}

#[test]
fn memory_and_redis_agree_on_every_step() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cases = std::env::var("HEADWAY_MODEL_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(64);
    let mut runner = TestRunner::new(Config {
        cases,
        max_shrink_iters: 200,
        failure_persistence: None,
        ..Config::default()
    });
    let client = redis::Client::open(server.url()).unwrap();
    let started = std::time::Instant::now();
    let result = runner.run(&prop::collection::vec(op(), 1..50), |ops| {
        rt.block_on(async {
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let mut p = Pair::new(&server, &mut conn).await;
            for (i, op) in ops.iter().enumerate() {
                p.apply(op, &mut conn)
                    .await
                    .map_err(|e| fail(format!("step {i} {op:?}: {e}")))?;
                p.check()
                    .await
                    .map_err(|e| fail(format!("after step {i} {op:?}: {e}")))?;
            }
            for q in QUEUES {
                for d in p.mem[0].dead_letters(q, 1000).await.unwrap() {
                    saw(
                        if d.reason.starts_with("worker lost") {
                            POISONED
                        } else {
                            QUARANTINED
                        },
                        1,
                    );
                }
            }
            p.drain(&mut conn).await
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let n = |i: usize| SEEN[i].load(Ordering::Relaxed);
    eprintln!(
        "{cases} cases in {:?}: claimed {}, recovered {}, poison pills {}, quarantined {}, re-queued from the dead {}",
        started.elapsed(),
        n(CLAIMED),
        n(RECOVERED),
        n(POISONED),
        n(QUARANTINED),
        n(REQUEUED)
    );
    assert!(
        n(CLAIMED) > 0 && n(RECOVERED) > 0 && n(QUARANTINED) > 0,
        "the cases exercised too little"
    );
}
