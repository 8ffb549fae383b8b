// The process pool's speed from Node on a CPU-bound body: 40 runs of ~50 ms
// of pure-JS work at concurrency 2, on the event loop and on two children,
// back to back, three rounds; prints each round's times and the ratio
// (children ÷ event loop; 0.5 is two cores fully used). Run alone on the
// machine, from the repository's root: `node bench/procs/cpu.mjs`.
// tests-js/procs.test.mjs asserts the mechanism (a second run goes on while
// a first holds its process), not this speed, which a neighbour on a shared
// machine moves.
import { fileURLToPath } from 'node:url';

import { app, work } from '../../tests-js/fixtures/cpu-app.mjs';

const MODULE = fileURLToPath(new URL('../../tests-js/fixtures/cpu-app.mjs', import.meta.url));

// ~50 ms of work per run, sized here; the same n on both pools.
let n = 200_000;
for (;;) {
  const t = performance.now();
  work(n);
  const ms = performance.now() - t;
  if (ms >= 20) {
    n = Math.round((n * 50) / ms);
    break;
  }
  n *= 2;
}

async function measure(options) {
  const w = app.worker({ concurrency: 2, ...options });
  const running = w.run();
  try {
    // Warm: every child started, the loop compiled.
    await Promise.all(Array.from({ length: 4 }, () => app.send('cpu', [n]).then((h) => h.get(20_000))));
    const t = performance.now();
    const hs = await Promise.all(Array.from({ length: 40 }, () => app.send('cpu', [n])));
    const values = await Promise.all(hs.map((h) => h.get(60_000)));
    if (values.length !== 40) throw new Error(`drained ${values.length} of 40`);
    return performance.now() - t;
  } finally {
    await w.stop();
    await running;
  }
}

for (let i = 0; i < 3; i++) {
  const loop = await measure({});
  const procs = await measure({ pool: 'process', module: MODULE });
  console.log(JSON.stringify({ loop_ms: Math.round(loop), procs_ms: Math.round(procs), ratio: +(procs / loop).toFixed(2) }));
}
