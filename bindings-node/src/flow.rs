//! The flow-control half of the core, as factories of bound functions.
//!
//! Each `_name` factory below validates its arguments through the core (which
//! refuses what cannot be accepted, naming the argument) and returns a plain
//! object of functions bound to one core value; `bindings-node/index.js`
//! wraps that object in the public class. The JS side checks argument types
//! and fills draws and clocks (`Math.random()`, `performance.now()`); every
//! default and every rule is the core's.

use std::cell::Cell;
use std::ptr;
use std::rc::Rc;

use headway_core::flow::{
    Backoff, Breaker, Bucket, Gate, Jitter, Limits, Load, Pool, Taken, Ward, Window, pick,
};
use napi::bindgen_prelude::{External, ToNapiValue};
use napi::{Env, JsValue, sys};
use napi_derive::napi;

use crate::raw::{Bound, Fail, Ret, Slot, bound, factory};
use crate::units::{int, int32, ms, ns, span};

fn external<T: 'static>(env: sys::napi_env, value: T) -> Ret {
    unsafe { External::to_napi_value(env, External::new(value)) }.map_err(|_| Fail::Napi)
}

/// Reads the core value a config handle (`Limits`, `Breaker`, `Backoff`,
/// `Ward`) carries; the type check is napi-rs's registry of live externals.
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

// ---------------------------------------------------------------- Limits

/// Validates pool limits (ms spans) and returns `{ handle, size, idle, keep,
/// life }` with the core's defaults filled in (HikariCP / database/sql).
#[napi(js_name = "_limits", catch_unwind)]
pub fn limits<'env>(
    env: &'env Env,
    size: Option<f64>,
    idle: Option<f64>,
    keep: Option<f64>,
    life: Option<f64>,
) -> napi::Result<napi::Unknown<'env>> {
    factory(env, |env| {
        let d = Limits::default();
        let l = Limits::new(
            size.map_or(Ok(d.size()), |x| int("size", x))?,
            idle.map_or(Ok(d.idle()), |x| int("idle", x))?,
            keep.map_or(Ok(d.keep()), |x| span("keep", x))?,
            life.map_or(Ok(d.life()), |x| span("life", x))?,
        )?;
        let h = external(env, l)?;
        Bound::new(env, ())?
            .set(c"handle", h)?
            .number(c"size", l.size() as f64)?
            .number(c"idle", l.idle() as f64)?
            .number(c"keep", ms(l.keep()))?
            .number(c"life", ms(l.life()))
            .map(Bound::finish)
    })
}

// ---------------------------------------------------------------- Breaker

/// Validates a breaker (SRE book defaults: k = 2, two minutes) and returns
/// `{ handle, k, window }`.
#[napi(js_name = "_breaker", catch_unwind)]
pub fn breaker<'env>(
    env: &'env Env,
    k: Option<f64>,
    window: Option<f64>,
) -> napi::Result<napi::Unknown<'env>> {
    factory(env, |env| {
        let d = Breaker::default();
        let b = Breaker::new(
            k.unwrap_or(d.k()),
            window.map_or(Ok(d.window()), |x| span("window", x))?,
        )?;
        let (k, w) = (b.k(), b.window());
        let h = external(env, b)?;
        Bound::new(env, ())?
            .set(c"handle", h)?
            .number(c"k", k)?
            .number(c"window", ms(w))
            .map(Bound::finish)
    })
}

// ---------------------------------------------------------------- Backoff

bound!(backoff_ceiling, Backoff, 1, |s, e, a| {
    let retry = e.i32(a[0], "retry")?;
    e.num(ms(s.ceiling(retry)))
});

bound!(backoff_delay, Backoff, 3, |s, e, a| {
    let retry = e.i32(a[0], "retry")?;
    let random = e.f64(a[1], "random")?;
    let previous = ns(e.f64(a[2], "previous")?);
    e.num(ms(s.delay(retry, random, previous)))
});

bound!(backoff_more, Backoff, 1, |s, e, a| {
    let made = e.i32(a[0], "made")?;
    e.bool(s.more(made))
});

bound!(backoff_schedule, Backoff, 1, |s, e, a| {
    let randoms = e.f64s(a[0], "randoms")?;
    e.nums(s.schedule(&randoms).into_iter().map(ms))
});

/// A backoff (gRPC's retry defaults: 100 ms doubling to 1 s, three attempts,
/// full jitter) as `{ handle, ceiling, delay, more, schedule, base, factor,
/// cap, attempts, jitter }`.
#[napi(js_name = "_backoff", catch_unwind)]
pub fn backoff<'env>(
    env: &'env Env,
    base: Option<f64>,
    factor: Option<f64>,
    cap: Option<f64>,
    attempts: Option<f64>,
    jitter: Option<String>,
) -> napi::Result<napi::Unknown<'env>> {
    factory(env, |env| {
        let d = Backoff::default();
        let jitter = match jitter {
            None => d.jitter(),
            Some(name) => Jitter::parse(&name).ok_or_else(|| {
                Fail::Range(
                    "jitter".into(),
                    format!(
                        "must be 'rigid', 'full', 'equal' or 'decorrelated' (received '{name}')"
                    ),
                )
            })?,
        };
        let b = Backoff::new(
            base.map_or(Ok(d.base()), |x| span("base", x))?,
            factor.unwrap_or(d.factor()),
            cap.map_or(Ok(d.cap()), |x| span("cap", x))?,
            attempts.map_or(Ok(d.attempts()), |x| int32("attempts", x))?,
            jitter,
        )?;
        let h = external(env, b)?;
        let name = b.jitter().name();
        let mut jv = ptr::null_mut();
        if unsafe {
            sys::napi_create_string_utf8(env, name.as_ptr().cast(), name.len() as isize, &mut jv)
        } != sys::Status::napi_ok
        {
            return Err(Fail::Napi);
        }
        Bound::new(env, b)?
            .func(c"ceiling", Some(backoff_ceiling))?
            .func(c"delay", Some(backoff_delay))?
            .func(c"more", Some(backoff_more))?
            .func(c"schedule", Some(backoff_schedule))?
            .set(c"handle", h)?
            .number(c"base", ms(b.base()))?
            .number(c"factor", b.factor())?
            .number(c"cap", ms(b.cap()))?
            .number(c"attempts", b.attempts() as f64)?
            .set(c"jitter", jv)
            .map(Bound::finish)
    })
}

// ---------------------------------------------------------------- Ward

/// A ward from a breaker handle and a backoff handle (either may be absent);
/// it keeps its own copies, as the core's `Ward::new` takes them by value.
#[napi(js_name = "_ward", catch_unwind)]
pub fn ward<'env>(
    env: &'env Env,
    breaker: Option<napi::Unknown<'env>>,
    backoff: Option<napi::Unknown<'env>>,
) -> napi::Result<napi::Unknown<'env>> {
    factory(env, |env| {
        let b = match breaker {
            Some(v) => Some(handle::<Breaker>(env, v.raw(), "breaker")?),
            None => None,
        };
        let o = match backoff {
            Some(v) => Some(handle::<Backoff>(env, v.raw(), "backoff")?),
            None => None,
        };
        external(env, Ward::new(b, o))
    })
}

// ---------------------------------------------------------------- Pool

/// A pool of slot ids. The JS wrapper maps each id to the JS value it stands
/// for (identity is `===`), so any value can be pooled without a napi
/// reference per item.
pub struct PoolState {
    pool: Pool<u32>,
    /// The span of the last `Later`, read by `delay()` only on that answer.
    later: i64,
}

/// What `take` answers, as one int32: an id ≥ 0 is `Ready(id)`, `-16 - id`
/// is `Stale(id)`; `-1` Make, `-2` Wait, `-3` Shed, `-4` Later (its span via
/// `delay()`). One small integer keeps the hot call free of allocation.
#[inline(always)]
fn code(s: &mut PoolState, t: Taken<u32>) -> i32 {
    match t {
        Taken::Ready(id) => id as i32,
        Taken::Stale(id) => -16 - id as i32,
        Taken::Make => -1,
        Taken::Wait => -2,
        Taken::Shed => -3,
        Taken::Later(d) => {
            s.later = d;
            -4
        }
    }
}

bound!(pool_take, PoolState, 2, |s, e, a| {
    let now = ns(e.f64(a[0], "now")?);
    let roll = e.f64(a[1], "roll")?;
    let t = s.pool.take(now, roll);
    e.int(code(s, t))
});

bound!(pool_delay, PoolState, 0, |s, e, a| e.num(ms(s.later)));

bound!(pool_made, PoolState, 2, |s, e, a| {
    let id = e.u32(a[0], "id")?;
    s.pool.made(id, ns(e.f64(a[1], "now")?));
    e.undefined()
});

bound!(pool_unmade, PoolState, 2, |s, e, a| {
    let now = ns(e.f64(a[0], "now")?);
    s.pool.unmade(now, e.f64(a[1], "roll")?);
    e.undefined()
});

bound!(pool_give, PoolState, 2, |s, e, a| {
    let id = e.u32(a[0], "id")?;
    let kept = s.pool.give(id, ns(e.f64(a[1], "now")?));
    e.bool(kept)
});

bound!(pool_drop, PoolState, 1, |s, e, a| {
    let id = e.u32(a[0], "id")?;
    s.pool.drop(&id);
    e.undefined()
});

bound!(pool_evict, PoolState, 1, |s, e, a| {
    let gone = s.pool.evict(ns(e.f64(a[0], "now")?));
    e.nums(gone.into_iter().map(f64::from))
});

bound!(pool_close, PoolState, 0, |s, e, a| {
    let gone = s.pool.close();
    e.nums(gone.into_iter().map(f64::from))
});

bound!(pool_refusal, PoolState, 1, |s, e, a| {
    e.num(s.pool.refusal(ns(e.f64(a[0], "now")?)))
});

bound!(pool_live, PoolState, 0, |s, e, a| e
    .num(s.pool.live() as f64));
bound!(pool_idle, PoolState, 0, |s, e, a| e
    .num(s.pool.idle() as f64));
bound!(pool_busy, PoolState, 0, |s, e, a| e
    .num(s.pool.busy() as f64));

type PoolRc = Rc<Slot<PoolState>>;

/// A pool from a limits handle and an optional ward handle, as an object of
/// bound functions plus `handle`, which `_pick` reads.
#[napi(js_name = "_pool", catch_unwind)]
pub fn pool<'env>(
    env: &'env Env,
    limits: napi::Unknown<'env>,
    ward: Option<napi::Unknown<'env>>,
) -> napi::Result<napi::Unknown<'env>> {
    factory(env, |env| {
        let l = handle::<Limits>(env, limits.raw(), "limits")?;
        let w = match ward {
            Some(v) => Some(handle::<Ward>(env, v.raw(), "ward")?),
            None => None,
        };
        let b = Bound::new(
            env,
            PoolState {
                pool: Pool::new(l, w),
                later: 0,
            },
        )?;
        let h = external::<PoolRc>(env, b.state().clone())?;
        b.func(c"take", Some(pool_take))?
            .func(c"delay", Some(pool_delay))?
            .func(c"made", Some(pool_made))?
            .func(c"unmade", Some(pool_unmade))?
            .func(c"give", Some(pool_give))?
            .func(c"drop", Some(pool_drop))?
            .func(c"evict", Some(pool_evict))?
            .func(c"close", Some(pool_close))?
            .func(c"refusal", Some(pool_refusal))?
            .func(c"live", Some(pool_live))?
            .func(c"idle", Some(pool_idle))?
            .func(c"busy", Some(pool_busy))?
            .set(c"handle", h)
            .map(Bound::finish)
    })
}

/// One slot of the array `pick` was given, read only if the core asks: the
/// core compares two pools, so only two are ever looked at.
#[derive(Clone, Copy)]
struct Lazy<'a> {
    env: sys::napi_env,
    handles: sys::napi_value,
    i: u32,
    bad: &'a Cell<Option<u32>>,
}

impl Lazy<'_> {
    fn with<R>(&self, f: impl FnOnce(&PoolState) -> R, worst: R) -> R {
        let mut el = ptr::null_mut();
        let mut raw = ptr::null_mut();
        let got = unsafe {
            sys::napi_get_element(self.env, self.handles, self.i, &mut el) == sys::Status::napi_ok
                && sys::napi_get_value_external(self.env, el, &mut raw) == sys::Status::napi_ok
        };
        let state = if got {
            unsafe { External::<PoolRc>::inner_from_raw(raw) }
        } else {
            None
        };
        match state.and_then(|rc| rc.cell.try_borrow().ok().map(|s| f(&s))) {
            Some(r) => r,
            None => {
                self.bad.set(Some(self.i));
                worst
            }
        }
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

/// Which pool to ask (the core's two random choices) among the pools whose
/// handles are in `handles`; -1 when there are none.
#[napi(js_name = "_pick", catch_unwind)]
pub fn pick_pool(
    env: &Env,
    handles: napi::Unknown<'_>,
    now: f64,
    first: f64,
    second: f64,
) -> napi::Result<i32> {
    let env = env.raw();
    let run = || -> Result<i32, Fail> {
        let mut len = 0u32;
        if unsafe { sys::napi_get_array_length(env, handles.raw(), &mut len) }
            != sys::Status::napi_ok
        {
            return Err(Fail::Type("pools", "an array of Pool"));
        }
        let bad = Cell::new(None);
        let lazy = |i| Lazy {
            env,
            handles: handles.raw(),
            i,
            bad: &bad,
        };
        // A stack buffer for the usual handful of pools; no allocation.
        const STACK: usize = 16;
        let answer = if len as usize <= STACK {
            let mut buf = [lazy(0); STACK];
            for (i, slot) in buf.iter_mut().enumerate().take(len as usize) {
                *slot = lazy(i as u32);
            }
            pick(&buf[..len as usize], ns(now), first, second)
        } else {
            let all: Vec<Lazy> = (0..len).map(lazy).collect();
            pick(&all, ns(now), first, second)
        };
        if bad.get().is_some() {
            return Err(Fail::Type("pools", "an array of Pool"));
        }
        Ok(answer.map_or(-1, |i| i as i32))
    };
    run().map_err(|fail| {
        unsafe { fail.throw(env) };
        napi::Error::from_status(napi::Status::PendingException)
    })
}

// ---------------------------------------------------------------- Bucket

bound!(bucket_take, Bucket, 2, |s, e, a| {
    let now = ns(e.f64(a[0], "now")?);
    let n = e.f64(a[1], "n")?;
    e.bool(s.take(now, n))
});

bound!(bucket_next, Bucket, 2, |s, e, a| {
    let now = ns(e.f64(a[0], "now")?);
    let n = e.f64(a[1], "n")?;
    e.num(ms(s.next(now, n)))
});

bound!(bucket_tokens, Bucket, 1, |s, e, a| {
    e.num(s.tokens(ns(e.f64(a[0], "now")?)))
});

/// A token bucket as `{ take, next, tokens, rate, burst }`; `burst` is the
/// core's (omitted: the rate when above 1, else 1).
#[napi(js_name = "_bucket", catch_unwind)]
pub fn bucket<'env>(
    env: &'env Env,
    rate: f64,
    burst: Option<f64>,
    at: Option<f64>,
) -> napi::Result<napi::Unknown<'env>> {
    factory(env, |env| {
        let at = at.map_or(Ok(0), span_at)?;
        let b = Bucket::new(rate, burst, at)?;
        Bound::new(env, b)?
            .func(c"take", Some(bucket_take))?
            .func(c"next", Some(bucket_next))?
            .func(c"tokens", Some(bucket_tokens))?
            .number(c"rate", b.rate())?
            .number(c"burst", b.burst())
            .map(Bound::finish)
    })
}

/// An instant in ms (any origin, so negative is fine); NaN refused.
fn span_at(x: f64) -> Result<i64, Fail> {
    if x.is_nan() {
        Err(Fail::Range(
            "at".into(),
            "must be a number of milliseconds, not NaN".into(),
        ))
    } else {
        Ok(ns(x))
    }
}

// ---------------------------------------------------------------- Window

bound!(window_take, Window, 1, |s, e, a| {
    e.bool(s.take(ns(e.f64(a[0], "now")?)))
});

bound!(window_left, Window, 1, |s, e, a| {
    e.num(s.left(ns(e.f64(a[0], "now")?)) as f64)
});

bound!(window_next, Window, 1, |s, e, a| {
    e.num(ms(s.next(ns(e.f64(a[0], "now")?))))
});

/// A sliding window as `{ take, left, next, allow, window }`.
#[napi(js_name = "_window", catch_unwind)]
pub fn window<'env>(env: &'env Env, allow: f64, window: f64) -> napi::Result<napi::Unknown<'env>> {
    factory(env, |env| {
        let w = Window::new(int("allow", allow)?, span("window", window)?)?;
        let (allow, span) = (w.allow(), w.span());
        Bound::new(env, w)?
            .func(c"take", Some(window_take))?
            .func(c"left", Some(window_left))?
            .func(c"next", Some(window_next))?
            .number(c"allow", allow as f64)?
            .number(c"window", ms(span))
            .map(Bound::finish)
    })
}

// ---------------------------------------------------------------- Gate

bound!(gate_enter, Gate, 0, |s, e, a| e.bool(s.enter()));
bound!(gate_leave, Gate, 0, |s, e, a| {
    s.leave();
    e.undefined()
});
bound!(gate_held, Gate, 0, |s, e, a| e.num(s.held() as f64));

/// A concurrency gate as `{ enter, leave, held, limit }`.
#[napi(js_name = "_gate", catch_unwind)]
pub fn gate<'env>(env: &'env Env, limit: f64) -> napi::Result<napi::Unknown<'env>> {
    factory(env, |env| {
        let g = Gate::new(int("limit", limit)?)?;
        Bound::new(env, g)?
            .func(c"enter", Some(gate_enter))?
            .func(c"leave", Some(gate_leave))?
            .func(c"held", Some(gate_held))?
            .number(c"limit", g.limit() as f64)
            .map(Bound::finish)
    })
}
