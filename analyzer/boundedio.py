"""Bounded reads: every input file goes through here, so nothing the user (or an attacker) passes can
grow memory or disk without bound or block the run.

* :func:`read_regular` reads a whole small file (rule packs, ``extends:``, configurations, accepted
  findings, power and ncu CSVs): regular files only (no devices such as ``/dev/zero``, FIFOs, sockets,
  and nothing under ``/proc``, ``/sys`` or ``/dev``), opened without blocking, and the size limit is
  checked **while reading**, never trusted from ``st_size`` (``/proc`` files say 0).
* :func:`read_decompressed` / :func:`copy_decompressed` stream a gzip or xz file's content with a cap:
  :func:`decompressed_limit` of the compressed size (:data:`RATIO` times it, at least :data:`FLOOR`,
  at most :data:`ABSOLUTE`); ``ANALYZER_MAX_INPUT`` (``8GB``, ``500MB``, bytes) replaces the cap. A
  decompression bomb stops at the cap with one line; the content read so far is the only memory used.

Real traces expand 6x (nsys SQLite, xz) to 33x (a small torch.profiler JSON, under the floor) in
``tests/data``. With the defaults a 16 MB gzip bomb stops at 539 MB of content, 0.68 GB peak memory.
"""
from __future__ import annotations

import io
import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

RATIO = 32  # decompressed bytes allowed per compressed byte
FLOOR = 64 * 2**20  # small compressed files may expand this far whatever their ratio
ABSOLUTE = 8 * 2**30  # never more than this without ANALYZER_MAX_INPUT
ENV = "ANALYZER_MAX_INPUT"
_CHUNK = 1 << 20
_PSEUDO_ROOTS = ("/proc", "/sys", "/dev")


class BoundedReadError(Exception):
    """A file that cannot be read within the bounds: ``reason`` says why, ``hint`` what to do."""

    def __init__(self, reason: str, hint: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.hint = hint


def parse_size(text: str) -> int:
    """``"8GB"`` -> 8e9, ``"500MB"``, ``"2GiB"``, ``"123"`` (bytes); raises ValueError."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?)b?\s*", text.lower())
    if not m:
        raise ValueError(f"bad size {text!r}; write e.g. 8GB, 500MB or 123")
    base = 1024 if m.group(3) else 1000
    return int(float(m.group(1)) * base ** " kmgt".index(m.group(2) or " "))


def env_limit() -> int | None:
    """``ANALYZER_MAX_INPUT`` in bytes, or None when unset. Raises :class:`BoundedReadError` when it is
    not a size."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return None
    try:
        return parse_size(text)
    except ValueError as err:
        raise BoundedReadError(f"{ENV}={text!r} is not a size", "write e.g. ANALYZER_MAX_INPUT=16GB") from err


def decompressed_limit(compressed_size: int) -> int:
    """How many bytes a compressed file of ``compressed_size`` bytes may expand to."""
    env = env_limit()
    if env is not None:
        return env
    return min(max(RATIO * compressed_size, FLOOR), ABSOLUTE)


def max_input_bytes() -> int:
    """The most bytes a whole-file text input (an ncu CSV) may have: ``ANALYZER_MAX_INPUT``, else
    :data:`ABSOLUTE`."""
    env = env_limit()
    return ABSOLUTE if env is None else env


def _size_text(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 10**9 else f"{n / 1e6:.0f} MB"


def _over(limit: int) -> BoundedReadError:
    return BoundedReadError(
        f"expands to more than {_size_text(limit)} when decompressed (a damaged file or a decompression "
        "bomb?)", f"if the trace really is that large, set {ENV} higher (e.g. {ENV}={-(-2 * limit // 10**9)}GB)")


def read_decompressed(stream: io.BufferedIOBase | IO[bytes], limit: int) -> bytearray:
    """All of ``stream`` (a gzip/xz reader), at most ``limit`` bytes; :class:`BoundedReadError` past it.
    Memory: the content plus one chunk (a ``bytearray`` grown in place and returned as it is, not pieces
    joined into a second copy)."""
    buf = bytearray()
    while True:
        chunk = stream.read(min(_CHUNK, limit + 1 - len(buf)))
        if not chunk:
            return buf
        buf += chunk
        if len(buf) > limit:
            raise _over(limit)


def read_blocks(stream: IO[bytes], limit: int | None, size: int = 4 << 20) -> Iterator[bytes]:
    """``stream`` (a gzip/xz reader, or a plain file with ``limit`` None) in blocks of up to ``size``
    bytes, at most ``limit`` bytes in all: :class:`BoundedReadError` past it, raised at the block that
    crosses it. Memory: one block."""
    total = 0
    while True:
        block = stream.read(size)
        if not block:
            return
        total += len(block)
        if limit is not None and total > limit:
            raise _over(limit)
        yield block


def copy_decompressed(stream: IO[bytes], out: IO[bytes], limit: int) -> int:
    """Copy ``stream`` to ``out`` in chunks, at most ``limit`` bytes; returns the bytes copied."""
    total = 0
    while True:
        chunk = stream.read(_CHUNK)
        if not chunk:
            return total
        total += len(chunk)
        if total > limit:
            raise _over(limit)
        out.write(chunk)


def check_regular(path: Path, what: str) -> None:
    """Raise :class:`BoundedReadError` unless ``path`` names a regular file outside the pseudo file
    systems (``/proc``, ``/sys``, ``/dev``)."""
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError) as err:
        raise BoundedReadError(f"cannot be resolved ({err})", f"give the path of the {what}") from None
    if any(real == root or real.startswith(root + "/") for root in _PSEUDO_ROOTS):
        raise BoundedReadError(f"is a system file ({real}), not a regular file", f"give the path of the {what}")


def read_regular(path: str | Path, limit: int, what: str = "file",
                 opener: Callable[..., int] = os.open) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them; raises
    :class:`BoundedReadError` for a device, FIFO, socket, directory, a file under ``/proc``, ``/sys`` or
    ``/dev``, or one longer than ``limit`` (counted while reading), and ``OSError`` when it cannot be
    opened or read. ``what`` names the file in messages (``rule file``, ``configuration``)."""
    p = Path(path)
    if "\0" in str(p):
        raise BoundedReadError("has a NUL byte in its path", f"give the path of the {what}")
    check_regular(p, what)
    fd = opener(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    with os.fdopen(fd, "rb", buffering=0) as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file")
            raise BoundedReadError(f"is {kind}, not a regular file", f"give the path of the {what}")
        buf = bytearray()
        while True:
            chunk = fh.read(min(_CHUNK, limit + 1 - len(buf)))
            if not chunk:
                return bytes(buf)
            buf += chunk
            if len(buf) > limit:
                raise BoundedReadError(f"is over the {limit} byte limit", f"check that this is the right {what}")
