"""Which broker URLs a Celery app may name is one rule (the core's
``task::celery_conf::broker``), the same for ``headway.celery`` and for a
real Celery app served by ``headway worker -A``: Redis (``redis://``,
``rediss://``, ``sentinel://``), RabbitMQ (``amqp://``) or ``memory://``,
one refusal text naming the setting with its password hidden."""

from __future__ import annotations

import pytest

from headway._from_celery import serve
from headway.celery import Celery

REFUSED = r"^broker_url 'sqs://u:\*\*\*@h': headway runs a Celery app on Redis"


def test_the_shim_and_a_served_app_refuse_alike() -> None:
    celery = pytest.importorskip("celery")
    with pytest.raises(ValueError, match=REFUSED):
        Celery(broker="sqs://u:pw@h").app
    with pytest.raises(ValueError, match=REFUSED):
        serve(celery.Celery("urls_refused", broker="sqs://u:pw@h"))


def test_results_beside_each_broker_are_checked_before_connecting() -> None:
    with pytest.raises(ValueError, match=r"^result_backend 'rpc://': beside Redis"):
        Celery(broker="redis://127.0.0.1:1/0", backend="rpc://").app
    with pytest.raises(ValueError, match=r"^result_backend 'db://u:\*\*\*@h': beside RabbitMQ"):
        Celery(broker="amqp://127.0.0.1:1//", backend="db://u:pw@h").app


def test_a_served_celery_app_on_memory_runs_its_tasks() -> None:
    celery = pytest.importorskip("celery")
    capp = celery.Celery("urls_memory", broker="memory://")

    @capp.task(name="urls.add")  # type: ignore[untyped-decorator]
    def add(a: int, b: int) -> int:
        return a + b

    app = serve(capp)
    w = app.worker(capp.conf.task_default_queue, concurrency=1)
    w.start()
    try:
        assert app.send("urls.add", (2, 3)).get(timeout=10) == 5
    finally:
        w.stop()
