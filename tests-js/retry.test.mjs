// retry(fn, { backoff, retryIf, signal }): attempt counts, exclusion, the
// last error, abort. Backoffs here are a few ms, rigid, so every run sleeps
// the same.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Backoff, retry } from 'headway';

const quick = (attempts) => new Backoff({ base: 1, factor: 1, cap: 1, attempts, jitter: 'rigid' });

function flaky(failures, value = 'ok') {
  const seen = [];
  const fn = async (attempt) => {
    seen.push(attempt);
    if (seen.length <= failures) throw new Error(`failure ${seen.length}`);
    return value;
  };
  return { fn, seen };
}

test('a first-try success calls fn once with attempt 1', async () => {
  const { fn, seen } = flaky(0, 42);
  assert.equal(await retry(fn), 42);
  assert.deepEqual(seen, [1]);
  assert.equal(await retry(() => 'sync'), 'sync');
});

test('failures are retried until one succeeds, attempts numbered from 1', async () => {
  const { fn, seen } = flaky(2);
  assert.equal(await retry(fn, { backoff: quick(3) }), 'ok');
  assert.deepEqual(seen, [1, 2, 3]);
});

test('when backoff.more says stop, the last error rejects', async () => {
  const { fn, seen } = flaky(10);
  await assert.rejects(retry(fn, { backoff: quick(4) }), { message: 'failure 4' });
  assert.deepEqual(seen, [1, 2, 3, 4]);
  const once = flaky(10);
  await assert.rejects(retry(once.fn, { backoff: quick(1) }), { message: 'failure 1' });
  assert.deepEqual(once.seen, [1]);
});

test('a synchronous throw is retried like a rejection', async () => {
  let n = 0;
  const out = await retry(
    () => {
      n += 1;
      if (n < 3) throw new TypeError('sync');
      return n;
    },
    { backoff: quick(3) },
  );
  assert.equal(out, 3);
});

test('an error retryIf excludes is never retried', async () => {
  const seen = [];
  const fatal = new RangeError('fatal');
  const fn = async (attempt) => {
    seen.push(attempt);
    throw attempt === 1 ? new Error('transient') : fatal;
  };
  await assert.rejects(retry(fn, { backoff: quick(5), retryIf: (e) => !(e instanceof RangeError) }), (e) => e === fatal);
  assert.deepEqual(seen, [1, 2]);
});

test('the sleeps are backoff.delay(retry, Math.random(), previous)', async (t) => {
  const b = new Backoff({ base: 20, factor: 2, cap: 1000, attempts: 3, jitter: 'decorrelated' });
  t.mock.method(Math, 'random', () => 0);
  const { fn } = flaky(2);
  const t0 = performance.now();
  await retry(fn, { backoff: b });
  const took = performance.now() - t0;
  // decorrelated with draws of 0 sleeps base each time: 20 + 20 ms.
  assert.ok(took >= 38, `slept ${took} ms`);
  assert.ok(took < 1000, `slept ${took} ms`);
});

test('abort rejects with the reason at once and cancels the sleep', async () => {
  const ctrl = new AbortController();
  const seen = [];
  const slow = new Backoff({ base: 60_000, cap: 60_000, attempts: 5, jitter: 'rigid' });
  const p = retry(
    async (attempt) => {
      seen.push(attempt);
      throw new Error('down');
    },
    { backoff: slow, signal: ctrl.signal },
  );
  setTimeout(() => ctrl.abort(new Error('stop')), 10);
  const t0 = performance.now();
  await assert.rejects(p, { message: 'stop' });
  assert.ok(performance.now() - t0 < 5000);
  assert.deepEqual(seen, [1]);
  // Nothing left running: a cancelled 60 s timer would hold this file open.
});

test('abort while fn runs rejects at once; fn is not called again', async () => {
  const ctrl = new AbortController();
  let calls = 0;
  let finish;
  const p = retry(
    () => {
      calls += 1;
      return new Promise((_, reject) => {
        finish = () => reject(new Error('late'));
      });
    },
    { backoff: quick(5), signal: ctrl.signal },
  );
  ctrl.abort('reason');
  await assert.rejects(p, (r) => r === 'reason');
  finish();
  await new Promise((r) => setTimeout(r, 10));
  assert.equal(calls, 1);
});

test('an already-aborted signal rejects without calling fn', async () => {
  let called = false;
  await assert.rejects(
    retry(() => (called = true), { signal: AbortSignal.abort(new Error('before')) }),
    { message: 'before' },
  );
  assert.equal(called, false);
});

test('bad arguments reject with a TypeError naming them', async () => {
  await assert.rejects(retry('fn'), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE', message: /"fn"/ });
  await assert.rejects(retry(() => 1, { backoff: {} }), { code: 'ERR_INVALID_ARG_TYPE', message: /"backoff"/ });
  await assert.rejects(retry(() => 1, { retryIf: true }), { code: 'ERR_INVALID_ARG_TYPE', message: /"retryIf"/ });
  await assert.rejects(retry(() => 1, { signal: {} }), { code: 'ERR_INVALID_ARG_TYPE', message: /"signal"/ });
  await assert.rejects(retry(() => 1, 3), { code: 'ERR_INVALID_ARG_TYPE', message: /"options"/ });
});
