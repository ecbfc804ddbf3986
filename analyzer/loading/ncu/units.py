"""Units and values of ncu exports: every value converted to SI base units (percentages stay 0..100)."""
from __future__ import annotations

import re

import pandas as pd


# --------------------------------------------------------------------------------------------------
# Units and values
# --------------------------------------------------------------------------------------------------

_PREFIXES: dict[str, float] = {
    "": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
    "m": 1e-3, "u": 1e-6, "\u00b5": 1e-6, "\u03bc": 1e-6, "n": 1e-9, "p": 1e-12,
    "Ki": 1024.0, "Mi": 1024.0**2, "Gi": 1024.0**3, "Ti": 1024.0**4,
}
# Unit words that take an SI prefix -> their canonical base. Longest first when matching.
_BASES: dict[str, str] = {
    "second": "second", "sec": "second", "s": "second",
    "byte": "byte", "B": "byte",
    "hz": "hz", "Hz": "hz",
    "cycle": "cycle", "inst": "inst", "sector": "sector", "request": "request", "warp": "warp",
    "flop": "flop", "wavefront": "wavefront", "thread": "thread", "block": "block",
}
_BASES_BY_LENGTH = sorted(_BASES, key=len, reverse=True)


def _parse_unit_part(part: str) -> tuple[float, str]:
    part = part.strip()
    for base in _BASES_BY_LENGTH:
        if part.endswith(base):
            prefix = part[: -len(base)]
            if prefix in _PREFIXES:
                return _PREFIXES[prefix], _BASES[base]
    return 1.0, part


def parse_unit(unit: str | None) -> tuple[float, str]:
    """``(factor, base)`` such that ``value_in_unit * factor`` is in ``base``.

    ``"usecond" -> (1e-6, "second")``, ``"Gbyte/s" -> (1e9, "byte/second")``, ``"Ghz" -> (1e9, "hz")``,
    ``"cycle/nsecond" -> (1e9, "hz")``, ``"%" -> (1, "%")``; units without a known prefix pass through
    with factor 1 (``"register/thread"``, ``"block"``).
    """
    unit = (unit or "").strip()
    if not unit:
        return 1.0, ""
    if unit == "%":
        return 1.0, "%"
    parts = unit.split("/")
    factor, base = _parse_unit_part(parts[0])
    bases = [base]
    for part in parts[1:]:
        f, b = _parse_unit_part(part)
        factor /= f
        bases.append(b)
    canonical = "/".join(bases)
    if canonical == "cycle/second":
        canonical = "hz"
    return factor, canonical


_NUMBER_WITH_GROUPS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d*)?([eE][+-]?\d+)?$")


def parse_values(values: pd.Series, units: pd.Series | None = None) -> tuple[pd.Series, pd.Series]:
    """Vectorized: ncu value strings (``"13,485"``, ``"9,495.42"``, ``"n/a"``, ``""``) and their units ->
    ``(float values in SI base units, base unit strings)``. Unparseable values become NaN."""
    text = values.astype("string").str.strip()
    grouped = text.str.match(_NUMBER_WITH_GROUPS.pattern).fillna(False).astype(bool)
    text = text.where(~grouped, text.str.replace(",", "", regex=False))
    numbers = pd.to_numeric(text, errors="coerce").astype("float64")
    if units is None:
        return numbers, pd.Series("", index=values.index, dtype="object")
    unit_text = units.fillna("").astype(str)
    table = {u: parse_unit(u) for u in unit_text.unique()}
    factors = unit_text.map(lambda u: table[u][0]).astype("float64")
    bases = unit_text.map(lambda u: table[u][1]).astype("object")
    return numbers * factors, bases


