'use strict';
// headway for Node, the task queue: App, tasks, the canvas, handles, workers,
// the beat, the in-process scheduler, clocks and Redis brokers.
// Every rule is the core's; this file checks argument types, turns
// Dates into epoch ms, builds one JSON request per call, turns the core's
// refusals into Errors with a `code`, and runs JS bodies on the event loop.
//
// How a body is called. The core pushes calls onto the app's HostQueue and
// rings the environment's one bell (a weak ThreadsafeFunction). The bell
// drains everything settled since the last ring (Promises of get(), send()
// on Redis, worker.run(), ...) with one native call, then takes waiting calls
// in batches of up to BATCH with one native call each, runs every body — a
// sync result is answered at once, a Promise when it settles — and answers
// the batch with one native call. A thrown error or a rejected Promise is a
// task failure (type = err.name, message, stack), never a crash — whatever
// was thrown (see `failed`).

const { inspect } = require('node:util');
const native = require('./addon.js');

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

/** A RangeError naming the argument. */
function outOfRange(name, why) {
  const err = new RangeError(`The value of "${name}" is out of range: it ${why}`);
  err.code = 'ERR_OUT_OF_RANGE';
  return err;
}

/** The core's refusal as an Error (see index.d.ts, `TaskError`). */
function refusal(r) {
  if (r.code === 'INVALID') {
    // A value the core cannot accept: its message names the argument.
    const err = new RangeError(r.message);
    err.code = 'ERR_INVALID_ARG_VALUE';
    return err;
  }
  if (r.code === 'PANIC') {
    const err = new Error(r.message);
    err.code = 'GenericFailure';
    return err;
  }
  const message = r.code === 'FAILED' ? `${r.remoteType}: ${r.remoteMessage}` : r.message;
  const err = new Error(message);
  err.code = r.code;
  if (r.code === 'FAILED') {
    err.remoteType = r.remoteType;
    err.remoteMessage = r.remoteMessage;
    err.remoteTraceback = r.remoteTraceback ?? null;
    err.remoteModule = r.remoteModule ?? null;
  } else if (r.code === 'REVOKED') {
    err.id = r.id;
  } else if (r.code === 'UNKNOWN_TASK') {
    err.task = r.id;
  } else if (r.code === 'BROKER') {
    err.kind = r.kind;
  }
  return err;
}

function invalidState(message) {
  const err = new Error(message);
  err.code = 'ERR_INVALID_STATE';
  return err;
}

// ---------------------------------------------------------------- checks

const EMPTY = Object.freeze({});

function opts(name, v) {
  if (v === undefined || v === null) return EMPTY;
  if (typeof v !== 'object' || Array.isArray(v)) throw argType(name, 'of type object', v);
  return v;
}

function only(name, o, allowed) {
  for (const k of Object.keys(o)) {
    if (!allowed.includes(k)) {
      const err = new TypeError(`${name}: unexpected option "${k}" (expected one of ${allowed.join(', ')})`);
      err.code = 'ERR_INVALID_ARG_VALUE';
      throw err;
    }
  }
}

function str(name, v) {
  if (typeof v !== 'string') throw argType(name, 'of type string', v);
  return v;
}

function num(name, v) {
  if (typeof v !== 'number') throw argType(name, 'of type number', v);
  if (Number.isNaN(v)) throw outOfRange(name, 'must be a number, not NaN');
  return v;
}

function bool(name, v) {
  if (typeof v !== 'boolean') throw argType(name, 'of type boolean', v);
  return v;
}

/** An instant: a Date or epoch ms. */
function instant(name, v) {
  if (v instanceof Date) {
    const t = v.getTime();
    if (Number.isNaN(t)) throw outOfRange(name, 'must be a valid Date');
    return t;
  }
  if (typeof v !== 'number') throw argType(name, 'a Date or a number of epoch milliseconds', v);
  if (!Number.isFinite(v)) throw outOfRange(name, 'must be a finite number of epoch milliseconds');
  return v;
}

// ---------------------------------------------------------------- JSON

// What a task's arguments and results travel as. Accepted: null, booleans,
// finite numbers, strings, arrays and plain objects (prototype
// Object.prototype or null) of those, and two of kombu's typed values: a
// Date (a `datetime`) and a Uint8Array or Buffer (`bytes`). Anything else —
// undefined, a function, a symbol, a BigInt, a Map, an instance of a class,
// an invalid Date — is refused naming where it was found (`add: args[1] is a
// Map`), at send, never silently dropped or stringified: a message that
// changed shape on the way is worse than one refused.
//
// A Date or bytes crosses to the native side as a one-key marker object
// whose key starts with NUL — `{"\u0000date": ms}`, `{"\u0000bytes": hex}` —
// and the native side (src/tasks/typed.rs) makes the core's typed value of
// it, so the ISO text and the bytes/base64 choice are the core's. Coming
// back, the native side turns typed values into the same markers (and a
// uuid, decimal, date or time into its string), which `parse` revives.
// `flaw` notes whether it met a Date or bytes, so a value without any is
// stringified and parsed exactly as before (the hot path).

const IDENT = /^[A-Za-z_$][\w$]*$/;
// The core's limit (100; serde_json's own is 128, and a request wraps
// values in two levels): a container at a deeper level is refused, the
// outermost counting as level 1.
const DEPTH = native._jsonMaxDepth();

function describe(v) {
  switch (typeof v) {
    case 'undefined':
      return 'undefined';
    case 'function':
      return 'a function';
    case 'symbol':
      return 'a symbol';
    case 'bigint':
      return 'a bigint';
    case 'object': {
      const c = v.constructor && v.constructor.name;
      if (c) return /^[AEIOU]/.test(c) ? `an ${c}` : `a ${c}`;
      return 'an object with a foreign prototype';
    }
    default:
      return typeof v;
  }
}

// Set by `flaw` when it meets a Date or bytes (read and cleared by `encode`).
let typedSeen = false;

const DATE = '\u0000date';
const BYTES = '\u0000bytes';

/** JSON.stringify's replacer when Dates or bytes are in: `this[key]`, as `toJSON` has already run on `v`. */
function typedOut(key, v) {
  const x = this[key];
  if (x instanceof Date) return { [DATE]: x.getTime() };
  if (x instanceof Uint8Array) return { [BYTES]: Buffer.from(x.buffer, x.byteOffset, x.byteLength).toString('hex') };
  return v;
}

/** JSON.parse's reviver for the native side's markers. */
function typedIn(key, v) {
  if (typeof v === 'object' && v !== null) {
    const d = v[DATE];
    if (d !== undefined) {
      if (typeof d === 'number' && Object.keys(v).length === 1) return new Date(d);
    } else {
      const b = v[BYTES];
      if (typeof b === 'string' && Object.keys(v).length === 1) return Buffer.from(b, 'hex');
    }
  }
  return v;
}

/** JSON text from the native side: a reviver only when a marker may be in it. */
function parse(text) {
  return text.includes('\\u0000') ? JSON.parse(text, typedIn) : JSON.parse(text);
}

/** null when `v` can travel as JSON; else where and why not. */
function flaw(v, depth) {
  switch (typeof v) {
    case 'string':
    case 'boolean':
      return null;
    case 'number':
      return Number.isFinite(v) ? null : { keys: [], v, finite: false };
    case 'object': {
      if (v === null) return null;
      if (depth > DEPTH) return { keys: [], v, deep: true };
      if (Array.isArray(v)) {
        for (let i = 0; i < v.length; i++) {
          const f = flaw(v[i], depth + 1);
          if (f !== null) {
            f.keys.push(i);
            return f;
          }
        }
        return null;
      }
      const proto = Object.getPrototypeOf(v);
      if (proto !== Object.prototype && proto !== null) {
        if (v instanceof Date) {
          if (Number.isNaN(v.getTime())) return { keys: [], v, invalid: true };
          typedSeen = true;
          return null;
        }
        if (v instanceof Uint8Array) {
          typedSeen = true;
          return null;
        }
        return { keys: [], v };
      }
      for (const k of Object.keys(v)) {
        const f = flaw(v[k], depth + 1);
        if (f !== null) {
          f.keys.push(k);
          return f;
        }
      }
      return null;
    }
    default:
      return { keys: [], v };
  }
}

function pathOf(root, keys) {
  let s = root;
  for (let i = keys.length - 1; i >= 0; i--) {
    const k = keys[i];
    if (typeof k === 'number') s += `[${k}]`;
    else if (IDENT.test(k)) s += `.${k}`;
    else s += `[${JSON.stringify(k)}]`;
  }
  return s;
}

function jsonError(owner, root, f) {
  const where = `${owner}: ${pathOf(root, f.keys)}`;
  if (f.finite === false) {
    const err = new RangeError(`${where} is ${f.v}, and JSON carries only finite numbers`);
    err.code = 'ERR_OUT_OF_RANGE';
    return err;
  }
  if (f.deep) {
    const err = new RangeError(`${where} nests deeper than ${DEPTH} levels (or is circular)`);
    err.code = 'ERR_OUT_OF_RANGE';
    return err;
  }
  if (f.invalid) {
    const err = new RangeError(`${where} is an invalid Date (its time is NaN)`);
    err.code = 'ERR_INVALID_ARG_VALUE';
    return err;
  }
  const err = new TypeError(
    `${where} is ${describe(f.v)}, which JSON cannot carry ` +
      `(use plain objects, arrays, strings, finite numbers, booleans, null, Dates or Uint8Arrays)`,
  );
  err.code = 'ERR_INVALID_ARG_TYPE';
  return err;
}

// An escaped UTF-16 surrogate in JSON.stringify's output (after an even run
// of backslashes): it writes a surrogate as `\uXXXX` only when it is lone,
// which is not Unicode text, and the native side's parser refuses it — with
// a result, the whole batch of answers it came in.
const LONE = /(?:^|[^\\])(?:\\\\)*\\u[dD][89a-fA-F]/;

/** `v` as JSON text, or the TypeError/RangeError naming what cannot travel. */
function encode(owner, root, v) {
  typedSeen = false;
  const f = flaw(v, 1);
  if (f !== null) throw jsonError(owner, root, f);
  let json;
  if (!typedSeen) json = JSON.stringify(v);
  else {
    typedSeen = false;
    json = JSON.stringify(v, typedOut);
  }
  if (typeof json !== 'string') {
    // A `toJSON` `flaw` cannot see (not enumerable) that answered undefined.
    const err = new TypeError(`${owner}: ${root} turned into nothing as JSON (a toJSON answered undefined)`);
    err.code = 'ERR_INVALID_ARG_TYPE';
    throw err;
  }
  if (json.includes('\\u') && LONE.test(json)) {
    const err = new TypeError(`${owner}: ${root} holds a lone UTF-16 surrogate, which is not Unicode text and JSON cannot carry it`);
    err.code = 'ERR_INVALID_ARG_VALUE';
    throw err;
  }
  return json;
}

function encodeArgs(owner, args) {
  if (args === undefined) return '[]';
  if (!Array.isArray(args)) throw argType('args', 'an array', args);
  return encode(owner, 'args', args);
}

function encodeKwargs(owner, kwargs) {
  if (kwargs === undefined || kwargs === null) return 'null';
  if (typeof kwargs !== 'object' || Array.isArray(kwargs)) throw argType('kwargs', 'of type object', kwargs);
  return encode(owner, 'kwargs', kwargs);
}

const SEND_OPTIONS = ['kwargs', 'eta', 'countdown', 'expires', 'queue', 'priority', 'id'];
const SIG_OPTIONS = [...SEND_OPTIONS, 'immutable'];

/** Per-send options as JSON (instants in epoch ms), or 'null'. */
function encodeOptions(o) {
  let out = '';
  const put = (k, v) => {
    out += `${out ? ',' : ''}"${k}":${v}`;
  };
  if (o.eta !== undefined) put('eta', instant('eta', o.eta));
  if (o.countdown !== undefined) put('countdown', num('countdown', o.countdown));
  if (o.expires !== undefined) put('expires', instant('expires', o.expires));
  if (o.queue !== undefined) put('queue', JSON.stringify(str('queue', o.queue)));
  if (o.priority !== undefined) put('priority', num('priority', o.priority));
  if (o.id !== undefined) put('id', JSON.stringify(str('id', o.id)));
  return out ? `{${out}}` : 'null';
}

// ---------------------------------------------------------------- the hub

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
  constructor(n, kind) {
    this.n = n;
    this.kind = kind;
    this.fns = new Map();
    this.running = new Map(); // seq -> Context of an async body in flight
    this.ok = '';
    this.failed = '';
    this.flushing = false;
    this.users = 0;
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
  const ctx = new Context(c);
  let r;
  try {
    r = job ? fn(ctx) : fn(c[8], ctx);
  } catch (e) {
    failed(host, seq, e);
    return;
  }
  if (r === null || (typeof r !== 'object' && typeof r !== 'function')) {
    done(host, seq, key, job ? null : r);
    return;
  }
  // A thenable is read the way `await` reads one: `then` once (its getter
  // may throw), called once (it may throw, or call back twice or never).
  let then;
  try {
    then = r.then;
  } catch (e) {
    failed(host, seq, e);
    return;
  }
  if (typeof then !== 'function') {
    done(host, seq, key, job ? null : r);
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
        if (host.running.delete(seq) || !ctx[CANCELLED]) done(host, seq, key, job ? null : v);
        soon(host);
      },
      (e) => {
        if (settled) return;
        settled = true;
        host.running.delete(seq);
        failed(host, seq, e);
        soon(host);
      },
    );
  } catch (e) {
    if (settled) return;
    settled = true;
    host.running.delete(seq);
    failed(host, seq, e);
  }
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
function failed(host, seq, e) {
  let kind = null;
  let message = null;
  let stack = null;
  if (e !== null && typeof e === 'object') {
    kind = text(attempt(() => e.name)) || text(attempt(() => e.constructor.name)) || null;
    message = text(attempt(() => e.message)) ?? text(attempt(() => String(e)));
    stack = text(attempt(() => e.stack));
  } else {
    // `throw 'oops'` or a rejected Promise of a non-Error.
    kind = e === null ? 'null' : typeof e;
    message = text(attempt(() => String(e)));
  }
  host.failed += `${host.failed ? ',' : ''}${JSON.stringify([seq, kind, message, stack])}`;
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
const CANCELLED = Symbol('cancelled');

/**
 * What a body is told about the run it is in: `retries` attempts before this
 * one failed, `attempt` this one counting from 1, `last` whether a failure
 * now is final (no retry follows).
 */
class Context {
  #now;
  #controller = null;
  constructor(c) {
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
    this[CANCELLED] = false;
  }

  /** The app's time when the run started. */
  get now() {
    return new Date(this.#now);
  }

  /** Aborts when the core stops waiting for this run (a timeout, a terminate, a stop past its grace). */
  get signal() {
    if (this.#controller === null) {
      this.#controller = new AbortController();
      if (this[CANCELLED]) this.#controller.abort();
    }
    return this.#controller.signal;
  }

  [ABORT]() {
    this[CANCELLED] = true;
    if (this.#controller !== null) this.#controller.abort();
  }

  [inspect.custom]() {
    return `Context(${inspect({ id: this.id, name: this.name, queue: this.queue, attempt: this.attempt, last: this.last })})`;
  }
}

// ---------------------------------------------------------------- time

const SYSTEM = native.NativeClock.system();
const NATIVE = Symbol('native');

/**
 * A clock that workers and beats sleep on: a sleep advances it instead of
 * waiting, so a retry schedule or an hour of beats runs in milliseconds and
 * prints the same every time. What it moves is what the queue schedules —
 * etas, retry backoffs, expiry, beats; a body's `timeout` and
 * `get(timeout)` stay real waits.
 */
class VirtualClock {
  constructor(start) {
    this[NATIVE] = native.NativeClock.virtualAt(start === undefined ? 0 : instant('start', start));
  }

  /** Now, in epoch ms. */
  now() {
    return this[NATIVE].now();
  }

  /** Now, as a Date. */
  date() {
    return new Date(this[NATIVE].now());
  }

  /** Moves it forward by `ms` (a negative step does nothing). */
  advance(ms) {
    this[NATIVE].advance(num('ms', ms));
  }

  /** Moves it to `when` (Date or epoch ms) if that is later. */
  advanceTo(when) {
    this[NATIVE].advanceTo(instant('when', when));
  }

  [inspect.custom]() {
    return `VirtualClock(${new Date(this.now()).toISOString()})`;
  }
}

function clockOf(v) {
  if (v === undefined || v === null) return SYSTEM;
  if (v instanceof VirtualClock) return v[NATIVE];
  throw argType('clock', 'a testing.VirtualClock (or undefined for the system clock)', v);
}

function check(r) {
  if (r !== null && r !== undefined) throw refusal(r);
}

function dateOrNull(r) {
  if (r !== null && typeof r === 'object') throw refusal(r);
  return r === null ? null : new Date(r);
}

const SPEC = Symbol('spec');

/** When something fires; made by `Every`, `Cron` and `At`. */
class Rhythm {
  constructor(kind, spec, props) {
    this.kind = kind;
    Object.assign(this, props);
    this[SPEC] = JSON.stringify(spec);
    check(native._rhythmCheck(this[SPEC]));
    Object.freeze(this);
  }

  /** The first time it fires at or after `now` (Date or epoch ms); null if never. */
  first(now) {
    return dateOrNull(native._rhythmFirst(this[SPEC], instant('now', now)));
  }

  /** The first time it fires strictly after `at` — pass the time that was due; null if never again. */
  after(at) {
    return dateOrNull(native._rhythmAfter(this[SPEC], instant('at', at)));
  }

  [inspect.custom]() {
    if (this.kind === 'every') return `Every(${this.interval}${this.anchor === null ? '' : `, { anchor: ${this.anchor} }`})`;
    if (this.kind === 'cron') return `Cron(${JSON.stringify(this.expr)}, { tz: ${JSON.stringify(this.tz)} })`;
    return `At(${new Date(this.when).toISOString()})`;
  }
}

/** Once per `interval` ms; with `anchor` (Date or epoch ms) on slots `anchor + k·interval`. */
function Every(interval, options) {
  num('interval', interval);
  const o = opts('options', options);
  only('Every', o, ['anchor']);
  const anchor = o.anchor === undefined ? null : instant('anchor', o.anchor);
  return new Rhythm('every', anchor === null ? { every: interval } : { every: interval, anchor }, { interval, anchor });
}

/** The minutes a 5-field crontab line names, read in the IANA zone `tz` ("UTC" when omitted). */
function Cron(expr, options) {
  str('expr', expr);
  const o = opts('options', options);
  only('Cron', o, ['tz']);
  const tz = o.tz === undefined ? 'UTC' : str('tz', o.tz);
  return new Rhythm('cron', { cron: expr, tz }, { expr, tz });
}

/** Once, at `when` (Date or epoch ms); a time already past fires once, at once. */
function At(when) {
  const t = instant('when', when);
  return new Rhythm('at', { at: t }, { when: t });
}

function rhythmSpec(name, r) {
  if (!(r instanceof Rhythm)) throw argType(name, 'Every(...), Cron(...) or At(...)', r);
  return r[SPEC];
}

/** How long a failed run waits before the next attempt; made by `Fixed` and `Exponential`. */
class TaskBackoff {
  constructor(spec) {
    const r = native._backoffNorm(JSON.stringify(spec));
    if (typeof r !== 'string') throw refusal(r);
    const n = JSON.parse(r);
    if (n.fixed !== undefined) {
      this.kind = 'fixed';
      this.delay = n.fixed;
    } else {
      this.kind = 'exponential';
      this.base = n.base;
      this.cap = n.cap;
      this.jitter = n.jitter;
    }
    this[SPEC] = r;
    Object.freeze(this);
  }

  /** The ms waited before attempt `attempt` (the first is 1, and never waits) of the run `taskId`. */
  waitBefore(attempt, taskId) {
    num('attempt', attempt);
    if (!Number.isInteger(attempt) || attempt < 0) throw outOfRange('attempt', 'must be a whole number');
    const r = native._backoffWait(this[SPEC], attempt, str('taskId', taskId));
    if (typeof r !== 'number') throw refusal(r);
    return r;
  }

  [inspect.custom]() {
    return this.kind === 'fixed'
      ? `Fixed(${this.delay})`
      : `Exponential({ base: ${this.base}, cap: ${this.cap}, jitter: ${this.jitter} })`;
  }
}

/** The same wait before every retry: `delay` ms. */
function Fixed(delay) {
  return new TaskBackoff({ fixed: num('delay', delay) });
}

/**
 * A wait doubling from `base` to `cap` ms; with `jitter` spread over
 * [0, ceiling], the draw derived from the task id and the attempt. Defaults:
 * 1 s doubling to 10 min, jittered (moontask's preset; Celery's
 * retry_backoff_max is also 600 s).
 */
function Exponential(options) {
  const o = opts('options', options);
  only('Exponential', o, ['base', 'cap', 'jitter']);
  const spec = {};
  if (o.base !== undefined) spec.base = num('base', o.base);
  if (o.cap !== undefined) spec.cap = num('cap', o.cap);
  if (o.jitter !== undefined) spec.jitter = bool('jitter', o.jitter);
  return new TaskBackoff(spec);
}

const POLICY = ['queue', 'retries', 'backoff', 'timeout', 'acksLate', 'ignoreResult', 'rate'];

function policyJson(policy) {
  const p = opts('policy', policy);
  only('policy', p, POLICY);
  let out = '';
  const put = (k, v) => {
    out += `${out ? ',' : ''}"${k}":${v}`;
  };
  if (p.queue !== undefined) put('queue', JSON.stringify(str('queue', p.queue)));
  if (p.retries !== undefined) put('retries', num('retries', p.retries));
  if (p.backoff !== undefined) {
    if (!(p.backoff instanceof TaskBackoff)) throw argType('backoff', 'Fixed(...) or Exponential(...)', p.backoff);
    put('backoff', p.backoff[SPEC]);
  }
  if (p.timeout !== undefined && p.timeout !== null) put('timeout', num('timeout', p.timeout));
  if (p.acksLate !== undefined) put('acksLate', bool('acksLate', p.acksLate));
  if (p.ignoreResult !== undefined) put('ignoreResult', bool('ignoreResult', p.ignoreResult));
  if (p.rate !== undefined && p.rate !== null) {
    const r = p.rate;
    if (typeof r === 'string') put('rate', JSON.stringify(r));
    else if (typeof r === 'object' && typeof r.count === 'number' && typeof r.per === 'number') {
      put('rate', JSON.stringify({ count: num('rate.count', r.count), per: num('rate.per', r.per) }));
    } else throw argType('rate', 'a string like "10/m" or { count, per }', r);
  }
  return `{${out}}`;
}

// ---------------------------------------------------------------- brokers

const CELERY = Symbol('celery');

/**
 * A broker, result store and chord counter on Redis: headway's own layout
 * (`new RedisBroker(url, { consumer, prefix, lease })`), or Celery's
 * (`RedisBroker.celery(url, { consumer, visibilityTimeout })`). It connects
 * when an App is built on it, with that app's clock.
 */
class RedisBroker {
  constructor(url, options, layout) {
    str('url', url);
    const o = opts('options', options);
    let r;
    if (layout === CELERY) {
      only('RedisBroker.celery', o, ['consumer', 'visibilityTimeout']);
      const consumer = o.consumer === undefined ? null : str('consumer', o.consumer);
      const vt = o.visibilityTimeout === undefined ? null : num('visibilityTimeout', o.visibilityTimeout);
      r = native.NativeRedis.celery(url, consumer, vt);
    } else {
      only('RedisBroker', o, ['consumer', 'prefix', 'lease']);
      const consumer = o.consumer === undefined ? null : str('consumer', o.consumer);
      const prefix = o.prefix === undefined ? null : str('prefix', o.prefix);
      const lease = o.lease === undefined ? null : num('lease', o.lease);
      r = native.NativeRedis.headway(url, consumer, prefix, lease);
    }
    if (!(r instanceof native.NativeRedis)) throw refusal(r);
    this[NATIVE] = r;
  }

  /** Celery's layout and message format on `url`. */
  static celery(url, options) {
    return new RedisBroker(url, options, CELERY);
  }

  /** The URL, password redacted. */
  get url() {
    return this[NATIVE].url;
  }

  /** 'headway' or 'celery'. */
  get layout() {
    return this[NATIVE].layout;
  }

  /** Hands back what consumers whose lease ran out were holding; resolves to how many. */
  recover() {
    try {
      return answer(this[NATIVE].recover(), Number, Number);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Lets go of this consumer's claims so another takes them now: call it after the worker stopped. */
  close() {
    try {
      return answer(this[NATIVE].close(), () => undefined, () => undefined);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  [inspect.custom]() {
    return this.layout === 'celery' ? `RedisBroker.celery(${this.url})` : `RedisBroker(${this.url})`;
  }
}

function seamsOf(name, v, clock) {
  let r;
  if (typeof v === 'string') r = native.NativeSeams.url(v, name, clock);
  else if (v instanceof RedisBroker) r = v[NATIVE].seams(clock);
  else throw argType(name, 'a URL ("memory://", "redis://host:port/db") or a RedisBroker', v);
  if (!(r instanceof native.NativeSeams)) throw refusal(r);
  return r;
}

// ---------------------------------------------------------------- handles

const APP = Symbol('app');
const SEND = Symbol('send');

/** A run, or a set of runs (a group), to wait on, look at or revoke. */
class Handle {
  #app;
  #key;
  #all;
  #ids;
  constructor(app, ids, all) {
    this.#app = app;
    this.#all = all;
    this.#ids = ids;
    this.#key = all ? JSON.stringify(ids) : ids[0];
  }

  /** The run's id (a group's first part). */
  get id() {
    return this.#ids[0];
  }

  /** Every id it waits on, in order. */
  get ids() {
    return this.#ids.slice();
  }

  /**
   * The value (a group: the list, in order), waiting at most `timeout` real
   * ms (omitted: for ever). Rejects with code FAILED, TIMEOUT, REVOKED or
   * MISSING.
   */
  get(timeout) {
    try {
      const t = timeout === undefined || timeout === null ? null : num('timeout', timeout);
      return answer(this.#app[APP].get(this.#key, this.#all, t), parse, identity);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** What it is doing now, without waiting: a state name (PENDING ... REVOKED). */
  state() {
    try {
      return answer(this.#app[APP].state(this.#key, this.#all), identity, identity);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Revokes it; with `terminate`, a run in progress in this process stops. */
  revoke(terminate = false) {
    try {
      return answer(this.#app[APP].revoke(this.#key, this.#all, bool('terminate', terminate)), nothing, nothing);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  [inspect.custom]() {
    return this.#all ? `Handle(group of ${this.#ids.length})` : `Handle(${this.#ids[0]})`;
  }
}

function identity(x) {
  return x;
}

function nothing() {
  return undefined;
}

/** A count argument: a number, whole, 0 or more. */
function count(name, v) {
  num(name, v);
  if (!Number.isInteger(v) || v < 0) throw outOfRange(name, `must be a whole number, 0 or more. Received ${v}`);
  return v;
}

/** One dead letter, frozen: its bytes as a Buffer, its time as a Date. */
function deadLetter(d) {
  return Object.freeze({
    queue: d.queue,
    id: d.id,
    reason: d.reason,
    at: new Date(d.at),
    raw: Buffer.from(d.raw, 'latin1'),
    size: d.size,
  });
}

function decodeDead(v) {
  return (typeof v === 'string' ? JSON.parse(v) : v).map(deadLetter);
}

function handleOf(app, v) {
  return new Handle(app, v.ids, v.all);
}

// ---------------------------------------------------------------- canvas

/** What a signature, a chain, a group and a chord share: `send()`. */
class Canvas {
  /** Publishes every message and resolves to a handle on what it waits for. */
  send() {
    try {
      const app = this[FIRST]();
      if (app === null) throw invalidState('this canvas has no signature to take an app from');
      const tree = this[TREE]();
      return answer(app[APP].sendCanvas(tree), (t) => handleOf(app, JSON.parse(t)), (v) => handleOf(app, v));
    } catch (e) {
      return Promise.reject(e);
    }
  }
}

const TREE = Symbol('tree');
const FIRST = Symbol('first');

/**
 * A run that has not been published: `task.sig(args, opts)` or
 * `app.sig(name, args, opts)`. A signature that is not `immutable` gets the
 * previous link's result prepended in a chain, the parts' results in a
 * chord's callback.
 */
class Signature extends Canvas {
  constructor(app, name, args, options) {
    super();
    const o = opts('options', options);
    only(name, o, SIG_OPTIONS);
    if (args !== undefined && !Array.isArray(args)) throw argType('args', 'an array', args);
    this.app = app;
    this.name = name;
    this.args = args === undefined ? [] : args;
    this.kwargs = o.kwargs === undefined ? null : o.kwargs;
    this.immutable = o.immutable === undefined ? false : bool('immutable', o.immutable);
    const rest = {};
    for (const k of SEND_OPTIONS) if (k !== 'kwargs' && o[k] !== undefined) rest[k] = o[k];
    this.options = rest;
    // Checked now, so a bad option fails where it was written.
    encodeOptions(rest);
  }

  [TREE]() {
    return `["sig",${JSON.stringify(this.name)},${encodeArgs(this.name, this.args)},${encodeKwargs(this.name, this.kwargs)},${this.immutable},${encodeOptions(this.options)}]`;
  }

  [FIRST]() {
    return this.app;
  }

  [inspect.custom]() {
    return `${this.name}.sig(${inspect(this.args)}${this.immutable ? ', immutable' : ''})`;
  }
}

function items(what, list) {
  const xs = list.length === 1 && Array.isArray(list[0]) ? list[0] : list;
  xs.forEach((x, i) => {
    if (!(x instanceof Canvas)) throw argType(`${what}[${i}]`, 'a signature or a canvas (task.sig(...))', x);
  });
  return xs.slice();
}

function firstApp(xs) {
  for (const x of xs) {
    const a = x[FIRST]();
    if (a !== null) return a;
  }
  return null;
}

class Chain extends Canvas {
  constructor(links) {
    super();
    this.links = links;
  }

  [TREE]() {
    return `["chain",[${this.links.map((l) => l[TREE]()).join(',')}]]`;
  }

  [FIRST]() {
    return firstApp(this.links);
  }
}

class Group extends Canvas {
  constructor(parts) {
    super();
    this.parts = parts;
  }

  [TREE]() {
    return `["group",[${this.parts.map((p) => p[TREE]()).join(',')}]]`;
  }

  [FIRST]() {
    return firstApp(this.parts);
  }
}

class Chord extends Canvas {
  constructor(parts, callback) {
    super();
    this.parts = parts;
    this.callback = callback;
  }

  [TREE]() {
    return `["chord",[${this.parts.map((p) => p[TREE]()).join(',')}],${this.callback[TREE]()}]`;
  }

  [FIRST]() {
    return firstApp([...this.parts, this.callback]);
  }
}

/**
 * Runs in order, each started when the one before it succeeds; a link that
 * is not immutable gets the previous result prepended. Answers the last
 * link's value. Chains inside are flattened; a group first is a chord over
 * the rest (as in Celery).
 */
function chain(...links) {
  return new Chain(items('chain', links));
}

/** Runs all at once, answered as the list of results in the order given; a chain inside stays a chain. */
function group(...parts) {
  return new Group(items('group', parts));
}

/**
 * `parts`, then `callback` with the list of their results (in order) as its
 * first argument. A part that fails for good fails the callback, so nobody
 * waits for ever.
 */
function chord(parts, callback) {
  if (!Array.isArray(parts)) throw argType('parts', 'an array of signatures', parts);
  const ps = items('chord', parts);
  if (!(callback instanceof Canvas)) throw argType('callback', 'a signature or a canvas', callback);
  return new Chord(ps, callback);
}

// ---------------------------------------------------------------- tasks

/** A registered body: `app.task(name, fn, policy)`. */
class Task {
  #app;
  #name;
  #head;
  constructor(app, name) {
    this.#app = app;
    this.#name = name;
    this.#head = `[${JSON.stringify(name)},`;
  }

  /** The name its messages carry. */
  get name() {
    return this.#name;
  }

  /**
   * Publishes a run of `args` (the positional array); resolves to its
   * handle. `eta` (Date or epoch ms) is when it may first run, `countdown`
   * ms from now (eta wins), `expires` (Date or epoch ms) when running it
   * becomes pointless, `queue` overrides the task's, `priority` 0 (first) to
   * 9, `id` fixes the run's id, `kwargs` the keyword object.
   */
  send(args, options) {
    return sendOne(this.#app, this.#name, args, options, true, this.#head);
  }

  /** A signature of a run of `args` (a canvas node). */
  sig(args, options) {
    return new Signature(this.#app, this.#name, args, options);
  }

  [inspect.custom]() {
    return `Task(${this.#name})`;
  }
}

function sendOne(app, name, args, options, known, head) {
  try {
    let req;
    if (options === undefined) {
      req = `${head ?? `[${JSON.stringify(name)},`}${encodeArgs(name, args)},null,null]`;
    } else {
      const o = opts('options', options);
      only(name, o, SEND_OPTIONS);
      req = `${head ?? `[${JSON.stringify(name)},`}${encodeArgs(name, args)},${encodeKwargs(name, o.kwargs)},${o === EMPTY ? 'null' : encodeOptions(o)}]`;
    }
    return answer(
      app[SEND](req, known),
      (id) => new Handle(app, [id], false),
      (id) => new Handle(app, [id], false),
    );
  } catch (e) {
    return Promise.reject(e);
  }
}

/** How long `stop()` lets runs in progress finish: the core's default, 10 s (moontask; about what a supervisor waits between SIGTERM and SIGKILL). */
const GRACE = native._grace();

/**
 * Runs tasks: claims from its queues, runs up to `concurrency` bodies at
 * once on the event loop, settles each as its task's policy says.
 */
class Worker {
  #n;
  #host;
  #run = null;
  constructor(n, host) {
    this.#n = n;
    this.#host = host;
  }

  /** Its name (logs, the admin page). */
  get name() {
    return this.#n.name;
  }

  /** The queues it claims from. */
  get queues() {
    return this.#n.queues;
  }

  /** How many bodies run at once. */
  get concurrency() {
    return this.#n.concurrency;
  }

  /** The most messages it holds unsettled. */
  get prefetch() {
    return this.#n.prefetch;
  }

  /** How many messages it has settled so far. */
  get settled() {
    return this.#n.settled;
  }

  /** Whether stop() was called. */
  get stopping() {
    return this.#n.stopping;
  }

  /** Runs until stopped; resolves once every message it held is settled or given back. A worker runs once. */
  run() {
    if (this.#run !== null) return Promise.reject(invalidState('this worker has already run; make another with app.worker()'));
    const host = this.#host;
    host.use();
    let p;
    try {
      p = answer(this.#n.run(), nothing, nothing);
    } catch (e) {
      p = Promise.reject(e);
    }
    this.#run = p.finally(() => host.unuse());
    return this.#run;
  }

  /**
   * Stops claiming, gives prefetched messages back, lets runs in progress
   * finish for `grace` ms (10 s), then cancels and gives back the rest —
   * nothing it held is lost. Resolves when run() has.
   */
  stop(options) {
    try {
      const o = opts('options', options);
      only('stop', o, ['grace']);
      const grace = o.grace === undefined ? GRACE : num('grace', o.grace);
      this.#n.stop(grace);
    } catch (e) {
      return Promise.reject(e);
    }
    return this.#run === null ? Promise.resolve() : this.#run.then(nothing, nothing);
  }

  [inspect.custom]() {
    return `Worker(${this.name} queues=${this.queues.join(',')} concurrency=${this.concurrency})`;
  }
}

/**
 * Sends tasks on rhythms (Every, Cron, At), keeping the phase: the next time
 * is computed from the time that was due, so an hourly entry stays on its
 * minute after a late tick. On a virtual clock its sleeps advance the clock.
 */
class Beat {
  #n;
  #app;
  #run = null;
  constructor(app, n) {
    this.#app = app;
    this.#n = n;
  }

  /**
   * Schedules `task` (a Task or a name) with `args` under `name`, replacing
   * an entry of that name. The name identifies the entry, not the task.
   */
  add(name, task, args, schedule, options) {
    str('name', name);
    let tname;
    if (task instanceof Task) tname = task.name;
    else if (typeof task === 'string') tname = task;
    else throw argType('task', 'a Task or a task name', task);
    const o = opts('options', options);
    only('beat.add', o, ['kwargs', 'queue', 'priority']);
    const entry = `[${JSON.stringify(name)},${JSON.stringify(tname)},${encodeArgs(tname, args)},${encodeKwargs(tname, o.kwargs)},${encodeOptions({ queue: o.queue, priority: o.priority })}]`;
    check(this.#n.add(entry, rhythmSpec('schedule', schedule)));
  }

  /** Removes the entry `name`; false when there was none. */
  remove(name) {
    return this.#n.remove(str('name', name));
  }

  /** Entry names and when each fires next, soonest first. */
  pending() {
    return JSON.parse(this.#n.pending()).map(([n, at]) => [n, new Date(at)]);
  }

  /** Sends what is due now; resolves to [name, due, handle] per send. */
  tick() {
    const app = this.#app;
    const decode = (v) => v.map(([n, due, id]) => [n, new Date(due), new Handle(app, [id], false)]);
    try {
      return answer(this.#n.tick(), (t) => decode(JSON.parse(t)), decode);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Sends due entries and sleeps until the next, until stop() — or until the app's clock reaches `until`. */
  run(until) {
    try {
      const u = until === undefined || until === null ? null : instant('until', until);
      const p = answer(this.#n.run(u), nothing, nothing);
      this.#run = p;
      return p;
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Stops it after the tick in progress; resolves when run() has. */
  stop() {
    this.#n.stop();
    const r = this.#run;
    this.#run = null;
    return r === null ? Promise.resolve() : r.then(nothing, nothing);
  }
}

/**
 * The registry, the broker and the clock. `broker` is 'memory://' (the
 * default: an in-process broker that is also its result store and chord
 * counter), 'redis://host:port/db' / 'rediss://…' (headway's Redis layout),
 * or a RedisBroker. `backend`: omitted, the broker's own store; false, none
 * (get() rejects with MISSING); or another URL or RedisBroker. `clock`: a
 * testing.VirtualClock, or omitted for the system clock.
 */
class App {
  #beat = null;
  #host;
  #tasks = new Map();
  constructor(options) {
    const o = opts('options', options);
    only('App', o, ['broker', 'backend', 'clock']);
    const clock = clockOf(o.clock);
    const seams = seamsOf('broker', o.broker === undefined ? 'memory://' : o.broker, clock);
    if (o.backend === false) seams.withoutBackend();
    else if (o.backend === true) {
      throw argType('backend', 'a URL, a RedisBroker, false (no results) or undefined (the broker\'s)', true);
    } else if (o.backend !== undefined && o.backend !== null) seams.withBackend(seamsOf('backend', o.backend, clock));
    this[APP] = new native.NativeApp(seams, clock);
    this[SEND] = this[APP].sender();
    this.#host = new Host(this[APP].host, TASK);
    /** The clock it was given (null: the system clock). */
    this.clock = o.clock === undefined ? null : o.clock;
  }

  /**
   * Registers `fn(args, ctx)` under `name` (replacing an earlier one) and
   * answers the Task. The policy's defaults are each the safe side of its
   * choice (moontask): queue 'default'; retries 0 (a retry repeats the first
   * attempt's side effects); backoff Exponential() (1 s doubling to 10 min,
   * jittered); no timeout (a hung run is visible rather than silently cut);
   * acksLate false (confirmed on receipt); ignoreResult false; no rate.
   */
  task(name, fn, policy) {
    str('name', name);
    if (typeof fn !== 'function') throw argType('fn', 'a function', fn);
    check(this[APP].register(name, policyJson(policy)));
    this.#host.fns.set(name, fn);
    const t = new Task(this, name);
    this.#tasks.set(name, t);
    return t;
  }

  /** Every registered name, sorted. */
  taskNames() {
    return this[APP].taskNames();
  }

  /** Publishes a run of the registered task `name` (the dispatcher's entry); rejects with UNKNOWN_TASK for a name this app does not run. */
  send(name, args, options) {
    if (typeof name !== 'string') return Promise.reject(argType('name', 'of type string', name));
    return sendOne(this, name, args, options, true);
  }

  /** Celery's send_task: publishes a run of any name, for another process to run. */
  sendTask(name, args, options) {
    if (typeof name !== 'string') return Promise.reject(argType('name', 'of type string', name));
    return sendOne(this, name, args, options, false);
  }

  /** A signature of any task name — one this app runs or one another process does. */
  sig(name, args, options) {
    return new Signature(this, str('name', name), args, options);
  }

  /** A handle on the run `id`, which some other process may have sent. */
  handle(id) {
    return new Handle(this, [str('id', id)], false);
  }

  /** The app's time in epoch ms (the virtual clock's, in tests). */
  now() {
    return this[APP].now();
  }

  /**
   * A worker over `queues` (['default']; an 'a,b' string is split) running
   * up to `concurrency` bodies at once (4, moontask's preset) and holding at
   * most `prefetch` messages unsettled (concurrency × 4, Celery's prefetch
   * multiplier).
   */
  worker(options) {
    const o = opts('options', options);
    only('worker', o, ['queues', 'concurrency', 'prefetch', 'name']);
    let queues = null;
    if (typeof o.queues === 'string') queues = o.queues.split(',').map((q) => q.trim()).filter((q) => q);
    else if (Array.isArray(o.queues)) queues = o.queues.map((q, i) => str(`queues[${i}]`, q));
    else if (o.queues !== undefined && o.queues !== null) throw argType('queues', 'an array of names or an "a,b" string', o.queues);
    const c = o.concurrency === undefined ? null : num('concurrency', o.concurrency);
    const p = o.prefetch === undefined || o.prefetch === null ? null : num('prefetch', o.prefetch);
    const name = o.name === undefined ? null : str('name', o.name);
    const w = this[APP].worker(queues, c, p, name);
    if (!(w instanceof native.NativeWorker)) throw refusal(w);
    return new Worker(w, this.#host);
  }

  /** The app's beat — the same object every call, so a module can add entries and `npx headway beat` run them. */
  beat() {
    if (this.#beat === null) this.#beat = new Beat(this, this[APP].beat());
    return this.#beat;
  }

  /**
   * The dead letters of `queue` ('default'), newest first, at most `limit`
   * (100): what a worker set aside rather than ran, each `{ queue, id,
   * reason, at, raw }`. An unknown queue has none.
   */
  deadLetters(queue = 'default', options) {
    try {
      const q = str('queue', queue);
      const o = opts('options', options);
      only('deadLetters', o, ['limit']);
      // Omitted: the core's DEAD_LISTED (100).
      const limit = o.limit === undefined ? undefined : count('limit', o.limit);
      return answer(this[APP].deadLetters(q, limit), decodeDead, decodeDead);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** How many dead letters `queue` ('default') keeps now (0 for an unknown queue). */
  deadCount(queue = 'default') {
    try {
      return answer(this[APP].deadCount(str('queue', queue)), Number, Number);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /**
   * Puts dead letters of `queue` ('default') back on it as they were, oldest
   * first — at most `limit` (all when omitted), only those whose id is in
   * `ids` when given — and resolves to how many went back.
   */
  requeueDead(queue = 'default', options) {
    try {
      const q = str('queue', queue);
      const o = opts('options', options);
      only('requeueDead', o, ['limit', 'ids']);
      const limit = o.limit === undefined || o.limit === null ? null : count('limit', o.limit);
      let ids = null;
      if (Array.isArray(o.ids)) ids = o.ids.map((id, i) => str(`ids[${i}]`, id));
      else if (o.ids !== undefined && o.ids !== null) throw argType('ids', 'an array of ids', o.ids);
      return answer(this[APP].requeueDead(q, limit, ids), Number, Number);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Drops every dead letter of `queue` ('default') for good; resolves to how many. */
  purgeDead(queue = 'default') {
    try {
      return answer(this[APP].purgeDead(str('queue', queue)), Number, Number);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  [inspect.custom]() {
    return `App(tasks=${inspect(this.taskNames())})`;
  }
}

// ---------------------------------------------------------------- schedule

/**
 * Jobs on rhythms inside one process, with no broker: what node-cron is
 * reached for. The core keeps the timetable (the beat's own) and the phase.
 * Two rules from APScheduler's defaults: a job still running when it is due
 * again is skipped for that slot, and slots missed while the process was
 * busy fire once, not once each. A job that throws is logged and counted
 * (`stats(name)`); the rhythm goes on. A job is called as `fn(ctx)`, where
 * `ctx.name` is the job's and `ctx.now` the time it was due.
 */
class Scheduler {
  #n;
  #host;
  #run = null;
  constructor(options) {
    const o = opts('options', options);
    only('Scheduler', o, ['clock']);
    this.#n = new native.NativeScheduler(clockOf(o.clock));
    this.#host = new Host(this.#n.host, JOB);
    this.clock = o.clock === undefined ? null : o.clock;
  }

  /** Adds (or replaces) the job `name`: `fn(ctx)` on `rhythm`. */
  add(name, fn, rhythm) {
    str('name', name);
    if (typeof fn !== 'function') throw argType('fn', 'a function', fn);
    check(this.#n.add(name, rhythmSpec('rhythm', rhythm)));
    this.#host.fns.set(name, fn);
  }

  /** Removes the job `name`; false when there was none. */
  remove(name) {
    this.#host.fns.delete(str('name', name));
    return this.#n.remove(name);
  }

  /** Job names and when each fires next, soonest first. */
  pending() {
    return JSON.parse(this.#n.pending()).map(([n, at]) => [n, new Date(at)]);
  }

  /** How the job has gone: { fired, failed, skipped, lastError }; null for an unknown name. */
  stats(name) {
    const s = this.#n.stats(str('name', name));
    return s === null ? null : JSON.parse(s);
  }

  #using(p) {
    const host = this.#host;
    host.use();
    return p.finally(() => host.unuse());
  }

  /** Calls what is due now and waits for those calls; resolves to [name, due] per call. */
  tick() {
    const decode = (v) => v.map(([n, due]) => [n, new Date(due)]);
    try {
      return this.#using(answer(this.#n.tick(), (t) => decode(JSON.parse(t)), decode));
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Calls due jobs and sleeps until the next, until stop() (or until the clock reaches `until`). */
  run(until) {
    try {
      const u = until === undefined || until === null ? null : instant('until', until);
      const p = this.#using(answer(this.#n.run(u), nothing, nothing));
      this.#run = p;
      return p;
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Runs it in the background and returns at once (stop() ends it). */
  start() {
    this.run().catch((e) => {
      process.emitWarning(`headway scheduler stopped: ${e.message}`);
    });
  }

  /** Stops it after the tick in progress; resolves when run() has. */
  stop() {
    this.#n.stop();
    const r = this.#run;
    this.#run = null;
    return r === null ? Promise.resolve() : r.then(nothing, nothing);
  }
}

/**
 * Puts `data` (a Buffer, a Uint8Array or a string, as UTF-8) on `queue` of
 * the app's broker as another producer would, unchecked: the worker that
 * claims it quarantines it as a dead letter if it is not a message headway
 * runs.
 */
function pushRaw(app, queue, data) {
  try {
    if (!(app instanceof App)) throw argType('app', 'an App', app);
    const q = str('queue', queue);
    let buf;
    if (typeof data === 'string') buf = Buffer.from(data, 'utf8');
    else if (data instanceof Uint8Array) buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    else throw argType('data', 'a Buffer, a Uint8Array or a string', data);
    return answer(app[APP]._pushRaw(q, buf), nothing, nothing);
  } catch (e) {
    return Promise.reject(e);
  }
}

const testing = Object.freeze({ VirtualClock, pushRaw });
const schedule = Object.freeze({ Scheduler, Every, Cron, At });

module.exports = {
  App,
  Task,
  Handle,
  Worker,
  Beat,
  Signature,
  Context,
  RedisBroker,
  chain,
  group,
  chord,
  Fixed,
  Exponential,
  Every,
  Cron,
  At,
  Scheduler,
  schedule,
  testing,
};

// Hidden: how many Promises wait on the bell (tests: nothing is left behind),
// and a Rust panic inside a task future, at once or on the runtime.
Object.defineProperty(module.exports, '_outstanding', { value: () => native._hubOutstanding() });
Object.defineProperty(module.exports, '_panic', {
  value: (later) => {
    try {
      return answer(native._taskPanic(later), nothing, nothing);
    } catch (e) {
      return Promise.reject(e);
    }
  },
});

// Hidden, for admin.js: an App's native half, and a native answer as a Promise.
Object.defineProperty(module.exports, '_admin', {
  value: Object.freeze({ nativeOf: (app) => (app instanceof App ? app[APP] : undefined), answer }),
});
