"""One Celery project, run three ways, gives the same results:

- ``celery``: a real Celery worker (``celery -A proj worker``) and Celery's client;
- ``served``: ``headway worker -A proj:app`` serving the same Celery app
  (the first step off Celery: no code changed), Celery's client;
- ``dropin``: the same files with ``celery`` imports swapped for
  ``headway.celery`` (the second step), headway's worker and client; the
  project then imports no Celery at all (checked), and runs in a fresh
  virtualenv where Celery is not installed.

Each runs on its own Redis database, Celery's layout; the project's state
(attempt counters) is kept in files, since the worker is another process.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import RedisServer

WAIT = 60.0

PROJECT = '''
import os
from celery import Celery, chain, chord, group, signature
from celery.exceptions import Reject, SoftTimeLimitExceeded

URL = os.environ["THREE_URL"]
app = Celery("proj", broker=URL, backend=URL)
app.conf.task_routes = {"proj.routed.*": {"queue": "routed"}}
STATE = os.environ["THREE_STATE"]


def bump(key):
    path = os.path.join(STATE, key)
    n = int(open(path).read()) + 1 if os.path.exists(path) else 1
    with open(path, "w") as f:
        f.write(str(n))
    return n


@app.task(name="proj.add")
def add(x, y):
    return x + y


@app.task(name="proj.tsum")
def tsum(xs):
    return sum(xs)


@app.task(name="proj.who", bind=True)
def who(self, tag):
    r = self.request
    return {"task": r.task, "args": list(r.args), "retries": r.retries,
            "routing_key": r.delivery_info.get("routing_key"), "tag": tag,
            "root_is_self": r.root_id == r.id}


@app.task(name="proj.bound_retry", bind=True, max_retries=3)
def bound_retry(self, key):
    if bump(key) < 3:
        raise self.retry(exc=IOError("not yet"), countdown=0.05)
    return ["done", self.request.retries]


@app.task(name="proj.give_up", bind=True, max_retries=1)
def give_up(self):
    raise self.retry(exc=KeyError("gone"), countdown=0.05)


@app.task(name="proj.auto", autoretry_for=(IOError,), max_retries=4,
          retry_backoff=0.05, retry_backoff_max=0.2, retry_jitter=False)
def auto(key):
    n = bump(key)
    if n < 3:
        raise IOError("flaky")
    return n


@app.task(name="proj.plain_error", max_retries=5)
def plain_error(key):
    bump(key)
    raise ValueError("a bug is not retried")


@app.task(name="proj.progress", bind=True)
def progress(self, gate):
    self.update_state(state="PROGRESS", meta={"done": 1, "of": 2})
    while not os.path.exists(gate):
        import time
        time.sleep(0.01)
    return "finished"


@app.task(name="proj.routed.ping")
def routed_ping():
    return "pong"


@app.task(name="proj.echo")
def echo(*args):
    return list(args)


@app.task(name="proj.slow", soft_time_limit=0.5)
def slow():
    # Busy in Python: the limit fires at once on every pool (a sleep in C
    # would see it only when it returns on a threads pool).
    import time
    deadline = time.monotonic() + 10
    try:
        while time.monotonic() < deadline:
            pass
    except SoftTimeLimitExceeded:
        return "soft limit"
    return "ran out"


@app.task(name="proj.header", bind=True)
def header(self):
    return getattr(self.request, "tenant", None)


@app.task(name="proj.reject")
def reject():
    raise Reject("not for me", requeue=False)


@app.task(name="proj.on_error")
def on_error(task_id):
    # One argument: Celery sends it as a task given the failed id, as headway does.
    return ["err", task_id]


@app.task(name="proj.req", bind=True)
def req(self):
    r = self.request
    return {"eta": r.eta is not None, "expires": r.expires is not None,
            "group": r.group is not None, "callbacks": len(r.callbacks or ()),
            "errbacks": len(r.errbacks or ()), "eager": bool(r.is_eager)}
'''

MODES = ["celery", "served", "dropin"]


def _failed_type(r: Any) -> str:
    """The failure's type name, from Celery's rebuilt exception or headway's TaskFailed."""
    e = r.result
    return str(getattr(e, "type", None) or type(e).__name__)


@pytest.fixture(params=MODES)
def proj(request: pytest.FixtureRequest, redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Any, Path]]:
    mode = str(request.param)
    db = {"celery": 33, "served": 34, "dropin": 35}[mode]
    redis_server.command("FLUSHDB", db=db)
    url = f"redis://127.0.0.1:{redis_server.port}/{db}"
    state = tmp_path / "state"
    state.mkdir()
    src = textwrap.dedent(PROJECT)
    if mode == "dropin":
        src = src.replace("from celery", "from headway.celery")
    name = f"three_{mode}_{os.getpid()}_{time.monotonic_ns()}"
    (tmp_path / f"{name}.py").write_text(src)
    env = {
        **os.environ,
        "THREE_URL": url,
        "THREE_STATE": str(state),
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    monkeypatch.setenv("THREE_URL", url)
    monkeypatch.setenv("THREE_STATE", str(state))
    monkeypatch.syspath_prepend(str(tmp_path))
    if mode == "celery":
        cmd = [sys.executable, "-m", "celery", "-A", name, "worker", "-Q", "celery,routed", "-c", "2",
               "--without-heartbeat", "--without-gossip", "--without-mingle", "-l", "warning"]  # fmt: skip
    else:
        cmd = [sys.executable, "-m", "headway", "worker", "-A", f"{name}:app", "-Q", "celery,routed", "-c", "2"]
    log = open(tmp_path / "worker.log", "w")
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        mod = importlib.import_module(name)
        # Ready once a run comes back.
        assert mod.add.delay(0, 0).get(timeout=WAIT) == 0, (tmp_path / "worker.log").read_text()
        yield mode, mod, tmp_path
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


def test_results_and_the_request(proj: tuple[str, Any, Path]) -> None:
    mode, m, _ = proj
    r = m.add.delay(2, 3)
    assert r.get(timeout=WAIT) == 5
    assert r.state == "SUCCESS" and r.successful() and r.ready() and r.result == 5
    assert m.add.apply_async((1, 1), countdown=0.1).get(timeout=WAIT) == 2
    assert m.app.AsyncResult(r.id).get(timeout=WAIT) == 5
    assert m.add(4, 4) == 8
    out = m.who.delay("t").get(timeout=WAIT)
    assert out == {"task": "proj.who", "args": ["t"], "retries": 0, "routing_key": "celery",
                   "tag": "t", "root_is_self": True}, mode  # fmt: skip
    assert m.routed_ping.delay().get(timeout=WAIT) == "pong"


def test_retries_and_failures(proj: tuple[str, Any, Path]) -> None:
    mode, m, tmp = proj
    assert m.bound_retry.delay("b").get(timeout=WAIT) == ["done", 2]
    assert m.auto.delay("a").get(timeout=WAIT) == 3
    g = m.give_up.delay()
    with pytest.raises(Exception):
        g.get(timeout=WAIT)
    assert g.state == "FAILURE" and _failed_type(g) == "KeyError", mode
    p = m.plain_error.delay("p")
    with pytest.raises(Exception):
        p.get(timeout=WAIT)
    assert p.state == "FAILURE" and _failed_type(p) == "ValueError"
    # Without autoretry_for a plain exception is not retried: one attempt.
    assert (tmp / "state" / "p").read_text() == "1"
    assert p.failed()


def test_canvas(proj: tuple[str, Any, Path]) -> None:
    mode, m, _ = proj
    assert m.chain(m.add.s(1, 2), m.add.s(10)).delay().get(timeout=WAIT) == 13
    assert (m.add.s(1, 1) | m.add.s(1)).delay().get(timeout=WAIT) == 3
    assert m.group(m.add.s(i, i) for i in range(4)).delay().get(timeout=WAIT) == [0, 2, 4, 6]
    assert m.chord((m.add.s(i, 1) for i in range(3)), m.tsum.s()).delay().get(timeout=WAIT) == 6
    assert m.add.starmap([(1, 2), (3, 4)]).delay().get(timeout=WAIT) == [3, 7]
    assert m.add.chunks([(i, i) for i in range(5)], 2).delay().get(timeout=WAIT) == [[0, 2], [4, 6], [8]]
    assert m.signature("proj.add", (5, 6)).delay().get(timeout=WAIT) == 11
    # A group later in a chain is given the link's result; with a task after
    # it, it is a chord (Celery's upgrade).
    assert (m.add.s(1, 2) | m.group(m.add.s(10), m.add.s(20)) | m.tsum.s()).delay().get(timeout=WAIT) == 36, mode
    assert m.chain(m.add.s(1, 1), m.chord([m.add.s(1), m.add.s(2)], m.tsum.s()), m.add.s(100)).delay().get(timeout=WAIT) == 107
    # A chain inside a group; immutable signatures; partial arguments merged.
    assert m.group(m.chain(m.add.s(1, 1), m.add.s(10)), m.add.s(5, 5)).delay().get(timeout=WAIT) == [12, 10]
    assert (m.add.s(1, 1) | m.add.si(5, 5)).delay().get(timeout=WAIT) == 10
    assert m.add.s(1).delay(2).get(timeout=WAIT) == 3
    assert m.chain(m.add.s(1), m.add.s(2)).delay(4).get(timeout=WAIT) == 7
    assert m.chord([m.add.s(1, 1)], m.add.si(0, 9)).delay().get(timeout=WAIT) == 9


def test_a_soft_time_limit_and_a_reject(proj: tuple[str, Any, Path]) -> None:
    mode, m, _ = proj
    assert m.slow.delay().get(timeout=WAIT) == "soft limit", mode
    # A reject never succeeds. Celery stores nothing for it (a waiter waits
    # on); headway records it REJECTED with its reason, so a waiter is told.
    r = m.reject.delay()
    with pytest.raises(Exception) as e:
        r.get(timeout=3.0 if mode == "celery" else WAIT)
    if mode == "celery":
        assert r.state == "PENDING", r.state
    else:
        assert "not for me" in str(e.value), mode


def test_links_and_the_request(proj: tuple[str, Any, Path]) -> None:
    mode, m, _ = proj
    uid = f"{mode}-{time.monotonic_ns()}"
    # link: sent with the result when the run succeeds; a fixed task_id to find it.
    r = m.add.apply_async((2, 3), link=m.echo.s("linked").set(task_id=f"l-{uid}"))
    assert r.get(timeout=WAIT) == 5
    assert m.app.AsyncResult(f"l-{uid}").get(timeout=WAIT) == [5, "linked"], mode
    sig = m.add.s(1, 1)
    sig.link(m.echo.s("sig").set(task_id=f"s-{uid}"))
    assert sig.delay().get(timeout=WAIT) == 2
    assert m.app.AsyncResult(f"s-{uid}").get(timeout=WAIT) == [2, "sig"]
    # link_error: sent with the failed run's id; a success link is not sent.
    f = m.plain_error.apply_async((f"e-{uid}",), link=m.echo.s().set(task_id=f"never-{uid}"),
                                  link_error=m.on_error.s().set(task_id=f"e-{uid}"))  # fmt: skip
    assert m.app.AsyncResult(f"e-{uid}").get(timeout=WAIT) == ["err", f.id], mode
    assert f.state == "FAILURE"
    assert m.app.AsyncResult(f"never-{uid}").state == "PENDING"
    # self.request tells eta, expires, group and the callbacks.
    got = m.req.apply_async(countdown=0.05, expires=60, link=m.echo.s(), link_error=m.on_error.s()).get(timeout=WAIT)
    assert got == {"eta": True, "expires": True, "group": False, "callbacks": 1, "errbacks": 1, "eager": False}, mode
    assert m.group(m.req.s(), m.req.s()).delay().get(timeout=WAIT)[1]["group"] is True
    # A custom header is a field of the request.
    assert m.header.apply_async(headers={"tenant": "t-7"}).get(timeout=WAIT) == "t-7", mode
    assert m.header.delay().get(timeout=WAIT) is None


def test_progress_with_update_state(proj: tuple[str, Any, Path]) -> None:
    mode, m, tmp = proj
    gate = tmp / "gate"
    r = m.progress.delay(str(gate))
    deadline = time.monotonic() + WAIT
    while r.state != "PROGRESS":
        assert time.monotonic() < deadline, f"never PROGRESS ({r.state}, {mode})"
        time.sleep(0.02)
    assert r.info == {"done": 1, "of": 2} and not r.ready()
    gate.write_text("go")
    assert r.get(timeout=WAIT) == "finished"
    assert r.state == "SUCCESS" and r.info == "finished"


def test_the_dropin_project_imports_no_celery(proj: tuple[str, Any, Path]) -> None:
    mode, m, tmp = proj
    code = f"import sys, {m.__name__}; print(sorted(k for k in sys.modules if k == 'celery' or k.startswith('celery.')))"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(tmp)})  # fmt: skip
    assert out.returncode == 0, out.stderr
    if mode == "dropin":
        assert out.stdout.strip() == "[]"
    else:
        # Positive control: the Celery project does import Celery.
        assert "'celery'" in out.stdout


def test_result_children_parent_date_done_and_forget(proj: tuple[str, Any, Path]) -> None:
    import datetime

    mode, m, _ = proj
    uid = f"{mode}-{time.monotonic_ns()}"
    r = m.add.apply_async((2, 3), link=m.echo.s().set(task_id=f"kid-{uid}"))
    assert r.get(timeout=WAIT) == 5
    assert m.app.AsyncResult(f"kid-{uid}").get(timeout=WAIT) == [5]
    assert f"kid-{uid}" in [c.id for c in m.app.AsyncResult(r.id).children or ()], mode
    done = m.app.AsyncResult(r.id).date_done
    assert isinstance(done, datetime.datetime), (mode, done)
    # A chain's result knows the link before it.
    c = m.chain(m.add.s(1, 1), m.add.s(10)).delay()
    assert c.get(timeout=WAIT) == 12
    assert c.parent is not None and c.parent.get(timeout=WAIT) == 2, mode
    # forget: the stored result goes; the control beside it stays.
    m.app.AsyncResult(c.parent.id).forget()
    assert m.app.AsyncResult(c.parent.id).state == "PENDING"
    assert m.app.AsyncResult(c.id).state == "SUCCESS"


def test_the_dropin_project_runs_where_celery_is_not_installed(redis_server: RedisServer, tmp_path: Path) -> None:
    """The second step, whole: the project's files with ``headway.celery``
    imports, in a fresh virtualenv holding headway and not Celery, run their
    tasks, retries, canvas and routes on headway alone."""
    import site
    import venv

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    # headway only: its installed package, by a path file, and nothing else.
    import headway

    pkg_root = Path(headway.__file__).resolve().parent.parent
    only = tmp_path / "only-headway"
    only.mkdir()
    (only / "headway").symlink_to(pkg_root / "headway")
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    (Path(purelib) / "only_headway.pth").write_text(str(only) + "\n")
    db = 40
    redis_server.command("FLUSHDB", db=db)
    url = f"redis://127.0.0.1:{redis_server.port}/{db}"
    state = tmp_path / "state"
    state.mkdir()
    (tmp_path / "proj_nocelery.py").write_text(textwrap.dedent(PROJECT).replace("from celery", "from headway.celery"))
    (tmp_path / "run_it.py").write_text(textwrap.dedent('''
        import importlib.util, sys
        assert importlib.util.find_spec("celery") is None, "celery is installed here"
        import proj_nocelery as m
        w = m.app.worker(concurrency=2)
        w.start()
        try:
            assert m.add.delay(2, 3).get(timeout=30) == 5
            assert m.bound_retry.delay("b").get(timeout=30) == ["done", 2]
            assert m.auto.delay("a").get(timeout=30) == 3
            assert (m.add.s(1, 2) | m.group(m.add.s(10), m.add.s(20)) | m.tsum.s()).delay().get(timeout=30) == 36
            assert m.routed_ping.delay().get(timeout=30) == "pong"
            assert m.slow.delay().get(timeout=30) == "soft limit"
            assert "celery" not in sys.modules
            print("RAN ON HEADWAY ALONE")
        finally:
            w.stop(5.0)
    '''))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(THREE_URL=url, THREE_STATE=str(state), PYTHONPATH=str(tmp_path))
    out = subprocess.run([str(py), "run_it.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "RAN ON HEADWAY ALONE" in out.stdout
    # Positive control: this test's own interpreter does have Celery.
    assert site.getsitepackages() and importlib.util.find_spec("celery") is not None
