"""The ``steps`` fact (per-step durations from completion to completion) and the iterations the window
chooser records for it."""
from __future__ import annotations

import numpy as np
import pytest

from analyzer.facts import FactStore
from analyzer.facts.tests._build import trace
from analyzer.loading import load_trace
from analyzer.testing import real_trace
from analyzer.window import choose_window

MS = 1_000_000


def _loop(step_ms: float, stride_ms: float, kernel_ms: float, n: int = 8):
    """``n`` NVTX steps of ``step_ms`` CPU time every ``stride_ms``, each launching one kernel of
    ``kernel_ms`` on one stream at its start (queued behind the previous one)."""
    nvtx, kernels = [], []
    gpu_free = 0
    for i in range(n):
        start = int(i * stride_ms * MS)
        nvtx.append({"start": start, "end": start + int(step_ms * MS), "text": f"step_{i}", "path": f"step_{i}"})
        launch = start + 1000
        k_start = max(launch + 2000, gpu_free)
        gpu_free = k_start + int(kernel_ms * MS)
        kernels.append({"start": k_start, "end": gpu_free, "short_name": "k", "api_start": launch, "nvtx_id": i,
                        "nvtx_range": f"step_{i}", "nvtx_path": f"step_{i}", "attribution": "thread"})
    return trace(kernels=kernels, nvtx=nvtx)


def _steps(t):
    w = choose_window(t)
    return w, FactStore(t, w, {}).get("steps")


def test_host_bound_loop_counts_the_time_between_steps():
    # 10 ms steps every 12 ms, 1 ms of GPU work each: the loop's period is 12 ms
    w, s = _steps(_loop(step_ms=10, stride_ms=12, kernel_ms=1))
    assert w.steps is not None and w.steps.source == "nvtx"
    assert s["duration"].tolist()[1:] == [12 * MS] * (len(s) - 1)
    assert s["duration"].iat[0] == 10 * MS  # the first step: from its own start
    assert (s["done"] == s["end"]).all()


def test_gpu_bound_loop_whose_host_runs_ahead_is_timed_by_the_gpu():
    # 0.5 ms of launching every 1 ms, 10 ms of queued GPU work per step: the CPU ranges time the
    # launches, the loop runs at the GPU's 10 ms per step
    _w, s = _steps(_loop(step_ms=0.5, stride_ms=1, kernel_ms=10))
    assert (s["cpu_ns"] == MS // 2).all()
    assert s["duration"].tolist()[1:] == [10 * MS] * (len(s) - 1)
    # the first step waited for the queue: it completes 10 ms after the work queued before it
    assert s["duration"].iat[0] == 10 * MS
    assert (s["gpu_ns"] == 10 * MS).all() and (s["kernel_count"] == 1).all()


def test_glob_and_time_windows_record_their_steps():
    t = _loop(step_ms=10, stride_ms=12, kernel_ms=1, n=10)
    w = choose_window(t, "step_*")
    assert w.steps is not None and len(w.steps) == 10  # the user's glob: all ten, no warmup skipped
    w = choose_window(t, "30ms:80ms")
    assert w.steps is not None and all(30 * MS <= a and b <= 80 * MS for a, b in zip(w.steps.starts, w.steps.ends))
    assert "inside the window" in w.steps.description


def test_no_steps_gives_an_empty_table():
    t = trace(kernels=[{"start": 0, "end": 100}, {"start": 5000, "end": 9000, "short_name": "other"}])
    w, s = _steps(t)
    assert w.steps is None and s.empty and list(s.columns)[:3] == ["step", "start", "end"]


def test_real_trace_steps_are_the_nvtx_steps():
    t = load_trace(real_trace("dataloader_starved"))
    _w, s = _steps(t)
    assert s["step"].tolist() == [f"step_{i}" for i in range(12)]
    # host-bound (the loader): completions follow the CPU ranges (end of step i - end of step i-1),
    # which is the loop period seen at the starts one step later
    period = np.diff(s["start"].to_numpy())
    assert np.allclose(s["duration"].to_numpy()[1:-1], period[1:], rtol=0.01)
    assert 28 * MS < float(np.median(s["duration"])) < 32 * MS


def test_without_nvtx_iterations_are_found_from_the_rarest_op():
    """The op sequence of dataloader_starved repeats every 9 ops (a layer); the step is 234 ops, marked
    by the once-per-step host-to-device copy of the batch."""
    t = load_trace(real_trace("dataloader_starved"))
    t.nvtx = t.nvtx.iloc[0:0]
    w, s = _steps(t)
    assert w.steps is not None and w.steps.source == "periodic" and w.steps.period == 234
    assert "memcpy H2D" in w.steps.description
    steady = s["duration"].to_numpy()[2:]
    assert 28 * MS < float(np.median(steady)) < 32 * MS  # the same loop period as with NVTX


@pytest.mark.parametrize("name,ops", [("fp32_gemm", 25), ("pageable_h2d", 35), ("alloc_churn", 8)])
def test_iteration_lengths_without_nvtx(name: str, ops: int) -> None:
    t = load_trace(real_trace(name))
    t.nvtx = t.nvtx.iloc[0:0]
    w = choose_window(t)
    assert w.steps is not None and w.steps.period == ops
