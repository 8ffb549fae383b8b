// Per-call cost of headway's SharedBucket from Node, beside
// rate-limiter-flexible's RateLimiterRedis (through ioredis) on the same Redis.
//
//   cd bench/limits && npm install            # rate-limiter-flexible, ioredis
//   node bench/limits/bench.mjs REDIS_URL [--calls N] [--json]
//
// (`bash bench/limits/run.sh` runs this and the Python side in one run.)
//
// Sequential rows: N calls one after another (each awaits its answer), best
// of five runs, µs per call — the latency a request pays for its check.
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

async function bestUs(call, n, repeat = 5) {
  for (let i = 0; i < Math.min(n, 200); i++) await call();
  let best = Infinity;
  for (let r = 0; r < repeat; r++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) await call();
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e3);
  }
  return best / n;
}

async function perSecond(call, n, inFlight = 64, repeat = 3) {
  let best = 0;
  for (let r = 0; r < repeat; r++) {
    let left = n;
    const t0 = process.hrtime.bigint();
    const lane = async () => {
      while (left-- > 0) await call();
    };
    await Promise.all(Array.from({ length: inFlight }, lane));
    best = Math.max(best, n / (Number(process.hrtime.bigint() - t0) / 1e9));
  }
  return best;
}

const io = new Redis(url);
row('floor: ioredis PING', await bestUs(() => io.ping(), calls), 'us');

const huge = 1e9;
const b = new headway.SharedBucket(url, `b-${tag}`, huge, { burst: huge });
row('headway SharedBucket.take()', await bestUs(() => b.take(), calls), 'us');
const w = new headway.SharedWindow(url, `w-${tag}`, 1e9, 60_000);
row('headway SharedWindow.take() (exact sliding window)', await bestUs(() => w.take(), calls), 'us');
const rl = new RateLimiterRedis({ storeClient: io, keyPrefix: `rl-${tag}`, points: 1e9, duration: 60 });
row('rate-limiter-flexible RateLimiterRedis.consume()', await bestUs(() => rl.consume('k'), calls), 'us');

row('floor: ioredis PING, 64 in flight', await perSecond(() => io.ping(), calls * 4), 'perSec');
row('headway SharedBucket.take(), 64 in flight', await perSecond(() => b.take(), calls * 4), 'perSec');
row('rate-limiter-flexible consume(), 64 in flight', await perSecond(() => rl.consume('k'), calls * 4), 'perSec');

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
