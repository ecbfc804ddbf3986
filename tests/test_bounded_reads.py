"""Bounded reads (issue 33; analyzer/boundedio.py, docs/robustness.md "Bounds"): decompression bombs stop
at a cap with one line and bounded memory; rule packs, ``extends:``, configurations and accepted files
are read from regular files only, with the size counted while reading.

The bombs and special files here are built by the tests (bad input, never evidence that a rule works).
"""
from __future__ import annotations

import gzip
import lzma
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analyzer.cli import main
from analyzer.testing import real_trace

REPO = Path(__file__).resolve().parents[1]


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def _gzip_bomb(path: Path, compressed_mb: int) -> Path:
    """A ``.json.gz`` that starts like a torch.profiler trace and expands ~1000x (gzip members of
    spaces, concatenated: one valid gzip stream to every reader)."""
    member = gzip.compress(b" " * (16 << 20), compresslevel=9)
    with open(path, "wb") as fh:
        fh.write(gzip.compress(b'{"schemaVersion": 1, "traceEvents": ['))
        written = 0
        while written < compressed_mb << 20:
            fh.write(member)
            written += len(member)
    return path


def test_gzip_bomb_stops_with_one_line_under_1gb(tmp_path):
    """A 16 MB .json.gz expanding to 16 GB (before: past 12 GB of memory, twice the expanded size)."""
    bomb = _gzip_bomb(tmp_path / "bomb.pt.trace.json.gz", 16)
    # the child's own peak: VmHWM belongs to its address space, which execve makes new, while Linux carries
    # getrusage's ru_maxrss over execve from the forking process (a 2.7 GiB pytest worker read as the bomb's)
    code = ("import sys\n"
            "from analyzer.cli import main\n"
            "rc = main([sys.argv[1], '-q', '--no-cache', '-o', sys.argv[2]])\n"
            "hwm = next(l for l in open('/proc/self/status') if l.startswith('VmHWM:')).split()[1]\n"
            "print(rc, hwm)\n")
    done = subprocess.run([sys.executable, "-c", code, str(bomb), str(tmp_path / "r.md")], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    rc, peak_kib = map(int, done.stdout.split())
    line = _one_error_line(done.stderr)
    assert rc == 2 and "when decompressed" in line and "ANALYZER_MAX_INPUT" in line, line
    assert peak_kib < 2**20, f"peak {peak_kib / 2**20:.2f} GiB"
    assert not (tmp_path / "r.md").exists()


def test_max_input_caps_and_raises_the_limit(tmp_path, capsys, monkeypatch):
    """ANALYZER_MAX_INPUT replaces the default cap: a real trace over it is refused with one line, the
    same trace under it is read; a .sqlite.xz over it is refused before the decompressed copy fills the
    disk, and no partial copy stays in the cache."""
    src = real_trace("healthy").read_bytes()
    trace = tmp_path / "healthy.sqlite.xz"
    trace.write_bytes(lzma.compress(src, preset=0))
    monkeypatch.setenv("ANALYZER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("ANALYZER_MAX_INPUT", str(len(src) - 1))
    rc = main([str(trace), "-q", "--no-cache", "-o", str(tmp_path / "r.md")])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and "expands to more than" in line
    leftovers = [p for p in tmp_path.rglob("*") if p.is_file() and p.stat().st_size >= len(src) // 2
                 and p != trace]
    assert leftovers == []
    monkeypatch.setenv("ANALYZER_MAX_INPUT", str(len(src)))
    assert main([str(trace), "-q", "--no-cache", "-o", str(tmp_path / "r.md")]) in (0, 1)
    monkeypatch.setenv("ANALYZER_MAX_INPUT", "lots")
    trace.write_bytes(lzma.compress(src, preset=1))  # not decompressed before (that copy is cached)
    assert main([str(trace), "-q", "--no-cache", "-o", str(tmp_path / "r.md")]) == 2
    assert "is not a size" in _one_error_line(capsys.readouterr().err)


def _fifo(tmp_path: Path) -> Path:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    return fifo


@pytest.mark.parametrize("special", ["/dev/zero", "/proc/self/environ", "fifo"])
@pytest.mark.parametrize("option", ["--rules", "--accepted", "--config", "extends"])
def test_small_inputs_are_regular_files_only(option, special, tmp_path, capsys):
    """``/dev/zero`` reached 6 GB in seconds (the size check trusted st_size), a FIFO in ``extends:``
    hung, ``/proc/self/environ`` was an internal error: each is now one line, exit 2, at once."""
    target = str(_fifo(tmp_path)) if special == "fifo" else special
    argv = [str(real_trace("healthy")), "-q", "--no-cache", "-o", str(tmp_path / "r.md")]
    if option == "extends":
        pack = tmp_path / "pack.yaml"
        pack.write_text(f'version: 1\nextends: ["{target}"]\n')
        argv += ["--rules", str(pack)]
    else:
        argv += [option, target]
    rc = main(argv)
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and "not a regular file" in line, line


def test_size_is_counted_while_reading(tmp_path, capsys):
    """A rule pack over 1 MiB is refused by what is read, not by what st_size says."""
    from analyzer import boundedio

    big = tmp_path / "big.yaml"
    big.write_text("version: 1\n# " + "x" * (2 << 20) + "\n")
    with pytest.raises(boundedio.BoundedReadError, match="limit"):
        boundedio.read_regular(big, 1 << 20)
    rc = main([str(real_trace("healthy")), "-q", "--rules", str(big), "-o", str(tmp_path / "r.md")])
    assert rc == 2 and "limit" in _one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize("option", ["trace", "--ncu", "--power"])
def test_a_fifo_or_device_as_an_input_is_refused_at_once(option, tmp_path, capsys):
    """A FIFO given as the trace (or an ncu file) blocked the first read forever; /dev/zero as the trace
    is refused as a device, not read."""
    fifo = _fifo(tmp_path)
    if option == "trace":
        argv = [str(fifo)]
    else:
        argv = [str(real_trace("healthy")), option, str(fifo)]
    rc = main([*argv, "-q", "--no-cache", "-o", str(tmp_path / "r.md")])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and str(fifo) in line, line
    if option == "trace":
        assert "FIFO" in line
        assert main(["/dev/zero", "-q", "-o", str(tmp_path / "r.md")]) == 2
        assert "is a device, not a trace file" in _one_error_line(capsys.readouterr().err)
