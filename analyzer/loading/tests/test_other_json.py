"""JSON that people pass for a torch.profiler trace but another tool wrote (issue 27/34): the error names
the tool. A hand-built skeleton of the layout met in public repositories: PyTorch's execution trace
(HolisticTraceAnalysis ``tests/data/execution_trace/*_et.json.gz``). rocprofv3's JSON is read
(:mod:`analyzer.loading.rocprof`; its bad-input tests are in ``tests/test_public_rocprof.py``)."""

from __future__ import annotations

import json

import pytest

from analyzer.errors import InputError
from analyzer.loading import load_trace


def _message(path) -> str:
    with pytest.raises(InputError) as info:
        load_trace(path)
    return str(info.value)


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
