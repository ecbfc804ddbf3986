"""The torch.profiler document: its format recognised (compression by magic bytes, JSON object or
bare event list, torch.profiler's event categories) and decoded into typed structs that keep only
the fields the loader reads.
"""
from __future__ import annotations

import gzip
import lzma
import os
import re
import zlib
from pathlib import Path
from typing import Any

import msgspec

from analyzer.boundedio import BoundedReadError, decompressed_limit, read_decompressed
from analyzer.errors import InputError

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


class Event(msgspec.Struct):
    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: msgspec.Raw = msgspec.Raw(b"")
    dur: Any = None
    id: Any = None
    args: _Args | None = None


class Document(msgspec.Struct):
    traceEvents: list[Event] | None = None  # the format's spelling
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    displayTimeUnit: Any = None
    traceName: Any = None
    host_name: Any = None


_DOC_DECODER = msgspec.json.Decoder(Document)


_LIST_DECODER = msgspec.json.Decoder(list[Event])


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


def decode_document(buf: bytes | bytearray, shown: Path) -> Document:
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


def _decode_json(buf: bytes | bytearray, shown: Path) -> Document:
    first = buf[:64].lstrip(b" \t\r\n")[:1]
    try:
        if first == b"[":  # Chrome's "JSON array format": a bare list of events
            return Document(traceEvents=_LIST_DECODER.decode(buf))
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
