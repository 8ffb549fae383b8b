#!/usr/bin/env bash
# Regenerates docs/flower.png: Flower 2.x's workers page (1280×800, headless
# chromium) listing a headway worker on Celery's Redis layout, and
# docs/flower-tasks.png, its tasks page: tasks a Celery producer sent, run by
# headway — succeeded, failed, and running.
#
#   bash interop/flower_screenshot.sh [out.png]     # default docs/flower.png
#
# The same processes as the Flower interop test (interop/run_flower.sh,
# interop/flower/world.py), on a private redis-server and free ports.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$here/run_flower.sh" --screenshot "${1:-$here/../docs/flower.png}"
