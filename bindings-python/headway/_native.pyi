"""The native half of headway: headway-core's flow control as Python classes.

Units: ``now`` is float seconds from any origin (omitted: ``time.monotonic()``,
read in Rust); a span is float seconds or a ``datetime.timedelta``; a draw is a
float in [0, 1) (omitted: the binding's SplitMix64 RNG). Only differences of
``now`` are used. A value the core refuses raises ``ValueError`` and one of the
wrong type ``TypeError``, each message naming the argument; a Rust panic
raises ``PanicError``.
"""

from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from contextvars import ContextVar
from datetime import datetime, timedelta
from types import GenericAlias
from typing import Any, Final, Generic, Literal, NoReturn, SupportsFloat, SupportsIndex, TypeVar, final

from typing_extensions import disjoint_base

_T = TypeVar("_T")

TAKE_TIMEOUT: float
"""How long ``Pooled.acquire`` waits by default, in seconds (30, HikariCP's
``connectionTimeout``)."""
GRACE: float
"""How long a worker's stop lets runs in progress finish by default, in
seconds (10)."""
_R_co = TypeVar("_R_co", covariant=True)

#: Float seconds, or a ``timedelta`` (exact to the microsecond).
_Span = SupportsFloat | SupportsIndex | timedelta
_Num = SupportsFloat | SupportsIndex

#: An instant: an aware ``datetime`` or epoch seconds.
_Instant = datetime | SupportsFloat | SupportsIndex
#: An instant, or a ``timedelta`` meaning that long from now.
_When = datetime | timedelta | SupportsFloat | SupportsIndex
_Rhythm = Every | Cron | At

__all__ = [
    "Acquires",
    "At",
    "Attempts",
    "Backoff",
    "Breaker",
    "Bucket",
    "Context",
    "Cron",
    "DeadLetter",
    "Every",
    "Exponential",
    "Fixed",
    "GRACE",
    "Gate",
    "Handle",
    "Jitter",
    "Later",
    "Limits",
    "Make",
    "PanicError",
    "Pool",
    "Ready",
    "RedisBroker",
    "Shed",
    "SharedBucket",
    "SharedGate",
    "SharedWindow",
    "Stale",
    "TAKE_TIMEOUT",
    "VirtualClock",
    "Wait",
    "Ward",
    "Window",
    "banner",
    "cli_parse",
    "current",
    "log_flush",
    "log_format",
    "log_level",
    "log_line",
    "log_to",
    "pick",
    # Hidden helpers (pyo3 lists every module member in __all__).
    "_Admin",
    "_AdminStream",
    "_App",
    "_Beat",
    "_CELERY_DEFAULTS",
    "_CELERY_FOREVER",
    "_CURRENT",
    "_Flag",
    "_Host",
    "_Noop",
    "_Scheduler",
    "_Wire",
    "_Worker",
    "_celery_autoretry",
    "_celery_broker",
    "_celery_rate",
    "_celery_request_direct",
    "_celery_route",
    "_celery_send_options",
    "_celery_task_options",
    "_direct_context",
    "_eta_ms",
    "_json_roundtrip",
    "_noop",
    "_now",
    "_process_pool",
    "_panic",
    "_reseed",
    "_set_task_hook",
]

class PanicError(RuntimeError):
    """A Rust panic inside headway: a bug, never an answer.

    Every native entry point that runs core logic catches unwinding and
    raises this instead of pyo3's ``PanicException`` (a ``BaseException``),
    so ``except Exception`` sees it and a server loop survives it.
    """

# ------------------------------------------------------------------ Pool

@final
class Limits:
    """The limits a pool holds itself to.

    ``size``: most live at once, counting those being made (0: no limit).
    ``idle``: most sitting unused (0: no limit). ``keep``: idle age at which an
    item retires, in seconds (0: never). ``life``: total age at which it
    retires (0: never).

    The defaults: ten live, ten idle, thirty minutes idle, no maximum age. Ten
    is HikariCP's and Go database/sql's default pool size; thirty minutes is
    database/sql's ``SetConnMaxIdleTime`` as most deployments set it; idle
    equal to size is database/sql's behaviour, so a pool that grew under load
    does not throw its connections away at once. Negative values raise
    ``ValueError``.
    """

    def __new__(
        cls,
        size: SupportsIndex = 10,
        idle: SupportsIndex = 10,
        keep: _Span = 1800.0,
        life: _Span = 0.0,
    ) -> Limits: ...
    @property
    def size(self) -> int:
        """Most live at once (0: no limit)."""
    @property
    def idle(self) -> int:
        """Most idle at once (0: no limit)."""
    @property
    def keep(self) -> float:
        """Idle age at which an item retires, in seconds (0: never)."""
    @property
    def life(self) -> float:
        """Total age at which an item retires, in seconds (0: never)."""
    @property
    def evict_every(self) -> float:
        """How often a driver sweeps with ``evict``, in seconds: the shorter of
        ``keep`` and ``life``, at least one second (0: no timer)."""
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Breaker:
    """Client-side adaptive throttling (Google SRE book, "Handling Overload").

    Over a sliding ``window`` (seconds) it counts requests and accepts and
    refuses locally ``max(0, (requests − k·accepts) / (requests + 1))`` of new
    makes. Defaults from the book: ``k = 2`` over two minutes — a backend
    accepting half of what it is asked is never throttled; one accepting
    nothing is asked ever more rarely, never not at all, which is how the
    client learns it has recovered. ``k`` below 1 and a window that is not
    positive raise ``ValueError``.
    """

    def __new__(cls, k: _Num = 2.0, window: _Span = 120.0) -> Breaker: ...
    @property
    def k(self) -> float:
        """The multiplier on accepts."""
    @property
    def window(self) -> float:
        """The window's length, in seconds."""

@final
class Ward:
    """What stands between a pool and a failing backend; both parts optional.

    A ``Breaker`` answers *what share* of makes to refuse (``take`` answers
    ``Shed``). A ``Backoff`` answers *how long* to hold makes after failures:
    after ``n`` failed makes in a row the next is held for
    ``backoff.delay(n, roll)`` from the failure (``take`` answers
    ``Later(remaining)``); ``made`` resets it.
    """

    def __new__(cls, breaker: Breaker | None = None, backoff: Backoff | None = None) -> Ward: ...
    @property
    def breaker(self) -> Breaker | None:
        """The breaker, if any (a copy)."""
    @property
    def backoff(self) -> Backoff | None:
        """The backoff, if any."""
    @property
    def failures(self) -> int:
        """Failed makes in a row."""
    def refusal(self, now: _Num | None = None) -> float:
        """The breaker's refusal at ``now``, in [0, 1); 0 without a breaker."""

@final
class Ready(Generic[_T]):
    """``take`` answered: an idle item, now lent to you. Use it, then ``give``
    it back (or ``drop`` it if it broke)."""

    __match_args__ = ("item",)
    def __new__(cls, item: _T) -> Ready[_T]: ...
    @property
    def item(self) -> _T:
        """The item."""
    def __class_getitem__(cls, key: Any) -> GenericAlias: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Stale(Generic[_T]):
    """``take`` answered: an idle item too old to use, already out of the pool
    and its count. Close it and take again; it is handed back rather than
    skipped so nothing it holds leaks when the evict timer has not run."""

    __match_args__ = ("item",)
    def __new__(cls, item: _T) -> Stale[_T]: ...
    @property
    def item(self) -> _T:
        """The item."""
    def __class_getitem__(cls, key: Any) -> GenericAlias: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Make:
    """``take`` answered: there is room for another, and it is reserved. Open
    one, then call ``made(item)`` — or ``unmade()`` if opening failed, so the
    room is free again. ``Make()`` is a shared instance."""

    __match_args__ = ()
    def __new__(cls) -> Make: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Wait:
    """``take`` answered: the pool is at ``size``. Not a queue: the pool has no
    runtime, so the caller decides — queue, time out, or try another pool.
    ``Wait()`` is a shared instance."""

    __match_args__ = ()
    def __new__(cls) -> Wait: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Shed:
    """``take`` answered: the ward's breaker refused this make. Fail fast: the
    backend is refusing most of what it is asked. ``Shed()`` is a shared
    instance."""

    __match_args__ = ()
    def __new__(cls) -> Shed: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Later:
    """``take`` answered: the ward holds makes after a failure; try again after
    ``delay`` seconds."""

    __match_args__ = ("delay",)
    def __new__(cls, delay: _Num) -> Later: ...
    @property
    def delay(self) -> float:
        """Seconds still to wait."""
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Acquires:
    """The acquires of one ``Pool``: who is served next (first parked, first
    served), who parks, who gives up. ``Pooled`` drives it; every method takes
    the pool it keeps the queue for. ``step`` answers ``(kind, value)``: 0
    hand ``value``, 1 open, 2 close ``value``, 3 sleep ``value`` s, 4 park
    until woken or the deadline ``value`` (``None``: none). An acquire that
    gives up raises: ``PoolTimeout``, ``ShedError`` or ``RuntimeError``
    (closed), with the core's message."""

    def __new__(
        cls,
        timeout: _Span | None = None,
        evict_every: _Span | None = None,
        limits: Limits | None = None,
    ) -> Acquires: ...
    @property
    def timeout(self) -> float | None:
        """Seconds an acquire waits before failing (``None``: for ever)."""
    @property
    def evict_every(self) -> float:
        """The evict timer's period in seconds (0: no timer)."""
    def quick(self, pool: Pool[Any]) -> tuple[Any] | None:
        """``(item,)``, a fresh idle item lent, when nobody is queued ahead."""
    def begin(self) -> int:
        """A new acquire's ticket; its deadline runs from now."""
    def step(
        self, pool: Pool[Any], ticket: int, roll: _Num | None = None
    ) -> tuple[int, Any]:
        """What to do next for ``ticket``."""
    def opened(self, pool: Pool[Any], ticket: int, item: Any) -> bool:
        """Register what was opened; ``False`` when the pool closed meanwhile."""
    def unopened(self, pool: Pool[Any], ticket: int, roll: _Num | None = None) -> None:
        """Opening failed: the ward counts it."""
    def end(self, pool: Pool[Any], ticket: int) -> None:
        """The caller left; nothing for a ticket already over."""
    def give(self, pool: Pool[Any], item: Any, broken: bool) -> bool:
        """An item comes back (``broken``: dropped); whether to close it."""
    def evict(self, pool: Pool[Any]) -> list[Any]:
        """The evict timer's sweep: idle items past their age, to close."""
    def close(self, pool: Pool[Any]) -> list[Any]:
        """Shut down: the idle items to close; every parked ticket is woken."""
    def wakes(self) -> list[int]:
        """The tickets to wake now, in order."""
    @property
    def has_wakes(self) -> bool:
        """Whether there are tickets to wake."""
    @property
    def parked(self) -> int:
        """How many acquires are parked."""
    @property
    def closed(self) -> bool:
        """Whether ``close`` has run."""

@final
class Attempts:
    """One call's run of attempts under a ``Backoff``: after each failure,
    ``failed()`` answers the seconds to sleep before calling again (0: at
    once), or ``None``: give up and raise."""

    def __new__(cls, backoff: Backoff, made: int = 0) -> Attempts: ...
    def failed(
        self, retryable: bool = True, stopped: bool = False, u: _Num | None = None
    ) -> float | None:
        """The attempt failed: seconds to sleep before the next, or ``None``."""
    @property
    def made(self) -> int:
        """How many attempts have been made."""

@final
class Pool(Generic[_T]):
    """The bookkeeping of holding a limited number of things.

    It does not open, close or wait — the caller (or ``headway.Pooled``) does.
    ``take`` answers one of six classes: ``Ready(item)``, ``Stale(item)``,
    ``Make()``, ``Wait()``, ``Later(delay)``, ``Shed()``. Newest first: the most
    recently returned item is handed out first, so the oldest age past
    ``keep`` and the pool shrinks after a burst. A stale idle item comes back
    as ``Stale``, never skipped. A lent item is recognised by identity (``is``)
    and keeps its birth through every loan, so ``life`` retires an item reused
    all along. Any object can be pooled, hashable or not.

    Every ``now`` is float seconds from any origin (omitted:
    ``time.monotonic()``); every ``roll`` a draw in [0, 1) (omitted: the
    binding's RNG).
    """

    def __new__(cls, limits: Limits | None = None, ward: Ward | None = None) -> Pool[_T]: ...
    def __class_getitem__(cls, key: Any) -> GenericAlias: ...
    def take(
        self, now: _Num | None = None, roll: _Num | None = None
    ) -> Ready[_T] | Stale[_T] | Make | Wait | Later | Shed:
        """Take one, be told to make one or to wait — or be handed one too old
        to use. ``roll`` is the draw the ward's breaker decides with."""
    def made(self, item: _T, now: _Num | None = None) -> None:
        """Register an item opened after ``take`` answered ``Make``: lent, born
        now. It fills the reserved room and tells the ward the backend is
        alive."""
    def unmade(self, now: _Num | None = None, roll: _Num | None = None) -> None:
        """Say the item ``take`` reserved room for could not be made: the room
        is free again and the ward counts a failure (``roll`` draws its hold).
        Without it a factory that failed once would shrink the pool for good."""
    def give(self, item: _T, now: _Num | None = None) -> bool:
        """Hand one back, keeping the birth it was lent with. ``False`` means
        the pool did not keep it — enough idle already, past its ``life``, or a
        stranger with no room — and you should close it. An item never
        registered by ``made`` fills the room ``take`` reserved and is born
        now."""
    def drop(self, item: object) -> None:
        """Say a lent item is not coming back because it broke; this keeps the
        live count honest (a broken item would otherwise hold a slot for
        ever)."""
    def evict(self, now: _Num | None = None) -> list[_T]:
        """Every idle item past ``keep`` or ``life``, out of the pool, for you
        to close. Call it on a timer; ``take`` checks ages too, so a late timer
        strands nothing."""
    def close(self) -> list[_T]:
        """Everything idle, emptied out for you to close: what a shutdown
        does. Lent items are the borrowers'; each comes back through
        ``give``."""
    def refusal(self, now: _Num | None = None) -> float:
        """The ward's breaker refusal at ``now``, in [0, 1); 0 without one.
        Reads, counts nothing."""
    @property
    def live(self) -> int:
        """How many exist: idle, lent, and being made."""
    @property
    def idle(self) -> int:
        """How many sit idle."""
    @property
    def busy(self) -> int:
        """How many are lent out or being made."""
    @property
    def limits(self) -> Limits:
        """The limits it holds itself to."""
    @property
    def ward(self) -> Ward | None:
        """A copy of its ward as it stands (with its failure count), or
        ``None``."""

def pick(
    pools: Iterable[Pool[Any]],
    now: _Num | None = None,
    first: _Num | None = None,
    second: _Num | None = None,
) -> int | None:
    """Which pool to ask, by two random choices (Mitzenmacher, "The Power of
    Two Choices"; what Finagle and Envoy do): the pools at ``floor(first·len)``
    and ``floor(second·len)`` are compared, lower ``refusal(now)`` wins, then
    lower ``busy``, then the first. ``None`` when there are no pools. Draws
    omitted come from the binding's RNG."""

# ------------------------------------------------------------------ Backoff

@final
class Jitter:
    """How much randomness goes into a delay (AWS, "Exponential Backoff and
    Jitter"). A retry with no jitter makes every client that failed together
    try again together, which is how one outage becomes a second one.

    - ``RIGID``: the ceiling, unchanged — reproducible; for a policy written
      elsewhere that specifies no jitter.
    - ``FULL``: uniform over [0, ceiling] — spreads clients furthest; what gRPC
      sleeps, and the default because AWS measured it best.
    - ``EQUAL``: ceiling/2 + uniform over [0, ceiling/2] — keeps a floor under
      the wait.
    - ``DECORRELATED``: uniform over [base, min(cap, 3·previous)] — grows from
      where it last landed rather than from the attempt number.
    """

    RIGID: Final[Jitter]
    FULL: Final[Jitter]
    EQUAL: Final[Jitter]
    DECORRELATED: Final[Jitter]
    @property
    def name(self) -> str:
        """The member's name, as ``enum.Enum`` spells it (``"FULL"``)."""
    @property
    def value(self) -> str:
        """The lowercase name Node uses (``"full"``); ``Backoff(jitter=...)``
        accepts it too."""
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def __int__(self) -> int: ...

@final
class Backoff:
    """When to try again, and how long to wait first.

    The defaults are gRPC's documented retry policy: three attempts, 0.1 s
    doubling (``factor=2.0``) to a 1 s ``cap``, full jitter (maxAttempts 3,
    initialBackoff 0.1 s, maxBackoff 1 s, backoffMultiplier 2; gRPC sleeps
    uniformly over [0, cap]). ``jitter`` is a ``Jitter`` or its name
    (``"full"``). A negative base or cap, a factor below 1 or NaN, negative
    attempts raise ``ValueError``.
    """

    def __new__(
        cls,
        base: _Span = 0.1,
        factor: _Num = 2.0,
        cap: _Span = 1.0,
        attempts: SupportsIndex = 3,
        jitter: Jitter | str = ...,
    ) -> Backoff: ...
    @property
    def base(self) -> float:
        """The first retry's ceiling, in seconds."""
    @property
    def factor(self) -> float:
        """What each ceiling is multiplied by."""
    @property
    def cap(self) -> float:
        """No delay is ever longer, in seconds."""
    @property
    def attempts(self) -> int:
        """How many attempts a call may make in all, the first included."""
    @property
    def jitter(self) -> Jitter:
        """The strategy."""
    def ceiling(self, retry: SupportsIndex) -> float:
        """The undelayed ceiling before the ``retry``-th retry (the first is
        1): ``min(base·factor^(retry−1), cap)``, 0 for ``retry < 1``. What a
        jitter-free client sleeps and what every strategy draws within."""
    def delay(
        self, retry: SupportsIndex, random: _Num | None = None, previous: _Span | None = None
    ) -> float:
        """Seconds to wait before the ``retry``-th retry. ``random`` is a draw
        in [0, 1) (clamped into it; omitted: the binding's RNG) — the same draw
        gives the same delay. ``previous`` is the last delay, which only
        ``DECORRELATED`` reads (omitted: none yet, taken as ``base``)."""
    def more(self, made: SupportsIndex) -> bool:
        """Whether a call that has made ``made`` attempts may make another:
        ``0 <= made < attempts``. Three attempts allow two retries."""
    def schedule(self, randoms: Iterable[_Num] | None = None) -> list[float]:
        """Every delay a run of retries would wait — ``attempts − 1`` of them,
        in seconds — for a test or a log line explaining a plan. ``randoms``
        are the draws in order; when they run short (or are omitted) the rest
        are 0, the low end of every strategy: the same plan on every call."""
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

# ------------------------------------------------------------------ limiters

@disjoint_base
class Bucket:
    """A token bucket: ``rate`` tokens accrue per second up to ``burst``, and
    each request takes some.

    The limiter that allows a burst after a quiet period, which is what a
    limit on a human-facing API wants: nobody should be refused for two
    requests in the same second after an hour of none. It starts full at
    ``at`` (seconds). ``burst`` omitted is the rate when the rate is above 1,
    else 1 (one second's worth); a burst below 1 would let nothing pass, so it
    is raised to 1. A rate or burst that is NaN, infinite or negative raises
    ``ValueError``.
    """

    def __new__(cls, rate: _Num, burst: _Num | None = None, at: _Span = 0.0) -> Bucket: ...
    def take(self, now: _Num | None = None, n: _Num = 1.0) -> bool:
        """Whether ``n`` tokens are available now, taking them if they are.
        Time that runs backwards adds nothing."""
    def next(self, now: _Num | None = None, n: _Num = 1.0) -> float:
        """Seconds until ``n`` tokens would be available, without taking them:
        0 when they are there now, ``math.inf`` when they never will be (more
        than the burst, or a zero rate). What to sleep rather than spin, and
        what a ``Retry-After`` is computed from."""
    def _wait(self, n: _Num | None = None) -> float | None:
        """One round of ``wait(n)``: ``None`` when taken, else seconds to sleep."""
    def tokens(self, now: _Num | None = None) -> float:
        """How many tokens are there now, for a caller that reports its
        headroom."""
    @property
    def rate(self) -> float:
        """Tokens per second."""
    @property
    def burst(self) -> float:
        """The most it holds."""

@disjoint_base
class Window:
    """A sliding window counter: at most ``allow`` events in any
    ``window``-long stretch (seconds), exactly.

    Where a bucket smooths, a window counts: "a thousand a day" is a window,
    not a rate — answered with a bucket, a client could spend the day's
    allowance in the first minute. The stamps inside the window are kept, so
    the count is exact rather than the two-bucket approximation most limiters
    give. A negative ``allow`` or a window that is not positive raises
    ``ValueError``.
    """

    def __new__(cls, allow: SupportsIndex, window: _Span) -> Window: ...
    def take(self, now: _Num | None = None) -> bool:
        """Whether an event is within the quota now, counting it if it is."""
    def left(self, now: _Num | None = None) -> int:
        """How many events remain in the window now."""
    def next(self, now: _Num | None = None) -> float:
        """Seconds until there is room: 0 when there is, else until the oldest
        event inside falls out (``math.inf`` when ``allow`` is 0)."""
    @property
    def allow(self) -> int:
        """The most events in any window."""
    @property
    def window(self) -> float:
        """The window's length, in seconds."""

@disjoint_base
class Gate:
    """A count with a ceiling: the concurrency limit a server puts on itself.

    It has nothing to do with time: it is how many things are happening at
    once. A server past its limit answers rather than queues, which keeps a
    queue from becoming the outage. A negative limit raises ``ValueError``.
    """

    def __new__(cls, limit: SupportsIndex) -> Gate: ...
    def enter(self) -> bool:
        """Whether there is room, taking it if there is."""
    def leave(self) -> None:
        """Give the room back. Leaving an empty gate does nothing, so a double
        leave cannot open room that was never taken."""
    @property
    def held(self) -> int:
        """How many are inside."""
    @property
    def limit(self) -> int:
        """The ceiling."""

# ------------------------------------------------------------------ shared limits

@final
class _Wire:
    """One connection's rules for one asyncio loop (``headway._wire``)."""
    @staticmethod
    def open(url: str) -> _Wire | None: ...
    def address(self) -> tuple[str, int, float]: ...
    def flush(self) -> tuple[bytes, bool] | None: ...
    def feed(self, data: bytes) -> int: ...
    def busy(self) -> bool: ...
    def lost(self, random: float) -> list[tuple[Any, Any]]: ...

@final
class SharedBucket:
    """A token bucket shared by every process (Python or Node) that names the
    same ``key`` on the Redis at ``url``: ``Bucket``'s rules, run in Redis on
    Redis's clock. ``rate`` and ``burst`` as ``Bucket`` takes them (the same
    defaults, the same ``ValueError``s). No I/O until the first call.
    """

    def __new__(cls, url: str, key: str, rate: _Num, burst: _Num | None = None) -> SharedBucket: ...
    def take(self, n: _Num = 1.0) -> bool:
        """Whether ``n`` tokens are there now, taking them if they are. Blocks
        on the round trip to Redis, without the GIL."""
    def atake(self, n: _Num = 1.0) -> Awaitable[bool]:
        """``take(n)`` as an awaitable."""
    def next(self, n: _Num = 1.0) -> float:
        """Seconds until ``n`` tokens would be there, without taking them: 0
        when they are, ``math.inf`` when they never will be."""
    def tokens(self) -> float:
        """How many tokens are there now."""
    def wait(self, n: _Num = 1.0) -> Awaitable[None]:
        """Takes ``n`` tokens, sleeping (without blocking the loop) until they
        are there. ``ValueError`` when they never come (more than the burst,
        or a zero rate)."""
    @property
    def rate(self) -> float:
        """Tokens per second."""
    @property
    def burst(self) -> float:
        """The most it holds."""
    @property
    def key(self) -> str:
        """The Redis key it lives under."""

@final
class SharedWindow:
    """A sliding window shared by every process (Python or Node) that names
    the same ``key`` on the Redis at ``url``: at most ``limit`` events in any
    ``per``-long stretch (seconds or a ``timedelta``), ``Window``'s rules run
    in Redis on Redis's clock (microseconds: ``per`` is rounded up to one). A
    negative ``limit`` or a ``per`` that is not positive raises
    ``ValueError``. No I/O until the first call.
    """

    def __new__(cls, url: str, key: str, limit: SupportsIndex, per: _Span) -> SharedWindow: ...
    def take(self) -> bool:
        """Whether an event is within the quota now, counting it if it is.
        Blocks on the round trip to Redis, without the GIL."""
    def atake(self) -> Awaitable[bool]:
        """``take()`` as an awaitable."""
    def left(self) -> int:
        """How many events remain in the window now."""
    def next(self) -> float:
        """Seconds until there is room: 0 when there is, ``math.inf`` when
        ``limit`` is 0."""
    def wait(self) -> Awaitable[None]:
        """Counts an event, sleeping (without blocking the loop) until there is
        room. ``ValueError`` when ``limit`` is 0."""
    @property
    def limit(self) -> int:
        """The most events in any window."""
    @property
    def per(self) -> float:
        """The window's length, in seconds."""
    @property
    def key(self) -> str:
        """The Redis key it lives under."""

@final
class SharedGate:
    """A concurrency gate shared by every process (Python or Node) that names
    the same ``key`` on the Redis at ``url``: at most ``n`` permits held at
    once, ``Gate``'s rules run in Redis. A permit is held for ``lease``
    seconds (or a ``timedelta``) unless renewed, so a holder that crashed
    gives its room back when the lease ends. A negative ``n`` or a ``lease``
    that is not positive raises ``ValueError``. No I/O until the first call.
    """

    def __new__(cls, url: str, key: str, n: SupportsIndex, lease: _Span = 30.0) -> SharedGate: ...
    def take(self) -> str | None:
        """A permit (a string, to ``release`` or ``renew``) when there is
        room, else ``None``. Blocks on the round trip to Redis, without the
        GIL."""
    def atake(self) -> Awaitable[str | None]:
        """``take()`` as an awaitable."""
    def release(self, permit: str) -> bool:
        """Gives the permit's room back: whether it was held. A permit
        released twice, or whose lease ran out, gives back nothing."""
    def arelease(self, permit: str) -> Awaitable[bool]:
        """``release(permit)`` as an awaitable."""
    def renew(self, permit: str) -> bool:
        """Starts the permit's lease again: whether it was still held (one
        whose lease ran out is not, and does not come back)."""
    def held(self) -> int:
        """How many permits are held now."""
    @property
    def limit(self) -> int:
        """The most permits held at once."""
    @property
    def lease(self) -> float:
        """How long a permit is held unless renewed, in seconds."""
    @property
    def key(self) -> str:
        """The Redis key it lives under."""

# ------------------------------------------------------------------ logs

def log_to(
    callback: Callable[[str, str, str, str | None, str | None, str | None, float], object],
) -> None:
    """Hands each core log record, in order on the core's ``headway-log``
    thread, to ``callback(level, logger, message, worker, task, id, ts)``
    (``headway._log`` installs it at import)."""

def log_level(level: str) -> str:
    """Sets the level of the core's records (``debug``, ``info``,
    ``warning``, ``error``, ``critical``); answers its ``logging`` name.
    ``ValueError`` names a level it does not know."""

def log_flush(timeout: float) -> bool:
    """Waits up to ``timeout`` seconds for the records made so far to be
    delivered; answers whether they were."""

def log_line(
    format: str,
    ts: float,
    level: str,
    logger: str,
    message: str,
    worker: str | None = None,
    task: str | None = None,
    id: str | None = None,
) -> str:
    """One log line in ``format`` (``text`` or ``json``), as the Node CLI
    writes it."""

def log_format(format: str) -> str:
    """``text`` or ``json``, checked (``ValueError`` otherwise)."""

def cli_parse(argv: list[str]) -> str:
    """The words after ``headway``, read by the core's parser (the Node
    CLI's too): ``{"kind": "help", "text": ...}`` or ``{"kind": "run",
    "command": ..., ...}`` as JSON; ``ValueError`` naming what was wrong,
    the usage after it."""

def banner(line: str, fields: str) -> str:
    """The line ``line`` prints (the Node CLI's text too) from its fields
    as a JSON object: ``worker_ready``, ``worker_stopped``, ``metrics``,
    ``beat_ready`` (``entries``: ``[name, epoch ms]`` pairs), ``beat_stopped``,
    ``admin_ready``, ``admin_stopped``, ``admin_token``; several lines are
    joined by ``\\n``. ``ValueError`` naming a bad name or field."""

# ------------------------------------------------------------------ hidden

def _panic() -> None:
    """Panics on purpose: the test that a panic becomes ``PanicError``."""

def _noop(a: object = None, b: object = None) -> None:
    """Does nothing: the benchmark's floor for one native call."""

def _reseed() -> None:
    """Reseeds the RNG (run in a forked child)."""

def _now() -> float:
    """The clock ``now`` defaults to, in seconds."""

def _eta_ms(eta: datetime) -> int:
    """A retry's ``eta`` as epoch ms (a naive ``datetime`` raises
    ``ValueError``)."""

def _process_pool(pool: str) -> bool:
    """Whether ``pool`` names the process pool (``process``, ``prefork``)."""

def _set_task_hook(hook: Callable[..., object] | None = None) -> None:
    """Installs the function ``headway.signals`` calls around each sync body
    (None removes it)."""

@final
class _Noop:
    """A method that does nothing: the benchmark's floor for a method call."""

    def __new__(cls) -> _Noop: ...
    def call(self, a: object = None, b: object = None) -> None:
        """Does nothing."""

# ------------------------------------------------------------------ task time

@final
class VirtualClock:
    """A clock that workers and beats *sleep on*: a sleep advances it instead
    of waiting, so a retry schedule or an hour of beats runs in milliseconds
    and prints the same every time.

    ``start`` is an aware ``datetime`` or epoch seconds (0: 1970-01-01 UTC).
    What it moves is what the queue schedules — etas, retry backoffs,
    expiry, beats. A body's ``timeout`` and ``get(timeout=...)`` stay real
    waits: no clock makes a stuck body finish sooner.
    """

    def __new__(cls, start: _Instant = 0.0) -> VirtualClock: ...
    def now(self) -> float:
        """Now, in epoch seconds (like ``time.time()``)."""
    def datetime(self) -> datetime:
        """Now, as an aware UTC ``datetime``."""
    def advance(self, seconds: _Span) -> None:
        """Moves it forward by ``seconds``; a negative step does nothing:
        time here never runs backwards."""
    def advance_to(self, when: _Instant) -> None:
        """Moves it to ``when`` if that is later."""

@final
class Every:
    """Once per ``interval`` (float seconds or ``timedelta``).

    Without ``anchor`` the slots count from when the entry is added, and the
    first fires one interval after that (Celery beat and APScheduler both
    wait: firing at once on every restart turns a crash loop into a job
    storm). With ``anchor`` (an instant) the slots are ``anchor + k·interval``,
    the same on every machine: ``Every(3600, anchor=0)`` is "on the hour".
    An interval under a millisecond raises ``ValueError``.
    """

    def __new__(cls, interval: _Span, anchor: _Instant | None = None) -> Every: ...
    @property
    def interval(self) -> float:
        """The interval, in seconds."""
    @property
    def anchor(self) -> datetime | None:
        """The anchor the slots count from, or ``None``."""
    def first(self, now: _Instant) -> datetime | None:
        """The first time it fires at or after ``now``; ``None`` if never."""
    def after(self, at: _Instant) -> datetime | None:
        """The first time it fires strictly after ``at`` — pass the time that
        was *due*, which is how a late tick keeps the phase."""
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Cron:
    """The minutes a 5-field crontab line names, read in the IANA time zone
    ``tz`` (``"Europe/London"``; UTC when not given).

    Fields: minute, hour, day of month, month, day of week, with ``*``,
    lists, ranges, steps and names (``MON-FRI``, ``JAN``); ``@hourly``,
    ``@daily``, ``@weekly``, ``@monthly``, ``@yearly``. Across a
    daylight-saving change (Vixie cron's rules, as the croner crate
    implements them): a fixed time that does not exist that day fires at the
    first instant after the gap, a fixed time that happens twice fires once,
    and a wildcard or step line keeps its real-time rhythm. A line that is
    not 5 fields, never fires, or an unknown zone raises ``ValueError``.
    """

    def __new__(cls, expr: str, tz: str | None = None) -> Cron: ...
    @property
    def expr(self) -> str:
        """The crontab line as given."""
    @property
    def tz(self) -> str:
        """The time zone's IANA name."""
    def first(self, now: _Instant) -> datetime | None:
        """The first time it fires at or after ``now``; ``None`` if never."""
    def after(self, at: _Instant) -> datetime | None:
        """The first time it fires strictly after ``at`` (pass the time that
        was due)."""
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class At:
    """Once, at ``when`` (an aware ``datetime`` or epoch seconds). A time
    already past still fires, once, at once: a one-off added a little late
    should still run."""

    def __new__(cls, when: _Instant) -> At: ...
    @property
    def when(self) -> datetime:
        """When it fires."""
    def first(self, now: _Instant) -> datetime | None:
        """``when``, whatever ``now`` is."""
    def after(self, at: _Instant) -> datetime | None:
        """Always ``None``: it fires once."""
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

# ------------------------------------------------------------------ task backoff

@final
class Fixed:
    """The same wait before every retry: ``delay`` seconds (or a
    ``timedelta``). A negative delay raises ``ValueError``."""

    def __new__(cls, delay: _Span) -> Fixed: ...
    @property
    def delay(self) -> float:
        """The wait, in seconds."""
    def wait_before(self, attempt: int, task_id: str) -> float:
        """Seconds waited before attempt ``attempt`` of run ``task_id`` (the
        first attempt is 1 and never waits)."""
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Exponential:
    """A wait doubling from ``base`` to ``cap`` seconds. With ``jitter`` it is
    spread over [0, ceiling] (full jitter, AWS's measured best), the draw
    derived from the task id and the attempt, so a task waits the same on
    every machine and in both languages, and a test can assert it.

    The defaults, 1 s doubling to 10 min, jittered, are moontask's preset
    (Celery's ``retry_backoff_max`` is also 600 s). Negative values raise
    ``ValueError``.
    """

    def __new__(
        cls, base: _Span | None = 1.0, cap: _Span | None = 600.0, jitter: bool = True
    ) -> Exponential: ...
    @property
    def base(self) -> float:
        """The first retry's ceiling, in seconds."""
    @property
    def cap(self) -> float:
        """No wait is longer, in seconds."""
    @property
    def jitter(self) -> bool:
        """Whether the wait is spread over [0, ceiling]."""
    def wait_before(self, attempt: int, task_id: str) -> float:
        """Seconds waited before attempt ``attempt`` of run ``task_id`` (the
        first attempt is 1 and never waits)."""
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

# ------------------------------------------------------------------ runs

@final
class Context:
    """What a task body is told about the run it is in.

    ``retries`` is how many attempts before this one failed, ``attempt`` is
    this one counting from 1, and ``last`` says whether a failure now is
    final — a body that must not repeat a side effect checks it before doing
    the work again. ``now`` is the app's time when the run started. Passed
    first to a ``bind=True`` body; ``headway.current()`` answers it anywhere
    inside a run.
    """

    @property
    def id(self) -> str:
        """The run's id (also its result's key; a retry keeps it)."""
    def retry(
        self,
        *,
        countdown: float | None = None,
        eta: datetime | float | None = None,
        max_retries: int | None = None,
        exc: BaseException | None = None,
    ) -> NoReturn:
        """Asks for this run to be retried on its own terms, as Celery's
        ``self.retry``: raises ``headway.TaskRetry`` (let it propagate)."""
    def update_state(self, state: str, meta: Any = None) -> None:
        """Records a custom state for this run while it runs (Celery's
        ``self.update_state``): ``state`` a name such as ``"PROGRESS"`` (not
        SUCCESS, FAILURE or REVOKED, not empty: ``ValueError``), ``meta``
        any JSON value (``TypeError`` otherwise). ``handle.state()`` then
        answers the name and ``handle.info()`` the meta, until the run's
        final state overwrites them. Blocks until stored (in a process-pool
        child: until sent to the worker, which stores it before the run
        ends); stores nothing on a direct call or when the app keeps no
        results."""
    @property
    def name(self) -> str:
        """The task's registered name."""
    @property
    def queue(self) -> str:
        """The queue the message came from."""
    @property
    def worker(self) -> str:
        """The name of the worker running it (empty outside a worker)."""
    @property
    def retries(self) -> int:
        """Attempts before this one that failed."""
    @property
    def attempt(self) -> int:
        """This attempt, counting from 1."""
    @property
    def last(self) -> bool:
        """Whether a failure now is final (no retry follows)."""
    @property
    def now(self) -> datetime:
        """The app's time when the run started, as an aware UTC ``datetime``."""
    @property
    def kwargs(self) -> dict[str, Any]:
        """The run's keyword arguments (a fresh dict)."""
    @property
    def root_id(self) -> str | None:
        """The first run of the canvas this run belongs to, if any."""
    @property
    def parent_id(self) -> str | None:
        """The run that sent this one (the previous link of a chain), if any."""
    @property
    def soft_time_limit(self) -> float | None:
        """The run's soft time limit in seconds (its task's, else its
        worker's), or None."""
    @property
    def time_limit(self) -> float | None:
        """The run's hard time limit in seconds, or None."""
    def _celery_request(self, default_queue: str) -> dict[str, Any]:
        """Celery's ``self.request`` fields for this run but ``args`` and
        ``kwargs``, the queue named as Celery names it (``default_queue`` for
        headway's ``default``)."""
    def _state_after(self, exc: BaseException | None = None) -> str:
        """``SUCCESS``, ``RETRY``, ``FAILURE``, ``REJECTED`` or ``IGNORED``:
        what the run comes to if its body returns (``exc`` None) or raises
        ``exc``."""
    def _trace(self) -> tuple[str, str, dict[str, str | int], dict[str, str]] | None:
        """The run's span ``(name, kind, attributes, carrier)`` when its app
        traces, else None."""
    def _trace_end(self, exc: BaseException | None, reason: str) -> tuple[dict[str, str | int], bool]:
        """What the run's span is told when the body is done:
        ``(attributes, error)``."""

def current() -> Context:
    """The ``Context`` of the run this code is inside — a sync body, an async
    body, or anything either calls. ``LookupError`` outside a run."""

@final
class DeadLetter:
    """One message set aside rather than run: bytes that are not a message
    headway runs (quarantine), or a message that lost three workers (a
    poison pill). Listed by ``App.dead_letters``."""

    @property
    def queue(self) -> str:
        """The queue it was claimed from."""
    @property
    def id(self) -> str | None:
        """Its task id, when it could be read."""
    @property
    def reason(self) -> str:
        """Why: ``"not JSON: …"``, ``"no task name"``, ``"worker lost ×3"``, …."""
    @property
    def at(self) -> datetime:
        """When it was set aside (aware UTC, the broker's clock)."""
    @property
    def raw(self) -> bytes:
        """Its bytes as they were on the queue, or their first 64 KiB when it
        was quarantined (``size`` says how many there were)."""
    @property
    def size(self) -> int:
        """How many bytes it was on the queue (more than ``len(raw)`` when
        only a prefix was kept)."""

@final
class Handle(Generic[_R_co]):
    """A run, or a set of runs (a group), to wait on, look at or revoke.

    ``get(timeout=None)`` blocks (Ctrl-C still works) and answers the value,
    a group's list of values in order, or raises why it will not come:
    ``TaskFailed``, ``Revoked``, ``Timeout`` (the wait ran out; ``timeout``
    is real seconds), ``Missing``. ``await handle`` is the same without
    blocking a thread. ``state()`` answers Celery's state names.
    """

    @property
    def id(self) -> str:
        """The run's id (a group's first part)."""
    @property
    def ids(self) -> list[str]:
        """Every id it waits on, in order."""
    def get(self, timeout: _Span | None = None) -> _R_co:
        """Waits for the value (a group: the list, in order). ``timeout`` is
        real seconds; ``None`` waits for ever."""
    def state(self) -> str:
        """What the run is doing now, without waiting: ``"PENDING"``,
        ``"RECEIVED"``, ``"STARTED"``, ``"RETRY"``, ``"SUCCESS"``,
        ``"FAILURE"``, ``"REVOKED"``, or a custom state its body recorded
        with ``ctx.update_state`` (e.g. ``"PROGRESS"``). A group: FAILURE
        once any part failed, REVOKED once any was revoked, SUCCESS once all
        succeeded, else the first unsettled part's state."""
    def info(self) -> Any:
        """What the run says about itself now, without waiting (Celery's
        ``AsyncResult.info``): the value once it succeeded, the meta of a
        custom state its body recorded, the error as a dict (``kind``,
        ``message``, ``traceback``, ``module``) for a failure, a retry or a
        revoke, and None while nothing is stored. A group: the list of its
        parts', in order."""
    def date_done(self) -> datetime | None:
        """When it reached its final state (an aware UTC ``datetime``;
        Celery's ``date_done``), None before or when nothing is stored."""
    def children(self) -> list[Handle[Any]]:
        """The runs its success sent on — its ``link`` callbacks, its
        chain's next link — as handles (Celery's ``children``); empty
        before."""
    @property
    def parent(self) -> Handle[Any] | None:
        """The previous link, when it is a chain's link sent here (Celery's
        ``parent``), else None."""
    def forget(self) -> None:
        """Removes what is stored of it (Celery's ``forget()``): it then
        reads as PENDING."""
    def revoke(self, terminate: bool = False, signal: str | int = "SIGTERM") -> None:
        """Revokes it: it will not start anywhere the broker reaches. With
        ``terminate``, a run in progress stops — in whichever process on the
        broker runs it — and is recorded REVOKED (an async body is
        cancelled; a sync body's late result is discarded). ``signal`` is
        the signal a terminate carries: a name (``"SIGKILL"``, ``"kill"``)
        or a number 1 to 64; a bad one raises ``ValueError``."""
    def ready(self) -> bool:
        """Whether it has settled for good (SUCCESS, FAILURE or REVOKED)."""
    def successful(self) -> bool:
        """Whether it succeeded."""
    def failed(self) -> bool:
        """Whether it failed for good."""
    def __await__(self) -> Generator[Any, None, _R_co]: ...
    def __class_getitem__(cls, key: Any) -> GenericAlias: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

# ------------------------------------------------------------------ brokers

@final
class RedisBroker:
    """A broker, result store and chord counter on Redis.

    ``RedisBroker(url, consumer=None, prefix="headway:", lease=30.0)`` is
    headway's own layout: per-consumer held lists kept alive by a lease —
    30 s, BullMQ's lock duration — so what a worker that died was holding
    comes back by ``recover()`` (run by every live broker once per lease, and
    callable). ``consumer`` names this process's claims (default: host, pid
    and a random suffix; unique among live processes).
    ``RedisBroker.celery(url, consumer=None, visibility_timeout=3600.0)``
    speaks Celery's layout and message format, so one queue is shared with
    Celery workers and producers; the visibility timeout is kombu's default.

    It connects on first use, with the clock of the ``App`` it is given to.
    """

    def __new__(
        cls, url: str, consumer: str | None = None, prefix: str = "headway:", lease: _Span | None = 30.0
    ) -> RedisBroker: ...
    @staticmethod
    def celery(
        url: str,
        consumer: str | None = None,
        visibility_timeout: _Span | None = 3600.0,
        *,
        task_send_sent_event: bool = False,
        master_name: str | None = None,
        result_expires: _Span | None = None,
    ) -> RedisBroker:
        """Celery's Redis layout and message format on ``url``;
        ``task_send_sent_event``: a ``task-sent`` event for each message
        sent (Celery's setting); ``master_name``: with Celery's Sentinel URL
        (``sentinel://h1:26379;sentinel://h2:26379``), the master the
        sentinels watch; ``result_expires`` (seconds): how long results
        live — Celery's 1 day when None, for ever when 0."""
    @property
    def url(self) -> str:
        """The URL, password redacted."""
    @property
    def layout(self) -> Literal["headway", "celery"]:
        """Which layout it speaks."""
    def recover(self) -> int:
        """Hands back what consumers whose lease (or visibility timeout) ran
        out were holding; answers how many messages went back."""
    def close(self) -> None:
        """Lets go of this consumer's claims so another consumer takes them
        now rather than after the lease: call it after the worker stopped."""

# ------------------------------------------------------------------ internals

_CURRENT: ContextVar[Context | None]

def _celery_request_direct() -> dict[str, Any]:
    """Celery's ``self.request`` outside a run, as the core words it."""

def _direct_context(id: str, name: str, queue: str, now: float) -> Context:
    """A ``Context`` for a direct call of a ``bind=True`` task."""

def _celery_broker(url: str, backend: str | None = None) -> Literal["memory", "redis", "amqp"]:
    """The broker a Celery app's ``broker_url`` names, its ``result_backend`` checked beside it."""

def _celery_route(name: str, own: str | None, routes: Any, default_queue: str) -> str:
    """The queue Celery sends task ``name`` to: ``own``, else ``task_routes``, else the default."""

def _celery_rate(v: Any) -> str | None:
    """Celery's ``rate_limit`` as headway's rate text."""

def _celery_send_options(options: dict[str, Any]) -> dict[str, Any]:
    """Celery's ``apply_async`` options as headway's send options."""

def _celery_task_options(names: list[str]) -> None:
    """Refuses the ``@app.task`` options ``headway.celery`` does not have."""

def _celery_autoretry(task: str, options: dict[str, Any]) -> tuple[int, Fixed | Exponential]:
    """A ``headway.celery`` task's ``autoretry_for`` (its ``retry_*`` options,
    ``max_retries`` and ``default_retry_delay``) as headway's retry budget and
    backoff."""

_CELERY_DEFAULTS: dict[str, Any]
_CELERY_FOREVER: int
"""Celery's ``max_retries=None`` as headway's budget: never reached."""

def _json_roundtrip(obj: object) -> Any:
    """``obj`` through the conversion task arguments take."""

@final
class _Flag:
    """A stop flag shared by one worker's threads."""

    def __new__(cls) -> _Flag: ...
    def set(self) -> None:
        """Asks the threads serving with it to stop."""
    def is_set(self) -> bool:
        """Whether it was set."""

@final
class _Host:
    """The queues and registry of an app or a scheduler."""

    def __new__(cls) -> _Host: ...
    def has_sync(self) -> bool:
        """Whether any sync body is registered."""
    def serve(self, flag: _Flag) -> None:
        """Serves sync calls on this thread until ``flag`` is set (or, back
        from a call the core abandoned, until the core says it is one too
        many)."""
    def staff(self, n: int) -> None:
        """Counts ``n`` runner threads about to call ``serve``."""
    def unstaff(self, n: int) -> None:
        """No longer asks for ``n`` runners (the worker stopped)."""
    def hire(self, flag: _Flag) -> int:
        """How many replacement runners to start now (waits up to a slice)."""
    def leave(self) -> None:
        """A runner counted by ``staff`` or ``hire`` that never served."""
    def soften(self, flag: _Flag, exc: type[BaseException]) -> None:
        """Raises ``exc`` in each sync body past its soft time limit, until
        ``flag`` is set."""
    def as_child(self, sig: int) -> None:
        """Sets up a process-pool child: raise ``sig`` with each soft limit
        (it wakes the main thread out of a blocking call)."""
    def runners(self) -> dict[str, Any]:
        """The sync runners' health: ``healthy``, ``why``, ``runners``,
        ``threads``, ``stuck``, ``stuck_cap``."""
    def pump(
        self,
        flag: _Flag,
        deliver: Callable[[list[tuple[int, str, Any, tuple[Any, ...], dict[str, Any] | None, Context]]], object],
        cancel: Callable[[list[int]], object],
    ) -> None:
        """Serves async calls until ``flag`` is set."""
    def finish(self, seq: int, name: str, value: object) -> None:
        """Answers async call ``seq`` with its return value."""
    def fail(self, seq: int, exc: BaseException) -> None:
        """Answers async call ``seq`` with the exception its body raised."""
    def cancelled(self, seq: int) -> None:
        """Answers async call ``seq`` as cancelled."""

@final
class _Worker:
    """The core's worker."""

    def run(self, grace: _Span) -> None:
        """Runs until stopped, blocking this thread."""
    def run_future(self) -> Awaitable[None]:
        """An awaitable that runs it until stopped."""
    def stop(self, grace: _Span) -> None:
        """Stops it; returns at once."""
    @property
    def name(self) -> str: ...
    @property
    def queues(self) -> list[str]: ...
    @property
    def concurrency(self) -> int: ...
    @property
    def prefetch(self) -> int: ...
    @property
    def settled(self) -> int: ...
    @property
    def stopping(self) -> bool: ...
    @property
    def pool(self) -> str: ...
    @property
    def child_pids(self) -> list[int]: ...

@final
class _Beat:
    """The core's beat."""

    def add(
        self,
        name: str,
        task: str,
        args: Sequence[Any],
        kwargs: Mapping[str, Any] | None,
        schedule: _Rhythm,
        options: Mapping[str, Any] | None = None,
    ) -> None: ...
    def remove(self, name: str) -> bool: ...
    def pending(self) -> list[tuple[str, datetime]]: ...
    def tick(self) -> list[tuple[str, datetime, Handle[Any]]]: ...
    def run(self, until: _Instant | None = None) -> None: ...
    def stop(self) -> None: ...

@final
class _App:
    """The core's app."""

    def __new__(
        cls,
        broker: str | RedisBroker | None,
        backend: str | RedisBroker | bool | None = None,
        clock: VirtualClock | None = None,
    ) -> _App: ...
    @property
    def host(self) -> _Host: ...
    def now(self) -> float: ...
    def register(
        self,
        name: str,
        func: Callable[..., Any],
        *,
        bind: bool = False,
        is_async: bool = False,
        queue: str | None = None,
        retries: int | None = None,
        backoff: Fixed | Exponential | None = None,
        timeout: _Span | None = None,
        acks_late: bool | None = None,
        ignore_result: bool | None = None,
        rate: str | Mapping[str, float] | None = None,
        time_limit: _Span | None = None,
        soft_time_limit: _Span | None = None,
        reject_on_worker_lost: bool | None = None,
        retry_for: type[BaseException] | tuple[type[BaseException], ...] | None = None,
        dont_retry_for: type[BaseException] | tuple[type[BaseException], ...] | None = None,
        rate_scope: str | None = None,
        concurrency_limit: int | None = None,
    ) -> str: ...
    def send(
        self,
        name: str,
        args: Sequence[Any],
        kwargs: Mapping[str, Any] | None = None,
        options: Mapping[str, Any] | None = None,
        *,
        known: bool = True,
        trace: dict[str, str] | None = None,
    ) -> Handle[Any]: ...
    def send_span(
        self, name: str, queue: str | None = None, task_id: str | None = None
    ) -> tuple[str, str, dict[str, str | int], str]: ...
    def set_tracing(self, on: bool) -> None: ...
    @property
    def tracing(self) -> bool: ...
    def send_canvas(self, tree: tuple[Any, ...]) -> Handle[Any]: ...
    def handle(self, id: str) -> Handle[Any]: ...
    def task_names(self) -> list[str]: ...
    def serve_metrics(self, host: str, port: int) -> int: ...
    def enable_task_events(self) -> None: ...
    def remote(self, command: str) -> tuple[int, str, str]: ...
    def worker(
        self,
        queues: list[str] | None = None,
        concurrency: int | None = None,
        prefetch: int | None = None,
        name: str | None = None,
        *,
        pool: str | None = None,
        child: tuple[str, list[str], list[tuple[str, str]]] | None = None,
        max_tasks_per_child: int | None = None,
        max_memory_per_child: int | None = None,
        time_limit: _Span | None = None,
        soft_time_limit: _Span | None = None,
        prefetch_multiplier: int | None = None,
    ) -> _Worker: ...
    def serve_child(self) -> None: ...
    def beat(self) -> _Beat: ...
    def revoke(self, ids: list[str], terminate: bool = False, signal: str | int = "SIGTERM") -> None: ...
    def dead_letters(self, queue: str, limit: int | None = None) -> list[DeadLetter]: ...
    def dead_count(self, queue: str) -> int: ...
    def requeue_dead(self, queue: str, limit: int | None = None, ids: list[str] | None = None) -> int: ...
    def purge_dead(self, queue: str) -> int: ...
    def _push_raw(self, queue: str, data: bytes) -> None: ...

@final
class _Scheduler:
    """The core's in-process scheduler."""

    def __new__(cls, clock: VirtualClock | None = None) -> _Scheduler: ...
    @property
    def host(self) -> _Host: ...
    def add(self, name: str, func: Callable[[], Any], is_async: bool, rhythm: _Rhythm) -> None: ...
    def remove(self, name: str) -> bool: ...
    def pending(self) -> list[tuple[str, datetime]]: ...
    def tick(self) -> list[tuple[str, datetime]]: ...
    def run(self, until: _Instant | None = None) -> None: ...
    def stop(self) -> None: ...
    def stats(self, name: str) -> dict[str, Any] | None: ...

@final
class _Admin:
    """The core's admin over one app. Internal: ``headway.admin.asgi`` wraps it."""

    def __new__(
        cls,
        app: _App,
        token: str | None = None,
        read_only: bool = False,
        max_body: int | None = None,
        allowed_origins: list[str] | None = None,
    ) -> _Admin: ...
    @property
    def token(self) -> str: ...
    @property
    def token_generated(self) -> bool: ...
    @property
    def read_only(self) -> bool: ...
    @property
    def max_body(self) -> int: ...
    def declares_over(self, headers: list[tuple[str, str]]) -> bool:
        """Whether ``headers`` declare a body past ``max_body`` (the core's
        Content-Length rule): refused (413) whatever comes, so none is read."""
    def handle(
        self,
        method: str,
        path: str,
        headers: list[tuple[str, str]],
        body: bytes,
        mount: str = "",
        tls: bool = False,
        peer: str | None = None,
    ) -> Awaitable[tuple[int, list[tuple[str, str]], bytes, _AdminStream | None]]: ...

@final
class _AdminStream:
    """The frames of the admin's live stream. Internal."""

    def next(self) -> Awaitable[bytes | None]: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
