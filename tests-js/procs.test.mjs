// The process pool from Node: `app.worker({ pool: 'process' })` runs bodies
// in child processes (node lib/child.js <module>) that the core starts,
// supervises and replaces. What is checked: a hard time limit kills a
// spinning child and the next run succeeds in a new one; a CPU-bound body
// holds its process, so on the process pool another run goes on meanwhile
// (on the event loop it waits); the
// soft limit aborts ctx.signal with SoftTimeLimitExceeded on both pools and
// the body's answer is stored; children are recycled after maxTasksPerChild;
// a child that exits fails its run with WorkerLostError (or puts it back
// with acksLate + rejectOnWorkerLost); a terminate stops a busy body; a
// child ignores SIGINT; a kill -9 of the worker leaves no child alive; bad
// options are refused naming the option; the CLI's flags; how a module's App
// is found. Every wait polls its condition with a deadline.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { appendFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createRequire } from 'node:module';

import { App, RedisBroker, SoftTimeLimitExceeded } from 'headway';

import { RedisServer, command } from './fixtures/brokers.mjs';
import { app } from './fixtures/procs-app.mjs';
import { app as cpuApp } from './fixtures/cpu-app.mjs';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const FIX = (name) => fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url));
const CLI = join(ROOT, 'bindings-node', 'cli.js');
const LIMIT = 20_000;
const require = createRequire(import.meta.url);
// Hidden: an App's native half (its body queue's reports).
const { _admin } = require(join(ROOT, 'bindings-node', 'lib', 'tasks.js'));

/** Resolves once `check()` (sync or async) is truthy, polling every 20 ms; throws naming `what` after `limit` ms. */
async function until(check, what, limit = LIMIT) {
  const deadline = Date.now() + limit;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${limit} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Whether `pid` is a live process (a zombie is not). */
function alive(pid) {
  try {
    process.kill(pid, 0);
  } catch (e) {
    if (e.code === 'ESRCH') return false;
    throw e;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/**
 * A running worker of `a` (the fixture's app on the process pool unless
 * `options.pool` says otherwise) on a queue of its own, so what one test
 * leaves behind never reaches the next test's worker.
 */
function started(a, options) {
  const queue = `q-${randomUUID().slice(0, 8)}`;
  const w = a.worker({ pool: 'process', module: FIX('procs-app.mjs'), queues: [queue], ...options });
  const running = w.run();
  return {
    w,
    send: (name, args = []) => a.send(name, args, { queue }),
    run: async (name, args = [], timeout = LIMIT) => (await a.send(name, args, { queue })).get(timeout),
    async stop() {
      await w.stop({ grace: 1000 });
      await running;
    },
  };
}

/** The FAILED rejection of `p`. */
async function failure(p) {
  const e = await p.then(
    (v) => assert.fail(`expected a failure, got ${JSON.stringify(v)}`),
    (err) => err,
  );
  assert.equal(e.code, 'FAILED', e.message);
  return e;
}

test('a hard timeLimit kills a spinning child: TimeLimitExceeded within 3 s, the next run in a new child', async () => {
  const p = started(app, { concurrency: 1 });
  try {
    assert.equal(p.w.pool, 'process');
    const before = await p.run('pid');
    assert.notEqual(before, process.pid, 'the run went to the parent');
    const t = Date.now();
    const e = await failure(p.run('spin'));
    const took = Date.now() - t;
    assert.equal(e.remoteType, 'TimeLimitExceeded');
    assert.ok(took >= 900 && took < 3000, `${took} ms`);
    const after = await p.run('pid');
    assert.equal(typeof after, 'number');
    assert.notEqual(after, before, 'the spinning child was not replaced');
    assert.ok(!alive(before), `the killed child ${before} is still alive`);
  } finally {
    await p.stop();
  }
});

test('a CPU-bound body holds its process: on the process pool another run goes on meanwhile, on the event loop it waits', async () => {
  // Order is asserted, not speed, so a busy machine cannot flip it (a
  // slower machine only widens the window). The speed that follows (two
  // children against the event loop) is measured in bench/procs/cpu.mjs.
  const dir = mkdtempSync(join(tmpdir(), 'hw-hold-'));
  const overlap = async (options, waitMs) => {
    const w = cpuApp.worker({ concurrency: 2, ...options });
    const running = w.run();
    try {
      // Every child up first.
      await Promise.all(Array.from({ length: 2 }, () => cpuApp.send('cpu', [1000]).then((h) => h.get(LIMIT))));
      const mark = join(dir, randomUUID());
      const hold = await cpuApp.send('hold', [mark, 1500]);
      const peek = await cpuApp.send('peek', [mark, waitMs]);
      const [holdPid, began, ended] = await hold.get(LIMIT);
      const [peekPid, peeked] = await peek.get(LIMIT);
      return { during: began <= peeked && peeked < ended, apart: holdPid !== peekPid };
    } finally {
      await w.stop();
      await running;
    }
  };
  try {
    const procs = await overlap({ pool: 'process', module: FIX('cpu-app.mjs') }, 10_000);
    assert.deepEqual(procs, { during: true, apart: true }, 'the process pool ran the peek during the hold, in another child');
    // The control: on the event loop the peek (not waiting: it would hold
    // the loop itself) runs before or after the hold, never during it.
    const loop = await overlap({}, 0);
    assert.deepEqual(loop, { during: false, apart: false }, 'the event loop ran one body at a time');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

for (const pool of ['threads', 'process']) {
  test(`softTimeLimit aborts ctx.signal with SoftTimeLimitExceeded and the cleanup's answer is stored (${pool})`, async () => {
    // On the event loop, the same bodies on an app of their own (the
    // fixture's has a task with a hard limit, which the event loop refuses).
    const a = pool === 'threads' ? new App() : app;
    if (pool === 'threads') {
      a.task('soft', softBodies.soft, { softTimeLimit: 300 });
      a.task('soft_throw', softBodies.soft_throw, { softTimeLimit: 200 });
      a.task(
        'soft_sync',
        ([peek]) => {
          const end = Date.now() + 300;
          while (Date.now() < end) {
            // busy: the soft limit (50 ms) passes meanwhile
          }
          return peek ? _admin.nativeOf(a).host.softened() : null;
        },
        { softTimeLimit: 50 },
      );
    }
    const p = started(a, pool === 'threads' ? { pool, concurrency: 2 } : { concurrency: 2 });
    try {
      assert.equal(p.w.pool, pool);
      const t = Date.now();
      const r = await p.run('soft', [10_000]);
      assert.ok(Date.now() - t < 3000, `${Date.now() - t} ms`);
      assert.deepEqual(
        { aborted: r.aborted, name: r.name, isClass: r.isClass, limit: r.limit, ctxLimit: r.ctxLimit, cleanedUp: r.cleanedUp },
        { aborted: true, name: 'SoftTimeLimitExceeded', isClass: true, limit: 300, ctxLimit: 300, cleanedUp: true },
      );
      if (pool === 'process') assert.notEqual(r.pid, process.pid);
      else assert.equal(r.pid, process.pid);
      // Positive control: a run inside its soft limit is not aborted.
      const quick = await p.run('soft', [20]);
      assert.equal(quick.aborted, false);
      assert.equal(quick.name, null);
      // A body that rethrows the reason fails with its type.
      const e = await failure(p.run('soft_throw'));
      assert.equal(e.remoteType, 'SoftTimeLimitExceeded');
      assert.match(e.remoteMessage, /soft time limit \(200 ms\)/);
      if (pool === 'threads') {
        // A sync body past its soft limit cannot be told, but the core
        // reports it (positive control: the body itself drains the report
        // and finds its run), and the host drains what it is told even with
        // no async body in flight: nothing piles up.
        const native = _admin.nativeOf(a);
        const peeked = await p.run('soft_sync', [true]);
        assert.equal(peeked.length, 1, JSON.stringify(peeked));
        assert.equal(await p.run('soft_sync', [false]), null);
        assert.deepEqual(native.host.softened(), []);
      }
    } finally {
      await p.stop();
    }
  });
}

// The fixture's soft bodies, for the event-loop app above (same code, its
// own App: a module is one App).
const softBodies = {
  async soft([ms], ctx) {
    const signal = ctx.signal;
    await new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      signal.addEventListener('abort', () => {
        clearTimeout(timer);
        resolve();
      });
    });
    const r = signal.reason;
    return {
      aborted: signal.aborted,
      name: r?.name ?? null,
      isClass: r instanceof SoftTimeLimitExceeded,
      limit: r?.limit ?? null,
      ctxLimit: ctx.softTimeLimit,
      cleanedUp: true,
      pid: process.pid,
    };
  },
  async soft_throw(args, ctx) {
    await new Promise((resolve, reject) => {
      ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason));
    });
  },
};

test('a custom state recorded in a child is stored by the parent while the body runs', async () => {
  const p = started(app, { concurrency: 1 });
  const dir = mkdtempSync(join(tmpdir(), 'hw-progress-'));
  const gate = join(dir, 'gate');
  try {
    const h = await p.send('progress', [gate]);
    await until(async () => (await h.state()) === 'PROGRESS', 'PROGRESS');
    const info = await h.info();
    assert.notEqual(info.pid, process.pid, 'the body ran in the parent');
    writeFileSync(gate, 'go');
    assert.equal(await h.get(LIMIT), 'done');
    assert.equal(await h.state(), 'SUCCESS');
  } finally {
    await p.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('maxTasksPerChild: the pid changes after K runs', async () => {
  const p = started(app, { concurrency: 1, maxTasksPerChild: 2 });
  try {
    const pids = [];
    for (let i = 0; i < 5; i++) pids.push(await p.run('pid'));
    assert.equal(pids[0], pids[1]);
    assert.notEqual(pids[1], pids[2]);
    assert.equal(pids[2], pids[3]);
    assert.notEqual(pids[3], pids[4]);
    // The retired children exit.
    await until(() => !alive(pids[0]) && !alive(pids[2]), 'the retired children to exit', 5000);
  } finally {
    await p.stop();
  }
});

test('process.exit(1) in a body fails the run with WorkerLostError; the next one runs', async () => {
  const p = started(app, { concurrency: 1 });
  try {
    const before = await p.run('pid');
    const e = await failure(p.run('exit'));
    assert.equal(e.remoteType, 'WorkerLostError');
    assert.match(e.remoteMessage, /exitcode 1/);
    const after = await p.run('pid');
    assert.notEqual(after, before);
  } finally {
    await p.stop();
  }
});

test('acksLate + rejectOnWorkerLost: a run whose child died goes back and runs again', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'headway-procs-'));
  try {
    const p = started(app, { concurrency: 1 });
    try {
      assert.equal(await p.run('exit_once', [join(dir, 'marker')]), 'second time');
      assert.equal(readFileSync(join(dir, 'marker'), 'utf8'), 'x', 'the first attempt never ran');
    } finally {
      await p.stop();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('revoke(true) stops a busy body in its child within 2 s: REVOKED, and the pool goes on', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'headway-procs-'));
  const p = started(app, { concurrency: 1 });
  try {
    const marker = join(dir, 'started');
    const h = await p.send('spin_free', [marker]);
    // The body writes its pid, then spins.
    await until(() => existsSync(marker) && readFileSync(marker, 'utf8') !== '', 'the body to start', 10_000);
    const pid = Number(readFileSync(marker, 'utf8'));
    assert.ok(alive(pid));
    const t = Date.now();
    await h.revoke(true);
    await assert.rejects(h.get(2000), (e) => e.code === 'REVOKED');
    assert.equal(await h.state(), 'REVOKED');
    await until(() => !alive(pid), 'the terminated child to exit', 2000 - (Date.now() - t));
    assert.ok(Date.now() - t < 2000, `${Date.now() - t} ms`);
    const next = await p.run('pid');
    assert.equal(typeof next, 'number');
    assert.notEqual(next, pid);
  } finally {
    await p.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a Ctrl-C's SIGINT does not end a child (the parent stops them); SIGTERM does", async () => {
  const p = started(app, { concurrency: 1 });
  try {
    const pid = await p.run('pid');
    process.kill(pid, 'SIGINT');
    // A signal is delivered before its target next runs, so the child that
    // answers this run has had it: the same pid, alive.
    assert.equal(await p.run('pid'), pid);
    assert.ok(alive(pid));
    // Positive control: after SIGTERM the same child is gone. (No run
    // follows here: one handed to the dead child before the pool's reaper
    // saw the exit would fail with WorkerLostError.)
    process.kill(pid, 'SIGTERM');
    await until(() => !alive(pid), 'the child to end on SIGTERM', 3000);
  } finally {
    await p.stop();
  }
});

test('stop() ends the children', async () => {
  const p = started(app, { concurrency: 2 });
  const pids = await Promise.all([p.run('sleep', [300]), p.run('sleep', [300])]);
  assert.notEqual(pids[0], pids[1]);
  assert.ok(pids.every(alive));
  await p.stop();
  await until(() => !pids.some(alive), 'the children to exit after stop()', 5000);
});

test('bad options are refused, naming the option', () => {
  const a = new App();
  a.task('t', () => 1);
  assert.throws(
    () => a.worker({ pool: 'forks' }),
    (e) => e instanceof RangeError && /pool/.test(e.message) && /"threads" or "process"/.test(e.message),
  );
  assert.throws(
    () => a.worker({ timeLimit: 1000 }),
    // In Node's words: its pool option and its name for the soft limit.
    (e) => e instanceof RangeError && /timeLimit/.test(e.message) && /pool: 'process'/.test(e.message) && /`softTimeLimit`/.test(e.message),
  );
  assert.throws(
    () => a.worker({ maxTasksPerChild: 3 }),
    (e) => e instanceof RangeError && /maxTasksPerChild/.test(e.message) && /process pool/.test(e.message),
  );
  assert.throws(() => a.worker({ pool: 'process', maxTasksPerChild: 0 }), (e) => e instanceof RangeError && /maxTasksPerChild/.test(e.message));
  assert.throws(() => a.worker({ pool: 'process', softTimeLimit: 0 }), (e) => e instanceof RangeError && /softTimeLimit/.test(e.message));
  assert.throws(() => a.worker({ pool: 'process', module: 5 }), (e) => e instanceof TypeError && /module/.test(e.message));
  assert.throws(() => a.worker({ pool: 'process', timeLimit: '1s' }), (e) => e instanceof TypeError && /timeLimit/.test(e.message));
  assert.throws(() => a.worker({ pools: 'process' }), (e) => e instanceof TypeError && /pools/.test(e.message));
  // ±Infinity reaches the core (JSON has no Infinity) and is refused there,
  // never read as "not given".
  assert.throws(() => a.worker({ concurrency: Infinity }), (e) => e instanceof RangeError && /`concurrency`: must be a whole number/.test(e.message));
  assert.throws(() => a.worker({ pool: 'process', module: 'x.js', maxTasksPerChild: Infinity }), (e) => e instanceof RangeError && /maxTasksPerChild/.test(e.message));
  assert.throws(() => a.task('u', () => 1, { retries: Infinity }), (e) => e instanceof RangeError && /`retries`/.test(e.message));
  assert.throws(() => a.task('u', () => 1, { timeLimit: -Infinity }), (e) => e instanceof RangeError && /`timeLimit`: must be positive/.test(e.message));
  // A task with a hard limit of its own: the event loop refuses it.
  const b = new App();
  b.task('t', () => 1, { timeLimit: 1000 });
  assert.throws(
    () => b.worker(),
    (e) => /"t" has a `timeLimit`/.test(e.message) && /pool: 'process'/.test(e.message) && /`softTimeLimit`/.test(e.message),
  );
  assert.throws(() => b.task('u', () => 1, { timeLimit: -1 }), (e) => e instanceof RangeError && /timeLimit/.test(e.message));
  assert.throws(() => b.task('u', () => 1, { rejectOnWorkerLost: 1 }), (e) => e instanceof TypeError && /rejectOnWorkerLost/.test(e.message));
  // Positive controls: the same options on the process pool are taken
  // (made, not run: nothing is started), and so is a soft limit alone on
  // the event loop.
  for (const o of [{ timeLimit: 1000 }, { maxTasksPerChild: 3, maxMemoryPerChild: 200_000 }, {}]) {
    assert.equal(b.worker({ pool: 'process', module: FIX('procs-app.mjs'), ...o }).pool, 'process');
  }
  assert.equal(a.worker({ pool: 'prefork', module: pathToFileURL(FIX('procs-app.mjs')) }).pool, 'process');
  assert.equal(a.worker({ softTimeLimit: 1000 }).pool, 'threads');
  assert.equal(a.worker({ pool: 'threads' }).pool, 'threads');
});

test('a module without an App fails the worker at start, with the child saying why', async () => {
  const a = new App();
  a.task('t', () => 1);
  const w = a.worker({ pool: 'process', concurrency: 1, module: FIX('not-app.mjs') });
  await assert.rejects(w.run(), (e) => /could not start a child/.test(e.message) && /exited before it was ready \(exitcode 1\)/.test(e.message));
});

test('lib/child.js refuses to run by hand', () => {
  const r = spawnSync(process.execPath, [join(ROOT, 'bindings-node', 'lib', 'child.js'), FIX('procs-app.mjs')], { encoding: 'utf8', timeout: LIMIT });
  assert.equal(r.status, 1);
  assert.match(r.stderr, /started by a worker on the process pool, not by hand/);
});

test("how a module's App is found: default, `app`, the only App; several or none is an error", () => {
  const { appOf } = require(join(ROOT, 'bindings-node', 'lib', 'load.js'));
  const [x, y] = [new App(), new App()];
  assert.equal(appOf({ default: x, app: y }, App, 'm'), x);
  assert.equal(appOf({ default: {}, app: y }, App, 'm'), y);
  assert.equal(appOf({ default: { app: y, other: x } }, App, 'm'), y);
  assert.equal(appOf({ queue: x, n: 1 }, App, 'm'), x);
  assert.equal(appOf({ default: { theApp: x } }, App, 'm'), x);
  assert.equal(appOf({ a: x, default: { a: x } }, App, 'm'), x);
  assert.throws(() => appOf({ a: x, b: y }, App, 'm.js'), /m\.js exports several headway Apps \(a, b\)/);
  assert.throws(() => appOf({ default: 3 }, App, 'm.js'), /m\.js does not export a headway App .*a default export of type number/);
  assert.throws(() => appOf({}, App, 'm.js'), /no default export/);
});

describe('on Redis', { skip: RedisServer.missing() ?? false }, () => {
  let server;
  before(async () => {
    server = await new RedisServer().start();
  });
  after(() => server?.stop());

  /** A worker process of the fixture on this server; resolves once it printed `ready`. */
  function workerProcess(args, env) {
    const proc = spawn(process.execPath, args, {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const lines = [];
    let err = '';
    proc.stderr.on('data', (d) => {
      err += d;
    });
    createInterface({ input: proc.stdout }).on('line', (l) => lines.push(l));
    const exited = new Promise((r) => proc.on('exit', (code, signal) => r({ code, signal })));
    return {
      proc,
      lines,
      exited,
      err: () => err,
      ready: () =>
        until(
          () => {
            if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`the worker ended: ${lines.join('\n')}\n${err}`);
            return lines.some((l) => l.startsWith('ready'));
          },
          'the worker to be ready',
        ),
      kill: () => {
        if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
      },
    };
  }

  test('kill -9 of the worker leaves no child alive after 5 s', async () => {
    const prefix = `procs-${randomUUID().slice(0, 8)}:`;
    const env = { PROCS_BROKER: server.url, PROCS_PREFIX: prefix, PROCS_WORKER: JSON.stringify({ pool: 'process', concurrency: 2 }) };
    const wp = workerProcess([FIX('procs-app.mjs')], env);
    const broker = new RedisBroker(server.url, { prefix });
    const client = new App({ broker });
    try {
      await wp.ready();
      // Two long runs at once: one in each child (the default module, the
      // main script, served them).
      const pids = await Promise.all([0, 1].map(async () => (await client.sendTask('sleep', [500])).get(LIMIT)));
      assert.notEqual(pids[0], pids[1]);
      assert.ok(!pids.includes(wp.proc.pid), 'a run went to the parent');
      assert.ok(pids.every(alive), 'positive control: the children are alive before the kill');
      // Keep both busy, then kill the parent.
      await client.sendTask('sleep', [30_000]);
      await client.sendTask('sleep', [30_000]);
      wp.proc.kill('SIGKILL');
      await wp.exited;
      await until(() => !pids.some(alive), `children ${pids} to die with their parent`, 5000);
    } finally {
      wp.kill();
      await broker.close();
    }
  });

  test('kill -9 loses the run a child started (early ack) but not the one on deck: that one is recovered', async () => {
    const prefix = `procs-${randomUUID().slice(0, 8)}:`;
    const env = { PROCS_BROKER: server.url, PROCS_PREFIX: prefix, PROCS_WORKER: JSON.stringify({ pool: 'process', concurrency: 1 }) };
    const wp = workerProcess([FIX('procs-app.mjs')], env);
    const broker = new RedisBroker(server.url, { prefix, lease: 1000 });
    const client = new App({ broker });
    client.task('noted', ([path]) => {
      appendFileSync(path, 'start here\n');
      return process.pid;
    });
    client.task('pid', () => process.pid);
    const dir = mkdtempSync(join(tmpdir(), 'hw-deck-'));
    const [started, deck] = [join(dir, 'started.log'), join(dir, 'deck.log')];
    let w2 = null;
    let running = null;
    try {
      await wp.ready();
      const a = await client.sendTask('noted', [started, 60_000]);
      await until(() => existsSync(started), 'the first run to start in the child');
      const b = await client.sendTask('noted', [deck, 0]);
      // The second run is claimed (nothing left ready) and waits on deck.
      const ready = async () => {
        let n = 0;
        for (let step = 0; step < 10; step++) n += Number((await command(server.port, 'LLEN', `${prefix}{default}:ready:${step}`)).slice(1));
        return n;
      };
      await until(async () => (await ready()) === 0, 'the worker to claim the second run');
      assert.ok(!existsSync(deck), 'the run on deck ran while its child was busy');
      wp.proc.kill('SIGKILL');
      await wp.exited;
      // Another worker recovers the dead one's claims once the lease lapses.
      w2 = client.worker({ concurrency: 2 });
      running = w2.run();
      assert.equal(await b.get(LIMIT), process.pid, 'the run on deck was lost');
      // Positive control: w2 takes new work; the started run (acked as its
      // child took it) does not run again.
      assert.equal(await (await client.sendTask('pid', [])).get(LIMIT), process.pid);
      assert.equal(readFileSync(started, 'utf8').split('start').length - 1, 1);
      assert.notEqual(await a.state(), 'SUCCESS');
    } finally {
      wp.kill();
      if (w2) {
        await w2.stop();
        await running;
      }
      await broker.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("on Celery's layout: runs go to the children, and a hard limit kills", async () => {
    const url = server.url.replace(/\/\d+$/, '/6');
    const env = { PROCS_BROKER: url, PROCS_LAYOUT: 'celery', PROCS_WORKER: JSON.stringify({ pool: 'process', concurrency: 2 }) };
    const wp = workerProcess([FIX('procs-app.mjs')], env);
    const broker = RedisBroker.celery(url);
    const client = new App({ broker });
    try {
      await wp.ready();
      const pids = await Promise.all([0, 1].map(async () => (await client.sendTask('sleep', [300])).get(LIMIT)));
      assert.notEqual(pids[0], pids[1]);
      assert.ok(!pids.includes(wp.proc.pid), 'a run went to the parent');
      const t = Date.now();
      await assert.rejects((await client.sendTask('spin', [])).get(LIMIT), (e) => e.remoteType === 'TimeLimitExceeded');
      assert.ok(Date.now() - t < 3000, `took ${Date.now() - t} ms`);
      assert.equal(typeof (await (await client.sendTask('pid', [])).get(LIMIT)), 'number');
    } finally {
      wp.kill();
      await broker.close();
    }
  });

  test('the CLI: --pool process -c 2 --max-tasks-per-child 1 --time-limit 1 --soft-time-limit 0.5', async () => {
    const prefix = `procs-${randomUUID().slice(0, 8)}:`;
    const wp = workerProcess(
      [CLI, 'worker', 'tests-js/fixtures/procs-app.mjs', '--pool', 'process', '-c', '2', '--max-tasks-per-child', '1', '--time-limit', '1', '--soft-time-limit', '0.5'],
      { PROCS_BROKER: server.url, PROCS_PREFIX: prefix },
    );
    const broker = new RedisBroker(server.url, { prefix });
    const client = new App({ broker });
    try {
      await wp.ready();
      assert.match(wp.lines[0], /concurrency 2, prefetch 16, pool process$/);
      // One run per child: three runs, three pids, none the CLI's.
      const pids = [];
      for (let i = 0; i < 3; i++) pids.push(await (await client.sendTask('pid', [])).get(LIMIT));
      assert.equal(new Set(pids).size, 3, `${pids}`);
      assert.ok(!pids.includes(wp.proc.pid));
      // A body's stdout is the worker's.
      const text = `said ${randomUUID()}`;
      await (await client.sendTask('say', [text])).get(LIMIT);
      await until(() => wp.lines.includes(text), 'the body\'s line on the worker\'s stdout', 5000);
      // The worker's hard limit (1 s) ends a body with none of its own.
      const t = Date.now();
      const e = await failure((await client.sendTask('spin_free', [])).get(LIMIT));
      assert.equal(e.remoteType, 'TimeLimitExceeded');
      assert.ok(Date.now() - t < 3000);
      // The task's own soft limit (300 ms) wins over the worker's (500 ms).
      const r = await (await client.sendTask('soft', [10_000])).get(LIMIT);
      assert.equal(r.name, 'SoftTimeLimitExceeded');
      assert.equal(r.limit, 300);
      wp.proc.kill('SIGTERM');
      const { code } = await wp.exited;
      assert.equal(code, 0, wp.err());
    } finally {
      wp.kill();
      await broker.close();
    }
  });

  test('the CLI refuses seconds that are not a number, and a module that starts its worker at import', () => {
    let r = spawnSync(process.execPath, [CLI, 'worker', 'tests-js/fixtures/procs-app.mjs', '--pool', 'process', '--time-limit', 'soon'], {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: LIMIT,
    });
    assert.equal(r.status, 2);
    assert.match(r.stderr, /--time-limit must be a number of seconds, not "soon"/);
    r = spawnSync(process.execPath, [CLI, 'worker', 'tests-js/fixtures/procs-app.mjs', '--pool', 'forks'], { cwd: ROOT, encoding: 'utf8', timeout: LIMIT });
    assert.equal(r.status, 2);
    assert.match(r.stderr, /pool/);
    r = spawnSync(process.execPath, [CLI, 'worker', 'tests-js/fixtures/starts-worker.mjs', '--pool', 'process', '-c', '1'], {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: LIMIT,
    });
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /app\.worker\(\) was called while a process-pool child imported the app's module/);
    assert.match(r.stderr, /could not start a child/);
  });
});
