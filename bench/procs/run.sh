#!/usr/bin/env bash
# headway's process pool beside its threads pool and Celery's prefork pool,
# on one private redis-server, in one run, one contender at a time; prints
# the tables and writes bench/procs/results.json (what each number means:
# bench/procs/README.md; `python3 bench/procs/report.py --table` prints the
# README's tables from results.json).
#
#   bash bench/procs/run.sh           # CPU-bound N = 200, drains of 20 000, 500 round trips
#   bash bench/procs/run.sh --quick   # CPU-bound N = 60, drains of 1 000, 500 round trips
#
# It installs the newest Celery 5.x with the Redis extras (`pip install
# --upgrade 'celery[redis]>=5,<6'` into bench/tasks/.venv-celery, the venv
# bench/tasks/compare.sh uses too) and takes headway's Python package from
# $HEADWAY_BENCH_PYTHON or ./.venv when it imports this checkout's headway,
# else builds it (`python3 -m venv .venv && .venv/bin/pip install .` at the
# root). It needs redis-server, redis-cli and python3 >= 3.11 on PATH.
#
# Each contender runs in a process of its own under a deadline
# (PROCS_TIMEOUT seconds: 300, 120 with --quick); one that fails or hangs
# is reported as FAILED and makes the script exit 1 after the tables.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

n_cpu=200
n_drain=20000
reps=3
rtt=500
quick=0
timeout_s="${PROCS_TIMEOUT:-300}"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick)
      quick=1
      n_cpu=60
      n_drain=1000
      reps=1
      timeout_s="${PROCS_TIMEOUT:-120}"
      ;;
    *)
      echo "usage: bash bench/procs/run.sh [--quick]" >&2
      exit 2
      ;;
  esac
  shift
done
export PROCS_TIMEOUT="$timeout_s"

say() { echo "procs: $*" >&2; }
die() {
  say "$*"
  exit 1
}

for tool in redis-server redis-cli python3 timeout; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not on PATH"
done

# ---------------------------------------------------------------- setup

cvenv="$root/bench/tasks/.venv-celery"
cpy="$cvenv/bin/python"
if [ ! -x "$cpy" ]; then
  python3 -m venv "$cvenv" || die "python3 -m venv $cvenv failed"
fi
say "installing the newest Celery 5.x (celery[redis]>=5,<6) into $cvenv"
"$cvenv/bin/pip" install --quiet --disable-pip-version-check --upgrade 'celery[redis]>=5,<6' \
  || die "pip could not install celery[redis]>=5,<6"

# headway for Python: this checkout's, never another checkout's.
hpy=""
for cand in "${HEADWAY_BENCH_PYTHON:-}" "$root/.venv/bin/python"; do
  [ -n "$cand" ] && [ -x "$cand" ] || continue
  if "$cand" - "$root" <<'PY' >/dev/null 2>&1; then
import os, sys
import headway
headway.SoftTimeLimitExceeded  # a build with the process pool
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

# ---------------------------------------------------------------- redis

started=$SECONDS
load_start="$(cut -d' ' -f1-3 /proc/loadavg)"
# Compilers running beside the run take CPU from the contenders: say so.
busy="$(ps -eo comm= | grep -cE '^(rustc|cargo|cc1|cc1plus|ld|node-gyp)$' || true)"
[ "$busy" -eq 0 ] || say "WARNING: $busy compiler processes are running; CPU-bound rates will be low"

work="$(mktemp -d "${TMPDIR:-/tmp}/headway-procs.XXXXXX")"
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
redis_version="$(redis-server --version | sed 's/.* v=\([^ ]*\).*/\1/')"

say "redis-server $redis_version on $url; headway $("$hpy" -c 'import headway; print(headway.__version__)'), Celery $("$cpy" -c 'import celery; print(celery.__version__)')"
say "CPU-bound N = $n_cpu, drains of $n_drain, $rtt round trips; $(nproc) cores, load $load_start"

# ---------------------------------------------------------------- contenders

failed=0
# contend NAME CMD...: flushes Redis, runs CMD under the deadline and keeps
# its last stdout line (a JSON object) as $work/NAME.json.
contend() {
  local name="$1"
  shift
  redis-cli -p "$port" flushall >/dev/null
  say "running $name"
  local rc=0
  timeout -k 10 "$timeout_s" "$@" >"$work/$name.out" 2>"$work/$name.err" || rc=$?
  if [ "$rc" -eq 0 ] && tail -n 1 "$work/$name.out" | python3 -c 'import json, sys; json.loads(sys.stdin.read())' 2>/dev/null; then
    tail -n 1 "$work/$name.out" >"$work/$name.json"
    return 0
  fi
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    say "$name FAILED: no answer within ${timeout_s}s"
  else
    say "$name FAILED: exit $rc"
  fi
  tail -n 15 "$work/$name.err" >&2 || true
  echo "{\"error\": \"exit $rc\"}" >"$work/$name.json"
  failed=1
}

# One loop count for every CPU-bound contender, measured once, here.
contend calibrate "$hpy" "$here/hw.py" calibrate 20
count="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["count"])' "$work/calibrate.json" 2>/dev/null)" \
  || die "the calibration failed"
say "spin count $count ($(python3 -c 'import json, sys; print("%.1f" % json.load(open(sys.argv[1]))["body_ms"])' "$work/calibrate.json") ms alone)"

# 1. CPU-bound.
contend cpu-threads "$hpy" "$here/hw.py" cpu "$url" "$n_cpu" "$count" --pool threads
contend cpu-process "$hpy" "$here/hw.py" cpu "$url" "$n_cpu" "$count" --pool process
contend cpu-celery "$cpy" "$here/cel.py" cpu "$url" "$n_cpu" "$count"

# 2. No-op drains, each contender $reps times in turn (Celery's rate alone
# varies twofold between runs here): the report takes each contender's
# median. 20 000 runs, as bench/tasks: a drain of 5 000 is half a second
# for headway, a third of it the ramp while the first claims and the
# children's first runs go through (5 000: 6.7–9.1k/s; 20 000 in the same
# minutes: 10.1–10.6k/s), so it measured the start rather than the rate. On Celery's layout
# the queue is filled by Celery's own producer, then counted again by
# Celery's result reader.
for r in $(seq 1 "$reps"); do
  contend drain-process@$r "$hpy" "$here/hw.py" drain "$url" "$n_drain" --pool process
  redis-cli -p "$port" flushall >/dev/null
  if timeout -k 10 "$timeout_s" "$cpy" "$here/cel.py" fill "$url" "$n_drain" "$work/celery-layout-$r.ids" >"$work/fill.out" 2>"$work/fill.err"; then
    # Not through contend, which would flush the queue just filled.
    say "running drain-process-celery@$r (the queue filled by Celery: $(tail -n 1 "$work/fill.out"))"
    rc=0
    timeout -k 10 "$timeout_s" "$hpy" "$here/hw.py" drain "$url" "$n_drain" --pool process --layout celery \
      --ids "$work/celery-layout-$r.ids" >"$work/drain-process-celery@$r.out" 2>"$work/drain-process-celery@$r.err" || rc=$?
    counted="$("$cpy" "$here/cel.py" count "$url" "$work/celery-layout-$r.ids" 2>>"$work/drain-process-celery@$r.err" | tail -n 1)" || rc=$?
    if [ "$rc" -eq 0 ] && python3 -c 'import json, sys; sys.exit(json.loads(sys.argv[1])["success"] != int(sys.argv[2]))' "$counted" "$n_drain"; then
      tail -n 1 "$work/drain-process-celery@$r.out" >"$work/drain-process-celery@$r.json"
    else
      say "drain-process-celery@$r FAILED: exit $rc; Celery reads ${counted:-nothing}"
      tail -n 15 "$work/drain-process-celery@$r.err" >&2 || true
      echo "{\"error\": \"exit $rc\"}" >"$work/drain-process-celery@$r.json"
      failed=1
    fi
  else
    say "drain-process-celery@$r FAILED: Celery's producer could not fill the queue"
    tail -n 15 "$work/fill.err" >&2 || true
    echo '{"error": "fill failed"}' >"$work/drain-process-celery@$r.json"
    failed=1
  fi
  contend drain-celery@$r "$cpy" "$here/cel.py" drain "$url" "$n_drain"
  contend drain-threads@$r "$hpy" "$here/hw.py" drain "$url" "$n_drain" --pool threads
done

# 3. The hop to a child.
contend hop-threads "$hpy" "$here/hw.py" hop "$url" "$rtt" --pool threads
contend hop-process "$hpy" "$here/hw.py" hop "$url" "$rtt" --pool process

# 4. Children at rest.
contend rss-process "$hpy" "$here/hw.py" rss "$url"
contend rss-celery "$cpy" "$here/cel.py" rss "$url"

# ---------------------------------------------------------------- report

cmd="bash bench/procs/run.sh"
[ "$quick" -eq 0 ] || cmd="$cmd --quick"
python3 "$here/report.py" "$work" "$here/results.json" \
  --meta "command=$cmd" "quick=$quick" "n_cpu=$n_cpu" "n_drain=$n_drain" "drain_reps=$reps" "round_trips=$rtt" \
  "commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo '+dirty')" \
  "seconds=$((SECONDS - started))" "compilers_at_start=$busy" \
  --versions "headway=$("$hpy" -c 'import headway; print(headway.__version__)')" \
  "celery=$("$cpy" -c 'import celery; print(celery.__version__)')" \
  "kombu=$("$cpy" -c 'import kombu; print(kombu.__version__)')" \
  "redis-py=$("$cpy" -c 'import redis; print(redis.__version__)')" \
  "redis=$redis_version" \
  "python=$("$hpy" -c 'import platform; print(platform.python_version())')" \
  "python-celery=$("$cpy" -c 'import platform; print(platform.python_version())')" \
  --load-start "$load_start"

if [ "$failed" -ne 0 ]; then
  say "a contender failed (see above)"
  exit 1
fi
