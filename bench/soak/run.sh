#!/usr/bin/env bash
# headway's soak: a redis-server of its own (AOF, fsync always), two
# `headway worker` processes, a producer at 100-200 msg/s, and a fault every
# 30-60 s (kill -9 of a worker, kill -9 of Redis, SIGSTOP past the lease;
# each kind at least once, --quick too); then a ledger outside the broker and
# every stored result read back. Exits non-zero if a run was lost or failed,
# a dead letter exists, an abandoned send is in the broker, a ledger line is
# bad, a run ran twice outside a fault that allows it, or a fault kind did not
# run (soak.py's docstring has the exact rules).
#
#   bash bench/soak/run.sh            # 10 minutes
#   bash bench/soak/run.sh --quick    # 2 minutes (CI)
#   bash bench/soak/run.sh --duration 1800 --out /tmp/soak
#   bash bench/soak/selfcheck.sh      # the soak must fail when work is lost
#
# The Python: $HEADWAY_PYTHON, else the repo's .venv (what .ci/test makes),
# if it imports headway; else it builds .venv with
# `pip install .`. What soak.py does and counts: its docstring.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)

py=""
for cand in "${HEADWAY_PYTHON:-}" "$root/.venv/bin/python"; do
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
