"""Smoke tests: every workload (and twin) runs in ``--size smoke`` on CPU; the driver builds the
right nsys/ncu command lines and reports missing tools clearly."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from workloads import PATHOLOGIES, WORKLOADS
from workloads import __main__ as driver
from workloads import _tools as tools

REPO = Path(__file__).resolve().parents[2]


def _run(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("fixed", [False, True], ids=["pathology", "fixed-bare"])
@pytest.mark.parametrize("name", PATHOLOGIES + ("healthy",))
def test_workload_smoke(name: str, fixed: bool) -> None:
    """Each workload and its twin; the twin runs ``--bare`` (no ranges: the shared run loop)."""
    proc = _run([f"workloads.{name}", "--size", "smoke", "--device", "cpu"]
                + (["--fixed", "--bare"] if fixed else []))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "RESULT {" in proc.stdout
    assert f'"bare": {str(fixed).lower()}' in proc.stdout


@pytest.mark.parametrize("mode", ["forward", "forward_backward", "training"])
def test_transformer_smoke(mode: str) -> None:
    proc = _run(["workloads.transformer", "--size", "smoke", "--device", "cpu", "--mode", mode])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "step 0:" in proc.stdout


def test_list_names_every_workload() -> None:
    proc = _run(["workloads", "list"])
    assert proc.returncode == 0, proc.stderr
    for name in WORKLOADS:
        assert name in proc.stdout


def test_nsys_command_construction() -> None:
    mod = driver.load_workload("pageable_h2d")
    program = driver.workload_cmd("pageable_h2d", "full", True, [])
    cmd = driver.profile_cmd("nsys", "/x/nsys", Path("/o/pageable_h2d_fixed"), mod, True, program)
    assert cmd[:2] == ["/x/nsys", "profile"]
    for flag in ("-t", "cuda,nvtx,osrt", "-s", "none", "--cpuctxsw=none",
                 "--cuda-memory-usage=true"):
        assert flag in cmd
    assert cmd[cmd.index("-o") + 1] == "/o/pageable_h2d_fixed"
    assert cmd[-5:-3] == ["-m", "workloads.pageable_h2d"]
    assert cmd[-3:] == ["--size", "full", "--fixed"]
    assert tools.nsys_export_cmd("nsys", "/o/a") == [
        "nsys", "export", "--type", "sqlite", "--force-overwrite", "true",
        "-o", "/o/a.sqlite", "/o/a.nsys-rep"]
    assert tools.nsys_analyze_cmd("nsys", "/o/a") == ["nsys", "analyze", "/o/a.sqlite"]
    stats = tools.nsys_stats_cmd("nsys", "/o/a")
    reports = stats[stats.index("-r") + 1].split(",")
    assert {"nvtx_sum", "cuda_gpu_kern_sum"} <= set(reports)
    assert stats[-1] == "/o/a.sqlite" and "csv" in stats


def test_ncu_command_construction() -> None:
    mod = driver.load_workload("naive_attention")
    program = driver.workload_cmd("naive_attention", "full", False, ["--steps", "1"])
    cmd = driver.profile_cmd("ncu", "ncu", Path("/o/naive_attention"), mod, False, program)
    assert cmd[:3] == ["ncu", "--set", "full"]
    assert cmd[cmd.index("-k") + 1] == mod.NCU_KERNEL_FILTER
    assert cmd[cmd.index("-c") + 1] == str(mod.NCU_COUNT)
    assert cmd[cmd.index("-o") + 1] == "/o/naive_attention"
    assert cmd[-2:] == ["--steps", "1"]
    fixed = driver.profile_cmd("ncu", "ncu", Path("/o/x"), mod, True, program)
    assert fixed[fixed.index("-k") + 1] == mod.NCU_KERNEL_FILTER_FIXED
    assert tools.ncu_import_cmd("ncu", "/o/a", "raw") == [
        "ncu", "--import", "/o/a.ncu-rep", "--csv", "--page", "raw"]


def test_trace_names() -> None:
    tr = driver.load_workload("transformer")
    extra = ["--model", "small", "--context", "128", "--mode", "training"]
    assert driver.trace_name("transformer", tr, False, extra) == "small_training_ctx128"
    hs = driver.load_workload("host_sync")
    assert driver.trace_name("host_sync", hs, True, []) == "host_sync_fixed"
    assert driver.variants(driver.load_workload("healthy"), False, True) == [False]
    assert driver.variants(hs, False, True) == [False, True]


def test_dry_run_passes_workload_args(capsys: pytest.CaptureFixture[str]) -> None:
    rc = driver.main(["profile", "transformer", "--model", "medium", "--context", "256",
                      "--mode", "forward", "--out", "/nonexistent/out", "--dry-run"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "medium_forward_ctx256" in out and "--model medium" in out


def test_find_tool_missing_is_clear(tmp_path: Path) -> None:
    with pytest.raises(tools.ToolNotFoundError) as err:
        tools.find_tool("nsys", env={"PATH": str(tmp_path)}, globs=[str(tmp_path / "*/nsys")])
    assert "nsys not found" in str(err.value) and str(tmp_path) in str(err.value)


def test_find_tool_prefers_env_then_path_then_newest_glob(tmp_path: Path) -> None:
    def exe(p: Path) -> Path:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("#!/bin/sh\n")
        p.chmod(0o755)
        return p

    old, new = exe(tmp_path / "2024.1.0/ncu"), exe(tmp_path / "2025.3.1/ncu")
    empty = tmp_path / "empty"
    empty.mkdir()
    pattern = [str(tmp_path / "*/ncu")]
    assert tools.find_tool("ncu", env={"PATH": str(empty)}, globs=pattern) == new
    assert tools.find_tool("ncu", env={"PATH": str(old.parent)}, globs=pattern) == old
    assert tools.find_tool("ncu", env={"PATH": "", "NCU": str(old)}, globs=pattern) == old


def test_profile_reports_missing_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    def missing(tool: str, **_kw: object) -> Path:
        raise tools.ToolNotFoundError(f"{tool} not found: test")

    monkeypatch.setattr(tools, "find_tool", missing)
    assert driver.main(["profile", "healthy", "--tool", "ncu", "--out", str(tmp_path)]) == 2
    assert "ncu not found" in capsys.readouterr().err


def test_nsys_cuda_graph_trace_flag() -> None:
    mod = driver.load_workload("decode_eager")
    program = driver.workload_cmd("decode_eager", "full", True, [])
    node = driver.profile_cmd("nsys", "nsys", Path("/o/d"), mod, True, program, graph_trace="node")
    assert "--cuda-graph-trace=node" in node and "-t" in node
    assert node.index("--cuda-graph-trace=node") < node.index("-o")
    plain = driver.profile_cmd("nsys", "nsys", Path("/o/d"), mod, True, program)
    assert not any(a.startswith("--cuda-graph-trace") for a in plain)
    assert driver.main(["profile", "decode_eager", "--tool", "torch", "--cuda-graph-trace", "node",
                        "--out", "/nonexistent/out", "--dry-run"]) == 2


def test_torch_memory_recording_and_step_times_in_manifest(tmp_path: Path) -> None:
    """A real torch.profiler run on the CPU: ``--torch-memory`` puts the allocator's events in
    the trace, and the manifest line carries the program's own measured step times."""
    import gzip
    import json

    proc = _run(["workloads", "profile", "memory_leak", "--tool", "torch", "--torch-memory",
                 "--gzip", "--size", "smoke", "--out", str(tmp_path), "--", "--device", "cpu",
                 "--steps", "3"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    (rec,) = [json.loads(line) for line in (tmp_path / "manifest.jsonl").read_text().splitlines()]
    assert rec["exit_code"] == 0 and "memory" in rec["flags"]
    assert len(rec["step_ms"]) == 3 and all(t > 0 for t in rec["step_ms"])
    assert rec["median_ms"] == pytest.approx(sorted(rec["step_ms"])[1], abs=1e-3)
    assert not (tmp_path / "memory_leak.result.json").exists()
    with gzip.open(tmp_path / "memory_leak.pt.trace.json.gz", "rt") as fh:
        events = json.load(fh)["traceEvents"]
    mem = [e for e in events if e.get("name") == "[memory]"]
    assert mem and all("Bytes" in e["args"] for e in mem)
    assert {e["name"] for e in events} >= {"validate", "step_0", "step_2"}


def test_bare_torch_profile_has_no_ranges_and_no_steps(tmp_path: Path) -> None:
    """``--bare`` under torch.profiler: one profile around the measured steps, as people record:
    no ``ProfilerStep#N``, no ``record_function`` range (the workload's own ``token_N`` ranges
    included), the ops and the program's own step times still there."""
    import json

    proc = _run(["workloads", "profile", "decode_eager", "--tool", "torch", "--size", "smoke",
                 "--out", str(tmp_path), "--suffix", "_bare", "--", "--device", "cpu", "--bare",
                 "--steps", "3"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    (rec,) = [json.loads(line) for line in (tmp_path / "manifest.jsonl").read_text().splitlines()]
    assert rec["name"] == "decode_eager_bare" and "bare" in rec["flags"]
    assert len(rec["step_ms"]) == 3 and all(t > 0 for t in rec["step_ms"])
    events = json.loads((tmp_path / "decode_eager_bare.pt.trace.json").read_text())["traceEvents"]
    names = {e.get("name", "") for e in events}
    assert not [n for n in names if n.startswith(("ProfilerStep", "step_", "token_", "warmup"))]
    assert not [e for e in events if e.get("cat") == "user_annotation"]
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    # 3 measured steps of 2 tokens, each token's argmax: none of the warm-up step's (outside)
    assert sum(e["name"] == "aten::argmax" for e in ops) == 3 * 2


def test_compile_graph_break_breaks_only_in_the_pathology() -> None:
    """compile_graph_break on the CPU (Dynamo with the eager backend): the pathology's gate helper
    breaks each block's graph (Dynamo counts the breaks and compiles two graphs per block frame),
    the twin's loop is traced into one graph with no break."""
    import re

    counts = {}
    for fixed in (False, True):
        proc = _run(["workloads.compile_graph_break", "--size", "smoke", "--device", "cpu",
                     "--steps", "1"] + (["--fixed"] if fixed else []))
        assert proc.returncode == 0, proc.stderr[-2000:]
        m = re.search(r"graphs: (\d+), graph breaks: (\d+)", proc.stdout)
        assert m, proc.stdout[-2000:]
        counts[fixed] = (int(m.group(1)), int(m.group(2)))
    assert counts[True] == (1, 0)
    assert counts[False][1] >= 1 and counts[False][0] >= 2


def _twin_ops(tmp_path: Path, name: str, op: str) -> tuple[list[dict], list[dict]]:
    """The pathology's and its ``--fixed`` twin's calls of the operator ``op`` (torch.profiler's
    ``cpu_op`` events, with their recorded shapes), both profiled on the CPU at smoke size for 2 steps."""
    import gzip
    import json

    proc = _run(["workloads", "profile", name, "--both", "--tool", "torch", "--gzip", "--size",
                 "smoke", "--out", str(tmp_path), "--", "--device", "cpu", "--steps", "2"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    calls = []
    for trace in (name, f"{name}_fixed"):
        with gzip.open(tmp_path / f"{trace}.pt.trace.json.gz", "rt") as fh:
            events = json.load(fh)["traceEvents"]
        calls.append([e for e in events if e.get("cat") == "cpu_op" and e.get("name") == op])
    pathology, twin = calls
    return pathology, twin


def _twin_op_counts(tmp_path: Path, name: str, op: str) -> tuple[int, int]:
    """How many times the pathology and its ``--fixed`` twin ran the operator ``op`` (see _twin_ops)."""
    pathology, twin = _twin_ops(tmp_path, name, op)
    return len(pathology), len(twin)


@pytest.mark.parametrize("name,op,ratio", [
    ("mask_index_sync", "aten::nonzero", None),   # the twin's static shapes: no nonzero at all
    ("per_sample_loop", "aten::conv2d", 4),       # smoke batch 4: one model call per sample
])
def test_held_out_twins_remove_the_mechanism(tmp_path: Path, name: str, op: str,
                                             ratio: int | None) -> None:
    """The held-out programs (issue 27) recorded with torch.profiler on the CPU: the pathology runs
    the operator that makes it slow (a data-dependent ``nonzero`` per expert and layer; one conv per
    layer per sample), the twin does not (no ``nonzero``; one conv per layer per batch)."""
    pathology, twin = _twin_op_counts(tmp_path, name, op)
    if ratio is None:
        # 2 steps x (2 layers x 4 experts + the padding mask), smoke sizes
        assert pathology >= 2 * (2 * 4 + 1) and twin == 0
    else:
        assert twin > 0 and pathology == ratio * twin


def test_mask_index_sync_twins_compute_what_the_pathology_computes() -> None:
    """mask_index_sync's two twins (batched experts; the per-expert loop without syncs) give the
    pathology's output on the tokens it keeps (their padding rows stay zero): they differ in how they
    dispatch, not in what they compute (CPU, fp32, smoke sizes: no token overflows its expert)."""
    import torch

    from workloads import _common as c
    from workloads import mask_index_sync as m

    def forward(*args: str) -> torch.Tensor:
        parser = c.make_parser("mask_index_sync", None)
        m.add_arguments(parser)
        step = m.build(c.parse_config("mask_index_sync", parser, ["--size", "smoke", "--device", "cpu",
                                                                  *args]))
        cells = dict(zip(step.__code__.co_freevars, (x.cell_contents for x in step.__closure__ or ())))
        with torch.no_grad():
            return cells["forward"]()

    sick = forward()
    for twin in (forward("--fixed"), forward("--fixed", "--dispatch", "loop")):
        kept = twin.abs().sum(-1) > 0
        assert int(kept.sum()) == sick.shape[0] < twin.shape[0]
        torch.testing.assert_close(twin[kept], sick)


@pytest.mark.parametrize("name,op,per_step", [
    ("head_loop_attention", "aten::softmax", 2 * 4),  # smoke: 2 layers x 4 heads, one softmax each
    ("layout_copies", "aten::contiguous", 2 * 2),     # smoke: 2 blocks x 2 permuted copies each
])
def test_third_held_out_twins_remove_the_mechanism(tmp_path: Path, name: str, op: str,
                                                   per_step: int) -> None:
    """The third held-out batch (issue 27) under torch.profiler on the CPU: the pathology runs its
    per-head softmax / its permuted copies in every step, the twin no softmax (one fused attention
    call per layer) / not those copies (channels-last tensors whose permutes are views; the CPU
    convolution's own ``contiguous`` calls stay in both, ~1 a step in the twin)."""
    pathology, twin = _twin_op_counts(tmp_path, name, op)
    if op == "aten::softmax":
        assert (pathology, twin) == (2 * per_step, 0)
    else:
        assert twin <= 2 and pathology >= twin + 2 * per_step


@pytest.mark.parametrize("name,op", [
    ("host_sampling_decode", "aten::multinomial"),  # the twin samples on the device, once a token
    ("detect_anomaly", "aten::isnan"),              # anomaly mode checks every gradient for NaN
])
def test_fourth_held_out_twins_differ_in_the_mechanism(tmp_path: Path, name: str, op: str) -> None:
    """The fourth held-out batch (issue 27) under torch.profiler on the CPU: host_sampling_decode's
    twin calls ``multinomial`` once per token (smoke: 2 steps x 2 tokens) where the pathology samples
    with numpy (none); detect_anomaly's pathology runs an ``isnan`` check on the backward's outputs
    (dozens a step), the twin none. (cudnn_benchmark_shapes and graph_recapture differ only on a GPU.)"""
    pathology, twin = _twin_op_counts(tmp_path, name, op)
    if op == "aten::multinomial":
        assert (pathology, twin) == (0, 2 * 2)
    else:
        assert pathology >= 2 * 10 and twin == 0


@pytest.mark.parametrize("name,op,counts", [
    # smoke: 3 blocks in 3 segments, the first two checkpointed: their GELU runs again in backward
    ("checkpoint_everything", "aten::gelu", (2 * (3 + 2), 2 * 3)),
    # the unfrozen backbone's backward reaches the token embedding, once a step; the frozen one not
    ("unfrozen_backbone", "aten::embedding_dense_backward", (2, 0)),
])
def test_fifth_held_out_twins_differ_in_the_mechanism(tmp_path: Path, name: str, op: str,
                                                      counts: tuple[int, int]) -> None:
    """The fifth held-out batch (issue 27) under torch.profiler on the CPU (2 steps): checkpointing
    runs the checkpointed blocks' forward again in the backward (GELU 5 times a step, the twin 3);
    the unfrozen backbone is differentiated down to its embedding, the frozen one not at all.
    (compile_varlen and host_noise_diffusion differ only on a GPU: Inductor, the device generator.)"""
    assert _twin_op_counts(tmp_path, name, op) == counts


@pytest.mark.parametrize("name,pathology,twin", [
    # the variable is set by the program itself, before CUDA starts, in the pathology only
    ("launch_blocking_env", "CUDA_LAUNCH_BLOCKING=1", "CUDA_LAUNCH_BLOCKING=(unset)"),
    ("deterministic_gnn", "deterministic algorithms: on", "deterministic algorithms: off"),
    ("teacher_offload", "moved to the GPU and back every step", "kept on the GPU"),
])
def test_sixth_held_out_twins_differ_in_the_switch(name: str, pathology: str, twin: str) -> None:
    """The sixth held-out batch (issue 27) differs from its twins only on a GPU (blocking launches, the
    sort-based scatter-add, the teacher's copies): on the CPU each program states the switch it runs
    with, the pathology's and not the twin's (the environment the tests inherit has no
    CUDA_LAUNCH_BLOCKING: the twin's ``(unset)`` is the program's own)."""
    env_blocking = os.environ.pop("CUDA_LAUNCH_BLOCKING", None)
    try:
        outs = [_run([f"workloads.{name}", "--size", "smoke", "--device", "cpu", "--steps", "1"] + extra)
                for extra in ([], ["--fixed"])]
    finally:
        if env_blocking is not None:
            os.environ["CUDA_LAUNCH_BLOCKING"] = env_blocking
    for proc in outs:
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert pathology in outs[0].stdout and twin not in outs[0].stdout
    assert twin in outs[1].stdout and pathology not in outs[1].stdout


def test_pad_to_max_length_twin_pads_to_the_longest(tmp_path: Path) -> None:
    """pad_to_max_length (sixth held-out batch) under torch.profiler on the CPU: the pathology's
    embedding runs on batches of 4 x 64 token ids (smoke max_length 64), the twin's on 4 x (the
    batch's longest text, 4 to 20 tokens, rounded up to 8): 16 or 24; the same number of calls."""
    pathology, twin = _twin_ops(tmp_path, "pad_to_max_length", "aten::embedding")
    assert len(pathology) == len(twin) == 2
    assert [e["args"]["Input Dims"][1] for e in pathology] == [[4, 64]] * 2
    assert all(e["args"]["Input Dims"][1] in ([4, 16], [4, 24]) for e in twin)
