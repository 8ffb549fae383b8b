"""The threads that run Python bodies for a worker or a scheduler.

The core hands calls to Python through its ``HostQueue`` (one mechanism for
both bindings). This module owns the Python side of it:

- ``sync_threads`` runner threads call the native ``serve``: each blocks with
  the GIL released until a call comes, then runs calls attached for as long
  as they keep coming (one GIL crossing per busy stretch);
- one pump thread calls the native ``pump``: it takes async calls in batches
  and hands each batch to an asyncio loop with one ``call_soon_threadsafe``.
  The loop is the caller's under ``await worker.run_async()``, else a
  dedicated loop thread started on the first async call. Calls the core
  withdrew (a timeout, a terminate, a stop past its grace) come back as
  ``cancel(seqs)``, and their tasks are cancelled.

- one soft-limit thread calls the native ``soften``: it raises
  ``SoftTimeLimitExceeded`` in each sync body the core reports past its soft
  time limit.

- one hiring thread calls the native ``hire``: a sync body the core stopped
  waiting for (past its timeout, terminated) keeps its thread until it
  returns, so the core's ledger asks for a replacement runner — up to one
  stuck thread per runner; past that the worker stops claiming and reports
  itself unhealthy — and this thread starts what it asks for. A runner back
  from such a body ends when the core says it is one too many.

Threads are daemons: a stuck sync body cannot keep the process alive, and
``atexit`` stops what is still running before the interpreter goes away.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import sys
import threading
import time
from collections.abc import Coroutine
from typing import Any

from . import _native, _tracing
from . import signals as _signals
from ._errors import _raised_soft

#: How long ``close`` waits for its threads in all: the native loops look at
#: their stop flag every 100 ms, so idle threads are gone in three slices; a
#: thread still inside a body is abandoned (a daemon), not killed.
_JOIN = 0.3

_Call = tuple[int, str, Any, tuple[Any, ...], "dict[str, Any] | None", _native.Context]


def _own(args: tuple[Any, ...], ctx: _native.Context) -> tuple[Any, ...]:
    """A run's own arguments: without the context a bound body takes first."""
    return args[1:] if args and args[0] is ctx else args


# What ``headway.signals`` is told of a call: its own args and kwargs.
_Hooked = tuple[tuple[Any, ...], "dict[str, Any] | None"]


def _daemon(target: Any, name: str, *args: Any) -> threading.Thread:
    """A daemon thread calling ``target(*args)``, not started."""
    return threading.Thread(target=target, args=args, name=name, daemon=True)


async def _awaiting(aw: Any) -> Any:
    return await aw


#: Python 3.12+ can run a task's first step at once, the task already
#: current (``eager_start``): a body that never awaits then costs no loop
#: round trip. Earlier, every body gets a plain task — running a first step
#: outside any task would break ``asyncio.current_task()`` and
#: ``asyncio.timeout()`` (and the libraries built on them) inside it.
_EAGER = sys.version_info >= (3, 12)


class Serving:
    """One worker's (or scheduler's) runner threads, pump and loop."""

    def __init__(
        self,
        host: _native._Host,
        *,
        name: str,
        sync_threads: int,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self._host = host
        self._name = name
        self._flag = _native._Flag()
        self._loop = loop
        self._own_loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._tasks: dict[int, asyncio.Future[Any]] = {}
        self._staffed = sync_threads
        self._hired = 0
        host.staff(sync_threads)
        flag = self._flag
        self._threads = [_daemon(host.serve, f"{name}-sync-{i}", flag) for i in range(sync_threads)]
        self._threads += [
            _daemon(self._hire, f"{name}-hire"),
            _daemon(host.soften, f"{name}-soft", flag, _raised_soft()),
            _daemon(host.pump, f"{name}-async", flag, self._deliver, self._cancel),
        ]
        for t in self._threads:
            t.start()

    # -- replacing stuck runners ----------------------------------------

    def _hire(self) -> None:
        """Hiring thread: starts the runners the core asks for."""
        host, flag = self._host, self._flag
        while not flag.is_set():
            for _ in range(host.hire(flag)):
                with self._lock:
                    self._hired += 1
                    t = _daemon(host.serve, f"{self._name}-sync-r{self._hired}", flag)
                    self._threads.append(t)
                try:
                    t.start()
                except RuntimeError:  # no thread to be had: counted back
                    host.leave()

    # -- the loop ------------------------------------------------------

    def _the_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is not None:
            return self._loop
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                t = _daemon(loop.run_forever, f"{self._name}-loop")
                t.start()
                self._own_loop = loop
                self._loop_thread = t
                self._loop = loop
            return self._loop

    def _deliver(self, batch: list[_Call]) -> None:
        """Pump thread: hands a batch of async calls to the loop."""
        try:
            self._the_loop().call_soon_threadsafe(self._dispatch, batch)
        except RuntimeError:
            # The loop is closed (the caller's loop ended under run_async):
            # the calls fail rather than wait for ever.
            for seq, *_ in batch:
                self._host.cancelled(seq)

    def _cancel(self, seqs: list[int]) -> None:
        """Pump thread: the core withdrew these calls."""
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._cancel_on_loop, seqs)
        except RuntimeError:
            pass

    def _cancel_on_loop(self, seqs: list[int]) -> None:
        for s in seqs:
            t = self._tasks.get(s)
            if t is not None:
                t.cancel()

    def _dispatch(self, batch: list[_Call]) -> None:
        """Loop thread: starts a task per call, answered when it is done."""
        loop = asyncio.get_running_loop()
        current = _native._CURRENT
        hook = _signals.active
        tracing = _tracing.enabled
        for seq, name, fn, args, kwargs, ctx in batch:
            traced = None
            hooked = None if hook is None else (_own(args, ctx), kwargs)
            token = current.set(ctx)
            try:
                if hook is not None and hooked is not None:
                    hook("pre", name, *hooked, None, True)
                # The run's span is current in the task's copy of the
                # context, and no longer in the loop's once it is copied.
                traced = _tracing.begin(ctx) if tracing else None
                try:
                    aw = fn(*args, **kwargs) if kwargs else fn(*args)
                except BaseException as e:  # noqa: BLE001 - a body's failure, whatever it is
                    self._settle(seq, name, e, False, hooked, traced)
                    continue
                if not inspect.iscoroutine(aw):
                    if not inspect.isawaitable(aw):
                        self._settle(seq, name, aw, True, hooked, traced)
                        continue
                    aw = _awaiting(aw)
                c = contextvars.copy_context()
            finally:
                if traced is not None:
                    _tracing.detach(traced)
                current.reset(token)
            run = self._run(seq, name, aw, hooked, traced)
            if _EAGER:
                task: asyncio.Future[Any] = asyncio.Task(  # type: ignore[call-arg,unused-ignore]
                    run, loop=loop, context=c, eager_start=True
                )
                if task.done():
                    continue
            else:
                task = loop.create_task(run, context=c)
            self._tasks[seq] = task

    async def _run(
        self,
        seq: int,
        name: str,
        aw: Coroutine[Any, Any, Any],
        hooked: _Hooked | None = None,
        traced: Any = None,
    ) -> None:
        """A call's task: the body, answered from inside the task (no done
        callback, so no extra turn of the loop per call). ``hooked`` (the
        run's own args and kwargs): ``headway.signals`` is told
        what the body came to; ``traced``: the run's span, ended here."""
        try:
            value = await aw
        except asyncio.CancelledError as e:
            _tracing.end(traced, e, False)
            self._host.cancelled(seq)
            raise
        except BaseException as e:  # noqa: BLE001 - a body's failure, whatever it is
            self._settle(seq, name, e, False, hooked, traced)
            return
        finally:
            self._tasks.pop(seq, None)
        self._settle(seq, name, value, True, hooked, traced)

    def _settle(
        self, seq: int, name: str, out: Any, ok: bool, hooked: _Hooked | None, traced: Any
    ) -> None:
        """Answers a call with what its body came to — a value when ``ok``,
        else the exception ``out`` — told first to ``headway.signals`` (when
        ``hooked``) and to the run's span (``traced``)."""
        hook = _signals.active
        if hooked is not None and hook is not None:
            # The same call the native host makes after a sync body.
            hook("post", name, *hooked, out, ok)
        _tracing.end(traced, out, ok)
        if ok:
            self._host.finish(seq, name, out)
        else:
            self._host.fail(seq, out)

    # -- stopping ------------------------------------------------------

    def close(self) -> None:
        """Stops the threads (after the core stopped sending calls)."""
        self._flag.set()
        self._host.unstaff(self._staffed)
        me = threading.current_thread()
        deadline = time.monotonic() + _JOIN
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            if t is not me:
                t.join(max(0.0, deadline - time.monotonic()))
        loop, thread = self._own_loop, self._loop_thread
        if loop is not None and thread is not None and thread is not me:

            def shut() -> None:
                for t in list(self._tasks.values()):
                    t.cancel()
                loop.call_soon(loop.stop)

            try:
                loop.call_soon_threadsafe(shut)
            except RuntimeError:
                return
            thread.join(max(_JOIN, deadline - time.monotonic()))
            if not thread.is_alive():
                try:
                    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
                    if pending:
                        loop.run_until_complete(
                            asyncio.gather(*pending, return_exceptions=True)
                        )
                    loop.close()
                except Exception as e:  # pragma: no cover - best effort at shutdown
                    print(f"headway: closing the worker's event loop: {e!r}", file=sys.stderr)
