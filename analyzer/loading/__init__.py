"""Loading: any supported trace file -> one :class:`~analyzer.loading.model.Trace`.

``load_trace(path)`` accepts an Nsight Systems SQLite export (2020.3 through 2025.x schemas), an
``.nsys-rep``/``.qdrep`` report (exported once with the installed ``nsys`` and cached), an
``.xz``-compressed SQLite export, a torch.profiler (Kineto) Chrome-trace JSON file, plain, ``.gz`` or
``.xz`` (:mod:`analyzer.loading.kineto`), or rocprofv3's JSON output (:mod:`analyzer.loading.rocprof`). The format is recognised by content, never by name. Every problem with the input is an :class:`~analyzer.errors.InputError`
(or :class:`~analyzer.errors.UnsupportedFormatError`) with a one-line message saying what to do.
"""
from __future__ import annotations

import gzip
import lzma
import re
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analyzer.errors import InputError, UnsupportedFormatError
from analyzer.loading.model import TIME_MAX, Trace, TraceInfo, empty_frame
from analyzer.loading.columns import SHARED_CONSTANT_FRAMES, shared_constants
from analyzer.loading.sqlite_pages import SQLITE_MAGIC

if TYPE_CHECKING:
    from analyzer.loading.cache import TraceCache

__all__ = ["TRACE_FORMATS", "Trace", "TraceInfo", "detect_format", "empty_frame", "load_trace",
           "looks_like_profiler_trace"]

QDREP_MAGIC = b"NVIDIA Tegra Profiler Report"
NCU_MAGIC = b"NVR\x00"
XZ_MAGIC = b"\xfd7zXZ\x00"
GZIP_MAGIC = b"\x1f\x8b"
#: a Git LFS pointer (what a clone without ``git lfs`` holds in place of a large file): its first line
LFS_MAGIC = b"version https://git-lfs.github.com/spec/"
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
#: containers a trace is often sent in, which the analyzer does not open: named in the error
ARCHIVE_MAGICS = ((b"PK\x03\x04", "a ZIP archive"), (b"BZh", "a bzip2-compressed file"),
                  (b"\x28\xb5\x2f\xfd", "a Zstandard-compressed file"), (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"))
#: what :func:`detect_format` calls a file that :func:`load_trace` may read
TRACE_FORMATS = frozenset({"nsys-sqlite", "nsys-rep", "json", "xz"})


def _check_path(path: Path) -> None:
    if not path.exists():
        raise InputError(path, "no such file", hint="check the path")
    if path.is_dir():
        raise InputError(path, "is a directory, not a trace file",
                         hint="pass the .sqlite export (or .nsys-rep report) inside it")
    import stat

    mode = path.stat().st_mode
    if not stat.S_ISREG(mode):  # a FIFO would block the first read forever, a device never end
        kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        raise InputError(path, f"is {kind}, not a trace file", hint="save the trace to a file and pass that")


def detect_format(path: str | Path) -> str:
    """What kind of file ``path`` is, from its first bytes (and suffix for reports):
    ``"nsys-sqlite"`` (SQLite with nsys tables), ``"sqlite"`` (other SQLite), ``"nsys-rep"``,
    ``"ncu-rep"``, ``"json"`` (a JSON document, plain, gzip- or xz-compressed: torch.profiler traces),
    ``"xz"`` (anything else xz-compressed), ``"gzip"`` (anything else gzip-compressed), ``"lfs-pointer"``
    (a Git LFS pointer standing in for the file, whatever its name), ``"empty"`` or ``"unknown"``. Raises
    :class:`InputError` for a missing path or a directory."""
    p = Path(path)
    _check_path(p)
    try:
        with open(p, "rb") as fh:
            head = fh.read(64)
    except OSError as exc:
        raise InputError(p, f"cannot read the file ({exc.strerror})", hint="check its permissions") from exc
    if not head:
        return "empty"
    if head.startswith(SQLITE_MAGIC):
        return "nsys-sqlite" if _has_nsys_tables(p) else "sqlite"
    if head.startswith(LFS_MAGIC):
        return "lfs-pointer"
    if head.startswith(QDREP_MAGIC) or p.suffix.lower() in REPORT_SUFFIXES:
        return "nsys-rep"
    if head.startswith(NCU_MAGIC) or p.suffix.lower() == ".ncu-rep":
        return "ncu-rep"
    if head.startswith(XZ_MAGIC):
        return "json" if looks_like_json(_peek_decompressed(p, lzma.open)) else "xz"
    if head.startswith(GZIP_MAGIC):
        return "json" if looks_like_json(_peek_decompressed(p, gzip.open)) else "gzip"
    if looks_like_json(head):
        return "json"
    return "unknown"


def _head(path: Path) -> bytes:
    """The first bytes of ``path`` (``b""`` when it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(8)
    except OSError:
        return b""


def _lfs_size(path: Path) -> str:
    """`` (N bytes)`` from a Git LFS pointer's ``size`` line, ``""`` when it has none (a pointer is a few
    lines: only its first 512 bytes are read)."""
    try:
        with open(path, "rb") as fh:
            text = fh.read(512).decode("ascii", "replace")
    except OSError:
        return ""
    m = re.search(r"^size (\d{1,15})$", text, re.MULTILINE)
    return f" ({int(m.group(1)):,} bytes)" if m else ""


def looks_like_json(head: bytes) -> bool:
    """Whether the first bytes of a (decompressed) file start a JSON document (after whitespace or a
    UTF-8 byte-order mark)."""
    return head.lstrip(b" \t\r\n\xef\xbb\xbf")[:1] in (b"{", b"[")


def _peek_decompressed(path: Path, opener: Callable[..., Any], size: int = 256) -> bytes:
    """The first ``size`` bytes of a compressed file's content (``b""`` when it cannot be decompressed)."""
    try:
        with opener(path, "rb") as fh:
            return bytes(fh.read(size))
    except (OSError, EOFError, lzma.LZMAError, zlib.error):
        return b""


#: how much of a JSON file's (decompressed) text :func:`looks_like_profiler_trace` reads
TRACE_SNIFF_BYTES = 64 * 1024
#: members only a Chrome / torch.profiler trace document has (Kineto writes ``schemaVersion`` then
#: ``deviceProperties`` first; Chrome's format has ``traceEvents``); ``schemaVersion`` alone is not one
#: (container manifests have it too)
_TRACE_MEMBERS = re.compile(rb'"(traceEvents|deviceProperties|distributedInfo|baseTimeNanoseconds|rocprofiler-sdk-tool)"\s*:')
_EVENT_KEY = re.compile(rb'"ph"\s*:')


def looks_like_profiler_trace(path: Path) -> bool:
    """Whether a file :func:`detect_format` calls ``"json"`` reads as a torch.profiler / Chrome trace
    from its first :data:`TRACE_SNIFF_BYTES` bytes of text (decompressed): an object with a
    ``traceEvents``, ``deviceProperties``, ``distributedInfo`` or ``baseTimeNanoseconds`` member, or
    Chrome's bare array of events (``[{... "ph": ...``). A folder scan passes over other JSON (a
    configuration, a results file, a report); a file named on the command line is read whatever this says."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(8)
            head = fh.read(TRACE_SNIFF_BYTES) if not magic.startswith((XZ_MAGIC[:6], GZIP_MAGIC)) else b""
    except OSError:
        return False
    if magic.startswith(XZ_MAGIC):
        text = _peek_decompressed(path, lzma.open, TRACE_SNIFF_BYTES)
    elif magic.startswith(GZIP_MAGIC):
        text = _peek_decompressed(path, gzip.open, TRACE_SNIFF_BYTES)
    else:
        text = magic + head
    text = text.lstrip(b" \t\r\n\xef\xbb\xbf")
    if text[:1] == b"[":
        return text[1:].lstrip(b" \t\r\n")[:1] == b"{" and _EVENT_KEY.search(text) is not None
    return text[:1] == b"{" and _TRACE_MEMBERS.search(text) is not None


def _json_head(path: Path, size: int = 256) -> bytes:
    """The first ``size`` bytes of a JSON file's text, decompressed (``b""`` when unreadable)."""
    magic = _head(path)
    if magic.startswith(XZ_MAGIC[:6]):
        return _peek_decompressed(path, lzma.open, size)
    if magic.startswith(GZIP_MAGIC):
        return _peek_decompressed(path, gzip.open, size)
    try:
        with open(path, "rb") as fh:
            return fh.read(size)
    except OSError:
        return b""


def _has_nsys_tables(path: Path) -> bool:
    from analyzer.loading.nsys_sqlite.schema import NSYS_MARKER_TABLES
    import sqlite3

    from analyzer.loading.sqlite_reader import fold_name, sqlite_uri, wal_of  # here: a torch.profiler load needs none

    try:
        conn = sqlite3.connect(sqlite_uri(path), uri=True)
        conn.text_factory = lambda b: b.decode("utf-8", "replace")  # a damaged name is no nsys table name
        try:
            names = {fold_name(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            conn.close()
    except (sqlite3.DatabaseError, UnicodeDecodeError):  # sqlite3 decodes its error message, which can quote damaged bytes
        return True  # let the loader report the corruption precisely
    if wal_of(path) is not None:
        return True  # tables may be in its -wal: the loader reads the file with it
    return any(t.lower() in names for t in NSYS_MARKER_TABLES)


def load_trace(
    path: str | Path,
    *,
    progress: Callable[[str], None] | None = None,
    cache_dir: Path | None = None,
    cache: TraceCache | None = None,
) -> Trace:
    """Load a trace file into the normalized :class:`Trace` model.

    ``progress`` receives short stage messages (``"reading kernels (1,023,456 rows)"``); ``cache_dir``
    holds SQLite exports of ``.nsys-rep`` reports and decompressed ``.xz`` files (default
    ``~/.cache/gpu-trace-analyzer``). With ``cache`` (a :class:`~analyzer.loading.cache.TraceCache`; the
    ``analyze`` command passes one unless ``--no-cache``), a file loaded before is read back from the
    columnar cache instead, and a new one is stored there."""
    p = Path(path)
    fmt = detect_format(p)
    if cache is not None and fmt in ("xz", "nsys-sqlite", "sqlite", "nsys-rep"):
        trace = cache.load(p, lambda: _load(p, fmt, progress, cache_dir), progress)
    elif cache is not None and fmt == "json":  # not stored, but its facts are (analyzer.facts.cache)
        trace = cache.load_uncached(p, lambda: _load(p, fmt, progress, cache_dir))
    else:
        trace = _load(p, fmt, progress, cache_dir)
    return with_shared_constants(trace)


def with_shared_constants(trace: Trace) -> Trace:
    """``trace`` with the integer columns of its per-row frames that hold one value in every row stored once
    (:func:`analyzer.loading.columns.shared_constants`; the frames are replaced, their values unchanged).
    Done last, after the trace cache stored the trace: the cache holds ordinary columns. A frame a trace
    served lazily from the cache has not read yet is left alone (the cache shares its constants when it
    reads it)."""
    for name in sorted(SHARED_CONSTANT_FRAMES):
        if name not in trace.__dict__:
            continue
        frame = trace.__dict__[name]
        shared = shared_constants(frame)
        if shared is not frame:
            setattr(trace, name, shared)
    return trace


def _load(p: Path, fmt: str, progress: Callable[[str], None] | None, cache_dir: Path | None) -> Trace:
    trace = _read(p, fmt, progress, cache_dir)
    for label, frame in (("kernel", trace.kernels), ("memcpy", trace.memcpy), ("memset", trace.memset),
                         ("CUDA API call", trace.api)):
        if "duration" in frame and len(frame) and float(frame["duration"].to_numpy(dtype="float64").sum()) >= TIME_MAX:
            raise InputError(p, f"its {label} durations add up to more than 2^62 ns (about 146 years), which "
                             "no recording holds and whose totals overflow 64-bit integers",
                             hint="the trace is damaged; record or export it again")
    return trace


def _read(p: Path, fmt: str, progress: Callable[[str], None] | None, cache_dir: Path | None) -> Trace:
    if fmt in ("xz", "nsys-sqlite", "sqlite", "nsys-rep"):  # imported here: a torch.profiler run needs neither
        from analyzer.loading import nsys_rep
        from analyzer.loading.nsys_sqlite.loader import load_nsys_sqlite

    if fmt == "xz":
        inner = nsys_rep.cached_decompressed(p, cache_dir=cache_dir, progress=progress)
        inner_fmt = detect_format(inner)
        if inner_fmt not in ("nsys-sqlite", "sqlite"):
            raise InputError(p, "the .xz file does not contain an SQLite export",
                             hint="pass an Nsight Systems SQLite export (.sqlite or .sqlite.xz)")
        return load_nsys_sqlite(inner, progress=progress, source_format="nsys-sqlite", display_path=p)
    if fmt in ("nsys-sqlite", "sqlite"):
        return load_nsys_sqlite(p, progress=progress, source_format="nsys-sqlite")
    if fmt == "nsys-rep":
        sqlite_path = nsys_rep.cached_sqlite_for_report(p, cache_dir=cache_dir, progress=progress)
        return load_nsys_sqlite(sqlite_path, progress=progress, source_format="nsys-rep", display_path=p)
    if fmt == "ncu-rep":
        raise UnsupportedFormatError(
            p, "is an Nsight Compute report, not a timeline trace",
            hint="pass the Nsight Systems trace as the input and this file with --ncu",
        )
    if fmt == "json":
        from analyzer.loading.rocprof import is_rocprof_json, load_rocprof_json

        if is_rocprof_json(_json_head(p)):
            return load_rocprof_json(p, progress=progress)
        from analyzer.loading.kineto.loader import load_kineto

        return load_kineto(p, progress=progress)
    if fmt == "empty":
        raise InputError(p, "file is empty", hint="export the trace again")
    if fmt == "lfs-pointer":
        raise InputError(p, f"a Git LFS pointer, not the trace: the repository keeps the file{_lfs_size(p)} in "
                         "Git LFS and this checkout holds only the pointer",
                         hint=f"fetch it (git lfs pull --include '{p.name}') or download the file itself")
    if fmt == "gzip" and _peek_decompressed(p, gzip.open).startswith(SQLITE_MAGIC):
        raise InputError(p, "a gzip-compressed SQLite file, which the analyzer does not decompress",
                         hint=f"decompress it (gunzip -k {p.name}) and pass the .sqlite, or compress it "
                              "with xz instead (.sqlite.xz is read as it is)")
    if fmt in ("gzip", "xz"):
        raise InputError(p, f"a {fmt}-compressed file that holds neither a JSON trace nor an SQLite export",
                         hint="pass an nsys export (.sqlite, .nsys-rep) or a torch.profiler trace (.json, .json.gz)")
    if p.suffix.lower() == ".qdstrm":  # nsys's raw capture, left when the conversion at the end failed
        raise InputError(p, "an unconverted Nsight Systems capture (.qdstrm), which only nsys's QdstrmImporter "
                            "reads", hint=f"convert it where nsys is installed (QdstrmImporter -i {p.name}) and "
                                          "pass the .nsys-rep it writes, or that report's SQLite export")
    archive = next((name for magic, name in ARCHIVE_MAGICS if _head(p).startswith(magic)), None)
    if archive is not None:
        raise InputError(p, f"{archive}, not a trace file",
                         hint="unpack it and pass the trace inside (.sqlite, .nsys-rep, .pt.trace.json); "
                              ".sqlite.xz, .json.gz and .json.xz are read as they are")
    raise InputError(
        p, "not a trace this analyzer reads (neither an Nsight Systems export or report nor a torch.profiler JSON)",
        hint="pass OUT.sqlite from: nsys export --type sqlite -o OUT.sqlite IN.nsys-rep, or a .pt.trace.json(.gz)",
    )
