"""The sweep on the committed subset of the seeds' whole grid (``tests/data/sweep/``: H100, fp32, batch 4,
nsys 2025.3.1, each trace with the run's own Python timings in ``<trace>.pytime.json``; see
``tests/data/MANIFEST.md``): the numbers an engineer would quote, checked against the synchronized
Python timings taken in the same process right after the profiled steps."""
from __future__ import annotations

import pytest

from analyzer.testing import DATA_DIR

SWEEP_DIR = DATA_DIR / "sweep"
NAMES = ("2.7B_forward_ctx1024", "xl_forward_ctx1024", "xl_training_ctx1024", "2.7B_training_ctx1024")


@pytest.fixture(scope="module")
def grid():
    if not all((SWEEP_DIR / f"{n}.sqlite.xz").is_file() for n in NAMES):
        pytest.skip(f"the grid subset is not in {SWEEP_DIR} (see tests/data/MANIFEST.md)")
    from analyzer.phases.sweep import build_sweep

    return build_sweep([SWEEP_DIR])


def flags(result, model, mode):
    f = result.flags
    hit = f[(f["model"] == model) & (f["mode"] == mode)]
    return hit.groupby("check")["reason"].agg(" | ".join).to_dict()


def test_forward_time_is_the_gpu_timeline_and_matches_python(grid):
    """A 2.7B forward at ctx 1024: the range closes after 54 ms of launches, the GPU works for 697 ms;
    the sweep's forward time is the latter and agrees with timeit + torch.cuda.synchronize()."""
    fwd = grid.forward.set_index(["model", "mode"])
    big = fwd.loc[("2.7B", "forward")]
    assert big["cpu_mean_ms"] < 60 and big["span_mean_ms"] > 690 and big["measured_by"] == "GPU timeline"
    assert big["waited"] == "no"
    for key in (("2.7B", "forward"), ("xl", "forward"), ("xl", "training")):
        row = fwd.loc[key]
        assert row["forward_ms"] == pytest.approx(row["python_ms"], rel=0.01), key  # within 1%
        assert row["cpu_mean_ms"] < 0.4 * row["python_ms"], key  # the CPU wall is off by 2.8-13x
    # bigger model, longer forward: by the phase time, not by the CPU wall
    assert fwd.loc[("2.7B", "forward"), "forward_ms"] > fwd.loc[("xl", "forward"), "forward_ms"]
    assert fwd.loc[("2.7B", "forward"), "cpu_mean_ms"] < fwd.loc[("xl", "forward"), "cpu_mean_ms"]


def test_impossible_rows_are_flagged_with_their_cause(grid):
    big = flags(grid, "2.7B", "forward")
    assert big["async_range"].startswith("forward ends before its GPU work: CPU wall 53.82 ms per instance, "
                                         "GPU span 697.02 ms (12.9x; none of 3 instances waited)")
    assert big["not_monotonic"].startswith("forward pass CPU wall 53.82 ms is shorter than 167.07 ms at xl "
                                           "(a smaller model); explained by asynchronous timing")
    oom = flags(grid, "2.7B", "training")
    assert "CUDA out of memory" in oom["stopped_early"]
    runs = grid.runs.set_index(["model", "mode"])
    assert runs.loc[("2.7B", "training"), "python"] == "2.7B_training_ctx1024.pytime.json"


def test_a_range_queued_behind_earlier_work_is_not_timed_by_its_cpu_wall(grid):
    """xl training at ctx 1024: optimizer_step's 776 launches block on a launch queue full of
    backward's work, so the range lasts 255 ms for 60 ms of GPU work; the phase time (62.6 ms) is what
    the synchronized Python timer measured (63.9 ms), the CPU wall is 4x off."""
    t = grid.timing.set_index(["model", "mode", "phase"])
    opt = t.loc[("xl", "training", "optimizer_step")]
    assert opt["cpu_ms"] > 250 and 59 < opt["span_ms"] < 61 and opt["measured_by"] == "GPU timeline"
    assert opt["python_vs_time"] == pytest.approx(1.0, abs=0.05) and opt["python_vs_cpu"] < 0.3
    for phase in ("forward", "backward", "step"):
        assert t.loc[("xl", "training", phase), "python_vs_time"] == pytest.approx(1.0, abs=0.02), phase
    assert "python_disagrees" not in flags(grid, "xl", "training")
