//! The core's acquire and retry loops as raw native functions, for
//! `lib/pooled.js`'s `Pooled` and `lib/retry.js`'s `retry` to act on.
//!
//! A pool slot carries its `Acquires` (the `Pooled` over it sets the
//! timeout with `acqInit`), so a call is the pool's id plus numbers, like
//! every pool method. Items are the pool's slot ids; `lib/flow.js` turns each
//! into its value, and forgets one the pool no longer holds, as for `take`.
//!
//! `acqStep` answers one int32, like `poolTake`: an item id ≥ 0 is
//! `Hand(id)`, `-16 - id` is `Close(id)`; `-1` Open, `-2` Park, `-3` Sleep.
//! The number that goes with Park (the deadline, Infinity for none) and
//! Sleep (the span) is read with `acqValue`. An acquire that gives up is
//! thrown by the step: an `Error` whose `code` is the core's reason
//! (`TIMEOUT`, `SHED`, `CLOSED`) and whose message is the core's.

use headway_core::flow::{Acquires, Attempts, Step, TAKE_TIMEOUT, Unit};

use crate::flow::item;
use crate::raw::{Fail, Funcs, method};
use headway_core::flow::millis::{ms, ns, span};

// acqInit(pid, timeoutMs?, evictEveryMs?) -> the evict timer's period in ms
// (0: none). Timeout undefined: the core's TAKE_TIMEOUT, Infinity: none;
// evictEvery undefined: the core's choice for the pool's limits. The core
// ranges both.
method!(acq_init, pools, 3, |s, e, a| {
    let timeout = match e.opt_f64(a[1], "timeout")? {
        None => Some(TAKE_TIMEOUT),
        Some(t) if t == f64::INFINITY => None,
        Some(t) => Some(span("timeout", t)?),
    };
    let every = e
        .opt_f64(a[2], "evictEvery")?
        .map(|x| span("evictEvery", x))
        .transpose()?;
    s.acq = Acquires::driving(s.pool.limits(), timeout, every)?;
    e.num(ms(s.acq.evict_every()))
});

// acqQuick(pid, now) -> id, or -1.
method!(acq_quick, pools, 2, |s, e, a| {
    let now = e.now(a[1])?;
    let got = s.acq.quick(&mut s.pool, now);
    e.int(got.map_or(-1, |i| i as i32))
});

// acqBegin(pid, now) -> ticket.
method!(acq_begin, pools, 2, |s, e, a| {
    let now = e.now(a[1])?;
    e.num(s.acq.begin(now) as f64)
});

fn ticket(x: f64) -> Result<u64, Fail> {
    if x >= 0.0 && x.fract() == 0.0 {
        Ok(x as u64)
    } else {
        Err(Fail::Range("ticket".into(), "must be a ticket".into()))
    }
}

// acqStep(pid, ticket, now, roll) -> code (see the module).
method!(acq_step, pools, 4, |s, e, a| {
    let t = ticket(e.f64(a[1], "ticket")?)?;
    let now = e.now(a[2])?;
    let roll = e.f64(a[3], "roll")?;
    let code = match s.acq.step(&mut s.pool, t, now, roll) {
        Step::Hand(i) => i as i32,
        Step::Close(i) => -16 - i as i32,
        Step::Open => -1,
        Step::Park(_, deadline) => {
            s.value = deadline.map_or(f64::INFINITY, ms);
            -2
        }
        Step::Sleep(d) => {
            s.value = ms(d);
            -3
        }
        Step::Fail(f) => {
            let why = s.acq.message(f, Unit::Millis);
            let code = f.error().to_ascii_uppercase();
            return Err(Fail::Coded(code, format!("headway: {why}")));
        }
    };
    e.int(code)
});

method!(acq_value, pools, 1, |s, e, a| e.num(s.value));

// acqOpened(pid, ticket, item, now) -> false when the pool closed meanwhile.
method!(acq_opened, pools, 4, |s, e, a| {
    let t = ticket(e.f64(a[1], "ticket")?)?;
    let it = item(e, a[2])?;
    let now = e.now(a[3])?;
    e.bool(s.acq.opened(&mut s.pool, t, it, now))
});

// acqUnopened(pid, ticket, now, roll)
method!(acq_unopened, pools, 4, |s, e, a| {
    let t = ticket(e.f64(a[1], "ticket")?)?;
    let now = e.now(a[2])?;
    let roll = e.f64(a[3], "roll")?;
    s.acq.unopened(&mut s.pool, t, now, roll);
    e.undefined()
});

// acqEnd(pid, ticket)
method!(acq_end, pools, 2, |s, e, a| {
    let t = ticket(e.f64(a[1], "ticket")?)?;
    s.acq.end(&mut s.pool, t);
    e.undefined()
});

// acqGive(pid, item, now, broken) -> whether the caller must close it (not
// kept, or dropped).
method!(acq_give, pools, 4, |s, e, a| {
    let it = item(e, a[1])?;
    let now = e.now(a[2])?;
    let broken = e.f64(a[3], "broken")? != 0.0;
    e.bool(s.acq.give(&mut s.pool, it, now, broken))
});

// acqEvict(pid, now) -> ids to close.
method!(acq_evict, pools, 2, |s, e, a| {
    let gone = s.acq.evict(&mut s.pool, e.now(a[1])?);
    e.nums(gone.into_iter().map(f64::from))
});

// acqClose(pid) -> ids to close.
method!(acq_close, pools, 1, |s, e, a| {
    let gone = s.acq.close(&mut s.pool);
    e.nums(gone.into_iter().map(f64::from))
});

// acqWakes(pid) -> tickets to wake, in order.
method!(acq_wakes, pools, 1, |s, e, a| {
    let w = s.acq.wakes();
    e.nums(w.into_iter().map(|t| t as f64))
});

method!(acq_parked, pools, 1, |s, e, a| e.num(s.acq.parked() as f64));

// acqDrain(pid): new acquires fail as closed; those under way go on.
method!(acq_drain, pools, 1, |s, e, a| {
    s.acq.drain();
    e.undefined()
});

// acqDrained(pid) -> whether a drain is over (nothing under way or lent).
method!(acq_drained, pools, 1, |s, e, a| e
    .bool(s.acq.drained(&s.pool)));

// attemptsFailed(backoffId, made, previousMs, retryable, stopped, u) -> the
// delay in ms before the next attempt, or -1: give up. `made` counts the
// attempt that just failed; the driver keeps it and the last delay.
method!(attempts_failed, backoffs, 6, |s, e, a| {
    let made = e.i32(a[1], "made")?;
    let previous = ns(e.f64(a[2], "previous")?);
    let retryable = e.f64(a[3], "retryable")? != 0.0;
    let stopped = e.f64(a[4], "stopped")? != 0.0;
    let u = e.f64(a[5], "u")?;
    let mut run = Attempts::resume(*s, made.saturating_sub(1), previous);
    e.num(match run.failed(retryable, stopped, u) {
        headway_core::flow::Next::Sleep(d) => ms(d),
        headway_core::flow::Next::Retry => 0.0,
        headway_core::flow::Next::Fail => -1.0,
    })
});

/// Adds these functions to an environment's set.
pub(crate) fn add(funcs: Funcs) -> Result<Funcs, Fail> {
    funcs
        .add(c"acqInit", Some(acq_init))?
        .add(c"acqQuick", Some(acq_quick))?
        .add(c"acqBegin", Some(acq_begin))?
        .add(c"acqStep", Some(acq_step))?
        .add(c"acqValue", Some(acq_value))?
        .add(c"acqOpened", Some(acq_opened))?
        .add(c"acqUnopened", Some(acq_unopened))?
        .add(c"acqEnd", Some(acq_end))?
        .add(c"acqGive", Some(acq_give))?
        .add(c"acqEvict", Some(acq_evict))?
        .add(c"acqClose", Some(acq_close))?
        .add(c"acqWakes", Some(acq_wakes))?
        .add(c"acqParked", Some(acq_parked))?
        .add(c"acqDrain", Some(acq_drain))?
        .add(c"acqDrained", Some(acq_drained))?
        .add(c"attemptsFailed", Some(attempts_failed))
}
