"""Whole processes: Ctrl-C on a blocking ``run()``, a process that must exit
after ``stop()`` (and at exit without one), a forked child, the CLI, the
demo — and, on Redis, workers killed with SIGKILL whose messages another
worker recovers, and two workers sharing a queue.

Each child gets a time limit; a child that hangs fails the test instead of
hanging the suite."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

import headway

from conftest import RedisServer

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 20.0


def write(tmp: Path, name: str, body: str) -> Path:
    p = tmp / name
    p.write_text(textwrap.dedent(body))
    return p


class Child:
    """A Python child process whose stdout is read line by line."""

    def __init__(self, args: list[str], cwd: Path | None = None, env: dict[str, str] | None = None):
        self.proc = subprocess.Popen(
            args,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.lines: list[str] = []

    def until(self, text: str, limit: float = LIMIT) -> list[str]:
        deadline = time.monotonic() + limit
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                err = self.proc.stderr.read() if self.proc.stderr else ""
                raise AssertionError(f"child ended before {text!r}: {self.lines} {err}")
            self.lines.append(line.rstrip("\n"))
            if text in line:
                return self.lines
        raise AssertionError(f"no {text!r} within {limit} s: {self.lines}")

    def finish(self, limit: float = LIMIT) -> tuple[int, str, str]:
        try:
            out, err = self.proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            raise AssertionError(f"child did not exit within {limit} s: {self.lines} {out} {err}")
        self.lines.extend(out.splitlines())
        return self.proc.returncode, "\n".join(self.lines), err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def python(script: Path, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> Child:
    return Child([sys.executable, str(script), *args], cwd=cwd, env=env)


def test_ctrl_c_stops_a_blocking_run_gracefully(tmp_path: Path) -> None:
    script = write(
        tmp_path,
        "run.py",
        """
        import os, sys, time, headway
        app = headway.App()
        go = sys.argv[1]

        @app.task(name="slow")
        def slow():
            print("body started", flush=True)
            # Runs until the test, having sent the Ctrl-C, says go: the
            # interrupt lands while the body is in progress.
            deadline = time.monotonic() + 20
            while not os.path.exists(go) and time.monotonic() < deadline:
                time.sleep(0.01)
            print("body finished", flush=True)
            return 1

        w = app.worker()
        h = slow.delay()
        try:
            w.run()
        except KeyboardInterrupt:
            print("interrupted; state", h.state(), flush=True)
            sys.exit(0)
        print("run returned without an interrupt", flush=True)
        sys.exit(1)
        """,
    )
    go = tmp_path / "go"
    child = python(script, str(go))
    try:
        child.until("body started")
        sent = time.monotonic()
        child.proc.send_signal(signal.SIGINT)
        go.touch()
        code, out, err = child.finish(limit=5)
        assert time.monotonic() - sent < 5
    finally:
        child.kill()
    assert code == 0, err
    # The run in progress was given its grace and finished before run() raised.
    assert out.splitlines()[-2:] == ["body finished", "interrupted; state SUCCESS"]


@pytest.mark.parametrize(
    "runner",
    [
        "headway.App().beat()",
        "headway.schedule.Scheduler()",
    ],
)
def test_ctrl_c_stops_a_blocking_beat_or_scheduler_and_raises(tmp_path: Path, runner: str) -> None:
    script = write(
        tmp_path,
        "run.py",
        f"""
        import sys, headway, headway.schedule
        r = {runner}
        print("running", flush=True)
        try:
            r.run()
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(0)
        print("run returned without an interrupt", flush=True)
        sys.exit(1)
        """,
    )
    child = python(script)
    try:
        child.until("running")
        # Positive control: it is still running (no interrupt yet).
        time.sleep(0.3)
        assert child.proc.poll() is None, child.lines
        sent = time.monotonic()
        child.proc.send_signal(signal.SIGINT)
        code, out, err = child.finish(limit=5)
        assert time.monotonic() - sent < 5
    finally:
        child.kill()
    assert code == 0, err
    assert out.splitlines()[-1] == "interrupted"


def test_ctrl_c_interrupts_a_blocking_get(tmp_path: Path) -> None:
    script = write(
        tmp_path,
        "get.py",
        """
        import sys, threading, time, headway
        app = headway.App()
        h = app.send_task("nobody.runs.this")
        main = threading.main_thread().ident

        def blocking_get():
            h.get()

        def announce():
            # "waiting" once the main thread is inside blocking_get (then in
            # h.get(): nothing else runs there).
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                f = sys._current_frames().get(main)
                while f is not None and f.f_code.co_name != "blocking_get":
                    f = f.f_back
                if f is not None:
                    print("waiting", flush=True)
                    return
                time.sleep(0.005)

        threading.Thread(target=announce, daemon=True).start()
        try:
            blocking_get()
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        """,
    )
    child = python(script)
    try:
        child.until("waiting")
        sent = time.monotonic()
        child.proc.send_signal(signal.SIGINT)
        code, out, err = child.finish(limit=5)
        assert time.monotonic() - sent < 2
    finally:
        child.kill()
    assert code == 0, err
    assert out.splitlines()[-1] == "interrupted"


def test_the_process_exits_after_stop_and_at_exit(tmp_path: Path) -> None:
    stopped = write(
        tmp_path,
        "stopped.py",
        """
        import asyncio, headway
        app = headway.App()

        @app.task(name="s")
        def s(x):
            return x

        @app.task(name="a")
        async def a(x):
            await asyncio.sleep(0)
            return x

        w = app.worker()
        w.start()
        print(s.delay(1).get(timeout=10), a.delay(2).get(timeout=10), flush=True)
        w.stop()
        print("stopped", flush=True)
        """,
    )
    forgotten = write(
        tmp_path,
        "forgotten.py",
        """
        import headway
        app = headway.App()

        @app.task(name="s")
        def s(x):
            return x

        app.worker().start()
        print(s.delay(3).get(timeout=10), flush=True)
        # No stop(): the atexit hook stops the worker.
        """,
    )
    for script, expected in ((stopped, "1 2\nstopped"), (forgotten, "3")):
        start = time.monotonic()
        out = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=LIMIT
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == expected
        assert time.monotonic() - start < 10


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_fails_loudly(tmp_path: Path) -> None:
    script = write(
        tmp_path,
        "fork.py",
        """
        import os, headway
        app = headway.App()

        @app.task(name="t")
        def t():
            return 1

        t.delay()  # the runtime now lives in this (the parent) process
        pid = os.fork()
        if pid == 0:
            try:
                t.delay()
            except RuntimeError as e:
                print("child:", e, flush=True)
                os._exit(0)
            os._exit(3)
        _, status = os.waitpid(pid, 0)
        print("child exit", os.waitstatus_to_exitcode(status), flush=True)
        """,
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=LIMIT)
    assert out.returncode == 0, out.stderr
    assert "child: headway's runtime was started in a parent process" in out.stdout
    assert "'spawn' or 'forkserver'" in out.stdout
    assert "child exit 0" in out.stdout


TINY = """
import os, headway

broker = os.environ.get("TINY_BROKER", "memory://")
if broker.startswith("redis"):
    broker = headway.RedisBroker(broker, prefix=os.environ["TINY_PREFIX"])
app = headway.App(broker)

@app.task(name="tiny.add")
def add(x, y):
    return x + y

@app.task(name="tiny.hello", queue="extra")
def hello(name):
    return f"hello {name}"
"""


def _cli(*args: str) -> list[str]:
    exe = shutil.which("headway", path=str(Path(sys.executable).parent))
    return [exe, *args] if exe else [sys.executable, "-m", "headway", *args]


def test_cli_worker_on_a_tiny_app(tmp_path: Path) -> None:
    write(tmp_path, "tinyapp.py", TINY)
    child = Child(
        _cli("worker", "-A", "tinyapp:app", "-c", "2", "-Q", "default,extra"), cwd=tmp_path
    )
    try:
        lines = child.until("ready")
        assert "queues default,extra, concurrency 2, prefetch 8" in lines[0]
        assert lines[1] == "tasks: tiny.add, tiny.hello"
        child.proc.send_signal(signal.SIGTERM)
        code, out, err = child.finish(limit=5)
    finally:
        child.kill()
    assert code == 0, err
    assert out.splitlines()[-1].endswith("stopped after settling 0")


def test_cli_reads_the_node_forms_too_and_names_a_bad_value(tmp_path: Path) -> None:
    """The words are read by the core's parser, the Node CLI's too: the app
    as the first word, ``-c1``, ``--grace`` in seconds; a bad value is named
    the same way in both, with the command's usage after it."""
    write(tmp_path, "tinyapp.py", TINY)
    child = Child(_cli("worker", "tinyapp", "-c1", "--grace=0.5"), cwd=tmp_path)
    try:
        lines = child.until("ready")
        assert "app tinyapp, queues default, concurrency 1, prefetch 4" in lines[0]
        child.proc.send_signal(signal.SIGTERM)
        code, _, err = child.finish(limit=5)
    finally:
        child.kill()
    assert code == 0, err
    for args, said in (
        (("-c", "many"), '-c must be a whole number, not "many"'),
        (("--time-limit", "-1"), '--time-limit must be a number of seconds, not "-1"'),
        (("--nope",), 'unknown option "--nope"'),
    ):
        out = subprocess.run(
            _cli("worker", "-A", "tinyapp", *args), cwd=tmp_path, capture_output=True, text=True, timeout=LIMIT
        )
        assert out.returncode == 2, out.stderr
        assert out.stderr.startswith(f"headway: worker: {said}\nusage: headway worker -A module:app"), out.stderr
    help_ = subprocess.run(_cli("--help"), cwd=tmp_path, capture_output=True, text=True, timeout=LIMIT)
    assert help_.returncode == 0
    assert "headway admin -A module:app" in help_.stdout and "headway demo" in help_.stdout


def test_cli_refuses_a_bad_app(tmp_path: Path) -> None:
    write(tmp_path, "notapp.py", "app = 42\n")
    out = subprocess.run(
        _cli("worker", "-A", "notapp:app"), cwd=tmp_path, capture_output=True, text=True, timeout=LIMIT
    )
    assert out.returncode != 0
    assert "is not a headway.App" in out.stderr
    out = subprocess.run(
        _cli("worker", "-A", "missing_module"), cwd=tmp_path, capture_output=True, text=True, timeout=LIMIT
    )
    assert out.returncode != 0 and "cannot import" in out.stderr


def test_cli_worker_runs_tasks_sent_from_another_process(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    write(tmp_path, "tinyapp.py", TINY)
    prefix = f"cli{uuid.uuid4().hex[:6]}:"
    env = {"TINY_BROKER": redis_server.url, "TINY_PREFIX": prefix}
    child = Child(_cli("worker", "-A", "tinyapp", "-Q", "default,extra"), cwd=tmp_path, env=env)
    try:
        child.until("ready")
        app = headway.App(headway.RedisBroker(redis_server.url, prefix=prefix))
        assert app.send_task("tiny.add", (2, 3)).get(timeout=LIMIT) == 5
        assert app.send_task("tiny.hello", ("ada",), queue="extra").get(timeout=LIMIT) == "hello ada"
        child.proc.send_signal(signal.SIGINT)
        code, out, err = child.finish(limit=5)
    finally:
        child.kill()
    assert code == 0, err
    assert out.splitlines()[-1].endswith("stopped after settling 2")


def test_cli_beat_runs_the_apps_beat(tmp_path: Path) -> None:
    write(
        tmp_path,
        "beatapp.py",
        """
        import headway
        app = headway.App()

        @app.task(name="b.tick")
        def tick():
            return None

        app.beat().add("tick", tick, (), headway.Every(3600))
        """,
    )
    before = time.time()
    child = Child(_cli("beat", "-A", "beatapp:app"), cwd=tmp_path)
    try:
        lines = child.until("ready")
        assert lines[0] == "headway beat: app beatapp:app, 1 entries"
        # The line is the core's (task::banner), the Node CLI's too: RFC
        # 3339, UTC, milliseconds, `Z` (not `datetime.isoformat()`'s
        # `+00:00`), an hour from the start.
        m = re.fullmatch(r"  tick: next at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)", lines[1])
        assert m, lines[1]
        due = datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp()
        assert before + 3600 - 1 <= due <= time.time() + 3600 + 1, m.group(1)
        child.proc.send_signal(signal.SIGTERM)
        code, out, err = child.finish(limit=5)
    finally:
        child.kill()
    assert code == 0, err
    assert out.splitlines()[-1] == "headway beat: stopped"


DEMO = """\
headway demo: the memory broker on a virtual clock starting 2026-01-01 00:00 UTC
tasks: demo.add, demo.charge, demo.mul, demo.square, demo.tick, demo.total
1. a worker: 4 runner threads on default
2. a retried task (retries=3, backoff=Fixed(30.0))
  00:00:00  charge('order-7') attempt 1: ConnectionError, retry in 30 s
  00:00:30  charge('order-7') attempt 2: ok
  00:00:30  -> 'charged order-7' (SUCCESS)
3. a chain: add(1, 2) | mul(10)
  00:00:30  -> 30
4. a chord: total(square(i) for i in 1..4)
  00:00:30  -> 30
5. a beat: 'heartbeat' every 60 s, three ticks
  00:01:30  beat sent heartbeat -> 'heartbeat ran at 00:01:30'
  00:02:30  beat sent heartbeat -> 'heartbeat ran at 00:02:30'
  00:03:30  beat sent heartbeat -> 'heartbeat ran at 00:03:30'
done: the worker settled 12 messages; virtual time 00:03:30
"""


def test_headway_demo_prints_the_same_every_run() -> None:
    for args in (_cli("demo"), [sys.executable, "-m", "headway", "demo"]):
        out = subprocess.run(args, capture_output=True, text=True, timeout=LIMIT)
        assert out.returncode == 0, out.stderr
        assert out.stdout == DEMO


# ---------------------------------------------------------------- killed workers

WORKER = """
import sys, time, headway

url, prefix, consumer, log, mode = sys.argv[1:6]
app = headway.App(headway.RedisBroker(url, consumer=consumer, prefix=prefix, lease=1.0))

@app.task(name="job", acks_late=mode != "early")
def job(i):
    with open(log, "a") as f:
        f.write(f"{consumer} {i}\\n")
    if mode == "hold":
        time.sleep(600)
    return i

w = app.worker(concurrency=2)
print("ready", flush=True)
try:
    w.run()
except KeyboardInterrupt:
    pass
"""


def _runs(log: Path) -> list[tuple[str, int]]:
    if not log.exists():
        return []
    return [(a, int(b)) for a, b in (line.split() for line in log.read_text().splitlines())]


def test_a_killed_worker_loses_nothing(tmp_path: Path, redis_server: RedisServer) -> None:
    script = write(tmp_path, "worker.py", WORKER)
    log = tmp_path / "runs.log"
    prefix = f"k9{uuid.uuid4().hex[:6]}:"
    broker = headway.RedisBroker(redis_server.url, prefix=prefix)
    app = headway.App(broker)
    handles = [app.send_task("job", (i,)) for i in range(6)]
    doomed = python(script, redis_server.url, prefix, "doomed", str(log), "hold")
    rescuer: Child | None = None
    try:
        doomed.until("ready")
        # Killed once it holds all six (the held list is the broker's word
        # for it): two running (concurrency 2), four prefetched.
        held = f"{prefix}{{default}}:held:doomed"
        deadline = time.monotonic() + LIMIT
        while not (len(_runs(log)) == 2 and redis_server.command("LLEN", held) == b":6"):
            assert time.monotonic() < deadline, (_runs(log), redis_server.command("LLEN", held))
            time.sleep(0.02)
        doomed.proc.send_signal(signal.SIGKILL)
        doomed.proc.wait(10)
        # Once its lease (1 s) runs out, what it held is handed back.
        recovered = 0
        deadline = time.monotonic() + LIMIT
        while recovered == 0:
            assert time.monotonic() < deadline, "nothing was recovered"
            recovered = broker.recover()
            time.sleep(0.05)
        assert recovered == 6
        rescuer = python(script, redis_server.url, prefix, "rescuer", str(log), "late")
        rescuer.until("ready")
        assert [h.get(timeout=LIMIT) for h in handles] == list(range(6))
    finally:
        doomed.kill()
        if rescuer is not None:
            rescuer.kill()
    runs = _runs(log)
    per = Counter(i for _, i in runs)
    assert sorted(per) == list(range(6))  # none lost
    assert all(n <= 2 for n in per.values())  # each ran at most twice
    assert {i for who, i in runs if who == "rescuer"} == set(range(6))


def test_two_workers_on_one_queue_run_each_message_once(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    script = write(tmp_path, "worker.py", WORKER)
    log = tmp_path / "runs.log"
    prefix = f"two{uuid.uuid4().hex[:6]}:"
    workers = [
        python(script, redis_server.url, prefix, f"w{n}", str(log), "early") for n in (1, 2)
    ]
    try:
        for w in workers:
            w.until("ready")
        app = headway.App(headway.RedisBroker(redis_server.url, prefix=prefix))
        handles = [app.send_task("job", (i,)) for i in range(40)]
        assert [h.get(timeout=LIMIT) for h in handles] == list(range(40))
        for w in workers:
            w.proc.send_signal(signal.SIGINT)
        for w in workers:
            code, _, err = w.finish(limit=10)
            assert code == 0, err
    finally:
        for w in workers:
            w.kill()
    per = Counter(i for _, i in _runs(log))
    assert per == Counter(range(40))
