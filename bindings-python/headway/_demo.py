"""``headway demo``: the task queue end to end, in one process.

A worker on the memory broker, a task that fails once and is retried, a
chain, a chord and a beat — all on a virtual clock, so the 30-second retry
backoff and three minutes of beats pass at once and the output is the same
on every run.
"""

from __future__ import annotations

from datetime import datetime, timezone

from . import App, Every, Fixed, chain, chord, current
from .testing import VirtualClock

START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def demo() -> None:
    """Runs the demo, printing what happens."""
    clock = VirtualClock(start=START)
    app = App("memory://", clock=clock)

    def at() -> str:
        return f"{clock.datetime():%H:%M:%S}"

    @app.task(name="demo.charge", retries=3, backoff=Fixed(30.0))
    def charge(order: str) -> str:
        ctx = current()
        if ctx.attempt == 1:
            print(f"  {ctx.now:%H:%M:%S}  charge({order!r}) attempt 1: ConnectionError, retry in 30 s")
            raise ConnectionError("the card service is unavailable")
        print(f"  {ctx.now:%H:%M:%S}  charge({order!r}) attempt {ctx.attempt}: ok")
        return f"charged {order}"

    @app.task(name="demo.add")
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(name="demo.mul")
    def mul(x: int, y: int) -> int:
        return x * y

    @app.task(name="demo.square")
    def square(x: int) -> int:
        return x * x

    @app.task(name="demo.total")
    def total(xs: list[int]) -> int:
        return sum(xs)

    @app.task(name="demo.tick")
    def tick(label: str) -> str:
        return f"{label} ran at {current().now:%H:%M:%S}"

    print(f"headway demo: the memory broker on a virtual clock starting {START:%Y-%m-%d %H:%M} UTC")
    print(f"tasks: {', '.join(app.task_names())}")
    worker = app.worker(concurrency=4)
    worker.start()
    print(f"1. a worker: {worker.concurrency} runner threads on {', '.join(worker.queues)}")

    print("2. a retried task (retries=3, backoff=Fixed(30.0))")
    h = charge.delay("order-7")
    charged = h.get(timeout=30)
    print(f"  {at()}  -> {charged!r} ({h.state()})")

    print("3. a chain: add(1, 2) | mul(10)")
    product = chain(add.s(1, 2), mul.s(10)).send().get(timeout=30)
    print(f"  {at()}  -> {product}")

    print("4. a chord: total(square(i) for i in 1..4)")
    summed = chord([square.s(i) for i in range(1, 5)], total.s()).send().get(timeout=30)
    print(f"  {at()}  -> {summed}")

    print("5. a beat: 'heartbeat' every 60 s, three ticks")
    beat = app.beat()
    beat.add("heartbeat", tick, ("heartbeat",), Every(60.0))
    for _ in range(3):
        _, when = beat.pending()[0]
        clock.advance_to(when)
        for entry, due, handle in beat.tick():
            print(f"  {due:%H:%M:%S}  beat sent {entry} -> {handle.get(timeout=30)!r}")
    beat.remove("heartbeat")

    worker.stop()
    print(f"done: the worker settled {worker.settled} messages; virtual time {at()}")
