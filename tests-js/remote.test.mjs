// `npx headway inspect` / `headway control` (Celery's inspect and control
// on headway's own layouts): a worker process answers from what it holds
// and changes as told; the CLI asks from another process, as an operator
// does. The words, the gathering and the text are the core's (Python's CLI
// prints the same).
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { RedisServer } from './fixtures/brokers.mjs';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const CLI = fileURLToPath(new URL('../bindings-node/cli.js', import.meta.url));
const APP = 'tests-js/fixtures/remote-app.mjs';
const WAIT = 20_000;
const missing = RedisServer.missing();
let server;
let url;

before(async () => {
  if (missing) return;
  server = await new RedisServer().start();
  url = server.db(11);
});
after(() => server?.stop());

function cli(...args) {
  return spawnSync(process.execPath, [CLI, ...args], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 60_000,
    env: { ...process.env, HEADWAY_TEST_URL: url ?? '' },
  });
}

/** The one node's answer to `headway <kind> APP <args> --json`. */
function answer(kind, ...args) {
  const r = cli(kind, APP, ...args, '--json', '--timeout', '10');
  assert.ok(r.stdout, r.stderr);
  const got = JSON.parse(r.stdout);
  const nodes = Object.keys(got);
  assert.equal(nodes.length, 1, r.stdout);
  return got[nodes[0]];
}

async function until(what, cond) {
  const end = Date.now() + WAIT;
  for (;;) {
    const got = cond();
    if (got) return got;
    assert.ok(Date.now() < end, `never: ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function startWorker() {
  const proc = spawn(process.execPath, [CLI, 'worker', APP, '-c', '1', '--prefetch', '2'], {
    cwd: ROOT,
    env: { ...process.env, HEADWAY_TEST_URL: url },
  });
  const out = createInterface({ input: proc.stdout });
  await new Promise((resolve, reject) => {
    out.on('line', (l) => {
      if (l === 'ready') resolve();
    });
    proc.on('exit', () => reject(new Error('the worker ended')));
  });
  return proc;
}

test('inspect shows what a worker process holds, control changes it and shuts it down', { skip: missing ?? false }, async () => {
  const proc = await startWorker();
  const exited = new Promise((r) => proc.on('exit', (code) => r(code)));
  try {
    assert.deepEqual(answer('inspect', 'ping'), { ok: 'pong' });
    const gate = join(mkdtempSync(join(tmpdir(), 'headway-remote-')), 'go');
    // Two runs sent from another process.
    const send = spawnSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const { default: app } = await import(${JSON.stringify(join(ROOT, APP))});
         const a = await app.send('r.hold', [${JSON.stringify(gate)}]);
         const b = await app.send('r.hold', [${JSON.stringify(gate)}]);
         console.log(a.id, b.id);
         process.exit(0);`,
      ],
      { cwd: ROOT, encoding: 'utf8', timeout: 60_000, env: { ...process.env, HEADWAY_TEST_URL: url } },
    );
    assert.equal(send.status, 0, send.stderr);
    const ids = send.stdout.trim().split(' ');
    const [active, reserved] = await until('one active, one reserved', () => {
      const a = answer('inspect', 'active');
      const r = answer('inspect', 'reserved');
      return a.length === 1 && r.length === 1 ? [a[0], r[0]] : null;
    });
    assert.deepEqual(new Set([active.id, reserved.id]), new Set(ids));
    assert.equal(active.name, 'r.hold');
    assert.deepEqual(active.args, [gate]);
    assert.equal(active.worker_pid, proc.pid);
    assert.ok(active.time_start > 1e9);
    assert.equal(reserved.time_start, null);
    assert.deepEqual(answer('inspect', 'registered'), ['r.add', 'r.hold']);
    writeFileSync(gate, '');
    await until('nothing held', () => answer('inspect', 'active').length === 0 && answer('inspect', 'reserved').length === 0);
    // The text form.
    const text = cli('inspect', APP, 'ping', '--timeout', '10');
    assert.equal(text.status, 0, text.stderr);
    assert.match(text.stdout, /-> headway\.\d+@.*: OK pong\n\n1 node online\.\n/);
    // Controls.
    assert.deepEqual(answer('control', 'pool-grow', '2'), { ok: 'pool will grow' });
    assert.equal(answer('inspect', 'stats').pool['max-concurrency'], 3);
    assert.deepEqual(answer('control', 'rate-limit', 'r.add', '10/m'), { ok: 'new rate limit set successfully' });
    const nope = cli('control', APP, 'rate-limit', 'r.nope', '1/s', '--timeout', '10');
    assert.equal(nope.status, 1);
    assert.match(nope.stdout, /ERROR unknown task "r\.nope"/);
    const bad = cli('control', APP, 'rate-limit', 'r.add', 'fast');
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /Invalid rate limit string/);
    // Still running (the positive control), then shut down.
    assert.equal(proc.exitCode, null);
    assert.deepEqual(answer('control', 'shutdown'), { ok: 'shutting down 1 worker(s)' });
    assert.equal(await exited, 0);
    const none = cli('inspect', APP, 'ping', '--timeout', '0.5');
    assert.equal(none.status, 1);
    assert.match(none.stderr, /No nodes replied within time constraint/);
  } finally {
    if (proc.exitCode === null) proc.kill('SIGKILL');
  }
});

test('a bad inspect word is refused naming the words there are', () => {
  const r = cli('inspect', APP, 'nope');
  assert.equal(r.status, 2);
  assert.match(r.stderr, /inspect nope: unknown; expected one of: ping, active/);
  const missingWhat = cli('inspect', APP);
  assert.equal(missingWhat.status, 2);
  assert.match(missingWhat.stderr, /inspect: what to inspect is missing/);
});

test("RedisBroker.celery's taskSendSentEvent sends Celery's task-sent for each message", { skip: missing ?? false }, async () => {
  const { createConnection } = await import('node:net');
  const { App, RedisBroker } = await import('headway');
  const celeryUrl = server.db(12);
  // A subscriber to Celery's task-sent channel, over raw RESP.
  const sub = createConnection({ host: '127.0.0.1', port: server.port });
  let seen = '';
  sub.on('data', (d) => {
    seen += d.toString('latin1');
  });
  const pattern = '*celeryev/task.sent';
  sub.write(`*2\r\n$10\r\nPSUBSCRIBE\r\n$${pattern.length}\r\n${pattern}\r\n`);
  await until('subscribed', () => seen.includes('psubscribe'));
  // The event's body is base64 in kombu's envelope and starts with the
  // run's uuid: its first 45 bytes encode the same every time.
  const mark = (id) => Buffer.from(`{"uuid": "${id}"`).toString('base64').slice(0, 60);
  const quiet = new App({ broker: RedisBroker.celery(celeryUrl) });
  const loud = new App({ broker: RedisBroker.celery(celeryUrl, { taskSendSentEvent: true }) });
  const q = (await quiet.sendTask('r.add', [1, 1], { queue: 'nobody' })).id;
  const h = (await loud.sendTask('r.add', [2, 2], { queue: 'nobody' })).id;
  await until('the task-sent event', () => seen.includes(mark(h)));
  sub.destroy();
  // The option off sends none.
  assert.ok(!seen.includes(mark(q)));
  assert.throws(() => RedisBroker.celery(celeryUrl, { taskSendSentEvent: 'yes' }), TypeError);
});
