import { createRequire } from 'node:module';
const require = createRequire(import.meta.url);
const headway = require('../../bindings-node/index.js');
const { RateLimiterRedis } = require('rate-limiter-flexible');
const Redis = require('ioredis');
const url = process.argv[2];
const N = 20000;
async function probe(name, call) {
  for (let i = 0; i < 500; i++) await call();
  let best = Infinity, bestCpu = Infinity;
  for (let r = 0; r < 5; r++) {
    const c0 = process.cpuUsage(); const t0 = process.hrtime.bigint();
    for (let i = 0; i < N; i++) await call();
    const t = Number(process.hrtime.bigint() - t0) / 1e3 / N;
    const c = process.cpuUsage(c0); const cpu = (c.user + c.system) / N;
    best = Math.min(best, t); bestCpu = Math.min(bestCpu, cpu);
  }
  console.log(`${name.padEnd(30)} wall ${best.toFixed(2)} µs  cpu ${bestCpu.toFixed(2)} µs`);
}
const io = new Redis(url);
const b = new headway.SharedBucket(url, 'probe-' + Date.now(), 1e9, { burst: 1e9 });
const rl = new RateLimiterRedis({ storeClient: io, keyPrefix: 'rlp' + Date.now(), points: 1e9, duration: 60 });
for (let k = 0; k < 2; k++) {
  await probe('ioredis PING', () => io.ping());
  await probe('headway take', () => b.take());
  await probe('rlf consume', () => rl.consume('k'));
}
process.exit(0);
