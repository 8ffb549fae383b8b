// BullMQ in headway's side-by-side benchmark (run by ../compare.sh; prints
// one JSON line). The same steps as ../vs_headway.mjs, the BullMQ way:
//
//     node vs_bullmq.mjs URL N RTT
//
// 1. enqueue: N queue.add('noop', {i}) from this one event loop, all in
//    flight at once (what a loop of add() calls does), then N more with
//    queue.addBulk of 1000 jobs per call (removed afterwards);
// 2. drain: a Worker (concurrency 8, the default connection options, jobs
//    kept on completion with their return value) on the N from step 1; the
//    clock runs from new Worker() until N 'completed' events, then the
//    queue's completed count must be N (else it exits 1);
// 3. round trip: RTT sequential add() + job.waitUntilFinished(queueEvents).
//    The QueueEvents (a connection of its own, XREAD BLOCK on the events
//    stream) exists for this step only: during the drain nothing but the
//    Worker reads Redis.
import { readFileSync } from 'node:fs';

import { Queue, QueueEvents, Worker } from 'bullmq';

// CPU clock ticks (user + system) redis-server has used so far; 0 if unknown.
function redisTicks() {
  try {
    const stat = readFileSync(`/proc/${process.env.HEADWAY_BENCH_REDIS_PID ?? 0}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(f[11]) + Number(f[12]);
  } catch {
    return 0;
  }
}
const TICK_US = 1e6 / 100; // USER_HZ = 100
const cpuNow = () => {
  const u = process.cpuUsage();
  return { worker: u.user + u.system, redis: redisTicks() * TICK_US };
};
const cpuSplit = (a, b, n) => ({ worker: (b.worker - a.worker) / n, redis: (b.redis - a.redis) / n });

const [url, nArg, rttArg] = process.argv.slice(2);
const N = Number(nArg);
const RTT = Number(rttArg);
const BATCH = 1000;
const deadline = performance.now() + Number(process.env.HEADWAY_BENCH_TIMEOUT ?? 600) * 1000;
const u = new URL(url);
const connection = { host: u.hostname, port: Number(u.port) };
const NAME = 'bench';

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};

const queue = new Queue(NAME, { connection });
await queue.waitUntilReady();

const out = {};
let t0 = performance.now();
const adds = new Array(N);
for (let i = 0; i < N; i++) adds[i] = queue.add('noop', { i });
await Promise.all(adds);
out.enqueue = (N / (performance.now() - t0)) * 1000;
out.enqueue_how = "queue.add('noop', {i}) x N, all in flight (Promise.all)";

let completed = 0;
let failed = 0;
let done;
let limit;
// Resolved by the Worker's own events, no timer polling on its event loop;
// one timer for the deadline.
const drained = new Promise((resolve, reject) => {
  done = resolve;
  limit = setTimeout(
    () => reject(new Error(`bullmq: timed out in the drain (${completed}/${N})`)),
    Math.max(0, deadline - performance.now()),
  );
});
const settle = () => {
  if (completed + failed >= N) done();
};
const c0 = cpuNow();
t0 = performance.now();
const worker = new Worker(NAME, async () => 1, { connection, concurrency: 8 });
worker.on('completed', () => {
  completed++;
  settle();
});
worker.on('failed', () => {
  failed++;
  settle();
});
await drained;
clearTimeout(limit);
out.drain = (N / (performance.now() - t0)) * 1000;
out.drain_cpu_us = cpuSplit(c0, cpuNow(), N);
if (failed) throw new Error(`bullmq: ${failed} jobs failed`);
const stored = await queue.getCompletedCount();
if (stored !== N) throw new Error(`bullmq: ${stored} of ${N} jobs completed after the drain`);
out.verified_success = stored;

const events = new QueueEvents(NAME, { connection });
await events.waitUntilReady();

const lat = [];
for (let i = 0; i < RTT; i++) {
  const s = performance.now();
  const job = await queue.add('noop', { i });
  await job.waitUntilFinished(events, 30_000);
  lat.push(performance.now() - s);
  if (performance.now() > deadline) throw new Error('bullmq: timed out in the round trips');
}
out.p50 = pct(lat, 0.5);
out.p99 = pct(lat, 0.99);
await worker.close();

t0 = performance.now();
for (let s = 0; s < N; s += BATCH) {
  const jobs = [];
  for (let i = s; i < Math.min(N, s + BATCH); i++) jobs.push({ name: 'noop', data: { i } });
  await queue.addBulk(jobs);
}
out.enqueue_bulk = (N / (performance.now() - t0)) * 1000;
out.enqueue_bulk_how = `queue.addBulk of ${BATCH} jobs per call`;
const { createRequire } = await import('node:module');
out.version = createRequire(import.meta.url)('bullmq/package.json').version;
out.settings = 'Worker concurrency 8, default connection, results kept';
await events.close();
await queue.close();
console.log(JSON.stringify(out));
