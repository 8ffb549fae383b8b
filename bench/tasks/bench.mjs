// Memory-broker throughput, send → settled, with a JS no-op body.
//
//     node bench/tasks/bench.mjs [N]
//
// For each body kind (sync, async) and send style (one task.send() per run,
// or one group of N signatures) it reports, as bench/tasks/bench.py does:
//
// - publish: sends per second, nothing consuming;
// - run: from worker.run() until the worker has settled all N (claim, ack,
//   call the body on the JS thread through the core's HostQueue, store the
//   result);
// - send→settled: the whole path, first send to last settle, with the worker
//   running while the sends happen (what a service sees).
//
// Calls cross into JS in batches: one bell wake-up drains everything settled
// and then takes up to 1024 calls per native call, answering the previous
// batch in the same call. The per-thread CPU split (`tokio` = the core's
// threads, `js` = the event-loop thread, `other` = V8's and libuv's helpers)
// shows where the time goes.
import { readFileSync, readdirSync } from 'node:fs';

import { App, group, version } from 'headway';

const N = Number(process.argv[2] ?? 100_000);
const CONCURRENCY = Number(process.env.CONCURRENCY ?? 128);
const PREFETCH = Number(process.env.PREFETCH ?? 1024);
const TICK = 1 / 100; // seconds per clock tick (USER_HZ = 100)

function cpu() {
  const out = { tokio: 0, js: 0, other: 0 };
  for (const tid of readdirSync('/proc/self/task')) {
    let comm;
    let stat;
    try {
      comm = readFileSync(`/proc/self/task/${tid}/comm`, 'utf8').trim();
      stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
    } catch {
      continue;
    }
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(f[11]) + Number(f[12]);
    const kind = comm.startsWith('headway') ? 'tokio' : String(tid) === String(process.pid) ? 'js' : 'other';
    out[kind] += ticks;
  }
  return out;
}

function split(a, b, n) {
  const us = (k) => (((b[k] - a[k]) * TICK * 1e6) / n).toFixed(1);
  return `CPU per task: tokio ${us('tokio')} µs, js ${us('js')} µs, other ${us('other')} µs`;
}

const settled = (w, n) =>
  new Promise((resolve) => {
    const poll = () => (w.settled >= n ? resolve() : setTimeout(poll, 1));
    poll();
  });

function makeApp(kind) {
  const app = new App();
  const task = kind === 'sync' ? app.task('noop', () => null) : app.task('noop', async () => null);
  return { app, task };
}

async function publish(task, send, n) {
  if (send === 'send') {
    const sends = new Array(n);
    for (let i = 0; i < n; i++) sends[i] = task.send([i]);
    await Promise.all(sends);
  } else {
    const sigs = new Array(n);
    for (let i = 0; i < n; i++) sigs[i] = task.sig([i]);
    await group(sigs).send();
  }
}

const rate = (n, ms) => Math.round((n / ms) * 1000).toLocaleString('en').padStart(9);

async function run(kind, send, n) {
  // Publish, then run.
  let { app, task } = makeApp(kind);
  let t0 = performance.now();
  await publish(task, send, n);
  const published = performance.now() - t0;
  let w = app.worker({ concurrency: CONCURRENCY, prefetch: PREFETCH });
  const c0 = cpu();
  t0 = performance.now();
  let running = w.run();
  await settled(w, n);
  const ran = performance.now() - t0;
  const c1 = cpu();
  await w.stop({ grace: 1000 });
  await running;
  // Overlapped: the worker runs while the sends happen.
  ({ app, task } = makeApp(kind));
  w = app.worker({ concurrency: CONCURRENCY, prefetch: PREFETCH });
  running = w.run();
  t0 = performance.now();
  await publish(task, send, n);
  await settled(w, n);
  const total = performance.now() - t0;
  await w.stop({ grace: 1000 });
  await running;
  console.log(
    `node ${kind.padEnd(5)} no-op, ${send.padEnd(5)}: publish ${rate(n, published)}/s, run ${rate(n, ran)}/s, ` +
      `send→settled ${rate(n, total)}/s; run ${split(c0, c1, n)}`,
  );
}

console.log(`headway ${version()}, memory broker, N ${N}, concurrency ${CONCURRENCY}, prefetch ${PREFETCH}`);
for (const kind of ['sync', 'async']) {
  for (const send of ['send', 'group']) await run(kind, send, N);
}
