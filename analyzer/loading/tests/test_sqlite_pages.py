"""The page route (sqlite_pages.py): integer columns decoded from the file's pages must equal what SQLite
returns for the same query, on real exports and on real exports changed in the ways that make the route
step aside (reals and text in integer columns, long texts, overflow pages, deleted rows, added columns,
WAL mode, other page sizes) or damaged byte by byte."""
from __future__ import annotations

import os
import random
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analyzer.loading.sqlite_reader as sr
from analyzer.errors import InputError
from analyzer.loading import load_trace
from analyzer.loading.model import FRAME_COLUMNS
from analyzer.loading.sqlite_pages import NotDirect, PageFile
from analyzer.testing import real_trace

KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    """A real export (nsys 2025.3: kernels, runtime calls, NVTX ranges, memcpys), a private copy."""
    out = tmp_path_factory.mktemp("pages") / "base.sqlite"
    shutil.copyfile(real_trace("small_training_ctx128"), out)
    return out


class Spy:
    """Which tables the page route read, and what it refused (with why)."""

    def __init__(self, monkeypatch) -> None:
        self.read: list[str] = []
        self.refused: list[tuple[str, str]] = []
        part = sr.SqliteReader._pages_part

        def spy(reader, q, *args):
            got = part(reader, q, *args)
            (self.refused.append((q.real, got.reason)) if isinstance(got, sr._Refused)
             else self.read.append(q.real))
            return got

        monkeypatch.setattr(sr.SqliteReader, "_pages_part", spy)


def _load_both(path: Path, monkeypatch) -> tuple[object, object, Spy]:
    monkeypatch.setenv("ANALYZER_SQLITE_PAGES", "0")
    by_sql = load_trace(path)
    monkeypatch.setenv("ANALYZER_SQLITE_PAGES", "1")
    spy = Spy(monkeypatch)
    by_pages = load_trace(path)
    return by_sql, by_pages, spy


def _refused_route_tables(spy) -> list[tuple[str, str]]:
    """What the route refused, less the device-memory table: nsys writes its ``name`` column as text of
    up to ~150 bytes, whose serial types take two header bytes, which this route steps aside for by
    design (SQLite reads that small table); every other table of these exports is read from the pages."""
    return [(t, why) for t, why in spy.refused
            if not (t == "CUDA_GPU_MEMORY_USAGE_EVENTS" and "long serial types" in why)]


def _assert_same(a, b) -> None:
    for name in FRAME_COLUMNS:
        pd.testing.assert_frame_equal(getattr(b, name), getattr(a, name), check_exact=True, obj=name)


@pytest.mark.parametrize("name", ["small_training_ctx128", "host_sync", "naive_attention_fixed",
                                  "dataloader_starved", "pageable_h2d"])
def test_pages_equal_sql_on_real_exports(name, monkeypatch):
    """Every frame of the model is identical (values and dtypes) read from the pages and read by SQLite,
    and the page route did read the big tables (nothing refused)."""
    by_sql, by_pages, spy = _load_both(Path(real_trace(name)), monkeypatch)
    _assert_same(by_sql, by_pages)
    assert KERNELS in spy.read and "CUPTI_ACTIVITY_KIND_RUNTIME" in spy.read
    assert not _refused_route_tables(spy)


def _changed(export: Path, tmp_path: Path, *sql: str) -> Path:
    out = tmp_path / "changed.sqlite"
    shutil.copyfile(export, out)
    conn = sqlite3.connect(out, isolation_level=None)
    for s in sql:
        conn.execute(s)
    conn.close()
    return out


@pytest.mark.parametrize("case, sql, refused", [
    ("a real in an integer column",
     [f"UPDATE {KERNELS} SET gridX = 2.5 WHERE rowid % 7 = 0"], "values other than integers"),
    ("text in an integer column",
     [f"UPDATE {KERNELS} SET streamId = 'x' WHERE rowid = 5"], "values other than integers"),
    ("a long text (two-byte serial type) in a column not read",
     [f"UPDATE {KERNELS} SET mangledName = '{'m' * 300}' WHERE rowid % 3 = 0"], "long serial types"),
    ("a record on overflow pages",
     [f"UPDATE {KERNELS} SET mangledName = '{'o' * 9000}' WHERE rowid = 9"], "overflow"),
    ("a column added after the rows were written",
     [f"ALTER TABLE {KERNELS} ADD COLUMN extra INTEGER"], "other column counts"),
])
def test_pages_step_aside_where_sqlite_decides(case, sql, refused, export, tmp_path, monkeypatch):
    """Where decoding needs SQLite's rules (CAST of reals and text, varint serial types, overflow chains,
    defaults of added columns) the page route refuses the table and SQLite reads it: same frames."""
    path = _changed(export, tmp_path, *sql)
    by_sql, by_pages, spy = _load_both(path, monkeypatch)
    _assert_same(by_sql, by_pages)
    assert any(t == KERNELS and refused in why for t, why in spy.refused), spy.refused
    assert "CUPTI_ACTIVITY_KIND_RUNTIME" in spy.read


@pytest.mark.parametrize("case, sql", [
    ("deleted rows (gaps in the rowids) and NULLs", [f"DELETE FROM {KERNELS} WHERE rowid % 5 = 1",
                                                     f"UPDATE {KERNELS} SET launchType = NULL WHERE rowid % 4 = 0"]),
    ("values beyond 32 bits in a narrow column", [f"UPDATE {KERNELS} SET gridZ = 1 << 40 WHERE rowid = 300"]),
    ("small pages (more levels in the b-tree)", ["PRAGMA page_size = 512", "VACUUM"]),
    ("64 KiB pages", ["PRAGMA page_size = 65536", "VACUUM"]),
])
def test_pages_decode_what_sqlite_stores(case, sql, export, tmp_path, monkeypatch):
    """Rowid gaps, NULLs, wide values and other page sizes are decoded, not refused, and equal SQLite's."""
    path = _changed(export, tmp_path, *sql)
    by_sql, by_pages, spy = _load_both(path, monkeypatch)
    _assert_same(by_sql, by_pages)
    assert KERNELS in spy.read and not _refused_route_tables(spy)


def test_wal_files_are_left_to_sqlite(export, tmp_path):
    """A WAL-mode file may hold committed pages in its -wal file: the page route does not open it."""
    path = _changed(export, tmp_path, "PRAGMA journal_mode = WAL")
    with pytest.raises(NotDirect, match="WAL"):
        PageFile(path)
    assert len(load_trace(path).kernels)


def test_page_route_reads_a_file_without_write_permission(export, tmp_path, monkeypatch):
    """The route only reads: a read-only file is read (and left byte for byte as it was)."""
    path = tmp_path / "ro.sqlite"
    shutil.copyfile(export, path)
    before = path.read_bytes()
    path.chmod(0o444)
    spy = Spy(monkeypatch)
    monkeypatch.setenv("ANALYZER_SQLITE_PAGES", "1")
    assert len(load_trace(path).kernels)
    assert KERNELS in spy.read and path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ro.sqlite"]


def _outcome(path: Path, monkeypatch, pages: str):
    monkeypatch.setenv("ANALYZER_SQLITE_PAGES", pages)
    try:
        trace = load_trace(path)
    except InputError as exc:
        return ("error", str(exc))
    return ("trace", {name: getattr(trace, name) for name in FRAME_COLUMNS})


@pytest.mark.parametrize("seed", range(*map(int, os.environ.get("PAGES_DAMAGE_SEEDS", "24").split(":"))))
def test_damaged_pages_read_as_sqlite_reads_them(seed, export, tmp_path, monkeypatch):
    """(``PAGES_DAMAGE_SEEDS=N`` or ``A:B`` runs more seeds.) Bytes changed at random in the kernel table's pages, leaves and root (a cell pointer, a varint, a
    record header, a value, a page type, a child page number or key): the load ends as it does through SQLite alone, with the same frames or the same
    error. The route either decodes exactly what SQLite reads or steps aside; it never decodes garbage
    that SQLite would not."""
    rng = random.Random(seed)
    path = tmp_path / "damaged.sqlite"
    shutil.copyfile(export, path)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (KERNELS,)).fetchone()[0]
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    pf = PageFile(path)
    last = int(sqlite3.connect(path).execute(f"SELECT max(rowid) FROM {KERNELS}").fetchone()[0])
    leaves = pf.table(root, last).leaves
    pf.close()
    data = bytearray(path.read_bytes())
    for _ in range(rng.choice([1, 1, 2, 4])):
        page = root if rng.random() < 0.25 else int(rng.choice(leaves))  # the root: an interior page
        at = (page - 1) * page_size + rng.choice([0, 3, 4, rng.randrange(8, 40), rng.randrange(page_size)])
        data[at] = rng.randrange(256) if rng.random() < 0.7 else data[at] ^ 0x80
    path.write_bytes(bytes(data))
    by_sql = _outcome(path, monkeypatch, "0")
    by_pages = _outcome(path, monkeypatch, "1")
    assert by_sql[0] == by_pages[0], (by_sql[0], by_pages[0])
    if by_sql[0] == "error":
        assert by_sql[1] == by_pages[1]
    else:
        for name in FRAME_COLUMNS:
            pd.testing.assert_frame_equal(by_pages[1][name], by_sql[1][name], check_exact=True, obj=name)


def test_varints_of_every_length():
    """SQLite's varints: 1 to 8 bytes of 7 bits, the ninth byte all 8 bits."""
    values = [0, 1, 127, 128, 16383, 16384, 2**21, 2**28 - 1, 2**35, 2**42 + 5, 2**49, 2**56 - 1, 2**56,
              2**63 - 1, -1, -(2**63)]
    _check_varints(values)


def _check_varints(values: list[int]) -> None:
    """``values`` encoded back to back are read back by ``_varints`` with their own lengths."""
    from analyzer.loading.sqlite_pages import _varints

    blob, starts = bytearray(), []
    for v in values:
        starts.append(len(blob))
        blob += _encode_varint(v)
    buf = np.frombuffer(bytes(blob) + bytes(9), dtype=np.uint8)
    got, lengths = _varints(buf, np.array(starts, dtype=np.int64))
    assert got.tolist() == values
    assert lengths.tolist() == [len(_encode_varint(v)) for v in values]



def test_varints_all_of_one_length():
    """Varints that all continue past their first bytes (a big table's rowids) are read as whole arrays
    until some stop: the same values and lengths as one by one, for every length and a mix after it."""
    for low in (128, 16384, 2**21, 2**28, 2**35, 2**42, 2**49, 2**56):
        values = [low, low + 1, 2 * low - 1, low + 77]
        values_mixed = values + [low - 1, 5]  # shorter ones after the long ones: the indexed rounds
        for vals in (values, values_mixed, [-1, -(2**63), 2**63 - 1] if low == 2**56 else values):
            _check_varints(vals)

def _encode_varint(v: int) -> bytes:
    """SQLite's varint encoding (sqlite3PutVarint), for the test above."""
    u = v & (2**64 - 1)
    if u >> 56:
        out = [u & 0xFF]
        u >>= 8
        for _ in range(8):
            out.append((u & 0x7F) | 0x80)
            u >>= 7
        return bytes(reversed(out))
    groups = []
    while True:
        groups.append(u & 0x7F)
        u >>= 7
        if not u:
            break
    groups.reverse()
    return bytes([g | 0x80 for g in groups[:-1]] + [groups[-1]])


def test_without_positional_reads_sqlite_reads_everything(export, monkeypatch):
    """Where the OS has no pread/preadv (Windows) the route is off and SQLite reads every table."""
    monkeypatch.delattr(os, "preadv")
    with pytest.raises(NotDirect, match="positional reads"):
        PageFile(export)
    spy = Spy(monkeypatch)
    monkeypatch.setenv("ANALYZER_SQLITE_PAGES", "1")
    assert len(load_trace(export).kernels) and not spy.read and not spy.refused
