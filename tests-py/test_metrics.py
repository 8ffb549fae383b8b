"""Prometheus metrics: the admin's `/metrics` and `headway worker
--metrics-port`, parsed by prometheus_client's own text parser, values
matching the runs made."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import headway
from headway.admin import asgi

from test_admin_session import T, call

WAIT = 10.0


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample, keyed by its name and sorted labels."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_the_admin_serves_the_runs_by_task_and_state_behind_its_login() -> None:
    app = headway.App("memory://")

    @app.task(name="m.ok")
    def ok() -> int:
        return 1

    @app.task(name="m.bad")
    def bad() -> None:
        raise ValueError("no")

    w = app.worker(concurrency=2)
    w.start()
    try:
        for h in [ok.delay() for _ in range(3)]:
            assert h.get(timeout=WAIT) == 1
        with pytest.raises(headway.TaskFailed):
            bad.delay().get(timeout=WAIT)
        admin = asgi(app, token=T, announce=False)

        async def main() -> tuple[Any, ...]:
            anon = await call(admin, "GET", "/metrics", [])
            authed = await call(admin, "GET", "/metrics", [("authorization", f"Bearer {T}")])
            return anon, authed

        anon, (status, head, body) = asyncio.run(main())
    finally:
        w.stop(5.0)
    # The positive control for the login: without the token, no metrics.
    assert anon[0] == 401
    assert status == 200 and head["content-type"].startswith("text/plain; version=0.0.4")
    s = samples(body.decode())
    assert s[("headway_tasks_total", (("state", "SUCCESS"), ("task", "m.ok")))] == 3
    assert s[("headway_tasks_total", (("state", "FAILURE"), ("task", "m.bad")))] == 1
    assert ("headway_tasks_total", (("state", "FAILURE"), ("task", "m.ok"))) not in s
    assert s[("headway_task_runtime_seconds_count", (("task", "m.ok"),))] == 3
    assert s[("headway_task_runtime_seconds_bucket", (("le", "+Inf"), ("task", "m.ok")))] == 3
    assert s[("headway_queue_depth", (("queue", "default"),))] == 0
    assert s[("headway_dead_letters", (("queue", "default"),))] == 0
    assert ("headway_broker_reconnects_total", ()) in s


def test_a_worker_serves_its_metrics_on_its_own_port(tmp_path: Path) -> None:
    (tmp_path / "metricsapp.py").write_text(
        "import headway\n"
        "app = headway.App('memory://')\n"
        "@app.task(name='mm.add')\n"
        "def add(a, b):\n"
        "    return a + b\n"
        "for i in range(5):\n"
        "    add.delay(i, i)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "headway", "worker", "-A", "metricsapp:app", "-c", "1", "--metrics-port", "0"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])},
    )
    try:
        assert proc.stdout is not None
        url = ""
        while not url:
            line = proc.stdout.readline()
            assert line, "the worker ended"
            if line.startswith("metrics: "):
                url = line.split()[1]
        end = time.monotonic() + WAIT
        while True:
            text = urllib.request.urlopen(url, timeout=WAIT).read().decode()
            s = samples(text)
            done = s.get(("headway_tasks_total", (("state", "SUCCESS"), ("task", "mm.add"))), 0)
            if done == 5 or time.monotonic() > end:
                break
            time.sleep(0.05)
        assert done == 5, text
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url.replace("/metrics", "/other"), timeout=WAIT)
        assert e.value.code == 404
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def refused_cli(tmp_path: Path, *flags: str) -> str:
    """`headway worker` on a memory app with `flags`, which must fail; its stderr."""
    (tmp_path / "memapp.py").write_text("import headway\napp = headway.App('memory://')\n")
    out = subprocess.run(
        [sys.executable, "-m", "headway", "worker", "-A", "memapp:app", *flags],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])},
    )
    assert out.returncode != 0
    return out.stderr


def test_a_bad_metrics_port_is_refused_by_name(tmp_path: Path) -> None:
    stderr = refused_cli(tmp_path, "--metrics-port", "70000")
    # The positive control: a free port is served (the test above).
    assert "metrics port must be 0 to 65535, not 70000" in stderr


def test_task_events_on_a_broker_that_sends_none_are_refused_by_name(tmp_path: Path) -> None:
    stderr = refused_cli(tmp_path, "-E")
    assert "task events (-E) are Celery's" in stderr, stderr


def promtool(text: str) -> subprocess.CompletedProcess[str]:
    """`promtool check metrics` (Debian's `prometheus` package) on `text`;
    CI installs it, so a missing promtool fails rather than skips."""
    return subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )


def test_promtool_passes_the_admins_metrics() -> None:
    app = headway.App("memory://")

    @app.task(name="p.ok")
    def ok() -> int:
        return 1

    @app.task(name="p.bad")
    def bad() -> None:
        raise ValueError("no")

    w = app.worker(concurrency=2)
    w.start()
    try:
        assert ok.delay().get(timeout=WAIT) == 1
        with pytest.raises(headway.TaskFailed):
            bad.delay().get(timeout=WAIT)
        admin = asgi(app, token=T, announce=False)
        status, _, body = asyncio.run(
            call(admin, "GET", "/metrics", [("authorization", f"Bearer {T}")])
        )
    finally:
        w.stop(5.0)
    assert status == 200
    text = body.decode()
    # What is checked holds runs of both states and the runtime histogram.
    assert "headway_tasks_total" in text and "headway_task_runtime_seconds_bucket" in text, text
    out = promtool(text)
    assert out.returncode == 0, out.stdout + out.stderr
    # The positive control: promtool does fail a counter named against its rules.
    bad_text = "# HELP bad_seconds x\n# TYPE bad_seconds counter\nbad_seconds 1\n"
    out = promtool(bad_text)
    assert out.returncode != 0 and "_total" in out.stdout + out.stderr, out
