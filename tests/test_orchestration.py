"""One orchestration (issue 31): inputs -> jobs -> per-rank analysis -> cross-rank facts -> accepted findings
-> report. Whatever decides that the inputs are not one job (``job=False``, or the detection), each input
is read once, the accepted-findings file is read once before any trace and applied once to each analysis,
after every analysis; ``--write-accepted`` replaces it instead of being applied on top of it.

Real traces: the tiny-kernels pair (tests/data), two single-GPU runs that are not one job.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import analyzer.accepted as accepted_module
import analyzer.loading as loading
from analyzer.pipeline import AnalysisOptions, analyze_inputs, analyze_paths
from analyzer.testing import real_trace


@pytest.fixture(scope="module")
def pair() -> list[Path]:
    return [real_trace("tiny_kernels"), real_trace("tiny_kernels_fixed")]


@pytest.fixture()
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts of trace loads, accepted-file reads and accepted-findings applications (per analysis)."""
    seen: Counter[str] = Counter()

    def counting(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            seen[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(loading, "load_trace", counting("load", loading.load_trace))
    monkeypatch.setattr(accepted_module, "load_accepted", counting("read", accepted_module.load_accepted))
    monkeypatch.setattr(accepted_module, "apply_accepted", counting("apply", accepted_module.apply_accepted))
    return seen


def test_each_input_read_once_and_accepted_applied_once(pair: list[Path], tmp_path: Path,
                                                        calls: Counter[str]) -> None:
    file = tmp_path / "accepted.yaml"
    first = analyze_inputs(pair, AnalysisOptions(), write_accepted=file)
    assert first.job is None and first.analyses is not None and len(first.analyses) == 2
    assert first.recorded == len({f.fingerprint for f in first.findings}) > 0
    assert all(f.acceptance is not None and not f.counts for f in first.findings)
    # written, then read back once and applied once per analysis (no file before it: nothing to keep)
    assert calls == {"load": 2, "read": 1, "apply": 2}

    for job, reason in ((None, "no NCCL kernels"), (False, "--no-job")):
        calls.clear()
        out = analyze_inputs(pair, AnalysisOptions(accepted_file=file), job=job)
        assert out.job is None and out.reason.startswith(reason) and len(out.analyses or ()) == 2
        assert calls == {"load": 2, "read": 1, "apply": 2}, job
        assert out.accepted is not None and len(out.accepted) == first.recorded
        assert [f.fingerprint for f in out.findings] == [f.fingerprint for f in first.findings]
        assert all(f.acceptance is not None and f.acceptance.file == out.accepted.path for f in out.findings)

    # --accepted A --write-accepted B: B holds every finding and is the one applied (not A, then B)
    calls.clear()
    again = tmp_path / "again.yaml"
    out = analyze_inputs(pair, AnalysisOptions(accepted_file=file), write_accepted=again)
    assert calls == {"load": 2, "read": 2, "apply": 2}  # A before any trace, B once written
    assert out.accepted is not None and out.accepted.path.endswith("again.yaml")
    assert {f.acceptance.file for f in out.findings if f.acceptance is not None} == {out.accepted.path}


def test_analyze_paths_is_the_orchestration_without_jobs(pair: list[Path], calls: Counter[str]) -> None:
    analyses = analyze_paths(pair, AnalysisOptions())
    assert [a.trace.name for a in analyses] == [p.name for p in pair]
    assert calls == {"load": 2}
