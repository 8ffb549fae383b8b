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
class RedisBroker {
  constructor(url, options, layout) {
    str('url', url);
    const o = opts('options', options);
    let r;
    if (layout === CELERY) {
      only('RedisBroker.celery', o, ['consumer', 'visibilityTimeout', 'taskSendSentEvent', 'masterName']);
      const consumer = o.consumer === undefined ? null : str('consumer', o.consumer);
      const vt = o.visibilityTimeout === undefined ? null : num('visibilityTimeout', o.visibilityTimeout);
      const sent = o.taskSendSentEvent === undefined ? null : bool('taskSendSentEvent', o.taskSendSentEvent);
      const master = o.masterName === undefined ? null : str('masterName', o.masterName);
      r = native.NativeRedis.celery(url, consumer, vt, sent, master);
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
  if (typeof v === 'string') r = native.NativeSeams.url(v, name, clock);
  else if (v instanceof RedisBroker) r = v[NATIVE].seams(clock);
  else throw argType(name, 'a URL ("memory://", "redis://host:port/db") or a RedisBroker', v);
  if (!(r instanceof native.NativeSeams)) throw refusal(r);
  return r;
}

module.exports = { RedisBroker, seamsOf };
