'use strict';
// A child of the process pool: `node lib/child.js <module URL>`, started by a
// worker made with `app.worker({ pool: 'process' })` (the core starts it,
// with its socket to the parent as fd 3).
//
// It imports the module — CommonJS or ESM, through `import()` — finds the
// App it exports (lib/load.js: the default export, `app`, or the only App),
// and serves the runs the parent hands over: each goes through the app's
// body queue to this event loop, exactly as in a worker on the default
// pool, so arguments, results, failures, `ctx.signal` and the soft time
// limit behave the same. When the parent closes the socket (it retired this
// child, it stopped, or it died) the child exits.
//
// While the module is imported, `app.worker()` throws: a module that starts
// its worker at import would otherwise start a pool from every child. The
// child ignores SIGINT: a Ctrl-C reaches the whole process group, and the
// parent, which stops gracefully, ends its children itself (Node resets an
// inherited "ignore" at start, so it takes a listener). SIGTERM keeps its
// default: it is how a terminate stops a run.

const fs = require('node:fs');

const { App, _child } = require('./tasks.js');
const { importApp } = require('./load.js');

function die(message) {
  process.stderr.write(`headway process-pool child: ${message}\n`);
  process.exit(1);
}

async function main() {
  const spec = process.argv[2];
  let sock = false;
  try {
    sock = fs.fstatSync(3).isSocket();
  } catch {
    sock = false;
  }
  if (process.env.HEADWAY_PROCESS_CHILD !== '1' || !sock || !spec) {
    die('lib/child.js is started by a worker on the process pool, not by hand');
  }
  process.on('SIGINT', () => {});
  _child.enter();
  let app;
  try {
    app = await importApp(spec, App);
  } catch (e) {
    die(e && e.cause && e.cause.stack ? `${e.message}\n${e.cause.stack}` : String(e && e.message));
  }
  await _child.serve(app);
  process.exit(0);
}

main().catch((e) => die(e && e.stack ? e.stack : String(e)));
