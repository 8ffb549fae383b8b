'use strict';
// headway's log records for Node. By default the core writes warnings and
// errors to stderr as they happen (the message alone); `NODE_DEBUG=headway`
// lowers the level to debug. `new App({ logger })` hands every record to
// `logger` instead: an object with `debug`, `info`, `warn` and `error`
// (console, pino, winston all fit), each called as `logger.warn(message,
// fields)` with `fields` = { logger, worker, taskName, taskId, ts } (the
// core's target such as 'headway.worker', and the run where known). The
// records are the process's, not one app's: every logger given to an App
// receives each of them. The CLI's `--loglevel` and `--log-format` set the
// level and the stderr lines (the same lines as Python's CLI).
const { debuglog } = require('node:util');
const native = require('../addon.js');
const { argType } = require('./errors.js');

const METHOD = { DEBUG: 'debug', INFO: 'info', WARNING: 'warn', ERROR: 'error' };
const loggers = new Set();
let forwarding = false;

function dispatch(line) {
  let r;
  try {
    r = JSON.parse(line);
  } catch {
    return;
  }
  const fields = { logger: r.logger, worker: r.worker ?? null, taskName: r.task_name ?? null, taskId: r.task_id ?? null, ts: r.ts };
  for (const l of loggers) {
    try {
      l[METHOD[r.level] ?? 'warn'](r.message, fields);
    } catch {
      // A logger that throws loses its record; the others still get it.
    }
  }
}

/** Sends the core's records to `logger` (an App's `logger` option). */
function useLogger(logger) {
  if (logger === null || typeof logger !== 'object' && typeof logger !== 'function') {
    throw argType('logger', 'an object with debug, info, warn and error methods', logger);
  }
  for (const m of Object.values(METHOD)) {
    if (typeof logger[m] !== 'function') {
      throw argType('logger', `an object with debug, info, warn and error methods (no ${m}())`, logger);
    }
  }
  loggers.add(logger);
  if (!forwarding) {
    native._logTo(dispatch);
    forwarding = true;
  }
}

/** The CLI's `--loglevel` and `--log-format`; throws naming a bad value. */
function configure(level, format) {
  native._logLevel(level);
  native._logStderr(format);
  forwarding = false;
  loggers.clear();
}

native._logStderr();
if (debuglog('headway').enabled) native._logLevel('debug');

module.exports = { useLogger, configure };
