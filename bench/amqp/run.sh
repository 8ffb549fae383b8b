#!/usr/bin/env bash
# The drain rate of headway's worker and Celery's on one RabbitMQ, in one
# run: each contender drains N no-op runs that Celery's producer queued
# first (results stored in Celery's Redis format, every one counted and
# checked SUCCESS). Prints a table and writes bench/amqp/results.json.
#
#   bash bench/amqp/run.sh            # N = 20000 (BENCH_N=… to change it)
#   bash bench/amqp/run.sh --quick    # N = 500
#
# Needs a RabbitMQ on 127.0.0.1:5672 (guest) with rabbitmqctl, redis-server,
# and the root's .venv with headway and Celery (bash .ci/test makes it).
# Each contender gets a fresh vhost and a flushed Redis database.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
py="${HEADWAY_BENCH_PYTHON:-$root/.venv/bin/python}"
n=${BENCH_N:-20000}
[ "${1:-}" = "--quick" ] && n=500

port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" >/dev/null &
redis_pid=$!
vhost=""
worker=""
cleanup() {
  [ -n "$worker" ] && kill -9 "$worker" 2>/dev/null || true
  [ -n "$vhost" ] && rabbitmqctl -q delete_vhost "$vhost" >/dev/null 2>&1 || true
  kill "$redis_pid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done

export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
export BENCH_REDIS="redis://127.0.0.1:$port/0"
declare -A rows
for who in headway celery-prefork; do
  vhost="headway-bench-$$-$who"
  rabbitmqctl -q add_vhost "$vhost" >/dev/null
  rabbitmqctl -q set_permissions -p "$vhost" guest '.*' '.*' '.*' >/dev/null
  export BENCH_AMQP="amqp://guest:guest@127.0.0.1:5672/$vhost"
  redis-cli -p "$port" flushall >/dev/null
  (cd "$here" && "$py" drain.py fill "$n")
  case "$who" in
    headway) (cd "$here" && exec "$py" drain.py headway) >"$dir/$who.log" 2>&1 & ;;
    celery-prefork) (cd "$here" && exec "$py" -m celery -A cel_app worker -P prefork -c 2 --without-gossip --without-mingle --without-heartbeat -l warning) >"$dir/$who.log" 2>&1 & ;;
  esac
  worker=$!
  if ! rows[$who]=$(cd "$here" && "$py" drain.py count "$n" 300); then
    echo "bench/amqp: $who FAILED: ${rows[$who]}" >&2
    tail -20 "$dir/$who.log" >&2
    exit 1
  fi
  kill -9 "$worker" 2>/dev/null || true
  wait "$worker" 2>/dev/null || true
  worker=""
  rabbitmqctl -q delete_vhost "$vhost" >/dev/null
  vhost=""
  echo "$who: ${rows[$who]}" >&2
done

"$py" - "$n" "${rows[headway]}" "${rows[celery-prefork]}" >"$here/results.json" <<'PY'
import json, platform, subprocess, sys
import celery, kombu, headway
n = int(sys.argv[1])
rows = dict(zip(["headway (defaults: threads, -c 4)", "Celery (prefork, -c 2)"],
                map(json.loads, sys.argv[2:])))
import datetime, os
rabbit = subprocess.run(["rabbitmqctl", "-q", "version"], capture_output=True, text=True).stdout.strip()
commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
print(json.dumps({"when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "commit": commit, "n": n, "rows": rows,
                  "versions": {"headway": headway.__version__ if hasattr(headway, "__version__") else "checkout",
                  "celery": celery.__version__, "kombu": kombu.__version__, "rabbitmq": rabbit,
                  "python": platform.python_version()},
                  "machine": {"nproc": os.cpu_count(), "kernel": platform.release(), "arch": platform.machine(),
                              "cpu": cpu, "load_at_end": " ".join(f"{x:.2f}" for x in os.getloadavg())},
                  "cpus": os.cpu_count()}, indent=2))
PY
"$py" - "$here/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"RabbitMQ drain of {r['n']} no-op runs (results in Redis, all counted SUCCESS)")
print("| worker | runs/s | drain, s |")
print("|---|---:|---:|")
for k, v in r["rows"].items():
    print(f"| {k} | {v['runs_per_s']:.0f} | {v['drain_s']:.2f} |")
PY
