"""Decoded events as numpy columns: exact nanosecond timestamps from the JSON text, integers, floats,
texts and dims from JSON scalars, the collective columns c10d records, and what Kineto's copy and
memset names say (direction and memory kinds).
"""
from __future__ import annotations

import decimal
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from analyzer.loading.kineto.document import Event

_MEMCPY_NAME = re.compile(r"^Memcpy\s+(?P<kind>\w+)(?:\s*\((?P<src>[^)>]*?)\s*->\s*(?P<dst>[^)]*?)\))?")


_MEMSET_NAME = re.compile(r"^Memset\s*\((?P<kind>[^)]*)\)")


_DIRECTIONS = {"htod": "H2D", "htoa": "H2D", "dtoh": "D2H", "atoh": "D2H", "dtod": "D2D", "atoa": "D2D",
               "atod": "D2D", "dtoa": "D2D", "htoh": "H2H", "ptop": "P2P"}


_MEM_KINDS = {"pageable": "pageable", "pinned": "pinned", "device": "device", "device static": "device",
              "array": "array", "managed": "managed", "managed static": "managed"}


_STREAM_TID = re.compile(r"(\d+)\s*$")


def parse_timestamps_ns(raws: Sequence[bytes | msgspec.Raw]) -> np.ndarray:
    """Exact integer nanoseconds from JSON numbers in microseconds (``"1712195495519695.812"``,
    ``"1623142623460111"``, ``"4.5e3"``); missing or non-numeric values are ``-1``. Digits beyond the
    nanosecond are dropped.

    Vectorised: the texts are sorted by length and joined, so the numbers of one length form one byte
    matrix; where every row has its decimal point in the same column, the value accumulates column by
    column. Anything else (signs, exponents, mixed layouts, 9e15 us or more) goes through ``Decimal``
    one by one; torch.profiler never writes those."""
    n = len(raws)
    out = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return out
    lens = np.fromiter(map(len, raws), dtype=np.int64, count=n)
    order = np.argsort(lens, kind="stable")
    sorted_lens = lens[order]
    buf = np.frombuffer(b"".join([raws[i] for i in order.tolist()]), dtype=np.uint8)
    cuts = [0, *(np.flatnonzero(np.diff(sorted_lens)) + 1).tolist(), n]
    slow: list[int] = []
    pos = 0
    for a, b in itertools.pairwise(cuts):
        length = int(sorted_lens[a])
        k = b - a
        rows = order[a:b]
        m = buf[pos:pos + k * length].reshape(k, length)
        pos += k * length
        if length == 0:
            continue
        is_dot = m == 46
        dot_cols = np.flatnonzero(is_dot.any(axis=0))
        col = int(dot_cols[0]) if len(dot_cols) else length
        if len(dot_cols) > 1 or col > 16 or (col == 16 and (m[:, 0] > 56).any()):  # int64 ns: < 9e15 us
            slow.extend(rows.tolist())
            continue
        digits = m - np.uint8(48)  # non-digits wrap to > 9
        valid = digits <= 9
        if col < length:
            valid[:, col] = is_dot[:, col]
        good = valid.all(axis=1)
        acc = np.zeros(k, dtype=np.int64)
        used = 0
        for j in range(min(length, col + 4)):
            if j == col:
                continue
            acc *= 10
            acc += digits[:, j]
            used += j > col
        acc *= 10 ** (3 - used)
        out[rows[good]] = acc[good]
        if not good.all():
            slow.extend(rows[~good].tolist())
    for i in slow:
        try:
            value = decimal.Decimal(bytes(raws[i]).decode("ascii")) * 1000
        except (ValueError, ArithmeticError, UnicodeDecodeError):
            continue
        if value.is_finite() and abs(value) < 2**63:
            out[i] = int(value)
    return out


def ints(values: Sequence[Any], default: int = -1) -> np.ndarray:
    """int64 from JSON scalars (ints, floats, numeric strings, ``"0x1f"``); anything else is ``default``."""
    n = len(values)
    try:
        return np.fromiter((default if v is None else v for v in values), dtype=np.int64, count=n)
    except (TypeError, ValueError, OverflowError):
        pass
    out = np.full(n, default, dtype=np.int64)
    for i, v in enumerate(values):
        out[i] = int_or(v, default)
    return out


def int_or(v: Any, default: int) -> int:
    if isinstance(v, bool) or v is None:
        return default
    if isinstance(v, int):
        return v if -(2**63) <= v < 2**63 else default
    if isinstance(v, float):
        return int(v) if np.isfinite(v) and abs(v) < 2**63 else default
    if isinstance(v, str):
        s = v.strip()
        try:
            return int(s, 16) if s.lower().startswith("0x") else int(float(s))
        except (ValueError, OverflowError):
            m = _STREAM_TID.search(s)  # "stream 7"
            return int(m.group(1)) if m else default
    return default


def floats(values: Sequence[Any]) -> np.ndarray:
    try:
        return np.fromiter((np.nan if v is None else v for v in values), dtype=np.float64, count=len(values))
    except (TypeError, ValueError):
        return pd.to_numeric(pd.Series(list(values), dtype=object), errors="coerce").to_numpy(dtype=np.float64)


def texts(values: Sequence[Any]) -> np.ndarray:
    """Object array of str (non-strings converted once per distinct value)."""
    arr = np.empty(len(values), dtype=object)
    arr[:] = [v if isinstance(v, str) else ("" if v is None else str(v)) for v in values]
    return arr


def dims(values: Sequence[Any]) -> np.ndarray:
    """(n, 3) int64 from ``[x, y, z]`` lists (missing: -1)."""
    try:
        arr = np.array([v if v is not None else (-1, -1, -1) for v in values], dtype=np.int64)
        if arr.shape == (len(values), 3):
            return arr
    except (TypeError, ValueError, OverflowError):
        pass
    out = np.full((len(values), 3), -1, dtype=np.int64)
    for i, v in enumerate(values):
        if isinstance(v, list) and len(v) == 3:
            out[i] = [int_or(x, -1) for x in v]
    return out


# bytes per element of each c10 ScalarType by the name c10d writes in a kernel's ``dtype``
_DTYPE_BYTES = {
    "Bool": 1, "Byte": 1, "Char": 1, "QInt8": 1, "QUInt8": 1, "QUInt4x2": 1, "QUInt2x4": 1,
    "Bits1x8": 1, "Bits2x4": 1, "Bits4x2": 1, "Bits8": 1, "Float8_e5m2": 1, "Float8_e4m3fn": 1,
    "Float8_e5m2fnuz": 1, "Float8_e4m3fnuz": 1, "Float8_e8m0fnu": 1, "Float4_e2m1fn_x2": 1,
    "Short": 2, "Half": 2, "BFloat16": 2, "UInt16": 2, "Bits16": 2,
    "Int": 4, "Float": 4, "QInt32": 4, "UInt32": 4, "ComplexHalf": 4,
    "Long": 8, "Double": 8, "UInt64": 8, "ComplexFloat": 8, "ComplexDouble": 16,
}


def comm_columns(g: EventGroup) -> dict[str, np.ndarray]:
    """The optional kernel columns ``comm_bytes`` and ``comm_group`` from what c10d records on a
    collective's NCCL kernel (``In msg nelems``, ``Out msg nelems``, ``dtype``, ``Process Group Name``);
    none when no kernel of the trace carries them (an older PyTorch, or no collective).

    ``comm_bytes`` is NCCL's message size, the one its NVTX payload states for nsys traces: the element
    count NCCL is called with times the element size. That count is the smaller of c10d's input and
    output counts (all-gather: the input, reduce-scatter: the output; equal for all-reduce, broadcast,
    send/recv); ``-1`` where unknown. ``comm_group``: the process group's name (``"0"`` for the default
    group; ``""`` unknown)."""
    groups, n_in = g.arg("pg_name"), g.arg("in_nelems")
    if all(v is None for v in groups) and all(v is None for v in n_in):
        return {}
    count_in, count_out = ints(n_in), ints(g.arg("out_nelems"))
    count = np.where((count_in >= 0) & (count_out >= 0), np.minimum(count_in, count_out),
                     np.maximum(count_in, count_out))
    codes, names = factorize(g.arg("dtype"))
    size = np.array([_DTYPE_BYTES.get(str(n), -1) for n in names], dtype=np.int64)[codes]
    known = (count >= 0) & (count < 2**56) & (size > 0)
    return {"comm_bytes": np.where(known, count * np.maximum(size, 0), -1),
            "comm_group": texts([v if isinstance(v, str | int) and not isinstance(v, bool) else None
                                  for v in groups])}


def factorize(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Codes and distinct values (as str) of a list of JSON scalars; a list or object where a scalar
    belongs (a damaged file) counts as missing."""
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    try:
        codes, uniq = pd.factorize(arr, use_na_sentinel=False)
    except TypeError:  # unhashable: a JSON list or object
        arr[:] = [None if isinstance(v, list | dict) else v for v in values]
        codes, uniq = pd.factorize(arr, use_na_sentinel=False)
    names = np.empty(len(uniq), dtype=object)
    names[:] = [u if isinstance(u, str) else ("" if u is None else str(u)) for u in uniq]
    return codes, names


def code_of(names: np.ndarray, value: str) -> int:
    hits = np.flatnonzero(names == value)
    return int(hits[0]) if len(hits) else -2


def per_distinct(values: np.ndarray, fn: Callable[[str], Any], dtype: Any = object) -> np.ndarray:
    """``fn`` applied once per distinct value, broadcast back."""
    if len(values) == 0:
        return np.empty(0, dtype=dtype)
    codes, uniq = pd.factorize(pd.Series(values, dtype=object), use_na_sentinel=False)
    table = np.empty(len(uniq), dtype=dtype)
    table[:] = [fn(u) for u in uniq]
    return table[codes]


def memcpy_info(name: str) -> tuple[str, str, str]:
    m = _MEMCPY_NAME.match(name)
    if not m:
        return "other", "unknown", "unknown"
    direction = _DIRECTIONS.get(m.group("kind").lower(), "other")
    src = _MEM_KINDS.get((m.group("src") or "").strip().lower(), "unknown")
    dst = _MEM_KINDS.get((m.group("dst") or "").strip().lower(), "unknown")
    return direction, src, dst


def memset_kind(name: str) -> str:
    m = _MEMSET_NAME.match(name)
    return _MEM_KINDS.get(m.group("kind").strip().lower(), "unknown") if m else "unknown"


@dataclass
class EventGroup:
    """The events of one kind with their times (ns, trace-relative once the origin is known)."""

    events: list[Event]
    start: np.ndarray
    dur: np.ndarray

    @property
    def end(self) -> np.ndarray:
        return self.start + self.dur

    def field(self, name: str) -> list[Any]:
        return list(map(attrgetter(name), self.events))

    def arg(self, name: str) -> list[Any]:
        return [None if a is None else getattr(a, name) for a in map(attrgetter("args"), self.events)]
