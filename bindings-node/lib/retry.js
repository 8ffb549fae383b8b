'use strict';
// `retry(fn, { backoff, retryIf, signal })`: calls, sleeps and throws as the
// core's Attempts answers after each failure.

const { argType } = require('./errors.js');
const { strictOpts, checkSignal } = require('./checks.js');
const { F, sleep, Backoff, backoffHandle } = require('./flow.js');

const { attemptsFailed } = F;

/** The policy of a retry given none, made at its first use. */
let defaultBackoff;

// The core's Attempts decides after each failure whether to go on and how long
// to sleep; this loop calls, sleeps and throws.
async function attempts(fn, backoff, retryIf, signal) {
  let previous = 0;
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (err) {
      const stopped = signal !== undefined && signal.aborted;
      const retryable = !stopped && (retryIf === undefined || retryIf(err));
      const policy = backoff === undefined ? (defaultBackoff ??= new Backoff()) : backoff;
      const delay = attemptsFailed(backoffHandle(policy), attempt, previous, retryable ? 1 : 0, stopped ? 1 : 0, Math.random());
      if (delay < 0) throw stopped ? signal.reason : err;
      previous = delay;
      await sleep(delay, signal);
    }
  }
}

function retry(fn, options) {
  if (typeof fn !== 'function') return Promise.reject(argType('fn', 'of type function', fn));
  let backoff;
  let retryIf;
  let signal;
  try {
    ({ backoff, retryIf, signal } = strictOpts(options));
    if (backoff !== undefined && backoffHandle(backoff) === undefined) throw argType('backoff', 'an instance of Backoff', backoff);
    if (retryIf !== undefined && typeof retryIf !== 'function') throw argType('retryIf', 'of type function', retryIf);
    signal = checkSignal(signal);
  } catch (err) {
    return Promise.reject(err);
  }
  if (signal === undefined) return attempts(fn, backoff, retryIf, undefined);
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    attempts(fn, backoff, retryIf, signal)
      .finally(() => signal.removeEventListener('abort', onAbort))
      .then(resolve, reject);
  });
}

module.exports = { retry };
