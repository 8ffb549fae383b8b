'use strict';
// Handles: a run or a set of runs to wait on, look at or revoke, and the
// dead letters a broker reports.

const { inspect } = require('node:util');
const { num, bool, opts, only } = require('./checks.js');
const { argType } = require('./errors.js');
const { parse } = require('./json.js');
const { answer, promised, nothing, same } = require('./host.js');

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
    return promised(() => {
      const t = timeout === undefined || timeout === null ? null : num('timeout', timeout);
      return this.#ask('get', parse, same, t);
    });
  }

  /**
   * What it is doing now, without waiting: a state name (PENDING ...
   * REVOKED), or a custom state its body recorded (`ctx.updateState`).
   */
  state() {
    return promised(() => this.#ask('state', same, same));
  }

  /**
   * What it says about itself now, without waiting (Celery's
   * `AsyncResult.info`): the value once it succeeded, the meta of a custom
   * state its body recorded, the error (`{kind, message, traceback?,
   * module?}`) for a failure, a retry or a revoke, null while nothing is
   * stored. A group: the list of its parts', in order.
   */
  info() {
    return promised(() => this.#ask('info', parse, same));
  }

  /**
   * When it reached its final state (Celery's `date_done`): a Date, or
   * null before or when nothing is stored. A group: its first part's.
   */
  dateDone() {
    return promised(() => {
      const date = (ms) => (ms === null ? null : new Date(ms));
      return this.#ask('dateDone', (t) => date(parse(t)), date);
    });
  }

  /**
   * The runs its success sent on — its `link` callbacks, its chain's next
   * link — as Handles (Celery's `children`); empty before.
   */
  children() {
    return promised(() => {
      const handles = (ids) => ids.map((id) => new Handle(this.#app, [id], false));
      return this.#ask('children', (t) => handles(parse(t)), handles);
    });
  }

  /** Removes what is stored of it (Celery's `forget()`): it then reads PENDING. */
  forget() {
    return promised(() => this.#ask('forget', nothing, nothing));
  }

  /**
   * Revokes it: it will not start anywhere the broker reaches. With
   * `terminate` (`revoke(true)` or `revoke({ terminate: true, signal })`), a
   * run in progress stops — in whichever process on the broker runs it —
   * with `signal` ('SIGTERM'; a name or a number 1 to 64).
   */
  revoke(options = false) {
    return promised(() => {
      const [terminate, signal] = revokeOptions(options);
      return answer(this.#app[APP].revoke(this.#key, this.#all, terminate, signal), nothing, nothing);
    });
  }

  /** The native app's answer to `what` of this handle (the core's `Handle` method of that name), as a Promise. */
  #ask(what, now, later, timeout = null) {
    return answer(this.#app[APP].ask(this.#key, this.#all, what, timeout), now, later);
  }

  [inspect.custom]() {
    return this.#all ? `Handle(group of ${this.#ids.length})` : `Handle(${this.#ids[0]})`;
  }
}

/** `revoke`'s argument: `terminate` alone, or `{ terminate, signal }`. */
function revokeOptions(v) {
  if (typeof v === 'boolean') return [v, null];
  const o = opts('options', v);
  only('revoke', o, ['terminate', 'signal']);
  const terminate = o.terminate === undefined ? false : bool('terminate', o.terminate);
  const s = o.signal;
  if (s !== undefined && s !== null && typeof s !== 'string' && typeof s !== 'number') {
    throw argType('signal', 'a signal name (string) or number', s);
  }
  return [terminate, s ?? null];
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

module.exports = { APP, SEND, Handle, nothing, decodeDead, handleOf };
