"""01-queue: a task from send to answer, with one retry in between.

The app runs on a virtual clock: the worker sleeps on it, so the retry's
30-second backoff passes at once, and the output is the same on every run.

    python examples/01_queue.py
"""

from __future__ import annotations

from datetime import datetime, timezone

import headway
from headway.testing import VirtualClock

clock = VirtualClock(start=datetime(2026, 1, 1, tzinfo=timezone.utc))
app = headway.App("memory://", clock=clock)


@app.task(name="greet", retries=2, backoff=headway.Fixed(30.0))
def greet(name: str) -> str:
    ctx = headway.current()
    print(f"{ctx.now:%H:%M:%S}  greet({name!r}) attempt {ctx.attempt}")
    if ctx.attempt == 1:
        raise ConnectionError("the greeting service is warming up")
    return f"hello {name}, attempt {ctx.attempt}"


def main() -> None:
    worker = app.worker(concurrency=4)
    worker.start()
    print(f"{clock.datetime():%H:%M:%S}  send greet('ada')")
    handle = greet.delay("ada")
    answer = handle.get(timeout=10)
    print(f"{clock.datetime():%H:%M:%S}  answer: {answer!r}")
    print(f"state: {handle.state()}")
    worker.stop()


if __name__ == "__main__":
    main()
