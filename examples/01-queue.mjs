// 01-queue: a task from send to answer, with one retry in between.
//
// The app runs on a virtual clock: the worker sleeps on it, so the retry's
// 30-second backoff passes at once, and the output is the same on every run.
//
//     node examples/01-queue.mjs
import { App, Fixed, testing } from 'headway';

const clock = new testing.VirtualClock(new Date('2026-01-01T00:00:00Z'));
const app = new App({ clock });
const hms = (d) => d.toISOString().slice(11, 19);

const greet = app.task(
  'greet',
  ([name], ctx) => {
    console.log(`${hms(ctx.now)}  greet('${name}') attempt ${ctx.attempt}`);
    if (ctx.attempt === 1) {
      const err = new Error('the greeting service is warming up');
      err.name = 'ConnectionError';
      throw err;
    }
    return `hello ${name}, attempt ${ctx.attempt}`;
  },
  { retries: 2, backoff: Fixed(30_000) },
);

const worker = app.worker({ concurrency: 4 });
const running = worker.run();
console.log(`${hms(clock.date())}  send greet('ada')`);
const handle = await greet.send(['ada']);
const answer = await handle.get(10_000);
console.log(`${hms(clock.date())}  answer: '${answer}'`);
console.log(`state: ${await handle.state()}`);
await worker.stop();
await running;
