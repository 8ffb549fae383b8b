//! The bookkeeping of holding a limited number of things.
//!
//! A pool does not open, close or wait — a caller with a runtime does all
//! three. What it knows is how many are live, which are idle, which are lent
//! and since when each was made, and which have sat or lived long enough to be
//! let go. It answers a take with one of six [`Taken`]s and the caller acts.
//!
//! Three rules carry the design, two of them bugs in moonpool 0.1.0:
//! - **Newest first.** The most recently returned item is handed out first: a
//!   warm connection is likelier to still be good, and letting the oldest age
//!   past `keep` is how a pool shrinks after a burst. A queue would keep every
//!   connection just warm enough never to be collected.
//! - **Stale is handed back, never skipped.** An idle item past its age comes
//!   back as [`Taken::Stale`], out of the count, for the caller to close — a
//!   pool that dropped it silently would leak whatever it holds whenever the
//!   eviction timer had not run first.
//! - **Birth survives the loan.** A lent item is recognised by identity on its
//!   way back (`PartialEq`; the bindings use Python `is` and JS `===`), so
//!   `give` keeps the birth it was lent with and `life` retires an item that
//!   has been reused all along. An item never registered by `made` fills the
//!   room `take` reserved and is born when it comes back.

use super::error::{Invalid, span};
use super::ward::Verdict;
use super::{Nanos, SECOND, Ward};

/// How long a driver's take waits through `Wait` and `Later` answers before
/// telling its caller there is nothing: 30 s, HikariCP's `connectionTimeout`.
/// The Python and Node drivers read it from here so the two agree.
pub const TAKE_TIMEOUT: Nanos = 30 * SECOND;

/// The fastest a driver's evict timer runs: once a second, the floor Go
/// database/sql's connection cleaner keeps. Sweeping more often finds nothing
/// new: ages are checked against `keep` and `life`, both usually minutes.
pub const MIN_EVICT_EVERY: Nanos = SECOND;

/// The limits a pool holds itself to.
///
/// The preset (`Limits::default()`): ten live, ten idle, thirty minutes idle
/// before retiring, no maximum age. Ten is HikariCP's and Go database/sql's
/// default pool size; thirty minutes is database/sql's `SetConnMaxIdleTime` as
/// most deployments set it; idle equal to size is database/sql's behaviour, so
/// a pool that grew under load does not throw its connections away at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    size: i64,
    idle: i64,
    keep: Nanos,
    life: Nanos,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            size: 10,
            idle: 10,
            keep: 30 * 60 * SECOND,
            life: 0,
        }
    }
}

impl Limits {
    /// Limits by their four knobs.
    ///
    /// `size`: most live at once, counting those being made (0: no limit).
    /// `idle`: most sitting unused (0: no limit). `keep`: idle age at which an
    /// item retires (0: never). `life`: total age at which it retires (0:
    /// never). Refused: any of them negative.
    pub fn new(size: i64, idle: i64, keep: Nanos, life: Nanos) -> Result<Limits, Invalid> {
        if size < 0 {
            return Err(Invalid::new(
                "size",
                "must not be negative (0 means no limit)",
            ));
        }
        if idle < 0 {
            return Err(Invalid::new(
                "idle",
                "must not be negative (0 means no limit)",
            ));
        }
        span("keep", keep)?;
        span("life", life)?;
        Ok(Limits {
            size,
            idle,
            keep,
            life,
        })
    }

    /// [`Limits::new`] with each knob not given at [`Limits::default`]'s
    /// value: what `Limits()` with some options means in either binding.
    pub fn given(
        size: Option<i64>,
        idle: Option<i64>,
        keep: Option<Nanos>,
        life: Option<Nanos>,
    ) -> Result<Limits, Invalid> {
        let d = Limits::default();
        Limits::new(
            size.unwrap_or(d.size),
            idle.unwrap_or(d.idle),
            keep.unwrap_or(d.keep),
            life.unwrap_or(d.life),
        )
    }

    /// Most live at once (0: no limit).
    pub fn size(&self) -> i64 {
        self.size
    }
    /// Most idle at once (0: no limit).
    pub fn idle(&self) -> i64 {
        self.idle
    }
    /// Idle age at which an item retires (0: never).
    pub fn keep(&self) -> Nanos {
        self.keep
    }
    /// Total age at which an item retires (0: never).
    pub fn life(&self) -> Nanos {
        self.life
    }
    /// How often a driver should call [`Pool::evict`]: the shorter of `keep`
    /// and `life`, at least [`MIN_EVICT_EVERY`]; 0 (no timer) when neither
    /// retires anything. Why the shorter: an item is at most one period past
    /// its age when it goes, so the period is the error bound on both.
    pub fn evict_every(&self) -> Nanos {
        match (self.keep, self.life) {
            (0, 0) => 0,
            (0, a) | (a, 0) => a.max(MIN_EVICT_EVERY),
            (k, l) => k.min(l).max(MIN_EVICT_EVERY),
        }
    }

    /// Whether an item born at `birth`, idle since `since`, is past its age.
    #[inline]
    fn stale(&self, birth: Nanos, since: Nanos, now: Nanos) -> bool {
        (self.keep > 0 && now.saturating_sub(since) > self.keep) || self.expired(birth, now)
    }

    #[inline]
    fn expired(&self, birth: Nanos, now: Nanos) -> bool {
        self.life > 0 && now.saturating_sub(birth) > self.life
    }
}

/// What a pool answers when asked for an item.
///
/// It never blocks and never opens anything: waiting and connecting need a
/// runtime, and the pool has none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken<T> {
    /// An idle item, now lent.
    Ready(T),
    /// An idle item too old to use, already out of the pool and the count: close
    /// it and take again.
    Stale(T),
    /// There is room for another, and it is reserved: make one, then call
    /// [`Pool::made`] (or [`Pool::unmade`] if making failed).
    Make,
    /// The pool is at `size`; the caller's queue decides what that means.
    Wait,
    /// The ward holds makes after a failure: try again after this span.
    Later(Nanos),
    /// The ward's breaker refused this make: fail fast.
    Shed,
}

impl<T> Taken<T> {
    /// The answer's lowercase name (`"ready"`, `"make"`, ...), as Node spells
    /// its `kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            Taken::Ready(_) => "ready",
            Taken::Stale(_) => "stale",
            Taken::Make => "make",
            Taken::Wait => "wait",
            Taken::Later(_) => "later",
            Taken::Shed => "shed",
        }
    }
}

#[derive(Debug, Clone)]
struct Idle<T> {
    item: T,
    birth: Nanos,
    since: Nanos,
}

/// The bookkeeping of holding a limited number of things.
///
/// Generic over the item; an item is recognised on its way back by
/// `PartialEq`, which for a connection handle is its identity.
#[derive(Debug, Clone)]
pub struct Pool<T> {
    limits: Limits,
    ward: Option<Ward>,
    /// Idle items, oldest returned first: the newest is at the end.
    free: Vec<Idle<T>>,
    /// Lent items with their births.
    lent: Vec<(T, Nanos)>,
    /// Rooms reserved by `Make` and not yet filled.
    reserved: i64,
}

impl<T: Clone + PartialEq> Default for Pool<T> {
    fn default() -> Self {
        Pool::new(Limits::default(), None)
    }
}

impl<T: Clone + PartialEq> Pool<T> {
    /// An empty pool.
    pub fn new(limits: Limits, ward: Option<Ward>) -> Pool<T> {
        Pool {
            limits,
            ward,
            free: Vec::new(),
            lent: Vec::new(),
            reserved: 0,
        }
    }

    /// The limits it holds itself to.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The ward in front of making, if any.
    pub fn ward(&self) -> Option<&Ward> {
        self.ward.as_ref()
    }

    /// Every item the pool knows, idle and lent, for a binding that must show
    /// its garbage collector what the pool holds (Python's `__traverse__`).
    pub fn items(&self) -> impl Iterator<Item = &T> {
        self.free
            .iter()
            .map(|i| &i.item)
            .chain(self.lent.iter().map(|(t, _)| t))
    }

    /// Whether `item` is lent out.
    pub fn lends(&self, item: &T) -> bool {
        self.lent.iter().any(|(t, _)| t == item)
    }

    /// Whether the pool holds `item` anywhere, idle or lent: once it does
    /// not, the pool can never hand it back, so a binding that stands its
    /// host's values for numbers (Node's) forgets the value then.
    pub fn holds(&self, item: &T) -> bool {
        self.free.iter().any(|i| i.item == *item) || self.lends(item)
    }

    /// How many exist right now: idle, lent, and being made.
    pub fn live(&self) -> i64 {
        self.free.len() as i64 + self.busy()
    }

    /// How many are sitting idle.
    pub fn idle(&self) -> i64 {
        self.free.len() as i64
    }

    /// How many are lent out or being made.
    pub fn busy(&self) -> i64 {
        self.lent.len() as i64 + self.reserved
    }

    /// The ward's breaker refusal now, in [0, 1); 0 without one. Reads, counts
    /// nothing.
    pub fn refusal(&self, now: Nanos) -> f64 {
        self.ward.as_ref().map_or(0.0, |w| w.refusal(now))
    }

    /// Take one, be told to make one or to wait — or be handed one too old to
    /// use. `roll` is the draw in [0, 1) the ward's breaker decides with.
    pub fn take(&mut self, now: Nanos, roll: f64) -> Taken<T> {
        if let Some(Idle { item, birth, since }) = self.free.pop() {
            if self.limits.stale(birth, since, now) {
                return Taken::Stale(item);
            }
            self.lent.push((item.clone(), birth));
            return Taken::Ready(item);
        }
        if self.limits.size > 0 && self.live() >= self.limits.size {
            return Taken::Wait;
        }
        if let Some(ward) = &mut self.ward {
            match ward.ask(now, roll) {
                Verdict::Go => {}
                Verdict::Later(span) => return Taken::Later(span),
                Verdict::Shed => return Taken::Shed,
            }
        }
        self.reserved += 1;
        Taken::Make
    }

    /// The top idle item if it is fresh, lent — `take`'s common answer
    /// without the rest: `None` when there is no idle item or the newest is
    /// past its age (then `take` says what to do). A driver's fast path.
    pub fn take_fresh(&mut self, now: Nanos) -> Option<T> {
        let top = self.free.last()?;
        if self.limits.stale(top.birth, top.since, now) {
            return None;
        }
        let Idle { item, birth, .. } = self.free.pop()?;
        self.lent.push((item.clone(), birth));
        Some(item)
    }

    /// How many takes in a row could be served without `Wait` right now:
    /// the idle items plus the free room (`i64::MAX` without a `size`). Zero
    /// exactly when `take` would answer `Wait`. A driver's queue reads it to
    /// know how many of its waiters to wake.
    pub fn room(&self) -> i64 {
        if self.limits.size == 0 {
            return i64::MAX;
        }
        self.idle() + (self.limits.size - self.live()).max(0)
    }

    /// Register an item made after `take` said `Make`: lent, born now. It
    /// fills the reserved room and tells the ward the backend is alive.
    pub fn made(&mut self, item: T, now: Nanos) {
        if self.reserved > 0 {
            self.reserved -= 1;
        }
        if let Some(ward) = &mut self.ward {
            ward.made(now);
        }
        self.lent.push((item, now));
    }

    /// Say the item `take` reserved room for could not be made: the room is
    /// free again, and the ward counts a failure (`roll` draws the hold).
    /// Without it a factory that failed once would shrink the pool for good.
    pub fn unmade(&mut self, now: Nanos, roll: f64) {
        if self.reserved > 0 {
            self.reserved -= 1;
        }
        if let Some(ward) = &mut self.ward {
            ward.unmade(now, roll);
        }
    }

    /// Give back the room `take` reserved with `Make` when nothing was made
    /// and the backend is not to blame (the caller was cancelled): unlike
    /// [`Pool::unmade`] the ward counts nothing.
    pub fn unreserve(&mut self) {
        if self.reserved > 0 {
            self.reserved -= 1;
        }
    }

    fn unlend(&mut self, item: &T) -> Option<Nanos> {
        let i = self.lent.iter().rposition(|(it, _)| it == item)?;
        Some(self.lent.swap_remove(i).1)
    }

    /// Hand one back, keeping the birth it was lent with.
    ///
    /// `false` means the pool did not keep it and the caller should close it:
    /// there were already `idle` idle, it is past its `life`, or it is a
    /// stranger with no room for it. A broken item goes to [`Pool::drop`]
    /// instead — a pool that kept it would hand it to the next caller. An item
    /// never registered by `made` fills the room `take` reserved and is born
    /// now.
    pub fn give(&mut self, item: T, now: Nanos) -> bool {
        let birth = match self.unlend(&item) {
            Some(birth) => birth,
            None if self.reserved > 0 => {
                self.reserved -= 1;
                now
            }
            None => {
                if self.limits.size > 0 && self.live() >= self.limits.size {
                    return false;
                }
                now
            }
        };
        if self.limits.expired(birth, now) {
            return false;
        }
        if self.limits.idle > 0 && self.idle() >= self.limits.idle {
            return false;
        }
        self.free.push(Idle {
            item,
            birth,
            since: now,
        });
        true
    }

    /// Say a lent item is not coming back, because it broke. This keeps the
    /// live count honest: a failed connection would otherwise hold a slot for
    /// ever. An item never registered frees the room reserved for it.
    pub fn drop(&mut self, item: &T) {
        if self.unlend(item).is_none() && self.reserved > 0 {
            self.reserved -= 1;
        }
    }

    /// Every idle item that has sat longer than `keep` or lived longer than
    /// `life`, out of the pool, for the caller to close. Called on a timer by
    /// whoever owns the runtime; `take` checks ages too, so nothing is
    /// stranded when the timer is late.
    pub fn evict(&mut self, now: Nanos) -> Vec<T> {
        let mut out = Vec::new();
        let limits = self.limits;
        let mut i = 0;
        while i < self.free.len() {
            let idle = &self.free[i];
            if limits.stale(idle.birth, idle.since, now) {
                out.push(self.free.remove(i).item);
            } else {
                i += 1;
            }
        }
        out
    }

    /// Everything idle, emptied out for the caller to close — what a shutdown
    /// does. Lent items are the borrowers'; each comes back through `give`
    /// and can be closed then.
    pub fn close(&mut self) -> Vec<T> {
        self.free.drain(..).map(|i| i.item).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::{Backoff, Breaker, MILLI, pick};

    #[test]
    fn limits_not_given_are_the_defaults() {
        assert_eq!(Limits::given(None, None, None, None), Ok(Limits::default()));
        let l = Limits::given(Some(3), None, None, Some(SECOND)).unwrap();
        assert_eq!((l.size(), l.idle(), l.life()), (3, 10, SECOND));
        assert_eq!(l.keep(), Limits::default().keep());
        assert_eq!(
            Limits::given(None, Some(-1), None, None).unwrap_err().arg,
            "idle"
        );
    }

    fn d(t: &Taken<i32>) -> String {
        match t {
            Taken::Ready(i) => format!("Ready({i})"),
            Taken::Stale(i) => format!("Stale({i})"),
            Taken::Make => "Make".into(),
            Taken::Wait => "Wait".into(),
            Taken::Later(s) => format!("Later({} ms)", s / MILLI),
            Taken::Shed => "Shed".into(),
        }
    }

    fn sized(size: i64) -> Limits {
        Limits::new(size, size, 30 * 60 * SECOND, 0).unwrap()
    }

    #[test]
    fn guide_01_first_take() {
        let mut pool: Pool<i32> = Pool::default();
        assert_eq!(pool.live(), 0);
        assert_eq!(d(&pool.take(0, 0.5)), "Make");
        pool.made(1, 0);
        assert_eq!(d(&pool.take(0, 0.5)), "Make");
        pool.made(2, 0);
        assert_eq!(pool.live(), 2);
        assert!(pool.give(1, 0));
        assert_eq!(pool.idle(), 1);
        assert_eq!(d(&pool.take(1, 0.5)), "Ready(1)");
    }

    #[test]
    fn guide_02_limits() {
        let mut small: Pool<i32> = Pool::new(sized(2), None);
        small.take(0, 0.5);
        small.made(1, 0);
        small.take(0, 0.5);
        small.made(2, 0);
        assert_eq!(small.live(), 2);
        assert_eq!(small.busy(), 2);
        assert_eq!(d(&small.take(0, 0.5)), "Wait");
    }

    #[test]
    fn guide_03_retiring() {
        let mut p: Pool<i32> = Pool::new(Limits::new(4, 4, SECOND, 0).unwrap(), None);
        p.take(0, 0.5);
        p.made(7, 0);
        assert!(p.give(7, 0));
        assert_eq!(p.evict(500 * MILLI).len(), 0);
        assert_eq!(p.evict(1500 * MILLI), vec![7]);
        assert_eq!(p.idle(), 0);
        p.take(0, 0.5);
        p.made(8, 0);
        p.give(8, 0);
        assert_eq!(d(&p.take(2 * SECOND, 0.5)), "Stale(8)");
        assert_eq!(p.live(), 0);

        let mut aged: Pool<i32> = Pool::new(Limits::new(2, 2, 0, 4 * SECOND).unwrap(), None);
        aged.take(0, 0.5);
        aged.made(5, 0);
        assert!(aged.give(5, 3 * SECOND));
        assert_eq!(aged.idle(), 1);
        assert_eq!(d(&aged.take(5 * SECOND, 0.5)), "Stale(5)");
    }

    #[test]
    fn holds_and_lends_say_where_an_item_is() {
        let mut p: Pool<i32> = Pool::new(Limits::new(0, 1, SECOND, 0).unwrap(), None);
        for i in [1, 2] {
            p.take(0, 0.5);
            p.made(i, 0);
        }
        assert!(p.lends(&1) && p.holds(&1));
        assert!(p.give(1, 0));
        assert!(!p.lends(&1) && p.holds(&1), "idle");
        assert!(!p.give(2, 0), "above idle: not kept");
        assert!(!p.holds(&2));
        assert_eq!(d(&p.take(2 * SECOND, 0.5)), "Stale(1)");
        assert!(!p.holds(&1), "stale: let go");
        assert_eq!(d(&p.take(2 * SECOND, 0.5)), "Make");
        p.made(3, 2 * SECOND);
        p.drop(&3);
        assert!(!p.holds(&3) && p.live() == 0, "dropped");
    }

    #[test]
    fn guide_04_ward() {
        let mut guarded: Pool<i32> =
            Pool::new(sized(4), Some(Ward::new(Some(Breaker::default()), None)));
        assert_eq!(guarded.refusal(0), 0.0);
        for i in 0..8 {
            if guarded.take(i * 100 * MILLI, 0.99) == Taken::Make {
                guarded.unmade(i * 100 * MILLI, 0.5);
            }
        }
        assert!((guarded.refusal(800 * MILLI) - 8.0 / 9.0).abs() < 1e-12);
        assert_eq!(d(&guarded.take(900 * MILLI, 0.1)), "Shed");
        assert_eq!(d(&guarded.take(900 * MILLI, 0.99)), "Make");

        let mut held: Pool<i32> =
            Pool::new(sized(4), Some(Ward::new(None, Some(Backoff::default()))));
        held.take(0, 0.5);
        held.unmade(0, 0.5);
        assert_eq!(d(&held.take(MILLI, 0.5)), "Later(49 ms)");
        assert_eq!(d(&held.take(5 * SECOND, 0.5)), "Make");
    }

    #[test]
    fn guide_05_pick() {
        let mut a: Pool<i32> = Pool::new(sized(4), None);
        let b: Pool<i32> = Pool::new(sized(4), None);
        a.take(0, 0.5);
        a.made(1, 0);
        assert_eq!(pick(&[&a, &b], 0, 0.0, 0.9), Some(1));
        let none: [&Pool<i32>; 0] = [];
        assert_eq!(pick(&none, 0, 0.0, 0.0), None);
    }

    #[test]
    fn evict_every_is_the_shorter_age_floored_at_a_second() {
        let l = |keep, life| Limits::new(10, 10, keep, life).unwrap().evict_every();
        assert_eq!(Limits::default().evict_every(), 30 * 60 * SECOND);
        assert_eq!(l(0, 0), 0, "nothing retires: no timer");
        assert_eq!(l(5 * SECOND, 0), 5 * SECOND);
        assert_eq!(l(0, 7 * SECOND), 7 * SECOND);
        assert_eq!(l(9 * SECOND, 4 * SECOND), 4 * SECOND);
        assert_eq!(l(SECOND / 10, 0), MIN_EVICT_EVERY, "floored");
        assert_eq!(TAKE_TIMEOUT, 30 * SECOND);
    }

    #[test]
    fn give_keeps_birth_through_loans() {
        // 0.1.0 bug: every give stamped the item as new, so `life` never retired
        // a reused one.
        let mut p: Pool<i32> = Pool::new(Limits::new(2, 2, 0, 10 * SECOND).unwrap(), None);
        p.take(0, 0.5);
        p.made(1, 0);
        for t in 1..=9 {
            assert!(p.give(1, t * SECOND));
            assert_eq!(p.take(t * SECOND, 0.5), Taken::Ready(1));
        }
        // Lent since 9 s, born at 0: at 11 s it is past its life.
        assert!(!p.give(1, 11 * SECOND));
        assert_eq!(p.live(), 0);
    }

    #[test]
    fn expired_item_comes_back_stale_not_skipped() {
        // 0.1.0 bug: take dropped an expired item without the caller seeing it.
        let mut p: Pool<i32> = Pool::new(Limits::new(4, 4, SECOND, 0).unwrap(), None);
        for i in 0..3 {
            p.take(0, 0.5);
            p.made(i, 0);
        }
        for i in 0..3 {
            p.give(i, 0);
        }
        let mut stale = vec![];
        loop {
            match p.take(5 * SECOND, 0.5) {
                Taken::Stale(i) => stale.push(i),
                Taken::Make => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(stale, vec![2, 1, 0]);
    }

    #[test]
    fn newest_first() {
        let mut p: Pool<i32> = Pool::default();
        for i in 0..3 {
            p.take(0, 0.5);
            p.made(i, 0);
        }
        p.give(0, 1);
        p.give(2, 2);
        p.give(1, 3);
        assert_eq!(p.take(4, 0.5), Taken::Ready(1));
        assert_eq!(p.take(4, 0.5), Taken::Ready(2));
        assert_eq!(p.take(4, 0.5), Taken::Ready(0));
    }

    #[test]
    fn give_false_above_idle() {
        let mut p: Pool<i32> = Pool::new(Limits::new(4, 1, 0, 0).unwrap(), None);
        for i in 0..2 {
            p.take(0, 0.5);
            p.made(i, 0);
        }
        assert!(p.give(0, 0));
        assert!(!p.give(1, 0));
        assert_eq!(p.live(), 1);
    }

    #[test]
    fn unregistered_item_fills_reserved_room() {
        let mut p: Pool<i32> = Pool::new(Limits::new(1, 1, 0, 3 * SECOND).unwrap(), None);
        assert_eq!(p.take(0, 0.5), Taken::Make);
        assert_eq!(p.live(), 1);
        // Made without `made`; comes back at 2 s and is born then.
        assert!(p.give(42, 2 * SECOND));
        assert_eq!(p.live(), 1);
        assert_eq!(p.take(4 * SECOND, 0.5), Taken::Ready(42));
        // A stranger with no room is refused.
        assert!(!p.give(99, 4 * SECOND));
        assert_eq!(p.live(), 1);
    }

    #[test]
    fn drop_frees_the_slot() {
        let mut p: Pool<i32> = Pool::new(sized(1), None);
        p.take(0, 0.5);
        p.made(1, 0);
        assert_eq!(p.take(0, 0.5), Taken::Wait);
        p.drop(&1);
        assert_eq!(p.live(), 0);
        assert_eq!(p.take(0, 0.5), Taken::Make);
        // Dropping an unregistered item frees its reservation.
        p.drop(&7);
        assert_eq!(p.live(), 0);
    }

    #[test]
    fn unmade_frees_the_room() {
        let mut p: Pool<i32> = Pool::new(sized(1), None);
        assert_eq!(p.take(0, 0.5), Taken::Make);
        assert_eq!(p.take(0, 0.5), Taken::Wait);
        p.unmade(0, 0.5);
        assert_eq!(p.take(0, 0.5), Taken::Make);
    }

    #[test]
    fn made_resets_the_backoff() {
        let mut p: Pool<i32> = Pool::new(sized(4), Some(Ward::new(None, Some(Backoff::default()))));
        p.take(0, 0.5);
        p.unmade(0, 0.99);
        p.take(0, 0.5);
        assert!(matches!(p.take(0, 0.5), Taken::Later(_)));
        let mut q: Pool<i32> = Pool::new(sized(4), Some(Ward::new(None, Some(Backoff::default()))));
        q.take(0, 0.5);
        q.unmade(0, 0.99); // ~99 ms hold
        assert_eq!(q.take(SECOND, 0.5), Taken::Make);
        q.made(1, SECOND);
        assert_eq!(q.ward().unwrap().failures(), 0);
        assert_eq!(q.take(SECOND, 0.5), Taken::Make);
        // Holds grow with failures in a row (rigid to see it).
        let rigid = Backoff::new(100 * MILLI, 2.0, SECOND, 3, crate::flow::Jitter::Rigid).unwrap();
        let mut r: Pool<i32> = Pool::new(sized(4), Some(Ward::new(None, Some(rigid))));
        r.take(0, 0.5);
        r.unmade(0, 0.5);
        assert_eq!(r.take(0, 0.5), Taken::Later(100 * MILLI));
        assert_eq!(r.take(100 * MILLI, 0.5), Taken::Make);
        r.unmade(100 * MILLI, 0.5);
        assert_eq!(r.take(100 * MILLI, 0.5), Taken::Later(200 * MILLI));
    }

    #[test]
    fn close_empties_idle_only() {
        let mut p: Pool<i32> = Pool::default();
        for i in 0..3 {
            p.take(0, 0.5);
            p.made(i, 0);
        }
        p.give(0, 0);
        p.give(1, 0);
        let mut closed = p.close();
        closed.sort();
        assert_eq!(closed, vec![0, 1]);
        assert_eq!(p.live(), 1);
        assert!(p.give(2, 0));
    }

    #[test]
    fn unlimited_size() {
        let mut p: Pool<i32> = Pool::new(Limits::new(0, 0, 0, 0).unwrap(), None);
        for i in 0..100 {
            assert_eq!(p.take(0, 0.5), Taken::Make);
            p.made(i, 0);
        }
        for i in 0..100 {
            assert!(p.give(i, 0));
        }
        assert_eq!(p.idle(), 100);
    }

    #[test]
    fn refuses_negative_limits() {
        assert_eq!(Limits::new(-1, 0, 0, 0).unwrap_err().arg, "size");
        assert_eq!(Limits::new(0, -1, 0, 0).unwrap_err().arg, "idle");
        assert_eq!(Limits::new(0, 0, -1, 0).unwrap_err().arg, "keep");
        assert_eq!(Limits::new(0, 0, 0, -1).unwrap_err().arg, "life");
        let l = Limits::default();
        assert_eq!(
            (l.size(), l.idle(), l.keep(), l.life()),
            (10, 10, 1800 * SECOND, 0)
        );
    }

    #[test]
    fn kinds() {
        assert_eq!(Taken::<i32>::Later(1).kind(), "later");
        assert_eq!(Taken::Ready(1).kind(), "ready");
    }
}
