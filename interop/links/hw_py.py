"""The headway Python side of ``interop/run_links.sh``.

``python hw_py.py worker --queues hw [--concurrency N] [--prefetch N] [--pool process]`` runs
a headway worker process on Celery's layout until SIGTERM (or SIGKILL);
``python hw_py.py <command> <json>`` is a one-shot producer step that prints
one JSON line:

- ``send {"name", "args", "queue", "countdown", "priority"}`` → ``{"id"}``
- ``canvas <spec>`` → ``{"id"}``: ``{"sig", "args", "queue", "immutable"}``,
  ``{"chain": [spec...]}`` or ``{"chord": [spec...], "body": spec}``
- ``get {"id", "timeout"}`` → ``{"ok"}`` or ``{"error", "message"}``
- ``revoke {"id"}`` → ``{}``
- ``typed {}``: what headway's Python API does with a datetime, a UUID and a
  Decimal argument for ``c.typed`` (sent, or refused), and the answer.

A worker process is the node ``<worker>@links`` in Celery's remote control
(``celery inspect`` / ``celery control``), as the harness's Celery workers
are: its broker's ``consumer`` names it, so two headway processes on one host
do not both answer as ``headway@<host>``.

Environment: ``HEADWAY_LINKS_URL``, ``HEADWAY_LINKS_VT`` (visibility
timeout, s), ``HEADWAY_LINKS_SLEEP`` (how long ``shared.slow`` sleeps
here), ``HEADWAY_LINKS_WORKER`` (this worker's name) and
``HEADWAY_LINKS_DIR``, where every run appends one JSON line (task, id,
side, worker, args, at, parent_id, root_id) to ``ledger-<worker>.jsonl``
and where ``h.gate`` waits for its file ``gate-<label>``.
"""

import datetime
import decimal
import json
import os
import signal
import sys
import time
import uuid

import headway

URL = os.environ["HEADWAY_LINKS_URL"]
VT = float(os.environ.get("HEADWAY_LINKS_VT", "4"))
NAME = os.environ.get("HEADWAY_LINKS_WORKER", "hw-py")
SIDE = "headway-py"
# A worker process is a node of Celery's remote control; a producer step is none.
CONSUMER = f"{NAME}@links" if sys.argv[1:2] == ["worker"] else None

app = headway.App(headway.RedisBroker.celery(URL, consumer=CONSUMER, visibility_timeout=VT))
_ledger = None


def note(ctx, args):
    global _ledger
    if _ledger is None:
        _ledger = open(os.path.join(os.environ["HEADWAY_LINKS_DIR"], f"ledger-{NAME}.jsonl"), "a")
    _ledger.write(json.dumps({
        "task": ctx.name, "id": ctx.id, "side": SIDE, "worker": NAME,
        "args": list(args),
        "at": time.time(), "parent_id": ctx.parent_id, "root_id": ctx.root_id,
    }) + "\n")
    _ledger.flush()


@app.task(name="h.add", queue="hw", bind=True)
def add(ctx, x, y=0):
    note(ctx, [x, y])
    return x + y


@app.task(name="h.mul", queue="hw", bind=True)
def mul(ctx, x, y):
    note(ctx, [x, y])
    return x * y


@app.task(name="h.tsum", queue="hw", bind=True)
def tsum(ctx, xs):
    note(ctx, [xs])
    return sum(xs)


@app.task(name="h.record", queue="hw", bind=True)
def record(ctx, *args):
    note(ctx, list(args))
    return list(args)


@app.task(name="h.fail", queue="hw", bind=True)
def fail(ctx, msg):
    note(ctx, [msg])
    raise ValueError(msg)


@app.task(name="h.echo", queue="hw", bind=True)
def echo(ctx, *args):
    """Answers its arguments and the Python types they arrived as."""
    note(ctx, [repr(a) for a in args])
    return {"types": [type(a).__name__ for a in args], "values": list(args)}


@app.task(name="h.gate", queue="hw", bind=True)
def gate(ctx, label):
    """Runs until the harness creates ``gate-<label>`` (at most 60 s): a run
    that is in progress for as long as the harness needs one."""
    note(ctx, [label])
    path = os.path.join(os.environ["HEADWAY_LINKS_DIR"], f"gate-{label}")
    end = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > end:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.02)
    return "headway-py:" + label


@app.task(name="shared.slow", bind=True, acks_late=True)
def slow(ctx, label):
    note(ctx, [label])
    time.sleep(float(os.environ.get("HEADWAY_LINKS_SLEEP", "0")))
    return "headway:" + label


@app.task(name="h.spin", queue="hwp", bind=True)
def spin(ctx, label):
    """Spins for ever: only a hard time limit (or a terminate) ends it."""
    note(ctx, [label])
    while True:
        pass


@app.task(name="h.soft", queue="hwp", bind=True)
def soft(ctx, label):
    """Sleeps until its soft time limit, then cleans up and answers."""
    note(ctx, [label])
    try:
        time.sleep(60)
    except headway.SoftTimeLimitExceeded:
        return "cleaned up " + label
    return "slept"


def build(spec):
    if "chain" in spec:
        return headway.chain(*[build(s) for s in spec["chain"]])
    if "chord" in spec:
        return headway.chord([build(s) for s in spec["chord"]], build(spec["body"]))
    return app.signature(spec["sig"], spec.get("args", []), immutable=spec.get("immutable", False),
                         queue=spec.get("queue"))


def get(arg):
    try:
        return {"ok": app.handle(arg["id"]).get(timeout=arg.get("timeout", 30))}
    except headway.Refused as e:  # the harness asserts on the type
        return {"error": type(e).__name__, "message": str(e)}


def worker(argv):
    opts = dict(zip(argv[::2], argv[1::2]))
    w = app.worker(queues=opts.get("--queues", "hw"), concurrency=int(opts.get("--concurrency", "2")),
                   prefetch=int(opts["--prefetch"]) if "--prefetch" in opts else None,
                   pool=opts.get("--pool", "threads"))
    signal.signal(signal.SIGTERM, lambda *_: w.stop(grace=2.0, wait=False))
    print(f"ready {NAME} pid {os.getpid()} queues {w.queues}", flush=True)
    w.run()


def main():
    cmd = sys.argv[1]
    if cmd == "worker":
        return worker(sys.argv[2:])
    arg = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    if cmd == "send":
        opts = {k: arg[k] for k in ("queue", "countdown", "priority") if arg.get(k) is not None}
        out = {"id": app.send_task(arg["name"], arg.get("args", []), **opts).id}
    elif cmd == "canvas":
        out = {"id": build(arg).send().id}
    elif cmd == "get":
        out = get(arg)
    elif cmd == "revoke":
        app.handle(arg["id"]).revoke()
        out = {}
    elif cmd == "typed":
        values = [datetime.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.timezone.utc),
                  uuid.UUID("12345678-1234-5678-1234-567812345678"), decimal.Decimal("3.14159")]
        try:
            h = app.send_task("c.typed", values)
            out = {"sent": "native"}
        except TypeError as e:
            raise SystemExit(f"headway refused a datetime, UUID or Decimal: {e}")
        out["answer"] = h.get(timeout=30)
        out["types"] = [type(v).__name__ for v in out["answer"]["values"]]
    else:
        raise SystemExit(f"unknown command {cmd!r}")
    print(json.dumps(out, default=repr))


if __name__ == "__main__":
    main()
