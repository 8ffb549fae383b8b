// Six answers, one caller: the moonpool guide, in Node.
//
// The pool is a bookkeeper. It says what to do with a resource; you open it,
// close it, and wait. The six chapters walk the whole surface in that order,
// and every line this prints is asserted by tests-js/guide.test.mjs, so the
// guide cannot drift from the code.
//
// Every `now` is passed explicitly (milliseconds) and every draw too, so the
// output is the same on every run. Run: `node examples/guide.mjs`.

import { Backoff, Breaker, Limits, Pool, Ward, pick } from 'headway';

/** One answer, as the text this guide prints. */
function describe(t) {
  switch (t.kind) {
    case 'ready':
      return `Ready(${t.item})`;
    case 'stale':
      return `Stale(${t.item})`;
    case 'make':
      return 'Make';
    case 'wait':
      return 'Wait';
    case 'later':
      return `Later(${Math.floor(t.delay)} ms)`;
    case 'shed':
      return 'Shed';
  }
  throw new Error(`not an answer: ${t}`);
}

function chapter(n, title) {
  console.log(`\n== ${String(n).padStart(2, '0')} ${title}`);
}

// 01 -------------------------------------------------------------------------
chapter(1, 'The first take');
// A pool of numbers with the preset limits: ten live (HikariCP, database/sql).
const pool = new Pool();
console.log('live:', pool.live);
console.log('take:', describe(pool.take(0))); // nothing to lend, room for ten
pool.made(1, 0); // the one we opened, registered as lent
console.log('take:', describe(pool.take(0)));
pool.made(2, 0);
console.log('live:', pool.live); // two live, nothing idle
console.log('give 1:', pool.give(1, 0)); // true: it kept it
console.log('idle:', pool.idle);
console.log('take:', describe(pool.take(1))); // the most recently returned first

// 02 -------------------------------------------------------------------------
chapter(2, 'Limits, and what happens at the ceiling');
const small = new Pool({ limits: new Limits({ size: 2 }) });
small.take(0);
small.made(1, 0);
small.take(0);
small.made(2, 0);
console.log('live:', small.live);
console.log('busy:', small.busy);
// Full: not a queue, an answer. The caller decides what Wait means.
console.log('take:', describe(small.take(0)));

// 03 -------------------------------------------------------------------------
chapter(3, 'Retiring: idle age and lifetime');
const p = new Pool({ limits: new Limits({ size: 4, keep: 1000 }) });
p.take(0);
p.made(7, 0);
p.give(7, 0);
console.log('evict at 0.5 s:', JSON.stringify(p.evict(500))); // nothing is due yet
console.log('evict at 1.5 s:', JSON.stringify(p.evict(1500))); // the idle one is
console.log('idle:', p.idle);
// A timer can be late, so take checks the age itself: Stale, never skipped.
p.take(0);
p.made(8, 0);
p.give(8, 0);
console.log('take at 2 s:', describe(p.take(2000)));
// Lifetime: a returned item keeps the moment it was made.
const aged = new Pool({ limits: new Limits({ size: 2, life: 4000 }) });
aged.take(0);
aged.made(5, 0);
aged.give(5, 3000);
console.log('idle:', aged.idle);
console.log('take at 5 s:', describe(aged.take(5000))); // made 5 s ago, life 4 s

// 04 -------------------------------------------------------------------------
chapter(4, 'A ward in front');
const guarded = new Pool({ limits: new Limits({ size: 4 }), ward: new Ward({ breaker: new Breaker() }) });
console.log('refusal:', guarded.refusal(0));
for (let i = 0; i < 8; i++) {
  const now = i * 100;
  if (guarded.take(now, 0.99).kind === 'make') guarded.unmade(now, 0.5); // every make fails
}
console.log('refusal after 8 failed makes:', Math.round(guarded.refusal(800) * 1000) / 1000);
console.log('take, roll 0.1:', describe(guarded.take(900, 0.1))); // inside the refused share
console.log('take, roll 0.99:', describe(guarded.take(900, 0.99))); // outside it
// A backoff holds makes after a failure instead of refusing them.
const held = new Pool({ limits: new Limits({ size: 4 }), ward: new Ward({ backoff: new Backoff() }) });
held.take(0);
held.unmade(0, 0.5); // held for delay(1, 0.5) = 50 ms from the failure
console.log('take at 1 ms:', describe(held.take(1)));
console.log('take at 5 s:', describe(held.take(5000)));

// 05 -------------------------------------------------------------------------
chapter(5, 'Picking between pools');
const a = new Pool({ limits: new Limits({ size: 4 }) });
const b = new Pool({ limits: new Limits({ size: 4 }) });
a.take(0);
a.made(1, 0);
console.log('pick:', pick([a, b], 0, 0.0, 0.9)); // b has nothing in use
console.log('pick from none:', pick([], 0, 0.0, 0.0));

// 06 -------------------------------------------------------------------------
chapter(6, 'A client loop');

const log = [];
const use = (c) => log.push(`use ${c}`);
const close = (c) => log.push(`close ${c}`);
const open = () => 1;

/** All six answers in one place: the whole of what a caller writes. */
function serve(pool, now, roll) {
  let conn;
  const t = pool.take(now, roll);
  switch (t.kind) {
    case 'ready':
      conn = t.item;
      break;
    case 'stale':
      close(t.item); // too old; it is ours now, and no longer counted
      break;
    case 'make': {
      const opened = open();
      if (opened !== undefined) {
        pool.made(opened, now);
        conn = opened;
      } else {
        pool.unmade(now, roll);
      }
      break;
    }
    case 'wait':
      log.push('queue');
      break;
    case 'later':
      log.push(`later ${t.delay}`);
      break;
    case 'shed':
      log.push('fail fast');
      break;
  }
  if (conn !== undefined) {
    use(conn);
    if (!pool.give(conn, now)) close(conn); // false: enough idle already
  }
}

const client = new Pool({ limits: new Limits({ size: 1, keep: 10_000 }) });
serve(client, 0, 0.5); // Make: open, use, give back
serve(client, 1000, 0.5); // Ready: reuse the idle one
serve(client, 20_000, 0.5); // Stale: idle 19 s, past keep; close it
serve(client, 20_000, 0.5); // Make again
const other = client.take(21_000); // someone else holds the only one...
serve(client, 21_000, 0.5); // ...so Wait: queue
if (other.kind === 'ready') client.give(other.item, 21_000);
console.log(log.join('\n'));
console.log('live:', client.live, 'idle:', client.idle);
