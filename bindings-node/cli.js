#!/usr/bin/env node
'use strict';
// The `headway` command line for Node (`npx headway ...`).
//
//     headway worker ./app.js [-c 4] [-Q a,b] [--prefetch N] [--prefetch-multiplier M] [--grace ms]
//                   [--pool process] [--max-tasks-per-child K]
//                   [--max-memory-per-child KIB] [--time-limit S]
//                   [--soft-time-limit S] [--metrics-port P [--metrics-host H]] [-E]
//     headway beat ./app.js
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
// importing the same module. Time limits are in seconds, as Celery's
// `--time-limit` and `--soft-time-limit` are. Mirrors Python's `headway
// worker -A module:app` and its output. `--loglevel` (Celery's names:
// debug, info, warning, error, critical) and `--log-format` (`text`:
// `[<UTC time> <LEVEL> <logger>] <message>`; `json`: one object a line with
// ts, level, logger, message, worker, task_name, task_id) set the core's
// records on stderr, the same lines as Python's CLI.

const path = require('node:path');

const USAGE = `usage: headway worker <app.js> [-c N] [-Q a,b] [--prefetch N] [--prefetch-multiplier M] [--grace ms]
                      [--pool threads|process] [--max-tasks-per-child K]
                      [--max-memory-per-child KIB] [--time-limit S] [--soft-time-limit S]
                      [--metrics-port P [--metrics-host 127.0.0.1]] [-E/--task-events]
       headway beat <app.js>
       headway inspect <app.js> <what> [--json] [--timeout S] [-d NODE,...]
       headway control <app.js> <what> [args...] [--json] [--timeout S] [-d NODE,...]
       any: [-l/--loglevel warning] [--log-format text|json]`;

function fail(message) {
  process.stderr.write(`headway: ${message}\n`);
  process.exit(2);
}

function parse(argv) {
  const [command, file, ...rest] = argv;
  if (command === '-h' || command === '--help') {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  if (!['worker', 'beat', 'inspect', 'control'].includes(command)) fail(`unknown command ${JSON.stringify(command ?? '')}\n${USAGE}`);
  if (!file || file.startsWith('-')) fail(`${command}: the app module is missing\n${USAGE}`);
  const o = { command, file, concurrency: undefined, queues: undefined, prefetch: undefined, grace: undefined, loglevel: 'warning', logFormat: 'text' };
  const worker = {};
  const remote = command === 'inspect' || command === 'control';
  if (remote) {
    if (rest.length === 0 || rest[0].startsWith('-')) fail(`${command}: what to ${command} is missing\n${USAGE}`);
    o.what = rest.shift();
    o.words = [];
  }
  for (let i = 0; i < rest.length; i++) {
    const flag = rest[i];
    const value = rest[i + 1];
    const need = () => {
      if (value === undefined) fail(`${flag} needs a value`);
      i++;
      return value;
    };
    // Seconds on the command line (Celery's unit), ms for the worker.
    const seconds = (v) => {
      const n = Number(v);
      if (v.trim() === '' || !Number.isFinite(n)) fail(`${flag} must be a number of seconds, not ${JSON.stringify(v)}`);
      return Math.round(n * 1000);
    };
    const int = (v) => {
      const n = Number(v);
      if (!Number.isInteger(n) || n < 0) fail(`${flag} must be a whole number, not ${JSON.stringify(v)}`);
      return n;
    };
    if (flag === '-l' || flag === '--loglevel') o.loglevel = need();
    else if (flag === '--log-format') o.logFormat = need();
    else if (command === 'worker' && (flag === '-c' || flag === '--concurrency')) o.concurrency = int(need());
    else if (command === 'worker' && (flag === '-Q' || flag === '--queues')) o.queues = need();
    else if (command === 'worker' && flag === '--prefetch') o.prefetch = int(need());
    else if (command === 'worker' && flag === '--grace') o.grace = int(need());
    else if (command === 'worker' && flag === '--pool') worker.pool = need();
    else if (command === 'worker' && flag === '--max-tasks-per-child') worker.maxTasksPerChild = int(need());
    else if (command === 'worker' && flag === '--prefetch-multiplier') worker.prefetchMultiplier = int(need());
    else if (command === 'worker' && flag === '--max-memory-per-child') worker.maxMemoryPerChild = int(need());
    else if (command === 'worker' && flag === '--time-limit') worker.timeLimit = seconds(need());
    else if (command === 'worker' && flag === '--soft-time-limit') worker.softTimeLimit = seconds(need());
    else if (command === 'worker' && flag === '--metrics-port') o.metricsPort = int(need());
    else if (command === 'worker' && (flag === '-E' || flag === '--task-events')) o.taskEvents = true;
    else if (command === 'worker' && flag === '--metrics-host') o.metricsHost = need();
    else if (remote && flag === '--json') o.json = true;
    else if (remote && (flag === '-t' || flag === '--timeout')) {
      const v = need();
      o.timeout = Number(v);
      if (v.trim() === '' || !Number.isFinite(o.timeout)) fail(`${flag} must be a number of seconds, not ${JSON.stringify(v)}`);
    } else if (remote && (flag === '-d' || flag === '--destination')) o.destination = need().split(',').filter((d) => d);
    else if (remote && !flag.startsWith('-')) o.words.push(flag);
    else fail(`unknown option ${flag}\n${USAGE}`);
  }
  o.worker = worker;
  return o;
}

async function load(file, App) {
  const { importApp } = require('./lib/load.js');
  try {
    return await importApp(file, App);
  } catch (e) {
    fail(e && e.message);
  }
  return undefined;
}

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
  const app = await load(o.file, App);
  const options = {};
  if (o.concurrency !== undefined) options.concurrency = o.concurrency;
  if (o.queues !== undefined) options.queues = o.queues;
  if (o.prefetch !== undefined) options.prefetch = o.prefetch;
  Object.assign(options, o.worker);
  // The children import the module this command was given (the main
  // script here is this CLI).
  if (options.pool !== undefined) options.module = path.resolve(process.cwd(), o.file);
  let w;
  try {
    w = app.worker(options);
  } catch (e) {
    fail(e.message);
  }
  if (o.taskEvents) {
    try {
      require('./lib/tasks.js')._enableTaskEvents(app);
    } catch (e) {
      fail(e.message);
    }
  }
  if (o.metricsPort !== undefined) {
    const host = o.metricsHost ?? '127.0.0.1';
    let port;
    try {
      port = require('./lib/tasks.js')._serveMetrics(app, host, o.metricsPort);
    } catch (e) {
      fail(e.message);
    }
    console.log(`metrics: http://${host}:${port}/metrics`);
  }
  const running = w.run();
  onSignals(() => {
    w.stop(o.grace === undefined ? undefined : { grace: o.grace });
  });
  console.log(
    `headway worker ${w.name}: app ${o.file}, queues ${w.queues.join(',')}, ` +
      `concurrency ${w.concurrency}, prefetch ${w.prefetch}, pool ${w.pool}`,
  );
  console.log(`tasks: ${app.taskNames().join(', ') || '(none)'}`);
  console.log('ready');
  await running;
  console.log(`headway worker ${w.name}: stopped after settling ${w.settled}`);
}

async function beat(o, App) {
  const app = await load(o.file, App);
  const b = app.beat();
  const pending = b.pending();
  const running = b.run();
  onSignals(() => {
    b.stop();
  });
  console.log(`headway beat: app ${o.file}, ${pending.length} entries`);
  for (const [name, when] of pending) console.log(`  ${name}: next at ${when.toISOString()}`);
  console.log('ready');
  await running;
  console.log('headway beat: stopped');
}

async function remote(o, App) {
  const app = await load(o.file, App);
  let r;
  try {
    r = await require('./lib/tasks.js')._remote(app, {
      kind: o.command,
      what: o.what,
      words: o.words,
      timeout: o.timeout,
      destination: o.destination && o.destination.length ? o.destination : undefined,
      json: Boolean(o.json),
    });
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
  try {
    require('./lib/logs.js').configure(o.loglevel, o.logFormat);
  } catch (e) {
    fail(e.message);
  }
  if (o.command === 'worker') await worker(o, App);
  else if (o.command === 'beat') await beat(o, App);
  else await remote(o, App);
}

main().catch((e) => {
  process.stderr.write(`headway: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
