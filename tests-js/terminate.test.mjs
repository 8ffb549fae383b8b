// `revoke({ terminate: true })` stops a run in whichever process runs it:
// the worker is a child process on Redis — headway's own layout and
// Celery's — and this process, which only sends and revokes, terminates
// one of its runs; the run nobody terminated is the positive control and
// finishes with its value. And the `signal` option: a name or a number,
// read by the core; a bad one is a RangeError naming it, one of the wrong
// type a TypeError. Nothing sleeps to hope: each wait polls its condition
// with a deadline, and a child that hangs fails the test.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { App, RedisBroker } from 'headway';

import { RedisServer } from './fixtures/brokers.mjs';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const WORKER = fileURLToPath(new URL('./fixtures/slow-worker.mjs', import.meta.url));
const LIMIT = 20_000;
/** How long a terminate may take to stop a run in another process. */
const STOPS_WITHIN = 2000;

/** Resolves to how long `check()` took to be truthy, polling every 10 ms; throws naming `what` after `limit` ms. */
async function until(check, what, limit = LIMIT) {
  const start = Date.now();
  for (;;) {
    if (await check()) return Date.now() - start;
    if (Date.now() - start > limit) throw new Error(`timed out after ${limit} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** The worker process; its stdout read line by line. */
class Child {
  constructor(args) {
    this.proc = spawn(process.execPath, [WORKER, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    this.lines = [];
    this.err = '';
    this.proc.stderr.on('data', (d) => {
      this.err += d;
    });
    createInterface({ input: this.proc.stdout }).on('line', (l) => this.lines.push(l));
    this.exited = new Promise((r) => this.proc.on('exit', r));
  }

  until(text) {
    return until(() => {
      if (this.proc.exitCode !== null) throw new Error(`child ended before ${text}: ${this.lines.join('\n')}\n${this.err}`);
      return this.lines.includes(text);
    }, `${JSON.stringify(text)} (${this.lines.join(' | ')})`);
  }

  async stop() {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill('SIGINT');
      const t = setTimeout(() => this.proc.kill('SIGKILL'), 10_000);
      await this.exited;
      clearTimeout(t);
    }
  }
}

const missing = RedisServer.missing();

describe('a terminate reaches the worker process', { skip: missing ?? false }, () => {
  let server;
  let dir;
  before(async () => {
    server = await new RedisServer().start();
    dir = mkdtempSync(join(tmpdir(), 'headway-term-'));
  });
  after(() => {
    server?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const brokerOf = (layout, prefix) =>
    layout === 'redis' ? new RedisBroker(server.url, { prefix }) : RedisBroker.celery(server.url);

  for (const layout of ['redis', 'celery']) {
    test(`${layout}: handle.revoke({ terminate: true }) stops the run in another process`, async () => {
      const prefix = `term-${randomUUID().slice(0, 8)}:`;
      const queue = `q-${randomUUID().slice(0, 8)}`;
      const go = join(dir, `go-${randomUUID()}`);
      const child = new Child([layout, server.url, prefix, queue, go]);
      try {
        await child.until('ready');
        const app = new App({ broker: brokerOf(layout, prefix) });
        const doomed = await app.sendTask('slow', [1], { queue });
        const spared = await app.sendTask('slow', [2], { queue });
        await child.until('started 1');
        await child.until('started 2');
        await doomed.revoke({ terminate: true, signal: 'SIGTERM' });
        const took = await until(async () => (await doomed.state()) === 'REVOKED', 'REVOKED', STOPS_WITHIN);
        assert.ok(took < STOPS_WITHIN, `${took} ms`);
        await assert.rejects(doomed.get(1000), { code: 'REVOKED' });
        // The body's ctx.signal aborted in the worker process.
        await child.until('aborted 1');
        // Positive control: the spared run is still going, and finishes.
        assert.ok(!['SUCCESS', 'FAILURE', 'REVOKED'].includes(await spared.state()));
        writeFileSync(go, '');
        assert.equal(await spared.get(10_000), 'done 2');
        assert.equal(await spared.state(), 'SUCCESS');
        assert.ok(!child.lines.includes('aborted 2'), child.lines.join(' | '));
      } finally {
        writeFileSync(go, '');
        await child.stop();
      }
    });
  }

  test('app.revoke(id, { terminate, signal }) by id from an app that did not send it', async () => {
    const prefix = `term-${randomUUID().slice(0, 8)}:`;
    const queue = `q-${randomUUID().slice(0, 8)}`;
    const go = join(dir, `go-${randomUUID()}`);
    const child = new Child(['redis', server.url, prefix, queue, go]);
    try {
      await child.until('ready');
      const sender = new App({ broker: brokerOf('redis', prefix) });
      const { id } = await sender.sendTask('slow', [1], { queue });
      await child.until('started 1');
      const other = new App({ broker: brokerOf('redis', prefix) });
      await other.revoke(id, { terminate: true, signal: 9 });
      await until(async () => (await other.handle(id).state()) === 'REVOKED', 'REVOKED', STOPS_WITHIN);
    } finally {
      writeFileSync(go, '');
      await child.stop();
    }
  });
});

test('a bad signal is refused naming it', async () => {
  const app = new App();
  const h = app.handle('some-id');
  for (const bad of ['NOPE', 'SIG', '', '0', 0, 65, -9, 1.5, NaN]) {
    await assert.rejects(h.revoke({ terminate: true, signal: bad }), (e) => {
      assert.ok(e instanceof RangeError, `${bad}: ${e}`);
      assert.equal(e.code, 'ERR_INVALID_ARG_VALUE');
      assert.match(e.message, /`signal`/);
      return true;
    });
    await assert.rejects(app.revoke(['some-id'], { terminate: true, signal: bad }), RangeError);
  }
  for (const wrong of [true, {}, ['TERM'], 10n]) {
    await assert.rejects(h.revoke({ terminate: true, signal: wrong }), (e) => {
      assert.ok(e instanceof TypeError, `${String(wrong)}: ${e}`);
      assert.match(e.message, /"signal"/);
      return true;
    });
  }
  await assert.rejects(h.revoke({ terminate: 'yes' }), TypeError);
  await assert.rejects(h.revoke({ terminat: true }), TypeError);
  await assert.rejects(app.revoke(7), TypeError);
  await assert.rejects(app.revoke([7]), TypeError);
  // Positive control: names in any case, with or without SIG, and numbers
  // are taken; so are the older spellings.
  for (const good of ['SIGTERM', 'term', 'KILL', 'sigusr1', 'HUP', 9, '15', null, undefined]) {
    await h.revoke({ terminate: true, signal: good });
  }
  await h.revoke(true);
  await h.revoke();
  await app.revoke('some-id');
  await app.revoke(['a', 'b'], { terminate: true });
});
