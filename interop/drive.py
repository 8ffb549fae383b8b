"""Drives the Celery side of one interop step: ``python drive.py <command>
<json>``; prints one JSON line with the answer.

Commands:
- ``send {"name", "args", "kwargs", "queue", "countdown", "priority", "link",
  "link_error"}`` → ``{"id"}`` (``link``/``link_error``: lists of specs, below)
- ``canvas <spec>`` → ``{"id"}`` of what to wait on. A spec is
  ``{"sig": name, "args": [], "queue": q, "immutable": false}``,
  ``{"chain": [spec, ...]}`` or ``{"chord": [spec, ...], "body": spec}``.
- ``get {"id", "timeout"}`` → ``{"ok": value}`` or ``{"error": type,
  "module", "args"}``.
- ``state {"id"}`` → ``{"state"}``; ``revoke {"id", "terminate", "signal"}``
  → ``{}`` (Celery's ``app.control.revoke``; ``terminate`` false and
  ``signal`` Celery's default when omitted).
- ``typed {"queue"}``: sends ``hw.echo`` with a datetime, a UUID, a Decimal
  and bytes and answers whether each came back equal and of its type.
- ``meta {"id"}`` → the raw stored result meta.
"""

import datetime
import decimal
import json
import sys
import uuid

from celery import chain, chord, signature

from celery_app import _r, app


def build(spec):
    if "chain" in spec:
        return chain(*[build(s) for s in spec["chain"]])
    if "chord" in spec:
        return chord([build(s) for s in spec["chord"]], build(spec["body"]))
    opts = {}
    if spec.get("queue"):
        opts["queue"] = spec["queue"]
    return signature(spec["sig"], args=tuple(spec.get("args", [])), kwargs=spec.get("kwargs", {}),
                     options=opts, immutable=spec.get("immutable", False), app=app)


def answer(r, timeout):
    try:
        return {"ok": r.get(timeout=timeout, propagate=True, disable_sync_subtasks=False)}
    except Exception as e:  # noqa: BLE001 - the test asserts on the type
        return {"error": type(e).__name__, "module": type(e).__module__, "args": [repr(a) for a in e.args]}


def main():
    cmd, arg = sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    if cmd == "send":
        opts = {k: arg[k] for k in ("queue", "countdown", "priority") if arg.get(k) is not None}
        for k in ("link", "link_error"):
            if arg.get(k):
                opts[k] = [build(s) for s in arg[k]]
        r = app.send_task(arg["name"], args=arg.get("args", []), kwargs=arg.get("kwargs", {}), **opts)
        out = {"id": r.id}
    elif cmd == "canvas":
        out = {"id": build(arg).apply_async().id}
    elif cmd == "get":
        out = answer(app.AsyncResult(arg["id"]), arg.get("timeout", 20))
    elif cmd == "state":
        out = {"state": app.AsyncResult(arg["id"]).state}
    elif cmd == "revoke":
        extra = {k: arg[k] for k in ("terminate", "signal") if k in arg}
        app.control.revoke(arg["id"], **extra)
        out = {}
    elif cmd == "meta":
        raw = _r.get("celery-task-meta-" + arg["id"])
        out = {"meta": raw.decode() if raw else None}
    elif cmd == "typed":
        when = datetime.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.timezone.utc)
        uid = uuid.UUID("12345678-1234-5678-1234-567812345678")
        dec = decimal.Decimal("3.14159")
        raw = b"\xff\x00bytes"
        r = app.send_task("hw.echo", args=[when, uid, dec, raw], queue=arg.get("queue", "hw"))
        got = r.get(timeout=20)
        out = {
            "datetime": got[0] == when and isinstance(got[0], datetime.datetime),
            "uuid": got[1] == uid and isinstance(got[1], uuid.UUID),
            "decimal": got[2] == dec and isinstance(got[2], decimal.Decimal),
            "bytes": got[3] == raw and isinstance(got[3], bytes),
        }
    else:
        raise SystemExit(f"unknown command {cmd!r}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
