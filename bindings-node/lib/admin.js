'use strict';
// The admin interface as a `(req, res)` handler for `http.createServer` or
// Express (`app.use('/admin', admin.handler(app, { token }))`).
//
// Everything it answers is the core's: the page, the JSON reports, sending
// and revoking, the live stream, the token, CSRF and origin checks, and the
// security headers. This file only reads the request (stopping at maxBody),
// hands it over, writes the answer back, and pumps a live stream's frames
// until the client goes away — then drops the native stream, so no open
// page keeps the process alive.

const native = require('../addon.js');
const { nativeOf } = require('./tasks.js')._admin;
const { coded, constructed } = require('./errors.js');

// A native answer as a Promise. Its payload: JSON text when it came at once
// (JSON.parse), the value itself when it came through the bell (the hub
// splices it into its batch: `same`).
const { answer, same } = require('./host.js');

// Messages worded by the core's rules, not Node's "The "x" argument" ones.
const typeError = (message) => coded('ERR_INVALID_ARG_TYPE', message, TypeError);

/**
 * The body, cut at `max + 1` bytes: the core answers 413 past `max`, so the
 * rest is not read (nor kept). Resolves `null` if the client went away.
 */
function readBody(req, admin, max) {
  // Express's body parsers may have read it already.
  if (Buffer.isBuffer(req.body)) return Promise.resolve(req.body.subarray(0, max + 1));
  if (typeof req.body === 'string') return Promise.resolve(Buffer.from(req.body).subarray(0, max + 1));
  if (req.readableEnded) return Promise.resolve(Buffer.alloc(0));
  // A declared length past max is refused (413) whatever comes: read none
  // (the core's Content-Length rule).
  if (admin.declaresOver(req.rawHeaders)) return Promise.resolve(Buffer.alloc(0));
  return new Promise((resolve) => {
    const parts = [];
    let size = 0;
    const listeners = {
      data: (chunk) => {
        parts.push(chunk);
        size += chunk.length;
        if (size > max) {
          // Enough to refuse: stop reading, keep nothing more.
          req.pause();
          done(Buffer.concat(parts, size).subarray(0, max + 1));
        }
      },
      end: () => done(Buffer.concat(parts, size)),
      error: () => done(null),
      close: () => {
        if (!req.complete) done(null);
      },
    };
    const done = (v) => {
      for (const [event, f] of Object.entries(listeners)) req.off(event, f);
      resolve(v);
    };
    for (const [event, f] of Object.entries(listeners)) req.on(event, f);
  });
}

function writeHead(res, status, headers) {
  // `[[name, value], ...]` may repeat a name (Set-Cookie): Node takes a
  // flat raw-headers array for that.
  const flat = [];
  for (const [k, v] of headers) flat.push(k, v);
  res.writeHead(status, flat);
}

async function pump(admin, id, req, res) {
  let gone = false;
  let wake = null;
  const leave = () => {
    gone = true;
    admin.close(id); // ends a next() waiting for its tick at once
    if (wake) wake();
  };
  req.on('close', leave);
  res.on('close', leave);
  res.on('error', leave);
  try {
    res.flushHeaders();
    while (!gone && !res.destroyed) {
      const frame = await answer(admin.next(id), JSON.parse, same);
      if (frame === null || gone) break;
      if (!res.write(frame)) {
        // A slow client: wait for it to drain (or leave) before the next.
        await new Promise((ok) => {
          wake = ok;
          res.once('drain', ok);
        });
        wake = null;
      }
    }
    if (!gone && !res.writableEnded) res.end();
  } finally {
    req.off('close', leave);
    res.off('close', leave);
    res.off('error', leave);
    admin.close(id);
  }
}

// Each option's type (undefined is the default) and what a refusal says it
// expected; maxBody's range is the core's (refused below, as a RangeError).
const OPTIONS = {
  token: [(v) => v === null || typeof v === 'string', 'a string'],
  readOnly: [(v) => typeof v === 'boolean', 'a boolean'],
  maxBody: [(v) => v === null || typeof v === 'number', 'a number of bytes'],
  allowedOrigins: [(v) => Array.isArray(v) && v.every((x) => typeof x === 'string'), 'an array of strings'],
  announce: [() => true, 'anything'],
};

/**
 * A `(req, res)` handler serving `app`'s admin. `token`: what every route but
 * `/health` needs, typed into the page's login form or sent as
 * `Authorization: Bearer` (null or empty: one is generated and, with
 * `announce`, printed to stderr; under 16 characters: a RangeError). `readOnly`: refuse every change — send, revoke,
 * re-queueing or purging dead letters (403).
 * `maxBody`: the largest request body (64 KiB, the core's default).
 * `allowedOrigins`: origins besides the page's own host whose pages may make
 * changes with the session cookie, compared exactly.
 */
function handler(app, options) {
  const a = nativeOf(app);
  if (a === undefined) throw typeError('invalid `app`: expected a headway App');
  if (options !== undefined && (options === null || typeof options !== 'object')) {
    throw typeError('invalid `options`: expected an object');
  }
  const o = options || {};
  for (const k of Object.keys(o)) {
    if (!Object.hasOwn(OPTIONS, k)) throw typeError(`invalid option \`${k}\`: expected token, readOnly, maxBody, allowedOrigins or announce`);
  }
  for (const [k, [fits, expected]] of Object.entries(OPTIONS)) {
    if (o[k] !== undefined && !fits(o[k])) throw typeError(`invalid \`${k}\`: expected ${expected}`);
  }
  const origins = o.allowedOrigins === undefined ? [] : o.allowedOrigins;
  // The core refuses a token too short to be a secret, naming `token`, and
  // a `maxBody` that is no positive whole number of bytes.
  const make = () => new native.NativeAdmin(a, o.token ?? null, o.readOnly === true, o.maxBody ?? null, origins);
  const admin = constructed('ERR_OUT_OF_RANGE', make);
  if (admin.tokenGenerated && o.announce !== false) {
    process.stderr.write(`${native._banner('admin_token', JSON.stringify({ token: admin.token }))}\n`);
  }
  const max = admin.maxBody;

  async function serve(req, res) {
    const body = await readBody(req, admin, max);
    if (body === null) return; // the client left
    // Where it is mounted (Express's baseUrl), whether over TLS, and the
    // client's address as the socket saw it: the cookie's Path and Secure,
    // and what failed logins are limited per.
    const socket = req.socket || {};
    const raw = await answer(
      admin.handle(
        req.method,
        req.url || '/',
        req.rawHeaders,
        body,
        typeof req.baseUrl === 'string' ? req.baseUrl : '',
        socket.encrypted === true,
        typeof socket.remoteAddress === 'string' ? socket.remoteAddress : null,
      ),
      JSON.parse,
      same,
    );
    if (res.destroyed) {
      if (raw.stream !== null) admin.close(raw.stream);
      return;
    }
    writeHead(res, raw.status, raw.headers);
    if (raw.stream === null) {
      if (!req.readableEnded && !req.complete) {
        // Refused before the whole body came (413): close rather than read on.
        res.shouldKeepAlive = false;
        res.end(raw.body, () => req.destroy());
      } else {
        res.end(raw.body);
      }
      return;
    }
    await pump(admin, raw.stream, req, res);
  }

  function handle(req, res, next) {
    serve(req, res).catch((e) => {
      if (typeof next === 'function') return next(e);
      if (!res.headersSent) {
        res.writeHead(500, { 'Content-Type': 'text/plain; charset=utf-8' });
        res.end('headway admin: internal error\n');
      } else {
        res.destroy(e);
      }
      process.emitWarning(`headway admin: ${e && e.message}`);
    });
  }
  Object.defineProperties(handle, {
    token: { value: admin.token, enumerable: true },
    tokenGenerated: { value: admin.tokenGenerated, enumerable: true },
    readOnly: { value: admin.readOnly, enumerable: true },
    maxBody: { value: max, enumerable: true },
    openStreams: { get: () => admin.openStreams, enumerable: true },
    closeStreams: { value: () => admin.closeAll(), enumerable: true },
  });
  return handle;
}

module.exports = { handler };
