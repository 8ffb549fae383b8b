"""The repository stands on its own: no file points at a path outside it
(a machine's checkout or virtualenv) or at an issue tracker's numbers
(``project#123``) — a reader has the code and its docs, and a reason is
written out where it is used. Captured third-party output under
``core/tests/data`` is kept as it was recorded.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# ``celery#2599``, or a bare ``#594`` (a CSS colour such as ``#30363d`` or
# ``#fff`` is not one; a three-digit one would need rewording).
ISSUE = re.compile(r"\b[A-Za-z][A-Za-z0-9_.-]*#[0-9]+\b|(?<![&\w])#[0-9]{2,}\b")
OUTSIDE = re.compile(r"(?:^|[^A-Za-z0-9_.~-])(?:/work/|/home/[a-z])")


# This file names the patterns it looks for.
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()


def _files() -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in out.decode().split("\0") if name]


def test_no_issue_numbers_or_outside_paths() -> None:
    found = []
    for path in _files():
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("core/tests/data/") or rel == SELF or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary (an image)
        for n, line in enumerate(text.splitlines(), 1):
            if ISSUE.search(line) or OUTSIDE.search(line):
                found.append(f"{rel}:{n}: {line.strip()[:120]}")
    assert not found, "\n".join(found)
