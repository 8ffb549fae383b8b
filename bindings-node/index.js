'use strict';
// headway for Node: the public classes over the native core, and the drivers
// (retry, Pooled, Bucket.wait) that act on the core's answers with the event
// loop. Every rule and default lives in the Rust core; this file checks
// argument types, fills clocks (`performance.now()`) and draws
// (`Math.random()`), maps slot ids back to the JS values they stand for, and
// sleeps, opens and closes. See index.d.ts for what each item answers and why.

const { inspect } = require('node:util');
const native = require('./addon.js');

// One set of native functions per JS environment, shared by every instance:
// a method is `fn(id, ...numbers)`, so each call site sees one target.
const F = native._flow();
const {
  bucketTake,
  bucketTake1,
  bucketNext,
  bucketTokens,
  windowTake,
  windowLeft,
  windowNext,
  gateEnter,
  gateLeave,
  gateHeld,
  backoffCeiling,
  backoffDelay,
  backoffMore,
  backoffSchedule,
  poolTake,
  poolDelay,
  poolMade,
  poolUnmade,
  poolGive,
  poolDrop,
  poolEvict,
  poolClose,
  poolRefusal,
  poolLive,
  poolIdle,
  poolBusy,
  acqInit,
  acqQuick,
  acqBegin,
  acqStep,
  acqValue,
  acqOpened,
  acqUnopened,
  acqEnd,
  acqGive,
  acqEvict,
  acqClose,
  acqWakes,
  acqParked,
  attemptsFailed,
} = F;

const perf = globalThis.performance;
const NONE = 4294967295; // an id no item ever gets
const TIMER_MAX = 2 ** 31 - 1; // setTimeout's longest sleep

// ---------------------------------------------------------------- errors

function received(v) {
  if (v === undefined || v === null) return ` Received ${v}`;
  if (typeof v === 'function') return ` Received function ${v.name || '<anonymous>'}`;
  if (typeof v === 'object') {
    const name = v.constructor && v.constructor.name;
    return name ? ` Received an instance of ${name}` : ` Received ${inspect(v, { depth: -1 })}`;
  }
  let shown = inspect(v, { colors: false });
  if (shown.length > 28) shown = `${shown.slice(0, 25)}...`;
  return ` Received type ${typeof v} (${shown})`;
}

/** A TypeError as Node's own APIs throw it, naming the argument. */
function argType(name, expected, value) {
  const err = new TypeError(`The "${name}" argument must be ${expected}.${received(value)}`);
  err.code = 'ERR_INVALID_ARG_TYPE';
  return err;
}

/** A RangeError as Node's own APIs throw it, naming the argument. */
function outOfRange(name, why) {
  const err = new RangeError(`The value of "${name}" is out of range: it ${why}`);
  err.code = 'ERR_OUT_OF_RANGE';
  return err;
}

function coded(code, message) {
  const err = new Error(message);
  err.code = code;
  return err;
}

const NUMBER = 'of type number';

function num(name, v) {
  if (typeof v !== 'number') throw argType(name, NUMBER, v);
  return v;
}

function optNum(name, v) {
  if (v !== undefined && typeof v !== 'number') throw argType(name, NUMBER, v);
  return v;
}

function clock(name, v) {
  if (v === undefined) return perf.now();
  if (typeof v !== 'number') throw argType(name, NUMBER, v);
  return v;
}

function draw(name, v) {
  if (v === undefined) return Math.random();
  if (typeof v !== 'number') throw argType(name, NUMBER, v);
  return v;
}

const EMPTY = Object.freeze({});

/** Read-only, enumerable own properties (not a freeze: subclasses may add). */
function fix(obj, props) {
  for (const key of Object.keys(props)) {
    Object.defineProperty(obj, key, { value: props[key], enumerable: true, writable: false, configurable: false });
  }
}

function opts(v) {
  if (v === undefined) return EMPTY;
  if (v === null || typeof v !== 'object') throw argType('options', 'of type object', v);
  return v;
}

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

function checkSignal(signal) {
  if (signal === undefined) return undefined;
  if (signal === null || typeof signal !== 'object' || typeof signal.addEventListener !== 'function' || !('aborted' in signal)) {
    throw argType('signal', 'an instance of AbortSignal', signal);
  }
  return signal;
}

// ---------------------------------------------------------------- Limits

let limitsHandle;

class Limits {
  #h;
  static {
    limitsHandle = (o) => (o !== null && typeof o === 'object' && #h in o ? o.#h : undefined);
  }

  constructor(options) {
    const { size, idle, keep, life } = opts(options);
    const n = F.limitsNew(optNum('size', size), optNum('idle', idle), optNum('keep', keep), optNum('life', life));
    this.#h = n.handle;
    fix(this, { size: n.size, idle: n.idle, keep: n.keep, life: n.life, evictEvery: n.evictEvery });
  }
}

let defaultLimits;

// ---------------------------------------------------------------- Breaker

let breakerHandle;

class Breaker {
  #h;
  static {
    breakerHandle = (o) => (o !== null && typeof o === 'object' && #h in o ? o.#h : undefined);
  }

  constructor(options) {
    const { k, window } = opts(options);
    const n = F.breakerNew(optNum('k', k), optNum('window', window));
    this.#h = n.handle;
    fix(this, { k: n.k, window: n.window });
  }
}

// ---------------------------------------------------------------- Backoff

let backoffHandle;

class Backoff {
  #id;
  static {
    backoffHandle = (o) => (o !== null && typeof o === 'object' && #id in o ? o.#id : undefined);
  }

  constructor(options) {
    const { base, factor, cap, attempts, jitter } = opts(options);
    if (jitter !== undefined && typeof jitter !== 'string') throw argType('jitter', 'of type string', jitter);
    const n = F.backoffNew(this, optNum('base', base), optNum('factor', factor), optNum('cap', cap), optNum('attempts', attempts), jitter);
    this.#id = n.id;
    fix(this, { base: n.base, factor: n.factor, cap: n.cap, attempts: n.attempts, jitter: n.jitter });
  }

  ceiling(retry) {
    return backoffCeiling(this.#id, num('retry', retry));
  }

  delay(retry, random, previous) {
    if (typeof retry !== 'number') throw argType('retry', NUMBER, retry);
    if (random === undefined) random = Math.random();
    else if (typeof random !== 'number') throw argType('random', NUMBER, random);
    if (previous === undefined) previous = 0;
    else if (typeof previous !== 'number') throw argType('previous', NUMBER, previous);
    return backoffDelay(this.#id, retry, random, previous);
  }

  more(made) {
    return backoffMore(this.#id, num('made', made));
  }

  schedule(randoms) {
    if (randoms === undefined) randoms = [];
    else if (!Array.isArray(randoms)) throw argType('randoms', 'an array of numbers', randoms);
    return backoffSchedule(this.#id, randoms);
  }
}

let defaultBackoff;

// ---------------------------------------------------------------- Ward

let wardHandle;

class Ward {
  #h;
  static {
    wardHandle = (o) => (o !== null && typeof o === 'object' && #h in o ? o.#h : undefined);
  }

  constructor(options) {
    const { breaker, backoff } = opts(options);
    let b;
    let o;
    if (breaker !== undefined && (b = breakerHandle(breaker)) === undefined) {
      throw argType('breaker', 'an instance of Breaker', breaker);
    }
    if (backoff !== undefined && (o = backoffHandle(backoff)) === undefined) {
      throw argType('backoff', 'an instance of Backoff', backoff);
    }
    this.#h = F.wardNew(b, o);
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
const CLOSED_STEP = Object.freeze({ kind: 'closed' });
// acqStep's codes -2 .. -6, by their negation.
const STEP_KINDS = [undefined, undefined, 'park', 'sleep', 'full', 'held', 'shed'];

class Pool {
  #pid;
  // The core pools slot ids; these map them to the JS values (identity is
  // the Map's, which is `===` but for NaN). `#held[id]` counts the core's
  // entries for an id (idle or lent) and `#out[id]` the lent ones, both
  // mirrored from the core's answers, so an id is forgotten exactly when the
  // core can no longer hand it back.
  #ids = new Map();
  #items = [];
  #held = [];
  #out = [];
  #spare = [];

  static {
    poolHandle = (o) => (o !== null && typeof o === 'object' && #pid in o ? o.#pid : undefined);
    poolMapped = (pool) => pool.#ids.size;
    poolLends = (pool, item) => {
      const id = pool.#ids.get(item);
      return id !== undefined && pool.#out[id] > 0;
    };
    // Each answer of the core's acquire loop is mirrored in the id map as
    // `take`, `made`, `give` and `drop` mirror theirs.
    poolAcq = {
      init: (pool, timeout) => acqInit(pool.#pid, timeout),
      quick: (pool, now) => {
        const r = acqQuick(pool.#pid, now);
        if (r < 0) return NO_ITEM;
        pool.#out[r]++;
        return pool.#items[r];
      },
      begin: (pool, now) => acqBegin(pool.#pid, now),
      step: (pool, ticket, now, roll) => {
        const r = acqStep(pool.#pid, ticket, now, roll);
        if (r >= 0) {
          pool.#out[r]++;
          return { kind: 'hand', item: pool.#items[r] };
        }
        if (r <= -16) {
          const id = -16 - r;
          const item = pool.#items[id];
          pool.#held[id]--;
          pool.#forget(id);
          return { kind: 'close', item };
        }
        if (r === -1) return OPEN_STEP;
        if (r === -7) return CLOSED_STEP;
        return { kind: STEP_KINDS[-r], value: acqValue(pool.#pid) };
      },
      opened: (pool, ticket, item, now) => {
        const id = pool.#id(item);
        const ok = acqOpened(pool.#pid, ticket, id, now);
        if (ok) {
          pool.#held[id]++;
          pool.#out[id]++;
        } else {
          pool.#forget(id);
        }
        return ok;
      },
      unopened: (pool, ticket, now, roll) => acqUnopened(pool.#pid, ticket, now, roll),
      end: (pool, ticket) => acqEnd(pool.#pid, ticket),
      // Whether the caller must close the item.
      give: (pool, item, now, broken) => {
        let id = pool.#ids.get(item);
        const known = id !== undefined;
        if (!known) id = pool.#id(item);
        const lent = known && pool.#out[id] > 0;
        const r = acqGive(pool.#pid, id, now, broken ? 1 : 0);
        if (r === 2) {
          // Dropped.
          if (lent) {
            pool.#out[id]--;
            pool.#held[id]--;
          }
          pool.#forget(id);
        } else if (!known) {
          if (r === 0) pool.#held[id] = 1;
          else pool.#forget(id);
        } else if (lent) {
          pool.#out[id]--;
          if (r !== 0) {
            pool.#held[id]--;
            pool.#forget(id);
          }
        } else if (r === 0) {
          pool.#held[id]++;
        }
        return r !== 0;
      },
      evict: (pool, now) => pool.#gone(acqEvict(pool.#pid, now)),
      close: (pool) => pool.#gone(acqClose(pool.#pid)),
      wakes: (pool) => acqWakes(pool.#pid),
      parked: (pool) => acqParked(pool.#pid),
    };
  }

  constructor(options) {
    const { limits, ward } = opts(options);
    let l;
    let w;
    if (limits === undefined) l = limitsHandle((defaultLimits ??= new Limits()));
    else if ((l = limitsHandle(limits)) === undefined) throw argType('limits', 'an instance of Limits', limits);
    if (ward !== undefined && (w = wardHandle(ward)) === undefined) throw argType('ward', 'an instance of Ward', ward);
    this.#pid = F.poolNew(this, l, w);
    fix(this, { limits: limits === undefined ? defaultLimits : limits, ward });
  }

  #id(item) {
    let id = this.#ids.get(item);
    if (id === undefined) {
      id = this.#spare.length > 0 ? this.#spare.pop() : this.#items.length;
      this.#ids.set(item, id);
      this.#items[id] = item;
      this.#held[id] = 0;
      this.#out[id] = 0;
    }
    return id;
  }

  #forget(id) {
    if (this.#held[id] === 0) {
      this.#ids.delete(this.#items[id]);
      this.#items[id] = undefined;
      this.#spare.push(id);
    }
  }

  #gone(ids) {
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i];
      ids[i] = this.#items[id];
      this.#held[id]--;
      this.#forget(id);
    }
    return ids;
  }

  take(now, roll) {
    if (now === undefined) now = perf.now();
    else if (typeof now !== 'number') throw argType('now', NUMBER, now);
    if (roll === undefined) roll = Math.random();
    else if (typeof roll !== 'number') throw argType('roll', NUMBER, roll);
    const r = poolTake(this.#pid, now, roll);
    if (r >= 0) {
      this.#out[r]++;
      return { kind: 'ready', item: this.#items[r] };
    }
    if (r <= -16) {
      const id = -16 - r;
      const item = this.#items[id];
      this.#held[id]--;
      this.#forget(id);
      return { kind: 'stale', item };
    }
    if (r === -1) return MAKE;
    if (r === -2) return WAIT;
    if (r === -3) return SHED;
    return { kind: 'later', delay: poolDelay(this.#pid) };
  }

  made(item, now) {
    now = clock('now', now);
    const id = this.#id(item);
    poolMade(this.#pid, id, now);
    this.#held[id]++;
    this.#out[id]++;
  }

  unmade(now, roll) {
    poolUnmade(this.#pid, clock('now', now), draw('roll', roll));
  }

  give(item, now) {
    if (now === undefined) now = perf.now();
    else if (typeof now !== 'number') throw argType('now', NUMBER, now);
    let id = this.#ids.get(item);
    if (id === undefined) {
      // A stranger: the core fills a reserved room with it, or refuses it.
      id = this.#id(item);
      const kept = poolGive(this.#pid, id, now);
      if (kept) this.#held[id] = 1;
      else this.#forget(id);
      return kept;
    }
    const lent = this.#out[id] > 0;
    const kept = poolGive(this.#pid, id, now);
    if (lent) {
      this.#out[id]--;
      if (!kept) {
        this.#held[id]--;
        this.#forget(id);
      }
    } else if (kept) {
      this.#held[id]++;
    }
    return kept;
  }

  drop(item) {
    const id = this.#ids.get(item);
    if (id === undefined || this.#out[id] === 0) {
      // Not lent: the core frees the room a take reserved, if any.
      poolDrop(this.#pid, NONE);
      return;
    }
    poolDrop(this.#pid, id);
    this.#out[id]--;
    this.#held[id]--;
    this.#forget(id);
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
    const { burst, at } = opts(options);
    const n = F.bucketNew(this, num('rate', rate), optNum('burst', burst), optNum('at', at));
    this.#id = n.id;
    fix(this, { rate: n.rate, burst: n.burst });
  }

  take(now, n) {
    if (now === undefined) now = perf.now();
    else if (typeof now !== 'number') throw argType('now', NUMBER, now);
    if (n === undefined || n === 1) return bucketTake1(this.#id, now);
    if (typeof n !== 'number') throw argType('n', NUMBER, n);
    return bucketTake(this.#id, now, n);
  }

  next(now, n) {
    now = clock('now', now);
    if (n === undefined) n = 1;
    else if (typeof n !== 'number') throw argType('n', NUMBER, n);
    return bucketNext(this.#id, now, n);
  }

  tokens(now) {
    return bucketTokens(this.#id, clock('now', now));
  }

  async wait(n, options) {
    if (n === undefined) n = 1;
    else if (typeof n !== 'number') throw argType('n', NUMBER, n);
    const signal = checkSignal(opts(options).signal);
    for (;;) {
      if (signal !== undefined) signal.throwIfAborted();
      const now = perf.now();
      if (bucketTake(this.#id, now, n)) return;
      const wait = bucketNext(this.#id, now, n);
      if (wait === Infinity) {
        throw outOfRange('n', `can never be taken: more than the burst (${this.burst}) or a zero rate (received ${n})`);
      }
      await sleep(Math.max(1, Math.ceil(wait)), signal);
    }
  }
}

// ---------------------------------------------------------------- Window

class Window {
  #id;

  constructor(allow, window) {
    const n = F.windowNew(this, num('allow', allow), num('window', window));
    this.#id = n.id;
    fix(this, { allow: n.allow, window: n.window });
  }

  take(now) {
    if (now === undefined) now = perf.now();
    else if (typeof now !== 'number') throw argType('now', NUMBER, now);
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
    const n = F.gateNew(this, num('limit', limit));
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

// ---------------------------------------------------------------- retry

// The core's Attempts decides after each failure whether to go on and how long
// to sleep; this loop calls, sleeps and throws.
async function attempts(fn, backoff, retryIf, signal) {
  let previous = 0;
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (err) {
      const stopped = signal !== undefined && signal.aborted;
      const retryable = !stopped && (retryIf === undefined || retryIf(err));
      const policy = backoff === undefined ? (defaultBackoff ??= new Backoff()) : backoff;
      const delay = attemptsFailed(backoffHandle(policy), attempt, previous, retryable ? 1 : 0, stopped ? 1 : 0, Math.random());
      if (delay < 0) throw stopped ? signal.reason : err;
      previous = delay;
      await sleep(delay, signal);
    }
  }
}

function retry(fn, options) {
  if (typeof fn !== 'function') return Promise.reject(argType('fn', 'of type function', fn));
  let backoff;
  let retryIf;
  let signal;
  try {
    ({ backoff, retryIf, signal } = opts(options));
    if (backoff !== undefined && backoffHandle(backoff) === undefined) throw argType('backoff', 'an instance of Backoff', backoff);
    if (retryIf !== undefined && typeof retryIf !== 'function') throw argType('retryIf', 'of type function', retryIf);
    signal = checkSignal(signal);
  } catch (err) {
    return Promise.reject(err);
  }
  if (signal === undefined) return attempts(fn, backoff, retryIf, undefined);
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    attempts(fn, backoff, retryIf, signal).then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (err) => {
        signal.removeEventListener('abort', onAbort);
        reject(err);
      },
    );
  });
}

// ---------------------------------------------------------------- Pooled

// How long a caller waits for an item: the core's TAKE_TIMEOUT (HikariCP's
// connectionTimeout, 30 s).
const DEFAULT_TIMEOUT = F.takeTimeout();

const OPEN = 0;
const DRAINING = 1;
const CLOSED = 2;

function closedError() {
  return coded('CLOSED', 'headway: the pool is closed');
}

// The loop around the pool's takes — who is served next (first parked, first
// served), who parks, who gives up — is the core's Acquires, the machine
// Python's Pooled drives too. This class does what it answers: hands out,
// opens, closes, sleeps, parks until woken, and throws.
class Pooled {
  #pool;
  #open;
  #close;
  #timeout;
  #timer = null;
  #state = OPEN;
  /** How to wake each parked acquire, by ticket. */
  #wakers = new Map();
  /** Acquires sleeping out a ward's hold. */
  #sleepers = new Set();
  /** Acquires under way (parked, sleeping or opening). */
  #active = 0;
  #closing = new Set();
  #drained = null;
  #closed = null;

  constructor(options) {
    const o = opts(options);
    if (typeof o.open !== 'function') throw argType('open', 'of type function', o.open);
    if (o.close !== undefined && typeof o.close !== 'function') throw argType('close', 'of type function', o.close);
    const timeout = o.timeout === undefined ? DEFAULT_TIMEOUT : num('timeout', o.timeout);
    if (!(timeout >= 0)) throw outOfRange('timeout', `must be a non-negative number of milliseconds (received ${timeout})`);
    this.#pool = new Pool({ limits: o.limits, ward: o.ward });
    poolAcq.init(this.#pool, timeout);
    let every = o.evictEvery;
    if (every === undefined) {
      // The core's choice: the shorter of keep and life, at least 1 s.
      every = this.#pool.limits.evictEvery;
    } else {
      num('evictEvery', every);
      if (!(every >= 0)) throw outOfRange('evictEvery', `must be a non-negative number of milliseconds (received ${every})`);
    }
    this.#open = o.open;
    this.#close = o.close;
    this.#timeout = timeout;
    if (every > 0 && every !== Infinity) {
      // Unref'd, so it never keeps the process alive, and holding the pool
      // only weakly, so a forgotten Pooled is still collected (its timer
      // then stops itself).
      const self = new WeakRef(this);
      const timer = setInterval(() => {
        const pooled = self.deref();
        if (pooled === undefined) clearInterval(timer);
        else pooled.#sweep();
      }, Math.min(every, TIMER_MAX));
      timer.unref();
      this.#timer = timer;
    }
  }

  /** The bookkeeper underneath, for its counts. */
  get pool() {
    return this.#pool;
  }

  /** How many acquires are parked on a full pool. */
  get pending() {
    return poolAcq.parked(this.#pool);
  }

  get live() {
    return this.#pool.live;
  }

  get idle() {
    return this.#pool.idle;
  }

  get busy() {
    return this.#pool.busy;
  }

  get closed() {
    return this.#state === CLOSED;
  }

  #discard(item) {
    if (this.#close === undefined) return;
    let done;
    try {
      done = Promise.resolve(this.#close(item));
    } catch {
      return;
    }
    const p = done.then(
      () => this.#closing.delete(p),
      () => this.#closing.delete(p),
    );
    this.#closing.add(p);
  }

  /** Wakes every acquire the core says to. */
  #deliver() {
    const wakes = poolAcq.wakes(this.#pool);
    for (let i = 0; i < wakes.length; i++) {
      const wake = this.#wakers.get(wakes[i]);
      if (wake !== undefined) wake();
    }
  }

  #sweep() {
    for (const item of poolAcq.evict(this.#pool, perf.now())) this.#discard(item);
    this.#deliver();
  }

  /** Resolves when `ticket` is woken or its deadline passes. */
  #park(ticket, deadline) {
    return new Promise((resolve) => {
      let timer = null;
      const done = () => {
        if (timer !== null) clearTimeout(timer);
        this.#wakers.delete(ticket);
        resolve();
      };
      this.#wakers.set(ticket, done);
      if (deadline !== Infinity) {
        timer = setTimeout(done, Math.min(Math.max(0, Math.ceil(deadline - perf.now())), TIMER_MAX));
      }
    });
  }

  #hold(delay) {
    return new Promise((resolve, reject) => {
      const s = { fail: reject, timer: null };
      s.timer = setTimeout(() => {
        this.#sleepers.delete(s);
        resolve();
      }, Math.min(Math.ceil(delay), TIMER_MAX));
      this.#sleepers.add(s);
    });
  }

  #timedOut(why) {
    return coded('TIMEOUT', `headway: no item within ${this.#timeout} ms: ${why}`);
  }

  acquire() {
    if (this.#state !== OPEN) return Promise.reject(closedError());
    // The common case, an idle item, answers without an async frame.
    const item = poolAcq.quick(this.#pool, perf.now());
    if (item !== NO_ITEM) return Promise.resolve(item);
    return this.#run();
  }

  async #run() {
    this.#active++;
    const pool = this.#pool;
    const ticket = poolAcq.begin(pool, perf.now());
    try {
      return await this.#acquire(ticket);
    } finally {
      // Nothing for a ticket the core already ended; a turn it held goes on.
      poolAcq.end(pool, ticket);
      this.#wakers.delete(ticket);
      this.#deliver();
      this.#active--;
      this.#settle();
    }
  }

  async #acquire(ticket) {
    const pool = this.#pool;
    for (;;) {
      const s = poolAcq.step(pool, ticket, perf.now(), Math.random());
      this.#deliver();
      switch (s.kind) {
        case 'hand':
          return s.item;
        case 'close':
          this.#discard(s.item);
          continue;
        case 'open': {
          let item;
          try {
            item = await this.#open();
          } catch (err) {
            poolAcq.unopened(pool, ticket, perf.now(), Math.random());
            throw err;
          }
          if (!poolAcq.opened(pool, ticket, item, perf.now())) {
            this.#discard(item);
            throw closedError();
          }
          return item;
        }
        case 'park':
          await this.#park(ticket, s.value);
          continue;
        case 'sleep':
          await this.#hold(s.value);
          continue;
        case 'full':
          throw this.#timedOut(`the pool is full (${s.value} live)`);
        case 'held':
          throw this.#timedOut(`makes are held for ${s.value} ms after failures`);
        case 'shed':
          throw coded('SHED', `headway: the breaker refuses ${Math.round(s.value * 100)}% of makes: failing fast`);
        default:
          throw closedError();
      }
    }
  }

  release(item) {
    if (poolAcq.give(this.#pool, item, perf.now(), false)) this.#discard(item);
    this.#deliver();
    if (this.#state === DRAINING) this.#settle();
  }

  destroy(item) {
    poolAcq.give(this.#pool, item, perf.now(), true);
    this.#discard(item);
    this.#deliver();
    this.#settle();
  }

  async use(fn) {
    if (typeof fn !== 'function') throw argType('fn', 'of type function', fn);
    const item = await this.acquire();
    try {
      return await fn(item);
    } finally {
      // Still lent unless the body called destroy (or release) itself.
      if (poolLends(this.#pool, item)) this.release(item);
    }
  }

  #settle() {
    if (this.#state === DRAINING && this.#drained !== null && this.#active === 0 && this.#pool.busy === 0) {
      const done = this.#drained;
      this.#drained = null;
      done();
    }
  }

  drain() {
    if (this.#state === CLOSED) return this.#closed;
    if (this.#state === OPEN) {
      this.#state = DRAINING;
      if (this.#timer !== null) clearInterval(this.#timer);
      this.#timer = null;
    }
    return new Promise((resolve) => {
      if (this.#active === 0 && this.#pool.busy === 0) resolve();
      else {
        const before = this.#drained;
        this.#drained = () => {
          if (before !== null) before();
          resolve();
        };
      }
    }).then(() => this.close());
  }

  close() {
    if (this.#state === CLOSED) return this.#closed;
    this.#state = CLOSED;
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
    for (const s of this.#sleepers) {
      clearTimeout(s.timer);
      s.fail(closedError());
    }
    this.#sleepers.clear();
    for (const item of poolAcq.close(this.#pool)) this.#discard(item);
    // Every parked acquire wakes and fails as closed.
    this.#deliver();
    this.#closed = Promise.allSettled([...this.#closing]).then(() => undefined);
    return this.#closed;
  }
}

module.exports = {
  Limits,
  Pool,
  Ward,
  Breaker,
  pick,
  Backoff,
  Bucket,
  Window,
  Gate,
  retry,
  Pooled,
  version: native.version,
};

// The task queue (App, tasks, canvas, workers, beat, schedule, testing): tasks.js.
Object.assign(module.exports, require('./tasks.js'));

// The admin interface: admin.handler(app, { token }) for http or Express.
module.exports.admin = Object.freeze(require('./admin.js'));

// Hidden: the benchmark's floors, the panic tests and the leak probes.
Object.defineProperties(module.exports, {
  _native: { value: native },
  _flow: { value: F },
  // The napi floor: a native function that reads two numbers and answers
  // true — the call Bucket.take makes, doing nothing.
  _noop: { value: F.noop },
  // The same with an instance id first, as every method call carries.
  _noop3: { value: F.noop3 },
  // The same empty call through napi-rs's #[napi] glue, for comparison.
  _noopNapi: { value: native._noopNapi },
  _panic: { value: native._panic },
  _panicRaw: { value: F.panic },
  // How many native flow values are alive; how many items a Pool maps.
  _alive: { value: F.alive },
  _mapped: { value: (pool) => poolMapped(pool) },
});
