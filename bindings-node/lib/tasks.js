'use strict';
// The task queue: App, Task, Worker, Beat, the in-process Scheduler and
// `testing`. Every rule is the core's; this file checks argument types, turns
// Dates into epoch ms, builds one JSON request per call and hands bodies to
// the HostQueue bridge (host.js).

const path = require('node:path');
const { inspect } = require('node:util');
const native = require('../addon.js');
const { argType, refusal, invalidState, SoftTimeLimitExceeded, TaskRetry, Reject, Ignore } = require('./errors.js');
const { moduleUrl } = require('./load.js');
const { EMPTY, opts, only, str, num, bool, instant, jsonNumber } = require('./checks.js');
const { encodeArgs, encodeKwargs, SEND_OPTIONS, encodeOptions } = require('./json.js');
const { answer, promised, same, TASK, JOB, Host, Context } = require('./host.js');
const { VirtualClock, clockOf, check, Every, Cron, At, rhythmSpec, Fixed, Exponential, policyJson } = require('./clock.js');
const { RedisBroker, seamsOf } = require('./brokers.js');
const { useLogger } = require('./logs.js');
const tracing = require('./tracing.js');
const { EventEmitter } = require('node:events');

// BullMQ's worker events, by what the core says a run came to.
const EVENT_OF = { active: 'active', SUCCESS: 'completed', RETRY: 'retrying', FAILURE: 'failed' };
const RUNNING = Symbol('running workers');

/**
 * Adds (or removes) `w` among the running workers of `host`'s app, and
 * hooks the host while any has run listeners: each body's start and end
 * become the worker's 'active', 'completed', 'retrying' and 'failed'
 * events, with a job `{ id, name, queue, attempt, retries, args, kwargs }`.
 */
function listening(host, w, on) {
  if (host[RUNNING] === undefined) host[RUNNING] = new Map();
  const running = host[RUNNING];
  if (on) running.set(w.name, w);
  else running.delete(w.name);
  host.onRun =
    running.size === 0
      ? null
      : (what, ctx, args, value) => {
          const worker = running.get(ctx.worker);
          if (worker !== undefined) emitRun(worker, what, ctx, args, value);
        };
}

/**
 * `w`'s event for what a run (`run`: its context, or the core's note of it)
 * came to, with a job `{ id, name, queue, attempt, retries, args, kwargs }`
 * and, past its start, `value`: what it returned or threw. No job is
 * built while nobody listens.
 */
function emitRun(w, what, run, args, value) {
  const event = EVENT_OF[what];
  if (event === undefined || w.listenerCount(event) === 0) return;
  const job = { id: run.id, name: run.name, queue: run.queue, attempt: run.attempt, retries: run.retries, args, kwargs: run.kwargs };
  try {
    if (what === 'active') w.emit(event, job);
    else w.emit(event, job, value);
  } catch {
    // A listener that throws does not fail the run (as a receiver of
    // Python's headway.signals).
  }
}
/**
 * A process-pool run's note from the core (JSON: what, the run, a
 * success's value or a failure's kind and message) as `w`'s event, with
 * the same job as on the event loop; a failure arrives as an Error named
 * by its kind, its stack the child's.
 */
function noted(w, line) {
  const n = JSON.parse(line);
  let value = n.value;
  if (n.failure !== undefined) {
    value = new Error(n.failure.message);
    value.name = n.failure.kind;
    if (n.failure.traceback !== undefined) value.stack = n.failure.traceback;
  }
  emitRun(w, n.what, n, n.args, value);
}
const { APP, SEND, Handle, nothing, decodeDead } = require('./handles.js');
const { Signature, chain, group, chord } = require('./canvas.js');

const SERVE_CHILD = Symbol('serveChild');
const TRACING = Symbol('tracing');

/** A registered body: `app.task(name, fn, policy)`. */
class Task {
  #app;
  #name;
  #head;
  constructor(app, name) {
    this.#app = app;
    this.#name = name;
    this.#head = `[${JSON.stringify(name)},`;
  }

  /** The name its messages carry. */
  get name() {
    return this.#name;
  }

  /**
   * Publishes a run of `args` (the positional array); resolves to its
   * handle. `eta` (Date or epoch ms) is when it may first run, `countdown`
   * ms from now (eta wins), `expires` (Date or epoch ms) when running it
   * becomes pointless, `queue` overrides the task's, `priority` 0 (first) to
   * 9, `id` fixes the run's id, `kwargs` the keyword object.
   */
  send(args, options) {
    return sendOne(this.#app, this.#name, args, options, true, this.#head);
  }

  /** A signature of a run of `args` (a canvas node). */
  sig(args, options) {
    return new Signature(this.#app, this.#name, args, options);
  }

  [inspect.custom]() {
    return `Task(${this.#name})`;
  }
}

function sendOne(app, name, args, options, known, head) {
  // Inside an OpenTelemetry PRODUCER span when the app traces and a tracer
  // provider is registered (one check otherwise).
  if (app[TRACING] && tracing.provided()) {
    return tracing.send(app[APP], name, options, (o, carrier) => sendReq(app, name, args, o, known, head, carrier));
  }
  return sendReq(app, name, args, options, known, head, null);
}

function sendReq(app, name, args, options, known, head, carrier) {
  // The hot path: no closure per send.
  try {
    let req;
    const trace = carrier === null ? ']' : `,${JSON.stringify(carrier)}]`;
    if (options === undefined) {
      req = `${head ?? `[${JSON.stringify(name)},`}${encodeArgs(name, args)},null,null${trace}`;
    } else {
      const o = opts('options', options);
      only(name, o, SEND_OPTIONS);
      req = `${head ?? `[${JSON.stringify(name)},`}${encodeArgs(name, args)},${encodeKwargs(name, o.kwargs)},${o === EMPTY ? 'null' : encodeOptions(o)}${trace}`;
    }
    return answer(
      app[SEND](req, known),
      (id) => new Handle(app, [id], false),
      (id) => new Handle(app, [id], false),
    );
  } catch (e) {
    return Promise.reject(e);
  }
}

let nativeWorker;

/**
 * Runs tasks: claims from its queues, runs up to `concurrency` bodies at
 * once — on the event loop, or in child processes on the process pool —
 * and settles each as its task's policy says.
 */
class Worker extends EventEmitter {
  #n;
  #host;
  #run = null;
  constructor(n, host) {
    super();
    this.#n = n;
    this.#host = host;
  }

  static {
    nativeWorker = (w) => w.#n;
  }

  /** Runs until stopped; resolves once every message it held is settled or given back. A worker runs once. */
  run() {
    if (this.#run !== null) return Promise.reject(invalidState('this worker has already run; make another with app.worker()'));
    // On the process pool the bodies run in the children, each serving its
    // own app's queue; nothing arrives on this process's.
    const host = this.#n.pool === 'process' ? null : this.#host;
    host?.use();
    if (host) listening(host, this, true);
    // There the core notes each run's start and end for this worker's events.
    else this.#n._observe((line) => noted(this, line));
    const p = promised(() => answer(this.#n.run(), nothing, nothing));
    this.#run = p.finally(() => {
      if (host) listening(host, this, false);
      else this.#n._observe(null);
      host?.unuse();
    });
    return this.#run;
  }

  /**
   * Stops claiming, gives prefetched messages back, lets runs in progress
   * finish for `grace` ms (10 s), then cancels and gives back the rest —
   * nothing it held is lost. Resolves when run() has.
   */
  stop(options) {
    return promised(() => {
      const o = opts('options', options);
      only('stop', o, ['grace']);
      // No grace: the core's default (10 s).
      this.#n.stop(o.grace === undefined ? undefined : num('grace', o.grace));
      return this.#run === null ? Promise.resolve() : this.#run.then(nothing, nothing);
    });
  }

  [inspect.custom]() {
    return `Worker(${this.name} queues=${this.queues.join(',')} concurrency=${this.concurrency} pool=${this.pool})`;
  }
}

// A worker's state is its native worker's, read through: name (logs, the
// admin page), queues, concurrency, prefetch (the most messages held
// unsettled), pool ('threads': this event loop; 'process': child
// processes), childPids (empty on the threads pool), settled (messages
// settled so far), stopping (whether stop() was called).
for (const k of ['name', 'queues', 'concurrency', 'prefetch', 'pool', 'childPids', 'settled', 'stopping']) {
  Object.defineProperty(Worker.prototype, k, {
    get() {
      return nativeWorker(this)[k];
    },
    configurable: true,
  });
}

const SERVING = Symbol('serving');
const TICK = Symbol('tick');

/**
 * What a beat and a scheduler share: the core's timetable (theirs is the
 * same), ticked, or run until stopped.
 */
class Timetable {
  #n;
  #run = null;
  constructor(n) {
    this.#n = n;
  }

  /** Names and when each fires next, soonest first. */
  pending() {
    return JSON.parse(this.#n.pending()).map(([n, at]) => [n, new Date(at)]);
  }

  /** `p`, while it runs (a scheduler serves its jobs meanwhile). */
  [SERVING](p) {
    return p;
  }

  /** Fires what is due now; resolves to each `[name, due, ...]` the core answers, as `entry` reads it. */
  [TICK](entry) {
    const decode = (v) => v.map(entry);
    return promised(() => this[SERVING](answer(this.#n.tick(), (t) => decode(JSON.parse(t)), decode)));
  }

  /** Fires what is due and sleeps until the next, until stop() — or until the clock reaches `until`. */
  run(until) {
    return promised(() => {
      const u = until === undefined || until === null ? null : instant('until', until);
      const p = this[SERVING](answer(this.#n.run(u), nothing, nothing));
      this.#run = p;
      return p;
    });
  }

  /** Stops it after the tick in progress; resolves when run() has. */
  stop() {
    this.#n.stop();
    const r = this.#run;
    this.#run = null;
    return r === null ? Promise.resolve() : r.then(nothing, nothing);
  }
}

/**
 * Sends tasks on rhythms (Every, Cron, At), keeping the phase: the next time
 * is computed from the time that was due, so an hourly entry stays on its
 * minute after a late tick. On a virtual clock its sleeps advance the clock.
 */
class Beat extends Timetable {
  #n;
  #app;
  constructor(app, n) {
    super(n);
    this.#app = app;
    this.#n = n;
  }

  /**
   * Schedules `task` (a Task or a name) with `args` under `name`, replacing
   * an entry of that name. The name identifies the entry, not the task.
   */
  add(name, task, args, schedule, options) {
    str('name', name);
    let tname;
    if (task instanceof Task) tname = task.name;
    else if (typeof task === 'string') tname = task;
    else throw argType('task', 'a Task or a task name', task);
    const o = opts('options', options);
    only('beat.add', o, ['kwargs', 'queue', 'priority']);
    const entry = `[${JSON.stringify(name)},{"sig":[${JSON.stringify(tname)},${encodeArgs(tname, args)},${encodeKwargs(tname, o.kwargs)},false,${encodeOptions({ queue: o.queue, priority: o.priority })}]}]`;
    check(this.#n.add(entry, rhythmSpec('schedule', schedule)));
  }

  /** Removes the entry `name`; false when there was none. */
  remove(name) {
    return this.#n.remove(str('name', name));
  }

  /** Sends what is due now; resolves to [name, due, handle] per send. */
  tick() {
    const app = this.#app;
    return this[TICK](([n, due, id]) => [n, new Date(due), new Handle(app, [id], false)]);
  }
}

/**
 * The registry, the broker and the clock. `broker` is 'memory://' (the
 * default: an in-process broker that is also its result store and chord
 * counter), 'redis://host:port/db' / 'rediss://…' (headway's Redis layout),
 * or a RedisBroker. `backend`: omitted, the broker's own store; false, none
 * (get() rejects with MISSING); or another URL or RedisBroker. `clock`: a
 * testing.VirtualClock, or omitted for the system clock.
 */
class App {
  #beat = null;
  #host;
  constructor(options) {
    const o = opts('options', options);
    only('App', o, ['broker', 'backend', 'clock', 'logger', 'tracing']);
    if (o.logger !== undefined) useLogger(o.logger);
    const clock = clockOf(o.clock);
    const seams = seamsOf('broker', o.broker, clock);
    if (o.backend === false) seams.withoutBackend();
    else if (o.backend === true) {
      throw argType('backend', 'a URL, a RedisBroker, false (no results) or undefined (the broker\'s)', true);
    } else if (typeof o.backend === 'string') {
      const refused = seams.withBackendUrl(o.backend, clock);
      if (refused) throw refusal(refused);
    } else if (o.backend !== undefined && o.backend !== null) seams.withBackend(seamsOf('backend', o.backend, clock));
    this[APP] = new native.NativeApp(seams, clock);
    this[SEND] = this[APP].sender();
    this[TRACING] = o.tracing === undefined || o.tracing === null ? true : bool('tracing', o.tracing);
    this.#host = new Host(this[APP].host, TASK, this[APP]);
    /** The clock it was given (null: the system clock). */
    this.clock = o.clock === undefined ? null : o.clock;
  }

  /**
   * Registers `fn(args, ctx)` under `name` (replacing an earlier one) and
   * answers the Task. The policy's defaults are each the safe side of its
   * choice (moontask): queue 'default'; retries 0 (a retry repeats the first
   * attempt's side effects); backoff Exponential() (1 s doubling to 10 min,
   * jittered); no timeout (a hung run is visible rather than silently cut);
   * acksLate false (confirmed on receipt); ignoreResult false; no rate.
   */
  task(name, fn, policy) {
    str('name', name);
    if (typeof fn !== 'function') throw argType('fn', 'a function', fn);
    check(this[APP].register(name, policyJson(policy)));
    this.#host.fns.set(name, fn);
    return new Task(this, name);
  }

  /** Every registered name, sorted. */
  taskNames() {
    return this[APP].taskNames();
  }

  /** Publishes a run of the registered task `name` (the dispatcher's entry); rejects with UNKNOWN_TASK for a name this app does not run. */
  send(name, args, options) {
    if (typeof name !== 'string') return Promise.reject(argType('name', 'of type string', name));
    return sendOne(this, name, args, options, true);
  }

  /** Celery's send_task: publishes a run of any name, for another process to run. */
  sendTask(name, args, options) {
    if (typeof name !== 'string') return Promise.reject(argType('name', 'of type string', name));
    return sendOne(this, name, args, options, false);
  }

  /** A signature of any task name — one this app runs or one another process does. */
  sig(name, args, options) {
    return new Signature(this, str('name', name), args, options);
  }

  /** A handle on the run `id`, which some other process may have sent. */
  handle(id) {
    return new Handle(this, [str('id', id)], false);
  }

  /**
   * Revokes the runs `ids` (one id or an array): they will not start
   * anywhere the broker reaches. With `{ terminate: true }`, a run in
   * progress stops — in whichever process on the broker runs it — with
   * `signal` ('SIGTERM'; a name or a number 1 to 64).
   */
  revoke(ids, options) {
    return promised(() => {
      const list = typeof ids === 'string' ? [ids] : ids;
      if (!Array.isArray(list)) throw argType('ids', 'a run id or an array of them', ids);
      list.forEach((id, i) => str(`ids[${i}]`, id));
      return new Handle(this, list.slice(), true).revoke(options ?? false);
    });
  }

  /** The app's time in epoch ms (the virtual clock's, in tests). */
  now() {
    return this[APP].now();
  }

  /**
   * A worker over `queues` (['default']; an 'a,b' string is split) running
   * up to `concurrency` bodies at once (4, moontask's preset) and holding at
   * most `prefetch` messages not finished running (concurrency × 4,
   * Celery's prefetch multiplier; × 8 on the process pool, four per slot:
   * each child has its run and one on deck; left unset, the worker reaches
   * past that while runs are short, about 2 ms of its recent work, at most
   * 8 × it); `prefetchMultiplier` (Celery's `worker_prefetch_multiplier`)
   * makes it concurrency × that, kept exactly. `pool` 'process' runs the bodies in `concurrency` child
   * processes, each importing `module` (default: this process's main
   * script) and serving the App it exports; `maxTasksPerChild`,
   * `maxMemoryPerChild` (KiB) and `timeLimit` (ms, hard: the child is
   * killed) need it. `softTimeLimit` (ms) aborts `ctx.signal` on either
   * pool.
   */
  worker(options) {
    if (inChild) {
      throw invalidState(
        'app.worker() was called while a process-pool child imported the app\'s module: ' +
          'start workers only when the module runs as the main script ' +
          '(`if (require.main === module)`, or compare import.meta.url with process.argv[1] in ESM)',
      );
    }
    const o = opts('options', options);
    only('worker', o, WORKER_OPTIONS);
    let queues = null;
    // The core splits each name at commas and refuses a list naming none.
    if (typeof o.queues === 'string') queues = [o.queues];
    else if (Array.isArray(o.queues)) queues = o.queues.map((q, i) => str(`queues[${i}]`, q));
    else if (o.queues !== undefined && o.queues !== null) throw argType('queues', 'an array of names or an "a,b" string', o.queues);
    const spec = { queues };
    for (const k of WORKER_NUMBERS) {
      if (o[k] !== undefined && o[k] !== null) spec[k] = num(k, o[k]);
    }
    if (o.name !== undefined) spec.name = str('name', o.name);
    if (o.pool !== undefined && o.pool !== null) {
      spec.pool = str('pool', o.pool);
      // The core says which names start children (and refuses unknown ones).
      if (native._processPool(spec.pool)) spec.child = childCommand(o.module);
    }
    const w = this[APP].worker(JSON.stringify(spec, (k, v) => (typeof v === 'number' ? jsonNumber(v, true) : v)));
    if (!(w instanceof native.NativeWorker)) throw refusal(w);
    // Its runs are traced when OpenTelemetry has a provider now.
    if (this[TRACING] && tracing.provided()) this[APP].setTracing(true);
    return new Worker(w, this.#host);
  }

  /** The app's beat — the same object every call, so a module can add entries and `npx headway beat` run them. */
  beat() {
    if (this.#beat === null) this.#beat = new Beat(this, this[APP].beat());
    return this.#beat;
  }

  /**
   * The dead letters of `queue` ('default'), newest first, at most `limit`
   * (100): what a worker set aside rather than ran, each `{ queue, id,
   * reason, at, raw }`. An unknown queue has none.
   */
  deadLetters(queue = 'default', options) {
    return promised(() => {
      const q = str('queue', queue);
      const o = opts('options', options);
      only('deadLetters', o, ['limit']);
      // Omitted: the core's DEAD_LISTED (100); the core ranges it.
      const limit = o.limit === undefined ? undefined : num('limit', o.limit);
      return answer(this[APP].deadLetters(q, limit), decodeDead, decodeDead);
    });
  }

  /** How many dead letters `queue` ('default') keeps now (0 for an unknown queue). */
  deadCount(queue = 'default') {
    return promised(() => answer(this[APP].deadCount(str('queue', queue)), Number, Number));
  }

  /**
   * Puts dead letters of `queue` ('default') back on it as they were, oldest
   * first — at most `limit` (all when omitted), only those whose id is in
   * `ids` when given — and resolves to how many went back.
   */
  requeueDead(queue = 'default', options) {
    return promised(() => {
      const q = str('queue', queue);
      const o = opts('options', options);
      only('requeueDead', o, ['limit', 'ids']);
      const limit = o.limit === undefined || o.limit === null ? null : num('limit', o.limit);
      let ids = null;
      if (Array.isArray(o.ids)) ids = o.ids.map((id, i) => str(`ids[${i}]`, id));
      else if (o.ids !== undefined && o.ids !== null) throw argType('ids', 'an array of ids', o.ids);
      return answer(this[APP].requeueDead(q, limit, ids), Number, Number);
    });
  }

  /** Drops every dead letter of `queue` ('default') for good; resolves to how many. */
  purgeDead(queue = 'default') {
    return promised(() => answer(this[APP].purgeDead(str('queue', queue)), Number, Number));
  }

  /** See `serveChild`. */
  [SERVE_CHILD]() {
    const host = this.#host;
    host.use();
    const p = promised(() => answer(this[APP]._serveChild(), nothing, nothing));
    return p.finally(() => host.unuse());
  }

  [inspect.custom]() {
    return `App(tasks=${inspect(this.taskNames())})`;
  }
}

// A worker's options; the numbers among them are checked alike (the core ranges them).
const WORKER_OPTIONS = ['queues', 'concurrency', 'prefetch', 'prefetchMultiplier', 'name', 'pool', 'module', 'maxTasksPerChild', 'maxMemoryPerChild', 'timeLimit', 'softTimeLimit'];
const WORKER_NUMBERS = ['concurrency', 'prefetch', 'prefetchMultiplier', 'maxTasksPerChild', 'maxMemoryPerChild', 'timeLimit', 'softTimeLimit'];

// ---------------------------------------------------------------- process pool

const CHILD_JS = path.join(__dirname, 'child.js');

/**
 * How the process pool starts a child: this Node, with this process's
 * flags, running lib/child.js on the module that exports the app. The
 * module defaults to the main script — the file `node app.js` ran — since
 * that is where a program that builds its worker registers its tasks; a
 * module that does not export the App, or a process without a main script
 * (the REPL, `node -e`), has to name it.
 */
function childCommand(module) {
  let spec;
  if (module === undefined || module === null) {
    spec = require.main?.filename ?? process.argv[1];
    if (typeof spec !== 'string' || spec === '') {
      throw argType('module', 'given (the path or file URL of the module that exports the app): this process has no main script to default to', module);
    }
  } else if (module instanceof URL) spec = module;
  else spec = str('module', module);
  return {
    program: process.execPath,
    // The parent's flags the core says a child repeats (its loaders, not
    // the test runner's or the inspector's).
    args: [...native._childFlags(process.execArgv), CHILD_JS, moduleUrl(spec)],
    env: [['HEADWAY_PROCESS_CHILD', '1']],
  };
}

// Set by lib/child.js while it imports the app's module, and for the rest of
// the child's life: a worker started there would start children of its own.
let inChild = false;

/**
 * In a child of the process pool: serves `app`'s bodies to the parent (fd 3)
 * on this event loop, as a worker's host would; resolves when the parent
 * closes the socket.
 */
function serveChild(app) {
  if (!(app instanceof App)) return Promise.reject(argType('app', 'an App', app));
  return app[SERVE_CHILD]();
}

// ---------------------------------------------------------------- schedule

/**
 * Jobs on rhythms inside one process, with no broker: what node-cron is
 * reached for. The core keeps the timetable (the beat's own) and the phase.
 * Two rules from APScheduler's defaults: a job still running when it is due
 * again is skipped for that slot, and slots missed while the process was
 * busy fire once, not once each. A job that throws is logged and counted
 * (`stats(name)`); the rhythm goes on. A job is called as `fn(ctx)`, where
 * `ctx.name` is the job's and `ctx.now` the time it was due.
 */
class Scheduler extends Timetable {
  #n;
  #host;
  constructor(options) {
    const o = opts('options', options);
    only('Scheduler', o, ['clock']);
    const n = new native.NativeScheduler(clockOf(o.clock));
    super(n);
    this.#n = n;
    this.#host = new Host(this.#n.host, JOB);
    this.clock = o.clock === undefined ? null : o.clock;
  }

  /** Adds (or replaces) the job `name`: `fn(ctx)` on `rhythm`. */
  add(name, fn, rhythm) {
    str('name', name);
    if (typeof fn !== 'function') throw argType('fn', 'a function', fn);
    check(this.#n.add(name, rhythmSpec('rhythm', rhythm)));
    this.#host.fns.set(name, fn);
  }

  /** Removes the job `name`; false when there was none. */
  remove(name) {
    this.#host.fns.delete(str('name', name));
    return this.#n.remove(name);
  }

  /** How the job has gone: { fired, failed, skipped, lastError }; null for an unknown name. */
  stats(name) {
    const s = this.#n.stats(str('name', name));
    return s === null ? null : JSON.parse(s);
  }

  /** Its jobs are called while `p` runs. */
  [SERVING](p) {
    const host = this.#host;
    host.use();
    return p.finally(() => host.unuse());
  }

  /** Calls what is due now and waits for those calls; resolves to [name, due] per call. */
  tick() {
    return this[TICK](([n, due]) => [n, new Date(due)]);
  }

  /** Runs it in the background and returns at once (stop() ends it). */
  start() {
    this.run().catch((e) => {
      process.emitWarning(`headway scheduler stopped: ${e.message}`);
    });
  }
}

/**
 * Puts `data` (a Buffer, a Uint8Array or a string, as UTF-8) on `queue` of
 * the app's broker as another producer would, unchecked: the worker that
 * claims it quarantines it as a dead letter if it is not a message headway
 * runs.
 */
function pushRaw(app, queue, data) {
  return promised(() => {
    if (!(app instanceof App)) throw argType('app', 'an App', app);
    const q = str('queue', queue);
    let buf;
    if (typeof data === 'string') buf = Buffer.from(data, 'utf8');
    else if (data instanceof Uint8Array) buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    else throw argType('data', 'a Buffer, a Uint8Array or a string', data);
    return answer(app[APP]._pushRaw(q, buf), nothing, nothing);
  });
}

const testing = Object.freeze({ VirtualClock, pushRaw });
const schedule = Object.freeze({ Scheduler, Every, Cron, At });

module.exports = {
  App,
  Task,
  Handle,
  Worker,
  Beat,
  Signature,
  Context,
  SoftTimeLimitExceeded,
  TaskRetry,
  Reject,
  Ignore,
  RedisBroker,
  chain,
  group,
  chord,
  Fixed,
  Exponential,
  Every,
  Cron,
  At,
  Scheduler,
  schedule,
  testing,
};

// Hidden (not enumerable, so neither index.js's spread nor an ESM import sees
// them): how many Promises wait on the bell (tests: nothing is left behind),
// a Rust panic inside a task future, at once or on the runtime, and for
// admin.js an App's native half.
Object.defineProperties(module.exports, {
  _outstanding: { value: () => native._hubOutstanding() },
  _panic: {
    value: (later) => promised(() => answer(native._taskPanic(later), nothing, nothing)),
  },
  // lib/child.js: mark this process a child, and serve an app there.
  _child: {
    value: Object.freeze({
      enter: () => {
        inChild = true;
      },
      serve: (app) => serveChild(app),
    }),
  },
  _admin: {
    value: Object.freeze({ nativeOf: (app) => (app instanceof App ? app[APP] : undefined) }),
  },
  // cli.js: `-E`: Celery's events on.
  _enableTaskEvents: {
    value: (app) => check(app[APP].enableTaskEvents()),
  },
  // cli.js: `inspect` / `control`, the command as the core's parser read
  // it: the core asks every node; resolves to {code, out, err}.
  _remote: {
    value: (app, command) => answer(app[APP].remote(JSON.stringify(command)), JSON.parse, same),
  },
  // cli.js: `--metrics-port`: serves the app's metrics; the port.
  _serveMetrics: {
    value: (app, host, port) => {
      const r = app[APP].serveMetrics(host, port);
      if (typeof r === 'object') throw refusal(r);
      return r;
    },
  },
});
