// A body asks something of its run: ctx.retry({ countdown, eta, maxRetries,
// error }) (retried on its own terms, within its own budget), ctx.reject({
// requeue }) (back to the queue, or failed for good with why) and
// ctx.ignore() (nothing stored); a bad ask fails the run with a TypeError
// naming the field. On the memory broker and on Redis (own and Celery's
// layout) — the rule is the core's, the same as Python's.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { Ignore, Reject, TaskRetry } from 'headway';

import { brokers } from './fixtures/brokers.mjs';

const WAIT = 20_000;

async function failure(p) {
  const e = await p.then(
    (v) => assert.fail(`expected a failure, got ${JSON.stringify(v)}`),
    (err) => err,
  );
  assert.equal(e.code, 'FAILED', e.message);
  return e;
}

for (const b of brokers()) {
  describe(b.kind, { skip: b.skip }, () => {
    before(() => b.setup());
    after(() => b.teardown());
    const make = () => b.app({ clock: null });
    test('ctx.retry runs again after its countdown, within its own budget', async () => {
      const app = await make();
      const seen = [];
      app.task('ask.flaky', ([n], ctx) => {
        seen.push(ctx.attempt);
        if (ctx.attempt < n) ctx.retry({ countdown: 30, maxRetries: 3 });
        return `ok on ${ctx.attempt}`;
      });
      const w = app.worker({ concurrency: 1 });
      const running = w.run();
      try {
        const t = Date.now();
        assert.equal(await (await app.send('ask.flaky', [3])).get(WAIT), 'ok on 3');
        assert.deepEqual(seen, [1, 2, 3]);
        assert.ok(Date.now() - t >= 60, 'two countdowns of 30 ms');
        seen.length = 0;
        const e = await failure((await app.send('ask.flaky', [9])).get(WAIT));
        assert.equal(e.remoteType, 'MaxRetriesExceededError');
        assert.deepEqual(seen, [1, 2, 3, 4]);
        // With an error: recorded, and failed with past the task's budget (1).
        app.task('ask.io', (_args, ctx) => ctx.retry({ countdown: 10, error: new RangeError('the disk is away') }), { retries: 1 });
        const io = await failure((await app.send('ask.io', [])).get(WAIT));
        assert.equal(io.remoteType, 'RangeError');
        assert.match(io.remoteMessage, /the disk is away/);
      } finally {
        await w.stop({ grace: 2000 });
        await running;
      }
    });

    test('reject requeues or fails naming why; ignore stores nothing; a bad ask is a TypeError', async () => {
      const app = await make();
      const dir = mkdtempSync(join(tmpdir(), 'asks-'));
      const mark = join(dir, 'once');
      app.task('ask.picky', ([requeue], ctx) => {
        if (!existsSync(mark)) {
          writeFileSync(mark, 'x');
          ctx.reject({ requeue, reason: 'not yet' });
        }
        return 'taken';
      });
      app.task('ask.quiet', ([skip], ctx) => (skip ? ctx.ignore() : 'stored'));
      app.task('ask.thrown', () => {
        throw new Reject({ reason: 'no thanks' });
      });
      app.task('ask.bad', (_args, ctx) => ctx.retry({ countdown: -1 }));
      const w = app.worker({ concurrency: 1 });
      const running = w.run();
      try {
        assert.equal(await (await app.send('ask.picky', [true])).get(WAIT), 'taken');
        rmSync(mark);
        const e = await failure((await app.send('ask.picky', [false])).get(WAIT));
        assert.equal(e.remoteType, 'Reject');
        assert.match(e.remoteMessage, /not yet/);
        const t = await failure((await app.send('ask.thrown', [])).get(WAIT));
        assert.equal(t.remoteType, 'Reject');
        const ignored = await app.send('ask.quiet', [true]);
        // The positive control after it on the one slot: once stored, the
        // ignored run was settled, and stored nothing.
        assert.equal(await (await app.send('ask.quiet', [false])).get(WAIT), 'stored');
        const settled = w.settled;
        assert.ok(settled >= 5, `settled ${settled}`);
        assert.equal(await ignored.state(), 'PENDING');
        const bad = await failure((await app.send('ask.bad', [])).get(WAIT));
        assert.equal(bad.remoteType, 'TypeError');
        assert.match(bad.remoteMessage, /`countdown`/);
      } finally {
        await w.stop({ grace: 2000 });
        await running;
      }
    });
  });
}

class Flaky extends RangeError {}

test('retryFor retries only the named error classes and their subclasses', async () => {
  const { App, Fixed } = await import('headway');
  const app = new App();
  const seen = {};
  app.task(
    'ask.filtered',
    ([kind], ctx) => {
      (seen[kind] ??= []).push(ctx.attempt);
      throw new { flaky: Flaky, type: TypeError, syntax: SyntaxError }[kind](kind);
    },
    { retries: 2, backoff: Fixed(10), retryFor: [RangeError, 'SyntaxError'], dontRetryFor: 'SyntaxError' },
  );
  const w = app.worker({ concurrency: 1 });
  const running = w.run();
  try {
    // A subclass of a named class: retried (the positive control).
    const f = await failure((await app.send('ask.filtered', ['flaky'])).get(WAIT));
    assert.equal(f.remoteType, 'RangeError');
    assert.deepEqual(seen.flaky, [1, 2, 3]);
    // Not named: fails at once.
    await failure((await app.send('ask.filtered', ['type'])).get(WAIT));
    assert.deepEqual(seen.type, [1]);
    // Named by dontRetryFor too: excluded.
    await failure((await app.send('ask.filtered', ['syntax'])).get(WAIT));
    assert.deepEqual(seen.syntax, [1]);
  } finally {
    await w.stop({ grace: 2000 });
    await running;
  }
  assert.throws(() => app.task('ask.bad', () => 1, { retryFor: [42] }), (e) => e instanceof TypeError && /retryFor/.test(e.message));
});

test('the ask classes are Errors with Celery names', () => {
  assert.equal(new TaskRetry({ countdown: 5 }).name, 'Retry');
  assert.equal(new Reject().name, 'Reject');
  assert.equal(new Ignore().name, 'Ignore');
  assert.ok(new Ignore() instanceof Error);
});
