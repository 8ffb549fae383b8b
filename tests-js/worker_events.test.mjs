// A worker's events, BullMQ's names: 'active', 'completed', 'retrying',
// 'failed', with the run as a job; emitted on the worker that ran it, on
// either pool.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { App, Fixed } from 'headway';

/** Resolves once `check()` is truthy, polling every 20 ms; throws naming `what` after `limit` ms. */
async function until(check, what, limit = 20_000) {
  const deadline = Date.now() + limit;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${limit} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

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

test('on the process pool the parent worker emits the same events, the runs being in children', async () => {
  const { app } = await import('./fixtures/events-app.mjs');
  const module = fileURLToPath(new URL('./fixtures/events-app.mjs', import.meta.url));
  const w = app.worker({ concurrency: 1, pool: 'process', module });
  const seen = [];
  for (const e of ['active', 'completed', 'retrying', 'failed']) {
    w.on(e, (job, value) => seen.push([e, job.name, job.id, job.args, job.attempt, value]));
  }
  const running = w.run();
  try {
    const ok = await app.send('evp.add', [2, 3]);
    assert.equal(await ok.get(20_000), 5);
    const bad = await app.send('evp.bad', [7]);
    await assert.rejects(bad.get(20_000));
    // The runs were in a child: the positive control that these are the
    // parent's notes, not a body in this process.
    assert.ok(w.childPids.length > 0 && !w.childPids.includes(process.pid));
    const mine = (id) => seen.filter((s) => s[2] === id).map((s) => s[0]);
    await until(() => mine(bad.id).length === 4, 'the failed run\'s events');
    assert.deepEqual(mine(ok.id), ['active', 'completed']);
    assert.deepEqual(mine(bad.id), ['active', 'retrying', 'active', 'failed']);
    const done = seen.find((s) => s[0] === 'completed');
    assert.deepEqual(done.slice(1, 6), ['evp.add', ok.id, [2, 3], 1, 5]);
    const failed = seen.find((s) => s[0] === 'failed');
    assert.ok(failed[5] instanceof Error);
    assert.equal(failed[5].name, 'RangeError');
    assert.equal(failed[5].message, 'no 7');
    assert.equal(failed[4], 2, 'the second attempt failed for good');
  } finally {
    await w.stop({ grace: 5_000 });
    await running;
  }
});
