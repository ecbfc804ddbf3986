"""Decoded events as numpy columns: exact nanosecond timestamps from the JSON text, integers, floats,
texts and dims from JSON scalars, the collective columns c10d records, and what Kineto's copy and
memset names say (direction and memory kinds).

:class:`EventColumns` takes the events of each decoded chunk, sorts them into the loader's groups
(kernels, copies, API calls, ranges, flows ...), converts only the fields each group reads (names
become codes in one table of distinct strings) and keeps those columns; the event structs go with
their chunk. Every conversion works event by event, so the columns are the same however the events
were cut into chunks (the whole document as one chunk included). Text stays codes up to the trace
model: :meth:`EventGroup.text` hands a column on as :class:`~analyzer.loading.columns.TextCodes`, so
the loader derives what a name says (a kernel's short name, a copy's direction) once per distinct
name and never factorizes strings again.
"""
from __future__ import annotations

import decimal
import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

from analyzer.loading.columns import TextCodes
from analyzer.loading.kineto.document import (
    DRIVER_CATS,
    FLOW_CATS,
    KERNEL_CATS,
    MEMCPY_CATS,
    MEMSET_CATS,
    RANGE_CATS,
    RUNTIME_CATS,
    SYNC_CATS,
    Event,
)

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

    Vectorised: the texts are joined, and the numbers of one length gathered into one byte matrix;
    where every row has its decimal point in the same column, the value is one product of the digit
    matrix with the column's powers of ten. Anything else (signs, exponents, mixed layouts, 9e15 us or
    more) goes through ``Decimal`` one by one; torch.profiler never writes those."""
    n = len(raws)
    out = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return out
    lens = np.fromiter(map(len, raws), dtype=np.int64, count=n)
    buf = np.frombuffer(b"".join(raws), dtype=np.uint8)
    one_length = bool(lens.min() == lens.max())  # the usual chunk: the joined text is the matrix already
    if one_length:
        order, sorted_lens, cuts = np.arange(n), lens, [0, n]
    else:
        offsets = np.zeros(n, dtype=np.int64)
        np.cumsum(lens[:-1], out=offsets[1:])
        order = np.argsort(lens, kind="stable")
        sorted_lens = lens[order]
        cuts = [0, *(np.flatnonzero(np.diff(sorted_lens)) + 1).tolist(), n]
    slow: list[int] = []
    for a, b in itertools.pairwise(cuts):
        length = int(sorted_lens[a])
        rows = order[a:b]
        if length == 0:
            continue
        # (rows, length) bytes
        m = buf.reshape(n, length) if one_length else buf[offsets[rows][:, None] + np.arange(length)]
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
        # weight of each column in ns: the integer digits' powers of ten times 1000, the first three
        # decimals' 100, 10, 1; the point and digits beyond the nanosecond 0
        weight = np.zeros(length, dtype=np.int64)
        for j in range(min(length, col + 4)):
            if j != col:
                weight[j] = 10 ** (col - j + 2) if j < col else 10 ** (col + 3 - j)
        acc = digits[good].astype(np.int64) @ weight
        out[rows[good]] = acc
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
    try:  # plain ints throughout (most columns): no Python loop
        return np.fromiter(values, dtype=np.int64, count=n)
    except (TypeError, ValueError, OverflowError):
        pass
    if _all_none(values):  # an args field these events lack (graph node, c10d's counts)
        return np.full(n, default, dtype=np.int64)
    try:
        return np.fromiter((default if v is None else v for v in values), dtype=np.int64, count=n)
    except (TypeError, ValueError, OverflowError):
        pass
    out = np.full(n, default, dtype=np.int64)
    for i, v in enumerate(values):
        out[i] = int_or(v, default)
    return out


def _all_none(values: Sequence[Any]) -> bool:
    """Whether every value is None (one C-level count for a list)."""
    return (values.count(None) if isinstance(values, list) else sum(v is None for v in values)) == len(values)


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
    try:  # numpy reads None as NaN
        return np.fromiter(values, dtype=np.float64, count=len(values))
    except (TypeError, ValueError):  # a damaged value (text, list): pandas' coercion, rarely needed
        import pandas as pd

        return pd.to_numeric(pd.Series(list(values), dtype=object), errors="coerce").to_numpy(dtype=np.float64)


def texts(values: Sequence[Any]) -> np.ndarray:
    """Object array of str (non-strings converted once per distinct value)."""
    arr = np.empty(len(values), dtype=object)
    arr[:] = [v if isinstance(v, str) else ("" if v is None else str(v)) for v in values]
    return arr


def dims(values: Sequence[Any]) -> np.ndarray:
    """(n, 3) int64 from ``[x, y, z]`` lists (missing: -1)."""
    if _all_none(values):  # a field these events lack (CUDA's launch calls)
        return np.full((len(values), 3), -1, dtype=np.int64)
    if set(map(type, values)) == {list} and set(map(len, values)) == {3}:  # every one a list of 3: flattened
        try:
            return np.fromiter(itertools.chain.from_iterable(values), dtype=np.int64,
                               count=3 * len(values)).reshape(-1, 3)
        except (TypeError, ValueError, OverflowError):
            pass
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


def comm_columns(g: EventGroup) -> dict[str, Any]:
    """The optional kernel columns ``comm_bytes``, ``comm_group`` and ``comm_collective`` from what c10d
    records on a collective's NCCL kernel (``In msg nelems``, ``Out msg nelems``, ``dtype``, ``Process
    Group Name``, ``Collective name``); none when no kernel of the trace carries them (an older PyTorch,
    or no collective). ``comm_collective``: the torch.distributed call as c10d names it (``allreduce``,
    ``_allgather_base``, ``reduce_scatter_tensor_coalesced`` ...; ``""`` unknown).

    ``comm_bytes`` is NCCL's message size, the one its NVTX payload states for nsys traces: the element
    count NCCL is called with times the element size. That count is the smaller of c10d's input and
    output counts (all-gather: the input, reduce-scatter: the output; equal for all-reduce, broadcast,
    send/recv); ``-1`` where unknown. ``comm_group``: the process group's name (``"0"`` for the default
    group; ``""`` unknown)."""
    if not g.comm:
        return {}
    count_in, count_out = g.col("in_nelems"), g.col("out_nelems")
    count = np.where((count_in >= 0) & (count_out >= 0), np.minimum(count_in, count_out),
                     np.maximum(count_in, count_out))
    size = g.col("dtype_size")  # bytes per element of c10d's dtype name (_DTYPE_BYTES)
    known = (count >= 0) & (count < 2**56) & (size > 0)
    return {"comm_bytes": np.where(known, count * np.maximum(size, 0), -1), "comm_group": g.text("comm_group"),
            "comm_collective": g.text("comm_collective")}


def distinct_codes(values: Iterable[Any]) -> tuple[np.ndarray, list[Any]]:
    """``(codes, distinct values)`` of hashable values, numbered by first appearance (one dict, no
    pandas: a chunk's few thousand values in a third less time than ``pd.factorize``, which also
    checks every object for NA). Raises ``TypeError`` for an unhashable value (a JSON list or object)."""
    seen: dict[Any, int] = {}
    codes = np.fromiter([seen.setdefault(v, len(seen)) for v in values], dtype=np.intp)
    return codes, list(seen)


def factorize(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Codes and distinct values (as str) of a list of JSON scalars; a list or object where a scalar
    belongs (a damaged file) counts as missing."""
    try:
        codes, uniq = distinct_codes(values)
    except TypeError:  # unhashable: a JSON list or object
        codes, uniq = distinct_codes([None if isinstance(v, list | dict) else v for v in values])
    names = np.empty(len(uniq), dtype=object)
    names[:] = [u if isinstance(u, str) else ("" if u is None else str(u)) for u in uniq]
    return codes, names


def code_of(names: np.ndarray, value: str) -> int:
    hits = np.flatnonzero(names == value)
    return int(hits[0]) if len(hits) else -2


def per_label(text: TextCodes, fn: Callable[[str], Any], dtype: Any = object) -> np.ndarray:
    """``fn`` of each row's text, applied once per label (the rows' codes are all valid)."""
    table = np.empty(len(text.labels), dtype=dtype)
    table[:] = [fn(u) for u in text.labels.tolist()]
    return table[text.codes]


def mapped(text: TextCodes, fn: Callable[[str], str]) -> TextCodes:
    """``fn`` of each row's text, as codes: ``fn`` applied once per label, labels it maps to one text
    merged (the result's labels are distinct, as :meth:`TextCodes.of` makes them)."""
    codes, uniq = distinct_codes([fn(u) for u in text.labels.tolist()])
    labels = np.empty(len(uniq), dtype=object)
    labels[:] = uniq
    return TextCodes(codes[text.codes], labels)


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


# ----------------------------------------------------------------------------------------------------
# the groups and the fields each reads
# ----------------------------------------------------------------------------------------------------
_ARGS = attrgetter("args")
_TS = attrgetter("ts")


class _Chunk:
    """One group's events of a chunk, with their ``args`` fetched once and the text codes of their
    category and phase (``codes``: found for the whole chunk when it was sorted into groups)."""

    __slots__ = ("_args", "codes", "evs")

    def __init__(self, evs: list[Event], codes: dict[str, np.ndarray] | None = None) -> None:
        self.evs = evs
        self.codes = codes or {}
        self._args: tuple[list[Any], bool] | None = None

    def args(self) -> tuple[list[Any], bool]:
        """The events' ``args`` and whether every event has them."""
        if self._args is None:
            args = list(map(_ARGS, self.evs))
            self._args = (args, None not in args)
        return self._args


def _field(name: str) -> Callable[[_Chunk], list[Any]]:
    get = attrgetter(name)
    return lambda c: list(map(get, c.evs))


def _arg(name: str) -> Callable[[_Chunk], list[Any]]:
    get = attrgetter(name)

    def values(c: _Chunk) -> list[Any]:
        args, complete = c.args()
        return list(map(get, args)) if complete else [None if a is None else get(a) for a in args]
    return values


def _coded(name: str) -> Callable[[_Chunk], np.ndarray]:
    return lambda c: c.codes[name]


def _comm_group_value(c: _Chunk) -> list[Any]:
    return [v if isinstance(v, str | int) and not isinstance(v, bool) else None for v in _arg("pg_name")(c)]


def _comm_collective_value(c: _Chunk) -> list[Any]:
    return [v if isinstance(v, str) else None for v in _arg("coll_name")(c)]


def _sync_kind_value(c: _Chunk) -> list[Any]:
    return [k if isinstance(k, str) else n for k, n in zip(_arg("sync_kind")(c), _field("name")(c))]


def _dtype_size(c: _Chunk) -> np.ndarray:
    """Bytes per element of each event's c10d ``dtype`` (-1 unknown)."""
    values = _arg("dtype")(c)
    if _all_none(values):
        return np.full(len(values), -1, dtype=np.int64)
    return np.fromiter((_DTYPE_BYTES.get(v, -1) if isinstance(v, str) else -1 for v in values),
                       dtype=np.int64, count=len(c.evs))


# column -> (values of the chunk's events, conversion); "text" columns become codes in one string table
_INT, _INT0, _TEXT, _DIMS, _RAW = "int", "int0", "text", "dims", "raw"
_CODES = "codes"  # a text column whose codes the chunk's sorting found (category, phase)
_PID_TID = {"pid": (_field("pid"), _INT), "tid": (_field("tid"), _INT)}
_OPS = {**_PID_TID, "device": (_arg("device"), _INT), "stream": (_arg("stream"), _INT),
        "correlation": (_arg("correlation"), _INT), "context": (_arg("context"), _INT),
        "name": (_field("name"), _TEXT)}
_SPECS: dict[str, dict[str, tuple[Callable[[_Chunk], Any], str]]] = {
    "kernels": {**_OPS, "grid": (_arg("grid"), _DIMS), "block": (_arg("block"), _DIMS),
                "registers": (_arg("registers"), _INT), "smem": (_arg("smem"), _INT),
                "graph_node": (_arg("graph_node"), _INT), "in_nelems": (_arg("in_nelems"), _INT),
                "out_nelems": (_arg("out_nelems"), _INT), "dtype_size": (_dtype_size, _RAW),
                "comm_group": (_comm_group_value, _TEXT), "comm_collective": (_comm_collective_value, _TEXT)},
    "memcpy": {**_OPS, "nbytes": (_arg("nbytes"), _INT)},
    "memset": {**_OPS, "nbytes": (_arg("nbytes"), _INT)},
    # launch calls on ROCm carry the launch configuration (older ROCm writes it on the call only)
    "runtime": {**_PID_TID, "correlation": (_arg("correlation"), _INT), "name": (_field("name"), _TEXT),
                "grid": (_arg("grid"), _DIMS), "block": (_arg("block"), _DIMS), "smem": (_arg("smem"), _INT)},
    "driver": {**_PID_TID, "correlation": (_arg("correlation"), _INT), "name": (_field("name"), _TEXT)},
    "ranges": {**_PID_TID, "name": (_field("name"), _TEXT), "cat": (_coded("cat"), _CODES)},
    "syncs": {"correlation": (_arg("correlation"), _INT), "device": (_arg("device"), _INT),
              "context": (_arg("context"), _INT), "stream": (_arg("stream"), _INT),
              "kind": (_sync_kind_value, _TEXT)},
    "spans": {},
    "flows": {**_PID_TID, "id": (_field("id"), _INT), "ph": (_coded("ph"), _CODES), "cat": (_coded("cat"), _CODES)},
    "pyfuncs": {**_PID_TID, "name": (_field("name"), _TEXT)},
    "instants": {**_PID_TID, "name": (_field("name"), _TEXT), "mem_bytes": (_arg("mem_bytes"), _INT0),
                 "device_type": (_arg("device_type"), _INT), "device_id": (_arg("device_id"), _INT),
                 "addr": (_arg("addr"), _INT), "total_allocated": (_arg("total_allocated"), _INT),
                 "total_reserved": (_arg("total_reserved"), _INT)},
}
#: (group, categories, phases, label in data-quality notes), in the order the notes name them
GROUPS: tuple[tuple[str, frozenset[str], tuple[str, ...], str], ...] = (
    ("kernels", KERNEL_CATS, ("X",), "kernel"),
    ("memcpy", MEMCPY_CATS, ("X",), "memcpy"),
    ("memset", MEMSET_CATS, ("X",), "memset"),
    ("runtime", RUNTIME_CATS, ("X",), "CUDA API call"),
    ("driver", DRIVER_CATS, ("X",), "CUDA API call"),
    ("ranges", RANGE_CATS, ("X",), "range"),
    ("syncs", SYNC_CATS, ("X",), "synchronization"),
    ("spans", frozenset({"Trace"}), ("X",), "trace span"),
    ("flows", FLOW_CATS, ("s", "f", "t"), "event"),
    ("pyfuncs", frozenset({"python_function"}), ("X",), "Python call"),
    ("instants", frozenset({"cpu_instant_event"}), ("i",), "instant event"),
)
_HEAD = 50  # timestamps kept as text per group (the format generation is read from them)


class EventGroup:
    """The events of one kind as columns, with their times (ns, trace-relative once the origin is
    known). Text columns are codes into ``names``, the one table of distinct strings of the file:
    :meth:`text` gives one as :class:`TextCodes` (no string touched), :meth:`col` as strings."""

    def __init__(self, start: np.ndarray, dur: np.ndarray, cols: dict[str, np.ndarray],
                 head: Sequence[bytes] = (), comm: bool = False, codes: dict[str, np.ndarray] | None = None,
                 names: np.ndarray | None = None) -> None:
        self.start = start
        self.dur = dur
        self.cols = cols
        self.codes = codes or {}  # text columns: codes into names
        self.names = names if names is not None else np.empty(0, dtype=object)
        self.head = list(head)  # the first timestamps as written (text)
        self.comm = comm  # some event names a process group or message size (kernels)

    @property
    def n(self) -> int:
        return len(self.start)

    @property
    def end(self) -> np.ndarray:
        return self.start + self.dur

    def col(self, name: str) -> np.ndarray:
        """Column ``name``; a text column as an object array of its strings."""
        codes = self.codes.get(name)
        return self.cols[name] if codes is None else self.names[codes]

    def text(self, name: str) -> TextCodes:
        """Text column ``name`` as codes into the distinct texts it holds (in table order)."""
        codes = self.codes[name]
        used = np.zeros(len(self.names), dtype=bool)
        used[codes] = True
        keep = np.flatnonzero(used)
        remap = np.zeros(len(self.names), dtype=np.int32)
        remap[keep] = np.arange(len(keep), dtype=np.int32)
        return TextCodes(remap[codes], self.names[keep])

    def take(self, rows: np.ndarray) -> EventGroup:
        return EventGroup(self.start[rows], self.dur[rows], {k: v[rows] for k, v in self.cols.items()}, self.head,
                          codes={k: v[rows] for k, v in self.codes.items()}, names=self.names)

    @staticmethod
    def concat(*groups: EventGroup) -> EventGroup:
        """The rows of ``groups`` (of one :class:`EventColumns`: one string table) in turn."""
        keys = [k for k in groups[0].cols if all(k in g.cols for g in groups)]
        text = [k for k in groups[0].codes if all(k in g.codes for g in groups)]
        return EventGroup(np.concatenate([g.start for g in groups]), np.concatenate([g.dur for g in groups]),
                          {k: np.concatenate([g.cols[k] for g in groups]) for k in keys},
                          codes={k: np.concatenate([g.codes[k] for g in groups]) for k in text},
                          names=groups[0].names)


class _Pieces:
    """One group's columns, chunk by chunk."""

    def __init__(self) -> None:
        self.start: list[np.ndarray] = []
        self.dur: list[np.ndarray] = []
        self.cols: dict[str, list[np.ndarray]] = {}
        self.head: list[bytes] = []
        self.untimed = 0
        self.negative_ts = 0
        self.comm = False  # some kernel names a process group or message size


class EventColumns:
    """Columns of every group, built chunk by chunk (:meth:`add`), finished with :meth:`group`."""

    def __init__(self) -> None:
        self._strings: dict[str, int] = {}
        self._pieces = {name: _Pieces() for name, *_ in GROUPS}
        self._x_cats: list[np.ndarray] = []
        self.meta: list[Event] = []  # process/thread metadata (ph "M"): a few per process
        self.events = 0
        self._names: np.ndarray | None = None
        self._groups: dict[tuple[str, str], int] = {}  # (category, phase) -> group, as met

    def _codes(self, texts: np.ndarray) -> np.ndarray:
        return self._global_codes(*distinct_codes(texts.tolist()))

    def _global_codes(self, codes: np.ndarray, uniq: list[str]) -> np.ndarray:
        """Chunk codes (into ``uniq``) turned into codes into the one string table."""
        table = self._strings
        return np.fromiter([table.setdefault(u, len(table)) for u in uniq], dtype=np.int32,
                           count=len(uniq))[codes]

    def _text_codes(self, values: list[Any]) -> np.ndarray:
        """Codes of :func:`texts` of ``values``; straight from the values when all are str."""
        if _all_none(values):  # a field these events lack: all ""
            return np.full(len(values), self._strings.setdefault("", len(self._strings)), dtype=np.int32)
        try:
            codes, uniq = distinct_codes(values)
        except TypeError:  # unhashable: a JSON list or object
            return self._codes(texts(values))
        if not all(isinstance(u, str) for u in uniq):  # None, numbers: texts() spells them
            return self._codes(texts(values))
        return self._global_codes(codes, uniq)

    def add(self, events: list[Event]) -> None:
        """Sort one chunk's events into the groups and keep their columns."""
        n = len(events)
        self.events += n
        ph_codes, ph_names = factorize(list(map(attrgetter("ph"), events)))
        cat_codes, cat_names = factorize(list(map(attrgetter("cat"), events)))
        is_x = ph_codes == code_of(ph_names, "X")
        cat_all, ph_all = self._codes(cat_names)[cat_codes], self._codes(ph_names)[ph_codes]  # every event's
        self._x_cats.append(cat_all[is_x])
        meta = np.flatnonzero(ph_codes == code_of(ph_names, "M"))
        if len(meta):
            self.meta.extend(events[i] for i in meta.tolist())
        n_ph = max(len(ph_names), 1)
        pairs, pair_of = np.unique(cat_codes * n_ph + ph_codes, return_inverse=True)  # the (cat, ph) met
        gid = np.array([self._group_of(cat_names[p // n_ph], ph_names[p % n_ph]) for p in pairs.tolist()],
                       dtype=np.int64)[pair_of.reshape(-1)]
        order = np.argsort(gid, kind="stable")
        bounds = np.searchsorted(gid[order], np.arange(len(GROUPS) + 1)).tolist()
        # the events of every group, group after group, and their timestamps parsed in one go
        rows = order[bounds[0]:]
        grouped = [events[i] for i in rows.tolist()]
        starts = parse_timestamps_ns(list(map(_TS, grouped)))
        for k, (name, *_rest) in enumerate(GROUPS):
            a, b = bounds[k] - bounds[0], bounds[k + 1] - bounds[0]
            if a < b:
                self._add_group(name, grouped[a:b], starts[a:b], {"cat": cat_all[rows[a:b]], "ph": ph_all[rows[a:b]]})

    def _group_of(self, cat: str, ph: str) -> int:
        """The group (index into :data:`GROUPS`) of events of category ``cat`` and phase ``ph``; -1 none."""
        k = self._groups.get((cat, ph))
        if k is None:
            k = self._groups[(cat, ph)] = max((k for k, (_name, cats, phases, _label) in enumerate(GROUPS)
                                              if cat in cats and ph in phases), default=-1)
        return k

    def _add_group(self, name: str, evs: list[Event], start: np.ndarray, codes: dict[str, np.ndarray]) -> None:
        p = self._pieces[name]
        timed = start >= 0
        if not timed.all():  # an event without a usable timestamp cannot be placed: left out
            p.negative_ts += sum(bytes(e.ts).lstrip().startswith(b"-")
                                 for e, ok in zip(evs, timed.tolist()) if not ok)
            p.untimed += int((~timed).sum())
            evs = [e for e, ok in zip(evs, timed.tolist()) if ok]
            start = start[timed]
            codes = {k: v[timed] for k, v in codes.items()}
        if len(p.head) < _HEAD:
            p.head.extend(bytes(e.ts) for e in evs[:_HEAD - len(p.head)])
        chunk = _Chunk(evs, codes)
        if name == "kernels" and not p.comm:
            p.comm = not (_all_none(_arg("pg_name")(chunk)) and _all_none(_arg("in_nelems")(chunk)))
        p.start.append(start)
        p.dur.append(floats(_field("dur")(chunk)))
        for col, (values, kind) in _SPECS[name].items():
            raw = values(chunk)
            if kind == _INT:
                arr = ints(raw)
            elif kind == _INT0:
                arr = ints(raw, 0)
            elif kind == _TEXT:
                arr = self._text_codes(raw)
            elif kind == _DIMS:
                arr = dims(raw)
            else:
                arr = raw
            p.cols.setdefault(col, []).append(arr)

    def x_category_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """The categories of the complete (``X``) events, in order of first appearance in the file, and
        how many events each has."""
        codes = np.concatenate(self._x_cats) if self._x_cats else np.empty(0, np.int32)
        uniq, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
        counts = np.bincount(inverse.reshape(-1), minlength=len(uniq))
        order = np.argsort(first)
        return self.names()[uniq[order]], counts[order]

    def names(self) -> np.ndarray:
        if self._names is None or len(self._names) != len(self._strings):
            self._names = np.empty(len(self._strings), dtype=object)
            self._names[:] = list(self._strings)
        return self._names

    def untimed(self, name: str) -> int:
        return self._pieces[name].untimed

    def group(self, name: str, quality: Any) -> EventGroup:
        """The columns of group ``name``; the out-of-range values found are counted in ``quality``."""
        p = self._pieces[name]
        label = next(lab for g, *_, lab in GROUPS if g == name)
        quality.add("negative_ts", label, p.negative_ts)
        quality.add("unreadable_ts", label, p.untimed - p.negative_ts)  # null, a string, 1e300, none
        start = np.concatenate(p.start) if p.start else np.empty(0, np.int64)
        dur_ns = np.nan_to_num(np.concatenate(p.dur) if p.dur else np.empty(0), nan=0.0) * 1000.0
        negative_dur = dur_ns < 0
        huge_dur = dur_ns >= 2.0**63  # past int64 nanoseconds (2^64 would wrap); inf too
        quality.add("negative_dur", label, int(negative_dur.sum()))
        quality.add("huge_dur", label, int(huge_dur.sum()))
        dur = np.rint(np.where(negative_dur | huge_dur, 0.0, dur_ns)).astype(np.int64)
        cols: dict[str, np.ndarray] = {}
        codes: dict[str, np.ndarray] = {}
        for col, (_values, kind) in _SPECS[name].items():
            pieces = p.cols.get(col, [])
            if kind == _DIMS:
                cols[col] = np.concatenate(pieces) if pieces else np.empty((0, 3), np.int64)
            elif kind in (_TEXT, _CODES):
                codes[col] = np.concatenate(pieces) if pieces else np.empty(0, np.int32)
            else:
                cols[col] = np.concatenate(pieces) if pieces else np.empty(0, np.int64)
        p.start, p.dur, p.cols = [], [], {}
        return EventGroup(start, dur, cols, p.head, p.comm, codes=codes, names=self.names())
