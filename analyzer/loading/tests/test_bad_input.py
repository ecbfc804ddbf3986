"""Bad input never produces a traceback: each case is an InputError with a one-line, actionable message.

The SQLite files here are hand-built in ``tmp_path`` (no trace data is invented: they only exercise the
error paths); the truncated case is the first half of a real public export."""
from __future__ import annotations

import hashlib
import os
import random
import shutil
import sqlite3
from pathlib import Path

import pytest

from analyzer.errors import InputError, UnsupportedFormatError
from analyzer.loading import detect_format, load_trace
from analyzer.loading.tests.test_nsys_public import MEMFUSION_2023, PUBLIC, needs_public


def _error(path, **kw) -> InputError:
    with pytest.raises(InputError) as info:
        load_trace(path, **kw)
    err = info.value
    msg = str(err)
    assert "\n" not in msg, msg
    assert str(path) in msg
    assert err.exit_code == 2
    return err


def test_missing_file(tmp_path):
    err = _error(tmp_path / "nope.sqlite")
    assert "no such file" in str(err)


def test_directory(tmp_path):
    err = _error(tmp_path)
    assert "directory" in str(err)


def test_random_bytes(tmp_path):
    p = tmp_path / "random.sqlite"
    # seeded: 1 in ~100 urandom buffers starts like JSON ("{", "[", whitespace) and is read as a
    # torch.profiler trace, which gives another (also one-line) error
    p.write_bytes(random.Random(4096).randbytes(4096))
    err = _error(p)
    assert "not a trace this analyzer reads" in str(err)
    assert "nsys export --type sqlite" in str(err)


def test_text_file(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("kernel,duration\nfoo,12\n")
    assert detect_format(p) == "unknown"
    _error(p)


@pytest.mark.parametrize("name", ["report1.sqlite", "profile.nsys-rep", "worker0.pt.trace.json.gz"])
def test_git_lfs_pointer(tmp_path, name):
    """A clone without git-lfs holds a three-line pointer where the trace should be (met on a public
    repository's report1.sqlite): say so and how to fetch it, whatever the file is named."""
    p = tmp_path / name
    p.write_text("version https://git-lfs.github.com/spec/v1\n"
                 "oid sha256:a1c2af0d6058114d6a1c2a21e86fbe5812197ea2d6e4293dcf997dd24db63123\nsize 552960\n")
    assert detect_format(p) == "lfs-pointer"
    err = _error(p)
    assert "Git LFS pointer" in str(err) and "552,960 bytes" in str(err)
    assert f"git lfs pull --include '{name}'" in str(err)


def test_empty_file(tmp_path):
    p = tmp_path / "empty.sqlite"
    p.write_bytes(b"")
    assert "empty" in str(_error(p))


def test_sqlite_without_nsys_tables(tmp_path):
    p = tmp_path / "other.sqlite"
    with sqlite3.connect(p) as conn:
        conn.execute("CREATE TABLE people (name TEXT, age INTEGER)")
        conn.execute("INSERT INTO people VALUES ('ada', 36)")
    conn.close()
    assert detect_format(p) == "sqlite"
    err = _error(p)
    assert "no Nsight Systems tables" in str(err)


def test_no_gpu_activity(tmp_path):
    p = tmp_path / "cpu_only.sqlite"
    with sqlite3.connect(p) as conn:
        conn.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
        conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, eventClass INT, "
                     "globalTid INT, correlationId INT, nameId INT, returnValue INT)")
        conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, "
                     "correlationId INT, globalPid INT, shortName INT)")
        conn.execute("INSERT INTO StringIds VALUES (1, 'cudaGetDeviceCount_v3020')")
        conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (10, 20, 0, 16777216, 1, 1, 0)")
    conn.close()
    err = _error(p)
    assert "no GPU activity" in str(err)
    assert "--trace=cuda" in str(err)


@needs_public
def test_truncated_export(tmp_path):
    data = MEMFUSION_2023.read_bytes()
    p = tmp_path / "half.sqlite"
    p.write_bytes(data[: len(data) // 2])
    err = _error(p)
    assert "truncated" in str(err)


@needs_public
def test_corrupt_pages(tmp_path):
    """A real export whose header and schema page are intact but whose table pages are garbage."""
    raw = bytearray(MEMFUSION_2023.read_bytes())
    page = int.from_bytes(raw[16:18], "big")
    rng = random.Random(0)
    raw[page:] = bytes(rng.getrandbits(8) for _ in range(len(raw) - page))
    p = tmp_path / "corrupt.sqlite"
    p.write_bytes(bytes(raw))
    err = _error(p)
    assert "corrupt" in str(err)


@pytest.mark.parametrize("backend", ["sqlite3", "adbc"])
def test_corrupt_table_pages(tmp_path, monkeypatch, backend):
    """Schema page intact, kernel table pages garbage: the failure surfaces during the column fetch
    (on either backend, possibly in a worker thread) and still becomes one InputError line."""
    if backend == "adbc":
        pytest.importorskip("adbc_driver_sqlite")
    monkeypatch.setenv("ANALYZER_SQLITE_BACKEND", backend)
    p = tmp_path / "kernels.sqlite"
    conn = sqlite3.connect(p)
    conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, "
                 "correlationId INT, globalPid INT, shortName INT)")
    conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, ?, 16777216, 1)",
                     [(i * 10, i * 10 + 5, i) for i in range(20000)])
    conn.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    conn.execute("INSERT INTO StringIds VALUES (1, 'k')")
    conn.commit()
    conn.close()
    raw = bytearray(p.read_bytes())
    page = int.from_bytes(raw[16:18], "big")
    rng = random.Random(1)
    lo, hi = 3 * page, len(raw) // 2  # leaf pages of the kernel table, well before the last page
    raw[lo:hi] = bytes(rng.getrandbits(8) for _ in range(hi - lo))
    p.write_bytes(bytes(raw))
    err = _error(p)
    assert "corrupt" in str(err)


def test_nsys_rep_without_nsys(tmp_path, monkeypatch):
    from analyzer.loading import nsys_rep

    monkeypatch.setattr(nsys_rep, "find_nsys", lambda: None)
    p = tmp_path / "run.nsys-rep"
    p.write_bytes(b"\x00" * 64)
    with pytest.raises(UnsupportedFormatError) as info:
        load_trace(p, cache_dir=tmp_path / "cache")
    msg = str(info.value)
    assert "\n" not in msg
    assert f"nsys export --type sqlite -o OUT.sqlite {p}" in msg


def test_nsys_rep_export_asks_for_json_payloads_and_falls_back(tmp_path, monkeypatch):
    """The export asks for NVTX payloads as JSON (NCCL's message sizes); an nsys that does not know
    the option gets the plain export command."""
    from analyzer.loading import nsys_rep

    calls = tmp_path / "calls.txt"
    fake = tmp_path / "nsys"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        'case "$*" in *--include-json*) echo "unrecognised option --include-json" >&2; exit 1;; esac\n'
        'while [ "$1" != "--output" ]; do shift; done; echo data > "$2"\n')
    fake.chmod(0o755)
    monkeypatch.setattr(nsys_rep, "find_nsys", lambda: str(fake))
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"\x00" * 64)
    out = nsys_rep.cached_sqlite_for_report(rep, cache_dir=tmp_path / "cache")
    assert out.read_text() == "data\n"
    first, second = calls.read_text().splitlines()
    assert "--include-json=true" in first and "--include-json" not in second


def test_ncu_report_is_not_a_timeline(tmp_path):
    p = tmp_path / "k.ncu-rep"
    p.write_bytes(b"NVR\x00" + b"\x00" * 60)
    with pytest.raises(UnsupportedFormatError) as info:
        load_trace(p)
    assert "--ncu" in str(info.value)


# ------------------------------------------------------------------------------------------- read-only
def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@needs_public
def test_loading_never_writes(tmp_path):
    """The input's bytes and mtime are unchanged and no -journal/-wal/-shm files appear next to it,
    even in a writable directory."""
    p = tmp_path / "copy.sqlite"
    shutil.copyfile(MEMFUSION_2023, p)
    before = (_digest(p), p.stat().st_mtime_ns, sorted(os.listdir(tmp_path)))
    trace = load_trace(p)
    assert len(trace.kernels) == 36
    after = (_digest(p), p.stat().st_mtime_ns, sorted(os.listdir(tmp_path)))
    assert before == after


@needs_public
def test_read_only_directory(tmp_path):
    """A file on a read-only directory (like the shared public traces) loads: immutable=1 needs no
    lock or journal file."""
    d = tmp_path / "ro"
    d.mkdir()
    p = d / "copy.sqlite"
    shutil.copyfile(MEMFUSION_2023, p)
    p.chmod(0o444)
    d.chmod(0o555)
    try:
        assert len(load_trace(p).kernels) == 36
    finally:
        d.chmod(0o755)


@needs_public
def test_nsys_rep_cache(tmp_path):
    """An .nsys-rep/.qdrep is exported once into the cache and reused; the input is untouched."""
    from analyzer.loading.nsys_rep import find_nsys

    if find_nsys() is None:
        pytest.skip("nsys is not installed")
    rep = tmp_path / "cudf.qdrep"
    shutil.copyfile(PUBLIC / "quasiben__nvtx-examples__cudf.qdrep", rep)
    digest = _digest(rep)
    messages: list[str] = []
    t1 = load_trace(rep, cache_dir=tmp_path / "cache", progress=messages.append)
    exported = list((tmp_path / "cache" / "nsys-export").glob("*.sqlite"))
    assert len(exported) == 1
    mtime = exported[0].stat().st_mtime_ns
    messages.clear()
    t2 = load_trace(rep, cache_dir=tmp_path / "cache", progress=messages.append)
    assert any("cached" in m for m in messages)
    assert exported[0].stat().st_mtime_ns == mtime
    assert len(t1.kernels) == len(t2.kernels) == 268
    assert _digest(rep) == digest
    assert sorted(os.listdir(tmp_path)) == ["cache", "cudf.qdrep"]


def test_wal_database_gets_no_sidecar_files(tmp_path):
    """``mode=ro`` alone would create -wal/-shm next to a WAL-mode database; ``immutable=1`` does not."""
    p = tmp_path / "wal.sqlite"
    conn = sqlite3.connect(p)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    conn.commit()
    conn.close()
    assert sorted(os.listdir(tmp_path)) == ["wal.sqlite"]
    before = (_digest(p), p.stat().st_mtime_ns)
    _error(p)  # no GPU activity
    assert sorted(os.listdir(tmp_path)) == ["wal.sqlite"]
    assert (_digest(p), p.stat().st_mtime_ns) == before


@needs_public
def test_xz_compressed_export(tmp_path):
    import lzma

    p = tmp_path / "memfusion.sqlite.xz"
    p.write_bytes(lzma.compress(MEMFUSION_2023.read_bytes(), preset=0))
    assert detect_format(p) == "xz"
    trace = load_trace(p, cache_dir=tmp_path / "cache")
    assert len(trace.kernels) == 36
    assert trace.info.path == p
    bad = tmp_path / "text.xz"
    bad.write_bytes(lzma.compress(b"hello"))
    with pytest.raises(InputError):
        load_trace(bad, cache_dir=tmp_path / "cache")


def test_export_in_a_container_the_analyzer_does_not_open(tmp_path):
    """A real export gzip'ed, zipped or bzip2'ed (how traces get mailed around) is named as what it is,
    with the command that makes it readable, not called a file without an SQLite export."""
    import bz2
    import gzip
    import zipfile

    from analyzer.testing import real_trace

    export = real_trace("dataloader_starved")
    gz = tmp_path / "dataloader_starved.sqlite.gz"
    gz.write_bytes(gzip.compress(export.read_bytes(), compresslevel=1))
    assert detect_format(gz) == "gzip"
    msg = str(_error(gz))
    assert "a gzip-compressed SQLite file" in msg and "gunzip -k dataloader_starved.sqlite.gz" in msg
    zipped = tmp_path / "traces.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        z.write(export, "dataloader_starved.sqlite")
    msg = str(_error(zipped))
    assert "a ZIP archive, not a trace file" in msg and "unpack it" in msg
    bz = tmp_path / "dataloader_starved.sqlite.bz2"
    bz.write_bytes(bz2.compress(export.read_bytes(), compresslevel=1))
    msg = str(_error(bz))
    assert "a bzip2-compressed file, not a trace file" in msg and "unpack it" in msg


def test_unconverted_nsys_capture(tmp_path):
    """A .qdstrm (nsys's raw capture, left when its conversion failed; the bytes here are a stand-in:
    only the name is read) is named as one, with QdstrmImporter's command."""
    p = tmp_path / "report1.qdstrm"
    p.write_bytes(b"\x00" * 64)
    msg = str(_error(p))
    assert "unconverted Nsight Systems capture (.qdstrm)" in msg and "QdstrmImporter -i report1.qdstrm" in msg


def test_team_nsys_rep(tmp_path):
    """``tests/data/healthy.nsys-rep`` (nsys 2025.3): exported and loaded when the installed nsys can read
    it; otherwise (no nsys, or an older nsys: "Version not supported") one UnsupportedFormatError line
    with the export command to run elsewhere."""
    from analyzer.testing import real_file, real_trace

    rep = real_file("healthy.nsys-rep")
    try:
        trace = load_trace(rep, cache_dir=tmp_path)
    except UnsupportedFormatError as err:
        msg = str(err)
        assert "\n" not in msg and f"nsys export --type sqlite -o OUT.sqlite {rep}" in msg
        return
    reference = load_trace(real_trace("healthy"))
    assert trace.info.source_format == "nsys-rep"
    assert len(trace.kernels) == len(reference.kernels)
    assert list(trace.kernels["nvtx_path"]) == list(reference.kernels["nvtx_path"])


def test_nsys_rep_newer_than_the_installed_nsys(tmp_path, monkeypatch):
    """nsys 2022.4 reading a 2024.6 report fails with "Version number is invalid: 2024@6@2@225..." (issue
    29): the line says which nsys wrote it and which one is installed, and what to run."""
    from analyzer.loading import nsys_rep

    fake = tmp_path / "nsys"
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version 2022.4.2.1-df9881f"; exit 0; fi\n'
        'echo "Importer error status: Importation failed." >&2\n'
        'echo "Version number is invalid: 2024@6@2@225-35f0e7c" >&2\n'
        "exit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(nsys_rep, "find_nsys", lambda: str(fake))
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"\x00" * 64)
    with pytest.raises(UnsupportedFormatError) as info:
        load_trace(rep, cache_dir=tmp_path / "cache")
    msg = str(info.value)
    assert "\n" not in msg
    assert "written by nsys 2024.6.2.225; the installed 2022.4 cannot read it" in msg
    assert "export it with nsys 2024.6 or newer: nsys export --type sqlite" in msg


def test_export_without_gpu_activity_reports_the_host_side_and_wsl2(tmp_path):
    """A capture on WSL2 records the CUDA calls but no GPU activity (issue 29): one line with the host
    side (calls, launches per second, synchronization time) and the reason read from the export's
    kernel string, never "profile with CUDA tracing on". The export is the committed healthy trace with
    its GPU rows removed and the WSL2 kernel string written in (a bad-input test, not evidence)."""
    from analyzer.testing import real_trace

    bad = tmp_path / "wsl2.sqlite"
    shutil.copy(real_trace("healthy"), bad)
    with sqlite3.connect(bad) as db:
        db.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
        db.execute("DELETE FROM CUPTI_ACTIVITY_KIND_MEMSET")
        db.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = '5.15.167.4-microsoft-standard-WSL2' "
                   "WHERE name = 'SoftwareReleaseVersion'")
    err = _error(bad, cache_dir=tmp_path / "cache")
    msg = str(err)
    assert "no GPU activity" in msg and "CUDA tracing on" not in msg
    assert "kernel launch calls" in msg and "synchronizations took" in msg
    assert "WSL2 (5.15.167.4-microsoft-standard-WSL2)" in msg


def test_kineto_without_gpu_activity_names_the_cupti_profiler():
    """HTA's test trace recorded with the CUPTI range profiler: 77 launches, no kernel events. The line
    gives the host side and the reason (cuda_profiler_range events) instead of "profile with CUDA"."""
    path = Path(__file__).resolve().parents[3] / "tests" / "data" / "public" / \
        "hta_cupti_profiler_no_gpu_activity.pt.trace.json.gz"
    msg = str(_error(path))
    assert "77 kernel launch calls" in msg and "CUPTI range profiler" in msg
    assert "ProfilerActivity.CUDA" not in msg
