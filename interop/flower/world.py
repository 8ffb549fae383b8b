"""Flower watching a headway worker: the processes, and how to ask them.

``World`` starts, each on a free loopback port or as its own process:

- a redis-server (no persistence, in a temporary directory);
- a headway worker on Celery's layout, with headway's own CLI as a user
  runs it: ``python -m headway worker -A flower_hw:app --pool process
  -E`` under ``HEADWAY_FLOWER_HW_PYTHON`` (a Python that imports headway).
  ``-E`` (Celery's ``worker -E``) turns its events on from the start:
  Flower's own ``enable_events`` broadcast, sent without asking for a
  reply, is not acted on by a headway worker yet (docs/celery.md);
- Flower: ``python -m celery -A flower_celery --broker=<url> flower
  --address=127.0.0.1 --port=<p>`` under this Python (interop/.venv, with
  Celery and Flower), with ``FLOWER_UNAUTHENTICATED_API=true``: Flower 2.x
  answers its HTTP API with 401 unless auth is configured or that variable
  is set.

Used by ``test_flower.py`` (pytest) and, for ``docs/flower.png``, by
``python world.py screenshot <png>`` (``interop/flower_screenshot.sh``).
Nothing here is skipped: a missing redis-server, headway, Flower or
chromium is an error.
"""

import gc
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
NODE = "headway@flower-interop"
DEADLINE = 30.0


def wait_for(cond, what, timeout=DEADLINE, every=0.1):
    """Polls ``cond`` until it answers something truthy and answers that;
    raises ``AssertionError`` naming ``what`` after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    last = None
    while True:
        try:
            got = cond()
        # Not up yet, or not there yet (redis-py's ConnectionError is no
        # OSError): the last error is named if the wait runs out.
        except Exception as e:  # noqa: BLE001
            got, last = None, e
        if got:
            return got
        if time.monotonic() > end:
            extra = f" (last error: {last!r})" if last is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{extra}")
        time.sleep(every)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chromium_binary():
    """Debian's chromium (``HEADWAY_CHROMIUM`` names another); missing is
    an error, never a skip."""
    path = os.environ.get("HEADWAY_CHROMIUM") or shutil.which("chromium")
    if not path or not os.access(path, os.X_OK):
        raise AssertionError("chromium is not installed (apt-get install -y chromium; .ci/run does)")
    return path


class Proc:
    def __init__(self, name, popen, log):
        self.name, self.p, self.log = name, popen, log

    def text(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def alive(self):
        return self.p.poll() is None

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5)


class World:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="headway-flower-")
        self.procs = []
        try:
            self._start()
        except BaseException:
            self.close(keep=True)
            raise

    def _start(self):
        hw_py = os.environ.get("HEADWAY_FLOWER_HW_PYTHON")
        if not hw_py:
            raise AssertionError("HEADWAY_FLOWER_HW_PYTHON must name a Python that imports headway "
                                 "(interop/run_flower.sh sets it)")
        redis_server = shutil.which("redis-server")
        if not redis_server:
            raise AssertionError("redis-server is not on PATH")

        port = free_port()
        self.url = f"redis://127.0.0.1:{port}/0"
        self.env = {**os.environ, "HEADWAY_FLOWER_URL": self.url, "HEADWAY_FLOWER_NODE": NODE,
                    "PYTHONDONTWRITEBYTECODE": "1", "FLOWER_UNAUTHENTICATED_API": "true"}
        self.redis = self._spawn("redis", [redis_server, "--port", str(port), "--bind", "127.0.0.1",
                                           "--save", "", "--appendonly", "no", "--dir", self.dir])
        import redis

        self.r = redis.Redis.from_url(self.url)
        wait_for(self.r.ping, "redis-server to answer", 10)

        self.worker = self.start_worker()

        self.flower_port = free_port()
        self.base = f"http://127.0.0.1:{self.flower_port}"
        self.flower = self._spawn("flower", [
            sys.executable, "-m", "celery", "-A", "flower_celery", f"--broker={self.url}", "flower",
            "--address=127.0.0.1", f"--port={self.flower_port}", "--persistent=False",
        ])
        wait_for(lambda: self._up(self.flower) and self.get_text("/healthcheck") == "OK",
                 "Flower to answer /healthcheck", 60)

        sys.path.insert(0, HERE)
        os.environ["HEADWAY_FLOWER_URL"] = self.url
        import flower_celery

        self.capp = flower_celery.app
        print(f"world: redis {self.url}, Flower {self.base}, logs in {self.dir}", flush=True)

    def start_worker(self, node=NODE, events=True):
        """A headway worker process named ``node``; with ``events``, ``-E``."""
        hw_py = os.environ["HEADWAY_FLOWER_HW_PYTHON"]
        argv = [hw_py, "-m", "headway", "worker", "-A", "flower_hw:app", "--pool", "process",
                "-c", "2", "-l", "info"] + (["-E"] if events else [])
        w = self._spawn(f"worker-{node}", argv, {"HEADWAY_FLOWER_NODE": node})
        wait_for(lambda: self._up(w) and "\nready" in w.text(), f"the headway worker {node} to start", 60)
        return w

    def _spawn(self, name, argv, env=None):
        log = os.path.join(self.dir, f"{name}.log")
        with open(log, "w") as f:
            p = subprocess.Popen(argv, cwd=HERE, env={**self.env, **(env or {})}, stdout=f,
                                 stderr=subprocess.STDOUT)
        proc = Proc(name, p, log)
        self.procs.append(proc)
        return proc

    @staticmethod
    def _up(proc):
        if not proc.alive():
            raise AssertionError(f"{proc.name} exited ({proc.p.returncode}):\n{proc.text()}")
        return True

    def logs(self):
        return "\n".join(f"--- {p.name} ({p.log})\n{p.text()[-4000:]}" for p in self.procs)

    def close(self, keep=False):
        # Celery's AsyncResults unsubscribe from their result channel when
        # collected, reconnecting if need be: let the dead ones go while the
        # redis-server answers, and close the subscriber so that none left
        # for the interpreter's exit tries to reach a stopped server.
        gc.collect()
        rc = getattr(getattr(self, "capp", None) and self.capp.backend, "result_consumer", None)
        if getattr(rc, "_pubsub", None) is not None:
            rc.stop()
            rc._pubsub = None
        for p in reversed(self.procs):
            p.stop()
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- Flower's HTTP API ---------------------------------------------

    def request(self, method, path, params=None, body=None):
        """``(status, body text)`` of one request to Flower (``body``: sent
        as JSON)."""
        url = self.base + path + ("?" + urllib.parse.urlencode(params) if params else "")
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        req = urllib.request.Request(url, method=method, data=data)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def get_text(self, path, params=None):
        status, body = self.request("GET", path, params)
        if status != 200:
            raise ValueError(f"GET {path} answered {status}: {body[:300]}")
        return body

    def get(self, path, **params):
        return json.loads(self.get_text(path, params or None))

    def post(self, path, json_body=None, **params):
        status, body = self.request("POST", path, params or None, json_body)
        if status != 200:
            raise AssertionError(f"POST {path} answered {status}: {body[:300]}")
        return json.loads(body)

    def task(self, task_id):
        """Flower's view of one task (``/api/task/info/<id>``), or None
        while Flower has not heard of it."""
        status, body = self.request("GET", f"/api/task/info/{task_id}")
        return json.loads(body) if status == 200 else None

    def task_in(self, task_id, state, timeout=DEADLINE):
        """Waits until Flower shows ``task_id`` in ``state``; answers its info."""
        return wait_for(lambda: (t := self.task(task_id)) and t.get("state") == state and t,
                        f"Flower to show task {task_id} {state} (now: {self.task(task_id)})", timeout)

    # -- pages in headless chromium --------------------------------------

    def chromium(self, path, *, screenshot=None, budget_ms=6000):
        """Loads a Flower page in headless chromium and answers the DOM after
        the page's scripts ran (its tables fill by XHR), or writes a
        1280×800 screenshot to ``screenshot``."""
        profile = tempfile.mkdtemp(prefix="chromium-", dir=self.dir)
        argv = [chromium_binary(), "--headless", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--hide-scrollbars", "--no-first-run",
                f"--user-data-dir={profile}", "--window-size=1280,800",
                f"--virtual-time-budget={budget_ms}"]
        argv += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
        out = subprocess.run(argv + [self.base + path], capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise AssertionError(f"chromium failed ({out.returncode}) on {path}:\n{out.stderr[-3000:]}")
        return out.stdout


def screenshot(png):
    """Runs the world, sends a few tasks (succeeded, failed, two running)
    and saves Flower's workers page as ``png``, its tasks page beside it."""
    w = World()
    try:
        _stage(w, png)
    finally:
        w.close()


def _stage(w, png):
    wait_for(lambda: w.get("/api/workers", status="1").get(NODE), "Flower to see the worker", 60)
    done = [w.capp.send_task("flower.add", (i, i * 10)) for i in range(1, 6)]
    failed = w.capp.send_task("flower.boom", ("no such invoice",))
    for r in done:
        w.task_in(r.id, "SUCCESS")
    w.task_in(failed.id, "FAILURE")
    running = [w.capp.send_task("flower.nap", (300,)) for _ in range(2)]
    for r in running:
        w.task_in(r.id, "STARTED")
    # The workers page (the headway worker listed, online, its counts) as
    # `png`; the tasks page beside it as `<png stem>-tasks.png`.
    w.chromium("/workers", screenshot=os.path.abspath(png))
    tasks = os.path.splitext(png)[0] + "-tasks.png"
    w.chromium("/tasks", screenshot=os.path.abspath(tasks))
    print(f"wrote {png} and {tasks}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "screenshot":
        screenshot(sys.argv[2])
    else:
        raise SystemExit("usage: python world.py screenshot <png>")
