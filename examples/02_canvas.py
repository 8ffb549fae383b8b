"""02-canvas: a chain, a group and a chord.

A chain passes each result on as the next link's first argument; a group
answers its parts' results in order; a chord hands the parts' results to a
callback. On a virtual clock, so the output is the same on every run.

    python examples/02_canvas.py
"""

from __future__ import annotations

from datetime import datetime, timezone

import headway
from headway import chain, chord, group
from headway.testing import VirtualClock

app = headway.App(clock=VirtualClock(start=datetime(2026, 1, 1, tzinfo=timezone.utc)))


@app.task(name="add")
def add(x: int, y: int) -> int:
    return x + y


@app.task(name="mul")
def mul(x: int, y: int) -> int:
    return x * y


@app.task(name="total")
def total(xs: list[int]) -> int:
    return sum(xs)


def main() -> None:
    worker = app.worker(concurrency=4)
    worker.start()

    # (1 + 2) -> + 3 -> * 10
    print("chain  add(1, 2) | add(3) | mul(10)  =", chain(add.s(1, 2), add.s(3), mul.s(10)).send().get(timeout=10))
    print("pipe   add(2, 2) | mul(5)            =", (add.s(2, 2) | mul.s(5)).send().get(timeout=10))
    print("group  add(i, i) for i in 0..4       =", group(add.s(i, i) for i in range(5)).send().get(timeout=10))
    print("chord  total(add(i, i) for i in 0..4) =", chord([add.s(i, i) for i in range(5)], total.s()).send().get(timeout=10))

    worker.stop()


if __name__ == "__main__":
    main()
