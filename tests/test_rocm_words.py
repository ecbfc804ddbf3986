"""A ROCm trace's report in the trace's words (issue 27/34 robustness): on TraceLens' MI300X traces the
findings said `cudaLaunchKernel`, "stream 3 waited on an event (cudaStreamWaitEvent)" and "fewer blocks
than the 304 SMs" about a program that called hipLaunchKernel and hipStreamWaitEvent on a GPU of 304
compute units. One vocabulary per trace (analyzer.loading.vocabulary) words the rules' texts and the
facts' call names the trace's way, in every format; a CUDA trace's reports keep every byte
(tests/test_reference_reports.py).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from analyzer.loading import load_trace
from analyzer.loading.vocabulary import CUDA_WORDS, platform_of, vocabulary_of
from analyzer.pipeline import AnalysisOptions, analyze_paths, load_rules
from analyzer.reports import build_report, render
from analyzer.reports.summary import summary_text

PUBLIC = Path(__file__).resolve().parent / "data" / "public"
#: a CUDA call name written as one (not ``torch.cuda.synchronize``, not a kernel's ``..._cuda(``)
CUDA_CALL = re.compile(r"(?<![\w.\-/#=])(?:cuda[A-Z]\w*|cu[A-Z][a-z]\w*)")
SM_WORD = re.compile(r"\bSMs?\b")


@pytest.fixture(scope="module")
def pack():
    return load_rules(AnalysisOptions())


def _formats(name: str, pack) -> dict[str, str]:
    report = build_report(analyze_paths([PUBLIC / name], AnalysisOptions(), pack=pack))
    out = {fmt: render(report, fmt) for fmt in ("html", "md", "json")}  # type: ignore[arg-type]
    out["terminal"] = summary_text(report, width=200)
    return out


def _outside_urls(text: str) -> str:
    return re.sub(r"https?://[^\s)\]>\"'`<]+", "", text)


def test_the_platform_is_what_the_trace_was_recorded_on():
    rocm = load_trace(PUBLIC / "tracelens_bert_small_mi300x.pt.trace.json.xz")
    assert rocm.info.platform == "rocm" and platform_of(rocm) == "rocm"
    words = vocabulary_of(rocm)
    assert words.rocm and words.api == "HIP"
    assert words.call("cudaLaunchKernel") == "hipLaunchKernel"  # what this trace recorded
    assert words.call("cudaMemcpy") == "hipMemcpyWithStream"
    assert words.call("cuLaunchKernel") == "hipExtModuleLaunchKernel/hipModuleLaunchKernel"
    assert words.call("cudaStreamSynchronize") == "hipStreamSynchronize"  # not recorded: its HIP mirror
    cuda = load_trace(PUBLIC / "hta_alexnet_single_pass.pt.trace.json.gz")  # torch.profiler on an A100
    assert cuda.info.platform == "cuda" and vocabulary_of(cuda) is CUDA_WORDS


def test_analyzer_text_is_reworded_and_what_users_type_is_kept():
    words = vocabulary_of(load_trace(PUBLIC / "tracelens_bert_small_mi300x.pt.trace.json.xz"))
    said = words.text("inside `cudaLaunchKernel` and friends, Python and the CUDA runtime; fewer blocks than the "
                      "304 SMs, an SM's warp slots; fp32 on the CUDA cores without Tensor Cores; a CUDA graph "
                      "(`torch.cuda.CUDAGraph`, `nsys profile --cuda-graph-trace=node`, PYTORCH_CUDA_ALLOC_CONF, "
                      "torch.profiler CPU and CUDA activities, cuBLAS) "
                      "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html#cudaStreamSynchronize")
    assert said == ("inside `hipLaunchKernel` and friends, Python and the HIP runtime; fewer blocks than the "
                    "304 compute units, a compute unit's wavefront slots; fp32 on the stream processors without "
                    "Matrix Cores; a HIP graph (`torch.cuda.CUDAGraph`, `nsys profile --cuda-graph-trace=node`, "
                    "PYTORCH_CUDA_ALLOC_CONF, torch.profiler CPU and CUDA activities, cuBLAS) "
                    "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html#cudaStreamSynchronize")
    # values from the trace: only the CUDA names the facts gave to calls it recorded under HIP names
    assert words.values("refill (cudaMemcpy) in CUDA graph torch.cuda.synchronize() cudaFoo") == \
        "refill (hipMemcpyWithStream) in CUDA graph torch.cuda.synchronize() cudaFoo"


def test_launch_bound_bert_names_hip_calls_and_compute_units_in_every_format(pack):
    """BERT-small on an MI300X: launch-bound and small-grid fire; before, every format said
    `cudaLaunchKernel`, "CUDA calls", "the 304 SMs", "SM count" and "Where the CUDA calls come from"."""
    out = _formats("tracelens_bert_small_mi300x.pt.trace.json.xz", pack)
    for fmt, text in out.items():
        text = _outside_urls(text)
        assert not CUDA_CALL.findall(text), (fmt, sorted(set(CUDA_CALL.findall(text))))
        assert not SM_WORD.findall(text), fmt
        assert "304 compute units" in text, fmt
    for fmt in ("html", "md", "json"):
        assert "hipLaunchKernel" in out[fmt] and "hipDeviceSynchronize" in out[fmt], fmt
    assert "| Compute unit count |" in out["md"] and ">Compute unit count</th>" in out["html"]
    assert "Where the HIP calls come from" in out["md"] and "Where the HIP calls come from" in out["html"]
    doc = json.loads(out["json"])
    (section,) = doc["traces"]
    small = next(f for f in section["findings"] if f["rule"] == "small-grid")
    assert small["title"] == "Kernels launch fewer blocks than the GPU has compute units"


def test_a_stream_wait_is_named_as_recorded_in_verdict_table_and_finding(pack):
    """SGLang prefill on an MI300X: the GPU idles 493 ms behind a stream that waits on an event; the
    verdict, the breakdown table and the finding named cudaStreamWaitEvent, a call the program never made."""
    out = _formats("tracelens_sglang_prefill_mi300x.pt.trace.json.xz", pack)
    for fmt, text in out.items():
        text = _outside_urls(text)
        assert not CUDA_CALL.findall(text), (fmt, sorted(set(CUDA_CALL.findall(text))))
        assert "waited on an event (hipStreamWaitEvent)" in text, fmt
    doc = json.loads(out["json"])
    (section,) = doc["traces"]
    assert "hipStreamWaitEvent" in doc["verdict"]
    details = {r["detail"] for v in section["overview"]["breakdown"] for r in v["details"]["rows"]}
    assert any("hipStreamWaitEvent" in str(d) for d in details), details


def test_a_cuda_trace_keeps_the_cuda_words(pack):
    """The same rules on a torch.profiler trace of an A100 still say CUDA and SMs."""
    out = _formats("hta_alexnet_single_pass.pt.trace.json.gz", pack)
    assert "compute unit" not in out["md"] and "hipLaunchKernel" not in out["md"]
    assert "cudaLaunchKernel" in out["json"] or "CUDA" in out["md"]


# -- a multi-GPU job of ROCm ranks ------------------------------------------------------------------
NCCL_WORD = re.compile(r"(?<![.\w])NCCL\b")  # the library named in prose (not NCCL_DEBUG, not ncclAllReduce)
CODE = re.compile(r"`[^`\n]*`|<code>.*?</code>", re.S)


def _prose(text: str) -> str:
    """``text`` without URLs and code (what users type: `NCCL_DEBUG=INFO`, `torch.cuda.synchronize()`)."""
    return CODE.sub("", _outside_urls(text))


def test_a_job_of_rocm_ranks_says_rccl_hip_and_compute_units(tmp_path, pack):
    """Rank 0 of TraceLens' 8-rank ResNet DDP run on MI300Xs (RCCL kernels), given as two rank files of
    one job (the only ROCm rank trace with collectives we have): the rank sections spoke ROCm, but the
    job's part said "the traces record neither NCCL ranks", "union of NCCL kernel time", and its rules
    "CUDA call", `nvidia-smi topo -m`: the ranks' summaries carried no platform. Now every format says
    RCCL and HIP; rank-imbalance is made to fire (thresholds 0) so a job finding is in the report."""
    from analyzer.job.run import JobAnalysis
    from analyzer.pipeline import analyze_inputs
    from analyzer.reports.jobview import build_job_report
    from analyzer.rules import apply_overrides
    from analyzer.rules.wording import pack_words

    trace = PUBLIC / "tracelens_resnet_act_checkpoint_mi300x.pt.trace.json.xz"
    for name in ("rank0", "rank1"):
        (tmp_path / f"{name}.pt.trace.json.xz").write_bytes(trace.read_bytes())
    fire = apply_overrides(pack, ["rank-imbalance.min_ratio=0%", "rank-imbalance.min_gap=0ns"])
    out = analyze_inputs([tmp_path], AnalysisOptions(), job=True, pack=fire)
    job = out.job
    assert isinstance(job, JobAnalysis) and job.words.rocm
    assert all(r.summary.words.rocm for r in job.ranks)
    assert [f.rule for f in job.findings] == ["rank-imbalance"]
    report = build_job_report(job)
    texts = {fmt: render(report, fmt) for fmt in ("html", "md", "json")}  # type: ignore[arg-type]
    texts["terminal"] = summary_text(report, width=400)
    for fmt, text in texts.items():
        prose = _prose(text)
        assert not CUDA_CALL.findall(prose), (fmt, sorted(set(CUDA_CALL.findall(prose))))
        assert not SM_WORD.findall(prose), fmt
        assert not NCCL_WORD.findall(prose), (fmt, [prose[m.start() - 60:m.end() + 20] for m in NCCL_WORD.finditer(prose)][:3])
        if fmt != "json":  # JSON: the numbering's key ("process order")
            assert "neither RCCL ranks nor distinct devices" in text, fmt
    assert "union of RCCL kernel time" in texts["html"]
    # the job rules as this job's findings would say them: HIP calls, RCCL, rocm-smi; RCCL's variables kept
    rules = {r.name: r for r in pack_words(pack, job.words).rules if str(r.source).startswith("job_")}
    assert len(rules) == 3
    for rule in rules.values():
        for text in (rule.title, rule.message, rule.what, rule.why, rule.fix):
            prose = _prose(text)
            assert not CUDA_CALL.findall(prose) and not SM_WORD.findall(prose) and not NCCL_WORD.findall(prose), text
            assert "nvidia-smi" not in text and not re.search(r"(?<![.\w])CUDA\b", prose), text
    assert "HIP call" in rules["straggler"].message
    assert "`rocm-smi --showclocks --showtemp`" in rules["straggler"].fix
    assert "`rocm-smi --showtopo`" in rules["collective-bandwidth-low"].fix
    assert "`NCCL_DEBUG=INFO`" in rules["collective-bandwidth-low"].fix
    assert "compute units" in rules["collective-bandwidth-low"].why
