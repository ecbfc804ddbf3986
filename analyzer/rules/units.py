"""Units for rule parameters and expression literals.

Every quantity is normalized on the way in so that expressions compare like with like:

==========  ===========================================  ======================
unit        accepted spellings                           stored as
==========  ===========================================  ======================
duration    ``250ns``, ``10us``, ``1.5ms``, ``2s``, ``0``    nanoseconds (float)
percent     ``50%``, or a plain fraction ``0.5``           fraction (``0.5``)
bytes       ``512``, ``64KiB``, ``4MB``, ``1GiB``            bytes (float)
number      ``3``, ``0.25``, ``1e6``                        float
count       ``3``                                           int (>= 0)
text        any string (a regex for ``matches``)            str
==========  ===========================================  ======================
"""
from __future__ import annotations

import math
import re

DURATION_UNITS: dict[str, float] = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
BYTE_UNITS: dict[str, float] = {
    "B": 1.0,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "KiB": 1024.0,
    "MiB": 1024.0**2,
    "GiB": 1024.0**3,
    "TiB": 1024.0**4,
}
UNITS: tuple[str, ...] = ("duration", "percent", "bytes", "number", "count", "text")

_NUMBER = r"[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?"
_QUANTITY = re.compile(rf"^\s*(?P<num>[+-]?(?:{_NUMBER}))\s*(?P<suffix>[A-Za-zµ%]*)\s*$")
_EXAMPLES = {
    "duration": "e.g. 500us, 2ms or 1s",
    "percent": "e.g. 25% (or the fraction 0.25)",
    "bytes": "e.g. 4096, 64KiB or 1MB",
    "number": "e.g. 3 or 0.5",
    "count": "e.g. 3",
    "text": "a string",
}


class UnitError(ValueError):
    """A value does not fit its unit; ``str()`` says what to write instead."""


def parse_quantity(value: object, unit: str) -> float | int | str:
    """Normalize ``value`` (a YAML scalar or ``--set`` text) to the base of ``unit``."""
    if unit not in UNITS:
        raise UnitError(f"unknown unit {unit!r}; use one of {', '.join(UNITS)}")
    if unit == "text":
        if not isinstance(value, str):
            raise UnitError(f"expected text, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UnitError(f"expected a {unit} ({_EXAMPLES[unit]}), got {value!r}")
    shown = value if not isinstance(value, (int, str)) or len(str(value)) <= 40 else f"{str(value)[:20]}..."
    try:
        if isinstance(value, (int, float)):
            number, suffix = float(value), ""
        else:
            match = _QUANTITY.match(value)
            if not match:
                raise UnitError(f"cannot read {shown!r} as a {unit} ({_EXAMPLES[unit]})")
            number, suffix = float(match["num"]), match["suffix"]
    except OverflowError:  # an integer past float's range (10**400)
        raise UnitError(f"{shown!r} is not a finite number") from None
    if not math.isfinite(number):
        raise UnitError(f"{shown!r} is not a finite number")
    if unit == "duration":
        if suffix == "" and number == 0:
            return 0.0
        if suffix not in DURATION_UNITS:
            raise UnitError(f"{value!r} needs a time unit (ns, us, ms, s), {_EXAMPLES[unit]}")
        return number * DURATION_UNITS[suffix]
    if unit == "percent":
        if suffix == "%":
            return number / 100.0
        if suffix == "" and 0.0 <= number <= 1.0:
            return number
        raise UnitError(f"cannot read {value!r} as a percent; write it with %, {_EXAMPLES[unit]}")
    if unit == "bytes":
        if suffix == "":
            return number
        if suffix not in BYTE_UNITS:
            raise UnitError(f"unknown byte unit {suffix!r} in {value!r}; use B, KB, KiB, MB, MiB, GB or GiB")
        return number * BYTE_UNITS[suffix]
    if suffix:
        raise UnitError(f"{value!r} has a unit suffix but the parameter is a plain {unit}")
    if unit == "count":
        if number < 0 or number != int(number):
            raise UnitError(f"{value!r} is not a whole number >= 0")
        return int(number)
    return number


def literal_value(number: str, suffix: str) -> float:
    """Value of an expression literal such as ``1ms``, ``64KiB`` or ``50%`` (suffix already checked)."""
    if suffix == "%":
        return float(number) / 100.0
    if suffix in DURATION_UNITS:
        return float(number) * DURATION_UNITS[suffix]
    return float(number) * BYTE_UNITS[suffix]


def format_quantity(value: float | str, unit: str) -> str:
    """Human form of a normalized value (used by docs and ``rules explain``)."""
    if unit == "text" or isinstance(value, str):
        return str(value)
    if unit == "duration":
        for suffix, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
            if abs(value) >= scale:
                return f"{_trim(value / scale)}{suffix}"
        return f"{_trim(value)}ns" if value else "0"
    if unit == "percent":
        return f"{_trim(value * 100.0)}%"
    if unit == "bytes":
        for suffix in ("GiB", "MiB", "KiB"):
            scale = BYTE_UNITS[suffix]
            if abs(value) >= scale and value % scale == 0:
                return f"{_trim(value / scale)}{suffix}"
        for suffix in ("GB", "MB", "KB"):
            scale = BYTE_UNITS[suffix]
            if abs(value) >= scale:
                return f"{_trim(value / scale)}{suffix}"
        return f"{_trim(value)}B"
    return _trim(float(value))


def _trim(number: float) -> str:
    return f"{number:.6g}"
