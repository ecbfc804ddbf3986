"""The torch.profiler document: its format recognised (compression by magic bytes, JSON object or
bare event list, torch.profiler's event categories) and decoded into typed structs that keep only
the fields the loader reads.

Two ways to decode: :class:`EventStream` reads the decompressed text in blocks and decodes the
``traceEvents`` array chunk by chunk (the caller turns each chunk into columns and drops it, so
memory holds about one block of text and one chunk of structs, never the whole text or one object
per event of the file); :func:`decode_document` decodes a whole text at once. The loader streams,
and falls back to the whole text where the stream gives up (:class:`StreamFallback`: a layout it does
not expect, or text that does not decode), so a damaged file gets the whole decode's one line.
"""
from __future__ import annotations

import gzip
import lzma
import os
import re
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from analyzer.boundedio import BoundedReadError, decompressed_limit, read_blocks, read_decompressed
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


# gc=False: decoded events hold JSON scalars and lists only, never a reference cycle, so the collector
# need not track the millions of them a large trace decodes into
class _Args(msgspec.Struct, gc=False):
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
    coll_name: Any = msgspec.field(default=None, name="Collective name")  # the torch.distributed call
    # torch.profiler(profile_memory=True) "[memory]" instant events: the caching allocator's block
    mem_bytes: Any = msgspec.field(default=None, name="Bytes")  # > 0 allocated, < 0 freed
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    addr: Any = msgspec.field(default=None, name="Addr")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    device_type: Any = msgspec.field(default=None, name="Device Type")  # c10::DeviceType: 0 CPU, 1 CUDA
    name: Any = None  # process_name / thread_name metadata
    labels: Any = None  # process_labels metadata ("CPU", "GPU 0")


class Event(msgspec.Struct, gc=False):
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
    roctracer_version: Any = None  # written by PyTorch built for ROCm
    hip_runtime_version: Any = None


_DOC_DECODER = msgspec.json.Decoder(Document)


_LIST_DECODER = msgspec.json.Decoder(list[Event])


@contextmanager
def _opened(path: Path, shown: Path) -> Iterator[tuple[Any, int | None]]:
    """``path`` as a binary stream, gunzipped / unxz'd when compressed (by magic bytes), with the bound
    on what decompression may produce (:func:`analyzer.boundedio.decompressed_limit`; None for a plain
    file, read as it is). What goes wrong while it is read is one :class:`InputError`: unreadable,
    empty, corrupt or too large once decompressed."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(6)
            if not head:
                raise InputError(shown, "file is empty", hint="record the trace again")
            fh.seek(0)
            limit = decompressed_limit(os.fstat(fh.fileno()).st_size)
            if head.startswith(GZIP_MAGIC):
                with gzip.GzipFile(fileobj=fh, mode="rb") as gz:
                    yield gz, limit
            elif head.startswith(XZ_MAGIC):
                with lzma.LZMAFile(fh, "rb") as xz:
                    yield xz, limit
            else:
                yield fh, None
    except (EOFError, gzip.BadGzipFile, zlib.error, lzma.LZMAError) as exc:
        raise InputError(shown, f"the compressed trace is truncated or corrupt ({exc})",
                         hint="copy or record it again") from exc
    except BoundedReadError as exc:
        raise InputError(shown, f"the compressed trace {exc.reason}", hint=exc.hint) from None
    except OSError as exc:
        raise InputError(shown, f"cannot read the file ({exc.strerror or exc})", hint="check its permissions") from exc


def read_json_bytes(path: Path, display: Path | None = None) -> bytes | bytearray:
    """The JSON text of ``path``, decompressed when compressed (:func:`_opened`). (The decoded events
    keep slices of it: their timestamps are parsed from the text.)"""
    with _opened(path, display or path) as (stream, limit):
        return stream.read() if limit is None else read_decompressed(stream, limit)


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


# ----------------------------------------------------------------------------------------------------
# streaming: traceEvents in chunks of whole events
# ----------------------------------------------------------------------------------------------------
class StreamFallback(Exception):
    """The streaming split cannot go on (an unexpected layout or text that does not decode): the
    caller reads the file whole with :func:`decode_document`, which names the problem."""


_BLOCK = 1 << 20  # 1 MB: ~4,000 events a chunk (4 MB: the same CPU time, 10 MB more peak)
_PENDING = 32 << 20  # text without a provable cut (one event that long) before the whole-file path
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOM = b"\xef\xbb\xbf"
_WS = b" \t\r\n"
_TRIES = 4  # cut candidates tried per block (real files: the first one)
_LOOKS = 20_000  # opening braces looked at per block for a candidate


def _blocks(path: Path, shown: Path) -> Iterator[bytes]:
    """The decompressed text of ``path`` in blocks, opened and bounded as :func:`read_json_bytes` reads
    it, with the same one-line errors."""
    with _opened(path, shown) as (stream, limit):
        yield from read_blocks(stream, limit, _BLOCK)


def _decode_chunk(text: bytes) -> list[Event] | None:
    """The events of one JSON array text, with :func:`decode_document`'s repairs of invalid Unicode; None
    when it does not decode."""
    buf = text
    for _ in range(3):
        try:
            return _LIST_DECODER.decode(buf)
        except UnicodeDecodeError:
            buf = buf.decode("utf-8", "replace").encode("utf-8")
        except (msgspec.DecodeError, RecursionError):  # ValidationError is a DecodeError
            if not _LONE_SURROGATE.search(buf):
                return None
            buf = _LONE_SURROGATE.sub(rb"\\ufffd", buf)
    return None


class EventStream:
    """The ``traceEvents`` of a torch.profiler JSON file, decoded chunk by chunk.

    No scan of the text: a chunk ends at a candidate separator between two events (``}`` ``,`` ``{``,
    the last in the block), and decoding ``[`` + the text since the last cut + ``]`` checks the guess.
    For valid JSON that text decodes only when the comma separates elements of the events array (cut
    inside a string or a nested value, something stays open), so a failed guess tries an earlier
    candidate, then waits for more text. The end of the array is found the same way from the end of
    the file (its last ``]`` that closes a decodable list), and the rest of the document -- the text
    before the array and after it, with ``[]`` in its place -- must decode with that empty list as its
    only ``traceEvents``. Every piece decoding makes the whole file valid JSON with exactly these
    events, so the result is the whole-file decode's. Anything else raises :class:`StreamFallback`
    (after at most :data:`_PENDING` bytes of text without a cut)."""

    def __init__(self, path: Path, shown: Path) -> None:
        self.path = path
        self.shown = shown
        self.document: Document | None = None
        self.bytes_read = 0

    def read(self, add: Callable[[list[Event]], None]) -> None:
        """Hand every chunk's events to ``add``; then :attr:`document` holds the other members."""
        head = bytearray()
        pending = _Pending()  # "[" + events text not yet decoded
        searched = 0  # candidates at or after this offset of the pending text were tried
        bare = False
        for block in _blocks(self.path, self.shown):
            self.bytes_read += len(block)
            if not pending.size:  # still before the events array
                if not head and block.startswith(_BOM):
                    block = block[3:]
                head += block
                opened = self._events_open(head)
                if opened is None:
                    if len(head) > _PENDING:
                        raise StreamFallback
                    continue
                bare = head.lstrip(_WS)[:1] == b"["
                pending.append(b"[")
                pending.append(head[opened + 1:])
                del head[opened + 1:]
                searched = 1
            else:
                pending.append(block)
            cut = self._cut(pending.buf, pending.size, searched, add)
            if cut:
                pending.drop(cut)
            searched = pending.size
            if pending.size > _PENDING:
                raise StreamFallback
        if not pending.size:
            raise StreamFallback
        tail = self._close(pending.buf, pending.size, add)
        rest = bytes(head + tail)
        if rest.count(b"traceEvents") > (0 if bare else 1):  # another traceEvents member
            raise StreamFallback
        try:
            doc = decode_document(rest, self.shown)
        except InputError:
            raise StreamFallback from None
        if doc.traceEvents != []:
            raise StreamFallback
        doc.traceEvents = None
        self.document = doc

    @staticmethod
    def _events_open(head: bytearray) -> int | None:
        """Offset in ``head`` of the ``[`` that opens the events array, if read yet."""
        stripped = head.lstrip(_WS)
        if not stripped:
            return None
        if stripped[:1] == b"[":
            return len(head) - len(stripped)
        if stripped[:1] != b"{":
            raise StreamFallback
        m = _EVENTS_KEY.search(head)
        return None if m is None else m.end() - 1

    @staticmethod
    def _cut(buf: bytearray, size: int, searched: int, add: Callable[[list[Event]], None]) -> int:
        """Decode the events before the last separator of ``buf[:size]`` that proves to be one, hand
        them to ``add`` and return the separator's offset (0: none yet)."""
        hi, tries = size, 0
        for _ in range(_LOOKS):
            brace = buf.rfind(b"{", searched, hi)
            if brace < 0 or tries >= _TRIES:
                return 0
            hi = brace
            comma = _before(buf, brace)
            if comma < 0 or buf[comma] != ord(",") or (close := _before(buf, comma)) < 0 or buf[close] != ord("}"):
                continue
            tries += 1
            events = _decode_chunk(_closed_copy(buf, comma))
            if events is not None:
                add(events)
                return comma
        return 0

    @staticmethod
    def _close(buf: bytearray, size: int, add: Callable[[list[Event]], None]) -> bytes:
        """Decode the last events of ``buf[:size]`` (up to the ``]`` that closes the array) and return
        the text from it."""
        hi = size
        for _ in range(2 * _TRIES):
            end = buf.rfind(b"]", 0, hi)
            if end < 0:
                break
            events = _decode_chunk(bytes(buf[:end + 1]))
            if events is not None:
                add(events)
                return bytes(buf[end:size])
            hi = end
        raise StreamFallback


class _Pending:
    """The text not yet decoded: ``buf[:size]`` of a buffer that keeps its capacity. Appending a block
    and dropping the decoded text move bytes within it; a bytearray resized instead would give its
    megabyte back at each cut and take it again at the next block (allocation and page faults: 0.15 s
    of system and user time on a 311 MB trace)."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.size = 0

    def append(self, data: bytes | bytearray) -> None:
        end = self.size + len(data)
        if end > len(self.buf):  # more text than room: grow, with room for a block more
            self.buf.extend(bytes(end + _BLOCK - len(self.buf)))
        self.buf[self.size:end] = data
        self.size = end

    def drop(self, cut: int) -> None:
        """Forget the text from offset 1 (after the ``[``) through ``cut``."""
        tail = self.size - cut - 1
        self.buf[1:1 + tail] = self.buf[cut + 1:self.size]
        self.size = 1 + tail


def _closed_copy(buf: bytearray, comma: int) -> bytes:
    """``buf[:comma] + b"]"`` in one copy: the separator is turned into the closing bracket while the text
    is copied out, then put back. (The decoded events keep slices of the copy, never of ``buf``, which
    grows and shrinks as blocks come in.)"""
    buf[comma] = 0x5D  # "]"
    try:
        with memoryview(buf) as view:
            return bytes(view[:comma + 1])
    finally:
        buf[comma] = 0x2C  # ","


def _before(buf: bytearray, i: int) -> int:
    """Offset of the last non-whitespace byte before ``i`` (-1: none within 4 kB)."""
    j = i - 1
    stop = max(-1, i - 4096)
    while j > stop and buf[j] in _WS:
        j -= 1
    return j if j > stop else -1
