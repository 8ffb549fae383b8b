// 02-canvas: a chain, a group and a chord.
//
// A chain passes each result on as the next link's first argument; a group
// answers its parts' results in order; a chord hands the parts' results to a
// callback. On a virtual clock, so the output is the same on every run.
//
//     node examples/02-canvas.mjs
import { App, chain, chord, group, testing } from 'headway';

const app = new App({ clock: new testing.VirtualClock(new Date('2026-01-01T00:00:00Z')) });

const add = app.task('add', ([x, y]) => x + y);
const mul = app.task('mul', ([x, y]) => x * y);
const total = app.task('total', async ([xs]) => xs.reduce((a, b) => a + b, 0));

const show = (v) => (Array.isArray(v) ? `[${v.join(', ')}]` : String(v));
const range = (n) => [...Array(n).keys()];

const worker = app.worker({ concurrency: 4 });
const running = worker.run();

// (1 + 2) -> + 3 -> * 10
const c = await chain(add.sig([1, 2]), add.sig([3]), mul.sig([10])).send();
console.log('chain  add(1, 2) | add(3) | mul(10)  =', show(await c.get(10_000)));
const p = await chain(add.sig([2, 2]), mul.sig([5])).send();
console.log('pipe   add(2, 2) | mul(5)            =', show(await p.get(10_000)));
const g = await group(range(5).map((i) => add.sig([i, i]))).send();
console.log('group  add(i, i) for i in 0..4       =', show(await g.get(10_000)));
const d = await chord(range(5).map((i) => add.sig([i, i])), total.sig()).send();
console.log('chord  total(add(i, i) for i in 0..4) =', show(await d.get(10_000)));

await worker.stop();
await running;
