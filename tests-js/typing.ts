// A typed usage file: `npm run typecheck` compiles it against index.d.ts, so
// a declaration that drifts from how the API is meant to be used fails CI.
// The `@ts-expect-error` lines must stay errors.
import {
  Backoff,
  Breaker,
  Bucket,
  Gate,
  Limits,
  Pool,
  Pooled,
  type PooledError,
  SharedBucket,
  SharedGate,
  SharedWindow,
  type Jitter,
  type Taken,
  Ward,
  Window,
  pick,
  retry,
  version,
} from 'headway';

const v: string = version();

interface Conn {
  id: number;
  query(sql: string): Promise<string>;
}

const pool = new Pool<Conn>({
  limits: new Limits({ size: 20, keep: 60_000 }),
  ward: new Ward({ breaker: new Breaker({ k: 2 }), backoff: new Backoff({ attempts: 5 }) }),
});

function open(): Conn {
  return { id: 1, query: async (sql) => sql };
}

function serve(t: Taken<Conn>, now: number): Conn | undefined {
  switch (t.kind) {
    case 'ready':
      return t.item;
    case 'stale':
      t.item.id satisfies number;
      return undefined;
    case 'make': {
      const c = open();
      pool.made(c, now);
      return c;
    }
    case 'wait':
      return undefined;
    case 'later':
      t.delay satisfies number;
      return undefined;
    case 'shed':
      return undefined;
    default: {
      const never: never = t;
      return never;
    }
  }
}

const c = serve(pool.take(0, 0.5), 0);
if (c) {
  const kept: boolean = pool.give(c, 1);
  if (!kept) pool.drop(c);
}
serve(pool.take(), 0);
pool.unmade();
pool.unmade(0, 0.5);
const evicted: Conn[] = pool.evict(0);
const closed: Conn[] = pool.close();
const counts: number = pool.live + pool.idle + pool.busy + pool.refusal(0);
const index: number = pick([pool, new Pool<string>()], 0, 0.1, 0.9);
// @ts-expect-error an item of the wrong type
pool.give('a string', 0);
// @ts-expect-error counts are read-only
pool.live = 3;
// @ts-expect-error no `item` on a make
pool.take().item;

const jitter: Jitter = 'decorrelated';
const b = new Backoff({ base: 100, factor: 2, cap: 1000, attempts: 3, jitter });
const delays: number[] = [b.ceiling(1), b.delay(1), b.delay(2, 0.5), b.delay(3, 0.5, 200), ...b.schedule([0.5])];
const more: boolean = b.more(1);
// @ts-expect-error not a jitter
new Backoff({ jitter: 'wobbly' });

const bucket = new Bucket(10, { burst: 20, at: 0 });
const ok: boolean = bucket.take() && bucket.take(0, 2);
const wait: number = bucket.next(0) + bucket.tokens(0);
const w = new Window(1000, 86_400_000);
const left: number = w.left(0) + w.next(0) + (w.take(0) ? 1 : 0);
const gate = new Gate(64);
if (gate.enter()) gate.leave();
const held: number = gate.held;

async function shared(url: string): Promise<void> {
  const sb = new SharedBucket(url, 'api', 10, { burst: 20 });
  const took: boolean = (await sb.take()) && (await sb.take(2));
  const sbWait: number = (await sb.next()) + (await sb.tokens()) + sb.rate + sb.burst;
  await sb.wait(1);
  const sw = new SharedWindow(url, 'daily', 1000, 86_400_000);
  const swLeft: number = (await sw.left()) + (await sw.next()) + sw.limit + sw.per;
  const sg = new SharedGate(url, 'db', 8, { lease: 10_000 });
  const permit: string | null = await sg.take();
  if (permit !== null) {
    const renewed: boolean = await sg.renew(permit);
    const released: boolean = await sg.release(permit);
    void [renewed, released];
  }
  const sgHeld: number = (await sg.held()) + sg.lease;
  void [took, sbWait, swLeft, sgHeld];
  // @ts-expect-error the gate's permit is a string
  await sg.release(1);
  // @ts-expect-error burst is an option
  new SharedBucket(url, 'api', 10, 20);
}
void shared;

async function drivers(): Promise<void> {
  const ctrl = new AbortController();
  const n: number = await retry(async (attempt: number) => attempt * 2, {
    backoff: b,
    retryIf: (err) => !(err instanceof TypeError),
    signal: ctrl.signal,
  });
  const s: string = await retry(() => 'sync is fine');
  await bucket.wait(1, { signal: ctrl.signal });

  const pooled = new Pooled<Conn>({
    open: async () => open(),
    close: async (conn) => conn.id,
    limits: new Limits({ size: 2 }),
    timeout: 1000,
    evictEvery: 0,
  });
  const rows: string = await pooled.use(async (conn) => conn.query('select 1'));
  const conn = await pooled.acquire();
  pooled.release(conn);
  pooled.destroy(await pooled.acquire());
  try {
    await pooled.acquire();
  } catch (e) {
    const code: PooledError['code'] = (e as PooledError).code;
    void code;
  }
  await pooled.drain();
  await pooled.close();
  void [n, s, rows, pooled.pending, pooled.closed];
}

void [v, evicted, closed, counts, index, delays, more, ok, wait, left, held, drivers];

// ---------------------------------------------------------------- tasks
import {
  App,
  At,
  Cron,
  Every,
  Exponential,
  Fixed,
  RedisBroker,
  Scheduler,
  SoftTimeLimitExceeded,
  chain,
  chord,
  group,
  schedule,
  testing,
  type Context,
  type DeadLetter,
  type LogFields,
  type WorkerJob,
  type Handle,
  type Json,
  type Rhythm,
  type State,
  type TaskError,
  type VirtualClock,
} from 'headway';

async function tasks(): Promise<void> {
  const clock: VirtualClock = new testing.VirtualClock(new Date('2026-01-01T00:00:00Z'));
  const app = new App({ clock });
  new App({ broker: 'redis://127.0.0.1:6379/0', backend: false });
  new App({ logger: console });
  const seen: LogFields[] = [];
  const keep = (_m: string, f: LogFields): void => {
    seen.push(f);
  };
  new App({ logger: { debug: keep, info: keep, warn: keep, error: keep } });
  // @ts-expect-error a logger needs all four methods
  new App({ logger: { warn: keep } });
  new App({ broker: new RedisBroker('redis://127.0.0.1:6379/0', { prefix: 'p:', lease: 5000 }) });
  new App({ broker: RedisBroker.celery('redis://127.0.0.1:6379/0', { visibilityTimeout: 60_000 }) });

  const add = app.task('add', ([x, y]: [number, number]) => x + y, {
    retries: 3,
    backoff: Exponential({ base: 500, cap: 60_000, jitter: true }),
    timeout: 10_000,
    acksLate: true,
    rate: '10/m',
  });
  app.task('limited', async (_args: [], ctx: Context) => {
    const reason: unknown = ctx.signal.reason;
    const soft: number | null = ctx.softTimeLimit;
    const hard: number | null = ctx.timeLimit;
    if (reason instanceof SoftTimeLimitExceeded) {
      const n: 'SoftTimeLimitExceeded' = reason.name;
      void [n, reason.limit];
    }
    return [soft, hard];
  }, { timeLimit: 10_000, softTimeLimit: 8_000, rejectOnWorkerLost: true, acksLate: true });
  const greet = app.task('greet', async ([name]: [string], ctx: Context) => {
    ctx.signal.throwIfAborted();
    await ctx.progress({ done: 1, of: 2 });
    const recorded: void = await ctx.updateState('STEP', [1, 'two', null]);
    void recorded;
    // @ts-expect-error a state is a name
    await ctx.updateState(3, {});
    return `hello ${name}, attempt ${ctx.attempt} of ${ctx.queue} at ${ctx.now.toISOString()}`;
  }, { backoff: Fixed(500), rate: { count: 5, per: 1000 } });
  const perKey = app.task('perKey', ([k]: [string]) => k, { rate: '100/s', rateScope: 'global', concurrencyLimit: 1 });
  const keyed: Handle<string> = await perKey.send(['a'], { concurrencyKey: 'cust-7', dedupeKey: 'k', dedupeTtl: 10_000 });
  void keyed;
  // @ts-expect-error a scope is 'worker' or 'global'
  app.task('badScope', () => 1, { rate: '1/s', rateScope: 'cluster' });

  const h: Handle<number> = await add.send([1, 2], { countdown: 1000, priority: 0, id: 'run-1' });
  const sum: number = await h.get(5000);
  const hello: string = await (await greet.send(['ada'], { eta: new Date(), expires: Date.now() + 60_000 })).get();
  // A custom state a body recorded (ctx.updateState) is a state too.
  const state: State | (string & {}) = await h.state();
  const named: string = await h.state();
  const info: Json = await h.info();
  await h.revoke(true);
  await h.revoke({ terminate: true, signal: 'SIGKILL' });
  await h.revoke({ signal: 9 });
  await app.revoke(['a', 'b'], { terminate: true });
  await app.revoke('a');
  // @ts-expect-error a signal is a name or a number
  await h.revoke({ terminate: true, signal: true });
  const byName = await app.send<number>('add', [1, 2], { kwargs: { plus: 1 } });
  const other = await app.sendTask('elsewhere', [1]);
  const some: unknown = await app.handle(other.id).get();

  const c: number = await (await chain(add.sig([1, 2]), add.sig([3]), add.sig([4], { immutable: true })).send()).get();
  const g: number[] = await (await group([add.sig([1, 1]), add.sig([2, 2])]).send()).get();
  const d: string = await (await chord([add.sig([1, 1])], greet.sig())).send().then((x) => x.get());
  await app.sig('remote.task', [1]).send();

  try {
    await h.get(10);
  } catch (e) {
    const err = e as TaskError;
    const code: 'FAILED' | 'TIMEOUT' | 'REVOKED' | 'MISSING' | 'UNKNOWN_TASK' | 'BROKER' = err.code;
    const kind: 'connection' | 'script' | 'server' | 'closed' | 'data' | 'other' | undefined = err.kind;
    void [code, kind, err.remoteType, err.remoteTraceback];
  }

  const w = app.worker({ queues: 'a,b', concurrency: 8, prefetch: 32 });
  w.on('active', (job: WorkerJob) => void job.id);
  w.on('completed', (job, result) => void [job.args, result]);
  w.on('failed', (job, error) => void [job.attempt, error]);
  const running: Promise<void> = w.run();
  await w.stop({ grace: 1000 });
  await running;
  void [w.name, w.queues, w.concurrency, w.prefetch, w.settled, w.stopping];
  const pooled = app.worker({
    pool: 'process',
    concurrency: 2,
    module: new URL('file:///srv/app.mjs'),
    maxTasksPerChild: 100,
    maxMemoryPerChild: 200_000,
    timeLimit: 30_000,
    softTimeLimit: 25_000,
  });
  const where: 'threads' | 'process' = pooled.pool;
  app.worker({ pool: 'prefork', module: './app.js' });
  app.worker({ pool: 'threads', softTimeLimit: 1000 });
  // @ts-expect-error not a pool
  app.worker({ pool: 'forks' });
  // @ts-expect-error limits are ms numbers
  app.worker({ pool: 'process', timeLimit: '30s' });
  void where;

  const beat = app.beat();
  const r: Rhythm = Cron('*/5 * * * *', { tz: 'Europe/London' });
  beat.add('tick', add, [1, 2], Every(60_000, { anchor: 0 }));
  beat.add('once', 'add', [1, 2], At(new Date()), { queue: 'q' });
  beat.add('cron', add, [1, 1], r);
  const pending: Array<[string, Date]> = beat.pending();
  for (const [name, due, fired] of await beat.tick()) void [name, due.getTime(), fired.id];
  await beat.run(Date.now());
  await beat.stop();

  const s = new Scheduler({ clock });
  s.add('flush', (ctx) => ctx.now, schedule.Every(1000));
  await s.run(clock.now() + 60_000);
  const stats = s.stats('flush');
  void [stats?.fired, s.pending(), clock.date(), app.now(), app.taskNames(), Fixed(1).waitBefore(2, 'x')];
  void [sum, hello, state, named, info, byName, some, c, g, d, pending];

  // @ts-expect-error: args are the positional array
  await add.send(1, 2);
  // @ts-expect-error: a body's args are typed
  await add.send(['one', 'two']);
  // @ts-expect-error: backoff is Fixed(...) or Exponential(...)
  app.task('bad', () => null, { backoff: 500 });
  // @ts-expect-error: no such option
  await add.send([1, 2], { eta_typo: 1 });
  // @ts-expect-error: a Json value cannot be a Map
  const j: Json = new Map();
  void j;
  // Dates and bytes travel (kombu's datetime and bytes).
  const typed: Json = [new Date(), Buffer.from('x'), { at: new Uint8Array(1) }];
  void typed;
}
void tasks;

// The admin interface.
import { createServer } from 'node:http';
import { admin, type AdminHandler, type AdminOptions } from 'headway';

function adminUsage(app: App): void {
  const options: AdminOptions = { token: 't', readOnly: true, maxBody: 1024, allowedOrigins: ['https://ops.example.com'] };
  const h: AdminHandler = admin.handler(app, options);
  const server = createServer(h);
  const token: string = h.token;
  const generated: boolean = admin.handler(app).tokenGenerated;
  const open: number = h.openStreams;
  h.closeStreams();
  void [server, token, generated, open, h.readOnly, h.maxBody];
  // @ts-expect-error: the first argument is an App
  admin.handler({}, { token: 't' });
  // @ts-expect-error: readOnly is a boolean
  admin.handler(app, { readOnly: 'yes' });
  // @ts-expect-error: no such option
  admin.handler(app, { tokn: 't' });
  // @ts-expect-error: token is read-only
  h.token = 'x';
}
void adminUsage;

// ---------------------------------------------------------------- dead letters
async function deadLetters(app: App): Promise<void> {
  await testing.pushRaw(app, 'default', Buffer.from([0x80, 0x04]));
  await testing.pushRaw(app, 'default', 'not a message');
  const dead: DeadLetter[] = await app.deadLetters('default', { limit: 10 });
  for (const d of dead) {
    const reason: string = d.reason;
    const queue: string = d.queue;
    const id: string | null = d.id;
    const at: Date = d.at;
    const raw: Buffer = d.raw;
    void [reason, queue, id, at, raw];
    // @ts-expect-error: a dead letter is read-only
    d.reason = 'x';
  }
  const n: number = await app.deadCount('default');
  const back: number = await app.requeueDead('default', { limit: 5, ids: ['id-1'] });
  const all: number = await app.requeueDead();
  const gone: number = await app.purgeDead('default');
  void [n, back, all, gone, await app.deadLetters()];
  // @ts-expect-error: limit is a number
  await app.deadLetters('default', { limit: '5' });
  // @ts-expect-error: ids is a list
  await app.requeueDead('default', { ids: 'id-1' });
  // @ts-expect-error: data is bytes or a string
  await testing.pushRaw(app, 'default', 5);
}
void deadLetters;
