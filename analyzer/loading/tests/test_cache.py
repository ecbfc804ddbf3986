"""The columnar trace cache (analyzer/loading/cache.py): exact, never stale, never required, bounded."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from analyzer.loading import cache as cache_mod
from analyzer.loading import load_trace
from analyzer.loading.cache import TraceCache, parse_size
from analyzer.loading.model import FRAME_COLUMNS

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def trace_file(tmp_path) -> Path:
    """A private copy of a small real trace (tests change it)."""
    from analyzer.testing import real_trace

    dst = tmp_path / "input" / "healthy.sqlite"
    dst.parent.mkdir()
    shutil.copyfile(real_trace("healthy"), dst)
    return dst


@pytest.fixture
def cache(tmp_path) -> TraceCache:
    return TraceCache(tmp_path / "cache", limit=10**9)


class Counting:
    """Counts the loader runs and digests behind a cache's back."""

    def __init__(self, monkeypatch) -> None:
        self.hashes = 0
        real = cache_mod.file_digest

        def digest(path):
            self.hashes += 1
            return real(path)

        monkeypatch.setattr(cache_mod, "file_digest", digest)

    def load(self, path: Path, cache: TraceCache):
        hits = cache.hits
        trace = load_trace(path, cache=cache)
        return trace, cache.hits > hits


def assert_same_trace(a, b) -> None:
    for name in FRAME_COLUMNS:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True,
                                      check_categorical=True, obj=name)
    assert a.info == b.info
    assert a.extras == b.extras


def test_cached_trace_is_exactly_the_loaded_one(trace_file, cache, monkeypatch):
    count = Counting(monkeypatch)
    fresh = load_trace(trace_file)
    first, hit1 = count.load(trace_file, cache)
    second, hit2 = count.load(trace_file, cache)
    assert (hit1, hit2) == (False, True)
    assert_same_trace(fresh, first)
    assert_same_trace(fresh, second)
    for name in FRAME_COLUMNS:  # writable in place like loaded frames (pandas refuses read-only arrays)
        frame = getattr(second, name)
        for col in frame.columns:
            if len(frame) and not isinstance(frame[col].dtype, pd.CategoricalDtype):
                frame.loc[frame.index[0], col] = frame[col].iloc[0]


def test_reports_identical_through_the_cache(tmp_path, monkeypatch):
    """The reference cases' reports, analysed from cache hits, equal the references (two traces)."""
    sys.path.insert(0, str(REPO / "tests"))
    import reference_reports as refs

    monkeypatch.setenv("ANALYZER_CACHE_DIR", str(tmp_path / "c"))
    index = refs.load_index()
    from analyzer.pipeline import AnalysisOptions, analyze_paths
    from analyzer.reports import build_report, render

    for case in [c for c in refs.cases() if c.name in ("small_training_ctx128", "dataloader_starved")]:
        for _ in range(2):  # write, then read
            options = AnalysisOptions(cache=True)
            report = build_report(analyze_paths(list(case.traces), options), created=refs.CREATED)
            got = {fmt: refs._portable(render(report, fmt)) for fmt in refs.FORMATS}
            assert not list(refs.compare(case, got, index))
    assert len(list((tmp_path / "c" / "traces").glob("*/meta.json"))) == 2


def _set_times_back(path: Path, st: os.stat_result) -> None:
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_changed_file_is_never_served_stale(trace_file, cache, monkeypatch):
    """Same size, same mtime, other content: the ctime (and the content hash) tell."""
    monkeypatch.setattr(cache_mod, "RACY_SECONDS", 0.0)  # let the identity index record this fresh file
    count = Counting(monkeypatch)
    trace, _ = count.load(trace_file, cache)
    assert count.hashes == 1 and len(list((cache.root / "ident").iterdir())) == 1
    _, hit = count.load(trace_file, cache)
    assert hit and count.hashes == 1  # served through the identity index, no hashing
    st = trace_file.stat()
    conn = sqlite3.connect(trace_file)
    conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = gridX + 1")  # same size in place
    conn.commit()
    conn.close()
    _set_times_back(trace_file, st)
    assert trace_file.stat().st_size == st.st_size and trace_file.stat().st_mtime_ns == st.st_mtime_ns
    changed, hit = count.load(trace_file, cache)
    assert not hit and count.hashes == 2
    assert (changed.kernels["grid_x"].to_numpy() == trace.kernels["grid_x"].to_numpy() + 1).all()


def test_replaced_file_is_never_served_stale(trace_file, cache, tmp_path, monkeypatch):
    from analyzer.testing import real_trace

    count = Counting(monkeypatch)
    first, _ = count.load(trace_file, cache)
    other = tmp_path / "other.sqlite"
    shutil.copyfile(real_trace("tiny_kernels_fixed"), other)
    os.replace(other, trace_file)
    replaced, hit = count.load(trace_file, cache)
    assert not hit
    assert len(replaced.kernels) != len(first.kernels)


def test_racily_clean_files_are_hashed_every_time(trace_file, cache, monkeypatch):
    """A file changed a moment ago could change again within one timestamp tick: no identity shortcut."""
    count = Counting(monkeypatch)
    count.load(trace_file, cache)
    _, hit = count.load(trace_file, cache)
    assert hit and count.hashes == 2
    assert not (cache.root / "ident").exists() or not list((cache.root / "ident").iterdir())


def test_copied_file_finds_its_entry_by_content(trace_file, cache, tmp_path, monkeypatch):
    count = Counting(monkeypatch)
    count.load(trace_file, cache)
    copy = tmp_path / "elsewhere" / "renamed.sqlite"
    copy.parent.mkdir()
    shutil.copyfile(trace_file, copy)
    trace, hit = count.load(copy, cache)
    assert hit and trace.info.path == copy and trace.name == "renamed.sqlite"


def test_damaged_entries_fall_back_to_the_loader(trace_file, cache, monkeypatch):
    count = Counting(monkeypatch)
    fresh, _ = count.load(trace_file, cache)
    (entry,) = [p for p in cache.root.iterdir() if len(p.name) == 64]
    data = (entry / "kernels.arrow").read_bytes()
    (entry / "kernels.arrow").write_bytes(data[: len(data) // 2])
    again, hit = count.load(trace_file, cache)
    assert not hit
    assert_same_trace(fresh, again)
    meta = json.loads((entry / "meta.json").read_text())  # rewritten by the miss
    meta["signature"] = "another loader"
    (entry / "meta.json").write_text(json.dumps(meta))
    _, hit = count.load(trace_file, cache)
    assert not hit


def test_unwritable_cache_is_not_required(trace_file, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory would be")
    trace = load_trace(trace_file, cache=TraceCache(blocker / "traces"))
    assert len(trace.kernels)


def test_eviction_keeps_the_cache_under_its_limit(trace_file, tmp_path):
    from analyzer.testing import real_trace

    other = tmp_path / "input" / "tiny.sqlite"
    shutil.copyfile(real_trace("tiny_kernels_fixed"), other)
    big = TraceCache(tmp_path / "c", limit=10**9)
    load_trace(trace_file, cache=big)
    load_trace(other, cache=big)
    sizes = [size for _, size, _ in big.entries()]
    assert len(sizes) == 2
    small = TraceCache(tmp_path / "c", limit=max(sizes) + 1)  # room for one entry
    small.evict()
    (left,) = small.entries()
    assert json.loads((left[2] / "meta.json").read_text())["source"] == str(other.resolve())  # newest kept
    load_trace(trace_file, cache=TraceCache(tmp_path / "c", limit=0))  # 0: never written
    assert len(small.entries()) == 1


def test_cli_cache_lives_in_the_cache_dir_only(trace_file, tmp_path):
    """The second run reads the cache; nothing is written beside the input; --no-cache touches nothing."""
    env = dict(os.environ, ANALYZER_CACHE_DIR=str(tmp_path / "user-cache"))
    env.pop("ANALYZER_NO_CACHE", None)
    before = sorted(os.listdir(trace_file.parent))
    out = tmp_path / "out"
    out.mkdir()

    def run(*extra: str) -> None:
        subprocess.run([sys.executable, "-m", "analyzer.cli", str(trace_file), "-o", str(out / "r.json"), "-q",
                        *extra], check=True, env=env, cwd=tmp_path)

    run()
    first = (out / "r.json").read_text()
    run()
    assert (out / "r.json").read_text().split('"created"')[0] == first.split('"created"')[0]
    assert sorted(os.listdir(trace_file.parent)) == before
    assert len(list((tmp_path / "user-cache" / "traces").glob("*/meta.json"))) == 1
    shutil.rmtree(tmp_path / "user-cache")
    run("--no-cache")
    assert not (tmp_path / "user-cache").exists()


def test_parse_size():
    assert parse_size("5GB") == 5 * 10**9
    assert parse_size("2GiB") == 2 * 2**30
    assert parse_size("500mb") == 5 * 10**8
    assert parse_size("0") == 0
    with pytest.raises(ValueError):
        parse_size("lots")


def test_background_write_is_the_loaded_trace_as_loaded(trace_file, tmp_path):
    """With ``background=True`` (what ``analyze`` uses) the entry's files are written by a thread while
    the caller goes on: after :meth:`TraceCache.wait` it holds the trace as loaded, even though the
    caller changed the trace meanwhile (an analysis adds extras and power frames to it)."""
    writer = TraceCache(tmp_path / "cache", limit=10**9, background=True)
    trace = load_trace(trace_file, cache=writer)
    loaded_extras = json.loads(json.dumps(trace.extras))
    trace.extras["power_sources"] = [object()]  # not JSON: an entry built from it now would be refused
    trace.power = trace.power.iloc[:0]
    writer.wait()
    reader = TraceCache(tmp_path / "cache", limit=10**9)
    again = load_trace(trace_file, cache=reader)
    assert reader.hits == 1
    assert again.extras == loaded_extras
    assert_same_trace(again, load_trace(trace_file))


def _entry(cache: TraceCache) -> Path:
    (entry,) = [p for p in cache.root.iterdir() if len(p.name) == 64]
    return entry


def test_tampered_entries_are_never_served(trace_file, cache, monkeypatch, capsys):
    """Bytes flipped anywhere in an Arrow file, or a value changed in meta.json: the entry's checksum
    no longer matches, the trace is loaded again (and equals the loaded one), and stderr says so once."""
    monkeypatch.setattr(cache_mod, "_SAID", set(), raising=False)
    fresh, _ = Counting(monkeypatch).load(trace_file, cache)
    path = _entry(cache) / "kernels.arrow"
    original = path.read_bytes()
    for i in range(40):
        data = bytearray(original)
        data[(len(data) - 1) * i // 39] ^= 0x5A
        path.write_bytes(bytes(data))
        trace, hit = Counting(monkeypatch).load(trace_file, cache)
        assert not hit
        assert_same_trace(fresh, trace)
        path = _entry(cache) / "kernels.arrow"  # rewritten by the miss
        assert path.read_bytes() != bytes(data)
    meta_path = _entry(cache) / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["info"]["duration_ns"] += 1
    meta_path.write_text(json.dumps(meta))
    trace, hit = Counting(monkeypatch).load(trace_file, cache)
    assert not hit and trace.info == fresh.info
    err = capsys.readouterr().err
    assert err.count("does not match its checksum") == 1


def test_cache_is_private_and_refuses_what_others_can_write(trace_file, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cache_mod, "_SAID", set(), raising=False)
    home = tmp_path / "home-cache"
    cache = TraceCache(home / "traces", limit=10**9)
    old_mask = os.umask(0)  # a permissive umask must not leak into the cache
    try:
        Counting(monkeypatch).load(trace_file, cache)
    finally:
        os.umask(old_mask)
    monkeypatch.undo()
    monkeypatch.setattr(cache_mod, "_SAID", set(), raising=False)
    assert (home.stat().st_mode & 0o777, cache.root.stat().st_mode & 0o777) == (0o700, 0o700)
    entry = _entry(cache)
    assert {f.stat().st_mode & 0o777 for f in entry.iterdir()} == {0o600}
    _, hit = Counting(monkeypatch).load(trace_file, cache)
    assert hit
    (entry / "kernels.arrow").chmod(0o666)  # anyone could have changed it
    _, hit = Counting(monkeypatch).load(trace_file, cache)
    assert not hit
    cache.root.chmod(0o777)  # anyone could have put entries there
    before = sorted(p.name for p in cache.root.rglob("*"))
    _, hit = Counting(monkeypatch).load(trace_file, cache)
    assert not hit and sorted(p.name for p in cache.root.rglob("*")) == before  # nor written to
    err = capsys.readouterr().err
    assert err.count("not a private file of yours") == 1 and err.count("is not private to you") == 1


def test_planted_meta_files_neither_block_nor_grow_memory(trace_file, cache, monkeypatch):
    """Entry folders whose meta.json is a FIFO, 17 MiB of JSON, or 100,000-deep nesting, planted in the
    cache: a trace of no entry yet looks for one of its size among them (and eviction reads them all).
    Before, that lookup opened the FIFO blocking and hung forever (`analyze` of any new trace never
    finished), and read any file whole. Now each is skipped: the trace loads, is stored and hits."""
    import threading

    cache.root.mkdir(parents=True, mode=0o700)
    planted = {"f" * 64: None, "e" * 64: b'{"source_size": ' + b"1" * (17 << 20) + b"}",
               "d" * 64: b"[" * 100_000}
    for name, content in planted.items():
        (cache.root / name).mkdir(mode=0o700)
        meta = cache.root / name / "meta.json"
        if content is None:
            os.mkfifo(meta, 0o600)
        else:
            meta.write_bytes(content)
            meta.chmod(0o600)
    done: list[bool] = []

    def run() -> None:
        counting = Counting(monkeypatch)
        counting.load(trace_file, cache)
        cache.wait()
        done.append(counting.load(trace_file, cache)[1])

    worker = threading.Thread(target=run, daemon=True)  # a blocked open() cannot be interrupted
    worker.start()
    worker.join(120)
    assert done == [True], "the cache lookup blocked on a planted FIFO (or failed)"
    cache.evict()
    assert all((cache.root / name).is_dir() for name in planted)  # not the cache's: left alone


def test_decompressed_copies_are_evicted_within_the_cache_limit(tmp_path, monkeypatch):
    """Decompressed copies of .sqlite.xz traces (and nsys exports) count against ANALYZER_CACHE_MAX with
    the trace and fact entries: before, every copy stayed forever (16 GB of them on the development
    machine, limit 5 GB: one per path, size and mtime of the same few traces). The least recently used
    go first; one used in the last ten minutes (another analysis may be reading it), the one just
    written, and anything the analyzer did not name as it names its copies stay."""
    from analyzer.loading import nsys_rep
    from analyzer.testing import DATA_DIR

    home = tmp_path / "cache"
    monkeypatch.setenv("ANALYZER_CACHE_DIR", str(home))
    monkeypatch.setenv("ANALYZER_CACHE_MAX", "1MB")
    folder = home / "decompressed"
    folder.mkdir(parents=True, mode=0o700)
    home.chmod(0o700)
    old, recent = 1_000_000_000, time.time()
    planted = {}
    for i, used in enumerate([old, old + 1, recent]):
        f = folder / f"{i:016x}-old{i}.sqlite"
        f.write_bytes(b"x" * 2_000_000)
        f.chmod(0o600)
        os.utime(f, (used, old))
        planted[f.name] = f
    mine = folder / "notes.sqlite"  # not a name the analyzer gives a copy
    mine.write_bytes(b"y" * 2_000_000)
    os.utime(mine, (old, old))
    link = folder / f"{9:016x}-link.sqlite"
    link.symlink_to(mine)
    out = nsys_rep.cached_decompressed(DATA_DIR / "tiny_kernels_fixed.sqlite.xz")
    assert out.parent == folder and out.stat().st_size > 500_000  # the copy just written stays
    left = {p.name for p in folder.iterdir()}
    # 4 MB of old copies over a 1 MB limit: both go; the recent one stays, and does not count
    assert "0000000000000000-old0.sqlite" not in left and "0000000000000001-old1.sqlite" not in left
    assert {"0000000000000002-old2.sqlite", "notes.sqlite", link.name, out.name} <= left
    # a copy served again is marked used (its access time), its mtime (which readers check) unchanged
    mtime = out.stat().st_mtime_ns
    os.utime(out, ns=(old * 10**9, mtime))
    assert nsys_rep.cached_decompressed(DATA_DIR / "tiny_kernels_fixed.sqlite.xz") == out
    assert out.stat().st_atime > recent - 1 and out.stat().st_mtime_ns == mtime


def test_a_replaced_xz_of_the_same_size_and_mtime_is_decompressed_again(tmp_path, monkeypatch):
    """The decompressed copy is keyed on the file's identity, ctime and inode included: a file replaced by
    another of the same size with its mtime carried over (cp -p, rsync -t) got its predecessor's copy."""
    import lzma

    from analyzer.loading import nsys_rep

    monkeypatch.setenv("ANALYZER_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "run.sqlite.xz"
    path.write_bytes(lzma.compress(b"a" * 1000))
    first = nsys_rep.cached_decompressed(path)
    assert first.read_bytes() == b"a" * 1000
    st = path.stat()
    other = tmp_path / "other.sqlite.xz"
    other.write_bytes(lzma.compress(b"b" * 1000))
    assert other.stat().st_size == st.st_size
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, path)  # same path, size and mtime; another file
    assert nsys_rep.cached_decompressed(path).read_bytes() == b"b" * 1000


def test_eviction_deletes_only_what_the_cache_wrote(trace_file, tmp_path):
    """The ``traces`` folder is a link to a folder with the user's own content (dot-folders older than
    an hour, a file, an ``ident`` folder of theirs, a 64-hex folder with a file of theirs): evicting
    everything removes none of it."""
    user = tmp_path / "project"
    (user / ".git" / "objects").mkdir(parents=True)
    (user / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (user / ".venv").mkdir()
    (user / "notes.txt").write_text("mine")
    (user / "ident").mkdir()
    (user / "ident" / ("0" * 40)).write_text("mine too")
    (user / ("a" * 64)).mkdir()
    (user / ("a" * 64) / "meta.json").write_text("{}")
    (user / ("a" * 64) / "thesis.tex").write_text("mine")
    old = 1_000_000_000
    for p in [*user.rglob("*"), user]:
        os.utime(p, (old, old))
    before = sorted(str(p.relative_to(user)) for p in user.rglob("*"))
    (tmp_path / "c").mkdir(mode=0o700)
    link = tmp_path / "c" / "traces"
    link.symlink_to(user)
    cache = TraceCache(link, limit=1)  # every entry is over the limit: evict all
    load_trace(trace_file, cache=cache)
    cache.evict()
    after = sorted(str(p.relative_to(user)) for p in user.rglob("*"))
    assert set(before) <= set(after)
    assert [e for e in cache.entries() if e[2].name != "a" * 64] == []


def test_derived_files_follow_the_cache_dir_and_its_trust(tmp_path, monkeypatch, capsys):
    """Decompressed copies of .sqlite.xz traces live under ANALYZER_CACHE_DIR like the trace cache
    (they went to the XDG cache whatever it said), in a private folder, and a copy someone else could
    have written (here: another real trace put in its place, group/world-writable) is not served."""
    from analyzer.loading.nsys_rep import cached_decompressed
    from analyzer.testing import DATA_DIR, real_trace

    monkeypatch.setenv("ANALYZER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    packed = tmp_path / "tiny_kernels.sqlite.xz"
    shutil.copyfile(DATA_DIR / "tiny_kernels.sqlite.xz", packed)
    copy = cached_decompressed(packed)
    assert copy.is_relative_to(tmp_path / "cache") and not (tmp_path / "xdg").exists()
    assert (copy.parent.stat().st_mode & 0o777, copy.stat().st_mode & 0o777) == (0o700, 0o600)
    truth = len(load_trace(packed).kernels)
    shutil.copyfile(real_trace("healthy"), copy)  # another trace where the copy was
    copy.chmod(0o666)
    assert cached_decompressed(packed) == copy and len(load_trace(packed).kernels) == truth
    assert copy.stat().st_mode & 0o777 == 0o600  # written again, privately


def test_a_derived_file_being_read_is_never_replaced_by_another_analysis(tmp_path, monkeypatch):
    """Two analyses of one .sqlite.xz started together both decompress it; the one finishing second used
    to rename its copy over the first one's while that was being read, and the first refused its input
    ("the file changed while it was read"; seen running two analyses of a committed trace at once). The
    second now keeps the file in place and drops its own copy; a copy not fit to serve is still replaced."""
    from analyzer.loading.nsys_rep import cached_decompressed, publish
    from analyzer.loading.sqlite_reader import SqliteReader
    from analyzer.testing import DATA_DIR

    monkeypatch.setenv("ANALYZER_CACHE_DIR", str(tmp_path / "cache"))
    packed = tmp_path / "tiny_kernels.sqlite.xz"
    shutil.copyfile(DATA_DIR / "tiny_kernels.sqlite.xz", packed)
    copy = cached_decompressed(packed)
    reader = SqliteReader(copy)  # the first analysis, reading
    inode = copy.stat().st_ino
    late = copy.with_name(".xz-late")  # the second analysis' finished copy
    shutil.copyfile(copy, late)
    assert publish(late, copy) == copy and not late.exists()
    assert copy.stat().st_ino == inode
    reader.check_unchanged()  # the first one's input did not change under it
    reader.close()
    copy.chmod(0o666)  # someone else could have written it: not served, so replaced
    shutil.copyfile(copy, late)
    publish(late, copy)
    assert copy.stat().st_ino != inode and not late.exists()


def test_lazy_trace_reads_each_frame_when_used(trace_file, tmp_path, monkeypatch, capsys):
    """A lazily served trace (the analysis' cache) reads no frame until one is used, then exactly the
    loaded frame; a damaged frame file is loaded again by the loader (said once), and a pickled or
    copied trace is a plain, complete one."""
    import dataclasses
    import pickle

    from analyzer.loading.cache import frame_rows

    monkeypatch.setattr(cache_mod, "_SAID", set(), raising=False)
    fresh = load_trace(trace_file)
    lazy_cache = TraceCache(tmp_path / "lazy", limit=10**9, lazy=True)
    count = Counting(monkeypatch)
    count.load(trace_file, lazy_cache)
    read: list[str] = []
    real = cache_mod._Frames._read
    monkeypatch.setattr(cache_mod._Frames, "_read", lambda self, name: read.append(name) or real(self, name))
    trace, hit = count.load(trace_file, lazy_cache)
    assert hit and read == []
    assert [frame_rows(trace, n) for n in FRAME_COLUMNS] == [len(getattr(fresh, n)) for n in FRAME_COLUMNS]
    assert read == []
    assert len(trace.kernels) == len(fresh.kernels) and read == ["kernels"]
    assert_same_trace(fresh, trace)
    assert sorted(read) == sorted(FRAME_COLUMNS)  # each once
    copied = pickle.loads(pickle.dumps(count.load(trace_file, lazy_cache)[0]))
    assert type(copied) is cache_mod.Trace
    assert_same_trace(fresh, copied)
    assert_same_trace(fresh, dataclasses.replace(count.load(trace_file, lazy_cache)[0]))
    entry = _entry(lazy_cache)
    trace, hit = count.load(trace_file, lazy_cache)
    data = bytearray((entry / "api.arrow").read_bytes())
    data[len(data) // 2] ^= 0x5A
    (entry / "api.arrow").write_bytes(bytes(data))
    assert hit
    assert_same_trace(fresh, trace)  # the api frame (and every other not read yet) from the loader
    assert capsys.readouterr().err.count("does not match its checksum") == 1
    assert not entry.exists()  # the next run writes it again


def test_integer_columns_stored_as_differences_come_back_exactly():
    """Timestamps and ids counting up are stored as the differences of consecutive values (``delta:``
    kinds: half the bytes of an entry at 1 M kernels); read back, the frames are exactly the loaded ones,
    the differences wrapping around at the integer type's ends as the running sum does back."""
    import numpy as np

    from analyzer.loading.arrowio import _differences, frame_from_ipc, frame_to_table, ipc_bytes
    from analyzer.testing import real_trace

    trace = load_trace(real_trace("small_training_ctx128"))  # 6,108 kernels, 12,729 API calls
    kinds = {}
    for name in ("kernels", "api"):
        frame = getattr(trace, name)
        table = frame_to_table(frame)
        kinds[name] = {f.name: f.metadata[b"kind"].decode() for f in table.schema}
        pd.testing.assert_frame_equal(frame_from_ipc(ipc_bytes(table)), frame, check_exact=True,
                                      check_categorical=True, obj=name)
    assert kinds["kernels"]["start"] == kinds["api"]["start"] == "delta:<i8"
    assert kinds["kernels"]["duration"] == "<i8"  # no order: stored as they are
    edges = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, -1, np.iinfo(np.int64).min], np.int64)
    assert (np.add.accumulate(_differences(edges), dtype=np.int64) == edges).all()
