"""How much memory this process holds, when helper threads stop adding to it, and handing freed heap
memory back to the system (:func:`release_free_memory`, between loading stages and after facts).

Facts and rules run on a second thread (and a third computes facts ahead) where the machine has the
cores: on a 1 M-kernel trace that is 30% faster. But every thread holds the fact it is computing, so at
10 M kernels the helpers raised the peak by ~1 GB (7.8 GB against 6.7 GB on one thread, within the 8 GB
target, barely). Above a memory limit the helpers therefore stop taking new work and the main thread
finishes alone: small traces keep the speed, big ones stay within memory.

``ANALYZER_HELPER_MEMORY`` sets the limit (``5GB``, ``6GiB``; ``0`` or ``off``: no limit); the default is
:data:`DEFAULT_LIMIT` or 40% of the machine's memory, whichever is less.
"""
from __future__ import annotations

import os
import sys
from typing import Any

from analyzer.boundedio import parse_size

#: resident memory above which helper threads stop taking new facts and rules (default)
DEFAULT_LIMIT = 5 * 1024**3


_limit: int | None | bool = False  # False: not read yet


def rss_bytes() -> int | None:
    """This process's resident memory now (Linux ``/proc/self/statm``), or None where unknown."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def helper_limit() -> int | None:
    """The resident-memory limit for helper threads in bytes (None: no limit); read once."""
    global _limit
    if _limit is False:
        _limit = _read_limit()
    return _limit if isinstance(_limit, int) and not isinstance(_limit, bool) else None


def _read_limit() -> int | None:
    raw = os.environ.get("ANALYZER_HELPER_MEMORY", "").strip().lower()
    if raw in ("0", "off", "none", "no"):
        return None
    if raw:

        try:
            return parse_size(raw) or None
        except ValueError:
            pass  # a bad value: the default
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return DEFAULT_LIMIT
    return min(DEFAULT_LIMIT, int(physical * 0.4))


def helpers_may_go_on() -> bool:
    """Whether a helper thread may take another fact or rule: this process holds less than the limit."""
    limit = helper_limit()
    if limit is None:
        return True
    rss = rss_bytes()
    return rss is None or rss < limit


_libc: Any = None  # glibc, loaded on the first call (False: absent)


def release_free_memory() -> None:
    """Hand freed heap memory back to the OS between loading stages.

    The loader's temporaries are 10-30 MB arrays; glibc serves those from its heap after the first big
    ``free`` raises its mmap threshold, and keeps them after they are freed, so peak RSS would grow with
    every stage. ``malloc_trim(0)`` returns those pages (and Arrow's pool its cache) at a cost of a few
    milliseconds. A no-op where glibc is absent."""
    global _libc
    try:
        import pyarrow as pa
    except ImportError:
        pa = None
    if pa is not None and hasattr(pa.default_memory_pool(), "release_unused"):
        pa.default_memory_pool().release_unused()
    if _libc is None:
        try:
            import ctypes

            _libc = ctypes.CDLL("libc.so.6")
            _libc.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _libc = False
    if _libc:
        _libc.malloc_trim(0)


#: where Linux says how it serves a page fault in memory advised for transparent huge pages
THP_DEFRAG = "/sys/kernel/mm/transparent_hugepage/defrag"
#: the modes in which such a fault compacts memory synchronously when no huge page is free
SYNC_COMPACTION = frozenset({"always", "madvise", "defer+madvise"})


def avoid_hugepage_stalls(defrag_file: str = THP_DEFRAG) -> bool:
    """Stop numpy advising huge pages (``MADV_HUGEPAGE``) for its arrays of 4 MiB and more where the
    kernel would then compact memory synchronously on a page fault (defrag ``always``, ``madvise`` or
    ``defer+madvise``: the usual default), and return whether it did. The analysis allocates and frees
    arrays of millions of rows all the time; measured on a 1 M-kernel trace with defrag ``madvise``, those
    faults cost 0.8 s of kernel time of a 2.3 s load (20 fresh 40 MB arrays: 3.6 s with the advice, 0.9 s
    without), see numpy issue 31590. The command calls this for its own process; an explicit
    ``NUMPY_MADVISE_HUGEPAGE`` is left as the user set it, and a library caller's numpy is not touched.
    Before numpy is imported this sets ``NUMPY_MADVISE_HUGEPAGE=0``, which numpy reads when it is imported
    (so that ``analyze --help`` imports no numpy; processes the command starts inherit the setting)."""
    if "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        return False
    try:
        with open(defrag_file, encoding="ascii") as fh:
            text = fh.read(256)
    except (OSError, ValueError):
        return False
    chosen = [word[1:-1] for word in text.split() if word.startswith("[") and word.endswith("]")]
    if len(chosen) != 1 or chosen[0] not in SYNC_COMPACTION:
        return False
    if "numpy" not in sys.modules:
        os.environ["NUMPY_MADVISE_HUGEPAGE"] = "0"
        return True
    import importlib

    for name in ("numpy._core.multiarray", "numpy.core.multiarray"):  # numpy 2, numpy 1.x
        try:
            setter = getattr(importlib.import_module(name), "_set_madvise_hugepage", None)
        except ImportError:
            continue
        if setter is not None:
            setter(False)
            return True
    return False
