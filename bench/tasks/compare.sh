#!/usr/bin/env bash
# headway against BullMQ and Celery on one private redis-server, on this
# machine, in one run; prints a table of rates and ratios and writes
# bench/tasks/results.json (what is measured and the fairness rules:
# bench/tasks/README.md; `python3 bench/tasks/report.py --table` prints the
# README's table from results.json).
#
#   bash bench/tasks/compare.sh            # N = 20 000, 2 000 round trips
#   bash bench/tasks/compare.sh --quick    # N = 5 000, 500 round trips
#   bash bench/tasks/compare.sh --n 2000 --rtt 200   # a smoke run
#
# From a fresh clone it installs what it needs, the newest release of each
# peer's major line every run: BullMQ 6 (`npm install bullmq@6 ioredis@5` in
# bench/tasks/peers; ioredis is BullMQ's default client, which 6.x no longer
# pulls in itself); Celery 5 with Redis extras (`pip install --upgrade
# 'celery[redis]>=5,<6'` into bench/tasks/.venv-celery); headway's
# Python package from $HEADWAY_BENCH_PYTHON or ./.venv when
# one imports headway, else `python3 -m venv .venv && .venv/bin/pip install .`
# at the root; the Node addon with `npm install` at the root when
# bindings-node/headway.node is missing (`npm run build` when it no longer
# loads; HEADWAY_BENCH_REBUILD=1 rebuilds both first). It needs redis-server, redis-cli,
# node and python3 >= 3.11 on PATH.
#
# Every contender runs in its own process under a deadline
# (HEADWAY_BENCH_TIMEOUT seconds, default 600, 240 with --quick); one that
# fails or hangs is reported and makes the script exit 1 after the table.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

n=20000
rtt=2000
timeout_s="${HEADWAY_BENCH_TIMEOUT:-600}"
quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick)
      quick=1
      n=5000
      rtt=500
      timeout_s="${HEADWAY_BENCH_TIMEOUT:-240}"
      ;;
    --n)
      n="$2"
      quick=1
      shift
      ;;
    --rtt)
      rtt="$2"
      shift
      ;;
    *)
      echo "usage: bash bench/tasks/compare.sh [--quick] [--n N] [--rtt RTT]" >&2
      exit 2
      ;;
  esac
  shift
done
export HEADWAY_BENCH_TIMEOUT="$timeout_s"

say() { echo "compare: $*" >&2; }
die() {
  say "$*"
  exit 1
}

for tool in redis-server redis-cli node npm python3 timeout; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not on PATH"
done

# ---------------------------------------------------------------- setup

# BullMQ: the newest 6.x, with ioredis 5 beside it (npm resolves `@6` to the
# newest 6.x and records it in peers/package.json and its lockfile).
peers="$here/peers"
say "installing the newest BullMQ 6.x and ioredis 5.x into $peers/node_modules"
(cd "$peers" && npm install --no-audit --no-fund --loglevel=error bullmq@6 ioredis@5) \
  || die "npm install bullmq@6 ioredis@5 in $peers failed"

# Celery: the newest 5.x with the Redis extras, in a venv of its own.
cvenv="$here/.venv-celery"
cpy="$cvenv/bin/python"
if [ ! -x "$cpy" ]; then
  python3 -m venv "$cvenv" || die "python3 -m venv $cvenv failed"
fi
say "installing the newest Celery 5.x (celery[redis]>=5,<6) into $cvenv"
"$cvenv/bin/pip" install --quiet --disable-pip-version-check --upgrade 'celery[redis]>=5,<6' \
  || die "pip could not install celery[redis]>=5,<6"

# headway for Python: this checkout's (an editable install of it, or a
# package installed into that venv), never another checkout's.
# HEADWAY_BENCH_REBUILD=1 builds both from this checkout first, whatever is
# installed (to measure the sources as they are now).
rebuild="${HEADWAY_BENCH_REBUILD:-0}"
hpy=""
[ "$rebuild" = 1 ] || for cand in "${HEADWAY_BENCH_PYTHON:-}" "$root/.venv/bin/python"; do
  [ -n "$cand" ] && [ -x "$cand" ] || continue
  if "$cand" - "$root" <<'PY' >/dev/null 2>&1; then
import os, sys
import headway
here = os.path.realpath(headway.__file__)
mine = [os.path.realpath(sys.argv[1]), os.path.realpath(sys.prefix)]
sys.exit(0 if os.environ.get("HEADWAY_BENCH_PYTHON") or any(here.startswith(m + os.sep) for m in mine) else 1)
PY
    hpy="$cand"
    break
  fi
done
if [ -z "$hpy" ]; then
  say "building headway's Python package into $root/.venv (a release build: minutes)"
  (cd "$root" && { [ -x .venv/bin/python ] || python3 -m venv .venv; } && .venv/bin/pip install --quiet --disable-pip-version-check --force-reinstall .) \
    || die "pip install . failed"
  hpy="$root/.venv/bin/python"
fi

# headway for Node: built when missing, or rebuilt when it no longer loads
# with this checkout's JS (an addon older than the sources).
if [ "$rebuild" = 1 ] || ! (cd "$root" && node -e "require('./bindings-node/index.js')") >/dev/null 2>&1; then
  if [ -d "$root/node_modules/@napi-rs/cli" ]; then
    say "rebuilding the Node addon with npm run build at $root (a release build: minutes)"
    (cd "$root" && npm run build) || die "npm run build at the root failed"
  else
    say "building the Node addon with npm install at $root (a release build: minutes)"
    (cd "$root" && npm install --no-audit --no-fund --loglevel=error) || die "npm install at the root failed"
  fi
  (cd "$root" && node -e "require('./bindings-node/index.js')") || die "the Node addon does not load"
fi

# ---------------------------------------------------------------- redis

started=$SECONDS
load_start="$(cut -d' ' -f1-3 /proc/loadavg)"

work="$(mktemp -d "${TMPDIR:-/tmp}/headway-compare.XXXXXX")"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
  --logfile "$work/redis.log" &
redis_pid=$!
cleanup() {
  kill "$redis_pid" 2>/dev/null || true
  wait "$redis_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 1 200); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  sleep 0.05
done
redis-cli -p "$port" ping >/dev/null 2>&1 || die "redis-server did not start on port $port"
url="redis://127.0.0.1:$port/0"
# The contenders read redis-server's CPU time from /proc (where the time goes).
export HEADWAY_BENCH_REDIS_PID="$redis_pid"

hw_version="$("$hpy" -c 'import headway; print(headway.__version__)')"
celery_version="$("$cpy" -c 'import celery; print(celery.__version__)')"
kombu_version="$("$cpy" -c 'import kombu; print(kombu.__version__)')"
redispy_version="$("$cpy" -c 'import redis; print(redis.__version__)')"
bullmq_version="$(cd "$peers" && node -p "require('bullmq/package.json').version" 2>/dev/null || echo '?')"
ioredis_version="$(cd "$peers" && node -p "require('ioredis/package.json').version" 2>/dev/null || echo '?')"
say "redis-server $(redis-server --version | sed 's/.* v=\([^ ]*\).*/\1/') on $url; headway $hw_version, BullMQ $bullmq_version, Celery $celery_version"
say "N = $n tasks per drain, $rtt round trips, deadline ${timeout_s}s per contender; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

# ---------------------------------------------------------------- contenders

failed=0
# contend NAME FILL CMD...: flushes Redis; with FILL=celery a real Celery
# producer first fills the Celery-layout queue with N runs; then runs CMD
# under the deadline and keeps its last stdout line (a JSON object) in
# $work/NAME.json.
contend() {
  local name="$1" fill="$2"
  shift 2
  redis-cli -p "$port" flushall >/dev/null
  local rc=0 what=""
  if [ "$fill" = celery ]; then
    timeout -k 10 "$timeout_s" "$cpy" "$here/vs_celery.py" fill "$url" "$n" "$work/$name.ids" >"$work/$name.fill" 2>"$work/$name.err" || rc=$?
    what="the Celery producer, filling the queue,"
    [ "$rc" -eq 0 ] && say "running $name (the queue filled by Celery: $(tail -n 1 "$work/$name.fill"))"
  else
    say "running $name"
  fi
  if [ "$rc" -eq 0 ]; then
    what=""
    timeout -k 10 "$timeout_s" "$@" >"$work/$name.out" 2>"$work/$name.err" || rc=$?
  fi
  # A headway worker on Celery's layout: Celery itself must read N SUCCESS
  # results in its own format.
  if [ "$rc" -eq 0 ] && [ "$fill" = celery ]; then
    local counted
    counted="$("$cpy" "$here/vs_celery.py" count "$url" "$work/$name.ids" 2>>"$work/$name.err" | tail -n 1)" || rc=$?
    if [ "$rc" -eq 0 ] && ! python3 -c 'import json, sys; sys.exit(json.loads(sys.argv[1])["success"] != int(sys.argv[2]))' "$counted" "$n"; then
      say "$name: Celery reads $counted after the drain, not $n SUCCESS"
      rc=3
    fi
  fi
  if [ "$rc" -eq 0 ] && tail -n 1 "$work/$name.out" | python3 -c 'import json, sys; json.loads(sys.stdin.read())' 2>/dev/null; then
    tail -n 1 "$work/$name.out" >"$work/$name.json"
    return 0
  fi
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    say "$name FAILED: $what no answer within ${timeout_s}s"
  else
    say "$name FAILED: $what exit $rc"
  fi
  tail -n 15 "$work/$name.err" >&2 || true
  echo "{\"error\": \"exit $rc\"}" >"$work/$name.json"
  failed=1
}

# The floor under every round trip: one Redis PING from Python.
contend redis-ping - "$cpy" "$here/vs_celery.py" ping "$url" "$rtt"
# Headline rows: headway at its defaults. The tuned rows are labelled.
contend headway-py - "$hpy" "$here/vs_headway.py" "$url" "$n" "$rtt"
contend headway-js - node "$here/vs_headway.mjs" "$url" "$n" "$rtt"
contend bullmq - node "$peers/vs_bullmq.mjs" "$url" "$n" "$rtt"
contend celery - "$cpy" "$here/vs_celery.py" run "$url" "$n" "$rtt"
contend headway-py-celery celery "$hpy" "$here/vs_headway.py" "$url" "$n" "$rtt" --layout celery --ids "$work/headway-py-celery.ids"
contend headway-js-celery celery node "$here/vs_headway.mjs" "$url" "$n" "$rtt" --layout celery --ids "$work/headway-js-celery.ids"
contend headway-py-tuned - "$hpy" "$here/vs_headway.py" "$url" "$n" "$rtt" --tuned
contend headway-js-tuned - node "$here/vs_headway.mjs" "$url" "$n" "$rtt" --tuned

# ---------------------------------------------------------------- report

python3 "$here/report.py" "$work" "$here/results.json" \
  --n "$n" --rtt "$rtt" --quick "$quick" \
  --versions "headway=$hw_version" "bullmq=$bullmq_version" "ioredis=$ioredis_version" \
  "celery=$celery_version" "kombu=$kombu_version" "redis-py=$redispy_version" \
  "redis=$(redis-server --version | sed 's/.* v=\([^ ]*\).*/\1/')" "node=$(node --version)" \
  "python=$("$hpy" -c 'import platform; print(platform.python_version())')" \
  --commit "$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo '+dirty')" \
  --load-start "$load_start" --seconds "$((SECONDS - started))"

if [ "$failed" -ne 0 ]; then
  say "a contender failed (see above)"
  exit 1
fi
