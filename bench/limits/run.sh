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

# Where each process runs. A round trip on loopback costs very different
# amounts when the client and Redis share a core (the reply waits for the
# client to block; no cross-core wake-up) and when they do not (each
# message wakes the other core: on a VM an interrupt between virtual CPUs).
# Left to the scheduler, the placement changes during a run, so two rows
# measured a minute apart can be in different regimes: two unpinned runs
# on one machine once put rate-limiter-flexible 1.6 µs behind headway and
# then 2.6 µs ahead (docs/limits.md). So Redis is pinned to core 0 and every client row is run
# twice, the client on core 1 ("another core") and on core 0 ("Redis's
# core"): each peer is measured in both regimes, in the same run.
PIN=()
PLACES=("unpinned:")
if command -v taskset >/dev/null 2>&1; then
  PIN=(taskset -c 0)
  if [ "$(nproc)" -ge 2 ]; then PLACES=("another core:1" "Redis's core:0"); else PLACES=("Redis's core:0"); fi
fi
"${PIN[@]}" redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR" >/dev/null 2>&1 &
REDIS=$!
trap 'kill $REDIS 2>/dev/null; rm -rf "$DIR"' EXIT
until redis-cli -p "$PORT" ping >/dev/null 2>&1; do sleep 0.05; done
URL="redis://127.0.0.1:$PORT"

RUNS=()
for place in "${PLACES[@]}"; do
  name=${place%%:*}
  cpu=${place#*:}
  on=()
  if [ -n "$cpu" ]; then on=(taskset -c "$cpu"); fi
  redis-cli -p "$PORT" flushall >/dev/null
  PYOUT=$("${on[@]}" $PY bench/limits/bench.py "$URL" --calls "$CALLS" --json | tail -n 1)
  redis-cli -p "$PORT" flushall >/dev/null
  NODEOUT=$("${on[@]}" node bench/limits/bench.mjs "$URL" --calls "$CALLS" --json | tail -n 1)
  RUNS+=("{\"place\": \"$name\", \"python\": $PYOUT, \"node\": $NODEOUT}")
done
RUNSJSON="[$(IFS=,; echo "${RUNS[*]}")]"

RUNSJSON="$RUNSJSON" REDISV="$(redis-server --version)" $PY - <<'PYEOF'
import json, os, platform, subprocess
from datetime import datetime, timezone

runs = json.loads(os.environ["RUNSJSON"])
py, node = runs[0]["python"], runs[0]["node"]
commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip())
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
out = {
    "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    "commit": commit + ("+dirty" if dirty else ""),
    "machine": {"cpu": cpu, "cores": os.cpu_count(), "os": platform.platform()},
    "redis": os.environ["REDISV"],
    "runs": runs,
}
here = "bench/limits/"
with open(here + "results.json", "w") as f:
    json.dump(out, f, indent=2)
    f.write("\n")
places = [r["place"] for r in runs]
lines = [
    "# bench/limits results",
    "",
    f"`bash bench/limits/run.sh` at {out['when']}, commit `{out['commit']}`, "
    f"{py['calls']} calls per row; {cpu}, {os.cpu_count()} cores, {platform.platform()}; {out['redis']}.",
    "",
    "Python " + ", ".join(f"{k} {v}" for k, v in py["versions"].items()) + ".",
    "Node " + ", ".join(f"{k} {v}" for k, v in node["versions"].items()) + ".",
    "",
    "Redis on core 0; each row run with the client on " + " and on ".join(places) + " (see run.sh).",
    "",
    "| side | row | " + " | ".join(f"client on {p}" for p in places) + " |",
    "|---|---|" + "---:|" * len(places),
]
def val(r):
    return f"{r['us']:.1f} µs/call" if "us" in r else f"{r['perSec']:,.0f} calls/s"
for side, key in (("Python", "python"), ("Node", "node")):
    for i, r in enumerate(runs[0][key]["rows"]):
        cells = [val(run[key]["rows"][i]) for run in runs]
        lines.append(f"| {side} | {r['name']} | " + " | ".join(cells) + " |")
with open(here + "results.md", "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
PYEOF
