"""headway and a real Celery 5.5 as separate processes on one private
redis-server: ``python harness.py all`` or ``python harness.py <scenario>``
(run by ``interop/run_links.sh``, under the Celery venv's Python).

Processes: a redis-server on a free loopback port; a Celery worker
(``celery_side.py``, solo pool) on queue ``celery``; headway Python worker
processes (``hw_py.py``) on ``hw``; a headway Node worker process
(``hw_node.js``) on ``node`` where a scenario names Node; more workers of
each kind on private queues where a scenario needs them (and kills them).
Celery is driven from this process (and, in ``inspect``, through Celery's
own CLI, ``celery -A celery_side inspect|control``, as a separate process);
headway's producers are one-shot ``hw_py.py`` / ``hw_node.js`` processes.
A headway worker process is the node ``<worker>@links`` in Celery's remote
control, as the Celery workers are.

Every task run appends to a ledger (Celery: the Redis list ``ledger``;
headway: ``ledger-<worker>.jsonl``), so each scenario prints what each side
ran — task, id, side, worker — and asserts on it. Any failed assertion
makes the exit status 1. Environment: ``HEADWAY_LINKS_HW_PYTHON`` (a
Python that imports headway), ``HEADWAY_LINKS_NODE`` (node, with the
addon built at the repo root).
"""

import datetime
import decimal
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
VT = 4.0  # visibility_timeout (s) on every side: short, so restores are quick
DEADLINE = 30.0


class Failed(AssertionError):
    pass


def expect(cond, what):
    if not cond:
        raise Failed(what)
    print(f"    ok: {what}")


def wait_for(cond, what, timeout=DEADLINE, every=0.05):
    """Polls ``cond`` until it answers something truthy; fails after ``timeout``."""
    end = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > end:
            raise Failed(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    def __init__(self, name, popen, log):
        self.name, self.p, self.log = name, popen, log

    def text(self):
        try:
            with open(self.log) as f:
                return f.read()
        except OSError:
            return ""

    def kill9(self):
        self.p.send_signal(signal.SIGKILL)
        self.p.wait(10)

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5)


class World:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="headway-links-")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.redis = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.environ.update(HEADWAY_LINKS_URL=self.url, HEADWAY_LINKS_VT=str(VT),
                          HEADWAY_LINKS_DIR=self.dir, PYTHONDONTWRITEBYTECODE="1")
        sys.path.insert(0, HERE)
        import redis

        self.r = redis.Redis.from_url(self.url)
        wait_for(self._ping, "redis-server to answer", 10)
        import celery_side

        self.capp = celery_side.app
        self.procs = {}
        self.hw_py = os.environ["HEADWAY_LINKS_HW_PYTHON"]
        self.node = os.environ.get("HEADWAY_LINKS_NODE", "node")
        print(f"world: redis-server {self.url}, logs in {self.dir}")

    def _ping(self):
        try:
            return self.r.ping()
        except Exception:  # noqa: BLE001 - not up yet
            return False

    def close(self, keep):
        for p in self.procs.values():
            p.stop()
        self.redis.terminate()
        self.redis.wait(10)
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- processes -----------------------------------------------------

    def _spawn(self, name, argv, env):
        log = os.path.join(self.dir, f"{name}.log")
        with open(log, "w") as f:
            p = subprocess.Popen(argv, cwd=HERE, env={**os.environ, **env}, stdout=f,
                                 stderr=subprocess.STDOUT)
        proc = Proc(name, p, log)
        self.procs[name] = proc
        return proc

    def _ready(self, proc, marker):
        def up():
            if proc.p.poll() is not None:
                raise Failed(f"{proc.name} exited ({proc.p.returncode}):\n{proc.text()}")
            return marker in proc.text()

        wait_for(up, f"{proc.name} to start", 60)

    def celery_worker(self, name, queues, sleep=0.0):
        if name in self.procs and self.procs[name].p.poll() is None:
            return self.procs[name]
        p = self._spawn(name, [sys.executable, "-m", "celery", "-A", "celery_side", "worker", "-P", "solo",
                               "-Q", queues, "-n", f"{name}@links", "--without-mingle",
                               "--without-gossip", "--without-heartbeat", "--loglevel=INFO"],
                        {"HEADWAY_LINKS_SLEEP": str(sleep), "HEADWAY_LINKS_WORKER": name})
        self._ready(p, f"{name}@links ready")
        return p

    def hw_worker(self, name, queues, sleep=0.0, concurrency=2, prefetch=None, pool=None):
        if name in self.procs and self.procs[name].p.poll() is None:
            return self.procs[name]
        argv = [self.hw_py, "hw_py.py", "worker", "--queues", queues, "--concurrency", str(concurrency)]
        if prefetch is not None:
            argv += ["--prefetch", str(prefetch)]
        if pool is not None:
            argv += ["--pool", pool]
        p = self._spawn(name, argv, {"HEADWAY_LINKS_SLEEP": str(sleep), "HEADWAY_LINKS_WORKER": name})
        self._ready(p, f"ready {name}")
        return p

    def node_worker(self, name, queues):
        if name in self.procs and self.procs[name].p.poll() is None:
            return self.procs[name]
        p = self._spawn(name, [self.node, "hw_node.js", "worker", "--queues", queues],
                        {"HEADWAY_LINKS_WORKER": name})
        self._ready(p, f"ready {name}")
        return p

    def main_workers(self, node=False):
        self.celery_worker("celery-main", "celery")
        self.hw_worker("hw-py-main", "hw")
        if node:
            self.node_worker("hw-node-main", "node")

    def _oneshot(self, argv, what):
        out = subprocess.run(argv, cwd=HERE, capture_output=True, text=True, timeout=90)
        line = (out.stdout.strip().splitlines() or [""])[-1]
        try:
            return json.loads(line)
        except ValueError:
            raise Failed(f"{what}: rc {out.returncode}\n{out.stdout}\n{out.stderr}") from None

    def hw(self, cmd, arg=None):
        """One headway Python producer step."""
        return self._oneshot([self.hw_py, "hw_py.py", cmd, json.dumps(arg or {})], f"hw_py.py {cmd}")

    def hw_node(self, cmd, arg=None):
        """One headway Node producer step."""
        return self._oneshot([self.node, "hw_node.js", cmd, json.dumps(arg or {})], f"hw_node.js {cmd}")

    # -- what ran ------------------------------------------------------

    def ledger(self, since=0.0):
        rows = [json.loads(x) for x in self.r.lrange("ledger", 0, -1)]
        for path in glob.glob(os.path.join(self.dir, "ledger-*.jsonl")):
            with open(path) as f:
                rows += [json.loads(line) for line in f if line.strip()]
        return sorted((r for r in rows if r["at"] >= since), key=lambda r: r["at"])

    def runs_of(self, task_id, since=0.0):
        return [r for r in self.ledger(since) if r["id"] == task_id]

    def held(self, task_id):
        """Whether some consumer holds ``task_id`` in Celery's ``unacked``."""
        return any(task_id.encode() in v for v in self.r.hvals("unacked"))

    def oldest_claim_age(self):
        got = self.r.zrange("unacked_index", 0, 0, withscores=True)
        return time.time() - got[0][1] if got else None

    def result(self, task_id, timeout=DEADLINE):
        return self.capp.AsyncResult(task_id).get(timeout=timeout, disable_sync_subtasks=False)

    def sig(self, name, args=(), queue=None, immutable=False):
        opts = {"queue": queue} if queue else {}
        return self.capp.signature(name, args=tuple(args), options=opts, immutable=immutable)


def show(rows):
    for r in rows:
        args = json.dumps(r["args"])
        if len(args) > 70:
            args = args[:67] + "..."
        print(f"    ran {r['task']:<12} id={r['id']} on {r['side']:<12} ({r['worker']}) args={args}"
              f" parent={(r.get('parent_id') or '-')[:8]}")


def check_chain(w, rows, want):
    """``rows`` ran as ``want`` — [(task, side), ...] — each the previous one's child."""
    show(rows)
    expect([(r["task"], r["side"]) for r in rows] == want,
           f"links ran in order on {[s for _, s in want]}")
    for a, b in zip(rows, rows[1:]):
        expect(b["parent_id"] == a["id"], f"{b['task']}'s parent is {a['task']} ({a['id'][:8]})")


# -- scenarios ------------------------------------------------------------


def chain_from_headway(w):
    """A chain sent from headway: Celery, headway, Celery, headway."""
    w.main_workers()
    t0 = time.time()
    spec = {"chain": [{"sig": "c.add", "args": [1, 2], "queue": "celery"},
                      {"sig": "h.mul", "args": [10], "queue": "hw"},
                      {"sig": "c.add", "args": [5], "queue": "celery"},
                      {"sig": "h.mul", "args": [2], "queue": "hw"}]}
    last = w.hw("canvas", spec)["id"]
    expect(w.hw("get", {"id": last}) == {"ok": 70}, "headway reads ((1+2)*10+5)*2 = 70")
    expect(w.result(last) == 70, "Celery's AsyncResult reads 70 too")
    check_chain(w, wait_for(lambda: (lambda r: r if len(r) == 4 else None)(w.ledger(t0)), "4 links"),
                [("c.add", "celery"), ("h.mul", "headway-py"), ("c.add", "celery"), ("h.mul", "headway-py")])


def chain_from_celery(w):
    """A chain sent from Celery: headway, Celery, headway, Celery."""
    w.main_workers()
    from celery import chain

    t0 = time.time()
    r = chain(w.sig("h.add", [1, 2], "hw"), w.sig("c.mul", [10]), w.sig("h.add", [5], "hw"),
              w.sig("c.mul", [2])).apply_async()
    expect(r.get(timeout=DEADLINE) == 70, "Celery reads 70")
    expect(w.hw("get", {"id": r.id}) == {"ok": 70}, "headway's handle reads 70 too")
    check_chain(w, wait_for(lambda: (lambda r: r if len(r) == 4 else None)(w.ledger(t0)), "4 links"),
                [("h.add", "headway-py"), ("c.mul", "celery"), ("h.add", "headway-py"), ("c.mul", "celery")])


def chord_from_headway(w):
    """A chord sent from headway: parts on Celery, the callback on headway."""
    w.main_workers()
    t0 = time.time()
    spec = {"chord": [{"sig": "c.add", "args": [i, i], "queue": "celery"} for i in (1, 2, 3)],
            "body": {"sig": "h.tsum", "queue": "hw"}}
    cb = w.hw("canvas", spec)["id"]
    expect(w.hw("get", {"id": cb}) == {"ok": 12}, "the callback answers 2+4+6 = 12")
    rows = wait_for(lambda: (lambda r: r if len(r) == 4 else None)(w.ledger(t0)), "3 parts and the callback")
    show(rows)
    expect(sorted((r["task"], r["side"]) for r in rows[:3]) == [("c.add", "celery")] * 3, "the parts ran on Celery")
    expect((rows[3]["task"], rows[3]["side"], rows[3]["id"]) == ("h.tsum", "headway-py", cb),
           "the callback ran on headway, last")
    expect(rows[3]["args"] == [[2, 4, 6]], "the callback got the parts' results in part order")


def chord_from_celery(w):
    """A chord sent from Celery: parts on headway, the callback on Celery."""
    w.main_workers()
    from celery import chord

    t0 = time.time()
    r = chord([w.sig("h.mul", [i, 10], "hw") for i in (1, 2, 3)], w.sig("c.tsum")).apply_async()
    expect(r.get(timeout=DEADLINE) == 60, "Celery reads 10+20+30 = 60")
    rows = wait_for(lambda: (lambda x: x if len(x) == 4 else None)(w.ledger(t0)), "3 parts and the callback")
    show(rows)
    expect(sorted((x["task"], x["side"]) for x in rows[:3]) == [("h.mul", "headway-py")] * 3,
           "the parts ran on headway")
    expect((rows[3]["task"], rows[3]["side"], rows[3]["id"]) == ("c.tsum", "celery", r.id),
           "the callback ran on Celery, last")
    expect(rows[3]["args"] == [[10, 20, 30]], "the callback got the parts' results in part order")


def _reservation(w, victim, heir, send):
    """``victim`` (a started worker on queue ``slow``, its ``shared.slow``
    sleeping 60 s) claims the message ``send()`` publishes and is killed with
    -9 mid-run; once the claim is older than the visibility timeout, ``heir``
    (a function starting a worker of the other side on ``slow``) restores it
    and runs it. Answers (id, the heir's process)."""
    t0 = time.time()
    tid = send()
    first = wait_for(lambda: w.runs_of(tid, t0), f"{victim.name} to start {tid}")
    show(first)
    expect(w.held(tid), f"{victim.name} holds it in unacked (acks_late) while it runs")
    victim.kill9()
    print(f"    killed {victim.name} (pid {victim.p.pid}) with SIGKILL mid-run")
    # Until it is older than the visibility timeout, no restore takes it (a
    # live Celery worker's timer may restore it onto `slow` itself then).
    wait_for(lambda: (w.oldest_claim_age() or 0) > VT + 0.3 or not w.held(tid),
             "the dead claim to pass the visibility timeout")
    still = w.held(tid)
    proc = heir()
    print(f"    the dead claim was {'still in unacked: the heir restored it' if still else 'restored by a live Celery worker timer'}"
          f" ({proc.name} started)")
    return tid, proc, t0


def reservation_to_headway(w):
    """A Celery worker dies holding a message; a headway worker restores and runs it."""
    victim = w.celery_worker("celery-slow", "slow", sleep=60)
    tid, heir, t0 = _reservation(
        w, victim, lambda: w.hw_worker("hw-py-heir", "slow"),
        lambda: w.capp.send_task("shared.slow", args=["r5"], queue="slow").id)
    expect(w.result(tid) == "headway:r5", "the result is headway's")
    runs = w.runs_of(tid, t0)
    show(runs[1:])
    expect([r["side"] for r in runs] == ["celery", "headway-py"], "started on Celery, run again on headway")
    wait_for(lambda: not w.held(tid), "unacked to be empty of it")
    heir.stop()


def reservation_to_celery(w):
    """A headway worker dies holding a message; a Celery worker restores and runs it."""
    victim = w.hw_worker("hw-py-slow", "slow", sleep=60)
    tid, heir, t0 = _reservation(
        w, victim, lambda: w.celery_worker("celery-heir", "slow"),
        lambda: w.hw("send", {"name": "shared.slow", "args": ["r6"], "queue": "slow"})["id"])
    expect(w.hw("get", {"id": tid}) == {"ok": "celery:r6"}, "headway reads Celery's result")
    runs = w.runs_of(tid, t0)
    show(runs[1:])
    expect([r["side"] for r in runs] == ["headway-py", "celery"], "started on headway, run again on Celery")
    wait_for(lambda: not w.held(tid), "unacked to be empty of it")
    heir.stop()


def _eta(w, send, side):
    t0 = time.time()
    tid = send()
    due = t0 + 2.0
    w.result(tid)
    run = w.runs_of(tid, t0)
    show(run)
    expect(len(run) == 1 and run[0]["side"] == side, f"it ran once, on {side}")
    at = run[0]["at"]
    print(f"    due at {due:.3f} or later, ran at {at:.3f} ({at - due:+.3f} s)")
    expect(at >= due, "it did not run before it was due")
    expect(at < due + 5, "it ran within 5 s of being due")


def eta_from_headway(w):
    """headway sends with countdown 2 s; Celery runs it no earlier."""
    w.main_workers()
    _eta(w, lambda: w.hw("send", {"name": "c.record", "args": ["eta"], "queue": "celery", "countdown": 2})["id"],
         "celery")


def eta_from_celery(w):
    """Celery sends with countdown 2 s; headway runs it no earlier."""
    w.main_workers()
    _eta(w, lambda: w.capp.send_task("h.record", args=["eta"], queue="hw", countdown=2).id, "headway-py")


def node_producer(w):
    """A Node producer's task, run by a Celery worker."""
    w.main_workers()
    got = w.hw_node("send", {"name": "c.add", "args": [2, 3], "queue": "celery"})
    expect(got.get("ok") == 5, "Node's handle reads Celery's 5")
    run = w.runs_of(got["id"])
    show(run)
    expect([r["side"] for r in run] == ["celery"], "Celery ran it")
    expect(w.result(got["id"]) == 5, "Celery's AsyncResult reads 5")


def node_worker(w):
    """A Celery producer's task, run by a Node worker."""
    w.main_workers(node=True)
    r = w.capp.send_task("n.add", args=[20, 22], queue="node")
    expect(r.get(timeout=DEADLINE) == 42, "Celery reads 42")
    run = w.runs_of(r.id)
    show(run)
    expect([(x["side"], x["worker"]) for x in run] == [("headway-node", "hw-node-main")], "the Node worker ran it")


def typed(w):
    """datetime, UUID, Decimal through both sides."""
    w.main_workers()
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.timezone.utc)
    uid = uuid.UUID("12345678-1234-5678-1234-567812345678")
    dec = decimal.Decimal("3.14159")
    r = w.capp.send_task("h.echo", args=[when, uid, dec], queue="hw")
    got = r.get(timeout=DEADLINE)
    show(w.runs_of(r.id))
    print(f"    headway's Python body received {got['types']}")
    back = got["values"]
    expect(back == [when, uid, dec] and [type(v) for v in back] == [datetime.datetime, uuid.UUID, decimal.Decimal],
           "Celery → headway → Celery: equal values, native types on arrival at Celery")
    expect(got["types"] == ["datetime", "UUID", "Decimal"],
           "headway's Python body received a datetime, a UUID and a Decimal")
    out = w.hw("typed")
    print(f"    headway's Python send: {out['sent']}; back at headway: {out['types']}")
    expect(out["sent"] == "native", "headway's Python API sends a datetime, a UUID and a Decimal as they are")
    expect(out["answer"]["native"] == [True, True, True],
           "headway → Celery: a datetime, a UUID and a Decimal on arrival at Celery")
    expect(out["types"] == ["datetime", "UUID", "Decimal"] and out["answer"]["values"] == [repr(when), repr(uid), repr(dec)],
           "and back to headway as the same values and types")


def priorities(w):
    """Priorities honoured across sides (Celery's steps 0 < 3 < 6 < 9)."""
    w.main_workers()
    t0 = time.time()
    for p in (9, 6, 3, 0):
        w.capp.send_task("h.record", args=[p], queue="prio.hw", priority=p)
    w.hw_worker("hw-py-prio", "prio.hw", concurrency=1, prefetch=1)
    rows = wait_for(lambda: (lambda x: x if len(x) == 4 else None)(w.ledger(t0)), "4 runs on headway")
    show(rows)
    expect([x["args"][0] for x in rows] == [0, 3, 6, 9], "Celery sent 9,6,3,0; headway ran 0,3,6,9")
    w.procs["hw-py-prio"].stop()
    t1 = time.time()
    for p in (9, 6, 3, 0):
        w.hw("send", {"name": "c.record", "args": [p], "queue": "prio.c", "priority": p})
    w.celery_worker("celery-prio", "prio.c")
    rows = wait_for(lambda: (lambda x: x if len(x) == 4 else None)(w.ledger(t1)), "4 runs on Celery")
    show(rows)
    expect([x["args"][0] for x in rows] == [0, 3, 6, 9], "headway sent 9,6,3,0; Celery ran 0,3,6,9")
    w.procs["celery-prio"].stop()


def revoke(w):
    """A revoke from each side stops a task the other side holds for its eta."""
    w.main_workers()
    t0 = time.time()
    # Celery revokes what a headway worker holds.
    tid = w.capp.send_task("h.record", args=["revoked"], queue="hw", countdown=3).id
    wait_for(lambda: w.held(tid), "headway to hold it")
    w.capp.control.revoke(tid)
    print(f"    Celery revoked {tid} (held by headway for its eta)")
    after = w.capp.send_task("h.record", args=["after"], queue="hw", countdown=3.5).id
    w.result(after)
    show(w.ledger(t0))
    expect(w.runs_of(tid, t0) == [], "headway did not run it (a later eta on the same worker did run)")
    expect(w.capp.AsyncResult(tid).state == "REVOKED", "Celery reads REVOKED")
    # headway revokes what a Celery worker holds.
    t1 = time.time()
    tid = w.hw("send", {"name": "c.record", "args": ["revoked"], "queue": "celery", "countdown": 3})["id"]
    wait_for(lambda: w.held(tid), "Celery to hold it")
    w.hw("revoke", {"id": tid})
    print(f"    headway revoked {tid} (held by Celery for its eta)")
    after = w.hw("send", {"name": "c.record", "args": ["after"], "queue": "celery", "countdown": 3.5})["id"]
    w.result(after)
    show(w.ledger(t1))
    expect(w.runs_of(tid, t1) == [], "Celery did not run it (a later eta on the same worker did run)")
    got = w.hw("get", {"id": tid})
    expect(got.get("error") == "Revoked", f"headway reads Revoked ({got})")


def _callbacks(w, ok_task, bad_task, queue):
    """Sends ``ok_task(2, 3)`` with two links and ``bad_task('bad')`` with two
    link_errors (one immutable); answers the ids and the callbacks' runs."""
    t0 = time.time()
    ok = w.sig(ok_task, [2, 3], queue).apply_async(
        link=[w.sig("c.record", ["linked"]), w.sig("h.record", ["linked-hw"], "hw")])
    bad = w.sig(bad_task, ["bad"], queue).apply_async(
        link_error=[w.sig("c.errback"), w.sig("c.errback", ["imm"], immutable=True)])
    expect(ok.get(timeout=DEADLINE) == 5, f"{ok_task} answers 5")
    try:
        bad.get(timeout=DEADLINE)
        raise Failed(f"{bad_task} succeeded")
    except ValueError as e:
        expect(str(e) == "bad", f"{bad_task} failed with ValueError('bad')")
    cbs = wait_for(lambda: (lambda x: x if len(x) == 4 else None)(
        [r for r in w.ledger(t0) if r["task"] in ("c.record", "h.record", "c.errback")]), "the 4 callbacks")
    show([r for r in w.ledger(t0) if r["id"] in (ok.id, bad.id)] + cbs)

    def shape(r):
        args = ["<ok>" if a == ok.id else "<bad>" if a == bad.id else a for a in r["args"]]
        parent = {ok.id: "<ok>", bad.id: "<bad>"}.get(r["parent_id"], r["parent_id"])
        root = {ok.id: "<ok>", bad.id: "<bad>"}.get(r["root_id"], r["root_id"])
        return (r["task"], r["side"], json.dumps(args), parent, root)

    return sorted(shape(r) for r in cbs)


def links(w):
    """Celery `link` / `link_error` on a headway-run task, run as Celery runs them."""
    w.main_workers()
    print("  on a headway worker:")
    hw = _callbacks(w, "h.add", "h.fail", "hw")
    print("  the same on a Celery worker, for comparison:")
    cel = _callbacks(w, "c.add", "c.fail", "celery")
    want = sorted([
        ("c.record", "celery", json.dumps([5, "linked"]), "<ok>", "<ok>"),
        ("h.record", "headway-py", json.dumps([5, "linked-hw"]), "<ok>", "<ok>"),
        ("c.errback", "celery", json.dumps(["<bad>"]), "<bad>", "<bad>"),
        ("c.errback", "celery", json.dumps(["imm"]), "<bad>", "<bad>"),
    ])
    expect(hw == want, "headway ran the link with the result first, link_error with the task id, "
           "immutable ones as given, parent/root = the task")
    expect(cel == want, "and Celery ran the same callbacks with the same arguments and parents")


def time_limits(w):
    """Celery's per-call time limits, kept by a headway process-pool worker."""
    w.hw_worker("hw-py-procs", "hwp", pool="process")
    t0 = time.time()
    hard = w.capp.signature("h.spin", args=("hard",), options={"queue": "hwp"}).apply_async(time_limit=1)
    try:
        hard.get(timeout=DEADLINE)
        raise Failed("a spinning task succeeded")
    except Exception as e:  # noqa: BLE001 - the type is the assertion
        from celery.exceptions import TimeLimitExceeded

        expect(isinstance(e, TimeLimitExceeded), f"Celery reads {type(e).__name__}: {e}")
    expect(time.time() - t0 < 5, "the hard limit ended the run within 5 s of the send")
    soft = w.capp.signature("h.soft", args=("soft",), options={"queue": "hwp"}).apply_async(soft_time_limit=0.5)
    expect(soft.get(timeout=DEADLINE) == "cleaned up soft",
           "the soft limit raised inside the body, whose cleanup answer Celery reads")
    show(w.ledger(t0))
    expect(len(w.runs_of(hard.id, t0)) == 1, "the killed run ran once (no redelivery)")


def _celery_cli(*args):
    """Celery's own CLI, ``celery -A celery_side <args>``, as a separate
    process; its ``--json`` answer (the last line of its output)."""
    argv = [sys.executable, "-m", "celery", "-A", "celery_side", *args]
    out = subprocess.run(argv, cwd=HERE, capture_output=True, text=True, timeout=60)
    print(f"    $ celery -A celery_side {' '.join(args)}  → exit {out.returncode}")
    line = (out.stdout.strip().splitlines() or [""])[-1]
    try:
        return json.loads(line)
    except ValueError:
        raise Failed(f"celery {' '.join(args)}: exit {out.returncode}\n{out.stdout}\n{out.stderr}") from None


def inspect(w):
    """Celery's own CLI (inspect, control shutdown) answered by headway Python and Node worker processes."""
    w.main_workers(node=True)
    py, nd = w.procs["hw-py-main"], w.procs["hw-node-main"]
    pyn, ndn = "hw-py-main@links", "hw-node-main@links"

    def ask(what):
        got = _celery_cli("inspect", what, "--json", "-t", "2")
        print(f"      {json.dumps({n: got.get(n) for n in (pyn, ndn)})[:1200]}")
        return got

    got = ask("ping")
    expect(got.get(pyn) == {"ok": "pong"} and got.get(ndn) == {"ok": "pong"},
           f"both headway worker processes answer ping by their own node names ({pyn}, {ndn})")
    expect(got.get("celery-main@links") == {"ok": "pong"}, "beside the Celery worker, which answers too")

    got = ask("stats")
    expect(got[pyn]["pid"] == py.p.pid and got[ndn]["pid"] == nd.p.pid,
           f"stats: each node's pid is its own process's (Python {py.p.pid}, Node {nd.p.pid})")
    expect(got[pyn]["broker"]["hostname"] == w.url and got[ndn]["broker"]["hostname"] == w.url,
           f"stats: each names this redis-server ({w.url}) as its broker")
    expect(got[ndn]["headway"]["workers"] == ["hw-node-main"] and len(got[pyn]["headway"]["workers"]) == 1,
           "stats: each process runs one headway worker (the Node one named hw-node-main)")
    expect(got[pyn]["pool"] == {"max-concurrency": 2, "processes": [py.p.pid]}
           and got[ndn]["pool"] == {"max-concurrency": 2, "processes": [nd.p.pid]},
           "stats: each pool's max-concurrency is its worker's concurrency (2), run in its own process")

    got = ask("registered")
    expect({"h.add", "h.gate", "shared.slow"} <= set(got[pyn]) and {"n.add", "n.gate"} <= set(got[ndn]),
           "registered: the Python node lists h.add, h.gate, shared.slow; the Node node n.add, n.gate")
    expect(not any(t.startswith("n.") for t in got[pyn]) and not any(t.startswith("h.") for t in got[ndn]),
           "and neither lists the other's tasks (each lists its own, above)")

    got = ask("active")
    expect(got.get(pyn) == [] and got.get(ndn) == [], "active: nothing runs on either yet")
    t0 = time.time()
    pid = w.capp.send_task("h.gate", args=["py"], queue="hw").id
    nid = w.capp.send_task("n.gate", args=["node"], queue="node").id
    wait_for(lambda: w.runs_of(pid, t0) and w.runs_of(nid, t0), "both gate tasks to start")
    got = ask("active")
    for node, tid, name, label in ((pyn, pid, "h.gate", "py"), (ndn, nid, "n.gate", "node")):
        runs = got.get(node) or []
        expect([(r["id"], r["name"]) for r in runs] == [(tid, name)],
               f"active: {node} lists its running {name} {tid}")
        expect(runs[0]["hostname"] == node and runs[0]["args"] == [label] and runs[0]["time_start"],
               f"  with hostname {node}, args [{label!r}] and a time_start")
    expect(pid not in json.dumps(got[ndn]) and nid not in json.dumps(got[pyn]),
           "neither lists the other's run (each lists its own, above)")

    # Shut the Node worker down while its run is in progress.
    got = _celery_cli("control", "shutdown", "-d", ndn, "--json", "-t", "2")
    print(f"      {json.dumps(got)}")
    expect([list(r) for r in got] == [[ndn]] and "ok" in got[0][ndn],
           f"control shutdown -d {ndn}: only that node answers, ok ({got[0][ndn]})")
    late = w.capp.send_task("n.record", args=["late"], queue="node").id
    expect(nd.p.poll() is None,
           "the Node process still runs after the shutdown answer: its run is in progress (its gate is shut)")
    with open(os.path.join(w.dir, "gate-node"), "w"):
        pass
    print("    opened gate-node")
    expect(w.result(nid) == "headway-node:node", "the Node run it had started finished: Celery reads its result")
    rc = wait_for(lambda: nd.p.poll() is not None and (nd.p.returncode,), "the Node process to exit")[0]
    expect(rc == 0, "then the Node process exited, with status 0")
    expect(w.runs_of(late, t0) == [] and (
        any(late.encode() in m for m in w.r.lrange("node", 0, -1)) or w.held(late)),
        "a task sent to it after the shutdown did not run: it is still on Redis (the gate task ran, above)")
    got = ask("ping")
    expect(got.get(pyn) == {"ok": "pong"}, f"the Python worker ({pyn}) still answers ping")
    expect(ndn not in got, f"{ndn} no longer does")
    expect(py.p.poll() is None, "the Python process still runs")
    with open(os.path.join(w.dir, "gate-py"), "w"):
        pass
    expect(w.result(pid) == "headway-py:py", "and its run finishes when its gate opens")
    show(w.ledger(t0))


SCENARIOS = {
    "chain-from-headway": chain_from_headway,
    "chain-from-celery": chain_from_celery,
    "chord-from-headway": chord_from_headway,
    "chord-from-celery": chord_from_celery,
    "reservation-to-headway": reservation_to_headway,
    "reservation-to-celery": reservation_to_celery,
    "eta-from-headway": eta_from_headway,
    "eta-from-celery": eta_from_celery,
    "node-producer": node_producer,
    "node-worker": node_worker,
    "typed": typed,
    "priorities": priorities,
    "revoke": revoke,
    "links": links,
    "time-limits": time_limits,
    "inspect": inspect,
}


def main():
    names = sys.argv[1:] or ["all"]
    if names == ["all"]:
        names = list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"unknown scenario(s) {unknown}; known: all, {', '.join(SCENARIOS)}")
        return 2
    w = World()
    failed = []
    start = time.monotonic()
    try:
        for n in names:
            print(f"\n--- {n}: {SCENARIOS[n].__doc__.splitlines()[0]}")
            t = time.monotonic()
            try:
                SCENARIOS[n](w)
                print(f"  PASS {n} ({time.monotonic() - t:.1f} s)")
            except Exception as e:  # noqa: BLE001 - every failure is reported
                failed.append(n)
                print(f"  FAIL {n}: {e}")
                traceback.print_exc()
    finally:
        w.close(keep=bool(failed))
    print(f"\nlinks harness: {len(names) - len(failed)}/{len(names)} passed in {time.monotonic() - start:.1f} s")
    if failed:
        print(f"failed: {', '.join(failed)} (process logs kept in {w.dir})")
        return 1
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Celery's result consumer would reconnect to the stopped redis-server
    # from its finalisers; there is nothing left to clean up.
    os._exit(code)
