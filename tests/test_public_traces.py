"""Traces as other people record them (issue 29): public torch.profiler traces from PARAM, HTA and
TraceLens (``tests/data/public/``, origin and trimming in ``tests/data/MANIFEST.md``).

Each test names what a new user met on that trace before the fix: steps built from operators, a
host stall filed as setup, a loop rule on a capture without a loop, a ROCm GPU left unnamed.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.facts.api import cuda_equivalent
from analyzer.loading import load_trace
from analyzer.pipeline import AnalysisOptions, analyze_paths, load_rules
from analyzer.window import choose_window

PUBLIC = Path(__file__).resolve().parent / "data" / "public"


@pytest.fixture(scope="module")
def pack():
    return load_rules(AnalysisOptions())


def _analyze(name: str, pack):
    return analyze_paths([PUBLIC / name], AnalysisOptions(), pack=pack)[0]


def test_without_profilerstep_steps_never_come_from_operators():
    """PARAM's ResNet trace (no ProfilerStep, optimizer and data-loader annotations): the window was
    599 'steps' of aten::convolution_backward; now the periodic steady state, one ResNet iteration
    (335 GPU ops: forward, backward, optimizer) per step."""
    trace = load_trace(PUBLIC / "param_resnet_no_profilerstep.pt.trace.json.xz")
    w = choose_window(trace)
    assert w.steps is not None and w.steps.source == "periodic", w.description
    assert w.steps.period == 335 and len(w.steps) >= 5
    assert "::" not in w.description and "convolution" not in w.description


def test_compiled_graph_and_aten_ranges_are_not_steps():
    """TraceLens' torch.compile trace on an MI300X: one CompiledFxGraph call and six aten::mm were
    '6 NVTX steps aten::mm..aten::mm'; it is one pass."""
    trace = load_trace(PUBLIC / "tracelens_torch_compile_mi300x.pt.trace.json.gz")
    w = choose_window(trace)
    assert w.source == "auto" and w.steps is None and w.description.startswith("one pass"), w.description


def test_stall_inside_the_programs_annotation_is_a_finding(pack):
    """TraceLens' SGLang prefill on an MI300X: the host blocks 493 ms in hipMemcpyWithStream inside
    SGLang's own 'execute_...' annotation while the GPU idles. It was one-time setup before the window
    ("No problems found; GPU busy 100%"); now the window holds it and gpu-idle-gaps names it."""
    a = _analyze("tracelens_sglang_prefill_mi300x.pt.trace.json.xz", pack)
    assert a.window.start_ns <= 100_000  # from the first GPU op (79 us), not after the stall
    gaps = [f for f in a.findings if f.rule == "gpu-idle-gaps"]
    assert gaps and gaps[0].impact_ns >= 490e6
    col = gaps[0].evidence_columns.index("host_api")
    assert "hipMemcpyWithStream" in {row[col] for row in gaps[0].evidence}


def test_decode_stall_inside_annotation_is_not_setup():
    """The SGLang decode step: the periodic steady state starts after a 460 ms host stall inside the
    step's annotation; the window starts where the annotation began, so the stall is judged."""
    trace = load_trace(PUBLIC / "tracelens_sglang_decode_mi300x.pt.trace.json.xz")
    w = choose_window(trace)
    assert w.steps is not None and w.setup_ns < 1_000_000, w.description
    assert "annotation" in w.description


def test_single_pass_gets_no_loop_rule(pack):
    """HTA's AlexNet benchmark capture (one warmup and one measured forward, cudaMalloc throughout):
    alloc-in-loop said 'inside the steady-state loop' of a capture without a loop; it is now judged
    as one pass and the rule is listed as not applicable, with the reason."""
    a = _analyze("hta_alexnet_single_pass.pt.trace.json.gz", pack)
    assert a.window.steps is None and a.window.description.startswith("one pass")
    assert "alloc-in-loop" not in {f.rule for f in a.findings}
    skipped = {n.rule: n for n in a.not_checked}
    assert "alloc-in-loop" in skipped and "no repeated GPU work" in skipped["alloc-in-loop"].reason


@pytest.mark.parametrize("name, device, gpu", [
    ("tracelens_sglang_prefill_mi300x.pt.trace.json.xz", 9, "AMD Instinct MI300X"),
    ("tracelens_torch_compile_mi300x.pt.trace.json.gz", 2, "AMD Instinct MI300X"),
])
def test_rocm_gpu_named_by_the_id_its_kernels_carry(name, device, gpu):
    """ROCm writes the physical index on each kernel (9, 2) while deviceProperties lists id 0: the GPU
    was 'unknown GPU (1 of 2 used)'."""
    trace = load_trace(PUBLIC / name)
    assert set(trace.kernels["device"].unique()) == {device}
    assert trace.gpus["device"].tolist() == [device] and trace.gpus["name"].tolist() == [gpu]
    assert int(trace.gpus["sm_count"].iloc[0]) == 304


def test_hip_calls_read_as_their_cuda_equivalents():
    """One table: launches, copies, synchronization, allocation and graph launches."""
    assert cuda_equivalent("hipLaunchKernel") == "cudaLaunchKernel"
    assert cuda_equivalent("hipExtModuleLaunchKernel") == "cuLaunchKernel"
    assert cuda_equivalent("hipMemcpyWithStream") == "cudaMemcpy"
    assert cuda_equivalent("hipMemcpyAsync") == "cudaMemcpyAsync"
    assert cuda_equivalent("hipStreamSynchronize") == "cudaStreamSynchronize"
    assert cuda_equivalent("hipHostMalloc") == "cudaMallocHost"
    assert cuda_equivalent("hipGraphLaunch") == "cudaGraphLaunch"
    assert cuda_equivalent("cudaMalloc") == "cudaMalloc" and cuda_equivalent("hipify") == "hipify"


def test_hip_launches_count_as_launches(pack):
    """HTA's MI250 ROCm 6.2 trace: its hipLaunchKernel calls are launch calls, so tiny-kernels can
    weigh launch cost against kernel time (it was silent for want of launch calls)."""
    a = _analyze("hta_mi250_minitoy_rocm62.pt.trace.json.gz", pack)
    fired = {f.rule for f in a.findings}
    assert "tiny-kernels" in fired, fired
