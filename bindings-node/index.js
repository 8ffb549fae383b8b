'use strict';
// headway for Node: the public names, gathered from lib/, one file per
// concern — flow control (flow.js, retry.js, pooled.js), the task queue
// (tasks.js and what it builds on) and the admin interface (admin.js). This
// file only re-exports; the names are listed once, here, and index.mjs takes
// them from here. See index.d.ts for what each item answers and why.

const native = require('./addon.js');
const { F, Limits, Pool, Ward, Breaker, pick, Backoff, Bucket, Window, Gate, poolMapped } = require('./lib/flow.js');
const { retry } = require('./lib/retry.js');
const { Pooled } = require('./lib/pooled.js');
const { SharedBucket, SharedWindow, SharedGate } = require('./lib/limits.js');

const { version } = native;
// The admin interface: admin.handler(app, { token }) for http or Express.
const admin = Object.freeze(require('./lib/admin.js'));

module.exports = {
  Limits,
  Pool,
  Ward,
  Breaker,
  pick,
  Backoff,
  Bucket,
  Window,
  Gate,
  SharedBucket,
  SharedWindow,
  SharedGate,
  retry,
  Pooled,
  version,
  // The task queue: App, Task, Worker, Beat, the canvas, schedules, testing.
  ...require('./lib/tasks.js'),
  admin,
};

// Hidden: the benchmark's floors, the panic tests and the leak probes.
Object.defineProperties(module.exports, {
  _native: { value: native },
  _flow: { value: F },
  // The napi floor: a native function that reads two numbers and answers
  // true — the call Bucket.take makes, doing nothing.
  _noop: { value: F.noop },
  // The same with an instance id first, as every method call carries.
  _noop3: { value: F.noop3 },
  // The same empty call through napi-rs's #[napi] glue, for comparison.
  _noopNapi: { value: native._noopNapi },
  _panic: { value: native._panic },
  _panicRaw: { value: F.panic },
  // How many native flow values are alive; how many items a Pool maps.
  _alive: { value: F.alive },
  _mapped: { value: (pool) => poolMapped(pool) },
});
