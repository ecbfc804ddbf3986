"""Cell values of an export decoded: ``StringIds`` as one id-indexed array, enum codes as labels,
integer cells checked against what hardware and clocks can hold, nsys global ids split into OS pid
and tid.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from analyzer.errors import InputError
from analyzer.loading.columns import TextCodes
from analyzer.loading.sqlite_reader import SqliteReader


class StringTable:
    """``StringIds`` as an id-indexed object array; lookups are one vectorized ``take``."""

    def __init__(self, reader: SqliteReader) -> None:
        rows = reader.query("SELECT id, value FROM StringIds") if reader.has("StringIds") else []
        try:
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        except (TypeError, ValueError, OverflowError) as exc:
            raise InputError(reader.path, f"StringIds holds a non-integer id ({exc})",
                             hint="the export is damaged; export it again") from None
        if len(ids) and (ids < 0).any():
            keep = ids >= 0
            rows = [r for r, k in zip(rows, keep) if k]
            ids = ids[keep]
        # nsys numbers strings 0..n-1; ids far beyond the row count (a damaged export) would make the
        # id-indexed table huge, so such a table is indexed by the sorted ids instead
        self._remap: np.ndarray | None = None
        if len(ids) and int(ids.max()) > 4 * len(ids) + (1 << 20):
            order = np.argsort(ids, kind="stable")
            self._remap = ids[order]
            rows = [rows[i] for i in order.tolist()]
            ids = np.arange(len(ids), dtype=np.int64)
        size = int(ids.max()) + 2 if len(ids) else 1
        self._values = np.full(size, "", dtype=object)
        if len(ids):
            self._values[ids] = [r[1] if isinstance(r[1], str) else "" for r in rows]
        self._default = size - 1  # always ""
        self._empty: np.ndarray | None = None

    def _dense(self, ids: np.ndarray) -> np.ndarray:
        """``ids`` as indexes of ``_values`` (-1 where unknown) when the table is remapped."""
        if self._remap is None:
            return ids
        pos = np.searchsorted(self._remap, ids)
        found = pos < len(self._remap)
        found[found] = self._remap[pos[found]] == ids[found]
        return np.where(found, pos, -1)

    def _safe(self, ids: np.ndarray) -> np.ndarray:
        """``ids`` with -1/NULL and unknown ids replaced by the index of ``""`` (``ids`` itself when every
        id is known: one min/max pass)."""
        size = len(self._values)
        if not len(ids) or (int(ids.min()) >= 0 and int(ids.max()) < size):
            return ids
        return np.where((ids < 0) | (ids >= size), self._default, ids)

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Text for each id (``""`` for -1/NULL or unknown ids)."""
        return self._values[self._safe(self._dense(ids))]

    def codes(self, ids: np.ndarray, fn: Callable[[str], str] | None = None) -> TextCodes:
        """The text of each id as :class:`TextCodes` over the distinct ids used (``fn`` applied once
        per distinct id, e.g. API suffix stripping); no per-row string is touched."""
        size = len(self._values)
        safe = self._safe(self._dense(ids))
        present = np.zeros(size, dtype=bool)
        present[safe] = True
        used = np.flatnonzero(present)
        labels = self._values[used]
        if fn is not None:
            labels = np.array([fn(t) for t in labels], dtype=object)
        dense = np.full(size, -1, dtype=np.int32)
        dense[used] = np.arange(len(used), dtype=np.int32)
        return TextCodes(dense[safe], labels)

    def is_empty(self, ids: np.ndarray) -> np.ndarray:
        """Per id: its text is ``""`` (or the id is -1/NULL/unknown)."""
        if self._empty is None:
            self._empty = self._values == ""
        return self._empty[self._safe(self._dense(ids))]

    def mapped(self, ids: np.ndarray, fn: Callable[[str], str]) -> np.ndarray:
        """``fn`` applied once per distinct id, then broadcast (e.g. API suffix stripping)."""
        size = len(self._values)
        safe = self._safe(self._dense(ids))
        present = np.zeros(size, dtype=bool)
        present[safe] = True
        table = np.full(size, "", dtype=object)
        used = np.flatnonzero(present)
        table[used] = [fn(t) for t in self._values[used]]
        return table[safe]


def enum_names(reader: SqliteReader, table: str, fallback: dict[int, str]) -> dict[int, str]:
    if reader.has(table) and {"id", "name"} <= set(reader.columns(table)):
        rows = reader.query(f'SELECT id, name FROM "{reader.table(table)}"')
        mapping = {k: str(n) for k, n in ((int_or_none(i), n) for i, n in rows) if k is not None}
        if mapping:  # NULL or text ids name no value
            return mapping
    return dict(fallback)


def map_codes(codes: np.ndarray, mapping: dict[int, str], default: str) -> np.ndarray:
    """Vectorized int -> label via a small lookup table (object array)."""
    if len(codes) == 0:
        return np.empty(0, dtype=object)
    lo, hi = int(codes.min()), int(codes.max())
    if 0 <= lo and hi < 4096:  # small enum codes: a direct table, no sort
        table = np.empty(hi + 1, dtype=object)
        table[:] = [mapping.get(i, default) for i in range(hi + 1)]
        return table[codes]
    uniq, inv = np.unique(codes, return_inverse=True)
    labels = np.empty(len(uniq), dtype=object)
    labels[:] = [mapping.get(int(u), default) for u in uniq]
    return labels[inv.reshape(-1)]


def direction_label(enum_name: str) -> str:
    n = enum_name.upper()
    if "PTOP" in n:
        return "P2P"
    for key, label in (("HTOD", "H2D"), ("HTOA", "H2D"), ("DTOH", "D2H"), ("ATOH", "D2H"),
                       ("DTOD", "D2D"), ("ATOA", "D2D"), ("ATOD", "D2D"), ("DTOA", "D2D"),
                       ("HTOH", "H2H")):
        if n.endswith(key):
            return label
    return "other"


def memkind_label(enum_name: str) -> str:
    n = enum_name.upper()
    for key, label in (("PAGEABLE", "pageable"), ("PINNED", "pinned"), ("MANAGED", "managed"),
                       ("ARRAY", "array"), ("DEVICE", "device")):
        if key in n:
            return label
    return "unknown"


def memory_kind_label(enum_name: str) -> str:
    """A memory kind of the memory frame: as copies name them, with static device memory (module
    globals, ``__device__`` variables) told apart."""
    n = enum_name.upper()
    if "STATIC" in n and "DEVICE" in n:
        return "device_static"
    return memkind_label(n)


def sync_label(enum_name: str) -> str:
    n = enum_name.upper()
    label = n.removeprefix("CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_")
    return label.lower() or "unknown"


_PROPERTY_MAX = 1 << 53


def int_or_none(value: Any, limit: int = _PROPERTY_MAX) -> int | None:
    """An integer cell as int; None for NULL, text that is no integer, blobs, NaN and magnitudes beyond
    ``limit`` (2^53 for ids and properties; :data:`analyzer.loading.model.TIME_MAX` for timestamps)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            return None
    if isinstance(value, float):
        if not value == value or abs(value) > limit:
            return None
        value = int(value)
    if not isinstance(value, int) or abs(value) > limit:
        return None
    return value


def property_int(value: Any) -> int:
    """A GPU property (count, size, rate) as a non-negative int; 0 (unknown) for anything else."""
    v = int_or_none(value)
    return v if v is not None and v > 0 else 0


def min_not_negative(values: np.ndarray) -> int | None:
    """The smallest value >= 0 (negative: NULL), None when there is none; one pass when none is negative."""
    if not len(values):
        return None
    lo = values.min()
    if lo < 0:
        values = values[values >= 0]
        lo = values.min() if len(values) else None
    return lo


def pid_of(global_id: np.ndarray) -> np.ndarray:
    """nsys globalPid/globalTid -> OS pid: bits 24..47 (-1 for a negative id: NULL)."""
    out = global_id >> 24
    out &= 0xFFFFFF
    return _unknown_where_negative(out, global_id)


def tid_of(global_tid: np.ndarray) -> np.ndarray:
    """nsys globalTid -> OS tid: bits 0..23 (-1 for a negative id: NULL)."""
    return _unknown_where_negative(global_tid & 0xFFFFFF, global_tid)


def _unknown_where_negative(out: np.ndarray, global_id: np.ndarray) -> np.ndarray:
    """``out`` (a new array) with -1 where ``global_id`` is negative; one pass when none is (the usual)."""
    if len(global_id) and global_id.min() < 0:
        out[global_id < 0] = -1
    return out
