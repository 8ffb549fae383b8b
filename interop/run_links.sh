#!/usr/bin/env bash
# headway and a real Celery 5.5 as separate processes on one private
# redis-server: chains, chords, dead reservations, etas, Node producer and
# worker, typed values, priorities, revokes, and Celery link/link_error
# callbacks on headway-run tasks (interop/links/harness.py says what each
# scenario proves).
#
#   bash interop/run_links.sh all            # every scenario
#   bash interop/run_links.sh <scenario>...  # some (names: run with `list`)
#
# The Celery side: interop/.venv with celery[redis]>=5.5,<5.6, made as
# interop/run.sh makes it (or HEADWAY_CELERY_PYTHON). headway's Python
# package: HEADWAY_LINKS_HW_PYTHON, else <repo>/.venv when it imports
# headway, else <repo>/.venv made with `pip install .`.
# The Node addon: `npm install` at the repo root when require('./') fails.
# When a prerequisite cannot be had it prints why and exits 0 — unless
# HEADWAY_REQUIRE_REDIS=1, when it exits 1. A failed scenario exits 1.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
require="${HEADWAY_REQUIRE_REDIS:-0}"

skip() {
  echo "links: skipped: $1"
  if [ "$require" = "1" ]; then
    echo "links: HEADWAY_REQUIRE_REDIS=1, so this is a failure"
    exit 1
  fi
  exit 0
}

[ "$#" -gt 0 ] || set -- all
if [ "$1" = "list" ]; then
  sed -n '/^SCENARIOS = {/,/^}/p' "$here/links/harness.py" | grep -o '"[a-z-]*"' | tr -d '"'
  exit 0
fi

command -v redis-server >/dev/null 2>&1 || skip "redis-server is not on PATH"
command -v node >/dev/null 2>&1 || skip "node is not on PATH"

# The Celery side (the same venv interop/run.sh makes).
cpy="${HEADWAY_CELERY_PYTHON:-}"
if [ -z "$cpy" ]; then
  venv="$here/.venv"
  cpy="$venv/bin/python"
  if ! "$cpy" -c 'import celery' >/dev/null 2>&1; then
    base="$(command -v python3.11 || command -v python3 || true)"
    [ -n "$base" ] || skip "no python3 to make a venv with"
    echo "links: making $venv with celery[redis]>=5.5,<5.6"
    rm -rf "$venv"
    "$base" -m venv "$venv" >/dev/null 2>&1 || skip "python3 -m venv failed"
    if ! "$venv/bin/pip" install --quiet --disable-pip-version-check 'celery[redis]>=5.5,<5.6'; then
      rm -rf "$venv"
      skip "pip could not install celery[redis]>=5.5,<5.6"
    fi
  fi
fi
"$cpy" -c 'import celery, kombu, redis; print("links: celery", celery.__version__, "kombu", kombu.__version__)' \
  || skip "$cpy cannot import celery"

# headway's Python package.
hpy="${HEADWAY_LINKS_HW_PYTHON:-}"
if [ -z "$hpy" ]; then
  for c in "$root/.venv/bin/python"; do
    if [ -x "$c" ] && "$c" -c 'import headway' >/dev/null 2>&1; then hpy="$c"; break; fi
  done
fi
if [ -z "$hpy" ]; then
  base="$(command -v python3.11 || command -v python3 || true)"
  [ -n "$base" ] || skip "no python3 to build headway's Python package with"
  echo "links: building headway's Python package into $root/.venv (pip install .)"
  [ -x "$root/.venv/bin/python" ] || "$base" -m venv "$root/.venv" || skip "python3 -m venv failed"
  "$root/.venv/bin/pip" install --quiet --disable-pip-version-check "$root" \
    || skip "pip install . failed for headway's Python package"
  hpy="$root/.venv/bin/python"
fi
"$hpy" -c 'import headway, sys; print("links: headway (Python)", sys.executable)' || skip "$hpy cannot import headway"

# The Node addon.
if ! (cd "$root" && node -e "require('./')" >/dev/null 2>&1); then
  echo "links: building the Node addon (npm install at the repo root)"
  (cd "$root" && npm install --no-audit --no-fund) || skip "npm install failed"
  (cd "$root" && node -e "require('./')") || skip "the Node addon does not load"
fi
echo "links: headway (Node) $(node --version)"

export HEADWAY_LINKS_HW_PYTHON="$hpy"
export HEADWAY_LINKS_NODE="$(command -v node)"
exec "$cpy" "$here/links/harness.py" "$@"
