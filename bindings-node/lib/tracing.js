'use strict';
// OpenTelemetry spans for sends and runs, when `@opentelemetry/api` (an
// optional peer dependency) is installed and a tracer provider is
// registered.
//
// Why it looks like this: the core decides what a trace says — span names
// and kinds, their attributes, which headers carry the context and where a
// message keeps them (the names follow opentelemetry-instrumentation-celery,
// so one trace crosses Celery, Python and Node processes). This module only
// calls OpenTelemetry's API: it starts the span the core describes, injects
// the context into an object the core puts on the message, extracts what a
// run's message carried, and records an exception. The context crosses with
// the global propagator (the SDKs register W3C trace context by default).
//
// Nothing is traced unless a tracer provider is registered: a send then
// costs one check, and a run carries no trace part (the core adds one only
// for an app whose worker was made while a provider was registered).
// `new App({ tracing: false })` turns it off for one app.

let api = null;
try {
  api = require('@opentelemetry/api');
} catch {
  api = null;
}

let noop = null;
let cached = null;
let version = null;

/** Whether `@opentelemetry/api` is installed and a tracer provider registered. */
function provided() {
  if (api === null) return false;
  const p = api.trace.getTracerProvider();
  const d = typeof p.getDelegate === 'function' ? p.getDelegate() : p;
  // What a provider-less proxy delegates to: the API's no-op provider.
  if (noop === null) noop = new api.ProxyTracerProvider().getDelegate();
  return d !== noop;
}

function tracer() {
  const p = api.trace.getTracerProvider();
  const d = typeof p.getDelegate === 'function' ? p.getDelegate() : p;
  if (cached === null || cached[0] !== d) {
    if (version === null) version = require('../../package.json').version;
    cached = [d, d.getTracer('headway', version)];
  }
  return cached[1];
}

/** Text of what a body threw, read the way a failure is (never throws). */
function textOf(e) {
  try {
    if (e !== null && typeof e === 'object' && typeof e.message === 'string') return e.message;
    return String(e);
  } catch {
    return '';
  }
}

function failSpan(span, e, message) {
  try {
    if (e instanceof Error) span.recordException(e);
    else span.recordException({ name: typeof e, message });
    span.setStatus({ code: api.SpanStatusCode.ERROR, message });
  } catch {
    // tracing never fails a send or a run
  }
}

/**
 * A send inside its PRODUCER span: `sendSpan` is the native app's (the core
 * names the span and fixes the run's id), `go(options, carrier)` sends.
 */
function send(native, name, options, go) {
  const o = options;
  const plain = o !== null && typeof o === 'object';
  const given = plain && typeof o.id === 'string' ? o.id : null;
  const queue = plain && typeof o.queue === 'string' ? o.queue : null;
  const [sname, kind, attrs, id] = JSON.parse(native.sendSpan(name, queue, given));
  const span = tracer().startSpan(sname, { kind: api.SpanKind[kind], attributes: attrs });
  const carrier = {};
  api.propagation.inject(api.trace.setSpan(api.context.active(), span), carrier);
  let p;
  try {
    // Sent with the id the span names (a bad `options` is passed on as it
    // is, for the send to refuse).
    const withId = o === undefined ? { id } : plain && (o.id === undefined || o.id === null) ? { ...o, id } : o;
    p = go(withId, carrier);
  } catch (e) {
    failSpan(span, e, textOf(e));
    span.end();
    return Promise.reject(e);
  }
  return p.then(
    (h) => {
      span.end();
      return h;
    },
    (e) => {
      failSpan(span, e, textOf(e));
      span.end();
      throw e;
    },
  );
}

/**
 * Opens a run's CONSUMER span from the core's plan (`trace::run_plan`):
 * `[name, kind, attributes, carrier, onSuccess, onFailure, reasonKey]`.
 * Null when OpenTelemetry failed (never fails the run).
 */
function begin(plan) {
  try {
    const parent = api.propagation.extract(api.ROOT_CONTEXT, plan[3]);
    const span = tracer().startSpan(plan[0], { kind: api.SpanKind[plan[1]], attributes: plan[2] }, parent);
    return { span, plan, ctx: api.trace.setSpan(parent, span) };
  } catch {
    return null;
  }
}

/** `f()` with the run's span active (with a context manager registered). */
function within(run, f) {
  return run === null ? f() : api.context.with(run.ctx, f);
}

/**
 * Ends a run's span: the state the core says; an error with the exception
 * for a body that threw. `after` is the core's answer for that failure
 * (`[state, attributes, reason key]`, lib/host.js), else the plan's for a
 * plain failure.
 */
function end(run, ok, out, after = null) {
  if (run === null) return;
  const { span, plan } = run;
  try {
    if (ok) {
      span.setAttributes(plan[4]);
    } else {
      const message = textOf(out);
      const [attrs, reason] = after === null ? [plan[5], plan[6]] : [after[1], after[2]];
      span.setAttributes(attrs);
      if (reason !== null) span.setAttribute(reason, message);
      failSpan(span, out, message);
    }
    span.end();
  } catch {
    // tracing never fails a run
  }
}

module.exports = { provided, send, begin, within, end };
