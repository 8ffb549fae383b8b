'use strict';
// Brokers: RedisBroker, and what an App's `broker` argument means.

const { inspect } = require('node:util');
const native = require('../addon.js');
const { argType, refusal } = require('./errors.js');
const { opts, only, str, num, bool } = require('./checks.js');
const { answer, promised, nothing } = require('./host.js');
const { NATIVE } = require('./clock.js');

const CELERY = Symbol('celery');

/**
 * A broker, result store and chord counter on Redis: headway's own layout
 * (`new RedisBroker(url, { consumer, prefix, lease })`), or Celery's
 * (`RedisBroker.celery(url, { consumer, visibilityTimeout, taskSendSentEvent, masterName })`). It connects
 * when an App is built on it, with that app's clock.
 */
// Each layout's options, in the order its native factory takes them, with
// the check of each (omitted: null, the core's default).
const LAYOUTS = {
  headway: ['RedisBroker', { consumer: str, prefix: str, lease: num }],
  celery: ['RedisBroker.celery', { consumer: str, visibilityTimeout: num, taskSendSentEvent: bool, masterName: str }],
};

class RedisBroker {
  constructor(url, options, layout) {
    str('url', url);
    const o = opts('options', options);
    const kind = layout === CELERY ? 'celery' : 'headway';
    const [name, checks] = LAYOUTS[kind];
    only(name, o, Object.keys(checks));
    const args = Object.entries(checks).map(([k, check]) => (o[k] === undefined ? null : check(k, o[k])));
    const r = native.NativeRedis[kind](url, ...args);
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
    return promised(() => answer(this[NATIVE].recover(), Number, Number));
  }

  /** Lets go of this consumer's claims so another takes them now: call it after the worker stopped. */
  close() {
    return promised(() => answer(this[NATIVE].close(), nothing, nothing));
  }

  [inspect.custom]() {
    return this.layout === 'celery' ? `RedisBroker.celery(${this.url})` : `RedisBroker(${this.url})`;
  }
}

function seamsOf(name, v, clock) {
  let r;
  // Omitted: the core's default broker (memory://).
  if (typeof v === 'string' || v === undefined) r = native.NativeSeams.url(v, name, clock);
  else if (v instanceof RedisBroker) r = v[NATIVE].seams(clock);
  else throw argType(name, 'a URL ("memory://", "redis://host:port/db") or a RedisBroker', v);
  if (!(r instanceof native.NativeSeams)) throw refusal(r);
  return r;
}

module.exports = { RedisBroker, seamsOf };
