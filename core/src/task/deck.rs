//! A worker's slots, and its runs *on deck*: the next calls for its host
//! bodies, made ready while every slot is busy and handed to the host the
//! moment one frees — on the thread that frees it.
//!
//! Why: a slot of a host body frees on the host's thread, as the body
//! answers (`HostQueue`). Without a deck the next run then had to be woken
//! on the core's runtime to build its call and queue it, and the host —
//! the JS event loop, a Python runner — waited through that wake-up for
//! every batch: on one 2-vCPU machine a Node drain of no-op bodies at the
//! default concurrency of 4 ran at half the rate of concurrency 8, the
//! slots idle between the host's answer and the next call. With a run on
//! deck per slot the host's answer and its next call are one step on one
//! thread, and the runtime builds the following calls meanwhile: Redis
//! drains at the defaults went from 37.7-40.8k to 42.9-47.3k/s (Python,
//! quiet) and from 25.7-27.3k to 28.9-37.1k/s (Node, beside a build),
//! the worker's CPU a task from 22-24 to 19-20.5 µs (Python), alternating
//! pairs in `bench/README.md`.
//!
//! Each slot has [`PER_SLOT`] places on deck: the answers of one batch
//! hand over the next batch, and the runtime refills the deck for several
//! batches at a time rather than between each two.
//!
//! A run on deck is not started and not acked: its early ack goes out as
//! it is handed over ([`Hand::go`]), so a worker killed -9 loses only the
//! runs its host had started, as before. A run that waited on deck longer
//! than the worker's revoked-check interval is not handed over on the
//! host's thread: its slot goes to the run's own task (`Waiting::turn`),
//! which checks for a revoke first, as a run that waited for a slot does;
//! so does one whose worker has every runner stuck, which waits for one
//! first.
//! A run that leaves the deck (stopped, terminated, cancelled) never
//! reaches the host.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use super::body::Context;
use super::host::{HostQueue, Reply};

/// One of a worker's slots (one of the bodies it runs at once). Dropped,
/// it goes to the run on deck next, if any, else back to the worker.
pub struct Slot {
    permit: Option<OwnedSemaphorePermit>,
    deck: Option<Arc<Deck>>,
}

impl Slot {
    /// A slot of a worker with no deck.
    pub fn plain(permit: OwnedSemaphorePermit) -> Slot {
        Slot {
            permit: Some(permit),
            deck: None,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let (Some(p), Some(d)) = (self.permit.take(), self.deck.take()) {
            d.freed(p);
        }
    }
}

/// Where a held run's call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stand {
    /// On deck.
    Held,
    /// Queued for the host as call `seq`.
    Handed(u64),
    /// Its run stopped waiting: it is not handed over.
    Gone,
}

/// A held run's call, shared by its run's task and whoever hands it over.
pub(crate) struct Ticket {
    stand: Mutex<Stand>,
}

impl Ticket {
    /// A run about to go on deck.
    pub(crate) fn new() -> Arc<Ticket> {
        Arc::new(Ticket {
            stand: Mutex::new(Stand::Held),
        })
    }

    fn stand(&self) -> std::sync::MutexGuard<'_, Stand> {
        self.stand.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether it reached the host.
    pub(crate) fn handed(&self) -> bool {
        matches!(*self.stand(), Stand::Handed(_))
    }
}

/// What hands a held run's call to the host: the early ack and the run's
/// start (`started`, told whether the ack is still owed), then the call
/// queued with the slot.
pub(crate) struct Hand {
    pub(crate) ticket: Arc<Ticket>,
    pub(crate) queue: Arc<HostQueue>,
    pub(crate) key: Arc<str>,
    pub(crate) ctx: Context,
    pub(crate) args: Vec<serde_json::Value>,
    pub(crate) reply: Reply,
    pub(crate) started: Box<dyn FnOnce(bool) + Send>,
    /// The runtime of the run's task: a hand-over on a host's thread (no
    /// runtime of its own) runs inside it, since an ack may start a timer
    /// or a task there (RabbitMQ's gathered acks do).
    pub(crate) rt: tokio::runtime::Handle,
}

impl Hand {
    /// Hands the call over holding `slot`, acking it when `ack`; gives the
    /// slot back when the run stopped waiting meanwhile.
    pub(crate) fn go(self, slot: Slot, ack: bool) -> Result<(), Slot> {
        let mut stand = self.ticket.stand();
        if *stand != Stand::Held {
            return Err(slot);
        }
        let _inside = tokio::runtime::Handle::try_current()
            .is_err()
            .then(|| self.rt.enter());
        (self.started)(ack);
        let seq = self
            .queue
            .push_reply(self.key, self.ctx, self.args, Some(slot), self.reply);
        *stand = Stand::Handed(seq);
        Ok(())
    }
}

/// Places on deck per slot: as many as Celery's prefetch multiplier, so a
/// worker holding only its floor (four messages a slot) has every one of
/// them ready. One per slot left the host a single hand-over between
/// visits of the runtime: after each batch of answers the event loop or a
/// runner waited for the runtime to refill the deck, a wake-up per batch
/// of at most `concurrency` calls. No-op Redis drains at the defaults
/// (concurrency 4), 20 000 runs, alternating on one 2-vCPU machine: Node
/// 54-58k/s with one place a slot, 58-61k with two, 65-72k with four,
/// 70-71k with eight and 55-65k with sixteen (worker CPU a run 17.3-18.1 →
/// 13.5-15 µs); Python 44-65k → 65-75k/s (11.5-12 µs at four).
pub const PER_SLOT: usize = 4;

/// A run on deck, in line for a slot.
struct Waiting {
    ticket: Arc<Ticket>,
    /// Handed over on the freeing thread until then; later its own task
    /// checks it first.
    fresh_until: Instant,
    hand: Hand,
    turn: oneshot::Sender<(Slot, Hand)>,
}

/// A worker's slots and its deck.
pub struct Deck {
    slots: Arc<Semaphore>,
    /// Places on deck each slot brings (0: none, as on the process pool,
    /// which keeps its own run on deck per child).
    per_slot: usize,
    /// The worker's runner health, once it runs: while every runner is
    /// stuck a slot's run goes to its own task, which waits for one
    /// before the hand-over (and its ack).
    gate: std::sync::OnceLock<super::runners::Gate>,
    /// Places on deck: [`PER_SLOT`] for each slot.
    room: Arc<Semaphore>,
    line: Mutex<VecDeque<Waiting>>,
    /// Slots and places a shrink took away while they were busy: each is
    /// taken out as it next comes free, before a run in line gets it (a
    /// freed slot goes straight to the line, never through the
    /// semaphore, so waiting on the semaphore for it would wait while
    /// any run is on deck).
    owed_slots: AtomicUsize,
    owed_places: AtomicUsize,
}

/// Takes one off `owed` when it is not zero.
fn pays(owed: &AtomicUsize) -> bool {
    owed.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

/// A run's place on deck.
pub(crate) type Place = OwnedSemaphorePermit;

impl Deck {
    /// A deck for `slots`, `n` of them, with `per_slot` places on deck
    /// for each.
    pub fn new(slots: Arc<Semaphore>, n: usize, per_slot: usize) -> Arc<Deck> {
        Arc::new(Deck {
            slots,
            per_slot,
            gate: std::sync::OnceLock::new(),
            room: Arc::new(Semaphore::new(n * per_slot)),
            line: Mutex::new(VecDeque::new()),
            owed_slots: AtomicUsize::new(0),
            owed_places: AtomicUsize::new(0),
        })
    }

    /// Tells it the worker's runner health.
    pub(crate) fn set_gate(&self, gate: super::runners::Gate) {
        let _ = self.gate.set(gate);
    }

    /// The worker's slots.
    pub fn slots(&self) -> &Arc<Semaphore> {
        &self.slots
    }

    /// The places on deck (grown and shrunk with the slots).
    pub fn room(&self) -> &Arc<Semaphore> {
        &self.room
    }

    /// `n` more slots' places on deck (their `permits` already added to
    /// the slots); slots free now go to the runs in line.
    pub fn grow(self: &Arc<Self>, n: usize) {
        self.room.add_permits(n * self.per_slot);
        self.offer();
    }

    /// Takes `n` slots (`permits` of the semaphore) and their places on
    /// deck away for good: those free now at once, busy ones as they come
    /// free.
    pub fn shrink(&self, permits: usize, n: usize) {
        let owed = permits - self.slots.forget_permits(permits);
        self.owed_slots.fetch_add(owed, Ordering::SeqCst);
        let places = n * self.per_slot;
        let owed = places - self.room.forget_permits(places);
        self.owed_places.fetch_add(owed, Ordering::SeqCst);
    }

    /// A place on deck came free: back to the room unless a shrink owes it.
    fn place_back(&self) {
        if !pays(&self.owed_places) {
            self.room.add_permits(1);
        }
    }

    /// Runs on deck now, in line for a slot.
    pub fn waiting(&self) -> usize {
        self.line().len()
    }

    fn line(&self) -> std::sync::MutexGuard<'_, VecDeque<Waiting>> {
        self.line.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `permit` as a slot that goes to the deck when dropped.
    pub fn slot(self: &Arc<Self>, permit: OwnedSemaphorePermit) -> Slot {
        Slot {
            permit: Some(permit),
            deck: Some(self.clone()),
        }
    }

    /// A slot free now, if any.
    pub fn try_slot(self: &Arc<Self>) -> Option<Slot> {
        self.slots
            .clone()
            .try_acquire_owned()
            .ok()
            .map(|p| self.slot(p))
    }

    /// Puts a run on deck holding `place`: handed over by the next slot
    /// freed while fresh (before `fresh_until`), else sent its slot on the
    /// returned receiver. A slot free already goes to it at once.
    pub(crate) fn hold(
        self: &Arc<Self>,
        place: Place,
        fresh_until: Instant,
        hand: Hand,
    ) -> oneshot::Receiver<(Slot, Hand)> {
        let (turn, rx) = oneshot::channel();
        self.line().push_back(Waiting {
            ticket: hand.ticket.clone(),
            fresh_until,
            hand,
            turn,
        });
        // The place is the line's length, kept by the semaphore: it goes
        // back as the run leaves the line.
        place.forget();
        // A slot freed while it was being put in line went to the
        // semaphore: take it for the line now.
        self.offer();
        rx
    }

    /// Takes `ticket`'s run off the deck (its run stopped waiting): `true`
    /// when it was not handed over (and now never will be), `false` when
    /// it was.
    pub(crate) fn leave(&self, ticket: &Arc<Ticket>) -> bool {
        {
            let mut stand = ticket.stand();
            if *stand != Stand::Held {
                return *stand == Stand::Gone;
            }
            *stand = Stand::Gone;
        }
        let mut line = self.line();
        let before = line.len();
        line.retain(|w| !Arc::ptr_eq(&w.ticket, ticket));
        let left = line.len() < before;
        drop(line);
        if left {
            self.place_back();
        }
        true
    }

    /// Withdraws `ticket`'s call from the host if it was handed over.
    pub(crate) fn withdraw(queue: &HostQueue, ticket: &Ticket) {
        let seq = match *ticket.stand() {
            Stand::Handed(seq) => seq,
            _ => return,
        };
        queue.withdraw(seq);
    }

    /// Slots free now (the worker grew) go to the runs in line.
    pub fn offer(self: &Arc<Self>) {
        while !self.line().is_empty() {
            match self.slots.clone().try_acquire_owned() {
                Ok(p) => self.freed(p),
                Err(_) => return,
            }
        }
    }

    /// A slot came free: to the first run in line, handed over here when
    /// fresh, else sent to its task; back to the worker when none waits.
    fn freed(self: &Arc<Self>, permit: OwnedSemaphorePermit) {
        if pays(&self.owed_slots) {
            permit.forget();
            return;
        }
        let mut permit = permit;
        loop {
            let Some(w) = self.line().pop_front() else {
                drop(permit);
                return;
            };
            self.place_back();
            let slot = self.slot(permit);
            let here =
                Instant::now() < w.fresh_until && self.gate.get().is_none_or(|g| g.healthy());
            let back = if here {
                w.hand.go(slot, true)
            } else {
                w.turn.send((slot, w.hand)).map_err(|(s, _)| s)
            };
            match back {
                Ok(()) => return,
                Err(mut s) => {
                    // Its run stopped waiting: the next in line.
                    s.deck = None;
                    permit = s.permit.take().expect("a slot holds its permit");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A hand-over made on a thread with no runtime (a host's) runs inside
    /// the run's: what it starts there (a timer, a task) works.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_hand_over_on_a_host_thread_runs_inside_the_runtime() {
        let slots = Arc::new(Semaphore::new(1));
        let deck = Deck::new(slots.clone(), 1, 1);
        let busy = deck.try_slot().expect("a free slot");
        let spawned = Arc::new(AtomicBool::new(false));
        let s2 = spawned.clone();
        let q = HostQueue::new();
        let (reply, _rx) = oneshot::channel();
        let hand = Hand {
            ticket: Ticket::new(),
            queue: q.clone(),
            key: Arc::from("t"),
            ctx: crate::task::host::tests::ctx(),
            args: Vec::new(),
            reply,
            started: Box::new(move |_| {
                tokio::spawn(async move { s2.store(true, Ordering::SeqCst) });
            }),
            rt: tokio::runtime::Handle::current(),
        };
        let place = deck.room().clone().try_acquire_owned().unwrap();
        let _turn = deck.hold(
            place,
            Instant::now() + std::time::Duration::from_secs(60),
            hand,
        );
        assert_eq!(deck.waiting(), 1);
        // Freed on a plain thread, as a host's answer frees it.
        std::thread::spawn(move || drop(busy))
            .join()
            .expect("no panic");
        assert_eq!(deck.waiting(), 0);
        assert_eq!(q.len(), 1, "handed over");
        for _ in 0..500 {
            if spawned.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        panic!("the task started at the hand-over never ran");
    }
}
