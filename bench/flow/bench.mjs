// headway's flow benchmark, Node side: per-call ns of Bucket.take,
// Window.take, Backoff.delay, a pool take+give (and Pooled acquire+release)
// and a retry-wrapped successful call, side by side in one run with the
// peers a Node user would pick instead, and with the napi floor (an empty
// native call with the same two number arguments).
//
//   cd bench/flow && npm install && node bench.mjs      (or `npm run bench` at the root)
//
// Every figure is the median of ROUNDS timed runs after a warm-up. Sync
// operations run in a tight loop; async ones are awaited one after another,
// so each figure includes the promise machinery a caller pays for.
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';

import { ExponentialBackoff, fullJitterGenerator, handleAll, retry as cockatielRetry } from 'cockatiel';
import genericPool from 'generic-pool';
import { RateLimiter, TokenBucket } from 'limiter';
import pRetry from 'p-retry';

const require = createRequire(import.meta.url);
const headway = require('../../bindings-node/index.js');
const { Backoff, Bucket, Limits, Pool, Pooled, Window, retry } = headway;

const ROUNDS = Number(process.env.ROUNDS ?? 7);
const SYNC_N = Number(process.env.SYNC_N ?? 2_000_000);
const ASYNC_N = Number(process.env.ASYNC_N ?? 200_000);

let sink = 0; // every result lands here so nothing is optimised away

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[s.length >> 1];
}

function timeSync(body, n = SYNC_N) {
  body(Math.min(n, 200_000)); // warm-up: let the JIT settle
  const runs = [];
  for (let r = 0; r < ROUNDS; r++) {
    const t0 = performance.now();
    body(n);
    runs.push(((performance.now() - t0) * 1e6) / n);
  }
  return median(runs);
}

async function timeAsync(body, n = ASYNC_N) {
  await body(Math.min(n, 20_000));
  const runs = [];
  for (let r = 0; r < ROUNDS; r++) {
    const t0 = performance.now();
    await body(n);
    runs.push(((performance.now() - t0) * 1e6) / n);
  }
  return median(runs);
}

// ---------------------------------------------------------------- peers written by hand

/** The token bucket anyone writes in ten lines: what the JIT inlines. */
class JsBucket {
  constructor(rate, burst) {
    this.perMs = rate / 1000;
    this.burst = burst;
    this.tokens = burst;
    this.at = 0;
  }
  take(now, n) {
    if (now > this.at) {
      this.tokens = Math.min(this.burst, this.tokens + (now - this.at) * this.perMs);
      this.at = now;
    }
    if (this.tokens >= n) {
      this.tokens -= n;
      return true;
    }
    return false;
  }
}

/** An exact sliding window over a ring of stamps, by hand. */
class JsWindow {
  constructor(allow, span) {
    this.allow = allow;
    this.span = span;
    this.ring = new Float64Array(Math.min(allow, 1 << 16));
    this.head = 0;
    this.len = 0;
  }
  take(now) {
    const h = now - this.span;
    while (this.len > 0 && this.ring[this.head] <= h) {
      this.head = (this.head + 1) % this.ring.length;
      this.len--;
    }
    if (this.len >= this.allow || this.len === this.ring.length) return false;
    this.ring[(this.head + this.len) % this.ring.length] = now;
    this.len++;
    return true;
  }
}

// ---------------------------------------------------------------- the groups

const groups = [];

function group(title, headwayRow, rows, note) {
  groups.push({ title, headwayRow, rows, note });
}

const floor = headway._noop;
const napiNoop = headway._noopNapi;

// Bucket.take ------------------------------------------------------------
{
  const rows = [];
  rows.push([
    'napi floor: _noop(now, 1), an empty bound native fn',
    timeSync((n) => {
      for (let i = 0; i < n; i++) sink += floor(i * 1e-3, 1) ? 1 : 0;
    }),
  ]);
  rows.push([
    '_noopNapi(now, 1): the same through #[napi] glue',
    timeSync((n) => {
      for (let i = 0; i < n; i++) sink += napiNoop(i * 1e-3, 1) ? 1 : 0;
    }),
  ]);
  const b = new Bucket(1e12);
  rows.push([
    'headway Bucket.take(now, 1)',
    timeSync((n) => {
      for (let i = 0; i < n; i++) sink += b.take(i * 1e-3, 1) ? 1 : 0;
    }),
  ]);
  const b2 = new Bucket(1e12);
  rows.push([
    'headway Bucket.take() — reads performance.now()',
    timeSync((n) => {
      for (let i = 0; i < n; i++) sink += b2.take() ? 1 : 0;
    }),
  ]);
  const tb = new TokenBucket({ bucketSize: 1e12, tokensPerInterval: 1e12, interval: 'second' });
  rows.push([
    'limiter TokenBucket.tryRemoveTokens(1) — reads its clock',
    timeSync((n) => {
      for (let i = 0; i < n; i++) sink += tb.tryRemoveTokens(1) ? 1 : 0;
    }),
  ]);
  const jb = new JsBucket(1e12, 1e12);
  rows.push([
    'hand-rolled JS bucket take(now, 1)',
    timeSync((n) => {
      for (let i = 0; i < n; i++) sink += jb.take(i * 1e-3, 1) ? 1 : 0;
    }),
  ]);
  group('Bucket.take', 2, rows, 'target: headway Bucket.take(now, 1) within 1.2× of the napi floor');
}

// Window.take ------------------------------------------------------------
{
  const rows = [];
  rows.push([
    'napi floor: _noop(now, 1), an empty bound native fn',
    timeSync((n) => {
      for (let i = 0; i < n; i++) sink += floor(i * 1e-3, 1) ? 1 : 0;
    }),
  ]);
  // About a thousand stamps inside the window at any time: a take drops one
  // and keeps one, the steady state of a busy quota.
  let t = 0;
  const w = new Window(1e6, 1);
  rows.push([
    'headway Window.take(now)',
    timeSync((n) => {
      for (let i = 0; i < n; i++) sink += w.take((t += 1e-3)) ? 1 : 0;
    }),
  ]);
  const rl = new RateLimiter({ tokensPerInterval: 1e12, interval: 'second' });
  rows.push([
    'limiter RateLimiter.tryRemoveTokens(1) — approximate window, reads its clock',
    timeSync((n) => {
      for (let i = 0; i < n; i++) sink += rl.tryRemoveTokens(1) ? 1 : 0;
    }),
  ]);
  let u = 0;
  const jw = new JsWindow(1e6, 1);
  rows.push([
    'hand-rolled JS exact window take(now)',
    timeSync((n) => {
      for (let i = 0; i < n; i++) sink += jw.take((u += 1e-3)) ? 1 : 0;
    }),
  ]);
  group('Window.take', 1, rows);
}

// Backoff.delay ----------------------------------------------------------
{
  const rows = [];
  const b = new Backoff();
  rows.push([
    'headway Backoff.delay(retry, r, 0)',
    timeSync((n) => {
      for (let i = 0; i < n; i++) sink += b.delay((i & 3) + 1, 0.5, 0);
    }),
  ]);
  rows.push([
    'headway Backoff.delay(retry) — draws Math.random()',
    timeSync((n) => {
      for (let i = 0; i < n; i++) sink += b.delay((i & 3) + 1);
    }),
  ]);
  const cb = new ExponentialBackoff({ generator: fullJitterGenerator, initialDelay: 100, maxDelay: 1000 });
  rows.push([
    'cockatiel ExponentialBackoff(fullJitter).next().duration',
    timeSync((n) => {
      for (let i = 0; i < n; i++) sink += cb.next(undefined).duration;
    }),
  ]);
  rows.push([
    'hand-rolled JS full jitter',
    timeSync((n) => {
      for (let i = 0; i < n; i++) sink += Math.min(1000, 100 * 2 ** (i & 3)) * Math.random();
    }),
  ]);
  group('Backoff.delay', 0, rows);
}

// Pool take+give ---------------------------------------------------------
{
  const rows = [];
  const p = new Pool({ limits: new Limits({ size: 10 }) });
  const conn = { id: 1 };
  p.take(0);
  p.made(conn, 0);
  p.give(conn, 0);
  rows.push([
    'headway Pool take(now)+give(item, now) — sync bookkeeping',
    timeSync((n) => {
      for (let i = 0; i < n; i++) {
        const t = p.take(i * 1e-3, 0.5);
        sink += p.give(t.item, i * 1e-3) ? 1 : 0;
      }
    }),
  ]);
  rows.push([
    'headway Pool take()+give(item) — reads performance.now() twice',
    timeSync((n) => {
      for (let i = 0; i < n; i++) {
        const t = p.take();
        sink += p.give(t.item) ? 1 : 0;
      }
    }),
  ]);
  const pooled = new Pooled({ open: async () => ({ id: 2 }), close: () => {}, evictEvery: 0 });
  rows.push([
    'headway Pooled await acquire() + release()',
    await timeAsync(async (n) => {
      for (let i = 0; i < n; i++) {
        const c = await pooled.acquire();
        pooled.release(c);
      }
    }),
  ]);
  rows.push([
    'headway Pooled await use(fn)',
    await timeAsync(async (n) => {
      for (let i = 0; i < n; i++) sink += await pooled.use((c) => c.id);
    }),
  ]);
  const gp = genericPool.createPool(
    { create: async () => ({ id: 3 }), destroy: async () => {} },
    { max: 10, min: 0 },
  );
  rows.push([
    'generic-pool await acquire() + release()',
    await timeAsync(async (n) => {
      for (let i = 0; i < n; i++) {
        const c = await gp.acquire();
        await gp.release(c);
      }
    }),
  ]);
  rows.push([
    'generic-pool await use(fn)',
    await timeAsync(async (n) => {
      for (let i = 0; i < n; i++) sink += await gp.use(async (c) => c.id);
    }),
  ]);
  await pooled.close();
  await gp.drain();
  await gp.clear();
  group('pool acquire+release', 0, rows, 'target: headway ≤ ⅓ of generic-pool (the headway rows divided by the generic-pool acquire+release row)');
}

// retry, success on the first try -----------------------------------------
{
  const rows = [];
  const fn = async () => 1;
  rows.push([
    'bare await fn() — no retry at all',
    await timeAsync(async (n) => {
      for (let i = 0; i < n; i++) sink += await fn();
    }),
  ]);
  rows.push([
    'headway await retry(fn)',
    await timeAsync(async (n) => {
      for (let i = 0; i < n; i++) sink += await retry(fn);
    }),
  ]);
  const backoff = new Backoff({ attempts: 5 });
  rows.push([
    'headway await retry(fn, { backoff })',
    await timeAsync(async (n) => {
      for (let i = 0; i < n; i++) sink += await retry(fn, { backoff });
    }),
  ]);
  const policy = cockatielRetry(handleAll, { maxAttempts: 3, backoff: new ExponentialBackoff() });
  rows.push([
    'cockatiel await retry(handleAll).execute(fn)',
    await timeAsync(async (n) => {
      for (let i = 0; i < n; i++) sink += await policy.execute(fn);
    }),
  ]);
  rows.push([
    'p-retry await pRetry(fn, { retries: 2 })',
    await timeAsync(async (n) => {
      for (let i = 0; i < n; i++) sink += await pRetry(fn, { retries: 2 });
    }),
  ]);
  group('retry, success on the first try', 1, rows, 'target: headway no slower than cockatiel (the success path never enters Rust)');
}

// ---------------------------------------------------------------- report

const fmt = (x) => (x >= 100 ? x.toFixed(0) : x.toFixed(1));

console.log(`# headway flow benchmark (Node ${process.version}, ${process.arch}, median of ${ROUNDS} runs)`);
for (const g of groups) {
  const base = g.rows[g.headwayRow][1];
  console.log(`\n## ${g.title}\n`);
  console.log(`| implementation | ns/call | × ${g.rows[g.headwayRow][0].split(' —')[0]} |`);
  console.log('|---|---:|---:|');
  for (const [name, ns] of g.rows) console.log(`| ${name} | ${fmt(ns)} | ${(ns / base).toFixed(2)} |`);
  if (g.note) console.log(`\n${g.note}`);
}

const find = (title, prefix) => groups.find((g) => g.title === title).rows.find(([n]) => n.startsWith(prefix))[1];
const bucketRatio = find('Bucket.take', 'headway Bucket.take(now, 1)') / find('Bucket.take', 'napi floor');
const poolSync = find('pool acquire+release', 'headway Pool') / find('pool acquire+release', 'generic-pool await acquire');
const poolAsync = find('pool acquire+release', 'headway Pooled await acquire') / find('pool acquire+release', 'generic-pool await acquire');
const retryRatio = find('retry, success on the first try', 'headway await retry(fn)') / find('retry, success on the first try', 'cockatiel');
console.log('\n## targets\n');
console.log('| target | reached | ok |');
console.log('|---|---:|:---:|');
console.log(`| Bucket.take(now, 1) ≤ 1.2× napi floor | ${bucketRatio.toFixed(2)}× | ${bucketRatio <= 1.2 ? 'yes' : 'no'} |`);
console.log(`| retry success ≤ 1× cockatiel | ${retryRatio.toFixed(2)}× | ${retryRatio <= 1 ? 'yes' : 'no'} |`);
console.log(`| Pool take+give ≤ ⅓ generic-pool acquire+release | ${poolSync.toFixed(3)}× | ${poolSync <= 1 / 3 ? 'yes' : 'no'} |`);
console.log(`| Pooled acquire+release ≤ ⅓ generic-pool acquire+release | ${poolAsync.toFixed(3)}× | ${poolAsync <= 1 / 3 ? 'yes' : 'no'} |`);
if (sink === 42) console.log(''); // keep sink alive
