// Task limits shared by every worker on a broker — `rateScope: 'global'`,
// `concurrencyKey` with `concurrencyLimit`, `dedupeKey` with `dedupeTtl` —
// on the memory broker and both Redis layouts (a redis-server this file
// starts), two apps standing for two worker processes. Each limit beside
// its positive control; the refusals beside the same call made valid.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { randomUUID } from 'node:crypto';

import { App, RedisBroker } from 'headway';
import { RedisServer } from './fixtures/brokers.mjs';

const skip = RedisServer.missing() ?? false;
let server;
let db = 30;

before(async () => {
  if (!skip) server = await new RedisServer().start();
});
after(() => server?.stop());

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Two apps on one broker of `kind`, each with its own connection. */
async function pair(kind) {
  if (kind === 'memory') {
    const app = new App();
    return [app, app];
  }
  if (kind === 'celery') {
    db += 1;
    const url = server.db(db);
    return [1, 2].map((i) => new App({ broker: RedisBroker.celery(url, { consumer: `c${i}` }) }));
  }
  const prefix = `tl${randomUUID().slice(0, 8)}:`;
  return [1, 2].map((i) => new App({ broker: new RedisBroker(server.url, { prefix, consumer: `c${i}` }) }));
}

const KINDS = ['memory', 'redis', 'celery'];
const skipOf = (kind) => (kind === 'memory' ? false : skip);

async function started(kind, rateScope, windowMs) {
  const starts = [];
  const apps = await pair(kind);
  for (const app of apps) {
    app.task('ping', () => {
      starts.push(performance.now());
    }, { rate: '20/s', rateScope });
  }
  for (let i = 0; i < 300; i++) await apps[0].send('ping', []);
  const ws = apps.map((a) => a.worker({ concurrency: 4, prefetch: 8 }));
  const runs = ws.map((w) => w.run());
  const deadline = Date.now() + 20_000;
  while (starts.length === 0) {
    assert.ok(Date.now() < deadline, 'nothing ran');
    await sleep(5);
  }
  const first = starts[0];
  await sleep(Math.max(0, first + windowMs - performance.now()));
  await Promise.all(ws.map((w) => w.stop({ grace: 2000 })));
  await Promise.all(runs);
  return starts.filter((t) => t < first + windowMs).length;
}

for (const kind of KINDS) {
  test(`${kind}: a global rate holds across two workers`, { skip: skipOf(kind) }, async () => {
    const window = 3000;
    const global = await started(kind, 'global', window);
    // 20/s over 3 s, a burst of 20 (one second's worth): 80, within 10%.
    assert.ok(global >= 50 && global <= (20 * 3 + 20) * 1.1, `${global}`);
    // The positive control: per worker, each lets its own 20/s through.
    const each = await started(kind, 'worker', window);
    assert.ok(each >= 1.5 * 20 * 3, `${each}`);
  });

  test(`${kind}: a concurrency key is never exceeded while other keys run`, { skip: skipOf(kind) }, async () => {
    const ledger = [];
    const apps = await pair(kind);
    for (const app of apps) {
      app.task('slow', async ([key]) => {
        const t0 = performance.now();
        await sleep(80);
        ledger.push([key, t0, performance.now()]);
      }, { concurrencyLimit: 1 });
    }
    const hs = [];
    for (let i = 0; i < 6; i++) {
      for (const key of ['cust-7', 'cust-8']) {
        hs.push(await apps[i % 2].send('slow', [key], { concurrencyKey: key }));
      }
    }
    const ws = apps.map((a) => a.worker({ concurrency: 4 }));
    const runs = ws.map((w) => w.run());
    for (const h of hs) await h.get(30_000);
    await Promise.all(ws.map((w) => w.stop({ grace: 2000 })));
    await Promise.all(runs);
    const most = (key) => {
      const edges = [];
      for (const [k, a, b] of ledger) {
        if (key === null || k === key) edges.push([a, 1], [b, -1]);
      }
      edges.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
      let now = 0;
      let top = 0;
      for (const [, d] of edges) top = Math.max(top, (now += d));
      return top;
    };
    assert.equal(ledger.length, 12);
    assert.equal(most('cust-7'), 1);
    assert.equal(most('cust-8'), 1);
    // The positive control: different keys did run at once.
    assert.ok(most(null) >= 2);
  });

  test(`${kind}: a deduplicated send answers the first run until its ttl`, { skip: skipOf(kind) }, async () => {
    const runs = [];
    const apps = await pair(kind);
    for (const app of apps) {
      app.task('once', (_args, ctx) => {
        runs.push(ctx.id);
        return 'done';
      });
    }
    const first = await apps[0].send('once', [], { dedupeKey: 'k', dedupeTtl: 700 });
    const again = await apps[1].send('once', [], { dedupeKey: 'k', dedupeTtl: 700 });
    assert.equal(again.id, first.id);
    // The positive control: another key sends its own run.
    const other = await apps[1].send('once', [], { dedupeKey: 'j', dedupeTtl: 700 });
    assert.notEqual(other.id, first.id);
    const w = apps[0].worker();
    const run = w.run();
    try {
      assert.equal(await first.get(30_000), 'done');
      await other.get(30_000);
      await sleep(800);
      const later = await apps[1].send('once', [], { dedupeKey: 'k', dedupeTtl: 700 });
      assert.notEqual(later.id, first.id);
      await later.get(30_000);
      assert.deepEqual([...runs].sort(), [first.id, other.id, later.id].sort());
    } finally {
      await w.stop({ grace: 2000 });
      await run;
    }
  });
}

test('task limits options are checked in the core, named as Node spells them', async () => {
  const app = new App();
  assert.throws(() => app.task('a', () => {}, { rate: '1/s', rateScope: 'cluster' }), (e) => e instanceof RangeError && /`rateScope`/.test(e.message));
  assert.throws(() => app.task('b', () => {}, { rateScope: 'global' }), (e) => e instanceof RangeError && /`rateScope`/.test(e.message));
  assert.throws(() => app.task('c', () => {}, { concurrencyLimit: 0 }), (e) => e instanceof RangeError && /`concurrencyLimit`/.test(e.message));
  const ok = app.task('ok', () => {}, { rate: '1/s', rateScope: 'global', concurrencyLimit: 2 });
  await assert.rejects(ok.send([], { dedupeKey: 'k', dedupeTtl: 0 }), (e) => e instanceof RangeError && /`dedupeTtl`: must be positive/.test(e.message));
  await assert.rejects(ok.send([], { dedupeTtl: 1000 }), (e) => e instanceof RangeError && /`dedupeTtl`: needs a `dedupeKey`/.test(e.message));
  await assert.rejects(ok.send([], { concurrencyKey: '' }), (e) => e instanceof RangeError && /`concurrencyKey`/.test(e.message));
  await assert.rejects(ok.send([], { dedupeKey: 3 }), (e) => e instanceof TypeError && /"dedupeKey"/.test(e.message));
  // The positive control: the same options, valid, are accepted.
  const h = await ok.send([], { dedupeKey: 'k', dedupeTtl: 1000, concurrencyKey: 'c' });
  assert.ok(h.id);
});
