// The six chapters of the moonpool guide, asserted step by step with explicit
// times, and examples/guide.mjs run in a child process with its whole output
// asserted, so the runnable guide cannot drift from the code.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';

import { Backoff, Breaker, Limits, Pool, Ward, pick } from 'headway';

const d = (t) =>
  t.kind === 'ready' || t.kind === 'stale'
    ? `${t.kind}(${t.item})`
    : t.kind === 'later'
      ? `later(${Math.floor(t.delay)})`
      : t.kind;

test('01 the first take: make twice, then the returned one', () => {
  const pool = new Pool();
  assert.equal(pool.live, 0);
  assert.equal(d(pool.take(0)), 'make');
  pool.made(1, 0);
  assert.equal(d(pool.take(0)), 'make');
  pool.made(2, 0);
  assert.equal(pool.live, 2);
  assert.equal(pool.idle, 0);
  assert.equal(pool.give(1, 0), true);
  assert.equal(pool.idle, 1);
  assert.deepEqual(pool.take(1), { kind: 'ready', item: 1 });
});

test('02 limits: wait at the ceiling, counting the ones being made', () => {
  const small = new Pool({ limits: new Limits({ size: 2 }) });
  assert.equal(d(small.take(0)), 'make');
  assert.equal(small.busy, 1); // the reserved room counts
  small.made(1, 0);
  small.take(0);
  small.made(2, 0);
  assert.equal(small.live, 2);
  assert.equal(small.busy, 2);
  assert.deepEqual(small.take(0), { kind: 'wait' });
});

test('03 retiring: evict by keep, stale by keep and by life', () => {
  const p = new Pool({ limits: new Limits({ size: 4, keep: 1000 }) });
  p.take(0);
  p.made(7, 0);
  assert.equal(p.give(7, 0), true);
  assert.deepEqual(p.evict(500), []);
  assert.deepEqual(p.evict(1500), [7]);
  assert.equal(p.idle, 0);
  assert.equal(p.live, 0);
  p.take(0);
  p.made(8, 0);
  p.give(8, 0);
  assert.deepEqual(p.take(2000), { kind: 'stale', item: 8 });
  assert.equal(p.live, 0);

  const aged = new Pool({ limits: new Limits({ size: 2, life: 4000 }) });
  aged.take(0);
  aged.made(5, 0);
  assert.equal(aged.give(5, 3000), true);
  assert.equal(aged.idle, 1);
  assert.deepEqual(aged.take(5000), { kind: 'stale', item: 5 });
});

test('04 the ward: the breaker sheds by roll, the backoff answers later', () => {
  const guarded = new Pool({ limits: new Limits({ size: 4 }), ward: new Ward({ breaker: new Breaker() }) });
  assert.equal(guarded.refusal(0), 0);
  for (let i = 0; i < 8; i++) {
    const t = guarded.take(i * 100, 0.99);
    assert.equal(t.kind, 'make');
    guarded.unmade(i * 100, 0.5);
  }
  assert.ok(Math.abs(guarded.refusal(800) - 8 / 9) < 1e-12);
  assert.deepEqual(guarded.take(900, 0.1), { kind: 'shed' });
  assert.deepEqual(guarded.take(900, 0.99), { kind: 'make' });

  const held = new Pool({ limits: new Limits({ size: 4 }), ward: new Ward({ backoff: new Backoff() }) });
  held.take(0);
  held.unmade(0, 0.5);
  const later = held.take(1);
  assert.equal(later.kind, 'later');
  assert.ok(Math.abs(later.delay - 49) < 1e-9, `delay ${later.delay}`);
  assert.equal(d(held.take(5000)), 'make');
});

test('05 picking: the less busy of the two drawn; none is -1', () => {
  const a = new Pool({ limits: new Limits({ size: 4 }) });
  const b = new Pool({ limits: new Limits({ size: 4 }) });
  a.take(0);
  a.made(1, 0);
  assert.equal(pick([a, b], 0, 0.0, 0.9), 1);
  assert.equal(pick([a, b], 0, 0.9, 0.0), 1);
  assert.equal(pick([a, a], 0, 0.0, 0.9), 0); // a tie goes to the first
  assert.equal(pick([], 0, 0.0, 0.0), -1);
});

test('06 a client loop: make, ready, stale, make, wait', () => {
  const log = [];
  const serve = (pool, now, roll) => {
    let conn;
    const t = pool.take(now, roll);
    if (t.kind === 'ready') conn = t.item;
    else if (t.kind === 'stale') log.push(`close ${t.item.n}`);
    else if (t.kind === 'make') {
      conn = { n: log.length };
      pool.made(conn, now);
    } else log.push(t.kind);
    if (conn !== undefined) {
      log.push(`use ${conn.n}`);
      if (!pool.give(conn, now)) log.push(`close ${conn.n}`);
    }
  };
  const client = new Pool({ limits: new Limits({ size: 1, keep: 10_000 }) });
  serve(client, 0, 0.5);
  serve(client, 1000, 0.5);
  serve(client, 20_000, 0.5);
  serve(client, 20_000, 0.5);
  const other = client.take(21_000);
  serve(client, 21_000, 0.5);
  assert.equal(other.kind, 'ready');
  assert.equal(client.give(other.item, 21_000), true);
  assert.deepEqual(log, ['use 0', 'use 0', 'close 0', 'use 3', 'wait']);
  assert.equal(client.live, 1);
  assert.equal(client.idle, 1);
});

const EXPECTED = `
== 01 The first take
live: 0
take: Make
take: Make
live: 2
give 1: true
idle: 1
take: Ready(1)

== 02 Limits, and what happens at the ceiling
live: 2
busy: 2
take: Wait

== 03 Retiring: idle age and lifetime
evict at 0.5 s: []
evict at 1.5 s: [7]
idle: 0
take at 2 s: Stale(8)
idle: 1
take at 5 s: Stale(5)

== 04 A ward in front
refusal: 0
refusal after 8 failed makes: 0.889
take, roll 0.1: Shed
take, roll 0.99: Make
take at 1 ms: Later(49 ms)
take at 5 s: Make

== 05 Picking between pools
pick: 1
pick from none: -1

== 06 A client loop
use 1
use 1
close 1
use 1
queue
live: 1 idle: 1
`;

test('examples/guide.mjs prints exactly the guide', () => {
  const guide = fileURLToPath(new URL('../examples/guide.mjs', import.meta.url));
  const out = execFileSync(process.execPath, [guide], { encoding: 'utf8', timeout: 20_000 });
  assert.equal(out, EXPECTED);
});
