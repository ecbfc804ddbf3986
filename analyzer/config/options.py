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
from typing import TYPE_CHECKING, Any, TypeVar

import click

from analyzer.config.cli import CliOnlyOption, LayeredOption, layers

if TYPE_CHECKING:
    from analyzer.rules.selection import RuleSettings

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


class RankCount(click.ParamType):
    """A whole number of ranks from 0, or ``all`` (None), as text or a number (``--rank-sections``); a
    type rather than a callback, so a configuration file's bad value is refused at its line."""

    name = "N|all"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | None:
        if value is None or (isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**9):
            return value
        text = str(value).strip().lower()
        if text == "all":
            return None
        if text.isdigit() and len(text) <= 9:
            return int(text)
        self.fail(f"{value!r} is neither a number of ranks (0 or more) nor 'all'", param, ctx)


def no_cache_option(function: F) -> F:
    """``--no-cache`` (the command receives ``no_cache``), the same for every command that reads traces."""
    return click.option(
        "--no-cache", is_flag=True,
        help="Neither read nor write the columnar trace and fact caches (kept in the user's cache directory; "
             "ANALYZER_CACHE_DIR / ANALYZER_CACHE_MAX / ANALYZER_NO_CACHE=1).")(function)


#: the report formats an ``-o`` file's extension names (``.htm``, ``.markdown`` too)
REPORT_EXTENSIONS = {"html": "html", "htm": "html", "md": "md", "markdown": "md", "json": "json"}


def output_format(output: Path | None, fmt: str | None, default: str = "html") -> str:
    """The format of a report written to ``output`` (``-o``): ``--format`` if given, else the one the
    file's extension names, else ``default``. A file's name says what it holds, so an extension that
    names another format than ``--format`` (``-o out.md --format html``) or that is no report format
    (``-o out.pdf``) is refused with one line; a name without extension (or ``-``, stdout) takes any."""
    if output is None or str(output) == "-" or not output.suffix:
        return fmt or default
    suffix = output.suffix.lower().lstrip(".")
    by_ext = REPORT_EXTENSIONS.get(suffix)
    if by_ext is None:
        raise click.BadParameter(
            f"{output.name}: .{suffix} is not a report format; name the file .html, .md or .json "
            "(the format follows the extension), or give --format with a name without extension",
            param_hint="'-o' / '--output'")
    if fmt is not None and fmt != by_ext:
        raise click.BadParameter(
            f"{output.name} is a .{suffix} file but --format says {fmt}; drop --format (the format follows "
            f"the extension) or name the file .{fmt}", param_hint="'-o' / '--output'")
    return by_ext


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
        from analyzer.rules.loader import BUILTIN_PACKS  # the rules engine only when a file names a pack

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
    from analyzer.rules.selection import RuleSettings, split_selectors  # imported by a run, not by --help

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
