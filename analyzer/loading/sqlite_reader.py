"""Fast, read-only column fetch from a SQLite file into typed numpy arrays.

Why this module exists: a naive ``pandas.read_sql`` loader is slower than ``nsys analyze`` before a single
rule runs (see DOMAIN.md). The big nsys tables (kernels, API calls) hold only integers once strings are
replaced by ``StringIds`` ids, so we fetch integer columns straight into ``int64`` arrays and map string ids
to text once per distinct id.

Backends (``benchmarks/bench_load.py`` measures them; numbers in the loader's report):

- ``adbc``: the ADBC SQLite driver (``adbc-driver-sqlite``) returns Arrow columns without a Python object
  per value: about 2x faster than ``sqlite3`` on 1 M kernels x 20 columns, and it opens the same
  read-only URI. Used when installed.
- ``sqlite3``: the standard library, ``numpy.fromiter`` over the flattened cursor (no list of tuples).

In front of either, integer columns of rowid tables are read from the file's pages and decoded with numpy
(:mod:`analyzer.loading.sqlite_pages`: half ADBC's CPU time); a table that module does not decode exactly
(WAL files, overflow pages, reals or text in an integer column, a damaged b-tree) is read by the backend.
``ANALYZER_SQLITE_PAGES=0`` turns the page route off.
- ``connectorx`` was measured too (fastest raw fetch) but cannot open a read-only/immutable URI: given
  ``?mode=ro`` it silently creates a new empty database file, so it is not used.

``ANALYZER_SQLITE_BACKEND=sqlite3|adbc`` forces one (benchmarks, tests).

Read-only guarantee: the database is opened through a ``file:...?mode=ro&immutable=1`` URI. ``mode=ro``
alone still creates ``-wal``/``-shm`` files next to a WAL-mode database (measured); ``immutable=1`` tells
SQLite the file cannot change, so it takes no locks and never creates ``-journal``, ``-wal`` or ``-shm``
files (works on read-only media too).

Read as SQLite reads it (issue 33):

* **WAL.** ``immutable=1`` skips a ``-wal`` file, whose committed changes are part of the database. When
  a non-empty ``-wal`` lies beside the file, the file and its ``-wal`` are copied into a private
  temporary folder, the copy is checkpointed there (SQLite applies the log) and read; nothing is written
  beside the input (a read-only ``mode=ro`` open would write the ``-shm``, measured).
* **Live files.** The file's size, mtime and header change counter (and its ``-wal``'s size and mtime)
  are taken when it is opened and compared when the loader is done (:meth:`SqliteReader.check_unchanged`):
  a file an export is still writing is refused, "the file changed while it was read; wait for the
  export to finish", never analyzed half-written.
* **Damage.** A table the page route refused is read by one full scan, never by ``rowid`` ranges (a
  damaged interior page sends those past rows: 16,322 of 30,002 kernels). Every table the SQL backend
  reads is checked with ``PRAGMA quick_check(table)`` first (about 1 us a row, so not on the page route,
  which checks the b-tree itself); one that fails is read by one full scan too and reported as damaged
  (:attr:`SqliteReader.damage_notes`, shown in the report's notes).
* **Names.** Table names match as SQLite matches them: exactly, or ignoring ASCII case only (Python's
  ``lower()`` also folds the Kelvin sign U+212A onto ``k``: ``CUPTI_ACTIVITY_\u212aIND_KERNEL`` would
  have stood for the kernel table).
"""
from __future__ import annotations

import functools
import importlib.util
import itertools
import os
import shutil
import sqlite3
import string
import struct
import tempfile
import threading
from collections.abc import Callable, Collection, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import numpy as np

from analyzer.errors import InputError
from analyzer.loading.columns import narrow_int
from analyzer.loading.sqlite_pages import SQLITE_MAGIC, NotDirect, PageFile, TablePages

T = TypeVar("T")

#: value used for SQL NULL in integer columns
NULL_INT = -1

#: rows per range when :meth:`SqliteReader.fetch_parallel` splits a big table (a range costs one b-tree
#: descent; 256 Ki rows keep that negligible and give 2 workers about 12 ranges on 1 M kernels + 2 M calls)
CHUNK_ROWS = 1 << 18

#: rows per ADBC record batch
BATCH_ROWS = 65536

#: a table the SQL backend reads goes to ADBC from this many rowids on, a smaller one to ``sqlite3``:
#: importing the ADBC driver costs about 0.05-0.08 s of CPU (it imports ``pyarrow.dataset``), more than
#: ``sqlite3`` takes for such a table (the NVTX texts of a 1 M-kernel trace, 42 k rows: about 0.02 s)
ADBC_MIN_ROWS = 1 << 17

_FREED = np.empty(0, dtype=np.int64)


@dataclass(frozen=True)
class ValuesIn:
    """A row filter, ``"column" IN (values)`` (``NOT IN`` when ``negate``); rows whose column is NULL are
    left out either way, as in SQL. ``str()`` gives the SQL; the page route (:mod:`sqlite_pages`)
    evaluates it on the decoded column."""

    column: str
    values: tuple[int, ...]
    negate: bool = False

    def __str__(self) -> str:
        return f'"{self.column}" {"NOT IN" if self.negate else "IN"} ({", ".join(str(int(v)) for v in self.values)})'


@dataclass(frozen=True)
class IntColumns:
    """Integer columns of one table, as :meth:`SqliteReader.fetch_ints` fetches them; a job for
    :meth:`SqliteReader.fetch_parallel`, which may split it into row ranges."""

    table: str
    columns: Mapping[str, str | None]
    where: str | ValuesIn | None = None
    default: int = NULL_INT
    narrow: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class _IntQuery:
    """What of an :class:`IntColumns` job the table has: its exact name, the SQL columns and their
    output names, which are narrow (one dummy entry when no column is present: the query then
    selects ``0`` to count rows)."""

    real: str
    cols: tuple[str, ...]
    fetched: tuple[str, ...]
    small: tuple[bool, ...]
    where: str | ValuesIn | None
    default: int


_I32_MIN, _I32_MAX = int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max)


def _fits32(values: np.ndarray) -> bool:
    return (values.dtype.kind == "i" and values.dtype.itemsize <= 4 or not len(values)
            or (_I32_MIN <= int(values.min()) and int(values.max()) <= _I32_MAX))


@dataclass
class _Block:
    """The columns of an :class:`IntColumns` job read in rowid ranges: one array per fetched column
    (``int32`` for the narrow ones, else ``int64``) with a row for every rowid from ``first`` to the
    table's last; the range starting at rowid ``lo`` writes its rows from ``lo - first``. The ranges write
    disjoint slices (no lock), and a table without gaps in its rowids (an nsys export) fills every row, so
    the columns are complete when the last range ends."""

    arrays: list[np.ndarray]
    first: int

    @classmethod
    def allocate(cls, q: _IntQuery, ranges: list[tuple[int, int]]) -> _Block:
        rows = ranges[-1][1] - ranges[0][0]
        return cls([np.empty(rows, dtype=np.int32 if s else np.int64) for s in q.small], ranges[0][0])


@dataclass
class _Part:
    """What one query of a job read: its row count and, per fetched column, the values it holds itself
    (``None``: they are in the job's :class:`_Block`): every column of an unsplit query, or, as
    ``int64``, a narrow column of a range whose values do not fit in 32 bits."""

    rows: int
    own: list[np.ndarray | None]


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def fold_name(name: str) -> str:
    """``name`` with ASCII letters lowercased, nothing else changed: SQLite's case-insensitive match."""
    return name.translate(_ASCII_LOWER)


def wal_of(path: Path) -> Path | None:
    """The non-empty ``-wal`` file beside ``path`` (committed changes not yet in the file), or None."""
    wal = Path(f"{path}-wal")
    try:
        return wal if wal.is_file() and wal.stat().st_size > 0 else None
    except OSError:
        return None


@dataclass(frozen=True)
class FileState:
    """What changes when a SQLite file is written: size, mtime, the header's change counter, and the
    ``-wal`` file's size and mtime."""

    size: int
    mtime_ns: int
    counter: bytes
    wal: tuple[int, int] | None

    @classmethod
    def of(cls, path: Path) -> FileState:
        st = os.stat(path)
        with open(path, "rb") as fh:
            fh.seek(24)
            counter = fh.read(4)
        wal = Path(f"{path}-wal")
        try:
            wst = os.stat(wal)
            wal_state: tuple[int, int] | None = (wst.st_size, wst.st_mtime_ns)
        except OSError:
            wal_state = None
        return cls(st.st_size, st.st_mtime_ns, counter, wal_state)


def changed_while_read(shown: Path) -> InputError:
    return InputError(shown, "the file changed while it was read", hint="wait for the export to finish")


def _wal_applied_copy(path: Path, wal: Path, shown: Path) -> tuple[Path, Path]:
    """``path`` and its ``-wal`` copied into a private temporary folder and checkpointed there: the
    database as SQLite reads it, as a plain rollback-journal file. Returns (copy, folder)."""
    folder = Path(tempfile.mkdtemp(prefix="analyzer-wal-"))
    copy = folder / "export.sqlite"
    try:
        shutil.copyfile(path, copy)
        shutil.copyfile(wal, Path(f"{copy}-wal"))
        conn = sqlite3.connect(copy)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("PRAGMA journal_mode=DELETE")
        finally:
            conn.close()
    except (OSError, sqlite3.Error) as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise InputError(shown, f"cannot read the file with its -wal log ({exc})",
                         hint="let the exporting program finish, or copy the file and its -wal elsewhere") from None
    return copy, folder


def sqlite_uri(path: Path) -> str:
    """The read-only, immutable URI for ``path`` (absolute, percent-encoded)."""
    return f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1"


def check_sqlite_file(path: Path, shown: Path | None = None) -> None:
    """Raise :class:`InputError` (naming ``shown``, default ``path``) unless ``path`` is a complete SQLite
    database file.

    Checks the 100-byte header: magic string, page size and the in-header page count against the file
    size, which catches truncated downloads/copies without reading the whole file."""
    shown = shown or path
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            header = fh.read(100)
    except OSError as exc:
        raise InputError(shown, f"cannot read the file ({exc.strerror})") from exc
    if not header.startswith(SQLITE_MAGIC):
        raise InputError(
            shown,
            "not a SQLite database",
            hint="pass an Nsight Systems SQLite export (nsys export --type sqlite) or an .nsys-rep report",
        )
    if len(header) < 100:
        raise InputError(shown, "SQLite file is truncated (shorter than its header)",
                         hint="copy or export it again")
    page_size = struct.unpack(">H", header[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    change_counter, page_count = struct.unpack(">II", header[24:32])
    valid_for = struct.unpack(">I", header[92:96])[0]
    if page_count and valid_for == change_counter and size < page_count * page_size:
        raise InputError(
            shown,
            f"SQLite file is truncated ({size:,} of {page_count * page_size:,} bytes)",
            hint="copy or export it again",
        )


class SqliteReader:
    """A read-only connection plus the schema (tables and their columns) of one SQLite file."""

    def __init__(self, path: Path, display_path: Path | None = None) -> None:
        """``display_path`` names the user's file in errors when ``path`` is a derived copy (a cached
        export of an .nsys-rep, a decompressed .xz)."""
        shown = display_path or path
        self.shown = shown
        self.source = path  # the file the user's export is (the reader may read a copy, self.path)
        self._tmp_folder: Path | None = None
        check_sqlite_file(path, shown)
        try:
            self._state = FileState.of(path)
        except OSError as exc:
            raise InputError(shown, f"cannot read the file ({exc.strerror})") from exc
        wal = wal_of(path)
        if wal is not None:
            path, self._tmp_folder = _wal_applied_copy(path, wal, shown)
            self.check_unchanged()
        self.path = path
        self._checked: dict[str, bool] = {}  # table -> passed quick_check
        self.damage_notes: list[str] = []  # one line per table quick_check finds damaged
        self.conn = sqlite3.connect(sqlite_uri(path), uri=True, check_same_thread=False)
        try:
            rows = self.conn.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
            ).fetchall()
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            raise InputError(shown, f"SQLite file is unreadable or corrupt ({exc})",
                             hint="copy or export it again") from exc
        except UnicodeDecodeError:  # sqlite3 decodes its error message, which quotes the damaged schema bytes
            self.conn.close()
            raise InputError(shown, "SQLite file is corrupt (its schema holds bytes that are not UTF-8)",
                             hint="copy or export it again") from None
        self._names = {name for (name,) in rows}
        self._lower: dict[str, str] = {fold_name(name): name for name in self._names}
        self._columns_cache: dict[str, tuple[str, ...]] = {}
        self._backend: str | None = None
        # ADBC connections, one per thread that fetches (opened on first use, closed by close())
        self._local = threading.local()
        self._adbc_conns: list[Any] = []
        self._lock = threading.Lock()
        # the page route's open file: None until first used, False when off or the file is not one it reads
        self._page_file: PageFile | None | bool = None

    def close(self) -> None:
        with self._lock:
            conns, self._adbc_conns = self._adbc_conns, []
        for conn in conns:
            conn.close()
        if isinstance(self._page_file, PageFile):
            self._page_file.close()
        self._page_file = False
        self.conn.close()
        if self._tmp_folder is not None:
            shutil.rmtree(self._tmp_folder, ignore_errors=True)
            self._tmp_folder = None

    def check_unchanged(self) -> None:
        """Raise :class:`InputError` when the file (or its ``-wal``) changed since it was opened."""
        try:
            now = FileState.of(self.source)
        except OSError:
            raise changed_while_read(self.shown) from None
        if now != self._state:
            raise changed_while_read(self.shown)

    def check_table(self, real: str) -> bool:
        """Whether SQLite's ``PRAGMA quick_check`` finds table ``real`` whole (asked once per table). A
        damaged table adds a line to :attr:`damage_notes`; the caller reads it by one full scan, as
        SQLite reads it."""
        if real not in self._checked:
            try:
                rows = self.conn.execute(f'PRAGMA quick_check("{real}")').fetchall()
            except sqlite3.DatabaseError as exc:
                rows = [(str(exc),)]
            self._checked[real] = rows == [("ok",)]
            if not self._checked[real]:
                first = " ".join(str(rows[0][0]).replace("*** in database main ***", "").split()) if rows else ""
                self.damage_notes.append(
                    f"The export is damaged: SQLite's quick_check fails on table {real} ({first[:200]}"
                    f"{'; ...' if len(rows) > 1 else ''}). Its rows are counted as SQLite reads them (a full "
                    "scan) but may be incomplete; export the trace again.")
        return self._checked[real]

    # -- schema -----------------------------------------------------------------------------------------
    def table(self, name: str) -> str | None:
        """The exact name of table ``name`` as SQLite finds it (exactly, else ignoring ASCII case only),
        or None when the export lacks it."""
        return name if name in self._names else self._lower.get(fold_name(name))

    def has(self, table: str) -> bool:
        return self.table(table) is not None

    def columns(self, table: str) -> tuple[str, ...]:
        """Columns of ``table`` (empty tuple when the table is absent)."""
        real = self.table(table)
        if real is None:
            return ()
        if real not in self._columns_cache:
            rows = self.conn.execute(f'PRAGMA table_info("{real}")').fetchall()
            self._columns_cache[real] = tuple(r[1] for r in rows)
        return self._columns_cache[real]

    def has_column(self, table: str, column: str) -> bool:
        return column in self.columns(table)

    def count(self, table: str) -> int:
        """Row count, from ``max(rowid)`` (one b-tree descent; exact for nsys exports, which only append)."""
        real = self.table(table)
        if real is None:
            return 0
        try:
            row = self.conn.execute(f'SELECT max(rowid) FROM "{real}"').fetchone()
        except sqlite3.OperationalError:  # WITHOUT ROWID table
            row = self.conn.execute(f'SELECT count(*) FROM "{real}"').fetchone()
        return int(row[0] or 0)

    def is_empty(self, table: str) -> bool:
        real = self.table(table)
        return real is None or self.conn.execute(f'SELECT 1 FROM "{real}" LIMIT 1').fetchone() is None

    # -- data -------------------------------------------------------------------------------------------
    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        """Rows of a small query (metadata, enums, string tables)."""
        return self.conn.execute(sql, params).fetchall()

    def fetch_ints(
        self,
        table: str,
        columns: Mapping[str, str | None],
        *,
        where: str | ValuesIn | None = None,
        default: int = NULL_INT,
        narrow: Collection[str] = (),
    ) -> dict[str, np.ndarray]:
        """Fetch integer columns of ``table`` as integer arrays, one per key of ``columns``.

        ``columns`` maps an output name to a SQL column of ``table``; ``None`` or a column the table lacks
        yields a constant ``default`` array, so callers select only present columns without branching.
        SQL NULL becomes ``default``. Columns named in ``narrow`` are ``int32`` when every value fits
        (:func:`narrow_int`), the others ``int64``.

        The plain columns are selected (``SELECT "a", "b"``: 10-15% cheaper for SQLite than a
        ``coalesce(CAST(...))`` per value); a column holding something other than integers (text or
        real values in a damaged export) makes the query run again with the casts."""
        return self.fetch_parallel({"_": IntColumns(table, columns, where=where, default=default,
                                                    narrow=frozenset(narrow))})["_"]

    def fetch_text(self, table: str, column: str, *, where: str | ValuesIn | None = None) -> np.ndarray:
        """One text column as an object array (``""`` for NULL); equal texts share one Python string."""
        real = self.table(table)
        if real is None or column not in self.columns(real):
            return np.empty(0, dtype=object)
        sql = f'SELECT CAST("{column}" AS TEXT) FROM "{real}"' + (f" WHERE {where}" if where else "")
        if self._uses_adbc(real):
            import pyarrow as pa
            import pyarrow.compute as pc

            col = self._adbc_query(sql).column(0)
            if col.type == pa.null():
                return np.full(len(col), "", dtype=object)
            enc = pc.dictionary_encode(pc.fill_null(col.cast(pa.string()), "")).combine_chunks()
            uniq = np.empty(len(enc.dictionary), dtype=object)
            uniq[:] = enc.dictionary.to_pylist()
            return uniq[enc.indices.to_numpy(zero_copy_only=False)] if len(enc) else np.empty(0, dtype=object)
        shared: dict[str, str] = {}
        values = [shared.setdefault(v, v) if v is not None else "" for (v,) in self.conn.execute(sql)]
        arr = np.empty(len(values), dtype=object)
        arr[:] = values
        return arr

    def fetch_parallel(self, jobs: Mapping[str, Callable[[], T] | IntColumns], *, pages: bool = True,
                       split: bool = True) -> dict[str, Any]:
        """Run independent fetches: a callable's result, or an :class:`IntColumns` job's arrays (as
        :meth:`fetch_ints` returns them).

        A job is read from the file's pages (:mod:`sqlite_pages`) when the page route can decode its table,
        else by the SQL backend. On the page route and on ADBC (numpy's gathers, and the driver stepping
        SQLite, run without the GIL; ADBC on one connection per thread) the jobs run concurrently, and a
        table is read in row ranges (:data:`CHUNK_ROWS` rowids each) so that one large table does not
        leave the other workers idle at the end: the callables first (their size is unknown), then the row
        ranges largest first. Each range copies its rows straight into the job's preallocated columns at
        its own offset (see :class:`_Block`), so the ranges come out in ``rowid`` order, the order of the
        unsplit query (nsys tables have no indexes that SQLite could scan instead), without a concatenation
        afterwards. A job whose pages turn out not to be decodable (a real value in an integer column) is
        read again by the backend, in one full scan (``split=False``: a damaged b-tree's keys would send
        ``rowid`` ranges past rows). Every table the backend reads passes ``PRAGMA quick_check`` first
        (:meth:`check_table`). On ``sqlite3`` (the GIL is held while stepping) the SQL jobs run one
        after another, unsplit."""
        queries = {name: self._int_query(job) for name, job in jobs.items() if isinstance(job, IntColumns)}
        any_adbc = False
        tasks: list[tuple[int, str, int, Callable[[], Any]]] = []  # (weight, job name, part, work)
        parts: dict[str, int] = {}
        blocks: dict[str, tuple[_Block, list[tuple[int, int]]]] = {}
        for name, job in jobs.items():
            if not isinstance(job, IntColumns):
                tasks.append((-1, name, 0, job))
                parts[name] = 1
                continue
            q = queries[name]
            plan = self._pages_plan(q) if q is not None and pages else None
            if q is not None and plan is not None:
                table, layout, page_ranges = plan
                covered = [(lo, hi) for _, _, lo, hi in page_ranges]
                block = _Block.allocate(q, covered)
                blocks[name] = (block, covered)
                parts[name] = len(page_ranges)
                for i, (a, b, lo, hi) in enumerate(page_ranges):
                    tasks.append(((hi - lo) * max(len(q.fetched), 1), name, i,
                                  functools.partial(self._pages_part, q, layout, table.leaves[a:b],
                                                    table.keys[a:b], block, (lo - block.first, hi - lo))))
                continue
            intact = q is not None and self.check_table(q.real)  # a damaged tree: one full scan
            adbc = q is not None and self._uses_adbc(q.real)
            any_adbc |= adbc
            ranges = self._rowid_ranges(q.real) if q is not None and adbc and split and intact else None
            if q is None or not ranges:
                parts[name] = 1
                tasks.append((CHUNK_ROWS * max(len(q.fetched) if q else 0, 1), name, 0,
                              functools.partial(self._int_part, q, None, None, adbc)))
                continue
            block = _Block.allocate(q, ranges)
            blocks[name] = (block, ranges)
            parts[name] = len(ranges)
            for i, rows in enumerate(ranges):
                tasks.append(((rows[1] - rows[0]) * max(len(q.fetched), 1), name, i,
                              functools.partial(self._int_part, q, rows, block, True)))
        done: dict[tuple[str, int], Any] = {}
        parallel = any_adbc or bool(blocks)  # page ranges decode in parallel on either backend
        if not parallel or len(tasks) < 2:
            for _, name, i, work in tasks:
                done[name, i] = work()
        else:
            tasks.sort(key=lambda t: (t[0] >= 0, -t[0]))  # callables first, then largest first
            workers = max(1, min(len(tasks), os.cpu_count() or 1, 4))
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sqlite-fetch") as pool:
                futures = {(name, i): pool.submit(work) for _, name, i, work in tasks}
                try:
                    for key, fut in futures.items():
                        done[key] = fut.result()
                except BaseException:
                    for fut in futures.values():
                        fut.cancel()
                    raise
        refused = sorted({name for (name, _), got in done.items() if isinstance(got, _Refused)})
        if refused:  # read those by the backend (their page ranges' arrays are dropped)
            for name in refused:
                blocks.pop(name, None)
                for i in range(parts.pop(name)):
                    done.pop((name, i))
            again = self.fetch_parallel({name: jobs[name] for name in refused}, pages=False, split=False)
        else:
            again = {}
        out: dict[str, Any] = {}
        for name, job in jobs.items():
            if name in again:
                out[name] = again.pop(name)
            elif isinstance(job, IntColumns):
                got = [done.pop((name, i)) for i in range(parts[name])]
                block_split = blocks.pop(name, None)
                out[name] = self._assemble(job, queries[name], got, *(block_split or (None, None)))
            else:
                out[name] = done.pop((name, 0))
        return out

    def _int_query(self, job: IntColumns) -> _IntQuery | None:
        """The columns of ``job`` that ``table`` has, or None when the table is absent."""
        real = self.table(job.table)
        if real is None:
            return None
        present = set(self.columns(real))
        cols: list[str] = []
        fetched: list[str] = []
        for n, col in job.columns.items():
            if col is None or col not in present:
                continue
            cols.append(col)
            fetched.append(n)
        return _IntQuery(real, tuple(cols), tuple(fetched), tuple(n in job.narrow for n in fetched) or (False,),
                         job.where, job.default)

    def _rowid_ranges(self, real: str) -> list[tuple[int, int]] | None:
        """``[lo, hi)`` rowid ranges of about :data:`CHUNK_ROWS` rows covering ``real`` (one range for a
        small table), or None for an empty table, one without rowids, or rowids too sparse for the file
        (more than one per 8 bytes of it: a damaged table, read in one query as before)."""
        bounds = self._rowid_bounds(real)
        if bounds is None:
            return None
        lo, hi = bounds
        n = -(-(hi - lo) // CHUNK_ROWS)
        step = -(-(hi - lo) // n)
        return [(a, min(a + step, hi)) for a in range(lo, hi, step)]

    def _rowid_bounds(self, real: str) -> tuple[int, int] | None:
        """``[lo, hi)``: the smallest rowid of ``real`` and one past its largest, or None as for
        :meth:`_rowid_ranges`."""
        try:
            first = self.conn.execute(f'SELECT rowid FROM "{real}" ORDER BY rowid LIMIT 1').fetchone()
            last = self.conn.execute(f'SELECT rowid FROM "{real}" ORDER BY rowid DESC LIMIT 1').fetchone()
        except sqlite3.Error:  # WITHOUT ROWID, or a damaged table: one query, as before
            return None
        if not first or not last or not isinstance(first[0], int) or not isinstance(last[0], int):
            return None
        lo, hi = first[0], last[0] + 1
        if hi <= lo:  # the b-tree's keys out of order: a damaged table, read in one query
            return None
        try:
            size = self.path.stat().st_size
        except OSError:
            return None
        if hi - lo > size // 8:
            return None
        return lo, hi

    # -- the page route ---------------------------------------------------------------------------------
    def _pages(self) -> PageFile | None:
        """The page route's file, opened on first use; None when it is off (``ANALYZER_SQLITE_PAGES=0``)
        or the file is not one it reads (WAL mode)."""
        if self._page_file is None:
            self._page_file = False
            if os.environ.get("ANALYZER_SQLITE_PAGES", "1").strip() != "0":
                try:
                    self._page_file = PageFile(self.path)
                except NotDirect:
                    pass
        return self._page_file if isinstance(self._page_file, PageFile) else None

    def _pages_plan(self, q: _IntQuery) -> tuple[TablePages, _Layout, list[tuple[int, int, int, int]]] | None:
        """How the page route reads ``q``'s table: its leaves, where the wanted columns sit in a record,
        and the leaf ranges of about :data:`CHUNK_ROWS` rowids each; None when it cannot (the file or the
        table is not one it decodes: the SQL backend reads it)."""
        pages = self._pages()
        if pages is None or not (q.where is None or isinstance(q.where, ValuesIn)):
            return None
        bounds = self._rowid_bounds(q.real)
        if bounds is None:
            return None
        try:
            info = self.conn.execute(f'PRAGMA table_xinfo("{q.real}")').fetchall()
            root = self.conn.execute("SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?",
                                     (q.real,)).fetchone()
        except sqlite3.Error:
            return None
        names = [r[1] for r in info]
        pk = [r for r in info if r[5]]
        if (not root or not isinstance(root[0], int) or any(r[6] for r in info)  # hidden or generated columns
                or (len(pk) == 1 and str(pk[0][2]).upper() == "INTEGER")):  # a rowid alias is NULL in the record
            return None
        filt = q.where if isinstance(q.where, ValuesIn) else None
        if filt is not None and filt.column not in names:
            return None
        try:
            table = pages.table(root[0], bounds[1] - 1)
        except NotDirect:
            return None
        if not len(table.leaves):
            return None
        try:
            ranges = table.ranges(bounds[0], CHUNK_ROWS)
        except NotDirect:
            return None
        if ranges[-1][3] != bounds[1]:  # the last leaf's key is the table's last rowid (from SQL)
            return None
        layout = _Layout(len(names), tuple(names.index(c) for c in q.cols),
                         None if filt is None else names.index(filt.column),
                         None if filt is None else np.array(filt.values, dtype=np.int64),
                         bool(filt is not None and filt.negate))
        return table, layout, ranges

    def _pages_part(self, q: _IntQuery, layout: _Layout, leaves: np.ndarray, keys: np.ndarray, block: _Block,
                    at: tuple[int, int]) -> _Part | _Refused:
        """One leaf range of ``q``'s table (``keys``: the leaves' largest rowids) decoded into ``block``
        from row ``at[0]`` (it covers ``at[1]`` rowids, from ``block.first + at[0]``), or :class:`_Refused`
        when the page route cannot decode it."""
        pages = self._pages()
        assert pages is not None
        wanted = layout.wanted + ((layout.filter_column,) if layout.filter_column is not None else ())
        sink = _Sink(q, block, at)
        try:
            for rows, values, nulls in pages.decode(leaves, keys, block.first + at[0], layout.columns, wanted):
                if layout.filter_column is not None:
                    v, null = values.pop(), nulls.pop()
                    keep = np.zeros(rows, dtype=bool) if v is None else np.isin(v, np.asarray(layout.filter_values))
                    if layout.negate:
                        keep = ~keep
                    keep &= ~null
                    if not keep.all():
                        rows = int(keep.sum())
                        values = [None if x is None else x[keep] for x in values]
                        nulls = [x[keep] for x in nulls]
                for i, (x, null) in enumerate(zip(values, nulls)):
                    if x is not None and null.any():
                        if x.dtype == np.int32 and not _I32_MIN <= q.default <= _I32_MAX:
                            x = values[i] = x.astype(np.int64)
                        x[null] = q.default
                sink.add(rows, values)
        except NotDirect as exc:
            return _Refused(str(exc))
        return sink.finish()

    def _int_part(self, q: _IntQuery | None, rows: tuple[int, int] | None, block: _Block | None,
                  adbc: bool) -> _Part | None:
        """The fetched columns of one row range of ``q`` (all rows for ``None``), written into ``block`` at
        the range's offset when there is one; by ADBC or by ``sqlite3`` (see :meth:`_uses_adbc`)."""
        if q is None:
            return None
        conds = ([f"rowid >= {rows[0]} AND rowid < {rows[1]}"] if rows else []) + ([f"({q.where})"] if q.where else [])
        tail = f' FROM "{q.real}"' + (" WHERE " + " AND ".join(conds) if conds else "")
        plain_cols = ", ".join(f'"{c}"' for c in q.cols) or "0"
        cast_cols = ", ".join(f'coalesce(CAST("{c}" AS INTEGER), {int(q.default)})' for c in q.cols) or "0"
        plain, cast = f"SELECT {plain_cols}{tail}", f"SELECT {cast_cols}{tail}"
        if adbc:
            at = None if block is None or rows is None else (rows[0] - block.first, rows[1] - rows[0])
            try:
                return self._adbc_ints(plain, q, block, at)
            except _NotIntegers:
                return self._adbc_ints(cast, q, block, at)
        arrays = self._sqlite3_ints(cast, len(q.small))
        return _Part(len(arrays[0]), [narrow_int(a) if s else a for a, s in zip(arrays, q.small)])

    @staticmethod
    def _assemble(job: IntColumns, q: _IntQuery | None, parts: list[_Part | None], block: _Block | None,
                  ranges: list[tuple[int, int]] | None) -> dict[str, np.ndarray]:
        """The job's columns: the block's arrays (columns whose values did not fit in 32 bits widened to
        ``int64``; the ranges' rows moved together where a WHERE left gaps), or the one unsplit query's.
        Absent columns are ``default``."""
        if q is None:
            return {n: np.empty(0, dtype=np.int32 if n in job.narrow else np.int64) for n in job.columns}
        got = [p for p in parts if p is not None]
        joined: list[np.ndarray] = []
        if block is None or ranges is None:
            joined = [a for a in got[0].own if a is not None]
        else:
            offsets = [lo - block.first for lo, _ in ranges]
            total = sum(p.rows for p in got)
            gaps = any(p.rows != hi - lo for p, (lo, hi) in zip(got, ranges))
            for i in range(len(block.arrays)):
                arr, block.arrays[i] = block.arrays[i], _FREED
                wide = [(off, values) for off, p in zip(offsets, got) if (values := p.own[i]) is not None]
                if wide:
                    arr = arr.astype(np.int64)
                    for off, values in wide:
                        arr[off:off + len(values)] = values
                    for p in got:
                        p.own[i] = None
                if gaps:  # move each range's rows down after the previous range's (never past their own)
                    at = 0
                    for off, p in zip(offsets, got):
                        if off != at and p.rows:
                            arr[at:at + p.rows] = arr[off:off + p.rows]
                        at += p.rows
                    arr = np.array(arr[:total])  # a copy: the unused tail is freed
                joined.append(arr)
                del arr
        n_rows = len(joined[0])
        out = dict(zip(q.fetched, joined))
        return {n: out[n] if n in out else np.full(n_rows, job.default, dtype=np.int32 if n in job.narrow else np.int64)
                for n in job.columns}

    def _sqlite3_ints(self, sql: str, width: int) -> list[np.ndarray]:
        cur = self.conn.execute(sql)
        try:
            flat = np.fromiter(itertools.chain.from_iterable(cur), dtype=np.int64)
        except (TypeError, ValueError, OverflowError) as exc:
            raise InputError(self.path, f"unexpected non-integer values in query {sql!r} ({exc})",
                             hint="the export may be corrupt; export it again") from exc
        matrix = flat.reshape(-1, width)
        return [np.ascontiguousarray(matrix[:, i]) for i in range(width)]

    def _adbc_ints(self, sql: str, q: _IntQuery, block: _Block | None, at: tuple[int, int] | None) -> _Part:
        """The query's record batches copied out column by column as they arrive (no Arrow batch outlives
        its step), as :class:`_Sink` stores them."""
        import pyarrow as pa
        import pyarrow.compute as pc

        sink = _Sink(q, block, at)
        for batch in self._adbc_batches(sql):
            values: list[np.ndarray | None] = []
            for i in range(len(q.small)):
                col = batch.column(i)
                if not pa.types.is_integer(col.type):
                    if not pa.types.is_null(col.type):
                        raise _NotIntegers(str(col.type))
                    values.append(None)  # every value is NULL (default)
                    continue
                if col.null_count:
                    col = pc.fill_null(col, q.default)
                values.append(col.to_numpy(zero_copy_only=False))
            sink.add(batch.num_rows, values)
        return sink.finish()

    # -- backends ---------------------------------------------------------------------------------------
    @property
    def backend(self) -> str:
        if self._backend is None:
            self._backend = choose_backend()
        return self._backend

    def _uses_adbc(self, real: str) -> bool:
        """Whether the SQL backend reads table ``real`` by ADBC: the backend is ADBC and the table spans at
        least :data:`ADBC_MIN_ROWS` rowids (or its rowids cannot be bounded: a damaged table, read as
        before); a smaller table is read by ``sqlite3``, so that a run whose big tables all take the page
        route never imports the driver. ``$ANALYZER_SQLITE_BACKEND=adbc`` sends every table to ADBC."""
        if self.backend != "adbc":
            return False
        if forced_backend() == "adbc":
            return True
        bounds = self._rowid_bounds(real)
        return bounds is None or bounds[1] - bounds[0] >= ADBC_MIN_ROWS

    def _adbc_cursor(self):  # -> adbc cursor on this thread's connection
        import adbc_driver_sqlite.dbapi as adbc

        conn = getattr(self._local, "adbc", None)
        if conn is None:
            conn = adbc.connect(sqlite_uri(self.path))
            self._local.adbc = conn
            with self._lock:
                self._adbc_conns.append(conn)
        cur = conn.cursor()
        cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
        return cur

    def _adbc_query(self, sql: str):  # -> pyarrow.Table
        import adbc_driver_sqlite.dbapi as adbc

        cur = self._adbc_cursor()
        try:
            cur.execute(sql)
            return cur.fetch_arrow_table()
        except adbc.Error as exc:  # report it like sqlite3 does (a damaged schema fails to prepare too)
            raise sqlite3.OperationalError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from exc
        finally:
            cur.close()

    def _adbc_batches(self, sql: str) -> Iterator[Any]:  # yields pyarrow.RecordBatch
        import adbc_driver_sqlite.dbapi as adbc

        cur = self._adbc_cursor()
        try:
            cur.execute(sql)
            reader = cur.fetch_record_batch()
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    break
                yield batch
        except adbc.ProgrammingError:
            raise
        except (adbc.Error, OSError) as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if "Type mismatch" in msg:  # a column changed type mid-table (text in an integer column)
                raise _NotIntegers(msg) from exc
            raise sqlite3.DatabaseError(msg) from exc
        finally:
            cur.close()


class _Sink:
    """Where a query's (or a page range's) rows go, batch by batch: into ``block`` from row ``at[0]`` (at
    most ``at[1]`` rows), narrowing to the block's ``int32`` columns while the values fit (a column that
    does not fit continues as this part's own ``int64`` array); without a block into the part's own
    arrays, ``int32`` for the narrow columns whose values all fit, else ``int64``. A batch gives per column
    its values, or ``None`` where all are NULL (``default``); :meth:`add` copies them (the batch may be
    freed)."""

    def __init__(self, q: _IntQuery, block: _Block | None, at: tuple[int, int] | None) -> None:
        self.q = q
        self.dest = block.arrays if block is not None and at is not None else None
        self.offset, self.room = at if self.dest is not None and at is not None else (0, 0)
        width = len(q.small)
        self.pieces: list[list[np.ndarray]] = [[] for _ in range(width)]  # without a block
        self.own: list[np.ndarray | None] = [None] * width  # with a block: columns widened to int64
        self.default_fits = _I32_MIN <= q.default <= _I32_MAX
        self.pos = 0

    def add(self, n: int, values: list[np.ndarray | None]) -> None:
        q, dest, pos, offset, room = self.q, self.dest, self.pos, self.offset, self.room
        default = q.default
        if dest is not None and pos + n > room:
            raise sqlite3.DatabaseError(f"more rows than rowids in a range of {q.real!r}")
        for i, v in enumerate(values):
            if dest is None:
                if v is None:
                    self.pieces[i].append(np.full(n, default, dtype=np.int32 if q.small[i] and self.default_fits
                                                  else np.int64))
                elif q.small[i]:
                    narrowed = narrow_int(v)  # a new int32 array, or ``v`` itself
                    self.pieces[i].append(narrowed if narrowed is not v else np.array(v))
                else:
                    self.pieces[i].append(np.array(v, dtype=np.int64))  # a copy: the batch is freed
                continue
            wide = self.own[i]
            if wide is not None:
                wide[pos:pos + n] = default if v is None else v
                continue
            target = dest[i]
            if target.dtype == np.int32 and not (self.default_fits if v is None else _fits32(v)):
                wide = self.own[i] = np.empty(room, dtype=np.int64)
                wide[:pos] = target[offset:offset + pos]
                wide[pos:pos + n] = default if v is None else v
                continue
            target[offset + pos:offset + pos + n] = default if v is None else v
        self.pos = pos + n

    def finish(self) -> _Part:
        if self.dest is not None:
            return _Part(self.pos, [None if w is None else w[:self.pos] for w in self.own])
        out: list[np.ndarray | None] = []
        for i, s in enumerate(self.q.small):
            p, self.pieces[i] = self.pieces[i], []
            if not p:
                out.append(np.empty(0, dtype=np.int32 if s else np.int64))
                continue
            dtype = np.int32 if all(x.dtype == np.int32 for x in p) else np.int64
            out.append(p[0].astype(dtype, copy=False) if len(p) == 1 else np.concatenate(p, dtype=dtype))
        return _Part(self.pos, out)


@dataclass(frozen=True)
class _Layout:
    """Where the page route finds a job's columns: the table's column count, the record index of each
    fetched column, and the filter's column (record index), values and sense."""

    columns: int
    wanted: tuple[int, ...]
    filter_column: int | None
    filter_values: np.ndarray | None
    negate: bool


@dataclass(frozen=True)
class _Refused:
    """A page range the page route could not decode (why); its job is read again by the backend."""

    reason: str


class _NotIntegers(Exception):
    """A fetched column holds values other than integers (the query is retried with casts)."""


def forced_backend() -> str | None:
    """The SQL backend ``$ANALYZER_SQLITE_BACKEND`` names (``sqlite3`` or ``adbc``), else None."""
    forced = os.environ.get("ANALYZER_SQLITE_BACKEND", "").strip().lower()
    return forced if forced in ("sqlite3", "adbc") else None


def choose_backend() -> str:
    """``adbc`` when the ADBC SQLite driver is installed, else ``sqlite3`` (``$ANALYZER_SQLITE_BACKEND``
    overrides)."""
    forced = forced_backend()
    if forced is not None:
        return forced
    return "adbc" if importlib.util.find_spec("adbc_driver_sqlite") is not None else "sqlite3"
