// OpenTelemetry tracing through Node, on every broker: a send is a PRODUCER
// span `apply_async/<task>`, its run a CONSUMER span `run/<task>` whose
// parent it is (the context travels in the message's headers); a throwing
// body's span is an error with the exception recorded; `tracing: false`
// traces nothing.
import assert from 'node:assert/strict';
import { after, afterEach, before, beforeEach, describe, test } from 'node:test';

import { context, propagation, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';

import { connect } from 'node:net';

import { App, Fixed } from 'headway';

import { brokers } from './fixtures/brokers.mjs';

const WAIT = 10_000;
const tick = () => new Promise((r) => setTimeout(r, 10));

async function until(check, what, limit = WAIT) {
  const deadline = Date.now() + limit;
  for (;;) {
    const got = check();
    if (got) return got;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await tick();
  }
}

let exporter = null;
let provider = null;

function setUp() {
  exporter = new InMemorySpanExporter();
  provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  trace.setGlobalTracerProvider(provider);
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
}

async function tearDown() {
  await provider?.shutdown();
  trace.disable();
  propagation.disable();
  context.disable();
}

/** The finished spans called `name`, once there are `n`. */
function named(name, n = 1) {
  return until(() => {
    const got = exporter.getFinishedSpans().filter((s) => s.name === name);
    return got.length >= n ? got : null;
  }, `${n} span(s) ${name}`);
}

/** The newest element of the list `key` on database `db`, as text. */
function lindex(port, db, key) {
  return new Promise((resolve, reject) => {
    const sock = connect(port, '127.0.0.1');
    let got = Buffer.alloc(0);
    sock.on('error', reject);
    sock.on('connect', () => {
      const cmd = (...args) => `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`;
      sock.write(cmd('SELECT', String(db)) + cmd('LINDEX', key, '0'));
    });
    sock.on('data', (d) => {
      got = Buffer.concat([got, d]);
      // +OK\r\n$<n>\r\n<body>\r\n
      const text = got.toString('latin1');
      const m = /^\+OK\r\n\$(\d+)\r\n/.exec(text);
      if (m && got.length >= m[0].length + Number(m[1])) {
        sock.end();
        resolve(got.subarray(m[0].length, m[0].length + Number(m[1])).toString('utf8'));
      }
    });
  });
}

const parentOf = (s) => s.parentSpanContext?.spanId ?? s.parentSpanId;

for (const b of brokers()) {
  describe(`tracing on the ${b.kind} broker`, { skip: b.skip }, () => {
    before(() => b.setup());
    after(() => b.teardown());
    beforeEach(setUp);
    afterEach(async () => {
      await b.stopAll();
      await tearDown();
    });

    test('send and run are one trace, named and attributed as the Celery instrumentation', async () => {
      const app = await b.app({ clock: null });
      const add = app.task('t.add', ([x, y]) => x + y);
      b.start(app);
      const h = await add.send([2, 3]);
      assert.equal(await h.get(WAIT), 5);
      const [send] = await named('apply_async/t.add');
      const [run] = await named('run/t.add');
      assert.equal(send.kind, SpanKind.PRODUCER);
      assert.equal(run.kind, SpanKind.CONSUMER);
      assert.equal(run.spanContext().traceId, send.spanContext().traceId);
      assert.equal(parentOf(run), send.spanContext().spanId);
      assert.equal(send.attributes['celery.action'], 'apply_async');
      assert.equal(send.attributes['messaging.message.id'], h.id);
      assert.equal(send.attributes['celery.task_name'], 't.add');
      assert.equal(send.attributes['messaging.destination'], 'default');
      assert.equal(run.attributes['celery.action'], 'run');
      assert.equal(run.attributes['messaging.message.id'], h.id);
      assert.equal(run.attributes['celery.state'], 'SUCCESS');
      assert.equal(run.status.code, SpanStatusCode.UNSET);
    });

    test('a throwing body is an error with its exception; a retry is another child of the send', async () => {
      const app = await b.app({ clock: null });
      const bad = app.task(
        't.bad',
        async ([x]) => {
          throw new TypeError(`no ${x}`);
        },
        { retries: 1, backoff: new Fixed(10) },
      );
      b.start(app);
      const h = await bad.send([7]);
      await assert.rejects(h.get(WAIT), (e) => e.code === 'FAILED');
      const [send] = await named('apply_async/t.bad');
      const runs = (await named('run/t.bad', 2)).sort((x, y) => x.startTime[0] - y.startTime[0] || x.startTime[1] - y.startTime[1]);
      for (const run of runs) {
        assert.equal(run.spanContext().traceId, send.spanContext().traceId);
        assert.equal(parentOf(run), send.spanContext().spanId);
        assert.equal(run.status.code, SpanStatusCode.ERROR);
        assert.equal(run.status.message, 'no 7');
        const ev = run.events.filter((e) => e.name === 'exception');
        assert.equal(ev.length, 1);
        assert.equal(ev[0].attributes['exception.type'], 'TypeError');
        assert.equal(ev[0].attributes['exception.message'], 'no 7');
      }
      assert.equal(runs[0].attributes['celery.state'], 'RETRY');
      assert.equal(runs[0].attributes['celery.retry.reason'], 'no 7');
      assert.equal(runs[1].attributes['celery.state'], 'FAILURE');
      assert.equal(runs[1].attributes['celery.retries'], 1);
    });

    test('with a context manager the body runs inside its span, and its sends are its children', async () => {
      context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
      const app = await b.app({ clock: null });
      const leaf = app.task('t.leaf', () => 1);
      app.task('t.outer', async () => {
        await tick();
        const inside = trace.getActiveSpan()?.spanContext().spanId;
        await leaf.send([]);
        return inside ?? null;
      });
      b.start(app);
      const inside = await (await app.send('t.outer', [])).get(WAIT);
      const [run] = await named('run/t.outer');
      const [nested] = await named('apply_async/t.leaf');
      const [leafRun] = await named('run/t.leaf');
      assert.equal(inside, run.spanContext().spanId);
      assert.equal(parentOf(nested), run.spanContext().spanId);
      assert.equal(leafRun.spanContext().traceId, run.spanContext().traceId);
      assert.equal(parentOf(leafRun), nested.spanContext().spanId);
    });

    test('tracing: false traces nothing (the same task on a tracing app does)', async () => {
      const off = await b.app({ clock: null, tracing: false });
      const on = await b.app({ clock: null });
      for (const app of [off, on]) {
        app.task('t.one', () => 1);
        b.start(app);
      }
      assert.equal(await (await off.send('t.one', [])).get(WAIT), 1);
      assert.equal(await (await on.send('t.one', [])).get(WAIT), 1);
      await named('run/t.one');
      const got = exporter.getFinishedSpans();
      assert.deepEqual(got.filter((s) => s.kind === SpanKind.PRODUCER).map((s) => s.name), ['apply_async/t.one']);
      assert.deepEqual(got.filter((s) => s.kind === SpanKind.CONSUMER).map((s) => s.name), ['run/t.one']);
    });
  });
}

describe('tracing, the message and the switch', () => {
  const celery = brokers().find((b) => b.kind === 'celery');
  before(() => celery.setup());
  after(() => celery.teardown());
  beforeEach(setUp);
  afterEach(tearDown);

  test("on Celery's layout the context is a top-level message header", async () => {
    const app = await celery.app({ clock: null });
    const h = await app.sendTask('elsewhere.task', [1], { queue: 'traced' });
    const [send] = await named('apply_async/elsewhere.task');
    const raw = await lindex(celery.server.port, celery.db, 'traced');
    const headers = JSON.parse(raw).headers;
    assert.equal(headers.id, h.id);
    const sc = send.spanContext();
    assert.ok(headers.traceparent.startsWith(`00-${sc.traceId}-${sc.spanId}-`), headers.traceparent);
  });

  test('without a tracer provider a message carries no context', async () => {
    // The positive control is the test above: the same send with one.
    await tearDown();
    const app = await celery.app({ clock: null });
    const h = await app.sendTask('elsewhere.task', [1], { queue: 'quiet' });
    const headers = JSON.parse(await lindex(celery.server.port, celery.db, 'quiet')).headers;
    assert.equal(headers.id, h.id);
    assert.equal('traceparent' in headers, false);
  });

  test('a bad tracing option is refused by name', () => {
    assert.throws(() => new App({ tracing: 'yes' }), /tracing/);
  });
});

