"""The process pool and time limits, with real child processes.

Each test writes its app as a module of its own (the children import it, as
they would a project's), on the broker the test names through environment
variables the children inherit. Waits are on results, never on sleeps; each
negative check ("the child is gone", "the run did not finish") has its
positive control beside it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import headway

from conftest import RedisServer

ROOT = Path(__file__).resolve().parent.parent

BODIES = """
import ctypes, os, time
import headway

kind, url = os.environ["PP_KIND"], os.environ.get("PP_URL", "")
if kind == "memory":
    app = headway.App("memory://")
elif kind == "celery":
    app = headway.App(headway.RedisBroker.celery(url))
else:
    lease = float(os.environ.get("PP_LEASE", "30"))
    app = headway.App(headway.RedisBroker(url, prefix=os.environ["PP_PREFIX"], lease=lease))

@app.task(name="pid")
def pid():
    return os.getpid()

@app.task(name="nap")
def nap(s):
    time.sleep(s)
    return os.getpid()

@app.task(name="fail")
def fail():
    raise ValueError("bad input")

@app.task(name="progress", bind=True)
def progress(ctx, gate):
    ctx.update_state("PROGRESS", {"pid": os.getpid()})
    while not os.path.exists(gate):
        time.sleep(0.01)
    return "done"

@app.task(name="bad_progress", bind=True)
def bad_progress(ctx):
    try:
        ctx.update_state("SUCCESS", {})
    except ValueError as e:
        return str(e)
    return "stored"

if os.environ.get("PP_HARD") == "1":
    @app.task(name="spin", time_limit=1)
    def spin():
        while True:
            pass

@app.task(name="soft_sleep", soft_time_limit=0.5)
def soft_sleep():
    try:
        time.sleep(30)
    except headway.SoftTimeLimitExceeded:
        return "cleaned up"
    return "slept"

@app.task(name="soft_spin", soft_time_limit=0.5)
def soft_spin():
    try:
        while True:
            pass
    except headway.SoftTimeLimitExceeded:
        return "cleaned up"

@app.task(name="soft_uncaught", soft_time_limit=0.3)
def soft_uncaught():
    while True:
        pass

@app.task(name="exit")
def exit_():
    os._exit(1)

@app.task(name="segfault")
def segfault():
    ctypes.string_at(0)

@app.task(name="exit_once", acks_late=True, reject_on_worker_lost=True)
def exit_once(marker):
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return "second time"

@app.task(name="nap_logged", acks_late=True)
def nap_logged(path, s):
    with open(path, "a") as f:
        f.write(f"child {os.getpid()}\\n")
    time.sleep(s)
    return "done"

@app.task(name="nap_noted")
def nap_noted(path, s):
    with open(path, "a") as f:
        f.write(f"start {os.getpid()}\\n")
    time.sleep(s)
    return os.getpid()

@app.task(name="unlimited_spin")
def unlimited_spin():
    try:
        while True:
            pass
    except headway.SoftTimeLimitExceeded:
        return "soft from the worker"

@app.task(name="limits", bind=True, soft_time_limit=2.5)
def limits(ctx):
    return [ctx.soft_time_limit, ctx.time_limit]

@app.task(name="hold")
def hold(path, n):
    import random
    data = [random.random() for _ in range(n)]
    t0 = time.monotonic()
    with open(path, "w") as f:
        f.write("sorting")
    data.sort()  # one C call: this process's GIL is held throughout
    return [os.getpid(), t0, time.monotonic()]

@app.task(name="peek")
def peek(path):
    while not os.path.exists(path):
        time.sleep(0.001)
    time.sleep(0.05)  # the sort has begun; to go on, this needs the GIL
    return [os.getpid(), time.monotonic()]
"""


def make_module(
    tmp: Path,
    kind: str,
    server: RedisServer | None,
    monkeypatch: pytest.MonkeyPatch,
    hard: bool = True,
) -> ModuleType:
    """The app module, imported here and importable by the children; with
    `hard`, it has a task with a hard time limit (a threads worker refuses)."""
    name = f"ppapp_{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("PP_HARD", "1" if hard else "0")
    (tmp / f"{name}.py").write_text(textwrap.dedent(BODIES))
    monkeypatch.setenv("PP_KIND", kind)
    if server is not None:
        base = server.url.rsplit("/", 1)[0]
        if kind == "celery":
            db = 17
            assert server.command("FLUSHDB", db=db) == b"+OK"
            monkeypatch.setenv("PP_URL", f"{base}/{db}")
        else:
            monkeypatch.setenv("PP_URL", server.url)
            monkeypatch.setenv("PP_PREFIX", f"p{uuid.uuid4().hex[:8]}:")
    monkeypatch.syspath_prepend(str(tmp))
    import importlib

    return importlib.import_module(name)


@pytest.fixture
def workers() -> Iterator[list[headway.Worker]]:
    started: list[headway.Worker] = []
    yield started
    for w in started:
        w.stop(2.0)


def start(mod: ModuleType, workers: list[headway.Worker], **kw: object) -> headway.Worker:
    w = mod.app.worker(**{"concurrency": 2, "pool": "process", **kw})
    w.start()
    workers.append(w)
    return w


def send(mod: ModuleType, name: str, *args: object) -> headway.Handle:
    return mod.app.send(name, list(args))


def failed(h: headway.Handle, limit: float = 20.0) -> headway.TaskFailed:
    with pytest.raises(headway.TaskFailed) as e:
        h.get(timeout=limit)
    return e.value


@pytest.fixture(params=["memory", "redis", "celery"])
def kind(request: pytest.FixtureRequest) -> tuple[str, RedisServer | None]:
    server = request.getfixturevalue("redis_server") if request.param != "memory" else None
    return request.param, server


def test_runs_go_to_children_on_every_broker(
    kind: tuple[str, RedisServer | None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: list[headway.Worker]
) -> None:
    mod = make_module(tmp_path, kind[0], kind[1], monkeypatch)
    w = start(mod, workers)
    assert w.pool == "process"
    a, b = send(mod, "nap", 0.3), send(mod, "nap", 0.3)
    pa, pb = a.get(timeout=20), b.get(timeout=20)
    assert pa != pb, "two runs at once went to one child"
    assert os.getpid() not in (pa, pb), "a run went to the parent"
    assert sorted(w.child_pids) == sorted([pa, pb])
    e = failed(send(mod, "fail"))
    assert "ValueError: bad input" in str(e)


def test_the_default_prefetch_is_four_per_slot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A process-pool child has two slots (its run and one on deck), so the
    default prefetch is concurrency × 8; threads keep concurrency × 4."""
    mod = make_module(tmp_path, "memory", None, monkeypatch, hard=False)
    assert mod.app.worker(concurrency=2, pool="process").prefetch == 16
    assert mod.app.worker(concurrency=2, pool="threads").prefetch == 8
    assert mod.app.worker(concurrency=2, pool="process", prefetch=5).prefetch == 5


def test_a_hard_time_limit_kills_the_child_and_the_next_run_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: list[headway.Worker]
) -> None:
    mod = make_module(tmp_path, "memory", None, monkeypatch)
    start(mod, workers, concurrency=1)
    before = send(mod, "pid").get(timeout=20)
    t = time.monotonic()
    e = failed(send(mod, "spin"))
    assert "TimeLimitExceeded" in str(e)
    assert time.monotonic() - t < 3.0
    after = send(mod, "pid").get(timeout=20)
    assert after != before, "the spinning child was not replaced"


def test_a_soft_time_limit_raises_inside_the_body_and_its_cleanup_is_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: list[headway.Worker]
) -> None:
    mod = make_module(tmp_path, "memory", None, monkeypatch)
    start(mod, workers)
    t = time.monotonic()
    # A blocking call is ended in the child, not only pure-Python code.
    assert send(mod, "soft_sleep").get(timeout=20) == "cleaned up"
    assert time.monotonic() - t < 5.0
    assert send(mod, "soft_spin").get(timeout=20) == "cleaned up"
    e = failed(send(mod, "soft_uncaught"))
    assert "SoftTimeLimitExceeded" in str(e)


def test_the_workers_limits_apply_to_tasks_that_set_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: list[headway.Worker]
) -> None:
    mod = make_module(tmp_path, "memory", None, monkeypatch)
    start(mod, workers, concurrency=1, soft_time_limit=0.4)
    assert send(mod, "unlimited_spin").get(timeout=20) == "soft from the worker"
    w = workers.pop()
    w.stop(2.0)
    start(mod, workers, concurrency=1, time_limit=1.5)
    t = time.monotonic()
    assert "TimeLimitExceeded" in str(failed(send(mod, "unlimited_spin")))
    assert time.monotonic() - t < 4.0
    # The body reads its limits: its task's soft one, the worker's hard one.
    assert send(mod, "limits").get(timeout=20) == [2.5, 1.5]
    # A task's own soft limit (0.5 s) comes before the worker's hard one.
    assert send(mod, "soft_sleep").get(timeout=20) == "cleaned up"


def test_the_soft_limit_on_the_threads_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: list[headway.Worker]
) -> None:
    mod = make_module(tmp_path, "memory", None, monkeypatch, hard=False)
    w = mod.app.worker(concurrency=2, pool="threads")
    w.start()
    workers.append(w)
    assert send(mod, "soft_spin").get(timeout=20) == "cleaned up"
    e = failed(send(mod, "soft_uncaught"))
    assert "SoftTimeLimitExceeded" in str(e)
    # The thread serves the next body unharmed (no exception left pending).
    assert send(mod, "pid").get(timeout=20) == os.getpid()


def test_a_hard_limit_on_the_threads_pool_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mod = make_module(tmp_path, "memory", None, monkeypatch)
    with pytest.raises(ValueError, match="process pool"):
        mod.app.worker(pool="threads")
    app = headway.App("memory://")
    with pytest.raises(ValueError, match="time_limit.*process pool"):
        app.worker(time_limit=5)
    with pytest.raises(ValueError, match="pool"):
        app.worker(pool="forks")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_tasks_per_child"):
        mod.app.worker(max_tasks_per_child=0, pool="process")
    with pytest.raises(ValueError, match="max_memory_per_child.*process pool"):
        app.worker(max_memory_per_child=1000)
    # An app the children could not import is refused up front.
    with pytest.raises(ValueError, match="top level of a module"):
        app.worker(pool="process")


def test_children_are_recycled_after_max_tasks_per_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: list[headway.Worker]
) -> None:
    mod = make_module(tmp_path, "memory", None, monkeypatch)
    start(mod, workers, concurrency=1, max_tasks_per_child=2)
    pids = [send(mod, "pid").get(timeout=20) for _ in range(4)]
    assert pids[0] == pids[1] and pids[2] == pids[3]
    assert pids[1] != pids[2], pids


def test_a_child_over_its_memory_is_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: list[headway.Worker]
) -> None:
    mod = make_module(tmp_path, "memory", None, monkeypatch)
    # Any Python process holds more than 1 MiB: replaced after every run.
    start(mod, workers, concurrency=1, max_memory_per_child=1024)
    pids = [send(mod, "pid").get(timeout=20) for _ in range(3)]
    assert len(set(pids)) == 3, pids
    # Positive control: a roomy limit keeps the child.
    w = workers.pop()
    w.stop(2.0)
    start(mod, workers, concurrency=1, max_memory_per_child=10_000_000)
    pids = [send(mod, "pid").get(timeout=20) for _ in range(3)]
    assert len(set(pids)) == 1, pids


@pytest.mark.parametrize("name", ["exit", "segfault"])
def test_a_child_that_dies_fails_that_run_and_the_next_one_runs(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: list[headway.Worker]
) -> None:
    mod = make_module(tmp_path, "memory", None, monkeypatch)
    start(mod, workers, concurrency=1)
    e = failed(send(mod, name))
    assert "WorkerLostError" in str(e)
    assert ("exitcode 1" if name == "exit" else "SIGSEGV") in str(e)
    assert isinstance(send(mod, "pid").get(timeout=20), int)


def test_reject_on_worker_lost_redelivers_the_run(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: list[headway.Worker]
) -> None:
    mod = make_module(tmp_path, "redis", redis_server, monkeypatch)
    start(mod, workers, concurrency=1)
    marker = tmp_path / "died-once"
    assert send(mod, "exit_once", str(marker)).get(timeout=30) == "second time"
    assert marker.exists(), "the first attempt never ran"


def test_the_parent_keeps_the_lease_while_a_child_runs_for_long(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: list[headway.Worker]
) -> None:
    """A 1 s lease, a run of 4 s in a child: the parent keeps the claim
    alive, so a second worker on the queue never recovers and reruns it."""
    monkeypatch.setenv("PP_LEASE", "1.0")
    mod = make_module(tmp_path, "redis", redis_server, monkeypatch)
    start(mod, workers, concurrency=1, prefetch=1)
    log = tmp_path / "runs.log"
    other = headway.App(
        headway.RedisBroker(os.environ["PP_URL"], prefix=os.environ["PP_PREFIX"], lease=1.0)
    )

    @other.task(name="nap_logged", acks_late=True)
    def rerun(path: str, s: float) -> str:
        with open(path, "a") as f:
            f.write("other worker\n")
        return "rerun"

    @other.task(name="pid")
    def probe() -> int:
        return os.getpid()

    h = send(mod, "nap_logged", str(log), 4.0)
    while not log.exists():
        time.sleep(0.02)
    # The second worker starts once the run is in the child.
    w2 = other.worker(concurrency=2)
    w2.start()
    workers.append(w2)
    # Positive control: the other worker is live and takes work meanwhile.
    assert other.send("pid", []).get(timeout=20) == os.getpid()
    assert h.get(timeout=30) == "done"
    assert log.read_text().splitlines()[0].startswith("child ")
    assert "other worker" not in log.read_text(), "the claim lapsed and ran twice"


def test_a_cpu_bound_body_uses_every_core(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: list[headway.Worker]
) -> None:
    """A body holding the GIL (one long C call) does not stop another run: on
    the process pool the other run goes on during it, in another process. The
    threads pool is the positive control: there the other run waits until the
    call returns. Order is measured, not speed, so a busy machine cannot flip
    it (a slower sort only widens the window). The speed that follows from
    it (the process pool ÷ the threads pool on a CPU-bound body, 2.18× on
    two cores) is measured in bench/procs, where nothing else runs beside
    it; timed here, on a shared machine, it failed whenever a neighbour
    held a core."""
    mod = make_module(tmp_path, "memory", None, monkeypatch, hard=False)
    import random

    n = 200_000
    data = [random.random() for _ in range(n)]
    t = time.perf_counter()
    data.sort()
    n = max(n, int(n * 0.8 / max(time.perf_counter() - t, 1e-6)))  # a ~0.8 s sort

    def overlap(pool: str) -> tuple[float, bool]:
        w = mod.app.worker(concurrency=2, pool=pool)
        w.start()
        workers.append(w)
        send(mod, "pid").get(timeout=20)  # children up first
        mark = tmp_path / f"{pool}.mark"
        h = send(mod, "hold", str(mark), n)
        p = send(mod, "peek", str(mark))
        hold_pid, began, ended = h.get(timeout=60)
        peek_pid, peeked = p.get(timeout=60)
        workers.remove(w)
        w.stop(2.0)
        # Seconds before the sort's end that the other run went on.
        return ended - peeked, hold_pid != peek_pid

    ahead, apart = overlap("process")
    assert apart, "the two runs shared a child"
    assert ahead > 0.3, f"the other run went on only {ahead:.3f} s before the sort ended"
    ahead, apart = overlap("threads")
    assert not apart
    assert ahead < 0.3, f"on threads the other run went on {ahead:.3f} s before the sort ended"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" not in f.read()
    except FileNotFoundError:
        return False


def cli_worker(mod: ModuleType, tmp: Path, *flags: str) -> tuple[subprocess.Popen[str], list[str]]:
    """`headway worker -A <mod>:app <flags>` in a process of its own, once it
    printed `ready`; answers it and the lines it printed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "headway", "worker", "-A", f"{mod.__name__}:app", *flags],
        cwd=tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp), *sys.path])},
    )
    assert proc.stdout is not None
    lines: list[str] = []
    while "ready" not in lines:
        line = proc.stdout.readline()
        if not line:
            proc.kill()
            raise AssertionError(f"the worker ended: {lines}")
        lines.append(line.strip())
    return proc, lines


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_a_terminate_from_another_process_stops_the_run_in_its_child(
    sig: str, redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mod = make_module(tmp_path, "redis", redis_server, monkeypatch)
    proc, _ = cli_worker(mod, tmp_path, "-P", "prefork", "-c", "1")
    try:
        first = send(mod, "pid").get(timeout=30)
        log = tmp_path / "runs.log"
        h = send(mod, "nap_logged", str(log), 60.0)
        while not log.exists():
            time.sleep(0.02)
        t = time.monotonic()
        h.revoke(terminate=True, signal=sig)
        with pytest.raises(headway.Revoked):
            h.get(timeout=10)
        assert time.monotonic() - t < 2.0
        deadline = time.monotonic() + 2.0
        while _alive(first) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(first), "the terminated child outlived the signal by 2 s"
        # Positive control: the worker goes on, in a new child.
        assert send(mod, "pid").get(timeout=30) not in (first, proc.pid)
    finally:
        proc.terminate()
        proc.wait(20)


def test_kill_9_of_the_parent_leaves_no_child(redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = make_module(tmp_path, "redis", redis_server, monkeypatch)
    proc, lines = cli_worker(mod, tmp_path, "--pool", "process", "-c", "2")
    try:
        assert any("pool process" in x for x in lines), lines
        a, b = send(mod, "nap", 0.3), send(mod, "nap", 0.3)
        pids = {a.get(timeout=30), b.get(timeout=30)}
        assert len(pids) == 2 and proc.pid not in pids
        assert all(_alive(p) for p in pids), "positive control: the children run"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 5.0
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(p) for p in pids), "a child outlived its parent"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_kill_9_loses_the_run_in_a_child_and_not_the_one_on_deck(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: list[headway.Worker]
) -> None:
    """The process pool takes a child's next run while the child is busy
    (on deck: checked, not acked) and acks it only as the child takes it.
    A parent killed -9 then loses the run its child had started (early
    ack, as documented) but not the one on deck: that one is recovered and
    runs on another worker."""
    import redis as redis_py

    monkeypatch.setenv("PP_LEASE", "1.0")
    mod = make_module(tmp_path, "redis", redis_server, monkeypatch, hard=False)
    proc, _ = cli_worker(mod, tmp_path, "--pool", "process", "-c", "1")
    try:
        started, deck = tmp_path / "started.log", tmp_path / "deck.log"
        a = send(mod, "nap_noted", str(started), 60.0)
        while not started.exists():
            time.sleep(0.02)
        b = send(mod, "nap_noted", str(deck), 0.0)
        # b is claimed (no message left ready) and waits on deck.
        r = redis_py.Redis.from_url(os.environ["PP_URL"])
        prefix = os.environ["PP_PREFIX"]
        deadline = time.monotonic() + 20
        while sum(r.llen(k) for k in r.scan_iter(f"{prefix}*ready:*")) > 0:
            assert time.monotonic() < deadline, "the worker never claimed the second run"
            time.sleep(0.02)
        assert not deck.exists(), "the run on deck ran while its child was busy"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        # Another worker recovers the dead one's claims once its lease lapses.
        w2 = mod.app.worker(concurrency=2)
        w2.start()
        workers.append(w2)
        assert b.get(timeout=30) == os.getpid(), "the run on deck was lost"
        # Positive control: w2 is live and takes new work; the started run
        # (acked as its child took it) is not run again.
        assert send(mod, "pid").get(timeout=30) == os.getpid()
        assert started.read_text().count("start") == 1, started.read_text()
        assert a.state() != "SUCCESS"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_a_custom_state_recorded_in_a_child_is_stored_by_the_parent(
    kind: tuple[str, RedisServer | None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: list[headway.Worker]
) -> None:
    """A body in a child records PROGRESS: the child sends it to its parent,
    which stores it while the body still runs; the final state replaces it."""
    mod = make_module(tmp_path, kind[0], kind[1], monkeypatch, hard=False)
    start(mod, workers)
    gate = tmp_path / "gate"
    h = send(mod, "progress", str(gate))
    deadline = time.monotonic() + 20
    while h.state() != "PROGRESS":
        assert time.monotonic() < deadline, f"never PROGRESS: {h.state()}"
        time.sleep(0.02)
    info = h.info()
    assert info["pid"] != os.getpid(), "the body ran in the parent"
    gate.write_text("go")
    assert h.get(timeout=20) == "done"
    assert h.state() == "SUCCESS" and h.info() == "done"
    # A bad name is refused in the child, naming why, as on threads.
    assert "ready state" in send(mod, "bad_progress").get(timeout=20)
