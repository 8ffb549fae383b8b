'use strict';
// SharedBucket, SharedWindow and SharedGate: limits shared by every process
// (Node or Python) that names the same key on one Redis. Everything they
// answer is the core's (src/shared.rs over headway-core's `limit`):
// the scripts, the clock (Redis TIME), the defaults and every range check.
// This file checks types, converts a refusal into the RangeError Node throws,
// and turns native answers into Promises.

const native = require('../addon.js');
const { answer, nothing, same } = require('./host.js');
const { kick } = require('./wire.js');
const { anyNum, optNum, fix, strictOpts, str } = require('./checks.js');
const { constructed } = require('./errors.js');

/** A native call's answer, its bytes written on the event loop's socket
 * when the call went there (`lib/wire.js`). */
function sent(wire, r) {
  if (wire !== null && typeof r === 'number') kick(wire);
  return r;
}
// A span in milliseconds: null is never.
const spanLater = (v) => (v === null ? Infinity : v);
const spanNow = (text) => spanLater(JSON.parse(text));

/** A native constructor's refusal (an argument the core cannot accept) as a RangeError. */
const make = (fn) => constructed('ERR_INVALID_ARG_VALUE', fn);

class SharedBucket {
  #n;
  #w;

  constructor(url, key, rate, options) {
    const { burst } = strictOpts(options);
    this.#n = make(() => new native.NativeSharedBucket(str('url', url), str('key', key), anyNum('rate', rate), optNum('burst', burst) ?? null));
    this.#w = this.#n.wire;
    fix(this, { rate: this.#n.rate, burst: this.#n.burst, key: this.#n.key });
  }

  take(n) {
    return answer(sent(this.#w, this.#n.take(optNum('n', n))), JSON.parse, same);
  }

  next(n) {
    return answer(sent(this.#w, this.#n.next(optNum('n', n))), spanNow, spanLater);
  }

  tokens() {
    return answer(sent(this.#w, this.#n.tokens()), JSON.parse, same);
  }

  wait(n) {
    return answer(this.#n.wait(optNum('n', n)), nothing, nothing);
  }
}

class SharedWindow {
  #n;
  #w;

  constructor(url, key, limit, per) {
    this.#n = make(() => new native.NativeSharedWindow(str('url', url), str('key', key), anyNum('limit', limit), anyNum('per', per)));
    this.#w = this.#n.wire;
    fix(this, { limit: this.#n.limit, per: this.#n.per, key: this.#n.key });
  }

  take() {
    return answer(sent(this.#w, this.#n.take()), JSON.parse, same);
  }

  left() {
    return answer(sent(this.#w, this.#n.left()), JSON.parse, same);
  }

  next() {
    return answer(sent(this.#w, this.#n.next()), spanNow, spanLater);
  }

  wait() {
    return answer(this.#n.wait(), nothing, nothing);
  }
}

class SharedGate {
  #n;
  #w;

  constructor(url, key, n, options) {
    const { lease } = strictOpts(options);
    this.#n = make(() => new native.NativeSharedGate(str('url', url), str('key', key), anyNum('n', n), optNum('lease', lease) ?? null));
    this.#w = this.#n.wire;
    fix(this, { limit: this.#n.limit, lease: this.#n.lease, key: this.#n.key });
  }

  take() {
    return answer(sent(this.#w, this.#n.take()), JSON.parse, same);
  }

  release(permit) {
    return answer(sent(this.#w, this.#n.release(str('permit', permit))), JSON.parse, same);
  }

  renew(permit) {
    return answer(sent(this.#w, this.#n.renew(str('permit', permit))), JSON.parse, same);
  }

  held() {
    return answer(sent(this.#w, this.#n.held()), JSON.parse, same);
  }
}

module.exports = { SharedBucket, SharedWindow, SharedGate };
