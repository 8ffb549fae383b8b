// Pool rules through the Node binding, every time explicit (ms).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import headway, { Backoff, Breaker, Limits, Pool, Ward, pick } from 'headway';

const sized = (size, more = {}) => new Limits({ size, idle: size, ...more });

function fill(pool, items, now = 0) {
  for (const item of items) {
    assert.equal(pool.take(now).kind, 'make');
    pool.made(item, now);
  }
}

test('limits: the defaults are HikariCP / database/sql', () => {
  const l = new Limits();
  assert.deepEqual({ ...l }, { size: 10, idle: 10, keep: 30 * 60 * 1000, life: 0, evictEvery: 30 * 60 * 1000 });
  // The sweep period is the core's: the shorter age, floored at 1 s.
  assert.equal(new Limits({ keep: 600_000, life: 120_000 }).evictEvery, 120_000);
  assert.equal(new Limits({ keep: 100 }).evictEvery, 1000);
  assert.equal(new Limits({ keep: 0, life: 0 }).evictEvery, 0);
  assert.equal(new Pool().limits.size, 10);
  const m = new Limits({ size: 3, keep: 0.5 });
  assert.equal(m.keep, 0.5);
  assert.equal(m.idle, 10);
  assert.throws(() => {
    m.size = 4;
  }, TypeError);
});

test('newest first: the most recently returned comes out first', () => {
  const p = new Pool();
  fill(p, [0, 1, 2]);
  p.give(0, 1);
  p.give(2, 2);
  p.give(1, 3);
  assert.deepEqual([p.take(4), p.take(4), p.take(4)].map((t) => t.item), [1, 2, 0]);
  assert.equal(p.take(4).kind, 'make');
});

test('stale is handed back, never skipped (the 0.1.0 bug)', () => {
  const p = new Pool({ limits: new Limits({ size: 4, keep: 1000 }) });
  fill(p, [0, 1, 2]);
  for (const i of [0, 1, 2]) p.give(i, 0);
  const stale = [];
  for (;;) {
    const t = p.take(5000);
    if (t.kind !== 'stale') {
      assert.equal(t.kind, 'make');
      break;
    }
    stale.push(t.item);
  }
  assert.deepEqual(stale, [2, 1, 0]);
  assert.equal(p.live, 1); // only the room the last take reserved
});

test('birth is kept through every loan, so life retires a reused item', () => {
  const p = new Pool({ limits: new Limits({ size: 2, keep: 0, life: 10_000 }) });
  const conn = { name: 'c' };
  p.take(0);
  p.made(conn, 0);
  for (let t = 1000; t <= 9000; t += 1000) {
    assert.equal(p.give(conn, t), true);
    assert.deepEqual(p.take(t), { kind: 'ready', item: conn });
  }
  // Lent since 9 s, born at 0: at 11 s it is past its life.
  assert.equal(p.give(conn, 11_000), false);
  assert.equal(p.live, 0);
});

test('an unregistered item fills the reserved room and is born when it comes back', () => {
  const p = new Pool({ limits: new Limits({ size: 1, idle: 1, keep: 0, life: 3000 }) });
  assert.equal(p.take(0).kind, 'make');
  assert.equal(p.live, 1);
  const conn = { made: 'without made()' };
  assert.equal(p.give(conn, 2000), true); // born at 2 s
  assert.equal(p.live, 1);
  assert.deepEqual(p.take(4000), { kind: 'ready', item: conn }); // 2 s old, life 3 s
  // A stranger with no room is refused.
  assert.equal(p.give({ other: true }, 4000), false);
  assert.equal(p.live, 1);
  assert.equal(p.give(conn, 6000), false); // now 4 s old: past its life
  assert.equal(p.live, 0);
});

test('identity is ===: two structurally equal objects are two items', () => {
  const p = new Pool({ limits: new Limits({ size: 2, keep: 0, life: 5000 }) });
  const a = { host: 'db', port: 5432 };
  const b = { host: 'db', port: 5432 };
  p.take(0);
  p.made(a, 0);
  p.take(3000);
  p.made(b, 3000);
  assert.equal(p.give(b, 3000), true);
  assert.equal(p.give(a, 3000), true);
  // a (born 0) is newest returned; at 6 s it is past life 5 s, b (born 3 s) is not.
  const first = p.take(6000);
  assert.equal(first.kind, 'stale');
  assert.equal(first.item, a);
  const second = p.take(6000);
  assert.equal(second.kind, 'ready');
  assert.equal(second.item, b);
  assert.notEqual(second.item, a);
});

test('any JS value can be pooled: primitives, functions, symbols', () => {
  const p = new Pool({ limits: new Limits({ size: 0, idle: 0, keep: 0 }) });
  const values = [0, 'conn', Symbol('s'), () => 1, null, undefined, 10n, [1]];
  fill(p, values);
  for (const v of values) assert.equal(p.give(v, 0), true);
  const out = values.map(() => p.take(1).item);
  assert.deepEqual(out, [...values].reverse());
});

test('give answers false above idle, and the refused item is forgotten', () => {
  const p = new Pool({ limits: new Limits({ size: 4, idle: 1, keep: 0 }) });
  const a = {};
  const b = {};
  fill(p, [a, b]);
  assert.equal(p.give(a, 0), true);
  assert.equal(p.give(b, 0), false);
  assert.equal(p.live, 1);
  // b left the pool: given again it is a stranger, kept only if there is room.
  assert.deepEqual(p.take(0), { kind: 'ready', item: a });
  assert.equal(p.give(b, 0), true);
  assert.equal(p.live, 2);
});

test('drop frees the slot; dropping an unregistered item frees its reservation', () => {
  const p = new Pool({ limits: sized(1) });
  p.take(0);
  p.made('x', 0);
  assert.equal(p.take(0).kind, 'wait');
  p.drop('x');
  assert.equal(p.live, 0);
  assert.equal(p.take(0).kind, 'make');
  p.drop('never made');
  assert.equal(p.live, 0);
  assert.equal(p.take(0).kind, 'make');
});

test('unmade frees the room', () => {
  const p = new Pool({ limits: sized(1) });
  assert.equal(p.take(0).kind, 'make');
  assert.equal(p.take(0).kind, 'wait');
  p.unmade(0, 0.5);
  assert.equal(p.take(0).kind, 'make');
});

test('close empties what is idle; the lent come back through give', () => {
  const p = new Pool();
  fill(p, ['a', 'b', 'c']);
  p.give('a', 0);
  p.give('b', 0);
  assert.deepEqual(p.close().sort(), ['a', 'b']);
  assert.equal(p.live, 1);
  assert.equal(p.give('c', 0), true);
  assert.deepEqual(p.evict(0), []);
});

test('the id map survives an item given twice and made twice', () => {
  const p = new Pool({ limits: new Limits({ size: 0, idle: 0, keep: 0 }) });
  const x = {};
  p.take(0);
  p.made(x, 0);
  assert.equal(p.give(x, 0), true);
  assert.equal(p.give(x, 0), true); // a second give: the core keeps a second entry
  assert.equal(p.idle, 2);
  assert.deepEqual(p.close(), [x, x]);
  assert.equal(p.live, 0);
  // Forgotten now: a new item gets a fresh slot and x can be pooled again.
  p.take(0);
  p.made(x, 0);
  assert.deepEqual(p.take(0), { kind: 'make' });
  p.made(x, 0);
  assert.equal(p.busy, 2);
  p.drop(x);
  p.drop(x);
  assert.equal(p.live, 0);
});

test('evict honours both keep and life, oldest and newest alike', () => {
  const p = new Pool({ limits: new Limits({ size: 4, keep: 1000, life: 3000 }) });
  fill(p, ['old'], 0);
  fill(p, ['new'], 2500);
  p.give('old', 2500); // born 0: fine on keep at 3 s, past life at 3.1 s
  p.give('new', 2500);
  assert.deepEqual(p.evict(3000), []);
  assert.deepEqual(p.evict(3100), ['old']);
  assert.deepEqual(p.evict(3600), ['new']);
  assert.equal(p.live, 0);
});

test('breaker: a shed take counts as a request; made is an accept', () => {
  const p = new Pool({ limits: sized(8), ward: new Ward({ breaker: new Breaker() }) });
  assert.equal(p.take(0, 0.5).kind, 'make');
  p.unmade(0, 0.5);
  // refusal is (1 - 0) / 2 = 0.5 now
  assert.equal(p.refusal(0), 0.5);
  assert.equal(p.take(0, 0.49).kind, 'shed');
  assert.ok(Math.abs(p.refusal(0) - 2 / 3) < 1e-12);
  assert.equal(p.take(0, 0.7).kind, 'make');
  p.made('ok', 0);
  // 3 requests, 1 accept: (3 - 2) / 4
  assert.equal(p.refusal(0), 0.25);
  // The window forgets after two minutes (the SRE book's default).
  assert.equal(p.refusal(121_000), 0);
  const b = new Breaker({ k: 1.5, window: 10_000 });
  assert.deepEqual({ ...b }, { k: 1.5, window: 10_000 });
});

test('backoff: later after a failed make, growing with failures, reset by made', () => {
  const rigid = new Backoff({ base: 100, factor: 2, cap: 1000, attempts: 3, jitter: 'rigid' });
  const p = new Pool({ limits: sized(4), ward: new Ward({ backoff: rigid }) });
  p.take(0);
  p.unmade(0, 0.5);
  assert.deepEqual(p.take(0, 0.5), { kind: 'later', delay: 100 });
  assert.deepEqual(p.take(40, 0.5), { kind: 'later', delay: 60 });
  assert.equal(p.take(100, 0.5).kind, 'make');
  p.unmade(100, 0.5);
  assert.deepEqual(p.take(100, 0.5), { kind: 'later', delay: 200 });
  assert.equal(p.take(300, 0.5).kind, 'make');
  p.made('up', 300);
  assert.equal(p.take(300, 0.5).kind, 'make');
  p.unmade(300, 0.5);
  assert.deepEqual(p.take(300, 0.5), { kind: 'later', delay: 100 }); // back to the first hold
});

test('pick: lower refusal wins, then lower busy, then the first; bad input is a TypeError', () => {
  const calm = new Pool({ limits: sized(4) });
  const busy = new Pool({ limits: sized(4) });
  const failing = new Pool({ limits: sized(4), ward: new Ward({ breaker: new Breaker() }) });
  fill(busy, [1, 2]);
  failing.take(0, 0.99);
  failing.unmade(0, 0.5);
  const pools = [failing, busy, calm];
  assert.equal(pick(pools, 0, 0.0, 0.4), 1); // failing refuses, busy does not
  assert.equal(pick(pools, 0, 0.4, 0.9), 2); // same refusal, calm is less busy
  assert.equal(pick(pools, 0, 0.9, 0.4), 2);
  assert.equal(pick(pools, 0, 0.5, 0.5), 1);
  assert.equal(pick(pools, 0, 1.0, -3), 2); // draws are clamped
  assert.equal(pick([], 0, 0.5, 0.5), -1);
  assert.equal(typeof pick([calm]), 'number');
  assert.throws(() => pick('pools'), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE', message: /"pools"/ });
  assert.throws(() => pick([calm, {}], 0, 0, 0), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE', message: /"pools\[1\]"/ });
  assert.throws(() => pick([calm], 'now'), { code: 'ERR_INVALID_ARG_TYPE', message: /"now"/ });
});

test('omitted now and roll read performance.now() and Math.random()', () => {
  const p = new Pool({ limits: new Limits({ size: 2, keep: 0, life: 60_000 }) });
  assert.equal(p.take().kind, 'make');
  p.made('c');
  assert.equal(p.give('c'), true);
  // Born at performance.now(): not past a one-minute life a minute ago.
  assert.equal(p.evict(performance.now() - 60_000).length, 0);
  assert.deepEqual(p.evict(performance.now() + 61_000), ['c']);
  assert.equal(p.refusal(), 0);
});

test('bad arguments: TypeError for types, RangeError from the core, both named', () => {
  const cases = [
    [() => new Limits({ size: -1 }), RangeError, 'ERR_OUT_OF_RANGE', 'size'],
    [() => new Limits({ idle: -1 }), RangeError, 'ERR_OUT_OF_RANGE', 'idle'],
    [() => new Limits({ keep: -1 }), RangeError, 'ERR_OUT_OF_RANGE', 'keep'],
    [() => new Limits({ life: -5 }), RangeError, 'ERR_OUT_OF_RANGE', 'life'],
    [() => new Limits({ size: 2.5 }), RangeError, 'ERR_OUT_OF_RANGE', 'size'],
    [() => new Limits({ keep: NaN }), RangeError, 'ERR_OUT_OF_RANGE', 'keep'],
    [() => new Limits({ size: '10' }), TypeError, 'ERR_INVALID_ARG_TYPE', 'size'],
    [() => new Limits(5), TypeError, 'ERR_INVALID_ARG_TYPE', 'options'],
    [() => new Breaker({ k: 0.5 }), RangeError, 'ERR_OUT_OF_RANGE', 'k'],
    [() => new Breaker({ k: NaN }), RangeError, 'ERR_OUT_OF_RANGE', 'k'],
    [() => new Breaker({ window: 0 }), RangeError, 'ERR_OUT_OF_RANGE', 'window'],
    [() => new Ward({ breaker: {} }), TypeError, 'ERR_INVALID_ARG_TYPE', 'breaker'],
    [() => new Ward({ backoff: new Breaker() }), TypeError, 'ERR_INVALID_ARG_TYPE', 'backoff'],
    [() => new Pool({ limits: { size: 3 } }), TypeError, 'ERR_INVALID_ARG_TYPE', 'limits'],
    [() => new Pool({ ward: new Limits() }), TypeError, 'ERR_INVALID_ARG_TYPE', 'ward'],
    [() => new Pool().take('0'), TypeError, 'ERR_INVALID_ARG_TYPE', 'now'],
    [() => new Pool().take(0, '0.5'), TypeError, 'ERR_INVALID_ARG_TYPE', 'roll'],
    [() => new Pool().give('x', null), TypeError, 'ERR_INVALID_ARG_TYPE', 'now'],
    [() => new Pool().made('x', 'now'), TypeError, 'ERR_INVALID_ARG_TYPE', 'now'],
    [() => new Pool().unmade(0, {}), TypeError, 'ERR_INVALID_ARG_TYPE', 'roll'],
    [() => new Pool().evict('0'), TypeError, 'ERR_INVALID_ARG_TYPE', 'now'],
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

test('an item is forgotten on every way out: stale, evict, close, give -> false, drop', () => {
  const mapped = headway._mapped;
  const p = new Pool({ limits: new Limits({ size: 0, idle: 2, keep: 1000 }) });
  const items = Array.from({ length: 6 }, (_, i) => ({ i }));
  fill(p, items);
  assert.equal(mapped(p), 6);
  p.give(items[0], 0);
  p.give(items[1], 0);
  assert.equal(p.give(items[2], 0), false); // above idle
  p.drop(items[3]);
  assert.equal(mapped(p), 4);
  assert.equal(p.take(5000).kind, 'stale'); // items[1]
  assert.deepEqual(p.evict(5000), [items[0]]);
  p.give(items[4], 5000);
  assert.deepEqual(p.close(), [items[4]]);
  assert.equal(mapped(p), 1); // items[5], still lent
  p.drop(items[5]);
  assert.equal(mapped(p), 0);
  assert.equal(p.live, 0);
});
