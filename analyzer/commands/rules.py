"""``analyze rules ...``: list, explain, validate and test rule packs (mounted under ``analyze``)."""
from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from analyzer.config.cli import ConfigGroup
from analyzer.config.options import PackRef, pack_options, rule_settings
from analyzer.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, AnalyzerError

if TYPE_CHECKING:
    from analyzer.rules.model import RulePack


def default_analyze(
    path: Path | Sequence[Path], pack: RulePack, sets: Sequence[str], window: str | None,
    ncu: Sequence[Path] = (),
) -> Any:
    """Full analysis via the pipeline (imported when a test runs: listing or validating rules needs
    none), as ``analyze`` runs it: a multi-GPU job (several rank files, or one report holding several ranks)
    gives the findings of the job and of every rank. ``sets`` are applied here, ``window`` is passed
    as the window spec, ``ncu`` exports are joined to the trace."""
    from analyzer.pipeline import AnalysisOptions, analyze_inputs
    from analyzer.rules.overrides import apply_overrides

    paths = [path] if isinstance(path, Path) else list(path)
    options = AnalysisOptions(sets=tuple(sets), window_spec=window, ncu_files=tuple(ncu))
    return analyze_inputs(paths, options, pack=apply_overrides(pack, sets)).findings


rules_file_option = click.option(
    "--rules",
    "rules_files",
    type=PackRef(),
    multiple=True,
    default=("default",),
    metavar="PACK",
    help="Rule pack: 'default' (the built-in pack), a YAML file or a folder of them; repeatable, composed "
         "in order. Default: the built-in pack.",
)


def _load(rules_files: Sequence[str], ctx: click.Context | None = None) -> RulePack:
    from analyzer.rules.loader import load_pack
    from analyzer.rules.selection import apply_settings

    try:
        pack = load_pack(list(rules_files) or ["default"])
        return apply_settings(pack, rule_settings(ctx)) if ctx is not None else pack
    except AnalyzerError as err:
        _fail(err)
        raise  # unreachable


def _echo(message: object = "", err: bool = False, nl: bool = True) -> None:
    """``click.echo`` with control characters shown as U+FFFD: a rule pack's titles, prose, conditions
    and problems are text from a YAML file, where a double-quoted ``"\\e]0;...\\a"`` is an ESC sequence
    that would drive the terminal (set its title, write its clipboard)."""
    from analyzer.reports.format import inert_text

    click.echo(inert_text(str(message)), err=err, nl=nl)


def _fail(err: AnalyzerError) -> None:
    _echo(f"error: {err}", err=True)
    sys.exit(err.exit_code)


@click.group("rules", cls=ConfigGroup)
def rules() -> None:
    """Inspect, validate and test rule packs."""


@rules.command("list")
@pack_options
@click.pass_context
def list_rules(ctx: click.Context, rules_files: tuple[str, ...], **_: object) -> None:
    """List the rules of a pack, with those switched off (by the pack, the configuration, --select or
    --ignore) marked `off`."""
    pack = _load(rules_files, ctx)
    rows = [(r.id, r.name, "on" if r in pack.rules else "off", str(r.severity), r.category, r.scope, r.title)
            for r in pack.all_rules]
    _table(("ID", "NAME", "STATE", "SEVERITY", "CATEGORY", "SCOPE", "TITLE"), rows)


@rules.command("explain")
@click.argument("name_or_id")
@rules_file_option
def explain(name_or_id: str, rules_files: tuple[str, ...]) -> None:
    """Explain one rule: what it detects, why it matters, how to fix it, its parameters."""
    from analyzer.rules.units import format_quantity

    pack = _load(rules_files)
    try:
        rule = pack.get(name_or_id)
    except AnalyzerError as err:
        _fail(err)
        return
    _echo(f"{rule.id} {rule.name}: {rule.title}")
    _echo(f"severity {rule.severity}, category {rule.category}, scope {rule.scope}, reads {', '.join(rule.requires)}")
    sections = (("What it detects", rule.what), ("Why it matters", rule.why), ("How to fix it", rule.fix),
                ("How it was calibrated", rule.calibration))
    for heading, text in sections:
        if text.strip():
            _echo(f"\n{heading}\n  " + text.strip().replace("\n", "\n  "))
    _echo(f"\nCondition\n  {rule.condition.source.strip()}")
    if rule.needs:
        from analyzer.loading.capabilities import CAPABILITIES

        _echo("\nNeeds from the trace (without it: reported as not available in this trace)")
        for cap in rule.needs:
            _echo(f"  {cap}: {CAPABILITIES.get(cap, cap)}")
    if rule.parameters:
        _echo("\nParameters (change with --set " + rule.name + ".PARAM=VALUE)")
        for p in rule.parameters:
            _echo(f"  {p.name} = {format_quantity(p.value, p.unit)} ({p.unit}): {p.doc}")
    if rule.references:
        _echo("\nReferences\n  " + "\n  ".join(rule.references))


@rules.command("validate")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
def validate(files: tuple[Path, ...]) -> None:
    """Check rule files without reading any trace; print every problem (exit 2 if any)."""
    from analyzer.rules.loader import validate_pack

    failed = False
    for file in files:
        pack, problems = validate_pack(file)
        if problems:
            failed = True
            for problem in problems:
                _echo(f"error: {problem}", err=True)
        else:
            assert pack is not None
            extra = ""
            if pack.disabled:
                extra += f", {len(pack.disabled)} switched off"
            if len(pack.files) > 1:
                extra += f"; read {len(pack.files)} files"
            _echo(f"{file}: OK ({len(pack) + len(pack.disabled)} rules{extra})")
    sys.exit(EXIT_USAGE if failed else EXIT_OK)


@rules.command("test")
@click.argument("names", nargs=-1)
@rules_file_option
@click.option("--all", "all_rules", is_flag=True,
              help="Also run the cases of rules the named packs only extend (e.g. the built-in pack's).")
@click.option("--data", "data_dirs", multiple=True, metavar="DIR",
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Look the cases' relative trace paths up in DIR first, e.g. the root of a clone of the "
                   "source repository (the built-in pack's cases read its tests/data); repeatable.")
def test(names: tuple[str, ...], rules_files: tuple[str, ...], all_rules: bool,
         data_dirs: tuple[Path, ...]) -> None:
    """Run the rules' `tests:` cases (trace + expected fire/silent); exit 1 on any failure. With --rules,
    the cases of the rules those files define (not of the packs they extend, unless --all). The built-in
    pack's cases read traces from the source repository's tests/data, which an installed package does not
    carry: run them in a clone's root (or pass --data CLONE); without them those cases are skipped.

    Example: analyze rules test --rules my_rules.yaml too-many-stream-syncs
    """
    from analyzer.rules.testing import run_rule_tests

    pack = _load(rules_files)
    if not names and rules_files and not all_rules:
        own = _own_files(rules_files)
        names = tuple(r.id for r in pack.all_rules if str(Path(r.file).resolve()) in own)
        if not names:
            _echo("no rules defined in the named packs (they only extend others: use --all)")
            return
    try:
        results = run_rule_tests(pack, names, analyze=default_analyze, roots=data_dirs)
    except AnalyzerError as err:
        _fail(err)
        return
    if not results:
        _echo("no test cases")
        return
    # skipped cases are counted, not listed: without the repository all of the built-in pack's are
    shown = [r for r in results if r.outcome != "skipped"]
    if shown:
        _table(("RESULT", "ID", "RULE", "EXPECT", "TRACE", "DETAIL"),
               [(r.outcome.upper(), r.id, r.rule, r.expect, r.trace, r.detail) for r in shown])
        _echo()
    failed = sum(not r.ok for r in results)
    skipped = len(results) - len(shown)
    _echo(f"{len(shown) - failed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
    if skipped:
        where = ", ".join(sorted({"/".join(Path(r.trace).parts[:2]) for r in results if r.outcome == "skipped"}))
        _echo(f"skipped: the built-in rules' cases read traces ({where}) that ship with the source repository, "
                   "not the package; run `analyze rules test` in a clone's root, or pass --data CLONE")
    sys.exit(EXIT_FINDINGS if failed else EXIT_OK)


def _own_files(refs: Sequence[str]) -> set[str]:
    """The files the given pack references name themselves (folders: their YAML files)."""
    from analyzer.rules.loader import resolve_pack_ref

    out: set[str] = set()
    for ref in refs:
        path = resolve_pack_ref(ref)
        files = [*path.glob("*.yaml"), *path.glob("*.yml")] if path.is_dir() else [path]
        out |= {str(f.resolve()) for f in files}
    return out


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    for row in (header, *rows):
        _echo("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())


if __name__ == "__main__":
    rules()
