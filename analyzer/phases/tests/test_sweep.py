"""Sweep keys, flags and renderings on hand-built traces (loader injected), and the CLI on real files."""
from __future__ import annotations

import json
import lzma
import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from analyzer.errors import InputError, ParameterError
from analyzer.phases.cli import phase_settings, sweep
from analyzer.phases.sweep import (
    DEFAULT_KEY_PATTERN,
    build_sweep,
    compile_key_pattern,
    key_from_name,
    key_from_trace,
    model_config_for,
    render_sweep,
    trace_stem,
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
    assert "small_forward_ctx256.sqlite.xz" in res.output and "no measured step_N ranges" in res.output
    assert "sm80_xmma_fprop_implicit_gemm" in res.output  # top kernel of the public trace
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
