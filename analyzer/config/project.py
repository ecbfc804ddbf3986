"""The project configuration file: found from the working directory upwards, read safely, with the line
of every key (so that every error names ``file:line``).

In each folder from the working directory up to the filesystem root, the first of these wins:

1. ``gpu-trace-analyzer.toml`` or ``.gpu-trace-analyzer.toml``: the keys at the top level (for
   repositories without a ``pyproject.toml``);
2. ``pyproject.toml`` with a ``[tool.gpu-trace-analyzer]`` table (a ``pyproject.toml`` without one
   is passed over, as ruff does).

The keys are the command line's long option names (``rules``, ``select``, ``ignore``, ``set``,
``fail-on``, ``window``, ``format``, ``output``...); :mod:`analyzer.config.cli` checks them against the
commands' options, so an option added to the command line is a configuration key at once.
"""
from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from analyzer._paths import shown_path as display_path
from analyzer.boundedio import BoundedReadError, read_regular
from analyzer.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10: the same parser, packaged (setup.cfg pulls it in there)
    import tomli as tomllib

TOOL = "gpu-trace-analyzer"
TABLE = ("tool", TOOL)
STANDALONE_NAMES = (f"{TOOL}.toml", f".{TOOL}.toml")
MAX_CONFIG_BYTES = 1 << 20  # a configuration is a few lines written by people


@dataclass(frozen=True)
class ProjectConfig:
    """One configuration file's settings: ``values`` by key, ``lines`` the 1-based line of each key
    (the table's line when a key's line cannot be told)."""

    path: Path
    table: tuple[str, ...]  # () for a standalone file's top level, TABLE in a pyproject.toml
    values: Mapping[str, Any] = field(default_factory=dict)
    lines: Mapping[str, int] = field(default_factory=dict)
    table_line: int = 1
    text: str = field(default="", compare=False, repr=False)

    @property
    def base(self) -> Path:
        """Relative paths in the file are relative to its folder (as in ruff)."""
        return self.path.parent

    @property
    def display(self) -> str:
        """The file as errors name it: relative to the working directory when below it."""
        return display_path(self.path)

    @property
    def label(self) -> str:
        table = f" [{'.'.join(self.table)}]" if self.table else ""
        return f"{self.display}{table}"

    def line(self, key: str) -> int:
        return self.lines.get(key, self.table_line)

    def origin(self, key: str) -> str:
        """``pyproject.toml:12``: where ``key`` was written."""
        return f"{self.display}:{self.line(key)}"

    def section(self, name: str) -> ProjectConfig | None:
        """The per-command table ``[tool.gpu-trace-analyzer.NAME]`` (or ``NAME = {...}``), or None."""
        raw = self.values.get(name)
        if not isinstance(raw, dict):
            return None
        lines, line = key_lines(self.text, (*self.table, name))
        return replace(self, table=(*self.table, name), values=dict(raw),
                       lines={k: lines.get(k, line or self.line(name)) for k in raw},
                       table_line=line or self.line(name))

    def merged(self, section: ProjectConfig, sections: Iterable[str]) -> ProjectConfig:
        """These settings without the per-command tables, overlaid by ``section``'s (which win)."""
        skip = set(sections)
        values = {k: v for k, v in self.values.items() if k not in skip}
        lines = {k: v for k, v in self.lines.items() if k not in skip}
        return replace(self, values={**values, **section.values}, lines={**lines, **section.lines})

    def error(self, key: str | None, message: str, hint: str | None = None) -> ConfigError:
        return ConfigError(message, file=self.display, line=self.line(key) if key else self.table_line, hint=hint)


def find_config(start: Path | None = None) -> Path | None:
    """The configuration file that applies in ``start`` (default: the working directory), or None."""
    folder = (start or Path.cwd()).resolve()
    for current in (folder, *folder.parents):
        for name in STANDALONE_NAMES:
            candidate = current / name
            if candidate.is_file():
                return candidate
        pyproject = current / "pyproject.toml"
        if pyproject.is_file() and _mentions_table(pyproject):
            return pyproject
    return None


def _mentions_table(path: Path) -> bool:
    """Cheap test before parsing: a pyproject.toml of another tool is never parsed (its syntax errors
    are not ours to report)."""
    try:
        head = read_regular(path, MAX_CONFIG_BYTES, "configuration file")
    except OSError:
        return False
    except BoundedReadError:
        return True  # too large or not a file: read_config says so in one line
    return TOOL.encode() in head


def read_config(path: Path) -> ProjectConfig:
    """Read ``path``: a ``pyproject.toml`` (its ``[tool.gpu-trace-analyzer]`` table) or a standalone
    file (its top level). Raises :class:`ConfigError` naming the file and line."""
    shown = display_path(path)
    try:
        if path.is_dir():
            raise ConfigError("is a folder, not a configuration file", file=shown,
                              hint=f"name the file, e.g. {path / 'pyproject.toml'}")
        raw = read_regular(path, MAX_CONFIG_BYTES, "configuration file")
    except BoundedReadError as err:
        raise ConfigError(err.reason, file=shown, hint=err.hint) from None
    except (OSError, ValueError) as err:
        raise ConfigError(f"cannot read the configuration: {getattr(err, 'strerror', None) or err}",
                          file=shown) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"is not UTF-8 text ({err.reason} at byte {err.start})", file=shown) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        message, line = _toml_error(err)
        raise ConfigError(f"invalid TOML: {message}", file=shown, line=line) from None
    except RecursionError:
        raise ConfigError("invalid TOML: nested too deeply", file=shown) from None
    except ValueError as err:  # a value tomllib cannot build: an integer of 4,300+ digits
        raise ConfigError(f"invalid TOML: a value cannot be read ({str(err).split(';')[0]})", file=shown) from None
    table: tuple[str, ...] = TABLE if path.name == "pyproject.toml" else ()
    values: Any = data
    for part in table:
        values = values.get(part) if isinstance(values, dict) else None
    lines, table_line = key_lines(text, table)
    if values is None:
        raise ConfigError(f"has no [{'.'.join(table)}] table", file=shown,
                          hint=f"add one, or give a standalone {STANDALONE_NAMES[0]}")
    if not isinstance(values, dict):
        raise ConfigError(f"[{'.'.join(table)}] must be a table of settings", file=shown, line=table_line)
    if not table and "tool" in values and isinstance(values["tool"], dict) and TOOL in values["tool"]:
        raise ConfigError(f"a standalone {path.name} holds the settings at its top level, not in "
                          f"[tool.{TOOL}]", file=shown, line=lines.get("tool", 1),
                          hint="remove the table header, or name the file pyproject.toml")
    return ProjectConfig(path=path.resolve(), table=table, values=dict(values), lines=lines,
                         table_line=table_line or 1, text=text)


_TOML_AT = re.compile(r"\s*\(at line (\d+), column \d+\)\s*$")
_TOML_EOF = re.compile(r"\s*\(at end of document\)\s*$")


def _toml_error(err: Exception) -> tuple[str, int | None]:
    text = str(err)
    line = getattr(err, "lineno", None)
    match = _TOML_AT.search(text)
    if match:
        line = line or int(match.group(1))
        text = text[: match.start()]
    text = _TOML_EOF.sub(" (at the end of the file)", text)
    return text.strip() or "cannot parse", line


_HEADER = re.compile(r"^\s*\[(\[?)\s*(?P<name>[^\[\]#]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"""^\s*(?:"(?P<dq>[^"\\]+)"|'(?P<sq>[^']+)'|(?P<bare>[A-Za-z0-9_-]+))\s*[.=]""")


def _split_dotted(name: str) -> tuple[str, ...]:
    parts = re.findall(r"""\s*(?:"([^"\\]*)"|'([^']*)'|([A-Za-z0-9_-]+))\s*(?:\.|$)""", name)
    return tuple(a or b or c for a, b, c in parts)


def key_lines(text: str, table: tuple[str, ...]) -> tuple[dict[str, int], int]:
    """The 1-based line of each key of ``table`` (``()``: the top level) and of the table header (0 when
    ``table`` has no header line of its own).

    A light scan, not a parser (the file has been parsed already): table headers and ``key =`` lines;
    a sub-table ``[table.key]`` gives ``key`` its header's line. Lines inside multi-line strings and
    arrays are skipped."""
    lines: dict[str, int] = {}
    table_line = 0 if table else 1  # 0: no header for ``table`` (an inline table, or a dotted key)
    current: tuple[str, ...] = ()
    in_string: str | None = None
    depth = 0  # open brackets of a multi-line array or inline table
    for number, line in enumerate(text.splitlines(), start=1):
        if in_string is not None:
            if line.count(in_string) % 2 == 1:
                in_string = None
            continue
        if depth > 0:
            depth = max(0, depth + _bracket_balance(line))
            continue
        header = _HEADER.match(line)
        if header:
            current = _split_dotted(header.group("name"))
            if current == table:
                table_line = number
            elif table and current[: len(table)] == table and len(current) > len(table):
                lines.setdefault(current[len(table)], number)
            elif not table and current:
                lines.setdefault(current[0], number)
            continue
        key = _KEY.match(line)
        if key and current == table:
            lines.setdefault(key.group("dq") or key.group("sq") or key.group("bare"), number)
        if key:
            depth = max(0, _bracket_balance(line.split("=", 1)[-1]))
        for quote in ('"""', "'''"):
            if line.count(quote) % 2 == 1:
                in_string = quote
                break
    return lines, table_line


_STRINGS = re.compile(r""""(?:[^"\\]|\\.)*"|'[^']*'|#.*$""")


def _bracket_balance(text: str) -> int:
    """Opening minus closing brackets and braces outside strings and comments."""
    bare = _STRINGS.sub("", text)
    return bare.count("[") + bare.count("{") - bare.count("]") - bare.count("}")
