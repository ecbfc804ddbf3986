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
