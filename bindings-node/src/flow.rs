//! The flow-control half of the core, as native functions over slabs.
//!
//! `_flow()` builds, once per JS environment, the object of functions that
//! `bindings-node/lib/flow.js` wraps in the public classes. A factory
//! (`bucketNew(owner, rate, burst, at)`, ...) validates its arguments
//! through the core — which refuses what cannot be accepted, naming the
//! argument — stores the core value in a slab and ties the slot to `owner`,
//! the JS object, so the slot is freed when the object is collected. A method
//! (`bucketTake(id, now, n)`, ...) is the id plus plain numbers.
//!
//! The JS side checks argument types and fills clocks and draws
//! (`performance.now()`, `Math.random()`); every default and every rule is
//! the core's.

use std::cell::Cell;
use std::ptr;

use headway_core::flow::millis::{OutOfRange, int, int32, ms, ns, span};
use headway_core::flow::{
    Acquires, Backoff, Breaker, Bucket, Gate, Jitter, Limits, Load, Pool, Taken, Ward, Window, pick,
};
use headway_core::limit::tokens::{ONE, tokens};
use napi::bindgen_prelude::{External, ToNapiValue};
use napi::sys;
use napi_derive::napi;

use crate::raw::{E, Fail, Funcs, Ret, Slab, function, method, napi_ret, own};

/// Every slab of one JS environment.
#[derive(Default)]
pub struct Flow {
    pub buckets: Slab<Bucket>,
    pub windows: Slab<Window>,
    pub gates: Slab<Gate>,
    pub backoffs: Slab<Backoff>,
    pub pools: Slab<PoolState>,
}

impl Flow {
    /// How many native flow values are alive, for the finalizer test.
    fn live(&self) -> usize {
        self.buckets.live()
            + self.windows.live()
            + self.gates.live()
            + self.backoffs.live()
            + self.pools.live()
    }
}

fn external<T: 'static>(env: sys::napi_env, value: T) -> Ret {
    unsafe { External::to_napi_value(env, External::new(value)) }.map_err(|_| Fail::Napi)
}

/// Reads the core value a config handle (`Limits`, `Breaker`, `Ward`)
/// carries; napi-rs's registry of live externals checks its type.
fn handle<T: Clone + 'static>(
    env: sys::napi_env,
    v: sys::napi_value,
    name: &'static str,
) -> Result<T, Fail> {
    let mut raw = ptr::null_mut();
    if unsafe { sys::napi_get_value_external(env, v, &mut raw) } != sys::Status::napi_ok {
        return Err(Fail::Type(name, "made by headway"));
    }
    unsafe { External::<T>::inner_from_raw(raw) }
        .cloned()
        .ok_or(Fail::Type(name, "made by headway"))
}

fn opt_handle<T: Clone + 'static>(
    e: E,
    v: sys::napi_value,
    name: &'static str,
) -> Result<Option<T>, Fail> {
    if e.absent(v)? {
        Ok(None)
    } else {
        handle(e.0, v, name).map(Some)
    }
}

/// An argument that may be `undefined` (or `null`), read by `read` when
/// given: `None` leaves it to the core's default.
fn opt<T>(
    e: E,
    v: sys::napi_value,
    name: &'static str,
    read: fn(&'static str, f64) -> Result<T, OutOfRange>,
) -> Result<Option<T>, Fail> {
    Ok(e.opt_f64(v, name)?.map(|x| read(name, x)).transpose()?)
}

// ---------------------------------------------------------------- Limits

// limitsNew(size, idle, keep, life) -> { handle, size, idle, keep, life }
// with the core's defaults (HikariCP / database/sql) for what is undefined.
function!(limits_new, 4, |f, e, a| {
    let l = Limits::given(
        opt(e, a[0], "size", int)?,
        opt(e, a[1], "idle", int)?,
        opt(e, a[2], "keep", span)?,
        opt(e, a[3], "life", span)?,
    )?;
    e.object(&[
        (c"handle", external(e.0, l)?),
        (c"size", e.num(l.size() as f64)?),
        (c"idle", e.num(l.idle() as f64)?),
        (c"keep", e.num(ms(l.keep()))?),
        (c"life", e.num(ms(l.life()))?),
        (c"evictEvery", e.num(ms(l.evict_every()))?),
    ])
});

// ---------------------------------------------------------------- Breaker

// breakerNew(k, window) -> { handle, k, window }; SRE book defaults.
function!(breaker_new, 2, |f, e, a| {
    let b = Breaker::given(e.opt_f64(a[0], "k")?, opt(e, a[1], "window", span)?)?;
    let (k, w) = (b.k(), b.window());
    e.object(&[
        (c"handle", external(e.0, b)?),
        (c"k", e.num(k)?),
        (c"window", e.num(ms(w))?),
    ])
});

// ---------------------------------------------------------------- Backoff

// backoffNew(owner, base, factor, cap, attempts, jitter) -> { id, base,
// factor, cap, attempts, jitter }; gRPC's retry defaults.
function!(backoff_new, 6, |f, e, a| {
    let jitter = e.opt_str(a[5], "jitter")?.map(|n| Jitter::named(&n));
    let jitter = jitter.transpose()?;
    let b = Backoff::given(
        opt(e, a[1], "base", span)?,
        e.opt_f64(a[2], "factor")?,
        opt(e, a[3], "cap", span)?,
        opt(e, a[4], "attempts", int32)?,
        jitter,
    )?;
    let id = own(e.0, a[0], f, |f| &f.backoffs, b)?;
    e.object(&[
        (c"id", e.num(id as f64)?),
        (c"base", e.num(ms(b.base()))?),
        (c"factor", e.num(b.factor())?),
        (c"cap", e.num(ms(b.cap()))?),
        (c"attempts", e.num(b.attempts() as f64)?),
        (c"jitter", e.str(b.jitter().name())?),
    ])
});

method!(backoff_ceiling, backoffs, 2, |s, e, a| {
    let retry = e.i32(a[1], "retry")?;
    e.num(ms(s.ceiling(retry)))
});

method!(backoff_delay, backoffs, 4, |s, e, a| {
    let retry = e.i32(a[1], "retry")?;
    let random = e.f64(a[2], "random")?;
    let previous = ns(e.f64(a[3], "previous")?);
    e.num(ms(s.delay(retry, random, previous)))
});

method!(backoff_more, backoffs, 2, |s, e, a| {
    let made = e.i32(a[1], "made")?;
    e.bool(s.more(made))
});

method!(backoff_schedule, backoffs, 2, |s, e, a| {
    let randoms = e.f64s(a[1], "randoms")?;
    e.nums(s.schedule(&randoms).into_iter().map(ms))
});

// ---------------------------------------------------------------- Ward

// wardNew(breakerHandle?, backoffId?) -> handle. The ward keeps its own
// copies, as the core's `Ward::new` takes them by value.
function!(ward_new, 2, |f, e, a| {
    let breaker = opt_handle::<Breaker>(e, a[0], "breaker")?;
    let backoff = match e.opt_f64(a[1], "backoff")? {
        None => None,
        Some(_) => Some(
            f.backoffs
                .with(e.id(a[1])?, |b| *b)
                .map_err(|_| Fail::Type("backoff", "an instance of Backoff"))?,
        ),
    };
    external(e.0, Ward::new(breaker, backoff))
});

// ---------------------------------------------------------------- Pool

/// A pool of slot ids. The JS wrapper maps each id to the JS value it stands
/// for (identity is `===`), so any value can be pooled without a napi
/// reference per item, and forgets the value when the core no longer holds
/// its id (`poolHolds`).
pub struct PoolState {
    pub(crate) pool: Pool<u32>,
    /// The span of the last `Later`, read by `poolDelay` only on that answer.
    pub(crate) later: i64,
    /// The acquire loop of the `Pooled` over this pool (see `acquires.rs`).
    pub(crate) acq: Acquires,
    /// The number that goes with the last `acqStep` answer, read by
    /// `acqValue` only on the answers that carry one.
    pub(crate) value: f64,
}

// poolNew(owner, limitsHandle, wardHandle?) -> id
function!(pool_new, 3, |f, e, a| {
    let limits = handle::<Limits>(e.0, a[1], "limits")?;
    let ward = opt_handle::<Ward>(e, a[2], "ward")?;
    let state = PoolState {
        pool: Pool::new(limits, ward),
        later: 0,
        acq: Acquires::default(),
        value: 0.0,
    };
    let id = own(e.0, a[0], f, |f| &f.pools, state)?;
    e.num(id as f64)
});

/// What `take` answers, as one int32: an item id ≥ 0 is `Ready(id)`,
/// `-16 - id` is `Stale(id)`; `-1` Make, `-2` Wait, `-3` Shed, `-4` Later
/// (its span via `poolDelay`). One small integer keeps the hot call free of
/// allocation.
#[inline(always)]
fn code(s: &mut PoolState, t: Taken<u32>) -> i32 {
    match t {
        Taken::Ready(item) => item as i32,
        Taken::Stale(item) => -16 - item as i32,
        Taken::Make => -1,
        Taken::Wait => -2,
        Taken::Shed => -3,
        Taken::Later(d) => {
            s.later = d;
            -4
        }
    }
}

pub(crate) fn item(e: E, v: sys::napi_value) -> Result<u32, Fail> {
    let x = e.f64(v, "item")?;
    let i = x as u32;
    if i as f64 == x {
        Ok(i)
    } else {
        Err(Fail::Range("item".into(), "must be a slot id".into()))
    }
}

method!(pool_take, pools, 3, |s, e, a| {
    let now = e.now(a[1])?;
    let roll = e.f64(a[2], "roll")?;
    let t = s.pool.take(now, roll);
    e.int(code(s, t))
});

method!(pool_delay, pools, 1, |s, e, a| e.num(ms(s.later)));

method!(pool_made, pools, 3, |s, e, a| {
    let it = item(e, a[1])?;
    s.pool.made(it, e.now(a[2])?);
    e.undefined()
});

method!(pool_unmade, pools, 3, |s, e, a| {
    let now = e.now(a[1])?;
    s.pool.unmade(now, e.f64(a[2], "roll")?);
    e.undefined()
});

method!(pool_give, pools, 3, |s, e, a| {
    let it = item(e, a[1])?;
    let kept = s.pool.give(it, e.now(a[2])?);
    e.bool(kept)
});

method!(pool_drop, pools, 2, |s, e, a| {
    let it = item(e, a[1])?;
    s.pool.drop(&it);
    e.undefined()
});

// poolHolds(id, item) -> whether the core holds the item anywhere, idle or
// lent: `lib/flow.js` forgets its value once it does not.
method!(pool_holds, pools, 2, |s, e, a| e
    .bool(s.pool.holds(&item(e, a[1])?)));

// poolLent(id, item) -> whether the item is lent out.
method!(pool_lent, pools, 2, |s, e, a| e
    .bool(s.pool.lends(&item(e, a[1])?)));

method!(pool_evict, pools, 2, |s, e, a| {
    let gone = s.pool.evict(e.now(a[1])?);
    e.nums(gone.into_iter().map(f64::from))
});

method!(pool_close, pools, 1, |s, e, a| {
    let gone = s.pool.close();
    e.nums(gone.into_iter().map(f64::from))
});

method!(pool_refusal, pools, 2, |s, e, a| e
    .num(s.pool.refusal(e.now(a[1])?)));
method!(pool_live, pools, 1, |s, e, a| e.num(s.pool.live() as f64));
method!(pool_idle, pools, 1, |s, e, a| e.num(s.pool.idle() as f64));
method!(pool_busy, pools, 1, |s, e, a| e.num(s.pool.busy() as f64));

/// One pool of those `pick` was given, read only if the core asks: the core
/// compares two, so only two are ever looked at.
#[derive(Clone, Copy)]
struct Lazy<'a> {
    e: E,
    flow: &'a Flow,
    ids: sys::napi_value,
    i: u32,
    bad: &'a Cell<bool>,
}

impl Lazy<'_> {
    fn with<R>(&self, f: impl FnOnce(&PoolState) -> R, worst: R) -> R {
        let got = self
            .e
            .at(self.ids, self.i)
            .and_then(|v| self.e.id(v))
            .and_then(|id| self.flow.pools.with(id, f));
        got.unwrap_or_else(|_| {
            self.bad.set(true);
            worst
        })
    }
}

impl Load for Lazy<'_> {
    fn refusal(&self, now: i64) -> f64 {
        self.with(|s| s.pool.refusal(now), f64::INFINITY)
    }
    fn busy(&self) -> i64 {
        self.with(|s| s.pool.busy(), i64::MAX)
    }
}

// pick(ids, now, first, second) -> index or -1: the core's two random choices.
function!(pool_pick, 4, |f, e, a| {
    let len = e.len(a[0], "pools", "an array of Pool")?;
    let (now, first, second) = (e.now(a[1])?, e.f64(a[2], "first")?, e.f64(a[3], "second")?);
    let bad = Cell::new(false);
    let lazy = |i| Lazy {
        e,
        flow: f,
        ids: a[0],
        i,
        bad: &bad,
    };
    // A stack buffer for the usual handful of pools: no allocation.
    const STACK: usize = 16;
    let answer = if len as usize <= STACK {
        let mut buf = [lazy(0); STACK];
        for (i, slot) in buf.iter_mut().enumerate().take(len as usize) {
            *slot = lazy(i as u32);
        }
        pick(&buf[..len as usize], now, first, second)
    } else {
        let all: Vec<Lazy> = (0..len).map(lazy).collect();
        pick(&all, now, first, second)
    };
    if bad.get() {
        return Err(Fail::Type("pools", "an array of Pool"));
    }
    e.int(answer.map_or(-1, |i| i as i32))
});

// ---------------------------------------------------------------- Bucket

// bucketNew(owner, rate, burst?, at?) -> { id, rate, burst }; burst is the
// core's (omitted: the rate when above 1, else 1).
function!(bucket_new, 4, |f, e, a| {
    let rate = e.f64(a[1], "rate")?;
    let burst = e.opt_f64(a[2], "burst")?;
    let at = e.opt_f64(a[3], "at")?.map_or(Ok(0), |x| span("at", x))?;
    let b = Bucket::new(rate, burst, at)?;
    let id = own(e.0, a[0], f, |f| &f.buckets, b)?;
    e.object(&[
        (c"id", e.num(id as f64)?),
        (c"rate", e.num(b.rate())?),
        (c"burst", e.num(b.burst())?),
    ])
});

method!(bucket_take, buckets, 3, |s, e, a| {
    let now = e.now(a[1])?;
    let n = Bucket::check(e.f64(a[2], "n")?)?;
    e.bool(s.take(now, n))
});

// The common case, the core's default of one token, with one argument fewer
// (each costs ~3 ns).
method!(bucket_take1, buckets, 2, |s, e, a| e
    .bool(s.take(e.now(a[1])?, ONE)));

// bucketNext(id, now, n?): `n` omitted is the core's default (one token).
method!(bucket_next, buckets, 3, |s, e, a| {
    let now = e.now(a[1])?;
    let n = Bucket::check(tokens(e.opt_f64(a[2], "n")?))?;
    e.num(ms(s.next(now, n)))
});

// bucketWait(id, now, n?) -> -1: taken; else ms to sleep before asking
// again. A count that never comes is refused (a RangeError naming `n`).
method!(bucket_wait, buckets, 3, |s, e, a| {
    let now = e.now(a[1])?;
    let n = tokens(e.opt_f64(a[2], "n")?);
    e.num(s.wait(now, n)?.map_or(-1.0, ms))
});

method!(bucket_tokens, buckets, 2, |s, e, a| e
    .num(s.tokens(e.now(a[1])?)));

// ---------------------------------------------------------------- Window

// windowNew(owner, allow, window) -> { id, allow, window }
function!(window_new, 3, |f, e, a| {
    let w = Window::new(
        int("allow", e.f64(a[1], "allow")?)?,
        span("window", e.f64(a[2], "window")?)?,
    )?;
    let (allow, length) = (w.allow(), w.span());
    let id = own(e.0, a[0], f, |f| &f.windows, w)?;
    e.object(&[
        (c"id", e.num(id as f64)?),
        (c"allow", e.num(allow as f64)?),
        (c"window", e.num(ms(length))?),
    ])
});

method!(window_take, windows, 2, |s, e, a| e
    .bool(s.take(e.now(a[1])?)));
method!(window_left, windows, 2, |s, e, a| e
    .num(s.left(e.now(a[1])?) as f64));
method!(window_next, windows, 2, |s, e, a| e
    .num(ms(s.next(e.now(a[1])?))));

// ---------------------------------------------------------------- Gate

// gateNew(owner, limit) -> { id, limit }
function!(gate_new, 2, |f, e, a| {
    let g = Gate::new(int("limit", e.f64(a[1], "limit")?)?)?;
    let id = own(e.0, a[0], f, |f| &f.gates, g)?;
    e.object(&[
        (c"id", e.num(id as f64)?),
        (c"limit", e.num(g.limit() as f64)?),
    ])
});

method!(gate_enter, gates, 1, |s, e, a| e.bool(s.enter()));
method!(gate_leave, gates, 1, |s, e, a| {
    s.leave();
    e.undefined()
});
method!(gate_held, gates, 1, |s, e, a| e.num(s.held() as f64));

// ---------------------------------------------------------------- probes

// The benchmark's floor: reads two numbers and answers true — the call
// `Bucket.take` makes, doing nothing.
function!(noop, 2, |f, e, a| {
    let _ = e.f64(a[0], "a")?;
    let _ = e.f64(a[1], "b")?;
    e.bool(true)
});

// The floor with the instance id too: what a method call costs before any
// work, which is what `Bucket.take` is compared with beside the floor.
function!(noop3, 3, |f, e, a| {
    let _ = e.id(a[0])?;
    let _ = e.f64(a[1], "a")?;
    let _ = e.f64(a[2], "b")?;
    e.bool(true)
});

fn deliberate() -> Ret {
    panic!("headway: a deliberate panic in a raw callback")
}

// Panics, to prove a panic in a raw callback becomes a thrown Error.
function!(panic_raw, 0, |f, e, a| deliberate());

// How many native flow values are alive on this environment.
function!(alive, 0, |f, e, a| e.num(f.live() as f64));

/// The native functions of one JS environment, all sharing its slabs.
#[napi(js_name = "_flow", catch_unwind)]
pub fn flow(env: &napi::Env) -> napi::Result<napi::Unknown<'_>> {
    napi_ret(env, |env| {
        let funcs = Funcs::new(env, Flow::default())?
            .add(c"limitsNew", Some(limits_new))?
            .add(c"breakerNew", Some(breaker_new))?
            .add(c"wardNew", Some(ward_new))?
            .add(c"backoffNew", Some(backoff_new))?
            .add(c"backoffCeiling", Some(backoff_ceiling))?
            .add(c"backoffDelay", Some(backoff_delay))?
            .add(c"backoffMore", Some(backoff_more))?
            .add(c"backoffSchedule", Some(backoff_schedule))?
            .add(c"poolNew", Some(pool_new))?
            .add(c"poolTake", Some(pool_take))?
            .add(c"poolDelay", Some(pool_delay))?
            .add(c"poolMade", Some(pool_made))?
            .add(c"poolUnmade", Some(pool_unmade))?
            .add(c"poolGive", Some(pool_give))?
            .add(c"poolDrop", Some(pool_drop))?
            .add(c"poolHolds", Some(pool_holds))?
            .add(c"poolLent", Some(pool_lent))?
            .add(c"poolEvict", Some(pool_evict))?
            .add(c"poolClose", Some(pool_close))?
            .add(c"poolRefusal", Some(pool_refusal))?
            .add(c"poolLive", Some(pool_live))?
            .add(c"poolIdle", Some(pool_idle))?
            .add(c"poolBusy", Some(pool_busy))?
            .add(c"pick", Some(pool_pick))?;
        Ok(crate::acquires::add(funcs)?
            .add(c"bucketNew", Some(bucket_new))?
            .add(c"bucketTake", Some(bucket_take))?
            .add(c"bucketTake1", Some(bucket_take1))?
            .add(c"bucketNext", Some(bucket_next))?
            .add(c"bucketWait", Some(bucket_wait))?
            .add(c"bucketTokens", Some(bucket_tokens))?
            .add(c"windowNew", Some(window_new))?
            .add(c"windowTake", Some(window_take))?
            .add(c"windowLeft", Some(window_left))?
            .add(c"windowNext", Some(window_next))?
            .add(c"gateNew", Some(gate_new))?
            .add(c"gateEnter", Some(gate_enter))?
            .add(c"gateLeave", Some(gate_leave))?
            .add(c"gateHeld", Some(gate_held))?
            .add(c"noop", Some(noop))?
            .add(c"noop3", Some(noop3))?
            .add(c"panic", Some(panic_raw))?
            .add(c"alive", Some(alive))?
            .finish())
    })
}
