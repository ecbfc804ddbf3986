"""A directory argument stands for the traces in it (HTA's layout: one torch.profiler trace per rank),
recognised by content; other files are ignored; a directory without a trace is a one-line error."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from analyzer.errors import InputError
from analyzer.pipeline import AnalysisOptions, analyze_paths, trace_files_in

DATA = Path(__file__).resolve().parent / "data"


def test_directory_expands_to_its_traces(tmp_path):
    for name in ("healthy.sqlite.xz", "tiny_kernels_fixed.sqlite.xz"):
        if not (DATA / name).is_file():
            pytest.skip(f"{name} absent")
        shutil.copy(DATA / name, tmp_path / name)
    (tmp_path / "README.txt").write_text("how these were made\n")
    (tmp_path / ".hidden.json").write_text("{}")
    (tmp_path / "sub").mkdir()
    traces, ncu = trace_files_in(tmp_path)
    assert [p.name for p in traces] == ["healthy.sqlite.xz", "tiny_kernels_fixed.sqlite.xz"]
    assert ncu == []
    analyses = analyze_paths([tmp_path], AnalysisOptions())
    assert [a.trace.name for a in analyses] == ["healthy.sqlite.xz", "tiny_kernels_fixed.sqlite.xz"]


def test_a_json_report_beside_the_trace_is_not_taken_for_one(tmp_path):
    """`analyze run/trace.pt.trace.json.gz --format json -o run/trace.json`, then `analyze run/`: the
    report is JSON too, and the folder's analysis ended in "JSON without a traceEvents list". Reports
    of this analyzer (and of its diff) are passed over, in `analyze sweep FOLDER` too."""
    from analyzer.cli import main
    from analyzer.phases.sweep import expand_paths

    trace = tmp_path / "healthy.pt.trace.json.gz"
    shutil.copy(DATA / "kineto" / "healthy.pt.trace.json.gz", trace)
    assert main([str(trace), "--format", "json", "-o", str(tmp_path / "healthy.json"), "-q"]) == 0
    traces, _ = trace_files_in(tmp_path)
    assert [p.name for p in traces] == ["healthy.pt.trace.json.gz"]
    assert [p.name for p in expand_paths([tmp_path])] == ["healthy.pt.trace.json.gz"]
    assert main([str(tmp_path), "--format", "md", "-o", str(tmp_path / "out.md"), "-q"]) == 0


def test_other_json_beside_the_trace_is_passed_over_with_a_note(tmp_path, capsys):
    """retained_graph.py writes its allocator samples (``retained_graph.allocated.json``) beside its
    torch.profiler trace: ``analyze FOLDER`` took that JSON for a trace and the whole run ended in "JSON
    without a traceEvents list". JSON is a trace by its first bytes (traceEvents, deviceProperties, ...);
    other JSON is passed over with one note, in ``analyze sweep FOLDER`` too."""
    from analyzer.cli import main
    from analyzer.phases.sweep import expand_paths

    for name in ("retained_graph.pt.trace.json.gz", "retained_graph.allocated.json"):
        shutil.copy(DATA / "kineto" / name, tmp_path / name)
    skipped: list[tuple[Path, str]] = []
    traces, _ = trace_files_in(tmp_path, skipped)
    assert [p.name for p in traces] == ["retained_graph.pt.trace.json.gz"]
    assert [p.name for p, _ in skipped] == ["retained_graph.allocated.json"]
    assert [p.name for p in expand_paths([tmp_path])] == ["retained_graph.pt.trace.json.gz"]
    assert main([str(tmp_path), "--format", "md", "-o", str(tmp_path / "out.md")]) == 0
    notes = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("note: passed over")]
    assert notes == ["note: passed over 1 JSON file: retained_graph.allocated.json (no torch.profiler trace: no "
                     "traceEvents or deviceProperties at its start) (name a file to read it anyway)"]


def test_every_committed_json_trace_is_recognised_by_its_first_bytes():
    """The sniff takes every torch.profiler trace of tests/data (plain, gzip, xz; Kineto of 2021 to
    2025) and rocprofv3's JSON, and none of the other JSON there (manifests, allocator samples, sweep
    sidecars, reports)."""
    from analyzer.loading import detect_format, looks_like_profiler_trace

    files = sorted(p for p in DATA.rglob("*.json*") if detect_format(p) == "json")
    traces = [p for p in files if ".pt.trace." in p.name or "rocprofv3" in p.name]
    assert len(traces) >= 40 and any("rocprofv3" in p.name for p in traces)
    assert [p.name for p in traces if not looks_like_profiler_trace(p)] == []
    others = [p for p in files if p not in traces]
    assert others and [p.name for p in others if looks_like_profiler_trace(p)] == []


def test_a_folder_of_only_other_json_is_one_line(tmp_path):
    shutil.copy(DATA / "kineto" / "retained_graph.allocated.json", tmp_path / "allocated.json")
    (tmp_path / "manifest.json").write_text('{"schemaVersion": 2, "layers": []}')  # a container manifest
    with pytest.raises(InputError) as info:
        analyze_paths([tmp_path], AnalysisOptions())
    msg = str(info.value)
    assert "\n" not in msg and "allocated.json, manifest.json" in msg and "no torch.profiler trace" in msg, msg


def test_directory_without_traces(tmp_path):
    (tmp_path / "notes.txt").write_text("nothing here\n")
    with pytest.raises(InputError) as info:
        analyze_paths([tmp_path], AnalysisOptions())
    assert "holds no trace file" in str(info.value) and "\n" not in str(info.value)


def test_cli_directory_of_cpu_only_rank_traces_is_one_line(tmp_path, capsys):
    from analyzer.cli import main

    src = DATA / "kineto" / "cpu_dataloader_starved.pt.trace.json.gz"
    if not src.is_file():
        pytest.skip("no CPU trace")
    shutil.copy(src, tmp_path / "rank0.pt.trace.json.gz")
    code = main([str(tmp_path), "-o", str(tmp_path / "r.md")])
    err = capsys.readouterr().err
    assert code == 2 and "without GPU activity" in err and err.strip().count("\n") == 0
