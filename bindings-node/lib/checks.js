'use strict';
// Argument checks: each names the argument it refuses, with the TypeError or
// RangeError Node's own APIs throw. Ranges and defaults are the core's; these
// only check what a value must be before it can cross to the native side.

const { argType, outOfRange, coded } = require('./errors.js');

const perf = globalThis.performance;
const EMPTY = Object.freeze({});

const NUMBER = 'of type number';

/** A number, NaN included: the flow types' native side ranges it. */
function anyNum(name, v) {
  if (typeof v !== 'number') throw argType(name, NUMBER, v);
  return v;
}

/** A number or undefined. */
const optNum = (name, v) => (v === undefined ? v : anyNum(name, v));
/** A time (ms) or, omitted, `performance.now()`. */
const clock = (name, v) => (v === undefined ? perf.now() : anyNum(name, v));
/** A draw in [0, 1) or, omitted, `Math.random()`. */
const draw = (name, v) => (v === undefined ? Math.random() : anyNum(name, v));

/** Read-only, enumerable own properties (not a freeze: subclasses may add). */
function fix(obj, props) {
  for (const key of Object.keys(props)) {
    Object.defineProperty(obj, key, { value: props[key], enumerable: true, writable: false, configurable: false });
  }
}

/** An options object where null is refused (the flow types). */
function strictOpts(v) {
  if (v === undefined) return EMPTY;
  if (v === null || typeof v !== 'object') throw argType('options', 'of type object', v);
  return v;
}

/** An options object; null or undefined is none. */
function opts(name, v) {
  if (v === undefined || v === null) return EMPTY;
  if (typeof v !== 'object' || Array.isArray(v)) throw argType(name, 'of type object', v);
  return v;
}

function only(name, o, allowed) {
  for (const k of Object.keys(o)) {
    if (!allowed.includes(k)) {
      const why = `unexpected option "${k}" (expected one of ${allowed.join(', ')})`;
      throw coded('ERR_INVALID_ARG_VALUE', `${name}: ${why}`, TypeError);
    }
  }
}

function str(name, v) {
  if (typeof v !== 'string') throw argType(name, 'of type string', v);
  return v;
}

/** A number, NaN refused. */
function num(name, v) {
  if (typeof v !== 'number') throw argType(name, 'of type number', v);
  if (Number.isNaN(v)) throw outOfRange(name, 'must be a number, not NaN');
  return v;
}

/**
 * A number (NaN already refused) as a JSON request carries it: JSON has no
 * ±Infinity, so those go as the strings "Infinity" / "-Infinity" (read back
 * by the core's `task/specs_json.rs`) and the core takes or refuses them
 * like any other value. As text for a request built by hand, or, with
 * `value`, as the value for JSON.stringify's replacer.
 */
function jsonNumber(v, value = false) {
  if (Number.isFinite(v)) return value ? v : `${v}`;
  return value ? String(v) : `"${v}"`;
}

function bool(name, v) {
  if (typeof v !== 'boolean') throw argType(name, 'of type boolean', v);
  return v;
}

/** An instant: a Date or epoch ms. */
function instant(name, v) {
  if (v instanceof Date) {
    const t = v.getTime();
    if (Number.isNaN(t)) throw outOfRange(name, 'must be a valid Date');
    return t;
  }
  if (typeof v !== 'number') throw argType(name, 'a Date or a number of epoch milliseconds', v);
  if (!Number.isFinite(v)) throw outOfRange(name, 'must be a finite number of epoch milliseconds');
  return v;
}

function checkSignal(signal) {
  if (signal === undefined) return undefined;
  if (signal === null || typeof signal !== 'object' || typeof signal.addEventListener !== 'function' || !('aborted' in signal)) {
    throw argType('signal', 'an instance of AbortSignal', signal);
  }
  return signal;
}

module.exports = { EMPTY, anyNum, optNum, clock, draw, fix, strictOpts, checkSignal, opts, only, str, num, bool, instant, jsonNumber };
