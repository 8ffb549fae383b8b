// headway (Node) in the side-by-side benchmark (run by compare.sh; prints one
// JSON line). The same steps as vs_headway.py:
//
//     node vs_headway.mjs URL N RTT [--layout headway|celery] [--tuned] [--ids PATH]
//
// The worker runs at headway's defaults (app.worker({queues}): concurrency 4,
// prefetch concurrency x 4) unless --tuned: then concurrency
// HEADWAY_BENCH_CONCURRENCY (8), prefetch HEADWAY_BENCH_PREFETCH (512), a
// separate, labelled row. After every drain each drained run's state is read
// back; it exits 1 unless all N are SUCCESS.
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
// bench.noop messages a real Celery producer sent (their ids in --ids PATH);
// step 2 drains them, step
// 3 round-trips on that layout, step 1 runs last with the worker stopped.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

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

const { values: opts, positionals } = parseArgs({
  allowPositionals: true,
  options: { layout: { type: 'string', default: 'headway' }, tuned: { type: 'boolean' }, ids: { type: 'string' } },
});
const [url, nArg, rttArg] = positionals;
const N = Number(nArg);
const RTT = Number(rttArg);
const celery = opts.layout === 'celery';
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

let ids = [];
async function enqueue() {
  const t0 = performance.now();
  const sends = new Array(N);
  for (let i = 0; i < N; i++) sends[i] = task.send([i]);
  ids = (await Promise.all(sends)).map((h) => h.id);
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
if (celery) {
  if (!opts.ids) throw new Error("headway-js: --layout celery needs --ids (the Celery filler's ids)");
  ids = readFileSync(opts.ids, 'utf8').split(/\s+/).filter(Boolean);
}
const w = opts.tuned
  ? app.worker({ queues: [queue], concurrency: CONCURRENCY, prefetch: PREFETCH })
  : app.worker({ queues: [queue] });
const c0 = cpuNow();
const t0 = performance.now();
const running = w.run();
await until(() => w.settled >= N, () => `the drain (${w.settled}/${N})`);
out.drain = (N / (performance.now() - t0)) * 1000;
out.drain_cpu_us = cpuSplit(c0, cpuNow(), N);
// Every drained run must have its SUCCESS stored (read back, 256 at a time).
let ok = 0;
for (let i = 0; i < ids.length; i += 256) {
  const states = await Promise.all(ids.slice(i, i + 256).map((id) => app.handle(id).state()));
  ok += states.filter((st) => st === 'SUCCESS').length;
}
if (ok !== N || ids.length !== N) throw new Error(`headway-js: ${ok} of ${N} drained runs are SUCCESS (${ids.length} ids)`);
out.verified_success = ok;
const lat = [];
const rttIds = [];
for (let i = 0; i < RTT; i++) {
  const s = performance.now();
  const h = await task.send([i]);
  await h.get(30_000);
  lat.push(performance.now() - s);
  rttIds.push(h.id);
  if (performance.now() > deadline) throw new Error('headway-js: timed out in the round trips');
}
out.p50 = pct(lat, 0.5);
out.p99 = pct(lat, 0.99);
// Where a round trip goes: get() of a result already stored (a fresh handle
// each) is the client's fetch alone.
const fetch = [];
for (const id of rttIds) {
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
out.settings = `concurrency ${w.concurrency}, prefetch ${w.prefetch}${
  opts.tuned ? ' (tuned)' : " reaching up to 8 × that while runs are short (headway's defaults)"
}`;
console.log(JSON.stringify(out));
