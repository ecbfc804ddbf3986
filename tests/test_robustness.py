"""Outputs are atomic, inputs never change, runaway stages are named (issue 17; docs/robustness.md).

- a report replaces the old one whole or not at all: a full disk (a real 64 KiB tmpfs where this
  machine lets us mount one, else a write that raises ENOSPC), Ctrl-C mid-write and a read-only folder
  each leave the old report byte-identical and no temporary file behind, with one error line;
- every reader leaves every committed trace and export byte-identical, creates nothing beside it,
  and works from a read-only mount;
- ``--timeout`` ends an analysis with one line naming the stage it was in.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from analyzer.cli import main
from analyzer.testing import DATA_DIR, PUBLIC_DIR, real_trace

TRACE = "alloc_churn_fixed"


def _run(capsys, *argv: str) -> tuple[int, str]:
    rc = main([*argv])
    err = capsys.readouterr().err
    return rc, err


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@contextlib.contextmanager
def _tmpfs(path: Path, size: str):
    """A small tmpfs at ``path`` (skips where mounting is not allowed)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _remount_ro(path: Path) -> None:
    done = subprocess.run(["mount", "-o", "remount,ro", str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot remount read-only: {done.stderr.strip()}")


# ---------------------------------------------------------------------------------------------- outputs
def test_enospc_mid_write_keeps_the_old_report(tmp_path, capsys, monkeypatch):
    out = tmp_path / "report.html"
    out.write_text("OLD REPORT")
    import analyzer.fileio as fileio

    def full(_fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fileio.os, "fsync", full)
    rc, err = _run(capsys, str(real_trace(TRACE)), "-o", str(out), "-q")
    line = _one_error_line(err)
    assert rc == 2
    assert str(out) in line and "No space left on device" in line and "previous file is unchanged" in line
    assert out.read_text() == "OLD REPORT"
    assert _leftovers(tmp_path) == []


def test_ctrl_c_mid_write_keeps_the_old_report(tmp_path, capsys, monkeypatch):
    out = tmp_path / "report.md"
    out.write_text("OLD")
    import analyzer.fileio as fileio

    def interrupted(_fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(fileio.os, "fsync", interrupted)
    rc, err = _run(capsys, str(real_trace(TRACE)), "-o", str(out), "-q")
    assert rc == 130 and _one_error_line(err) == "error: interrupted"
    assert out.read_text() == "OLD"
    assert _leftovers(tmp_path) == []


def test_real_full_disk(tmp_path, capsys):
    """A 64 KiB file system cannot hold the ~130 KB HTML report: the write fails with ENOSPC."""
    with _tmpfs(tmp_path / "small", "64k") as disk:
        old = disk / "report.html"
        old.write_text("OLD REPORT")
        rc, err = _run(capsys, str(real_trace(TRACE)), "-o", str(old), "-q")
        line = _one_error_line(err)
        assert rc == 2 and "No space left on device" in line
        assert old.read_text() == "OLD REPORT"
        assert sorted(p.name for p in disk.iterdir()) == ["report.html"]


def test_read_only_output_folder(tmp_path, capsys):
    with _tmpfs(tmp_path / "ro", "1m") as disk:
        (disk / "report.json").write_text("{}")
        _remount_ro(disk)
        rc, err = _run(capsys, str(real_trace(TRACE)), "-o", str(disk / "report.json"), "-q")
        line = _one_error_line(err)
        assert rc == 2 and "read-only" in line.lower()
        assert (disk / "report.json").read_text() == "{}"


def test_new_report_gets_ordinary_permissions(tmp_path, capsys):
    out = tmp_path / "r.json"
    old_mask = os.umask(0o022)
    try:
        rc, _ = _run(capsys, str(real_trace(TRACE)), "-o", str(out), "-q")
    finally:
        os.umask(old_mask)
    assert rc == 0 and (out.stat().st_mode & 0o777) == 0o644


def _special_targets(tmp_path: Path) -> list[tuple[Path, str]]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    folder = tmp_path / "folder"
    folder.mkdir()
    out = [(fifo, "FIFO"), (folder, "directory")]
    if os.geteuid() == 0:  # a private copy of /dev/null's device node: never the machine's own
        dev = tmp_path / "devnull"
        os.mknod(dev, 0o666 | __import__("stat").S_IFCHR, os.makedev(1, 3))
        out.append((dev, "character device"))
    link = tmp_path / "link-to-fifo"
    link.symlink_to(fifo)
    out.append((link, "FIFO"))
    return out


def test_output_onto_a_device_fifo_or_directory_is_refused(tmp_path, capsys):
    """``-o`` writes regular files only: a device node (as root, renaming over it would replace it), a
    FIFO, a directory, or a link to one of them is refused with one line, exit 2, left as it was."""
    import stat

    for target, kind in _special_targets(tmp_path):
        before = os.lstat(target)
        rc, err = _run(capsys, str(real_trace(TRACE)), "-o", str(target), "--format", "md", "-q")
        line = _one_error_line(err)
        assert rc == 2 and kind in line and "not a regular file" in line, line
        after = os.lstat(target)
        assert (after.st_ino, stat.S_IFMT(after.st_mode), after.st_rdev) == (
            before.st_ino, stat.S_IFMT(before.st_mode), before.st_rdev)
        assert _leftovers(tmp_path) == []


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="no /proc: a folder no one can create files in")
def test_output_where_no_file_can_be_made_is_refused_before_the_analysis(tmp_path, capsys, monkeypatch):
    """``-o`` into a folder where no file can be created (here under /proc, refused even to root) fails
    in a second with one line, not after the whole analysis; the probe leaves nothing behind."""
    import analyzer.api

    ran: list[str] = []

    def analysis(*_args, **_kwargs):
        ran.append("analysis")
        raise SystemExit(3)

    monkeypatch.setattr(analyzer.api, "run", analysis)
    for target in (Path("/proc/analyzer-no-such-folder/r.md"), Path("/proc/r.md")):
        rc, err = _run(capsys, str(real_trace(TRACE)), "-o", str(target), "-q")
        line = _one_error_line(err)
        assert rc == 2 and line.startswith(f"error: {target}: cannot write the file"), line
    assert ran == []
    ok = tmp_path / "new" / "r.md"  # a folder that will be made: the probe writes in the one that exists
    rc, _ = _run(capsys, str(real_trace(TRACE)), "-o", str(ok), "-q")
    assert (rc, ran) == (3, ["analysis"]) and list(tmp_path.iterdir()) == []


def test_output_through_a_symlink_writes_the_file_it_leads_to(tmp_path, capsys):
    real = tmp_path / "reports" / "r.md"
    real.parent.mkdir()
    real.write_text("OLD")
    link = tmp_path / "latest.md"
    link.symlink_to(real)
    rc, _ = _run(capsys, str(real_trace(TRACE)), "-o", str(link), "-q")
    assert rc in (0, 1)
    assert link.is_symlink() and real.read_text().startswith("#")
    assert _leftovers(tmp_path) == [] and _leftovers(real.parent) == []


def test_atomic_write_replaces_whole(tmp_path):
    from analyzer.fileio import atomic_write

    target = tmp_path / "x.txt"
    target.write_text("old")
    target.chmod(0o600)
    atomic_write(target, "new" * 1000)
    assert target.read_text() == "new" * 1000 and (target.stat().st_mode & 0o777) == 0o600
    assert _leftovers(tmp_path) == []


# ----------------------------------------------------------------------------------------------- inputs
def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _committed_inputs() -> list[Path]:
    files = sorted(DATA_DIR.glob("*.sqlite.xz")) + sorted(DATA_DIR.glob("*.nsys-rep"))
    files += sorted((DATA_DIR / "ncu").glob("*.csv"))
    if PUBLIC_DIR.is_dir():
        files += sorted(p for p in PUBLIC_DIR.iterdir() if p.suffix in (".sqlite", ".qdrep", ".csv", ".ncu-rep"))
    return files


def _read_with_every_reader(path: Path) -> None:
    from analyzer.errors import AnalyzerError
    from analyzer.loading import detect_format, load_trace
    from analyzer.loading.ncu import detect_ncu, load_ncu

    detect_format(path)
    if detect_ncu(path) is not None:
        with contextlib.suppress(AnalyzerError):  # a .ncu-rep without the ncu extra is a clean error
            load_ncu(path)
    else:
        with contextlib.suppress(AnalyzerError):  # a .nsys-rep without nsys is a clean error
            load_trace(path)


@pytest.mark.slow
def test_readers_never_change_an_input():
    """Every committed trace and export (and the public ones): same bytes, same mtime, same folder
    listing after every reader has read it."""
    inputs = _committed_inputs()
    assert len(inputs) >= 40
    for path in inputs:
        folder = sorted(os.listdir(path.parent))
        before = (_digest(path), path.stat().st_mtime_ns)
        _read_with_every_reader(path)
        assert (_digest(path), path.stat().st_mtime_ns) == before, path
        assert sorted(os.listdir(path.parent)) == folder, path


def test_analyze_from_a_read_only_mount(tmp_path, capsys):
    """A trace and an ncu export on a read-only file system (as root, so permissions alone prove
    nothing) analyze normally; nothing is written beside them."""
    with _tmpfs(tmp_path / "media", "16m") as disk:
        trace = disk / "trace.sqlite"
        shutil.copyfile(real_trace("tiny_kernels"), trace)
        ncu = disk / "tiny_kernels.raw.csv"
        shutil.copyfile(DATA_DIR / "ncu" / "tiny_kernels.raw.csv", ncu)
        _remount_ro(disk)
        before = {p.name: _digest(p) for p in disk.iterdir()}
        rc, err = _run(capsys, str(trace), "--ncu", str(ncu), "-o", str(tmp_path / "r.json"), "-q")
        assert rc == 0, err
        assert {p.name: _digest(p) for p in disk.iterdir()} == before


def test_xz_cache_on_a_read_only_home(tmp_path, capsys, monkeypatch):
    """An unwritable cache folder (read-only home) falls back to a private temporary folder."""
    with _tmpfs(tmp_path / "home", "1m") as home:
        _remount_ro(home)
        monkeypatch.setenv("ANALYZER_CACHE_DIR", str(home / ".cache" / "gpu-trace-analyzer"))
        rc, err = _run(capsys, str(DATA_DIR / f"{TRACE}.sqlite.xz"), "-o", str(tmp_path / "r.json"), "-q")
        assert rc == 0, err


def test_xz_cache_full_disk(tmp_path, capsys, monkeypatch):
    with _tmpfs(tmp_path / "cache", "64k") as cache:
        monkeypatch.setenv("ANALYZER_CACHE_DIR", str(cache))
        # --no-cache: a trace cache entry of this file (another test's run) would skip the decompression
        rc, err = _run(capsys, str(DATA_DIR / f"{TRACE}.sqlite.xz"), "-o", str(tmp_path / "r.json"), "-q",
                       "--no-cache")
        line = _one_error_line(err)
        assert rc == 2 and "No space left on device" in line and f"{TRACE}.sqlite.xz" in line
        leftovers = [p for p in cache.rglob("*") if p.is_file()]
        assert leftovers == []


# --------------------------------------------------------------------------------------------- watchdog
def test_timeout_names_the_stage(tmp_path, capsys):
    rc, err = _run(capsys, str(real_trace(TRACE)), "--timeout", "0.001", "-o", str(tmp_path / "r.json"), "-q")
    line = _one_error_line(err)
    assert rc == 2
    assert "analysis ran past 0.001 s in stage '" in line and TRACE in line
    assert not (tmp_path / "r.json").exists()


def test_watchdog_interrupts_a_python_loop():
    import time

    from analyzer.errors import StageTimeoutError
    from analyzer.watchdog import Watchdog, stage

    started = time.monotonic()
    with pytest.raises(StageTimeoutError, match=r"ran past 0.2 s in stage 'outer > spin'"):
        with Watchdog(0.2, "x.sqlite"), stage("outer"), stage("spin"):
            while time.monotonic() - started < 30:
                pass
    assert time.monotonic() - started < 10


def test_watchdog_off_by_default():
    from analyzer.watchdog import Watchdog

    with Watchdog(None, "x") as dog:
        pass
    assert dog.fired_in is None


def test_watchdog_interrupts_even_where_sigint_is_ignored():
    """pytest-xdist workers and some launchers ignore SIGINT: interrupt_main() alone would do nothing
    there and the grace period would end the process."""
    import signal
    import time

    from analyzer.errors import StageTimeoutError
    from analyzer.watchdog import Watchdog

    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        started = time.monotonic()
        with pytest.raises(StageTimeoutError):
            with Watchdog(0.2, "x.sqlite"):
                while time.monotonic() - started < 30:
                    pass
        assert time.monotonic() - started < 10
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # restored
    finally:
        signal.signal(signal.SIGINT, old)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_output_onto_an_input_is_refused_and_the_input_kept(tmp_path, capsys, monkeypatch):
    """A report path that is one of the run's inputs (the trace itself, by another spelling, through a
    symbolic or hard link, a trace in a folder given, a rule pack; ``--write-accepted`` onto the trace;
    ``diff -o`` onto a side; ``sweep -o`` onto a trace) is refused before anything is read: one line,
    exit 2, the input byte for byte as it was. Before, ``analyze t.json --format json -o t.json`` replaced
    the torch.profiler trace with its own report."""
    import gzip

    import analyzer.api

    def analysis(*_args, **_kwargs):
        raise AssertionError("the analysis ran")

    monkeypatch.setattr(analyzer.api, "run", analysis)
    trace = tmp_path / "run.json"  # a real torch.profiler trace, uncompressed: a .json name like a report's
    trace.write_bytes(gzip.decompress((DATA_DIR / "kineto" / "healthy.pt.trace.json.gz").read_bytes()))
    folder = tmp_path / "ranks"
    folder.mkdir()
    ranked = folder / "rank0.json"
    shutil.copyfile(trace, ranked)
    (tmp_path / "link.json").symlink_to(trace)
    os.link(trace, tmp_path / "hard.json")
    rules = tmp_path / "pack.md"
    rules.write_text("version: 1\nextends: default\n")
    digests = {p: _digest(p) for p in (trace, ranked, rules)}
    monkeypatch.chdir(tmp_path)
    cases = [
        (str(trace), "-o", str(trace)),
        (str(trace), "-o", "./run.json"),
        ("./run.json", "-o", "../" + tmp_path.name + "/run.json"),
        (str(trace), "-o", str(tmp_path / "link.json")),
        (str(trace), "-o", str(tmp_path / "hard.json")),
        (str(folder), "-o", str(ranked)),
        (str(trace), "--rules", str(rules), "-o", str(rules)),
        (str(trace), "-o", "-", "--write-accepted", str(trace)),
        ("diff", str(trace), str(ranked), "-o", str(ranked)),
        ("diff", str(trace), str(folder), "-o", str(ranked)),
        ("sweep", str(folder), "--format", "json", "-o", str(ranked)),
    ]
    for argv in cases:
        rc, err = _run(capsys, *argv)
        line = _one_error_line(err)
        assert rc == 2 and "is an input of this run" in line and "nothing was written" in line, (argv, line)
        assert {p: _digest(p) for p in digests} == digests, argv
    assert _leftovers(tmp_path) == [] and _leftovers(folder) == []
