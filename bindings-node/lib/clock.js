'use strict';
// Time: the system and virtual clocks, the rhythms of the beat (Every, Cron,
// At), the task backoffs (Fixed, Exponential) and a task's policy as JSON.

const { inspect } = require('node:util');
const native = require('../addon.js');
const { argType, outOfRange, refusal } = require('./errors.js');
const { opts, only, str, num, bool, instant, jsonNumber } = require('./checks.js');

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

/**
 * When something fires; made by `Every`, `Cron` and `At`. Its properties
 * are `props` of the request as the core reads it (a crontab line's zone
 * filled in).
 */
class Rhythm {
  constructor(kind, spec, props) {
    const r = native._rhythmNorm(JSON.stringify(spec));
    if (typeof r !== 'string') throw refusal(r);
    this.kind = kind;
    Object.assign(this, props(JSON.parse(r)));
    this[SPEC] = r;
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
  return new Rhythm('every', { every: interval, anchor }, () => ({ interval, anchor }));
}

/** The minutes a 5-field crontab line names, read in the IANA zone `tz` (the core's "UTC" when omitted). */
function Cron(expr, options) {
  str('expr', expr);
  const o = opts('options', options);
  only('Cron', o, ['tz']);
  const tz = o.tz === undefined ? null : str('tz', o.tz);
  return new Rhythm('cron', { cron: expr, tz }, (n) => ({ expr, tz: n.tz }));
}

/** Once, at `when` (Date or epoch ms); a time already past fires once, at once. */
function At(when) {
  const t = instant('when', when);
  return new Rhythm('at', { at: t }, () => ({ when: t }));
}

function rhythmSpec(name, r) {
  if (!(r instanceof Rhythm)) throw argType(name, 'Every(...), Cron(...) or At(...)', r);
  return r[SPEC];
}

/**
 * How long a failed run waits before the next attempt; made by `Fixed` and
 * `Exponential`. Its properties are the core's reading of the request
 * (`kind`, then `delay`, or `base`, `cap` and `jitter` with the defaults
 * filled in).
 */
class TaskBackoff {
  constructor(spec) {
    this[SPEC] = JSON.stringify(spec);
    const r = native._backoffNorm(this[SPEC]);
    if (typeof r !== 'string') throw refusal(r);
    Object.assign(this, JSON.parse(r));
    Object.freeze(this);
  }

  /** The ms waited before attempt `attempt` (the first is 1, and never waits) of the run `taskId`. */
  waitBefore(attempt, taskId) {
    num('attempt', attempt);
    // An attempt crosses as a 32-bit count (as Python's does, which refuses
    // a larger one): past it, Node-API would wrap it round to a wrong wait.
    if (!Number.isInteger(attempt) || attempt < 0 || attempt > 0xffffffff) {
      throw outOfRange('attempt', 'must be a whole number from 0 to 4294967295');
    }
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

const POLICY = ['queue', 'retries', 'backoff', 'timeout', 'acksLate', 'ignoreResult', 'rate', 'timeLimit', 'softTimeLimit', 'rejectOnWorkerLost', 'retryFor', 'dontRetryFor', 'rateScope', 'concurrencyLimit'];

const text = (k, v) => JSON.stringify(str(k, v));
const number = (k, v) => jsonNumber(num(k, v));

function backoffOf(k, v) {
  if (!(v instanceof TaskBackoff)) throw argType(k, 'Fixed(...) or Exponential(...)', v);
  return v[SPEC];
}

// Error classes (or their names) as names: what the core matches a thrown
// error's constructor chain against.
function classNames(k, v) {
  const names = (Array.isArray(v) ? v : [v]).map((c) => {
    if (typeof c === 'function' && typeof c.name === 'string') return c.name;
    if (typeof c === 'string') return c;
    throw argType(k, 'an Error class, its name, or an array of them', c);
  });
  return JSON.stringify(names);
}

function rateOf(k, r) {
  if (typeof r === 'string') return JSON.stringify(r);
  if (typeof r === 'object' && typeof r.count === 'number' && typeof r.per === 'number') {
    return JSON.stringify({ count: num('rate.count', r.count), per: num('rate.per', r.per) });
  }
  throw argType(k, 'a string like "10/m" or { count, per }', r);
}

// Each policy option as JSON, in the order they are checked; `true`: null is
// omitted, as undefined is (otherwise it is refused).
const POLICY_JSON = [
  ['queue', text], ['retries', number], ['backoff', backoffOf], ['timeout', number, true], ['acksLate', bool], ['ignoreResult', bool],
  ['timeLimit', number, true], ['softTimeLimit', number, true], ['rejectOnWorkerLost', bool], ['rateScope', text, true],
  ['concurrencyLimit', number, true], ['retryFor', classNames, true], ['dontRetryFor', classNames, true], ['rate', rateOf, true],
];

function policyJson(policy) {
  const p = opts('policy', policy);
  only('policy', p, POLICY);
  let out = '';
  for (const [k, write, nullable] of POLICY_JSON) {
    if (p[k] !== undefined && !(nullable && p[k] === null)) out += `${out ? ',' : ''}"${k}":${write(k, p[k])}`;
  }
  return `{${out}}`;
}

module.exports = { VirtualClock, clockOf, check, Every, Cron, At, rhythmSpec, Fixed, Exponential, policyJson, NATIVE };
