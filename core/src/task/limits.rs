//! Task limits shared by every worker on one broker: a task's global rate
//! (`rate_scope="global"`), its runs per concurrency key
//! (`concurrency_limit` with a send's `concurrency_key`), and a send's
//! deduplication (`dedupe_key`, `dedupe_ttl`).
//!
//! What a broker keeps is the [`TaskLimits`] seam: on Redis (both layouts)
//! the shared limits' scripts (`crate::limit::tasks`), so the rules are
//! [`crate::flow::Bucket`]'s and the gate's leases; on the memory broker
//! the same rules in the process ([`Local`]), which is every worker that
//! can reach it. A broker that keeps none (RabbitMQ) answers `None` from
//! [`super::spec::Broker::task_limits`], and what needs them is refused
//! naming the option ([`unsupported`]).
//!
//! The keys name the broker's namespace (the own layout's prefix, Celery's
//! `global_keyprefix`), then the queue and the task for a rate, the task
//! and the key for a concurrency key or a dedupe key: two apps on one Redis
//! under different prefixes do not share, and a key is the task's own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::clock::{BoxFuture, Clock};
use super::state::Refused;
use crate::flow::{self, MILLI, Nanos};
pub use crate::limit::GateOp;

/// What a broker keeps for [`TaskLimits`]; keys are [`rate_key`]'s,
/// [`key_key`]'s and [`dedupe_key`]'s.
pub trait TaskLimits: Send + Sync + 'static {
    /// Takes one token of the bucket `key` holding `rate` tokens a second
    /// (the bucket's default burst): `None` when taken, else how long
    /// until one is there.
    fn take_rate<'a>(
        &'a self,
        key: &'a str,
        rate: f64,
    ) -> BoxFuture<'a, Result<Option<Nanos>, Refused>>;

    /// The gate `key` of `limit` permits with leases of
    /// [`TaskLimits::lease`]: `op` on `permit`, answering whether it did.
    fn gate<'a>(
        &'a self,
        key: &'a str,
        limit: u32,
        op: GateOp,
        permit: &'a str,
    ) -> BoxFuture<'a, Result<bool, Refused>>;

    /// Claims `key` for run `id` for `ttl` ms: `None` when claimed, else the
    /// id of the run that holds it.
    fn dedupe<'a>(
        &'a self,
        key: &'a str,
        id: &'a str,
        ttl: i64,
    ) -> BoxFuture<'a, Result<Option<String>, Refused>>;

    /// Lets go of `key` if run `id` holds it (its send failed).
    fn undedupe<'a>(&'a self, key: &'a str, id: &'a str) -> BoxFuture<'a, Result<(), Refused>>;

    /// How long a concurrency key's permit is held unless renewed: the
    /// broker's consumer lease, so a killed worker's permits come back
    /// when its claims do.
    fn lease(&self) -> Nanos;

    /// The namespace its keys start with.
    fn namespace(&self) -> &str;
}

/// The bucket of `task`'s global rate on `queue`.
pub fn rate_key(ns: &str, queue: &str, task: &str) -> String {
    format!("task:{ns}:rate:{queue}:{task}")
}

/// The gate of `task`'s runs of concurrency key `key`.
pub fn key_key(ns: &str, task: &str, key: &str) -> String {
    format!("task:{ns}:key:{task}:{key}")
}

/// The claim of `task`'s dedupe key `key`.
pub fn dedupe_key(ns: &str, task: &str, key: &str) -> String {
    format!("task:{ns}:dedupe:{task}:{key}")
}

/// What a send or a worker needs and a broker cannot keep, refused naming
/// the option as `host` spells it.
pub fn unsupported(host: super::specs::Host, option: &'static str) -> Refused {
    Refused::Invalid(format!(
        "invalid `{}`: this broker cannot share it between workers (Redis and memory brokers can)",
        host.spell(option)
    ))
}

/// How long a run whose concurrency key is at its limit is put off before
/// it is tried again (ms), its `deferred`-th time: 50 ms doubling to 1 s,
/// spread over its upper half by `u` in [0, 1) so waiting runs do not come
/// back together.
pub fn defer_delay(deferred: u32, u: f64) -> i64 {
    let ceiling = (50i64 << deferred.min(5)).min(1000);
    ceiling / 2 + (ceiling as f64 / 2.0 * u) as i64
}

/// How often a held permit is renewed: a third of its lease, as the own
/// layout renews a consumer's lease.
pub fn renew_every(lease: Nanos) -> Nanos {
    (lease / 3).max(MILLI)
}

/// [`TaskLimits`] in one process, for the memory broker: the same rules
/// (a [`flow::Bucket`] per rate, leases per key, expiring claims) on the
/// broker's clock.
pub struct Local {
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    buckets: HashMap<String, flow::Bucket>,
    /// Per key, each permit's lease end (ms).
    gates: HashMap<String, HashMap<String, i64>>,
    /// Per key, the run holding it and until when (ms).
    claims: HashMap<String, (String, i64)>,
}

/// A memory broker's permits are held this long unless renewed: it has no
/// consumer lease, and its workers die with it.
pub const LOCAL_LEASE: Nanos = crate::limit::LEASE;

impl Local {
    /// Limits on `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Arc<Local> {
        Arc::new(Local {
            clock,
            state: Mutex::new(State::default()),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl TaskLimits for Local {
    fn take_rate<'a>(
        &'a self,
        key: &'a str,
        rate: f64,
    ) -> BoxFuture<'a, Result<Option<Nanos>, Refused>> {
        let now = self.clock.now().saturating_mul(MILLI);
        let r = (|| {
            let mut st = self.state();
            let b = match st.buckets.get_mut(key) {
                Some(b) if b.rate() == rate => b,
                _ => {
                    let b = flow::Bucket::new(rate, None, now)
                        .map_err(|e| Refused::Invalid(e.to_string()))?;
                    st.buckets.insert(key.to_string(), b);
                    st.buckets.get_mut(key).expect("just inserted")
                }
            };
            if b.take(now, 1.0) {
                Ok(None)
            } else {
                Ok(Some(b.next(now, 1.0)))
            }
        })();
        Box::pin(async move { r })
    }

    fn gate<'a>(
        &'a self,
        key: &'a str,
        limit: u32,
        op: GateOp,
        permit: &'a str,
    ) -> BoxFuture<'a, Result<bool, Refused>> {
        let now = self.clock.now();
        let until = now.saturating_add(LOCAL_LEASE / MILLI);
        let ok = {
            let mut st = self.state();
            let held = st.gates.entry(key.to_string()).or_default();
            held.retain(|_, end| *end > now);
            let ok = match op {
                GateOp::Take => {
                    let room = held.len() < limit as usize;
                    if room {
                        held.insert(permit.to_string(), until);
                    }
                    room
                }
                GateOp::Release => held.remove(permit).is_some(),
                GateOp::Renew => match held.get_mut(permit) {
                    Some(end) => {
                        *end = until;
                        true
                    }
                    None => false,
                },
                GateOp::Held => false,
            };
            if held.is_empty() {
                st.gates.remove(key);
            }
            ok
        };
        Box::pin(async move { Ok(ok) })
    }

    fn dedupe<'a>(
        &'a self,
        key: &'a str,
        id: &'a str,
        ttl: i64,
    ) -> BoxFuture<'a, Result<Option<String>, Refused>> {
        let now = self.clock.now();
        let held = {
            let mut st = self.state();
            st.claims.retain(|_, (_, until)| *until > now);
            match st.claims.get(key) {
                Some((first, _)) => Some(first.clone()),
                None => {
                    st.claims
                        .insert(key.to_string(), (id.to_string(), now.saturating_add(ttl)));
                    None
                }
            }
        };
        Box::pin(async move { Ok(held) })
    }

    fn undedupe<'a>(&'a self, key: &'a str, id: &'a str) -> BoxFuture<'a, Result<(), Refused>> {
        let mut st = self.state();
        if st.claims.get(key).is_some_and(|(held, _)| held == id) {
            st.claims.remove(key);
        }
        crate::task::clock::done()
    }

    fn lease(&self) -> Nanos {
        LOCAL_LEASE
    }

    fn namespace(&self) -> &str {
        "memory"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::clock::VirtualClock;

    fn block<T>(f: BoxFuture<'_, T>) -> T {
        futures_util::FutureExt::now_or_never(f).expect("local limits answer at once")
    }

    #[test]
    fn defer_grows_to_a_second_and_is_spread() {
        assert_eq!(defer_delay(0, 0.0), 25);
        assert_eq!(defer_delay(0, 0.999), 49);
        assert_eq!(defer_delay(1, 0.0), 50);
        assert_eq!(defer_delay(4, 0.0), 400);
        assert_eq!(defer_delay(5, 0.0), 500);
        assert_eq!(defer_delay(40, 0.999), 999);
        assert_eq!(renew_every(30 * flow::SECOND), 10 * flow::SECOND);
        assert_eq!(renew_every(1), MILLI);
    }

    #[test]
    fn keys_name_namespace_queue_task_and_key() {
        assert_eq!(rate_key("headway", "q", "t"), "task:headway:rate:q:t");
        assert_eq!(key_key("headway", "t", "c"), "task:headway:key:t:c");
        assert_eq!(dedupe_key("celery", "t", "k"), "task:celery:dedupe:t:k");
        assert_ne!(rate_key("a", "q", "t"), rate_key("b", "q", "t"));
        let e = unsupported(crate::task::specs::Host::Node, "dedupe_key");
        assert!(e.to_string().contains("`dedupeKey`"), "{e}");
    }

    #[test]
    fn local_rate_is_a_bucket_on_the_clock() {
        let clock = VirtualClock::new(1_000_000);
        let l = Local::new(clock.clone());
        // 2 a second: a burst of 2 (one second's worth), then one per 500 ms.
        assert_eq!(block(l.take_rate("k", 2.0)).unwrap(), None);
        assert_eq!(block(l.take_rate("k", 2.0)).unwrap(), None);
        let wait = block(l.take_rate("k", 2.0)).unwrap().unwrap();
        assert_eq!(wait, 500 * MILLI);
        // Another key is its own bucket (the positive control).
        assert_eq!(block(l.take_rate("other", 2.0)).unwrap(), None);
        clock.advance(500);
        assert_eq!(block(l.take_rate("k", 2.0)).unwrap(), None);
    }

    #[test]
    fn local_gate_holds_limit_and_leases_lapse() {
        let clock = VirtualClock::new(1_000_000);
        let l = Local::new(clock.clone());
        assert!(block(l.gate("k", 1, GateOp::Take, "a")).unwrap());
        assert!(!block(l.gate("k", 1, GateOp::Take, "b")).unwrap());
        assert!(block(l.gate("other", 1, GateOp::Take, "b")).unwrap());
        assert!(block(l.gate("k", 1, GateOp::Release, "a")).unwrap());
        assert!(!block(l.gate("k", 1, GateOp::Release, "a")).unwrap());
        assert!(block(l.gate("k", 1, GateOp::Take, "b")).unwrap());
        // A holder that never releases: its lease lapses.
        clock.advance(LOCAL_LEASE / MILLI - 1);
        assert!(block(l.gate("k", 1, GateOp::Renew, "b")).unwrap());
        clock.advance(LOCAL_LEASE / MILLI - 1);
        assert!(!block(l.gate("k", 1, GateOp::Take, "c")).unwrap());
        clock.advance(2);
        assert!(block(l.gate("k", 1, GateOp::Take, "c")).unwrap());
    }

    #[test]
    fn local_dedupe_answers_the_first_until_the_ttl() {
        let clock = VirtualClock::new(1_000_000);
        let l = Local::new(clock.clone());
        assert_eq!(block(l.dedupe("k", "one", 1000)).unwrap(), None);
        assert_eq!(
            block(l.dedupe("k", "two", 1000)).unwrap().as_deref(),
            Some("one")
        );
        assert_eq!(block(l.dedupe("j", "three", 1000)).unwrap(), None);
        clock.advance(1000);
        assert_eq!(block(l.dedupe("k", "four", 1000)).unwrap(), None);
        block(l.undedupe("k", "other")).unwrap();
        assert_eq!(
            block(l.dedupe("k", "five", 1000)).unwrap().as_deref(),
            Some("four")
        );
        block(l.undedupe("k", "four")).unwrap();
        assert_eq!(block(l.dedupe("k", "six", 1000)).unwrap(), None);
    }
}
