"""Which ncu export a file is (raw CSV, details CSV, .ncu-rep), from its first bytes."""
from __future__ import annotations

import csv
import re
import stat
from pathlib import Path

from analyzer.loading.ncu.model import NCU_DETAILS_CSV, NCU_RAW_CSV, NCU_REP, NCU_REP_MAGIC


# --------------------------------------------------------------------------------------------------
# Detection
# --------------------------------------------------------------------------------------------------

HEADER_RE = re.compile(r'^\s*"?ID"?\s*,\s*"?Process ID"?\s*,')
NOISE_PREFIXES = ("==PROF==", "==WARNING==", "==ERROR==", "==INFO==", "==DEBUG==")
_SNIFF_BYTES = 1 << 20


def split_header(line: str) -> list[str]:
    return [c.strip() for c in next(csv.reader([line]))]


def detect_ncu(path: str | Path) -> str | None:
    """``"ncu-raw-csv" | "ncu-details-csv" | "ncu-rep"`` by content, or None when ``path`` is not an ncu
    export (or cannot be read). CSVs are recognised by their header (``"ID","Process ID",...``) anywhere in
    the first MiB (console noise may precede it); raw vs details by whether ``Metric Name`` exists."""
    p = Path(path)
    try:
        if not stat.S_ISREG(p.stat().st_mode):  # a FIFO would block this read forever
            return None
        with p.open("rb") as fh:
            head = fh.read(_SNIFF_BYTES)
    except OSError:
        return None
    if head.startswith(NCU_REP_MAGIC):
        return NCU_REP
    if b"\x00" in head[:4096]:
        return None
    text = head.decode("utf-8", errors="replace")
    for line in text.splitlines():
        if HEADER_RE.match(line):
            cols = split_header(line)
            if "Kernel Name" not in cols:
                return None
            return NCU_DETAILS_CSV if "Metric Name" in cols else NCU_RAW_CSV
    return None


