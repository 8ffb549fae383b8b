"""The headway app the Flower test runs as a worker, on Celery's Redis
layout: ``headway worker -A flower_hw:app --pool process -E``, as a user
would (``-E``: send Celery's events, which Flower reads).

``HEADWAY_FLOWER_URL`` names the redis-server; ``HEADWAY_FLOWER_NODE`` the
worker's node name, the name Flower lists it under."""

import os
import time

import headway

app = headway.App(
    headway.RedisBroker.celery(
        os.environ["HEADWAY_FLOWER_URL"], consumer=os.environ.get("HEADWAY_FLOWER_NODE")
    )
)


@app.task(name="flower.add")
def add(x, y):
    return x + y


@app.task(name="flower.boom")
def boom(msg):
    raise ValueError(msg)


@app.task(name="flower.nap")
def nap(seconds):
    """Sleeps ``seconds``: long enough to be seen running, and revoked."""
    time.sleep(seconds)
    return f"slept {seconds}"
