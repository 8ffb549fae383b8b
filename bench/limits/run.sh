#!/usr/bin/env bash
# headway's shared limits against `limits` (Python) and rate-limiter-flexible
# (Node), on one redis-server this script starts on a free loopback port, in
# one run. Writes bench/limits/results.json (every row, the commit, the
# versions, the machine) and bench/limits/results.md (the table).
#
#   bash bench/limits/run.sh [--calls N]
#
# Needs: .venv with headway built (`pip install .`) and
# `pip install -r bench/limits/requirements.txt`; the Node addon built
# (`npm install` at the root) and `npm install` in bench/limits.
set -euo pipefail
cd "$(dirname "$0")/../.."
CALLS=5000
if [ "${1:-}" = "--calls" ]; then CALLS=$2; fi
PY=${PYTHON:-.venv/bin/python}

PORT=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
DIR=$(mktemp -d)
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR" >/dev/null 2>&1 &
REDIS=$!
trap 'kill $REDIS 2>/dev/null; rm -rf "$DIR"' EXIT
until redis-cli -p "$PORT" ping >/dev/null 2>&1; do sleep 0.05; done
URL="redis://127.0.0.1:$PORT"

PYOUT=$($PY bench/limits/bench.py "$URL" --calls "$CALLS" --json)
redis-cli -p "$PORT" flushall >/dev/null
NODEOUT=$(node bench/limits/bench.mjs "$URL" --calls "$CALLS" --json)

PYOUT="$PYOUT" NODEOUT="$NODEOUT" REDISV="$(redis-server --version)" $PY - <<'PYEOF'
import json, os, platform, subprocess
from datetime import datetime, timezone

py = json.loads(os.environ["PYOUT"].strip().splitlines()[-1])
node = json.loads(os.environ["NODEOUT"].strip().splitlines()[-1])
commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip())
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
out = {
    "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    "commit": commit + ("+dirty" if dirty else ""),
    "machine": {"cpu": cpu, "cores": os.cpu_count(), "os": platform.platform()},
    "redis": os.environ["REDISV"],
    "python": py,
    "node": node,
}
here = "bench/limits/"
with open(here + "results.json", "w") as f:
    json.dump(out, f, indent=2)
    f.write("\n")
lines = [
    "# bench/limits results",
    "",
    f"`bash bench/limits/run.sh` at {out['when']}, commit `{out['commit']}`, "
    f"{py['calls']} calls per row; {cpu}, {os.cpu_count()} cores, {platform.platform()}; {out['redis']}.",
    "",
    "Python " + ", ".join(f"{k} {v}" for k, v in py["versions"].items()) + ".",
    "Node " + ", ".join(f"{k} {v}" for k, v in node["versions"].items()) + ".",
    "",
    "| side | row | result |",
    "|---|---|---|",
]
for side, d in (("Python", py), ("Node", node)):
    for r in d["rows"]:
        val = f"{r['us']:.1f} µs/call" if "us" in r else f"{r['perSec']:,.0f} calls/s"
        lines.append(f"| {side} | {r['name']} | {val} |")
with open(here + "results.md", "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
PYEOF
