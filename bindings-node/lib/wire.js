'use strict';
// The event loop's own socket for the shared limits. A call made on the
// core's shared link crosses threads three times (the loop to a runtime
// thread, Redis's reply to it, and back to the loop); a socket on the loop
// costs one wake-up, as ioredis's does. What is written, what each reply
// means, when a URL is served here and what a lost socket means are the
// core's (src/wire.rs over headway-core's limit::wire): this file makes
// the socket, writes what the core gives, feeds what arrives, and reports
// a socket that closed. It holds a socket for a wire exactly while the
// core's wire is open, so the first bytes after a loss make a new one.

const net = require('net');
const native = require('../addon.js');
const { settle } = require('./host.js');

const sockets = new Map();
const due = new Set();

/** Writes what wire `id` has to send, at the end of this turn (calls made
 * together go out in one write). */
function kick(id) {
  if (due.size === 0) queueMicrotask(flushDue);
  due.add(id);
}

function flushDue() {
  for (const id of due) flush(id);
  due.clear();
}

function flush(id) {
  const out = native._wireFlush(id);
  if (out === null) return;
  (sockets.get(id) ?? dial(id)).write(out);
}

function lost(id, sock) {
  if (sockets.get(id) !== sock) return;
  sockets.delete(id);
  native._wireLost(id, Math.random());
}

function dial(id) {
  const [host, port, timeout] = native._wireAddress(id);
  const sock = net.connect({ host, port, noDelay: true });
  // The tickets waiting on it keep the process alive, not the socket.
  sock.unref();
  sock.setTimeout(timeout);
  sockets.set(id, sock);
  sock.on('data', (chunk) => {
    if (sockets.get(id) !== sock) return;
    const r = native._wireFeed(id, chunk);
    if (r === false) {
      lost(id, sock);
      sock.destroy();
      return;
    }
    if (r === null) return;
    if (r === true) {
      flush(id);
      return;
    }
    // A leading space: bytes wait to be written (a call sent again).
    if (r.charCodeAt(0) === 32) flush(id);
    settle(r);
  });
  sock.on('timeout', () => {
    if (native._wireBusy(id)) sock.destroy();
  });
  // 'close' follows every error.
  sock.on('error', () => {});
  sock.on('close', () => lost(id, sock));
  return sock;
}

module.exports = { kick };
