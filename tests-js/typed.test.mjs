// kombu's typed JSON values through Node, on every broker (memory, and
// headway's Redis layout and Celery's on a redis-server this file starts):
// a Date and a Buffer sent travel as `datetime` and `bytes`/`base64` and come
// back as a Date and a Buffer, in a body and from handle.get(); typed values
// written as Celery writes them (uuid, decimal, date, time) arrive as their
// strings. The wire form on Celery's layout is read off Redis itself.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { connect } from 'node:net';
import { after, afterEach, before, describe, test } from 'node:test';

import { App, RedisBroker, chain, chord, testing } from 'headway';

import { brokers, command } from './fixtures/brokers.mjs';

const WAIT = 10_000;
const WHEN = new Date(Date.UTC(2026, 0, 2, 3, 4, 5, 123));
const TEXT = Buffer.from('héllo', 'utf8');
const BINARY = Buffer.from([0xff, 0x00, 0x80, 0x7f]);

const typed = (t, v) => ({ __type__: t, __value__: v });

/** One bulk-string reply of a command (LINDEX), as a string or null. */
function bulk(port, ...args) {
  return new Promise((resolve, reject) => {
    const sock = connect(port, '127.0.0.1');
    let got = Buffer.alloc(0);
    sock.setTimeout(5000, () => {
      sock.destroy();
      reject(new Error('redis did not answer'));
    });
    sock.on('error', reject);
    sock.on('connect', () => {
      let out = `*${args.length}\r\n`;
      for (const a of args) out += `$${Buffer.byteLength(a)}\r\n${a}\r\n`;
      sock.write(out);
    });
    sock.on('data', (d) => {
      got = Buffer.concat([got, d]);
      const i = got.indexOf('\r\n');
      if (i < 0) return;
      const n = Number(got.subarray(1, i).toString());
      if (n < 0) {
        sock.end();
        resolve(null);
      } else if (got.length >= i + 2 + n) {
        sock.end();
        resolve(got.subarray(i + 2, i + 2 + n).toString());
      }
    });
  });
}

/** A Celery protocol 2 message for `task(args, kwargs)`, as a Celery producer LPUSHes it. */
function celeryMessage(task, id, queue, bodyJson) {
  return JSON.stringify({
    body: Buffer.from(bodyJson).toString('base64'),
    'content-encoding': 'utf-8',
    'content-type': 'application/json',
    headers: {
      lang: 'py', task, id, shadow: null, eta: null, expires: null, group: null, group_index: null,
      retries: 0, timelimit: [null, null], root_id: id, parent_id: null, argsrepr: '()', kwargsrepr: '{}',
      origin: 'gen1@host', ignore_result: false,
    },
    properties: {
      correlation_id: id, reply_to: randomUUID(), delivery_mode: 2,
      delivery_info: { exchange: '', routing_key: queue }, priority: 0,
      body_encoding: 'base64', delivery_tag: randomUUID(),
    },
  });
}

for (const b of brokers()) {
  describe(`typed values on the ${b.kind} broker`, { skip: b.skip }, () => {
    before(() => b.setup());
    after(() => b.teardown());
    afterEach(() => b.stopAll());

    test('a Date and Buffers round-trip through a body and handle.get(), nested too', async () => {
      const app = await b.app();
      const seen = [];
      const echo = app.task('echo', (args, ctx) => {
        seen.push([args, ctx.kwargs]);
        return { args, kwargs: ctx.kwargs, made: new Date(Date.UTC(2030, 5, 6)), bin: new Uint8Array([1, 2, 250]) };
      });
      b.start(app);
      const args = [WHEN, TEXT, BINARY, [{ at: WHEN, raw: [BINARY] }], 'plain', 1];
      const kwargs = { when: { deep: [WHEN] }, data: TEXT };
      const got = await (await echo.send(args, { kwargs })).get(WAIT);
      // In the body: native values, not markers or wire objects.
      const [[inArgs, inKwargs]] = seen;
      assert.ok(inArgs[0] instanceof Date);
      assert.equal(inArgs[0].getTime(), WHEN.getTime());
      assert.ok(Buffer.isBuffer(inArgs[1]) && Buffer.isBuffer(inArgs[2]));
      assert.deepEqual(inArgs, args);
      assert.deepEqual(inKwargs, kwargs);
      // Back through the result: the same, and the body's own Date and bytes.
      assert.deepEqual(got.args, args);
      assert.deepEqual(got.kwargs, kwargs);
      assert.deepEqual(got.made, new Date(Date.UTC(2030, 5, 6)));
      assert.ok(Buffer.isBuffer(got.bin));
      assert.deepEqual([...got.bin], [1, 2, 250]);
      // A bare Date or Buffer as the whole result.
      const bare = app.task('bare', ([i]) => (i === 0 ? WHEN : BINARY));
      assert.deepEqual(await (await bare.send([0])).get(WAIT), WHEN);
      assert.deepEqual(await (await bare.send([1])).get(WAIT), BINARY);
    });

    test('typed values as Celery writes them arrive as the documented strings', async () => {
      const app = await b.app();
      const look = app.task('look', (args) => args);
      b.start(app);
      const sent = [
        typed('uuid', { hex: '0123456789abcdef0123456789abcdef' }),
        typed('decimal', '1.50'),
        typed('date', '2026-01-02'),
        typed('time', '03:04:05.000006'),
        typed('datetime', '2026-01-02T04:04:05.123456+01:00'),
        typed('bytes', 'hi'),
        typed('base64', '/wA='),
        // kombu would refuse these: they stay plain objects.
        { __type__: 'pickle', __value__: 'x' },
        { __type__: 'decimal', __value__: 'one', extra: 1 },
      ];
      const want = [
        '01234567-89ab-cdef-0123-456789abcdef',
        '1.50',
        '2026-01-02',
        '03:04:05.000006',
        WHEN,
        Buffer.from('hi'),
        Buffer.from([0xff, 0x00]),
        { __type__: 'pickle', __value__: 'x' },
        { __type__: 'decimal', __value__: 'one', extra: 1 },
      ];
      if (b.kind === 'celery') {
        // A Celery producer's own message, pushed raw (the refused typed
        // object is left out: a Celery worker drops such a message).
        const id = randomUUID();
        const body = JSON.stringify([sent.slice(0, 7), {}, { callbacks: null, errbacks: null, chain: null, chord: null }]);
        await testing.pushRaw(app, 'default', celeryMessage('look', id, 'default', body));
        assert.deepEqual(await app.handle(id).get(WAIT), want.slice(0, 7));
      } else {
        assert.deepEqual(await (await look.send(sent)).get(WAIT), want);
      }
      // A typed object sent as a plain object reads as its value in a chain, too.
      const first = app.task('first', ([x]) => x);
      const both = app.task('both', ([a, x]) => [a, x]);
      const h = await chain(first.sig([typed('decimal', '2.5')]), both.sig([WHEN])).send();
      // Celery puts the previous result first.
      assert.deepEqual(await h.get(WAIT), ['2.5', WHEN]);
    });

    test('a chord callback gets its parts\' Dates and Buffers', async () => {
      const app = await b.app();
      const part = app.task('part', ([i]) => (i % 2 ? new Date(WHEN.getTime() + i) : Buffer.from([i])));
      const gather = app.task('gather', ([parts]) => parts.map((p) => (p instanceof Date ? `d${p.getTime() - WHEN.getTime()}` : `b${p[0]}`)));
      b.start(app);
      const h = await chord([0, 1, 2, 3].map((i) => part.sig([i])), gather.sig()).send();
      assert.deepEqual(await h.get(WAIT), ['b0', 'd1', 'b2', 'd3']);
    });

    test('an invalid Date is refused at send and as a result, naming where', async () => {
      const app = await b.app();
      const t = app.task('t', () => null);
      const bad = app.task('bad', () => ({ at: [new Date('nope')] }));
      b.start(app);
      await assert.rejects(t.send([1, new Date(NaN)]), (e) => {
        assert.ok(e instanceof RangeError, `${e.name}: ${e.message}`);
        assert.equal(e.message, 't: args[1] is an invalid Date (its time is NaN)');
        return true;
      });
      await assert.rejects(t.send([], { kwargs: { k: new Date('x') } }), { name: 'RangeError', message: /^t: kwargs\.k is an invalid Date/ });
      await assert.rejects(t.send([1n]), { name: 'TypeError', message: /^t: args\[0\] is a bigint/ });
      await assert.rejects(t.send([new Float64Array(1)]), { name: 'TypeError', message: /^t: args\[0\] is a Float64Array/ });
      await assert.rejects((await bad.send()).get(WAIT), (e) => {
        assert.equal(e.code, 'FAILED', e.message);
        assert.equal(e.remoteType, 'RangeError');
        assert.match(e.remoteMessage, /^bad: result\.at\[0\] is an invalid Date/);
        return true;
      });
    });

    if (b.kind === 'celery') {
      test('on the wire a Date and bytes are written as kombu writes them', async () => {
        // Database 0, which the fixture's Celery apps (1 to 63) leave alone.
        await command(b.server.port, 'DEL', 'celery');
        const app = new App({ broker: RedisBroker.celery(b.server.db(0)) });
        app.task('w', () => null);
        await app.send('w', [WHEN, TEXT, BINARY, new Date(Date.UTC(2026, 0, 1))]);
        // headway's "default" queue is Celery's "celery" list.
        const raw = await bulk(b.server.port, 'LINDEX', 'celery', '0');
        assert.ok(raw, 'a message on the queue');
        const body = JSON.parse(Buffer.from(JSON.parse(raw).body, 'base64').toString());
        assert.deepEqual(body[0], [
          typed('datetime', '2026-01-02T03:04:05.123000+00:00'),
          typed('bytes', 'héllo'),
          typed('base64', '/wCAfw=='),
          typed('datetime', '2026-01-01T00:00:00+00:00'),
        ]);
      });
    }
  });
}
