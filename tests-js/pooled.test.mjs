// Pooled: the six answers run for the caller on the real event loop. Times
// here are real but every wait has a margin in the safe direction (sleeping
// longer than `keep` always makes an item stale).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

import { Backoff, Breaker, Limits, Pooled, Ward } from 'headway';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function factory() {
  const opened = [];
  const closed = [];
  let n = 0;
  return {
    opened,
    closed,
    open: async () => {
      const conn = { id: ++n };
      opened.push(conn.id);
      return conn;
    },
    close: async (conn) => {
      closed.push(conn.id);
    },
  };
}

test('make: open on make, reuse on ready; use gives back', async () => {
  const f = factory();
  const pool = new Pooled({ open: f.open, close: f.close, evictEvery: 0 });
  const first = await pool.use(async (c) => c.id);
  const second = await pool.use((c) => c.id);
  assert.equal(first, 1);
  assert.equal(second, 1);
  assert.deepEqual(f.opened, [1]);
  assert.equal(pool.live, 1);
  assert.equal(pool.idle, 1);
  await pool.close();
  assert.deepEqual(f.closed, [1]);
  assert.equal(pool.closed, true);
});

test('use gives back on a throw too (the item did not break); destroy inside says it did', async () => {
  const f = factory();
  const pool = new Pooled({ open: f.open, close: f.close, evictEvery: 0 });
  await assert.rejects(
    pool.use(async () => {
      throw new Error('body');
    }),
    { message: 'body' },
  );
  assert.equal(pool.idle, 1);
  await pool.use((c) => pool.destroy(c));
  assert.deepEqual(f.closed, [1]);
  assert.equal(pool.live, 0);
  assert.equal(await pool.use((c) => c.id), 2);
  await pool.close();
});

test('stale: an idle item past keep is closed and a new one opened', async () => {
  const f = factory();
  const pool = new Pooled({ open: f.open, close: f.close, limits: new Limits({ size: 2, keep: 20 }), evictEvery: 0 });
  await pool.use(() => {});
  await sleep(40);
  const id = await pool.use((c) => c.id);
  assert.equal(id, 2);
  assert.deepEqual(f.closed, [1]);
  assert.deepEqual(f.opened, [1, 2]);
  await pool.close();
});

test('give -> false: an item above idle is closed on release', async () => {
  const f = factory();
  const pool = new Pooled({ open: f.open, close: f.close, limits: new Limits({ size: 3, idle: 1 }), evictEvery: 0 });
  const a = await pool.acquire();
  const b = await pool.acquire();
  pool.release(a);
  pool.release(b);
  assert.deepEqual(f.closed, [b.id]);
  assert.equal(pool.live, 1);
  assert.equal(pool.idle, 1);
  await pool.close();
});

test('wait: queued until an item comes back, then handed that one', async () => {
  const f = factory();
  const pool = new Pooled({ open: f.open, close: f.close, limits: new Limits({ size: 1 }), evictEvery: 0 });
  const a = await pool.acquire();
  const waiting = pool.acquire();
  await sleep(5);
  assert.equal(pool.pending, 1);
  pool.release(a);
  assert.equal(await waiting, a);
  assert.deepEqual(f.opened, [1]);
  pool.release(a);
  await pool.close();
});

test('wait: a destroyed item frees room for the queued acquire to open', async () => {
  const f = factory();
  const pool = new Pooled({ open: f.open, close: f.close, limits: new Limits({ size: 1 }), evictEvery: 0 });
  const a = await pool.acquire();
  const waiting = pool.acquire();
  await sleep(1);
  pool.destroy(a);
  const b = await waiting;
  assert.equal(b.id, 2);
  pool.release(b);
  await pool.close();
});

test('wait with a timeout rejects with code TIMEOUT', async () => {
  const f = factory();
  const pool = new Pooled({ open: f.open, close: f.close, limits: new Limits({ size: 1 }), timeout: 30, evictEvery: 0 });
  const a = await pool.acquire();
  const t0 = performance.now();
  await assert.rejects(pool.acquire(), (err) => {
    assert.equal(err.code, 'TIMEOUT');
    assert.match(err.message, /30 ms/);
    return true;
  });
  assert.ok(performance.now() - t0 >= 25);
  assert.equal(pool.pending, 0);
  await assert.rejects(new Pooled({ open: f.open, limits: new Limits({ size: 1 }), timeout: 0, evictEvery: 0 }).use(async () => {
    throw new Error('unreached');
  }).then(() => {
    throw new Error('first acquire should succeed');
  }), { message: 'unreached' });
  pool.release(a);
  await pool.close();
});

test('shed: a failing backend is refused locally with code SHED', async (t) => {
  t.mock.method(Math, 'random', () => 0); // every roll inside the refused share
  let opens = 0;
  const pool = new Pooled({
    open: async () => {
      opens += 1;
      throw new Error('connection refused');
    },
    limits: new Limits({ size: 4 }),
    ward: new Ward({ breaker: new Breaker() }),
    evictEvery: 0,
  });
  await assert.rejects(pool.acquire(), { message: 'connection refused' });
  assert.equal(pool.live, 0); // unmade freed the room
  await assert.rejects(pool.acquire(), (err) => {
    assert.equal(err.code, 'SHED');
    assert.match(err.message, /refuses \d+% of makes/);
    return true;
  });
  assert.equal(opens, 1);
  await pool.close();
});

test('later: the ward holds makes after a failure; the acquire sleeps it out', async () => {
  let opens = 0;
  const pool = new Pooled({
    open: async () => {
      opens += 1;
      if (opens === 1) throw new Error('first fails');
      return { id: opens };
    },
    limits: new Limits({ size: 4 }),
    ward: new Ward({ backoff: new Backoff({ base: 40, cap: 40, jitter: 'rigid' }) }),
    evictEvery: 0,
  });
  await assert.rejects(pool.acquire(), { message: 'first fails' });
  const t0 = performance.now();
  const conn = await pool.acquire();
  assert.ok(performance.now() - t0 >= 30, 'slept the hold');
  assert.equal(conn.id, 2);
  pool.release(conn);
  await pool.close();
});

test('later past the timeout rejects with TIMEOUT at once', async () => {
  let opens = 0;
  const pool = new Pooled({
    open: async () => {
      opens += 1;
      throw new Error('down');
    },
    ward: new Ward({ backoff: new Backoff({ base: 10_000, cap: 10_000, jitter: 'rigid' }) }),
    timeout: 100,
    evictEvery: 0,
  });
  await assert.rejects(pool.acquire(), { message: 'down' });
  const t0 = performance.now();
  await assert.rejects(pool.acquire(), { code: 'TIMEOUT', message: /held/ });
  assert.ok(performance.now() - t0 < 90);
  assert.equal(opens, 1);
  await pool.close();
});

test('the evict timer closes idle items past their age', async () => {
  const f = factory();
  let evicted;
  const gone = new Promise((r) => (evicted = r));
  const pool = new Pooled({
    open: f.open,
    close: async (c) => {
      await f.close(c);
      evicted();
    },
    limits: new Limits({ size: 2, keep: 20 }),
    evictEvery: 10,
  });
  await pool.use(() => {});
  assert.equal(pool.idle, 1);
  // The evict timer is unref'd: hold the loop open while we wait for it.
  const alive = setTimeout(() => {}, 5000);
  await gone;
  clearTimeout(alive);
  assert.deepEqual(f.closed, [1]);
  assert.equal(pool.live, 0);
  await pool.close();
});

test('close rejects queued acquires with CLOSED; lent items are closed as they return', async () => {
  const f = factory();
  const pool = new Pooled({ open: f.open, close: f.close, limits: new Limits({ size: 1 }), evictEvery: 0 });
  const a = await pool.acquire();
  const waiting = pool.acquire();
  await sleep(1);
  await pool.close();
  await assert.rejects(waiting, { code: 'CLOSED' });
  await assert.rejects(pool.acquire(), { code: 'CLOSED' });
  assert.deepEqual(f.closed, []);
  pool.release(a);
  assert.deepEqual(f.closed, [1]);
  assert.equal(pool.live, 0);
});

test('drain waits for lent items, then closes everything', async () => {
  const f = factory();
  const pool = new Pooled({ open: f.open, close: f.close, evictEvery: 0 });
  const a = await pool.acquire();
  await pool.use(() => {});
  let drained = false;
  const done = pool.drain().then(() => (drained = true));
  await assert.rejects(pool.acquire(), { code: 'CLOSED' });
  await sleep(5);
  assert.equal(drained, false);
  pool.release(a);
  await done;
  assert.deepEqual(f.closed.sort(), [1, 2]);
  assert.equal(pool.live, 0);
});

test('bad options', () => {
  assert.throws(() => new Pooled(), { code: 'ERR_INVALID_ARG_TYPE', message: /"open"/ });
  assert.throws(() => new Pooled({ open: () => 1, close: 3 }), { code: 'ERR_INVALID_ARG_TYPE', message: /"close"/ });
  assert.throws(() => new Pooled({ open: () => 1, timeout: -1 }), { code: 'ERR_OUT_OF_RANGE', message: /"timeout"/ });
  assert.throws(() => new Pooled({ open: () => 1, evictEvery: '1' }), { code: 'ERR_INVALID_ARG_TYPE', message: /"evictEvery"/ });
  assert.throws(() => new Pooled({ open: () => 1, limits: {} }), { code: 'ERR_INVALID_ARG_TYPE', message: /"limits"/ });
});

test('a forgotten Pooled is collected: its evict timer holds it only weakly', async () => {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc');
  let collected = false;
  const registry = new FinalizationRegistry(() => {
    collected = true;
  });
  (() => {
    const pool = new Pooled({ open: async () => ({}), evictEvery: 5 });
    registry.register(pool, 'pool');
  })();
  for (let i = 0; i < 20 && !collected; i++) {
    gc();
    await sleep(10);
  }
  assert.equal(collected, true);
});

const CHILD = fileURLToPath(new URL('./fixtures/pooled-exit.mjs', import.meta.url));

for (const mode of ['close', 'drain', 'forget']) {
  test(`a process with a Pooled exits on its own (${mode})`, () => {
    const t0 = performance.now();
    const r = spawnSync(process.execPath, [CHILD, mode], { encoding: 'utf8', timeout: 10_000 });
    assert.equal(r.error, undefined, `the child did not exit: ${r.error}`);
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout.trim(), `done ${mode}`);
    assert.ok(performance.now() - t0 < 5000);
  });
}

test('waiters are served first parked, first served; a latecomer does not barge', async () => {
  const f = factory();
  const pool = new Pooled({ open: f.open, close: f.close, limits: new Limits({ size: 1 }), timeout: 5000 });
  const order = [];
  const user = (name) =>
    pool.use(async () => {
      order.push(name);
      await sleep(2);
    });
  const held = await pool.acquire();
  const users = [];
  for (const [i, name] of ['A', 'B', 'C'].entries()) {
    users.push(user(name));
    while (pool.pending !== i + 1) await sleep(0);
  }
  pool.release(held);
  // Arrives after the item came back, before the woken waiter has run.
  users.push(user('D'));
  await Promise.all(users);
  assert.deepEqual(order, ['A', 'B', 'C', 'D']);
  await pool.close();
});
