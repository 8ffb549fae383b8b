#!/usr/bin/env bash
# Flower 2.x against a headway worker on Celery's Redis layout: Flower lists
# the worker (registered tasks, stats, heartbeats), shows the tasks a Celery
# producer sent and headway ran (SUCCESS with result and runtime, FAILURE
# with the exception), revokes a running task with terminate, renders its
# workers and tasks pages in headless chromium, and shuts the worker down
# (interop/flower/test_flower.py says what each step proves).
#
#   bash interop/run_flower.sh [pytest args]
#   bash interop/run_flower.sh --screenshot <png>   # docs/flower.png's maker
#                                                   # (interop/flower_screenshot.sh)
#
# The Celery side: interop/.venv (as interop/run.sh makes it), with
# interop/flower/requirements.txt installed into it (Celery 5.5, Flower
# pinned, pytest). headway's Python package: HEADWAY_FLOWER_HW_PYTHON, else
# <repo>/.venv when it imports headway, else <repo>/.venv made with
# `pip install .`. Needs redis-server and chromium (HEADWAY_CHROMIUM names
# another). Nothing is skipped: anything missing is a failure (exit 1).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
reqs="$here/flower/requirements.txt"

fail() { echo "flower: $1" >&2; exit 1; }

command -v redis-server >/dev/null 2>&1 || fail "redis-server is not on PATH"
chromium="${HEADWAY_CHROMIUM:-$(command -v chromium || true)}"
[ -n "$chromium" ] && [ -x "$chromium" ] || fail "chromium is not installed (apt-get install -y chromium)"
export HEADWAY_CHROMIUM="$chromium"

# The Celery side, with Flower and pytest.
venv="$here/.venv"
py="$venv/bin/python"
want_flower="$(sed -n 's/^flower==\([0-9.]*\).*/\1/p' "$reqs")"
[ -n "$want_flower" ] || fail "$reqs pins no flower==X.Y.Z"
have() {
  "$py" - "$want_flower" <<'PY' >/dev/null 2>&1
import sys
import celery, flower, pytest, redis
assert celery.__version__.startswith("5.5."), celery.__version__
assert flower.__version__ == sys.argv[1], flower.__version__
PY
}
if [ ! -x "$py" ]; then
  base="$(command -v python3.11 || command -v python3 || true)"
  [ -n "$base" ] || fail "no python3 to make $venv with"
  echo "flower: making $venv"
  "$base" -m venv "$venv" || fail "python3 -m venv failed"
fi
if ! have; then
  echo "flower: installing $reqs into $venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$reqs" || fail "pip could not install $reqs"
  have || fail "$py does not have the pinned Celery 5.5, flower==$want_flower and pytest after installing"
fi
"$py" -c 'import celery, flower, kombu; print("flower: celery", celery.__version__, "kombu", kombu.__version__, "flower", flower.__version__)'

# headway's Python package (the worker side).
hpy="${HEADWAY_FLOWER_HW_PYTHON:-}"
if [ -z "$hpy" ] && [ -x "$root/.venv/bin/python" ] && "$root/.venv/bin/python" -c 'import headway' >/dev/null 2>&1; then
  hpy="$root/.venv/bin/python"
fi
if [ -z "$hpy" ]; then
  base="$(command -v python3.11 || command -v python3 || true)"
  [ -n "$base" ] || fail "no python3 to build headway's Python package with"
  echo "flower: building headway's Python package into $root/.venv (pip install .)"
  [ -x "$root/.venv/bin/python" ] || "$base" -m venv "$root/.venv" || fail "python3 -m venv failed"
  "$root/.venv/bin/pip" install --quiet --disable-pip-version-check "$root" || fail "pip install . failed"
  hpy="$root/.venv/bin/python"
fi
"$hpy" -c 'import headway, sys; print("flower: headway (Python)", sys.executable)' || fail "$hpy cannot import headway"
export HEADWAY_FLOWER_HW_PYTHON="$hpy"

if [ "${1:-}" = "--screenshot" ]; then
  [ -n "${2:-}" ] || fail "--screenshot needs a .png path"
  png="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
  cd "$here/flower"
  exec "$py" world.py screenshot "$png"
fi
cd "$here/flower"
# One pytest process per file: each file's world has its own redis-server,
# and the Celery client module (flower_celery) reads its URL once, at import.
"$py" -m pytest -v test_flower.py "$@"
exec "$py" -m pytest -v test_flower_next.py "$@"
