// Where a Node worker's CPU goes in a Redis drain, thread by thread.
//
//     node bench/tasks/drain_threads.mjs URL N
//
// Sends N no-op runs, then drains them with a worker at headway's defaults
// and prints one JSON line: the drain's rate; each thread's CPU per task
// (µs, user + system, from /proc/self/task/*/stat, summed by thread name:
// `node` is the event loop and V8's helpers, `headway` the core's tokio
// runtime) and its voluntary context switches per task; how many batches
// the event loop took (`swaps`) for how many calls; and the wall time per
// task the event loop spent inside the native `swap` (answering a batch,
// taking the next, and spinning for it when none waits). A profiling aid,
// not a benchmark row: it wraps an internal native method to count.
// drain_threads.py is the same for a Python worker.
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { App, RedisBroker } = require('../../bindings-node/index.js');
const addon = require('../../bindings-node/addon.js');

const [url, nArg] = process.argv.slice(2);
const N = Number(nArg);
if (!url || !(N > 0)) throw new Error('usage: node drain_threads.mjs URL N');

function threads() {
  const out = {};
  for (const t of readdirSync('/proc/self/task')) {
    try {
      const stat = readFileSync(`/proc/self/task/${t}/stat`, 'utf8');
      const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const status = readFileSync(`/proc/self/task/${t}/status`, 'utf8');
      const switches = Number(/voluntary_ctxt_switches:\s+(\d+)/.exec(status)[1]);
      out[t] = [name, Number(f[11]) + Number(f[12]), switches];
    } catch {
      // The thread ended meanwhile.
    }
  }
  return out;
}

function perTask(a, b) {
  const us = {};
  const switches = {};
  for (const [t, [name, ticks, sw]] of Object.entries(b)) {
    us[name] = (us[name] ?? 0) + ticks - (a[t]?.[1] ?? 0);
    switches[name] = (switches[name] ?? 0) + sw - (a[t]?.[2] ?? 0);
  }
  for (const name of Object.keys(us)) {
    us[name] = +((us[name] * 1e4) / N).toFixed(2); // 100 ticks a second
    switches[name] = +(switches[name] / N).toFixed(3);
  }
  return { us, switches };
}

let swaps = 0;
let calls = 0;
let inSwap = 0;
const swap = addon.NativeHost.prototype.swap;
addon.NativeHost.prototype.swap = function (ok, failed, max) {
  swaps++;
  const t0 = performance.now();
  const text = swap.call(this, ok, failed, max);
  inSwap += performance.now() - t0;
  if (text !== null) calls += JSON.parse(text).length;
  return text;
};

const app = new App({ broker: new RedisBroker(url) });
const task = app.task('bench.noop', () => 1, { queue: 'default' });
const sends = new Array(N);
for (let i = 0; i < N; i++) sends[i] = task.send([i]);
await Promise.all(sends);

const w = app.worker({ queues: ['default'] });
[swaps, calls, inSwap] = [0, 0, 0];
const before = threads();
const t0 = performance.now();
const running = w.run();
while (w.settled < N) await new Promise((r) => setTimeout(r, 1));
const seconds = (performance.now() - t0) / 1000;
const after = threads();
console.log(
  JSON.stringify({
    drain: Math.round(N / seconds),
    threads: perTask(before, after),
    swaps,
    calls,
    in_swap_us_per_task: +((inSwap * 1000) / N).toFixed(2),
  }),
);
await w.stop({ grace: 5000 });
await running;
process.exit(0);
