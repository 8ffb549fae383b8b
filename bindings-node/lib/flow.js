'use strict';
// The flow types over the native core — Limits, Breaker, Backoff, Ward, Pool,
// pick, Bucket, Window, Gate — and `sleep`, which the drivers (Bucket.wait,
// retry, Pooled) share. Every rule and default lives in the Rust core; this
// file checks argument types, fills clocks (`performance.now()`) and draws
// (`Math.random()`), maps slot ids back to the JS values they stand for, and
// sleeps. See index.d.ts for what each item answers and why.

const native = require('../addon.js');
const { argType } = require('./errors.js');
const { anyNum, optNum, clock, draw, fix, strictOpts, checkSignal } = require('./checks.js');

// One set of native functions per JS environment, shared by every instance:
// a method is `fn(id, ...numbers)`, so each call site sees one target.
const F = native._flow();
const { bucketTake, bucketTake1, bucketNext, bucketWait, bucketTokens } = F;
const { windowTake, windowLeft, windowNext } = F;
const { gateEnter, gateLeave, gateHeld } = F;
const { backoffCeiling, backoffDelay, backoffMore, backoffSchedule } = F;
const { poolTake, poolDelay, poolMade, poolUnmade, poolGive, poolDrop, poolEvict, poolClose, poolRefusal, poolLive, poolIdle, poolBusy, poolHolds, poolLent } = F;
const { acqInit, acqQuick, acqBegin, acqStep, acqValue, acqOpened, acqUnopened, acqEnd, acqGive, acqEvict, acqClose, acqWakes, acqParked, acqDrain, acqDrained } = F;

const perf = globalThis.performance;
const NONE = 4294967295; // an id no item ever gets
const TIMER_MAX = 2 ** 31 - 1; // setTimeout's longest sleep

// ---------------------------------------------------------------- sleeping

/** Sleeps `ms`, cut short (rejecting with the reason) when `signal` aborts. */
function sleep(ms, signal) {
  if (ms > TIMER_MAX) return sleep(TIMER_MAX, signal).then(() => sleep(ms - TIMER_MAX, signal));
  return new Promise((resolve, reject) => {
    if (signal === undefined) {
      setTimeout(resolve, ms);
      return;
    }
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

// ---------------------------------------------------------------- handles

// `[Kind, native handle]` of each Limits, Breaker, Ward and Backoff made
// (read without touching the object: no getter or proxy trap runs).
const HANDLES = new WeakMap();

/** `o`'s native handle when it is a `Kind` made here, else undefined. */
function handleOf(o, Kind) {
  const h = HANDLES.get(o);
  return h !== undefined && h[0] === Kind ? h[1] : undefined;
}

// ---------------------------------------------------------------- Limits

class Limits {
  constructor(options) {
    const { size, idle, keep, life } = strictOpts(options);
    const n = F.limitsNew(optNum('size', size), optNum('idle', idle), optNum('keep', keep), optNum('life', life));
    HANDLES.set(this, [Limits, n.handle]);
    fix(this, { size: n.size, idle: n.idle, keep: n.keep, life: n.life, evictEvery: n.evictEvery });
  }
}

let defaultLimits;

// ---------------------------------------------------------------- Breaker

class Breaker {
  constructor(options) {
    const { k, window } = strictOpts(options);
    const n = F.breakerNew(optNum('k', k), optNum('window', window));
    HANDLES.set(this, [Breaker, n.handle]);
    fix(this, { k: n.k, window: n.window });
  }
}

// ---------------------------------------------------------------- Backoff

class Backoff {
  #id;

  constructor(options) {
    const { base, factor, cap, attempts, jitter } = strictOpts(options);
    if (jitter !== undefined && typeof jitter !== 'string') throw argType('jitter', 'of type string', jitter);
    const n = F.backoffNew(this, optNum('base', base), optNum('factor', factor), optNum('cap', cap), optNum('attempts', attempts), jitter);
    this.#id = n.id;
    HANDLES.set(this, [Backoff, n.id]);
    fix(this, { base: n.base, factor: n.factor, cap: n.cap, attempts: n.attempts, jitter: n.jitter });
  }

  ceiling(retry) {
    return backoffCeiling(this.#id, anyNum('retry', retry));
  }

  delay(retry, random, previous) {
    anyNum('retry', retry);
    random = draw('random', random);
    return backoffDelay(this.#id, retry, random, previous === undefined ? 0 : anyNum('previous', previous));
  }

  more(made) {
    return backoffMore(this.#id, anyNum('made', made));
  }

  schedule(randoms) {
    if (randoms === undefined) randoms = [];
    else if (!Array.isArray(randoms)) throw argType('randoms', 'an array of numbers', randoms);
    return backoffSchedule(this.#id, randoms);
  }
}

// ---------------------------------------------------------------- Ward

class Ward {
  constructor(options) {
    const { breaker, backoff } = strictOpts(options);
    let b;
    let o;
    if (breaker !== undefined && (b = handleOf(breaker, Breaker)) === undefined) {
      throw argType('breaker', 'an instance of Breaker', breaker);
    }
    if (backoff !== undefined && (o = handleOf(backoff, Backoff)) === undefined) {
      throw argType('backoff', 'an instance of Backoff', backoff);
    }
    HANDLES.set(this, [Ward, F.wardNew(b, o)]);
    fix(this, { breaker, backoff });
  }
}

// ---------------------------------------------------------------- Pool

const MAKE = Object.freeze({ kind: 'make' });
const WAIT = Object.freeze({ kind: 'wait' });
const SHED = Object.freeze({ kind: 'shed' });

let poolHandle;
let poolLends;
let poolMapped;
/** The core's acquire loop over a Pool's ids, for Pooled (see below). */
let poolAcq;
/** What `poolAcq.quick` answers when there is no fresh idle item. */
const NO_ITEM = Symbol('no item');
const OPEN_STEP = Object.freeze({ kind: 'open' });

class Pool {
  #pid;
  // The core pools slot ids; these map them to the JS values (identity is
  // the Map's, which is `===` but for NaN). An id is forgotten once the core
  // says it holds it nowhere, idle or lent (`poolHolds`), so exactly when
  // the core can no longer hand it back.
  #ids = new Map();
  #items = [];
  #spare = [];

  static {
    poolHandle = (o) => (o !== null && typeof o === 'object' && #pid in o ? o.#pid : undefined);
    poolMapped = (pool) => pool.#ids.size;
    poolLends = (pool, item) => {
      const id = pool.#ids.get(item);
      return id !== undefined && poolLent(pool.#pid, id);
    };
    // The core's acquire loop's answers, in the id map's values as `take`,
    // `made`, `give` and `drop` answer theirs; a step that gives up throws
    // the core's error (`code` TIMEOUT, SHED or CLOSED).
    poolAcq = {
      // The evict timer's period (ms), the core's choice when omitted.
      init: (pool, timeout, evictEvery) => acqInit(pool.#pid, timeout, evictEvery),
      quick: (pool, now) => {
        const r = acqQuick(pool.#pid, now);
        return r < 0 ? NO_ITEM : pool.#items[r];
      },
      begin: (pool, now) => acqBegin(pool.#pid, now),
      step: (pool, ticket, now, roll) => {
        const r = acqStep(pool.#pid, ticket, now, roll);
        if (r >= 0) return { kind: 'hand', item: pool.#items[r] };
        if (r <= -16) return { kind: 'close', item: pool.#letGo(-16 - r) };
        if (r === -1) return OPEN_STEP;
        return { kind: r === -2 ? 'park' : 'sleep', value: acqValue(pool.#pid) };
      },
      opened: (pool, ticket, item, now) => {
        const id = pool.#id(item);
        const ok = acqOpened(pool.#pid, ticket, id, now);
        if (!ok) pool.#forget(id);
        return ok;
      },
      unopened: (pool, ticket, now, roll) => acqUnopened(pool.#pid, ticket, now, roll),
      end: (pool, ticket) => acqEnd(pool.#pid, ticket),
      // Whether the caller must close the item.
      give: (pool, item, now, broken) => !pool.#giveBack(item, now, broken),
      evict: (pool, now) => pool.#gone(acqEvict(pool.#pid, now)),
      close: (pool) => pool.#gone(acqClose(pool.#pid)),
      wakes: (pool) => acqWakes(pool.#pid),
      parked: (pool) => acqParked(pool.#pid),
      drain: (pool) => acqDrain(pool.#pid),
      drained: (pool) => acqDrained(pool.#pid),
    };
  }

  constructor(options) {
    const { limits, ward } = strictOpts(options);
    let l;
    let w;
    if (limits === undefined) l = handleOf((defaultLimits ??= new Limits()), Limits);
    else if ((l = handleOf(limits, Limits)) === undefined) throw argType('limits', 'an instance of Limits', limits);
    if (ward !== undefined && (w = handleOf(ward, Ward)) === undefined) throw argType('ward', 'an instance of Ward', ward);
    this.#pid = F.poolNew(this, l, w);
    fix(this, { limits: limits === undefined ? defaultLimits : limits, ward });
  }

  #id(item) {
    let id = this.#ids.get(item);
    if (id === undefined) {
      id = this.#spare.length > 0 ? this.#spare.pop() : this.#items.length;
      this.#ids.set(item, id);
      this.#items[id] = item;
    }
    return id;
  }

  /** Forgets `id`'s value if the core holds it nowhere now. */
  #forget(id) {
    if (!poolHolds(this.#pid, id)) {
      this.#ids.delete(this.#items[id]);
      this.#items[id] = undefined;
      this.#spare.push(id);
    }
  }

  /** An id the core let go of (stale, evicted, closed): its value. */
  #letGo(id) {
    const item = this.#items[id];
    this.#forget(id);
    return item;
  }

  /**
   * Gives an item back through `give` (`broken` undefined) or the acquire
   * loop's `give`: whether the core kept it. A stranger fills a reserved
   * room or is refused; an item not kept (or dropped) is forgotten once the
   * core holds it nowhere.
   */
  #giveBack(item, now, broken) {
    const id = this.#id(item);
    const kept = broken === undefined ? poolGive(this.#pid, id, now) : !acqGive(this.#pid, id, now, broken ? 1 : 0);
    if (!kept) this.#forget(id);
    return kept;
  }

  /** Ids the core let go of (evicted, closed; one may come twice): their values. */
  #gone(ids) {
    const once = new Set(ids);
    for (let i = 0; i < ids.length; i++) ids[i] = this.#items[ids[i]];
    for (const id of once) this.#forget(id);
    return ids;
  }

  take(now, roll) {
    now = clock('now', now);
    roll = draw('roll', roll);
    const r = poolTake(this.#pid, now, roll);
    if (r >= 0) return { kind: 'ready', item: this.#items[r] };
    if (r <= -16) return { kind: 'stale', item: this.#letGo(-16 - r) };
    if (r === -1) return MAKE;
    if (r === -2) return WAIT;
    if (r === -3) return SHED;
    return { kind: 'later', delay: poolDelay(this.#pid) };
  }

  made(item, now) {
    now = clock('now', now);
    poolMade(this.#pid, this.#id(item), now);
  }

  unmade(now, roll) {
    poolUnmade(this.#pid, clock('now', now), draw('roll', roll));
  }

  give(item, now) {
    now = clock('now', now);
    return this.#giveBack(item, now, undefined);
  }

  drop(item) {
    // Not lent (or unknown): the core frees the room a take reserved, if any.
    const id = this.#ids.get(item);
    poolDrop(this.#pid, id ?? NONE);
    if (id !== undefined) this.#forget(id);
  }

  evict(now) {
    return this.#gone(poolEvict(this.#pid, clock('now', now)));
  }

  close() {
    return this.#gone(poolClose(this.#pid));
  }

  refusal(now) {
    return poolRefusal(this.#pid, clock('now', now));
  }

  get live() {
    return poolLive(this.#pid);
  }

  get idle() {
    return poolIdle(this.#pid);
  }

  get busy() {
    return poolBusy(this.#pid);
  }
}

function pick(pools, now, first, second) {
  if (!Array.isArray(pools)) throw argType('pools', 'an array of Pool', pools);
  now = clock('now', now);
  first = draw('first', first);
  second = draw('second', second);
  const handles = new Array(pools.length);
  for (let i = 0; i < pools.length; i++) {
    const h = poolHandle(pools[i]);
    if (h === undefined) throw argType(`pools[${i}]`, 'an instance of Pool', pools[i]);
    handles[i] = h;
  }
  return F.pick(handles, now, first, second);
}

// ---------------------------------------------------------------- Bucket

class Bucket {
  #id;

  constructor(rate, options) {
    const { burst, at } = strictOpts(options);
    const n = F.bucketNew(this, anyNum('rate', rate), optNum('burst', burst), optNum('at', at));
    this.#id = n.id;
    fix(this, { rate: n.rate, burst: n.burst });
  }

  take(now, n) {
    now = clock('now', now);
    if (n === undefined || n === 1) return bucketTake1(this.#id, now);
    return bucketTake(this.#id, now, anyNum('n', n));
  }

  next(now, n) {
    now = clock('now', now);
    return bucketNext(this.#id, now, optNum('n', n));
  }

  tokens(now) {
    return bucketTokens(this.#id, clock('now', now));
  }

  async wait(n, options) {
    optNum('n', n);
    const signal = checkSignal(strictOpts(options).signal);
    // The core answers each round: taken (-1), or how long to sleep; a count
    // that never comes is its RangeError.
    for (;;) {
      if (signal !== undefined) signal.throwIfAborted();
      const wait = bucketWait(this.#id, perf.now(), n);
      if (wait < 0) return;
      await sleep(Math.max(1, Math.ceil(wait)), signal);
    }
  }
}

// ---------------------------------------------------------------- Window

class Window {
  #id;

  constructor(allow, window) {
    const n = F.windowNew(this, anyNum('allow', allow), anyNum('window', window));
    this.#id = n.id;
    fix(this, { allow: n.allow, window: n.window });
  }

  take(now) {
    now = clock('now', now);
    return windowTake(this.#id, now);
  }

  left(now) {
    return windowLeft(this.#id, clock('now', now));
  }

  next(now) {
    return windowNext(this.#id, clock('now', now));
  }
}

// ---------------------------------------------------------------- Gate

class Gate {
  #id;

  constructor(limit) {
    const n = F.gateNew(this, anyNum('limit', limit));
    this.#id = n.id;
    fix(this, { limit: n.limit });
  }

  enter() {
    return gateEnter(this.#id);
  }

  leave() {
    gateLeave(this.#id);
  }

  get held() {
    return gateHeld(this.#id);
  }
}

module.exports = { F, perf, TIMER_MAX, sleep, Limits, Breaker, Backoff, Ward, Pool, pick, Bucket, Window, Gate, backoffHandle: (o) => handleOf(o, Backoff), poolLends, poolAcq, poolMapped, NO_ITEM };
