#!/usr/bin/env bash
# headway's soak (issue 7): a redis-server of its own (AOF, fsync always),
# two `headway worker` processes, a producer at 100-200 msg/s, and a fault
# every 30-60 s (kill -9 of a worker, kill -9 of Redis, SIGSTOP past the
# lease); then lost = enqueued - done - dead - revoked - expired from a
# ledger outside the broker. Exits non-zero if anything was lost.
#
#   bash bench/soak/run.sh            # 10 minutes
#   bash bench/soak/run.sh --quick    # 2 minutes (CI)
#   bash bench/soak/run.sh --duration 1800 --out /tmp/soak
#
# The Python: $HEADWAY_PYTHON, else the repo's .venv (what .ci/test makes),
# else /work/venv-py, if it imports headway; else it builds .venv with
# `pip install .`. What soak.py does and counts: its docstring.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)

py=""
for cand in "${HEADWAY_PYTHON:-}" "$root/.venv/bin/python" /work/venv-py/bin/python; do
  if [[ -n "$cand" && -x "$cand" ]] && "$cand" -c 'import headway' 2>/dev/null; then
    py=$cand
    break
  fi
done
if [[ -z "$py" ]]; then
  echo "soak: no Python imports headway; building $root/.venv (pip install .)"
  [[ -x "$root/.venv/bin/python" ]] || python3 -m venv "$root/.venv"
  "$root/.venv/bin/python" -m pip install --quiet "$root"
  py=$root/.venv/bin/python
fi
if ! command -v redis-server >/dev/null; then
  echo "soak: redis-server is not installed (apt-get install redis-server)" >&2
  exit 2
fi
echo "soak: python $py"
exec "$py" "$root/bench/soak/soak.py" "$@"
