"""NVTX facts: GPU time projected onto the user's ranges, and "which range was open at time t".

GPU ops carry the loader's attribution (``nvtx_id``: the innermost range open on the launching
thread at launch). A range instance's *exclusive* GPU time is the time of ops attributed to it; its
*inclusive* GPU time adds the ops attributed to any range nested inside it. Inclusive sums are
computed by walking the parent links one level at a time for all ops at once (``depth`` vectorized
passes, each a ``bincount``), never per op.

Window: range instances that overlap the analysis window, with ``cpu_ns`` clipped to it; GPU ops
whose start lies in the window.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyzer.facts._util import column, frame_memo, starts_in_window, text, text_matches
# innermost_open and parent_positions are imported from here by facts written before nvtx_ranges
from analyzer.facts.nvtx_ranges import innermost_open as innermost_open
from analyzer.facts.nvtx_ranges import parent_positions as parent_positions
from analyzer.facts.nvtx_ranges import ranges_only
from analyzer.facts.registry import FACTS, FactContext, fact
from analyzer.loading.common import OPERATOR_DOMAIN
from analyzer.facts.phase_index import (
    AGGREGATE_TIMING_COLUMNS,
    TIMING_COLUMNS,
    aggregate_timing,
    phase_index,
    range_timing,
)


#: Kineto categories whose events are the framework's operators (every ``aten::`` call, autograd
#: nodes), never the program's own annotations (``user_annotation``: ``record_function``,
#: ``ProfilerStep#N``, the optimizer's and data loader's annotations); nsys loading gives it to
#: ``emit_nvtx`` ranges that carry autograd's ``seq`` number
OPERATOR_DOMAINS = frozenset({OPERATOR_DOMAIN})
#: range texts that are operators, autograd-engine or compiled-function events whatever their domain:
#: ``aten::linear``, ``vllm::moe_forward``, ``autograd::engine::evaluate_function: MmBackward0``,
#: autograd nodes (``MmBackward0``, PyTorch 1.8's ``AddmmBackward``), ``CompiledFunction``,
#: ``CompiledFunctionBackward``, ``## Call CompiledFxGraph ... ##``, ``Torch-Compiled Region``,
#: ``TorchDynamo Cache Lookup``, ``<forward op>``; PyTorch's ``emit_nvtx`` ranges in nsys traces
#: (``aten::mm, seq = 5, sizes = ...``) are caught by the namespace
OPERATOR_TEXTS = re.compile(
    r"^(?:[a-z_][a-z0-9_]*::"  # a lowercase C++/library namespace: aten::, vllm::, c10d::, autograd::
    r"|[A-Z][A-Za-z0-9]*Backward\d*$"  # autograd nodes
    r"|CompiledFunction|## Call CompiledFxGraph|Torch-Compiled Region|TorchDynamo Cache Lookup"
    r"|<(?:forward|backward) op>)")
#: what is never an operator even in an operator category (older Kineto wrote ProfilerStep as cpu_op)
PROFILER_STEP_TEXT = _STEP_TEXT = re.compile(r"^ProfilerStep#\d+$")
#: annotations PyTorch itself opens once per iteration around one part of it, never around a whole
#: iteration: the optimizer's ``Optimizer.step#AdamW.step`` / ``Optimizer.zero_grad#...`` and the data
#: loader's ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``
FRAMEWORK_MARK_TEXTS = re.compile(r"^(?:Optimizer\.(?:step|zero_grad)#|enumerate\(DataLoader\)#)")


#: torch.compile's regions among the operator texts: ``CompiledFunction``, ``## Call CompiledFxGraph ##``,
#: ``Torch-Compiled Region: 1/0``, ``TorchDynamo Cache Lookup``, ``<forward op>``
COMPILED_REGION_TEXTS = re.compile(
    r"CompiledFunction|## Call CompiledFxGraph|Torch-Compiled Region|TorchDynamo Cache Lookup|<(?:forward|backward) op>")


def operator_ranges(nvtx: pd.DataFrame) -> np.ndarray:
    """Per row of ``nvtx``: a framework operator, autograd-engine or compiled-function event (by the
    Kineto category in ``domain`` or by its text), not an annotation the program made. Such events
    repeat as often as the program's iterations (``aten::linear`` ten thousand times) but never mark
    one: the window never builds steps from them. Worked out once per frame (the window chooser, the
    launch-loop search and the breakdown ask the same range table: :func:`ranges_only`), each pattern
    tested once per distinct text; read-only."""
    if nvtx.empty:
        return np.zeros(0, dtype=bool)

    def compute() -> np.ndarray:
        dom_hit = text_matches(nvtx, "domain", _OPERATOR_DOMAIN_TEXT)
        return (dom_hit | text_matches(nvtx, "text", OPERATOR_TEXTS)) & ~text_matches(nvtx, "text", _STEP_TEXT)

    return frame_memo(nvtx, "operator_ranges", compute)


#: a domain that is one of :data:`OPERATOR_DOMAINS`, whole
_OPERATOR_DOMAIN_TEXT = re.compile("(?:" + "|".join(re.escape(d) for d in sorted(OPERATOR_DOMAINS)) + r")\Z")


def compiled_regions(nvtx: pd.DataFrame) -> np.ndarray:
    """Per row of ``nvtx``: a torch.compile region (:data:`COMPILED_REGION_TEXTS`), worked out once per
    frame like :func:`operator_ranges`; read-only."""
    if nvtx.empty:
        return np.zeros(0, dtype=bool)
    return frame_memo(nvtx, "compiled_regions", lambda: text_matches(nvtx, "text", COMPILED_REGION_TEXTS))


def framework_marks(nvtx: pd.DataFrame) -> np.ndarray:
    """Per row of ``nvtx``: an annotation PyTorch opens around one part of every iteration
    (:data:`FRAMEWORK_MARK_TEXTS`). It marks iterations (the window's annotation marks) but encloses
    none: a step built from it would hold the optimizer alone (optimizer_loop without NVTX ranges: 61%
    of the GPU work, enough for a repeated range to pass as the loop). Worked out once per frame;
    read-only."""
    if nvtx.empty:
        return np.zeros(0, dtype=bool)
    return frame_memo(nvtx, "framework_marks", lambda: text_matches(nvtx, "text", FRAMEWORK_MARK_TEXTS))


def positions_of(nvtx: pd.DataFrame, range_ids: np.ndarray) -> np.ndarray:
    """Row positions in ``nvtx`` of ``range_ids`` (``-1`` where unknown)."""
    return pd.Index(nvtx["range_id"].to_numpy()).get_indexer(np.asarray(range_ids, dtype=np.int64))


def main_threads(nvtx: pd.DataFrame) -> dict[int, int]:
    """Per pid, the thread most likely to be the user's main thread: the one whose tid equals the pid
    when it has ranges, else the thread with the most ranges."""
    if nvtx.empty:
        return {}

    def compute() -> dict[int, int]:
        counts = nvtx.groupby(["pid", "tid"]).size().reset_index(name="n")
        counts["is_main"] = counts["pid"] == counts["tid"]
        counts = counts.sort_values(["pid", "is_main", "n"], ascending=[True, False, False])
        first = counts.drop_duplicates("pid")
        return dict(zip(first["pid"].astype(int), first["tid"].astype(int)))

    return dict(frame_memo(nvtx, "main_threads", compute))  # once per frame; the caller's own copy


def _gpu_ops_in_window(ctx: FactContext) -> pd.DataFrame:
    return starts_in_window(ctx.get("gpu_ops"), ctx.window)


_TEXT = {"name", "path", "domain", "measure"}


@fact(
    "nvtx_instances",
    columns={
        "range_id": "NVTX range row id",
        "name": "range text",
        "path": "range path, outermost first",
        "depth": "nesting depth (0 outermost)",
        "domain": "NVTX domain",
        "pid": "process id",
        "tid": "thread id",
        "start": "range start (ns)",
        "end": "range end (ns)",
        "duration": "range duration (ns, unclipped)",
        "cpu_ns": "range duration clipped to the window (ns)",
        "gpu_ns": "duration of GPU ops launched inside the range or a nested range (ns)",
        "gpu_ns_exclusive": "duration of GPU ops whose innermost range is this one (ns)",
        "kernel_count": "kernels launched inside the range or a nested range",
        "op_count": "GPU ops launched inside the range or a nested range",
        "gpu_start": "start of the first GPU op launched inside (ns, -1 if none)",
        "gpu_end": "end of the last GPU op launched inside (ns, -1 if none)",
        "sync_count": "blocking synchronizing CUDA calls made inside the range or a nested range",
        **TIMING_COLUMNS,
    },
    scope_keys=("path", "name"),
)
def nvtx_instances(ctx: FactContext) -> pd.DataFrame:
    """One row per NVTX range instance overlapping the window (or whose GPU work starts in it), with
    the GPU work launched inside it (ops starting in the window; nested ranges included), its GPU
    span, and whether the range waited for that work or only timed its launches. Computed from the
    phase index the ``phases`` fact uses (:mod:`analyzer.facts.phase_index`)."""
    w = ctx.window
    nv = ranges_only(ctx.trace.nvtx)
    cols = list(nvtx_instances_columns())
    if len(nv) == 0:
        return pd.DataFrame({c: pd.Series(dtype="object" if c in _TEXT else "bool" if c == "waited"
                                          else "int64") for c in cols})
    ids = nv["range_id"].to_numpy(dtype=np.int64)
    idx = phase_index(ctx.store)
    gpu = idx.instance_gpu(ids, op_window=(w.start_ns, w.end_ns), busy=False)
    start = nv["start"].to_numpy(dtype=np.int64)
    end = nv["end"].to_numpy(dtype=np.int64)
    frame = pd.DataFrame({
        "range_id": ids,
        # text stays object, rows sharing the model's strings: from a bare object array the frame would
        # infer pandas' string dtype and copy every row's text (1.9 M ranges of a 1 GB torch.profiler
        # trace: ~2 GB, the analysis' peak)
        "name": _shared_text(nv["text"]),
        "path": _shared_text(column(nv, "path", "")),
        "depth": column(nv, "depth", 0).fillna(0).to_numpy(dtype=np.int64),
        "domain": _shared_text(column(nv, "domain", "")),
        "pid": column(nv, "pid", -1).fillna(-1).to_numpy(dtype=np.int64),
        "tid": column(nv, "tid", -1).fillna(-1).to_numpy(dtype=np.int64),
        "start": start,
        "end": end,
        "duration": end - start,
        "cpu_ns": np.maximum(0, np.minimum(end, w.end_ns) - np.maximum(start, w.start_ns)),
        **{c: gpu[c].to_numpy(dtype=np.int64) for c in ("gpu_ns", "gpu_ns_exclusive", "kernel_count",
                                                          "op_count", "sync_count")},
        "gpu_start": gpu["first_op_start"].to_numpy(dtype=np.int64),
        "gpu_end": gpu["last_op_end"].to_numpy(dtype=np.int64),
        **range_timing(start, end, gpu, idx.prev_op_end(ids)),
    })
    overlaps = (end > w.start_ns) & (start < w.end_ns)
    return frame.loc[overlaps | (frame["op_count"].to_numpy() > 0), cols].reset_index(drop=True)


def _shared_text(series: pd.Series) -> pd.Series:
    """:func:`text` of ``series`` with a fresh index, kept ``object`` in the frame it goes into."""
    return pd.Series(text(series).to_numpy(), dtype=object, copy=False)


def nvtx_instances_columns() -> tuple[str, ...]:
    from analyzer.facts.registry import FACTS

    return tuple(FACTS["nvtx_instances"].columns)


@fact(
    "nvtx_projection",
    columns={
        "name": "range text",
        "path": "range path, outermost first",
        "depth": "nesting depth (0 outermost)",
        "count": "range instances overlapping the window",
        "cpu_ns": "sum of instance durations clipped to the window (ns)",
        "cpu_mean_ns": "mean instance duration (ns, unclipped)",
        "gpu_ns": "GPU op time launched inside the range or nested ranges (ns, inclusive)",
        "gpu_ns_exclusive": "GPU op time whose innermost range is this range (ns)",
        "kernel_count": "kernels launched inside the range or nested ranges",
        "op_count": "GPU ops (kernels, copies, memsets) launched inside, inclusive",
        "gpu_share": "gpu_ns / GPU op time in the window (0..1)",
        **AGGREGATE_TIMING_COLUMNS,
    },
    requires=("nvtx_instances", "gpu_ops"),
    scope_keys=("path", "name"),
)
def nvtx_projection(ctx: FactContext) -> pd.DataFrame:
    """Per NVTX range name and path: instance count, CPU time, the GPU time of ops launched inside
    (inclusive of nested ranges, and exclusive), the GPU span of that work, whether the instances
    waited for it, and which number measures the range."""
    inst = ctx.get("nvtx_instances")
    cols = list(FACTS["nvtx_projection"].columns)
    if inst.empty:
        return pd.DataFrame({c: pd.Series(dtype="object" if c in _TEXT | {"waited"} else "int64")
                             for c in cols})
    # one integer code per (name, path), numbered by first appearance like groupby(sort=False) on the
    # two text columns (which hashed both texts of every instance twice: here and for the timing)
    name_codes, _ = pd.factorize(inst["name"], use_na_sentinel=False)
    path_codes, path_uniques = pd.factorize(inst["path"], use_na_sentinel=False)
    group, _ = pd.factorize(name_codes.astype(np.int64) * len(path_uniques) + path_codes)
    g = inst.groupby(group, sort=False)
    out = g.agg(
        depth=("depth", "min"),
        count=("range_id", "size"),
        cpu_ns=("cpu_ns", "sum"),
        cpu_mean_ns=("duration", "mean"),
        gpu_ns=("gpu_ns", "sum"),
        gpu_ns_exclusive=("gpu_ns_exclusive", "sum"),
        kernel_count=("kernel_count", "sum"),
        op_count=("op_count", "sum"),
    ).reset_index(drop=True)
    first = np.unique(group, return_index=True)[1]  # codes 0.. in first-appearance order
    # typed as the groupby keys were (the frame infers the text dtype from the values)
    out.insert(0, "name", inst["name"].iloc[first].to_numpy(object))
    out.insert(1, "path", inst["path"].iloc[first].to_numpy(object))
    total = float(_gpu_ops_in_window(ctx)["duration"].sum())
    out["gpu_share"] = out["gpu_ns"] / total if total > 0 else 0.0
    timing = aggregate_timing(inst.assign(_group=group), "_group", cpu="duration")
    out["_group"] = np.arange(len(out))
    out = out.merge(timing, on="_group", how="left", sort=False)
    return out.sort_values(["gpu_ns", "cpu_ns"], ascending=False, ignore_index=True)[cols]
