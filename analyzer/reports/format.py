"""Explicit, locale-free number formatting shared by the HTML and Markdown renderings.

Every number a report shows goes through one of these functions, so the same view model always gives
the same bytes (no ``repr`` of floats, no locale, no platform differences).
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from analyzer.errors import truncate  # one implementation: messages cut the values they quote with it too

DASH = "\u2014"  # shown for unknown values


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    return is_number(value) and math.isfinite(float(value))


def fmt_int(value: Any) -> str:
    """``1234567`` -> ``1,234,567``."""
    if not _finite(value):
        return DASH
    return f"{round(float(value)):,}"


def fmt_ms(ns: Any) -> str:
    """Nanoseconds as milliseconds with a precision that suits the magnitude: ``412 ms``, ``3.25 ms``."""
    if not _finite(ns):
        return DASH
    ms = float(ns) / 1e6
    mag = abs(ms)
    if mag >= 100:
        text = f"{ms:,.0f}"
    elif mag >= 10:
        text = f"{ms:,.1f}"
    elif mag >= 1:
        text = f"{ms:,.2f}"
    elif mag == 0:
        text = "0"
    else:
        text = f"{ms:,.3f}"
    return f"{text} ms"


def fmt_duration(ns: Any) -> str:
    """Nanoseconds in the unit that reads best: ``850 ns``, ``12.3 µs``, ``41.2 ms``, ``1.234 s``."""
    if not _finite(ns):
        return DASH
    value = float(ns)
    mag = abs(value)
    if mag < 1e3:
        return f"{value:,.0f} ns"
    if mag < 1e6:
        return f"{value / 1e3:,.1f} \u00b5s"
    if mag < 1e9:
        ms = value / 1e6
        return f"{ms:,.1f} ms" if abs(ms) >= 10 else f"{ms:,.2f} ms"
    return f"{value / 1e9:,.3f} s"


def fmt_time(ns: Any) -> str:
    """A trace-relative timestamp in seconds: ``12.345678 s``."""
    if not _finite(ns):
        return DASH
    return f"{float(ns) / 1e9:,.6f} s"


def fmt_impact_pct(pct: Any) -> str:
    """A finding's or the verdict's share of the window (already x100), one decimal everywhere it is
    shown (findings table, terminal, verdict): ``54.1%``, ``0.3%``."""
    if not _finite(pct):
        return DASH
    return f"{float(pct):.1f}%"


def fmt_pct(pct: Any) -> str:
    """A percentage (already x100): ``38%``, ``4.2%``, ``0.31%``."""
    if not _finite(pct):
        return DASH
    value = float(pct)
    mag = abs(value)
    if round(mag, 1) >= 10 or mag == 0:
        return f"{value:.0f}%"
    if round(mag, 2) >= 1:
        return f"{value:.1f}%"
    return f"{value:.2f}%"


def fmt_share(share: Any) -> str:
    """A fraction 0..1 as a percentage."""
    if not _finite(share):
        return DASH
    return fmt_pct(float(share) * 100.0)


def fmt_float(value: Any, digits: int = 4) -> str:
    """A float with ``digits`` significant digits, no exponent for usual magnitudes."""
    if not _finite(value):
        return DASH
    v = float(value)
    if v == 0:
        return "0"
    if 1e-3 <= abs(v) < 1e15:
        decimals = max(0, digits - 1 - math.floor(math.log10(abs(v))))
        text = f"{v:,.{decimals}f}"
        if "." in text:
            text = text.rstrip("0").rstrip(".")
        return text
    return f"{v:.{digits - 1}e}"


_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def fmt_si(value: Any, unit: str) -> str:
    """``1.5e12, "FLOP/s"`` -> ``1.50 TFLOP/s``."""
    if not _finite(value):
        return DASH
    v = float(value)
    for scale, prefix in _SI:
        if abs(v) >= scale:
            return f"{v / scale:.3g} {prefix}{unit}"
    return f"{v:.3g} {unit}"


def fmt_bytes(value: Any) -> str:
    """Binary units: ``64.0 KiB``, ``1.50 GiB``."""
    if not _finite(value):
        return DASH
    v = float(value)
    for scale, prefix in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {prefix}"
    return f"{int(v)} B"


def fmt_auto(value: Any) -> str:
    """Anything: integers with separators, floats with 4 significant digits, text as is."""
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return fmt_float(value)
    return str(value)


def fmt_cell(value: Any, kind: str) -> str:
    """Format one table cell by its column kind (see :class:`analyzer.reports.viewmodel.Column`)."""
    if value is None:
        return DASH
    if kind in ("text", "code"):
        return str(value)
    if not is_number(value):
        return fmt_auto(value)
    formatter = {
        "ns": fmt_duration,
        "ms": fmt_ms,
        "time": fmt_time,
        "pct": fmt_pct,
        "share": fmt_share,
        "ratio": lambda v: f"{fmt_float(v, 3)}x",
        "int": fmt_int,
        "bytes": fmt_bytes,
        "flops": lambda v: fmt_si(v, "FLOP/s"),
        "bandwidth": lambda v: fmt_si(v, "B/s"),
        "intensity": lambda v: f"{fmt_float(v, 3)} FLOP/B",
        "float": fmt_float,
    }.get(kind, fmt_auto)
    return formatter(value)


def plural(n: int, word: str, plural_word: str | None = None) -> str:
    """``plural(1, "problem")`` -> ``1 problem``; ``plural(3, "problem")`` -> ``3 problems``."""
    return f"{n:,} {word if n == 1 else (plural_word or word + 's')}"


#: the longest text a report holds in one place (a kernel or NVTX name in a verdict, a finding's
#: headline, message, scope or evidence, a table cell): real kernel names run to a few thousand
#: characters, rule prose under 1,000; a damaged trace's 10 MB name must not make a 60 MB report
MAX_TEXT_CHARS = 4000


#: C0 and C1 control characters but tab and newline, and the bidirectional overrides and isolates. In a
#: trace's kernel or range names they would drive the terminal that shows the summary or a report
#: (ESC sequences clear the screen, set the window title, recolour what follows) or reorder the text a
#: reviewer reads (Trojan Source); every format shows each as U+FFFD instead.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def inert_text(text: str) -> str:
    """``text`` with every control character (:data:`_CONTROLS`) shown as U+FFFD; ``text`` itself when
    it has none."""
    return _CONTROLS.sub("\ufffd", text) if _CONTROLS.search(text) else text


def inert_output(value: Any) -> Any:
    """Jinja's ``finalize`` for the HTML reports: every string an expression prints (``Markup`` too: it
    stays markup) with its control characters made inert, whatever the view model it came from."""
    if isinstance(value, str) and _CONTROLS.search(value):
        return type(value)(_CONTROLS.sub("\ufffd", value))
    return value


def cap_text(obj: Any, limit: int = MAX_TEXT_CHARS) -> Any:
    """``obj`` with every string longer than ``limit`` cut (:func:`truncate`) and its control characters
    made inert (:func:`inert_text`), through dataclasses, tuples, lists and dicts (keys too); the same
    object when nothing changed. Every output format is rendered from the capped report, so both hold in
    HTML, JSON, Markdown and the terminal alike. Text already marked safe (``Markup``: charts, the
    stylesheet) is left whole: cutting it would cut its markup."""
    from markupsafe import Markup

    def cap(s: str) -> str:
        if isinstance(s, Markup):
            return s
        s = inert_text(s)
        return s if len(s) <= limit else truncate(s, limit)

    return map_text(obj, cap)


def map_text(obj: Any, change: Callable[[str], str], visit: Callable[[Any], Any] | None = None) -> Any:
    """``obj`` with ``change`` applied to every string in it, through dataclasses, tuples, lists and dicts
    (keys too); the same object where nothing changed. ``visit(x)``, when given, is asked first for every
    dataclass ``x``: a value it returns (not None) replaces ``x`` whole (its own fields are not walked)."""
    import dataclasses

    if isinstance(obj, str):
        return change(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if visit is not None:
            instead = visit(obj)
            if instead is not None:
                return instead
        changes = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            mapped = map_text(value, change, visit)
            if mapped is not value:
                changes[f.name] = mapped
        return dataclasses.replace(obj, **changes) if changes else obj
    if type(obj) in (tuple, list):
        items = [map_text(v, change, visit) for v in obj]
        return obj if all(a is b for a, b in zip(items, obj)) else type(obj)(items)
    if type(obj) is dict:
        pairs = [(map_text(k, change, visit), map_text(v, change, visit)) for k, v in obj.items()]
        same = all(k2 is k and v2 is v for (k2, v2), (k, v) in zip(pairs, obj.items()))
        return obj if same else dict(pairs)
    return obj
