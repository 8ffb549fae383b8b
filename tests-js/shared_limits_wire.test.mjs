// The shared limits' calls on the event loop's own socket: that they ride
// it (one connection, where the shared link would make a second), that a
// script Redis forgot is loaded again, that a socket lost under a waiting
// call still answers (over the shared link, once Redis is back), and that
// a refused handshake is the shared link's refusal.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';

import { SharedBucket, SharedGate, SharedWindow } from 'headway';
import { RedisServer, command, freePort } from './fixtures/brokers.mjs';

const skip = RedisServer.missing() ?? false;
const key = () => `w-${randomUUID()}`;
const servers = [];
after(() => servers.forEach((s) => s.stop()));

/** A redis-server on `port` (a free one when absent), with `extra` flags. */
async function redis(port, extra = []) {
  const s = { port: port ?? (await freePort()), dir: mkdtempSync(join(tmpdir(), 'headway-wire-')) };
  s.proc = spawn('redis-server', ['--port', String(s.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', s.dir, ...extra], { stdio: 'ignore' });
  s.stop = () => {
    s.proc.kill('SIGKILL');
    rmSync(s.dir, { recursive: true, force: true });
  };
  servers.push(s);
  const auth = extra.includes('--requirepass') ? ['pw'] : [];
  await until(async () => {
    try {
      const r = auth.length ? await command(s.port, 'AUTH', ...auth) : await command(s.port, 'PING');
      return r === '+PONG' || r === '+OK';
    } catch {
      return false;
    }
  });
  return s;
}

async function until(cond, ms = 10_000) {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    assert.ok(Date.now() < deadline, 'condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** How many clients the server has, less the one asking. */
function clients(port) {
  const list = execFileSync('redis-cli', ['-p', String(port), 'CLIENT', 'LIST'], { encoding: 'utf8' });
  return list.split('\n').filter((l) => l.includes('id=')).length - 1;
}

test('calls ride one socket of the event loop; a forgotten script is loaded again', { skip }, async () => {
  const s = await redis();
  const url = `redis://127.0.0.1:${s.port}`;
  const b = new SharedBucket(url, key(), 1000, { burst: 5 });
  const w = new SharedWindow(url, key(), 3, 60_000);
  const g = new SharedGate(url, key(), 1);
  const got = await Promise.all(Array.from({ length: 8 }, () => b.take()));
  assert.equal(got.filter(Boolean).length, 5, 'the burst, and no more, in one write');
  assert.deepEqual([await w.take(), await w.take(), await w.left()], [true, true, 1]);
  const p = await g.take();
  assert.equal(await g.held(), 1);
  assert.equal(await g.release(p), true);
  assert.equal(clients(s.port), 1, 'every call on one connection');
  // Redis forgets its scripts: the next calls load them (EVAL) and answer.
  assert.equal(await command(s.port, 'SCRIPT', 'FLUSH'), '+OK');
  assert.deepEqual(await Promise.all([w.take(), w.take()]), [true, false]);
  assert.equal(await b.tokens() >= 0, true);
  // The control: `wait()` takes the shared link, which is a second
  // connection — so one connection above was the event loop's socket.
  await b.wait(1);
  assert.equal(clients(s.port), 2);
});

test('a socket lost under a waiting call: answered once Redis is back', { skip }, async () => {
  let s = await redis();
  const port = s.port;
  const url = `redis://127.0.0.1:${port}`;
  const b = new SharedBucket(url, key(), 1, { burst: 1 });
  assert.equal(await b.take(), true);
  // Writes wait: the next take is in flight when Redis dies.
  assert.equal(await command(port, 'CLIENT', 'PAUSE', '10000', 'WRITE'), '+OK');
  const pending = b.take();
  await new Promise((r) => setTimeout(r, 100));
  s.stop();
  s = await redis(port);
  // A new Redis: a full bucket, so the call made again takes its token.
  assert.equal(await pending, true);
  // And the calls after it are answered too (the socket made anew once its
  // backoff passed).
  assert.equal(await b.take(), false);
  assert.ok(clients(port) >= 1);
});

test('a refused handshake is the shared link\'s refusal; the right password passes', { skip }, async () => {
  const s = await redis(undefined, ['--requirepass', 'pw']);
  const wrong = new SharedBucket(`redis://:nope@127.0.0.1:${s.port}`, key(), 1);
  await assert.rejects(wrong.take(), (e) => e.code === 'BROKER' && /WRONGPASS|invalid|password/i.test(e.message));
  const right = new SharedBucket(`redis://:pw@127.0.0.1:${s.port}/3`, key(), 1);
  assert.equal(await right.take(), true);
  assert.equal(await right.take(), false);
});
