#!/usr/bin/env node
'use strict';
// The `headway` command line for Node (`npx headway ...`).
//
//     headway worker ./app.js [-c 4] [-Q a,b] [--prefetch N] [--grace ms]
//     headway beat ./app.js
//
// The module (CommonJS or ESM, resolved from the current directory) must
// export a headway App: as `module.exports`, as its default export, or as
// `app`. SIGINT and SIGTERM stop a worker gracefully — no more claims, runs
// in progress get the grace (10 s), what it held is given back — and the
// process exits once it has; a second signal exits at once. Mirrors
// Python's `headway worker -A module:app` and its output.

const path = require('node:path');
const { pathToFileURL } = require('node:url');

const USAGE = `usage: headway worker <app.js> [-c N] [-Q a,b] [--prefetch N] [--grace ms]
       headway beat <app.js>`;

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
  if (command !== 'worker' && command !== 'beat') fail(`unknown command ${JSON.stringify(command ?? '')}\n${USAGE}`);
  if (!file || file.startsWith('-')) fail(`${command}: the app module is missing\n${USAGE}`);
  const o = { command, file, concurrency: undefined, queues: undefined, prefetch: undefined, grace: undefined };
  for (let i = 0; i < rest.length; i++) {
    const flag = rest[i];
    const value = rest[i + 1];
    const need = () => {
      if (value === undefined) fail(`${flag} needs a value`);
      i++;
      return value;
    };
    const int = (v) => {
      const n = Number(v);
      if (!Number.isInteger(n) || n < 0) fail(`${flag} must be a whole number, not ${JSON.stringify(v)}`);
      return n;
    };
    if (command === 'worker' && (flag === '-c' || flag === '--concurrency')) o.concurrency = int(need());
    else if (command === 'worker' && (flag === '-Q' || flag === '--queues')) o.queues = need();
    else if (command === 'worker' && flag === '--prefetch') o.prefetch = int(need());
    else if (command === 'worker' && flag === '--grace') o.grace = int(need());
    else fail(`unknown option ${flag}\n${USAGE}`);
  }
  return o;
}

async function load(file, App) {
  const full = path.resolve(process.cwd(), file);
  let mod;
  try {
    mod = await import(pathToFileURL(full).href);
  } catch (e) {
    fail(`cannot import ${file}: ${e && e.message}`);
  }
  for (const v of [mod.default, mod.app, mod.default && mod.default.app]) {
    if (v instanceof App) return v;
  }
  const got = mod.default === undefined ? 'nothing' : typeof mod.default;
  fail(`${file} does not export a headway App (as module.exports, its default export or \`app\`; got ${got})`);
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
  const w = app.worker(options);
  const running = w.run();
  onSignals(() => {
    w.stop(o.grace === undefined ? undefined : { grace: o.grace });
  });
  console.log(
    `headway worker ${w.name}: app ${o.file}, queues ${w.queues.join(',')}, ` +
      `concurrency ${w.concurrency}, prefetch ${w.prefetch}`,
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

async function main() {
  const o = parse(process.argv.slice(2));
  const { App } = require('./index.js');
  if (o.command === 'worker') await worker(o, App);
  else await beat(o, App);
}

main().catch((e) => {
  process.stderr.write(`headway: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
