"""The second-round driver features on CPU: torch.profiler traces (``--tool torch``), the
transformer's Python timings sidecar, nsys command lines for call stacks and GPU metrics, the
power sampler's failure modes, and packing names that hold dots (``2.7B_...``)."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from workloads import __main__ as driver
from workloads import _pack
from workloads import _tools as tools

REPO = Path(__file__).resolve().parents[2]


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "", **env}
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=full, capture_output=True,
                          text=True, timeout=180)


def test_torch_tool_writes_kineto_traces_with_steps_and_ranges(tmp_path: Path) -> None:
    proc = _run(["workloads", "profile", "host_sync", "--both", "--tool", "torch", "--size", "smoke",
                 "--out", str(tmp_path), "--gzip"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    plain = tmp_path / "host_sync.pt.trace.json.gz"
    fixed = tmp_path / "host_sync_fixed.pt.trace.json.gz"
    assert plain.exists() and fixed.exists(), sorted(p.name for p in tmp_path.iterdir())
    events = json.loads(gzip.open(plain).read())["traceEvents"]
    annotations = [e["name"] for e in events if e.get("cat") == "user_annotation"]
    # smoke: 1 warmup step (profiler warmup, not recorded), 2 measured steps
    assert [a for a in annotations if a.startswith("ProfilerStep#")] == ["ProfilerStep#1", "ProfilerStep#2"]
    assert {"step_0", "step_1", "host_check", "forward"} <= set(annotations)
    assert "warmup" not in annotations
    lines = [json.loads(x) for x in (tmp_path / "manifest.jsonl").read_text().splitlines()]
    assert [r["tool"] for r in lines] == ["torch", "torch"]
    assert lines[0]["outputs"] == ["host_sync.pt.trace.json.gz"]
    assert lines[0]["tool_version"].startswith("torch ")


def test_torch_worker_names_per_rank(tmp_path: Path) -> None:
    for name in ("job_rank0.1700000000001.pt.trace.json", "job_rank1.1700000000002.pt.trace.json.gz",
                 "other.1700000000003.pt.trace.json"):
        (tmp_path / name).write_text("{}")
    done = driver.collect_torch_traces(tmp_path, "job")
    assert [p.name for p in done] == ["job_rank0.pt.trace.json", "job_rank1.pt.trace.json.gz"]
    assert (tmp_path / "other.1700000000003.pt.trace.json").exists()


@pytest.mark.parametrize("mode,phases", [
    ("forward", {"forward", "step"}),
    ("training", {"forward", "backward", "optimizer_step", "step"}),
])
def test_transformer_pytime_sidecar(tmp_path: Path, mode: str, phases: set[str]) -> None:
    out = tmp_path / "t.pytime.json"
    proc = _run(["workloads.transformer", "--size", "smoke", "--device", "cpu", "--mode", mode,
                 "--pytime", str(out), "--pytime-reps", "2"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["schema"] == "workloads.pytime/1" and record["status"] == "ok"
    assert record["config"]["mode"] == mode and "synchronize" in record["method"]
    assert set(record["phases"]) == phases
    for summary in record["phases"].values():
        assert summary["n"] == 2 and len(summary["samples_ms"]) == 2 and summary["mean_ms"] > 0
    # the synchronized step is at least its phases' sum (each phase ends in a synchronization)
    step = record["phases"]["step"]["samples_ms"]
    parts = [record["phases"][p]["samples_ms"] for p in phases - {"step"}]
    for i, total in enumerate(step):
        assert total >= sum(p[i] for p in parts) - 1e-3
    assert len(record["nvtx_step_ms"]) == 1


def test_driver_passes_the_pytime_sidecar_to_the_transformer() -> None:
    mod = driver.load_workload("transformer")
    assert driver.sidecar_args(mod, Path("/o/small_forward_ctx128")) == [
        "--pytime", "/o/small_forward_ctx128.pytime.json"]
    assert driver.sidecar_args(driver.load_workload("healthy"), Path("/o/healthy")) == []


def test_nsys_flags_for_call_stacks_and_gpu_metrics() -> None:
    cmd = tools.nsys_profile_cmd("nsys", "/o/a", ["python3", "x.py"], backtrace=True, gpu_metrics_hz=2000)
    assert "-s" in cmd and cmd[cmd.index("-s") + 1] == "process-tree"
    assert "none" not in cmd  # the sampling switch-off is replaced, not duplicated
    for flag in ("--python-sampling=true", "--python-backtrace=cuda", "--cudabacktrace=all",
                 "--gpu-metrics-devices=all", "--gpu-metrics-frequency=2000"):
        assert flag in cmd
    plain = tools.nsys_profile_cmd("nsys", "/o/a", ["python3", "x.py"])
    assert plain[plain.index("-s") + 1] == "none" and not any("gpu-metrics" in f for f in plain)


def test_profile_refuses_nsys_flags_with_other_tools(tmp_path: Path) -> None:
    proc = _run(["workloads", "profile", "healthy", "--tool", "torch", "--gpu-metrics", "--out",
                 str(tmp_path), "--size", "smoke"])
    assert proc.returncode == 2 and "--gpu-metrics needs --tool nsys" in proc.stderr
    assert driver.torch_env(tmp_path, "x", gzip=False, stack=True)["WORKLOADS_TORCH_STACK"] == "1"


def test_power_sampler_without_nvml_fails_in_one_line(tmp_path: Path) -> None:
    proc = _run(["workloads._power", "--out", str(tmp_path / "p.csv"), "--duration", "0.1"])
    try:
        import pynvml  # noqa: F401
    except ImportError:
        assert proc.returncode == 2 and proc.stderr.strip().startswith("error: pynvml")
    else:  # pynvml present but no GPU on a CI machine: NVML cannot start
        assert proc.returncode in (0, 2)
        if proc.returncode == 2:
            assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("name,trace", [
    ("2.7B_forward_ctx1024.sqlite", "2.7B_forward_ctx1024"),
    ("2.7B_forward_ctx1024.pytime.json", "2.7B_forward_ctx1024"),
    ("xl_training_ctx512.power.csv", "xl_training_ctx512"),
    ("host_sync.pt.trace.json.gz", "host_sync"),
    ("small_forward_ctx128_nvtx_sum.csv", "small_forward_ctx128"),
])
def test_pack_groups_files_by_trace_even_with_dots(name: str, trace: str) -> None:
    assert _pack.trace_of(Path(name)) == trace
    if trace.startswith("2.7B"):
        assert _pack.category_of(Path(name)) == "transformer_2.7B"
