// Backoff: ceilings, the four jitters, clamping, more and schedule (ms).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Backoff } from 'headway';

const mk = (jitter, more = {}) => new Backoff({ base: 100, factor: 2, cap: 1000, attempts: 5, jitter, ...more });

test("the defaults are gRPC's retry policy", () => {
  assert.deepEqual({ ...new Backoff() }, { base: 100, factor: 2, cap: 1000, attempts: 3, jitter: 'full' });
});

test('ceiling doubles to the cap, and is 0 before the first retry', () => {
  const b = new Backoff();
  assert.deepEqual([-3, 0, 1, 2, 4, 5, 1000].map((r) => b.ceiling(r)), [0, 0, 100, 200, 800, 1000, 1000]);
});

test('every jitter', () => {
  assert.equal(mk('rigid').delay(2, 0.9), 200);
  assert.equal(mk('full').delay(2, 0.5), 100);
  assert.equal(mk('full').delay(2, 0), 0);
  assert.equal(mk('equal').delay(2, 0), 100);
  assert.equal(mk('equal').delay(2, 0.5), 150);
  // Decorrelated: uniform over [base, min(cap, 3·previous)], previous 0 taken as base.
  assert.equal(mk('decorrelated').delay(1, 0), 100);
  assert.equal(mk('decorrelated').delay(1, 0.5), 200);
  assert.equal(mk('decorrelated').delay(3, 0.5, 200), 350);
  assert.equal(mk('decorrelated').delay(3, 0.5, 900), 550);
  for (const j of ['rigid', 'full', 'equal', 'decorrelated']) {
    assert.equal(mk(j).delay(0, 0.5), 0, j);
    assert.equal(mk(j).jitter, j);
  }
  assert.equal(new Backoff({ jitter: 'FULL' }).jitter, 'full'); // names are case-insensitive
  assert.equal(new Backoff({ jitter: 'none' }).jitter, 'rigid');
});

test('a draw outside [0, 1) is clamped into it', () => {
  const b = new Backoff();
  assert.ok(b.delay(1, 1.0) < 100);
  assert.ok(b.delay(1, 7) < 100);
  assert.ok(b.delay(1, 1.0) > 99.99);
  assert.equal(b.delay(1, -1), 0);
  assert.equal(b.delay(1, NaN), 0);
});

test('omitted draws come from Math.random()', (t) => {
  t.mock.method(Math, 'random', () => 0.25);
  assert.equal(new Backoff().delay(1), 25);
  assert.equal(mk('decorrelated').delay(1), 150);
});

test('more counts attempts: three attempts allow two retries', () => {
  const b = new Backoff();
  assert.deepEqual([-1, 0, 1, 2, 3].map((m) => b.more(m)), [false, true, true, true, false]);
});

test('schedule: attempts - 1 delays, missing draws taken as 0', () => {
  const b = mk('full', { attempts: 4 });
  assert.deepEqual(b.schedule([0.5, 0.5]), [50, 100, 0]);
  assert.deepEqual(b.schedule(), [0, 0, 0]);
  assert.deepEqual(mk('rigid', { attempts: 3 }).schedule([]), [100, 200]);
  assert.deepEqual(mk('rigid', { attempts: 0 }).schedule([]), []);
  assert.deepEqual(mk('decorrelated', { attempts: 4 }).schedule([0.5, 0.5, 0.5]), [200, 350, 550]);
});

test('sub-millisecond spans survive the trip through nanoseconds', () => {
  const b = new Backoff({ base: 0.57, cap: 10, jitter: 'rigid' });
  assert.equal(b.base, 0.57);
  assert.equal(b.delay(1), 0.57);
  assert.equal(b.delay(2), 1.14);
});

test('bad knobs and arguments', () => {
  const cases = [
    [() => new Backoff({ base: -1 }), RangeError, 'ERR_OUT_OF_RANGE', 'base'],
    [() => new Backoff({ cap: -5 }), RangeError, 'ERR_OUT_OF_RANGE', 'cap'],
    [() => new Backoff({ factor: NaN }), RangeError, 'ERR_OUT_OF_RANGE', 'factor'],
    [() => new Backoff({ factor: 0.5 }), RangeError, 'ERR_OUT_OF_RANGE', 'factor'],
    [() => new Backoff({ attempts: -3 }), RangeError, 'ERR_OUT_OF_RANGE', 'attempts'],
    [() => new Backoff({ attempts: 1.5 }), RangeError, 'ERR_OUT_OF_RANGE', 'attempts'],
    [() => new Backoff({ jitter: 'wobbly' }), RangeError, 'ERR_OUT_OF_RANGE', 'jitter'],
    [() => new Backoff({ jitter: 1 }), TypeError, 'ERR_INVALID_ARG_TYPE', 'jitter'],
    [() => new Backoff({ base: '100' }), TypeError, 'ERR_INVALID_ARG_TYPE', 'base'],
    [() => new Backoff().delay('1'), TypeError, 'ERR_INVALID_ARG_TYPE', 'retry'],
    [() => new Backoff().delay(1.5), RangeError, 'ERR_OUT_OF_RANGE', 'retry'],
    [() => new Backoff().delay(1, '0.5'), TypeError, 'ERR_INVALID_ARG_TYPE', 'random'],
    [() => new Backoff().delay(1, 0.5, '0'), TypeError, 'ERR_INVALID_ARG_TYPE', 'previous'],
    [() => new Backoff().ceiling(null), TypeError, 'ERR_INVALID_ARG_TYPE', 'retry'],
    [() => new Backoff().more('2'), TypeError, 'ERR_INVALID_ARG_TYPE', 'made'],
    [() => new Backoff().schedule('0.5'), TypeError, 'ERR_INVALID_ARG_TYPE', 'randoms'],
    [() => new Backoff().schedule(['0.5']), TypeError, 'ERR_INVALID_ARG_TYPE', 'randoms'],
  ];
  for (const [fn, type, code, arg] of cases) {
    assert.throws(fn, (err) => {
      assert.ok(err instanceof type, `${fn}: ${err}`);
      assert.equal(err.code, code, `${fn}`);
      assert.ok(err.message.includes(`"${arg}"`), `${fn}: ${err.message}`);
      return true;
    });
  }
});
