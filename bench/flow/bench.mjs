// headway's flow benchmark, Node side: per-call ns of Bucket.take,
// Window.take, Backoff.delay, a pool take+give (and Pooled acquire+release)
// and a retry-wrapped successful call, side by side in one run with the
// peers a Node user would pick instead, and with the napi floor (an empty
// native call with the same two number arguments).
//
//   cd bench/flow && npm install && node bench.mjs      (or `npm run bench` at the root)
//
// Every figure is the median of ROUNDS timed runs after a warm-up, the
// bodies of a group interleaved within each round so that a busy machine
// slows them alike. Sync operations run in a tight loop; async ones are
// awaited one after another, so each figure includes the promise machinery a
// caller pays for.
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
const PRETRY_N = 20_000; // p-retry is ~100× slower: fewer calls keep the run short

let sink = 0; // every result lands here so nothing is optimised away

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[s.length >> 1];
}

/**
 * Times every body of a group in the same rounds, interleaved, so that a
 * busy machine slows all of them alike; each figure is a median over rounds.
 * A body is `[name, fn, kind]`: kind 'sync' runs `fn(n)` with n = SYNC_N,
 * 'async' awaits `fn(n)` with n = ASYNC_N ('slow': PRETRY_N).
 */
async function measure(bodies) {
  const count = (kind) => (kind === 'sync' ? SYNC_N : kind === 'slow' ? PRETRY_N : ASYNC_N);
  for (const [, fn, kind] of bodies) await fn(Math.min(count(kind), kind === 'sync' ? 200_000 : 20_000)); // warm-up
  const runs = bodies.map(() => []);
  for (let r = 0; r < ROUNDS; r++) {
    for (let i = 0; i < bodies.length; i++) {
      const [, fn, kind] = bodies[i];
      const n = count(kind);
      const t0 = performance.now();
      await fn(n);
      runs[i].push(((performance.now() - t0) * 1e6) / n);
    }
  }
  return bodies.map(([name], i) => [name, median(runs[i]), Math.min(...runs[i])]);
}

const sync = (name, fn) => [name, fn, 'sync'];
const async_ = (name, fn) => [name, fn, 'async'];

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
const floor3 = headway._noop3;
const napiNoop = headway._noopNapi;

// Bucket.take ------------------------------------------------------------
{
  const b = new Bucket(1e12);
  const b2 = new Bucket(1e12);
  const tb = new TokenBucket({ bucketSize: 1e12, tokensPerInterval: 1e12, interval: 'second' });
  const jb = new JsBucket(1e12, 1e12);
  const many = Array.from({ length: 8 }, () => new Bucket(1e12));
  const rows = await measure([
    sync('napi floor: _noop(now, 1), an empty native fn', (n) => {
      for (let i = 0; i < n; i++) sink += floor(i * 1e-3, 1) ? 1 : 0;
    }),
    sync('_noop3(id, now, 1): the floor plus the instance id a method carries', (n) => {
      for (let i = 0; i < n; i++) sink += floor3(0, i * 1e-3, 1) ? 1 : 0;
    }),
    sync('_noopNapi(now, 1): the same through #[napi] glue', (n) => {
      for (let i = 0; i < n; i++) sink += napiNoop(i * 1e-3, 1) ? 1 : 0;
    }),
    sync('headway Bucket.take(now, 1)', (n) => {
      for (let i = 0; i < n; i++) sink += b.take(i * 1e-3, 1) ? 1 : 0;
    }),
    sync('headway Bucket.take(now, 1) over 8 buckets — one call site, many instances', (n) => {
      for (let i = 0; i < n; i++) sink += many[i & 7].take(i * 1e-3, 1) ? 1 : 0;
    }),
    sync('headway Bucket.take() — reads performance.now()', (n) => {
      for (let i = 0; i < n; i++) sink += b2.take() ? 1 : 0;
    }),
    sync('limiter TokenBucket.tryRemoveTokens(1) — reads its clock', (n) => {
      for (let i = 0; i < n; i++) sink += tb.tryRemoveTokens(1) ? 1 : 0;
    }),
    sync('hand-rolled JS bucket take(now, 1)', (n) => {
      for (let i = 0; i < n; i++) sink += jb.take(i * 1e-3, 1) ? 1 : 0;
    }),
  ]);
  group('Bucket.take', 3, rows, 'target: headway Bucket.take(now, 1) within 1.2× of the napi floor');
}

// Window.take ------------------------------------------------------------
{
  // About a thousand stamps inside the window at any time: a take drops one
  // and keeps one, the steady state of a busy quota.
  let t = 0;
  let u = 0;
  const w = new Window(1e6, 1);
  const rl = new RateLimiter({ tokensPerInterval: 1e12, interval: 'second' });
  const jw = new JsWindow(1e6, 1);
  const rows = await measure([
    sync('napi floor: _noop(now, 1), an empty native fn', (n) => {
      for (let i = 0; i < n; i++) sink += floor(i * 1e-3, 1) ? 1 : 0;
    }),
    sync('headway Window.take(now)', (n) => {
      for (let i = 0; i < n; i++) sink += w.take((t += 1e-3)) ? 1 : 0;
    }),
    sync('limiter RateLimiter.tryRemoveTokens(1) — not exact, reads its clock', (n) => {
      for (let i = 0; i < n; i++) sink += rl.tryRemoveTokens(1) ? 1 : 0;
    }),
    sync('hand-rolled JS exact window take(now)', (n) => {
      for (let i = 0; i < n; i++) sink += jw.take((u += 1e-3)) ? 1 : 0;
    }),
  ]);
  group('Window.take', 1, rows);
}

// Backoff.delay ----------------------------------------------------------
{
  const b = new Backoff();
  const cb = new ExponentialBackoff({ generator: fullJitterGenerator, initialDelay: 100, maxDelay: 1000 });
  const rows = await measure([
    sync('headway Backoff.delay(retry, r, 0)', (n) => {
      for (let i = 0; i < n; i++) sink += b.delay((i & 3) + 1, 0.5, 0);
    }),
    sync('headway Backoff.delay(retry) — draws Math.random()', (n) => {
      for (let i = 0; i < n; i++) sink += b.delay((i & 3) + 1);
    }),
    sync('cockatiel ExponentialBackoff(fullJitter).next().duration', (n) => {
      for (let i = 0; i < n; i++) sink += cb.next(undefined).duration;
    }),
    sync('hand-rolled JS full jitter', (n) => {
      for (let i = 0; i < n; i++) sink += Math.min(1000, 100 * 2 ** (i & 3)) * Math.random();
    }),
  ]);
  group('Backoff.delay', 0, rows);
}

// Pool take+give ---------------------------------------------------------
{
  const p = new Pool({ limits: new Limits({ size: 10 }) });
  const conn = { id: 1 };
  p.take(0);
  p.made(conn, 0);
  p.give(conn, 0);
  const q = new Pool({ limits: new Limits({ size: 10 }) });
  q.take();
  q.made(conn);
  q.give(conn);
  const pooled = new Pooled({ open: async () => ({ id: 2 }), close: () => {}, evictEvery: 0 });
  const gp = genericPool.createPool({ create: async () => ({ id: 3 }), destroy: async () => {} }, { max: 10, min: 0 });
  const rows = await measure([
    sync('headway Pool take(now)+give(item, now) — sync bookkeeping', (n) => {
      for (let i = 0; i < n; i++) {
        const t = p.take(i * 1e-3, 0.5);
        sink += p.give(t.item, i * 1e-3) ? 1 : 0;
      }
    }),
    sync('headway Pool take()+give(item) — reads performance.now() twice', (n) => {
      for (let i = 0; i < n; i++) {
        const t = q.take();
        sink += q.give(t.item) ? 1 : 0;
      }
    }),
    async_('headway Pooled await acquire() + release()', async (n) => {
      for (let i = 0; i < n; i++) {
        const c = await pooled.acquire();
        pooled.release(c);
      }
    }),
    async_('headway Pooled await use(fn)', async (n) => {
      for (let i = 0; i < n; i++) sink += await pooled.use((c) => c.id);
    }),
    async_('generic-pool await acquire() + release()', async (n) => {
      for (let i = 0; i < n; i++) {
        const c = await gp.acquire();
        await gp.release(c);
      }
    }),
    async_('generic-pool await use(fn)', async (n) => {
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
  const fn = async () => 1;
  const backoff = new Backoff({ attempts: 5 });
  const policy = cockatielRetry(handleAll, { maxAttempts: 3, backoff: new ExponentialBackoff() });
  const rows = await measure([
    async_('bare await fn() — no retry at all', async (n) => {
      for (let i = 0; i < n; i++) sink += await fn();
    }),
    async_('headway await retry(fn)', async (n) => {
      for (let i = 0; i < n; i++) sink += await retry(fn);
    }),
    async_('headway await retry(fn, { backoff })', async (n) => {
      for (let i = 0; i < n; i++) sink += await retry(fn, { backoff });
    }),
    async_('cockatiel await retry(handleAll).execute(fn)', async (n) => {
      for (let i = 0; i < n; i++) sink += await policy.execute(fn);
    }),
    ['p-retry await pRetry(fn, { retries: 2 })', async (n) => {
      for (let i = 0; i < n; i++) sink += await pRetry(fn, { retries: 2 });
    }, 'slow'],
  ]);
  group('retry, success on the first try', 1, rows, 'target: headway no slower than cockatiel (the success path never enters Rust)');
}

// ---------------------------------------------------------------- report

const fmt = (x) => (x >= 100 ? x.toFixed(0) : x.toFixed(1));

console.log(`# headway flow benchmark (Node ${process.version}, ${process.arch}, median of ${ROUNDS} runs)`);
for (const g of groups) {
  const base = g.rows[g.headwayRow][1];
  console.log(`\n## ${g.title}\n`);
  console.log(`| implementation | ns/call (median) | best round | × ${g.rows[g.headwayRow][0].split(' —')[0]} |`);
  console.log('|---|---:|---:|---:|');
  for (const [name, ns, best] of g.rows) console.log(`| ${name} | ${fmt(ns)} | ${fmt(best)} | ${(ns / base).toFixed(2)} |`);
  if (g.note) console.log(`\n${g.note}`);
}

const find = (title, prefix, col = 1) => groups.find((g) => g.title === title).rows.find(([n]) => n.startsWith(prefix))[col];
const ratio = (a, b) => [find(...a, 1) / find(...b, 1), find(...a, 2) / find(...b, 2)];
const targets = [
  ['Bucket.take(now, 1) ≤ 1.2× the napi floor', ratio(['Bucket.take', 'headway Bucket.take(now, 1)'], ['Bucket.take', 'napi floor']), 1.2],
  ['(for scale) Bucket.take(now, 1) vs the floor plus the id', ratio(['Bucket.take', 'headway Bucket.take(now, 1)'], ['Bucket.take', '_noop3']), 1.2],
  ['retry success ≤ 1× cockatiel', ratio(['retry, success on the first try', 'headway await retry(fn)'], ['retry, success on the first try', 'cockatiel']), 1],
  ['Pool take+give ≤ ⅓ generic-pool acquire+release', ratio(['pool acquire+release', 'headway Pool take(now)'], ['pool acquire+release', 'generic-pool await acquire']), 1 / 3],
  ['Pooled acquire+release ≤ ⅓ generic-pool acquire+release', ratio(['pool acquire+release', 'headway Pooled await acquire'], ['pool acquire+release', 'generic-pool await acquire']), 1 / 3],
];
console.log('\n## targets\n');
console.log('| target | reached (medians) | reached (best rounds) | met |');
console.log('|---|---:|---:|:---:|');
for (const [name, [med, best], limit] of targets) {
  console.log(`| ${name} | ${med.toFixed(2)}× | ${best.toFixed(2)}× | ${med <= limit ? 'yes' : 'no'} |`);
}
if (sink === 42) console.log(''); // keep sink alive
