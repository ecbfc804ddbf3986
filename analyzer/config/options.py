"""Option groups shared by the commands that analyze traces (``analyze``, ``analyze config``, ``analyze
diff``...): one definition each, so every command spells, documents and configures them the same way.

    @cli.command("diff")
    @pack_options
    def diff(..., rules_files, sets, select, extend_select, ignore): ...
        options = AnalysisOptions(rules_files=rules_files or ("default",),
                                  rule_settings=rule_settings(click.get_current_context()))
"""
from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from analyzer.config.cli import CliOnlyOption, LayeredOption, layers
from analyzer.rules.loader import BUILTIN_PACKS
from analyzer.rules.selection import RuleSettings, split_selectors

F = TypeVar("F", bound=Callable[..., Any])


class FiniteFloat(click.ParamType):
    """A finite number from ``low`` to ``high``: ``nan``, ``inf``, ``1e300`` and negative values are
    refused with one line (click's FloatRange lets ``nan`` through and ``inf`` past any minimum)."""

    name = "float"

    def __init__(self, low: float, high: float) -> None:
        self.low, self.high = low, high

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not (math.isfinite(number) and self.low <= number <= self.high):
            self.fail(f"{value} is not a finite number from {self.low:g} to {self.high:g}", param, ctx)
        return number


#: the longest --timeout: a week (the biggest traces take minutes)
MAX_TIMEOUT_SECONDS = 7 * 24 * 3600.0


class PackRef(click.ParamType):
    """A rule pack: ``default`` (the built-in pack), a YAML file or a folder of them. In a configuration
    file a relative path is relative to the file's folder; built-in names stay names."""

    name = "PACK"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not text:
            self.fail("a rule pack is a name (default) or a path", param, ctx)
        return text

    def from_config(self, value: str, base: Path) -> str:
        if value in BUILTIN_PACKS:
            return value
        path = Path(value).expanduser()
        return str(path if path.is_absolute() else base / path)


def pack_options(function: F) -> F:
    """``--rules`` (repeatable, composed in order), ``--set``, ``--select``, ``--extend-select``,
    ``--ignore``. The command receives ``rules_files``, ``sets``, ``select``, ``extend_select`` and
    ``ignore``; :func:`rule_settings` turns the last four into layers (file first, then command line)."""
    decorators = [
        click.option("--rules", "rules_files", type=PackRef(), multiple=True, default=("default",), metavar="PACK",
                     help="Rule pack: 'default' (the built-in pack), a YAML file or a folder of them; "
                          "repeatable, composed in order (a pack may say 'extends: default'). "
                          "Default: the built-in pack."),
        click.option("--set", "sets", cls=LayeredOption, multiple=True, metavar="RULE.PARAM=VALUE",
                     help="Override a rule parameter, e.g. gpu-idle-gaps.min_gap=2ms (repeatable; after "
                          "the configuration file's)."),
        click.option("--select", "select", cls=LayeredOption, multiple=True, metavar="RULE|ID|CATEGORY",
                     help="Run only these rules: names, ids (or id prefixes like NCU), categories or globs "
                          "('ncu-*'); repeatable or comma-separated. Replaces the configuration's selection."),
        click.option("--extend-select", "extend_select", cls=LayeredOption, multiple=True,
                     metavar="RULE|ID|CATEGORY", help="Add rules to the selection (e.g. one a pack disables)."),
        click.option("--ignore", "ignore", cls=LayeredOption, multiple=True, metavar="RULE|ID|CATEGORY",
                     help="Switch rules off (names, ids, id prefixes, categories or globs); adds to the "
                          "configuration's ignore."),
    ]
    for decorator in reversed(decorators):
        function = decorator(function)
    return function


def rule_settings(ctx: click.Context) -> tuple[RuleSettings, ...]:
    """The ``--set`` / ``--select`` / ``--extend-select`` / ``--ignore`` layers of this invocation:
    the configuration file's, then the command line's (see :mod:`analyzer.rules.selection`)."""
    out = []
    for index in (0, 1):  # 0: configuration file, 1: command line
        values: dict[str, Any] = {}
        origins: dict[str, str] = {}
        for name in ("sets", "select", "extend_select", "ignore"):
            layer = layers(ctx, name)[index]
            if not layer.given:
                continue
            items = tuple(str(v) for v in layer.values)
            values[name] = items if name == "sets" else split_selectors(items)
            if index == 0:
                origins[name] = layer.origin
        if values:
            out.append(RuleSettings(
                sets=values.get("sets", ()), select=values.get("select"),
                extend_select=values.get("extend_select", ()), ignore=values.get("ignore", ()),
                origin=origins,
            ))
    return tuple(out)


def accepted_options(function: F) -> F:
    """``--accepted FILE``, ``--accepted-growth FACTOR`` and ``--write-accepted FILE`` (command line only).
    The command receives ``accepted_file``, ``accepted_growth`` and ``write_accepted``."""
    decorators = [
        click.option("--accepted", "accepted_file", type=click.Path(path_type=Path), default=None, metavar="FILE",
                     help="Accepted findings (written by --write-accepted): shown as accepted, not counted by "
                          "--fail-on, unless their impact grew past --accepted-growth."),
        click.option("--accepted-growth", "accepted_growth", type=FiniteFloat(1.0, 1e9), default=None,
                     metavar="FACTOR",
                     help="An accepted finding counts again when its impact grew by more than this factor "
                          "(default 1.5; an entry's own max-growth wins)."),
        click.option("--write-accepted", "write_accepted", cls=CliOnlyOption, type=click.Path(path_type=Path),
                     default=None, metavar="FILE",
                     help="Record every finding of this run in FILE as accepted (reasons of entries that still "
                          "fire are kept)."),
    ]
    for decorator in reversed(decorators):
        function = decorator(function)
    return function
