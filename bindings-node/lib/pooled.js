'use strict';
// `Pooled`: the driver of a Pool that opens, hands out, parks and closes
// items on the event loop, as the core's Acquires answers.

const { argType } = require('./errors.js');
const { optNum, strictOpts } = require('./checks.js');
const { perf, TIMER_MAX, Pool, poolLends, poolAcq, NO_ITEM } = require('./flow.js');

// The loop around the pool's takes — who is served next (first parked, first
// served), who parks, who gives up and with which error (the step throws it:
// `code` TIMEOUT, SHED or CLOSED), when a drain is over — is the core's
// Acquires, the machine Python's Pooled drives too. This class does what it
// answers: hands out, opens, closes, sleeps and parks until woken.
class Pooled {
  #pool;
  #open;
  #close;
  #timer = null;
  /** How to wake each acquire parked or sleeping out a ward's hold, by ticket. */
  #wakers = new Map();
  #closing = new Set();
  /** Resolves a drain once the core says it is over. */
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
    return this.#closed !== null;
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

  /** Resolves when `ticket` is woken (by the core, or by close) or after `ms`. */
  #park(ticket, ms) {
    return new Promise((resolve) => {
      let timer = null;
      const done = () => {
        if (timer !== null) clearTimeout(timer);
        this.#wakers.delete(ticket);
        resolve();
      };
      this.#wakers.set(ticket, done);
      if (ms !== Infinity) timer = setTimeout(done, Math.min(Math.max(0, Math.ceil(ms)), TIMER_MAX));
    });
  }

  acquire() {
    // The common case, an idle item, answers without an async frame (never
    // while draining or closed: then the first step throws CLOSED).
    const item = poolAcq.quick(this.#pool, perf.now());
    if (item !== NO_ITEM) return Promise.resolve(item);
    return this.#run();
  }

  async #run() {
    const pool = this.#pool;
    const ticket = poolAcq.begin(pool, perf.now());
    try {
      return await this.#acquire(ticket);
    } finally {
      // Nothing for a ticket the core already ended; a turn it held goes on.
      poolAcq.end(pool, ticket);
      this.#wakers.delete(ticket);
      this.#deliver();
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
          // Until woken or the deadline (Infinity: none).
          await this.#park(ticket, s.value - perf.now());
          continue;
        default:
          await this.#park(ticket, s.value);
      }
    }
  }

  release(item) {
    if (poolAcq.give(this.#pool, item, perf.now(), false)) this.#discard(item);
    this.#deliver();
    this.#settle();
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

  /** Ends a drain the core says is over (asked only while one waits). */
  #settle() {
    if (this.#drained !== null && poolAcq.drained(this.#pool)) {
      const done = this.#drained;
      this.#drained = null;
      done();
    }
  }

  #stopTimer() {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
  }

  drain() {
    if (this.#closed !== null) return this.#closed;
    poolAcq.drain(this.#pool);
    this.#stopTimer();
    return new Promise((resolve) => {
      const before = this.#drained;
      this.#drained = () => {
        if (before !== null) before();
        resolve();
      };
      this.#settle();
    }).then(() => this.close());
  }

  close() {
    if (this.#closed !== null) return this.#closed;
    this.#stopTimer();
    for (const item of poolAcq.close(this.#pool)) this.#discard(item);
    // Every parked and sleeping acquire wakes, and its next step throws CLOSED.
    for (const wake of [...this.#wakers.values()]) wake();
    this.#deliver();
    this.#closed = Promise.allSettled([...this.#closing]).then(() => undefined);
    return this.#closed;
  }
}

module.exports = { Pooled };
