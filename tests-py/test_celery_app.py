"""``headway worker -A proj:app`` where ``app`` is a real ``celery.Celery``:
the first step off Celery changes no code. A Celery project's tasks module
(written only against Celery's API) is served by headway's worker on the
app's Redis broker and result backend; a Celery client in this process
sends with ``.delay()`` and reads results with Celery's ``AsyncResult``.
What is checked is Celery's task semantics: ``bind=True`` and
``self.request``, ``self.retry`` within ``max_retries``, ``autoretry_for``,
a plain exception failing at once, ``Reject`` and ``Ignore``,
``update_state`` seen by a Celery client, ``acks_late`` and ``rate_limit``
taken from the task."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import RedisServer

WAIT = 30.0

PROJECT = """
import os, time
from celery import Celery
from celery.exceptions import Ignore, Reject

URL = os.environ["CAPP_URL"]
app = Celery("proj", broker=URL, backend=URL)
app.conf.task_default_queue = os.environ["CAPP_QUEUE"]
MARKS = os.environ["CAPP_MARKS"]


def mark(name):
    # One line per attempt, so the test counts attempts.
    with open(os.path.join(MARKS, name), "a") as f:
        f.write("x\\n")


@app.task(name="proj.add")
def add(a, b):
    return a + b


@app.task(bind=True, name="proj.who")
def who(self, x):
    r = self.request
    return {"id": r.id, "args": list(r.args), "retries": r.retries,
            "called_directly": r.called_directly, "is_eager": r.is_eager,
            "routing_key": r.delivery_info.get("routing_key"), "x": x}


@app.task(bind=True, name="proj.flaky", max_retries=3)
def flaky(self, key, until):
    mark(key)
    if self.request.retries < until:
        raise self.retry(exc=ValueError("again"), countdown=0.05)
    return self.request.retries


@app.task(bind=True, name="proj.auto", autoretry_for=(ConnectionError,),
          max_retries=2, default_retry_delay=0.01)
def auto(self, key, kind):
    mark(key)
    raise {"conn": ConnectionRefusedError, "value": ValueError}[kind](kind)


@app.task(name="proj.plain")
def plain(key):
    mark(key)
    raise ValueError("plain failure")


@app.task(bind=True, name="proj.progress")
def progress(self, gate):
    self.update_state(state="PROGRESS", meta={"done": 1, "of": 2})
    end = time.monotonic() + 20
    while not os.path.exists(gate) and time.monotonic() < end:
        time.sleep(0.02)
    return "finished"


@app.task(name="proj.reject")
def reject():
    raise Reject("not for me", requeue=False)


@app.task(name="proj.ignored")
def ignored(key):
    mark(key)
    raise Ignore()


@app.task(name="proj.late", acks_late=True, rate_limit="100/s")
def late():
    return "late"
"""


class Project:
    def __init__(self, tmp: Path, server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
        self.name = f"capp_{uuid.uuid4().hex[:8]}"
        self.marks = tmp / "marks"
        self.marks.mkdir()
        db = 20
        assert server.command("FLUSHDB", db=db) == b"+OK"
        url = server.url.rsplit("/", 1)[0] + f"/{db}"
        self.env = {"CAPP_URL": url, "CAPP_QUEUE": f"q{uuid.uuid4().hex[:6]}", "CAPP_MARKS": str(self.marks)}
        for k, v in self.env.items():
            monkeypatch.setenv(k, v)
        (tmp / f"{self.name}.py").write_text(textwrap.dedent(PROJECT))
        monkeypatch.syspath_prepend(str(tmp))
        import importlib

        self.mod: ModuleType = importlib.import_module(self.name)
        self.tmp = tmp
        self.proc: subprocess.Popen[str] | None = None
        self.out: list[str] = []

    def start(self, *flags: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "headway", "worker", "-A", f"{self.name}:app", "-c", "2", *flags],
            cwd=self.tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **self.env, "PYTHONPATH": os.pathsep.join([str(self.tmp), *sys.path])},
        )
        assert self.proc.stdout is not None
        end = time.monotonic() + WAIT
        while time.monotonic() < end:
            line = self.proc.stdout.readline()
            assert line, "the worker ended: " + "".join(self.out)
            self.out.append(line)
            if line.strip() == "ready":
                return
        raise AssertionError("the worker did not start: " + "".join(self.out))

    def attempts(self, key: str) -> int:
        p = self.marks / key
        return len(p.read_text().splitlines()) if p.exists() else 0

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


@pytest.fixture
def project(tmp_path: Path, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    p = Project(tmp_path, redis_server, monkeypatch)
    yield p
    p.stop()
    # Celery's results hold its backend's connections: let them go while the
    # server still runs (their finalizers would reconnect at exit).
    import gc

    gc.collect()
    p.mod.app.close()


def test_the_worker_serves_a_celery_apps_tasks_with_celerys_request(project: Project) -> None:
    project.start()
    assert "proj.add" in "".join(project.out), project.out
    m: Any = project.mod
    assert m.add.delay(2, 3).get(timeout=WAIT) == 5
    r = m.who.delay(7)
    got = r.get(timeout=WAIT)
    assert got == {
        "id": r.id,
        "args": [7],
        "retries": 0,
        "called_directly": False,
        "is_eager": False,
        "routing_key": project.env["CAPP_QUEUE"],
        "x": 7,
    }
    assert m.late.delay().get(timeout=WAIT) == "late"


def test_self_retry_autoretry_and_a_plain_failure_as_in_celery(project: Project) -> None:
    project.start()
    m: Any = project.mod
    # self.retry twice, then success: three attempts, retries counted.
    assert m.flaky.delay("f", 2).get(timeout=WAIT) == 2
    assert project.attempts("f") == 3
    # Past max_retries (3): the exc given to retry, after four attempts.
    r = m.flaky.delay("g", 9)
    with pytest.raises(Exception) as e:
        r.get(timeout=WAIT)
    assert type(e.value).__name__ == "ValueError" and "again" in str(e.value)
    assert project.attempts("g") == 4
    # autoretry_for a base class: retried (max_retries 2), then the error.
    with pytest.raises(Exception) as e:
        m.auto.delay("a", "conn").get(timeout=WAIT)
    assert type(e.value).__name__ == "ConnectionRefusedError"
    assert project.attempts("a") == 3
    # Not in autoretry_for: fails at once.
    with pytest.raises(Exception):
        m.auto.delay("b", "value").get(timeout=WAIT)
    assert project.attempts("b") == 1
    # No autoretry_for at all: a plain exception fails the run at once, as
    # in Celery (headway's own default would retry nothing either).
    with pytest.raises(Exception) as e:
        m.plain.delay("p").get(timeout=WAIT)
    assert "plain failure" in str(e.value)
    assert project.attempts("p") == 1


def test_update_state_reject_and_ignore_seen_by_a_celery_client(project: Project) -> None:
    project.start()
    m: Any = project.mod
    gate = project.tmp / "gate"
    r = m.progress.delay(str(gate))
    end = time.monotonic() + WAIT
    while r.state != "PROGRESS" and time.monotonic() < end:
        time.sleep(0.02)
    assert r.state == "PROGRESS"
    assert r.info == {"done": 1, "of": 2}
    # Recorded by headway's worker: a headway app on the same layout reads
    # the same state and meta.
    import headway

    hw = headway.App(headway.RedisBroker.celery(project.env["CAPP_URL"]))
    assert (hw.handle(r.id).state(), hw.handle(r.id).info()) == ("PROGRESS", {"done": 1, "of": 2})
    gate.write_text("go")
    assert r.get(timeout=WAIT) == "finished"
    assert hw.handle(r.id).state() == "SUCCESS"
    with pytest.raises(Exception) as e:
        m.reject.delay().get(timeout=WAIT)
    assert "not for me" in str(e.value)
    ig = m.ignored.delay("i")
    # The positive control after it: the worker is live and storing.
    assert m.add.delay(1, 1).get(timeout=WAIT) == 2
    end = time.monotonic() + WAIT
    while project.attempts("i") == 0 and time.monotonic() < end:
        time.sleep(0.02)
    assert project.attempts("i") == 1, "the ignored task ran"
    # A graceful stop settles every run it started: then nothing is stored.
    project.stop()
    assert project.proc is not None and project.proc.returncode == 0
    assert ig.state == "PENDING"
    ig.forget()  # no longer awaited: Celery's client lets its subscription go


def test_a_celery_app_on_another_broker_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "amqpapp.py").write_text(
        "from celery import Celery\napp = Celery('p', broker='sqs://guest:secret@localhost//')\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "headway", "worker", "-A", "amqpapp:app"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])},
    )
    assert out.returncode != 0
    assert "broker_url" in out.stderr and "Redis" in out.stderr, out.stderr
    assert "secret" not in out.stderr


def test_a_served_apps_prefetch_multiplier_and_result_expires_apply(redis_server: RedisServer) -> None:
    """A served Celery app's ``worker_prefetch_multiplier`` sets its
    workers' prefetch (Celery's default of 4 leaves headway's own) and its
    ``result_expires`` the TTL of the results it stores."""
    from celery import Celery

    from headway._from_celery import serve

    db = 39
    redis_server.command("FLUSHDB", db=db)
    url = f"redis://127.0.0.1:{redis_server.port}/{db}"
    capp = Celery("served_prefetch", broker=url, backend=url)
    capp.conf.worker_prefetch_multiplier = 1
    capp.conf.result_expires = 120

    @capp.task(name="served_prefetch.add")
    def add(a: int, b: int) -> int:
        return a + b

    app = serve(capp)
    assert app._worker_defaults == {"prefetch_multiplier": 1}
    w = app.worker(queues=["celery"], concurrency=2, **app._worker_defaults)
    assert w.prefetch == 2
    w.start()
    try:
        r = add.delay(2, 3)
        assert r.get(timeout=20) == 5
    finally:
        w.stop(5.0)
    ttl = int(redis_server.command("TTL", f"celery-task-meta-{r.id}", db=db).lstrip(b":"))
    assert 0 < ttl <= 120
    # Positive control: Celery's default multiplier leaves headway's prefetch.
    capp2 = Celery("served_default", broker=url, backend=url)
    assert serve(capp2)._worker_defaults == {}
