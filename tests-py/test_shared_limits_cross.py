"""One SharedBucket across languages and processes: this Python process and a
Node process (tests-js/fixtures/shared-bucket.mjs) take from the same key as
fast as they can for 3 s. Together they get at most what the bucket allows —
its burst plus the rate for those 3 s (and the 10 ms a last call may take to
reach Redis) — and at least 90 % of it, so neither side was starved by a
broken script. The control: each process also takes from a bucket of its own
with the same rate, and those together get about twice the bound, so the
bound is one the check could have caught being broken."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import headway
from conftest import RedisServer

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests-js" / "fixtures" / "shared-bucket.mjs"
RATE, BURST, SECONDS = 100.0, 50.0, 3.0


def _node() -> str:
    node = shutil.which("node")
    assert node is not None, "node is not installed (the Node side of the test)"
    assert list((ROOT / "bindings-node").glob("headway*.node")), (
        "the Node addon is not built: run `npm install` at the repo root first"
    )
    return node


def test_python_and_node_share_one_bucket(redis_server: RedisServer) -> None:
    shared = f"cross-{uuid.uuid4().hex}"
    mine, theirs = f"{shared}-py", f"{shared}-node"
    # Both start on the same wall-clock instant, far enough ahead for Node
    # to load.
    start = time.time() + 1.5
    node = subprocess.Popen(
        [_node(), str(FIXTURE), redis_server.url, shared, theirs,
         str(RATE), str(BURST), str(int(start * 1000)), str(SECONDS)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    a = headway.SharedBucket(redis_server.url, shared, RATE, burst=BURST)
    b = headway.SharedBucket(redis_server.url, mine, RATE, burst=BURST)
    got = {"shared": 0, "own": 0}
    while time.time() < start:
        time.sleep(0.001)
    end = start + SECONDS
    while time.time() < end:
        got["shared"] += a.take()
        got["own"] += b.take()
    out, err = node.communicate(timeout=30)
    assert node.returncode == 0, f"node exited {node.returncode}:\n{out}\n{err}"
    theirs_got = json.loads(out.strip().splitlines()[-1])

    print(f"python {got}, node {theirs_got}")
    bound = BURST + RATE * (SECONDS + 0.01)
    total = got["shared"] + theirs_got["shared"]
    assert total <= bound, (got, theirs_got)
    assert total >= 0.9 * (BURST + RATE * SECONDS), (got, theirs_got)
    # Both languages took from it.
    assert got["shared"] > 0 and theirs_got["shared"] > 0, (got, theirs_got)
    # The control: two buckets, one per process, let through twice as much.
    assert got["own"] + theirs_got["own"] > 1.5 * bound, (got, theirs_got)
