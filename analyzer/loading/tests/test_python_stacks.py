"""Python call stacks of CUDA calls from torch.profiler's python_function events (real H100 traces)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from analyzer.facts.stacks import api_location_table
from analyzer.loading import load_trace
from analyzer.loading.python_stacks import parse_frame, python_call_stacks

DATA = Path(__file__).resolve().parents[3] / "tests" / "data" / "kineto"


def test_parse_frame() -> None:
    assert parse_frame("workloads/host_sync.py(51): step_sync") == ("workloads/host_sync.py", "step_sync", 51)
    assert parse_frame("<built-in method item of Tensor object at 0x7f>") == (
        "", "<built-in method item of Tensor object at 0x7f>", -1)
    assert parse_frame("/a b/c(d).py(7): <lambda>") == ("/a b/c(d).py", "<lambda>", 7)


def test_nested_intervals_give_the_chain_open_at_each_call() -> None:
    # main() [0, 100) > step() [10, 50) > <item> [20, 30); a call at 25 sees all three, one at 60 main only
    stacks, calls = python_call_stacks(
        np.array([1, 1, 1]), np.array([7, 7, 7]), np.array([0, 10, 20]), np.array([100, 50, 30]),
        np.array(["t.py(1): main", "t.py(5): step", "<built-in method item of Tensor object at 0x1>"],
                 dtype=object),
        pd.DataFrame({"start": [25, 60, 25], "pid": [1, 1, 1], "tid": [7, 7, 8], "correlation_id": [1, 2, 3],
                      "name": ["cudaStreamSynchronize", "cudaLaunchKernel", "cudaLaunchKernel"]}))
    assert calls["correlation_id"].tolist() == [1, 2]  # thread 8 has no Python frames
    deep = stacks[stacks["chain_id"] == calls["chain_id"].iloc[0]].sort_values("depth")
    assert deep["symbol"].tolist() == ["<built-in method item of Tensor object at 0x1>", "step", "main"]
    assert deep["line"].tolist() == [-1, 5, 1]
    shallow = stacks[stacks["chain_id"] == calls["chain_id"].iloc[1]]
    assert shallow["symbol"].tolist() == ["main"]


def test_host_sync_names_the_python_call_that_syncs() -> None:
    path = DATA / "host_sync_stack.pt.trace.json.gz"
    trace = load_trace(path)
    assert len(trace.api_stacks) and (trace.stacks["source"].astype(str) == "python").all()
    table = api_location_table(SimpleNamespace(trace=trace))
    syncs = table[table["name"].astype(str) == "cudaStreamSynchronize"]
    where = syncs["code_location"].value_counts()
    # host_sync.py's step_sync calls .item() and .cpu() every micro-step: both name the user's function
    assert where.index[0].endswith("in step_sync() defined at workloads/host_sync.py:51")
    assert {w.split(" in ")[0] for w in where.index} >= {"Tensor.item()", "Tensor.cpu()"}


def test_no_stacks_without_with_stack() -> None:
    trace = load_trace(DATA / "host_sync.pt.trace.json.xz")
    assert trace.api_stacks.empty and trace.stacks.empty


@pytest.mark.parametrize("name", ["dataloader_starved_stack.pt.trace.json.gz"])
def test_every_call_on_the_main_thread_has_a_stack(name: str) -> None:
    trace = load_trace(DATA / name)
    main_tids = set(trace.api_stacks["tid"].astype(int))
    on_main = trace.api[trace.api["tid"].astype(int).isin(main_tids)]
    assert len(trace.api_stacks) >= 0.9 * len(on_main)
