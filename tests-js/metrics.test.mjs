// `headway worker --metrics-port`: Prometheus text on the worker's own
// port, values matching the runs made; a bad port refused by name.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const CLI = fileURLToPath(new URL('../bindings-node/cli.js', import.meta.url));
const APP = 'tests-js/fixtures/metrics-app.mjs';

function sample(text, name) {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
}

test('a worker serves its metrics on its own port', async () => {
  const proc = spawn(process.execPath, [CLI, 'worker', APP, '-c', '1', '--metrics-port', '0'], { cwd: ROOT });
  try {
    const out = createInterface({ input: proc.stdout });
    const url = await new Promise((resolve, reject) => {
      out.on('line', (l) => {
        if (l.startsWith('metrics: ')) resolve(l.split(' ')[1]);
      });
      proc.on('exit', () => reject(new Error('the worker ended')));
    });
    const end = Date.now() + 10_000;
    let text = '';
    for (;;) {
      const r = await fetch(url);
      assert.equal(r.status, 200);
      assert.match(r.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
      text = await r.text();
      if (sample(text, 'headway_tasks_total{task="mm.add",state="SUCCESS"}') === 5 || Date.now() > end) break;
      await new Promise((res) => setTimeout(res, 50));
    }
    assert.equal(sample(text, 'headway_tasks_total{task="mm.add",state="SUCCESS"}'), 5, text);
    assert.equal(sample(text, 'headway_task_runtime_seconds_count{task="mm.add"}'), 5);
    assert.equal(sample(text, 'headway_queue_depth{queue="default"}'), 0);
    assert.match(text, /# TYPE headway_worker_active gauge/);
    assert.equal((await fetch(url.replace('/metrics', '/other'))).status, 404);
  } finally {
    proc.kill('SIGKILL');
  }
});

test('a bad metrics port is refused by name', () => {
  const r = spawnSync(process.execPath, [CLI, 'worker', APP, '--metrics-port', '70000'], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /metrics port must be 0 to 65535, not 70000/);
});

test("-E on a broker that sends no events is refused naming Celery's layout", () => {
  const r = spawnSync(process.execPath, [CLI, 'worker', APP, '-E'], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /task events \(-E\) are Celery's/);
});
