// The seed's two examples print exactly this, every run (they pin their
// clock to a virtual one) — the same lines as examples/01_queue.py and
// examples/02_canvas.py.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const QUEUE = `\
00:00:00  send greet('ada')
00:00:00  greet('ada') attempt 1
00:00:30  greet('ada') attempt 2
00:00:30  answer: 'hello ada, attempt 2'
state: SUCCESS
`;

const CANVAS = `\
chain  add(1, 2) | add(3) | mul(10)  = 60
pipe   add(2, 2) | mul(5)            = 20
group  add(i, i) for i in 0..4       = [0, 2, 4, 6, 8]
chord  total(add(i, i) for i in 0..4) = 20
`;

for (const [script, expected] of [
  ['01-queue.mjs', QUEUE],
  ['02-canvas.mjs', CANVAS],
]) {
  test(`examples/${script} prints the same every run, and exits`, () => {
    const path = fileURLToPath(new URL(`../examples/${script}`, import.meta.url));
    for (let i = 0; i < 2; i++) {
      const r = spawnSync(process.execPath, [path], { encoding: 'utf8', timeout: 30_000 });
      assert.equal(r.error, undefined, `did not exit: ${r.error}`);
      assert.equal(r.status, 0, r.stderr);
      assert.equal(r.stdout, expected);
    }
  });
}
