"""Typed errors. Every error a user can cause carries a one-line message saying what is wrong and
what to do; the CLI prints ``error: <message>`` and exits with the error's ``exit_code``.
"""
from __future__ import annotations

import difflib
from collections.abc import Iterable

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2


class AnalyzerError(Exception):
    """Base class: a problem the user can act on. ``str(err)`` is one line."""

    exit_code: int = EXIT_USAGE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(message if hint is None else f"{message}; {hint}")


class InputError(AnalyzerError):
    """A trace or metrics file cannot be read (missing, wrong format, truncated, empty)."""

    def __init__(self, path: object, message: str, *, hint: str | None = None) -> None:
        self.path = str(path)
        super().__init__(f"{self.path}: {message}", hint=hint)


class UnsupportedFormatError(InputError):
    """The file is a known format that this installation cannot read (e.g. .nsys-rep without nsys)."""


class RuleError(AnalyzerError):
    """A rule file or rule is invalid. Carries file, line and rule id where known."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        rule_id: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.file, self.line, self.rule_id = file, line, rule_id
        self.detail = message  # without the file:line prefix, for errors that name the file themselves
        where = ""
        if file:
            where = f"{file}:{line}: " if line else f"{file}: "
        who = f"{rule_id}: " if rule_id else ""
        super().__init__(f"{where}{who}{message}", hint=hint)


class UnsafeRuleError(RuleError):
    """A rule tried to do something a rule may never do (run code, reach attributes, escape templates)."""


class ParameterError(AnalyzerError):
    """A ``--set RULE.PARAM=VALUE`` or a parameter value is malformed or names nothing."""


class WindowError(AnalyzerError):
    """A ``--window`` specification is malformed or selects nothing."""


class ConfigError(AnalyzerError):
    """A project configuration file (``pyproject.toml``'s ``[tool.gpu-trace-analyzer]``, a standalone
    ``gpu-trace-analyzer.toml``, ``--config FILE``) or an accepted-findings file is invalid: names the
    file and line."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 hint: str | None = None) -> None:
        self.file, self.line = file, line
        where = f"{file}:{line}: " if file and line else (f"{file}: " if file else "")
        super().__init__(f"{where}{message}", hint=hint)


class OutputError(AnalyzerError):
    """A report or cache file cannot be written (full disk, read-only folder, no permission). The
    previous file at that path, if any, is left as it was."""

    def __init__(self, path: object, message: str, *, hint: str | None = None) -> None:
        self.path = str(path)
        super().__init__(f"{self.path}: {message}", hint=hint)


class ClusterError(AnalyzerError):
    """Per-rank work on Dask failed: a task raised, could not be serialized, its worker died, or nothing
    finished within the wait limit (:mod:`analyzer.job.remote`). One line, never a hang."""

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int = EXIT_USAGE) -> None:
        self.exit_code = exit_code
        super().__init__(message, hint=hint)


class StageTimeoutError(AnalyzerError):
    """The analysis of one trace ran past its time limit (``--timeout``); names the stage it was in."""


def closest_name(name: str, candidates: Iterable[object]) -> str | None:
    """The candidate most like ``name`` (``difflib``, cutoff 0.6), or None."""
    match = difflib.get_close_matches(name, sorted(str(c) for c in candidates), n=1, cutoff=0.6)
    return match[0] if match else None


def did_you_mean(name: str, candidates: Iterable[object]) -> str | None:
    """``'did you mean "x"?'`` for the closest candidate, or None."""
    best = closest_name(name, candidates)
    return f'did you mean "{best}"?' if best else None


def truncate(text: str, limit: int) -> str:
    """Cut ``text`` to ``limit`` characters, marking the cut with an ellipsis (reports cut trace names
    with it; messages cut the values they quote, so that what is wrong is never cut off the line)."""
    if limit <= 0 or len(text) <= limit:
        return text
    return text[: max(1, limit - 1)] + "\u2026"


def one_line(text: str, limit: int = 2000) -> str:
    """``text`` on one line (newlines and control characters as spaces), at most ``limit`` characters:
    messages and progress lines quote names from traces and file names, which may hold anything (an ESC
    sequence would drive the user's terminal)."""
    flat = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    return truncate(flat, limit)
