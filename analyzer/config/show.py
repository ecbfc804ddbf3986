"""``analyze config``: the effective settings of ``analyze`` and where each came from, the rule pack they
give (files, rules switched off and why, parameters changed) and the accepted findings in use. It
loads and checks everything a run would (the pack, ``--set`` values, selectors, the accepted-findings
file) without reading a trace, so it is also the way to check a configuration in CI."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from analyzer.config.cli import ConfigCommand, describe_settings, effective


def config_command(target: click.Command) -> click.Command:
    """``analyze config`` taking ``target``'s options (so it shows what ``target`` would use)."""
    options = [p for p in target.params if isinstance(p, click.Option) and p.name not in ("config_file", "isolated")]
    command = ConfigCommand(
        "config",
        params=list(options),
        callback=click.pass_context(_show),
        help="Show the effective settings (command line, configuration file, defaults) and where each "
             "came from, the rule pack they give and the accepted findings; checks them all without "
             "reading a trace (exit 2 on any problem).",
        short_help="Show the effective settings and where each came from.",
    )
    command.config_section = target.name  # what a run would read: its table too
    return command


def _show(ctx: click.Context, **params: Any) -> None:
    from analyzer.config.options import rule_settings
    from analyzer.trace_analysis import AnalysisOptions, load_rules, rules_label
    from analyzer.rules.units import format_quantity

    echo = _echo
    echo(f"configuration: {describe_settings(ctx)}")
    rows = effective(ctx)
    echo("")
    _table(("setting", "value", "from"), rows)
    rules_files = tuple(params.get("rules_files") or ())
    pack = load_rules(AnalysisOptions(rules_files=rules_files, rule_settings=rule_settings(ctx)))
    total = len(pack.rules) + len(pack.disabled)
    echo("")
    echo(f"rule pack: {rules_label(pack).split(';')[0]}")
    echo(f"  {total} rules, {len(pack.rules)} enabled")
    for rule in pack.disabled:
        echo(f"  off  {rule.id:<8} {rule.name:<32} {pack.reasons.get(rule.id, '')}")
    changed = [(r, p) for r in pack.all_rules for p in r.parameters if p.value != p.default]
    if changed:
        echo("  parameters changed from their defaults:")
        for rule, param in changed:
            echo(f"    {rule.name}.{param.name} = {format_quantity(param.value, param.unit)} "
                 f"(default {format_quantity(param.default, param.unit)})")
    accepted_file = params.get("accepted_file")
    accepted = None
    if accepted_file is not None:
        from analyzer.trace_analysis import load_accepted_findings

        accepted = load_accepted_findings(AnalysisOptions(accepted_file=accepted_file,
                                                          accepted_growth=params.get("accepted_growth")))
    if accepted is not None:
        echo("")
        echo(f"accepted findings: {accepted.path}: {len(accepted)} entr{'y' if len(accepted) == 1 else 'ies'}; "
             f"one counts again when its impact grows more than {accepted.max_growth:g}x")
        names = {r.name for r in pack.all_rules}
        for entry in accepted.entries.values():
            state = "" if entry.rule in names else "  (no such rule in this pack: it never matches)"
            if entry.rule in names and not pack.is_enabled(entry.rule):
                state = "  (rule switched off)"
            scope = ", ".join(f"{k} {v}" for k, v in entry.scope.items() if k != "kind") or entry.scope.get("kind", "")
            reason = f": {entry.reason}" if entry.reason else ""
            echo(f"  {entry.fingerprint}  {entry.rule} [{scope}]{reason}{state}")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [min(48, max(len(str(c)) for c in col)) for col in zip(header, *rows)]
    for row in (header, *rows):
        cells = [str(c) for c in row]
        _echo("  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip())


def _echo(text: str) -> None:
    """``click.echo`` with control characters shown as U+FFFD: the values come from configuration and
    accepted-findings files, where a TOML ``"\\u001b]0;...\\u0007"`` is an ESC sequence that would
    drive the terminal."""
    from analyzer.reports.format import inert_text

    click.echo(inert_text(text))
