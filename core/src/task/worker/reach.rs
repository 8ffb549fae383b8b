//! How far a worker's default prefetch reaches.
//!
//! Celery's four messages per slot keep every slot fed while runs take
//! milliseconds or more, and keep a worker from hoarding what another
//! worker could run. For runs of tens of microseconds four per slot is too
//! few: the claim that refills them is a round trip queued behind the
//! worker's own writes, and the slots wait on it. A no-op Redis drain at
//! concurrency 4 ran 42-47k/s with 16 held, 52k/s with 32, 54k/s with 64
//! and 58k/s with 128 (back to back, one machine): each claim and each
//! round of stores carried more.
//!
//! So when the prefetch is not given, it reaches as far as the work the
//! worker finishes in [`WINDOW_NS`] at its recent rate, never below the
//! floor (four per slot, as Celery's) and never above [`CEILING`] times it.
//! Since a worker finishes at most `concurrency / run time` runs a second,
//! the reach is at most `concurrency × 2 ms / run time`: runs of 2 ms or
//! longer never lift it off the floor, and what a worker holds beyond the
//! floor is always about 2 ms of its own work — what another worker waits
//! for at the most. A prefetch that is given (or a prefetch multiplier) is
//! kept exactly. On RabbitMQ, which pushes rather than being claimed
//! from, the worker tells the broker its reach as it moves
//! ([`worth_telling`]) and the channel's `basic.qos` follows it.
//!
//! Sans-I/O: the time and the count of runs finished are passed in.

/// How much of its own recent work a worker may hold beyond the floor: the
/// round trip of a claim under load is a few hundred microseconds, so 2 ms
/// covers several while another worker waits at most that long for what
/// this one holds.
pub(super) const WINDOW_NS: u64 = 2_000_000;

/// The reach is at most this many times the floor (128 at the default
/// concurrency of 4: the drain above gained little past it).
pub(super) const CEILING: usize = 8;

/// How often the rate is sampled: a run every 5 ms is too few to matter.
const SAMPLE_NS: u64 = 5_000_000;

/// The prefetch a claim loop claims against, turn by turn.
#[derive(Debug, Clone)]
pub(super) struct Reach {
    /// Whether the prefetch was left to the worker (else it is kept as
    /// given).
    auto: bool,
    /// When the current sample began, and the runs finished by then.
    since: Option<(u64, u64)>,
    /// Runs finished per nanosecond, smoothed over samples.
    rate: f64,
}

impl Reach {
    /// `auto` when the prefetch was not given.
    pub(super) fn new(auto: bool) -> Reach {
        Reach {
            auto,
            since: None,
            rate: 0.0,
        }
    }

    /// The prefetch to claim against at `now` (ns, any fixed origin), with
    /// `done` runs finished so far and `floor` the prefetch as configured
    /// (remote control may have moved it).
    pub(super) fn prefetch(&mut self, floor: usize, now: u64, done: u64) -> usize {
        if !self.auto {
            return floor;
        }
        match self.since {
            None => self.since = Some((now, done)),
            Some((t, d)) if now.saturating_sub(t) >= SAMPLE_NS => {
                let fresh = done.saturating_sub(d) as f64 / now.saturating_sub(t) as f64;
                // Half of each new sample: a burst lifts the reach within
                // a few samples, and an idle spell lowers it as fast.
                self.rate = (self.rate + fresh) / 2.0;
                self.since = Some((now, done));
            }
            Some(_) => {}
        }
        // `as` saturates: a rate past any count is the ceiling.
        ((self.rate * WINDOW_NS as f64).round() as usize)
            .clamp(floor, floor.saturating_mul(CEILING))
    }
}

/// Whether a prefetch moved far enough from the one last told the broker
/// (`told`, 0 when none was) to tell it again ([`crate::task::spec::Broker::reach`]):
/// by a quarter or more, or back to the `floor`. RabbitMQ's window is
/// set by a `basic.qos` round trip, and the reach moves a little at every
/// sample (each 5 ms) under a steady load.
pub(super) fn worth_telling(told: usize, prefetch: usize, floor: usize) -> bool {
    told == 0
        || (prefetch == floor && told != floor)
        || prefetch.saturating_mul(4) >= told.saturating_mul(5)
        || prefetch.saturating_mul(5) <= told.saturating_mul(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Feeds `per_ms` runs a millisecond for `ms` milliseconds from
    /// `at` (ms) with `done` finished so far, a turn a millisecond;
    /// answers the last prefetch, the time and the count at the end.
    fn feed(
        r: &mut Reach,
        floor: usize,
        at: u64,
        done: u64,
        ms: u64,
        per_ms: u64,
    ) -> (usize, u64, u64) {
        let mut done = done;
        let mut p = 0;
        for t in at..=at + ms {
            p = r.prefetch(floor, t * MS, done);
            done += per_ms;
        }
        (p, at + ms + 1, done)
    }

    #[test]
    fn the_broker_is_told_of_moves_of_a_quarter_and_of_the_floor() {
        assert!(worth_telling(0, 16, 16), "the first is always told");
        assert!(!worth_telling(16, 16, 16));
        assert!(!worth_telling(64, 70, 16), "a small move is not");
        assert!(!worth_telling(64, 55, 16), "nor a small fall");
        assert!(worth_telling(64, 80, 16), "a quarter up is");
        assert!(worth_telling(80, 64, 16), "a fifth down is (back to 64)");
        assert!(worth_telling(18, 16, 16), "back to the floor always is");
    }

    #[test]
    fn a_given_prefetch_is_kept_whatever_the_rate() {
        let mut r = Reach::new(false);
        assert_eq!(feed(&mut r, 16, 0, 0, 100, 1000).0, 16);
    }

    #[test]
    fn short_runs_lift_the_reach_to_two_ms_of_work() {
        // 40 runs a millisecond: 2 ms of work is 80.
        let mut r = Reach::new(true);
        assert_eq!(r.prefetch(16, 0, 0), 16, "the floor until a sample");
        let (p, _, _) = feed(&mut r, 16, 0, 0, 100, 40);
        assert_eq!(p, 80);
    }

    #[test]
    fn the_reach_stops_at_its_ceiling() {
        let mut r = Reach::new(true);
        assert_eq!(feed(&mut r, 16, 0, 0, 100, 1000).0, 16 * CEILING);
    }

    #[test]
    fn runs_of_two_ms_or_more_never_lift_it_off_the_floor() {
        // Concurrency 4, runs of 2 ms: 2 runs a millisecond.
        let mut r = Reach::new(true);
        assert_eq!(feed(&mut r, 16, 0, 0, 200, 2).0, 16);
    }

    #[test]
    fn an_idle_spell_brings_it_back_to_the_floor() {
        let mut r = Reach::new(true);
        let (high, at, done) = feed(&mut r, 16, 0, 0, 100, 1000);
        assert_eq!(high, 16 * CEILING);
        let (low, _, _) = feed(&mut r, 16, at, done, 100, 0);
        assert_eq!(low, 16);
    }

    #[test]
    fn the_floor_moves_with_remote_control() {
        let mut r = Reach::new(true);
        let (p, at, done) = feed(&mut r, 16, 0, 0, 100, 40);
        assert_eq!(p, 80);
        assert_eq!(r.prefetch(100, at * MS, done), 100, "a higher floor wins");
        assert_eq!(
            r.prefetch(4, at * MS, done),
            4 * CEILING,
            "a lower one bounds it"
        );
    }
}
