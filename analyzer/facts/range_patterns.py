"""NVTX range patterns as the user writes them (``--exclude-ranges``, ``--only-ranges``, the window's
``--window 'step_*'``): parsed and checked before any trace is read. No pandas here: the command line
imports this module to build its options (:mod:`analyzer.phases.cli`)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from analyzer.errors import ParameterError
from analyzer.saferegex import PatternError, UserPattern, compile_glob, compile_regex

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

#: Ranges excluded by default: the ``warmup`` range and everything nested inside it.
DEFAULT_EXCLUDE: tuple[str, ...] = ("warmup*",)
_REGEX_PREFIXES = ("re:", "regex:")


@dataclass(frozen=True)
class RangePattern:
    """A range selector as the user wrote it.

    A glob (``fnmatch`` syntax, case-sensitive) unless prefixed ``re:`` or ``regex:`` (RE2 syntax,
    searched). A pattern containing ``/`` is matched against the range's path (``step_3/forward``),
    otherwise against its name. Globs must match the whole name; regexes may match anywhere (anchor
    with ``^$``). Both run in linear time (:mod:`analyzer.saferegex`).
    """

    raw: str
    regex: UserPattern
    on_path: bool

    @classmethod
    def parse(cls, raw: str) -> RangePattern:
        if not isinstance(raw, str) or not raw.strip():
            raise ParameterError(f"empty NVTX range pattern {raw!r}",
                                 hint="give a glob like 'warmup*' or a regex like 're:^step_\\d+$'")
        text = raw.strip()
        for prefix in _REGEX_PREFIXES:
            if text.startswith(prefix):
                body = text[len(prefix):]
                try:
                    regex = compile_regex(body, what="NVTX range regex")
                except PatternError as err:
                    raise ParameterError(str(err), hint=err.hint) from None
                return cls(raw=text, regex=regex, on_path="/" in body)
        try:
            return cls(raw=text, regex=compile_glob(text, what="NVTX range glob"), on_path="/" in text)
        except PatternError as err:
            raise ParameterError(str(err), hint=err.hint) from None

    def mask(self, names: pd.Series, paths: pd.Series) -> np.ndarray:
        target = paths if self.on_path else names
        return target.astype(object).map(lambda s: self.regex.search(str(s))).to_numpy(bool)


def parse_patterns(patterns: str | Iterable[str] | None) -> tuple[RangePattern, ...]:
    """``None``/empty -> no pattern; a string -> one pattern; an iterable -> several."""
    if patterns is None:
        return ()
    if isinstance(patterns, str):
        patterns = (patterns,)
    return tuple(RangePattern.parse(p) for p in patterns)


#: ``--exclude-ranges none`` (or ``''``) excludes nothing
NO_EXCLUDE = "none"


def exclude_option(values: str | Iterable[str] | None) -> tuple[str, ...]:
    """The one meaning of ``--exclude-ranges`` (``analyze``, ``analyze diff``, ``analyze sweep``, the Python
    API): NVTX range patterns (:class:`RangePattern`: a glob on the name, or on the path when it holds a
    ``/``; ``re:REGEX`` searched), repeated or comma-separated (a regex is taken whole); ``''`` or
    ``none`` excludes nothing; None: the default ``warmup*``. Every pattern is checked here, so a bad one
    fails before any trace is read (:class:`~analyzer.errors.ParameterError`). The window chooser and
    the phase tables both leave out the matching ranges and everything nested in them."""
    if values is None:
        return DEFAULT_EXCLUDE
    items = [values] if isinstance(values, str) else list(values)
    out: list[str] = []
    for item in items:
        parts = [item] if item.strip().startswith(_REGEX_PREFIXES) else item.split(",")
        out += [p.strip() for p in parts if p.strip()]
    if any(p.lower() == NO_EXCLUDE for p in out):
        return ()
    parse_patterns(out)
    return tuple(out)
