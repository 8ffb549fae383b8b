"""Reads run.sh's rows (``label|json`` lines) on stdin, writes
bench/cluster/results.json with the commit, versions and machine, and
prints the table."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone


def main() -> None:
    rows = []
    for line in sys.stdin.read().strip().splitlines():
        label, out = line.split("|", 1)
        rows.append({"row": label, **json.loads(out)})
    git = lambda *a: subprocess.run(["git", *a], capture_output=True, text=True).stdout.strip()  # noqa: E731
    commit = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "")
    import headway  # noqa: F401  (the build measured)

    out = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "dirty": dirty,
        "n": int(os.environ["N"]),
        "machine": {
            "cpu": cpu,
            "cores": os.cpu_count(),
            "os": platform.platform(),
            "load": open("/proc/loadavg").read().split()[:3],
        },
        "versions": {"redis": os.environ["REDISV"], "python": platform.python_version()},
        "queue_slots": os.environ["OWNERS"].split(),
        "rows": rows,
    }
    with open("bench/cluster/results.json", "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    load = " ".join(out["machine"]["load"])
    print(f"N = {out['n']}, commit {commit[:12]}{' (dirty)' if dirty else ''}, load {load}")
    print("| broker | drain/s | fill/s (group of 1000) |")
    print("|---|---:|---:|")
    for r in rows:
        print(f"| {r['row']} | {r['drain']:,.0f} | {r['fill']:,.0f} |")


if __name__ == "__main__":
    main()
