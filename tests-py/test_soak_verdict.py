"""The soak's verdict rules (bench/soak/soak.py), without the processes.

The soak is only worth its CI minutes if it can fail. These check the pieces
that decide it: which faults may make a run run twice and how many, that a
duplicate outside such a fault is caught, that a result read back must be a
SUCCESS of the run's kind, and that a ledger line that does not parse is
counted. Each negative check has a positive control beside it. (The whole
soak failing for lost work is ``bench/soak/selfcheck.sh``.)
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SOAK = Path(__file__).resolve().parent.parent / "bench" / "soak" / "soak.py"


@pytest.fixture(scope="module")
def soak() -> ModuleType:
    spec = importlib.util.spec_from_file_location("headway_soak", SOAK)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["headway_soak"] = mod
    spec.loader.exec_module(mod)
    return mod


T0 = 1000.0


def faults() -> list[dict[str, object]]:
    return [
        {"at": 10.0, "end": 10.3, "kind": "kill9"},
        {"at": 30.0, "end": 34.0, "kind": "redis", "down": 4.0},  # shorter than the lease
        {"at": 50.0, "end": 62.0, "kind": "redis", "down": 12.0},  # longer than the lease
        {"at": 80.0, "end": 90.0, "kind": "pause"},
    ]


def test_only_faults_the_guarantees_name_allow_a_duplicate_each_bounded_by_prefetch(soak: ModuleType) -> None:
    windows = soak.dup_windows(faults(), T0)
    names = [w[2] for w in windows]
    assert names == ["t+10 s kill9", "t+50 s redis", "t+80 s pause"]  # not the 4 s outage
    bounds = {w[2]: w[3] for w in windows}
    assert bounds == {"t+10 s kill9": 32, "t+50 s redis": 64, "t+80 s pause": 32}
    assert soak.PREFETCH == 32
    start, end = windows[0][0], windows[0][1]
    assert start == T0 + 10.0 - 2.0 and end == T0 + 10.3 + 2 * soak.LEASE


def ledger_of(soak: ModuleType, tmp_path: Path, lines: list[str]) -> object:
    (tmp_path / "1.log").write_text("".join(line + "\n" for line in lines))
    ledger = soak.Ledger(tmp_path)
    ledger.refresh()
    return ledger


def test_a_duplicate_inside_a_kill9_window_is_allowed_and_one_elsewhere_is_caught(
    soak: ModuleType, tmp_path: Path
) -> None:
    windows = soak.dup_windows(faults(), T0)
    ledger = ledger_of(
        soak,
        tmp_path,
        [
            # ran twice across the kill -9 at t+10: allowed (positive control)
            f"a 1 11 {T0 + 9.9} {T0 + 9.95} ok",
            f"a 1 12 {T0 + 14.0} {T0 + 14.1} ok",
            # ran twice in the 4 s outage at t+30, which keeps every lease
            f"b 1 11 {T0 + 31.0} {T0 + 31.1} ok",
            f"b 1 12 {T0 + 31.5} {T0 + 31.6} ok",
            # ran twice with no fault near: caught
            f"c 1 11 {T0 + 70.0} {T0 + 70.1} ok",
            f"c 1 12 {T0 + 70.2} {T0 + 70.3} ok",
            # a retry then a success is not a duplicate
            f"d 1 11 {T0 + 71.0} {T0 + 71.1} retry",
            f"d 2 11 {T0 + 71.7} {T0 + 71.8} ok",
        ],
    )
    per, stray, ids = soak.attribute_dups(ledger, windows)
    assert per == {"t+10 s kill9": 1}
    assert ids == {"t+10 s kill9": ["a"]}
    assert sorted(stray) == ["b", "c"]


def test_a_result_read_back_must_be_a_success_of_the_runs_kind(soak: ModuleType) -> None:
    assert soak.result_ok(b'SUCCESS|{"ok":"fast"}', "fast")  # positive control
    assert not soak.result_ok(b'SUCCESS|{"ok":"slow"}', "fast")
    assert not soak.result_ok(b'FAILURE|{"error":"fast"}', "fast")
    assert not soak.result_ok(None, "fast")


def test_a_ledger_line_that_does_not_parse_is_counted(soak: ModuleType, tmp_path: Path) -> None:
    good = ledger_of(soak, tmp_path, [f"a 1 11 {T0} {T0 + 0.1} ok"])
    assert good.bad == 0 and len(good.rows) == 1  # type: ignore[attr-defined]
    (tmp_path / "1.log").unlink()
    bad = ledger_of(soak, tmp_path, [f"a 1 11 {T0} {T0 + 0.1} ok", "a 1 11 torn"])
    assert bad.bad == 1 and len(bad.rows) == 1  # type: ignore[attr-defined]
