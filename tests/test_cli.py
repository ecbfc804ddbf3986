"""The ``analyze`` command's contract, on real traces: formats, outputs, ``--set``, ``--fail-on``,
``--window``, several traces, ncu files recognised by content, exit codes, one-line errors, read-only
inputs and progress on a terminal."""
from __future__ import annotations

import hashlib
import json
import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from analyzer.cli import main
from analyzer.testing import real_trace

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
STARVED = DATA / "dataloader_starved.sqlite.xz"
HEALTHY = DATA / "healthy.sqlite.xz"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


ENV = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def subprocess_run(*args: object, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "analyzer.cli", *map(str, args)],
        capture_output=True, text=True, cwd=cwd, timeout=300, env=ENV, check=False,
    )


def test_html_report_and_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.html"
    code, stdout, _ = run([STARVED, "-o", out], capsys)
    assert code == 0
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>") and "gpu-idle-gaps" in html
    assert "GPU001" in stdout and "gpu-idle-gaps" in stdout and f"report: {out}" in stdout


def test_markdown_to_stdout_and_json_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, stderr = run([STARVED, "--format", "md", "-o", "-"], capsys)
    assert code == 0 and stdout.startswith("# ") and "gpu-idle-gaps" in stdout
    assert len(stdout) < 65_000
    assert "GPU001" in stderr  # the summary moves to stderr when the report takes stdout
    target = tmp_path / "r.json"
    code, _, _ = run([STARVED, "-o", target, "-q"], capsys)  # format from the extension
    doc = json.loads(target.read_text())
    assert code == 0 and doc["schema_version"]
    [trace] = doc["traces"]
    assert {"gpu-idle-gaps", "low-gpu-utilization"} <= {f["rule"] for f in trace["findings"]}


def test_fail_on_gates_on_severity(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.md"
    assert run([STARVED, "-o", out, "-q", "--fail-on", "warning"], capsys)[0] == 1
    assert run([STARVED, "-o", out, "-q", "--fail-on", "error"], capsys)[0] == 0
    assert run([HEALTHY, "-o", out, "-q", "--fail-on", "warning"], capsys)[0] == 0  # only info there
    assert run([HEALTHY, "-o", out, "-q", "--fail-on", "info"], capsys)[0] == 1  # setup-time


def test_set_overrides_a_parameter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    run([STARVED, "-o", out, "-q"], capsys)
    before = {f["rule"] for f in json.loads(out.read_text())["traces"][0]["findings"]}
    # the starved loop's gaps are 16-20 ms: a 30 ms minimum leaves none
    code, _, _ = run([STARVED, "-o", out, "-q", "--set", "gpu-idle-gaps.min_gap=30ms"], capsys)
    after = {f["rule"] for f in json.loads(out.read_text())["traces"][0]["findings"]}
    assert code == 0 and "gpu-idle-gaps" in before and "gpu-idle-gaps" not in after


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--set", "no-such-rule.min_gap=2ms"], "no-such-rule"),
        (["--set", "gpu-idle-gaps.min_gap=fast"], "min_gap"),
        (["--window", "7s:2s"], "window"),
        (["--window", "nothing_matches_*"], "nothing_matches"),
        (["--format", "pdf"], "pdf"),
    ],
    ids=["unknown-rule", "bad-value", "reversed-window", "empty-window", "bad-format"],
)
def test_usage_errors_exit_2_in_one_line(argv: list[str], words: str, tmp_path: Path) -> None:
    proc = subprocess_run(STARVED, "-o", tmp_path / "r.html", *argv)
    assert proc.returncode == 2, proc.stderr
    assert words in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("error: ")


@pytest.mark.parametrize("kind", ["missing", "text", "truncated", "directory"])
def test_bad_input_one_line_exit_2(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.sqlite"
    if kind == "text":
        path.write_text("hello, not a database\n")
    elif kind == "truncated":
        src = real_trace("healthy").read_bytes()
        path.write_bytes(src[: len(src) // 2])
    elif kind == "directory":
        path.mkdir()
    proc = subprocess_run(path, "-o", tmp_path / "r.html")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in proc.stderr
    assert not (tmp_path / "r.html").exists()


def test_hostile_rule_file_is_refused_before_the_trace_is_read(tmp_path: Path) -> None:
    rules = tmp_path / "evil.yaml"
    rules.write_text('version: 1\nrules:\n  - !!python/object/apply:os.system ["touch pwned"]\n')
    proc = subprocess_run(tmp_path / "does-not-exist.sqlite", "--rules", rules, cwd=tmp_path)
    assert proc.returncode == 2 and "evil.yaml" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "pwned").exists()


def test_input_is_never_modified(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "healthy.sqlite"
    shutil.copy(real_trace("healthy"), trace)
    os.utime(trace, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    digest, stat = hashlib.sha256(trace.read_bytes()).hexdigest(), trace.stat()
    assert run([trace, "-o", tmp_path / "r.html", "-q"], capsys)[0] == 0
    assert hashlib.sha256(trace.read_bytes()).hexdigest() == digest
    assert trace.stat().st_mtime_ns == stat.st_mtime_ns
    assert sorted(p.name for p in tmp_path.iterdir()) == ["healthy.sqlite", "r.html"]


def test_several_traces_give_one_report_with_a_comparison(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "both.json"
    fixed = DATA / "dataloader_starved_fixed.sqlite.xz"
    code, stdout, _ = run([STARVED, fixed, "-o", out], capsys)
    doc = json.loads(out.read_text())
    assert code == 0 and len(doc["traces"]) == 2 and doc.get("comparison")
    assert "dataloader_starved_fixed" in stdout


def test_ncu_files_among_traces_are_recognised_by_content(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ncu = tmp_path / "metrics.txt"  # no telling extension: recognised by its header
    shutil.copy(DATA / "ncu" / "naive_attention.raw.csv", ncu)
    out = tmp_path / "r.json"
    code, _, _ = run([DATA / "naive_attention.sqlite.xz", ncu, "-o", out, "-q"], capsys)
    rules = {f["rule"] for f in json.loads(out.read_text())["traces"][0]["findings"]}
    assert code == 0 and "memory-bound-softmax-measured" in rules


def test_progress_is_shown_on_a_terminal_only(tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(
            # --no-cache: the loader's own progress (a cached trace is read in one step)
            [sys.executable, "-m", "analyzer.cli", HEALTHY, "-o", tmp_path / "r.html", "--no-cache"],
            stdout=subprocess.PIPE, stderr=follower, cwd=REPO, timeout=300, env=ENV, check=False,
        )
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(leader)
    assert proc.returncode == 0
    assert b"reading kernels" in b"".join(chunks)
    piped = subprocess_run(HEALTHY, "-o", tmp_path / "r.html")
    assert piped.returncode == 0 and "reading" not in piped.stderr


def test_progress_lines_print_file_and_range_names_inert(capsys: pytest.CaptureFixture[str]) -> None:
    """A progress line quotes file names ("reading x.sqlite"), which may hold ESC sequences: only the
    line's own clear-and-rewrite sequence reaches the terminal."""
    from analyzer.progress import progress_printer

    show = progress_printer(True)
    assert show is not None
    show("reading k\x1b]0;PWNED\x07\x1b[2J.sqlite\nnext")
    err = capsys.readouterr().err
    assert err.startswith("\r\x1b[2K") and err.count("\x1b") == 1 and "\x07" not in err and "\n" not in err
    assert "PWNED" in err


def test_names_from_folders_and_rule_packs_reach_the_terminal_inert(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Two more ways text that is not ours reached the terminal raw: the note naming the JSON files a
    folder scan passed over (file names, ESC ]0;...BEL sets the window title, ESC ]52 writes the
    clipboard) and ``analyze rules list|explain`` on a pack whose double-quoted title holds ``\\e``.
    Now as U+FFFD (rules) or spaces (the one-line note); the text itself stays readable."""
    import gzip

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "rank0.pt.trace.json").write_bytes(gzip.decompress((DATA / "kineto" / "healthy.pt.trace.json.gz").read_bytes()))
    (folder / "x\x1b]0;PWNED\x07\x1b[2J.json").write_text('{"not": "a trace"}')
    rc = main([str(folder), "-o", str(tmp_path / "r.md")])
    err = capsys.readouterr().err
    assert rc == 0 and "passed over 1 JSON file" in err and "PWNED" in err, err
    assert "\x1b" not in err and "\x07" not in err
    pack = tmp_path / "pack.yaml"
    pack.write_text('version: 1\nextends: default\nrules:\n  - id: USR001\n    name: ctl-rule\n'
                    '    title: "evil\\e]0;PWNED\\a\\e[2J title"\n    what: "w\\e[31m"\n    why: "y"\n    fix: "f"\n'
                    '    severity: info\n    category: kernel\n    source: top_kernels\n    where: count > 0\n'
                    '    condition: count() > 0\n    message: "m"\n')
    for argv in (["rules", "list", "--rules", str(pack)], ["rules", "explain", "USR001", "--rules", str(pack)]):
        rc = main(argv)
        out = capsys.readouterr()
        assert rc == 0 and "PWNED" in out.out, out
        assert "\x1b" not in out.out + out.err and "\x07" not in out.out + out.err, argv


def test_the_command_ends_fast_with_everything_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m analyzer.cli`` (and the console script) end with ``os._exit`` after :func:`main`:
    the exit code, every byte of a report on stdout and the exit handlers are kept."""
    proc = subprocess_run(STARVED, "--format", "md", "-o", "-", "--fail-on", "info")
    code, stdout, _ = run([STARVED, "--format", "md", "-o", "-", "--fail-on", "info"], capsys)
    assert proc.returncode == code == 1
    generated = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d(:\d\d)?")  # the report's creation time
    assert generated.sub("T", proc.stdout) == generated.sub("T", stdout) and len(stdout) > 1000
    marker = tmp_path / "exit-handler-ran"
    script = ("import atexit, pathlib, sys\n"
              f"atexit.register(pathlib.Path({str(marker)!r}).write_text, 'yes')\n"
              "from analyzer.cli import run\n"
              f"sys.argv = ['analyze', {str(HEALTHY)!r}, '-q', '-o', {str(tmp_path / 'r.json')!r}]\n"
              "run()\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=300,
                          env=ENV, check=False)
    assert proc.returncode == 0, proc.stderr
    assert marker.read_text() == "yes" and json.loads((tmp_path / "r.json").read_text())["traces"]
