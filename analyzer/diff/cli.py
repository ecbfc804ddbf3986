"""``analyze diff BASE HEAD``: did HEAD make the step faster or slower, by how much, is it noise, and why.

Exit codes: 0 done (whatever the verdict), 1 a significant step-time regression of at least
``--fail-on-regression``, 2 bad input or usage.
"""
from __future__ import annotations

import re
import sys
from dataclasses import replace
from pathlib import Path

import click

from analyzer._paths import trace_stem
from analyzer.config.cli import ConfigCommand
from analyzer.config.options import MAX_TIMEOUT_SECONDS, FiniteFloat, no_cache_option, output_format, pack_options, rule_settings
from analyzer.errors import EXIT_FINDINGS, ParameterError, one_line
from analyzer.progress import progress_printer

FORMATS = ("html", "md", "json")
_PCT = re.compile(r"^\s*\+?([0-9]*\.?[0-9]+)\s*%?\s*$")

EPILOG = """\b
BASE and HEAD are traces (anything 'analyze' reads) or JSON reports written by
'analyze TRACE --format json' (a small baseline artifact to keep from the main branch).
A multi-GPU job is one report holding every rank, a folder of rank files, a quoted
glob of them ('base/rank*.sqlite') or the JSON report of the job: the diff then
compares the job's step time (the slowest rank per step) and each rank's compute,
waiting and exposed communication, and names what moved.
\b
Examples:
  analyze diff main.sqlite pr.sqlite                       # HTML report in reports/
  analyze diff baseline.json pr.nsys-rep --format md -o comment.md
  analyze diff main.json pr.sqlite --fail-on-regression 5%  # CI gate: exit 1 on a 5% slower step
  analyze diff main.json pr.sqlite --accepted .gpu/accepted.yaml   # known findings are not news
  analyze diff 'main/rank*.sqlite' 'pr/rank*.sqlite'        # two multi-GPU jobs, rank files
"""


def _targets(outputs: tuple[Path, ...], fmt: str | None, base: Path, head: Path) -> list[tuple[Path, str]]:
    """(path, format) per ``-o``: the format its extension names, else ``--format``, else html (an
    extension that names another format than ``--format``, or none, is refused: :func:`output_format`)."""
    if not outputs:
        chosen = fmt or "html"
        return [(Path("reports") / f"diff-{_stem(base)}-{_stem(head)}.{chosen}", chosen)]
    if sum(1 for o in outputs if str(o) == "-") > 1:
        raise click.UsageError("-o - (stdout) can be given once")
    return [(o, output_format(o, fmt)) for o in outputs]


def _refuse_inputs(targets: list[tuple[Path, str]], sides: list[Path], rules_files: tuple[str, ...],
                   accepted_file: Path | None) -> None:
    """Refuse, before anything is read, a report path that is one of the diff's inputs: a trace or JSON
    report of either side (a folder's traces, a glob's files), a rule pack, the accepted findings."""
    from analyzer.diff.inputs import expand
    from analyzer.fileio import refuse_input
    from analyzer.pipeline import input_files

    read = [*input_files([p for side in sides for p in expand(side)]),
            *(Path(r) for r in rules_files if str(r) != "default"), *([accepted_file] if accepted_file else [])]
    for target, _ in targets:
        if str(target) != "-":
            refuse_input(target, read)


def _stem(path: Path) -> str:
    """The name part of a default report path (a glob's wildcards dropped: ``rank*`` -> ``rank``)."""
    return re.sub(r"[*?\[\]]+", "", trace_stem(path)).strip("_-.") or "job"


def _percent(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    m = _PCT.match(value)
    if not m:
        raise click.BadParameter(f"{value!r} is not a percentage (e.g. 5 or 5%)")
    return float(m.group(1))


@click.command("diff", cls=ConfigCommand, epilog=EPILOG)
@click.argument("base", type=click.Path(dir_okay=True, path_type=Path))
@click.argument("head", type=click.Path(dir_okay=True, path_type=Path))
@pack_options
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="Report format. Default: the one --output's extension names (.html, .md, .json), else "
                   "html; an extension that names another format, or none (.pdf), is refused.")
@click.option("-o", "--output", "outputs", type=click.Path(path_type=Path), multiple=True,
              help="Report path ('-' for stdout); repeat it for several formats at once (-o d.md -o d.html), each "
                   "by its extension. Default: reports/diff-<base>-<head>.<format>.")
@click.option("--fail-on-regression", "fail_pct", default=None, metavar="PCT", callback=_percent,
              help="Exit with code 1 when HEAD's step time is significantly slower by at least PCT (e.g. 5%).")
@click.option("--min-effect", "min_effect", default="3%", show_default=True, metavar="PCT", callback=_percent,
              help="The smallest step-time change called significant (raised to the drift a run shows "
                   "within itself and to the run-to-run variation of host-bound steps: "
                   "docs/diff-calibration.md).")
@click.option("--accepted", "accepted_file", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="Accepted findings (written by 'analyze TRACE --write-accepted FILE'): a rule whose findings "
                   "all match it is marked accepted and left out of the verdict's new/resolved/worse, unless "
                   "a finding's impact grew past --accepted-growth.")
@click.option("--accepted-growth", "accepted_growth", type=FiniteFloat(1.0, 1e9), default=None,
              metavar="FACTOR",
              help="An accepted finding counts again when its impact grew by more than this factor "
                   "(default 1.5; an entry's own max-growth wins).")
@click.option("--window", "window_spec", default=None, metavar="SPEC",
              help="Analysis window for both traces; an NVTX glob ('step_*') also picks the steps compared.")
@click.option("--exclude-ranges", multiple=True, default=("warmup*",), show_default=True,
              help="NVTX ranges left out of the window and of phase tables, with everything nested in them: "
                   "a glob on the name (on the path with a '/'), or re:REGEX; repeated or comma-separated; "
                   "'' or 'none' for none.")
@click.option("--timeout", type=FiniteFloat(0, MAX_TIMEOUT_SECONDS), default=None, metavar="SECONDS",
              envvar="ANALYZER_TIMEOUT",
              help="Stop a trace's analysis after SECONDS and name the stage that ran away (default: none).")
@no_cache_option
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
@click.pass_context
def diff(ctx: click.Context, base: Path, head: Path, rules_files: tuple[str, ...], sets: tuple[str, ...],
         select: tuple[str, ...], extend_select: tuple[str, ...], ignore: tuple[str, ...], fmt: str | None,
         outputs: tuple[Path, ...], fail_pct: float | None, min_effect: float | None,
         accepted_file: Path | None, accepted_growth: float | None, window_spec: str | None,
         exclude_ranges: tuple[str, ...], timeout: float | None, no_cache: bool, quiet: bool) -> None:
    """Compare BASE and HEAD: step time with its significance, where the time moved (NVTX phases,
    kernels, copies) and which findings are new, resolved or changed. The rule options apply to traces;
    a JSON report keeps the findings it was written with."""
    from analyzer.diff.compare import DEFAULT_MIN_EFFECT_PCT, DiffSettings, diff_runs
    from analyzer.diff.inputs import load_run
    from analyzer.facts.range_patterns import exclude_option
    from analyzer.fileio import atomic_write
    from analyzer.pipeline import AnalysisOptions, load_accepted_findings, load_rules
    from analyzer.diff.report import render_diff

    if min_effect is not None and min_effect > 1000:
        raise ParameterError(f"--min-effect {min_effect:g}% is not a plausible effect size")
    targets = _targets(outputs, fmt, base, head)
    _refuse_inputs(targets, [base, head], rules_files, accepted_file)
    progress = progress_printer(sys.stderr.isatty() and not quiet)
    options = AnalysisOptions(
        rules_files=tuple(rules_files),
        rule_settings=rule_settings(ctx),
        window_spec=window_spec,
        exclude_ranges=exclude_option(exclude_ranges),
        timeout=timeout,
        cache=not no_cache,
    )
    pack = load_rules(options)  # a bad rule pack or --set fails before any trace is read
    accepted = load_accepted_findings(replace(options, accepted_file=accepted_file,
                                              accepted_growth=accepted_growth))  # and a bad accepted file
    runs = []
    for label, path in (("BASE", base), ("HEAD", head)):
        if progress:
            progress(f"{label}: {path.name}")
        runs.append(load_run(path, options, pack=pack, progress=progress))
    if progress:
        sys.stderr.write("\r\x1b[2K")
    settings = DiffSettings(
        min_effect_pct=DEFAULT_MIN_EFFECT_PCT if min_effect is None else min_effect,
        fail_on_regression_pct=fail_pct,
        accepted_file=accepted,
    )
    result = diff_runs(runs[0], runs[1], settings)
    to_stdout = any(str(t) == "-" for t, _ in targets)
    for target, target_fmt in targets:
        text = render_diff(result, target_fmt)  # type: ignore[arg-type]
        if str(target) == "-":
            sys.stdout.write(text)
        else:
            atomic_write(target, text)
    if not quiet:
        out = sys.stderr if to_stdout else sys.stdout
        out.write(f"{one_line(result.verdict, 10_000)}\n")  # names from the traces: printable only
        for note in result.notes:
            out.write(f"note: {one_line(note, 10_000)}\n")
        for target, _ in targets:
            if str(target) != "-":
                out.write(f"report: {target}\n")
    if result.regression:
        raise SystemExit(EXIT_FINDINGS)
