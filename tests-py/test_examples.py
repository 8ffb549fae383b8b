"""The seed's two examples print exactly this, every run (they pin their
clock to a virtual one)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

QUEUE = """\
00:00:00  send greet('ada')
00:00:00  greet('ada') attempt 1
00:00:30  greet('ada') attempt 2
00:00:30  answer: 'hello ada, attempt 2'
state: SUCCESS
"""

CANVAS = """\
chain  add(1, 2) | add(3) | mul(10)  = 60
pipe   add(2, 2) | mul(5)            = 20
group  add(i, i) for i in 0..4       = [0, 2, 4, 6, 8]
chord  total(add(i, i) for i in 0..4) = 20
"""


@pytest.mark.parametrize(("script", "expected"), [("01_queue.py", QUEUE), ("02_canvas.py", CANVAS)])
def test_example_output(script: str, expected: str) -> None:
    for _ in range(2):  # the same every run
        out = subprocess.run(
            [sys.executable, str(ROOT / "examples" / script)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout == expected
