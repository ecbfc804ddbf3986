"""Command line for the phase layer: the ``sweep`` command and the phase option set.

The lead mounts ``sweep`` on the main group (``analyze sweep results/*.sqlite``) and puts
:func:`phase_options` on the main command; :func:`phase_settings` turns the parsed values into the
analysis options the ``phases`` fact reads (``phase_exclude``, ``phase_include``).
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from analyzer.errors import EXIT_USAGE, AnalyzerError
from analyzer.facts.range_patterns import DEFAULT_EXCLUDE, NO_EXCLUDE, exclude_option, parse_patterns

F = TypeVar("F", bound=Callable[..., Any])


class _CliError(click.ClickException):
    """An :class:`AnalyzerError` shown as ``error: ...`` with the analyzer's exit code for bad input or
    usage (2: what every error of a sweep is)."""

    exit_code = EXIT_USAGE

    def __init__(self, err: AnalyzerError) -> None:
        super().__init__(str(err))

    def format_message(self) -> str:
        return self.message


def phase_options(fn: F) -> F:
    """``--exclude-ranges PATTERN`` (repeatable; default ``warmup*``; ``none`` excludes nothing) and
    ``--only-ranges PATTERN``. Patterns are globs, or regexes prefixed ``re:``; a ``/`` matches paths."""
    fn = click.option(
        "--only-ranges", "only_ranges", metavar="PATTERN", default=None,
        help="Phase tables: keep only NVTX ranges matching PATTERN (glob, or re:REGEX).")(fn)
    fn = click.option(
        "--exclude-ranges", "exclude_ranges", metavar="PATTERN", multiple=True,
        help="Phase tables: drop NVTX ranges matching PATTERN and everything nested in them "
             f"(a glob on the name, on the path with a '/', or re:REGEX; repeated or comma-separated; default "
             f"{', '.join(DEFAULT_EXCLUDE)}; '{NO_EXCLUDE}' or '' keeps all).")(fn)
    return fn


def phase_settings(exclude_ranges: Sequence[str] = (), only_ranges: str | None = None) -> dict[str, Any]:
    """Analysis options for the ``phases`` fact from the parsed :func:`phase_options` values.
    Patterns are validated here so that a bad regex fails before any trace is read."""
    exclude = exclude_option(exclude_ranges) if exclude_ranges else DEFAULT_EXCLUDE
    parse_patterns(only_ranges)
    return {"phase_exclude": exclude, "phase_include": only_ranges}


EPILOG = """\b
Examples:
  analyze sweep results/*.sqlite
  analyze sweep results/ --format html --output sweep.html
  analyze sweep results/*.sqlite.xz --format csv --output sweep_csv/
  analyze sweep results/ --format json --output sweep.json
  analyze sweep results/ --format all --output sweep_tables/     # md, html, json and csv/
  analyze sweep runs/*.sqlite --key-pattern '(?P<model>\\w+)-b(?P<batch>\\d+)-ctx(?P<context>\\d+)'
"""


@click.command("sweep", epilog=EPILOG)
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["md", "csv", "html", "json", "all"]), default="md",
              show_default=True,
              help="Markdown (stdout by default), CSV files (one per table, needs --output DIR), HTML, "
                   "JSON (every table as records), or all of them into --output DIR.")
@click.option("--output", "-o", type=click.Path(path_type=Path), default=None,
              help="File for md/html/json (a directory gets sweep.<format>), directory for csv.")
@click.option("--key-pattern", default=None, metavar="REGEX",
              help="Regex with named groups (model, mode, context; d_model, heads, batch) searched in "
                   "file names. Default: <model>_<mode>_ctx<context>.")
@click.option("--expected-steps", type=click.IntRange(min=1), default=None,
              help="Measured steps each run should have (default: the most common count).")
@click.option("--strict", is_flag=True, help="Fail on the first unreadable trace instead of flagging it.")
@click.option("--scaling", is_flag=True,
              help="Strong scaling instead: the same training loop on 1 and N GPUs (a 1-GPU trace, and "
                   "per job one multi-process report or its <name>_rank<N> files): speedup, efficiency and "
                   "where the lost time went (Markdown).")
@phase_options
def sweep(paths: tuple[Path, ...], fmt: str, output: Path | None, key_pattern: str | None,
          expected_steps: int | None, strict: bool, scaling: bool, exclude_ranges: tuple[str, ...],
          only_ranges: str | None) -> None:
    """Tables over a profiling sweep (model x context x mode): forward time (what a synchronized timer
    measures, from the trace), nsys against the runs' own Python timings (<trace>.pytime.json), top
    kernel, step breakdown, kernel mix, softmax vs matmul; rows that cannot be right are flagged with
    the reason. A folder also brings the .pytime.json of configurations that ran out of GPU memory. With
    --scaling: strong scaling of one training loop over 1 and N GPUs."""
    from analyzer.phases.render import render_sweep
    from analyzer.phases.sweep import DEFAULT_KEY_PATTERN, build_sweep

    if output is not None:
        from analyzer.fileio import refuse_input
        from analyzer.pipeline import input_files

        try:  # a table written over one of the traces (or their folder's) is refused before they are read
            read = input_files(paths)
            refuse_input(output, read)
            if output.is_dir() and fmt not in ("csv", "all"):
                refuse_input(output / f"sweep.{fmt}", read)
        except AnalyzerError as err:
            raise _CliError(err) from None
    if scaling:
        from analyzer.phases.scaling import render_scaling, strong_scaling

        try:
            text = render_scaling(strong_scaling(list(paths)))
        except AnalyzerError as err:
            raise _CliError(err) from None
        if output is None:
            sys.stdout.write(text)
        else:
            from analyzer.fileio import atomic_write

            atomic_write(output, text)
            click.echo(str(output))
        return
    try:
        settings = phase_settings(exclude_ranges, only_ranges)
        if only_ranges:
            click.echo("note: --only-ranges does not apply to sweep tables (they read fixed ranges)",
                       err=True)
        if fmt in ("csv", "all") and output is None:
            raise click.UsageError(f"--format {fmt} needs --output DIR")
        result = build_sweep(paths, key_pattern=key_pattern or DEFAULT_KEY_PATTERN,
                             exclude=settings["phase_exclude"], expected_steps=expected_steps,
                             strict=strict)
        if fmt == "csv":
            assert output is not None
            click.echo(render_sweep(result, "csv", output), nl=False)
        elif fmt == "all":  # one load of the traces, every format: sweep.md/.html/.json and csv/
            assert output is not None
            for one in ("md", "html", "json"):
                render_sweep(result, one, output)
                click.echo(str(output / f"sweep.{one}"))
            click.echo(render_sweep(result, "csv", output / "csv"), nl=False)
        elif output is None:
            sys.stdout.write(render_sweep(result, fmt))
        elif output.is_dir():
            render_sweep(result, fmt, output)
            click.echo(str(output / f"sweep.{fmt}"))
        else:
            from analyzer.fileio import atomic_write

            atomic_write(output, render_sweep(result, fmt))
            click.echo(str(output))
    except AnalyzerError as err:
        raise _CliError(err) from None
    n_flags = len(result.flags)
    if n_flags:
        click.echo(f"{n_flags} row(s) flagged: see the 'Rows that cannot be right' table", err=True)
