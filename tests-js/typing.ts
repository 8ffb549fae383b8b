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
