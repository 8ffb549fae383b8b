'use strict';
// The canvas: signatures, chains, groups and chords, planned and sent by the
// core in one request.

const { inspect } = require('node:util');
const { argType, invalidState } = require('./errors.js');
const { opts, only, bool } = require('./checks.js');
const { encodeArgs, encodeKwargs, SEND_OPTIONS, SIG_OPTIONS, encodeOptions } = require('./json.js');
const { answer, promised } = require('./host.js');
const { APP, handleOf } = require('./handles.js');

/** What a signature, a chain, a group and a chord share: `send()`. */
class Canvas {
  /** Publishes every message and resolves to a handle on what it waits for. */
  send() {
    return promised(() => {
      const app = this[FIRST]();
      if (app === null) throw invalidState('this canvas has no signature to take an app from');
      const tree = this[TREE]();
      return answer(app[APP].sendCanvas(tree), (t) => handleOf(app, JSON.parse(t)), (v) => handleOf(app, v));
    });
  }
}

const TREE = Symbol('tree');
const FIRST = Symbol('first');

/**
 * A run that has not been published: `task.sig(args, opts)` or
 * `app.sig(name, args, opts)`. A signature that is not `immutable` gets the
 * previous link's result prepended in a chain, the parts' results in a
 * chord's callback.
 */
class Signature extends Canvas {
  constructor(app, name, args, options) {
    super();
    const o = opts('options', options);
    only(name, o, SIG_OPTIONS);
    if (args !== undefined && !Array.isArray(args)) throw argType('args', 'an array', args);
    this.app = app;
    this.name = name;
    this.args = args === undefined ? [] : args;
    this.kwargs = o.kwargs === undefined ? null : o.kwargs;
    this.immutable = o.immutable === undefined ? false : bool('immutable', o.immutable);
    const rest = {};
    for (const k of SEND_OPTIONS) if (k !== 'kwargs' && o[k] !== undefined) rest[k] = o[k];
    this.options = rest;
    // Checked now, so a bad option fails where it was written.
    encodeOptions(rest);
  }

  [TREE]() {
    return `{"sig":[${JSON.stringify(this.name)},${encodeArgs(this.name, this.args)},${encodeKwargs(this.name, this.kwargs)},${this.immutable},${encodeOptions(this.options)}]}`;
  }

  [FIRST]() {
    return this.app;
  }

  [inspect.custom]() {
    return `${this.name}.sig(${inspect(this.args)}${this.immutable ? ', immutable' : ''})`;
  }
}

function items(what, list) {
  const xs = list.length === 1 && Array.isArray(list[0]) ? list[0] : list;
  xs.forEach((x, i) => {
    if (!(x instanceof Canvas)) throw argType(`${what}[${i}]`, 'a signature or a canvas (task.sig(...))', x);
  });
  return xs.slice();
}

/** A chain's links, a group's parts, or a chord's parts and `callback`, as the core's tree names them (`kind`). */
class Tree extends Canvas {
  constructor(kind, parts, callback = null) {
    super();
    this.kind = kind;
    this.parts = parts;
    this.callback = callback;
  }

  [TREE]() {
    const parts = `[${this.parts.map((p) => p[TREE]()).join(',')}]`;
    return `{"${this.kind}":${this.callback === null ? parts : `[${parts},${this.callback[TREE]()}]`}}`;
  }

  [FIRST]() {
    for (const x of this.callback === null ? this.parts : [...this.parts, this.callback]) {
      const a = x[FIRST]();
      if (a !== null) return a;
    }
    return null;
  }
}

/**
 * Runs in order, each started when the one before it succeeds; a link that
 * is not immutable gets the previous result prepended. Answers the last
 * link's value. Chains inside are flattened; a group first is a chord over
 * the rest (as in Celery).
 */
function chain(...links) {
  return new Tree('chain', items('chain', links));
}

/** Runs all at once, answered as the list of results in the order given; a chain inside stays a chain. */
function group(...parts) {
  return new Tree('group', items('group', parts));
}

/**
 * `parts`, then `callback` with the list of their results (in order) as its
 * first argument. A part that fails for good fails the callback, so nobody
 * waits for ever.
 */
function chord(parts, callback) {
  if (!Array.isArray(parts)) throw argType('parts', 'an array of signatures', parts);
  const ps = items('chord', parts);
  if (!(callback instanceof Canvas)) throw argType('callback', 'a signature or a canvas', callback);
  return new Tree('chord', ps, callback);
}

module.exports = { Signature, chain, group, chord };
