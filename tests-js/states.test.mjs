// Custom task states (Celery's `update_state`) through Node, on every broker:
// a body records PROGRESS with a meta while it runs, a caller reads it with
// `handle.state()` / `handle.info()`, and the final state overwrites it. On
// Celery's layout the stored value is Celery's own `celery-task-meta-<id>`.
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, test } from 'node:test';

import { Every, Scheduler, testing } from 'headway';

import { START, brokers, command } from './fixtures/brokers.mjs';

const WAIT = 10_000;

async function stateIs(h, want) {
  const deadline = Date.now() + WAIT;
  for (;;) {
    const now = await h.state();
    if (now === want) return;
    if (Date.now() > deadline) throw new Error(`never ${want}: ${now}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

for (const b of brokers()) {
  describe(`custom states on the ${b.kind} broker`, { skip: b.skip }, () => {
    before(() => b.setup());
    after(() => b.teardown());
    afterEach(() => b.stopAll());

    test('a body reports PROGRESS, the caller reads it, the final state overwrites it', async () => {
      const app = await b.app();
      let release;
      const released = new Promise((r) => {
        release = r;
      });
      const refused = [];
      const long = app.task('long', async ([n], ctx) => {
        for (const bad of ['SUCCESS', 'FAILURE', 'REVOKED', '']) {
          await ctx.updateState(bad, { x: 1 }).catch((e) => refused.push(e));
        }
        await ctx.updateState('STEP', [0]);
        await ctx.progress({ done: 1, of: n });
        await released;
        return `done ${n}`;
      });
      b.start(app);
      const h = await long.send([4]);
      await stateIs(h, 'PROGRESS');
      assert.deepEqual(await h.info(), { done: 1, of: 4 });
      assert.equal(refused.length, 4);
      for (const e of refused) {
        assert.ok(e instanceof RangeError, String(e));
        assert.equal(e.code, 'ERR_INVALID_ARG_VALUE', e.message);
      }
      assert.match(refused[0].message, /"SUCCESS" is a ready state/);
      assert.match(refused[3].message, /non-empty/);
      if (b.kind === 'celery') {
        const raw = await command(
          b.server.port,
          'EVAL',
          "redis.call('SELECT', ARGV[1]) return redis.status_reply(redis.call('GET', KEYS[1]))",
          '1',
          `celery-task-meta-${h.id}`,
          String(b.db),
        );
        assert.equal(
          raw,
          `+{"status": "PROGRESS", "result": {"done": 1, "of": 4}, "traceback": null, "children": [], "date_done": null, "task_id": "${h.id}"}`,
        );
      }
      release();
      assert.equal(await h.get(WAIT), 'done 4');
      assert.equal(await h.state(), 'SUCCESS');
      assert.equal(await h.info(), 'done 4');
    });

    test('info: null before anything is stored, the error for a failure; a bad argument is refused', async () => {
      const app = await b.app();
      const boom = app.task('boom', () => {
        throw new TypeError('bad input');
      });
      const odd = app.task('odd', async (_args, ctx) => {
        const out = [];
        await ctx.updateState(42, {}).catch((e) => out.push(e.code));
        await ctx.progress({ big: 1n }).catch((e) => out.push(e.name));
        await ctx.progress(null);
        return out;
      });
      b.start(app);
      assert.equal(await app.handle('nothing-yet').info(), null);
      assert.equal(await app.handle('nothing-yet').state(), 'PENDING');
      const h = await boom.send();
      await assert.rejects(h.get(WAIT), { code: 'FAILED' });
      const info = await h.info();
      assert.equal(info.kind, 'TypeError');
      assert.equal(info.message, 'bad input');
      assert.deepEqual(await (await odd.send()).get(WAIT), ['ERR_INVALID_ARG_TYPE', 'TypeError']);
    });
  });
}

test('a scheduler job has no run to record for: the name is checked, nothing stored', async () => {
  const clock = new testing.VirtualClock(new Date(START));
  const s = new Scheduler({ clock });
  const seen = [];
  s.add('job', async (ctx) => {
    await ctx.progress({ n: 1 });
    seen.push('progress');
    await ctx.updateState('SUCCESS').catch((e) => seen.push(e.code));
  }, Every(1000));
  clock.advance(1000);
  await s.tick();
  assert.deepEqual(seen, ['progress', 'ERR_INVALID_ARG_VALUE']);
});
