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

import { EventEmitter } from 'node:events';

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
  /** How often `Pooled` sweeps with `evict`, in ms: the shorter of `keep` and `life`, at least 1 s (0: no timer). */
  readonly evictEvery: number;
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
  /** A breaker with `k` (default 2) over `window` ms (default two minutes). */
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
  /** A ward with either part, both, or neither (then it never refuses). */
  constructor(options?: WardOptions);
  /** Its breaker (a copy), if any. */
  readonly breaker: Breaker | undefined;
  /** Its backoff, if any. */
  readonly backoff: Backoff | undefined;
}

/** An idle item, now lent to you. */
export interface Ready<T> {
  /** Switch on it. */
  readonly kind: 'ready';
  /** The item, lent to you. */
  readonly item: T;
}
/**
 * An idle item too old to use (past `keep` or `life`), already out of the
 * pool and its count: close it and take again. Handed back rather than
 * skipped, so nothing leaks when the evict timer has not run.
 */
export interface Stale<T> {
  /** Switch on it. */
  readonly kind: 'stale';
  /** The item: close it. */
  readonly item: T;
}
/** There is room for another, and it is reserved: make one, then `made(item)` (or `unmade()` if making failed). */
export interface Make {
  /** Switch on it. */
  readonly kind: 'make';
}
/** The pool is at `size`. Not a queue: your runtime decides — queue, time out, or try another pool. */
export interface Wait {
  /** Switch on it. */
  readonly kind: 'wait';
}
/** The ward holds makes after a failure: try again after `delay` ms. */
export interface Later {
  /** Switch on it. */
  readonly kind: 'later';
  /** What remains of the hold, in ms. */
  readonly delay: number;
}
/** The ward's breaker refused this make: fail fast. */
export interface Shed {
  /** Switch on it. */
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
  /** A pool with these limits (default `new Limits()`) and ward (default none). */
  constructor(options?: PoolOptions);
  /** The limits it holds itself to. */
  readonly limits: Limits;
  /** Its ward as given, if any. */
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
  /** A backoff with these knobs; each omitted one is gRPC's. */
  constructor(options?: BackoffOptions);
  /** The first retry's ceiling, ms. */
  readonly base: number;
  /** What each ceiling is multiplied by. */
  readonly factor: number;
  /** No delay is longer, ms. */
  readonly cap: number;
  /** Attempts in all, the first included. */
  readonly attempts: number;
  /** How the delay is drawn under its ceiling. */
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
  /** Tokens added per second. */
  readonly rate: number;
  /** The most it holds. */
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
  /** Events allowed in any window. */
  readonly allow: number;
  /** The window's length, ms. */
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
  /** How many may be inside at once. */
  readonly limit: number;
  /** Whether there is room, taking it if there is. */
  enter(): boolean;
  /** Give the room back; leaving an empty gate does nothing. */
  leave(): void;
  /** How many are inside. */
  readonly held: number;
}

// ---------------------------------------------------------------- shared limits

/** The options of {@link SharedBucket}. */
export interface SharedBucketOptions {
  /** The most it holds. Default the rate when above 1, else 1; below 1 is raised to 1 (as {@link Bucket}). */
  burst?: number;
}

/**
 * A token bucket shared by every process (Node or Python) that names the same
 * `key` on the Redis at `url`: {@link Bucket}'s rules, run in Redis on Redis's
 * clock (`TIME`), so processes whose clocks disagree still share one rate.
 * The same defaults and refusals as {@link Bucket} (a `RangeError` naming the
 * argument); no I/O until the first call. A call rejects with `code: 'BROKER'`
 * when Redis cannot be reached within 2 s.
 */
export declare class SharedBucket {
  /** @param rate tokens per second. */
  constructor(url: string, key: string, rate: number, options?: SharedBucketOptions);
  /** Tokens added per second. */
  readonly rate: number;
  /** The most it holds. */
  readonly burst: number;
  /** The Redis key it lives under (`headway:limit:bucket:<key>`). */
  readonly key: string;
  /** Whether `n` tokens (default 1) are there now, taking them if they are. */
  take(n?: number): Promise<boolean>;
  /** How long (ms) until `n` tokens (default 1) would be there, without taking them: 0 when they are, `Infinity` when they never will be. */
  next(n?: number): Promise<number>;
  /** How many tokens are there now. */
  tokens(): Promise<number>;
  /** Resolves once `n` tokens (default 1) have been taken, sleeping as long as each refusal says. Rejects with a `RangeError` when they never can be. */
  wait(n?: number): Promise<void>;
}

/**
 * A sliding window shared by every process (Node or Python) that names the
 * same `key` on the Redis at `url`: at most `limit` events in any `per`-long
 * stretch, exactly — {@link Window}'s rules, run in Redis on Redis's clock
 * (microseconds: `per` is rounded up to one). No I/O until the first call.
 */
export declare class SharedWindow {
  /** @param limit a non-negative integer. @param per ms, positive. */
  constructor(url: string, key: string, limit: number, per: number);
  /** Events allowed in any window. */
  readonly limit: number;
  /** The window's length, ms. */
  readonly per: number;
  /** The Redis key it lives under (`headway:limit:window:<key>`). */
  readonly key: string;
  /** Whether an event is within the quota now, counting it if it is. */
  take(): Promise<boolean>;
  /** How many events remain in the window now. */
  left(): Promise<number>;
  /** How long (ms) until there is room: 0 when there is; `Infinity` when `limit` is 0. */
  next(): Promise<number>;
  /** Resolves once an event has been counted, sleeping until there is room. Rejects with a `RangeError` when `limit` is 0. */
  wait(): Promise<void>;
}

/** The options of {@link SharedGate}. */
export interface SharedGateOptions {
  /** How long (ms) a permit is held unless renewed. Default 30 000. */
  lease?: number;
}

/**
 * A concurrency gate shared by every process (Node or Python) that names the
 * same `key` on the Redis at `url`: at most `n` permits held at once,
 * {@link Gate}'s rules run in Redis. Each permit is a lease: a holder that
 * crashed gives its room back when the lease ends. No I/O until the first
 * call.
 */
export declare class SharedGate {
  /** @param n a non-negative integer. */
  constructor(url: string, key: string, n: number, options?: SharedGateOptions);
  /** The most permits held at once. */
  readonly limit: number;
  /** How long (ms) a permit is held unless renewed. */
  readonly lease: number;
  /** The Redis key it lives under (`headway:limit:gate:<key>`). */
  readonly key: string;
  /** A permit (to `release` or `renew`) when there is room, else `null`. */
  take(): Promise<string | null>;
  /** Gives the permit's room back: whether it was held. Released twice, or after its lease ended, it gives back nothing. */
  release(permit: string): Promise<boolean>;
  /** Starts the permit's lease again: whether it was still held. */
  renew(permit: string): Promise<boolean>;
  /** How many permits are held now. */
  held(): Promise<number>;
}

// ---------------------------------------------------------------- Pooled

/** The options of {@link Pooled}. */
export interface PooledOptions<T> {
  /** Makes an item; may be async. A throw counts as a failed make (`unmade`) and rejects the acquire. */
  open: () => T | PromiseLike<T>;
  /** Throws an item away; may be async. Its errors are ignored: the item is gone either way. Default: nothing to close. */
  close?: (item: T) => unknown;
  /** The pool's limits. Default `new Limits()`. */
  limits?: Limits;
  /** The pool's ward. Default none. */
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
  /** A pool over `open` and `close`; see {@link PooledOptions}. */
  constructor(options: PooledOptions<T>);
  /** The bookkeeper underneath. */
  readonly pool: Pool<T>;
  /** How many acquires are queued on `wait`. */
  readonly pending: number;
  /** How many exist: idle, lent, and being made (the pool's `live`). */
  readonly live: number;
  /** How many sit idle. */
  readonly idle: number;
  /** How many are lent out or being made. */
  readonly busy: number;
  /** Whether `close()` or `drain()` was called. */
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

// ================================================================ Tasks
//
// The task queue: an App owns a broker, a result
// store and a clock; a task is a name, a policy and a body; a worker runs
// bodies on this event loop. Units: spans are milliseconds; an instant is a
// `Date` or epoch milliseconds. Every call that touches a broker returns a
// Promise. A refusal is an `Error` with a `code` (see `TaskError`); a value
// of the wrong type is a `TypeError` (`ERR_INVALID_ARG_TYPE`), one the core
// cannot accept a `RangeError` (`ERR_INVALID_ARG_VALUE` / `ERR_OUT_OF_RANGE`),
// both naming the argument.

/**
 * What a task's arguments and results travel as: JSON, plus two of kombu's
 * typed values. A `Date` is sent as a `datetime` (UTC,
 * `"2026-01-02T03:04:05.123000+00:00"`) and a `Buffer`/`Uint8Array` as
 * `bytes` (`base64` when not UTF-8). Received (a body's args and kwargs,
 * `get()`, chain and chord values): a `datetime` is a `Date`, `bytes` and
 * `base64` a `Buffer`, a `uuid` its hyphenated string, a `decimal` its text,
 * a `date` or `time` its ISO string; a typed object kombu would refuse stays
 * a plain object. A value that cannot travel (undefined, a function, a
 * symbol, a BigInt, a Map, a class instance, NaN, an invalid Date) is
 * refused at send naming where it is (`add: args[1] is a Map`), never
 * silently dropped or stringified. Numbers beyond 2^53 lose precision, as in
 * `JSON.parse`.
 */
export type Json = null | boolean | number | string | Date | Uint8Array | Json[] | { [key: string]: Json };

/** An instant: a `Date` or epoch milliseconds. */
export type When = Date | number;

/** Celery's state names, so either side reads the other's results. */
export type State = 'PENDING' | 'RECEIVED' | 'STARTED' | 'RETRY' | 'SUCCESS' | 'FAILURE' | 'REVOKED';

/** Why a task-side Promise rejected. */
export interface TaskError extends Error {
  /**
   * `'FAILED'`: the body threw (or a chord part did) on its last attempt.
   * `'TIMEOUT'`: the wait ran out first. `'REVOKED'`: revoked, expired or
   * terminated. `'MISSING'`: the app keeps no results. `'UNKNOWN_TASK'`:
   * `app.send` of a name this app does not run. `'BROKER'`: the broker or
   * the store failed.
   */
  code: 'FAILED' | 'TIMEOUT' | 'REVOKED' | 'MISSING' | 'UNKNOWN_TASK' | 'BROKER';
  /**
   * FAILED: the remote error's type name (`err.name` for a JS body, the
   * exception class for Python). On the process pool the pool's own
   * failures read as Celery's: `'TimeLimitExceeded'` (the run passed its hard
   * `timeLimit` and its child was killed) and `'WorkerLostError'` (its child
   * died under it: `process.exit()`, a crash, the OOM killer).
   */
  remoteType?: string;
  /** FAILED: its message. */
  remoteMessage?: string;
  /** FAILED: its stack (JS) or traceback text (Python); null when it had none. */
  remoteTraceback?: string | null;
  /** FAILED: the exception's module, for a Python body; else null. */
  remoteModule?: string | null;
  /** REVOKED: the run's id. */
  id?: string;
  /** UNKNOWN_TASK: the name. */
  task?: string;
  /**
   * BROKER: how the broker or store failed. `'connection'`: Redis could not
   * be reached, the connection was lost, or a reply timed out (worth trying
   * again later). `'script'`: a Lua script failed or answered something
   * unexpected. `'server'`: Redis refused the command (OOM, READONLY,
   * NOAUTH / WRONGPASS, NOPERM, MISCONF). `'closed'`: this broker or worker
   * was closed. `'data'`: a stored value could not be read. `'other'`:
   * anything else.
   */
  kind?: 'connection' | 'script' | 'server' | 'closed' | 'data' | 'other';
}

/** Per-send options (`task.send(args, options)`). */
export interface SendOptions {
  /** The keyword object (`ctx.kwargs` in a JS body, `**kwargs` in Python). */
  kwargs?: { [key: string]: Json } | undefined;
  /** Not to run before this instant. Wins over `countdown`, being the more specific. */
  eta?: When | undefined;
  /** Not to run before this many ms from now. */
  countdown?: number | undefined;
  /** Pointless after this instant: a worker that finds it expired records REVOKED without running it. */
  expires?: When | undefined;
  /** The queue (the task's policy queue when omitted). */
  queue?: string | undefined;
  /** 0 (first) to 9, as Celery's Redis transport orders its steps. */
  priority?: number | undefined;
  /** The run's id (a fresh v4 UUID when omitted, as Celery makes them). */
  id?: string | undefined;
  /**
   * The key the task's `concurrencyLimit` counts: at most that many runs of
   * one key at once, across every worker on the broker. Not empty.
   */
  concurrencyKey?: string | undefined;
  /**
   * A second send of the task with this key within `dedupeTtl` sends
   * nothing and answers the first run's handle (the same id). A single
   * send's only: a signature inside a chain, group or chord refuses it.
   */
  dedupeKey?: string | undefined;
  /** How long a `dedupeKey` holds, ms (positive; an hour by default). Needs a `dedupeKey`. */
  dedupeTtl?: number | undefined;
}

/** A signature's options: a send's, and `immutable`. */
export interface SigOptions extends SendOptions {
  /** Not given the previous link's result in a chain, nor the parts' results as a chord's callback. Default false. */
  immutable?: boolean | undefined;
}

/** The same wait before every retry. */
export interface FixedBackoff {
  /** Tells the backoffs apart. */
  readonly kind: 'fixed';
  /** The wait, ms. */
  readonly delay: number;
  /** The ms waited before attempt `attempt` (the first is 1 and never waits) of the run `taskId`. */
  waitBefore(attempt: number, taskId: string): number;
}

/** A wait doubling from `base` to `cap`, optionally jittered. */
export interface ExponentialBackoff {
  /** Tells the backoffs apart. */
  readonly kind: 'exponential';
  /** The first retry's ceiling, ms. */
  readonly base: number;
  /** No wait is longer, ms. */
  readonly cap: number;
  /** Whether the wait is spread over [0, ceiling]. */
  readonly jitter: boolean;
  /** The ms waited before attempt `attempt` (the first is 1 and never waits) of the run `taskId`. */
  waitBefore(attempt: number, taskId: string): number;
}

/** How long a failed run waits before the next attempt. */
export type TaskBackoff = FixedBackoff | ExponentialBackoff;

/** The same wait before every retry: `delay` ms. A negative delay is a RangeError. */
export declare function Fixed(delay: number): FixedBackoff;

/**
 * A wait doubling from `base` to `cap` ms. With `jitter` it is spread over
 * [0, ceiling] — full jitter, AWS's measured best, so a thousand workers
 * failing together do not retry in the same millisecond — the draw derived
 * from the task id and the attempt, so a task waits the same on every
 * machine and in both languages, and a test can assert it.
 */
export declare function Exponential(options?: {
  /** Default 1 s (moontask's preset). */
  base?: number | undefined;
  /** Default 10 min (Celery's `retry_backoff_max` is also 600 s). */
  cap?: number | undefined;
  /** Default true. */
  jitter?: boolean | undefined;
}): ExponentialBackoff;

/** Runs per window, per worker. */
export interface Rate {
  /** How many runs. */
  count: number;
  /** The window, ms. */
  per: number;
}

/**
 * How a task is run, retried and confirmed. Each default is the safe side
 * of its choice (moontask).
 */
export interface Policy {
  /** Where its messages go. Default `'default'`. */
  queue?: string | undefined;
  /** How many times a failed run is tried again. Default 0: a retry repeats the first attempt's side effects. */
  retries?: number | undefined;
  /** The wait between attempts. Default `Exponential()`: 1 s doubling to 10 min, jittered by the task id. */
  backoff?: TaskBackoff | undefined;
  /**
   * How long one run may take, real ms. Default none: a hung run is visible
   * in the queue rather than silently cut. On a timeout the run fails with
   * `TimeoutError` and `ctx.signal` aborts; a late answer is discarded.
   */
  timeout?: number | null | undefined;
  /** Confirm after the run, not on receipt (at-least-once: a worker that dies mid-run has it run again). Default false. */
  acksLate?: boolean | undefined;
  /** Keep no result. Default false. */
  ignoreResult?: boolean | undefined;
  /** Runs per window, per worker: `'10/m'` (Celery's notation: s, m, h, d) or `{ count, per }`. Default none. */
  rate?: string | Rate | null | undefined;
  /**
   * Whom `rate` holds for: `'worker'` (each worker on its own, the default)
   * or `'global'` (every worker on the broker together: one token bucket in
   * Redis, or in the process on the memory broker; a broker that cannot
   * keep it refuses the worker). `'global'` needs a `rate`.
   */
  rateScope?: 'worker' | 'global' | null | undefined;
  /**
   * At most this many runs sent with one `concurrencyKey` run at once,
   * across every worker on the broker (a whole number, at least 1). Default:
   * 1 for a run sent with a key; runs without a key are not limited.
   */
  concurrencyLimit?: number | null | undefined;
  /**
   * Celery's hard `time_limit`, ms: past it the run's child process is
   * killed and the run fails with `TimeLimitExceeded`. Needs a worker on the
   * process pool (`pool: 'process'`): on the event loop nothing can stop a
   * body, and a worker there refuses a task that has one. Default none.
   */
  timeLimit?: number | null | undefined;
  /**
   * Celery's `soft_time_limit`, ms: past it `ctx.signal` aborts with a
   * `SoftTimeLimitExceeded` reason; the body goes on, may clean up, and
   * what it answers is stored. On either pool. Default none.
   */
  softTimeLimit?: number | null | undefined;
  /**
   * With `acksLate`, a run whose child process died under it
   * (`WorkerLostError`) goes back to its queue instead of failing (Celery's
   * `reject_on_worker_lost`). Default false.
   */
  rejectOnWorkerLost?: boolean | undefined;
  /**
   * Which failures are retried (Celery's `autoretry_for`): errors of these
   * classes or their subclasses (an Error class or its name, or an array of
   * them). Default: every failure, within `retries`.
   */
  retryFor?: ErrorClassList | undefined;
  /** Which failures are never retried, even when `retryFor` names a base of theirs (Celery's `dont_autoretry_for`). */
  dontRetryFor?: ErrorClassList | undefined;
}

/**
 * The reason `ctx.signal` aborts with once a run passed its soft time limit
 * (`name` is `'SoftTimeLimitExceeded'`, Celery's). A body that rethrows it
 * fails with that type.
 */
export declare class SoftTimeLimitExceeded extends Error {
  /** The reason for a run past its soft limit of `limit` ms (headway makes these; a test may too). */
  constructor(limit: number);
  /** `'SoftTimeLimitExceeded'`, Celery's name: a body that rethrows it fails with that type. */
  readonly name: 'SoftTimeLimitExceeded';
  /** The soft time limit that passed, ms. */
  readonly limit: number;
}

/**
 * What a body is told about the run it is in. `retries` is how many
 * attempts before this one failed, `attempt` is this one counting from 1,
 * and `last` whether a failure now is final — a body that must not repeat a
 * side effect checks it before doing the work again.
 */
export declare class Context {
  private constructor();
  /** The run's id (also its result's key; a retry keeps it). */
  readonly id: string;
  /** The task's registered name (a scheduler's job: the job's name). */
  readonly name: string;
  /** The queue the message came from. */
  readonly queue: string;
  /** Attempts before this one that failed. */
  readonly retries: number;
  /** This attempt, counting from 1. */
  readonly attempt: number;
  /** Whether a failure now is final (no retry follows). */
  readonly last: boolean;
  /** The app's time when the run started (a scheduler's job: the time it was due). */
  readonly now: Date;
  /** The keyword arguments. */
  readonly kwargs: { [key: string]: Json };
  /** The first run of the canvas this run belongs to, if any. */
  readonly rootId: string | null;
  /** The run that sent this one (the previous link of a chain), if any. */
  readonly parentId: string | null;
  /** The run's soft time limit, ms (its task's, else its worker's), or null. */
  readonly softTimeLimit: number | null;
  /** The run's hard time limit, ms (process pool only), or null. */
  readonly timeLimit: number | null;
  /** The name of the worker running it ('' outside a worker). */
  readonly worker: string;
  /**
   * Aborts when the core stops waiting for this run — its timeout, a
   * `revoke(true)`, a worker stop past its grace — so an async body can stop
   * its work; and, with a `SoftTimeLimitExceeded` reason, once the run passed
   * its soft time limit (the body may then clean up and answer). A sync body
   * cannot be interrupted on the event loop; on the process pool its hard
   * `timeLimit` or a terminate kills its child.
   */
  readonly signal: AbortSignal;
  /**
   * Asks for this run to be retried on its own terms (Celery's
   * `self.retry`): throws a TaskRetry, which the body lets propagate.
   */
  retry(options?: RetryOptions): never;
  /** Rejects the run's message (Celery's `Reject`): throws a Reject, which the body lets propagate. */
  reject(options?: RejectOptions): never;
  /** Ends the run with nothing stored (Celery's `Ignore`): throws an Ignore, which the body lets propagate. */
  ignore(): never;
  /**
   * Records a custom state for this run while it runs (Celery's
   * `update_state`): `state` a name such as 'PROGRESS' (not SUCCESS, FAILURE
   * or REVOKED, not empty: rejects with a RangeError), `meta` any JSON value.
   * `handle.state()` then answers the name and `handle.info()` the meta,
   * until the run's final state overwrites them. Resolves once stored
   * (nothing is stored when the app keeps no results, or for a scheduler's
   * job; in a process-pool child, once sent to the worker, which stores it
   * before the run ends).
   */
  updateState(state: string, meta?: Json): Promise<void>;
  /** `updateState('PROGRESS', meta)`. */
  progress(meta?: Json): Promise<void>;
}

/** Error classes (or their names) a policy's retry filter names: one, or an array. */
export type ErrorClassList = (abstract new (...args: never[]) => Error) | string | ReadonlyArray<(abstract new (...args: never[]) => Error) | string>;

/** What `ctx.retry` asks: when, within which budget, recording what. */
export interface RetryOptions {
  /** Run again after this many ms (else the task's backoff). */
  countdown?: number | null | undefined;
  /** Run again at this time (a Date or ms since the epoch); not with `countdown`. */
  eta?: Date | number | null | undefined;
  /** The attempts allowed for this ask, in place of the task's `retries`. */
  maxRetries?: number | null | undefined;
  /** The error to record meanwhile, and to fail with past the budget (else `MaxRetriesExceededError`). */
  error?: unknown;
}

/** What `ctx.reject` asks. */
export interface RejectOptions {
  /** Back to the queue as it was (true), or fail for good with the reason (false, the default). */
  requeue?: boolean | undefined;
  /** Why, recorded with the failure. */
  reason?: string | undefined;
}

/**
 * Thrown by `ctx.retry` (or by a body): the run goes again on its own terms
 * (`name` is `'Retry'`, Celery's). Past its budget the run fails with its
 * `error`, or `MaxRetriesExceededError`; a bad option fails it with a
 * `TypeError` naming the option.
 */
export declare class TaskRetry extends Error {
  /** A retry asking what `options` say. */
  constructor(options?: RetryOptions);
  /** `'Retry'`, Celery's name. */
  readonly name: 'Retry';
}

/** Thrown by `ctx.reject` (or by a body): requeue the message, or fail the run with the reason (`name` is `'Reject'`). */
export declare class Reject extends Error {
  /** A reject asking what `options` say. */
  constructor(options?: RejectOptions);
  /** `'Reject'`, Celery's name. */
  readonly name: 'Reject';
}

/** Thrown by `ctx.ignore` (or by a body): the run ends with nothing stored (`name` is `'Ignore'`). */
export declare class Ignore extends Error {
  /** An ignore. */
  constructor();
  /** `'Ignore'`, Celery's name. */
  readonly name: 'Ignore';
}

/** A body: the positional arguments and the context; a value, or a Promise of one. */
export type Body<A extends Json[], R> = (args: A, ctx: Context) => R | PromiseLike<R>;

/** A run, or a set of runs (a group), to wait on, look at or revoke. */
export declare class Handle<R = unknown> {
  private constructor();
  /** The run's id (a group's first part). */
  readonly id: string;
  /** Every id it waits on, in order. */
  readonly ids: string[];
  /**
   * The value (a group: the list, in order), waiting at most `timeout` real
   * ms (omitted: for ever). Rejects with a `TaskError`: FAILED, TIMEOUT,
   * REVOKED or MISSING.
   */
  get(timeout?: number | null): Promise<R>;
  /**
   * What it is doing now, without waiting: a state name, or a custom state
   * its body recorded (`ctx.updateState`, e.g. 'PROGRESS'). A group: FAILURE
   * once any part failed, REVOKED once any was revoked, SUCCESS once all
   * succeeded, else the first unsettled part's state.
   */
  state(): Promise<State | (string & {})>;
  /**
   * What it says about itself now, without waiting (Celery's
   * `AsyncResult.info`): the value once it succeeded, the meta of a custom
   * state its body recorded (`ctx.updateState`), the error
   * (`{ kind, message, traceback?, module? }`) for a failure, a retry or a
   * revoke, null while nothing is stored. A group: the list of its parts',
   * in order.
   */
  info(): Promise<Json>;
  /** When it reached its final state (Celery's `date_done`): a Date, or null before or when nothing is stored. */
  dateDone(): Promise<Date | null>;
  /** The runs its success sent on — its `link` callbacks, its chain's next link (Celery's `children`); empty before. */
  children(): Promise<Handle[]>;
  /** Removes what is stored of it (Celery's `forget()`): it then reads PENDING. */
  forget(): Promise<void>;
  /**
   * Revokes it: it will not start anywhere the broker reaches. With
   * `terminate` (`revoke(true)` or `revoke({ terminate: true, signal })`),
   * a run in progress stops — in whichever process on the broker runs it
   * (`ctx.signal` aborts there; on the process pool its child is sent the
   * signal, then SIGKILL 2 s later) — and is recorded REVOKED. A bad
   * `signal` is a RangeError (`ERR_INVALID_ARG_VALUE`), one of the wrong type
   * a TypeError.
   */
  revoke(options?: boolean | RevokeOptions): Promise<void>;
}

/** How `revoke` stops a run in progress. */
export interface RevokeOptions {
  /** Also stop a run in progress, wherever it runs (default false). */
  terminate?: boolean | undefined;
  /**
   * The signal a terminate carries: a name in any case, with or without
   * `SIG` (`'SIGTERM'`, the default; `'KILL'`), or a number 1 to 64.
   */
  signal?: string | number | null | undefined;
}

/** A piece of work that has not been published; building one publishes nothing, so it can be sent twice. */
export interface Canvas<R = unknown> {
  /** Publishes every message and resolves to a handle on what it waits for. */
  send(): Promise<Handle<R>>;
}

/**
 * A run that has not been published: `task.sig(args, options)` or
 * `app.sig(name, args, options)`. Unless `immutable`, a chain's link gets
 * the previous result prepended, a chord's callback the parts' results.
 */
export declare class Signature<R = unknown> implements Canvas<R> {
  private constructor();
  /** The app it is sent through. */
  readonly app: App;
  /** The task's name. */
  readonly name: string;
  /** Its positional arguments. */
  readonly args: Json[];
  /** Its keyword arguments, or null. */
  readonly kwargs: { [key: string]: Json } | null;
  /** Whether a chain or chord leaves its arguments alone. */
  readonly immutable: boolean;
  /** Publishes the run and resolves to its handle. */
  send(): Promise<Handle<R>>;
}

/**
 * Runs in order, each started when the one before it succeeds; a link that
 * is not immutable gets the previous result prepended. Answers the last
 * link's value. Chains inside are flattened; a group first is a chord over
 * the rest (as in Celery); a group later is a RangeError at send.
 */
export declare function chain<R>(...links: [...Canvas[], Canvas<R>]): Canvas<R>;
export declare function chain(links: readonly Canvas[]): Canvas;

/** Runs all at once, answered as the list of results in the order given; a chain inside stays a chain. */
export declare function group<R>(...parts: Canvas<R>[]): Canvas<R[]>;
export declare function group<R>(parts: readonly Canvas<R>[]): Canvas<R[]>;

/**
 * `parts`, then `callback` with the list of their results (in order) as its
 * first argument. The counter is opened at send, before any part can
 * finish; a part that fails for good fails the callback (FAILED,
 * `ChordError`), so nobody waits for ever.
 */
export declare function chord<R>(parts: readonly Canvas[], callback: Canvas<R>): Canvas<R>;

/** A registered body: `app.task(name, fn, policy)`. */
export declare class Task<A extends Json[] = Json[], R = unknown> {
  private constructor();
  /** The name its messages carry. */
  readonly name: string;
  /** Publishes a run of `args` and resolves to its handle. */
  send(args?: A, options?: SendOptions): Promise<Handle<R>>;
  /** The run of `args` as a canvas node (in a chain, the previous result is prepended to `args`). */
  sig(args?: Json[], options?: SigOptions): Signature<R>;
}

/** How a worker is set up. */
export interface WorkerOptions {
  /** The queues to claim from, in order: an array or an `'a,b'` string. Default `['default']`. */
  queues?: string | readonly string[] | null | undefined;
  /** Bodies at once. Default 4 (moontask's preset). */
  concurrency?: number | undefined;
  /** Messages held not finished running at most (never below `concurrency`). Default concurrency × 4, Celery's prefetch multiplier (× 8 on the process pool: four per slot, a child having its run and one on deck); left unset, the worker reaches past it while runs are short (about 2 ms of its recent work, at most 8 × it). */
  prefetch?: number | null | undefined;
  /** A name for logs and the admin page. Default `worker-` and a random suffix. */
  name?: string | undefined;
  /**
   * Where bodies run. `'threads'` (the default): on this event loop.
   * `'process'` (Celery's `'prefork'` is accepted too): in `concurrency`
   * child processes the core starts, supervises and replaces, each running
   * one body at a time — CPU-bound bodies use that many cores, and a body can
   * be killed mid-instruction (`timeLimit`, a terminate).
   */
  pool?: 'threads' | 'process' | 'prefork' | undefined;
  /**
   * Process pool: the module each child imports to find the app — a path
   * (from the current directory) or a `file:` URL. It must export the App:
   * as its default export (`module.exports`), as `app`, or as its only App
   * export. Default: this process's main script (`require.main.filename`,
   * else `process.argv[1]`). The module runs again in every child, so it
   * must start its worker only when it is the main script.
   */
  module?: string | URL | undefined;
  /**
   * Celery's `worker_prefetch_multiplier`: when `prefetch` is not given, the
   * worker holds `concurrency` × this many messages (a whole number, at
   * least 1). Default: headway's (× 4; × 8 on the process pool).
   */
  prefetchMultiplier?: number | null | undefined;
  /** Process pool: runs after which a child is replaced (Celery's `--max-tasks-per-child`). Default never. */
  maxTasksPerChild?: number | null | undefined;
  /** Process pool: resident memory, KiB, past which a child is replaced after its run (Celery's `--max-memory-per-child`). Default never. */
  maxMemoryPerChild?: number | null | undefined;
  /** The hard time limit (ms) of a task that sets none; needs the process pool. Default none. */
  timeLimit?: number | null | undefined;
  /** The soft time limit (ms) of a task that sets none. Default none. */
  softTimeLimit?: number | null | undefined;
}

/**
 * Runs tasks: claims from its queues, runs up to `concurrency` bodies at
 * once (on this event loop, or in child processes with `pool: 'process'`),
 * and settles each as its policy says — early ack
 * by default, late with `acksLate`; a failure within the retry budget goes
 * back with an eta from the backoff.
 */
/** A run as a worker's events carry it. */
export interface WorkerJob {
  /** The run's id. */
  id: string;
  /** Its task's name. */
  name: string;
  /** The queue it came from. */
  queue: string;
  /** This attempt, counting from 1. */
  attempt: number;
  /** Attempts before this one that failed. */
  retries: number;
  /** Its arguments. */
  args: Json[];
  /** Its keyword arguments. */
  kwargs: Record<string, Json>;
}

/**
 * Runs tasks (see App.worker). Its events, BullMQ's names, on either
 * pool (process-pool runs' values arrive as JSON, their errors as an Error
 * named by the failure's kind): 'active'
 * (job) when a body starts; 'completed' (job, result); 'retrying' (job,
 * error) when it threw with an attempt left; 'failed' (job, error) when
 * it threw for good. A listener that throws fails no run.
 */
export declare class Worker extends EventEmitter {
  private constructor();
  /** A body started. */
  on(event: 'active', listener: (job: WorkerJob) => void): this;
  /** A body returned `result`. */
  on(event: 'completed', listener: (job: WorkerJob, result: unknown) => void): this;
  /** A body threw and the run will be tried again. */
  on(event: 'retrying' | 'failed', listener: (job: WorkerJob, error: unknown) => void): this;
  /** Any other event (EventEmitter's). */
  on(event: string | symbol, listener: (...args: any[]) => void): this;
  /** Its name, in logs and on the admin page. */
  readonly name: string;
  /** The queues it claims from, in order. */
  readonly queues: string[];
  /** Bodies at once. */
  readonly concurrency: number;
  /** Messages held unsettled at most. */
  readonly prefetch: number;
  /** Where its bodies run: `'threads'` (this event loop) or `'process'` (child processes). */
  readonly pool: 'threads' | 'process';
  /** The pids of its child processes now (empty on the threads pool). */
  readonly childPids: number[];
  /** How many messages it has settled so far. */
  readonly settled: number;
  /** Whether stop() was called. */
  readonly stopping: boolean;
  /**
   * Runs until stopped; resolves once every message it held is settled or
   * given back (and keeps the process alive until then). A worker runs
   * once; a second `run()` rejects with `ERR_INVALID_STATE`.
   */
  run(): Promise<void>;
  /**
   * Stops claiming, gives prefetched messages back at once, lets runs in
   * progress finish for `grace` ms (default 10 s: about what a supervisor
   * waits between SIGTERM and SIGKILL), then cancels and gives back the
   * rest — nothing it held is lost. Resolves when `run()` has; after that
   * nothing of the worker keeps the process alive.
   */
  stop(options?: { grace?: number | undefined }): Promise<void>;
}

/** Once per `interval` ms. */
export interface EveryRhythm {
  /** Tells the rhythms apart. */
  readonly kind: 'every';
  /** The interval, ms. */
  readonly interval: number;
  /** The instant (epoch ms) slots are counted from, or null: from when the entry is added. */
  readonly anchor: number | null;
  /** The first time it fires at or after `now`; null if never. */
  first(now: When): Date | null;
  /** The first time it fires strictly after `at` — pass the time that was due; null if never again. */
  after(at: When): Date | null;
}

/** On the minutes a crontab line names, in a time zone. */
export interface CronRhythm {
  /** Tells the rhythms apart. */
  readonly kind: 'cron';
  /** The crontab line as given. */
  readonly expr: string;
  /** The IANA time zone it is read in. */
  readonly tz: string;
  /** The first time it fires at or after `now`; null if never. */
  first(now: When): Date | null;
  /** The first time it fires strictly after `at` (pass the time that was due); null if never again. */
  after(at: When): Date | null;
}

/** Once, at an instant. */
export interface AtRhythm {
  /** Tells the rhythms apart. */
  readonly kind: 'at';
  /** Epoch ms. */
  readonly when: number;
  /** `when`, whatever `now` is. */
  first(now: When): Date | null;
  /** Always null: it fires once. */
  after(at: When): Date | null;
}

/** When a beat entry or a scheduled job fires. */
export type Rhythm = EveryRhythm | CronRhythm | AtRhythm;

/**
 * Once per `interval` ms. Without `anchor` the slots count from when the
 * entry is added and the first fires one interval later (Celery beat and
 * APScheduler both wait: firing at once on every restart turns a crash loop
 * into a job storm); with `anchor` they are `anchor + k·interval`, the same
 * on every machine (`Every(3_600_000, { anchor: 0 })` is on the hour).
 */
export declare function Every(interval: number, options?: { anchor?: When | undefined }): EveryRhythm;

/**
 * The minutes a 5-field crontab line names (lists, ranges, steps, names,
 * `@hourly`...), read in the IANA zone `tz` (default "UTC"). Across a DST
 * change (Vixie cron's rules, as the croner crate implements them): a fixed
 * time that does not exist that day fires at the first instant after the
 * gap, one that happens twice fires once, a wildcard or step line keeps its
 * real-time rhythm. Not 5 fields, never firing, or an unknown zone is a
 * RangeError.
 */
export declare function Cron(expr: string, options?: { tz?: string | undefined }): CronRhythm;

/** Once, at `when`; a time already past still fires, once, at once. */
export declare function At(when: When): AtRhythm;

/**
 * Sends tasks on rhythms, keeping the phase: the next time is computed from
 * the time that was due, so an hourly entry stays on its minute after a late
 * tick; slots missed entirely are coalesced into one send. On a virtual
 * clock its sleeps advance the clock.
 */
export declare class Beat {
  private constructor();
  /**
   * Schedules `task` (a Task or a name) with `args` under `name`, replacing
   * an entry of that name. The name identifies the entry, not the task.
   */
  add(
    name: string,
    task: Task<any, any> | string,
    args: Json[],
    schedule: Rhythm,
    options?: { kwargs?: { [key: string]: Json } | undefined; queue?: string | undefined; priority?: number | undefined },
  ): void;
  /** Removes the entry `name`; false when there was none. */
  remove(name: string): boolean;
  /** Entry names and when each fires next, soonest first. */
  pending(): Array<[name: string, at: Date]>;
  /** Sends what is due now; resolves to [name, due, handle] per send. */
  tick(): Promise<Array<[name: string, due: Date, handle: Handle]>>;
  /** Sends due entries and sleeps until the next, until stop() — or until the app's clock reaches `until`. */
  run(until?: When | null): Promise<void>;
  /** Stops it after the tick in progress; resolves when run() has. */
  stop(): Promise<void>;
}

/**
 * A clock that workers and beats sleep on: a sleep advances it instead of
 * waiting, so a retry schedule or an hour of beats runs in milliseconds and
 * prints the same every time. What it moves is what the queue schedules —
 * etas, retry backoffs, expiry, beats; a body's `timeout` and
 * `get(timeout)` stay real waits, since no clock makes a stuck body finish
 * sooner. `testing.VirtualClock`.
 */
declare class VirtualClock {
  /** A clock reading `start` (default 0: 1970-01-01 UTC) until something moves it. */
  constructor(start?: When);
  /** Now, epoch ms. */
  now(): number;
  /** Now, as a Date. */
  date(): Date;
  /** Moves it forward by `ms`; a negative step does nothing: time here never runs backwards. */
  advance(ms: number): void;
  /** Moves it to `when` if that is later. */
  advanceTo(when: When): void;
}
export type { VirtualClock };

/** What tests need: a clock that sleeping advances, and bytes on a queue as a foreign producer puts them. */
export declare const testing: {
  /** {@link VirtualClock}: a clock that sleeping advances. */
  readonly VirtualClock: typeof VirtualClock;
  /**
   * Puts `data` (a string as UTF-8) on `queue` of the app's broker as another
   * producer would, unchecked: the worker that claims it quarantines it as a
   * dead letter if it is not a message headway runs.
   */
  pushRaw(app: App, queue: string, data: Uint8Array | string): Promise<void>;
};

/**
 * One message set aside rather than run: bytes that are not a message
 * headway runs (quarantine), or a message that lost three workers (a poison
 * pill). Listed by `app.deadLetters()`.
 */
export interface DeadLetter {
  /** The queue it was claimed from. */
  readonly queue: string;
  /** Its task id, when it could be read. */
  readonly id: string | null;
  /** Why: `'not JSON: …'`, `'no task name'`, `'worker lost ×3'`, …. */
  readonly reason: string;
  /** When it was set aside (the broker's clock). */
  readonly at: Date;
  /**
   * Its bytes as they were on the queue, or their first 64 KiB when it was
   * quarantined (`size` says how many there were).
   */
  readonly raw: Buffer;
  /** How many bytes it was on the queue (more than `raw.length` when only a prefix was kept). */
  readonly size: number;
}

/**
 * A broker, result store and chord counter on Redis. It connects when an
 * App is built on it, with that app's clock (the Redis scripts read it when
 * it is virtual); one broker serves one clock. `new App(...)` blocks the
 * event loop for that connect, as Python's `App(...)` blocks: a loopback
 * Redis answers in a millisecond, an unreachable one is refused after 5 s.
 */
export declare class RedisBroker {
  /**
   * headway's own layout (docs/redis-layout.md). `consumer` names this
   * process's claims (default: host, pid and a random suffix; unique among
   * live processes); `prefix` goes before every key (default `'headway:'`);
   * `lease` ms is how long a consumer's claims survive it without a refresh
   * (default 30 s, BullMQ's lock duration): what a dead worker held is back
   * within two leases.
   */
  constructor(
    url: string,
    options?: { consumer?: string | undefined; prefix?: string | undefined; lease?: number | undefined },
  );
  /**
   * Celery's layout and message format, so one queue is shared with Celery
   * workers and producers. `visibilityTimeout` ms: how long a claim may stay
   * unacked before any consumer hands it back (kombu's 3600 s).
   * `taskSendSentEvent`: a `task-sent` event for each message sent
   * (Celery's `task_send_sent_event`; off). `masterName`: with Celery's
   * Sentinel URL (`sentinel://h1:26379;sentinel://h2:26379`), the master the
   * sentinels watch.
   */
  static celery(
    url: string,
    options?: {
      consumer?: string | undefined;
      visibilityTimeout?: number | undefined;
      taskSendSentEvent?: boolean | undefined;
      masterName?: string | undefined;
    },
  ): RedisBroker;
  /** The URL, password redacted (`redis://user:***@host`). */
  readonly url: string;
  /** Which layout it speaks: headway's own or Celery's. */
  readonly layout: 'headway' | 'celery';
  /** Hands back what consumers whose lease (or visibility timeout) ran out were holding; resolves to how many. */
  recover(): Promise<number>;
  /** Lets go of this consumer's claims so another takes them now rather than after the lease: call it after the worker stopped. */
  close(): Promise<void>;
}

/** How an app is built. */
export interface AppOptions {
  /**
   * `'memory://'` (default: an in-process broker that is also its result
   * store and chord counter), `'redis://host:port/db'` / `'rediss://…'`
   * (headway's Redis layout with default options), or a RedisBroker.
   */
  broker?: string | RedisBroker | undefined;
  /** Where results are kept: omitted, the broker's own; false, none (get() rejects MISSING); or another URL or RedisBroker. */
  backend?: string | RedisBroker | false | null | undefined;
  /** The only clock the task side reads: a testing.VirtualClock, or omitted for the system clock. */
  clock?: VirtualClock | null | undefined;
  /**
   * Where headway's log records go instead of stderr: `logger.warn(message,
   * fields)` and its debug / info / error siblings (console, pino and
   * winston fit). The records are the process's: every logger given to an
   * App receives each of them.
   */
  logger?: Logger | undefined;
  /**
   * OpenTelemetry spans for sends and runs (default true): taken when
   * `@opentelemetry/api` is installed and a tracer provider is registered
   * (a worker's runs when one was registered as it was made); false turns
   * tracing off for this app. See docs/api.md, "Tracing".
   */
  tracing?: boolean | null | undefined;
}

/** What headway tells a logger with each record. */
export interface LogFields {
  /** The part that made it: 'headway.worker', 'headway.redis', 'headway.celery', 'headway.beat', 'headway.admin', 'headway.memory'. */
  logger: string;
  /** The worker's name, where one made it. */
  worker: string | null;
  /** The run's task name, where the record is about a run. */
  taskName: string | null;
  /** The run's id, where the record is about a run. */
  taskId: string | null;
  /** When it was made, seconds since the Unix epoch. */
  ts: number;
}

/** A logger as console, pino and winston are. */
export interface Logger {
  /** Debug records (`NODE_DEBUG=headway` or `--loglevel debug`). */
  debug(message: string, fields: LogFields): unknown;
  /** Info records. */
  info(message: string, fields: LogFields): unknown;
  /** Warnings: a worker's, a Redis link's, the beat's, the admin's. */
  warn(message: string, fields: LogFields): unknown;
  /** Errors. */
  error(message: string, fields: LogFields): unknown;
}

/**
 * The registry, the broker and the clock. Nothing is global: two apps in
 * one process do not see each other's tasks. A bad broker URL is a
 * RangeError; an unreachable Redis throws a `TaskError` with code BROKER
 * (the password never shown).
 */
export declare class App {
  /** An app on `broker` (default `'memory://'`); connects to Redis now. */
  constructor(options?: AppOptions);
  /** The clock it was given (null: the system clock). */
  readonly clock: VirtualClock | null;
  /**
   * Registers `fn(args, ctx)` under `name` (replacing an earlier one, which
   * is what lets a test run one task under two policies) and answers the
   * Task. `fn` may return a value or a Promise; a throw or a rejection is a
   * task failure. A bad policy is a TypeError or RangeError now.
   */
  task<A extends Json[] = Json[], R = unknown>(name: string, fn: Body<A, R>, policy?: Policy): Task<A, Awaited<R>>;
  /** Every registered name, sorted (so a page listing them is stable). */
  taskNames(): string[];
  /**
   * Publishes a run of the task called `name` — the dispatcher's entry, for
   * a name learnt at run time. Rejects with UNKNOWN_TASK for a name this app
   * has not registered: a queue that accepts work nobody can run only moves
   * the failure to a worker.
   */
  send<R = unknown>(name: string, args?: Json[], options?: SendOptions): Promise<Handle<R>>;
  /** Celery's `send_task`: publishes a run of any name, for tasks another process (a Celery worker, say) runs. */
  sendTask<R = unknown>(name: string, args?: Json[], options?: SendOptions): Promise<Handle<R>>;
  /** A signature of any task name — one this app runs or one another process does. */
  sig<R = unknown>(name: string, args?: Json[], options?: SigOptions): Signature<R>;
  /** A handle on the run `id`, which some other process may have sent. */
  handle<R = unknown>(id: string): Handle<R>;
  /**
   * Revokes the runs `ids` (one id or several), as `handle.revoke` does:
   * with `{ terminate: true, signal }` a run in progress stops wherever it
   * runs.
   */
  revoke(ids: string | readonly string[], options?: boolean | RevokeOptions): Promise<void>;
  /** The app's time, epoch ms (the virtual clock's, in tests). */
  now(): number;
  /** A worker of this app. */
  worker(options?: WorkerOptions): Worker;
  /** The app's beat — the same object every call, so a module can add entries and `npx headway beat` run them. */
  beat(): Beat;
  /**
   * The dead letters of `queue` ('default'), newest first, at most `limit`
   * (100). An unknown queue has none; a `limit` that is not a number is a
   * TypeError, a negative or fractional one a RangeError.
   */
  deadLetters(queue?: string, options?: { limit?: number | undefined }): Promise<DeadLetter[]>;
  /** How many dead letters `queue` ('default') keeps now (0 for an unknown queue). */
  deadCount(queue?: string): Promise<number>;
  /**
   * Puts dead letters of `queue` ('default') back on it as they were, oldest
   * first — at most `limit` (all when omitted), only those whose id is in
   * `ids` when given — and resolves to how many went back. A letter that is
   * still bad is set aside again by the next worker that claims it.
   */
  requeueDead(queue?: string, options?: { limit?: number | null | undefined; ids?: readonly string[] | null | undefined }): Promise<number>;
  /** Drops every dead letter of `queue` ('default') for good; resolves to how many. */
  purgeDead(queue?: string): Promise<number>;
}

/** How a scheduled job has gone. */
export interface JobStats {
  /** Times it was called. */
  fired: number;
  /** Times it failed (threw or rejected). */
  failed: number;
  /** Slots skipped because it was still running. */
  skipped: number;
  /** The last failure, as `Type: message`. */
  lastError: string | null;
}

/**
 * Jobs on rhythms inside one process, with no broker behind it — what
 * node-cron is reached for. The core keeps the timetable (the beat's own,
 * so they agree on when something is due) and the phase. Two rules from
 * APScheduler's defaults: a job still running when it is due again is
 * skipped for that slot (max_instances = 1), and slots missed while the
 * process was busy fire once, not once each (coalesce). A job that throws
 * is logged and counted; the rhythm goes on.
 */
export declare class Scheduler {
  /** A scheduler on `clock` (default: the system clock). */
  constructor(options?: { clock?: VirtualClock | null | undefined });
  /** The clock it was given (null: the system clock). */
  readonly clock: VirtualClock | null;
  /** Adds (or replaces) the job `name`: `fn(ctx)` on `rhythm` (`ctx.name` the job's, `ctx.now` the time it was due). */
  add(name: string, fn: (ctx: Context) => unknown, rhythm: Rhythm): void;
  /** Removes the job `name`; false when there was none. */
  remove(name: string): boolean;
  /** Job names and when each fires next, soonest first. */
  pending(): Array<[name: string, at: Date]>;
  /** How the job has gone; null for an unknown name. */
  stats(name: string): JobStats | null;
  /** Calls what is due now and waits for those calls; resolves to [name, due] per call. */
  tick(): Promise<Array<[name: string, due: Date]>>;
  /** Calls due jobs and sleeps until the next, until stop() — or until the clock reaches `until`. */
  run(until?: When | null): Promise<void>;
  /** Runs it in the background and returns at once. */
  start(): void;
  /** Stops it after the tick in progress; resolves when run() has. */
  stop(): Promise<void>;
}

/** `headway.schedule`: the in-process scheduler and its rhythms, as Python's `headway.schedule`. */
export declare const schedule: {
  /** {@link Scheduler}. */
  readonly Scheduler: typeof Scheduler;
  /** {@link Every}. */
  readonly Every: typeof Every;
  /** {@link Cron}. */
  readonly Cron: typeof Cron;
  /** {@link At}. */
  readonly At: typeof At;
};

// The admin interface (bindings-node/lib/admin.js, typed in admin.d.ts).
export { admin, type AdminOptions, type AdminHandler } from './admin';
