"""The ``headway`` command line.

    headway worker -A module:app [-c 4] [-Q a,b]   run a worker
        [--pool process] [--max-tasks-per-child K] [--max-memory-per-child KIB]
        [--time-limit S] [--soft-time-limit S]
        [--metrics-port P [--metrics-host H]] [-E/--task-events]
        [-l/--loglevel warning] [--log-format text|json]
    headway beat -A module:app                     run the app's beat
    headway admin -A module:app [--port 5555]      serve the admin (uvicorn)
    headway inspect WHAT -A module:app             ask every worker process:
        [--json] [--timeout S] [-d NODE,...]       ping, active, reserved,
                                                   scheduled, stats, registered,
                                                   active-queues
    headway control WHAT [ARGS] -A module:app      change them: shutdown,
        [--json] [--timeout S] [-d NODE,...]       rate-limit TASK RATE,
                                                   time-limit TASK SOFT [HARD],
                                                   pool-grow [N], pool-shrink [N],
                                                   add-consumer Q,
                                                   cancel-consumer Q, heartbeat
    headway demo                                   a worker, a retry, a chain,
                                                   a chord and a beat, on the
                                                   memory broker and a virtual
                                                   clock

``-A module:app`` imports ``module`` (the current directory is on the path,
as for Celery's ``-A``) and takes its ``app`` attribute (``module`` alone
means ``module:app``): a ``headway.App``, or a real ``celery.Celery``, whose
tasks a worker then serves on its broker (``_from_celery``). SIGTERM and Ctrl-C stop a worker gracefully: no more
claims, runs in progress get the grace, what it held is given back.

Every command takes ``-l/--loglevel`` (Celery's names: debug, info, warning,
error, critical; default warning) and ``--log-format`` (``text``:
``[<UTC time> <LEVEL> <logger>] <message>``; ``json``: one object a line with
``ts``, ``level``, ``logger``, ``message``, ``worker``, ``task_name``,
``task_id``), the same lines as the Node CLI's; they go to stderr.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
from types import FrameType

from . import _log, _native
from ._from_celery import is_celery_app, serve
from .celery.app import Celery as DropIn
from ._tasks import GRACE, App


def _load(spec: str) -> App:
    module, _, attr = spec.partition(":")
    if not module:
        raise SystemExit(f"headway: -A {spec!r}: expected module:app")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        m = importlib.import_module(module)
    except ImportError as e:
        raise SystemExit(f"headway: -A {spec!r}: cannot import {module!r}: {e}") from e
    obj = getattr(m, attr or "app", None)
    if is_celery_app(obj):
        # A real Celery app: its tasks, served on its broker (_from_celery).
        try:
            obj = serve(obj)
        except ValueError as e:
            raise SystemExit(f"headway: -A {spec!r}: {e}") from e
    elif isinstance(obj, DropIn):
        # `headway.celery.Celery`: the headway App behind it, on its queues.
        try:
            obj = obj._served()
        except ValueError as e:
            raise SystemExit(f"headway: -A {spec!r}: {e}") from e
    if not isinstance(obj, App):
        raise SystemExit(
            f"headway: -A {spec!r}: {module}.{attr or 'app'} is not a headway.App "
            f"(got {type(obj).__name__})"
        )
    # Where a process-pool child imports it from.
    obj._origin = f"{module}:{attr or 'app'}"
    return obj


def _logging(level: str, fmt: str) -> None:
    try:
        fmt = _native.log_format(fmt)
        _log.set_level(level)
    except ValueError as e:
        raise SystemExit(f"headway: {e}") from e
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_log.JsonFormatter() if fmt == "json" else _log.TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.getLogger("headway").level)


def _term(signum: int, frame: FrameType | None) -> None:
    # SIGTERM is a warm shutdown, as Ctrl-C is: raised where the process is,
    # so a signal that lands before run() starts is not lost.
    raise KeyboardInterrupt


def _worker(ns: argparse.Namespace) -> int:
    app = _load(ns.app)
    queues = [q for q in (ns.queues or "").split(",") if q] or app._queues
    given = {"prefetch_multiplier": ns.prefetch_multiplier}
    extra = {**app._worker_defaults, **{k: v for k, v in given.items() if v is not None}}
    w = app.worker(
        **extra,
        queues=queues,
        concurrency=ns.concurrency,
        prefetch=ns.prefetch,
        pool=ns.pool,
        max_tasks_per_child=ns.max_tasks_per_child,
        max_memory_per_child=ns.max_memory_per_child,
        time_limit=ns.time_limit,
        soft_time_limit=ns.soft_time_limit,
    )
    if ns.task_events:
        try:
            app._native.enable_task_events()
        except ValueError as e:
            raise SystemExit(f"headway: {e}") from e
    if ns.metrics_port is not None:
        try:
            port = app._native.serve_metrics(ns.metrics_host, ns.metrics_port)
        except ValueError as e:
            raise SystemExit(f"headway: {e}") from e
        print(f"metrics: http://{ns.metrics_host}:{port}/metrics", flush=True)
    try:
        signal.signal(signal.SIGTERM, _term)
        print(
            f"headway worker {w.name}: app {ns.app}, queues {','.join(w.queues)}, "
            f"concurrency {w.concurrency}, prefetch {w.prefetch}, pool {w.pool}",
            flush=True,
        )
        print(f"tasks: {', '.join(app.task_names()) or '(none)'}", flush=True)
        print("ready", flush=True)
        w.run(grace=ns.grace)
    except KeyboardInterrupt:
        pass
    print(f"headway worker {w.name}: stopped after settling {w.settled}", flush=True)
    return 0


def _beat(ns: argparse.Namespace) -> int:
    app = _load(ns.app)
    beat = app.beat()
    try:
        signal.signal(signal.SIGTERM, _term)
        pending = beat.pending()
        print(f"headway beat: app {ns.app}, {len(pending)} entries", flush=True)
        for name, when in pending:
            print(f"  {name}: next at {when.isoformat()}", flush=True)
        print("ready", flush=True)
        beat.run()
    except KeyboardInterrupt:
        pass
    print("headway beat: stopped", flush=True)
    return 0


def _admin(ns: argparse.Namespace) -> int:
    from .admin import serve

    app = _load(ns.app)
    worker = None
    if ns.worker:
        # A worker in this process: what a memory-broker app needs to show
        # anything moving (a Redis app's workers may run anywhere).
        worker = app.worker(concurrency=ns.worker)
        worker.start()
    try:
        signal.signal(signal.SIGTERM, _term)
        serve(app, host=ns.host, port=ns.port, token=ns.token, read_only=ns.read_only)
    except KeyboardInterrupt:
        pass
    finally:
        if worker is not None:
            worker.stop(ns.grace)
    print("headway admin: stopped", flush=True)
    return 0


def _remote(ns: argparse.Namespace) -> int:
    # Celery's `inspect` / `control`: the words, the sending, the gathering
    # and the text are the core's (the Node CLI prints the same).
    app = _load(ns.app)
    dest = [d for d in (ns.destination or "").split(",") if d] or None
    try:
        code, out, err = app._native.remote(
            ns.command, ns.what, ns.words, ns.timeout, dest, ns.json
        )
    except ValueError as e:
        raise SystemExit(f"headway: {e}") from e
    sys.stdout.write(out)
    sys.stderr.write(err)
    sys.stdout.flush()
    return code


def _demo(ns: argparse.Namespace) -> int:
    from ._demo import demo

    demo()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs the CLI; answers the exit status."""
    p = argparse.ArgumentParser(prog="headway", description="headway's task queue")
    sub = p.add_subparsers(dest="command", required=True)

    w = sub.add_parser("worker", help="run a worker")
    w.add_argument("-A", "--app", required=True, help="module:app")
    w.add_argument("-c", "--concurrency", type=int, default=4, help="bodies at once (4)")
    w.add_argument("-Q", "--queues", default=None, help="queues, comma-separated (default)")
    w.add_argument("--prefetch", type=int, default=None, help="unsettled at most (concurrency×4; ×8 on the process pool)")
    w.add_argument("--prefetch-multiplier", type=int, default=None, help="unsettled at most concurrency × this, when --prefetch is not given (Celery's worker_prefetch_multiplier)")
    w.add_argument(
        "--grace", type=float, default=GRACE, help=f"seconds runs get at a stop ({GRACE:g})"
    )
    w.add_argument(
        "-P",
        "--pool",
        default="threads",
        help="threads (default) or process (prefork: Celery's name for it)",
    )
    w.add_argument(
        "--max-tasks-per-child", type=int, default=None, help="runs before a child is replaced"
    )
    w.add_argument(
        "--max-memory-per-child",
        type=int,
        default=None,
        metavar="KIB",
        help="resident KiB past which a child is replaced after its run",
    )
    w.add_argument(
        "--time-limit", type=float, default=None, help="hard limit in seconds (process pool)"
    )
    w.add_argument("--soft-time-limit", type=float, default=None, help="soft limit in seconds")
    w.add_argument(
        "--metrics-port", type=int, default=None, metavar="P",
        help="serve Prometheus metrics at http://HOST:P/metrics (0: any free port)",
    )
    w.add_argument("--metrics-host", default="127.0.0.1", help="address for --metrics-port (127.0.0.1)")
    w.add_argument(
        "-E", "--task-events", action="store_true",
        help="send Celery's events (Celery's layout: Flower, celery events)",
    )
    w.set_defaults(run=_worker)

    b = sub.add_parser("beat", help="run the app's beat (app.beat())")
    b.add_argument("-A", "--app", required=True, help="module:app")
    b.set_defaults(run=_beat)

    a = sub.add_parser("admin", help="serve the admin page and API (uvicorn)")
    a.add_argument("-A", "--app", required=True, help="module:app")
    a.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    a.add_argument("--port", type=int, default=5555, help="port (5555)")
    a.add_argument(
        "--token",
        default=os.environ.get("HEADWAY_ADMIN_TOKEN") or None,
        help="the token (default $HEADWAY_ADMIN_TOKEN; none: one is generated and printed)",
    )
    a.add_argument("--read-only", action="store_true", help="refuse every change (send, revoke, dead letters)")
    a.add_argument(
        "--worker", type=int, default=0, metavar="N", help="also run a worker of N here (0: none)"
    )
    a.add_argument(
        "--grace", type=float, default=GRACE, help=f"seconds runs get at a stop ({GRACE:g})"
    )
    a.set_defaults(run=_admin)

    d = sub.add_parser("demo", help="a real demo on the memory broker and a virtual clock")
    d.set_defaults(run=_demo)

    remote = []
    for kind, what in (
        ("inspect", "ask every worker process of the app (Celery's inspect)"),
        ("control", "change every worker process of the app (Celery's control)"),
    ):
        r = sub.add_parser(kind, help=what)
        r.add_argument("what", help="the command (see headway --help)")
        r.add_argument("words", nargs="*", help="its arguments")
        r.add_argument("-A", "--app", required=True, help="module:app")
        r.add_argument("--json", action="store_true", help="one JSON line {node: answer}")
        r.add_argument(
            "-t", "--timeout", type=float, default=None, help="seconds to wait for answers (1)"
        )
        r.add_argument(
            "-d", "--destination", default=None, help="nodes or worker names, comma-separated"
        )
        r.set_defaults(run=_remote)
        remote.append(r)

    for sp in (w, b, a, d, *remote):
        sp.add_argument(
            "-l", "--loglevel", default="warning", help="debug, info, warning (default), error, critical"
        )
        sp.add_argument("--log-format", default="text", help="text (default) or json")
    ns = p.parse_args(argv)
    _logging(ns.loglevel, ns.log_format)
    status: int = ns.run(ns)
    return status
