"""The ``analyze`` command guides a newcomer (issue 32): the top-level help documents the form they type
(``analyze TRACE [options]``) in full, mistyped commands get the closest one, a group without its
subcommand prints its help, ``--fail-on`` says which findings failed the run, an ``-o`` extension that
does not match the format is refused, and ``diff`` takes the same options as ``analyze``."""
from __future__ import annotations

from pathlib import Path

import click
import pytest

from analyzer.cli import cli, main
from analyzer.diff.cli import diff as diff_cmd

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
STARVED = DATA / "dataloader_starved.sqlite.xz"


def run(argv: list[object], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _options(command: click.Command) -> set[str]:
    return {o for p in command.params if isinstance(p, click.Option) for o in p.opts if o.startswith("--")}


def test_top_level_help_documents_the_analysis_options(capsys):
    code, out, _ = run(["--help"], capsys)
    assert code == 0
    assert "Analysis options (analyze TRACE... [OPTIONS]" in out
    run_cmd = cli.commands["run"]
    missing = [o for o in _options(run_cmd) if o not in out]
    assert missing == [], f"analyze --help does not show {missing}"
    assert "-o, --output" in out and "Commands:" in out and "diff" in out


def test_plain_analyze_says_what_to_type(capsys):
    """``analyze`` alone: the usage, the examples and where the full help is, on one screen; exit 2."""
    code, out, err = run([], capsys)
    assert code == 2 and out == ""
    assert err.startswith("Usage: analyze TRACE... [OPTIONS] | COMMAND [ARGS]...\n")
    assert "analyze trace.sqlite --format md -o summary.md" in err and "'analyze --help'" in err
    assert "Traceback" not in err and "error:" not in err and len(err.splitlines()) <= 24


@pytest.mark.parametrize("argv,hint", [
    (["difff", "a.sqlite", "b.sqlite"], 'did you mean "diff"?'),
    (["rule", "list"], 'did you mean "rules"?'),
    (["rules", "lst"], 'did you mean "list"?'),
    (["rules", "explian", "GPU001"], 'did you mean "explain"?'),
])
def test_mistyped_commands_get_the_closest_one(argv, hint, capsys):
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and hint in err and "no such file" not in err


def test_a_missing_file_is_still_a_missing_file(capsys):
    code, _, err = run(["nosuchtrace.sqlite"], capsys)
    assert code == 2 and "did you mean" not in err and "nosuchtrace.sqlite" in err


def test_a_group_without_subcommand_prints_its_help(capsys):
    code, out, err = run(["rules"], capsys)
    assert code == 0 and err == ""
    assert out.startswith("Usage: analyze rules") and "\nCommands:\n" in out and "list" in out
    assert out.rstrip("\n") == cli.commands["rules"].get_help(click.Context(cli.commands["rules"], info_name="rules",
                                                               parent=click.Context(cli, info_name="analyze")))


def test_fail_on_names_the_findings_that_tripped_it(tmp_path, capsys):
    code, out, err = run([STARVED, "-o", tmp_path / "r.json", "-q", "--fail-on", "warning"], capsys)
    assert code == 1 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fail-on warning: ")
    import json

    doc = json.loads((tmp_path / "r.json").read_text())
    tripped = [f for f in doc["traces"][0]["findings"] if f["severity"] in ("warning", "error")]
    assert f"{len(tripped)} finding" in lines[0]
    for f in tripped:
        assert f"{f['id']} {f['rule']}" in lines[0]
    code, _, err = run([STARVED, "-o", tmp_path / "r.json", "-q", "--fail-on", "error"], capsys)
    assert code == 0 and err == ""  # nothing at error: no line, exit 0


@pytest.mark.parametrize("argv,words", [
    (["-o", "{tmp}/out.pdf"], (".pdf is not a report format",)),
    (["-o", "{tmp}/out.md", "--format", "html"], ("out.md is a .md file but --format says html",)),
    (["-o", "{tmp}/out.html", "--format", "json"], ("--format says json",)),
])
@pytest.mark.parametrize("command", [[], ["diff", STARVED]])
def test_an_output_extension_that_names_another_format_is_refused(command, argv, words, tmp_path, capsys):
    args = [*command, STARVED, *(a.format(tmp=tmp_path) for a in argv)]
    code, out, err = run(args, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert all(w in err for w in words), err
    # the analysis options are documented in 'analyze --help' (the user typed no 'run'); diff's in its own
    assert err.rstrip().endswith("(see 'analyze diff --help')" if command else "(see 'analyze --help')"), err
    assert list(tmp_path.iterdir()) == []  # refused before any analysis or write


def test_the_format_follows_the_extension(tmp_path, capsys):
    code, _, _ = run([STARVED, "-o", tmp_path / "r.markdown", "-q"], capsys)
    assert code == 0 and (tmp_path / "r.markdown").read_text().startswith("# ")
    code, _, _ = run([STARVED, "-o", tmp_path / "r", "--format", "json", "-q"], capsys)  # no extension
    assert code == 0 and (tmp_path / "r").read_text().startswith("{")


def test_diff_takes_the_analysis_options_it_shares_with_analyze():
    """The options both commands have are spelled, typed and documented alike; the trace-reading ones
    analyze has (--no-cache, --window, --timeout, the rule options) are all in diff."""
    run_cmd = cli.commands["run"]
    shared = _options(run_cmd) & _options(diff_cmd)
    assert {"--no-cache", "--window", "--timeout", "--rules", "--set", "--select", "--ignore", "--format",
            "--output", "--exclude-ranges", "--accepted", "--accepted-growth", "--quiet"} <= shared

    def by_name(command: click.Command) -> dict[str, click.Option]:
        return {o: p for p in command.params if isinstance(p, click.Option) for o in p.opts}

    a, b = by_name(run_cmd), by_name(diff_cmd)
    for opt in sorted(shared - {"--output", "--accepted", "--window"}):  # these say what they do in a diff
        assert (a[opt].help, type(a[opt].type), a[opt].is_flag) == (b[opt].help, type(b[opt].type), b[opt].is_flag), opt


def test_diff_no_cache_reads_no_cache(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ANALYZER_CACHE_DIR", str(tmp_path / "cache"))
    fixed = DATA / "dataloader_starved_fixed.sqlite.xz"
    code, _, _ = run(["diff", STARVED, fixed, "-o", tmp_path / "d.json", "-q", "--no-cache"], capsys)
    assert code == 0 and not any((tmp_path / "cache").rglob("*.arrow"))
    code, _, _ = run(["diff", STARVED, fixed, "-o", tmp_path / "d2.json", "-q"], capsys)
    assert code == 0 and any((tmp_path / "cache").rglob("*"))


def test_a_job_prints_its_verdict_rank_table_and_findings_in_the_terminal(tmp_path, capsys):
    """``analyze ddp_straggler_2gpu.sqlite.xz`` (one report holding two ranks): the terminal shows the job
    block first, with the same verdict, ranks and job findings as the report, then each rank's block."""
    import json

    from analyzer.reports.format import fmt_duration

    job_trace = DATA / "ddp" / "ddp_straggler_2gpu.sqlite.xz"
    if not job_trace.exists():
        pytest.skip("tests/data/ddp not in this checkout")
    code, out, _ = run([job_trace, "-o", tmp_path / "job.json"], capsys)
    doc = json.loads((tmp_path / "job.json").read_text())
    assert code == 0 and doc["job"]["findings"]
    job_block, _, rest = out.partition("\n\n")
    assert job_block.startswith(f"job: {doc['job']['ranks_given']} of {doc['job']['world_size']} ranks")
    assert f"  verdict: {doc['verdict']}\n" in job_block + "\n"
    for r in doc["job"]["ranks"]:  # one table row per rank, with its mean step as the report writes it
        row = next(ln for ln in job_block.splitlines() if ln.startswith(f"  rank {r['rank']} "))
        assert r["label"] in row and fmt_duration(r["step_ns"]) in row
    for f in doc["job"]["findings"]:
        assert f" {f['id']}" in job_block and f["rule"] in job_block
    assert rest.startswith("rank 0: ")  # then the ranks, as before
    # the per-rank table fits the terminal as the findings do: its columns in blocks, none left out
    import shutil

    width = max(110, shutil.get_terminal_size((110, 24)).columns)
    table = [ln for ln in job_block.splitlines() if ln.startswith(("  Rank ", "  rank "))]
    assert all(len(ln) <= width for ln in table), table
    for label in ("Input", "Step (mean)", "Waited for others", "Others waited for it", "Clock skew"):
        assert label in job_block
