"""The stubs match the runtime (mypy.stubtest), and a usage file type-checks
under `mypy --strict`, so a user's checker sees what Python does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("mypy")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_stubtest() -> None:
    out = run("mypy.stubtest", "headway", "--allowlist", "tests-py/stubtest-allowlist.txt")
    assert out.returncode == 0, out.stdout + out.stderr


def test_usage_file_and_guide_type_check_strictly() -> None:
    out = run(
        "mypy",
        "--strict",
        "tests-py/typing_usage.py",
        "examples/guide.py",
        "examples/01_queue.py",
        "examples/02_canvas.py",
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_package_type_checks_strictly() -> None:
    out = run("mypy", "--strict", "-p", "headway")
    assert out.returncode == 0, out.stdout + out.stderr


def test_usage_file_runs() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests-py" / "typing_usage.py")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
