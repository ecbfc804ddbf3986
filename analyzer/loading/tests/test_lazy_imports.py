"""Start-up: loading a trace imports only the readers of its own format (issue 34)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "tests" / "data"

CODE = """
import sys
sys.path.insert(0, {repo!r})
from analyzer.loading import load_trace
from analyzer.pipeline import load_ncu_paths
load_trace({path!r})
assert load_ncu_paths([]) is None
import json
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("analyzer.loading.ncu.", "analyzer.loading.nsys_",
                                                             "analyzer.loading.sqlite_reader")))))
"""


def _imported(path: Path) -> list[str]:
    out = subprocess.run([sys.executable, "-c", CODE.format(repo=str(REPO), path=str(path))],
                         capture_output=True, text=True, check=True, timeout=120)
    names: list[str] = json.loads(out.stdout.strip().splitlines()[-1])
    return names


@pytest.mark.parametrize("trace", ["kineto/occupancy.pt.trace.json.gz", "alloc_churn_fixed.sqlite.xz"])
def test_no_ncu_reader_without_ncu_files(trace: str) -> None:
    loaded = _imported(DATA / trace)
    readers = {f"analyzer.loading.ncu.{m}" for m in ("read", "join", "standalone", "build")}
    assert not readers & set(loaded), loaded


def test_torch_profiler_trace_does_not_import_the_nsys_loader() -> None:
    loaded = _imported(DATA / "kineto" / "occupancy.pt.trace.json.gz")
    assert "analyzer.loading.nsys_sqlite.loader" not in loaded and "analyzer.loading.nsys_rep" not in loaded, loaded
    assert "analyzer.loading.sqlite_reader" not in loaded, loaded  # nor the SQLite reader


def test_the_check_sees_imported_readers() -> None:  # the checks above would see a reader that is imported
    loaded = _imported(DATA / "alloc_churn_fixed.sqlite.xz")
    assert "analyzer.loading.nsys_sqlite.loader" in loaded and "analyzer.loading.sqlite_reader" in loaded, loaded
