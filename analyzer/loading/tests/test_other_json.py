"""JSON that people pass for a torch.profiler trace but another tool wrote (issue 27/34): the error names
the tool. Hand-built skeletons of the two layouts met in public repositories: rocprofv3's JSON
(AMD-AGI/TraceLens ``tests/rocprof/908_results.json.gz``: ``{"rocprofiler-sdk-tool": [{...}]}``) and
PyTorch's execution trace (HolisticTraceAnalysis ``tests/data/execution_trace/*_et.json.gz``)."""

from __future__ import annotations

import json

import pytest

from analyzer.errors import InputError
from analyzer.loading import load_trace


def _message(path) -> str:
    with pytest.raises(InputError) as info:
        load_trace(path)
    return str(info.value)


def test_rocprofv3_json_is_named(tmp_path):
    p = tmp_path / "908_results.json"
    p.write_text(json.dumps({"rocprofiler-sdk-tool": [{
        "metadata": {"pid": 908, "init_time": 1, "fini_time": 2},
        "buffer_records": {"kernel_dispatch": [{"kind": 11, "start_timestamp": 10, "end_timestamp": 20}],
                           "hip_api": []}}]}))
    text = _message(p)
    assert "rocprofv3" in text and "torch.profiler" in text


def test_execution_trace_is_named(tmp_path):
    p = tmp_path / "benchmark_et.json"
    p.write_text(json.dumps({"schema": "1.0.1", "pid": 1, "time": "2023-07-14 11:53:07", "start_ts": 6,
                             "nodes": [{"name": "[pytorch|profiler|execution_trace|thread]", "id": 2}]}))
    text = _message(p)
    assert "execution trace" in text and ".pt.trace.json" in text


def test_other_json_keeps_the_general_message(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model": "resnet", "batch": 32}))
    assert "without a traceEvents list" in _message(p)
