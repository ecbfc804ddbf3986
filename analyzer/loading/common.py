"""Helpers every loader shares: contract frames from arrays, API-name normalization and the
per-compute-capability GPU limits that exports leave out.

Each loader (:mod:`~analyzer.loading.nsys_sqlite`, :mod:`~analyzer.loading.kineto`) fills the same
:class:`~analyzer.loading.model.Trace`; what they have in common lives here once.
"""
from __future__ import annotations

import gc
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
import pandas as pd

from analyzer.loading.columns import TextCodes, narrow_int
from analyzer.loading.model import COMPACT_INT_COLUMNS, NARROW_INT_COLUMNS, empty_frame

# Per-SM limits by compute capability, for exports that lack them (2020.3 lacks opt-in smem and
# threads/SM; 2022.4 exports of old reports lack everything but the name; torch.profiler's
# deviceProperties have no blocks/SM).
# Source: CUDA C++ Programming Guide, "Compute Capabilities" / "Technical Specifications per Compute
# Capability" table (CUDA 12.x/13.x). smem values in bytes; optin = max dynamic smem per block.
#   cc: (threads/SM, regs/SM, smem/SM, smem/block opt-in, blocks/SM)
CC_LIMITS: dict[tuple[int, int], tuple[int, int, int, int, int]] = {
    (7, 0): (2048, 65536, 96 * 1024, 96 * 1024, 32),
    (7, 2): (2048, 65536, 96 * 1024, 96 * 1024, 32),
    (7, 5): (1024, 65536, 64 * 1024, 64 * 1024, 16),
    (8, 0): (2048, 65536, 164 * 1024, 163 * 1024, 32),
    (8, 6): (1536, 65536, 100 * 1024, 99 * 1024, 16),
    (8, 7): (2048, 65536, 164 * 1024, 163 * 1024, 16),
    (8, 9): (1536, 65536, 100 * 1024, 99 * 1024, 24),
    (9, 0): (2048, 65536, 228 * 1024, 227 * 1024, 32),
    (10, 0): (2048, 65536, 228 * 1024, 227 * 1024, 32),
    (12, 0): (1536, 65536, 100 * 1024, 99 * 1024, 32),
}
DEFAULT_SMEM_PER_BLOCK = 48 * 1024

_API_SUFFIX = re.compile(r"(?:_v\d+|_ptsz|_ptds|_spt)+$")
#: what PyTorch's ``torch.autograd.profiler.emit_nvtx()`` appends to each operator's NVTX range text:
#: ``aten::mm, seq = 5, op_id = 812, sizes = [[8, 16], [16, 4]], input_op_ids = [...]`` (``seq`` for
#: ops autograd records, ``op_id`` since PyTorch 1.10, ``sizes`` with ``record_shapes=True``); also on
#: ``record_function`` scopes (``FSDP::pre_forward (blocks.3), op_id = 317171``)
_EMIT_NVTX = re.compile(r"^(.+?), (?:seq = -?\d+(?:, op_id = \d+)?|op_id = \d+)(?:, (?:sizes|input_op_ids) = .*)?$",
                        re.DOTALL)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a loader builds its columns, back as it was after.

    A decode allocates millions of short-lived containers (event structs, lists of JSON values) and no
    reference cycles; each collection the allocations trigger walks every tracked object still alive
    (on host_sync, 114 k events: 10-15% of the load's CPU time). Reference counting still frees
    everything as it goes; only cycles wait for the collector, which runs again afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def strip_api_suffix(name: str) -> str:
    """``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``; ``cudaMemcpyAsync_ptsz_v7000`` -> ``cudaMemcpyAsync``."""
    return _API_SUFFIX.sub("", name)


#: the Kineto category of PyTorch's operators, given to ``emit_nvtx`` ranges that carry a ``seq``
#: number: only operators autograd records have one, never a ``record_function`` scope
OPERATOR_DOMAIN = "cpu_op"


def emit_nvtx_names(texts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NVTX range texts with the per-call decorations of PyTorch's ``emit_nvtx`` cut off (``aten::mm,
    seq = 5, op_id = 812, sizes = [...]`` -> ``aten::mm``), and per text whether it carried a ``seq``
    number (an operator autograd records: ``aten::addmm``, ``FlashAttnFunc``; never a program's
    ``record_function`` scope, which gets an ``op_id`` only). The numbers differ on every call, so left
    in they make each call of one operator or annotation a distinct range (a phase per call, nothing
    repeating across steps) and put ids in the report's names; cut off, the texts name the operators
    as torch.profiler's traces do. One regex match per distinct text."""
    seq = np.zeros(len(texts), dtype=bool)
    if len(texts) == 0:
        return texts, seq
    codes, uniq = pd.factorize(texts)  # missing texts: code -1, kept as they are
    cut = {i: m for i, u in enumerate(uniq) if isinstance(u, str) and (m := _EMIT_NVTX.match(u))}
    if not cut:
        return texts, seq
    names = np.empty(len(uniq) + 1, dtype=object)
    names[:-1] = list(uniq)
    names[list(cut)] = [m.group(1) for m in cut.values()]
    has_seq = np.zeros(len(uniq) + 1, dtype=bool)
    has_seq[list(cut)] = [m.group(0)[len(m.group(1)):].startswith(", seq = ") for m in cut.values()]
    out = names[codes]  # code -1 reads the last slot, filled from the texts themselves just below
    missing = codes < 0
    out[missing] = np.asarray(texts, dtype=object)[missing]
    return out, has_seq[codes]


def contract_frame(columns: tuple[str, ...], data: Mapping[str, Any], *, compact: bool = False) -> pd.DataFrame:
    """A contract frame from arrays (missing contract columns are an error in the loader). ``compact``:
    text as categorical, id-like integers in 32 bits where they fit, those of ``NARROW_INT_COLUMNS`` in 16 or 8
    (the big frames; see model.py).
    Text may come as :class:`~analyzer.loading.columns.TextCodes` or as an ``object`` array."""
    if not data or len(next(iter(data.values()))) == 0:
        return empty_frame(columns)
    if not compact:
        return pd.DataFrame({c: text_column(data[c]) for c in columns}, copy=False)
    out: dict[str, Any] = {}
    for c in columns:
        v = data[c]
        if isinstance(v, TextCodes):
            out[c] = v.categorical()
        elif isinstance(v, np.ndarray) and v.dtype == object:
            out[c] = TextCodes.of(v).categorical()
        elif c in COMPACT_INT_COLUMNS:
            out[c] = narrow_int(v, NARROW_INT_COLUMNS.get(c, "int32"))
        else:
            out[c] = v
    return pd.DataFrame(out, copy=False)


def by_start(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows ordered by start (stable); no copy when the export already is (the usual case)."""
    start = frame["start"].to_numpy()
    if len(start) < 2 or (start[1:] >= start[:-1]).all():
        return frame
    return frame.take(np.argsort(start, kind="stable")).reset_index(drop=True)


def text_column(values: Any) -> np.ndarray | pd.Series:
    """Text stays ``object`` (as in :func:`empty_frame`): rows share the Python string of their id, where
    pandas' default string inference would copy every row's text into a new buffer."""
    if isinstance(values, TextCodes):
        values = np.append(values.labels, "").astype(object)[values.codes]
    if values.dtype == object:
        return pd.Series(values, dtype=object, copy=False)
    return values


def text_as_object(frame: pd.DataFrame) -> pd.DataFrame:
    for c in frame.columns:
        if frame[c].dtype != object and not pd.api.types.is_numeric_dtype(frame[c].dtype):
            frame[c] = frame[c].astype(object)
    return frame


def fill_cc_limits(rec: dict[str, Any]) -> None:
    """Fill per-SM limits that the export lacks from the compute-capability table."""
    cc = (int(rec["compute_major"] or 0), int(rec["compute_minor"] or 0))
    limits = CC_LIMITS.get(cc)
    if limits is None:
        return
    threads_sm, regs_sm, smem_sm, smem_optin, blocks_sm = limits
    for key, value in (("max_threads_per_sm", threads_sm), ("max_registers_per_sm", regs_sm),
                       ("max_shared_per_sm", smem_sm), ("max_shared_per_block_optin", smem_optin),
                       ("max_blocks_per_sm", blocks_sm), ("max_shared_per_block", DEFAULT_SMEM_PER_BLOCK),
                       ("max_threads_per_block", 1024), ("max_registers_per_block", 65536),
                       ("threads_per_warp", 32)):
        if not rec.get(key):
            rec[key] = value
