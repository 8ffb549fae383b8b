"""headway's soak: real processes, real faults, a ledger outside the broker.

    python bench/soak/soak.py [--quick] [--duration S] [--rate-lo R] [--rate-hi R] [--out DIR]
                              [--early-ack [--expect-loss]] [--faults kill9,redis,pause]

(`bash bench/soak/run.sh` finds the Python and runs this.) It starts its own
redis-server (a free loopback port, ``appendonly yes``, ``appendfsync
always``: an acknowledged write survives a kill -9), two ``headway worker``
processes running ``soak_tasks:app`` and a producer process sending 100–200
``acks_late`` runs a second (90 % sleep 5 ms, 9 % 200 ms, 1 % fail once then
succeed; no poison: every run must end in SUCCESS). Every 30–60 s (with
``--quick``: the first at 15–20 s, then every 18–22 s, so each kind runs in
two minutes) a fault, in rotation: a worker killed with SIGKILL (and restarted), Redis
killed with SIGKILL and restarted on the same port and AOF after an outage
(12 s, past the 10 s send patience, then 4 s, alternately), a worker stopped
with SIGSTOP for 10 s (past its 4 s lease) and resumed.

Then it waits for the queue to drain and counts, from the workers' ledger
files and the producer's log of acknowledged sends (never from the broker's
own books):

    in         runs whose send was acknowledged (unique ids; a send that
               raised is retried with the same id and counted once)
    out        runs with a final outcome (succeeded + failed for good)
    executions body runs that finished (every attempt, duplicates included)
    dup        final executions − out (runs that ran twice)
    lost       in − out − dead − revoked − expired   (must be 0)

plus latency from send to the end of the final run, and the workers' RSS.
Then, with Redis still up, it reads every acknowledged send's stored result
back (``MGET`` of ``P:result:ID``, beside the binding under test): each must
be SUCCESS holding the run's kind. A send the producer gave up on must be
proven absent: not in the ledger, no result, not in any ready, delayed, held
or dead list.

It prints a table and one JSON line, and exits 1 (naming each reason) if:

- lost > 0, where lost counts every acknowledged send without a stored
  SUCCESS result of its kind or without a final ``ok`` in the ledger (a run
  that failed for good is lost: the workload has none);
- a dead letter exists (the workload has no poison);
- a send was abandoned and is not proven absent;
- a ledger line does not parse;
- a run ran twice (``dup``) outside what the guarantees allow: every
  duplicate must fall in the window of a fault that can cause one (a worker
  kill -9, a SIGSTOP past the lease, a Redis outage longer than the lease),
  and the duplicates of one fault are at most the prefetch of each worker it
  hit (``-c 8`` → 32; a Redis outage hits both) — a worker holds no more
  unsettled messages than that, so no more can be handed out again;
- a fault kind of the run's set did not run (every kind runs in ``--quick``);
- the producer overran its deadline (the run's length + its give-up + 30 s),
  nothing flowed, or a worker died of something other than the soak's faults.

``--early-ack`` checks the soak itself: acked on receipt, a kill -9 loses
the runs a worker had started, and the soak must fail with ``lost N``.
``--expect-loss`` inverts the verdict for that check: exit 0 only if the
soak failed for loss and for nothing else (``selfcheck.sh`` runs it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PREFIX = "soak:"
QUEUE = "default"
LEASE = 4.0
PAUSE = LEASE + 6.0
OUTAGES = (12.0, 4.0)
SENDERS = 4
GIVE_UP = 60.0  # seconds past the end the producer keeps retrying a refused send


# ------------------------------------------------------------ a tiny RESP client


def _encode(args: tuple[Any, ...]) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(parts)


def _parse(f: Any) -> Any:
    line = f.readline()
    if not line:
        raise ConnectionError("redis closed the connection")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_parse(f) for _ in range(n)]
    raise RuntimeError(f"unexpected reply {line!r}")


def redis(port: int, *args: Any, timeout: float = 5.0) -> Any:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(_encode(args))
        return _parse(s.makefile("rb"))


# ------------------------------------------------------------ processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class Redis:
    def __init__(self, out: Path) -> None:
        self.port = free_port()
        self.dir = out / "redis"
        self.dir.mkdir()
        self.log = out / "redis.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.dir), "--appendonly", "yes", "--appendfsync", "always",
            "--save", "", "--daemonize", "no", "--protected-mode", "yes",
        ]  # fmt: skip
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if redis(self.port, "PING", timeout=0.5) == "PONG":
                    return
            except (OSError, RuntimeError):
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise SystemExit(f"soak: redis-server on port {self.port} did not start (see {self.log})")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"


class Slot:
    """One of the two worker processes, restarted after a kill."""

    def __init__(self, n: int, out: Path, env: dict[str, str]) -> None:
        self.n = n
        self.out = out
        self.env = env
        self.gen = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.rss: list[tuple[int, int, float]] = []  # (pid, kB, t)
        self.pids: list[int] = []

    def start(self) -> None:
        self.gen += 1
        exe = shutil.which("headway", path=str(Path(sys.executable).parent))
        cli = [exe] if exe else [sys.executable, "-m", "headway"]
        log = self.out / f"worker{self.n}.{self.gen}.log"
        with open(log, "wb") as f:
            self.proc = subprocess.Popen(
                [*cli, "worker", "-A", "soak_tasks:app", "-c", "8"],
                cwd=HERE, env=self.env, stdout=f, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.pids.append(self.proc.pid)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if b"\nready\n" in b"\n" + log.read_bytes():
                return
            if self.proc.poll() is not None:
                raise SystemExit(f"soak: worker {self.n} exited at start:\n{log.read_text()}")
            time.sleep(0.05)
        raise SystemExit(f"soak: worker {self.n} not ready within 60 s:\n{log.read_text()}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def sample(self) -> None:
        kb = rss_kb(self.pid)
        if kb is not None:
            self.rss.append((self.pid, kb, time.time()))

    def stop(self) -> int | None:
        """SIGTERM (a warm stop), then SIGKILL after 20 s; answers its status."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            return None


# ------------------------------------------------------------ the producer


def rate_at(t: float, lo: float, hi: float) -> float:
    """lo..hi msg/s, a slow wave (one cycle a minute)."""
    return lo + (hi - lo) * (0.5 + 0.5 * math.sin(2 * math.pi * t / 60.0))


def pick(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.90:
        return "fast"
    if r < 0.99:
        return "slow"
    return "flaky"


class Schedule:
    """Hands the sender threads their next (number, kind, due time)."""

    def __init__(self, ns: argparse.Namespace) -> None:
        self.ns = ns
        self.rng = random.Random(ns.seed)
        self.lock = threading.Lock()
        self.t0 = time.time()
        self.end = self.t0 + ns.duration
        self.n = 0
        self.due = self.t0

    def next(self) -> tuple[int, str, float] | None:
        with self.lock:
            now = time.time()
            if self.due >= self.end:
                return None
            if now - self.due > 1.0:
                self.due = now  # behind after an outage: go on at the rate, no burst
            item = (self.n, pick(self.rng), self.due)
            self.n += 1
            self.due += 1.0 / rate_at(self.due - self.t0, self.ns.rate_lo, self.ns.rate_hi)
            return item


def produce(ns: argparse.Namespace) -> int:
    """Sends on SENDERS threads (so one slow round trip does not hold up the
    rate); logs each send once it is acknowledged."""
    import headway

    app = headway.App(headway.RedisBroker(ns.url, prefix=PREFIX, lease=LEASE))
    fd = os.open(ns.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    gave_up = os.open(ns.log + ".abandoned", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    plan = Schedule(ns)
    lock = threading.Lock()
    stats: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    took: list[float] = []

    def sender(k: int) -> None:
        jitter = random.Random(ns.seed * 100 + k)
        while (item := plan.next()) is not None:
            n, kind, due = item
            if due > time.time():
                time.sleep(due - time.time())
            tid = f"{ns.run}-{n:07d}"
            first = time.time()
            wait = 0.1
            tries = 0
            ok = False
            while True:
                try:
                    app.send_task("soak.job", (kind,), task_id=tid)
                    ok = True
                    break
                except Exception as e:  # noqa: BLE001 - every refusal is counted and retried
                    tries += 1
                    with lock:
                        stats["send_failures"] += 1
                        errors[type(e).__name__] += 1
                    if tries == 1:
                        print(f"producer: send {tid} raised {type(e).__name__}: {e}; retrying", flush=True)
                    if time.time() > plan.end + ns.give_up:
                        break
                    time.sleep(wait * (0.5 + jitter.random() / 2))
                    wait = min(wait * 2, 2.0)
            acked_at = time.time()
            if ok:
                # One write per acknowledged send: a retried send is one line.
                os.write(fd, f"{tid} {kind} {first:.6f} {acked_at:.6f}\n".encode())
            else:
                os.write(gave_up, f"{tid} {kind} {first:.6f} {acked_at:.6f}\n".encode())
                print(f"producer: gave up on {tid} after {tries} tries", flush=True)
            with lock:
                stats["attempted"] += 1
                stats["acked" if ok else "abandoned"] += 1
                stats["ids_retried"] += tries > 0
                took.append(acked_at - first)

    threads = [threading.Thread(target=sender, args=(k,)) for k in range(SENDERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    os.close(fd)
    os.close(gave_up)
    summary = {
        "attempted": stats["attempted"], "acked": stats["acked"],
        "send_failures": stats["send_failures"], "ids_retried": stats["ids_retried"],
        "abandoned": stats["abandoned"], "errors": dict(errors), "senders": SENDERS,
        "send_p99_ms": round(pct(took, 99) * 1000, 1) if took else None,
        "slowest_send_s": round(max(took), 3) if took else None,
        "seconds": round(time.time() - plan.t0, 1),
    }  # fmt: skip
    print("producer-summary " + json.dumps(summary), flush=True)
    return 0


# ------------------------------------------------------------ the ledger


class Ledger:
    """The workers' ledger files, read incrementally."""

    def __init__(self, dir: Path) -> None:
        self.dir = dir
        self.offsets: dict[Path, int] = {}
        self.rows: list[tuple[str, int, int, float, float, str]] = []
        self.bad = 0
        self.final: dict[str, tuple[str, float]] = {}  # id -> first final (outcome, end)

    def refresh(self) -> None:
        for p in sorted(self.dir.glob("*.log")):
            off = self.offsets.get(p, 0)
            with open(p, "rb") as f:
                f.seek(off)
                data = f.read()
            cut = data.rfind(b"\n") + 1  # a line still being written waits
            self.offsets[p] = off + cut
            for line in data[:cut].decode().splitlines():
                parts = line.split()
                if len(parts) != 6:
                    self.bad += 1
                    continue
                tid, attempt, pid, start, end, outcome = parts
                row = (tid, int(attempt), int(pid), float(start), float(end), outcome)
                self.rows.append(row)
                if outcome in ("ok", "fail"):
                    prev = self.final.get(tid)
                    if prev is None or row[4] < prev[1]:
                        self.final[tid] = (outcome, row[4])


def read_sends(path: Path) -> dict[str, tuple[str, float, float]]:
    sends: dict[str, tuple[str, float, float]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4:
                sends.setdefault(parts[0], (parts[1], float(parts[2]), float(parts[3])))
    return sends


def dead_ids(port: int, app: Any) -> tuple[set[str], int]:
    """Ids in the queue's dead letters, and how many there are: through
    ``App.dead_letters`` where the Python package has it, else from Redis
    (docs/redis-layout.md: `P{Q}:dead`, each `<header JSON>\\n<bytes>`)."""
    if hasattr(app, "dead_letters"):
        n = app.dead_count(QUEUE)
        return {d.id for d in app.dead_letters(QUEUE, limit=max(n, 1)) if d.id}, n
    letters = redis(port, "LRANGE", f"{PREFIX}{{{QUEUE}}}:dead", 0, -1) or []
    ids: set[str] = set()
    for letter in letters:
        head = letter.split(b"\n", 1)[0]
        try:
            tid = json.loads(head).get("id")
        except ValueError:
            tid = None
        if tid:
            ids.add(tid)
    return ids, len(letters)


def in_broker(port: int) -> int:
    """Messages still in the queue's ready, delayed and held lists."""
    n = 0
    for key in redis(port, "KEYS", f"{PREFIX}{{{QUEUE}}}:*") or []:
        k = key.decode()
        if ":ready:" in k or ":held:" in k:
            n += redis(port, "LLEN", k)
        elif k.endswith(":delayed"):
            n += redis(port, "ZCARD", k)
    return n


def broker_elements(port: int) -> list[bytes]:
    """Every element of the queue's ready, delayed, held and dead lists (the
    places a message can be; docs/redis-layout.md)."""
    found: list[bytes] = []
    for key in redis(port, "KEYS", f"{PREFIX}{{{QUEUE}}}:*") or []:
        k = key.decode()
        if ":ready:" in k or ":held:" in k or k.endswith(":dead"):
            found.extend(redis(port, "LRANGE", k, 0, -1) or [])
        elif k.endswith(":delayed"):
            found.extend(redis(port, "ZRANGE", k, 0, -1) or [])
    return found


def read_results(port: int, ids: list[str]) -> dict[str, bytes | None]:
    """The stored result of each id (``P:result:ID``, ``STATE|<outcome
    JSON>``), read straight from Redis in rounds of 500."""
    got: dict[str, bytes | None] = {}
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        values = redis(port, "MGET", *[f"{PREFIX}result:{t}" for t in chunk], timeout=30.0)
        got.update(zip(chunk, values))
    return got


def result_ok(value: bytes | None, kind: str) -> bool:
    """A SUCCESS whose outcome holds the value the body returned (its kind)."""
    return value is not None and value.startswith(b"SUCCESS|") and f'"{kind}"'.encode() in value[8:]


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(p / 100 * len(xs)) - 1))]


# ------------------------------------------------------------ the run

CONCURRENCY = 8
PREFETCH = CONCURRENCY * 4  # the CLI's default: what one worker holds unsettled at most
KINDS = ("kill9", "redis", "pause")


def dup_windows(faults: list[dict[str, Any]], t0: float) -> list[tuple[float, float, str, int]]:
    """(from, to, fault, bound) for each fault that may make a run run twice
    (docs/guarantees.md, "What can run twice"): a worker killed -9 or stalled
    past its lease after starting a run, Redis away longer than the lease.
    The window runs from just before the fault to two leases after its end
    (the recovery that hands the claims out again); the bound is the prefetch
    of every worker the fault hit."""
    out = []
    for f in faults:
        if f["kind"] == "redis" and f.get("down", 0) <= LEASE:
            continue  # a short outage keeps every lease: nothing is handed out twice
        hit = 2 if f["kind"] == "redis" else 1
        out.append((t0 + f["at"] - 2.0, t0 + f["end"] + 2 * LEASE, f"t+{f['at']:.0f} s {f['kind']}", PREFETCH * hit))
    return out


def attribute_dups(
    ledger: "Ledger", windows: list[tuple[float, float, str, int]]
) -> tuple[dict[str, int], list[str], dict[str, list[str]]]:
    """Runs that ran twice (two final executions, or one attempt twice), each
    given to the fault window its first duplicated execution ended in;
    answers (count per window, ids in no window, ids per window)."""
    by_id: dict[str, list[tuple[int, float, str]]] = {}
    for tid, attempt, _pid, _start, end, outcome in ledger.rows:
        by_id.setdefault(tid, []).append((attempt, end, outcome))
    per: dict[str, int] = {}
    ids: dict[str, list[str]] = {}
    stray: list[str] = []
    for tid, runs in by_id.items():
        if len(runs) == 1:
            continue
        finals = [end for _, end, outcome in runs if outcome in ("ok", "fail")]
        attempts = Counter(a for a, _, _ in runs)
        if len(finals) <= 1 and all(c == 1 for c in attempts.values()):
            continue
        twice = [end for a, end, _ in runs if attempts[a] > 1]
        first = min(twice) if twice else min(finals)
        home = next((w for w in windows if w[0] <= first <= w[1]), None)
        if home is None:
            stray.append(tid)
        else:
            per[home[2]] = per.get(home[2], 0) + 1
            ids.setdefault(home[2], []).append(tid)
    return per, stray, ids


def run(ns: argparse.Namespace) -> int:
    duration = ns.duration or (120.0 if ns.quick else 600.0)
    if ns.gap:
        lo, hi = (float(x) for x in ns.gap.split(","))
        first, gap = (lo, hi), (lo, hi)
    elif ns.quick:
        first, gap = (15.0, 20.0), (18.0, 22.0)  # kill9 ~17 s, redis ~37 s, pause ~70 s, kill9 ~100 s
    else:
        first, gap = (30.0, 60.0), (30.0, 60.0)
    rotation = [k.strip() for k in ns.faults.split(",") if k.strip()]
    if not rotation or any(k not in KINDS for k in rotation):
        raise SystemExit(f"soak: --faults takes a comma list of {', '.join(KINDS)}; got {ns.faults!r}")
    drain_limit = 60.0 if ns.quick else 180.0
    rng = random.Random(ns.seed)
    out = Path(ns.out) if ns.out else Path(tempfile.mkdtemp(prefix="headway-soak-"))
    out.mkdir(parents=True, exist_ok=True)
    ledger_dir = out / "ledger"
    ledger_dir.mkdir(exist_ok=True)
    sends_log = out / "sends.log"
    abandoned_log = Path(str(sends_log) + ".abandoned")
    print(f"soak: {duration:.0f} s at {ns.rate_lo:.0f}-{ns.rate_hi:.0f} msg/s, faults {'/'.join(rotation)} "
          f"from {first[0]:.0f}-{first[1]:.0f} s, then every {gap[0]:.0f}-{gap[1]:.0f} s"
          f"{' (EARLY ACK: a check of the soak)' if ns.early_ack else ''}; files in {out}", flush=True)  # fmt: skip

    server = Redis(out)
    server.start()
    env = {
        **os.environ, "SOAK_URL": server.url, "SOAK_PREFIX": PREFIX,
        "SOAK_LEASE": str(LEASE), "SOAK_LEDGER": str(ledger_dir), "PYTHONUNBUFFERED": "1",
        "SOAK_ACKS_LATE": "0" if ns.early_ack else "1",
    }  # fmt: skip
    slots = [Slot(n, out, env) for n in (1, 2)]
    faults: list[dict[str, Any]] = []
    crashes: list[str] = []
    reasons: list[tuple[str, str]] = []  # (what, why): every reason the soak fails
    producer: subprocess.Popen[bytes] | None = None
    try:
        for s in slots:
            s.start()
        run_id = f"r{int(time.time())}"
        plog = out / "producer.log"
        with open(plog, "wb") as f:
            producer = subprocess.Popen(
                [sys.executable, __file__, "produce", "--url", server.url, "--log", str(sends_log),
                 "--duration", str(duration), "--rate-lo", str(ns.rate_lo), "--rate-hi", str(ns.rate_hi),
                 "--run", run_id, "--seed", str(ns.seed), "--give-up", str(GIVE_UP)],
                env=env, stdout=f, stderr=subprocess.STDOUT,
            )  # fmt: skip
        t0 = time.time()
        # The producer stops sending at `duration` and retries a refused
        # send for GIVE_UP more seconds at most; past that it is stuck.
        producer_deadline = t0 + duration + GIVE_UP + 30.0
        for s in slots:
            s.sample()
        outages = 0
        next_fault = t0 + rng.uniform(*first)
        next_sample = t0 + 5

        def watch() -> None:
            for s in slots:
                assert s.proc is not None
                if s.proc.poll() is not None:
                    crashes.append(f"worker{s.n} pid {s.pid} exited {s.proc.returncode}")
                    print(f"soak: !!! worker{s.n} (pid {s.pid}) exited {s.proc.returncode} by itself; restarting", flush=True)
                    s.start()

        while producer.poll() is None:
            now = time.time()
            if now > producer_deadline:
                producer.kill()
                producer.wait(10)
                reasons.append(("producer", f"the producer was still running {now - t0:.0f} s in (deadline "
                                            f"{producer_deadline - t0:.0f} s); killed"))  # fmt: skip
                break
            watch()
            if now >= next_sample:
                for s in slots:
                    s.sample()
                next_sample = now + 5
            if now >= next_fault and now < t0 + duration - 5:
                kind = rotation[len(faults) % len(rotation)]
                at = now - t0
                fault: dict[str, Any] = {"at": round(at, 1), "kind": kind}
                if kind == "kill9":
                    s = slots[len(faults) // len(rotation) % 2]
                    victim = s.pid
                    os.kill(victim, signal.SIGKILL)
                    assert s.proc is not None
                    s.proc.wait(10)
                    s.start()
                    what = f"kill -9 worker{s.n} (pid {victim}), restarted as pid {s.pid}"
                elif kind == "redis":
                    down = OUTAGES[outages % len(OUTAGES)]
                    outages += 1
                    server.kill()
                    time.sleep(down)
                    server.start()
                    fault["down"] = down
                    what = f"kill -9 redis-server, down {down:.0f} s, restarted on the same AOF"
                else:
                    s = slots[1 - len(faults) // len(rotation) % 2]
                    os.kill(s.pid, signal.SIGSTOP)
                    time.sleep(PAUSE)
                    os.kill(s.pid, signal.SIGCONT)
                    what = f"SIGSTOP worker{s.n} (pid {s.pid}) {PAUSE:.0f} s (lease {LEASE:.0f} s), SIGCONT"
                fault.update(end=round(time.time() - t0, 1), what=what)
                faults.append(fault)
                print(f"soak: t+{at:5.1f} s  {what}", flush=True)
                next_fault = time.time() + rng.uniform(*gap)
            time.sleep(0.2)
        produced = time.time() - t0
        ptext = plog.read_text()
        summary_lines = [ln for ln in ptext.splitlines() if ln.startswith("producer-summary ")]
        if not reasons and (producer.returncode != 0 or not summary_lines):
            print(ptext[-4000:], file=sys.stderr)
            raise SystemExit(f"soak: the producer failed (exit {producer.returncode})")
        psum = json.loads(summary_lines[-1].split(" ", 1)[1]) if summary_lines else {}

        # Drain: until every acknowledged send has a final outcome or is a
        # dead letter, and the queue is empty.
        sends = read_sends(sends_log)
        ledger = Ledger(ledger_dir)
        import headway

        inspect = headway.App(headway.RedisBroker(server.url, prefix=PREFIX, lease=LEASE))
        drain_start = time.time()
        deadline = drain_start + drain_limit
        seen, moved = -1, time.time()
        while True:
            watch()
            ledger.refresh()
            dead, dead_n = dead_ids(server.port, inspect)
            missing = set(sends) - set(ledger.final) - dead
            left = in_broker(server.port)
            if len(ledger.rows) != seen or left:
                seen, moved = len(ledger.rows), time.time()
            if not missing and left == 0:
                break
            # Nothing left in the broker and nothing ran for three leases:
            # whatever is missing is not coming (a lease brings back a dead
            # worker's claims, the next recover hands them out).
            if time.time() > deadline or time.time() - moved > 3 * LEASE:
                break
            time.sleep(0.5)
        drained = time.time() - drain_start
        for s in slots:
            s.sample()
        stops = [s.stop() for s in slots]
        ledger.refresh()  # what ran during the warm stop
        # Read back, with Redis still up: every acknowledged send's result,
        # and where a send the producer gave up on might be.
        results = read_results(server.port, sorted(sends))
        abandoned = read_sends(abandoned_log)
        ab_results = read_results(server.port, sorted(abandoned))
        elements = broker_elements(server.port) if abandoned else []
        dead, dead_n = dead_ids(server.port, inspect)
        left = in_broker(server.port)
    finally:
        if producer is not None and producer.poll() is None:
            producer.kill()
        for s in slots:
            s.stop()
        server.kill()
    if any(code not in (0, None) for code in stops):
        crashes.append(f"a worker's warm stop exited {stops}")

    # ---- the numbers
    enq = set(sends)
    done = set(ledger.final) & enq
    ok_ids = {r[0] for r in ledger.rows if r[5] == "ok"}
    succeeded = sum(1 for t in done if ledger.final[t][0] == "ok")
    failed = len(done) - succeeded
    finals = [r for r in ledger.rows if r[5] in ("ok", "fail")]
    retries = sum(1 for r in ledger.rows if r[5] == "retry")
    dup = len(finals) - len(ledger.final)
    twice = len(ledger.rows) - len({(r[0], r[1]) for r in ledger.rows})
    strays = set(ledger.final) - enq  # ran, but their send never answered
    no_result = sorted(t for t in enq if not result_ok(results.get(t), sends[t][0]))
    no_ledger = sorted(enq - ok_ids)
    failed_for_good = sorted(t for t in enq if (results.get(t) or b"").startswith(b"FAILURE|"))
    lost_ids = sorted(set(no_result) | set(no_ledger))
    lost = len(lost_ids)
    # A send the producer gave up on: fine only when it is nowhere.
    present = {}
    for t in abandoned:
        where = []
        if t in ledger.final or any(r[0] == t for r in ledger.rows):
            where.append("ledger")
        if ab_results.get(t) is not None:
            where.append("result")
        if any(t.encode() in e for e in elements):
            where.append("broker")
        if where:
            present[t] = where
    windows = dup_windows(faults, t0)
    dup_per, dup_stray, dup_ids = attribute_dups(ledger, windows)
    dup_over = {w[2]: (dup_per[w[2]], w[3]) for w in windows if dup_per.get(w[2], 0) > w[3]}
    lat = [ledger.final[t][1] - sends[t][1] for t in done]
    lat_fast = [ledger.final[t][1] - sends[t][1] for t in done if sends[t][0] == "fast"]
    # Steady state: fast runs sent and ended clear of every fault (from the
    # fault's start to two leases after its end, when recovery is done).
    spans = [(t0 + f["at"] - 1, t0 + f["end"] + 2 * LEASE) for f in faults]
    lat_steady = [
        ledger.final[t][1] - sends[t][1]
        for t in done
        if sends[t][0] == "fast"
        and not any(a < ledger.final[t][1] and sends[t][1] < b for a, b in spans)
    ]
    kinds = Counter(k for k, _, _ in sends.values())
    kinds_run = Counter(f["kind"] for f in faults)
    rss = {}
    for s in slots:
        first_s = s.rss[0] if s.rss else None
        last = s.rss[-1] if s.rss else None
        rss[f"worker{s.n}"] = {
            "start_kb": first_s[1] if first_s else None, "end_kb": last[1] if last else None,
            "max_kb": max(k for _, k, _ in s.rss) if s.rss else None,
            "pids": s.pids, "end_pid_start_kb": next((k for p, k, _ in s.rss if last and p == last[0]), None),
        }  # fmt: skip
    # The longest-lived worker process: RSS at its first and last sample.
    lives: dict[int, list[tuple[int, float]]] = {}
    for s in slots:
        for pid, kb, at in s.rss:
            lives.setdefault(pid, []).append((kb, at))
    longest = max(lives.items(), key=lambda kv: kv[1][-1][1] - kv[1][0][1], default=None)
    if longest is not None:
        pid, samples = longest
        rss["longest_lived"] = {
            "pid": pid, "seconds": round(samples[-1][1] - samples[0][1]),
            "start_kb": samples[0][0], "end_kb": samples[-1][0], "max_kb": max(k for k, _ in samples),
        }  # fmt: skip
    report = {
        "seconds": round(produced, 1), "drain_s": round(drained, 1), "early_ack": ns.early_ack,
        "in": len(enq), "out": len(done), "succeeded": succeeded, "failed": failed,
        "results_read_back": len(enq) - len(no_result), "no_result": len(no_result),
        "failed_for_good": len(failed_for_good),
        "executions": len(ledger.rows), "retried_attempts": retries, "dup": dup,
        "dup_attempts": twice, "dup_runs_by_fault": dup_per, "dup_outside_faults": len(dup_stray),
        "dead": dead_n, "lost": lost, "left_in_broker": left, "strays": len(strays),
        "abandoned": len(abandoned), "abandoned_present": present, "bad_ledger_lines": ledger.bad,
        "rate": round(len(enq) / produced, 1) if produced else 0,
        "kinds": dict(kinds), "fault_kinds": dict(kinds_run),
        "p50_ms": round(pct(lat, 50) * 1000, 1) if lat else None,
        "steady_p50_ms": round(pct(lat_steady, 50) * 1000, 1) if lat_steady else None,
        "steady_p99_ms": round(pct(lat_steady, 99) * 1000, 1) if lat_steady else None,
        "steady_n": len(lat_steady),
        "p99_ms": round(pct(lat, 99) * 1000, 1) if lat else None,
        "fast_p50_ms": round(pct(lat_fast, 50) * 1000, 1) if lat_fast else None,
        "fast_p99_ms": round(pct(lat_fast, 99) * 1000, 1) if lat_fast else None,
        "max_ms": round(max(lat) * 1000, 1) if lat else None,
        "producer": psum, "faults": faults, "crashes": crashes, "rss": rss, "out_dir": str(out),
    }  # fmt: skip

    print()
    print(f"soak report ({report['seconds']:.0f} s, drained in {report['drain_s']:.1f} s)")
    bound = ", ".join(f"{w[2]} ≤ {w[3]}" for w in windows) or "none (no fault that allows one)"
    rows = [
        ("in (acknowledged sends)", report["in"]),
        ("out (done)", f"{report['out']}  ({succeeded} succeeded, {failed} failed for good)"),
        ("results read back", f"{report['results_read_back']} SUCCESS of their kind, "
                              f"{len(no_result)} missing or wrong ({len(failed_for_good)} FAILURE)"),
        ("executions", f"{report['executions']}  ({retries} retried attempts)"),
        ("dup (ran twice)", f"{dup}  (same attempt twice: {twice}); by fault {dup_per or '{}'}, "
                            f"outside any fault window {len(dup_stray)}; allowed: {bound}"),
        ("dead letters", dead_n),
        ("LOST", f"{lost}  (no SUCCESS result {len(no_result)}, no ok in the ledger {len(no_ledger)})"),
        ("left in the broker", left),
        ("rate", f"{report['rate']} msg/s (target {ns.rate_lo:.0f}-{ns.rate_hi:.0f})  {dict(kinds)}"),
        ("latency send->end", f"p50 {report['p50_ms']} ms, p99 {report['p99_ms']} ms, max {report['max_ms']} ms"),
        ("  fast tasks only", f"p50 {report['fast_p50_ms']} ms, p99 {report['fast_p99_ms']} ms"),
        ("  fast, clear of faults", f"p50 {report['steady_p50_ms']} ms, p99 {report['steady_p99_ms']} ms "
                                    f"({len(lat_steady)} runs)"),
        ("producer", f"{psum.get('acked')} acked, {psum.get('send_failures')} send failures "
                     f"({psum.get('ids_retried')} ids retried, {psum.get('abandoned')} abandoned), "
                     f"send p99 {psum.get('send_p99_ms')} ms, slowest {psum.get('slowest_send_s')} s"),
        ("abandoned sends", f"{len(abandoned)}, of which found in the broker/ledger/results: {len(present)}"),
        ("sends that raised but ran", len(strays)),
        ("bad ledger lines", ledger.bad),
        ("fault kinds run", ", ".join(f"{k} ×{kinds_run.get(k, 0)}" for k in rotation)),
    ]  # fmt: skip
    for name, r in rss.items():
        if name == "longest_lived":
            rows.append(("RSS longest-lived worker", f"pid {r['pid']}: {r['start_kb']} kB -> {r['end_kb']} kB "
                                                     f"over {r['seconds']} s (max {r['max_kb']} kB)"))  # fmt: skip
            continue
        rows.append((f"RSS {name}", f"{r['start_kb']} kB at start -> {r['end_kb']} kB at end "
                                    f"(max {r['max_kb']} kB; pids {r['pids']})"))  # fmt: skip
    for fault in faults:
        rows.append((f"fault t+{fault['at']:.0f} s", fault["what"]))
    for c in crashes:
        rows.append(("CRASH", c))
    width = max(len(n) for n, _ in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    print(json.dumps(report), flush=True)

    if lost > 0:
        reasons.append(("lost", f"lost {lost} of {len(enq)}: {lost_ids[:20]}"))
    if dead_n:
        reasons.append(("dead", f"{dead_n} dead letters (the workload has no poison): {sorted(dead)[:20]}"))
    if present:
        reasons.append(("abandoned", f"{len(present)} sends the producer gave up on are in the broker: "
                                     f"{dict(list(present.items())[:10])}"))  # fmt: skip
    if ledger.bad:
        reasons.append(("ledger", f"{ledger.bad} ledger lines do not parse"))
    if dup_stray:
        reasons.append(("dup", f"{len(dup_stray)} runs ran twice outside any fault that allows it: {dup_stray[:20]}"))
    if dup_over:
        reasons.append(("dup", f"runs ran twice beyond the bound of their fault (got, bound): {dup_over}"))
    not_run = [k for k in rotation if not kinds_run.get(k)]
    if not_run:
        reasons.append(("faults", f"fault kinds that never ran: {not_run} (the run is too short for its faults)"))
    if not enq or not done:
        reasons.append(("flow", "nothing flowed"))
    if left:
        reasons.append(("left", f"{left} messages still in the broker after the drain"))
    if crashes:
        reasons.append(("crash", f"workers died by themselves: {crashes}"))
    for _, why in reasons:
        print(f"soak FAILED: {why}", file=sys.stderr)
    if ns.expect_loss:
        # The check of the soak itself: it must have failed for loss and
        # for nothing else.
        whats = {w for w, _ in reasons}
        if whats == {"lost"}:
            print(f"soak self-check OK: early-ack workers killed -9 lost {lost} runs, and the soak failed for it")
            if not ns.out:
                shutil.rmtree(out, ignore_errors=True)
            return 0
        print(f"soak self-check FAILED: expected a failure for loss alone, got {sorted(whats) or 'a pass'}",
              file=sys.stderr)  # fmt: skip
        print(f"soak: logs, ledger and AOF kept in {out}", file=sys.stderr)
        return 1
    if not reasons:
        print(f"soak OK: lost 0 of {len(enq)}; faults {dict(kinds_run)}; dup {dup} (allowed: {bound})")
        if not ns.out:  # a temp dir of our own: kept only when something failed
            shutil.rmtree(out, ignore_errors=True)
        return 0
    print(f"soak: logs, ledger and AOF kept in {out}", file=sys.stderr)
    return 1


def main() -> int:
    p = argparse.ArgumentParser(prog="soak", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command")
    r = sub.add_parser("produce", help="(internal) the producer process")
    r.add_argument("--url", required=True)
    r.add_argument("--log", required=True)
    r.add_argument("--duration", type=float, required=True)
    r.add_argument("--rate-lo", type=float, default=100.0)
    r.add_argument("--rate-hi", type=float, default=200.0)
    r.add_argument("--run", required=True)
    r.add_argument("--seed", type=int, default=7)
    r.add_argument("--give-up", type=float, default=60.0, help="seconds past the end to keep retrying a send")
    p.add_argument("--quick", action="store_true", help="2 minutes, faults every 30-35 s (CI)")
    p.add_argument("--duration", type=float, default=None, help="seconds of sending (600; --quick 120)")
    p.add_argument("--rate-lo", type=float, default=100.0, help="msg/s at the wave's low (100)")
    p.add_argument("--rate-hi", type=float, default=200.0, help="msg/s at the wave's high (200)")
    p.add_argument("--seed", type=int, default=7, help="the fault timing's and the mix's seed")
    p.add_argument(
        "--out", default=None,
        help="where the logs, ledger and AOF go (default: a temp dir, removed if the soak passed)",
    )  # fmt: skip
    p.add_argument(
        "--early-ack", action="store_true",
        help="a check of the soak itself: tasks acked on receipt, so a kill -9 loses runs and it must fail",
    )  # fmt: skip
    p.add_argument(
        "--expect-loss", action="store_true",
        help="with --early-ack: exit 0 only if the soak failed for loss and nothing else (selfcheck.sh)",
    )  # fmt: skip
    p.add_argument(
        "--faults", default=",".join(KINDS),
        help="the fault kinds in rotation, a comma list of kill9,redis,pause (all three; each must run)",
    )  # fmt: skip
    p.add_argument("--gap", default=None, help="LO,HI seconds to the first fault and between faults")
    ns = p.parse_args()
    if ns.expect_loss and not ns.early_ack:
        p.error("--expect-loss checks the soak with --early-ack; give both")
    if ns.command == "produce":
        return produce(ns)
    return run(ns)


if __name__ == "__main__":
    sys.exit(main())
