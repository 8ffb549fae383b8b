// Bucket, Window and Gate with explicit times (ms), their errors, and
// bucket.wait on the real clock.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Bucket, Gate, Window } from 'headway';

function named(fn, type, code, arg) {
  assert.throws(fn, (err) => {
    assert.ok(err instanceof type, `${fn}: ${err}`);
    assert.equal(err.code, code, `${fn}`);
    assert.ok(err.message.includes(`"${arg}"`), `${fn}: ${err.message}`);
    return true;
  });
}

test('bucket: starts full, refills at the rate, never above the burst', () => {
  const b = new Bucket(10, { burst: 2 });
  assert.equal(b.take(0), true);
  assert.equal(b.take(0), true);
  assert.equal(b.take(0), false);
  assert.equal(b.next(0), 100);
  assert.equal(b.take(99), false);
  assert.equal(b.take(100), true);
  assert.ok(Math.abs(b.tokens(10_000) - 2) < 1e-9);
  assert.equal(b.take(10_000, 2), true);
  assert.equal(b.take(10_000, 0.5), false);
  assert.equal(b.next(10_000, 0.5), 50);
});

test('bucket: burst defaults to the rate above 1, else 1; at sets the start', () => {
  assert.equal(new Bucket(100).burst, 100);
  assert.equal(new Bucket(0.5).burst, 1);
  assert.equal(new Bucket(5, { burst: 0.2 }).burst, 1);
  const b = new Bucket(1, { burst: 1, at: 5000 });
  assert.equal(b.take(5000), true);
  assert.equal(b.next(5000), 1000);
  assert.equal(b.rate, 1);
});

test('bucket: next is Infinity when never; time running backwards adds nothing', () => {
  const b = new Bucket(1, { burst: 1 });
  assert.equal(b.next(0, 2), Infinity);
  assert.equal(b.take(1000), true);
  assert.equal(b.take(0), false);
  assert.equal(b.tokens(0), 0);
  const zero = new Bucket(0, { burst: 1 });
  assert.equal(zero.take(0), true);
  assert.equal(zero.next(1000), Infinity);
});

test('bucket: sleeping next() is enough', () => {
  const b = new Bucket(3, { burst: 1 });
  assert.equal(b.take(0), true);
  const wait = b.next(0);
  assert.ok(wait > 333 && wait < 334, `${wait}`);
  assert.equal(b.take(wait), true);
});

test('bucket: omitted now reads performance.now()', () => {
  const b = new Bucket(1, { burst: 1, at: performance.now() });
  assert.equal(b.take(), true);
  assert.equal(b.take(), false);
  assert.ok(b.next() > 900);
});

test('bucket: bad arguments', () => {
  named(() => new Bucket(NaN), RangeError, 'ERR_OUT_OF_RANGE', 'rate');
  named(() => new Bucket(-1), RangeError, 'ERR_OUT_OF_RANGE', 'rate');
  named(() => new Bucket(Infinity), RangeError, 'ERR_OUT_OF_RANGE', 'rate');
  named(() => new Bucket(1, { burst: NaN }), RangeError, 'ERR_OUT_OF_RANGE', 'burst');
  named(() => new Bucket(1, { burst: -2 }), RangeError, 'ERR_OUT_OF_RANGE', 'burst');
  named(() => new Bucket(1, { at: NaN }), RangeError, 'ERR_OUT_OF_RANGE', 'at');
  named(() => new Bucket('10'), TypeError, 'ERR_INVALID_ARG_TYPE', 'rate');
  named(() => new Bucket(), TypeError, 'ERR_INVALID_ARG_TYPE', 'rate');
  named(() => new Bucket(1, { burst: '2' }), TypeError, 'ERR_INVALID_ARG_TYPE', 'burst');
  named(() => new Bucket(1, 2), TypeError, 'ERR_INVALID_ARG_TYPE', 'options');
  named(() => new Bucket(1).take('0'), TypeError, 'ERR_INVALID_ARG_TYPE', 'now');
  named(() => new Bucket(1).take(0, '1'), TypeError, 'ERR_INVALID_ARG_TYPE', 'n');
  named(() => new Bucket(1).next(0, null), TypeError, 'ERR_INVALID_ARG_TYPE', 'n');
  named(() => new Bucket(1).take(NaN), RangeError, 'ERR_OUT_OF_RANGE', 'now');
  named(() => new Bucket(1).take(Infinity, 1), RangeError, 'ERR_OUT_OF_RANGE', 'now');
  named(() => new Window(1, 1000).take(NaN), RangeError, 'ERR_OUT_OF_RANGE', 'now');
  named(() => new Bucket(1, { burst: 1 }).take(0, -5), RangeError, 'ERR_OUT_OF_RANGE', 'n');
  named(() => new Bucket(1).next(0, NaN), RangeError, 'ERR_OUT_OF_RANGE', 'n');
  named(() => new Bucket(1).tokens({}), TypeError, 'ERR_INVALID_ARG_TYPE', 'now');
});

test('bucket.wait: resolves once the tokens are there, having taken them', async () => {
  const b = new Bucket(100, { burst: 1, at: performance.now() });
  assert.equal(b.take(), true);
  const t0 = performance.now();
  await b.wait();
  const waited = performance.now() - t0;
  assert.ok(waited >= 5, `waited ${waited} ms for a 10 ms refill`);
  assert.equal(b.take(), false); // wait took the token
  await b.wait(0); // zero tokens: at once
});

test('bucket.wait: never is a RangeError; abort rejects with the reason', async () => {
  const b = new Bucket(1, { burst: 2 });
  await assert.rejects(b.wait(3), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE', message: /"n"/ });
  await assert.rejects(b.wait('1'), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  const slow = new Bucket(0.001, { burst: 1, at: performance.now() });
  slow.take();
  const ctrl = new AbortController();
  const waiting = slow.wait(1, { signal: ctrl.signal });
  setTimeout(() => ctrl.abort(new Error('enough')), 5);
  await assert.rejects(waiting, { message: 'enough' });
  await assert.rejects(slow.wait(1, { signal: AbortSignal.abort('already') }), (r) => r === 'already');
  await assert.rejects(slow.wait(1, { signal: 'no' }), { code: 'ERR_INVALID_ARG_TYPE', message: /"signal"/ });
});

test('window: exact count over a sliding window', () => {
  const w = new Window(3, 10_000);
  assert.equal(w.take(0), true);
  assert.equal(w.take(1000), true);
  assert.equal(w.take(2000), true);
  assert.equal(w.take(3000), false);
  assert.equal(w.left(3000), 0);
  assert.equal(w.next(3000), 7000);
  assert.equal(w.left(10_000), 1); // at exactly 10 s the first has left
  assert.equal(w.next(10_000), 0);
  assert.equal(w.take(10_000), true);
  assert.equal(w.take(10_000), false);
  assert.equal(w.next(10_000), 1000);
  assert.deepEqual([w.allow, w.window], [3, 10_000]);
});

test('window: zero allow is never; a clock running backwards keeps order', () => {
  const z = new Window(0, 1000);
  assert.equal(z.take(0), false);
  assert.equal(z.left(0), 0);
  assert.equal(z.next(0), Infinity);
  const w = new Window(2, 10_000);
  assert.equal(w.take(5000), true);
  assert.equal(w.take(1000), true);
  assert.equal(w.take(1000), false);
  assert.equal(w.left(16_000), 2);
  assert.equal(new Window(1, 1000).take(), true);
});

test('window: bad arguments', () => {
  named(() => new Window(-1, 1000), RangeError, 'ERR_OUT_OF_RANGE', 'allow');
  named(() => new Window(1.5, 1000), RangeError, 'ERR_OUT_OF_RANGE', 'allow');
  named(() => new Window(1, 0), RangeError, 'ERR_OUT_OF_RANGE', 'window');
  named(() => new Window(1, -1), RangeError, 'ERR_OUT_OF_RANGE', 'window');
  named(() => new Window(1, NaN), RangeError, 'ERR_OUT_OF_RANGE', 'window');
  named(() => new Window('1', 1000), TypeError, 'ERR_INVALID_ARG_TYPE', 'allow');
  named(() => new Window(1), TypeError, 'ERR_INVALID_ARG_TYPE', 'window');
  named(() => new Window(1, 1000).take('0'), TypeError, 'ERR_INVALID_ARG_TYPE', 'now');
  named(() => new Window(1, 1000).left(true), TypeError, 'ERR_INVALID_ARG_TYPE', 'now');
});

test('gate: a ceiling, and leaving an empty gate does nothing', () => {
  const g = new Gate(2);
  assert.equal(g.enter(), true);
  assert.equal(g.enter(), true);
  assert.equal(g.enter(), false);
  assert.equal(g.held, 2);
  g.leave();
  assert.equal(g.enter(), true);
  g.leave();
  g.leave();
  g.leave();
  assert.equal(g.held, 0);
  assert.equal(g.limit, 2);
  assert.equal(new Gate(0).enter(), false);
  named(() => new Gate(-1), RangeError, 'ERR_OUT_OF_RANGE', 'limit');
  named(() => new Gate(0.5), RangeError, 'ERR_OUT_OF_RANGE', 'limit');
  named(() => new Gate('2'), TypeError, 'ERR_INVALID_ARG_TYPE', 'limit');
  named(() => new Gate(1e300), RangeError, 'ERR_OUT_OF_RANGE', 'limit');
});
