'use strict';
// The bridge to the app's HostQueue: the hub that settles native answers on
// the event loop, and the bodies it runs.
//
// How a body is called. The core pushes calls onto the app's HostQueue and
// rings the environment's one bell (a weak ThreadsafeFunction). The bell
// drains everything settled since the last ring (Promises of get(), send()
// on Redis, worker.run(), ...) with one native call, then takes waiting calls
// in batches of up to BATCH with one native call each (when none wait and the
// last gaps between batches were short, that call spins up to 100 µs for the
// next rather than sleep until rung: core's Taker), runs every body — a
// sync result is answered at once, a Promise when it settles — and answers
// the batch with one native call. A thrown error or a rejected Promise is a
// task failure (type = err.name, message, stack), never a crash — whatever
// was thrown (see `failed`).

const { inspect } = require('node:util');
const native = require('../addon.js');
const { refusal, argType, SoftTimeLimitExceeded, TaskRetry, Reject, Ignore, ASK } = require('./errors.js');
const { parse, encode } = require('./json.js');
const tracing = require('./tracing.js');

// Promises waiting on a ticket: the native call did not finish at once and
// runs on the core's runtime; the bell answers it.
const waiting = new Map();
// Hosts (an app's or a scheduler's body queue) with a worker or a scheduler
// running, whose calls the bell serves.
const active = new Set();
const BATCH = 1024;
// How many batches one wake-up serves before it yields to I/O.
const ROUNDS = 16;

function later(ticket, decode) {
  return new Promise((resolve, reject) => {
    waiting.set(ticket, { resolve, reject, decode });
  });
}

/**
 * `f()`, a Promise, or a rejected one when `f` throws: what every method
 * that answers a Promise does with a bad argument or a refusal met on the
 * way (it rejects, never throws).
 */
function promised(f) {
  try {
    return f();
  } catch (e) {
    return Promise.reject(e);
  }
}

/**
 * A native answer as a Promise: a string is the payload (done at once), a
 * number a ticket (answered through the bell), an object a refusal.
 */
function answer(r, now, decodeLater) {
  if (typeof r === 'string') {
    try {
      return Promise.resolve(now(r));
    } catch (e) {
      return Promise.reject(e);
    }
  }
  if (typeof r === 'number') return later(r, decodeLater);
  return Promise.reject(refusal(r));
}

function settle(text) {
  for (const [ticket, ok, payload] of parse(text)) {
    const w = waiting.get(ticket);
    if (w === undefined) continue;
    waiting.delete(ticket);
    if (ok === 1) {
      let v;
      try {
        v = w.decode(payload);
      } catch (e) {
        w.reject(e);
        continue;
      }
      w.resolve(v);
    } else {
      w.reject(refusal(payload));
    }
  }
}

function onBell() {
  try {
    const text = native._hubDrain();
    if (text !== null) settle(text);
    for (const host of active) serve(host);
  } catch (e) {
    // A bug in headway, not in a body (bodies are caught one by one): make
    // it loud rather than lose it inside the ThreadsafeFunction.
    queueMicrotask(() => {
      throw e;
    });
  }
}

native._hubInit(onBell);

// ---------------------------------------------------------------- bodies

const TASK = 0;
const JOB = 1;

/** One body queue (an app's or a scheduler's) and the JS functions it calls. */
class Host {
  constructor(n, kind, app = null) {
    this.n = n;
    this.kind = kind;
    // The native app a body's `ctx.updateState` records through (null: a
    // scheduler's jobs, which have no run to record for).
    this.app = app;
    this.fns = new Map();
    this.running = new Map(); // seq -> Context of an async body in flight
    this.ok = '';
    this.failed = '';
    this.flushing = false;
    this.users = 0;
    // (event, ctx, args, value) for each body's start and end, while a
    // worker of the app has listeners (lib/tasks.js); null: no cost.
    this.onRun = null;
  }

  use() {
    if (this.users++ === 0) active.add(this);
    serve(this);
  }

  unuse() {
    if (--this.users === 0) active.delete(this);
  }
}

function serve(host) {
  if (host.running.size > 0) cancel(host, host.n.cancelled());
  // Drained on every wake-up, not only while async bodies are in flight: a
  // sync body past its soft limit is reported too (and cannot be told), and
  // what is not drained would pile up in the core.
  soften(host, host.n.softened());
  for (let round = 0; round < ROUNDS; round++) {
    // Answers what is waiting (async bodies settled since the last flush, the
    // batch just run) and takes the next batch, in one native call.
    const text = host.n.swap(host.ok && `[${host.ok}]`, host.failed && `[${host.failed}]`, BATCH);
    host.ok = '';
    host.failed = '';
    if (text === null) return;
    run(host, parse(text));
  }
  flush(host);
  // More may wait: give I/O a turn, then go on (the queue does not ring
  // again while it is not empty).
  setImmediate(() => {
    if (host.users > 0) serve(host);
  });
}

function cancel(host, seqs) {
  for (const seq of seqs) {
    const ctx = host.running.get(seq);
    if (ctx !== undefined) {
      host.running.delete(seq);
      ctx[ABORT]();
    }
  }
}

// Calls past their soft time limit ring the bell: their signal aborts with a
// SoftTimeLimitExceeded, and the body goes on (its answer still counts). A
// sync body holds the event loop, so only an async one can be told.
function soften(host, seqs) {
  for (const seq of seqs) {
    const ctx = host.running.get(seq);
    if (ctx !== undefined) ctx[SOFT]();
  }
}

// Withdrawn calls (a timeout, a terminate) are reported by `cancelled()`
// but not rung: while async bodies are in flight, look every 100 ms. The
// timer is unref'd: it never keeps the process alive.
let poller = null;
function watch() {
  if (poller !== null) return;
  poller = setInterval(() => {
    let any = false;
    for (const host of active) {
      if (host.running.size > 0) {
        cancel(host, host.n.cancelled());
        soften(host, host.n.softened());
        any = true;
      }
    }
    if (!any) {
      clearInterval(poller);
      poller = null;
    }
  }, 100);
  poller.unref();
}

function run(host, calls) {
  for (let i = 0; i < calls.length; i++) {
    const seq = calls[i][0];
    try {
      call(host, calls[i]);
    } catch (e) {
      // Nothing a body hands back should get here (each step below catches
      // its own); if something does, it fails this run, not the batch.
      failed(host, seq, e);
    }
  }
}

function call(host, c) {
  const job = host.kind === JOB;
  const seq = c[0];
  const key = c[1];
  const fn = host.fns.get(key);
  if (fn === undefined) {
    failed(host, seq, { name: 'NotRegistered', message: `no JS body is registered as ${JSON.stringify(key)}` });
    return;
  }
  const ctx = new Context(c, host.app);
  const on = job ? null : host.onRun;
  if (on !== null) on('active', ctx, c[8]);
  // The run's span, when its app traces (the core added its plan).
  const traced = c.length > 16 ? tracing.begin(c[16]) : null;
  let r;
  try {
    r = job ? fn(ctx) : traced === null ? fn(c[8], ctx) : tracing.within(traced, () => fn(c[8], ctx));
  } catch (e) {
    threw(host, c, ctx, on, traced, e);
    return;
  }
  if (r === null || (typeof r !== 'object' && typeof r !== 'function')) {
    returned(host, c, ctx, on, traced, r);
    return;
  }
  // A thenable is read the way `await` reads one: `then` once (its getter
  // may throw), called once (it may throw, or call back twice or never).
  let then;
  try {
    then = r.then;
  } catch (e) {
    tracing.end(traced, false, e);
    failed(host, seq, e);
    return;
  }
  if (typeof then !== 'function') {
    returned(host, c, ctx, on, traced, r);
    return;
  }
  host.running.set(seq, ctx);
  watch();
  let settled = false;
  try {
    then.call(
      r,
      (v) => {
        if (settled) return;
        settled = true;
        if (host.running.delete(seq) || !ctx[CANCELLED]) {
          returned(host, c, ctx, on, traced, v);
        } else {
          tracing.end(traced, false, ctx.signal.reason);
        }
        soon(host);
      },
      (e) => {
        if (settled) return;
        settled = true;
        host.running.delete(seq);
        threw(host, c, ctx, on, traced, e);
        soon(host);
      },
    );
  } catch (e) {
    if (settled) return;
    settled = true;
    host.running.delete(seq);
    tracing.end(traced, false, e);
    failed(host, seq, e);
  }
}

/** Call `c`'s body returned (or resolved to) `v`: told to its listener and span, answered. */
function returned(host, c, ctx, on, traced, v) {
  if (on !== null) on('SUCCESS', ctx, c[8], v);
  tracing.end(traced, true, v);
  done(host, c[0], c[1], host.kind === JOB ? null : v);
}

/** Call `c`'s body threw (or rejected with) `e`: what it comes to told to its listener and span, answered. */
function threw(host, c, ctx, on, traced, e) {
  const after = on !== null || traced !== null ? afterFailure(c, e) : null;
  if (on !== null) on(after[0], ctx, c[8], e);
  tracing.end(traced, false, e, after);
  failed(host, c[0], e);
}

function done(host, seq, key, v) {
  let json;
  try {
    if (v === undefined || v === null) json = 'null';
    else if (typeof v === 'number' && Number.isFinite(v)) json = `${v}`;
    else if (typeof v === 'boolean') json = v ? 'true' : 'false';
    else json = encode(key, 'result', v);
  } catch (e) {
    failed(host, seq, e);
    return;
  }
  host.ok += `${host.ok ? ',' : ''}[${seq},${json}]`;
}

/** `f()`, or undefined when it throws (whatever it throws is not touched). */
function attempt(f) {
  try {
    return f();
  } catch {
    return undefined;
  }
}

/** `v` as text the native side accepts, or null when it is not a string. */
function text(v) {
  return typeof v === 'string' ? v.toWellFormed() : null;
}

// Anything can be thrown or rejected with — an object with no prototype, a
// Proxy whose traps throw, an Error whose `message` or `stack` getter
// throws, a Symbol — and each fails its run, never the worker or the batch:
// every read is guarded, and a type or message that cannot be read crosses
// as null, answered with the core's fixed text (headway-core's
// Failure::UNNAMED and Failure::UNDESCRIBED).
/** What JS can read of a thrown value: type, message, stack (null where unreadable). */
function described(e) {
  if (e !== null && typeof e === 'object') {
    return [
      text(attempt(() => e.name)) || text(attempt(() => e.constructor.name)) || null,
      text(attempt(() => e.message)) ?? text(attempt(() => String(e))),
      text(attempt(() => e.stack)),
    ];
  }
  // `throw 'oops'` or a rejected Promise of a non-Error.
  return [e === null ? 'null' : typeof e, text(attempt(() => String(e))), null];
}

/** The ask a thrown TaskRetry, Reject or Ignore carries (its cause described), else null. */
function askOf(e) {
  const a = e !== null && typeof e === 'object' ? attempt(() => e[ASK]) : undefined;
  if (a === undefined || a === null) return null;
  if (a.cause === undefined) return a;
  const [kind, message, traceback] = described(a.cause);
  return { ...a, cause: { kind: kind ?? 'Error', message: message ?? '', traceback: traceback ?? undefined } };
}

/** The constructor names along a thrown object's prototype chain, most specific first (what a policy's `retryFor` matches). */
function lineage(e) {
  const out = [];
  if (e === null || typeof e !== 'object') return out;
  attempt(() => {
    for (let p = Object.getPrototypeOf(e); p !== null && p !== Object.prototype && out.length < 32; p = Object.getPrototypeOf(p)) {
      const n = Object.prototype.hasOwnProperty.call(p, 'constructor') ? p.constructor?.name : undefined;
      if (typeof n === 'string' && n !== '') out.push(n);
    }
  });
  return out;
}

/**
 * What a run that threw `e` comes to, asked of the core with the run's
 * retry rule (`c[15]`, from the core) and what JS reads of `e`: `[state,
 * span attributes, the attribute the failure's text goes in or null]` —
 * for the worker's events and the run's span. Asked only when something
 * listens.
 */
function afterFailure(c, e) {
  return JSON.parse(native._afterFailure(JSON.stringify(c[15]), JSON.stringify(thrown(e))));
}

/** What the core is told of a thrown value: `[type, message, stack, ask, lineage]`. */
function thrown(e) {
  return [...described(e), askOf(e), lineage(e)];
}

function failed(host, seq, e) {
  host.failed += `${host.failed ? ',' : ''}${JSON.stringify([seq, thrown(e)])}`;
}

function flush(host) {
  if (host.ok === '' && host.failed === '') return;
  const ok = host.ok ? `[${host.ok}]` : '';
  const bad = host.failed ? `[${host.failed}]` : '';
  host.ok = '';
  host.failed = '';
  host.n.finish(ok, bad);
}

/** Answers settled async bodies together, once the microtasks have run. */
function soon(host) {
  if (host.flushing) return;
  host.flushing = true;
  setImmediate(() => {
    host.flushing = false;
    flush(host);
  });
}

const ABORT = Symbol('abort');
const SOFT = Symbol('soft');
const CANCELLED = Symbol('cancelled');

/**
 * What a body is told about the run it is in: `retries` attempts before this
 * one failed, `attempt` this one counting from 1, `last` whether a failure
 * now is final (no retry follows).
 */
class Context {
  #now;
  #controller = null;
  #reason = undefined;
  #app;
  constructor(c, app = null) {
    this.#app = app;
    this.id = c[2];
    this.name = c[1];
    this.queue = c[3];
    this.retries = c[4];
    this.attempt = c[5];
    this.last = c[6] === 1;
    this.#now = c[7];
    this.kwargs = c[9] === null ? {} : c[9];
    this.rootId = c[10];
    this.parentId = c[11];
    this.softTimeLimit = c[12] ?? null;
    this.timeLimit = c[13] ?? null;
    this.worker = c[14] ?? '';
    this[CANCELLED] = false;
  }

  /** The app's time when the run started. */
  get now() {
    return new Date(this.#now);
  }

  /**
   * Aborts when the core stops waiting for this run (a timeout, a
   * terminate, a stop past its grace), or with a SoftTimeLimitExceeded
   * reason once the run passed its soft time limit.
   */
  get signal() {
    if (this.#controller === null) {
      this.#controller = new AbortController();
      if (this.#reason !== undefined) this.#controller.abort(this.#reason);
    }
    return this.#controller.signal;
  }

  [ABORT]() {
    this[CANCELLED] = true;
    this.#abort(new DOMException('This operation was aborted', 'AbortError'));
  }

  [SOFT]() {
    this.#abort(new SoftTimeLimitExceeded(this.softTimeLimit));
  }

  #abort(reason) {
    // The first reason stays, as an AbortSignal keeps its first.
    if (this.#reason !== undefined) return;
    this.#reason = reason;
    if (this.#controller !== null) this.#controller.abort(reason);
  }

  /**
   * Asks for this run to be retried on its own terms (Celery's
   * `self.retry`): throws a TaskRetry; let it propagate.
   */
  retry(options) {
    throw new TaskRetry(options);
  }

  /**
   * Records a custom state for this run while it runs (Celery's
   * `update_state`): `state` a name such as 'PROGRESS' (not SUCCESS,
   * FAILURE or REVOKED, not empty), `meta` any JSON value. `handle.state()`
   * then answers the name and `handle.info()` the meta, until the run's final
   * state overwrites them. Resolves once stored.
   */
  updateState(state, meta = null) {
    return promised(() => {
      if (typeof state !== 'string') throw argType('state', 'a string', state);
      return this.#record(state, meta);
    });
  }

  /** `updateState('PROGRESS', meta)`. */
  progress(meta = null) {
    return promised(() => this.#record(null, meta));
  }

  #record(state, meta) {
    const m = encode(this.name, 'meta', meta === undefined ? null : meta);
    if (this.#app === null) {
      // A job has no run to record for: the name is checked, nothing stored.
      const r = native._checkState(state);
      return r === null ? Promise.resolve() : Promise.reject(refusal(r));
    }
    return answer(this.#app.updateState(this.id, this.name, this.retries, state, m), nothing, nothing);
  }

  /** Rejects the run's message (Celery's `Reject`): throws a Reject; let it propagate. */
  reject(options) {
    throw new Reject(options);
  }

  /** Ends the run with nothing stored (Celery's `Ignore`): throws an Ignore; let it propagate. */
  ignore() {
    throw new Ignore();
  }

  [inspect.custom]() {
    return `Context(${inspect({ id: this.id, name: this.name, queue: this.queue, attempt: this.attempt, last: this.last })})`;
  }
}

/** The payload of an answer that only says it is done. */
function nothing() {
  return undefined;
}

/** A payload as it came (a string at once, or a value through the bell). */
const same = (v) => v;

module.exports = { answer, promised, nothing, same, settle, TASK, JOB, Host, Context };
