"""Loops the host ran over many small launches, found from the launches alone: the timeline breakdown's
"where" on a trace without any NVTX range.

A Python loop over tensors (a per-parameter optimizer, per-layer hooks, a module stack applied one layer
at a time) launches the same short cycle of kernels once per item: on one launching thread the sequence
of kernel names is periodic for a long stretch (``lerp, mul, addcmul, sqrt, mul, add, addcdiv`` 202
times: ``torch.optim.Adam(foreach=False)`` over 202 parameter tensors). Where the program marked
nothing, such a stretch is the part of the step a fix changes (the foreach or fused optimizer, a
batched or compiled layer stack), so the breakdown names it as a range of its own
(:func:`loop_ranges`), the way it names an NVTX range.

A stretch is a run of launches on one thread, in launch order, whose kernel names repeat with a period
of at most :data:`MAX_PERIOD` launches for at least :data:`MIN_TURNS` turns. Smaller periods are taken
first (a cycle of 7 also repeats every 14); a stretch overlapping one already taken is dropped. Its name
is the cycle's kernels, each by its operation (:func:`op_name`; a library GEMM, convolution, attention or
communication kernel by its category: ``gemm``), in the order the trace's first stretch
of that cycle ran them (its first turn: the loop body's order); every stretch of the same cycle, in
whatever rotation it started, has that name, so the same loop has one name in every step.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyzer.facts.categories import categorize, kernel_label_codes, load_categories

#: longest cycle (launches a turn) looked for
MAX_PERIOD = 16
#: fewest turns of the cycle that make a loop (a model's 12-24 layers stay below it in a forward pass
#: of ~4-7 kernels a layer only when shallower: a stack of 16 or more identical layers is a loop too)
MIN_TURNS = 16
#: longest host time between two consecutive launches of a loop (the breakdown's dispatch gap: a loop
#: over tensors launches back to back; launches further apart are separate work, not one loop)
LOOP_GAP_NS = 1_000_000
#: names of the cycle's kernels shown in the range's name
NAMES_SHOWN = 4
#: longest name shown for one kernel (cuBLAS' names run to a hundred characters)
NAME_CHARS = 24

LOOP_PREFIX = "(loop: "
TENSOR_LOOP_PREFIX = "(per-tensor loop: "
#: kernel categories of a per-tensor loop (an optimizer's update, a gradient clip or scale per tensor)
PER_TENSOR = frozenset({"elementwise", "reduction"})
#: kernel categories named by the category, not the kernel (a library's GEMM kernels are named by tile
#: sizes and architectures: ``sm80_xmma_gemm_f32f32_..._execute_kernel__5x_cublas``)
BY_CATEGORY = frozenset({"gemm", "convolution", "attention", "communication"})

_WRAPPERS = re.compile(r"^(?:[AB]UnaryFunctor|func_wrapper_t|ReduceOp|OpaqueType|Array|array)$")
_OPS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GENERIC = re.compile(r"^(?:vectorized_|unrolled_)?elementwise_kernel(?:_with_index)?$|^reduce_kernel$")


def op_name(kernel: str) -> str:
    """A kernel's operation, short: the kernel's own name, except for PyTorch's generic elementwise and
    reduction kernels, named by the functor they apply (``vectorized_elementwise_kernel<4,
    addcmul_cuda_kernel(...)...>`` -> ``addcmul``; ``<4, AUnaryFunctor<..., MulFunctor<float>>>`` ->
    ``Mul``). No digits (the breakdown makes numbered components generic)."""
    from analyzer.loading.kernel_names import kernel_short_name

    short = kernel_short_name(kernel) if kernel else ""
    name = short
    if _GENERIC.match(short):
        inner = kernel[kernel.find("<") + 1:] if "<" in kernel else ""
        found = [w for w in _OPS.findall(inner)
                 if re.search(r"Functor|[Kk]ernel|Impl|_cuda$", w) and not _WRAPPERS.match(w)
                 and not _GENERIC.match(w)]
        if found:
            name = found[0] if "Functor" not in found[0] or len(found) == 1 else found[-1]
            if re.match(r"^[AB]UnaryFunctor$|^BinaryFunctor$", name) and len(found) > 1:
                name = found[-1]
    for suffix in ("_cuda_kernel", "_kernel_cuda", "_kernel_vectorized", "CUDAKernelImpl", "CUDAKernelTemplate",
                   "_kernel", "Functor", "_cuda"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
            break
    name = re.sub(r"^CUDAFunctorOnSelf_|^CUDAFunctor_|^vectorized_", "", name)
    name = re.sub(r"[0-9]+", "", name).strip("_") or "kernel"
    return name if len(name) <= NAME_CHARS else name[:NAME_CHARS - 3].rstrip("_") + "..."


def _stretches(codes: np.ndarray, launch: np.ndarray) -> list[tuple[int, int, int]]:
    """``(first, end, period)`` of the periodic stretches of one thread's kernel-name codes (positions in
    ``codes``, in launch order, ``launch`` their launch calls' starts; ``end`` exclusive), smaller periods
    first, none overlapping another, none holding two consecutive launches more than
    :data:`LOOP_GAP_NS` apart."""
    n = len(codes)
    # breaks before position i (cumulative): a turn may not span one
    brk = np.r_[0, np.cumsum(np.diff(launch) > LOOP_GAP_NS)]
    covered = np.zeros(n, dtype=bool)
    out: list[tuple[int, int, int]] = []
    for p in range(1, min(MAX_PERIOD, n // MIN_TURNS) + 1):
        eq = np.r_[False, (codes[:-p] == codes[p:]) & (brk[p:] == brk[:-p]), False]
        edges = np.flatnonzero(eq[1:] != eq[:-1])
        lo, hi = edges[0::2], edges[1::2]  # codes[i] == codes[i+p] on [lo, hi): the long runs only
        long_ = (hi - lo) >= p * (MIN_TURNS - 1)
        for a, b in zip(lo[long_].tolist(), hi[long_].tolist()):
            first, end = a, b + p
            turns = (end - first) // p
            end = first + turns * p  # whole turns only
            if covered[first:end].any():  # in a stretch of a smaller period (or this one's previous run)
                continue
            out.append((first, end, p))
            covered[first:end] = True
    return sorted(out)


def loop_ranges(kernels: pd.DataFrame, categories_file: str | None = None) -> pd.DataFrame:
    """The loops of a kernel table (the trace's ``kernels``: ``name``/``short_name``, ``tid``, ``pid``,
    ``api_start``, ``correlation_id``), as a range table: one row per stretch with ``tid``, ``pid``,
    ``start`` (the first launch call's start), ``end`` (the last launch call's start + 1; the caller may
    extend it to the call's end), ``range_id``, ``parent_id`` -1, ``depth`` 0, ``kind`` ``pushpop``,
    ``text`` and ``path`` (the loop's name), ``period``, ``turns`` and ``last_corr`` (the last launch's
    correlation id). A loop whose kernels are all elementwise or reductions (``categories_file``'s
    categories: :data:`PER_TENSOR`) is a per-tensor loop (:data:`TENSOR_LOOP_PREFIX`): what a foreach
    or fused form (``torch._foreach_*``, a fused optimizer) launches a few kernels for."""
    cols = ("tid", "pid", "start", "end", "range_id", "parent_id", "depth", "kind", "text", "path",
            "period", "turns", "last_corr")
    empty = pd.DataFrame({c: pd.Series(dtype=object if c in ("kind", "text", "path") else np.int64) for c in cols})
    need = ("tid", "pid", "api_start", "correlation_id")
    if len(kernels) < MIN_TURNS or any(c not in kernels for c in need):
        return empty
    tid = kernels["tid"].to_numpy(dtype=np.int64)
    launch = kernels["api_start"].to_numpy(dtype=np.int64)
    ok = np.flatnonzero((tid >= 0) & (launch >= 0))
    if len(ok) < MIN_TURNS:
        return empty
    codes, labels = kernel_label_codes(kernels)
    order = ok[np.lexsort((launch[ok], tid[ok]))]
    codes = codes[order]
    t_sorted = tid[order]
    pid = kernels["pid"].to_numpy(dtype=np.int64)
    corr = kernels["correlation_id"].to_numpy(dtype=np.int64)
    cuts = np.r_[0, np.flatnonzero(t_sorted[1:] != t_sorted[:-1]) + 1, len(order)]
    canons: list[tuple[int, ...]] = []  # per stretch: its cycle in the rotation that sorts first
    starts: dict[tuple[int, ...], dict[tuple[int, ...], int]] = {}  # cycle -> rotations its stretches began with
    found: list[dict[str, object]] = []
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        if b - a < MIN_TURNS:
            continue
        for first, end, p in _stretches(codes[a:b], launch[order[a:b]]):
            cycle = tuple(codes[a + first:a + first + p].tolist())
            rot = min(range(p), key=lambda k: cycle[k:] + cycle[:k])
            canon = cycle[rot:] + cycle[:rot]
            canons.append(canon)
            begun = starts.setdefault(canon, {})
            begun[cycle] = begun.get(cycle, 0) + 1
            i0, i1 = order[a + first], order[a + end - 1]
            found.append({"tid": int(t_sorted[a]), "pid": int(pid[i0]), "start": int(launch[i0]),
                          "end": int(launch[i1]) + 1, "range_id": len(found), "parent_id": -1, "depth": 0,
                          "kind": "pushpop", "text": "", "path": "", "period": p,
                          "turns": (end - first) // p, "last_corr": int(corr[i1])})
    # a cycle is named in the rotation most of its stretches began with (the loop body's order; ties: the
    # earliest such stretch), so every stretch of one loop has one name
    names: dict[int, str] = {}
    cats: dict[int, str] = {}
    table = load_categories(categories_file)
    label_of: dict[tuple[int, ...], str] = {}
    for canon, begun in starts.items():
        body = max(begun, key=lambda c: begun[c])  # dicts keep first-seen order: max keeps the earliest tie
        for c in body:
            if c not in names:
                cats[c] = categorize(str(labels[c]), "", table)
                names[c] = cats[c] if cats[c] in BY_CATEGORY else op_name(str(labels[c]))
        words = [names[c] for c in body]
        shown = ", ".join(words[:NAMES_SHOWN]) + (", ..." if len(words) > NAMES_SHOWN else "")
        kinds = {cats[c] for c in body}
        prefix = TENSOR_LOOP_PREFIX if kinds <= PER_TENSOR else LOOP_PREFIX
        label_of[canon] = f"{prefix}{shown})" if len(words) > 1 else f"{prefix}{words[0]} repeated)"
    for row, canon in zip(found, canons):
        row["text"] = row["path"] = label_of[canon]
    if not found:
        return empty
    return pd.DataFrame(found, columns=list(cols))


def trace_loop_ranges(trace, categories_file: str | None = None) -> pd.DataFrame:  # type: ignore[no-untyped-def]
    """:func:`loop_ranges` of a trace without NVTX ranges (none when it has any: the program's own ranges
    say where its time goes), each ending at the end of its last launch call where the trace's CUDA API
    table has it."""
    from analyzer.facts.nvtx_ranges import ranges_only

    if not ranges_only(trace.nvtx).empty:
        return loop_ranges(trace.kernels.iloc[:0])
    loops = loop_ranges(trace.kernels, categories_file)
    api = trace.api
    if loops.empty or api.empty or not {"pid", "correlation_id", "end"} <= set(api.columns):
        return loops
    calls = pd.DataFrame({"pid": api["pid"].to_numpy(dtype=np.int64),
                          "last_corr": api["correlation_id"].to_numpy(dtype=np.int64),
                          "call_end": api["end"].to_numpy(dtype=np.int64)})
    calls = calls.loc[calls["last_corr"].isin(loops["last_corr"].to_numpy())].drop_duplicates(["pid", "last_corr"])
    ends = loops[["pid", "last_corr"]].merge(calls, on=["pid", "last_corr"], how="left")["call_end"]
    ends = ends.fillna(-1).to_numpy(dtype=np.int64)
    loops["end"] = np.maximum(loops["end"].to_numpy(dtype=np.int64), ends)
    return loops
