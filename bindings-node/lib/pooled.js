'use strict';
// `Pooled`: the driver of a Pool that opens, hands out, parks and closes
// items on the event loop, as the core's Acquires answers.

const { argType, coded } = require('./errors.js');
const { optNum, strictOpts } = require('./checks.js');
const { F, perf, TIMER_MAX, Pool, poolLends, poolAcq, NO_ITEM } = require('./flow.js');

const OPEN = 0;
const DRAINING = 1;
const CLOSED = 2;

const CLOSED_TEXT = `headway: ${F.acqClosedText()}`;

function closedError() {
  return coded('CLOSED', CLOSED_TEXT);
}

// The loop around the pool's takes — who is served next (first parked, first
// served), who parks, who gives up — is the core's Acquires, the machine
// Python's Pooled drives too. This class does what it answers: hands out,
// opens, closes, sleeps, parks until woken, and throws.
class Pooled {
  #pool;
  #open;
  #close;
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
    const o = strictOpts(options);
    if (typeof o.open !== 'function') throw argType('open', 'of type function', o.open);
    if (o.close !== undefined && typeof o.close !== 'function') throw argType('close', 'of type function', o.close);
    optNum('timeout', o.timeout);
    optNum('evictEvery', o.evictEvery);
    this.#pool = new Pool({ limits: o.limits, ward: o.ward });
    // The core ranges both (a RangeError naming the one refused) and picks
    // each when it is omitted: how long a caller waits for an item (its
    // TAKE_TIMEOUT, HikariCP's connectionTimeout, 30 s) and the timer's period.
    const every = poolAcq.init(this.#pool, o.timeout, o.evictEvery);
    this.#open = o.open;
    this.#close = o.close;
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
          if (poolAcq.opened(pool, ticket, item, perf.now())) return item;
          // Closed meanwhile: close it; the next step fails as closed.
          this.#discard(item);
          continue;
        }
        case 'park':
          await this.#park(ticket, s.value);
          continue;
        case 'sleep':
          await this.#hold(s.value);
          continue;
        case 'full':
        case 'held':
          throw coded('TIMEOUT', `headway: ${poolAcq.why(pool)}`);
        case 'shed':
          throw coded('SHED', `headway: ${poolAcq.why(pool)}`);
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

module.exports = { Pooled };
