"""A body that holds the GIL past its worker's lease (Redis, headway's
layout) loses nothing and runs once: the lease is refreshed by the broker's
own tokio task, which needs no GIL, so no other consumer's recovery takes
the claim while the body runs.

The positive control — a worker that really dies does have its claims
recovered and run elsewhere — is ``test_processes.py::
test_a_killed_worker_loses_nothing`` (a worker killed with SIGKILL on a 1 s
lease: all six of its claims recovered and run by a second worker)."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import uuid

import headway
from headway.admin import asgi

from conftest import RedisServer
from test_admin import T, bearer, call

LEASE = 0.2
WAIT = 10.0


def test_a_body_holding_the_gil_past_the_lease_runs_once(redis_server: RedisServer) -> None:
    prefix = f"gil{uuid.uuid4().hex[:6]}:"
    runs: list[str] = []
    started = threading.Event()

    busy_broker = headway.RedisBroker(redis_server.url, consumer="busy", prefix=prefix, lease=LEASE)
    busy = headway.App(busy_broker)

    @busy.task(name="spin", acks_late=True)
    def spin() -> int:
        runs.append("busy")
        started.set()
        # Hold the GIL for eight leases: no other Python thread runs until
        # this returns (the switch interval is longer than the spin).
        old = sys.getswitchinterval()
        sys.setswitchinterval(30.0)
        try:
            n = 0
            end = time.monotonic() + 8 * LEASE
            while time.monotonic() < end:
                n += 1
        finally:
            sys.setswitchinterval(old)
        return n

    # Another consumer on the same queues, recovering dead consumers'
    # claims by itself every lease (its tokio task), and a worker that runs
    # whatever it gets back.
    other_broker = headway.RedisBroker(
        redis_server.url, consumer="other", prefix=prefix, lease=LEASE
    )
    other = headway.App(other_broker)

    @other.task(name="spin")
    def spin_elsewhere() -> int:
        runs.append("other")
        return -1

    assert other_broker.recover() == 0  # connected: its recovery runs from here

    w = busy.worker(concurrency=1)
    w.start()
    w2: headway.Worker | None = None
    try:
        h = spin.delay()
        assert started.wait(WAIT)
        w2 = other.worker(concurrency=1)
        w2.start()
        assert h.get(timeout=WAIT) > 0
        assert h.state() == "SUCCESS"
        # Several leases more of the other consumer's recovery: nothing to
        # hand back, nothing run again.
        deadline = time.monotonic() + 3 * LEASE
        while time.monotonic() < deadline:
            assert other_broker.recover() == 0
            time.sleep(LEASE / 4)
        assert runs == ["busy"]
        # The outcome was stored once: one success recorded for the run.
        admin = asgi(busy, token=T)
        r = asyncio.run(call(admin, "GET", f"/api/runs/{h.id}", bearer()))
        assert r.status == 200, r
        states = [e["state"] for e in r.json()["events"]]
        assert states.count("SUCCESS") == 1, states
        # Nothing left held or queued.
        assert redis_server.command("LLEN", f"{prefix}{{default}}:held:busy") == b":0"
        assert redis_server.command("LLEN", f"{prefix}{{default}}:held:other") == b":0"
    finally:
        w.stop(1.0)
        if w2 is not None:
            w2.stop(1.0)
