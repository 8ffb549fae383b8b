// SharedBucket, SharedWindow and SharedGate on a redis-server this file
// starts: their answers, that two handles on one key share one limit (and
// two keys do not), leases that end, and the errors on bad arguments — each
// refusal beside the same call made valid. Exactness against the in-process
// limits is core/tests/limit_props.rs's.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:net';

import { Bucket, SharedBucket, SharedGate, SharedWindow } from 'headway';
import { RedisServer } from './fixtures/brokers.mjs';

const skip = RedisServer.missing() ?? false;
let server;
const key = () => `t-${randomUUID()}`;

before(async () => {
  if (!skip) server = await new RedisServer().start();
});
after(() => server?.stop());

async function until(cond, ms = 5000) {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    assert.ok(Date.now() < deadline, 'condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}

test('bucket: takes, refills, and is shared by key', { skip }, async () => {
  const k = key();
  const b = new SharedBucket(server.url, k, 10, { burst: 2 });
  assert.deepEqual([b.rate, b.burst, b.key], [10, 2, `headway:limit:bucket:${k}`]);
  assert.equal(await b.take(), true);
  const other = new SharedBucket(server.url, k, 10, { burst: 2 });
  assert.equal(await other.take(), true);
  assert.equal(await b.take(), false);
  const wait = await b.next();
  assert.ok(wait > 0 && wait <= 100, `${wait}`);
  assert.ok((await b.tokens()) < 1);
  assert.equal(await b.next(3), Infinity);
  // Another key is another bucket: full.
  assert.equal(await new SharedBucket(server.url, key(), 10, { burst: 2 }).take(2), true);
  await b.wait();
  await assert.rejects(b.wait(5), (e) => e instanceof RangeError && /`n`/.test(e.message));
  // Many at once: exactly the burst passes.
  const c = new SharedBucket(server.url, key(), 0.001, { burst: 3 });
  const got = await Promise.all(Array.from({ length: 10 }, () => c.take()));
  assert.equal(got.filter(Boolean).length, 3);
});

test('bucket: the same defaults as the in-process one', { skip }, () => {
  for (const [rate, burst] of [[100, undefined], [0.5, undefined], [5, 0.2]]) {
    assert.equal(new SharedBucket(server.url, key(), rate, { burst }).burst, new Bucket(rate, { burst }).burst);
  }
});

test('window: counts exactly, and room comes back', { skip }, async () => {
  const w = new SharedWindow(server.url, key(), 2, 300);
  assert.deepEqual([w.limit, w.per], [2, 300]);
  assert.equal(await w.take(), true);
  assert.equal(await w.take(), true);
  assert.equal(await w.take(), false);
  assert.equal(await w.left(), 0);
  const wait = await w.next();
  assert.ok(wait > 0 && wait <= 300, `${wait}`);
  await w.wait();
  const zero = new SharedWindow(server.url, key(), 0, 1000);
  assert.equal(await zero.take(), false);
  assert.equal(await zero.next(), Infinity);
  await assert.rejects(zero.wait(), RangeError);
});

test('gate: permits, double release, leases that end', { skip }, async () => {
  const k = key();
  const g = new SharedGate(server.url, k, 1, { lease: 200 });
  assert.deepEqual([g.limit, g.lease], [1, 200]);
  const p = await g.take();
  assert.equal(typeof p, 'string');
  const other = new SharedGate(server.url, k, 1, { lease: 200 });
  assert.equal(await other.take(), null);
  assert.equal(await g.held(), 1);
  assert.equal(await g.release(p), true);
  assert.equal(await g.release(p), false);
  const q = await other.take();
  assert.ok(q);
  assert.equal(await g.renew(q), true);
  // Never released: its lease ends and the room comes back by itself.
  await until(async () => (await g.held()) === 0);
  assert.equal(await g.renew(q), false);
  assert.equal(await g.release(q), false);
  assert.ok(await g.take());
  assert.equal(new SharedGate(server.url, key(), 3).lease, 30_000);
});

test('bad arguments are refused, naming them', { skip }, async () => {
  const url = server.url;
  const cases = [
    [() => new SharedBucket(url, 'k', -1), RangeError, 'rate'],
    [() => new SharedBucket(url, 'k', NaN), RangeError, 'rate'],
    [() => new SharedBucket(url, 'k', 1, { burst: -2 }), RangeError, 'burst'],
    [() => new SharedBucket(url, 'k', '1'), TypeError, 'rate'],
    [() => new SharedBucket(url, '', 1), RangeError, 'key'],
    [() => new SharedBucket('http://h', 'k', 1), RangeError, 'url'],
    [() => new SharedBucket(url, 'k', 1, null), TypeError, 'options'],
    [() => new SharedWindow(url, 'k', -1, 1000), RangeError, 'limit'],
    [() => new SharedWindow(url, 'k', 1.5, 1000), RangeError, 'limit'],
    [() => new SharedWindow(url, 'k', 1, 0), RangeError, 'per'],
    [() => new SharedGate(url, 'k', -1), RangeError, 'n'],
    [() => new SharedGate(url, 'k', 1, { lease: 0 }), RangeError, 'lease'],
    [() => new SharedGate(url, 'k', 1).release(7), TypeError, 'permit'],
  ];
  for (const [fn, type, arg] of cases) {
    assert.throws(fn, (e) => e instanceof type && e.message.includes(arg), `${fn}`);
  }
  await assert.rejects(new SharedBucket(url, 'k', 1).take(-1), (e) => e instanceof RangeError && /`n`/.test(e.message));
  // The positive control: the same calls, valid, are accepted.
  assert.equal(await new SharedBucket(url, key(), 1, { burst: 2 }).take(0), true);
  assert.equal(new SharedWindow(url, 'k', 0, 1000).limit, 0);
  assert.equal(await new SharedGate(url, key(), 0, { lease: 1000 }).take(), null);
});

test('an unreachable Redis rejects with a BROKER connection error', async () => {
  const port = await new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
  const b = new SharedBucket(`redis://127.0.0.1:${port}`, 'k', 1);
  await assert.rejects(b.take(), (e) => e.code === 'BROKER' && e.kind === 'connection');
});
