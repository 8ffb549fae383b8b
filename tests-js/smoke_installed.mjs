// Smoke test of an installed headway npm package (run by .ci/packages).
//
// Not a node --test file: .ci/packages copies it into a fresh npm project
// whose only dependency is the packed tarball, installed with cargo off PATH,
// and runs it there, so `import 'headway'` can only find the installed
// package and its prebuilt addon. It checks that the addon loads and that the
// three things a new user tries first work: a task on the memory broker, a
// Bucket and a retry.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';

import { App, Backoff, Bucket, retry } from 'headway';

const require = createRequire(import.meta.url);
const entry = require.resolve('headway');
assert.ok(entry.split(path.sep).includes('node_modules'), `headway resolved to ${entry}, not node_modules`);

const app = new App({ broker: 'memory://' });
const add = app.task('add', ([a, b]) => a + b, { retries: 2 });
const worker = app.worker({ concurrency: 2 });
const running = worker.run();
try {
  assert.equal(await (await add.send([2, 3])).get(10000), 5);
} finally {
  await worker.stop({ grace: 1000 });
  await running;
}

const bucket = new Bucket(10, { burst: 2 });
assert.ok(bucket.take() && bucket.take());
assert.equal(bucket.take(), false, 'a burst of 2 gave a third token at once');

let calls = 0;
const answer = await retry(
  async () => {
    calls += 1;
    if (calls < 3) throw new Error('not yet');
    return 'ok';
  },
  { backoff: new Backoff({ attempts: 3, base: 1, cap: 10 }) },
);
assert.equal(answer, 'ok');
assert.equal(calls, 3);

console.log(`smoke ok: headway ${require('headway/package.json').version} from ${path.dirname(entry)}`);
