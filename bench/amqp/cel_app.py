"""The Celery app of the RabbitMQ drain: the same body, the same broker and
result backend as headway's worker."""

import os

from celery import Celery

from body import noop

app = Celery("bench", broker=os.environ["BENCH_AMQP"], backend=os.environ["BENCH_REDIS"])
app.task(name="bench.noop")(noop)
