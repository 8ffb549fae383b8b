// Per-call cost of headway's SharedBucket from Node, beside
// rate-limiter-flexible's RateLimiterRedis (through ioredis) on the same Redis.
//
//   cd bench/limits && npm install            # rate-limiter-flexible, ioredis
//   node bench/limits/bench.mjs REDIS_URL [--calls N] [--json]
//
// (`bash bench/limits/run.sh` runs this and the Python side in one run.)
//
// Sequential rows: N calls one after another (each awaits its answer), best
// of five rounds, µs per call — the latency a request pays for its check.
// Concurrent rows: 64 calls in flight at all times, calls per second — what
// one process gets through one connection. Every limiter is set so that
// every call is granted. The floor is a bare PING through ioredis.
// rate-limiter-flexible's limiter is a fixed-window counter (one INCR and a
// TTL per call, in Lua); headway's bucket and exact window are both shown.
import { createRequire } from 'node:module';
import { randomUUID } from 'node:crypto';

const require = createRequire(import.meta.url);
const headway = require('../../bindings-node/index.js');
const { RateLimiterRedis } = require('rate-limiter-flexible');
const Redis = require('ioredis');

const args = process.argv.slice(2);
const url = args[0];
const calls = args.includes('--calls') ? Number(args[args.indexOf('--calls') + 1]) : 5000;
const asJson = args.includes('--json');
const tag = randomUUID().slice(0, 8);
const rows = [];

function row(name, value, unit, note = '') {
  rows.push({ name, [unit]: Math.round(value * 100) / 100, note });
  if (!asJson) console.log(`${name.padEnd(58)} ${value.toFixed(1).padStart(10)} ${unit === 'us' ? 'µs/call' : 'calls/s'}  ${note}`);
}

// Rows are measured in rounds, every row once per round, and each keeps
// its best round: on a shared or virtual machine the cost of a round trip
// drifts over seconds, and rows run one after another would each sample a
// different stretch of it. Interleaved, every peer samples the same ones.
async function bestUsEach(named, n, rounds = 5) {
  const best = named.map(() => Infinity);
  for (const [, call] of named) for (let i = 0; i < Math.min(n, 200); i++) await call();
  for (let r = 0; r < rounds; r++) {
    for (const [k, [, call]] of named.entries()) {
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < n; i++) await call();
      best[k] = Math.min(best[k], Number(process.hrtime.bigint() - t0) / 1e3 / n);
    }
  }
  for (const [k, [name]] of named.entries()) row(name, best[k], 'us');
}

async function perSecondEach(named, n, inFlight = 64, rounds = 3) {
  const best = named.map(() => 0);
  for (let r = 0; r < rounds; r++) {
    for (const [k, [, call]] of named.entries()) {
      let left = n;
      const t0 = process.hrtime.bigint();
      const lane = async () => {
        while (left-- > 0) await call();
      };
      await Promise.all(Array.from({ length: inFlight }, lane));
      best[k] = Math.max(best[k], n / (Number(process.hrtime.bigint() - t0) / 1e9));
    }
  }
  for (const [k, [name]] of named.entries()) row(name, best[k], 'perSec');
}

const io = new Redis(url);
const huge = 1e9;
const b = new headway.SharedBucket(url, `b-${tag}`, huge, { burst: huge });
const w = new headway.SharedWindow(url, `w-${tag}`, 1e9, 60_000);
const rl = new RateLimiterRedis({ storeClient: io, keyPrefix: `rl-${tag}`, points: 1e9, duration: 60 });

await bestUsEach([
  ['floor: ioredis PING', () => io.ping()],
  ['headway SharedBucket.take()', () => b.take()],
  ['headway SharedWindow.take() (exact sliding window)', () => w.take()],
  ['rate-limiter-flexible RateLimiterRedis.consume()', () => rl.consume('k')],
], calls);
await perSecondEach([
  ['floor: ioredis PING, 64 in flight', () => io.ping()],
  ['headway SharedBucket.take(), 64 in flight', () => b.take()],
  ['rate-limiter-flexible consume(), 64 in flight', () => rl.consume('k')],
], calls * 4);

if (!(await b.take())) throw new Error('headway refused a call the bench meant to grant');
await rl.consume('k');
io.disconnect();

if (asJson) {
  const v = (p) => require(`${p}/package.json`).version;
  console.log(JSON.stringify({
    calls,
    rows,
    versions: { node: process.version, headway: headway.version(), 'rate-limiter-flexible': v('rate-limiter-flexible'), ioredis: v('ioredis') },
  }));
}
