'use strict';
// The errors the JS side builds, as Node's own APIs shape them (a `code`,
// the argument named), and the core's refusals turned into Errors.

const { inspect } = require('node:util');

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
  return coded('ERR_INVALID_ARG_TYPE', `The "${name}" argument must be ${expected}.${received(value)}`, TypeError);
}

/** A RangeError as Node's own APIs throw it, naming the argument. */
function outOfRange(name, why) {
  return coded('ERR_OUT_OF_RANGE', `The value of "${name}" is out of range: it ${why}`, RangeError);
}

/** An error of class `Kind` carrying `code`, its message already worded. */
function coded(code, message, Kind = Error) {
  const err = new Kind(message);
  err.code = code;
  return err;
}
/** The core's refusal as an Error (see index.d.ts, `TaskError`). */
function refusal(r) {
  // A value the core cannot accept: its message names the argument.
  if (r.code === 'INVALID') return coded('ERR_INVALID_ARG_VALUE', r.message, RangeError);
  if (r.code === 'RANGE') return coded('ERR_OUT_OF_RANGE', r.message, RangeError);
  if (r.code === 'PANIC') return coded('GenericFailure', r.message);
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

const invalidState = (message) => coded('ERR_INVALID_STATE', message);

/**
 * `make()`, a native constructor's refusal of an argument the core cannot
 * accept (its `InvalidArg`, the core's words) thrown as a RangeError with
 * `code`.
 */
function constructed(code, make) {
  try {
    return make();
  } catch (e) {
    if (e && e.code === 'InvalidArg') throw coded(code, e.message, RangeError);
    throw e;
  }
}

/**
 * The reason `ctx.signal` aborts with once a run passed its soft time limit
 * (Celery's name, so a body rethrowing it fails with the type Celery's
 * bodies fail with). The body goes on: it may clean up and answer, and what
 * it answers is stored.
 */
class SoftTimeLimitExceeded extends Error {
  constructor(limit) {
    super(`the soft time limit (${limit} ms) passed`);
    /** The soft time limit, ms. */
    this.limit = limit;
  }
}

// What a body asks by throwing one of the three below: the core reads it
// (lib/host.js passes it with the failure) and checks it.
const ASK = Symbol('headway.ask');

/** A number of ms, or a Date as its time; anything else as given (the core names it). */
function msOf(v) {
  return v instanceof Date ? v.getTime() : v;
}

/**
 * Thrown by `ctx.retry({ countdown, eta, maxRetries, error })` (or by a
 * body): the run goes again after `countdown` ms or at `eta` (else the
 * task's backoff), within `maxRetries` attempts (else the task's
 * `retries`), recording `error` meanwhile; past the budget it fails with
 * `error`, or without one with `MaxRetriesExceededError`.
 */
class TaskRetry extends Error {
  constructor(options = {}) {
    const o = options ?? {};
    super(o.countdown === undefined || o.countdown === null ? 'Retry' : `Retry in ${o.countdown} ms`);
    this[ASK] = {
      ask: 'retry',
      countdown: msOf(o.countdown),
      eta: msOf(o.eta),
      max_retries: o.maxRetries,
      cause: o.error === undefined || o.error === null ? undefined : o.error,
    };
  }
}

/**
 * Thrown by `ctx.reject({ requeue, reason })` (or by a body): with
 * `requeue` the message goes back to its queue as it was; without, the run
 * fails for good with this type and the reason (Celery's `Reject`).
 */
class Reject extends Error {
  constructor(options = {}) {
    const o = options ?? {};
    super(o.reason === undefined ? 'rejected' : String(o.reason));
    // No requeue: the core's false.
    this[ASK] = { ask: 'reject', requeue: o.requeue };
  }
}

/** Thrown by `ctx.ignore()` (or by a body): the run ends with nothing stored (Celery's `Ignore`). */
class Ignore extends Error {
  constructor() {
    super('ignored');
    this[ASK] = { ask: 'ignore' };
  }
}

for (const [cls, name] of [
  [SoftTimeLimitExceeded, 'SoftTimeLimitExceeded'],
  [TaskRetry, 'Retry'],
  [Reject, 'Reject'],
  [Ignore, 'Ignore'],
]) {
  Object.defineProperty(cls.prototype, 'name', { value: name, writable: true, configurable: true });
}

module.exports = {
  argType,
  outOfRange,
  coded,
  refusal,
  invalidState,
  constructed,
  SoftTimeLimitExceeded,
  TaskRetry,
  Reject,
  Ignore,
  ASK,
};
