#!/usr/bin/env bash
# Runs headway's Celery interop suite against a REAL Celery 5.5 on private
# redis-servers (each test starts its own on a free loopback port).
#
#   bash interop/run.sh            # from a fresh clone; non-interactive
#
# Makes interop/.venv with `celery[redis]>=5.5,<5.6` when it is missing (or
# uses HEADWAY_CELERY_PYTHON if set), then runs core/tests/celery_interop.rs.
# When Celery cannot be installed (no network, no python3 -m venv) or
# redis-server is missing, it prints why and exits 0 — unless
# HEADWAY_REQUIRE_REDIS=1, when it exits 1.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
require="${HEADWAY_REQUIRE_REDIS:-0}"

skip() {
  echo "interop: skipped: $1"
  if [ "$require" = "1" ]; then
    echo "interop: HEADWAY_REQUIRE_REDIS=1, so this is a failure"
    exit 1
  fi
  exit 0
}

command -v redis-server >/dev/null 2>&1 || skip "redis-server is not on PATH"

py="${HEADWAY_CELERY_PYTHON:-}"
if [ -z "$py" ]; then
  venv="$here/.venv"
  py="$venv/bin/python"
  if ! "$py" -c 'import celery' >/dev/null 2>&1; then
    base="$(command -v python3.11 || command -v python3 || true)"
    [ -n "$base" ] || skip "no python3 to make a venv with"
    echo "interop: making $venv with celery[redis]>=5.5,<5.6"
    rm -rf "$venv"
    "$base" -m venv "$venv" >/dev/null 2>&1 || skip "python3 -m venv failed"
    if ! "$venv/bin/pip" install --quiet --disable-pip-version-check 'celery[redis]>=5.5,<5.6'; then
      rm -rf "$venv"
      skip "pip could not install celery[redis]>=5.5,<5.6"
    fi
  fi
fi
"$py" -c 'import celery, kombu, redis; print("interop: celery", celery.__version__, "kombu", kombu.__version__, "redis-py", redis.__version__)' \
  || skip "$py cannot import celery"

export HEADWAY_CELERY_PYTHON="$py"
export HEADWAY_REQUIRE_CELERY=1
cd "$root"
# Two at a time: each test runs a redis-server, a Celery worker and headway.
cargo test -p headway-core --test celery_interop -- --test-threads=2 --nocapture "$@"
