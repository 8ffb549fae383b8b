'use strict';
// The headway Node side of interop/run_links.sh.
//
//   node hw_node.js worker --queues node      a worker process until SIGTERM
//   node hw_node.js send '{"name","args","queue"}'   → {"id","ok"} (waits)
//
// Environment as for hw_py.py: HEADWAY_LINKS_URL, HEADWAY_LINKS_VT (s),
// HEADWAY_LINKS_WORKER, HEADWAY_LINKS_DIR (each run appends one JSON line to
// ledger-<worker>.jsonl; `n.gate` waits there for its file gate-<label>).
// Tasks `n.*` are registered only here. A worker process is the node
// `<worker>@links` in Celery's remote control (its broker's `consumer`), as
// the harness's Celery workers are; a producer step is no node.
const fs = require('node:fs');
const path = require('node:path');
const { App, RedisBroker } = require(path.join(__dirname, '..', '..'));

const URL = process.env.HEADWAY_LINKS_URL;
const VT = Number(process.env.HEADWAY_LINKS_VT || '4');
const NAME = process.env.HEADWAY_LINKS_WORKER || 'hw-node';
const consumer = process.argv[2] === 'worker' ? `${NAME}@links` : undefined;
const app = new App({ broker: RedisBroker.celery(URL, { consumer, visibilityTimeout: VT * 1000 }) });

function note(ctx, args) {
  const line = JSON.stringify({
    task: ctx.name, id: ctx.id, side: 'headway-node', worker: NAME, args,
    at: Date.now() / 1000, parent_id: ctx.parentId, root_id: ctx.rootId,
  });
  fs.appendFileSync(path.join(process.env.HEADWAY_LINKS_DIR, `ledger-${NAME}.jsonl`), line + '\n');
}

const node = { queue: 'node' };
app.task('n.add', ([x, y = 0], ctx) => { note(ctx, [x, y]); return x + y; }, node);
app.task('n.record', (args, ctx) => { note(ctx, args); return args; }, node);
// Runs until the harness creates gate-<label> (at most 60 s): a run in
// progress for as long as the harness needs one.
app.task('n.gate', async ([label], ctx) => {
  note(ctx, [label]);
  const file = path.join(process.env.HEADWAY_LINKS_DIR, `gate-${label}`);
  const end = Date.now() + 60000;
  while (!fs.existsSync(file)) {
    if (Date.now() > end) throw new Error(`${file} never appeared`);
    await new Promise((r) => setTimeout(r, 20));
  }
  return `headway-node:${label}`;
}, node);

async function main() {
  const [cmd, rest] = [process.argv[2], process.argv.slice(3)];
  if (cmd === 'worker') {
    const opts = {};
    for (let i = 0; i + 1 < rest.length; i += 2) opts[rest[i]] = rest[i + 1];
    const w = app.worker({ queues: opts['--queues'] || 'node', concurrency: 2, name: NAME });
    process.on('SIGTERM', () => { w.stop({ grace: 2000 }); });
    console.log(`ready ${NAME} pid ${process.pid} queues ${w.queues}`);
    await w.run();
    return;
  }
  const arg = JSON.parse(rest[0] || '{}');
  if (cmd === 'send') {
    const h = await app.sendTask(arg.name, arg.args || [], { queue: arg.queue });
    const ok = await h.get(30000);
    console.log(JSON.stringify({ id: h.id, ok }));
    return;
  }
  throw new Error(`unknown command ${cmd}`);
}

main().then(
  () => process.exit(0),
  (e) => { console.error(e); process.exit(1); },
);
