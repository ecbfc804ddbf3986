"""The ``analyze`` command: a thin layer over :mod:`analyzer.pipeline` and the reports.

    analyze TRACE... [--rules FILE] [--format html|md|json] [--output PATH]
                     [--set RULE.PARAM=VALUE]... [--fail-on info|warning|error]
    analyze rules list|explain|validate|test
    analyze sweep TRACE...
    analyze diff BASE HEAD [--fail-on-regression PCT]

Exit codes: 0 done, 1 findings at or above ``--fail-on``, 2 bad input or usage.
"""
from __future__ import annotations

import os
import sys
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from analyzer._version import __version__
from analyzer._paths import trace_stem
from analyzer.config.cli import ConfigGroup
from analyzer.config.options import (
    MAX_TIMEOUT_SECONDS,
    FiniteFloat,
    RankCount,
    accepted_options,
    no_cache_option,
    output_format,
    pack_options,
    rule_settings,
)
from analyzer.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, AnalyzerError, one_line
from analyzer.progress import progress_printer
from analyzer.watchdog import stage

FORMATS = ("html", "md", "json")
#: from this many input files on, per-rank work runs on a local Dask cluster unless --scheduler says otherwise
LOCAL_DASK_MIN_FILES = 8
EPILOG = """\b
Examples:
  analyze trace.sqlite                              # HTML report in reports/trace.html + a summary
  analyze trace.sqlite --format md -o summary.md    # a PR comment
  analyze run1.sqlite run2.sqlite -o compare.html   # one report, a section per trace
  analyze trace.sqlite --set gpu-idle-gaps.min_gap=2ms --fail-on warning
  analyze trace.sqlite --ncu kernels.ncu-rep --window 'step_*'
  analyze kernels.ncu-rep                           # an Nsight Compute report on its own
  analyze rules list
  analyze sweep results/*.sqlite --format md
  analyze diff main.json pr.sqlite --format md --fail-on-regression 5%
"""


class _DefaultGroup(ConfigGroup):
    """A group whose unknown first argument is a TRACE for the default ``run`` command."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            _no_such_command(ctx, self, args[0])
            args = ["run", *args]
        elif not args:  # plain ``analyze``: what to type, on one screen (the full help is --help)
            click.echo(self.short_usage(ctx), err=True)
            raise SystemExit(EXIT_USAGE)
        return super().parse_args(ctx, args)

    def short_usage(self, ctx: click.Context) -> str:
        """The usage line, what the command does, the examples and where the full help is."""
        formatter = ctx.make_formatter()
        self.format_usage(ctx, formatter)
        self.format_help_text(ctx, formatter)
        self.format_epilog(ctx, formatter)
        commands = ", ".join(n for n in self.list_commands(ctx) if n != "run")
        formatter.write_paragraph()
        formatter.write_text(f"No trace given. 'analyze --help' shows every option; 'analyze COMMAND --help' one "
                             f"command's ({commands}).")
        return formatter.getvalue().rstrip("\n")

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage("analyze", "TRACE... [OPTIONS] | COMMAND [ARGS]...")

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The form a user types first, ``analyze TRACE... [OPTIONS]``, documented in full: the default
        command's options come before the other commands."""
        self.format_usage(ctx, formatter)
        self.format_help_text(ctx, formatter)
        default = self.commands.get("run")
        if default is not None:
            sub = click.Context(default, info_name="analyze", parent=ctx)
            rows = [rec for p in default.get_params(sub) if isinstance(p, click.Option)
                    and "--help" not in p.opts and "--version" not in p.opts and (rec := p.get_help_record(sub)) is not None]
            with formatter.section("Analysis options (analyze TRACE... [OPTIONS], also 'analyze run')"):
                formatter.write_text(" ".join((default.help or "").split()))
                formatter.write_paragraph()
                formatter.write_dl(rows)
        self.format_options(ctx, formatter)
        self.format_epilog(ctx, formatter)


def _no_such_command(ctx: click.Context, group: click.Group, first: str) -> None:
    """Refuse a first argument that is no file and looks like a mistyped command (``analyze difff a b``),
    with the command it is closest to; anything else is a TRACE for the default command."""
    from analyzer.errors import did_you_mean

    if first.startswith("-") or any(c in first for c in "/\\.*?[") or Path(first).exists():
        return
    hint = did_you_mean(first, [n for n in group.commands if n != "run"])
    if hint:
        raise click.UsageError(f"no such command or trace '{first}'; {hint}", ctx)


@click.group(cls=_DefaultGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="analyze")
def cli() -> None:
    """Diagnose Nsight Systems and torch.profiler traces (and Nsight Compute metrics): what is wrong,
    where, how much time a fix would buy, and what to do."""
    from analyzer.resources import avoid_hugepage_stalls

    avoid_hugepage_stalls()  # this process's numpy: no synchronous compaction on its page faults


@cli.command("run", epilog=EPILOG)
@click.argument("traces", nargs=-1, required=True, type=click.Path(dir_okay=True, path_type=Path))
@pack_options
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="Report format. Default: the one --output's extension names (.html, .md, .json), else "
                   "html; an extension that names another format, or none (.pdf), is refused.")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help="Report path ('-' for stdout). Default: reports/<trace>.<format>.")
@click.option("--fail-on", type=click.Choice(["info", "warning", "error"]), default=None,
              help="Exit with code 1 when a finding at or above this severity fires.")
@click.option("--ncu", "ncu_files", multiple=True, type=click.Path(path_type=Path),
              help="Nsight Compute export (.ncu-rep or CSV raw/details page) to join (repeatable).")
@click.option("--power", "power_files", multiple=True, type=click.Path(path_type=Path), metavar="FILE",
              help="GPU power log recorded beside the run (nvidia-smi --query-gpu=timestamp,index,power.draw "
                   "--format=csv -lms 100, or the workloads' NVML sampler): energy per step (repeatable).")
@click.option("--window", "window_spec", default=None, metavar="SPEC",
              help="Analysis window: an NVTX glob ('step_*'), a time span ('2.5s:7s') or 'full'. "
                   "Default: the repeated NVTX ranges with warmup excluded, else the part after setup.")
@click.option("--exclude-ranges", multiple=True, default=("warmup*",), show_default=True,
              help="NVTX ranges left out of the window and of phase tables, with everything nested in them: "
                   "a glob on the name (on the path with a '/'), or re:REGEX; repeated or comma-separated; "
                   "'' or 'none' for none.")
@click.option("--only-ranges", default=None, help="Phase tables keep only NVTX ranges matching this glob.")
@click.option("--timeout", type=FiniteFloat(0, MAX_TIMEOUT_SECONDS), default=None, metavar="SECONDS",
              envvar="ANALYZER_TIMEOUT",
              help="Stop a trace's analysis after SECONDS and name the stage that ran away (default: none).")
@accepted_options
@no_cache_option
@click.option("--job/--no-job", "job", default=None,
              help="Analyze the inputs as one multi-GPU job (per-rank analyses plus cross-rank facts), "
                   "or never. Default: when they are one (several rank files of one run, or one report "
                   "holding several ranks).")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Run per-rank work on Dask: a scheduler address (tcp://host:8786), 'local' for a local "
                   "cluster, or 'none' for this process. Default: 'local' when 8 or more trace files are "
                   "given and Dask's distributed is installed, else this process.")
@click.option("--workers", type=int, default=None, help="Workers of a local Dask cluster (default: the cores).")
@click.option("--rank-sections", type=RankCount(), default="8", metavar="N|all",
              help="Ranks of a multi-GPU job shown in full (their own section and swimlanes): the ones the "
                   "others waited for most, the busiest, the least busy and the most idle; every other rank "
                   "is one row of the per-rank table. 'all': every rank (the client then holds every "
                   "rank's section). Default: 8.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
@click.pass_context
def run_cmd(
    ctx: click.Context,
    traces: tuple[Path, ...],
    rules_files: tuple[str, ...],
    sets: tuple[str, ...],
    select: tuple[str, ...],
    extend_select: tuple[str, ...],
    ignore: tuple[str, ...],
    fmt: str | None,
    output: Path | None,
    fail_on: str | None,
    ncu_files: tuple[Path, ...],
    power_files: tuple[Path, ...],
    window_spec: str | None,
    exclude_ranges: tuple[str, ...],
    only_ranges: str | None,
    timeout: float | None,
    accepted_file: Path | None,
    accepted_growth: float | None,
    write_accepted: Path | None,
    no_cache: bool,
    job: bool | None,
    scheduler: str | None,
    workers: int | None,
    rank_sections: int | None,
    quiet: bool,
) -> None:
    """Analyze TRACE... (nsys .sqlite / .nsys-rep, torch.profiler .json / .json.gz, or a directory of
    them such as one trace per rank; ncu files among them are joined to the traces; ncu files alone
    give a kernel report)."""
    from analyzer.api import run as run_analysis
    from analyzer.facts.range_patterns import exclude_option
    from analyzer.findings import Severity
    from analyzer.reports import render_parts
    from analyzer.trace_analysis import AnalysisOptions

    fmt = output_format(output, fmt)
    target = output or Path("reports") / f"{trace_stem(traces[0]) or 'report'}{'-and-more' if len(traces) > 1 else ''}.{fmt}"
    if str(target) != "-":
        from analyzer.fileio import check_writable

        check_writable(target)  # a directory, device, FIFO or a folder it cannot write is refused before the analysis runs
    _refuse_inputs(target, write_accepted, traces, rules_files, ncu_files, power_files, accepted_file)
    progress = progress_printer(sys.stderr.isatty() and not quiet)
    options = AnalysisOptions(
        rules_files=tuple(rules_files),
        rule_settings=rule_settings(ctx),
        window_spec=window_spec,
        ncu_files=tuple(ncu_files),
        power_files=tuple(power_files),
        exclude_ranges=exclude_option(exclude_ranges),
        only_ranges=only_ranges,
        timeout=timeout,
        accepted_file=accepted_file,
        accepted_growth=accepted_growth,
        cache=not no_cache,
        rank_sections=rank_sections,
    )
    if scheduler is None and len(traces) >= LOCAL_DASK_MIN_FILES and job is not False and _has_dask():
        scheduler = "local"
    if scheduler is not None and scheduler.strip().lower() == "none":
        scheduler = None
    result = run_analysis(list(traces), options, job=job, scheduler=scheduler, workers=workers, progress=progress,
                          write_accepted=write_accepted)
    outcome = result.outcome
    recorded = outcome.recorded
    if progress:
        sys.stderr.write("\r\x1b[2K")
    from analyzer.watchdog import Watchdog

    if outcome.passed_over and not quiet:
        click.echo(f"note: {one_line(outcome.passed_over, 10_000)} (name a file to read it anyway)", err=True)
    with Watchdog(timeout, str(traces[0])), stage("building the report"):
        if outcome.job is None and len(outcome.analyses or outcome.alone or ()) > 1 and outcome.reason and not quiet \
                and job is not False:
            click.echo(f"note: analyzed separately, not as one multi-GPU job: {one_line(outcome.reason, 10_000)}",
                       err=True)
        report = result.report()
        # in parts: a JSON report is rendered section by section as it is written (never one string)
        parts = render_parts(report, fmt)  # type: ignore[arg-type]
    with Watchdog(timeout, str(traces[0])), stage("writing the report"):
        if str(target) == "-":
            for part in parts:
                sys.stdout.write(part)
        else:
            from analyzer.fileio import atomic_write

            atomic_write(target, parts)
    if not quiet:
        from analyzer.reports.summary import summary_text

        out = sys.stderr if str(target) == "-" else sys.stdout
        out.write(summary_text(report))
        if recorded is not None:
            out.write(f"accepted: wrote {recorded} finding{'s' if recorded != 1 else ''} to {write_accepted}\n")
        elif accepted_file is not None:
            out.write(_accepted_line(outcome.findings, accepted_file, result.accepted))
        if str(target) != "-":
            out.write(f"report: {target}\n")
    if fail_on is not None:
        threshold = Severity.parse(fail_on)
        tripped = [f for f in outcome.findings if f.severity >= threshold and f.counts]
        if tripped:
            click.echo(fail_on_line(tripped, fail_on), err=True)
            raise SystemExit(EXIT_FINDINGS)


def _refuse_inputs(target: Path, write_accepted: Path | None, traces: tuple[Path, ...], rules_files: Any,
                   ncu_files: tuple[Path, ...], power_files: tuple[Path, ...], accepted_file: Path | None) -> None:
    """Refuse, before the analysis, a report (``-o``) or accepted-findings file (``--write-accepted``)
    that would replace one of the run's inputs: a trace (named, or in a folder given), an Nsight Compute
    or power file, a rule pack, the accepted findings read (which ``--write-accepted`` may update)."""
    from analyzer.fileio import refuse_input
    from analyzer.pipeline import input_files

    read = [*input_files(traces), *ncu_files, *power_files, *(Path(r) for r in rules_files if str(r) != "default")]
    if str(target) != "-":
        refuse_input(target, [*read, *([accepted_file] if accepted_file is not None else [])])
    if write_accepted is not None:
        refuse_input(write_accepted, read, option="--write-accepted")


def fail_on_line(tripped: list[Any], fail_on: str) -> str:
    """The one line that says why ``--fail-on`` failed the run: how many findings, at which severity,
    from which rules (the most severe first), like a linter's "Found N errors"."""
    by_rule: dict[str, int] = {}  # in order: the most severe first
    for f in sorted(tripped, key=lambda f: -int(f.severity)):
        label = f"{f.id} {f.rule} ({f.severity})"
        by_rule[label] = by_rule.get(label, 0) + 1
    names = [label + (f" x{n}" if n > 1 else "") for label, n in by_rule.items()]
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more rules" if len(names) > 8 else "")
    n = len(tripped)
    return f"fail-on {fail_on}: {n} finding{'s' if n != 1 else ''} at {fail_on} or above: {shown} (exit 1)"


def _has_dask() -> bool:
    import importlib.util

    return importlib.util.find_spec("distributed") is not None


def _accepted_line(findings: list[Any], path: Path, accepted: Any) -> str:
    """How the accepted-findings file (``accepted``, read from ``path`` before the run) matched:
    accepted, grown past it, entries that no longer fire."""
    from analyzer.accepted import unmatched

    held = sum(1 for f in findings if f.acceptance is not None and not f.acceptance.counts)
    grown = sum(1 for f in findings if f.acceptance is not None and f.acceptance.counts)
    line = f"accepted: {held} finding{'s' if held != 1 else ''} accepted by {path}"
    if grown:
        line += f", {grown} grew past {'its' if grown == 1 else 'their'} acceptance and count{'s' if grown == 1 else ''}"
    gone = unmatched(accepted, findings)
    if gone:
        names = ", ".join(sorted({e.rule for e in gone})[:5])
        line += (f"; {len(gone)} entr{'y' if len(gone) == 1 else 'ies'} no longer fire ({names}): "
                 "fixed? rerun with --write-accepted to drop them")
    return line + "\n"


def _mount_subcommands() -> None:
    """Subcommands live with their layer; mount them if importable."""
    try:
        from analyzer.commands.rules import rules as rules_group

        cli.add_command(rules_group, "rules")
    except ImportError:  # pragma: no cover - layer not present
        pass
    from analyzer.config.show import config_command

    cli.add_command(config_command(run_cmd), "config")
    try:
        from analyzer.phases.cli import sweep as sweep_cmd

        cli.add_command(sweep_cmd, "sweep")
    except ImportError:  # pragma: no cover
        pass
    try:
        from analyzer.diff.cli import diff as diff_cmd

        cli.add_command(diff_cmd, "diff")
    except ImportError:  # pragma: no cover
        pass


_mount_subcommands()


def main(argv: list[str] | None = None) -> int:
    """Entry point: maps typed errors to one-line messages and exit codes (never a traceback)."""
    return guarded(lambda: cli.main(args=argv, prog_name="analyze", standalone_mode=False))


def run() -> None:
    """The ``analyze`` command (console script and ``python -m analyzer.cli``): :func:`main`, then the
    process ends without Python's own shutdown. That shutdown frees every module and what the analysis
    left behind object by object: 0.2-0.3 s of CPU after a million-kernel analysis (measured with the
    report already written), against 0.03-0.05 s for ``os._exit``. The exit handlers (``atexit``:
    temporary directories, a Dask cluster's shutdown) still run and the streams are flushed; with a
    thread still running that Python would wait for, the ordinary exit is kept."""
    import threading

    rc = main()
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    run_exit_handlers = getattr(__import__("atexit"), "_run_exitfuncs", None)
    if others or run_exit_handlers is None:
        sys.exit(rc)
    try:
        run_exit_handlers()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe: nothing more to say
                pass
    finally:
        os._exit(rc)


def guarded(run: Callable[[], object]) -> int:
    """Run ``run`` the way the ``analyze`` command does: every error becomes one ``error: ...`` line on
    stderr and an exit code (0 done, 1 findings at ``--fail-on``, 2 bad input or usage, 3 a bug of ours,
    130 interrupted). Python warnings (numpy's "invalid value" and the like) are not shown to users;
    ``ANALYZER_DEBUG=1`` shows them and the traceback of internal errors. The fuzz harnesses call this
    too, so what they check is what a user gets."""
    debug = bool(os.environ.get("ANALYZER_DEBUG"))
    try:
        with warnings.catch_warnings():
            if not debug:
                warnings.simplefilter("ignore")
            run()
    except AnalyzerError as err:
        click.echo(f"error: {one_line(str(err))}", err=True)
        return err.exit_code
    except click.exceptions.Abort as err:
        if isinstance(err.__context__, KeyboardInterrupt):  # click turns Ctrl-C into Abort
            click.echo("error: interrupted", err=True)
            return 130
        click.echo("error: aborted", err=True)
        return EXIT_USAGE
    except _NO_ARGS_IS_HELP as err:  # a group without its subcommand (analyze rules): its help, as --help
        click.echo(err.ctx.get_help() if err.ctx is not None else str(err))
        return EXIT_OK
    except click.UsageError as err:
        hint = f" (see '{_help_path(err.ctx)} --help')" if err.ctx is not None else ""
        click.echo(f"error: {one_line(err.format_message())}{hint}", err=True)
        return EXIT_USAGE
    except click.ClickException as err:
        click.echo(f"error: {one_line(err.format_message())}", err=True)
        return EXIT_USAGE
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
    except KeyboardInterrupt:
        click.echo("error: interrupted", err=True)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except (MemoryError, RecursionError) as exc:
        what = "out of memory" if isinstance(exc, MemoryError) else "input nested too deeply"
        click.echo(f"error: {what}; analyze a shorter window (--window) or fewer traces", err=True)
        return EXIT_USAGE
    except Exception as exc:  # a bug of ours: one line, the traceback only on request
        if debug:
            traceback.print_exc()
        click.echo(f"internal error: {type(exc).__name__}: {one_line(str(exc))} (set ANALYZER_DEBUG=1 for "
                   "the traceback and please report it)", err=True)
        return 3
    return EXIT_OK


def _help_path(ctx: click.Context) -> str:
    """The command whose --help documents ``ctx``'s options: ``analyze`` for the default command (the
    user typed ``analyze TRACE ...``, and ``analyze --help`` shows its options in full), else its own."""
    if ctx.command is cli.commands.get("run") and ctx.parent is not None and ctx.parent.parent is None:
        return ctx.parent.command_path
    return ctx.command_path


#: click's "a group was called without a subcommand" (click >= 8.2; older click prints the help itself)
_NO_ARGS_IS_HELP: Any = getattr(click.exceptions, "NoArgsIsHelpError", ())




if __name__ == "__main__":  # pragma: no cover
    run()

