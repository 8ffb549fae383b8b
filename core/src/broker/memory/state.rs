//! What the memory broker keeps: queues of entries by priority step, the
//! delayed map, claims held by consumers, results, chords, revokes and
//! events — all in one [`Inner`] behind one mutex ([`Shared`]).
//!
//! Why apart: these are plain data with a few map updates each; the
//! broker's operations (in the sibling modules) are what lock them.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::MemoryOptions;
use crate::hashed::{HashMap, HashSet};
use crate::task::clock::Clock;
use crate::task::dead::{DEAD_KEPT, DeadLetter};
use crate::task::message::Message;
use crate::task::spec::{RunEvent, RunNote};
use crate::task::state::Outcome;

/// Priority steps: 0 is claimed first (kombu's Redis order: lower first).
pub(super) const STEPS: usize = 10;

/// What waits on a queue: a message, or bytes still to be decoded.
///
/// A message is shared, not held inline: the claim that hands it out keeps
/// it too (for a recovery) and the worker's table of the runs it holds
/// reads it, each without a copy — a copy was four allocations a run, and
/// a queue of inline messages moved hundreds of bytes each as it grew.
#[derive(Clone)]
pub(super) enum Payload {
    Msg(Arc<Message>),
    Raw(Arc<[u8]>),
}

#[derive(Clone)]
pub(super) struct Entry {
    pub(super) payload: Payload,
    /// The bytes it came as, when it was pushed raw: what a dead letter
    /// keeps, as Redis keeps the bytes it was given.
    pub(super) raw: Option<Arc<[u8]>>,
    /// How many times a consumer was lost holding it.
    pub(super) lost: u32,
    /// Handed out before (requeued, recovered, re-queued from the dead).
    pub(super) redelivered: bool,
}

impl Entry {
    pub(super) fn fresh(m: Arc<Message>) -> Entry {
        Entry {
            payload: Payload::Msg(m),
            raw: None,
            lost: 0,
            redelivered: false,
        }
    }
}

pub(super) struct Dead {
    pub(super) letter: DeadLetter,
    pub(super) step: usize,
}

#[derive(Default)]
pub(super) struct Queue {
    pub(super) steps: [VecDeque<Entry>; STEPS],
    /// (eta, seq) → message, moved to its step by a claim of this queue
    /// once due (as Redis's claim script does). Behind a pointer, as the
    /// held claims are (see [`Inner::unacked`]): etas land anywhere in the
    /// tree.
    pub(super) delayed: BTreeMap<(i64, u64), Arc<Message>>,
    pub(super) unacked: u64,
    /// Newest first, at most [`DEAD_KEPT`].
    pub(super) dead: VecDeque<Dead>,
}

impl Queue {
    pub(super) fn len(&self) -> usize {
        self.steps.iter().map(VecDeque::len).sum()
    }

    pub(super) fn bury(&mut self, letter: DeadLetter, step: usize) {
        crate::log::warn(
            "headway.memory",
            format_args!(
                "headway memory broker: queue {:?}: dead-lettered a message ({})",
                letter.queue,
                crate::log::shown(&letter.reason)
            ),
        );
        self.dead.push_front(Dead { letter, step });
        self.dead.truncate(DEAD_KEPT);
    }
}

pub(super) fn step(m: &Message) -> usize {
    (m.priority.unwrap_or(0) as usize).min(STEPS - 1)
}

/// A claim: who holds it, from where, and what it was.
pub(super) struct Held {
    pub(super) consumer: Arc<str>,
    pub(super) queue: Arc<str>,
    pub(super) step: usize,
    pub(super) message: Arc<Message>,
    pub(super) raw: Option<Arc<[u8]>>,
    pub(super) lost: u32,
}

#[derive(Default)]
pub(super) struct Inner {
    pub(super) queues: HashMap<String, Queue>,
    /// By tag, which grows with every claim: oldest claim first. Boxed:
    /// a B-tree moves its values within a node at each insert and remove,
    /// and a claim (its message whole) is hundreds of bytes — a Rust
    /// no-op drain spent a tenth of its CPU in those moves.
    pub(super) unacked: BTreeMap<u64, Box<Held>>,
    /// Consumers that have claimed; the (consumer, queue) leases they hold,
    /// one per queue as on Redis; those made to run out.
    pub(super) consumers: BTreeSet<Arc<str>>,
    pub(super) leased: HashSet<(Arc<str>, String)>,
    pub(super) expired: BTreeSet<(Arc<str>, String)>,
    pub(super) revoked: HashMap<String, i64>,
    /// Boxed: the map moves every entry each time it grows, and an
    /// outcome is hundreds of bytes (a Rust no-op drain storing 200 000
    /// results spent a tenth of its CPU copying them at the rehashes, on
    /// freshly faulted pages).
    /// Keyed by a shared id: [`Inner::expiry`] names the same one.
    pub(super) results: HashMap<Arc<str>, Box<Stored>>,
    pub(super) chords: HashMap<String, (u32, HashSet<String>)>,
    /// When each result and chord count goes, in the order they were
    /// made (one expiry for all, so the order is the time order): each
    /// store drops what is due from the front. A result stored again is
    /// queued again; its earlier place here finds the later time and
    /// leaves it.
    pub(super) expiry: VecDeque<(i64, Kept)>,
    /// The last [`EVENTS_KEPT`](super::EVENTS_KEPT) run events, oldest
    /// first, a worker's as it made them (read as events when asked).
    pub(super) events: VecDeque<Logged>,
    /// Per beat entry, the latest due time fired.
    pub(super) fired: HashMap<String, i64>,
    pub(super) seq: u64,
}

/// A result, and when it goes (ms).
pub(super) struct Stored {
    pub(super) outcome: Outcome,
    pub(super) until: i64,
}

/// A run event the memory broker keeps: recorded whole, or as a worker
/// made it.
pub(super) enum Logged {
    Event(RunEvent),
    Note(RunNote),
}

impl Logged {
    pub(super) fn event(&self) -> RunEvent {
        match self {
            Logged::Event(e) => e.clone(),
            Logged::Note(n) => n.event(),
        }
    }
}

/// What [`Inner::expiry`] drops when its time comes.
pub(super) enum Kept {
    Result(Arc<str>),
    Chord(String),
}

impl Inner {
    /// Drops the results and chord counts whose time is up at `now`.
    pub(super) fn expire(&mut self, now: i64) {
        while let Some((at, _)) = self.expiry.front()
            && *at <= now
        {
            let Some((at, kept)) = self.expiry.pop_front() else {
                break;
            };
            match kept {
                Kept::Result(id) => {
                    if self.results.get(&*id).is_some_and(|r| r.until <= at) {
                        self.results.remove(&*id);
                    }
                }
                Kept::Chord(key) => {
                    self.chords.remove(&key);
                }
            }
        }
    }

    /// Whether run `id` is revoked at `now` (its revoke not yet expired).
    pub(super) fn is_revoked(&self, id: &str, now: i64) -> bool {
        self.revoked.get(id).is_some_and(|&until| until > now)
    }

    pub(super) fn queue(&mut self, name: &str) -> &mut Queue {
        if !self.queues.contains_key(name) {
            self.queues.insert(name.to_string(), Queue::default());
        }
        self.queues.get_mut(name).expect("just inserted")
    }

    pub(super) fn push(&mut self, m: Message, now: i64) {
        match m.eta {
            Some(eta) if eta > now => {
                self.seq += 1;
                let seq = self.seq;
                self.queue(&m.queue).delayed.insert((eta, seq), Arc::new(m));
            }
            _ => {
                let s = step(&m);
                self.queue(&m.queue).steps[s].push_back(Entry::fresh(Arc::new(m)));
            }
        }
    }

    /// Moves what is due on `queue` to its steps.
    pub(super) fn promote(&mut self, queue: &str, now: i64) {
        let Some(q) = self.queues.get_mut(queue) else {
            return;
        };
        while let Some(entry) = q.delayed.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let m = entry.remove();
            q.steps[step(&m)].push_back(Entry::fresh(m));
        }
    }
}

pub(super) struct Shared {
    pub(super) inner: Mutex<Inner>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) published: Notify,
    /// The `wait`s on results, by run: a store wakes only its own run's.
    pub(super) waits: crate::broker::run_waits::RunWaits,
    pub(super) opts: MemoryOptions,
    /// The apps on this broker (on any of its handles), told of each
    /// terminate.
    pub(super) hearers: crate::task::terminate::Hearers,
    /// The apps on this broker, asked each remote command.
    pub(super) answerers: crate::task::control::Answerers,
    /// The task limits its workers share: every worker that can reach it
    /// is in this process.
    pub(super) limits: Arc<crate::task::limits::Local>,
}
