"""Modules of one concern (issue 31): no module of the analyzer package is over 1,000 lines. A module
that grows past it is split by concern (as reports/viewmodel.py, loading/kineto.py and
loading/nsys_sqlite.py were), not given a higher limit here."""
from __future__ import annotations

from pathlib import Path

import analyzer

MAX_LINES = 1_000


def test_no_analyzer_module_is_over_1000_lines():
    root = Path(analyzer.__file__).parent
    sizes = {str(p.relative_to(root.parent)): len(p.read_text(encoding="utf-8").splitlines())
             for p in root.rglob("*.py")}
    assert len(sizes) > 100  # the whole package was read
    over = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert not over, f"split these by concern: {over}"
