"""``analyze diff`` of two multi-GPU jobs on the real 2-GPU DDP traces (tests/data/ddp, 2x H200): one
report holding both ranks on each side, or the rank files; the straggler fixed (its data sharding) and
the exposed all-reduce moved under the backward pass. The job's step time is the slowest rank's per step,
the per-rank table and the sentences name what moved, --fail-on-regression works, and the JSON report of
a job gives the same diff as its traces."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

import pytest

from analyzer.reports.tests import layout
from analyzer.diff.compare import DiffSettings, diff_runs
from analyzer.diff.inputs import load_run
from analyzer.diff.report import diff_dict, render_diff
from analyzer.pipeline import AnalysisOptions
from analyzer.reports.baseline import RunSummary
from analyzer.reports.tests.helpers import external_loads
from analyzer.testing import DATA_DIR

DDP = DATA_DIR / "ddp"
CREATED = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _files(pattern: str) -> list[Path]:
    files = sorted(DDP.glob(pattern))
    if not files:
        pytest.skip(f"no {pattern} in {DDP} (see tests/data/MANIFEST.md)")
    return files


@cache
def side(pattern: str) -> RunSummary:
    return load_run(_files(pattern), AnalysisOptions())


def diff(base: str, head: str, **kw: object):
    return diff_runs(side(base), side(head), DiffSettings(**kw), created=CREATED)  # type: ignore[arg-type]


def test_straggler_fixed_one_report_per_side() -> None:
    r = diff("ddp_straggler_2gpu.sqlite.xz", "ddp_straggler_fixed_2gpu.sqlite.xz", fail_on_regression_pct=5)
    assert side("ddp_straggler_2gpu.sqlite.xz").job is not None
    assert r.step.status == "faster" and r.step.significant and not r.regression
    assert r.step.change_pct == pytest.approx(-72, abs=3)  # 43.9 -> 12.4 ms, the slowest rank per step
    assert r.step.n_base == r.step.n_head == 16
    assert r.job is not None and r.job.base_straggler == 1 and r.job.head_straggler is None
    assert r.job.moved[0].startswith("straggler resolved: the others waited 34.8 ms per step for rank 1 in BASE")
    assert "; job: straggler resolved" in r.verdict
    assert "straggler" in [f.rule for f in r.findings if f.status == "resolved"]
    # per rank: rank 0 waited 35 ms per step for rank 1; in HEAD neither waits much
    rank0 = next(rc for rc in r.job.ranks if rc.rank == 0)
    assert rank0.base is not None and rank0.head is not None
    assert rank0.base.wait_ns == pytest.approx(34.8e6, rel=0.02) and rank0.head.wait_ns < 1e6
    assert abs(rank0.base.compute_ns - rank0.head.compute_ns) < 0.1 * rank0.base.compute_ns  # compute did not move
    # the Action posts diff.md: the job diff is in it
    md = render_diff(r, "md")
    assert "## Job: per rank, per step (2 ranks \u2192 2)" in md and "- straggler resolved" in md
    html = render_diff(r, "html")
    assert 'id="job"' in html and "straggler resolved" in html and not external_loads(html)
    doc = json.loads(render_diff(r, "json"))
    assert doc["job"]["base_straggler"] == 1 and doc["job"]["moved"][0].startswith("straggler resolved")


def test_the_reverse_is_a_regression_with_a_new_straggler() -> None:
    r = diff("ddp_straggler_fixed_2gpu.sqlite.xz", "ddp_straggler_2gpu.sqlite.xz", fail_on_regression_pct=5)
    assert r.step.status == "slower" and r.regression
    assert r.job is not None and r.job.moved[0].startswith("new straggler: the others wait 34.8 ms per step for rank 1")


def test_rank_files_give_the_same_job_diff() -> None:
    """The straggler job recorded again with one file per rank (a separate run, 49 ms per step)."""
    r = diff("ddp_straggler_2gpu_rank[01].sqlite.xz", "ddp_straggler_fixed_2gpu_rank[01].sqlite.xz",
             fail_on_regression_pct=5)
    assert r.step.status == "faster" and r.step.significant
    assert r.step.change_pct == pytest.approx(-75, abs=3)
    assert r.job is not None and r.job.moved[0].startswith("straggler resolved") and "rank 1" in r.job.moved[0]
    # a quoted glob on the command line is the same side
    globbed = load_run(DDP / "ddp_straggler_2gpu_rank*.sqlite.xz", AnalysisOptions())
    assert globbed.steps == side("ddp_straggler_2gpu_rank[01].sqlite.xz").steps


def test_exposed_communication_hidden() -> None:
    r = diff("ddp_exposed_comm_2gpu.sqlite.xz", "ddp_exposed_comm_fixed_2gpu.sqlite.xz")
    assert r.step.status == "faster" and r.step.significant
    assert r.step.change_pct == pytest.approx(-14, abs=2)  # 26.2 -> 22.5 ms: the all-reduce hidden
    assert r.job is not None and r.job.base_straggler is None and r.job.head_straggler is None
    hidden = [m for m in r.job.moved if m.startswith("communication hidden")]
    assert hidden and "rank 0 4.94 ms -> 1.32 ms" in hidden[0] and "rank 1" in hidden[0]
    assert "exposed-communication" in [f.rule for f in r.findings if f.status == "resolved"]


def test_job_json_reports_give_the_diff_of_their_traces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from analyzer.pipeline import analyze_inputs
    from analyzer.reports.jobview import build_job_report
    from analyzer.reports.jsonout import render_json

    paths = {}
    for name in ("ddp_straggler_2gpu", "ddp_straggler_fixed_2gpu"):
        outcome = analyze_inputs(_files(f"{name}.sqlite.xz"), AnalysisOptions())
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(render_json(build_job_report(outcome.job, created=CREATED)), encoding="utf-8")
    via_json = diff_runs(load_run(paths["ddp_straggler_2gpu"], AnalysisOptions()),
                         load_run(paths["ddp_straggler_fixed_2gpu"], AnalysisOptions()), DiffSettings(),
                         created=CREATED)
    via_traces = diff("ddp_straggler_2gpu.sqlite.xz", "ddp_straggler_fixed_2gpu.sqlite.xz")
    a, b = diff_dict(via_json), diff_dict(via_traces)
    for d in (a, b):
        for s in ("base", "head"):
            d[s].pop("input"), d[s].pop("path")
    assert a == b
    # the CLI gate on the JSON reports: exit 1 on the regression, the job diff in the Markdown
    out = tmp_path / "d.md"
    from analyzer.cli import main

    code = main(["diff", str(paths["ddp_straggler_fixed_2gpu"]), str(paths["ddp_straggler_2gpu"]),
                 "--fail-on-regression", "5%", "-o", str(out)])
    printed = capsys.readouterr().out
    assert code == 1, printed
    assert "job: new straggler" in printed and "## Job: per rank" in out.read_text(encoding="utf-8")
    # a damaged job report (bad input, hand-edited from the real one): one line, exit 2, no traceback
    doc = json.loads(paths["ddp_straggler_2gpu"].read_text(encoding="utf-8"))
    doc["job"]["ranks"][0]["rank"] = "zero"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    code = main(["diff", str(bad), str(paths["ddp_straggler_2gpu"]), "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "job.ranks[0].rank is not a whole number" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2


def test_a_job_against_a_single_run_says_so() -> None:
    r = diff_runs(side("ddp_exposed_comm_2gpu.sqlite.xz"), side("ddp_exposed_comm_fixed_1gpu.sqlite.xz"),
                  DiffSettings(), created=CREATED)
    assert r.job is None and any("2-rank job and HEAD a single run" in n for n in r.notes)


def test_readme_job_table_is_what_the_code_says() -> None:
    from analyzer.diff.tests.test_diff_real import readme_rows

    rows = readme_rows("Two DDP jobs (tests/data/ddp, 2x H200")
    assert len(rows) == 2
    for base, head, verdict in rows:
        assert diff(f"{base}.sqlite.xz", f"{head}.sqlite.xz").verdict == verdict, (base, head)


def test_torch_profiler_rank_files_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The straggler job as torch.profiler recorded it (one trace per rank), each side a quoted glob."""
    from analyzer.cli import main

    kineto = DDP / "kineto"
    if not list(kineto.glob("ddp_straggler_2gpu_rank*.pt.trace.json.xz")):
        pytest.skip("tests/data/ddp/kineto not here")
    out = tmp_path / "d.md"
    code = main(["diff", str(kineto / "ddp_straggler_fixed_2gpu_rank*.pt.trace.json.xz"),
                 str(kineto / "ddp_straggler_2gpu_rank*.pt.trace.json.xz"), "--fail-on-regression", "5", "-o", str(out)])
    printed = capsys.readouterr().out
    assert code == 1, printed
    assert printed.startswith("HEAD is 3.4x slower per step (12.4 -> 42.6 ms")
    assert "job: new straggler: the others wait 33.6 ms per step for rank 1 in HEAD" in printed
    assert "| 1 |" in out.read_text(encoding="utf-8")  # the per-rank table


#: the job diffs compared above: each job against its twin, one report per side and the rank files
JOB_DIFFS = [("ddp_straggler_2gpu.sqlite.xz", "ddp_straggler_fixed_2gpu.sqlite.xz"),
             ("ddp_straggler_2gpu_rank[01].sqlite.xz", "ddp_straggler_fixed_2gpu_rank[01].sqlite.xz"),
             ("ddp_exposed_comm_2gpu.sqlite.xz", "ddp_exposed_comm_fixed_2gpu.sqlite.xz")]


@pytest.mark.browser
@pytest.mark.skipif(layout.CHROMIUM is None, reason=layout.NO_CHROMIUM)
@pytest.mark.parametrize("base,head", JOB_DIFFS, ids=[b.split(".")[0] for b, _ in JOB_DIFFS])
def test_job_diff_reads_well_in_a_browser(base: str, head: str, tmp_path: Path) -> None:
    """The job diff's HTML report at 1,280 and 1,920 px: no clipped table, no squeezed column (issue 32;
    the check: analyzer/reports/tests/layout.py)."""
    layout.assert_html_layout(render_diff(diff(base, head), "html"), tmp_path, "job-diff")
