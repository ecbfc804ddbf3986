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
whatever rotation it started, has that name, so the same loop has one name in every step. A loop of one
kernel says what a turn launches: ``(loop: one Fill per turn)``, ``(per-tensor loop: one Mul per tensor)``.

A trace with ranges is searched too, on the launches no range below the step level covers
(:func:`coarse_ranges`: the innermost range open on the launching thread is a step, a range enclosing
one or spanning the whole window, or none): a program that marks only ``step_N`` (a profiler schedule)
or one ``train`` range says nothing about where inside the step its launch-bound time goes. Such a
loop is a range nested in that range (``step_12/(loop: ...)``); launches under the program's own inner
ranges keep them, and a stretch never spans a launch the search left out.

On a torch.profiler trace the framework's operator ranges (``cpu_op``: ``aten::add_``, autograd nodes;
:func:`places_and_operators`) cover every launch: they are a loop's elements, never places. The search
reads the program's own ranges only (``record_function``, ``ProfilerStep#N`` and the ``step_N`` it
wraps), and a loop whose launches all ran in operators is named by them, each call once, as the program
wrote the loop: ``ProfilerStep#N/step_N/(per-tensor loop: aten::mul_, aten::add_)``, ``(loop:
aten::linear, aten::layer_norm, aten::gelu)``, ``(loop: GeluBackward0, ...)`` on autograd's thread.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from analyzer.facts._util import frame_memo, text
from analyzer.facts.categories import categorize, kernel_label_codes, load_categories
from analyzer.facts.nvtx_ranges import innermost_open, parent_positions, ranges_only

if TYPE_CHECKING:
    from analyzer.analysis import Window

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
#: longest name shown for one operator (``aten::scaled_dot_product_attention``)
OP_CHARS = 40

_AUTOGRAD_NODE = "autograd::engine::evaluate_function: "

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
    covered = np.zeros(n, dtype=bool)
    out: list[tuple[int, int, int]] = []
    if n < 2 or min(MAX_PERIOD, n // MIN_TURNS) < 1:  # no period fits
        return out
    # one key per launch: its code and the breaks before it (cumulative: a turn may not span one), so
    # two launches have one key when they run one kernel with no break between them (one compare per
    # period, in 32 bits where the keys fit)
    codes = np.asarray(codes, dtype=np.int64)
    low = int(codes.min())
    span = int(codes.max()) - low + 1
    brk = np.cumsum(np.diff(launch) > LOOP_GAP_NS)
    keys = np.empty(n, dtype=np.int32 if span * (int(brk[-1]) + 1) < 2**31 else np.int64)
    keys[0] = 0
    np.multiply(brk, span, out=keys[1:], casting="unsafe")
    del brk
    keys += codes - low
    eq_buf = np.zeros(n + 1, dtype=bool)  # [False, keys[i] == keys[i + p] for each i, False]
    for p in range(1, min(MAX_PERIOD, n // MIN_TURNS) + 1):
        eq = eq_buf[:n - p + 2]
        np.equal(keys[:-p], keys[p:], out=eq[1:n - p + 1])
        eq[n - p + 1] = False
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


def _lane_stretches(codes: np.ndarray, lane: np.ndarray, launch: np.ndarray,
                    ok: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray, int, int, int]]:
    """:func:`_stretches` of each lane's launches (rows ``ok``, by lane, then launch order): ``(rows, codes,
    first, end, period)`` per stretch, ``rows`` the lane's kernel rows in launch order, ``codes`` theirs."""
    order = ok[np.lexsort((launch[ok], lane[ok]))]
    sorted_codes = codes[order]
    l_sorted = lane[order]
    cuts = np.r_[0, np.flatnonzero(l_sorted[1:] != l_sorted[:-1]) + 1, len(order)]
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        if b - a < MIN_TURNS:
            continue
        rows, lane_codes = order[a:b], sorted_codes[a:b]
        for first, end, p in _stretches(lane_codes, launch[rows]):
            yield rows, lane_codes, first, end, p


def loop_ranges(kernels: pd.DataFrame, categories_file: str | None = None,
                op_texts: tuple[np.ndarray, np.ndarray] | None = None) -> pd.DataFrame:
    """The loops of a kernel table (the trace's ``kernels``: ``name``/``short_name``, ``tid``, ``pid``,
    ``api_start``, ``correlation_id``), as a range table: one row per stretch with ``tid``, ``pid``,
    ``start`` (the first launch call's start), ``end`` (the last launch call's start + 1; the caller may
    extend it to the call's end), ``range_id``, ``parent_id`` -1, ``depth`` 0, ``kind`` ``pushpop``,
    ``text`` and ``path`` (the loop's name), ``period``, ``turns`` and ``last_corr`` (the last launch's
    correlation id). A loop whose kernels are all elementwise or reductions (``categories_file``'s
    categories: :data:`PER_TENSOR`) is a per-tensor loop (:data:`TENSOR_LOOP_PREFIX`): what a foreach
    or fused form (``torch._foreach_*``, a fused optimizer) launches a few kernels for. An optional
    ``loop_lane`` column splits a thread's launches further: a stretch holds launches of one lane only.
    ``op_texts``: per kernel row, the framework operator that launched it and that call's number (a
    torch.profiler trace's outermost ``aten::`` range open at the launch; ``""`` and -1 for none): a loop
    whose body's launches all have one is named by those operators, each call once
    (``(per-tensor loop: aten::mul_, aten::add_)``), as the program wrote the loop."""
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
    lane = kernels["loop_lane"].to_numpy(dtype=np.int64) if "loop_lane" in kernels else tid
    pid = kernels["pid"].to_numpy(dtype=np.int64)
    corr = kernels["correlation_id"].to_numpy(dtype=np.int64)
    canons: list[tuple[int, ...]] = []  # per stretch: its cycle in the rotation that sorts first
    starts: dict[tuple[int, ...], dict[tuple[int, ...], int]] = {}  # cycle -> rotations its stretches began with
    found: list[dict[str, object]] = []
    first_turn: dict[tuple[int, ...], np.ndarray] = {}  # per cycle (as it began): its first turn's rows
    for rows, lane_codes, first, end, p in _lane_stretches(codes, lane, launch, ok):
        cycle = tuple(lane_codes[first:first + p].tolist())
        rot = min(range(p), key=lambda k: cycle[k:] + cycle[:k])
        canon = cycle[rot:] + cycle[:rot]
        canons.append(canon)
        begun = starts.setdefault(canon, {})
        begun[cycle] = begun.get(cycle, 0) + 1
        first_turn.setdefault(cycle, rows[first:first + p])
        i0, i1 = rows[first], rows[end - 1]
        found.append({"tid": int(tid[rows[0]]), "pid": int(pid[i0]), "start": int(launch[i0]),
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
        by_op = _op_words(first_turn[body], op_texts)
        if by_op:
            words = by_op
        shown = ", ".join(words[:NAMES_SHOWN]) + (", ..." if len(words) > NAMES_SHOWN else "")
        kinds = {cats[c] for c in body}
        prefix = TENSOR_LOOP_PREFIX if kinds <= PER_TENSOR else LOOP_PREFIX
        if len(words) == 1:  # one kernel launched again and again: what each turn of the loop launches
            shown = f"one {words[0]} per {'tensor' if prefix == TENSOR_LOOP_PREFIX else 'turn'}"
        label_of[canon] = f"{prefix}{shown})"
    for row, canon in zip(found, canons):
        row["text"] = row["path"] = label_of[canon]
    if not found:
        return empty
    return pd.DataFrame(found, columns=list(cols))


def _op_words(rows: np.ndarray, op_texts: tuple[np.ndarray, np.ndarray] | None) -> list[str]:
    """The operators that launched the kernel rows ``rows`` (a loop's first turn), each call once, in
    launch order; none unless every launch has one."""
    if op_texts is None or not len(rows):
        return []
    names, calls = op_texts[0][rows], op_texts[1][rows]
    if (calls < 0).any():
        return []
    keep = np.r_[True, calls[1:] != calls[:-1]]
    return [_short_op(str(x)) for x in names[keep].tolist()]


def _short_op(name: str) -> str:
    """An operator's name as a loop's name shows it: an autograd node by its node
    (``autograd::engine::evaluate_function: MmBackward0`` -> ``MmBackward0``), no ``/`` (a path
    separator), at most :data:`OP_CHARS` characters."""
    name = name.removeprefix(_AUTOGRAD_NODE).strip().replace("/", " ") or "op"
    return name if len(name) <= OP_CHARS else name[:OP_CHARS - 3] + "..."


def operator_calls(nv_ops: pd.DataFrame, kernels: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel row, the outermost framework operator range (``nv_ops``: the operator ranges of a
    torch.profiler trace) open at its launch on its thread: ``(texts, positions)``, ``""`` / -1 for none."""
    n = len(kernels)
    texts = np.full(n, "", dtype=object)
    if nv_ops.empty or not n:
        return texts, np.full(n, -1, dtype=np.int64)
    from analyzer.facts.nvtx_ranges import parent_positions as parents

    top = nv_ops.loc[parents(nv_ops) < 0]  # an operator no other operator encloses
    top = top.assign(parent_id=-1)
    at = innermost_open(top, kernels["tid"].to_numpy(dtype=np.int64), kernels["api_start"].to_numpy(dtype=np.int64))
    hit = at >= 0
    texts[hit] = top["text"].astype(str).to_numpy(dtype=object)[at[hit]]
    return texts, at


def coarse_ranges(nv: pd.DataFrame, window: Window | None) -> np.ndarray:
    """Per row of the range table ``nv``, whether the range is at or above the step level: one of the
    window's NVTX steps, a range enclosing one, or a range open over the whole window (one ``train``):
    ranges that say a launch is in the loop, not where in the step."""
    n = len(nv)
    out = np.zeros(n, dtype=bool)
    if not n or window is None:
        return out
    out |= (nv["start"].to_numpy(dtype=np.int64) <= window.start_ns) & \
        (nv["end"].to_numpy(dtype=np.int64) >= window.end_ns)
    steps = window.steps
    if steps is not None and steps.source == "nvtx" and steps.range_ids and "range_id" in nv:
        pos = pd.Index(nv["range_id"].to_numpy()).get_indexer(np.asarray(steps.range_ids, dtype=np.int64))
        parent = parent_positions(nv)
        pos = pos[pos >= 0]
        out[_wrapped(nv, parent, pos)] = True
        for _ in range(64):  # the steps, then their ancestors a level at a time (depth is small)
            if not len(pos):
                break
            out[pos] = True
            pos = parent[pos]
            pos = pos[(pos >= 0)]
            pos = pos[~out[pos]]
    return out


def _wrapped(nv: pd.DataFrame, parent: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Positions of the ranges torch.profiler's step only wraps: the one child range of a
    ``ProfilerStep#N`` step holding all but :data:`~analyzer.facts.breakdown_ranges.WRAPPER_OWN_SHARE`
    of its time (the program's own ``step_N``) is the step too, as the breakdown reads it."""
    from analyzer.facts.breakdown_ranges import WRAPPER_OWN_SHARE
    from analyzer.facts.nvtx import PROFILER_STEP_TEXT

    texts = nv["text"].astype(str).to_numpy(dtype=object)
    steps = np.array([i for i in steps.tolist() if PROFILER_STEP_TEXT.match(texts[i])], dtype=np.int64)
    has_parent = np.flatnonzero(parent >= 0)
    if not len(steps) or not len(has_parent):
        return np.empty(0, dtype=np.int64)
    dur = (nv["end"].to_numpy(dtype=np.int64) - nv["start"].to_numpy(dtype=np.int64)).astype(np.float64)
    count = np.bincount(parent[has_parent], minlength=len(nv))
    child = np.full(len(nv), -1, dtype=np.int64)
    child[parent[has_parent]] = has_parent  # the (last) child of each range
    steps = steps[count[steps] == 1]
    kid = child[steps]
    return kid[dur[kid] >= (1 - WRAPPER_OWN_SHARE) * dur[steps]]


def trace_loop_ranges(trace, categories_file: str | None = None,  # type: ignore[no-untyped-def]
                      window: Window | None = None) -> pd.DataFrame:
    """:func:`loop_ranges` of a trace, each ending at the end of its last launch call where the trace's
    CUDA API table has it. On a trace with NVTX ranges (given the ``window``: none without one), of the
    launches no range below the step level covers (:func:`coarse_ranges`), each loop nested in the range
    open at its first launch (its ``path`` under that range's, ``parent_id``, ``depth``; ``range_id``
    after the trace's own)."""
    every = ranges_only(trace.nvtx)
    nv, nv_ops = places_and_operators(every)
    kernels = trace.kernels
    nested = not nv.empty
    if nested:
        if window is None or kernels.empty or any(c not in kernels for c in ("tid", "api_start")):
            return loop_ranges(kernels.iloc[:0])
        kernels = _uncovered(kernels, nv, coarse_ranges(nv, window))
    ops = None
    if not nv_ops.empty and len(kernels) >= MIN_TURNS and {"tid", "api_start"} <= set(kernels.columns):
        ops = operator_calls(nv_ops, kernels)
    loops = loop_ranges(kernels, categories_file, ops)
    if nested and not loops.empty:
        loops = _nested(loops, nv, int(every["range_id"].max()) + 1)
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


def places_and_operators(nv: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The range table ``nv`` split in the program's own ranges (its places: NVTX ranges,
    ``record_function``, ``ProfilerStep#N``, PyTorch's ``Optimizer.step#...``) and the framework's
    operator ranges (:func:`analyzer.facts.nvtx.operator_ranges`: torch.profiler's ``cpu_op`` events,
    ``aten::add_``, autograd nodes), which cover every launch and say what the loop does, not where:
    a loop's elements, never a place a loop is searched from or nested in. A torch.compile region is a
    place."""
    if nv.empty:
        return nv, nv
    from analyzer.facts.nvtx import compiled_regions, operator_ranges

    def compute() -> tuple[pd.DataFrame, pd.DataFrame]:
        # torch.compile's regions (``Torch-Compiled Region: 1/0``, ``CompiledFunction``) stay places: the
        # launches in them are the compiled code's, fixed by CUDA graphs or fewer graph breaks, not a loop
        op = operator_ranges(nv) & ~compiled_regions(nv)
        if not op.any():
            return nv, nv.iloc[:0]
        return nv.loc[~op], nv.loc[op]

    # once per range table: the places' own lookups (shared_innermost) are then made once too
    return frame_memo(nv, "places_and_operators", compute)


def _uncovered(kernels: pd.DataFrame, nv: pd.DataFrame, coarse: np.ndarray) -> pd.DataFrame:
    """The launches of ``kernels`` whose innermost open range on their thread is ``coarse`` or none, with a
    ``loop_lane``: a run of such launches on one thread under one range (a launch left out between two ends
    the run, so no stretch spans the program's own ranges)."""
    tid = kernels["tid"].to_numpy(dtype=np.int64)
    launch = kernels["api_start"].to_numpy(dtype=np.int64)
    ok = np.flatnonzero((tid >= 0) & (launch >= 0))
    if not len(ok):
        return kernels.iloc[:0]
    at = _open_range(nv, tid[ok], kernels["pid"].to_numpy(dtype=np.int64)[ok], launch[ok])
    if np.count_nonzero((at < 0) | coarse[np.maximum(at, 0)]) < MIN_TURNS:  # the ranges cover the launches
        return kernels.iloc[:0]
    sort = np.lexsort((launch[ok], tid[ok]))
    order, at = ok[sort], at[sort]
    keep = (at < 0) | coarse[np.maximum(at, 0)]
    key = np.where(keep, at, -2)  # -2: a launch under an inner range
    t = tid[order]
    new = np.r_[True, (t[1:] != t[:-1]) | (key[1:] != key[:-1])]
    lane = np.cumsum(new) - 1
    picked = order[keep]
    cols = [c for c in ("name", "short_name", "tid", "pid", "api_start", "correlation_id") if c in kernels]
    out = kernels[cols].iloc[picked].copy()  # what loop_ranges reads
    out["loop_lane"] = lane[keep]
    return out


def _open_range(nv: pd.DataFrame, tid: np.ndarray, pid: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Position in ``nv`` of the innermost range open at ``t`` on thread ``tid``, else on its process's
    main thread (:func:`analyzer.facts.nvtx.main_threads`: where the breakdown looks for a thread without
    ranges of its own), -1 for none."""
    from analyzer.facts.nvtx import main_threads

    at = innermost_open(nv, tid, t)
    missing = np.flatnonzero(at < 0)
    mains = main_threads(nv)
    if len(missing) and mains:
        keys = np.array(sorted(mains), dtype=np.int64)
        main_of = np.array([mains[k] for k in keys.tolist()], dtype=np.int64)
        asked = pid[missing]
        i = np.minimum(np.searchsorted(keys, asked), len(keys) - 1)
        main = np.where(keys[i] == asked, main_of[i], -1)
        at[missing] = innermost_open(nv, main, t[missing])
    return at


def _nested(loops: pd.DataFrame, nv: pd.DataFrame, first_id: int) -> pd.DataFrame:
    """``loops`` as ranges of ``nv``'s table: each under the range open at its first launch on its
    thread (its path under that range's; depth one more), numbered from ``first_id`` (after the trace's
    range ids)."""
    tid = loops["tid"].to_numpy(dtype=np.int64)
    at = _open_range(nv, tid, loops["pid"].to_numpy(dtype=np.int64), loops["start"].to_numpy(dtype=np.int64))
    inside = at >= 0
    pos = np.maximum(at, 0)
    paths = nv["path"].astype(str).to_numpy(dtype=object) if "path" in nv else nv["text"].astype(str).to_numpy(dtype=object)
    depth = nv["depth"].fillna(0).to_numpy(dtype=np.int64) if "depth" in nv else np.zeros(len(nv), dtype=np.int64)
    ids = nv["range_id"].to_numpy(dtype=np.int64)
    out = loops.copy()
    out["path"] = [f"{p}/{name}" if i else name for p, name, i in zip(paths[pos], out["text"], inside)]
    # a loop on a thread without ranges (autograd's) is named under the main thread's range, its parent
    # none: outside the loop its thread's time is the main thread's, as the breakdown reads it
    own = inside & (nv["tid"].to_numpy(dtype=np.int64)[pos] == tid)
    out["parent_id"] = np.where(own, ids[pos], -1)
    out["depth"] = np.where(inside, depth[pos] + 1, 0)
    out["range_id"] = first_id + np.arange(len(out), dtype=np.int64)
    return out


class LoopNames:
    """The loops of a trace whose range table also holds operator ranges (torch.profiler's ``aten::``
    events, which cross a loop's bounds, so the loops cannot nest in the table as :func:`with_loops`
    nests them): the timeline's lookups read the table as it is, then a loop open on the feeding thread
    names the time in the range's place (its path and text, numbered after the table's
    ``path_labels`` / ``text_labels``)."""

    def __init__(self, loops: pd.DataFrame, path_labels: np.ndarray, text_labels: np.ndarray) -> None:
        from analyzer.facts._util import text_codes
        from analyzer.facts.nvtx_ranges import InnermostOpen

        self.innermost = InnermostOpen(loops.assign(parent_id=-1))  # one thread's loops never overlap
        p_codes, p_labels = text_codes(loops["path"])
        t_codes, t_labels = text_codes(loops["text"])
        self.path_codes = p_codes.astype(np.int32) + len(path_labels)
        self.text_codes = t_codes.astype(np.int32) + len(text_labels)
        self.path_labels = np.r_[np.asarray(path_labels, dtype=object), np.asarray(p_labels, dtype=object)]
        self.text_labels = np.r_[np.asarray(text_labels, dtype=object), np.asarray(t_labels, dtype=object)]

    def rename(self, tid: np.ndarray, t: np.ndarray, path_codes: np.ndarray, text_codes: np.ndarray) -> None:
        """Where a loop is open at ``t[i]`` on thread ``tid[i]``, its codes in ``path_codes`` and
        ``text_codes`` (in place)."""
        at = self.innermost(np.asarray(tid, dtype=np.int64), np.asarray(t, dtype=np.int64))
        hit = at >= 0
        path_codes[hit] = self.path_codes[at[hit]]
        text_codes[hit] = self.text_codes[at[hit]]


def with_loops(nv: pd.DataFrame, loops: pd.DataFrame) -> pd.DataFrame:
    """The range table ``nv`` (ranges only) with the loops :func:`trace_loop_ranges` nested in it."""
    if loops.empty:
        return nv
    if nv.empty:
        return loops
    cols = [c for c in nv.columns if c in loops.columns]
    return pd.concat([nv[cols], loops[cols]], ignore_index=True)


def op_paths(loops: pd.DataFrame, ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, labels)`` of each op's range path: a loop's path where its launch is inside one of
    ``loops`` (on its thread), else its own ``nvtx_path`` (a trace without ranges: ``""``)."""
    from analyzer.facts._util import text_codes

    at = innermost_open(loops, ops["tid"].to_numpy(dtype=np.int64), ops["api_start"].to_numpy(dtype=np.int64))
    names = loops["path"].to_numpy(dtype=object)
    if (loops["depth"].to_numpy() == 0).all() and not (text(ops["nvtx_path"]) != "").any():
        codes = at.copy()  # no range: a loop's path or ""
        codes[codes < 0] = len(names)
        return codes, np.append(names, "").astype(object)
    codes, labels = text_codes(ops["nvtx_path"])
    codes = codes.astype(np.int64, copy=True)
    codes[at >= 0] = len(labels) + at[at >= 0]
    return codes, np.r_[np.asarray(labels, dtype=object), names].astype(object)


def per_tensor_launches(kernels: pd.DataFrame, categories_file: str | None = None) -> np.ndarray:
    """Per row of a kernel table (``name``/``short_name``, ``tid``, ``api_start``), whether the launch is
    in a per-tensor loop: :func:`per_tensor_flags` of its kernel names (:func:`kernel_label_codes`),
    threads and launch calls."""
    n = len(kernels)
    if n < MIN_TURNS or any(c not in kernels for c in ("tid", "api_start")):
        return np.zeros(n, dtype=bool)
    codes, labels = kernel_label_codes(kernels)
    return per_tensor_flags(codes, labels, kernels["tid"].to_numpy(dtype=np.int64),
                            kernels["api_start"].to_numpy(dtype=np.int64), categories_file)


def per_tensor_flags(codes: np.ndarray, labels: np.ndarray, tid: np.ndarray, launch: np.ndarray,
                     categories_file: str | None = None) -> np.ndarray:
    """Per launch (``labels[codes]`` its kernel's name, ``tid`` its thread, ``launch`` its call's start; -1
    where unknown), whether it is in a per-tensor loop: a stretch (:func:`_stretches`, per launching
    thread, in launch order) whose cycle's kernels are all elementwise or reductions (:data:`PER_TENSOR`),
    what one ``torch._foreach_*`` call or a fused optimizer launches a few kernels for. A range whose
    launches mostly are such loops is fixed by the same change as another such range (a gradient clip and
    a weight EMA over the same tensors: ``torch._foreach_*`` for both), the breakdown's per-tensor fix
    group. Codes are compared by the text they name (two codes of one text, or a code -1 and ``""``, are
    one kernel), so the arrays of any coding of the names give the same answer; no frame is built."""
    n = len(codes)
    out = np.zeros(n, dtype=bool)
    if n < MIN_TURNS:
        return out
    tid = np.asarray(tid, dtype=np.int64)
    launch = np.asarray(launch, dtype=np.int64)
    ok = np.flatnonzero((tid >= 0) & (launch >= 0))
    if len(ok) < MIN_TURNS:
        return out
    # one code per distinct text (the last slot: a missing name, read as "")
    texts = [str(x) for x in np.asarray(labels, dtype=object).tolist()]
    canon, uniq = pd.factorize(np.array(texts + [""], dtype=object))
    codes = canon[np.asarray(codes, dtype=np.int64)]  # -1 reads the last slot
    table = load_categories(categories_file)
    elementwise = np.array([categorize(str(x), "", table) in PER_TENSOR for x in uniq.tolist()], dtype=bool)
    for rows, lane_codes, first, end, p in _lane_stretches(codes, tid, launch, ok):
        if elementwise[lane_codes[first:first + p]].all():
            out[rows[first:end]] = True
    return out
