// RabbitMQ from Node: a Node producer and a Node worker on amqp://, on
// Celery's AMQP topology, results in Celery's Redis format (backend:
// 'redis://...') or sent back over RabbitMQ (backend: 'rpc://'). Each test
// has a vhost of its own on the local RabbitMQ (127.0.0.1:5672, guest),
// deleted after. Without RabbitMQ the tests are skipped with the reason
// printed, unless HEADWAY_REQUIRE_RABBITMQ=1 (CI), which makes that a
// failure.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createConnection } from 'node:net';

import { App, chain, chord } from 'headway';
import { RedisServer } from './fixtures/brokers.mjs';

const WAIT = 20_000;

function ctl(...args) {
  const r = spawnSync('rabbitmqctl', ['-q', ...args], { encoding: 'utf8', timeout: 60_000 });
  if (r.status !== 0) throw new Error(`rabbitmqctl ${args.join(' ')}: ${r.stderr}`);
  return r.stdout;
}

async function rabbitMissing() {
  const up = await new Promise((resolve) => {
    const s = createConnection({ host: '127.0.0.1', port: 5672 });
    s.once('connect', () => (s.destroy(), resolve(true)));
    s.once('error', () => resolve(false));
  });
  const why = !up
    ? 'no RabbitMQ answers on 127.0.0.1:5672 (apt-get install rabbitmq-server)'
    : spawnSync('rabbitmqctl', ['-q', 'version']).status !== 0
      ? 'rabbitmqctl does not work here'
      : null;
  if (why && process.env.HEADWAY_REQUIRE_RABBITMQ === '1') {
    throw new Error(`HEADWAY_REQUIRE_RABBITMQ=1 but ${why}`);
  }
  if (why) console.log(`skipping the RabbitMQ tests: ${why}`);
  return why;
}

let n = 0;
function vhost() {
  const name = `headway-js-${process.pid}-${n++}`;
  ctl('add_vhost', name);
  ctl('set_permissions', '-p', name, 'guest', '.*', '.*', '.*');
  return { name, url: `amqp://guest:guest@127.0.0.1:5672/${name}`, drop: () => ctl('delete_vhost', name) };
}

const why = await rabbitMissing();
const redisWhy = RedisServer.missing();

describe('amqp://', { skip: why || redisWhy || false }, () => {
  let redis;
  before(async () => {
    redis = await new RedisServer().start();
  });
  after(() => redis?.stop());

  test('a Node producer and a Node worker share a RabbitMQ queue; results in Celery\'s Redis format', async () => {
    const vh = vhost();
    try {
      const app = new App({ broker: vh.url, backend: redis.db(7) });
      const add = app.task('tasks.add', ([a, b]) => a + b);
      app.task('tasks.total', ([values]) => values.reduce((s, v) => s + v, 0));
      // Sent before any worker: the queue is declared by the send, so the
      // message waits (confirmed by RabbitMQ when send() resolved).
      const early = await add.send([2, 3]);
      const listed = ctl('list_queues', '-p', vh.name, 'name', 'durable', 'messages');
      assert.match(listed, /^celery\ttrue\t1$/m, listed);
      const w = app.worker({ concurrency: 2 });
      const run = w.run();
      try {
        assert.equal(await early.get(WAIT), 5);
        const meta = JSON.parse(await getMeta(redis.port, 7, early.id));
        assert.equal(meta.status, 'SUCCESS');
        assert.equal(meta.result, 5);
        const c = await chain(add.sig([1, 1]), add.sig([10])).send();
        assert.equal(await c.get(WAIT), 12);
        const d = await chord([add.sig([1, 1]), add.sig([2, 2])], app.sig('tasks.total')).send();
        assert.equal(await d.get(WAIT), 6);
        const later = await add.send([4, 4], { countdown: 1000 });
        const t0 = Date.now();
        assert.equal(await later.get(WAIT), 8);
        assert.ok(Date.now() - t0 >= 900, 'a countdown is held until due');
      } finally {
        await w.stop({ grace: 1000 });
        await run;
      }
    } finally {
      vh.drop();
    }
  });

  test('rpc:// sends results back to the caller over RabbitMQ; beside another broker it is refused', async () => {
    const vh = vhost();
    try {
      const app = new App({ broker: vh.url, backend: 'rpc://' });
      const mul = app.task('tasks.mul', ([a, b]) => a * b);
      const w = app.worker({ concurrency: 2 });
      const run = w.run();
      try {
        assert.equal(await (await mul.send([6, 7])).get(WAIT), 42);
      } finally {
        await w.stop({ grace: 1000 });
        await run;
      }
      assert.throws(() => new App({ broker: 'memory://', backend: 'rpc://' }), (e) => {
        assert.equal(e.name, 'RangeError');
        assert.match(e.message, /`backend`.*amqp/);
        return true;
      });
    } finally {
      vh.drop();
    }
  });

  test('an unreachable RabbitMQ is refused, the password hidden', () => {
    assert.throws(() => new App({ broker: 'amqp://u:s3cret@127.0.0.1:1/v' }), (e) => {
      assert.equal(e.code, 'BROKER');
      assert.ok(!e.message.includes('s3cret'), e.message);
      return true;
    });
  });
});

async function getMeta(port, db, id) {
  // One connection: SELECT then GET, the bulk reply's payload.
  const { createConnection: connect } = await import('node:net');
  return await new Promise((resolve, reject) => {
    const key = `celery-task-meta-${id}`;
    const s = connect({ host: '127.0.0.1', port });
    let got = '';
    s.on('data', (d) => {
      got += d.toString('utf8');
      const lines = got.split('\r\n');
      if (lines.length >= 4 && lines[1].startsWith('$')) {
        s.destroy();
        resolve(lines[2]);
      }
    });
    s.on('error', reject);
    s.write(`*2\r\n$6\r\nSELECT\r\n$${String(db).length}\r\n${db}\r\n*2\r\n$3\r\nGET\r\n$${key.length}\r\n${key}\r\n`);
  });
}
