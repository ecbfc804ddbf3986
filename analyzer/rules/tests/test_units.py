from __future__ import annotations

import pytest

from analyzer.rules.expr import rewrite_units
from analyzer.rules.units import UnitError, format_quantity, parse_quantity

GOOD = [
    ("1ms", "duration", 1_000_000),
    ("250ns", "duration", 250),
    ("10us", "duration", 10_000),
    ("1.5 s", "duration", 1_500_000_000),
    (0, "duration", 0),
    ("10%", "percent", 0.10),
    ("150%", "percent", 1.5),
    (0.25, "percent", 0.25),
    ("64KiB", "bytes", 65536),
    ("4MB", "bytes", 4_000_000),
    ("1GiB", "bytes", 1024**3),
    (4096, "bytes", 4096),
    ("3", "count", 3),
    (2.5, "number", 2.5),
    ("1e6", "number", 1e6),
    ("gemm|conv", "text", "gemm|conv"),
]


@pytest.mark.parametrize(("value", "unit", "expected"), GOOD, ids=[f"{v}-{u}" for v, u, _ in GOOD])
def test_parse_quantity(value, unit, expected):
    assert parse_quantity(value, unit) == pytest.approx(expected)


BAD = [
    ("2", "duration", "needs a time unit"),
    (5, "duration", "needs a time unit"),
    ("2 minutes", "duration", "needs a time unit"),
    ("2hz", "duration", "needs a time unit"),
    ("50", "percent", "write it with %"),
    ("64Kb", "bytes", "unknown byte unit"),
    ("1ms", "number", "unit suffix"),
    ("2.5", "count", "whole number"),
    (True, "number", "expected a number"),
    ("nan", "number", "cannot read"),
    ("1", "speed", "unknown unit"),
    (3, "text", "expected text"),
]


@pytest.mark.parametrize(("value", "unit", "message"), BAD, ids=[f"{v}-{u}" for v, u, _ in BAD])
def test_parse_quantity_rejects(value, unit, message):
    with pytest.raises(UnitError, match=message):
        parse_quantity(value, unit)


@pytest.mark.parametrize(("value", "unit", "text"), [
    (1_000_000, "duration", "1ms"), (2.5e9, "duration", "2.5s"), (0.1, "percent", "10%"),
    (65536, "bytes", "64KiB"), (3, "count", "3"),
])
def test_format_quantity(value, unit, text):
    assert format_quantity(value, unit) == text


REWRITES = [
    ("duration >= 1ms", "duration >= 1000000.0"),
    ("bytes <= 64KiB", "bytes <= 65536.0"),
    ("share > 50%", "share > 0.5"),
    ("share > 50% and x", "share > 0.5 and x"),
    ("min(share, 50%)", "min(share, 0.5)"),
    ("x % 2 == 0", "x % 2 == 0"),
    ("50 % 3", "50 % 3"),
    ("50%3", "50%3"),
    ("10%x", "10%x"),
    ('matches(name, "1ms|50%")', 'matches(name, "1ms|50%")'),
    ("x1ms + 2", "x1ms + 2"),
    ("1.5us", "1500.0"),
]


@pytest.mark.parametrize(("source", "expected"), REWRITES, ids=[s for s, _ in REWRITES])
def test_rewrite_units(source, expected):
    assert rewrite_units(source) == expected
