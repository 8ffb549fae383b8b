'use strict';
// JSON out and in: what a task's arguments, results and send options travel
// as, and where a value that cannot travel is refused, naming the path.

const native = require('../addon.js');
const { argType, coded } = require('./errors.js');
const { str, num, instant } = require('./checks.js');

// What a task's arguments and results travel as. Accepted: null, booleans,
// finite numbers, strings, arrays and plain objects (prototype
// Object.prototype or null) of those, and two of kombu's typed values: a
// Date (a `datetime`) and a Uint8Array or Buffer (`bytes`). Anything else —
// undefined, a function, a symbol, a BigInt, a Map, an instance of a class,
// an invalid Date — is refused naming where it was found (`add: args[1] is a
// Map`), at send, never silently dropped or stringified: a message that
// changed shape on the way is worse than one refused.
//
// A Date or bytes crosses to the native side as a one-key marker object
// whose key starts with NUL — `{"\u0000date": ms}`, `{"\u0000bytes": hex}` —
// and the core (headway-core's broker::celery::js) makes its typed value of
// it, so the ISO text and the bytes/base64 choice are the core's. Coming
// back, the native side turns typed values into the same markers (and a
// uuid, decimal, date or time into its string), which `parse` revives.
// `flaw` notes whether it met a Date or bytes, so a value without any is
// stringified and parsed exactly as before (the hot path).

const IDENT = /^[A-Za-z_$][\w$]*$/;
// The core's limit (100; serde_json's own is 128, and a request wraps
// values in two levels): a container at a deeper level is refused, the
// outermost counting as level 1.
const DEPTH = native._jsonMaxDepth();

const KINDS = { __proto__: null, function: 'a function', symbol: 'a symbol', bigint: 'a bigint' };

function describe(v) {
  if (typeof v !== 'object') return KINDS[typeof v] ?? typeof v;
  const c = v.constructor && v.constructor.name;
  if (c) return /^[AEIOU]/.test(c) ? `an ${c}` : `a ${c}`;
  return 'an object with a foreign prototype';
}

// Set by `flaw` when it meets a Date or bytes (read and cleared by `encode`).
let typedSeen = false;

const DATE = '\u0000date';
const BYTES = '\u0000bytes';

/** JSON.stringify's replacer when Dates or bytes are in: `this[key]`, as `toJSON` has already run on `v`. */
function typedOut(key, v) {
  const x = this[key];
  if (x instanceof Date) return { [DATE]: x.getTime() };
  if (x instanceof Uint8Array) return { [BYTES]: Buffer.from(x.buffer, x.byteOffset, x.byteLength).toString('hex') };
  return v;
}

/** JSON.parse's reviver for the native side's markers. */
function typedIn(key, v) {
  if (typeof v === 'object' && v !== null) {
    const d = v[DATE];
    if (d !== undefined) {
      if (typeof d === 'number' && Object.keys(v).length === 1) return new Date(d);
    } else {
      const b = v[BYTES];
      if (typeof b === 'string' && Object.keys(v).length === 1) return Buffer.from(b, 'hex');
    }
  }
  return v;
}

/** JSON text from the native side: a reviver only when a marker may be in it. */
function parse(text) {
  return text.includes('\\u0000') ? JSON.parse(text, typedIn) : JSON.parse(text);
}

/** null when `v` can travel as JSON; else where and why not. */
function flaw(v, depth) {
  switch (typeof v) {
    case 'string':
    case 'boolean':
      return null;
    case 'number':
      return Number.isFinite(v) ? null : { keys: [], v, finite: false };
    case 'object': {
      if (v === null) return null;
      if (depth > DEPTH) return { keys: [], v, deep: true };
      if (Array.isArray(v)) {
        for (let i = 0; i < v.length; i++) {
          const f = flaw(v[i], depth + 1);
          if (f !== null) {
            f.keys.push(i);
            return f;
          }
        }
        return null;
      }
      const proto = Object.getPrototypeOf(v);
      if (proto !== Object.prototype && proto !== null) {
        if (v instanceof Date) {
          if (Number.isNaN(v.getTime())) return { keys: [], v, invalid: true };
          typedSeen = true;
          return null;
        }
        if (v instanceof Uint8Array) {
          typedSeen = true;
          return null;
        }
        return { keys: [], v };
      }
      for (const k of Object.keys(v)) {
        const f = flaw(v[k], depth + 1);
        if (f !== null) {
          f.keys.push(k);
          return f;
        }
      }
      return null;
    }
    default:
      return { keys: [], v };
  }
}

function pathOf(root, keys) {
  let s = root;
  for (let i = keys.length - 1; i >= 0; i--) {
    const k = keys[i];
    if (typeof k === 'number') s += `[${k}]`;
    else if (IDENT.test(k)) s += `.${k}`;
    else s += `[${JSON.stringify(k)}]`;
  }
  return s;
}

function jsonError(owner, root, f) {
  const where = `${owner}: ${pathOf(root, f.keys)}`;
  if (f.finite === false) {
    return coded('ERR_OUT_OF_RANGE', `${where} is ${f.v}, and JSON carries only finite numbers`, RangeError);
  }
  if (f.deep) return coded('ERR_OUT_OF_RANGE', `${where} nests deeper than ${DEPTH} levels (or is circular)`, RangeError);
  if (f.invalid) return coded('ERR_INVALID_ARG_VALUE', `${where} is an invalid Date (its time is NaN)`, RangeError);
  return coded(
    'ERR_INVALID_ARG_TYPE',
    `${where} is ${describe(f.v)}, which JSON cannot carry ` +
      `(use plain objects, arrays, strings, finite numbers, booleans, null, Dates or Uint8Arrays)`,
    TypeError,
  );
}

// An escaped UTF-16 surrogate in JSON.stringify's output (after an even run
// of backslashes): it writes a surrogate as `\uXXXX` only when it is lone,
// which is not Unicode text, and the native side's parser refuses it — with
// a result, the whole batch of answers it came in.
const LONE = /(?:^|[^\\])(?:\\\\)*\\u[dD][89a-fA-F]/;

/** `v` as JSON text, or the TypeError/RangeError naming what cannot travel. */
function encode(owner, root, v) {
  typedSeen = false;
  const f = flaw(v, 1);
  if (f !== null) throw jsonError(owner, root, f);
  let json;
  if (!typedSeen) json = JSON.stringify(v);
  else {
    typedSeen = false;
    json = JSON.stringify(v, typedOut);
  }
  if (typeof json !== 'string') {
    // A `toJSON` `flaw` cannot see (not enumerable) that answered undefined.
    throw coded('ERR_INVALID_ARG_TYPE', `${owner}: ${root} turned into nothing as JSON (a toJSON answered undefined)`, TypeError);
  }
  if (json.includes('\\u') && LONE.test(json)) {
    const why = 'holds a lone UTF-16 surrogate, which is not Unicode text and JSON cannot carry it';
    throw coded('ERR_INVALID_ARG_VALUE', `${owner}: ${root} ${why}`, TypeError);
  }
  return json;
}

function encodeArgs(owner, args) {
  if (args === undefined) return '[]';
  if (!Array.isArray(args)) throw argType('args', 'an array', args);
  return encode(owner, 'args', args);
}

function encodeKwargs(owner, kwargs) {
  if (kwargs === undefined || kwargs === null) return 'null';
  if (typeof kwargs !== 'object' || Array.isArray(kwargs)) throw argType('kwargs', 'of type object', kwargs);
  return encode(owner, 'kwargs', kwargs);
}

const text = (k, v) => JSON.stringify(str(k, v));
// Each send option as JSON, in the order they are checked (instants in epoch ms).
const OPTION = { eta: instant, countdown: num, expires: instant, queue: text, priority: num, id: text, concurrencyKey: text, dedupeKey: text, dedupeTtl: num };
const OPTIONS = Object.entries(OPTION);
const SEND_OPTIONS = ['kwargs', ...Object.keys(OPTION)];
const SIG_OPTIONS = [...SEND_OPTIONS, 'immutable'];

/** Per-send options as JSON (instants in epoch ms), or 'null'. */
function encodeOptions(o) {
  let out = '';
  for (const [k, write] of OPTIONS) if (o[k] !== undefined) out += `${out ? ',' : ''}"${k}":${write(k, o[k])}`;
  return out ? `{${out}}` : 'null';
}

module.exports = { parse, encode, encodeArgs, encodeKwargs, SEND_OPTIONS, SIG_OPTIONS, encodeOptions };
