"""What each of headway's own-layout scripts costs Redis per message.

    python bench/tasks/lua_costs.py [N] [--runs R]

Starts its own ``redis-server`` (``--save "" --appendonly no``) on a free
loopback port and runs the scripts as the worker does, straight from
``core/src/broker/redis/lua/`` (the claim with the ``common.lua`` prelude):
N messages of the shape ``delay()`` sends are queued, claimed 16 at a time
(with the revoked check on, nothing revoked, as a worker claims), acked
one LREM each, and their SUCCESS results stored 16 per call with the count
indexes and tallies. Redis's ``INFO commandstats`` around each phase gives
µs per message: the script's own time (``evalsha``, which includes the
commands it calls) and each command inside it. Where a drain's
``costs.py`` shows Redis's total per task, this shows which script it is
and how much of a script is Lua rather than commands. Each phase is run R
times on a fresh database; the table shows the lowest and the highest.
Nothing else should run beside it.

``--batch 1,4,16,64`` runs the claim and the store at each of those batch
sizes and prints, after the tables, what each script costs per message at
each size: a script call has a fixed cost (its ``redis.call``s that do not
depend on the batch, its tables and arguments) that a small batch pays per
few messages. The drain's batches are what its rounds find waiting (about
9 messages a claim and a store at the default concurrency on a private
Redis, counted from ``SADD`` per task).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid

import redis

HERE = os.path.dirname(os.path.abspath(__file__))
LUA = os.path.join(HERE, "..", "..", "core", "src", "broker", "redis", "lua")
STATES = "PENDING RECEIVED STARTED RETRY SUCCESS FAILURE REVOKED".split()
FINALS = "SUCCESS FAILURE REVOKED".split()
BASE = "headway:{default}:"


def read(name: str) -> str:
    with open(os.path.join(LUA, name)) as f:
        return f.read()


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def stats(r: redis.Redis) -> dict[str, tuple[int, int]]:
    return {k[len("cmdstat_") :]: (v["calls"], v["usec"]) for k, v in r.info("commandstats").items()}


def delta(a: dict[str, tuple[int, int]], b: dict[str, tuple[int, int]]) -> dict[str, float]:
    out = {}
    for k, (calls, usec) in b.items():
        c0, u0 = a.get(k, (0, 0))
        if calls > c0 and k not in ("info", "config|resetstat", "flushall", "script|load"):
            out[k] = float(usec - u0)
    return out


def one_run(r: redis.Redis, n: int, batch: int) -> dict[str, dict[str, float]]:
    r.flushall()
    claim = r.script_load(read("common.lua") + read("claim.lua"))
    store = r.script_load(read("store.lua"))
    ids = [str(uuid.uuid4()) for _ in range(n)]
    p = r.pipeline(transaction=False)
    for i in ids:
        body = (
            '{"id":"%s","task":"bench.noop","args":[1],"kwargs":{},"queue":"default",'
            '"retries":0,"root_id":"%s"}' % (i, i)
        )
        p.lpush(BASE + "ready:0", body)
    p.execute()
    out: dict[str, dict[str, float]] = {}
    s0 = stats(r)
    held: list[bytes] = []
    p = r.pipeline(transaction=False)
    for k in range(n // batch):
        p.evalsha(claim, 1, BASE, "c", str(batch), "30000", "", "", "16777216", "headway:revoked:", "headway:revokes")
        if k % 50 == 49:
            for o in p.execute():
                held += o[0]
    for o in p.execute():
        held += o[0]
    if len(held) != n:
        raise SystemExit(f"lua_costs: claimed {len(held)} of {n}")
    s1 = stats(r)
    out[f"claim ({batch} a call, revoked check on, nothing revoked)"] = delta(s0, s1)
    p = r.pipeline(transaction=False)
    for k, e in enumerate(held):
        p.lrem(BASE + "held:c", -1, e)
        if k % 1000 == 999:
            p.execute()
    p.execute()
    s2 = stats(r)
    out["early ack (LREM of the held element)"] = delta(s1, s2)
    idx = ["headway:count:" + s for s in STATES] + ["headway:tally:" + s for s in FINALS]
    p = r.pipeline(transaction=False)
    for k in range(0, n, batch):
        chunk = ids[k : k + batch]
        args = ["86400000", "65536", "1"]
        for i in chunk:
            value = (
                'SUCCESS|{"id":"%s","state":"SUCCESS","result":null,"retries":0,'
                '"task":"bench.noop","at":%d}' % (i, int(time.time() * 1000))
            )
            args += [value, "1", "", ""]
        keys = ["headway:result:" + i for i in chunk] + idx
        p.evalsha(store, len(keys), *keys, *args)
        if k % (50 * batch) == 0:
            p.execute()
    p.execute()
    if r.zcard("headway:tally:SUCCESS") < 1 or r.exists(*("headway:result:" + i for i in ids[:10])) != 10:
        raise SystemExit("lua_costs: the results were not stored")
    s3 = stats(r)
    out[f"store ({batch} SUCCESS results a call)"] = delta(s2, s3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int, nargs="?", default=32_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batch", default="16", help="messages per script call; a comma list compares sizes")
    a = ap.parse_args()
    batches = [int(b) for b in a.batch.split(",")]
    if not batches or min(batches) < 1:
        raise SystemExit("lua_costs: --batch takes whole numbers from 1, comma-separated")
    step = max(batches)
    n = a.n - a.n % step
    server = shutil.which("redis-server")
    if not server:
        raise SystemExit("lua_costs: redis-server is not on PATH")
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="lua-costs-")
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", tmp],
        stdout=subprocess.DEVNULL,
    )
    try:
        r = redis.Redis(port=port)
        deadline = time.monotonic() + 10
        while True:
            try:
                r.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        version = r.info("server")["redis_version"]
        by_batch = {b: [one_run(r, n - n % b, b) for _ in range(a.runs)] for b in batches}
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"redis-server {version}, {n} messages, {a.runs} runs; µs of Redis CPU per message (lowest-highest)\n")
    for b, runs in by_batch.items():
        for phase in runs[0]:
            print(f"## {phase}\n")
            print("| command | µs per message |")
            print("|---|---:|")
            keys = sorted(runs[0][phase], key=lambda k: -runs[0][phase][k])
            for k in keys:
                vals = [run[phase].get(k, 0.0) / n for run in runs]
                name = "evalsha (the whole script)" if k == "evalsha" else k
                print(f"| {name} | {min(vals):.2f}-{max(vals):.2f} |")
            print()
    if len(batches) > 1:
        print("## the scripts by batch size (evalsha, µs per message)\n")
        print("| messages a call | claim | store |")
        print("|---:|---:|---:|")
        for b, runs in by_batch.items():
            cells = []
            for kind in ("claim", "store"):
                phase = next(ph for ph in runs[0] if ph.startswith(kind))
                vals = [run[phase].get("evalsha", 0.0) / n for run in runs]
                cells.append(f"{min(vals):.2f}-{max(vals):.2f}")
            print(f"| {b} | {cells[0]} | {cells[1]} |")
        print()

if __name__ == "__main__":
    main()
