"""The ``--write`` / ``--check`` ending the benchmarks that generate a document share (breakdown
calibration, the HTA and TraceLens cross-checks): one implementation."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_or_check(doc: Path, text: str, *, write: bool, check: bool, script: str) -> int:
    """Write ``text`` to ``doc`` when ``write``; with ``check``, 1 (and a line on stderr saying which
    command rewrites it) when ``doc`` is missing or differs from ``text``, else 0. ``script``: the
    generating script's path from the repository root."""
    if write:
        doc.write_text(text)
    if check and (not doc.is_file() or doc.read_text() != text):
        print(f"{doc.relative_to(ROOT)} is out of date: run python {script} --write", file=sys.stderr)
        return 1
    return 0


def doc_main(argv: list[str] | None, *, description: str, doc: Path, script: str,
             make_text: Callable[[], str]) -> int:
    """The command line of a script whose only output is ``doc``: print ``make_text()``, and with
    ``--write`` / ``--check`` as :func:`write_or_check`."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--write", action="store_true", help=f"write {doc.relative_to(ROOT)}")
    ap.add_argument("--check", action="store_true", help=f"exit 1 when {doc.relative_to(ROOT)} is not current")
    args = ap.parse_args(argv)
    text = make_text()
    print(text, end="")
    return write_or_check(doc, text, write=args.write, check=args.check, script=script)
