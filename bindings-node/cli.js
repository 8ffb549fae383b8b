#!/usr/bin/env node
'use strict';
// The `headway` command line for Node (`npx headway ...`).
//
//     headway worker ./app.js [-c 4] [-Q a,b] [--prefetch N] [--prefetch-multiplier M] [--grace S]
//                   [-P/--pool process] [--max-tasks-per-child K]
//                   [--max-memory-per-child KIB] [--time-limit S]
//                   [--soft-time-limit S] [--metrics-port P [--metrics-host H]] [-E]
//     headway beat ./app.js
//     headway admin ./app.js [--host 127.0.0.1] [--port 5555] [--token T] [--read-only] [--worker N] [--grace S]
//     headway inspect ./app.js WHAT [--json] [--timeout S] [-d NODE,...]
//     headway control ./app.js WHAT [ARGS] [--json] [--timeout S] [-d NODE,...]
//     any: [-l/--loglevel warning] [--log-format text|json]
//
// `inspect` and `control` are Celery's: they ask every process where a
// worker of the app runs (inspect ping, active, reserved, scheduled,
// stats, registered, active-queues; control shutdown, rate-limit TASK
// RATE, time-limit TASK SOFT [HARD], pool-grow [N], pool-shrink [N],
// add-consumer Q, cancel-consumer Q, heartbeat). The words, the sending,
// the gathering and the printed text are the core's, as in Python's CLI.
//
// The module (CommonJS or ESM, resolved from the current directory) must
// export a headway App: as `module.exports` / its default export, as `app`,
// or as its only App export (lib/load.js). SIGINT and SIGTERM stop a worker
// gracefully — no more claims, runs in progress get the grace (10 s), what it
// held is given back — and the process exits once it has; a second signal
// exits at once. `--pool process` runs the bodies in N child processes, each
// importing the same module. Times (`--grace`, the time limits, `--timeout`)
// are in seconds, as Celery's `--time-limit` is. The words are read by the
// core's parser, Python's CLI's too (`headway worker -A ./app.js` works as
// well); the output is the same as Python's. `--loglevel` (Celery's names:
// debug, info, warning, error, critical) and `--log-format` (`text`:
// `[<UTC time> <LEVEL> <logger>] <message>`; `json`: one object a line with
// ts, level, logger, message, worker, task_name, task_id) set the core's
// records on stderr, the same lines as Python's CLI.

const path = require('node:path');

function fail(message) {
  process.stderr.write(`headway: ${message}\n`);
  process.exit(2);
}

/** `f()`, or the command fails (exit 2) with the message of what it threw. */
function must(f) {
  try {
    return f();
  } catch (e) {
    return fail(e && e.message);
  }
}

// The words are read by the core's parser (Python's CLI's too): flags,
// units, defaults and the errors naming a bad value are the same in both.
function parse(argv) {
  const parsed = must(() => JSON.parse(require('./addon.js')._cliParse(argv)));
  if (parsed.kind === 'help') {
    process.stdout.write(`${parsed.text}\n`);
    process.exit(0);
  }
  return parsed;
}

// The printed lines are the core's (Python's CLI prints the same).
function say(line, fields = {}) {
  console.log(must(() => require('./addon.js')._banner(line, JSON.stringify(fields))));
}

function load(file, App) {
  const { importApp } = require('./lib/load.js');
  return importApp(file, App).catch((e) => fail(e && e.message));
}

// A stop's options: the parser's `--grace` seconds as the ms it takes (not
// given: the worker's default).
const stopOptions = (o) => (o.grace === null ? undefined : { grace: Math.round(o.grace * 1000) });

function onSignals(stop) {
  let stopping = false;
  const handler = () => {
    if (stopping) process.exit(130);
    stopping = true;
    stop();
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
}

async function worker(o, App) {
  const app = await load(o.app, App);
  // The flags given, named and in ms as app.worker takes them (the
  // core's parse); what the command line did not give is the worker's
  // default.
  const options = { queues: o.queues, ...o.worker_options };
  // The children import the module this command was given (the main
  // script here is this CLI).
  if (o.pool !== null) options.module = path.resolve(process.cwd(), o.app);
  const w = must(() => app.worker(options));
  if (o.task_events) must(() => require('./lib/tasks.js')._enableTaskEvents(app));
  if (o.metrics_port !== null) {
    const host = o.metrics_host;
    const port = must(() => require('./lib/tasks.js')._serveMetrics(app, host, o.metrics_port));
    say('metrics', { host, port });
  }
  const running = w.run();
  onSignals(() => {
    w.stop(stopOptions(o));
  });
  say('worker_ready', {
    name: w.name,
    app: o.app,
    queues: w.queues,
    concurrency: w.concurrency,
    prefetch: w.prefetch,
    pool: w.pool,
    tasks: app.taskNames(),
  });
  await running;
  say('worker_stopped', { name: w.name, settled: w.settled });
}

async function beat(o, App) {
  const app = await load(o.app, App);
  const b = app.beat();
  const pending = b.pending();
  const running = b.run();
  onSignals(() => {
    b.stop();
  });
  // Each due time as epoch milliseconds: the core prints it.
  say('beat_ready', { app: o.app, entries: pending.map(([name, when]) => [name, when.getTime()]) });
  await running;
  say('beat_stopped');
}

// The admin page and API on node:http (Python's serves it with uvicorn):
// the same flags and the same lines printed.
async function admin(o, App) {
  const app = await load(o.app, App);
  const http = require('node:http');
  const handle = must(() => require('./lib/admin.js').handler(app, { token: o.token ?? undefined, readOnly: o.read_only, announce: false }));
  // A worker in this process: what a memory-broker app needs to show
  // anything moving (a Redis app's workers may run anywhere).
  const w = o.worker > 0 ? app.worker({ concurrency: o.worker }) : null;
  const working = w === null ? null : w.run();
  const server = http.createServer(handle);
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, o.host, resolve);
  }).catch((e) => fail(`cannot listen on ${o.host}:${o.port}: ${e.message}`));
  const { port } = server.address();
  say('admin_ready', {
    host: o.host,
    port,
    read_only: handle.readOnly,
    generated: handle.tokenGenerated ? handle.token : null,
  });
  await new Promise((resolve) => {
    onSignals(() => {
      // Open pages' streams end first, so their responses finish cleanly.
      handle.closeStreams();
      server.close(resolve);
      server.closeIdleConnections();
      if (w !== null) w.stop(stopOptions(o));
    });
  });
  if (working !== null) await working;
  say('admin_stopped');
}

async function remote(o, App) {
  const app = await load(o.app, App);
  let r;
  try {
    r = await require('./lib/tasks.js')._remote(app, o);
  } catch (e) {
    fail(e.message);
  }
  process.stdout.write(r.out);
  process.stderr.write(r.err);
  process.exitCode = r.code;
}

async function main() {
  const o = parse(process.argv.slice(2));
  const { App } = require('./index.js');
  must(() => require('./lib/logs.js').configure(o.loglevel, o.log_format));
  if (o.command === 'worker') await worker(o, App);
  else if (o.command === 'beat') await beat(o, App);
  else if (o.command === 'admin') await admin(o, App);
  else await remote(o, App);
}

main().catch((e) => {
  process.stderr.write(`headway: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
