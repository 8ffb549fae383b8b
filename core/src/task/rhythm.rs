//! When something fires: a fixed interval, a crontab line in a time zone, or
//! one moment.
//!
//! A [`Rhythm`] answers two questions and nothing else: when does it first
//! fire from now, and when does it fire next after a time it was due. It never
//! reads a clock. The beat (sends a task) and the in-process scheduler (calls a
//! function) both keep their entries in a [`super::timetable::Timetable`],
//! which asks these two questions; so the two cannot disagree on when
//! something is due.
//!
//! Every time is `i64` milliseconds since the Unix epoch, like the rest of the
//! task side.

use std::fmt;

use chrono::{DateTime, TimeZone};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};

/// When something fires.
///
/// The seed's `Schedule` (moontask): `Every`, `Cron`, `At`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rhythm {
    /// Once per interval.
    Every(Every),
    /// On the minutes a crontab line names, in a time zone.
    Cron(Cron),
    /// Once, at this time (ms since the epoch).
    At(i64),
}

impl Rhythm {
    /// The first time this fires at or after `now`; `None` when it never does.
    ///
    /// - `Every` without an anchor: `now + interval`. A beat that has just
    ///   started has not run the job yet, but it does not know when the job
    ///   last ran either; firing at once on every restart would turn a crash
    ///   loop into a job storm. Celery beat waits `run_every` from the last
    ///   run, APScheduler's `IntervalTrigger` first fires at start +
    ///   interval; both wait, and so do we.
    /// - `Every` with an anchor: the first slot `anchor + k·interval` at or
    ///   after `now`.
    /// - `Cron`: the first matching minute at or after `now`.
    /// - `At(t)`: `t`, even when `t` is already past. A one-off job added a
    ///   little late should still run, once, at once. APScheduler's
    ///   `DateTrigger` does the same within its misfire grace; we have no
    ///   grace to tune, so a past `At` always fires once.
    pub fn first(&self, now: i64) -> Option<i64> {
        match self {
            Rhythm::Every(every) => every.first(now),
            Rhythm::Cron(cron) => cron.first(now),
            Rhythm::At(at) => Some(*at),
        }
    }

    /// The first time this fires strictly after `at`; `None` when it never
    /// fires again.
    ///
    /// Pass the time that was *due*, not the time the tick happened: that is
    /// how a late tick keeps the phase. An hourly job due at 10:00 and run at
    /// 10:00:03 is next due at 11:00, not 11:00:03.
    pub fn after(&self, at: i64) -> Option<i64> {
        match self {
            Rhythm::Every(every) => every.after(at),
            Rhythm::Cron(cron) => cron.after(at),
            Rhythm::At(_) => None,
        }
    }

    /// The slot to fire for, and the next one, when a tick at `now` finds
    /// this entry due at `due` (`due <= now`).
    ///
    /// Normally that is `(due, after(due))`. When the tick is so late that
    /// later slots have passed too, it is the latest passed slot and the first
    /// slot strictly after `now`: missed runs are coalesced into one
    /// (APScheduler's `coalesce=True`; Celery beat does not replay missed
    /// runs either). The answer is computed, not walked slot by slot, so a
    /// process that slept for a week does not spin through ten thousand
    /// minutes to catch up.
    pub(crate) fn catch_up(&self, due: i64, now: i64) -> (i64, Option<i64>) {
        let next = self.after(due);
        match next {
            Some(n) if n <= now => {}
            _ => return (due, next),
        }
        match self {
            Rhythm::Every(every) => every.catch_up(due, now),
            Rhythm::Cron(cron) => {
                let latest = cron.latest(now).map_or(due, |l| l.max(due));
                (latest, cron.after(now))
            }
            // `after` is always `None` for `At`, so this is not reached.
            Rhythm::At(_) => (due, None),
        }
    }
}

/// Once per interval, optionally on slots counted from an anchor.
///
/// Without an anchor the slots are counted from whenever the entry was added;
/// with one they are `anchor + k·interval`, so "every hour, on the hour" is
/// `Every::anchored(3_600_000, 0)`, the same on every machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Every {
    interval: i64,
    anchor: Option<i64>,
}

impl Every {
    /// Every `interval` ms, counted from when the entry is added.
    ///
    /// Refused: an interval of zero or less (a rhythm that never advances
    /// would fire forever in one tick).
    pub fn new(interval: i64) -> Result<Every, RhythmError> {
        if interval <= 0 {
            return Err(RhythmError::Interval(format!(
                "interval must be a positive number of milliseconds, got {interval}"
            )));
        }
        Ok(Every {
            interval,
            anchor: None,
        })
    }

    /// Every `interval` ms, on the slots `anchor + k·interval` for any whole
    /// `k` (the anchor may lie in the past or the future).
    ///
    /// Refused: as [`Every::new`].
    pub fn anchored(interval: i64, anchor: i64) -> Result<Every, RhythmError> {
        let mut every = Every::new(interval)?;
        every.anchor = Some(anchor);
        Ok(every)
    }

    /// The interval in ms.
    pub fn interval(&self) -> i64 {
        self.interval
    }

    /// The anchor the slots are counted from, if any.
    pub fn anchor(&self) -> Option<i64> {
        self.anchor
    }

    fn first(&self, now: i64) -> Option<i64> {
        match self.anchor {
            None => now.checked_add(self.interval),
            Some(anchor) => self.slot_at_or_after(anchor, now),
        }
    }

    fn after(&self, at: i64) -> Option<i64> {
        match self.anchor {
            None => at.checked_add(self.interval),
            Some(anchor) => self.slot_at_or_after(anchor, at.checked_add(1)?),
        }
    }

    /// The latest slot at or before `now` counted from `due`, and the one
    /// after it. `due <= now`; `due` is itself a slot.
    fn catch_up(&self, due: i64, now: i64) -> (i64, Option<i64>) {
        // i128: `now - due` may exceed i64 when the two are far apart.
        let passed = (i128::from(now) - i128::from(due)) / i128::from(self.interval);
        let latest = i128::from(due) + passed * i128::from(self.interval);
        // `due <= latest <= now`, so `latest` fits in i64.
        let latest = latest as i64;
        (latest, latest.checked_add(self.interval))
    }

    /// The first slot `anchor + k·interval` at or after `t`.
    fn slot_at_or_after(&self, anchor: i64, t: i64) -> Option<i64> {
        let (anchor, t, interval) = (i128::from(anchor), i128::from(t), i128::from(self.interval));
        let k = (t - anchor).div_euclid(interval);
        let mut slot = anchor + k * interval;
        if slot < t {
            slot += interval;
        }
        i64::try_from(slot).ok()
    }
}

/// A standard 5-field crontab line evaluated in an IANA time zone.
///
/// Fields: minute, hour, day of month, month, day of week. Each takes `*`,
/// numbers, ranges (`1-5`), lists (`1,15`), steps (`*/5`, `0-30/10`), and
/// names for months and weekdays (`JAN`, `MON-FRI`, any case). When both day
/// of month and day of week are restricted, a day matching either fires
/// (Vixie cron). The `@hourly`, `@daily`, `@weekly`, `@monthly` and `@yearly`
/// nicknames are accepted. Parsing and the search are the croner crate's,
/// which follows POSIX/Vixie cron and the Open Cron Pattern Specification.
///
/// Across daylight-saving changes, in the entry's time zone (croner's
/// documented rules, which are Vixie cron's):
/// - A wall time that does not exist (spring forward): a job at a fixed
///   minute and hour (`30 2 * * *`) is moved to the first instant after the
///   gap, the same day (03:00), so a daily job is never lost; a job with a
///   wildcard or step in the minute or hour (`*/5 * * * *`) just skips the
///   minutes that did not happen.
/// - A wall time that happens twice (fall back): a fixed-time job fires once,
///   at the first of the two; a wildcard or step job fires on both passes,
///   so `*/30` stays every 30 real minutes.
///
/// Only 5 fields: a seconds or a years field is refused rather than silently
/// read as something else (a 6-field line means seconds to Quartz and
/// Spring but a year to others).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    expr: String,
    tz: Tz,
    /// Boxed: croner's parsed form is ~300 bytes, and a `Rhythm` of any
    /// kind would otherwise be that size.
    parsed: Box<croner::Cron>,
}

impl Cron {
    /// The zone a line is read in when none is named: UTC, so a line fires
    /// at the same instants on every machine, in either language.
    pub const DEFAULT_TZ: &'static str = "UTC";

    /// `expr` in the zone `tz` names, or in [`Cron::DEFAULT_TZ`] when none
    /// is given (what `Cron(expr)` means in both bindings).
    pub fn in_zone(expr: &str, tz: Option<&str>) -> Result<Cron, RhythmError> {
        Cron::new(expr, tz.unwrap_or(Cron::DEFAULT_TZ))
    }

    /// `expr` evaluated in the time zone named `tz` (`"UTC"`,
    /// `"Europe/London"`).
    ///
    /// Refused: a line that does not have exactly 5 fields, one croner
    /// cannot parse, one that can never fire (`0 0 30 2 *`), and a time
    /// zone name not in the IANA database (names are case-sensitive, as the
    /// database spells them).
    pub fn new(expr: &str, tz: &str) -> Result<Cron, RhythmError> {
        let zone: Tz = tz
            .parse()
            .map_err(|_| RhythmError::Timezone(tz.to_string()))?;
        let refuse = |why: String| RhythmError::Cron {
            expr: expr.to_string(),
            why,
        };
        let trimmed = expr.trim();
        if !trimmed.starts_with('@') {
            let fields = trimmed.split_whitespace().count();
            if fields != 5 {
                return Err(refuse(format!(
                    "has {fields} fields; expected exactly 5 \
                     (minute hour day-of-month month day-of-week), no seconds or years"
                )));
            }
            // croner reads `,` or `1,,2` as a list with nothing in it, a
            // field no time matches, and the search for the first time it
            // fires then walks every day to year 5000 (seconds of CPU;
            // found by `bench/fuzz.sh`).
            if let Some(field) = trimmed
                .split_whitespace()
                .find(|f| f.split(',').any(str::is_empty))
            {
                return Err(refuse(format!(
                    "field {field:?} has an empty item in its list"
                )));
            }
        }
        let parsed = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(trimmed)
            .map_err(|e| refuse(e.to_string()))?;
        let cron = Cron {
            expr: expr.to_string(),
            tz: zone,
            parsed: Box::new(parsed),
        };
        // A line like `0 0 31 2 *` parses but names no real day. Refusing it
        // here beats an entry that silently never fires.
        if cron.first(0).is_none() {
            return Err(refuse("never fires: no date matches it".to_string()));
        }
        Ok(cron)
    }

    /// The crontab line as given.
    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// The IANA name of the time zone the line is read in.
    pub fn tz_name(&self) -> &str {
        self.tz.name()
    }

    fn first(&self, now: i64) -> Option<i64> {
        // Matches are whole minutes, so round up to a whole second and search
        // inclusively: a match at `now` itself counts.
        let second = now.div_euclid(1000) + i64::from(now.rem_euclid(1000) != 0);
        self.next_from_second(second)
    }

    fn after(&self, at: i64) -> Option<i64> {
        // The next whole second strictly after `at`.
        self.next_from_second(at.div_euclid(1000).checked_add(1)?)
    }

    /// The latest match at or before `now`.
    fn latest(&self, now: i64) -> Option<i64> {
        let start = self.zoned(now.div_euclid(1000))?;
        let found = self.parsed.find_previous_occurrence(&start, true).ok()?;
        Some(found.timestamp_millis())
    }

    /// The first match at or after the whole second `second`.
    fn next_from_second(&self, second: i64) -> Option<i64> {
        let start = self.zoned(second)?;
        // An error here is croner's search limit (year 5000): never again.
        let found = self.parsed.find_next_occurrence(&start, true).ok()?;
        Some(found.timestamp_millis())
    }

    /// The whole second `second` as a time in this zone. The exact instant is
    /// kept, so in a repeated hour croner knows which pass it is on.
    fn zoned(&self, second: i64) -> Option<DateTime<Tz>> {
        let utc = DateTime::from_timestamp(second, 0)?;
        Some(self.tz.from_utc_datetime(&utc.naive_utc()))
    }
}

/// Why a rhythm was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RhythmError {
    /// An `Every` interval that is not a positive number of ms.
    Interval(String),
    /// A crontab line that is not 5 valid fields, or never fires.
    Cron {
        /// The line as given.
        expr: String,
        /// What is wrong with it.
        why: String,
    },
    /// A time zone name not in the IANA database.
    Timezone(String),
}

impl fmt::Display for RhythmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RhythmError::Interval(why) => write!(f, "Every: {why}"),
            RhythmError::Cron { expr, why } => write!(f, "Cron expr {expr:?}: {why}"),
            RhythmError::Timezone(name) => write!(
                f,
                "Cron tz {name:?}: not an IANA time zone name (e.g. \"UTC\", \"Europe/London\")"
            ),
        }
    }
}

impl std::error::Error for RhythmError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// `2026-03-08T07:00:00Z` style literals into epoch ms.
    fn ms(rfc3339: &str) -> i64 {
        DateTime::parse_from_rfc3339(rfc3339)
            .expect("test literal")
            .timestamp_millis()
    }

    fn cron(expr: &str, tz: &str) -> Rhythm {
        Rhythm::Cron(Cron::new(expr, tz).expect("valid cron"))
    }

    /// The next `n` fire times after `from` (exclusive), walking `after`.
    fn walk(rhythm: &Rhythm, from: i64, n: usize) -> Vec<i64> {
        let mut out = Vec::with_capacity(n);
        let mut at = from;
        for _ in 0..n {
            at = rhythm.after(at).expect("fires again");
            out.push(at);
        }
        out
    }

    #[test]
    fn every_waits_one_interval_then_keeps_phase() {
        let every = Rhythm::Every(Every::new(1000).unwrap());
        assert_eq!(every.first(5_000), Some(6_000));
        assert_eq!(every.after(6_000), Some(7_000));
        // After is counted from the time passed in, so a caller passing the
        // due time keeps the phase.
        assert_eq!(every.after(1_000), Some(2_000));
    }

    #[test]
    fn every_anchored_lands_on_slots() {
        let hourly = Rhythm::Every(Every::anchored(3_600_000, 0).unwrap());
        let at = ms("2026-05-01T10:17:00Z");
        assert_eq!(hourly.first(at), Some(ms("2026-05-01T11:00:00Z")));
        // A slot exactly at now counts for first, not for after.
        let on_slot = ms("2026-05-01T10:00:00Z");
        assert_eq!(hourly.first(on_slot), Some(on_slot));
        assert_eq!(hourly.after(on_slot), Some(ms("2026-05-01T11:00:00Z")));
        // An anchor in the future still counts slots backwards from it.
        let ahead = Rhythm::Every(Every::anchored(1000, 10_500).unwrap());
        assert_eq!(ahead.first(0), Some(500));
        assert_eq!(ahead.first(-1), Some(500));
        assert_eq!(ahead.first(-500), Some(-500));
        assert_eq!(ahead.after(500), Some(1500));
    }

    #[test]
    fn every_near_the_end_of_time_never_fires_again() {
        let every = Rhythm::Every(Every::new(1000).unwrap());
        assert_eq!(every.after(i64::MAX - 10), None);
        let anchored = Rhythm::Every(Every::anchored(1000, 0).unwrap());
        assert_eq!(anchored.after(i64::MAX - 10), None);
    }

    #[test]
    fn every_catch_up_coalesces_to_latest_slot() {
        let every = Rhythm::Every(Every::new(1000).unwrap());
        assert_eq!(every.catch_up(1000, 1300), (1000, Some(2000)));
        assert_eq!(every.catch_up(1000, 4500), (4000, Some(5000)));
        assert_eq!(every.catch_up(1000, 4000), (4000, Some(5000)));
    }

    #[test]
    fn at_fires_once_even_in_the_past() {
        let at = Rhythm::At(1_000);
        assert_eq!(at.first(50_000), Some(1_000));
        assert_eq!(at.first(0), Some(1_000));
        assert_eq!(at.after(1_000), None);
        assert_eq!(at.after(0), None);
    }

    #[test]
    fn cron_every_five_minutes() {
        let five = cron("*/5 * * * *", "UTC");
        let t = ms("2026-05-01T10:02:30Z");
        assert_eq!(five.first(t), Some(ms("2026-05-01T10:05:00Z")));
        assert_eq!(
            walk(&five, t, 3),
            vec![
                ms("2026-05-01T10:05:00Z"),
                ms("2026-05-01T10:10:00Z"),
                ms("2026-05-01T10:15:00Z")
            ]
        );
        // On a match: first includes it, after does not.
        let on = ms("2026-05-01T10:05:00Z");
        assert_eq!(five.first(on), Some(on));
        assert_eq!(five.after(on), Some(ms("2026-05-01T10:10:00Z")));
        // A millisecond past a match is past it.
        assert_eq!(five.first(on + 1), Some(ms("2026-05-01T10:10:00Z")));
        assert_eq!(five.after(on - 1), Some(on));
        // Across the hour and the day.
        let late = ms("2026-05-01T23:58:00Z");
        assert_eq!(five.after(late), Some(ms("2026-05-02T00:00:00Z")));
    }

    #[test]
    fn cron_ranges_lists_and_names() {
        let r = cron("0,30 8-9 * JAN,FEB mon", "UTC");
        // 2026-01-30 is a Friday; the next Monday is 2026-02-02.
        let t = ms("2026-01-30T09:31:00Z");
        assert_eq!(
            walk(&r, t, 5),
            vec![
                ms("2026-02-02T08:00:00Z"),
                ms("2026-02-02T08:30:00Z"),
                ms("2026-02-02T09:00:00Z"),
                ms("2026-02-02T09:30:00Z"),
                ms("2026-02-09T08:00:00Z"),
            ]
        );
        // February's last Monday at 09:30 is followed by next January's first.
        assert_eq!(
            r.after(ms("2026-02-23T09:30:00Z")),
            Some(ms("2027-01-04T08:00:00Z"))
        );
    }

    #[test]
    fn cron_day_of_month_or_day_of_week() {
        // Vixie: both restricted means either. 2026-02-13 is a Friday the 13th;
        // the 13th of March is also a Friday; Fridays in between fire too.
        let r = cron("0 0 13 * FRI", "UTC");
        assert_eq!(
            walk(&r, ms("2026-02-12T00:00:00Z"), 5),
            vec![
                ms("2026-02-13T00:00:00Z"),
                ms("2026-02-20T00:00:00Z"),
                ms("2026-02-27T00:00:00Z"),
                ms("2026-03-06T00:00:00Z"),
                ms("2026-03-13T00:00:00Z"),
            ]
        );
        // Only day of month restricted: just the 13ths.
        let dom = cron("0 0 13 * *", "UTC");
        assert_eq!(
            dom.after(ms("2026-02-13T00:00:00Z")),
            Some(ms("2026-03-13T00:00:00Z"))
        );
    }

    #[test]
    fn cron_weekdays_in_london() {
        let r = cron("0 9 * * MON-FRI", "Europe/London");
        // Winter (GMT): 09:00 London is 09:00 UTC. 2026-01-09 is a Friday.
        let fri = ms("2026-01-09T09:00:00Z");
        assert_eq!(r.first(ms("2026-01-09T08:00:00Z")), Some(fri));
        assert_eq!(r.after(fri), Some(ms("2026-01-12T09:00:00Z")));
        // Summer (BST, UTC+1): 09:00 London is 08:00 UTC. 2026-07-03 is a Friday.
        let summer = ms("2026-07-03T08:00:00Z");
        assert_eq!(r.first(ms("2026-07-03T07:30:00Z")), Some(summer));
        assert_eq!(r.after(summer), Some(ms("2026-07-06T08:00:00Z")));
        // Across the spring change (2026-03-29, a Sunday): Friday 27th in GMT,
        // Monday 30th in BST.
        assert_eq!(
            r.after(ms("2026-03-26T09:00:00Z")),
            Some(ms("2026-03-27T09:00:00Z"))
        );
        assert_eq!(
            r.after(ms("2026-03-27T09:00:00Z")),
            Some(ms("2026-03-30T08:00:00Z"))
        );
    }

    #[test]
    fn cron_midnight_in_tokyo_is_the_previous_afternoon_in_utc() {
        let r = cron("0 0 * * *", "Asia/Tokyo");
        assert_eq!(
            r.first(ms("2026-05-01T12:00:00Z")),
            Some(ms("2026-05-01T15:00:00Z"))
        );
        assert_eq!(
            r.after(ms("2026-05-01T15:00:00Z")),
            Some(ms("2026-05-02T15:00:00Z"))
        );
        // The same line in UTC is nine hours later.
        let utc = cron("0 0 * * *", "UTC");
        assert_eq!(
            utc.first(ms("2026-05-01T12:00:00Z")),
            Some(ms("2026-05-02T00:00:00Z"))
        );
    }

    #[test]
    fn cron_spring_forward_moves_a_missing_fixed_time_past_the_gap() {
        // New York, 2026-03-08: 02:00 EST jumps to 03:00 EDT; 02:30 does not
        // exist. The daily 02:30 job runs at 03:00 EDT (07:00Z) that day.
        let r = cron("30 2 * * *", "America/New_York");
        let before = ms("2026-03-07T02:30:00-05:00");
        assert_eq!(before, ms("2026-03-07T07:30:00Z"));
        assert_eq!(
            walk(&r, before, 3),
            vec![
                ms("2026-03-08T07:00:00Z"), // 03:00 EDT, the first instant after the gap
                ms("2026-03-09T06:30:00Z"), // 02:30 EDT
                ms("2026-03-10T06:30:00Z"),
            ]
        );
        // Exact epoch ms, so a binding test can compare numbers.
        assert_eq!(ms("2026-03-08T07:00:00Z"), 1_772_953_200_000);
    }

    #[test]
    fn cron_spring_forward_skips_missing_minutes_of_a_step_job() {
        // `*/30` only fires on minutes that happen: 01:30 EST, then 03:00 EDT.
        let r = cron("*/30 * * * *", "America/New_York");
        assert_eq!(
            walk(&r, ms("2026-03-08T01:00:00-05:00"), 3),
            vec![
                ms("2026-03-08T01:30:00-05:00"),
                ms("2026-03-08T03:00:00-04:00"),
                ms("2026-03-08T03:30:00-04:00"),
            ]
        );
        assert_eq!(ms("2026-03-08T03:00:00-04:00"), ms("2026-03-08T07:00:00Z"));
    }

    #[test]
    fn cron_fall_back_fires_a_repeated_fixed_time_once() {
        // New York, 2026-11-01: 02:00 EDT falls back to 01:00 EST, so 01:30
        // happens at 05:30Z (EDT) and again at 06:30Z (EST). It fires once, at
        // the first.
        let r = cron("30 1 * * *", "America/New_York");
        let first_pass = ms("2026-11-01T05:30:00Z");
        assert_eq!(first_pass, 1_793_511_000_000);
        assert_eq!(r.first(ms("2026-11-01T00:00:00-04:00")), Some(first_pass));
        // Next is the following day's 01:30 EST, not the second pass.
        assert_eq!(r.after(first_pass), Some(ms("2026-11-02T06:30:00Z")));
        // Even asked from inside the repeated hour, between the two passes.
        assert_eq!(
            r.first(ms("2026-11-01T06:00:00Z")),
            Some(ms("2026-11-02T06:30:00Z"))
        );
        // The daily 02:30 job just moves from EDT to EST.
        let r = cron("30 2 * * *", "America/New_York");
        assert_eq!(
            walk(&r, ms("2026-10-31T06:30:00Z"), 2),
            vec![ms("2026-11-01T07:30:00Z"), ms("2026-11-02T07:30:00Z")]
        );
    }

    #[test]
    fn cron_fall_back_runs_a_step_job_on_both_passes() {
        let r = cron("*/30 * * * *", "America/New_York");
        assert_eq!(
            walk(&r, ms("2026-11-01T04:30:00Z"), 5),
            vec![
                ms("2026-11-01T05:00:00Z"), // 01:00 EDT
                ms("2026-11-01T05:30:00Z"), // 01:30 EDT
                ms("2026-11-01T06:00:00Z"), // 01:00 EST
                ms("2026-11-01T06:30:00Z"), // 01:30 EST
                ms("2026-11-01T07:00:00Z"), // 02:00 EST
            ]
        );
    }

    #[test]
    fn cron_catch_up_coalesces_to_latest_match() {
        let r = cron("*/5 * * * *", "UTC");
        let due = ms("2026-05-01T10:05:00Z");
        // On time: fire for due, next is the following slot.
        assert_eq!(
            r.catch_up(due, due + 1_000),
            (due, Some(ms("2026-05-01T10:10:00Z")))
        );
        // Three days late: one run, for the latest passed slot.
        let now = ms("2026-05-04T07:12:00Z");
        assert_eq!(
            r.catch_up(due, now),
            (ms("2026-05-04T07:10:00Z"), Some(ms("2026-05-04T07:15:00Z")))
        );
        // Exactly on a later slot: that slot is the latest passed.
        let now = ms("2026-05-01T10:20:00Z");
        assert_eq!(
            r.catch_up(due, now),
            (now, Some(ms("2026-05-01T10:25:00Z")))
        );
    }

    #[test]
    fn cron_accessors_and_nicknames() {
        let c = Cron::new("*/5 * * * *", "Europe/London").unwrap();
        assert_eq!(c.expr(), "*/5 * * * *");
        assert_eq!(c.tz_name(), "Europe/London");
        let daily = cron("@daily", "UTC");
        assert_eq!(
            daily.first(ms("2026-05-01T10:00:00Z")),
            Some(ms("2026-05-02T00:00:00Z"))
        );
    }

    #[test]
    fn bad_intervals_are_refused() {
        for bad in [0, -1, i64::MIN] {
            let err = Every::new(bad).unwrap_err();
            assert!(matches!(err, RhythmError::Interval(_)), "{bad}: {err:?}");
            assert!(err.to_string().contains("positive"), "{err}");
            assert!(err.to_string().contains(&bad.to_string()), "{err}");
            assert!(matches!(
                Every::anchored(bad, 0),
                Err(RhythmError::Interval(_))
            ));
        }
    }

    #[test]
    fn a_line_without_a_zone_is_read_in_utc() {
        let c = Cron::in_zone("0 8 * * *", None).unwrap();
        assert_eq!(c.tz_name(), Cron::DEFAULT_TZ);
        assert_eq!(c, Cron::new("0 8 * * *", "UTC").unwrap());
        let london = Cron::in_zone("0 8 * * *", Some("Europe/London")).unwrap();
        assert_eq!(london.tz_name(), "Europe/London");
        assert!(Cron::in_zone("0 8 * * *", Some("Mars/Olympus")).is_err());
    }

    #[test]
    fn six_and_seven_field_lines_are_refused() {
        for expr in ["0 */5 * * * *", "0 0 12 * * ? 2026", "* * * *"] {
            match Cron::new(expr, "UTC") {
                Err(RhythmError::Cron { expr: got, why }) => {
                    assert_eq!(got, expr);
                    assert!(why.contains("exactly 5"), "{why}");
                }
                other => panic!("{expr}: {other:?}"),
            }
        }
        let err = Cron::new("0 */5 * * * *", "UTC").unwrap_err();
        assert!(err.to_string().contains("has 6 fields"), "{err}");
    }

    #[test]
    fn garbage_lines_are_refused() {
        for expr in [
            "",
            "banana",
            "61 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "* * * 13 *",
            "* * * * FUNDAY",
            "a b c d e",
            "@fortnightly",
            // Empty list items (once a search of every day to year 5000).
            "30 , * * *",
            "1,,2 * * * *",
            "* * 3, * *",
            "* * * * ,MON",
        ] {
            match Cron::new(expr, "UTC") {
                Err(RhythmError::Cron { expr: got, why }) => {
                    assert_eq!(got, expr);
                    assert!(!why.is_empty());
                }
                other => panic!("{expr:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn an_empty_list_item_is_refused_by_name() {
        let err = Cron::new("30 , * * *", "Europe/Paris").unwrap_err();
        assert!(err.to_string().contains("\",\" has an empty item"), "{err}");
        // The control: the same line with a list in it is read.
        assert!(Cron::new("30 1,2 * * *", "Europe/Paris").is_ok());
    }

    #[test]
    fn a_line_that_never_fires_is_refused() {
        let err = Cron::new("0 0 31 2 *", "UTC").unwrap_err();
        assert!(err.to_string().contains("never fires"), "{err}");
        // February 29th does fire, in leap years.
        let leap = cron("0 0 29 2 *", "UTC");
        assert_eq!(
            leap.first(ms("2026-05-01T00:00:00Z")),
            Some(ms("2028-02-29T00:00:00Z"))
        );
    }

    #[test]
    fn unknown_time_zones_are_refused() {
        for tz in ["Mars/Olympus", "", "europe/london", "UTC+1"] {
            match Cron::new("* * * * *", tz) {
                Err(RhythmError::Timezone(name)) => assert_eq!(name, tz),
                other => panic!("{tz:?}: {other:?}"),
            }
        }
        let err = Cron::new("* * * * *", "Mars/Olympus").unwrap_err();
        assert!(err.to_string().contains("Mars/Olympus"), "{err}");
        assert!(err.to_string().contains("IANA"), "{err}");
    }
}
