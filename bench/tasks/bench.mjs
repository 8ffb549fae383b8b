// Memory-broker throughput, send → settled, with a JS no-op body.
//
//     node bench/tasks/bench.mjs [N]
//
// For each body kind (sync, async) it publishes N runs — one task.send()
// each, and as one group — starts a worker, and times the whole path until
// the worker has settled all N: publish, claim, ack, call the body on the JS
// thread through the core's HostQueue, store the result. Calls cross into JS
// in batches: one bell wake-up drains up to 1024 calls per native take(), and
// each batch is answered with one native finish(). Mirrors bench/tasks/bench.py.
import { App, group, version } from 'headway';

const N = Number(process.argv[2] ?? 100_000);
const CONCURRENCY = 1024;
const PREFETCH = 4096;

async function waitSettled(w, n) {
  while (w.settled < n) await new Promise((r) => setImmediate(r));
}

async function run(kind, send, n) {
  const app = new App();
  const task =
    kind === 'sync'
      ? app.task('noop', () => null)
      : app.task('noop', async () => null);
  const start = performance.now();
  if (send === 'send') {
    const sends = new Array(n);
    for (let i = 0; i < n; i++) sends[i] = task.send([i]);
    await Promise.all(sends);
  } else {
    const sigs = new Array(n);
    for (let i = 0; i < n; i++) sigs[i] = task.sig([i]);
    await group(sigs).send();
  }
  const published = performance.now() - start;
  const w = app.worker({ concurrency: CONCURRENCY, prefetch: PREFETCH });
  const running = w.run();
  await waitSettled(w, n);
  const total = performance.now() - start;
  await w.stop({ grace: 1000 });
  await running;
  const rate = (n / total) * 1000;
  console.log(
    `node ${kind.padEnd(5)} no-op, ${send.padEnd(5)} send: ${n} tasks, publish ${Math.round((n / published) * 1000).toLocaleString('en').padStart(9)}/s, ` +
      `send→settled ${Math.round(rate).toLocaleString('en').padStart(9)} tasks/s`,
  );
  return rate;
}

console.log(`headway ${version()}, memory broker, concurrency ${CONCURRENCY}, prefetch ${PREFETCH}`);
for (const kind of ['sync', 'async']) {
  for (const send of ['send', 'group']) await run(kind, send, N);
}
