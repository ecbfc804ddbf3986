"""The significance rule's calibration (tests/diff_calibration.py, docs/diff-calibration.md): no false
alarm on any committed repeat pair, every separating pathology/twin pair detected, the constant in the
code the one the repeats give, the page current, and the stored numbers those of a real analysis."""
from __future__ import annotations

import importlib.util
import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from analyzer.diff import stats

REPO = Path(__file__).resolve().parents[3]


@cache
def calibration() -> Any:
    spec = importlib.util.spec_from_file_location("diff_calibration", REPO / "tests" / "diff_calibration.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["diff_calibration"] = module
    spec.loader.exec_module(module)
    return module


@cache
def store() -> dict[str, Any]:
    path = calibration().STORE
    if not path.is_file():
        pytest.skip(f"{path.name} not in tests/data")
    return json.loads(path.read_text(encoding="utf-8"))


def test_no_false_alarm_on_any_repeat_pair() -> None:
    cal, data = calibration(), store()
    repeats, _ = cal.pairs(sorted(data))
    assert len(repeats) >= 30  # round 3 adds decode_eager and optimizer_loop repeats, both variants
    for a, b in repeats:
        v = cal.verdict(data[a], data[b])
        assert v.status == "unchanged" and not v.significant, (a, b, v.reason)
    # the hardest one: optimizer_loop run again is 37% slower, every step of it slower than every step before
    v = cal.verdict(data["round3/optimizer_loop"], data["round3/optimizer_loop_run2"])
    assert v.separated == 1 and v.change_pct == pytest.approx(36.7, abs=0.5) and v.floor_source == "run-to-run"
    assert "to call it, the change must exceed 46%" in v.reason


def test_every_separating_twin_pair_is_detected() -> None:
    cal, data = calibration(), store()
    _, twins = cal.pairs(sorted(data))
    must = [(a, b) for a, b in twins if cal.expected(cal.verdict(data[a], data[b]), data[a], data[b]) == "separated"]
    assert len(must) >= 30
    for a, b in must:
        v = cal.verdict(data[a], data[b])
        assert v.status == "faster" and v.significant, (a, b, v.reason)
        back = cal.verdict(data[b], data[a])
        assert back.status == "slower" and back.significant, (b, a, back.reason)
    # the round's pairs, with the programs' own savings (tests/data/MANIFEST.md, round 3): 91.7% and 38.7%
    decode = cal.verdict(data["round3/decode_eager"], data["round3/decode_eager_fixed"])
    assert decode.change_pct == pytest.approx(-91.7, abs=1)
    fused = cal.verdict(data["round3/optimizer_loop"], data["round3/optimizer_loop_fixed"])
    assert fused.change_pct == pytest.approx(-38.7, abs=2) and fused.status == "faster"


def test_constant_and_page_are_current() -> None:
    cal = calibration()
    store()
    assert cal.calibrate(store())[0] == stats.HOST_RUN_TO_RUN
    assert cal.main(["--check"]) == 0


@pytest.mark.parametrize("name", ["round3/optimizer_loop", "round3/optimizer_loop_run2"])
def test_stored_numbers_are_a_real_analysis(name: str) -> None:
    """The pair that sets HOST_RUN_TO_RUN, analyzed now: the stored steps and busy time are its own."""
    from analyzer.pipeline import analyze_trace
    from analyzer.reports.baseline import summarize
    from analyzer.testing import real_trace

    fresh = calibration()._record(summarize(analyze_trace(real_trace(name))))
    assert fresh == store()[name]
