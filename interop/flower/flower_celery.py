"""The Celery app Flower is started with (``celery -A flower_celery
flower``), and the test's Celery producer: nothing but the broker and the
result backend, both the test's redis-server (``HEADWAY_FLOWER_URL``).
It registers no task: every task here is sent by name and run by a headway
worker."""

import os

from celery import Celery

URL = os.environ["HEADWAY_FLOWER_URL"]

app = Celery("flower_interop", broker=URL, backend=URL)
app.conf.update(broker_connection_retry_on_startup=True, task_default_queue="celery")
