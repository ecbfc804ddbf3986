"""Bracket scans over kernel names, shared by the loaders' name shortening (torch.profiler's
``kernel_short_name``, ncu's ``kernel_base_name``).

The scans run on the name's UTF-8 bytes with numpy, in cache-sized chunks (every character that
matters is ASCII, and no byte of a multi-byte character is one): a damaged trace's 1 GB name takes
seconds and bounded memory, not minutes in a per-character loop.
"""
from __future__ import annotations

import numpy as np

_SCAN_CHUNK = 1 << 20  # cache-sized: 10x faster than one 16 MB pass on a loaded machine
_DEPTH_STEP = np.zeros(256, dtype=np.int32)  # +1 for an opening bracket's byte, -1 for a closing one
_DEPTH_STEP[list(b"<([{")] = 1
_DEPTH_STEP[list(b">)]}")] = -1


def _utf8(s: str) -> bytes:
    return s.encode("utf-8", "surrogatepass")


def _char_index(s: str, b: bytes, i: int) -> int:
    """The index in ``s`` of the character starting at byte ``i`` of ``b`` (its UTF-8 bytes)."""
    return i if s.isascii() else len(b[:i].decode("utf-8", "surrogatepass"))


def last_separator(s: str) -> int:
    """Index just after the last ``::`` or space outside brackets (0 when none)."""
    b = _utf8(s)
    depth, cut, prev = 0, 0, 0
    for start in range(0, len(b), _SCAN_CHUNK):
        a = np.frombuffer(b, dtype=np.uint8, count=min(_SCAN_CHUNK, len(b) - start), offset=start)
        level = np.cumsum(_DEPTH_STEP[a], dtype=np.int64)
        level += depth
        colon = a == 58
        after_colon = np.empty_like(colon)
        after_colon[0] = prev == 58 and start > 0
        after_colon[1:] = colon[:-1]
        hits = np.flatnonzero(((a == 32) | (colon & after_colon)) & (level == 0))
        if len(hits):
            cut = start + int(hits[-1]) + 1
        depth, prev = int(level[-1]), int(a[-1])
    return _char_index(s, b, cut)


def matching_open(s: str, open_ch: str, close_ch: str, *, arrow: bool = False) -> int:
    """Index of the bracket that opens the one closing ``s`` (-1 if unbalanced). ``arrow``: a ``>``
    after ``-`` (``->``) closes nothing."""
    b = _utf8(s)
    oc, cc = ord(open_ch), ord(close_ch)
    depth = 0
    for end in range(len(b), 0, -_SCAN_CHUNK):
        start = max(0, end - _SCAN_CHUNK)
        a = np.frombuffer(b, dtype=np.uint8, count=end - start, offset=start)
        closes = a == cc
        if arrow and cc == 62:  # "->"
            before = np.empty_like(a)
            before[1:] = a[:-1]
            before[0] = b[start - 1] if start > 0 else 0
            closes &= before != 45
        opens = a == oc
        step = closes.view(np.int8) - opens.view(np.int8)
        level = np.cumsum(step[::-1], dtype=np.int64)
        level += depth
        hits = np.flatnonzero(opens[::-1] & (level == 0))
        if len(hits):
            return _char_index(s, b, end - 1 - int(hits[0]))
        depth = int(level[-1])
    return -1
