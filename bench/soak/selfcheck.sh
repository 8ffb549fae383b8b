#!/usr/bin/env bash
# The soak's check of itself (CI runs it beside `run.sh --quick`): a soak
# that cannot fail proves nothing. Workers ack on receipt (--early-ack) and
# are killed -9 three times in 30 s, which loses the runs they had started;
# the soak must fail with "lost N" and for nothing else. This script exits 0
# only if that happened (soak.py --expect-loss), 1 if the soak passed or
# failed for another reason. About 60 s.
#
#   bash bench/soak/selfcheck.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/run.sh" --early-ack --expect-loss --duration 30 --faults kill9 --gap 6,8 "$@"
