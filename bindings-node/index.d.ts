// Type definitions for headway's Node binding (flow control).
//
// Units: every instant (`now`) and span (a delay, `keep`, `life`, a window)
// is a number of milliseconds. Only differences of `now` are used, so any
// origin works; omitted, `now` is `performance.now()`. A draw (`roll`,
// `random`, `first`, `second`) is a number in [0, 1); omitted, it is
// `Math.random()`. Passing every `now` and draw makes a sequence reproducible,
// which is how the tests drive an hour in three lines.
//
// Errors: an argument of the wrong type throws a `TypeError` with
// `code: 'ERR_INVALID_ARG_TYPE'`; a value the core refuses (a negative size, a
// NaN rate) a `RangeError` with `code: 'ERR_OUT_OF_RANGE'`. Both name the
// argument in the message.

/** The crate version of the native addon. */
export declare function version(): string;

/** An error a {@link Pooled} rejects with, told apart by its `code`. */
export interface PooledError extends Error {
  /**
   * `'TIMEOUT'`: no item within `Pooled`'s timeout. `'SHED'`: the ward's
   * breaker refused the make. `'CLOSED'`: the `Pooled` is closed or draining.
   */
  code: 'TIMEOUT' | 'SHED' | 'CLOSED';
}

// ---------------------------------------------------------------- Pool

/** The four knobs of {@link Limits}, each optional. */
export interface LimitsOptions {
  /** Most live at once, counting those being made; 0: no limit. Default 10 (HikariCP, Go database/sql). */
  size?: number;
  /** Most sitting unused; 0: no limit. Default 10: equal to size, as database/sql keeps them, so a pool that grew under load does not throw its connections away at once. */
  idle?: number;
  /** Idle age (ms) at which an item retires; 0: never. Default 30 min (database/sql's `SetConnMaxIdleTime` as most deployments set it). */
  keep?: number;
  /** Total age (ms) at which an item retires however busy it has been; 0: never. Default 0. */
  life?: number;
}

/**
 * The limits a pool holds itself to. Immutable; any of them negative (or
 * not an integer, for the two counts) is a `RangeError`.
 */
export declare class Limits {
  /** Limits by name, every knob defaulting to the preset (HikariCP / Go database/sql). */
  constructor(options?: LimitsOptions);
  /** Most live at once (0: no limit). */
  readonly size: number;
  /** Most idle at once (0: no limit). */
  readonly idle: number;
  /** Idle age in ms at which an item retires (0: never). */
  readonly keep: number;
  /** Total age in ms at which an item retires (0: never). */
  readonly life: number;
}

/** The two knobs of {@link Breaker}. */
export interface BreakerOptions {
  /** The multiplier: requests up to `k` times the accepts are never refused. At least 1. Default 2 (Google SRE book). */
  k?: number;
  /** The sliding window in ms the counts are kept over. Positive. Default two minutes (Google SRE book). */
  window?: number;
}

/**
 * Client-side adaptive throttling (Google SRE book, "Handling Overload"):
 * what share of makes to refuse while a backend is failing. Over a sliding
 * window, `refusal = max(0, (requests − k·accepts) / (requests + 1))`.
 *
 * A client that keeps sending to a backend that keeps refusing only adds to
 * the overload. With `k = 2` a backend accepting half of what it is asked is
 * never throttled, and one accepting nothing is asked ever more rarely but
 * never not at all — which is how the client learns it has recovered. There
 * is no timer to tune and no half-open stampede.
 *
 * A take that would make counts as a request (a shed one too), `made` as an
 * accept, `unmade` as neither. A `Ward` keeps its own copy.
 */
export declare class Breaker {
  constructor(options?: BreakerOptions);
  /** The multiplier. */
  readonly k: number;
  /** The window's length in ms. */
  readonly window: number;
}

/** The two optional parts of a {@link Ward}. */
export interface WardOptions {
  /** Answers *what share* of makes to refuse (`shed`). */
  breaker?: Breaker;
  /** Answers *how long* to hold makes after a failure (`later`). */
  backoff?: Backoff;
}

/**
 * What stands between a pool and a backend that is failing. A pool that
 * answers `make` for every take while the backend refuses every connection
 * turns one outage into a storm of connection attempts.
 *
 * - The breaker sheds a share of makes: `take` answers `shed` when
 *   `roll < refusal`.
 * - The backoff holds makes after `n` failed makes in a row: the next is held
 *   for `backoff.delay(n, roll)` from the failure, and `take` answers
 *   `later` with what remains. `made` resets the count.
 *
 * It copies both parts when made, as the core takes them by value.
 */
export declare class Ward {
  constructor(options?: WardOptions);
  readonly breaker: Breaker | undefined;
  readonly backoff: Backoff | undefined;
}

/** An idle item, now lent to you. */
export interface Ready<T> {
  readonly kind: 'ready';
  readonly item: T;
}
/**
 * An idle item too old to use (past `keep` or `life`), already out of the
 * pool and its count: close it and take again. Handed back rather than
 * skipped, so nothing leaks when the evict timer has not run.
 */
export interface Stale<T> {
  readonly kind: 'stale';
  readonly item: T;
}
/** There is room for another, and it is reserved: make one, then `made(item)` (or `unmade()` if making failed). */
export interface Make {
  readonly kind: 'make';
}
/** The pool is at `size`. Not a queue: your runtime decides — queue, time out, or try another pool. */
export interface Wait {
  readonly kind: 'wait';
}
/** The ward holds makes after a failure: try again after `delay` ms. */
export interface Later {
  readonly kind: 'later';
  /** What remains of the hold, in ms. */
  readonly delay: number;
}
/** The ward's breaker refused this make: fail fast. */
export interface Shed {
  readonly kind: 'shed';
}

/**
 * What a pool answers when asked for an item. It never blocks and never
 * opens anything: waiting and connecting need a runtime, and the pool has
 * none. Switch on `kind`.
 */
export type Taken<T> = Ready<T> | Stale<T> | Make | Wait | Later | Shed;

/** The options of {@link Pool}. */
export interface PoolOptions {
  /** Default `new Limits()`. */
  limits?: Limits;
  /** Default none: every take that finds room answers `make`. */
  ward?: Ward;
}

/**
 * The bookkeeping of holding a limited number of things. It does not open,
 * close or wait — a caller with a runtime does all three (see
 * {@link Pooled}). What it knows is how many are live, which are idle, which
 * are lent and since when each was made, and which have sat or lived long
 * enough to be let go.
 *
 * Any JS value can be pooled. A lent item is recognised on its way back by
 * identity (`===`; two structurally equal objects are two items), which is
 * how it keeps its birth through every loan: `give` does not make it
 * younger, so `life` retires an item that has been reused all along.
 */
export declare class Pool<T = unknown> {
  constructor(options?: PoolOptions);
  readonly limits: Limits;
  readonly ward: Ward | undefined;
  /**
   * Take one, be told to make one or to wait — or be handed one too old to
   * use. The most recently returned item comes first: a warm connection is
   * likelier to still be good, and letting the oldest age past `keep` is how
   * a pool shrinks after a burst.
   * @param now ms; default `performance.now()`.
   * @param roll the draw in [0, 1) the ward's breaker decides with; default `Math.random()`.
   */
  take(now?: number, roll?: number): Taken<T>;
  /** Register an item made after `take` said `make`: lent, born `now`. It fills the reserved room and tells the ward the backend is alive. */
  made(item: T, now?: number): void;
  /**
   * Say the item `take` reserved room for could not be made: the room is free
   * again, and the ward counts a failure (`roll` draws its hold). Without it a
   * factory that failed once would shrink the pool for good.
   */
  unmade(now?: number, roll?: number): void;
  /**
   * Hand one back, keeping the birth it was lent with. `false` means the pool
   * did not keep it and you should close it: there were already `idle` idle,
   * it is past its `life`, or it is a stranger with no room. An item never
   * registered by `made` fills the room `take` reserved and is born now. A
   * broken item goes to `drop` instead.
   */
  give(item: T, now?: number): boolean;
  /** Say a lent item is not coming back, because it broke — this keeps the live count honest. */
  drop(item: T): void;
  /**
   * Every idle item that has sat longer than `keep` or lived longer than
   * `life`, out of the pool, for you to close. Run it on a timer; `take`
   * checks ages too, so nothing is stranded when the timer is late.
   */
  evict(now?: number): T[];
  /** Everything idle, emptied out for you to close — a shutdown. Lent items come back through `give` and can be closed then. */
  close(): T[];
  /** The ward's breaker refusal now, in [0, 1); 0 without one. Reads, counts nothing. */
  refusal(now?: number): number;
  /** How many exist: idle, lent, and being made. */
  readonly live: number;
  /** How many sit idle. */
  readonly idle: number;
  /** How many are lent out or being made. */
  readonly busy: number;
}

/**
 * Which pool to ask, by two random choices: the pools at `floor(first·len)`
 * and `floor(second·len)` are compared; the lower `refusal(now)` wins, then
 * the lower `busy`, then the first. Asking the least-loaded of all makes
 * every client rush the same one; drawing two and asking the better is nearly
 * as good and herds nobody (Mitzenmacher; Finagle, Envoy).
 * @returns the index of the pool to ask, or -1 when `pools` is empty.
 */
export declare function pick(pools: readonly Pool<any>[], now?: number, first?: number, second?: number): number;

// ---------------------------------------------------------------- Backoff

/**
 * How much randomness goes into a delay (AWS, "Exponential Backoff and
 * Jitter"). Without jitter every client that failed together retries
 * together, which is how one outage becomes a second one.
 * - `'rigid'`: the ceiling, unchanged — reproducible; a policy written elsewhere may specify no jitter.
 * - `'full'`: uniform over [0, ceiling] — spreads clients furthest; what gRPC sleeps; the default.
 * - `'equal'`: ceiling/2 + uniform over [0, ceiling/2] — keeps a floor under the wait.
 * - `'decorrelated'`: uniform over [base, min(cap, 3·previous)] — grows from where it last landed.
 */
export type Jitter = 'rigid' | 'full' | 'equal' | 'decorrelated';

/** The five knobs of {@link Backoff}; the defaults are gRPC's retry policy. */
export interface BackoffOptions {
  /** The first retry's ceiling, ms. Default 100 (gRPC initialBackoff). */
  base?: number;
  /** What each ceiling is multiplied by; at least 1. Default 2 (gRPC backoffMultiplier). */
  factor?: number;
  /** No delay is ever longer, ms. Default 1000 (gRPC maxBackoff). */
  cap?: number;
  /** Attempts in all, the first included. Default 3 (gRPC maxAttempts). */
  attempts?: number;
  /** Default `'full'` (gRPC sleeps uniformly over [0, cap]; AWS measured it best). */
  jitter?: Jitter;
}

/** When to try again, and how long to wait first. Immutable. */
export declare class Backoff {
  constructor(options?: BackoffOptions);
  readonly base: number;
  readonly factor: number;
  readonly cap: number;
  readonly attempts: number;
  readonly jitter: Jitter;
  /**
   * The undelayed ceiling before the `retry`-th retry, the first being 1:
   * `min(base·factor^(retry−1), cap)`, 0 for `retry < 1`. What a jitter-free
   * client sleeps and what every strategy draws within — compare policies
   * with this.
   */
  ceiling(retry: number): number;
  /**
   * How long (ms) to wait before the `retry`-th retry. The same `random`
   * gives the same delay, which is what makes a retry sequence testable; a
   * draw outside [0, 1) is clamped into it. `previous` is the last delay,
   * which only `'decorrelated'` reads (0: none yet, taken as `base`).
   * @param random default `Math.random()`.
   * @param previous default 0.
   */
  delay(retry: number, random?: number, previous?: number): number;
  /** Whether a call that has made `made` attempts may make another: `0 <= made < attempts`. Three attempts allow two retries. */
  more(made: number): boolean;
  /**
   * Every delay a run of retries would wait — the `attempts − 1` of them —
   * for a test or a log line explaining a plan. Missing draws are 0, the low
   * end of every strategy.
   */
  schedule(randoms?: readonly number[]): number[];
}

/** The options of {@link retry}. */
export interface RetryOptions {
  /** Default `new Backoff()` (gRPC's: three attempts, 100 ms doubling to 1 s, full jitter). */
  backoff?: Backoff;
  /** Whether an error may be retried; one it answers `false` for rejects at once. Default: every error. */
  retryIf?: (err: unknown) => boolean;
  /** Aborting rejects the returned promise with `signal.reason` at once and cancels the sleep. */
  signal?: AbortSignal;
}

/**
 * Calls `fn` until it succeeds, sleeping `backoff.delay(retry, Math.random(),
 * previous)` between attempts; rejects with the last error when
 * `backoff.more` says stop, at once for an error `retryIf` excludes, and with
 * the signal's reason on abort. A first-try success never touches the native
 * core.
 * @param fn called with the attempt number, 1 for the first try.
 */
export declare function retry<R>(fn: (attempt: number) => R | PromiseLike<R>, options?: RetryOptions): Promise<R>;

// ---------------------------------------------------------------- Limiters

/** The options of {@link Bucket}. */
export interface BucketOptions {
  /** The most it holds. Default: the rate when above 1, else 1 (one second's worth); below 1 is raised to 1. */
  burst?: number;
  /** The instant (ms) it starts full at. Default 0. */
  at?: number;
}

/**
 * A token bucket: `rate` tokens accrue per second up to `burst`; each
 * request takes some. It allows a burst after a quiet period, which is what a
 * limit on a human-facing API wants. Starts full. A NaN, infinite or negative
 * rate or burst is a `RangeError`.
 */
export declare class Bucket {
  /** @param rate tokens per second. */
  constructor(rate: number, options?: BucketOptions);
  readonly rate: number;
  readonly burst: number;
  /** Whether `n` tokens (default 1) are there now, taking them if they are. */
  take(now?: number, n?: number): boolean;
  /**
   * How long (ms) until `n` tokens (default 1) would be there, without taking
   * them: 0 when they are, `Infinity` when they never will be (more than the
   * burst, or a zero rate). What a caller sleeps rather than spinning, and
   * what a `Retry-After` is computed from.
   */
  next(now?: number, n?: number): number;
  /** How many tokens are there now, for a caller that reports its headroom. */
  tokens(now?: number): number;
  /**
   * Resolves once `n` tokens (default 1) have been taken, sleeping
   * `next(now, n)` between tries. Rejects with a `RangeError` when they never
   * can be, and with `signal.reason` on abort.
   */
  wait(n?: number, options?: { signal?: AbortSignal }): Promise<void>;
}

/**
 * A sliding window: at most `allow` events in any `window`-long stretch,
 * exactly (the stamps are kept). Where a bucket smooths, a window counts: "a
 * thousand a day" is a window, not a rate — answered with a bucket, a client
 * could spend the day in its first minute.
 */
export declare class Window {
  /** @param allow a non-negative integer. @param window ms, positive. */
  constructor(allow: number, window: number);
  readonly allow: number;
  readonly window: number;
  /** Whether an event is within the quota now, counting it if it is. */
  take(now?: number): boolean;
  /** How many events remain in the window now. */
  left(now?: number): number;
  /** How long (ms) until there is room: 0 when there is, else until the oldest event inside falls out; `Infinity` when `allow` is 0. */
  next(now?: number): number;
}

/**
 * A count with a ceiling: the concurrency limit a server puts on itself.
 * Nothing to do with time — how many things are happening at once. A server
 * past its limit answers rather than queues, which keeps a queue from
 * becoming the outage.
 */
export declare class Gate {
  /** @param limit a non-negative integer. */
  constructor(limit: number);
  readonly limit: number;
  /** Whether there is room, taking it if there is. */
  enter(): boolean;
  /** Give the room back; leaving an empty gate does nothing. */
  leave(): void;
  /** How many are inside. */
  readonly held: number;
}

// ---------------------------------------------------------------- Pooled

/** The options of {@link Pooled}. */
export interface PooledOptions<T> {
  /** Makes an item; may be async. A throw counts as a failed make (`unmade`) and rejects the acquire. */
  open: () => T | PromiseLike<T>;
  /** Throws an item away; may be async. Its errors are ignored: the item is gone either way. Default: nothing to close. */
  close?: (item: T) => unknown;
  limits?: Limits;
  ward?: Ward;
  /** How long (ms) an acquire waits on `wait` and `later` before rejecting with `code: 'TIMEOUT'`. Default 30 000 (HikariCP's connectionTimeout); `Infinity` waits for ever. */
  timeout?: number;
  /** The evict timer's period (ms). Default the shorter of `keep` and `life`, at least 1 s (Go database/sql's cleaner); 0 turns it off. The timer is unref'd. */
  evictEvery?: number;
}

/**
 * A pool with a runtime under it: it runs the six answers of `take` for you —
 * opens on `make` (then `made`, or `unmade` when `open` throws), closes on
 * `stale` and when `give` answers false, queues on `wait` up to `timeout`,
 * sleeps out `later`, rejects on `shed` (`code: 'SHED'`). An unref'd timer
 * evicts idle items past their age. Nothing it leaves behind keeps the
 * process alive after `close()` or `drain()`.
 */
export declare class Pooled<T = unknown> {
  constructor(options: PooledOptions<T>);
  /** The bookkeeper underneath. */
  readonly pool: Pool<T>;
  /** How many acquires are queued on `wait`. */
  readonly pending: number;
  readonly live: number;
  readonly idle: number;
  readonly busy: number;
  readonly closed: boolean;
  /**
   * `fn(item)` with an item acquired for it, given back when `fn` settles —
   * also when it throws, since an error in the body does not mean the item
   * broke; call `destroy(item)` inside to say it did.
   */
  use<R>(fn: (item: T) => R | PromiseLike<R>): Promise<R>;
  /** An item for manual use; hand it back with `release` or `destroy`. */
  acquire(): Promise<T>;
  /** Give an item back; it is closed when the pool does not keep it. */
  release(item: T): void;
  /** Say an item broke: it is dropped from the count and closed. */
  destroy(item: T): void;
  /** Refuse new acquires, let the ones under way and the lent items finish, then close. */
  drain(): Promise<void>;
  /**
   * Refuse new acquires, reject queued ones with `code: 'CLOSED'`, stop the
   * timer and close what is idle; items still lent are closed as they come
   * back. Resolves when those closes have settled.
   */
  close(): Promise<void>;
}
