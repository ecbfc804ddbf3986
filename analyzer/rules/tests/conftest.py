"""Shared fixtures: small declared facts over small, real-looking frames (times in ns)."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from analyzer.analysis import Window
from analyzer.facts.registry import FactSpec, UnknownFactError

MS = 1_000_000


def _spec(name: str, columns: list[str]) -> FactSpec:
    return FactSpec(name=name, compute=lambda ctx: pd.DataFrame(), columns={c: c for c in columns})


FACTS: dict[str, FactSpec] = {
    "gaps": _spec("gaps", ["device", "start", "end", "duration", "host_nvtx_path", "host_api"]),
    "kernels": _spec("kernels", ["device", "stream", "start", "end", "duration", "name", "nvtx_path"]),
    "syncs": _spec("syncs", ["start", "end", "duration", "name", "nvtx_path"]),
    "busy": _spec("busy", ["device", "start", "end", "duration"]),
}
SCALARS = ("kernel_time_ns", "gpu_busy_ns", "gpu_count")


def gaps_frame() -> pd.DataFrame:
    """Idle gaps on two GPUs: GPU 0 starved by a data loader (5 gaps of 2..6 ms), GPU 1 fine."""
    rows = [
        (0, 10, 2, "step_1/data", "cudaStreamSynchronize"),
        (0, 20, 6, "step_2/data", "cudaStreamSynchronize"),
        (0, 30, 3, "step_3/data", ""),
        (0, 40, 5, "step_4/data", ""),
        (0, 50, 4, "step_5/data", ""),
        (0, 60, 0.1, "step_5/forward", "cudaLaunchKernel"),
        (1, 12, 0.2, "step_1/forward", "cudaLaunchKernel"),
        (1, 70, 1.5, "step_6/data", ""),
    ]
    frame = pd.DataFrame(rows, columns=["device", "start", "duration", "host_nvtx_path", "host_api"])
    frame["start"] = (frame["start"] * MS).astype("int64")
    frame["duration"] = (frame["duration"] * MS).astype("int64")
    frame["end"] = frame["start"] + frame["duration"]
    return frame[["device", "start", "end", "duration", "host_nvtx_path", "host_api"]]


def kernels_frame() -> pd.DataFrame:
    names = ["volta_sgemm_128x64_nn", "elementwise_kernel", "elementwise_kernel", "reduce_kernel"] * 5
    frame = pd.DataFrame({
        "device": [0] * 20,
        "stream": [7] * 10 + [13] * 10,
        "start": [i * 2 * MS for i in range(20)],
        "duration": [800_000, 5_000, 4_000, 30_000] * 5,
        "name": names,
        "nvtx_path": ["step/forward"] * 12 + ["step/backward"] * 8,
    })
    frame["end"] = frame["start"] + frame["duration"]
    return frame


def syncs_frame() -> pd.DataFrame:
    frame = pd.DataFrame({
        "start": [i * 4 * MS for i in range(12)],
        "duration": [300_000] * 12,
        "name": ["cudaStreamSynchronize"] * 10 + ["cudaDeviceSynchronize"] * 2,
        "nvtx_path": ["step/loss"] * 10 + ["step/optimizer"] * 2,
    })
    frame["end"] = frame["start"] + frame["duration"]
    return frame


class FakeStore:
    """A FactSource over fixed frames that records what was asked for."""

    def __init__(self, frames: dict[str, pd.DataFrame] | None = None) -> None:
        self.frames = frames if frames is not None else {
            "gaps": gaps_frame(), "kernels": kernels_frame(), "syncs": syncs_frame(),
            "busy": pd.DataFrame(columns=["device", "start", "end", "duration"]),
        }
        self.asked: list[str] = []

    def get(self, name: str) -> pd.DataFrame:
        self.asked.append(name)
        if name not in self.frames:
            raise UnknownFactError(name)
        return self.frames[name]


WINDOW = Window(start_ns=0, end_ns=100 * MS, source="user", description="0..100 ms")

BASE_RULE: dict[str, Any] = {
    "id": "GPU001",
    "name": "gpu-idle-gaps",
    "title": "GPU idle between operations",
    "category": "utilization",
    "severity": "warning",
    "scope": "device",
    "source": "gaps",
    "parameters": {
        "min_gap": {"default": "1ms", "unit": "duration", "doc": "shorter gaps are launch latency"},
        "min_share": {"default": "10%", "unit": "percent", "doc": "share of the window spent idle"},
    },
    "where": "duration >= min_gap",
    "let": {"idle_ns": "sum(duration)", "gaps": "count()", "share": "idle_ns / window_ns"},
    "condition": "share >= min_share and gaps >= 3",
    "impact": "idle_ns",
    "evidence": {"columns": ["start", "duration", "host_nvtx_path"], "sort": "-duration", "limit": 3},
    "message": "GPU {{ device }} sat idle {{ idle_ns | ms }} ({{ share | pct }}) in {{ gaps }} gaps",
    "what": "Time when the GPU had no kernel, copy or memset to run.",
    "why": "Idle GPU time is time the step could have been shorter.",
    "fix": "Feed the GPU: more dataloader workers, pinned memory, prefetching.",
    "references": ["https://docs.nvidia.com/nsight-systems/UserGuide/index.html"],
}


def rule(**changes: Any) -> dict[str, Any]:
    """BASE_RULE with ``changes`` applied (a value of None removes the key)."""
    data = copy.deepcopy(BASE_RULE)
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def pack_text(*rules: dict[str, Any], version: Any = 1) -> str:
    return yaml.safe_dump({"version": version, "rules": list(rules)}, sort_keys=False, width=200)


@pytest.fixture()
def write(tmp_path: Path):
    def write_file(text: str, name: str = "rules.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write_file


def line_of(text: str, needle: str) -> int:
    """1-based line of the first line containing ``needle``."""
    for number, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in text")
