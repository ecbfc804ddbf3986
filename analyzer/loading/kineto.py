"""torch.profiler (Kineto) Chrome-trace JSON -> :class:`~analyzer.loading.model.Trace`.

``torch.profiler`` writes one JSON document per process (``tensorboard_trace_handler`` names them
``HOST_PID.TIMESTAMP.pt.trace.json``, optionally gzipped), each ``{"schemaVersion", "deviceProperties",
"distributedInfo", ..., "traceEvents": [...]}``. Two generations of event vocabulary exist and both load:

=========================  ==============================================  ===========================
what                       current (PyTorch 1.9+, ``ActivityType.h``)       2021 (PyTorch 1.8)
=========================  ==============================================  ===========================
CPU ops / record_function  ``cpu_op``, ``user_annotation``                 ``Operator``
CUDA API calls             ``cuda_runtime``, ``cuda_driver``               ``Runtime``
GPU work                   ``kernel``, ``gpu_memcpy``, ``gpu_memset``      ``Kernel``, ``Memcpy``, ``Memset``
launch flows               ``ac2g`` (2023+), ``async_cpu_to_gpu`` (2022)   ``async``, ``async_gpu``
timestamps                 us with ns decimals, relative to                integer us since the epoch
                           ``baseTimeNanoseconds`` (2024+), else epoch us
=========================  ==============================================  ===========================

What becomes what (the same model the nsys loader fills, so every fact and rule reads it unchanged):

* ``kernel``/``gpu_memcpy``/``gpu_memset`` -> kernels / memcpy / memset. Device and stream come from
  ``args`` (``device``, ``stream``), else from the event's pid/tid (``"stream 7"``). Copy direction and
  host memory kind come from Kineto's names (``Memcpy HtoD (Pageable -> Device)``, ``Memset (Device)``).
  Kineto records a kernel's static + dynamic shared memory as one number (``shared memory``): it is
  stored as ``dynamic_smem`` (``static_smem`` 0; occupancy uses the sum).
* ``cuda_runtime``/``cuda_driver`` -> API calls; every GPU operation is joined to its launching call on
  ``args.correlation`` (CUPTI's correlation id), or, where an event lacks it, on the id of the launch
  flow (``ac2g`` ...) that binds to it.
* ``cpu_op``/``user_annotation`` (``Operator``) -> ranges, exactly what NVTX ranges are for nsys:
  nested per thread by containment, ``ProfilerStep#N`` among them (the analysis window picks those).
  PyTorch runs backward ops on its autograd thread; a range that is outermost on such a secondary
  thread is nested under the innermost range of the process's main thread that encloses it, so
  ``ProfilerStep#3/backward/autograd::engine::evaluate_function: MmBackward0/...`` is one path, as the
  nsys loader's process fallback attributes backward kernels to the main thread's ``backward`` range.
  ``python_function`` events (``with_stack=True``) are not ranges (one per Python call): they give
  each CUDA API call its Python call stack (``stacks``/``api_stacks``, source ``python``: the frames
  open on the calling thread when the call started; :mod:`analyzer.loading.python_stacks`).
* A collective's NCCL kernel carries what c10d knows of it: the optional kernel columns ``comm_bytes``
  (NCCL's message size: count x element size) and ``comm_group`` (process group name), present only
  when some kernel of the trace has them (:func:`_comm_columns`).
* ``cuda_sync`` -> synchronization rows; ``deviceProperties`` -> GPUs (per-SM limits Kineto leaves out
  come from the compute-capability table); ``process_name``/``thread_name`` metadata -> processes and
  threads; ``distributedInfo`` -> ``TraceInfo.rank`` / ``world_size``.

Times are parsed from the JSON text to exact integer nanoseconds (a float64 cannot hold an epoch
timestamp in microseconds to the nanosecond, nor the 2024+ relative ones above ~52 days); the trace
origin is the earliest event, ``TraceInfo.origin_ns`` that instant in epoch nanoseconds.

Parsing: one ``msgspec`` decode of the whole document into typed structs that keep only the fields read
here (large ``args`` such as ``Input Dims`` or ``Call stack`` are skipped, not built), then columns
per event kind; no Python dict per event. Every malformed input is an
:class:`~analyzer.errors.InputError` with one line saying what is wrong.
"""
from __future__ import annotations

import decimal
import gzip
import itertools
import lzma
import os
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from analyzer.boundedio import BoundedReadError, decompressed_limit, read_decompressed
from analyzer.errors import InputError
from analyzer.loading import attribution as attr
from analyzer.loading.api_names import host_side_summary, launch_calls
from analyzer.loading.capabilities import missing_capabilities
from analyzer.loading.columns import TextCodes
from analyzer.loading.common import by_start, contract_frame, fill_cc_limits, strip_api_suffix, text_as_object
from analyzer.loading.kernel_names import mangled_components
from analyzer.loading.names import last_separator, matching_open
from analyzer.loading.python_stacks import python_call_stacks
from analyzer.loading.model import (
    API_COLUMNS,
    API_STACK_COLUMNS,
    GPU_COLUMNS,
    KERNEL_COLUMNS,
    MEMCPY_COLUMNS,
    MEMORY_COLUMNS,
    MEMSET_COLUMNS,
    NVTX_COLUMNS,
    PROCESS_COLUMNS,
    STACK_COLUMNS,
    SYNC_COLUMNS,
    THREAD_COLUMNS,
    Trace,
    TraceInfo,
    empty_frame,
)

Progress = Callable[[str], None]

GZIP_MAGIC = b"\x1f\x8b"
XZ_MAGIC = b"\xfd7zXZ\x00"

RANGE_CATS = frozenset({"cpu_op", "user_annotation", "Operator"})
KERNEL_CATS = frozenset({"kernel", "Kernel"})
MEMCPY_CATS = frozenset({"gpu_memcpy", "Memcpy"})
MEMSET_CATS = frozenset({"gpu_memset", "Memset"})
RUNTIME_CATS = frozenset({"cuda_runtime", "Runtime"})
DRIVER_CATS = frozenset({"cuda_driver", "Driver"})
SYNC_CATS = frozenset({"cuda_sync"})
FLOW_CATS = frozenset({"ac2g", "async_cpu_to_gpu", "async", "async_gpu"})
GEN_2021_CATS = frozenset({"Operator", "Runtime", "Kernel", "Memcpy", "Memset"})
#: categories only torch.profiler writes: a Chrome trace with none of them is someone else's
PYTORCH_CATS = (RANGE_CATS | KERNEL_CATS | MEMCPY_CATS | MEMSET_CATS | RUNTIME_CATS | DRIVER_CATS | SYNC_CATS
                | frozenset({"python_function", "gpu_user_annotation", "cpu_instant_event", "overhead",
                             "mtia_runtime", "mtia_ccp_events", "xpu_runtime", "xpu_driver", "hpu_op",
                             "privateuse1_runtime", "privateuse1_driver", "cuda_event", "Trace"}))
#: other accelerators torch.profiler can record (their device work is not read here)
OTHER_ACCELERATOR_CATS = {"mtia_runtime": "MTIA", "mtia_ccp_events": "MTIA", "xpu_runtime": "Intel XPU",
                          "xpu_driver": "Intel XPU", "hpu_op": "Gaudi HPU", "privateuse1_runtime": "a custom backend"}

_MEMCPY_NAME = re.compile(r"^Memcpy\s+(?P<kind>\w+)(?:\s*\((?P<src>[^)>]*?)\s*->\s*(?P<dst>[^)]*?)\))?")
_MEMSET_NAME = re.compile(r"^Memset\s*\((?P<kind>[^)]*)\)")
_DIRECTIONS = {"htod": "H2D", "htoa": "H2D", "dtoh": "D2H", "atoh": "D2H", "dtod": "D2D", "atoa": "D2D",
               "atod": "D2D", "dtoa": "D2D", "htoh": "H2H", "ptop": "P2P"}
_MEM_KINDS = {"pageable": "pageable", "pinned": "pinned", "device": "device", "device static": "device",
              "array": "array", "managed": "managed", "managed static": "managed"}
_SYNC_KINDS = {"event sync": "event_synchronize", "stream sync": "stream_synchronize",
               "context sync": "context_synchronize", "stream wait event": "stream_wait_event"}
_STREAM_TID = re.compile(r"(\d+)\s*$")


# ----------------------------------------------------------------------------------------------------
# the document, as typed structs (fields not named here are skipped by the decoder)
# ----------------------------------------------------------------------------------------------------
class _Args(msgspec.Struct):
    correlation: Any = None
    device: Any = None
    context: Any = None
    stream: Any = None
    grid: Any = None
    block: Any = None
    registers: Any = msgspec.field(default=None, name="registers per thread")
    smem: Any = msgspec.field(default=None, name="shared memory")
    nbytes: Any = msgspec.field(default=None, name="bytes")
    graph_node: Any = msgspec.field(default=None, name="graph node id")
    sync_kind: Any = msgspec.field(default=None, name="cuda_sync_kind")
    # what PyTorch's c10d puts on a collective's NCCL kernel (ParamCommsDebugInfo)
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    dtype: Any = None
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    # torch.profiler(profile_memory=True) "[memory]" instant events: the caching allocator's block
    mem_bytes: Any = msgspec.field(default=None, name="Bytes")  # > 0 allocated, < 0 freed
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    addr: Any = msgspec.field(default=None, name="Addr")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    device_type: Any = msgspec.field(default=None, name="Device Type")  # c10::DeviceType: 0 CPU, 1 CUDA
    name: Any = None  # process_name / thread_name metadata
    labels: Any = None  # process_labels metadata ("CPU", "GPU 0")


class _Event(msgspec.Struct):
    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: msgspec.Raw = msgspec.Raw(b"")
    dur: Any = None
    id: Any = None
    args: _Args | None = None


class _Document(msgspec.Struct):
    traceEvents: list[_Event] | None = None  # the format's spelling
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    displayTimeUnit: Any = None
    traceName: Any = None
    host_name: Any = None


_DOC_DECODER = msgspec.json.Decoder(_Document)
_LIST_DECODER = msgspec.json.Decoder(list[_Event])


# ----------------------------------------------------------------------------------------------------
# reading
# ----------------------------------------------------------------------------------------------------
def read_json_bytes(path: Path, display: Path | None = None) -> bytes | bytearray:
    """The JSON text of ``path``: gunzipped / unxz'd when compressed (by magic bytes), else as read.
    (The decoded events keep slices of it: their timestamps are parsed from the text.) Decompression is
    bounded (:func:`analyzer.boundedio.decompressed_limit`). Raises :class:`InputError` for unreadable,
    corrupt or too large compressed files."""
    shown = display or path
    try:
        with open(path, "rb") as fh:
            head = fh.read(6)
            limit = decompressed_limit(os.fstat(fh.fileno()).st_size)
            if head.startswith(GZIP_MAGIC):
                fh.seek(0)
                with gzip.GzipFile(fileobj=fh, mode="rb") as gz:
                    return read_decompressed(gz, limit)
            if head.startswith(XZ_MAGIC):
                fh.seek(0)
                with lzma.LZMAFile(fh, "rb") as xz:
                    return read_decompressed(xz, limit)
            if not head:
                raise InputError(shown, "file is empty", hint="record the trace again")
            fh.seek(0)
            return fh.read()
    except (EOFError, gzip.BadGzipFile, zlib.error, lzma.LZMAError) as exc:
        raise InputError(shown, f"the compressed trace is truncated or corrupt ({exc})",
                         hint="copy or record it again") from exc
    except BoundedReadError as exc:
        raise InputError(shown, f"the compressed trace {exc.reason}", hint=exc.hint) from None
    except OSError as exc:
        raise InputError(shown, f"cannot read the file ({exc.strerror or exc})", hint="check its permissions") from exc


# a \uD800-\uDBFF escape not followed by a \uDC00-\uDFFF one, or the second kind without the first
_LONE_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
                             rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")


def _decode(buf: bytes | bytearray, shown: Path) -> _Document:
    """The document in ``buf``. Text that is not valid Unicode (bytes that are not UTF-8, unpaired
    surrogate escapes: Kineto copies kernel and Python names byte for byte) becomes U+FFFD, as Python's
    and Chrome's readers show it, instead of failing the whole trace."""
    if buf[:3] == b"\xef\xbb\xbf":  # a UTF-8 byte-order mark (some editors and Windows tools write one)
        buf = buf[3:]
    for _ in range(2):  # at most one repair of each kind
        try:
            return _decode_json(buf, shown)
        except UnicodeDecodeError:
            buf = buf.decode("utf-8", "replace").encode("utf-8")
        except InputError:
            if not _LONE_SURROGATE.search(buf):
                raise
            buf = _LONE_SURROGATE.sub(rb"\\ufffd", buf)
    try:
        return _decode_json(buf, shown)
    except UnicodeDecodeError as exc:  # not reached: the text was made valid above
        raise InputError(shown, "the JSON text is not valid UTF-8", hint="copy or record the trace again") from exc


def _decode_json(buf: bytes | bytearray, shown: Path) -> _Document:
    first = buf[:64].lstrip(b" \t\r\n")[:1]
    try:
        if first == b"[":  # Chrome's "JSON array format": a bare list of events
            return _Document(traceEvents=_LIST_DECODER.decode(buf))
        if first != b"{":
            raise InputError(shown, "not a JSON trace (it does not start with '{' or '[')",
                             hint="pass a torch.profiler trace (.pt.trace.json or .json.gz) or an nsys export")
        return _DOC_DECODER.decode(buf)
    except msgspec.ValidationError as exc:
        raise InputError(shown, f"malformed trace JSON: {exc}",
                         hint="the file does not follow the Chrome trace format torch.profiler writes") from exc
    except msgspec.DecodeError as exc:
        msg = str(exc)
        if "truncated" in msg:
            raise InputError(shown, "the JSON trace is truncated (the profiler did not finish writing it?)",
                             hint="record it again and let the profiler exit normally") from exc
        raise InputError(shown, f"not valid JSON ({msg})", hint="copy or record the trace again") from exc
    except RecursionError as exc:  # a trace nests a few levels; thousands mean a damaged or foreign file
        raise InputError(shown, "the JSON nests lists or objects thousands of levels deep, which no trace does",
                         hint="pass a torch.profiler trace (.pt.trace.json or .json.gz)") from exc


# ----------------------------------------------------------------------------------------------------
# columns from events
# ----------------------------------------------------------------------------------------------------
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


def _ints(values: Sequence[Any], default: int = -1) -> np.ndarray:
    """int64 from JSON scalars (ints, floats, numeric strings, ``"0x1f"``); anything else is ``default``."""
    n = len(values)
    try:
        return np.fromiter((default if v is None else v for v in values), dtype=np.int64, count=n)
    except (TypeError, ValueError, OverflowError):
        pass
    out = np.full(n, default, dtype=np.int64)
    for i, v in enumerate(values):
        out[i] = _int_or(v, default)
    return out


def _int_or(v: Any, default: int) -> int:
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


def _floats(values: Sequence[Any]) -> np.ndarray:
    try:
        return np.fromiter((np.nan if v is None else v for v in values), dtype=np.float64, count=len(values))
    except (TypeError, ValueError):
        return pd.to_numeric(pd.Series(list(values), dtype=object), errors="coerce").to_numpy(dtype=np.float64)


def _texts(values: Sequence[Any]) -> np.ndarray:
    """Object array of str (non-strings converted once per distinct value)."""
    arr = np.empty(len(values), dtype=object)
    arr[:] = [v if isinstance(v, str) else ("" if v is None else str(v)) for v in values]
    return arr


def _dims(values: Sequence[Any]) -> np.ndarray:
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
            out[i] = [_int_or(x, -1) for x in v]
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


def _comm_columns(g: _Group) -> dict[str, np.ndarray]:
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
    count_in, count_out = _ints(n_in), _ints(g.arg("out_nelems"))
    count = np.where((count_in >= 0) & (count_out >= 0), np.minimum(count_in, count_out),
                     np.maximum(count_in, count_out))
    codes, names = _factorize(g.arg("dtype"))
    size = np.array([_DTYPE_BYTES.get(str(n), -1) for n in names], dtype=np.int64)[codes]
    known = (count >= 0) & (count < 2**56) & (size > 0)
    return {"comm_bytes": np.where(known, count * np.maximum(size, 0), -1),
            "comm_group": _texts([v if isinstance(v, str | int) and not isinstance(v, bool) else None
                                  for v in groups])}


def _factorize(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
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


def _code(names: np.ndarray, value: str) -> int:
    hits = np.flatnonzero(names == value)
    return int(hits[0]) if len(hits) else -2


def _per_distinct(values: np.ndarray, fn: Callable[[str], Any], dtype: Any = object) -> np.ndarray:
    """``fn`` applied once per distinct value, broadcast back."""
    if len(values) == 0:
        return np.empty(0, dtype=dtype)
    codes, uniq = pd.factorize(pd.Series(values, dtype=object), use_na_sentinel=False)
    table = np.empty(len(uniq), dtype=dtype)
    table[:] = [fn(u) for u in uniq]
    return table[codes]


def kernel_short_name(name: str) -> str:
    """The function's own name from a demangled kernel name, as Nsight Systems' ``shortName``:
    ``void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, ...>(int, ...)``
    -> ``vectorized_elementwise_kernel``; plain names (``ampere_sgemm_128x64_nn``) stay as they are.
    Names Kineto left mangled (``_ZN19cutlass_cudnn_train6KernelI...``) give their last unqualified
    identifier (``Kernel``).

    The bracket scans are :mod:`analyzer.loading.names`' (numpy over the name's bytes: a damaged
    trace's 1 GB name takes seconds). At most :data:`_MAX_STRIPS` trailing ``<...>`` groups are removed
    (real names have one or two)."""
    s = name.strip()
    if s.startswith("_Z"):
        return _mangled_short(s) or s
    if s.endswith(")"):
        i = matching_open(s, "(", ")", arrow=True)
        if i > 0:
            s = s[:i].rstrip()
    for _ in range(_MAX_STRIPS):
        if not s.endswith(">"):
            break
        i = matching_open(s, "<", ">", arrow=True)
        if i <= 0:
            break
        s = s[:i].rstrip()
    return s[last_separator(s):] or name


_MAX_STRIPS = 64


def _mangled_short(s: str) -> str:
    """The last identifier of an Itanium-mangled name's (nested) name: ``_ZN3foo3barEv`` -> ``bar``,
    ``_Z6kernelPf`` -> ``kernel`` ("" when it does not parse); read by the one mangled-name reader."""
    parts = mangled_components(s)[0]
    return parts[-1] if parts else ""


def _memcpy_info(name: str) -> tuple[str, str, str]:
    m = _MEMCPY_NAME.match(name)
    if not m:
        return "other", "unknown", "unknown"
    direction = _DIRECTIONS.get(m.group("kind").lower(), "other")
    src = _MEM_KINDS.get((m.group("src") or "").strip().lower(), "unknown")
    dst = _MEM_KINDS.get((m.group("dst") or "").strip().lower(), "unknown")
    return direction, src, dst


def _memset_kind(name: str) -> str:
    m = _MEMSET_NAME.match(name)
    return _MEM_KINDS.get(m.group("kind").strip().lower(), "unknown") if m else "unknown"


@dataclass
class _Group:
    """The events of one kind with their times (ns, trace-relative once the origin is known)."""

    events: list[_Event]
    start: np.ndarray
    dur: np.ndarray

    @property
    def end(self) -> np.ndarray:
        return self.start + self.dur

    def field(self, name: str) -> list[Any]:
        return list(map(attrgetter(name), self.events))

    def arg(self, name: str) -> list[Any]:
        return [None if a is None else getattr(a, name) for a in map(attrgetter("args"), self.events)]


# ----------------------------------------------------------------------------------------------------
# the loader
# ----------------------------------------------------------------------------------------------------
class _KinetoLoader:
    def __init__(self, path: Path, progress: Progress | None, display_path: Path | None,
                 source_format: str) -> None:
        self.path = path
        self.shown = display_path or path
        self.say: Progress = progress or (lambda _msg: None)
        self.source_format = source_format

    def run(self) -> Trace:
        self.say(f"reading {self.shown.name}")
        buf = read_json_bytes(self.path, self.shown)
        self.say(f"parsing JSON ({len(buf) / 1e6:,.1f} MB)")
        doc = _decode(buf, self.shown)
        del buf
        events = doc.traceEvents
        if events is None:
            raise InputError(self.shown, "JSON without a traceEvents list: not a Chrome trace",
                             hint="pass the .pt.trace.json that torch.profiler wrote")
        if not events:
            raise InputError(self.shown, "the trace has no events (empty traceEvents)",
                             hint="record a few steps inside the profiler's active window")
        return self._build(doc, events)

    # -- classification ---------------------------------------------------------------------------
    def _build(self, doc: _Document, events: list[_Event]) -> Trace:
        self.say(f"classifying {len(events):,} events")
        ph_codes, ph_names = _factorize(list(map(attrgetter("ph"), events)))
        cat_codes, cat_names = _factorize(list(map(attrgetter("cat"), events)))
        is_x = ph_codes == _code(ph_names, "X")
        cat_counts = pd.Series(cat_names[cat_codes[is_x]]).value_counts() if is_x.any() else pd.Series(dtype=int)
        present = {str(c) for c in cat_counts.index}
        if not present & PYTORCH_CATS:
            found = ", ".join(f"{c or '(none)'}" for c in list(cat_counts.index[:5])) or "no complete (X) events"
            raise InputError(self.shown, f"a Chrome trace, but not from torch.profiler (event categories: {found})",
                             hint="pass a trace written by torch.profiler (export_chrome_trace or "
                                  "tensorboard_trace_handler)")
        untimed = [0]
        quality = _Quality()

        def group(cats: frozenset[str], phase_mask: np.ndarray | None = None, label: str = "event") -> _Group:
            wanted = [i for i, c in enumerate(cat_names) if c in cats]
            mask = (is_x if phase_mask is None else phase_mask) & np.isin(cat_codes, wanted)
            idx = np.flatnonzero(mask)
            evs = [events[i] for i in idx.tolist()]
            start = parse_timestamps_ns([e.ts for e in evs])
            timed = start >= 0
            if not timed.all():  # an event without a usable timestamp cannot be placed: left out
                negative = [bytes(e.ts).lstrip().startswith(b"-") for e, ok in zip(evs, timed.tolist()) if not ok]
                quality.add("negative_ts", label, sum(negative))
                untimed[0] += int((~timed).sum())
                evs = [e for e, ok in zip(evs, timed.tolist()) if ok]
                start = start[timed]
            dur_ns = np.nan_to_num(_floats([e.dur for e in evs]), nan=0.0) * 1000.0
            negative_dur = dur_ns < 0
            huge_dur = dur_ns >= 2.0**63  # past int64 nanoseconds (2^64 would wrap); inf too
            quality.add("negative_dur", label, int(negative_dur.sum()))
            quality.add("huge_dur", label, int(huge_dur.sum()))
            dur = np.rint(np.where(negative_dur | huge_dur, 0.0, dur_ns)).astype(np.int64)
            return _Group(evs, start, dur)

        kernels = group(KERNEL_CATS, label="kernel")
        memcpy = group(MEMCPY_CATS, label="memcpy")
        memset = group(MEMSET_CATS, label="memset")
        if len(kernels.events) + len(memcpy.events) + len(memset.events) == 0:
            if untimed[0]:
                raise InputError(self.shown, f"no GPU operation carries a usable timestamp (ts) ({untimed[0]:,} without)",
                                 hint="record the trace again")
            other = sorted({OTHER_ACCELERATOR_CATS[c] for c in present if c in OTHER_ACCELERATOR_CATS})
            if other:
                raise InputError(self.shown, f"the trace records {', '.join(other)} activity, which this analyzer "
                                 "does not read (no CUDA kernel, gpu_memcpy or gpu_memset events)",
                                 hint="profile a CUDA (or ROCm) run")
        runtime = group(RUNTIME_CATS, label="CUDA API call")
        driver = group(DRIVER_CATS, label="CUDA API call")
        if len(kernels.events) + len(memcpy.events) + len(memset.events) == 0:
            raise _no_gpu_activity(self.shown, present, runtime, driver)
        ranges = group(RANGE_CATS, label="range")
        syncs = group(SYNC_CATS, label="synchronization")
        spans = group(frozenset({"Trace"}), label="trace span")
        flows = group(FLOW_CATS, np.isin(ph_codes, [i for i, p in enumerate(ph_names) if p in ("s", "f", "t")]))
        starts = np.concatenate([g.start for g in (kernels, memcpy, memset, runtime, driver, ranges, syncs, spans)])
        origin = int(starts.min())
        ends = [g.end for g in (kernels, memcpy, memset, runtime, driver, ranges, syncs) if len(g.start)]
        last = int(max((int(e.max()) for e in ends), default=origin))
        pyfuncs = group(frozenset({"python_function"}), label="Python call")
        instants = group(frozenset({"cpu_instant_event"}), ph_codes == _code(ph_names, "i"), label="instant event")
        for g in (kernels, memcpy, memset, runtime, driver, ranges, syncs, flows, pyfuncs, instants):
            g.start = g.start - origin
        self.say(f"torch.profiler trace: {len(kernels.events):,} kernels, {len(memcpy.events):,} copies, "
                 f"{len(runtime.events) + len(driver.events):,} CUDA API calls, {len(ranges.events):,} ranges")

        threads = _ThreadKeys()
        flow_ids = _FlowIds(flows)
        nvtx, timeline = self._ranges(ranges, threads)
        api_frame_data, launch = self._api(runtime, driver, flow_ids, threads, nvtx, timeline)
        kernel_frame = self._kernels(kernels, flow_ids, launch)
        memcpy_frame = self._memcpy(memcpy, flow_ids, launch)
        memset_frame = self._memset(memset, flow_ids, launch)
        sync_frame = self._sync(syncs, launch)
        memory_frame = self._memory(instants, threads, timeline)
        api_frame = by_start(contract_frame(API_COLUMNS, api_frame_data, compact=True))
        stacks, api_stacks = empty_frame(STACK_COLUMNS), empty_frame(API_STACK_COLUMNS)
        if len(pyfuncs.events):
            self.say(f"Python call stacks from {len(pyfuncs.events):,} python_function events")
            stacks, api_stacks = python_call_stacks(
                _ints(pyfuncs.field("pid")), _ints(pyfuncs.field("tid")), pyfuncs.start, pyfuncs.end,
                _texts(pyfuncs.field("name")), api_frame)
        gpus = _match_devices(self._gpus(doc.deviceProperties),
                              [f["device"] for f in (kernel_frame, memcpy_frame, memset_frame) if len(f)])
        processes, thread_frame = self._processes_threads(events, ph_codes == _code(ph_names, "M"))

        rank, world = _distributed(doc.distributedInfo)
        base = _int_or(doc.baseTimeNanoseconds, 0) if doc.baseTimeNanoseconds is not None else 0
        generation = _generation(present, flows, events, ranges, kernels)
        unavailable = missing_capabilities(kernels=kernel_frame, memcpy=memcpy_frame, memset=memset_frame,
                                           api=api_frame, gpus=gpus, memory=memory_frame)
        if "memcpy_memory_kind" in unavailable:
            names = sorted(set(_texts(memcpy.field("name")).tolist()))[:2]
            unavailable["memcpy_memory_kind"] = (
                "torch.profiler names the copies without their host memory kind ("
                + ", ".join(repr(n) for n in names) + "), so pageable and pinned copies cannot be told apart")
        info = TraceInfo(
            path=self.shown,
            source_format=self.source_format,
            nsys_version=None,
            schema_version=None if doc.schemaVersion is None else str(doc.schemaVersion),
            origin_ns=base + origin,
            duration_ns=max(0, last - origin),
            hostname=doc.host_name if isinstance(doc.host_name, str) else None,
            export_schema=generation,
            rank=rank,
            world_size=world,
            unavailable=unavailable,
        )
        extras: dict[str, Any] = {
            "kineto": {
                "generation": generation,
                "event_counts": {str(k): int(v) for k, v in cat_counts.items()},
                "base_time_ns": base or None,
                "trace_name": doc.traceName if isinstance(doc.traceName, str) else None,
                "distributed_info": doc.distributedInfo if isinstance(doc.distributedInfo, dict) else None,
                "ops_without_launch": int((kernel_frame["api_name"] == "").sum()) if len(kernel_frame) else 0,
                "out_of_range": quality.counts(),
            },
        }
        note = quality.note()
        if note:
            extras["notes"] = [note]
        return Trace(info=info, kernels=kernel_frame, memcpy=memcpy_frame, memset=memset_frame, api=api_frame,
                     sync=sync_frame, nvtx=nvtx, gpus=gpus, processes=processes, threads=thread_frame,
                     stacks=stacks, api_stacks=api_stacks, memory=memory_frame, extras=extras)

    # -- ranges ------------------------------------------------------------------------------------
    def _ranges(self, g: _Group, threads: _ThreadKeys) -> tuple[pd.DataFrame, attr.NvtxTimeline]:
        keep = np.flatnonzero(g.start >= 0)
        pid = _ints(g.field("pid"))[keep]
        tid = _ints(g.field("tid"))[keep]
        text = _texts(g.field("name"))[keep]
        cats = _texts(g.field("cat"))[keep]
        start = g.start[keep]
        end = g.end[keep]
        order = np.lexsort((-end, start))  # by start, outer ranges first
        pid, tid, text, cats, start, end = pid[order], tid[order], text[order], cats[order], start[order], end[order]
        key = threads.keys(pid, tid)
        depth, parent, crossed = attr.nest_ranges(key, start, end)
        parent = _link_secondary_threads(key, pid, tid, text, start, end, depth, parent)
        depth = _depth_from_parents(parent)
        paths = attr.build_paths(text, depth, parent)
        n = len(start)
        frame = contract_frame(NVTX_COLUMNS, {
            "range_id": np.arange(n, dtype=np.int64), "start": start, "end": end, "duration": end - start,
            "text": text, "domain": cats, "kind": np.full(n, "pushpop", dtype=object), "pid": pid, "tid": tid,
            "depth": depth, "parent_id": parent, "path": paths,
        })
        timeline = attr.NvtxTimeline(key, pid, start, end, depth, parent, crossed)
        self._range_text = TextCodes.of(frame["text"])
        self._range_path = TextCodes.of(frame["path"])
        return frame, timeline

    # -- API calls -----------------------------------------------------------------------------------
    def _api(self, runtime: _Group, driver: _Group, flow_ids: _FlowIds, threads: _ThreadKeys,
             nvtx: pd.DataFrame, timeline: attr.NvtxTimeline
             ) -> tuple[dict[str, Any], attr.Launches]:
        evs = runtime.events + driver.events
        n = len(evs)
        g = _Group(evs, np.concatenate([runtime.start, driver.start]), np.concatenate([runtime.dur, driver.dur]))
        pid = _ints(g.field("pid"))
        tid = _ints(g.field("tid"))
        corr = _ints(g.arg("correlation"))
        corr = flow_ids.fill(corr, g, "s")
        is_driver = np.concatenate([np.zeros(len(runtime.events), np.int64), np.ones(len(driver.events), np.int64)])
        name = TextCodes.of(_per_distinct(_texts(g.field("name")), strip_api_suffix))
        start = g.start
        end = np.maximum(g.end, start)
        key = threads.keys(pid, tid)
        thread_nvtx = timeline.thread_at(key, start) if n else np.empty(0, np.int64)
        api = {"start": start, "pid": pid, "tid": tid, "correlation_id": corr, "is_driver": is_driver}
        data = {
            "start": start, "end": end, "duration": end - start, "name": name,
            "kind": TextCodes(is_driver, np.array(["runtime", "driver"], dtype=object)), "pid": pid, "tid": tid,
            "correlation_id": corr, "return_value": np.full(n, -1, dtype=np.int64),
        }
        data.update(attr.range_columns(self._range_text, self._range_path, thread_nvtx))
        return data, attr.Launches(api, name, thread_nvtx, timeline, nvtx)

    # -- GPU operations ---------------------------------------------------------------------------------
    def _op_columns(self, g: _Group, flow_ids: _FlowIds, launch: attr.Launches) -> dict[str, np.ndarray]:
        pid = _ints(g.field("pid"))
        tid = g.field("tid")
        device = _ints(g.arg("device"))
        device = np.where(device >= 0, device, pid)  # current format: the event's pid is the device
        stream = _ints(g.arg("stream"))
        no_stream = stream < 0
        if no_stream.any():
            stream = np.where(no_stream, _ints(tid), stream)  # "stream 7" (2021) or the stream id (current)
        corr = flow_ids.fill(_ints(g.arg("correlation")), g, "f")
        data: dict[str, np.ndarray] = {
            "start": g.start, "end": g.end, "duration": g.dur, "device": device,
            "context": _ints(g.arg("context")), "stream": stream, "correlation_id": corr,
        }
        data.update(attr.launch_columns(launch, None, corr, self._range_text, self._range_path))
        return data

    def _kernels(self, g: _Group, flow_ids: _FlowIds, launch: attr.Launches) -> pd.DataFrame:
        if not g.events:
            return empty_frame(KERNEL_COLUMNS)
        data = self._op_columns(g, flow_ids, launch)
        names = _texts(g.field("name"))
        grid, block = _dims(g.arg("grid")), _dims(g.arg("block"))
        n = len(names)
        data.update({
            "short_name": _per_distinct(names, kernel_short_name), "name": names,
            "grid_x": grid[:, 0], "grid_y": grid[:, 1], "grid_z": grid[:, 2],
            "block_x": block[:, 0], "block_y": block[:, 1], "block_z": block[:, 2],
            "registers_per_thread": _ints(g.arg("registers")),
            "static_smem": np.zeros(n, dtype=np.int64),
            "dynamic_smem": np.maximum(_ints(g.arg("smem")), 0),
            "launch_type": np.full(n, -1, dtype=np.int64),
            "graph_node_id": _ints(g.arg("graph_node")),
            "graph_id": np.full(n, -1, dtype=np.int64),  # torch.profiler does not name the graph
        })
        data["in_graph"] = attr.graph_membership(data["api_name"], data["graph_node_id"])
        frame = contract_frame(KERNEL_COLUMNS, data, compact=True)
        for col, values in _comm_columns(g).items():  # optional columns: only where the trace has them
            frame[col] = TextCodes.of(values).categorical() if values.dtype == object else values
        return by_start(frame)

    def _memcpy(self, g: _Group, flow_ids: _FlowIds, launch: attr.Launches) -> pd.DataFrame:
        if not g.events:
            return empty_frame(MEMCPY_COLUMNS)
        data = self._op_columns(g, flow_ids, launch)
        info = _per_distinct(_texts(g.field("name")), _memcpy_info)
        data.update({
            "bytes": _ints(g.arg("nbytes")),
            "direction": _texts([i[0] for i in info]), "src_kind": _texts([i[1] for i in info]),
            "dst_kind": _texts([i[2] for i in info]),
        })
        return by_start(contract_frame(MEMCPY_COLUMNS, data, compact=True))

    def _memset(self, g: _Group, flow_ids: _FlowIds, launch: attr.Launches) -> pd.DataFrame:
        if not g.events:
            return empty_frame(MEMSET_COLUMNS)
        data = self._op_columns(g, flow_ids, launch)
        data.update({"bytes": _ints(g.arg("nbytes")),
                     "mem_kind": _per_distinct(_texts(g.field("name")), _memset_kind)})
        return by_start(contract_frame(MEMSET_COLUMNS, data, compact=True))

    def _memory(self, g: _Group, threads: _ThreadKeys, timeline: attr.NvtxTimeline) -> pd.DataFrame:
        """``[memory]`` instant events (``profile_memory=True``) -> the memory frame: one row per caching-
        allocator block allocated (``Bytes`` > 0) or freed (< 0), with the allocator's running totals
        after it and the range open on the event's thread (else on its process). CUDA blocks
        (``Device Type`` 1) are device memory, CPU blocks (0) host memory; a CUDA event without a
        ``Device Id`` keeps device -1."""
        names = _texts(g.field("name"))
        rows = np.flatnonzero(names == "[memory]")
        if not len(rows):
            return empty_frame(MEMORY_COLUMNS)
        evs = [g.events[i] for i in rows.tolist()]
        sub = _Group(evs, g.start[rows], g.dur[rows])
        signed = _ints(sub.arg("mem_bytes"), 0)
        keep = signed != 0
        if not keep.all():
            sub = _Group([e for e, k in zip(sub.events, keep.tolist()) if k], sub.start[keep], sub.dur[keep])
            signed = signed[keep]
        n = len(sub.events)
        if n == 0:
            return empty_frame(MEMORY_COLUMNS)
        dtype = _ints(sub.arg("device_type"))
        kind = np.full(n, "unknown", dtype=object)
        kind[dtype == 1] = "device"
        kind[dtype == 0] = "host"
        device = np.where(dtype == 1, _ints(sub.arg("device_id")), -1)
        device[device < -1] = -1
        pid = _ints(sub.field("pid"))
        tid = _ints(sub.field("tid"))
        ids = timeline.thread_at(threads.keys(pid, tid), sub.start)
        none = ids < 0
        how = np.where(none, 0, 2).astype(np.int8)
        if none.any():
            proc = timeline.process_at(pid[none], sub.start[none])
            ids[none] = proc
            how[np.flatnonzero(none)[proc >= 0]] = 1
        data: dict[str, Any] = {
            "start": sub.start, "device": device, "op": np.where(signed > 0, "alloc", "free").astype(object),
            "bytes": np.abs(signed), "address": _ints(sub.arg("addr")), "mem_kind": kind,
            "source": np.full(n, "allocator", dtype=object),
            "total_allocated": _ints(sub.arg("total_allocated")), "total_reserved": _ints(sub.arg("total_reserved")),
            "stream": np.full(n, -1, dtype=np.int64), "correlation_id": np.full(n, -1, dtype=np.int64),
            "pool_bytes": np.full(n, -1, dtype=np.int64),
            "api_name": np.full(n, "", dtype=object), "api_start": np.full(n, -1, dtype=np.int64),
            "pid": pid, "tid": tid, "attribution": np.array(["none", "process", "thread"], dtype=object)[how],
        }
        data.update(attr.range_columns(self._range_text, self._range_path, ids))
        return by_start(contract_frame(MEMORY_COLUMNS, data, compact=True))

    def _sync(self, g: _Group, launch: attr.Launches) -> pd.DataFrame:
        if not g.events:
            return empty_frame(SYNC_COLUMNS)
        corr = _ints(g.arg("correlation"))
        idx = launch.index.lookup(None, corr)
        kinds = [k if isinstance(k, str) else n for k, n in zip(g.arg("sync_kind"), g.field("name"))]
        data = {
            "start": g.start, "end": g.end, "duration": g.dur, "device": _ints(g.arg("device")),
            "context": _ints(g.arg("context")), "stream": _ints(g.arg("stream")), "correlation_id": corr,
            "sync_type": _per_distinct(_texts(kinds), lambda k: _SYNC_KINDS.get(k.strip().lower(), "unknown")),
            "pid": attr.take(launch.pid, idx), "tid": attr.take(launch.tid, idx),
        }
        return by_start(contract_frame(SYNC_COLUMNS, data, compact=True))

    # -- GPUs, processes, threads -------------------------------------------------------------------------
    def _gpus(self, props: Any) -> pd.DataFrame:
        if not isinstance(props, list) or not props:
            return empty_frame(GPU_COLUMNS)
        mapping = {
            "name": "name", "sm_count": "numSms", "memory_bytes": "totalGlobalMem",
            "compute_major": "computeMajor", "compute_minor": "computeMinor",
            "max_threads_per_block": "maxThreadsPerBlock", "max_threads_per_sm": "maxThreadsPerMultiprocessor",
            "max_registers_per_block": "regsPerBlock", "max_registers_per_sm": "regsPerMultiprocessor",
            "threads_per_warp": "warpSize", "max_shared_per_block": "sharedMemPerBlock",
            "max_shared_per_block_optin": "sharedMemPerBlockOptin",
            "max_shared_per_sm": "sharedMemPerMultiprocessor",
        }
        records: dict[int, dict[str, Any]] = {}
        for i, p in enumerate(props):
            if not isinstance(p, dict):
                continue
            rec: dict[str, Any] = {c: 0 for c in GPU_COLUMNS}
            rec["device"] = _int_or(p.get("id"), i)
            for col, key in mapping.items():
                value = p.get(key)
                if col == "name":
                    rec["name"] = value if isinstance(value, str) else ""
                else:
                    rec[col] = max(_int_or(value, 0), 0)
            if not rec["max_shared_per_sm"]:
                rec["max_shared_per_sm"] = max(_int_or(p.get("maxSharedMemoryPerMultiProcessor"), 0), 0)
            if "AMD" not in rec["name"] and "Radeon" not in rec["name"] and "Instinct" not in rec["name"]:
                fill_cc_limits(rec)  # CUDA compute capabilities; AMD's gfx numbers are not those
            records.setdefault(rec["device"], rec)
        if not records:
            return empty_frame(GPU_COLUMNS)
        frame = pd.DataFrame.from_records([records[d] for d in sorted(records)], columns=list(GPU_COLUMNS))
        return text_as_object(frame.astype({c: "int64" for c in GPU_COLUMNS if c != "name"}))

    def _processes_threads(self, events: list[_Event], is_meta: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
        meta = [events[i] for i in np.flatnonzero(is_meta).tolist()]
        procs: dict[int, str] = {}
        gpu_pids: set[int] = set()
        thread_names: dict[tuple[int, int], str] = {}
        for e in meta:
            name = e.name if isinstance(e.name, str) else ""
            value = e.args.name if e.args is not None else None
            pid = _int_or(e.pid, -1)
            if pid < 0:
                continue
            if name == "process_name" and isinstance(value, str):
                procs.setdefault(pid, value)
            elif name == "process_labels" and e.args is not None and isinstance(e.args.labels, str):
                if e.args.labels.startswith("GPU"):
                    gpu_pids.add(pid)
            elif name == "thread_name" and isinstance(value, str):
                tid = _int_or(e.tid, -1)
                if tid >= 0:
                    thread_names[(pid, tid)] = value
        processes = pd.DataFrame({"pid": np.array([p for p in procs if p not in gpu_pids], dtype=np.int64),
                                  "name": np.array([n for p, n in procs.items() if p not in gpu_pids], dtype=object)})
        threads = pd.DataFrame({"pid": np.array([k[0] for k in thread_names], dtype=np.int64),
                                "tid": np.array([k[1] for k in thread_names], dtype=np.int64),
                                "name": np.array(list(thread_names.values()), dtype=object)})
        if processes.empty:
            processes = empty_frame(PROCESS_COLUMNS)
        if threads.empty:
            threads = empty_frame(THREAD_COLUMNS)
        return (text_as_object(processes.sort_values("pid", ignore_index=True)),
                text_as_object(threads.sort_values(["pid", "tid"], ignore_index=True)))


class _Quality:
    """Values out of range in a torch.profiler trace, counted by kind and event kind, so that the one
    note the report shows says what was changed: a negative ``dur`` and one past 64-bit nanoseconds
    (``2^64``) count as 0, an event with a negative ``ts`` cannot be placed and is left out."""

    _WHAT = {"negative_dur": "a negative duration (dur), counted as 0",
             "huge_dur": "a duration (dur) too large for 64-bit nanoseconds, counted as 0",
             "negative_ts": "a negative timestamp (ts), left out"}

    def __init__(self) -> None:
        self._counts: dict[str, dict[str, int]] = {kind: {} for kind in self._WHAT}

    def add(self, kind: str, label: str, n: int) -> None:
        if n:
            self._counts[kind][label] = self._counts[kind].get(label, 0) + n

    def counts(self) -> dict[str, dict[str, int]]:
        return {kind: dict(by) for kind, by in self._counts.items() if by}

    def note(self) -> str | None:
        parts = []
        for kind, what in self._WHAT.items():
            by = self._counts[kind]
            if by:
                events = ", ".join(f"{n:,} {label}{'' if n == 1 else 's'}" for label, n in by.items())
                parts.append(f"{events} with {what}")
        if not parts:
            return None
        return ("Data quality: this torch.profiler trace has values out of range: " + "; ".join(parts)
                + ". Kernel counts and times below leave those out or count them as 0.")


def _no_gpu_activity(shown: Path, cats: set[str], runtime: _Group, driver: _Group) -> InputError:
    """The one line for a trace without GPU operations: what the host did through the CUDA API (a capture
    that launched kernels still says how much time went to API calls and synchronization) and the
    likely reason, read from the trace itself."""
    names = _texts(runtime.field("name") + driver.field("name"))
    durs = np.concatenate([runtime.dur, driver.dur])
    starts = np.concatenate([runtime.start, driver.start])
    span = int((starts + durs).max() - starts.min()) if len(starts) else 0
    if not len(names):
        return InputError(shown, "torch.profiler trace without GPU activity (no kernel, gpu_memcpy or gpu_memset "
                          "events, and no CUDA API call: CUDA activity was not recorded)",
                          hint="profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] on a GPU run")
    calls = list(zip(names.tolist(), [1] * len(names), durs.tolist()))
    if not launch_calls(calls):
        return InputError(shown, f"torch.profiler trace without GPU activity ({len(names):,} CUDA API calls but no "
                          "kernel launch: no GPU work inside the profiled steps)",
                          hint="profile steps that run on the GPU, with activities=[ProfilerActivity.CPU, "
                               "ProfilerActivity.CUDA]")
    host = host_side_summary(calls, span)
    if "cuda_profiler_range" in cats:
        why = ("it was recorded with the CUPTI range profiler (cuda_profiler_range events: torch.profiler's "
               "experimental_config with profiler_metrics), which replaces the GPU activity trace")
        hint = "record again without profiler_metrics to get the GPU timeline"
    else:
        why = ("CUPTI recorded the API calls but no GPU activity: WSL2 and some virtualized GPUs record none, and "
               "another profiler holding CUPTI at the same time (nsys, DCGM profiling) takes it")
        hint = "record on native Linux with no other profiler attached"
    return InputError(shown, f"torch.profiler trace without GPU activity: {host}; {why}", hint=hint)


def _match_devices(gpus: pd.DataFrame, used: list[Any]) -> pd.DataFrame:
    """``gpus`` with their ids matched to the ids the GPU events carry. ``deviceProperties`` numbers the
    devices the process sees (0, 1 ...), while ROCm's tracer writes the physical index on each kernel
    (device 2 or 9 with ``HIP_VISIBLE_DEVICES`` set, ``deviceProperties`` listing only id 0). Used ids
    without properties take, in order, the listed devices no event uses; when every listed device has
    the same name, a used id beyond them takes that name too (one kind of GPU in the machine)."""
    if gpus.empty or not used:
        return gpus
    ids = np.unique(np.concatenate([np.asarray(u, dtype=np.int64) for u in used]))
    listed = gpus["device"].to_numpy(dtype=np.int64)
    missing = [int(d) for d in ids if d not in set(listed.tolist())]
    if not missing:
        return gpus
    spare = [i for i, d in enumerate(listed.tolist()) if d not in set(ids.tolist())]
    out = gpus.copy()
    device = out["device"].to_numpy(dtype=np.int64).copy()
    for row, d in zip(spare, missing):
        device[row] = d
    out["device"] = device
    left = missing[len(spare):]
    if left and out["name"].nunique() == 1:  # the same GPU model throughout: the unlisted ones are it too
        extra = pd.DataFrame([out.iloc[0].to_dict() | {"device": d} for d in left], columns=out.columns)
        out = pd.concat([out, extra], ignore_index=True)
    return text_as_object(out.sort_values("device", ignore_index=True).astype({"device": "int64"}))


class _ThreadKeys:
    """One int64 key per (pid, tid) pair, shared by ranges and API calls: the pair packed in 64 bits."""

    @staticmethod
    def keys(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
        packed = ((pid.astype(np.uint64) & np.uint64(0x7FFFFFFF)) << np.uint64(32)) | (
            tid.astype(np.uint64) & np.uint64(0xFFFFFFFF))
        return packed.view(np.int64)


class _FlowIds:
    """Launch-flow ids by the (pid, tid, ts) they bind to: ``s`` at the launching call, ``f`` at the GPU
    operation. Used only for events without ``args.correlation`` (built on first need)."""

    def __init__(self, flows: _Group) -> None:
        self._flows = flows
        self._by_phase: dict[str, dict[tuple[int, int, int], int]] | None = None

    def _table(self, phase: str) -> dict[tuple[int, int, int], int]:
        if self._by_phase is None:
            self._by_phase = {"s": {}, "f": {}}
            flows = self._flows
            if flows.events:
                ids = _ints(flows.field("id"))
                pid = _ints(flows.field("pid"))
                tid = _ints(flows.field("tid"))
                for p, e_pid, e_tid, t, i in zip(_texts(flows.field("ph")), pid.tolist(), tid.tolist(),
                                                  flows.start.tolist(), ids.tolist()):
                    if i >= 0:
                        self._by_phase["s" if p == "s" else "f"][(e_pid, e_tid, t)] = i
        return self._by_phase[phase]

    def fill(self, corr: np.ndarray, g: _Group, phase: str) -> np.ndarray:
        missing = np.flatnonzero(corr < 0)
        if not len(missing) or not self._flows.events:
            return corr
        table = self._table(phase)
        pid = _ints([g.events[i].pid for i in missing.tolist()])
        tid = _ints([g.events[i].tid for i in missing.tolist()])
        out = corr.copy()
        for j, i in enumerate(missing.tolist()):
            out[i] = table.get((int(pid[j]), int(tid[j]), int(g.start[i])), -1)
        return out


def _link_secondary_threads(key: np.ndarray, pid: np.ndarray, tid: np.ndarray, text: np.ndarray,
                            start: np.ndarray, end: np.ndarray, depth: np.ndarray,
                            parent: np.ndarray) -> np.ndarray:
    """Parents with the outermost ranges of secondary threads (autograd, data-loader pinning) nested
    under the innermost range of their process's main thread that encloses them.

    The main thread of a process holds its ``ProfilerStep#N`` ranges, else has tid == pid, else has the
    most ranges. Ranges on it are untouched; a root elsewhere gets a parent only when a main-thread range
    covers it entirely."""
    out = parent.copy()
    if len(key) == 0:
        return out
    frame = pd.DataFrame({"key": key, "pid": pid, "tid": tid,
                          "step": pd.Series(text, dtype=object).str.startswith("ProfilerStep#").to_numpy()})
    stats = frame.groupby(["pid", "key", "tid"], sort=False).agg(n=("step", "size"), steps=("step", "sum")).reset_index()
    stats["is_pid"] = stats["pid"] == stats["tid"]
    stats = stats.sort_values(["pid", "steps", "is_pid", "n"], ascending=[True, False, False, False])
    main = dict(zip(stats.drop_duplicates("pid")["pid"].tolist(), stats.drop_duplicates("pid")["key"].tolist()))
    if len(stats) == len(main):  # one thread per process: nothing to link
        return out
    for p, main_key in main.items():
        on_main = np.flatnonzero(key == main_key)
        roots = np.flatnonzero((pid == p) & (key != main_key) & (parent < 0))
        if not len(on_main) or not len(roots):
            continue
        # innermost main-thread range open at each root's start: among main ranges starting at or
        # before it (sorted by start, outer first), walk up from the latest until one encloses the root
        m_start, m_end = start[on_main], end[on_main]
        cand = np.searchsorted(m_start, start[roots], side="right") - 1
        local_parent = np.where(parent[on_main] >= 0, np.searchsorted(on_main, parent[on_main]), -1)
        for _ in range(int(depth[on_main].max()) + 2):
            bad = (cand >= 0) & (m_end[np.maximum(cand, 0)] < end[roots])
            if not bad.any():
                break
            cand[bad] = local_parent[cand[bad]]
        ok = cand >= 0
        out[roots[ok]] = on_main[cand[ok]]
    return out


def _depth_from_parents(parent: np.ndarray) -> np.ndarray:
    depth = np.zeros(len(parent), dtype=np.int64)
    cur = parent.copy()
    for _ in range(len(parent) + 1):
        has = cur >= 0
        if not has.any():
            break
        depth[has] += 1
        cur[has] = parent[cur[has]]
    return depth


def _distributed(info: Any) -> tuple[int | None, int | None]:
    if not isinstance(info, dict):
        return None, None
    rank = info.get("rank")
    world = info.get("world_size")
    r = _int_or(rank, -1) if rank is not None else -1
    w = _int_or(world, -1) if world is not None else -1
    return (r if r >= 0 else None), (w if w > 0 else None)


def _generation(cats: set[str], flows: _Group, events: list[_Event], ranges: _Group, kernels: _Group) -> str:
    """Which vocabulary/time format the trace uses: ``2021`` (Operator/Runtime/Kernel), ``2024+``
    (nanosecond decimals), ``2023`` (``ac2g`` flows), ``2022`` (``async_cpu_to_gpu`` flows), ``2022+``."""
    if cats & GEN_2021_CATS:
        return "2021"
    sample = [e.ts for e in (kernels.events[:50] + ranges.events[:50])]
    if any(b"." in bytes(r) for r in sample):
        return "2024+"
    flow_cats = set(_texts(flows.field("cat")).tolist())
    if "ac2g" in flow_cats:
        return "2023"
    if "async_cpu_to_gpu" in flow_cats:
        return "2022"
    return "2022+"


def load_kineto(path: Path, *, progress: Progress | None = None, display_path: Path | None = None,
                source_format: str = "kineto-json") -> Trace:
    """Load a torch.profiler (Kineto) Chrome-trace JSON file (plain, ``.gz`` or ``.xz``)."""
    return _KinetoLoader(Path(path), progress, display_path, source_format).run()
