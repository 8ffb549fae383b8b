// The package loads both ways, with one state; panics become Errors.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

import * as esm from 'headway';
import headway, { Pool } from 'headway';

const require = createRequire(import.meta.url);

const FLOW = ['Backoff', 'Breaker', 'Bucket', 'Gate', 'Limits', 'Pool', 'Pooled', 'Ward', 'Window', 'pick', 'retry', 'version'];
// The limits shared through Redis (bindings-node/lib/limits.js).
const SHARED = ['SharedBucket', 'SharedGate', 'SharedWindow'];
// The task queue (bindings-node/lib/tasks.js).
const TASKS = [
  'App', 'At', 'Beat', 'Context', 'Cron', 'Every', 'Exponential', 'Fixed', 'Handle', 'Ignore', 'RedisBroker', 'Reject', 'Scheduler',
  'Signature', 'SoftTimeLimitExceeded', 'Task', 'TaskRetry', 'Worker', 'chain', 'chord', 'group', 'schedule', 'testing',
];
// The admin interface (bindings-node/lib/admin.js).
const ADMIN = ['admin'];
const EXPORTS = [...FLOW, ...SHARED, ...TASKS, ...ADMIN].sort();

test("require('headway') and import agree, and export exactly the API", () => {
  const cjs = require('headway');
  assert.deepEqual(Object.keys(cjs).sort(), EXPORTS);
  assert.deepEqual(Object.keys(esm).filter((k) => k !== 'default').sort(), EXPORTS);
  assert.equal(cjs, headway);
  assert.equal(cjs.Pool, Pool);
  for (const k of EXPORTS) assert.equal(esm[k], cjs[k], k);
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
  assert.equal(cjs.version(), pkg.version);
});

test('index.d.ts declares every export', () => {
  const dts = readFileSync(new URL('../bindings-node/index.d.ts', import.meta.url), 'utf8');
  for (const k of [...FLOW, ...SHARED, ...TASKS]) {
    assert.match(dts, new RegExp(`export declare (class|function|const) ${k}\\b`), k);
  }
  for (const k of ADMIN) assert.match(dts, new RegExp(`export \\{[^}]*\\b${k}\\b[^}]*\\} from './admin'`), k);
});

test('a Rust panic in a #[napi] function is a thrown Error, and the process lives on', () => {
  assert.throws(() => headway._panic(), (err) => {
    assert.ok(err instanceof Error);
    assert.match(err.message, /deliberate panic/);
    return true;
  });
  assert.equal(new Pool().take(0).kind, 'make');
});

test('a Rust panic in a raw (hot-path) callback is a thrown Error too', () => {
  assert.throws(() => headway._panicRaw(), (err) => {
    assert.ok(err instanceof Error);
    assert.match(err.message, /deliberate panic in a raw callback/);
    return true;
  });
  assert.throws(() => headway._panicRaw(), /deliberate/); // and again: nothing was poisoned
  assert.equal(new headway.Bucket(1).take(0), true);
});

test('the native functions refuse foreign handles and forged ids', () => {
  const f = headway._flow;
  const owner = {};
  assert.throws(() => f.poolNew(owner, {}, undefined), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE', message: /"limits"/ });
  const limits = f.limitsNew(undefined, undefined, undefined, undefined);
  const breaker = f.breakerNew(undefined, undefined);
  // A breaker's handle where a ward's is wanted: the external's type is checked.
  assert.throws(() => f.poolNew(owner, limits.handle, breaker.handle), { name: 'TypeError', message: /"ward"/ });
  assert.throws(() => f.wardNew(limits.handle, undefined), { name: 'TypeError', message: /"breaker"/ });
  assert.throws(() => f.wardNew(undefined, 1e6), { name: 'TypeError', message: /"backoff"/ });
  assert.throws(() => f.bucketNew(42, 1), { name: 'TypeError', message: /"owner"/ });
  // An id that names no live object is refused, never read.
  assert.throws(() => f.bucketTake(1e6, 0, 1), { name: 'TypeError', code: 'ERR_INVALID_THIS' });
  assert.throws(() => f.poolTake(-1, 0, 0.5), { name: 'TypeError', code: 'ERR_INVALID_THIS' });
  assert.throws(() => f.pick([1e6], 0, 0, 0), { name: 'TypeError', message: /"pools"/ });
  const { id } = f.bucketNew(owner, 1);
  assert.throws(() => f.bucketTake(id, 'x', 1), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE', message: /"now"/ });
  assert.equal(f.bucketTake(id, 0, 1), true);
});

test('finalizers free the native state of collected objects', async () => {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc');
  const alive = headway._alive;
  const settle = async () => {
    for (let i = 0; i < 5; i++) {
      gc();
      await new Promise((r) => setImmediate(r));
    }
  };
  await settle();
  const before = alive();
  let kept = [];
  for (let i = 0; i < 200; i++) {
    const p = new Pool();
    p.take(0);
    p.made({ i }, 0);
    kept.push(p, new headway.Bucket(10), new headway.Window(1, 1000), new headway.Gate(1), new headway.Backoff());
  }
  assert.equal(alive() - before, 200 * 5);
  await settle();
  assert.equal(alive() - before, 200 * 5, 'reachable objects keep their state');
  kept = null;
  await settle();
  assert.ok(alive() - before < 50, `still alive: ${alive() - before}`);
});
