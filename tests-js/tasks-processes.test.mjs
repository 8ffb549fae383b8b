// Whole processes: a process must exit by itself after stop(); the CLI
// worker and beat (SIGINT/SIGTERM stop them gracefully); and, on Redis, a
// worker killed with SIGKILL whose acksLate messages another worker
// recovers, a worker whose body blocks its event loop past the lease (which
// loses nothing: the lease is the core's), and two workers sharing a queue.
// Each child has a time limit: one that hangs fails the test instead of
// hanging the suite. Nothing sleeps to hope something happened: each wait
// polls for its condition with a deadline.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { App, RedisBroker } from 'headway';

import { RedisServer, command } from './fixtures/brokers.mjs';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const FIX = (name) => fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url));
const CLI = join(ROOT, 'bindings-node', 'cli.js');
const LIMIT = 20_000;

/** Resolves once `check()` (sync or async) is truthy, polling every 50 ms; throws naming `what` after `limit` ms. */
async function until(check, what, limit = LIMIT) {
  const deadline = Date.now() + limit;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${limit} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A Redis reply's integer (`:6` → 6). */
const int = (reply) => {
  assert.match(reply, /^:-?\d+$/, reply);
  return Number(reply.slice(1));
};

/** A child process whose stdout is read line by line. */
class Child {
  constructor(args, options = {}) {
    this.proc = spawn(process.execPath, args, {
      cwd: options.cwd ?? ROOT,
      env: { ...process.env, ...(options.env ?? {}) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.lines = [];
    this.err = '';
    this.waiters = [];
    this.proc.stderr.on('data', (d) => {
      this.err += d;
    });
    createInterface({ input: this.proc.stdout }).on('line', (line) => {
      this.lines.push(line);
      for (const w of this.waiters.splice(0)) w();
    });
    this.exited = new Promise((resolve) => {
      this.proc.on('exit', (code, signal) => {
        for (const w of this.waiters.splice(0)) w();
        resolve({ code, signal });
      });
    });
  }

  /** Resolves once a line containing `text` has been printed. */
  async until(text, limit = LIMIT) {
    const deadline = Date.now() + limit;
    for (;;) {
      if (this.lines.some((l) => l.includes(text))) return this.lines;
      if (this.proc.exitCode !== null || this.proc.signalCode !== null) {
        throw new Error(`child ended before ${JSON.stringify(text)}: ${this.lines.join('\n')}\n${this.err}`);
      }
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no ${JSON.stringify(text)} within ${limit} ms: ${this.lines.join('\n')}\n${this.err}`);
      await new Promise((r) => {
        this.waiters.push(r);
        setTimeout(r, Math.min(left, 200));
      });
    }
  }

  /** Resolves to the exit once the child has exited on its own within `limit`. */
  async finish(limit = LIMIT) {
    let timer;
    const late = new Promise((r) => {
      timer = setTimeout(() => r(null), limit);
    });
    const got = await Promise.race([this.exited, late]);
    clearTimeout(timer);
    if (got === null) {
      this.kill();
      throw new Error(`child did not exit within ${limit} ms: ${this.lines.join('\n')}\n${this.err}`);
    }
    return { ...got, out: this.lines.join('\n'), err: this.err };
  }

  kill() {
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill('SIGKILL');
  }
}

for (const mode of ['stopped', 'stuck', 'beat', 'scheduler', 'pending-get']) {
  test(`a process exits on its own after stop() (${mode})`, () => {
    const start = Date.now();
    const r = spawnSync(process.execPath, [FIX('task-exit.mjs'), mode], { encoding: 'utf8', timeout: 10_000 });
    assert.equal(r.error, undefined, `the child did not exit: ${r.error} ${r.stdout} ${r.stderr}`);
    assert.equal(r.status, 0, r.stderr);
    const expected = { stopped: '1 2\nstopped', stuck: 'stopped stuck', beat: 'stopped beat', scheduler: 'stopped scheduler', 'pending-get': '7' };
    assert.equal(r.stdout.trim(), expected[mode]);
    assert.ok(Date.now() - start < 10_000);
  });
}

test('the CLI worker on a tiny app: header, ready, SIGTERM stops it gracefully', async () => {
  const child = new Child([CLI, 'worker', 'tests-js/fixtures/tiny-app.mjs', '-c', '2', '-Q', 'default,extra']);
  try {
    const lines = await child.until('ready');
    assert.match(lines[0], /^headway worker worker-\w+: app tests-js\/fixtures\/tiny-app.mjs, queues default,extra, concurrency 2, prefetch 8, pool threads$/);
    assert.equal(lines[1], 'tasks: tiny.add, tiny.hello');
    child.proc.kill('SIGTERM');
    const { code, out, err } = await child.finish(5000);
    assert.equal(code, 0, err);
    assert.match(out.split('\n').at(-1), /stopped after settling 0$/);
  } finally {
    child.kill();
  }
});

test("the CLI reads Python's forms too: -A, -P and --grace in seconds", async () => {
  // --grace was milliseconds here and seconds in Python's CLI; both now read
  // the core's parser, so 0.5 is half a second (a whole number of ms was
  // all this CLI took before).
  const child = new Child([CLI, 'worker', '-A', 'tests-js/fixtures/tiny-app.mjs', '-P', 'threads', '--grace', '0.5', '-c1']);
  try {
    const lines = await child.until('ready');
    assert.match(lines[0], /^headway worker worker-\w+: app tests-js\/fixtures\/tiny-app.mjs, queues default, concurrency 1, prefetch 4, pool threads$/);
    child.proc.kill('SIGTERM');
    const { code, err } = await child.finish(5000);
    assert.equal(code, 0, err);
  } finally {
    child.kill();
  }
  const r = spawnSync(process.execPath, [CLI, 'worker', 'tests-js/fixtures/tiny-app.mjs', '--grace', 'soon'], { cwd: ROOT, encoding: 'utf8', timeout: LIMIT });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /^headway: worker: --grace must be a number of seconds, not "soon"\nusage: headway worker <app.js>/);
});

test('the CLI admin serves the page and API on node:http, a worker beside it, until SIGTERM', async () => {
  const child = new Child([CLI, 'admin', 'tests-js/fixtures/tiny-app.mjs', '--port', '0', '--worker', '1']);
  try {
    const lines = await child.until('generated token');
    const url = lines[0].match(/^headway admin: (http:\/\/127\.0\.0\.1:\d+\/) \(log in with the token\)$/)?.[1];
    assert.ok(url, lines.join('\n'));
    const token = lines[1].match(/^headway admin: generated token (\S+)$/)?.[1];
    assert.ok(token && token.length >= 16, lines[1]);
    assert.equal((await fetch(`${url}health`)).status, 200);
    // The positive control for the token: refused without it, answered with it.
    assert.equal((await fetch(`${url}api/workers`)).status, 401);
    const r = await fetch(`${url}api/workers`, { headers: { Authorization: `Bearer ${token}` } });
    assert.equal(r.status, 200);
    child.proc.kill('SIGTERM');
    const { code, out, err } = await child.finish(5000);
    assert.equal(code, 0, err);
    assert.equal(out.split('\n').at(-1), 'headway admin: stopped');
  } finally {
    child.kill();
  }
  const bad = spawnSync(process.execPath, [CLI, 'admin', 'tests-js/fixtures/tiny-app.mjs', '--token', 'short'], { cwd: ROOT, encoding: 'utf8', timeout: LIMIT });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /token/);
});

test('the package bin (what `npx headway` runs) is the CLI and is executable', () => {
  // npm does not link a package's own bin into its own node_modules/.bin, so
  // in this checkout `npx headway` would go to the registry; what a consumer's
  // npx runs is package.json's bin entry — run exactly that.
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
  const bin = join(ROOT, pkg.bin.headway);
  assert.ok(existsSync(bin), bin);
  assert.match(readFileSync(bin, 'utf8').split('\n')[0], /^#!.*node/);
  const r = spawnSync(bin, ['--help'], { cwd: ROOT, encoding: 'utf8', timeout: LIMIT });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /usage: headway worker <app.js>/);
});

test('the CLI refuses a module that is not an app, and one that does not load', () => {
  let r = spawnSync(process.execPath, [CLI, 'worker', 'tests-js/fixtures/not-app.mjs'], { cwd: ROOT, encoding: 'utf8', timeout: LIMIT });
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /does not export a headway App/);
  r = spawnSync(process.execPath, [CLI, 'worker', 'tests-js/fixtures/missing.mjs'], { cwd: ROOT, encoding: 'utf8', timeout: LIMIT });
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /cannot import/);
  r = spawnSync(process.execPath, [CLI, 'worker', 'tests-js/fixtures/tiny-app.mjs', '-c', 'many'], { cwd: ROOT, encoding: 'utf8', timeout: LIMIT });
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /-c must be a whole number/);
  r = spawnSync(process.execPath, [CLI, 'serve'], { cwd: ROOT, encoding: 'utf8', timeout: LIMIT });
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /unknown command "serve"/);
});

test('the CLI beat runs the app\'s beat (a CommonJS module), SIGINT stops it', async () => {
  const before = Date.now();
  const child = new Child([CLI, 'beat', 'tests-js/fixtures/beat-app.cjs']);
  try {
    const lines = await child.until('ready');
    assert.equal(lines[0], 'headway beat: app tests-js/fixtures/beat-app.cjs, 1 entries');
    // The line is the core's (task::banner), Python's CLI's too: RFC 3339,
    // UTC, milliseconds, `Z`, an hour from the start.
    const m = /^ {2}tick: next at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)$/.exec(lines[1]);
    assert.ok(m, lines[1]);
    const due = Date.parse(m[1]);
    assert.ok(due >= before + 3_600_000 - 1000 && due <= Date.now() + 3_600_000 + 1000, m[1]);
    child.proc.kill('SIGINT');
    const { code, out, err } = await child.finish(5000);
    assert.equal(code, 0, err);
    assert.equal(out.split('\n').at(-1), 'headway beat: stopped');
  } finally {
    child.kill();
  }
});

// ---------------------------------------------------------------- on Redis

const missing = RedisServer.missing();

describe('worker processes on Redis', { skip: missing ?? false }, () => {
  let server;
  let dir;
  before(async () => {
    server = await new RedisServer().start();
    dir = mkdtempSync(join(tmpdir(), 'headway-procs-'));
  });
  after(() => {
    server?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const runs = (log) =>
    existsSync(log)
      ? readFileSync(log, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => {
            const [who, i] = l.split(' ');
            return [who, Number(i)];
          })
      : [];

  test('the CLI worker runs tasks another process sends', async () => {
    const prefix = `cli${randomUUID().slice(0, 6)}:`;
    const env = { TINY_BROKER: server.url, TINY_PREFIX: prefix };
    const child = new Child([CLI, 'worker', 'tests-js/fixtures/tiny-app.mjs', '-Q', 'default,extra'], { env });
    try {
      await child.until('ready');
      const app = new App({ broker: new RedisBroker(server.url, { prefix }) });
      assert.equal(await (await app.sendTask('tiny.add', [2, 3])).get(LIMIT), 5);
      assert.equal(await (await app.sendTask('tiny.hello', ['ada'], { queue: 'extra' })).get(LIMIT), 'hello ada');
      child.proc.kill('SIGINT');
      const { code, out, err } = await child.finish(5000);
      assert.equal(code, 0, err);
      assert.match(out.split('\n').at(-1), /stopped after settling 2$/);
    } finally {
      child.kill();
    }
  });

  test('a worker killed with SIGKILL loses nothing: another recovers and runs every acksLate message, each at most twice', async () => {
    const log = join(dir, 'k9.log');
    const prefix = `k9${randomUUID().slice(0, 6)}:`;
    const app = new App({ broker: new RedisBroker(server.url, { prefix }) });
    const handles = [];
    for (let i = 0; i < 6; i++) handles.push(await app.sendTask('job', [i]));
    const doomed = new Child([FIX('task-worker.mjs'), server.url, prefix, 'doomed', log, 'hold']);
    let rescuer = null;
    try {
      await doomed.until('ready');
      // All six claimed (held in Redis, unacked), two of them running
      // (concurrency 2), four prefetched: the held count is the positive
      // control for the four that did not run.
      const held = `${prefix}{default}:held:doomed`;
      await until(async () => runs(log).length >= 2 && int(await command(server.port, 'LLEN', held)) === 6, 'six held, two running');
      assert.equal(runs(log).length, 2);
      doomed.proc.kill('SIGKILL');
      const { signal } = await doomed.finish(10_000);
      assert.equal(signal, 'SIGKILL');
      rescuer = new Child([FIX('task-worker.mjs'), server.url, prefix, 'rescuer', log, 'late']);
      await rescuer.until('ready');
      assert.deepEqual(await Promise.all(handles.map((h) => h.get(LIMIT))), [0, 1, 2, 3, 4, 5]);
    } finally {
      doomed.kill();
      rescuer?.kill();
    }
    const all = runs(log);
    const per = new Map();
    for (const [, i] of all) per.set(i, (per.get(i) ?? 0) + 1);
    assert.deepEqual([...per.keys()].sort(), [0, 1, 2, 3, 4, 5]); // none lost
    assert.ok([...per.values()].every((n) => n <= 2), JSON.stringify([...per])); // each at most twice
    assert.deepEqual(
      [...new Set(all.filter(([who]) => who === 'rescuer').map(([, i]) => i))].sort(),
      [0, 1, 2, 3, 4, 5],
    );
  });

  test('a body that blocks its event loop past the lease loses nothing: the lease holds, it runs and is stored once', async () => {
    // Two processes claim one acksLate run each and spin synchronously for
    // 4.5 leases (lease 1000 ms). `blocked` just spins: its lease is
    // refreshed by the broker's tokio task, which a blocked JS thread does
    // not stop. `frozen` is SIGSTOPped as well — the whole process, tokio
    // included, as a dead worker would be — the positive control: its lease
    // lapses and a recover() hands its claim back while `blocked` keeps
    // its own. (The SIGKILL test above shows the same for a killed worker.)
    const log = join(dir, 'blocked.log');
    const prefix = `bl${randomUUID().slice(0, 6)}:`;
    const started = (who, i) => existsSync(log) && readFileSync(log, 'utf8').includes(`${who} ${i} start\n`);
    const lines = () => (existsSync(log) ? readFileSync(log, 'utf8').split('\n').filter(Boolean) : []);
    const app = new App({ broker: new RedisBroker(server.url, { prefix, consumer: 'observer', lease: 1000 }) });
    const broker = new RedisBroker(server.url, { prefix, consumer: 'recoverer', lease: 1000 });
    // recover() needs the broker connected, which an App on it does.
    void new App({ broker });
    const spin = '4500';
    const blocked = new Child([FIX('busy-worker.mjs'), server.url, prefix, 'blocked', 'busy', log, spin]);
    const frozen = new Child([FIX('busy-worker.mjs'), server.url, prefix, 'frozen', 'frozen', log, spin]);
    let rescuer = null;
    try {
      await blocked.until('ready');
      await frozen.until('ready');
      const one = await app.sendTask('job', [1], { queue: 'busy' });
      const two = await app.sendTask('job', [2], { queue: 'frozen' });
      await until(() => started('blocked', 1) && started('frozen', 2), 'both bodies to start spinning');
      frozen.proc.kill('SIGSTOP');
      // A second worker on both queues, running its own periodic recover().
      rescuer = new Child([FIX('busy-worker.mjs'), server.url, prefix, 'rescuer', 'busy,frozen', log, '0']);
      await rescuer.until('ready');
      // recover() (ours, and the rescuer's own) until the frozen claim is
      // back: the positive control...
      await until(async () => {
        await broker.recover();
        return int(await command(server.port, 'LLEN', `${prefix}{frozen}:held:frozen`)) === 0;
      }, "the frozen worker's claim to be recovered");
      // ...while the blocked worker, spinning all along, keeps its claim
      // under a live lease...
      assert.ok(!lines().includes('blocked 1 end'), `the spin ended before the control recovered: ${lines()}`);
      assert.equal(int(await command(server.port, 'LLEN', `${prefix}{busy}:held:blocked`)), 1);
      assert.ok(int(await command(server.port, 'PTTL', `${prefix}{busy}:lease:blocked`)) > 0, 'the blocked worker lease is live');
      // ...and every recover() until its spin ends (4.5 leases in all)
      // finds nothing more to hand back.
      await until(async () => {
        assert.equal(await broker.recover(), 0);
        return lines().includes('blocked 1 end');
      }, 'the spin to end');
      assert.equal(await one.get(LIMIT), 1);
      assert.equal(await two.get(LIMIT), 2);
      for (const c of [blocked, rescuer]) c.proc.kill('SIGINT');
      for (const c of [blocked, rescuer]) {
        const { code, err } = await c.finish(10_000);
        assert.equal(code, 0, err);
      }
    } finally {
      frozen.kill();
      blocked.kill();
      rescuer?.kill();
      await broker.close();
    }
    const all = lines();
    // The blocked run ran once, by its worker, and no one else touched it...
    assert.deepEqual(
      all.filter((l) => / 1 /.test(l)),
      ['blocked 1 start', 'blocked 1 end'],
    );
    // ...while the frozen one's claim was run again elsewhere.
    assert.ok(all.includes('rescuer 2 start') && all.includes('rescuer 2 end'), all.join('\n'));
  });

  test('two worker processes on one queue run each message once', async () => {
    const log = join(dir, 'two.log');
    const prefix = `two${randomUUID().slice(0, 6)}:`;
    const workers = [1, 2].map((n) => new Child([FIX('task-worker.mjs'), server.url, prefix, `w${n}`, log, 'early']));
    try {
      for (const w of workers) await w.until('ready');
      const app = new App({ broker: new RedisBroker(server.url, { prefix }) });
      const handles = [];
      for (let i = 0; i < 40; i++) handles.push(await app.sendTask('job', [i]));
      assert.deepEqual(await Promise.all(handles.map((h) => h.get(LIMIT))), [...Array(40).keys()]);
      for (const w of workers) w.proc.kill('SIGINT');
      for (const w of workers) {
        const { code, err } = await w.finish(10_000);
        assert.equal(code, 0, err);
      }
    } finally {
      for (const w of workers) w.kill();
    }
    const per = new Map();
    for (const [, i] of runs(log)) per.set(i, (per.get(i) ?? 0) + 1);
    assert.equal(per.size, 40);
    assert.ok([...per.values()].every((n) => n === 1), JSON.stringify([...per]));
  });
});
