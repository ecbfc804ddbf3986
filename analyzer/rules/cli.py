"""``analyze rules ...``: list, explain, validate and test rule packs (mounted under ``analyze``)."""
from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import click

from analyzer.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, AnalyzerError
from analyzer.rules.loader import DEFAULT_PACK, load_pack, validate_pack
from analyzer.rules.model import RulePack
from analyzer.rules.units import format_quantity

rules_file_option = click.option(
    "--rules",
    "rules_file",
    type=click.Path(exists=True, dir_okay=True, path_type=Path),
    default=None,
    help="Rule pack (YAML file or folder of them). Default: the built-in pack.",
)


def _load(rules_file: Path | None) -> RulePack:
    try:
        return load_pack(rules_file or DEFAULT_PACK)
    except AnalyzerError as err:
        _fail(err)
        raise  # unreachable


def _fail(err: AnalyzerError) -> None:
    click.echo(f"error: {err}", err=True)
    sys.exit(err.exit_code)


@click.group("rules")
def rules() -> None:
    """Inspect, validate and test rule packs."""


@rules.command("list")
@rules_file_option
def list_rules(rules_file: Path | None) -> None:
    """List the rules of a pack."""
    pack = _load(rules_file)
    rows = [(r.id, r.name, str(r.severity), r.category, r.scope, r.title) for r in pack.rules]
    _table(("ID", "NAME", "SEVERITY", "CATEGORY", "SCOPE", "TITLE"), rows)


@rules.command("explain")
@click.argument("name_or_id")
@rules_file_option
def explain(name_or_id: str, rules_file: Path | None) -> None:
    """Explain one rule: what it detects, why it matters, how to fix it, its parameters."""
    pack = _load(rules_file)
    try:
        rule = pack.get(name_or_id)
    except AnalyzerError as err:
        _fail(err)
        return
    click.echo(f"{rule.id} {rule.name}: {rule.title}")
    click.echo(f"severity {rule.severity}, category {rule.category}, scope {rule.scope}, reads {', '.join(rule.requires)}")
    sections = (("What it detects", rule.what), ("Why it matters", rule.why), ("How to fix it", rule.fix),
                ("How it was calibrated", rule.calibration))
    for heading, text in sections:
        if text.strip():
            click.echo(f"\n{heading}\n  " + text.strip().replace("\n", "\n  "))
    click.echo(f"\nCondition\n  {rule.condition.source.strip()}")
    if rule.parameters:
        click.echo("\nParameters (change with --set " + rule.name + ".PARAM=VALUE)")
        for p in rule.parameters:
            click.echo(f"  {p.name} = {format_quantity(p.value, p.unit)} ({p.unit}): {p.doc}")
    if rule.references:
        click.echo("\nReferences\n  " + "\n  ".join(rule.references))


@rules.command("validate")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
def validate(files: tuple[Path, ...]) -> None:
    """Check rule files without reading any trace; print every problem (exit 2 if any)."""
    failed = False
    for file in files:
        pack, problems = validate_pack(file)
        if problems:
            failed = True
            for problem in problems:
                click.echo(f"error: {problem}", err=True)
        else:
            assert pack is not None
            click.echo(f"{file}: OK ({len(pack)} rules)")
    sys.exit(EXIT_USAGE if failed else EXIT_OK)


@rules.command("test")
@click.argument("names", nargs=-1)
@rules_file_option
def test(names: tuple[str, ...], rules_file: Path | None) -> None:
    """Run the rules' `tests:` cases (trace + expected fire/silent); exit 1 on any failure.

    Example: analyze rules test --rules my_rules.yaml too-many-stream-syncs
    """
    from analyzer.rules.testing import run_rule_tests

    pack = _load(rules_file)
    try:
        results = run_rule_tests(pack, names)
    except AnalyzerError as err:
        _fail(err)
        return
    if not results:
        click.echo("no test cases")
        return
    _table(("RESULT", "ID", "RULE", "EXPECT", "TRACE", "DETAIL"),
           [(r.outcome.upper(), r.id, r.rule, r.expect, r.trace, r.detail) for r in results])
    failed = sum(not r.ok for r in results)
    click.echo(f"\n{len(results) - failed} passed, {failed} failed")
    sys.exit(EXIT_FINDINGS if failed else EXIT_OK)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    for row in (header, *rows):
        click.echo("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())


if __name__ == "__main__":
    rules()
