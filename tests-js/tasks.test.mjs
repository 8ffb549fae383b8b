// The task queue through Node, on every broker: memory, and headway's Redis
// layout and Celery's on a redis-server this file starts (fixtures/brokers).
//
// Time is the app's virtual clock: retries, etas, expiry and beats move it,
// so nothing here sleeps to hope something happened. `get(timeout)` is a
// real wait, used only as a bound on a test that would otherwise hang.
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, test } from 'node:test';

import headway, { App, At, Every, Exponential, Fixed, chain, chord, group } from 'headway';

import { START, brokers, command } from './fixtures/brokers.mjs';

const WAIT = 10_000;
const range = (n) => [...Array(n).keys()];
const tick = () => new Promise((r) => setTimeout(r, 10));

async function until(check, what, limit = WAIT) {
  const deadline = Date.now() + limit;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await tick();
  }
}

function failed(type, message) {
  return (e) => {
    assert.equal(e.code, 'FAILED', e.message);
    assert.equal(e.remoteType, type);
    if (message instanceof RegExp) assert.match(e.remoteMessage, message);
    else if (message !== undefined) assert.equal(e.remoteMessage, message);
    return true;
  };
}

for (const b of brokers()) {
  describe(`tasks on the ${b.kind} broker`, { skip: b.skip }, () => {
    before(() => b.setup());
    after(() => b.teardown());
    afterEach(() => b.stopAll());

    test('send, get, state, a handle by id, send by name, a fixed id, kwargs', async () => {
      const app = await b.app();
      const add = app.task('add', ([x, y], ctx) => x + y + (ctx.kwargs.plus ?? 0));
      app.task('zeta', () => 0);
      assert.equal(add.name, 'add');
      assert.deepEqual(app.taskNames(), ['add', 'zeta']);
      b.start(app, { concurrency: 2 });
      const h = await add.send([2, 3]);
      assert.equal(typeof h.id, 'string');
      assert.deepEqual(h.ids, [h.id]);
      assert.equal(await h.get(WAIT), 5);
      assert.equal(await h.state(), 'SUCCESS');
      assert.equal(await app.handle(h.id).get(WAIT), 5);
      assert.equal(await (await app.send('add', [4, 5])).get(WAIT), 9);
      const h2 = await add.send([1, 10], { id: 'fixed-id', kwargs: { plus: 100 } });
      assert.equal(h2.id, 'fixed-id');
      assert.equal(await h2.get(WAIT), 111);
    });

    test('values round-trip as JSON', async () => {
      const app = await b.app();
      const echo = app.task('echo', (args, ctx) => [args, ctx.kwargs]);
      b.start(app);
      const value = { s: 'é ✓', i: -(2 ** 53 - 1), f: 1.5, t: true, n: null, l: [1, [2]], o: { deep: { er: 'x' } } };
      const got = await (await echo.send([value, [1, 2]], { kwargs: { k: [null] } })).get(WAIT);
      assert.deepEqual(got, [[value, [1, 2]], { k: [null] }]);
      // A body that returns nothing answers null.
      const none = app.task('none', () => {});
      assert.equal(await (await none.send()).get(WAIT), null);
    });

    test('a throwing body reaches get() as FAILED with the remote type, message and stack', async () => {
      const app = await b.app();
      const boom = app.task('boom', function boomBody([x]) {
        throw new TypeError(`bad input ${x}`);
      });
      b.start(app);
      const h = await boom.send([7]);
      await assert.rejects(h.get(WAIT), (e) => {
        assert.ok(e instanceof Error);
        assert.equal(e.code, 'FAILED');
        assert.equal(e.remoteType, 'TypeError');
        assert.equal(e.remoteMessage, 'bad input 7');
        assert.equal(e.message, 'TypeError: bad input 7');
        assert.match(e.remoteTraceback, /TypeError: bad input 7/);
        assert.match(e.remoteTraceback, /boomBody/);
        return true;
      });
      assert.equal(await h.state(), 'FAILURE');
    });

    test('a rejected Promise, a custom error and a thrown string are failures, never crashes', async () => {
      const app = await b.app();
      const rej = app.task('rej', async () => {
        await null;
        throw new RangeError('async no');
      });
      const custom = app.task('custom', () => Promise.reject(Object.assign(new Error('plain'), { name: 'CustomError' })));
      const str = app.task('str', () => {
        throw 'just a string';
      });
      b.start(app);
      await assert.rejects((await rej.send()).get(WAIT), failed('RangeError', 'async no'));
      await assert.rejects((await custom.send()).get(WAIT), failed('CustomError', 'plain'));
      await assert.rejects((await str.send()).get(WAIT), (e) => {
        failed('string', 'just a string')(e);
        // No stack to show (Celery's result format writes one line of its own).
        if (b.kind !== 'celery') assert.equal(e.remoteTraceback, null);
        return true;
      });
    });

    test('a retry budget runs out; ctx.attempt, retries, last and now', async () => {
      const app = await b.app();
      const seen = [];
      const flaky = app.task(
        'flaky',
        (args, ctx) => {
          seen.push([ctx.attempt, ctx.retries, ctx.last, ctx.now.getTime() - START]);
          const e = new Error(`attempt ${ctx.attempt}`);
          e.name = 'ConnectionError';
          throw e;
        },
        { retries: 2, backoff: Fixed(10_000) },
      );
      b.start(app);
      const h = await flaky.send();
      await assert.rejects(h.get(WAIT), failed('ConnectionError', 'attempt 3'));
      // Each retry waits the backoff on the virtual clock.
      assert.deepEqual(seen, [
        [1, 0, false, 0],
        [2, 1, false, 10_000],
        [3, 2, true, 20_000],
      ]);
    });

    test('a retry waits the exponential backoff, jitter derived from the id', async () => {
      const app = await b.app();
      const times = [];
      const backoff = Exponential({ base: 2000, cap: 60_000, jitter: true });
      const flaky = app.task(
        'flaky2',
        (args, ctx) => {
          times.push(ctx.now.getTime());
          if (ctx.attempt < 3) throw new Error('not yet');
          return 'ok';
        },
        { retries: 3, backoff },
      );
      b.start(app);
      const h = await flaky.send([], { id: 'run-42' });
      assert.equal(await h.get(WAIT), 'ok');
      const w2 = backoff.waitBefore(2, 'run-42');
      const w3 = backoff.waitBefore(3, 'run-42');
      assert.ok(w2 >= 0 && w2 <= 2000 && w3 >= 0 && w3 <= 4000);
      assert.ok(Math.abs(times[1] - times[0] - w2) <= 2);
      assert.ok(Math.abs(times[2] - times[1] - w3) <= 2);
    });

    test('an unknown name is refused by send(); sendTask() sends to any name', async () => {
      const app = await b.app();
      app.task('known', () => 1);
      await assert.rejects(app.send('nope', []), (e) => {
        assert.equal(e.code, 'UNKNOWN_TASK');
        assert.equal(e.task, 'nope');
        return true;
      });
      const h = await app.sendTask('elsewhere.task', [1]);
      assert.equal(await h.state(), 'PENDING');
      await assert.rejects(h.get(50), { code: 'TIMEOUT' });
      // A negative timeout waits nothing (the core's specs::wait), as 0 does.
      await assert.rejects(h.get(-1), { code: 'TIMEOUT' });
      b.start(app);
      if (b.kind === 'celery') {
        // On a queue shared with Celery workers, a name this worker does not
        // run is handed back for a consumer that does: the queue holds it
        // again, its hand-backs counted in a header.
        const heldBack =
          "redis.call('SELECT', ARGV[3]) " +
          "for _, v in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do " +
          'if string.find(v, ARGV[1], 1, true) and string.find(v, ARGV[2], 1, true) ' +
          'then return 1 end end return 0';
        const deadline = Date.now() + WAIT;
        for (;;) {
          const got = await command(b.server.port, 'EVAL', heldBack, '1', 'celery', h.id, 'x-headway-handbacks', String(b.db));
          if (got === ':1') break;
          assert.ok(Date.now() < deadline, 'the unknown task was not handed back to the queue');
          await new Promise((r) => setTimeout(r, 20));
        }
        await assert.rejects(h.get(50), { code: 'TIMEOUT' });
        assert.equal(await h.state(), 'PENDING');
        return;
      }
      // A worker that receives it records it failed rather than dropping it.
      await assert.rejects(h.get(WAIT), failed('NotRegistered'));
    });

    test('revoke before run, and expires in the past, never run', async () => {
      const app = await b.app();
      const ran = [];
      const job = app.task('job', ([tag]) => {
        ran.push(tag);
        return tag;
      });
      const revoked = await job.send(['revoked'], { countdown: 30_000 });
      await revoked.revoke();
      const expired = await job.send(['expired'], { expires: START - 1000 });
      const expiredDate = await job.send(['expired-date'], { expires: new Date(START - 5000) });
      const live = await job.send(['live'], { expires: new Date(START + 3_600_000) });
      b.start(app);
      assert.equal(await live.get(WAIT), 'live');
      for (const h of [revoked, expired, expiredDate]) {
        await assert.rejects(h.get(WAIT), (e) => {
          assert.equal(e.code, 'REVOKED');
          assert.equal(e.id, h.id);
          return true;
        });
        assert.equal(await h.state(), 'REVOKED');
      }
      assert.deepEqual(ran, ['live']);
    });

    test('etas run in eta order (Date, epoch ms, countdown, now)', async () => {
      const app = await b.app();
      const order = [];
      const at = app.task('at', ([tag], ctx) => {
        order.push([tag, ctx.now.getTime() - START]);
      });
      const hs = [
        await at.send(['thirty'], { eta: new Date(START + 30_000) }),
        await at.send(['ten'], { eta: START + 10_000 }),
        await at.send(['twenty'], { countdown: 20_000 }),
        await at.send(['now']),
      ];
      b.start(app, { concurrency: 1 });
      for (const h of hs) await h.get(WAIT);
      assert.deepEqual(order, [
        ['now', 0],
        ['ten', 10_000],
        ['twenty', 20_000],
        ['thirty', 30_000],
      ]);
    });

    test('chain, group (in order), chord, a chain in a group, group-then-callback', async () => {
      const app = await b.app();
      const add = app.task('add', ([x, y]) => x + y);
      const mul = app.task('mul', async ([x, y]) => x * y);
      const total = app.task('total', ([xs], ctx) => xs.reduce((a, v) => a + v, 0) + (ctx.kwargs.plus ?? 0));
      b.start(app);
      assert.equal(await (await chain(add.sig([1, 2]), add.sig([3]), mul.sig([10])).send()).get(WAIT), 60);
      assert.equal(await (await chain([add.sig([1, 1]), mul.sig([3, 3], { immutable: true })]).send()).get(WAIT), 9);
      // A group answers in the order given, even when parts finish out of order.
      const g = await group(range(5).map((i) => add.sig([i, i], { countdown: (10 - i) * 1000 }))).send();
      assert.deepEqual(await g.get(WAIT), [0, 2, 4, 6, 8]);
      assert.equal(g.ids.length, 5);
      assert.equal(await g.state(), 'SUCCESS');
      // A chain inside a group stays a chain.
      assert.deepEqual(await (await group(chain(add.sig([1, 1]), mul.sig([10])), add.sig([5, 5])).send()).get(WAIT), [20, 10]);
      const c = await chord(range(4).map((i) => add.sig([i, i])), total.sig([], { kwargs: { plus: 100 } })).send();
      assert.equal(await c.get(WAIT), 112);
      // A group first in a chain is a chord over the rest, as in Celery.
      assert.equal(await (await chain(group(add.sig([1, 1]), add.sig([2, 2])), total.sig()).send()).get(WAIT), 6);
      // A group later in a chain is given the link's result (a chord when a task follows it).
      assert.equal(await (await chain(add.sig([1, 2]), group(add.sig([10]), add.sig([20])), total.sig()).send()).get(WAIT), 36);
      assert.deepEqual(await (await chain(add.sig([1, 2]), group(add.sig([10]), mul.sig([2]))).send()).get(WAIT), [13, 6]);
      // A signature of a name.
      assert.equal(await (await app.sig('add', [7, 8]).send()).get(WAIT), 15);
      // Celery's children, date_done and forget: the first link lists the next as its child.
      const first = `first-${Date.now()}-${Math.random()}`;
      const last = await chain(add.sig([1, 1], { id: first }), add.sig([1])).send();
      assert.equal(await last.get(WAIT), 3);
      const parent = app.handle(first);
      assert.deepEqual((await parent.children()).map((h) => h.id), [last.id]);
      assert.ok((await parent.dateDone()) instanceof Date);
      assert.deepEqual(await last.children(), []);
      await parent.forget();
      assert.equal(await parent.state(), 'PENDING');
      assert.equal(await parent.dateDone(), null);
      assert.equal(await last.state(), 'SUCCESS');
    });

    test('a chord whose part fails fails its callback; a failed link fails the chain; a group reports FAILURE', async () => {
      const app = await b.app();
      const ran = [];
      const ok = app.task('ok', ([x]) => {
        ran.push(`ok${x}`);
        return x;
      });
      const bad = app.task('bad', () => {
        throw new Error('part failed');
      });
      const total = app.task('total', ([xs]) => {
        ran.push('total');
        return xs.reduce((a, v) => a + v, 0);
      });
      b.start(app);
      const c = await chord([ok.sig([1]), bad.sig(), ok.sig([2])], total.sig()).send();
      await assert.rejects(c.get(WAIT), failed('ChordError', /part failed/));
      const ch = await chain(ok.sig([1]), bad.sig(), ok.sig()).send();
      await assert.rejects(ch.get(WAIT), failed('Error', /part failed/));
      assert.ok(!ran.includes('total'));
      const g = await group(ok.sig([3]), bad.sig()).send();
      await assert.rejects(g.get(WAIT), { code: 'FAILED' });
      assert.equal(await g.state(), 'FAILURE');
    });

    test('async bodies run concurrently on the event loop, with their context', async () => {
      const app = await b.app();
      let inflight = 0;
      let most = 0;
      const aecho = app.task('aecho', async ([x], ctx) => {
        inflight++;
        most = Math.max(most, inflight);
        await new Promise((r) => setTimeout(r, 5));
        inflight--;
        return [x * 2, ctx.id, ctx.name, ctx.queue];
      });
      b.start(app, { concurrency: 8 });
      const hs = [];
      for (const i of range(20)) hs.push(await aecho.send([i]));
      const got = await Promise.all(hs.map((h) => h.get(WAIT)));
      assert.deepEqual(
        got,
        hs.map((h, i) => [i * 2, h.id, 'aecho', 'default']),
      );
      assert.ok(most > 1 && most <= 8, `most in flight: ${most}`);
    });

    test('a body that never resolves times out, and its signal aborts', async () => {
      const app = await b.app();
      let aborted = false;
      const stuck = app.task(
        'stuck',
        (args, ctx) =>
          new Promise(() => {
            ctx.signal.addEventListener('abort', () => {
              aborted = true;
            });
          }),
        { timeout: 300 },
      );
      let lateResolve;
      const late = app.task('late', () => new Promise((r) => (lateResolve = r)), { timeout: 300 });
      b.start(app, { concurrency: 2 });
      const h = await stuck.send();
      await assert.rejects(h.get(WAIT), failed('TimeoutError', /timeout of 300 ms/));
      await until(() => aborted, 'the abort');
      assert.equal(await h.state(), 'FAILURE');
      // A late answer is discarded.
      const h2 = await late.send();
      await assert.rejects(h2.get(WAIT), failed('TimeoutError'));
      lateResolve('too late');
      await tick();
      assert.equal(await h2.state(), 'FAILURE');
      await assert.rejects(h2.get(WAIT), failed('TimeoutError'));
    });

    test('revoke(terminate) stops a running async body', async () => {
      const app = await b.app();
      let started;
      const startedP = new Promise((r) => (started = r));
      let cancelled = false;
      const long = app.task(
        'long',
        (args, ctx) =>
          new Promise((_, reject) => {
            started();
            ctx.signal.addEventListener('abort', () => {
              cancelled = true;
              reject(new Error('aborted'));
            });
          }),
      );
      b.start(app);
      const h = await long.send();
      await startedP;
      await h.revoke(true);
      await assert.rejects(h.get(WAIT), { code: 'REVOKED' });
      await until(() => cancelled, 'the body to be cancelled');
      assert.equal(await h.state(), 'REVOKED');
    });

    test('stop with work in flight loses nothing', async () => {
      const app = await b.app();
      let open;
      const gate = new Promise((r) => (open = r));
      const runs = new Map();
      const held = app.task('held', async ([i]) => {
        runs.set(i, (runs.get(i) ?? 0) + 1);
        await gate;
        return i;
      });
      const handles = [];
      for (const i of range(6)) handles.push(await held.send([i]));
      const first = app.worker({ concurrency: 2 });
      const running = first.run();
      await until(() => runs.size >= 2, 'two runs');
      // Two running, four prefetched: all given back.
      await first.stop({ grace: 200 });
      await running;
      open();
      b.start(app, { concurrency: 3 });
      const got = await Promise.all(handles.map((h) => h.get(WAIT).catch((e) => e.code)));
      const states = await Promise.all(handles.map((h) => h.state()));
      assert.deepEqual(got, range(6), `states ${states} runs ${JSON.stringify([...runs])}`);
      assert.deepEqual([...runs.keys()].sort(), range(6));
      assert.ok([...runs.values()].every((n) => n <= 2), JSON.stringify([...runs]));
    });

    test('rate limits per worker on the virtual clock', async () => {
      const app = await b.app();
      const at = [];
      const limited = app.task('limited', (args, ctx) => {
        at.push(ctx.now.getTime() - START);
      }, { rate: '2/m' });
      const hs = [];
      for (const _ of range(5)) hs.push(await limited.send());
      b.start(app, { concurrency: 1 });
      for (const h of hs) await h.get(WAIT);
      assert.deepEqual(at.slice(0, 2), [0, 0]);
      assert.ok(at.every((t, i) => i === 0 || t >= at[i - 1]));
      assert.ok(at[4] >= 120_000 - 10, JSON.stringify(at));
    });

    test('ignoreResult keeps nothing; an app without a backend refuses get() with MISSING', async () => {
      const app = await b.app();
      const quiet = app.task('quiet', () => 1, { ignoreResult: true });
      b.start(app);
      await assert.rejects((await quiet.send()).get(300), { code: 'TIMEOUT' });
      const bare = new App({ clock: app.clock, backend: false });
      const noresult = bare.task('noresult', () => 1);
      await assert.rejects((await noresult.send()).get(1000), { code: 'MISSING' });
    });

    test('the beat sends on rhythms and keeps phase after a late tick; missed slots coalesce', async () => {
      const app = await b.app();
      const clock = app.clock;
      const tickTask = app.task('tick', ([n]) => n);
      const beat = app.beat();
      assert.equal(app.beat(), beat);
      beat.add('every-minute', tickTask, [1], Every(60_000));
      beat.add('once', 'tick', [2], At(new Date(START + 90_000)));
      assert.deepEqual(beat.pending(), [
        ['every-minute', new Date(START + 60_000)],
        ['once', new Date(START + 90_000)],
      ]);
      b.start(app);
      // A late tick (at 00:01:40, due 00:01:00) fires the slot that was due,
      // and the next is computed from it: 00:02:00, not 00:02:40.
      clock.advance(100_000);
      let fired = await beat.tick();
      assert.deepEqual(
        fired.map(([n, d]) => [n, d.getTime() - START]).sort(),
        [
          ['every-minute', 60_000],
          ['once', 90_000],
        ],
      );
      assert.deepEqual((await Promise.all(fired.map(([, , h]) => h.get(WAIT)))).sort(), [1, 2]);
      assert.deepEqual(beat.pending(), [['every-minute', new Date(START + 120_000)]]);
      clock.advance(600_000);
      fired = await beat.tick();
      assert.deepEqual(fired.map(([n, d]) => [n, d.getTime() - START]), [['every-minute', 660_000]]);
      assert.deepEqual(beat.pending(), [['every-minute', new Date(START + 720_000)]]);
      assert.equal(beat.remove('every-minute'), true);
      assert.equal(beat.remove('every-minute'), false);
    });

    test('beat.run(until) on the virtual clock', async () => {
      const app = await b.app();
      const count = app.task('count', () => null);
      const beat = app.beat();
      beat.add('c', count, [], Every(60_000));
      await beat.run(new Date(START + 600_000));
      assert.equal(app.now(), START + 600_000);
      assert.deepEqual(beat.pending(), [['c', new Date(START + 660_000)]]);
    });

    test('bad arguments are refused at send, naming them', async () => {
      const app = await b.app();
      const t = app.task('t', () => null);
      class Point {}
      const cases = [
        [[1, new Set([1])], {}, TypeError, /^t: args\[1\] is a Set, which JSON cannot carry/],
        [[{ a: [undefined] }], {}, TypeError, /^t: args\[0\]\.a\[0\] is undefined/],
        [[() => 1], {}, TypeError, /t: args\[0\] is a function/],
        [[Symbol('s')], {}, TypeError, /is a symbol/],
        [[1n], {}, TypeError, /is a bigint/],
        [[new Date(NaN)], {}, RangeError, /t: args\[0\] is an invalid Date/],
        [[new Point()], {}, TypeError, /is a Point/],
        [[NaN], {}, RangeError, /t: args\[0\] is NaN, and JSON carries only finite numbers/],
        [[{ 'odd key': Infinity }], {}, RangeError, /t: args\[0\]\["odd key"\] is Infinity/],
        [[], { kwargs: { x: [new Map()] } }, TypeError, /t: kwargs\.x\[0\] is a Map/],
        [[], { priority: 10 }, RangeError, /priority/],
        [[], { priority: -1 }, RangeError, /priority/],
        [[], { queue: '' }, RangeError, /queue/],
        [[], { eta: 'tomorrow' }, TypeError, /"eta"/],
        [[], { typo: 1 }, TypeError, /t: unexpected option "typo"/],
      ];
      for (const [args, opts, type, message] of cases) {
        await assert.rejects(t.send(args, opts), (e) => {
          assert.ok(e instanceof type, `${e.name}: ${e.message}`);
          assert.match(e.message, message);
          return true;
        });
      }
      await assert.rejects(t.send('not an array'), { name: 'TypeError', message: /"args"/ });
      const loop = [];
      loop.push(loop);
      await assert.rejects(t.send([loop]), { name: 'RangeError', message: /nests deeper than 100 levels \(or is circular\)/ });
      await assert.rejects(chord([chord([t.sig()], t.sig())], t.sig()).send(), {
        name: 'RangeError',
        message: /a chord cannot be a part of another chord/,
      });
      assert.throws(() => t.sig([], { nope: 1 }), { name: 'TypeError', message: /unexpected option "nope"/ });
      assert.throws(() => group(1), { name: 'TypeError', message: /"group\[0\]"/ });
    });

    test('a result JSON cannot carry fails the run', async () => {
      const app = await b.app();
      const badResult = app.task('bad_result', () => 10n);
      const badAsync = app.task('bad_async', async () => ({ when: new Map() }));
      b.start(app);
      await assert.rejects((await badResult.send()).get(WAIT), failed('TypeError', /^bad_result: result is a bigint/));
      await assert.rejects((await badAsync.send()).get(WAIT), failed('TypeError', /^bad_async: result\.when is a Map/));
    });

    test('policies are checked at registration', async () => {
      const app = await b.app();
      const f = () => null;
      assert.throws(() => app.task('a', f, { retries: -1 }), { name: 'RangeError', message: /retries/ });
      assert.throws(() => app.task('b', f, { timeout: 0 }), { name: 'RangeError', message: /timeout/ });
      assert.throws(() => app.task('c', f, { rate: 'x/m' }), { name: 'RangeError', message: /rate/ });
      assert.throws(() => app.task('c2', f, { rate: '3/y' }), { name: 'RangeError', message: /rate/ });
      assert.throws(() => app.task('d', f, { backoff: 1 }), { name: 'TypeError', message: /"backoff"/ });
      assert.throws(() => app.task('e', f, { queue: '' }), { name: 'RangeError', message: /queue/ });
      assert.throws(() => app.task('', f), { name: 'RangeError', message: /name/ });
      assert.throws(() => app.task('g', 'not a function'), { name: 'TypeError', message: /"fn"/ });
      assert.throws(() => app.task('h', f, { retry: 3 }), { name: 'TypeError', message: /unexpected option "retry"/ });
      assert.throws(() => app.worker({ concurrency: 0 }), { name: 'RangeError', message: /concurrency/ });
      app.task('ok', f, { rate: { count: 5, per: 1000 }, acksLate: true, ignoreResult: false, timeout: 1000 });
      assert.ok(app.taskNames().includes('ok'));
      assert.ok(!app.taskNames().includes('a'));
    });

    test('queues and priorities', async () => {
      const app = await b.app();
      const order = [];
      const mail = app.task('mail', ([tag]) => {
        order.push(tag);
        return tag;
      }, { queue: 'mail' });
      const low = await mail.send(['low'], { priority: 9 });
      const high = await mail.send(['high'], { priority: 0 });
      const other = await mail.send(['elsewhere'], { queue: 'other' });
      // prefetch 1: a worker holding both would race them for its one slot.
      b.start(app, { queues: 'mail', concurrency: 1, prefetch: 1 });
      assert.equal(await low.get(WAIT), 'low');
      assert.equal(await high.get(WAIT), 'high');
      assert.deepEqual(order, ['high', 'low']);
      assert.equal(await other.state(), 'PENDING');
      b.start(app, { queues: ['other'] });
      assert.equal(await other.get(WAIT), 'elsewhere');
    });

    test('nothing waits on the bell once the workers have stopped', async () => {
      await b.stopAll();
      await tick();
      assert.equal(headway._native._hubOutstanding(), 0);
    });
  });
}
