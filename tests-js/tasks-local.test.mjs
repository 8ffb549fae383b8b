// The task side's pieces that need no broker: clocks, rhythms (cron across
// DST changes), backoffs, workers' settings, the in-process scheduler,
// refusals, panics — on the memory broker and virtual clocks.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { test } from 'node:test';

import headway, { App, At, Cron, Every, Exponential, Fixed, Scheduler, chain, schedule, testing } from 'headway';

const require = createRequire(import.meta.url);
const tasksModule = require('../bindings-node/lib/tasks.js');

const START = Date.UTC(2026, 0, 1);
const z = (y, mo, d, h = 0, mi = 0) => new Date(Date.UTC(y, mo - 1, d, h, mi));
const WAIT = 10_000;

test('a virtual clock moves only forward, and an app reads it', () => {
  const c = new testing.VirtualClock(new Date(START));
  assert.equal(c.now(), START);
  assert.deepEqual(c.date(), new Date(START));
  c.advance(1500);
  assert.equal(c.now(), START + 1500);
  c.advance(-10_000);
  assert.equal(c.now(), START + 1500);
  c.advanceTo(START);
  assert.equal(c.now(), START + 1500);
  c.advanceTo(new Date(START + 60_000));
  assert.equal(c.now(), START + 60_000);
  assert.equal(new testing.VirtualClock().now(), 0);
  const app = new App({ clock: c });
  assert.equal(app.now(), START + 60_000);
  assert.equal(app.clock, c);
  assert.ok(Math.abs(new App().now() - Date.now()) < 5000);
  assert.equal(new App().clock, null);
  assert.throws(() => new testing.VirtualClock('2026'), { name: 'TypeError', message: /"start"/ });
  assert.throws(() => new testing.VirtualClock(new Date('nope')), { name: 'RangeError', message: /valid Date/ });
});

test('Every keeps phase and anchors', () => {
  const e = Every(60_000);
  assert.equal(e.kind, 'every');
  assert.equal(e.interval, 60_000);
  assert.equal(e.anchor, null);
  assert.deepEqual(e.first(START), new Date(START + 60_000));
  // The next time comes from the time that was due, not from when it ran.
  assert.deepEqual(e.after(new Date(START + 60_000)), new Date(START + 120_000));
  const hourly = Every(3_600_000, { anchor: 0 });
  assert.deepEqual(hourly.first(START + 10_000), new Date(START + 3_600_000));
  assert.deepEqual(hourly.first(START), new Date(START));
  assert.throws(() => Every(0), { name: 'RangeError', message: /interval|Every/ });
  assert.throws(() => Every('1m'), { name: 'TypeError', message: /"interval"/ });
  assert.throws(() => Every(1000, { every: 1 }), { name: 'TypeError', message: /unexpected option "every"/ });
});

test('At fires once, even when past', () => {
  const a = At(new Date(START));
  assert.equal(a.when, START);
  assert.deepEqual(a.first(START + 3_600_000), new Date(START));
  assert.equal(a.after(START), null);
  assert.equal(At(START).when, START);
});

test('Cron parses and refuses', () => {
  const c = Cron('*/5 * * * *', { tz: 'UTC' });
  assert.deepEqual([c.kind, c.expr, c.tz], ['cron', '*/5 * * * *', 'UTC']);
  assert.deepEqual(c.first(START + 1), new Date(START + 5 * 60_000));
  assert.deepEqual(c.first(START), new Date(START));
  assert.deepEqual(Cron('@hourly').after(START), new Date(START + 3_600_000));
  assert.equal(Cron('@hourly').tz, 'UTC');
  assert.deepEqual(Cron('0 9 * * MON-FRI').first(START), z(2026, 1, 1, 9)); // a Thursday
  assert.throws(() => Cron('0 * * * * *'), { name: 'RangeError', message: /5/ });
  assert.throws(() => Cron('0 0 31 2 *'), { name: 'RangeError', message: /never fires/ });
  assert.throws(() => Cron('* * * * *', { tz: 'Mars/Olympus' }), { name: 'RangeError', message: /tz/ });
});

test('cron across spring forward (America/New_York, 2026-03-08)', () => {
  const daily = Cron('30 2 * * *', { tz: 'America/New_York' });
  const before = z(2026, 3, 7, 7, 30); // 02:30 EST on the 7th
  assert.deepEqual(daily.first(before), before);
  // 02:30 does not exist on the 8th: it fires at the first instant after the
  // gap (03:00 EDT = 07:00Z), so a daily job is never lost...
  const gap = daily.after(before);
  assert.deepEqual(gap, z(2026, 3, 8, 7, 0));
  // ... and is back on 02:30 (now EDT, 06:30Z) the day after.
  assert.deepEqual(daily.after(gap), z(2026, 3, 9, 6, 30));
  // A step line just skips the minutes that did not happen.
  const steps = Cron('*/30 * * * *', { tz: 'America/New_York' });
  assert.deepEqual(steps.after(z(2026, 3, 8, 6, 30)), z(2026, 3, 8, 7, 0));
});

test('cron across fall back (America/New_York, 2026-11-01)', () => {
  const daily = Cron('30 1 * * *', { tz: 'America/New_York' });
  const firstPass = daily.after(z(2026, 10, 31, 5, 30));
  assert.deepEqual(firstPass, z(2026, 11, 1, 5, 30)); // the first 01:30 (EDT)
  // A fixed time that happens twice fires once.
  assert.deepEqual(daily.after(firstPass), z(2026, 11, 2, 6, 30));
  // A step line fires on both passes: every 30 real minutes.
  const steps = Cron('*/30 * * * *', { tz: 'America/New_York' });
  let t = z(2026, 11, 1, 5, 0);
  const seen = [];
  for (let i = 0; i < 4; i++) {
    t = steps.after(t);
    seen.push(t);
  }
  assert.deepEqual(seen, [z(2026, 11, 1, 5, 30), z(2026, 11, 1, 6, 0), z(2026, 11, 1, 6, 30), z(2026, 11, 1, 7, 0)]);
});

test('a beat on cron across a DST change sends at the right instants', async () => {
  const clock = new testing.VirtualClock(z(2026, 3, 7, 5, 0)); // 00:00 EST
  const app = new App({ clock });
  const nightly = app.task('nightly', (args, ctx) => ctx.now.toISOString());
  const beat = app.beat();
  beat.add('nightly', nightly, [], Cron('30 2 * * *', { tz: 'America/New_York' }));
  const w = app.worker();
  const running = w.run();
  const ran = [];
  for (let i = 0; i < 3; i++) {
    const [[, when]] = beat.pending();
    clock.advanceTo(when);
    for (const [, , h] of await beat.tick()) ran.push(await h.get(WAIT));
  }
  assert.deepEqual(ran, ['2026-03-07T07:30:00.000Z', '2026-03-08T07:00:00.000Z', '2026-03-09T06:30:00.000Z']);
  await w.stop({ grace: 1000 });
  await running;
});

test('task backoffs', () => {
  const f = Fixed(500);
  assert.deepEqual([f.kind, f.delay], ['fixed', 500]);
  assert.deepEqual([1, 2, 3].map((a) => f.waitBefore(a, 'x')), [0, 500, 500]);
  const e = Exponential({ base: 1000, cap: 5000, jitter: false });
  assert.deepEqual([e.kind, e.base, e.cap, e.jitter], ['exponential', 1000, 5000, false]);
  assert.deepEqual([1, 2, 3, 4, 5, 6].map((a) => e.waitBefore(a, 'x')), [0, 1000, 2000, 4000, 5000, 5000]);
  const j = Exponential();
  // The core's defaults: 1 s doubling to 10 min, jittered.
  assert.deepEqual([j.base, j.cap, j.jitter], [1000, 600_000, true]);
  // The jitter is derived from the id and the attempt: the same everywhere.
  assert.equal(j.waitBefore(3, 'abc'), j.waitBefore(3, 'abc'));
  assert.ok(j.waitBefore(3, 'abc') >= 0 && j.waitBefore(3, 'abc') <= 2000);
  assert.notEqual(j.waitBefore(3, 'abc'), j.waitBefore(3, 'abd'));
  // An attempt is a 32-bit count: the largest waits the cap, one past it is
  // refused (it was wrapped round to attempt 0, a wait of 0).
  assert.equal(e.waitBefore(2 ** 32 - 1, 'x'), 5000);
  for (const bad of [2 ** 32, 2 ** 53, -1, 1.5]) {
    assert.throws(() => e.waitBefore(bad, 'x'), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE', message: /attempt/ }, String(bad));
  }
  assert.throws(() => Fixed(-1), { name: 'RangeError', message: /delay/ });
  assert.throws(() => Exponential({ base: -1 }), { name: 'RangeError', message: /base/ });
  assert.throws(() => Exponential({ jitter: 'yes' }), { name: 'TypeError', message: /"jitter"/ });
});

test('worker settings, and a worker runs once', async () => {
  const app = new App();
  const w = app.worker({ queues: 'a, b', concurrency: 3 });
  assert.deepEqual(w.queues, ['a', 'b']);
  assert.equal(w.concurrency, 3);
  assert.equal(w.prefetch, 12);
  assert.equal(w.settled, 0);
  assert.match(w.name, /^worker-/);
  assert.equal(app.worker({ prefetch: 1, concurrency: 2 }).prefetch, 2);
  assert.equal(app.worker({ name: 'w1' }).name, 'w1');
  // Celery's worker_prefetch_multiplier: concurrency × it, unless prefetch is given.
  assert.equal(app.worker({ concurrency: 3, prefetchMultiplier: 2 }).prefetch, 6);
  assert.equal(app.worker({ concurrency: 3, prefetch: 5, prefetchMultiplier: 2 }).prefetch, 5);
  assert.throws(() => app.worker({ prefetchMultiplier: 0 }), { name: 'RangeError', message: /prefetchMultiplier.*Celery's 0, no limit/ });
  assert.deepEqual(app.worker().queues, ['default']);
  // The core splits every name at commas (an array's too) and refuses a
  // list that names no queue (a worker that would never claim).
  assert.deepEqual(app.worker({ queues: ['a,b', ' c '] }).queues, ['a', 'b', 'c']);
  for (const none of [[], ' , ', ['']]) {
    assert.throws(() => app.worker({ queues: none }), { message: /`?queues`?: must name at least one queue/ });
  }
  await w.stop(); // stopping one that never ran is harmless
  const w2 = app.worker();
  const running = w2.run();
  await w2.stop({ grace: 100 });
  await running;
  await assert.rejects(w2.run(), { code: 'ERR_INVALID_STATE', message: /already run/ });
  assert.throws(() => app.worker({ queues: 5 }), { name: 'TypeError', message: /"queues"/ });
  assert.throws(() => app.worker({ concurrency: 1.5 }), { name: 'RangeError', message: /concurrency/ });
});

test('the in-process scheduler on a virtual clock: phase, async jobs, failures counted', async () => {
  const clock = new testing.VirtualClock(new Date(START));
  const s = new Scheduler({ clock });
  assert.equal(s.clock, clock);
  const calls = [];
  s.add('flush', (ctx) => {
    calls.push([ctx.name, ctx.now.getTime() - START]);
  }, Every(10_000));
  s.add('report', async (ctx) => {
    await null;
    calls.push(['report', ctx.now.getTime() - START]);
  }, Cron('*/1 * * * *'));
  s.add('broken', () => {
    throw new Error('job failed');
  }, Every(30_000));
  assert.deepEqual(s.pending().map(([n]) => n), ['report', 'flush', 'broken']);
  // A failing job is logged (to stderr) and counted; the rhythm goes on.
  await s.run(START + 60_000);
  assert.deepEqual(calls.filter(([n]) => n === 'flush').map(([, t]) => t), [1, 2, 3, 4, 5, 6].map((i) => i * 10_000));
  assert.deepEqual(calls.filter(([n]) => n === 'report').map(([, t]) => t), [0, 60_000]);
  const st = s.stats('broken');
  assert.equal(st.fired, 2);
  assert.equal(st.failed, 2);
  assert.match(st.lastError, /job failed/);
  assert.equal(s.stats('nope'), null);
  assert.equal(s.remove('broken'), true);
  assert.equal(s.remove('broken'), false);
  clock.advance(10_000);
  assert.deepEqual(await s.tick(), [['flush', new Date(START + 70_000)]]);
  await s.stop();
  assert.equal(schedule.Scheduler, Scheduler);
  assert.equal(schedule.Every, Every);
});

test('the scheduler starts and stops on the system clock', async () => {
  const s = new Scheduler();
  let hits = 0;
  s.add('job', () => {
    hits++;
  }, Every(20));
  s.start();
  const deadline = Date.now() + WAIT;
  while (hits < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  assert.ok(hits >= 3);
  await s.stop();
  const n = hits;
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(hits, n); // stopped means stopped
});

test('the scheduler refuses bad arguments', () => {
  const s = new Scheduler();
  assert.throws(() => s.add('x', 1, Every(1000)), { name: 'TypeError', message: /"fn"/ });
  assert.throws(() => s.add('x', () => null, 5), { name: 'TypeError', message: /"rhythm"/ });
  assert.throws(() => s.add('', () => null, Every(1000)), { name: 'RangeError', message: /name/ });
  assert.throws(() => new Scheduler({ clock: Date.now }), { name: 'TypeError', message: /"clock"/ });
});

test('a context carries the canvas ids', async () => {
  const app = new App({ clock: new testing.VirtualClock(START) });
  const seen = [];
  const step = app.task('step', ([x], ctx) => {
    seen.push([ctx.id, ctx.rootId, ctx.parentId]);
    return (x ?? 0) + 1;
  });
  const w = app.worker();
  const running = w.run();
  const h = await chain(step.sig([0]), step.sig(), step.sig()).send();
  assert.equal(await h.get(WAIT), 3);
  const [first, second, third] = seen;
  assert.equal(first[1], first[0]);
  assert.equal(first[2], null);
  assert.deepEqual([second[1], second[2]], [first[0], first[0]]);
  assert.deepEqual([third[1], third[2]], [first[0], second[0]]);
  assert.equal(third[0], h.id);
  await w.stop();
  await running;
});

test('bad brokers, backends and clocks are refused, the password never shown', () => {
  assert.throws(() => new App({ broker: 'redis://:secret@127.0.0.1:1/0' }), (e) => {
    assert.equal(e.code, 'BROKER');
    assert.ok(!e.message.includes('secret'), e.message);
    return true;
  });
  assert.throws(() => new App({ broker: 'kafka://localhost' }), { name: 'RangeError', message: /broker/ });
  assert.throws(() => new App({ broker: 5 }), { name: 'TypeError', message: /"broker"/ });
  assert.throws(() => new App({ backend: true }), { name: 'TypeError', message: /"backend"/ });
  assert.throws(() => new App({ clock: {} }), { name: 'TypeError', message: /"clock"/ });
  assert.throws(() => new App({ brokr: 'memory://' }), { name: 'TypeError', message: /unexpected option "brokr"/ });
  assert.throws(() => new headway.RedisBroker('http://nope'), { name: 'RangeError' });
  assert.throws(() => new headway.RedisBroker('amqps://u:secret@h:5671/'), (e) => {
    assert.equal(e.name, 'RangeError');
    assert.match(e.message, /expected redis:\/\/.*got "amqps"/);
    assert.ok(!e.message.includes('secret'), e.message);
    return true;
  });
  assert.throws(() => new headway.RedisBroker('redis://localhost', { lease: 0 }), { name: 'RangeError', message: /lease/ });
  // Sentinel: headway's layout by URL, Celery's with the master named apart.
  const hs = new headway.RedisBroker('redis+sentinel://:secret@s1,s2:26380/mymaster/1?wait=1');
  assert.equal(hs.url, 'redis+sentinel://:***@s1:26379,s2:26380/mymaster/1?wait=1&wait_timeout=1000');
  const cs = headway.RedisBroker.celery('sentinel://:secret@s1:26379;sentinel://s2:26380', { masterName: 'mymaster' });
  assert.equal(cs.layout, 'celery');
  assert.equal(cs.url, 'redis+sentinel://:***@s1:26379,s2:26380/mymaster/0');
  assert.throws(() => headway.RedisBroker.celery('sentinel://s1:26379'), { name: 'RangeError', message: /masterName/ });
  assert.throws(() => headway.RedisBroker.celery('sentinel://s1', { masterName: 5 }), { name: 'TypeError', message: /masterName/ });
  assert.throws(() => new headway.RedisBroker('redis://h?wait=0'), { name: 'RangeError', message: /`wait` must be/ });
  assert.throws(() => headway.RedisBroker.celery('redis://localhost', { visibilityTimeout: -1 }), {
    name: 'RangeError',
    message: /visibilityTimeout/,
  });
  const b = new headway.RedisBroker('redis://user:pw@localhost:6379/2', { prefix: 'x:' });
  assert.equal(b.layout, 'headway');
  assert.ok(!b.url.includes('pw'), b.url);
  assert.equal(headway.RedisBroker.celery('redis://localhost').layout, 'celery');
});

test('a Rust panic in a task future is a thrown Error or a rejected Promise, and the process lives on', async () => {
  await assert.rejects(tasksModule._panic(false), (e) => {
    assert.ok(e instanceof Error);
    assert.match(e.message, /deliberate panic in a task future/);
    return true;
  });
  await assert.rejects(tasksModule._panic(true), (e) => {
    assert.ok(e instanceof Error);
    assert.equal(e.code, 'GenericFailure');
    assert.match(e.message, /headway panicked .*deliberate panic in a task future/);
    return true;
  });
  // Nothing was poisoned.
  const app = new App();
  const t = app.task('t', () => 1);
  const w = app.worker();
  const running = w.run();
  assert.equal(await (await t.send()).get(WAIT), 1);
  await w.stop();
  await running;
  assert.equal(headway._native._hubOutstanding(), 0);
});

test('two apps in one process do not see each other', async () => {
  const a = new App();
  const b = new App();
  a.task('only-a', () => 'a');
  assert.deepEqual(b.taskNames(), []);
  await assert.rejects(b.send('only-a', []), { code: 'UNKNOWN_TASK' });
  // Registering again replaces.
  const t1 = a.task('only-a', () => 'replaced');
  const w = a.worker();
  const running = w.run();
  assert.equal(await (await t1.send()).get(WAIT), 'replaced');
  await w.stop();
  await running;
});
