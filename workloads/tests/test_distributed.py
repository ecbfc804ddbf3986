"""The multi-GPU workloads run as 2-process jobs on CPU (gloo under torchrun) and alone; the driver
builds the right command lines for both nsys layouts, the 1-GPU run and torch.profiler."""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("torch")

from workloads import DISTRIBUTED, WORKLOADS
from workloads import __main__ as driver
from workloads import _distributed as jobs

REPO = Path(__file__).resolve().parents[2]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


def _run(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "",
           "OMP_NUM_THREADS": "1"}
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def _results(stdout: str) -> list[dict]:
    """The RESULT objects of every rank; each is decoded up to its closing brace (text another rank
    wrote into the same line is not part of it)."""
    decoder = json.JSONDecoder()
    out = []
    for line in stdout.splitlines():
        start = line.find("RESULT {")
        while start >= 0:
            obj, end = decoder.raw_decode(line, start + len("RESULT "))
            out.append(obj)
            start = line.find("RESULT {", end)
    return out


def test_every_workload_and_twin_as_a_two_rank_gloo_job() -> None:
    proc = _run([*TORCHRUN, "-m", "workloads.tests._ddp_harness", "--steps", "2", "--warmup", "1"])
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert proc.stdout.count("HARNESS OK") == 2
    results = _results(proc.stdout)
    assert len(results) == 2 * 2 * len(DISTRIBUTED)
    for name in DISTRIBUTED:
        for variant in ("pathology", "fixed"):
            ranks = sorted(r["rank"] for r in results
                           if r["workload"] == name and r["variant"] == variant)
            assert ranks == [0, 1], (name, variant)
    assert all(r["world_size"] == 2 and r["backend"] == "gloo" for r in results)
    # only the pathology's last rank loads slowly
    assert re.findall(r"\[ddp_straggler:rank(\d)\] slow loader", proc.stdout) == ["1"]


def test_a_job_launched_by_torchrun_joins_its_own_group() -> None:
    proc = _run([*TORCHRUN, "-m", "workloads.ddp_straggler", "--size", "smoke", "--device", "cpu",
                 "--steps", "2", "--warmup", "1", "--slow-rank", "0"])
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "[ddp_straggler:rank0] slow loader" in proc.stdout
    assert sorted(r["rank"] for r in _results(proc.stdout)) == [0, 1]


def test_alone_each_is_the_one_gpu_run() -> None:
    code = ("import sys, importlib; from workloads import DISTRIBUTED\n"
            "for n in DISTRIBUTED:\n"
            "    assert importlib.import_module('workloads.' + n).main(sys.argv[1:]) == 0\n")
    proc = _run([sys.executable, "-c", code, "--size", "smoke", "--device", "cpu", "--steps", "1",
                 "--warmup", "0"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = _results(proc.stdout)
    assert [r["workload"] for r in results] == list(DISTRIBUTED)
    assert all(r["world_size"] == 1 and r["backend"] is None for r in results)


def test_global_batch_must_split_over_the_ranks() -> None:
    from workloads import _ddp

    ns = argparse.Namespace(global_batch=None, _global_batch=(16, 4096))
    cfg = SimpleNamespace(options=ns, smoke=True)
    assert _ddp.per_rank(_ddp.Dist(0, 2, 0, "gloo"), _ddp.global_batch(cfg)) == 8
    with pytest.raises(SystemExit, match="does not split over 3 ranks"):
        _ddp.per_rank(_ddp.Dist(0, 3, 0, "gloo"), 16)


def test_distributed_workloads_are_registered() -> None:
    for name in DISTRIBUTED:
        assert name in WORKLOADS
        assert jobs.is_distributed(driver.load_workload(name))
    assert not jobs.is_distributed(driver.load_workload("healthy"))


def _program(name: str, *extra: str) -> list[str]:
    return driver.workload_cmd(name, "full", False, list(extra))


def test_single_report_layout_follows_torchrun_children(tmp_path: Path) -> None:
    plan = jobs.plan("nsys", "/x/nsys", tmp_path, "ddp_straggler", _program("ddp_straggler"),
                     2, "single")
    assert plan.name == "ddp_straggler_2gpu" and plan.bases == [tmp_path / "ddp_straggler_2gpu"]
    cmd = plan.cmd
    assert cmd[:2] == ["/x/nsys", "profile"]
    assert "--trace-fork-before-exec=true" in cmd and "cuda,nvtx,osrt" in cmd
    assert cmd[cmd.index("-o") + 1] == str(tmp_path / "ddp_straggler_2gpu")
    launch = cmd[cmd.index("-o") + 2:]
    assert launch[:6] == [sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc_per_node=2", "-m"]
    assert launch[6:] == ["workloads.ddp_straggler", "--size", "full"]


def test_per_rank_layout_wraps_each_rank_in_its_own_nsys(tmp_path: Path) -> None:
    out = tmp_path / "a dir"  # quoting survives spaces
    plan = jobs.plan("nsys", "/x/nsys", out, "ddp_straggler_fixed",
                     _program("ddp_straggler", "--fixed"), 2, "per-rank")
    assert plan.bases == [out / "ddp_straggler_fixed_2gpu_rank0",
                          out / "ddp_straggler_fixed_2gpu_rank1"]
    cmd = plan.cmd
    assert cmd[:6] == [sys.executable, "-m", "torch.distributed.run", "--standalone",
                       "--nproc_per_node=2", "--no-python"]
    assert cmd[6:8] == ["bash", "-c"]
    script = cmd[8]
    assert script.startswith("exec /x/nsys profile ")
    assert "--trace-fork-before-exec" not in script
    # what bash runs for rank 1
    words = shlex.split(script.replace('"$RANK"', "1"))
    assert words[words.index("-o") + 1] == str(out / "ddp_straggler_fixed_2gpu_rank1")
    assert words[words.index("-o") + 2:] == [sys.executable, "-m", "workloads.ddp_straggler",
                                             "--size", "full", "--fixed"]


def test_one_gpu_run_and_torch_profiler_and_ncu(tmp_path: Path) -> None:
    alone = jobs.plan("nsys", "nsys", tmp_path, "ddp_exposed_comm_fixed",
                      _program("ddp_exposed_comm", "--fixed"), 1, "per-rank")
    assert alone.name == "ddp_exposed_comm_fixed_1gpu"
    assert "torch.distributed.run" not in alone.cmd
    assert alone.cmd[-6:] == [sys.executable, "-m", "workloads.ddp_exposed_comm", "--size", "full",
                              "--fixed"]
    kineto = jobs.plan("torch", "torch", tmp_path, "ddp_straggler", _program("ddp_straggler"),
                       2, "single")
    assert kineto.cmd[:5] == TORCHRUN and kineto.cmd[5:7] == ["-m", "workloads.ddp_straggler"]
    with pytest.raises(ValueError, match="ncu cannot profile a distributed job"):
        jobs.plan("ncu", "ncu", tmp_path, "x", _program("ddp_straggler"), 2, "single")
    with pytest.raises(ValueError, match="nproc"):
        jobs.plan("nsys", "nsys", tmp_path, "x", _program("ddp_straggler"), 0, "single")


def test_manifest_has_one_line_per_trace_file() -> None:
    record = {"name": "ddp_straggler_2gpu", "workload": "ddp_straggler", "exit_code": 0}
    single = jobs.manifest_records(record, 2, "single")
    assert [r["name"] for r in single] == ["ddp_straggler_2gpu"]
    assert single[0]["layout"] == "single" and single[0]["nproc"] == 2
    per_rank = jobs.manifest_records(record, 2, "per-rank")
    assert [(r["name"], r["rank"], r["job"]) for r in per_rank] == [
        ("ddp_straggler_2gpu_rank0", 0, "ddp_straggler_2gpu"),
        ("ddp_straggler_2gpu_rank1", 1, "ddp_straggler_2gpu")]
    assert per_rank[0]["nccl_env"]["NCCL_NVLS_ENABLE"] == "0"


def test_post_expands_a_job_to_its_rank_reports(tmp_path: Path) -> None:
    for n in ("j_2gpu_rank0", "j_2gpu_rank1", "j_2gpu_rank10", "k_1gpu", "j_2gpu_rankx"):
        (tmp_path / f"{n}.nsys-rep").write_bytes(b"")
    assert jobs.post_targets(tmp_path, ["j_2gpu", "k_1gpu", "missing"]) == [
        "j_2gpu_rank0", "j_2gpu_rank1", "j_2gpu_rank10", "k_1gpu", "missing"]
    assert jobs.post_targets(tmp_path, ["j_2gpu_rank1"]) == ["j_2gpu_rank1"]


def test_job_env_turns_nvlink_multicast_off_unless_set() -> None:
    env = jobs.job_env({"PATH": "/bin", "NCCL_NVLS_ENABLE": "1"})
    assert env["NCCL_NVLS_ENABLE"] == "1" and env["NVSHMEM_DISABLE_NVLS"] == "1"
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1" and env["PATH"] == "/bin"


def test_driver_dry_run_of_both_layouts(capsys: pytest.CaptureFixture[str]) -> None:
    for layout in ("single", "per-rank"):
        assert driver.main(["profile", "ddp_small_collectives", "--both", "--layout", layout,
                            "--out", "/nonexistent/out", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "ddp_small_collectives_2gpu:" in out and "ddp_small_collectives_fixed_2gpu:" in out
    assert out.count("--no-python bash -c") == 2
    assert driver.main(["profile", "ddp_straggler", "--nproc", "1", "--out", "/x", "--dry-run"]) == 0
    assert "ddp_straggler_1gpu:" in capsys.readouterr().out


def test_device_script_is_valid_bash() -> None:
    script = REPO / "workloads" / "device_ddp.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    for name in DISTRIBUTED:
        assert name in text
    assert "NCCL_NVLS_ENABLE=0" in text and "--layout per-rank" in text
