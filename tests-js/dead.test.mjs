// Dead letters through Node, on every broker (memory, and headway's Redis
// layout and Celery's on a redis-server this file starts): bytes pushed onto
// a queue as a foreign producer would, quarantined by a real worker, then
// listed, re-queued (a worker claims them again) and purged.
//
// Waits are bounded polls on what the broker reports, never sleeps that hope.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { connect } from 'node:net';
import { after, afterEach, before, describe, test } from 'node:test';

import { App, RedisBroker, testing } from 'headway';

import { START, brokers } from './fixtures/brokers.mjs';

const WAIT = 10_000;
const Q = 'dq';
const PICKLE = Buffer.from([0x80, 0x04, 0x95, ...Buffer.from('pickle')]);
const NO_TASK = Buffer.from('{"id":"d1","queue":"dq"}');
const JUNK = Buffer.concat([Buffer.from('<script>x</script>\n'), Buffer.from([0xff])]);

async function until(what, check, limit = WAIT) {
  const deadline = Date.now() + limit;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const code = (c, type) => (e) => {
  assert.equal(e.code, c, e.message);
  if (type) assert.ok(e instanceof type, `${e.name}: ${e.message}`);
  return true;
};

for (const b of brokers()) {
  describe(`dead letters on the ${b.kind} broker`, { skip: b.skip }, () => {
    before(() => b.setup());
    after(() => b.teardown());
    afterEach(() => b.stopAll());

    test('quarantined letters are listed, re-queued and purged', async () => {
      const app = await b.app();
      const add = app.task('add', ([x, y]) => x + y, { queue: Q });
      for (const raw of [PICKLE, NO_TASK, JUNK]) await testing.pushRaw(app, Q, raw);
      b.start(app, { queues: [Q] });
      // Good work flows past the bad bytes.
      assert.equal(await (await add.send([2, 3])).get(WAIT), 5);
      await until('three dead letters', async () => (await app.deadCount(Q)) === 3);

      const dead = await app.deadLetters(Q);
      assert.equal(dead.length, 3);
      // Newest first, each with its queue, reason, id (when readable) and bytes.
      assert.deepEqual(dead.map((d) => d.raw), [JUNK, NO_TASK, PICKLE]);
      assert.ok(dead.every((d) => Buffer.isBuffer(d.raw) && d.queue === Q && Object.isFrozen(d)));
      assert.match(dead[0].reason, /^not JSON/);
      if (b.kind === 'celery') {
        // On Celery's layout a message is a kombu envelope: bare JSON is not.
        assert.match(dead[1].reason, /^content type not allowed/);
      } else {
        assert.equal(dead[1].reason, 'no task name');
        assert.equal(dead[1].id, 'd1');
      }
      assert.match(dead[2].reason, /^content type not allowed: a pickle/);
      assert.equal(dead[0].id, null);
      assert.equal(dead[2].id, null);
      for (const d of dead) {
        assert.ok(d.at instanceof Date);
        assert.ok(d.at.getTime() >= START, String(d.at));
      }
      // `limit` bounds the list, not the count; 0 lists none.
      assert.deepEqual((await app.deadLetters(Q, { limit: 1 })).map((d) => d.raw), [JUNK]);
      assert.deepEqual(await app.deadLetters(Q, { limit: 0 }), []);
      assert.equal(await app.deadCount(Q), 3);

      // Re-queued, a letter goes back on its queue as it was: the running
      // worker claims it again and, as it is still bad, sets it aside again —
      // now the newest.
      const newestIs = (raw) => async () => {
        const d = await app.deadLetters(Q, { limit: 1 });
        return (await app.deadCount(Q)) === 3 && d.length === 1 && d[0].raw.equals(raw);
      };
      assert.equal(await app.requeueDead(Q, { ids: ['nope'] }), 0);
      if (b.kind !== 'celery') {
        assert.equal(await app.requeueDead(Q, { ids: ['d1'] }), 1);
        await until('d1 back among the dead, newest', newestIs(NO_TASK));
      }
      // The oldest first: the pickle.
      assert.equal(await app.requeueDead(Q, { limit: 1 }), 1);
      await until('the pickle back among the dead, newest', newestIs(PICKLE));

      // Purge drops them for good.
      assert.equal(await app.purgeDead(Q), 3);
      assert.equal(await app.deadCount(Q), 0);
      assert.deepEqual(await app.deadLetters(Q), []);
      assert.equal(await app.purgeDead(Q), 0);
      assert.equal(await app.requeueDead(Q), 0);
      assert.equal(await (await add.send([1, 1])).get(WAIT), 2);
    });

    test('unknown queues have none; bad arguments are typed errors', async () => {
      const app = await b.app();
      assert.deepEqual(await app.deadLetters('nowhere'), []);
      assert.equal(await app.deadCount('nowhere'), 0);
      assert.equal(await app.requeueDead('nowhere'), 0);
      assert.equal(await app.purgeDead('nowhere'), 0);
      // The default queue is the default.
      assert.deepEqual(await app.deadLetters(), []);
      assert.equal(await app.deadCount(), 0);
      for (const bad of [-1, 1.5, Infinity, NaN]) {
        await assert.rejects(app.deadLetters(Q, { limit: bad }), code('ERR_OUT_OF_RANGE', RangeError));
        await assert.rejects(app.requeueDead(Q, { limit: bad }), code('ERR_OUT_OF_RANGE', RangeError));
      }
      for (const bad of ['3', true, [1]]) {
        await assert.rejects(app.deadLetters(Q, { limit: bad }), code('ERR_INVALID_ARG_TYPE', TypeError));
        await assert.rejects(app.requeueDead(Q, { limit: bad }), code('ERR_INVALID_ARG_TYPE', TypeError));
      }
      await assert.rejects(app.deadLetters(Q, { lmit: 3 }), code('ERR_INVALID_ARG_VALUE', TypeError));
      await assert.rejects(app.requeueDead(Q, { ids: 'd1' }), code('ERR_INVALID_ARG_TYPE', TypeError));
      await assert.rejects(app.requeueDead(Q, { ids: [1] }), code('ERR_INVALID_ARG_TYPE', TypeError));
      await assert.rejects(app.deadCount(5), code('ERR_INVALID_ARG_TYPE', TypeError));
      await assert.rejects(app.purgeDead(null), code('ERR_INVALID_ARG_TYPE', TypeError));
      await assert.rejects(testing.pushRaw(app, Q, 5), code('ERR_INVALID_ARG_TYPE', TypeError));
      await assert.rejects(testing.pushRaw({}, Q, 'x'), code('ERR_INVALID_ARG_TYPE', TypeError));
    });
  });
}

// A foreign producer's LPUSH straight onto the queue's list (the key a
// producer of that layout writes), not through headway at all.
const redis = brokers().find((x) => x.kind === 'redis');
for (const layout of ['headway', 'celery']) {
  test(`bytes LPUSHed onto the ${layout} layout's list are quarantined`, { skip: redis.skip }, async () => {
    await redis.setup();
    try {
      const port = redis.server.port;
      const queue = `dq${randomUUID().slice(0, 6)}`;
      let broker;
      let key;
      if (layout === 'headway') {
        const prefix = `d${randomUUID().slice(0, 8)}:`;
        broker = new RedisBroker(redis.server.url, { prefix });
        key = `${prefix}{${queue}}:ready:0`;
      } else {
        broker = RedisBroker.celery(redis.server.db(40));
        key = queue;
      }
      const db = layout === 'headway' ? '0' : '40';
      const llen = async () => Number((await selectThen(port, db, 'LLEN', key)).slice(1));
      const app = new App({ broker, clock: new testing.VirtualClock(START) });
      assert.equal(await selectThen(port, db, 'LPUSH', key, 'this is not a message'), ':1');
      const w = app.worker({ queues: [queue] });
      const run = w.run();
      try {
        await until('the pushed bytes quarantined', async () => (await app.deadCount(queue)) === 1);
      } finally {
        await w.stop({ grace: 1000 });
        await run;
      }
      const [d] = await app.deadLetters(queue);
      assert.equal(d.raw.toString(), 'this is not a message');
      assert.match(d.reason, /^not JSON/);
      assert.equal(await llen(), 0);
      // Re-queued, it is on that list again, as it was. (A claim the stopped
      // worker left in flight may take it once more — Celery's layout only —
      // and set it aside again; then once more is enough.)
      assert.equal(await app.requeueDead(queue), 1);
      await until('back on the list or set aside again', async () => (await llen()) === 1 || (await app.deadCount(queue)) === 1);
      if ((await llen()) === 0) assert.equal(await app.requeueDead(queue), 1);
      await until('back on the list', async () => (await llen()) === 1);
      assert.equal(await app.deadCount(queue), 0);
      assert.equal(await selectThen(port, db, 'DEL', key), ':1');
      await testing.pushRaw(app, queue, Buffer.from([0]));
      assert.equal(await llen(), 1, 'pushRaw writes the same list');
      assert.equal(await selectThen(port, db, 'DEL', key), ':1');
    } finally {
      redis.teardown();
    }
  });
}

/** SELECT `db`, then one command, on one connection; the command's reply line. */
function selectThen(port, db, ...args) {
  return new Promise((resolve, reject) => {
    const sock = connect(port, '127.0.0.1');
    let got = '';
    sock.setTimeout(5000, () => {
      sock.destroy();
      reject(new Error('redis did not answer'));
    });
    sock.on('error', reject);
    sock.on('connect', () => {
      let out = '';
      for (const cmd of [['SELECT', db], args]) {
        out += `*${cmd.length}\r\n`;
        for (const a of cmd) out += `$${Buffer.byteLength(a)}\r\n${a}\r\n`;
      }
      sock.write(out);
    });
    sock.on('data', (d) => {
      got += d.toString();
      const lines = got.split('\r\n');
      if (lines.length >= 3) {
        sock.end();
        resolve(lines[1]);
      }
    });
  });
}
