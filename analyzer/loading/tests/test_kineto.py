"""torch.profiler (Kineto) JSON: parsing units, detection, bad input, and the real traces we made.

The real traces are ours (``tests/data/kineto/``, see ``tests/data/MANIFEST.md``). Hand-built JSON
appears only where the input is meant to be broken (truncated, not a trace, wrong types), never as
evidence that a rule works.
"""
from __future__ import annotations

import gzip
import json
import lzma
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.errors import InputError
from analyzer.loading import detect_format, load_trace
from analyzer.loading.kernel_names import kernel_short_name
from analyzer.loading.kineto.columns import memcpy_info, memset_kind, parse_timestamps_ns
from analyzer.testing import DATA_DIR

CPU_TRACE = DATA_DIR / "kineto" / "cpu_dataloader_starved.pt.trace.json.gz"
CPU_2021 = DATA_DIR / "kineto" / "cpu_torch181_2021.pt.trace.json.gz"


def _cpu_json() -> bytes:
    if not CPU_TRACE.is_file():
        pytest.skip(f"{CPU_TRACE} is absent")
    return gzip.decompress(CPU_TRACE.read_bytes())


def _error(path: Path) -> InputError:
    with pytest.raises(InputError) as info:
        load_trace(path)
    msg = str(info.value)
    assert "\n" not in msg and str(path) in msg
    return info.value


# ----------------------------------------------------------------------------------------------------
# units
# ----------------------------------------------------------------------------------------------------
def test_timestamps_are_exact_nanoseconds():
    # the 2024+ relative format, an epoch timestamp with ns decimals (a float64 holds it only to 0.25 us)
    # and the integer microseconds of 2021-2023 traces
    raw = [b"4547662233204.724", b"1712195495519695.812", b"1669783687464181", b"340.024", b"7", b"0.5"]
    assert parse_timestamps_ns(raw).tolist() == [
        4547662233204724, 1712195495519695812, 1669783687464181000, 340024, 7000, 500]
    assert round(float(b"1712195495519695.812") * 1000) != 1712195495519695812  # why we parse the text


def test_timestamps_odd_layouts_go_the_slow_way():
    raw = [b"1.5e3", b"-3", b"", b"abc", b"12.3456", b"99999999999999999"]
    assert parse_timestamps_ns(raw).tolist() == [1500000, -3000, -1, -1, 12345, -1]  # the last overflows int64


def test_timestamps_many_lengths_keep_their_order():
    values = np.random.default_rng(0).integers(0, 10**15, size=2000)
    raw = [f"{v // 1000}.{v % 1000:03d}".encode() for v in values]
    assert (parse_timestamps_ns(raw) == values).all()


def test_short_names_reproduce_nsys_short_names():
    # every distinct kernel of the committed nsys traces: our short name of nsys's demangled name is
    # nsys's own shortName (Kineto records only the demangled name)
    from analyzer.testing import real_trace

    pairs: dict[str, str] = {}
    for name in ("naive_attention", "small_training_ctx128", "occupancy", "fp32_gemm_fixed", "healthy"):
        k = load_trace(real_trace(name)).kernels
        pairs.update(zip(k["name"], k["short_name"]))
    assert len(pairs) > 40
    wrong = {n: (s, kernel_short_name(n)) for n, s in pairs.items() if kernel_short_name(n) != s}
    assert not wrong


@pytest.mark.parametrize(("name", "short"), [
    # Kineto's demangler spells anonymous namespaces and lambdas differently from nsys
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<at::native::(anonymous "
     "namespace)::OpaqueType<4u>, unsigned int, 1, 128, 1>(at::native::(anonymous namespace)::OpaqueType<4u>*, "
     "unsigned int)", "CatArrayBatchedCopy_aligned16_contig"),
    ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<at::native::BinaryFunctor<float, "
     "float, float, at::native::AddFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, "
     "float, float, at::native::AddFunctor<float> > const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl"
     "<at::native::BinaryFunctor<float, float, float, at::native::AddFunctor<float> > >(at::TensorIteratorBase&, "
     "at::native::BinaryFunctor<float, float, float, at::native::AddFunctor<float> > const&)::{lambda(int)#1})",
     "elementwise_kernel"),
    ("triton_poi_fused_add_cos_sin_0", "triton_poi_fused_add_cos_sin_0"),
    ("_ZN19cutlass_cudnn_train6KernelINS_4conv6kernelEEEvNT_6ParamsE", "Kernel"),  # left mangled by Kineto
    ("ampere_sgemm_128x64_nn", "ampere_sgemm_128x64_nn"),
])
def test_short_name_of_kineto_spellings(name, short):
    assert kernel_short_name(name) == short


def test_copy_and_memset_names():
    # Kineto's names (libkineto memcpyName/Memset, cupti_strings.cpp); ROCm's "Host" says no kind
    assert memcpy_info("Memcpy HtoD (Pageable -> Device)") == ("H2D", "pageable", "device")
    assert memcpy_info("Memcpy DtoH (Device -> Pinned)") == ("D2H", "device", "pinned")
    assert memcpy_info("Memcpy DtoD (Device -> Device)") == ("D2D", "device", "device")
    assert memcpy_info("Memcpy PtoP (Device -> Device)") == ("P2P", "device", "device")
    assert memcpy_info("Memcpy HtoD (Host -> Device)") == ("H2D", "unknown", "device")
    assert memcpy_info("Memcpy HtoD") == ("H2D", "unknown", "unknown")
    assert memset_kind("Memset (Device)") == "device"
    assert memset_kind("Memset (Unknown)") == "unknown"


# ----------------------------------------------------------------------------------------------------
# detection and bad input: one line, exit 2, never a traceback
# ----------------------------------------------------------------------------------------------------
def test_detects_json_plain_gzip_and_xz(tmp_path):
    text = _cpu_json()
    plain, gz, xz = tmp_path / "t.json", tmp_path / "t.bin", tmp_path / "t.json.xz"
    plain.write_bytes(text)
    gz.write_bytes(gzip.compress(text))
    xz.write_bytes(lzma.compress(text))
    assert detect_format(plain) == detect_format(gz) == detect_format(xz) == "json"
    assert detect_format(CPU_TRACE) == "json"


def test_cpu_only_trace_has_no_gpu_activity():
    err = _error(CPU_TRACE)
    assert "without GPU activity" in str(err) and "ProfilerActivity.CUDA" in str(err)


def test_truncated_json(tmp_path):
    text = _cpu_json()
    p = tmp_path / "cut.pt.trace.json"
    p.write_bytes(text[: len(text) * 2 // 3])
    assert "truncated" in str(_error(p))


def test_truncated_gzip(tmp_path):
    data = CPU_TRACE.read_bytes() if CPU_TRACE.is_file() else pytest.skip("no trace")
    p = tmp_path / "cut.json.gz"
    p.write_bytes(data[: len(data) // 2])
    assert "truncated or corrupt" in str(_error(p))


@pytest.mark.parametrize(("content", "expect"), [
    (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": ', "truncated"),
    (b'{"traceEvents": [}', "not valid JSON"),
    (b'{"schemaVersion": 1, "other": []}', "without a traceEvents list"),
    (b'{"traceEvents": []}', "no events"),
    (b'[{"ph": "X", "cat": "v8", "name": "Layout", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]',
     "not from torch.profiler"),
    (b'{"traceEvents": [{"ph": "X", "cat": "blink", "name": "Paint", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}',
     "not from torch.profiler"),
    (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2, "args": "oops"}]}',
     "malformed trace JSON"),
    (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": {"a": 1}, "dur": 2}]}',
     "no GPU operation carries a usable timestamp"),
    (b'{"traceEvents": [{"ph": "X", "cat": "mtia_runtime", "name": "m", "ts": 1, "dur": 2}]}', "MTIA"),
    (b'{"traceEvents": [], "deep": ' + b"[" * 10_000 + b"]" * 10_000 + b"}", "levels deep"),
    (b'\xef\xbb\xbf  {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2}]}',
     "without GPU activity"),
])
def test_bad_json_is_one_line(tmp_path, content, expect):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    assert expect in str(_error(p))


@pytest.mark.parametrize("bad", [b"\xed\xb3\xbf", b"\xff", b"\\udcff", b"\\ud83d"])
def test_invalid_unicode_in_names_reads_as_replacement_character(tmp_path, bad):
    """Kineto copies kernel and Python names byte for byte: text that is not valid UTF-8, or an unpaired
    surrogate escape, reads as U+FFFD (as Python's and Chrome's readers show it), not as a failed
    trace (found by the Kineto fuzz harness: an internal error)."""
    src = DATA_DIR / "kineto" / "occupancy_fixed.pt.trace.json.gz"
    if not src.is_file():
        pytest.skip(f"{src} is absent")
    text = gzip.decompress(src.read_bytes())
    first = text.index(b'"cat": "kernel", "name": "') + len(b'"cat": "kernel", "name": "')
    p = tmp_path / "odd.pt.trace.json"
    p.write_bytes(text[:first] + b"x" + bad + text[first:])
    trace = load_trace(p)
    assert len(trace.kernels) == len(load_trace(src).kernels)
    assert any(str(n).startswith("x\ufffd") for n in trace.kernels["name"].astype(str).unique())


def test_gzip_of_something_else(tmp_path):
    p = tmp_path / "notes.txt.gz"
    p.write_bytes(gzip.compress(b"kernel,duration\nfoo,12\n"))
    assert detect_format(p) == "gzip"
    assert "neither a JSON trace nor an SQLite export" in str(_error(p))


def test_cli_bad_kineto_input_exits_2_without_traceback(tmp_path):
    import subprocess
    import sys

    p = tmp_path / "cut.pt.trace.json"
    text = _cpu_json()
    p.write_bytes(text[:5000])
    before = (p.read_bytes(), os.stat(p).st_mtime_ns)
    proc = subprocess.run([sys.executable, "-m", "analyzer.cli", str(p)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.strip().count("\n") == 0
    assert "truncated" in proc.stderr
    assert (p.read_bytes(), os.stat(p).st_mtime_ns) == before
    assert sorted(os.listdir(tmp_path)) == ["cut.pt.trace.json"]


# ----------------------------------------------------------------------------------------------------
# the CPU-side structure of a real trace (our own, recorded on CPU; see MANIFEST.md)
# ----------------------------------------------------------------------------------------------------
def _cpu_ranges(path: Path):
    """The range frame and generation of a CPU-only trace (no GPU: the loader itself refuses it)."""
    from analyzer.loading.kineto import columns, document, loader

    if not path.is_file():
        pytest.skip(f"{path} is absent")
    doc = document.decode_document(gzip.decompress(path.read_bytes()), path)
    events = doc.traceEvents
    assert events
    built = columns.EventColumns()
    built.add(events)
    quality = loader._Quality()
    group = built.group("ranges", quality)
    assert group.n == sum(e.ph == "X" and e.cat in document.RANGE_CATS for e in events)
    group.start -= group.start.min()
    frame, _ = loader._KinetoLoader(path, None, None, "kineto-json")._ranges(group, loader._ThreadKeys())
    generation = loader.trace_generation({e.cat for e in events if e.ph == "X"}, built.group("flows", quality),
                                         group, built.group("kernels", quality))
    return frame, generation


def _check_tree(frame) -> None:
    parent = frame["parent_id"].to_numpy()
    has = parent >= 0
    start, end = frame["start"].to_numpy(), frame["end"].to_numpy()
    assert (start[has] >= start[parent[has]]).all() and (end[has] <= end[parent[has]]).all()
    assert (frame["depth"].to_numpy()[has] == frame["depth"].to_numpy()[parent[has]] + 1).all()


def test_current_format_cpu_ranges_and_steps():
    """Our CPU recording of dataloader_starved (torch 2.13): record_function ranges nested per thread,
    ProfilerStep#N outermost, the workload's NVTX mirrors (step_N/load_batch/...) inside."""
    frame, generation = _cpu_ranges(CPU_TRACE)
    assert generation == "2024+"
    steps = frame[frame["text"].str.startswith("ProfilerStep#")]
    assert steps["text"].tolist() == ["ProfilerStep#1", "ProfilerStep#2"]
    assert (steps["depth"] == 0).all()
    paths = set(frame["path"])
    assert "ProfilerStep#1/step_0/load_batch" in paths
    assert "ProfilerStep#2/step_1/optimizer_step/Optimizer.step#AdamW.step" in paths
    assert set(frame["domain"]) == {"cpu_op", "user_annotation"}
    _check_tree(frame)
    raw = json.loads(_cpu_json())
    first = next(e for e in raw["traceEvents"] if e.get("name") == "ProfilerStep#1")
    assert isinstance(first["ts"], float)  # ns decimals


def test_2021_format_cpu_ranges_and_steps():
    """Our CPU recording with PyTorch 1.8.1: everything is an ``Operator`` event (record_function and
    ProfilerStep included), integer microseconds, string thread ids; the same tree comes out."""
    frame, generation = _cpu_ranges(CPU_2021)
    assert generation == "2021"
    assert set(frame["domain"]) == {"Operator"}
    steps = frame[frame["text"].str.startswith("ProfilerStep#")]
    assert steps["text"].tolist() == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert (steps["depth"] == 0).all()
    paths = set(frame["path"])
    for i in range(1, 5):
        assert f"ProfilerStep#{i}/step_{i}/forward" in paths
        assert f"ProfilerStep#{i}/step_{i}/optimizer_step" in paths
    assert (frame["start"].to_numpy() % 1000 == 0).all()  # whole microseconds
    assert frame["tid"].nunique() == 1 and int(frame["tid"].iat[0]) > 0  # "501087104" as a number
    _check_tree(frame)


def test_2021_cpu_trace_has_no_gpu_activity():
    if not CPU_2021.is_file():
        pytest.skip("no trace")
    assert "without GPU activity" in str(_error(CPU_2021))


# ----------------------------------------------------------------------------------------------------
# collectives: message size and process group on NCCL kernels
# ----------------------------------------------------------------------------------------------------
DDP_RANK0 = DATA_DIR / "ddp" / "kineto" / "ddp_straggler_2gpu_rank0.pt.trace.json.xz"


def test_nccl_kernels_carry_message_size_and_process_group():
    """The DDP straggler job recorded with torch.profiler on 2 H200s: every NCCL kernel gets NCCL's
    message size from c10d's ``In msg nelems`` x ``dtype``. The sizes are exactly those NCCL's own NVTX
    payloads state ("Message size [bytes]") for the AllReduces of the same workload exported by nsys
    with JSON payloads (the DDP gradient buckets: 4227072, 16777216, 67112960, 67125248 bytes)."""
    if not DDP_RANK0.is_file():
        pytest.skip(f"{DDP_RANK0} is absent")
    k = load_trace(DDP_RANK0).kernels
    nccl = k["short_name"].astype(str).str.startswith("nccl").to_numpy()
    assert nccl.sum() == 160
    assert set(k["comm_bytes"][nccl]) == {4227072, 16777216, 67112960, 67125248}
    assert set(k["comm_group"][nccl].astype(str)) == {"0"}  # the default process group
    assert (k["comm_bytes"][~nccl] == -1).all() and set(k["comm_group"][~nccl].astype(str)) == {""}


def test_no_collective_metadata_no_comm_columns():
    k = load_trace(DATA_DIR / "kineto" / "occupancy.pt.trace.json.gz").kernels
    assert "comm_bytes" not in k.columns and "comm_group" not in k.columns


@pytest.mark.parametrize(("args", "nbytes", "group"), [
    ({"In msg nelems": 1024, "Out msg nelems": 2048, "dtype": "BFloat16", "Process Group Name": "3"}, 2048, "3"),
    ({"In msg nelems": 2048, "Out msg nelems": 1024, "dtype": "Float", "Process Group Name": "0"}, 4096, "0"),
    ({"In msg nelems": 16, "dtype": "Long"}, 128, ""),
    ({"In msg nelems": 16, "dtype": "NewType", "Process Group Name": 7}, -1, "7"),
    ({"In msg nelems": "x", "Out msg nelems": None, "dtype": "Float"}, -1, ""),
    ({"In msg nelems": 2**62, "dtype": "Double"}, -1, ""),
])
def test_message_size_is_nccls_count_times_element_size(tmp_path, args, nbytes, group):
    """All-gather: NCCL is called with the input count, reduce-scatter with the output count (the
    smaller of c10d's two); unknown types, counts or absurd values give -1."""
    doc = {"traceEvents": [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1.0,
         "dur": 2.0, "args": {"correlation": 5}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
         "pid": 0, "tid": 7, "ts": 4.0, "dur": 10.0, "args": {"correlation": 5, "device": 0, "stream": 7, **args}},
    ]}
    p = tmp_path / "one.pt.trace.json"
    p.write_text(json.dumps(doc))
    k = load_trace(p).kernels
    assert int(k["comm_bytes"].iat[0]) == nbytes and str(k["comm_group"].iat[0]) == group


# --------------------------------------------------------------------------------------------------
# short names of damaged names: never empty, and a huge one takes seconds
# --------------------------------------------------------------------------------------------------
_NAME_ALPHABET = "ab_: <>()[]{}-,&*0123456789\u00e9\u4e2d"


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=_NAME_ALPHABET, max_size=60))
def test_short_name_of_any_text_is_never_empty(name):
    assert (kernel_short_name(name) != "") == (name.strip() != "")


def test_short_name_of_a_huge_name_takes_seconds():
    """A damaged trace's 200 MB kernel name (a 1 GB one took 139 s in the per-character loop)."""
    import time

    name = "void ns::huge<" + "a<b>, " * (200 * 2**20 // 6) + "c>(int, " + "x" * 1000 + ")"
    # CPU time of this process, not wall time: a CI machine's other jobs stretch the wall clock (15.8 s
    # once under load 12) but not the work done here (about 3 s; the per-character loop took 30 s)
    t = time.process_time()
    assert kernel_short_name(name) == "huge"
    assert time.process_time() - t < 12


def test_values_out_of_range_are_counted_and_noted_once(tmp_path):
    """A negative ``dur``, a ``dur`` of 2^64 and a negative ``ts`` (issue 33: clamped to 0, wrapped to
    0 and dropped, all silently) are counted, and the report says so in one note."""
    from analyzer.pipeline import AnalysisOptions, analyze_paths
    from analyzer.reports import build_report, render

    doc = json.loads(gzip.open(DATA_DIR / "kineto" / "healthy.pt.trace.json.gz").read())
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    calls = [e for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime"]
    kernels[1]["dur"], kernels[2]["dur"], kernels[3]["ts"] = -5, 2**64, -12.5
    calls[0]["dur"] = -1
    path = tmp_path / "out_of_range.pt.trace.json"
    path.write_text(json.dumps(doc))
    trace = load_trace(path)
    assert len(trace.kernels) == len(kernels) - 1
    assert trace.extras["kineto"]["out_of_range"] == {
        "negative_dur": {"kernel": 1, "CUDA API call": 1}, "huge_dur": {"kernel": 1}, "negative_ts": {"kernel": 1}}
    (note,) = trace.extras["notes"]
    assert "1 kernel, 1 CUDA API call with a negative duration (dur), counted as 0" in note
    assert "too large for 64-bit nanoseconds" in note and "1 kernel with a negative timestamp (ts), left out" in note
    report = build_report(analyze_paths([path], AnalysisOptions()))
    for fmt in ("md", "json", "html"):
        assert render(report, fmt).count("Data quality: this torch.profiler trace") == 1, fmt
    healthy = load_trace(DATA_DIR / "kineto" / "healthy.pt.trace.json.gz")
    assert "notes" not in healthy.extras and not healthy.extras["kineto"]["out_of_range"]


def test_unreadable_timestamps_are_counted_and_noted(tmp_path):
    """Events whose ``ts`` is null, a string, 1e300 us (past 64-bit nanoseconds) or missing were left
    out silently: they are counted and the report's note says so; the trace still loads."""
    doc = json.loads(gzip.open(DATA_DIR / "kineto" / "healthy.pt.trace.json.gz").read())
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    calls = [e for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime"]
    kernels[1]["ts"], kernels[2]["ts"], kernels[3]["ts"] = None, "soon", 1e300
    del calls[0]["ts"]
    calls[1]["ts"] = "NaN"
    path = tmp_path / "unreadable_ts.pt.trace.json"
    path.write_text(json.dumps(doc))
    trace = load_trace(path)
    assert len(trace.kernels) == len(kernels) - 3
    assert trace.extras["kineto"]["out_of_range"] == {"unreadable_ts": {"kernel": 3, "CUDA API call": 2}}
    (note,) = trace.extras["notes"]
    assert "3 kernels, 2 CUDA API calls with a missing or unreadable timestamp (ts" in note and "left out" in note


def test_a_trace_whose_gpu_timestamps_are_all_unreadable_is_one_line(tmp_path):
    doc = json.loads(gzip.open(DATA_DIR / "kineto" / "healthy.pt.trace.json.gz").read())
    for e in doc["traceEvents"]:
        if "ts" in e:
            e["ts"] = "unknown"
    path = tmp_path / "no_ts.pt.trace.json"
    path.write_text(json.dumps(doc))
    err = _error(path)
    assert "no GPU operation carries a usable timestamp" in str(err) and "\n" not in str(err)
