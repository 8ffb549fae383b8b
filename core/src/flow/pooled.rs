//! The acquire loop of a pool with a runtime under it, without the runtime.
//!
//! A [`Pool`] answers one take. Serving a caller takes a loop around it —
//! close what came back stale, open when told to make, sleep out a ward's
//! hold, queue while the pool is full, give up at a deadline — and that loop
//! was written once per binding and per flavour (threads, asyncio, the Node
//! event loop), and drifted: one copy woke its waiters in no order, the
//! others front of the queue. [`Acquires`] is that loop as a state machine,
//! so there is one order everywhere: **first parked, first served**.
//!
//! Each acquire is a [`Ticket`]. The driver asks [`Acquires::step`] what to
//! do and does it: hand the item out, open one, close one, sleep, park until
//! woken or the deadline, or fail. Whatever frees an item or room goes
//! through the machine too (`give`, `end`, `unopened`, `evict`, `close`),
//! which queues the tickets to wake; the driver drains them with
//! [`Acquires::wakes`] and signals each parked caller. Nothing here waits.
//!
//! Why waiters are woken by count, not by event: a woken ticket holds a
//! *turn*, and the machine keeps as many turns out as the pool has room
//! ([`Pool::room`]), after every call. A newcomer does not take while anyone
//! is parked or the turns already use the room, so nobody barges past a
//! woken waiter; a woken waiter that leaves (timeout, cancel) or only learns
//! it must sleep hands its turn on; and no free can be lost, because the
//! count is re-read rather than remembered.

use std::collections::{HashMap, VecDeque};

use super::error::{Invalid, span};
use super::{Failed, Limits, Nanos, Pool, Taken};

/// One acquire, as the driver names it to the machine.
pub type Ticket = u64;

/// What the driver does next for one acquire.
#[derive(Debug, Clone, PartialEq)]
pub enum Step<T> {
    /// Hand this item to the caller: the acquire is over.
    Hand(T),
    /// Open one, then call [`Acquires::opened`] (or [`Acquires::unopened`]
    /// if opening failed).
    Open,
    /// Close this item (it is already out of the pool), then step again.
    Close(T),
    /// Sleep this span (a ward's hold), then step again.
    Sleep(Nanos),
    /// Wait until this ticket is woken or the deadline passes (`None`: no
    /// deadline), then step again.
    Park(Ticket, Option<Nanos>),
    /// Raise this: the acquire is over.
    Fail(Failed),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Begun, not yet stepped, or back from a sleep without a turn.
    Fresh,
    /// In the queue.
    Parked,
    /// Holding a turn: woken, or closing a stale item it took.
    Turn,
    /// Opening an item after `Open`.
    Opening,
}

#[derive(Debug, Clone, Copy)]
struct Call {
    deadline: Option<Nanos>,
    state: State,
    /// Has parked before: parks again at the front, not the back.
    parked: bool,
}

/// The acquires of one pool: their queue, turns and deadlines.
#[derive(Debug, Clone, Default)]
pub struct Acquires {
    timeout: Option<Nanos>,
    evict_every: Nanos,
    next: Ticket,
    calls: HashMap<Ticket, Call>,
    queue: VecDeque<Ticket>,
    turns: i64,
    wakes: Vec<Ticket>,
    closed: bool,
    /// Set by [`Acquires::drain`]: tickets from this one on fail as closed.
    drain_from: Option<Ticket>,
}

impl Acquires {
    /// Acquires that give up after `timeout` (`None`: never). Refused: a
    /// negative timeout.
    pub fn new(timeout: Option<Nanos>) -> Result<Acquires, Invalid> {
        if let Some(t) = timeout {
            span("timeout", t)?;
        }
        Ok(Acquires {
            timeout,
            ..Acquires::default()
        })
    }

    /// The acquires of a driver over a pool with `limits`: `timeout` as in
    /// [`Acquires::new`] (a driver's default is [`TAKE_TIMEOUT`]), and the
    /// period of its evict timer, `evict_every` — omitted, the limits' own
    /// ([`Limits::evict_every`]); 0: no timer. Refused: a negative timeout
    /// or period.
    ///
    /// [`TAKE_TIMEOUT`]: super::TAKE_TIMEOUT
    pub fn driving(
        limits: &Limits,
        timeout: Option<Nanos>,
        evict_every: Option<Nanos>,
    ) -> Result<Acquires, Invalid> {
        let evict_every = match evict_every {
            Some(e) => span("evict_every", e)?,
            None => limits.evict_every(),
        };
        Ok(Acquires {
            evict_every,
            ..Acquires::new(timeout)?
        })
    }

    /// The timeout it was made with.
    pub fn timeout(&self) -> Option<Nanos> {
        self.timeout
    }

    /// How often the driver sweeps with [`Acquires::evict`] (0: never; see
    /// [`Acquires::driving`]).
    pub fn evict_every(&self) -> Nanos {
        self.evict_every
    }

    /// Why `step` failed, as the message the driver raises: see
    /// [`Failed::message`].
    pub fn message(&self, failed: Failed, unit: super::Unit) -> String {
        failed.message(self.timeout, unit)
    }

    /// How many acquires are parked.
    pub fn parked(&self) -> usize {
        self.queue.len()
    }

    /// How many acquires are under way (begun and not over).
    pub fn active(&self) -> usize {
        self.calls.len()
    }

    /// Whether [`Acquires::close`] has run.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Stop serving new acquires (each fails as closed) while those under
    /// way go on; [`Acquires::drained`] then says when to close.
    pub fn drain(&mut self) {
        self.drain_from.get_or_insert(self.next);
    }

    /// Whether a drain is over: no acquire under way and nothing lent, so
    /// the driver may close.
    pub fn drained<T: Clone + PartialEq>(&self, pool: &Pool<T>) -> bool {
        self.drain_from.is_some() && self.calls.is_empty() && pool.busy() == 0
    }

    /// Whether there are tickets to wake: drain them with `wakes`.
    pub fn has_wakes(&self) -> bool {
        !self.wakes.is_empty()
    }

    /// The tickets to wake since the last call, in the order they were woken.
    pub fn wakes(&mut self) -> Vec<Ticket> {
        std::mem::take(&mut self.wakes)
    }

    /// The fast path: a fresh idle item, lent, when nobody is queued ahead —
    /// or `None`, and the caller begins a ticket.
    pub fn quick<T: Clone + PartialEq>(&mut self, pool: &mut Pool<T>, now: Nanos) -> Option<T> {
        if self.closed || self.drain_from.is_some() || !self.queue.is_empty() || self.turns > 0 {
            return None;
        }
        pool.take_fresh(now)
    }

    /// A new acquire, its deadline `timeout` from `now`.
    pub fn begin(&mut self, now: Nanos) -> Ticket {
        let t = self.next;
        self.next += 1;
        let deadline = self.timeout.map(|d| now.saturating_add(d));
        self.calls.insert(
            t,
            Call {
                deadline,
                state: State::Fresh,
                parked: false,
            },
        );
        t
    }

    /// What to do next for `ticket`. `roll` is the ward's draw.
    ///
    /// A ticket the machine does not know (over, or never begun) fails as
    /// `Closed`.
    pub fn step<T: Clone + PartialEq>(
        &mut self,
        pool: &mut Pool<T>,
        ticket: Ticket,
        now: Nanos,
        roll: f64,
    ) -> Step<T> {
        let step = self.step_inner(pool, ticket, now, roll);
        self.settle(pool);
        step
    }

    fn step_inner<T: Clone + PartialEq>(
        &mut self,
        pool: &mut Pool<T>,
        ticket: Ticket,
        now: Nanos,
        roll: f64,
    ) -> Step<T> {
        let Some(&call) = self.calls.get(&ticket) else {
            return Step::Fail(Failed::Closed);
        };
        if self.closed || self.drain_from.is_some_and(|d| ticket >= d) {
            self.finish(pool, ticket);
            return Step::Fail(Failed::Closed);
        }
        let late = call.deadline.is_some_and(|d| now >= d);
        match call.state {
            State::Opening => return Step::Open,
            State::Parked if late => {
                self.finish(pool, ticket);
                return Step::Fail(Failed::Full { live: pool.live() });
            }
            State::Parked => return Step::Park(ticket, call.deadline),
            State::Fresh if !self.queue.is_empty() || self.turns >= pool.room() => {
                return self.park(ticket, now, pool);
            }
            State::Fresh | State::Turn => {}
        }
        match pool.take(now, roll) {
            Taken::Ready(item) => {
                self.finish_used(ticket);
                Step::Hand(item)
            }
            Taken::Stale(item) => {
                // Closing it is part of this turn: hold one, so nobody takes
                // the room it frees meanwhile.
                self.set(ticket, State::Turn);
                Step::Close(item)
            }
            Taken::Make => {
                // The room is now reserved for this ticket: its turn is used.
                self.set(ticket, State::Opening);
                Step::Open
            }
            Taken::Wait => self.park(ticket, now, pool),
            Taken::Later(delay) => {
                if call.deadline.is_some_and(|d| now.saturating_add(delay) > d) {
                    self.finish(pool, ticket);
                    return Step::Fail(Failed::Held { delay });
                }
                // Nobody waits for a sleeper: its turn goes to the next.
                self.set(ticket, State::Fresh);
                Step::Sleep(delay)
            }
            Taken::Shed => {
                self.finish(pool, ticket);
                Step::Fail(Failed::Shed {
                    refusal: pool.refusal(now),
                })
            }
        }
    }

    /// Register what `Open` opened: the acquire is over. `false` when the
    /// pool was closed meanwhile — the item is already dropped from the pool;
    /// close it and fail the acquire as closed.
    pub fn opened<T: Clone + PartialEq>(
        &mut self,
        pool: &mut Pool<T>,
        ticket: Ticket,
        item: T,
        now: Nanos,
    ) -> bool {
        self.calls.remove(&ticket);
        pool.made(item.clone(), now);
        if self.closed {
            pool.drop(&item);
            return false;
        }
        self.settle(pool);
        true
    }

    /// Opening failed: the room is free again and the ward counts the failure
    /// (`roll` draws its hold). The acquire is over.
    pub fn unopened<T: Clone + PartialEq>(
        &mut self,
        pool: &mut Pool<T>,
        ticket: Ticket,
        now: Nanos,
        roll: f64,
    ) {
        if self.calls.remove(&ticket).is_some() {
            pool.unmade(now, roll);
        }
        self.settle(pool);
    }

    /// The caller left (cancelled, interrupted, or done with a ticket the
    /// machine already ended: then nothing happens). A turn it held goes to
    /// the next; room it reserved is given back without blaming the backend.
    pub fn end<T: Clone + PartialEq>(&mut self, pool: &mut Pool<T>, ticket: Ticket) {
        self.finish(pool, ticket);
        self.settle(pool);
    }

    /// An item comes back. `broken` (or a closed pool): it is dropped.
    /// Answers whether the caller must close it.
    pub fn give<T: Clone + PartialEq>(
        &mut self,
        pool: &mut Pool<T>,
        item: T,
        now: Nanos,
        broken: bool,
    ) -> bool {
        let close = if broken || self.closed {
            pool.drop(&item);
            true
        } else {
            !pool.give(item, now)
        };
        if !self.queue.is_empty() {
            self.settle(pool);
        }
        close
    }

    /// The evict timer's sweep: idle items past their age, for the caller to
    /// close.
    pub fn evict<T: Clone + PartialEq>(&mut self, pool: &mut Pool<T>, now: Nanos) -> Vec<T> {
        let out = pool.evict(now);
        self.settle(pool);
        out
    }

    /// Shut down: every idle item out for the caller to close, every parked
    /// ticket woken (its next step fails as closed), every later step too.
    pub fn close<T: Clone + PartialEq>(&mut self, pool: &mut Pool<T>) -> Vec<T> {
        self.closed = true;
        while let Some(t) = self.queue.pop_front() {
            if let Some(c) = self.calls.get_mut(&t) {
                c.state = State::Turn;
                self.turns += 1;
            }
            self.wakes.push(t);
        }
        pool.close()
    }

    fn set(&mut self, ticket: Ticket, state: State) {
        if let Some(c) = self.calls.get_mut(&ticket) {
            if c.state == State::Turn {
                self.turns -= 1;
            }
            if state == State::Turn {
                self.turns += 1;
            }
            c.state = state;
        }
    }

    fn park<T: Clone + PartialEq>(
        &mut self,
        ticket: Ticket,
        now: Nanos,
        pool: &Pool<T>,
    ) -> Step<T> {
        let Some(&call) = self.calls.get(&ticket) else {
            return Step::Fail(Failed::Closed);
        };
        if call.deadline.is_some_and(|d| now >= d) {
            self.set(ticket, State::Fresh);
            self.calls.remove(&ticket);
            return Step::Fail(Failed::Full { live: pool.live() });
        }
        self.set(ticket, State::Parked);
        if call.parked {
            self.queue.push_front(ticket);
        } else {
            self.queue.push_back(ticket);
        }
        if let Some(c) = self.calls.get_mut(&ticket) {
            c.parked = true;
        }
        Step::Park(ticket, call.deadline)
    }

    /// The ticket is over having used what it was given.
    fn finish_used(&mut self, ticket: Ticket) {
        self.set(ticket, State::Fresh);
        self.calls.remove(&ticket);
    }

    /// The ticket is over without using anything: out of the queue, its
    /// reserved room given back.
    fn finish<T: Clone + PartialEq>(&mut self, pool: &mut Pool<T>, ticket: Ticket) {
        let Some(call) = self.calls.get(&ticket) else {
            return;
        };
        match call.state {
            State::Parked => self.queue.retain(|&t| t != ticket),
            State::Opening => pool.unreserve(),
            State::Fresh | State::Turn => {}
        }
        self.set(ticket, State::Fresh);
        self.calls.remove(&ticket);
    }

    /// Wakes parked tickets, front first, until the turns out match the room.
    fn settle<T: Clone + PartialEq>(&mut self, pool: &Pool<T>) {
        if self.queue.is_empty() {
            return;
        }
        let room = pool.room();
        while self.turns < room {
            let Some(t) = self.queue.pop_front() else {
                break;
            };
            self.set(t, State::Turn);
            self.wakes.push(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::{Breaker, Limits, SECOND, Ward};

    fn pool(size: i64) -> Pool<i32> {
        Pool::new(Limits::new(size, size, 0, 0).unwrap(), None)
    }

    #[test]
    fn first_parked_first_served() {
        let mut p = pool(1);
        let mut a = Acquires::new(Some(SECOND)).unwrap();
        let t0 = a.begin(0);
        assert_eq!(a.step(&mut p, t0, 0, 0.5), Step::Open);
        assert!(a.opened(&mut p, t0, 7, 0));
        let waiting: Vec<Ticket> = (0..3).map(|_| a.begin(0)).collect();
        for &t in &waiting {
            assert_eq!(a.step(&mut p, t, 0, 0.5), Step::Park(t, Some(SECOND)));
        }
        let mut served = vec![];
        for _ in 0..3 {
            assert!(!a.give(&mut p, 7, 1, false));
            let woken = a.wakes();
            assert_eq!(woken.len(), 1);
            // A newcomer does not barge past the woken waiter.
            let n = a.begin(1);
            assert_eq!(a.step(&mut p, n, 1, 0.5), Step::Park(n, Some(SECOND + 1)));
            a.end(&mut p, n);
            assert_eq!(a.step(&mut p, woken[0], 1, 0.5), Step::Hand(7));
            served.push(woken[0]);
        }
        assert_eq!(served, waiting);
        assert_eq!(a.active(), 0);
    }

    #[test]
    fn a_leaving_waiter_hands_its_turn_on() {
        let mut p = pool(1);
        let mut a = Acquires::new(None).unwrap();
        let t0 = a.begin(0);
        a.step(&mut p, t0, 0, 0.5);
        a.opened(&mut p, t0, 1, 0);
        let (x, y) = (a.begin(0), a.begin(0));
        a.step(&mut p, x, 0, 0.5);
        a.step(&mut p, y, 0, 0.5);
        a.give(&mut p, 1, 0, false);
        assert_eq!(a.wakes(), vec![x]);
        a.end(&mut p, x);
        assert_eq!(a.wakes(), vec![y]);
        assert_eq!(a.step(&mut p, y, 0, 0.5), Step::Hand(1));
    }

    #[test]
    fn deadline_and_close() {
        let mut p = pool(1);
        let mut a = Acquires::new(Some(SECOND)).unwrap();
        let t0 = a.begin(0);
        a.step(&mut p, t0, 0, 0.5);
        a.opened(&mut p, t0, 1, 0);
        let t = a.begin(0);
        assert_eq!(a.step(&mut p, t, 0, 0.5), Step::Park(t, Some(SECOND)));
        assert_eq!(
            a.step(&mut p, t, SECOND / 2, 0.5),
            Step::Park(t, Some(SECOND))
        );
        assert_eq!(
            a.step(&mut p, t, SECOND, 0.5),
            Step::Fail(Failed::Full { live: 1 })
        );
        let u = a.begin(0);
        a.step(&mut p, u, 0, 0.5);
        assert!(a.close(&mut p).is_empty());
        assert_eq!(a.wakes(), vec![u]);
        assert_eq!(a.step(&mut p, u, 0, 0.5), Step::Fail(Failed::Closed));
        assert!(
            a.give(&mut p, 1, 0, false),
            "a closed pool closes what comes back"
        );
        assert_eq!(p.live(), 0);
        assert_eq!(Acquires::new(Some(-1)).unwrap_err().arg, "timeout");
    }

    #[test]
    fn a_drain_serves_those_under_way_and_refuses_the_rest() {
        let mut p = pool(1);
        let mut a = Acquires::new(None).unwrap();
        let t0 = a.begin(0);
        a.step(&mut p, t0, 0, 0.5);
        a.opened(&mut p, t0, 1, 0);
        let early = a.begin(0);
        assert_eq!(a.step(&mut p, early, 0, 0.5), Step::Park(early, None));
        a.drain();
        assert!(!a.drained(&p));
        let late = a.begin(0);
        assert_eq!(a.step(&mut p, late, 0, 0.5), Step::Fail(Failed::Closed));
        assert!(!a.give(&mut p, 1, 0, false));
        assert_eq!(a.wakes(), vec![early]);
        assert_eq!(a.quick(&mut p, 0), None, "no quick item while draining");
        assert_eq!(a.step(&mut p, early, 0, 0.5), Step::Hand(1));
        assert!(!a.drained(&p), "lent");
        a.give(&mut p, 1, 0, false);
        assert!(a.drained(&p));
    }

    #[test]
    fn driving_defaults_and_ranges_the_timer() {
        let l = Limits::new(2, 2, 30 * SECOND, 0).unwrap();
        let a = Acquires::driving(&l, Some(SECOND), None).unwrap();
        assert_eq!(a.evict_every(), 30 * SECOND, "the limits' own period");
        assert_eq!(a.timeout(), Some(SECOND));
        assert_eq!(
            Acquires::driving(&l, None, Some(0)).unwrap().evict_every(),
            0
        );
        assert_eq!(
            Acquires::driving(&l, None, Some(-1)).unwrap_err().arg,
            "evict_every"
        );
        assert_eq!(
            Acquires::driving(&l, Some(-1), None).unwrap_err().arg,
            "timeout"
        );
        let a = Acquires::driving(&l, Some(SECOND), None).unwrap();
        assert_eq!(
            a.message(Failed::Full { live: 2 }, crate::flow::Unit::Millis),
            "no item within 1000 ms: the pool is full (2 live)"
        );
    }

    #[test]
    fn shed_and_cancelled_open() {
        let mut p: Pool<i32> = Pool::new(
            Limits::new(2, 2, 0, 0).unwrap(),
            Some(Ward::new(Some(Breaker::default()), None)),
        );
        let mut a = Acquires::new(None).unwrap();
        let t = a.begin(0);
        assert_eq!(a.step(&mut p, t, 0, 0.0), Step::Open);
        a.unopened(&mut p, t, 0, 0.5);
        let t = a.begin(0);
        assert!(matches!(
            a.step(&mut p, t, 0, 0.0),
            Step::Fail(Failed::Shed { .. })
        ));
        let t = a.begin(0);
        assert_eq!(a.step(&mut p, t, 0, 0.99), Step::Open);
        a.end(&mut p, t);
        assert_eq!(p.live(), 0, "a cancelled open gives its room back");
    }
}
