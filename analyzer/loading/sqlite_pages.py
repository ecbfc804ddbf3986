"""Integer columns read straight from a SQLite file's table pages, decoded with numpy.

Why this module exists: on a 1 M-kernel export the loader spent most of its time in the ADBC driver, which
steps SQLite row by row and appends every value to an Arrow builder: about 2x SQLite's own cost of decoding
the same columns. The big nsys tables (kernels, runtime calls) are rowid tables whose rows are short
records of integers, stored in the leaf pages of one b-tree; this module reads those pages with ``pread``
and decodes every row of a page range at once with numpy (the record format is in
https://www.sqlite.org/fileformat2.html, sections 1.6 and 2.1). Measured on the 1 M trace, single-threaded,
the kernel and runtime columns the loader reads: 2.0 s CPU against ADBC's 4.0 s; numpy's gathers release
the GIL, so the ranges of a table decode on all cores.

What it reads, exactly: the leaf pages of a rowid table in key order (the order of a plain ``SELECT``),
every cell's record header for all the table's columns, and the wanted columns' values. It decodes only
what it can decode exactly and refuses the rest with :class:`NotDirect`, after which the caller reads the
table through SQLite as before:

- files in WAL mode (committed pages may sit in the ``-wal`` file), or with an unusual page layout;
- tables that are not rowid tables, or that have a rowid alias (``INTEGER PRIMARY KEY``) or hidden columns;
- records that spill onto overflow pages, records with fewer or more columns than the table (a column
  added later), serial types longer than one byte (text of 57 bytes or more);
- values other than integers and NULL in a wanted column (reals, text or blobs: SQLite's ``CAST`` decides
  what those become);
- anything inconsistent: a page number outside the file, a page of the wrong type, a cell outside its
  page, a record whose header and payload disagree, more rows in a key range than keys. A damaged file
  is therefore read by SQLite, which reports the damage.

The file is opened read-only and only read (never mapped writable, never locked): it cannot be changed,
and a file on read-only media works. Like the ``immutable=1`` URI the SQL route uses, it assumes the file
does not change while it is read.
"""
from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SQLITE_MAGIC = b"SQLite format 3\x00"

#: pages decoded at once: fit the core's cache (1 MiB L2 on the machine that measured it)
BATCH_BYTES = 1 << 20

#: leaf page type byte of a table b-tree; interior page type byte
_LEAF, _INTERIOR = 13, 5

#: bytes of each serial type's value (0 NULL, 1-6 integers of 1, 2, 3, 4, 6, 8 bytes, 7 real, 8 and 9 the
#: constants 0 and 1, 12+ blobs and text); types 10, 11 are reserved and >= 128 need a longer varint (both
#: refused before sizes are used)
_SIZES = np.zeros(256, dtype=np.int64)
_SIZES[:10] = [0, 1, 2, 3, 4, 6, 8, 8, 0, 0]
_SIZES[12:128] = (np.arange(12, 128) - 12) // 2
_SIZES16 = _SIZES.astype(np.uint16)
#: right shift that turns the 8 big-endian bytes from a value's first into the value, sign kept
_SHIFT = 64 - 8 * np.maximum(_SIZES, 1)
#: the same for 4 bytes, for values of at most 4 bytes (types 1 to 4)
_SHIFT32 = np.maximum(32 - 8 * np.maximum(_SIZES, 1), 0).astype(np.int32)
#: serial types not decoded at all (reserved, or a longer varint), and those that are not integers or NULL
_UNREADABLE = np.zeros(256, dtype=bool)
_UNREADABLE[[10, 11]] = True
_UNREADABLE[128:] = True
_NOT_INT = np.zeros(256, dtype=bool)
_NOT_INT[7] = True
_NOT_INT[12:] = True


class NotDirect(Exception):
    """The table (or one of its page ranges) is not one this module decodes exactly; read it with SQL."""


@dataclass(frozen=True)
class TablePages:
    """The leaf pages of one table in key order, and the largest rowid in each (``keys[-1]`` is the
    table's largest rowid, from SQL, as the b-tree's right-most leaf has no key above it)."""

    leaves: np.ndarray  # int64 page numbers
    keys: np.ndarray  # int64, non-decreasing

    def ranges(self, first_rowid: int, rows_per_range: int) -> list[tuple[int, int, int, int]]:
        """Consecutive groups of leaves holding about ``rows_per_range`` rowids each:
        ``(first leaf, end leaf, lo rowid, hi rowid)``, the rowids ``[lo, hi)`` covering the group's
        rows (the first group from ``first_rowid``)."""
        out: list[tuple[int, int, int, int]] = []
        n = len(self.leaves)
        a, lo = 0, first_rowid
        while a < n:
            # the last leaf whose key stays within lo + rows_per_range - 1 (at least one leaf)
            b = int(np.searchsorted(self.keys, lo + rows_per_range - 1, side="right"))
            b = min(max(b, a + 1), n)
            hi = int(self.keys[b - 1]) + 1
            if hi <= lo:  # keys below the table's first rowid: a damaged b-tree
                raise NotDirect("the b-tree's keys do not match the table's rowids")
            out.append((a, b, lo, hi))
            a, lo = b, hi
        return out


class PageFile:
    """One SQLite file opened for reading its pages (``NotDirect`` when its format is not one this module
    reads)."""

    def __init__(self, path: Path) -> None:
        if not hasattr(os, "pread") or not hasattr(os, "preadv"):  # Windows
            raise NotDirect("positional reads are not available on this platform")
        try:
            self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        except OSError as exc:
            raise NotDirect(f"cannot open the file ({exc.strerror})") from exc
        try:
            header = os.pread(self.fd, 100, 0)
            size = os.fstat(self.fd).st_size
        except OSError as exc:
            os.close(self.fd)
            raise NotDirect(f"cannot read the file ({exc.strerror})") from exc
        try:
            self._check_header(header, size)
        except NotDirect:
            os.close(self.fd)
            raise

    def _check_header(self, header: bytes, size: int) -> None:
        if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
            raise NotDirect("not a SQLite file")
        page_size = struct.unpack(">H", header[16:18])[0]
        self.page_size = 65536 if page_size == 1 else page_size
        if self.page_size < 512 or self.page_size & (self.page_size - 1):
            raise NotDirect(f"page size {page_size}")
        if header[18] != 1 or header[19] != 1:  # 2: WAL mode
            raise NotDirect("not a rollback-journal file (WAL mode)")
        self.usable = self.page_size - header[20]
        if self.usable < 480:
            raise NotDirect("reserved bytes per page")
        self.pages = size // self.page_size

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    # -- b-tree -----------------------------------------------------------------------------------------
    def _page(self, number: int) -> np.ndarray:
        if not 2 <= number <= self.pages:  # page 1 is the schema's
            raise NotDirect(f"page {number} outside the file")
        data = os.pread(self.fd, self.page_size, (number - 1) * self.page_size)
        if len(data) != self.page_size:
            raise NotDirect(f"page {number} is short")
        return np.frombuffer(data, dtype=np.uint8)

    def table(self, root: int, last_rowid: int) -> TablePages:
        """The leaves of the table b-tree rooted at page ``root``, in key order. Reads only the interior
        pages (one in a few hundred); the leaves' types are checked when they are decoded."""
        leaves: list[np.ndarray] = []
        keys: list[np.ndarray] = []
        seen: set[int] = set()

        def walk(number: int, upper: int, depth: int) -> None:
            if number in seen or depth > 64:
                raise NotDirect("the b-tree has a cycle")
            seen.add(number)
            page = self._page(number)
            kind = int(page[0])
            if kind == _LEAF:
                leaves.append(np.array([number], dtype=np.int64))
                keys.append(np.array([upper], dtype=np.int64))
                return
            if kind != _INTERIOR:
                raise NotDirect(f"page {number} is not a table b-tree page (type {kind})")
            n = int(page[3]) << 8 | int(page[4])
            right = int.from_bytes(page[8:12].tobytes(), "big")
            ptr = _be16(page, 12 + 2 * np.arange(n, dtype=np.int64))
            if n and (ptr.min() < 12 + 2 * n or ptr.max() > self.usable - 5):
                raise NotDirect(f"page {number} has cells outside it")
            kids = _be32(page, ptr)
            cell_keys, _ = _varints(page, ptr + 4)
            if n and ((np.diff(cell_keys) < 0).any() or int(cell_keys[-1]) > upper):
                raise NotDirect(f"page {number} has keys out of order")
            if n and (kids < 2).any():
                raise NotDirect(f"page {number} points outside the file")
            if n and self._page(int(kids[0]))[0] == _LEAF:  # the level above the leaves: take its children at once
                for kid in (*kids.tolist(), right):
                    if kid in seen:
                        raise NotDirect("the b-tree has a cycle")
                    seen.add(kid)
                leaves.append(np.append(kids, right))
                keys.append(np.append(cell_keys, upper))
                return
            for kid, key in zip(kids.tolist(), cell_keys.tolist()):
                walk(kid, key, depth + 1)
            walk(right, upper, depth + 1)

        walk(root, last_rowid, 0)
        all_leaves = np.concatenate(leaves) if leaves else np.empty(0, dtype=np.int64)
        all_keys = np.concatenate(keys) if keys else np.empty(0, dtype=np.int64)
        if len(all_leaves) and ((all_leaves < 2).any() or (all_leaves > self.pages).any()):
            raise NotDirect("a leaf page outside the file")
        if (np.diff(all_keys) < 0).any():  # a child's keys below its left sibling's
            raise NotDirect("the b-tree's keys are out of order")
        return TablePages(all_leaves, all_keys)

    def _read_leaves(self, leaves: np.ndarray) -> np.ndarray:
        """The pages ``leaves`` one after another (8 bytes of padding at the end: values are gathered 8
        bytes at a time), read with one ``pread`` per run of consecutive pages."""
        ps = self.page_size
        buf = np.empty(len(leaves) * ps + 8, dtype=np.uint8)
        buf[-8:] = 0
        view = memoryview(buf)  # type: ignore[arg-type]
        breaks = np.flatnonzero(np.diff(leaves) != 1) + 1
        starts = np.concatenate(([0], breaks)).tolist()
        ends = np.concatenate((breaks, [len(leaves)])).tolist()
        for a, b in zip(starts, ends):
            want = (b - a) * ps
            got = os.preadv(self.fd, [view[a * ps:b * ps]], (int(leaves[a]) - 1) * ps)
            if got != want:
                raise NotDirect("a page is short")
        return buf

    # -- records ----------------------------------------------------------------------------------------
    def decode(self, leaves: np.ndarray, keys: np.ndarray, first: int, ncols: int, wanted: Sequence[int]
               ) -> Iterator[tuple[int, list[np.ndarray | None], list[np.ndarray]]]:
        """Decode every row of the leaf pages ``leaves`` (consecutive leaves of one table, ``keys`` their
        largest rowids as :class:`TablePages` has them, ``first`` the smallest rowid they may hold), a
        batch per :data:`BATCH_BYTES` of pages: the batch's row count, per index in ``wanted`` the
        column's values (``None`` where the column is NULL in every row; ``int32`` where the batch holds
        values of at most 4 bytes, so that they are known to fit 32 bits without a look at them, else
        ``int64``) and the matching NULL masks. ``ncols`` is the table's column count. Every row's rowid must lie above the previous
        row's and within its leaf's keys, as SQLite's integrity check demands: damage that SQLite would
        read one way in a scan and another in a rowid search is refused. A batch's pages stay in the
        core's cache while the ~50 passes over them run: 1 MiB batches decoded the kernels of the 1 M
        trace 2.5x faster than 32 MiB ones."""
        step = max(1, BATCH_BYTES // self.page_size)
        # leaf i holds rowids above the key of leaf i - 1 (the first leaf: from ``first``) up to its own
        lowers = np.concatenate((np.array([first - 1], dtype=np.int64), keys[:-1]))
        for a in range(0, len(leaves), step):
            b = min(a + step, len(leaves))
            try:
                batch = self._decode(self._read_leaves(leaves[a:b]), lowers[a:b], keys[a:b], ncols, wanted)
            except IndexError as exc:  # a varint or header running past the last page read
                raise NotDirect("a cell outside its page") from exc
            yield batch

    def _decode(self, buf: np.ndarray, lower: np.ndarray, upper: np.ndarray, ncols: int, wanted: Sequence[int]
                ) -> tuple[int, list[np.ndarray | None], list[np.ndarray]]:
        """One batch of leaves (``buf``): the rows as :meth:`decode` yields them. Leaf ``i``'s rowids must
        lie in ``(lower[i], upper[i]]``. The records' serial types are gathered at once, one row of a
        ``(ncols, rows)`` matrix per column, and their sizes summed down the columns into each value's
        place in its record; a wanted column whose rows share one serial type (most do) is shifted by
        one number."""
        ps, usable = self.page_size, self.usable
        base = np.arange((len(buf) - 8) // ps, dtype=np.int64) * ps
        if len(base) and (buf[base] != _LEAF).any():
            raise NotDirect("a leaf is not a table leaf page")
        counts = _be16(buf, base + 3)
        if len(counts) and not counts.all():  # SQLite: "malformed" (only an empty table's root has none)
            raise NotDirect("a leaf page without cells")
        rows = int(counts.sum())
        if not rows:
            return 0, [None] * len(wanted), [np.zeros(0, dtype=bool)] * len(wanted)
        firsts = np.cumsum(counts) - counts
        page_of_row = np.repeat(base, counts)
        # cell pointer array: 2 bytes per cell from byte 8 of the page, in key order
        ptr = _be16(buf, np.repeat(base + 8 - 2 * firsts, counts) + 2 * np.arange(rows, dtype=np.int64))
        lowest = np.repeat(8 + 2 * counts, counts)
        if (ptr < lowest).any() or (ptr > usable - 4).any():
            raise NotDirect("a cell outside its page")
        cell = page_of_row + ptr
        payload, n1 = _varints(buf, cell)
        if (payload > usable - 35).any():  # larger payloads may spill onto overflow pages
            raise NotDirect("records on overflow pages")
        rowid, n2 = _varints(buf, cell + n1)
        if ((np.diff(rowid) <= 0).any() or (rowid <= np.repeat(lower, counts)).any()
                or (rowid > np.repeat(upper, counts)).any()):
            raise NotDirect("rowids out of order or outside their leaf's keys")
        record = cell + n1 + n2
        if (record + payload > page_of_row + usable).any():
            raise NotDirect("a record runs past its page")
        if (buf[record] != ncols + 1).any():  # one byte per column: a one-byte header size, one-byte types
            raise NotDirect("records with other column counts or long serial types")
        # the serial types, one row per column: each record's header bytes copied at once, then transposed
        headers = np.lib.stride_tricks.as_strided(buf, (len(buf) - ncols, ncols), (1, 1), writeable=False)
        types = np.ascontiguousarray(headers[record + 1].T)
        if int(types.max()) <= 9:  # integers, NULL, reals: sizes by arithmetic (a table lookup costs 7x)
            sizes = types + (types >= 5)
            sizes += types == 6
            sizes *= types < 8
        elif _UNREADABLE[types].any():
            raise NotDirect("serial types this module does not decode")
        else:
            sizes = _SIZES16[types]
        # where each column's value ends in the record's body (uint16: at most 254 columns of 57 bytes),
        # a row at a time (numpy's cumsum down the rows costs 10x)
        ends = np.empty(types.shape, dtype=np.uint16)
        ends[0] = sizes[0]
        for c in range(1, ncols):
            np.add(ends[c - 1], sizes[c], out=ends[c])
        if (ends[-1] != payload - (ncols + 1)).any():
            raise NotDirect("records whose header and payload disagree")
        body = record + (ncols + 1)
        words = np.ndarray((len(buf) - 7,), dtype=">i8", buffer=buf, strides=(1,))
        quads = np.ndarray((len(buf) - 3,), dtype=">i4", buffer=buf, strides=(1,))
        values: list[np.ndarray | None] = []
        nulls: list[np.ndarray] = []
        for c in wanted:
            t = types[c]
            lo, hi = int(t.min()), int(t.max())
            if hi >= 7 and (_NOT_INT[t].any() if hi >= 12 else lo <= 7 and (t == 7).any()):
                raise NotDirect("values other than integers")
            null = t == 0 if lo == 0 else np.zeros(rows, dtype=bool)
            at = body + ends[c - 1] if c else body
            if lo == hi and not _SIZES[lo]:  # NULL, 0 or 1 in every row
                values.append(None if lo == 0 else np.full(rows, int(lo == 9), dtype=np.int32))
                nulls.append(null)
                continue
            widest = int(_SIZES[lo]) if lo == hi else int(sizes[c].max())
            if not widest:  # NULL, 0 or 1, mixed
                values.append((t == 9).astype(np.int32))
                nulls.append(null)
                continue
            # the bytes from the value's first, big-endian, shifted right (arithmetic: keeps the sign)
            if widest == 1:  # one byte (gathering 8 bytes costs 4x)
                v = buf[at].view(np.int8).astype(np.int32)
            elif widest <= 4:
                v = quads[at].astype(np.int32)
                v >>= int(_SHIFT32[lo]) if lo == hi else _SHIFT32[t]
            else:
                v = words[at].astype(np.int64)
                v >>= int(_SHIFT[lo]) if lo == hi else _SHIFT[t]
            if lo != hi:
                small = sizes[c] == 0
                if small.any():
                    v[small] = t[small] == 9
            values.append(v)
            nulls.append(null)
        return rows, values, nulls


def _be16(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return (buf[pos].astype(np.int64) << 8) | buf[pos + 1]


def _be32(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return ((buf[pos].astype(np.int64) << 24) | (buf[pos + 1].astype(np.int64) << 16)
            | (buf[pos + 2].astype(np.int64) << 8) | buf[pos + 3])


def _varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SQLite varints at ``pos`` (1 to 9 bytes, big-endian, 7 bits per byte and all 8 in the ninth): their
    values (as int64 bits) and lengths. Vectorised over the rows still reading, which shrink fast: most
    varints in nsys tables take one to three bytes. While every varint is still reading (the rowids of a
    table past its first 127 rows are all two bytes or longer), whole arrays are read, without indexes."""
    value = buf[pos].astype(np.int64)
    length = np.ones(len(pos), dtype=np.int64)
    more = value >= 0x80
    if not more.any():
        return value, length
    value &= 0x7F  # every value's first byte: the flag of those that stop is 0 already
    k = 1
    while more.all():  # whole arrays
        b = buf[pos + k].astype(np.int64)
        length += 1
        if k == 8:
            value <<= 8
            value |= b
            return value, length
        value <<= 7
        value |= b & 0x7F
        more = b >= 0x80
        k += 1
    going = np.flatnonzero(more)
    for k in range(k, 9):
        if not len(going):
            break
        b = buf[pos[going] + k].astype(np.int64)
        length[going] += 1
        if k == 8:
            value[going] = (value[going] << 8) | b
            break
        value[going] = (value[going] << 7) | (b & 0x7F)
        going = going[b >= 0x80]
    return value, length
