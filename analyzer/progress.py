"""Progress messages of a long analysis: a callback taking one line (None: silent)."""
from __future__ import annotations

import sys
from collections.abc import Callable

from analyzer.errors import one_line

Progress = Callable[[str], None] | None


def progress_printer(enabled: bool) -> Progress:
    """A callback that rewrites one status line on stderr (a terminal's), or None when not ``enabled``."""
    if not enabled:
        return None

    def show(message: str) -> None:
        sys.stderr.write(f"\r\x1b[2K{one_line(message, 400)}")  # file and range names: printable only
        sys.stderr.flush()

    return show
