"""The same rules fire on a workload's torch.profiler trace as on its nsys trace.

Every pathology and its fixed twin (and healthy, and the small training transformer) was profiled once
with nsys and once with torch.profiler on the same H100 (tests/data/MANIFEST.md). Analyzed with the
default pack, the two traces give the same set of warnings: the pathology's rule fires on its Kineto
trace and stays silent on the twin's, exactly as on nsys. The one expected difference is the
``setup-time`` note: nsys records the whole process (context creation, warmup), torch.profiler only
the steps its schedule records, so a Kineto trace has no setup before its window to report.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.findings import Severity
from analyzer.pipeline import AnalysisOptions, analyze_paths, load_rules

DATA = Path(__file__).resolve().parent / "data"
PAIRS = {  # pathology -> the rule that names it (fires on the pathology, silent on the twin)
    "dataloader_starved": "gpu-idle-gaps",
    "tiny_kernels": "tiny-kernels",
    "pageable_h2d": "pageable-memcpy",
    "host_sync": "host-sync-in-loop",
    "naive_attention": "memory-bound-softmax",
    "occupancy": "low-occupancy",
    "fp32_gemm": "fp32-gemm-no-tensor-cores",
    "alloc_churn": "alloc-in-loop",
}
NAMES = [n for p in PAIRS for n in (p, p + "_fixed")] + ["healthy", "small_training_ctx128"]


def _kineto(name: str) -> Path | None:
    for ext in (".pt.trace.json.xz", ".pt.trace.json.gz"):
        if (DATA / "kineto" / (name + ext)).is_file():
            return DATA / "kineto" / (name + ext)
    return None


@pytest.fixture(scope="module")
def pack():
    return load_rules(AnalysisOptions())


def _warnings(path: Path, pack) -> tuple[set[str], object]:
    analysis = analyze_paths([path], AnalysisOptions(), pack=pack)[0]
    return {f.rule for f in analysis.findings if f.severity >= Severity.WARNING}, analysis


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_same_warnings_as_nsys(name, pack):
    kin, nsys = _kineto(name), DATA / f"{name}.sqlite.xz"
    if kin is None or not nsys.is_file():
        pytest.skip(f"{name}: no torch.profiler or nsys trace")
    from_kineto, analysis = _warnings(kin, pack)
    from_nsys, _ = _warnings(nsys, pack)
    assert from_kineto == from_nsys
    assert analysis.trace.info.source_format == "kineto-json"
    # a CUDA torch.profiler trace records everything the pack needs but memory events: these were
    # recorded without profile_memory=True, and the memory rules say so
    assert {n.rule for n in analysis.not_checked} <= {"memory-growth", "memory-near-capacity"}
    assert all("profile_memory=True" in n.reason for n in analysis.not_checked)
    assert analysis.window.source == "nvtx" and "ProfilerStep#" in analysis.window.description
    base = name.removesuffix("_fixed")
    if base in PAIRS:
        assert (PAIRS[base] in from_kineto) == (not name.endswith("_fixed"))


@pytest.mark.slow
def test_kineto_evidence_names_the_host_ranges(pack):
    """gpu-idle-gaps on dataloader_starved: the evidence names the record_function range the host was
    in during each gap (the workload's load_batch, mirrored from NVTX), as it does on the nsys trace."""
    path = _kineto("dataloader_starved")
    if path is None:
        pytest.skip("no trace")
    _, analysis = _warnings(path, pack)
    gaps = next(f for f in analysis.findings if f.rule == "gpu-idle-gaps")
    col = gaps.evidence_columns.index("host_nvtx_path")
    paths = {row[col] for row in gaps.evidence}
    assert paths and all(p.startswith("ProfilerStep#") and "/load_batch" in p for p in paths), paths
