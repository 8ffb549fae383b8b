//! The bookkeeping a beat and an in-process scheduler share: named entries,
//! each with a [`Rhythm`] and the time it is next due.
//!
//! A timetable never reads a clock and never sleeps. A runtime asks
//! [`Timetable::next_wake`], sleeps until then on whatever clock it has (the
//! real one, or the virtual one in tests), and calls [`Timetable::due`] with
//! the time it woke. What is due, and what comes next, is decided here, so the
//! Python and Node drivers cannot disagree.

use super::rhythm::Rhythm;

/// One named entry: what fires, and when next.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    name: String,
    rhythm: Rhythm,
    /// `None` once the rhythm never fires again.
    next: Option<i64>,
}

/// Named entries on rhythms, and when each is next due.
///
/// The name identifies the entry, not the job: the same task may be scheduled
/// twice under two names on two rhythms (the seed's `Beat::add`).
///
/// Entries are kept in a small vector and scanned: a beat has a handful to a
/// few thousand entries, and a scan of those costs less than one wake-up.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timetable {
    entries: Vec<Entry>,
}

impl Timetable {
    /// An empty timetable.
    pub fn new() -> Self {
        Timetable::default()
    }

    /// Adds an entry, or replaces the one with the same name; it is first due
    /// at `rhythm.first(now)`.
    ///
    /// Replacing restarts the rhythm from `now`: a beat reloaded with a new
    /// schedule for an old name follows the new schedule, not the old phase.
    pub fn add(&mut self, name: &str, rhythm: Rhythm, now: i64) {
        let next = rhythm.first(now);
        match self.entries.iter_mut().find(|e| e.name == name) {
            Some(entry) => {
                entry.rhythm = rhythm;
                entry.next = next;
            }
            None => self.entries.push(Entry {
                name: name.to_string(),
                rhythm,
                next,
            }),
        }
    }

    /// Removes the entry named `name`; `false` when there was none (including
    /// a one-off that has already fired and been dropped).
    pub fn remove(&mut self, name: &str) -> bool {
        match self.entries.iter().position(|e| e.name == name) {
            Some(i) => {
                self.entries.remove(i);
                true
            }
            None => false,
        }
    }

    /// The entry names and when each is next due, soonest first (ties by
    /// name, so the order is the same on every run); an entry that never
    /// fires again is left out.
    ///
    /// What `beat.pending()` shows: a test or an operator reads what will
    /// happen, and in which order, without waiting for it.
    pub fn pending(&self) -> Vec<(String, i64)> {
        let mut out: Vec<(String, i64)> = self
            .entries
            .iter()
            .filter_map(|e| e.next.map(|at| (e.name.clone(), at)))
            .collect();
        out.sort_unstable_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        out
    }

    /// Everything due at `now`: each entry's name and the due time it fires
    /// for, oldest first (ties by name). Each entry fires at most once per
    /// call.
    ///
    /// Phase is kept: the next due time is `rhythm.after(due)`, computed from
    /// the time that was due, not from `now`, so an hourly job fires on the
    /// same minute every hour however late a tick runs.
    ///
    /// A tick so late that several slots of one entry passed fires it once,
    /// for the latest passed slot, and the entry is next due at its first slot
    /// strictly after `now`. Missed runs are coalesced, not replayed: a job
    /// every minute on a laptop that slept all night runs once on waking, not
    /// five hundred times (APScheduler's `coalesce=True`; Celery beat does not
    /// replay missed runs either).
    ///
    /// An entry that has fired for the last time (an `At`) is dropped, so a
    /// scheduler of one-off jobs does not grow without end (APScheduler removes
    /// a job whose trigger has no next fire time).
    pub fn due(&mut self, now: i64) -> Vec<(String, i64)> {
        let mut fired = Vec::new();
        for entry in &mut self.entries {
            let Some(due) = entry.next else { continue };
            if due > now {
                continue;
            }
            let (fire_for, next) = entry.rhythm.catch_up(due, now);
            entry.next = next;
            fired.push((entry.name.clone(), fire_for));
        }
        if !fired.is_empty() {
            self.entries.retain(|e| e.next.is_some());
            fired.sort_unstable_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        }
        fired
    }

    /// When the soonest entry is due; `None` when nothing is pending. What a
    /// runtime sleeps until.
    pub fn next_wake(&self) -> Option<i64> {
        self.entries.iter().filter_map(|e| e.next).min()
    }

    /// How many entries are held (pending or not).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::super::rhythm::{Cron, Every};
    use super::*;

    fn every(ms: i64) -> Rhythm {
        Rhythm::Every(Every::new(ms).unwrap())
    }

    fn cron(expr: &str, tz: &str) -> Rhythm {
        Rhythm::Cron(Cron::new(expr, tz).unwrap())
    }

    fn ms(rfc3339: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .timestamp_millis()
    }

    fn fired(list: &[(&str, i64)]) -> Vec<(String, i64)> {
        list.iter().map(|(n, t)| (n.to_string(), *t)).collect()
    }

    #[test]
    fn late_tick_keeps_phase() {
        let mut t = Timetable::new();
        t.add("tick", every(1000), 0);
        assert_eq!(t.next_wake(), Some(1000));
        assert_eq!(t.due(999), vec![]);
        // Due at 1000, the tick happens at 1300: fires for 1000, next 2000.
        assert_eq!(t.due(1300), fired(&[("tick", 1000)]));
        assert_eq!(t.pending(), fired(&[("tick", 2000)]));
        assert_eq!(t.next_wake(), Some(2000));
        // Nothing more until 2000, however often it is asked.
        assert_eq!(t.due(1300), vec![]);
        assert_eq!(t.due(1999), vec![]);
        assert_eq!(t.due(2000), fired(&[("tick", 2000)]));
        assert_eq!(t.next_wake(), Some(3000));
    }

    #[test]
    fn missed_slots_coalesce_into_one_run() {
        let mut t = Timetable::new();
        t.add("tick", every(1000), 0);
        // Slots 1000..=5000 all passed: one run, for 5000; next 6000.
        assert_eq!(t.due(5_400), fired(&[("tick", 5000)]));
        assert_eq!(t.pending(), fired(&[("tick", 6000)]));
        // Phase is still the original one.
        assert_eq!(t.due(6_000), fired(&[("tick", 6000)]));
        assert_eq!(t.next_wake(), Some(7000));
    }

    #[test]
    fn a_cron_entry_asleep_for_a_night_fires_once() {
        let mut t = Timetable::new();
        let start = ms("2026-05-01T22:00:30Z");
        t.add("minutely", cron("* * * * *", "UTC"), start);
        assert_eq!(t.next_wake(), Some(ms("2026-05-01T22:01:00Z")));
        let morning = ms("2026-05-02T07:30:10Z");
        assert_eq!(
            t.due(morning),
            fired(&[("minutely", ms("2026-05-02T07:30:00Z"))])
        );
        assert_eq!(t.next_wake(), Some(ms("2026-05-02T07:31:00Z")));
    }

    #[test]
    fn at_in_the_past_fires_once_then_never() {
        let mut t = Timetable::new();
        t.add("once", Rhythm::At(500), 10_000);
        assert_eq!(t.pending(), fired(&[("once", 500)]));
        assert_eq!(t.next_wake(), Some(500));
        assert_eq!(t.due(10_000), fired(&[("once", 500)]));
        assert_eq!(t.pending(), vec![]);
        assert_eq!(t.next_wake(), None);
        assert_eq!(t.due(20_000), vec![]);
        // Fired for good, so dropped.
        assert!(t.is_empty());
        assert!(!t.remove("once"));
    }

    #[test]
    fn at_in_the_future_waits() {
        let mut t = Timetable::new();
        t.add("later", Rhythm::At(5_000), 1_000);
        assert_eq!(t.due(4_999), vec![]);
        assert_eq!(t.due(5_000), fired(&[("later", 5_000)]));
        assert_eq!(t.due(6_000), vec![]);
    }

    #[test]
    fn pending_is_soonest_first_then_by_name() {
        let mut t = Timetable::new();
        t.add("c", every(3000), 0);
        t.add("b", every(1000), 0);
        t.add("a", every(3000), 0);
        t.add("z", Rhythm::At(2000), 0);
        assert_eq!(
            t.pending(),
            fired(&[("b", 1000), ("z", 2000), ("a", 3000), ("c", 3000)])
        );
        assert_eq!(t.next_wake(), Some(1000));
    }

    #[test]
    fn due_is_oldest_first_then_by_name() {
        let mut t = Timetable::new();
        t.add("slow", every(3000), 0);
        t.add("fast", every(1000), 0);
        t.add("b-once", Rhythm::At(3000), 0);
        t.add("a-once", Rhythm::At(3000), 0);
        // `fast` coalesces 1000..=3000 into 3000, so all four fire for 3000
        // and the name breaks the tie.
        assert_eq!(
            t.due(3500),
            fired(&[
                ("a-once", 3000),
                ("b-once", 3000),
                ("fast", 3000),
                ("slow", 3000),
            ])
        );
        let mut t = Timetable::new();
        t.add("z", Rhythm::At(100), 0);
        t.add("a", Rhythm::At(200), 0);
        assert_eq!(t.due(300), fired(&[("z", 100), ("a", 200)]));
    }

    #[test]
    fn add_replaces_by_name() {
        let mut t = Timetable::new();
        t.add("job", every(1000), 0);
        t.add("job", every(5000), 100);
        assert_eq!(t.len(), 1);
        assert_eq!(t.pending(), fired(&[("job", 5100)]));
        // The same rhythm under two names is two entries.
        t.add("job-2", every(5000), 100);
        assert_eq!(t.pending(), fired(&[("job", 5100), ("job-2", 5100)]));
    }

    #[test]
    fn remove_drops_only_that_entry() {
        let mut t = Timetable::new();
        t.add("a", every(1000), 0);
        t.add("b", every(2000), 0);
        assert!(t.remove("a"));
        assert!(!t.remove("a"));
        assert!(!t.remove("nope"));
        assert_eq!(t.pending(), fired(&[("b", 2000)]));
        assert_eq!(t.due(10_000), fired(&[("b", 10_000)]));
        assert!(t.remove("b"));
        assert!(t.is_empty());
        assert_eq!(t.next_wake(), None);
        assert_eq!(t.due(100_000), vec![]);
    }

    #[test]
    fn cron_entries_follow_the_time_zone_across_dst() {
        // The daily 02:30 New York job through the spring-forward day.
        let mut t = Timetable::new();
        t.add(
            "nightly",
            cron("30 2 * * *", "America/New_York"),
            ms("2026-03-07T12:00:00Z"),
        );
        assert_eq!(t.next_wake(), Some(ms("2026-03-08T07:00:00Z")));
        assert_eq!(
            t.due(ms("2026-03-08T07:00:02Z")),
            fired(&[("nightly", 1_772_953_200_000)])
        );
        assert_eq!(t.next_wake(), Some(ms("2026-03-09T06:30:00Z")));

        // The daily 01:30 job fires once on the fall-back day, tick by tick.
        let mut t = Timetable::new();
        t.add(
            "early",
            cron("30 1 * * *", "America/New_York"),
            ms("2026-10-31T12:00:00Z"),
        );
        let mut runs = Vec::new();
        let mut now = ms("2026-10-31T12:00:00Z");
        let end = ms("2026-11-02T12:00:00Z");
        while now <= end {
            runs.extend(t.due(now).into_iter().map(|(_, at)| at));
            now += 60_000;
        }
        assert_eq!(
            runs,
            vec![ms("2026-11-01T05:30:00Z"), ms("2026-11-02T06:30:00Z")]
        );
    }

    #[test]
    fn a_runtime_loop_on_next_wake_fires_every_slot() {
        // The driver's loop: sleep to next_wake, call due. Two rhythms over
        // ten seconds of virtual time.
        let mut t = Timetable::new();
        t.add("a", every(2000), 0);
        t.add("b", every(3000), 0);
        let mut log = Vec::new();
        while let Some(wake) = t.next_wake() {
            if wake > 10_000 {
                break;
            }
            log.extend(t.due(wake));
        }
        assert_eq!(
            log,
            fired(&[
                ("a", 2000),
                ("b", 3000),
                ("a", 4000),
                ("a", 6000),
                ("b", 6000),
                ("a", 8000),
                ("b", 9000),
                ("a", 10_000),
            ])
        );
    }
}
