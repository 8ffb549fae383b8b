// Hostile values from task bodies (fixtures/hostile.mjs): each fails its own
// run with a fixed description — or, for a thenable that calls back twice,
// succeeds once — while the good runs answered in the same batch keep their
// results and the worker, and its process, go on. On every broker in
// process, and on Redis in a worker process of its own, which must still be
// alive after and stop cleanly. Then the flow half's drivers (retry, Pooled)
// with the same values.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import { after, afterEach, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { App, Backoff, Pooled, RedisBroker, retry } from 'headway';

import { RedisServer, brokers } from './fixtures/brokers.mjs';
import { HOSTILE, trapped } from './fixtures/hostile.mjs';

const WAIT = 10_000;
const NAMES = Object.keys(HOSTILE);

/** Checks what `get()` gave for hostile run `name` (`got` is `{ value }` or `{ error }`). */
function expectOutcome(name, got, kind) {
  const want = HOSTILE[name][1];
  if ('value' in want) {
    assert.ok(!('error' in got), `${name}: ${got.error?.message}`);
    assert.deepEqual(got.value, want.value, name);
    return;
  }
  assert.ok('error' in got, `${name} succeeded with ${JSON.stringify(got.value)}`);
  const e = got.error;
  assert.equal(e.code, 'FAILED', `${name}: ${e.message}`);
  assert.equal(e.remoteType, want.type, name);
  if (want.message instanceof RegExp) assert.match(e.remoteMessage, want.message, name);
  else assert.equal(e.remoteMessage, want.message, name);
  if (want.traceback === null && kind !== 'celery') assert.equal(e.remoteTraceback, null, name);
}

const outcome = (h) =>
  h.get(WAIT).then(
    (value) => ({ value }),
    (error) => ({ error }),
  );

for (const b of brokers()) {
  describe(`hostile values on the ${b.kind} broker`, { skip: b.skip }, () => {
    before(() => b.setup());
    after(() => b.teardown());
    afterEach(() => b.stopAll());

    test('each hostile run fails with its description; the good runs beside it and after it succeed', async () => {
      const app = await b.app();
      const good = app.task('good', ([i]) => i * 2);
      const tasks = new Map(NAMES.map((n) => [n, app.task(`hostile.${n}`, HOSTILE[n][0])]));
      // Everything is queued before the worker starts, a good run between
      // every two hostile ones, and the worker takes them all at once: the
      // hostile runs share batches of answers with good ones.
      const sent = [];
      for (const [i, n] of NAMES.entries()) {
        sent.push(['good', i, await good.send([i])]);
        sent.push([n, i, await tasks.get(n).send()]);
      }
      sent.push(['good', -1, await good.send([-1])]);
      const c = sent.length;
      b.start(app, { concurrency: c, prefetch: c });
      const got = await Promise.all(sent.map(([, , h]) => outcome(h)));
      for (const [j, [n, i]] of sent.entries()) {
        if (n === 'good') assert.deepEqual(got[j], { value: i * 2 }, `good run ${i}`);
        else expectOutcome(n, got[j], b.kind);
      }
      // The same worker runs a normal task after them all.
      assert.equal(await (await good.send([21])).get(WAIT), 42);
    });
  });
}

test('a scheduler job that throws a hostile value is counted as failed; the scheduler goes on', async () => {
  const { Scheduler, Every, testing } = await import('headway');
  const clock = new testing.VirtualClock(0);
  const s = new Scheduler({ clock });
  const ran = [];
  s.add(
    'bad',
    () => {
      throw trapped();
    },
    new Every(1000),
  );
  s.add('fine', () => ran.push(1), new Every(1000));
  await s.run(3000);
  const bad = s.stats('bad');
  assert.ok(bad.failed >= 3, JSON.stringify(bad));
  assert.equal(bad.fired, bad.failed);
  assert.equal(s.stats('fine').failed, 0);
  assert.equal(ran.length, s.stats('fine').fired);
  assert.ok(ran.length >= 3);
});

// ---------------------------------------------------------------- a process

const missing = RedisServer.missing();

describe('hostile values in a worker process on Redis', { skip: missing ?? false }, () => {
  let server;
  before(async () => {
    server = await new RedisServer().start();
  });
  after(() => server?.stop());

  test('the worker process answers every run and is alive after; SIGINT stops it cleanly', async () => {
    const prefix = `hx${randomUUID().slice(0, 6)}:`;
    const child = spawn(process.execPath, [fileURLToPath(new URL('./fixtures/hostile-worker.mjs', import.meta.url)), server.url, prefix], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let err = '';
    child.stderr.on('data', (d) => {
      err += d;
    });
    const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
    try {
      await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no ready within ${WAIT} ms: ${err}`)), WAIT);
        createInterface({ input: child.stdout }).on('line', (l) => {
          if (l === 'ready') {
            clearTimeout(timer);
            resolve();
          }
        });
        child.on('exit', () => reject(new Error(`the worker exited before ready: ${err}`)));
      });
      const app = new App({ broker: new RedisBroker(server.url, { prefix }) });
      const sent = [];
      for (const [i, n] of NAMES.entries()) {
        sent.push(['good', i, await app.sendTask('good', [i])]);
        sent.push([n, i, await app.sendTask(`hostile.${n}`)]);
      }
      const got = await Promise.all(sent.map(([, , h]) => outcome(h)));
      for (const [j, [n, i]] of sent.entries()) {
        if (n === 'good') assert.deepEqual(got[j], { value: i * 2 }, `good run ${i}`);
        else expectOutcome(n, got[j], 'redis');
      }
      // Alive: it answers a run sent after all of them (a dead one could not).
      assert.equal(await (await app.sendTask('good', [50])).get(WAIT), 100);
      assert.equal(child.exitCode, null, err);
      assert.equal(child.signalCode, null, err);
      child.kill('SIGINT');
      const { code } = await exited;
      assert.equal(code, 0, err);
      assert.doesNotMatch(err, /Error|Uncaught/, err);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  });
});

// ---------------------------------------------------------------- the flow half

// The thrown values of the catalogue, and the values a body can return that
// make `await` throw (a thenable whose `then` getter throws, a Proxy).
const THROWN = () => [
  ['null-prototype', Object.create(null)],
  ['undefined', undefined],
  ['null', null],
  ['symbol', Symbol('sym')],
  ['bigint', 12n],
  ['proxy', trapped()],
  [
    'toString-throws',
    {
      toString() {
        throw Object.create(null);
      },
    },
  ],
];

const quick = (attempts) => new Backoff({ base: 1, factor: 1, cap: 1, attempts, jitter: 'rigid' });

async function rejection(p) {
  try {
    await p;
  } catch (e) {
    return { e };
  }
  return null;
}

test('retry: a hostile thrown value is retried and rejects as itself; a hostile thenable is an attempt that failed', async () => {
  for (const [what, v] of THROWN()) {
    let calls = 0;
    const got = await rejection(
      retry(
        () => {
          calls++;
          throw v;
        },
        { backoff: quick(2) },
      ),
    );
    assert.ok(got !== null && Object.is(got.e, v), what);
    assert.equal(calls, 2, what);
    // With retryIf and a signal: the same.
    const seen = [];
    const again = await rejection(
      retry(
        async () => {
          throw v;
        },
        { backoff: quick(3), retryIf: (e) => (seen.push(e), true), signal: new AbortController().signal },
      ),
    );
    assert.ok(again !== null && Object.is(again.e, v), what);
    assert.equal(seen.length, 3, what);
  }
  // A thenable whose then getter throws, then a good value: retried to success.
  let n = 0;
  const out = await retry(
    () => {
      n++;
      if (n === 1)
        return {
          get then() {
            throw Object.create(null);
          },
        };
      if (n === 2) return trapped();
      return 'ok';
    },
    { backoff: quick(3) },
  );
  assert.equal(out, 'ok');
  assert.equal(n, 3);
});

test('Pooled: hostile values from open, close and the body reject the caller; the pool goes on', async () => {
  for (const [what, v] of THROWN()) {
    let fail = true;
    const closed = [];
    const pool = new Pooled({
      open: () => {
        if (fail) throw v;
        return { id: 1 };
      },
      close: (item) => {
        closed.push(item.id);
        throw v;
      },
      evictEvery: 0,
      timeout: 1000,
    });
    const opened = await rejection(pool.acquire());
    assert.ok(opened !== null && Object.is(opened.e, v), `${what}: open`);
    fail = false;
    const body = await rejection(
      pool.use(() => {
        throw v;
      }),
    );
    assert.ok(body !== null && Object.is(body.e, v), `${what}: use`);
    const thenable = await rejection(
      pool.use(() => ({
        get then() {
          throw v;
        },
      })),
    );
    assert.ok(thenable !== null && Object.is(thenable.e, v), `${what}: a then getter`);
    // Still serving: the item came back each time and is lent again.
    assert.equal(await pool.use((c) => c.id), 1);
    assert.equal(pool.live, 1);
    assert.equal(pool.busy, 0);
    await pool.close();
    // close threw: the item was still let go.
    assert.deepEqual(closed, [1]);
  }
  // open answering a thenable whose then getter throws, or a trapped Proxy:
  // a failed make, not a crash; the next make succeeds.
  let k = 0;
  const pool = new Pooled({
    open: () => {
      k++;
      if (k === 1)
        return {
          get then() {
            throw Object.create(null);
          },
        };
      if (k === 2) return Promise.resolve(trapped());
      return { id: k };
    },
    evictEvery: 0,
    timeout: 1000,
  });
  assert.ok((await rejection(pool.acquire())) !== null);
  assert.ok((await rejection(pool.acquire())) !== null);
  const item = await pool.acquire();
  assert.equal(item.id, 3);
  pool.release(item);
  await pool.close();
});

// ---------------------------------------------------------------- sending

test('a send whose arguments cannot travel is refused naming them, not garbled on the native side', async () => {
  const app = new App();
  const t = app.task('t', (args) => args);
  const hiddenToJSON = Object.defineProperty({ a: 1 }, 'toJSON', { value: () => undefined });
  await assert.rejects(t.send(['x\ud800']), {
    name: 'TypeError',
    code: 'ERR_INVALID_ARG_VALUE',
    message: 't: args holds a lone UTF-16 surrogate, which is not Unicode text and JSON cannot carry it',
  });
  await assert.rejects(t.send([], { kwargs: { ['k\udc00']: 1 } }), { code: 'ERR_INVALID_ARG_VALUE', message: /^t: kwargs holds a lone UTF-16 surrogate/ });
  await assert.rejects(t.send([], { kwargs: hiddenToJSON }), {
    name: 'TypeError',
    code: 'ERR_INVALID_ARG_TYPE',
    message: 't: kwargs turned into nothing as JSON (a toJSON answered undefined)',
  });
  // Controls: a well-formed pair, and text that merely spells an escape, travel.
  const w = app.worker();
  const run = w.run();
  assert.deepEqual(await (await t.send(['😀', '\\ud800'])).get(WAIT), ['😀', '\\ud800']);
  await w.stop();
  await run;
});
