// headway's log records in Node: an App's `logger`, the default stderr
// line, and the CLI's --loglevel / --log-format.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { App, RedisBroker } from 'headway';

import { RedisServer } from './fixtures/brokers.mjs';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const CLI = fileURLToPath(new URL('../bindings-node/cli.js', import.meta.url));
const LOG_APP = 'tests-js/fixtures/log-app.mjs';

async function until(cond, what, ms = 10_000) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

test("an App's logger receives the worker's warning with the run it is about", async () => {
  const got = [];
  const logger = {
    debug: () => {},
    info: () => {},
    warn: (message, fields) => got.push({ message, ...fields }),
    error: (message, fields) => got.push({ message, level: 'error', ...fields }),
  };
  const app = new App({ logger });
  app.task('here.add', ([a, b]) => a + b);
  const lost = await app.sendTask('elsewhere.task', [1]);
  const fine = await app.send('here.add', [1, 2]);
  const w = app.worker({ concurrency: 1 });
  const running = w.run();
  try {
    // The positive control: the registered run went through the same worker.
    assert.equal(await fine.get(10_000), 3);
    await until(() => got.some((r) => r.logger === 'headway.worker'), 'the warning');
  } finally {
    await w.stop({ grace: 5_000 });
    await running;
  }
  const r = got.find((x) => x.logger === 'headway.worker');
  assert.match(r.message, /received unregistered task "elsewhere\.task"/);
  assert.equal(r.taskId, lost.id);
  assert.equal(r.taskName, 'elsewhere.task');
  assert.equal(typeof r.worker, 'string');
  assert.equal(typeof r.ts, 'number');
  assert.ok(!got.some((x) => x.taskId === fine.id), 'the good run left no record');
});

test("on Celery's layout the hand-back warning names the run it hands back", async (t) => {
  const server = await new RedisServer().start();
  t.after(() => server.stop());
  const got = [];
  const logger = { debug: () => {}, info: () => {}, warn: (message, fields) => got.push({ message, ...fields }), error: () => {} };
  const app = new App({ broker: RedisBroker.celery(server.db(5)), logger });
  app.task('here.mul', ([a, b]) => a * b);
  const foreign = await app.sendTask('celery.only', [1]);
  const fine = await app.send('here.mul', [2, 3]);
  const w = app.worker({ concurrency: 1 });
  const running = w.run();
  try {
    // The positive control: the registered run went through.
    assert.equal(await fine.get(10_000), 6);
    await until(() => got.some((r) => r.logger === 'headway.celery'), 'the hand-back warning');
  } finally {
    await w.stop({ grace: 5_000 });
    await running;
  }
  const r = got.find((x) => x.logger === 'headway.celery');
  assert.match(r.message, /handing it back/);
  assert.equal(r.taskId, foreign.id);
  assert.equal(r.taskName, 'celery.only');
});

test('a logger without the four methods is a TypeError naming it', () => {
  for (const bad of [null, 'console', { warn() {} }]) {
    assert.throws(() => new App({ logger: bad }), (e) => {
      assert.equal(e.code, 'ERR_INVALID_ARG_TYPE');
      assert.match(e.message, /"logger"/);
      return true;
    });
  }
});

test('with no logger, the warning is a plain line on stderr', () => {
  const r = spawnSync(
    process.execPath,
    ['--input-type=module', '-e', `
      import app from './${LOG_APP}';
      const w = app.worker({ concurrency: 1 });
      const running = w.run();
      const until = Date.now() + 10000;
      while (w.settled < 1 && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
      await w.stop({ grace: 5000 });
      await running;
    `],
    { cwd: ROOT, encoding: 'utf8', timeout: 60_000 },
  );
  assert.equal(r.status, 0, r.stderr);
  const lost = r.stdout.split(/\s+/)[1];
  assert.ok(lost);
  assert.match(r.stderr, /^headway worker \S+: received unregistered task "elsewhere\.task"; recorded as failed$/m);
});

test('the CLI writes JSON lines naming the run with --log-format json', async () => {
  const proc = spawn(process.execPath, [CLI, 'worker', LOG_APP, '--log-format', 'json', '-c', '1'], { cwd: ROOT });
  try {
    const out = createInterface({ input: proc.stdout });
    const err = createInterface({ input: proc.stderr });
    const lost = await new Promise((resolve) => out.once('line', (l) => resolve(l.split(' ')[1])));
    const line = await new Promise((resolve) => err.once('line', resolve));
    const rec = JSON.parse(line);
    assert.equal(rec.logger, 'headway.worker');
    assert.equal(rec.level, 'WARNING');
    assert.equal(rec.task_id, lost);
    assert.equal(rec.task_name, 'elsewhere.task');
    assert.equal(typeof rec.ts, 'number');
  } finally {
    proc.kill('SIGKILL');
  }
});

test('the CLI refuses an unknown level or format by name', () => {
  for (const [flag, value] of [['--loglevel', 'loud'], ['--log-format', 'xml']]) {
    const r = spawnSync(process.execPath, [CLI, 'worker', LOG_APP, flag, value], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.status, 2);
    assert.match(r.stderr, new RegExp(`"${value}"`));
  }
});
