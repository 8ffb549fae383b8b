#!/usr/bin/env bash
# headway's drain on a Redis Cluster (3 primaries, 3 replicas) beside one
# Redis, in one run, on servers this script starts on free loopback ports.
# Writes bench/cluster/results.json (every row, the commit, the versions,
# the machine).
#
#   bash bench/cluster/run.sh [--quick]     # N = 20000 (--quick: 2000)
#
# Needs redis-server and redis-cli, and .venv with headway built
# (`bash .ci/test` makes it; PYTHON overrides the interpreter).
set -euo pipefail
cd "$(dirname "$0")/../.."
N=20000
if [ "${1:-}" = "--quick" ]; then N=2000; fi
PY=${PYTHON:-.venv/bin/python}
DIR=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$DIR"' EXIT

free_pair() { # a port whose cluster bus port (+10000) is free too
  $PY - <<'PYEOF'
import socket
while True:
    a = socket.socket(); a.bind(("127.0.0.1", 0)); p = a.getsockname()[1]
    if p > 55000: a.close(); continue
    b = socket.socket()
    try:
        b.bind(("127.0.0.1", p + 10000)); print(p); break
    except OSError:
        pass
    finally:
        a.close(); b.close()
PYEOF
}

start() { # port, extra args...
  local port=$1; shift
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR" "$@" >/dev/null 2>&1 &
  PIDS+=($!)
  until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
}

ONE=$(free_pair)
start "$ONE"
PORTS=()
for i in 1 2 3 4 5 6; do
  p=$(free_pair)
  start "$p" --cluster-enabled yes --cluster-node-timeout 2000 --cluster-config-file "$DIR/nodes-$p.conf"
  PORTS+=("$p")
done
redis-cli --cluster create $(for p in "${PORTS[@]}"; do echo "127.0.0.1:$p"; done) \
  --cluster-replicas 1 --cluster-yes >/dev/null
for p in "${PORTS[@]}"; do
  until redis-cli -p "$p" cluster info | grep -q cluster_state:ok; do sleep 0.1; done
done
SEEDS=$(IFS=,; echo "${PORTS[*]/#/127.0.0.1:}")
CLUSTER="redis+cluster://$SEEDS/"

# Which primary owns each queue's slot (a queue's keys share the hash tag {q}).
NODES=$(redis-cli -p "${PORTS[0]}" cluster nodes)
OWNERS=""
for q in q0 q1 q2; do
  slot=$(redis-cli -p "${PORTS[0]}" cluster keyslot "$q")
  owner=$(NODES="$NODES" SLOT="$slot" $PY -c '
import os
slot = int(os.environ["SLOT"])
for line in os.environ["NODES"].splitlines():
    f = line.split()
    if "master" not in f[2]:
        continue
    for r in f[8:]:
        a, _, b = r.partition("-")
        if int(a) <= slot <= int(b or a):
            print(f[1].split("@")[0].rsplit(":", 1)[1])
')
  OWNERS="$OWNERS $q:slot$slot:primary$owner"
done

row() { # label url queues
  local out
  out=$($PY bench/cluster/drain.py "$2" "$N" "$3")
  echo "$1|$out"
}

ROWS=()
ROWS+=("$(row "one Redis, 1 queue" "redis://127.0.0.1:$ONE/0" 1)")
ROWS+=("$(row "one Redis, 3 queues" "redis://127.0.0.1:$ONE/1" 3)")
ROWS+=("$(row "Cluster (3 primaries + 3 replicas), 1 queue" "$CLUSTER" 1)")
redis-cli --cluster call "127.0.0.1:${PORTS[0]}" FLUSHALL >/dev/null 2>&1 || true
ROWS+=("$(row "Cluster (3 primaries + 3 replicas), 3 queues" "$CLUSTER" 3)")

printf '%s\n' "${ROWS[@]}" | N="$N" OWNERS="$OWNERS" REDISV="$(redis-server --version)" $PY bench/cluster/report.py
