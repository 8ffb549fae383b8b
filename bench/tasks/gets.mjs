// Memory broker: a drain while every run's get() is already pending.
//
//     node bench/tasks/gets.mjs [N ...]
//
// Sends N no-op runs, calls get() on every handle, then starts a worker at
// its defaults and times until every get() has answered (each answer
// checked). It measures how a store reaches the waiters of its run: when
// every wait shared one notify, each store woke all N pending gets.
import { App } from 'headway';

for (const n of process.argv.slice(2).map(Number).concat(process.argv.length > 2 ? [] : [2000, 10000, 50000])) {
  const app = new App();
  const task = app.task('noop', ([i]) => i);
  const handles = [];
  for (let i = 0; i < n; i++) handles.push(await task.send([i]));
  const w = app.worker({});
  const t0 = performance.now();
  const gets = Promise.all(handles.map((h) => h.get(600_000)));
  const running = w.run();
  const values = await gets;
  const s = (performance.now() - t0) / 1000;
  if (values.length !== n || values.some((v, i) => v !== i)) throw new Error('a get answered the wrong value');
  console.log(`${n} gets pending: ${Math.round(n / s)}/s`);
  w.stop();
  await running;
}
