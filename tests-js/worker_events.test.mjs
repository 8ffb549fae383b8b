// A worker's events, BullMQ's names: 'active', 'completed', 'retrying',
// 'failed', with the run as a job; emitted on the worker that ran it.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { App, Fixed } from 'headway';

test('a worker emits active, completed, retrying and failed for its runs', async () => {
  const app = new App();
  app.task('ev.add', ([a, b]) => a + b);
  app.task('ev.bad', async ([x]) => {
    throw new RangeError(`no ${x}`);
  }, { retries: 1, backoff: Fixed(10) });
  const w = app.worker({ concurrency: 1 });
  const seen = [];
  for (const e of ['active', 'completed', 'retrying', 'failed']) {
    w.on(e, (job, value) => seen.push([e, job.name, job.id, job.args, job.attempt, value]));
  }
  const running = w.run();
  try {
    const ok = await app.send('ev.add', [2, 3]);
    assert.equal(await ok.get(10_000), 5);
    const bad = await app.send('ev.bad', [7]);
    await assert.rejects(bad.get(10_000));
    const mine = (id) => seen.filter((s) => s[2] === id).map((s) => s[0]);
    assert.deepEqual(mine(ok.id), ['active', 'completed']);
    assert.deepEqual(mine(bad.id), ['active', 'retrying', 'active', 'failed']);
    const done = seen.find((s) => s[0] === 'completed');
    assert.deepEqual(done.slice(1, 5), ['ev.add', ok.id, [2, 3], 1]);
    assert.equal(done[5], 5);
    const failed = seen.find((s) => s[0] === 'failed');
    assert.ok(failed[5] instanceof RangeError);
    assert.equal(failed[4], 2, 'the second attempt failed for good');
  } finally {
    await w.stop({ grace: 5_000 });
    await running;
  }
});

test("a listener that throws fails no run; a worker without listeners emits nothing", async () => {
  const app = new App();
  app.task('ev.one', () => 1);
  const quiet = app.worker({ concurrency: 1, name: 'quiet' });
  let heard = 0;
  // Listening on another event only: 'completed' has no listener.
  quiet.on('failed', () => heard++);
  const running = quiet.run();
  try {
    const h = await app.send('ev.one', []);
    assert.equal(await h.get(10_000), 1);
  } finally {
    await quiet.stop({ grace: 5_000 });
    await running;
  }
  assert.equal(heard, 0);
  const loud = app.worker({ concurrency: 1, name: 'loud' });
  loud.on('completed', () => {
    heard++;
    throw new Error("a listener's bug");
  });
  const again = loud.run();
  try {
    const h = await app.send('ev.one', []);
    // The positive control: the listener ran, and the run still succeeded.
    assert.equal(await h.get(10_000), 1);
    assert.equal(heard, 1);
  } finally {
    await loud.stop({ grace: 5_000 });
    await again;
  }
});
