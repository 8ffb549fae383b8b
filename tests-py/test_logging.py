"""The core's log records in Python's `logging`: loggers under `headway`,
the run named on the record, the level, and the CLI's `--loglevel` and
`--log-format`."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import headway
from headway import _log, _native

from conftest import RedisServer


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def kept() -> object:
    h = Kept()
    logger = logging.getLogger("headway")
    logger.addHandler(h)
    try:
        yield h
    finally:
        logger.removeHandler(h)


def until(cond: object, what: str, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_a_run_the_worker_refuses_is_logged_under_headway_worker_with_its_run(kept: Kept) -> None:
    app = headway.App("memory://")

    @app.task(name="here.add")
    def add(a: int, b: int) -> int:
        return a + b

    lost = app.send_task("elsewhere.task", (1,))
    fine = add.delay(1, 2)
    w = app.worker(concurrency=1)
    w.start()
    try:
        # The positive control: the registered run went through the same worker.
        assert fine.get(timeout=10) == 3
        until(lambda: any(r.name == "headway.worker" for r in kept.records), "the warning")
    finally:
        w.stop(5.0)
    rec = next(r for r in kept.records if r.name == "headway.worker")
    assert rec.levelno == logging.WARNING
    assert "received unregistered task" in rec.getMessage()
    assert rec.task_id == lost.id  # type: ignore[attr-defined]
    assert rec.task_name == "elsewhere.task"  # type: ignore[attr-defined]
    assert rec.worker == w.name  # type: ignore[attr-defined]
    # Only the refused run was logged: the good one left no record.
    assert all(getattr(r, "task_id", None) != fine.id for r in kept.records)


def test_the_hand_back_warning_names_the_run_it_hands_back(kept: Kept, redis_server: RedisServer) -> None:
    # On Celery's layout a task this app does not run goes back for another
    # consumer (a Celery worker), with one warning naming the run.
    assert redis_server.command("FLUSHDB", db=24) == b"+OK"
    app = headway.App(headway.RedisBroker.celery(redis_server.url.rsplit("/", 1)[0] + "/24"))

    @app.task(name="here.mul")
    def mul(a: int, b: int) -> int:
        return a * b

    foreign = app.send_task("celery.only", (1,))
    fine = mul.delay(2, 3)
    w = app.worker(concurrency=1)
    w.start()
    try:
        # The positive control: the registered run went through.
        assert fine.get(timeout=10) == 6
        until(lambda: any(r.name == "headway.celery" for r in kept.records), "the hand-back warning")
    finally:
        w.stop(5.0)
    rec = next(r for r in kept.records if r.name == "headway.celery")
    assert rec.levelno == logging.WARNING
    assert "handing it back" in rec.getMessage()
    assert rec.task_id == foreign.id  # type: ignore[attr-defined]
    assert rec.task_name == "celery.only"  # type: ignore[attr-defined]


def test_records_below_the_level_are_not_made_and_the_level_is_settable(kept: Kept) -> None:
    app = headway.App("memory://")
    try:
        _log.set_level("error")
        assert logging.getLogger("headway").level == logging.ERROR
        app.send_task("elsewhere.task", ())
        w = app.worker(concurrency=1)
        w.start()
        until(lambda: w.settled >= 1, "the run")
        w.stop(5.0)
        assert _native.log_flush(5.0)
        assert not [r for r in kept.records if r.name == "headway.worker"]
        # The positive control: at warning the same run is logged.
        _log.set_level("WARNING")
        app.send_task("elsewhere.task", ())
        w = app.worker(concurrency=1)
        w.start()
        until(lambda: any(r.name == "headway.worker" for r in kept.records), "the warning")
        w.stop(5.0)
    finally:
        _log.set_level("warning")
    with pytest.raises(ValueError, match='"loud"'):
        _log.set_level("loud")


def test_the_json_formatter_writes_the_core_s_line() -> None:
    rec = logging.LogRecord("headway.worker", logging.WARNING, __file__, 1, "m %s", ("x",), None)
    rec.task_id = "id-1"
    rec.task_name = "t"
    rec.worker = None
    line = json.loads(_log.JsonFormatter().format(rec))
    assert line["level"] == "WARNING" and line["logger"] == "headway.worker"
    assert line["message"] == "m x" and line["task_id"] == "id-1" and line["task_name"] == "t"
    assert "worker" not in line
    text = _log.TextFormatter().format(rec)
    assert text.endswith("WARNING headway.worker] m x") and text.startswith("[")


def test_the_cli_writes_json_lines_naming_the_run(tmp_path: Path) -> None:
    (tmp_path / "logapp.py").write_text(
        "import headway\n"
        "app = headway.App('memory://')\n"
        "LOST = app.send_task('elsewhere.task', (1,)).id\n"
        "print('lost', LOST, flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "headway", "worker", "-A", "logapp:app", "--log-format", "json", "-c", "1"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])},
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        lost = proc.stdout.readline().split()[-1]
        line = proc.stderr.readline()
        rec = json.loads(line)
        assert rec["logger"] == "headway.worker" and rec["level"] == "WARNING", rec
        assert rec["task_id"] == lost and rec["task_name"] == "elsewhere.task", rec
        assert isinstance(rec["ts"], float) and rec["worker"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_cli_refuses_an_unknown_level_or_format_by_name(tmp_path: Path) -> None:
    for flag, value in (("--loglevel", "loud"), ("--log-format", "xml")):
        out = subprocess.run(
            [sys.executable, "-m", "headway", "worker", "-A", "nowhere:app", flag, value],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode != 0
        assert f'"{value}"' in out.stderr, out.stderr
