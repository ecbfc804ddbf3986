"""User-supplied patterns, matched in linear time.

Patterns that users write (a rule's ``matches(x, "regex")`` and regex parameters, ``--window`` globs,
``--only-ranges``/``--exclude-ranges`` globs and ``re:`` regexes, the sweep's ``--key-pattern``) run on
RE2 (the ``google-re2`` package): an automaton engine whose matching time is linear in the text and
whose memory is capped (:data:`MAX_PROGRAM_BYTES`), so no pattern can backtrack catastrophically --
``(a+)+$`` against 100,000 ``a`` followed by ``!`` takes milliseconds. RE2 has no back-references nor
look-around; such patterns are refused with one line saying so. Python's ``re`` is used only where
RE2 is not installed, behind a textual guard that refuses back-references and nested repeats.

Globs follow :func:`fnmatch.fnmatchcase` (``*``, ``?``, ``[seq]``, ``[!seq]``, whole-string match,
case-sensitive) but are translated here for RE2 (Python's translation uses look-ahead).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

try:  # pragma: no cover - exercised where the dependency is missing
    import re2 as _re2
except ImportError:  # pragma: no cover
    _re2 = None

#: longest pattern accepted (patterns are written by people)
MAX_PATTERN_CHARS = 1000
#: memory RE2 may use for one compiled pattern (its default is 8 MiB)
MAX_PROGRAM_BYTES = 8 << 20


class PatternError(ValueError):
    """A user pattern is invalid or not allowed; ``str(err)`` is one line. ``unsafe`` marks patterns
    refused for their cost rather than their syntax."""

    def __init__(self, message: str, hint: str | None = None, *, unsafe: bool = False) -> None:
        super().__init__(message)
        self.hint = hint
        self.unsafe = unsafe


@dataclass(frozen=True)
class UserPattern:
    """A compiled user pattern: ``search(text)`` (anywhere) and ``fullmatch(text)``."""

    source: str
    _compiled: Any

    @property
    def compiled(self) -> Any:
        """The engine's compiled pattern (``search`` returning a match object with ``groupdict``)."""
        return self._compiled

    def search(self, text: str) -> bool:
        return self._run(self._compiled.search, text)

    @staticmethod
    def _run(fn: Any, text: str) -> bool:
        try:
            return fn(text) is not None
        except UnicodeEncodeError:  # lone surrogates (undecodable bytes in a trace): RE2 needs UTF-8
            return fn(_clean(text)) is not None


def _clean(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")


def _options() -> Any:
    assert _re2 is not None
    opts = _re2.Options()
    opts.log_errors = False  # RE2 would print parse errors on stderr itself
    opts.max_mem = MAX_PROGRAM_BYTES
    return opts


def compile_regex(pattern: str, *, what: str = "regex") -> UserPattern:
    """Compile a user regex for linear-time matching; :class:`PatternError` when invalid."""
    if not isinstance(pattern, str):
        raise PatternError(f"{what} must be text, not {type(pattern).__name__}")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"{what} is {len(pattern)} characters, over the limit of {MAX_PATTERN_CHARS}",
                           unsafe=True)
    if re.search(r"\\[1-9]|\(\?P=", pattern):
        raise PatternError(f"back-references are not allowed in a {what} (matching must stay linear-time)",
                           unsafe=True)
    if _re2 is None:  # pragma: no cover
        _guard_backtracking(pattern, what)
        try:
            return UserPattern(pattern, re.compile(pattern))
        except (re.error, RecursionError, OverflowError) as err:
            raise PatternError(f"invalid {what} {pattern!r}: {err}") from None
    try:
        compiled = _re2.compile(pattern, _options())
    except (_re2.error, TypeError, ValueError, UnicodeError) as err:
        detail = err.args[0] if err.args else err
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        hint = None
        if "perl operator" in str(detail) or "escape sequence" in str(detail):
            hint = "look-around and back-references are not supported (RE2 syntax)"
        elif "pattern too large" in str(detail):
            hint = "simplify it: fewer or smaller counted repeats"
        raise PatternError(f"invalid {what} {pattern!r}: {detail}", hint) from None
    return UserPattern(pattern, compiled)


def glob_to_regex(glob: str) -> str:
    """An RE2 regex (anchored, ``.`` matching newlines) equal to :func:`fnmatch.fnmatchcase`'s ``glob``."""
    out: list[str] = []
    i, n = 0, len(glob)
    while i < n:
        c = glob[i]
        i += 1
        if c == "*":
            if not out or out[-1] != ".*":  # runs of * are one *
                out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            j = i
            if j < n and glob[j] == "!":
                j += 1
            if j < n and glob[j] == "]":
                j += 1
            while j < n and glob[j] != "]":
                j += 1
            if j >= n:
                out.append("\\[")
                continue
            body = glob[i:j]
            i = j + 1
            negate = body.startswith("!")
            if negate:
                body = body[1:]
            items = []
            k = 0
            while k < len(body):  # ranges a-z stay ranges; anything else is a literal
                if k + 2 < len(body) and body[k + 1] == "-":
                    lo, hi = body[k], body[k + 2]
                    if lo <= hi:
                        items.append(f"{_class_char(lo)}-{_class_char(hi)}")
                    k += 3
                else:
                    items.append(_class_char(body[k]))
                    k += 1
            if not items:
                out.append("." if negate else "[^\\x00-\\x{10FFFF}]")  # as fnmatch: [z-a] never matches
            else:
                out.append(("[^" if negate else "[") + "".join(items) + "]")
        else:
            out.append(_escape(c))
    return "(?s)^" + "".join(out) + "$"


def _escape(c: str) -> str:
    return c if c.isalnum() or c == "_" else f"\\x{{{ord(c):x}}}"


def _class_char(c: str) -> str:
    return f"\\x{{{ord(c):x}}}"


def compile_glob(glob: str, *, what: str = "glob") -> UserPattern:
    """A glob as a linear-time pattern; ``search`` (and ``fullmatch``) test the whole text."""
    if not isinstance(glob, str):
        raise PatternError(f"{what} must be text, not {type(glob).__name__}")
    if len(glob) > MAX_PATTERN_CHARS:
        raise PatternError(f"{what} is {len(glob)} characters, over the limit of {MAX_PATTERN_CHARS}",
                           unsafe=True)
    if _re2 is None:  # pragma: no cover - Python's fnmatch translation avoids backtracking itself
        import fnmatch

        return UserPattern(glob, re.compile(fnmatch.translate(glob)))
    return compile_regex(glob_to_regex(glob), what=what)


def _guard_backtracking(pattern: str, what: str) -> None:  # pragma: no cover - fallback only
    """Refuse a repeated group that itself contains a repeat or an alternation (``(a+)+``, ``(a|aa)*``)."""
    stack = [[False]]
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":
            j = i + 1
            if j < len(pattern) and pattern[j] == "^":
                j += 1
            if j < len(pattern) and pattern[j] == "]":
                j += 1
            while j < len(pattern) and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            i = j + 1
            continue
        if ch == "(":
            stack.append([False])
        elif ch == ")" and len(stack) > 1:
            inner = stack.pop()[0]
            repeated = i + 1 < len(pattern) and pattern[i + 1] in "*+{"
            if inner and repeated:
                raise PatternError(
                    f"{what} {pattern!r} repeats a group that contains a repeat or alternation "
                    "(catastrophic backtracking without RE2)",
                    "install google-re2, or rewrite it without nested repeats, e.g. (ab)+ instead of (a+b)+",
                    unsafe=True)
            stack[-1][0] = stack[-1][0] or inner or repeated
        elif ch in "*+{|":
            stack[-1][0] = True
        i += 1
