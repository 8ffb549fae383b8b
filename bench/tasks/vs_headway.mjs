// headway (Node) in the side-by-side benchmark (run by compare.sh; prints one
// JSON line). The same steps as vs_headway.py:
//
//     node vs_headway.mjs URL N RTT [--layout headway|celery]
//
// --layout headway (new RedisBroker(url)), no worker running:
// 1. enqueue: N task.send([i]) from this one event loop, all in flight at once
//    (each resolves once Redis has the message), then N more as group sends
//    of 1000 signatures (flushed away afterwards);
// 2. drain: a worker starts on the N from step 1; the clock runs from run()
//    until it has settled all N (results stored);
// 3. round trip: RTT sequential `await (await task.send([i])).get()`.
// --layout celery (RedisBroker.celery(url)): Celery's queue "celery" (headway's
// 'default' on that layout) already holds N
// bench.noop messages a real Celery producer sent; step 2 drains them, step
// 3 round-trips on that layout, step 1 runs last with the worker stopped.
import { readFileSync } from 'node:fs';

import { App, RedisBroker, group } from 'headway';

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
const celery = process.argv.includes('--layout') && process.argv[process.argv.indexOf('--layout') + 1] === 'celery';
const CONCURRENCY = Number(process.env.HEADWAY_BENCH_CONCURRENCY ?? 8);
const PREFETCH = Number(process.env.HEADWAY_BENCH_PREFETCH ?? 512);
const BATCH = 1000;
const deadline = performance.now() + Number(process.env.HEADWAY_BENCH_TIMEOUT ?? 600) * 1000;
// headway's 'default' is Celery's "celery" list on Celery's layout.
const queue = 'default';

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};

function until(cond, what) {
  return new Promise((resolve, reject) => {
    const poll = () => {
      if (cond()) resolve();
      else if (performance.now() > deadline) reject(new Error(`headway-js: timed out waiting for ${what()}`));
      else setTimeout(poll, 1);
    };
    poll();
  });
}

const broker = celery ? RedisBroker.celery(url) : new RedisBroker(url);
const app = new App({ broker });
const task = app.task('bench.noop', () => 1, { queue });

async function enqueue() {
  const t0 = performance.now();
  const sends = new Array(N);
  for (let i = 0; i < N; i++) sends[i] = task.send([i]);
  await Promise.all(sends);
  return (N / (performance.now() - t0)) * 1000;
}

async function bulk() {
  const t0 = performance.now();
  for (let s = 0; s < N; s += BATCH) {
    const sigs = [];
    for (let i = s; i < Math.min(N, s + BATCH); i++) sigs.push(task.sig([i]));
    await group(sigs).send();
  }
  return (N / (performance.now() - t0)) * 1000;
}

const out = {};
if (!celery) {
  out.enqueue = await enqueue();
  out.enqueue_how = 'task.send([i]) x N, all in flight (Promise.all)';
}
const w = app.worker({ queues: [queue], concurrency: CONCURRENCY, prefetch: PREFETCH });
const c0 = cpuNow();
const t0 = performance.now();
const running = w.run();
await until(() => w.settled >= N, () => `the drain (${w.settled}/${N})`);
out.drain = (N / (performance.now() - t0)) * 1000;
out.drain_cpu_us = cpuSplit(c0, cpuNow(), N);
const lat = [];
const ids = [];
for (let i = 0; i < RTT; i++) {
  const s = performance.now();
  const h = await task.send([i]);
  await h.get(30_000);
  lat.push(performance.now() - s);
  ids.push(h.id);
  if (performance.now() > deadline) throw new Error('headway-js: timed out in the round trips');
}
out.p50 = pct(lat, 0.5);
out.p99 = pct(lat, 0.99);
// Where a round trip goes: get() of a result already stored (a fresh handle
// each) is the client's fetch alone.
const fetch = [];
for (const id of ids) {
  const s = performance.now();
  await app.handle(id).get(30_000);
  fetch.push(performance.now() - s);
}
out.get_stored_p50 = pct(fetch, 0.5);
await w.stop({ grace: 5000 });
await running;
if (celery) {
  out.enqueue = await enqueue();
  out.enqueue_how = "task.send([i]) x N, all in flight, headway's producer on Celery's layout";
}
out.enqueue_bulk = await bulk();
out.enqueue_bulk_how = `group of ${BATCH} signatures per send`;
out.settings = `concurrency ${CONCURRENCY}, prefetch ${PREFETCH}`;
console.log(JSON.stringify(out));
