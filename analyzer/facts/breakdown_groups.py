"""Fix groups of the timeline breakdown: launch-bound ranges that one standard fix covers together.
torch.compile's ``mode="reduce-overhead"`` records every compiled region in CUDA graphs at once, so the
phases whose one-by-one launches are mostly Inductor's are one group (one finding, their sum); every other
phase is its own group. Split from :mod:`analyzer.facts.breakdown`, which computes the table."""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.facts._util import column, text_codes
from analyzer.facts.breakdown_ranges import generic_keys
from analyzer.facts.launch_loops import TENSOR_LOOP_PREFIX, per_tensor_flags
from analyzer.facts.registry import FactContext

#: a phase is compiled code when at least this share of the kernels it launches one by one are
#: Inductor's (torch.compile default mode: 56% in compile_train's forward and backward, the rest cuBLAS
#: GEMMs and eager copies; 0 in every eager workload)
COMPILED_SHARE = 0.25
#: a phase is graphed when at least this share of its kernel time ran in CUDA graph replays: torch.compile's
#: reduce-overhead fix is in place there, and the phase joins no group of compiled phases still to graph
#: (launch-bound itself tells graph launches from eager ones per gap: ``graph_launch``). Every committed
#: phase is at either end: 97-100% (decode_eager_fixed, host_sync_graph*_fixed, compile_train_fixed's
#: forward and backward, the vLLM/SGLang decode traces) or 0%
GRAPHED_SHARE = 0.5
#: a phase is a per-tensor loop when at least this share of the kernels it launches one by one are in
#: per-tensor loops (:func:`analyzer.facts.launch_loops.per_tensor_flags`); a device's such phases are
#: one fix group (``torch._foreach_*`` or a fused optimizer replaces every loop)
PER_TENSOR_SHARE = 0.5
#: a device's groups with less eager launch-bound time than this, or than this share of the device's, are
#: joined into ``N other ranges`` (:func:`_other_ranges`): launch-bound's ``min_impact`` and
#: ``min_range_share`` defaults, under which no group is stated on its own
OTHER_MIN_NS = 2_000_000
OTHER_MIN_SHARE = 0.10
#: ...unless one of them holds more than this share of their sum (compile_train's eager optimizer, 96% of
#: its 5.9 ms remainder beside 0.2 ms of the step's own time)
OTHER_MAX_ONE = 0.75
#: a group's name lists at most this many phases (``A + B + C + 5 more``), its ``group_parts`` at most
#: this many with their shares (``..., 5 more 1.2 ms (3%)``): a step of many compiled ranges stays readable
NAMED_PHASES = 4


def _labels(device: np.ndarray, phase: np.ndarray, member: np.ndarray) -> dict[int, str]:
    """Per device, the name of its group of the phases ``member`` marks (:func:`group_name`), where it has
    more than one (the time outside every range, phase ``""``, stays the device's own finding)."""
    members: dict[int, set[str]] = {}
    for d, p in zip(device[member], phase[member]):
        if p:
            members.setdefault(int(d), set()).add(str(p))
    return {d: group_name(ps) for d, ps in members.items() if len(ps) > 1}


def _other_ranges(out: pd.DataFrame, group: np.ndarray, is_range: np.ndarray) -> list[str]:
    """Join (in place in ``group``) each device's groups too small for a launch-bound finding of their own
    (eager launch-bound time under :data:`OTHER_MIN_NS` or under :data:`OTHER_MIN_SHARE` of the device's)
    into one, ``N other ranges``, where there are several, together they pass both and none holds more
    than :data:`OTHER_MAX_ONE` of their sum (then it is that range, too small alone): launch-bound time
    spread over many small ranges is still stated, so the verdict and the breakdown agree. The time
    outside every range (phase ``""``) stays its own. Returns the new groups' names."""
    eager = is_range & (out["cause"] == "launch_bound").to_numpy() & (out["graph_launch"].to_numpy() == 0)
    if not eager.any():
        return []
    device = out["device"].to_numpy(dtype=np.int64)
    per = pd.Series(out["duration_ns"].to_numpy(dtype=np.int64)[eager]).groupby(
        [device[eager], group[eager]], sort=True).sum()
    names = []
    for d, block in per.groupby(level=0, sort=True):
        total = float(block.sum())
        minor = [str(g) for (_, g), v in block.items() if g and (v < OTHER_MIN_NS or v < OTHER_MIN_SHARE * total)]
        sizes = [float(block[(d, g)]) for g in minor]
        rest = sum(sizes)
        # a remainder mostly one range is that range, which the rule judged too small: no group
        if len(minor) < 2 or rest < OTHER_MIN_NS or rest < OTHER_MIN_SHARE * total or max(sizes) > OTHER_MAX_ONE * rest:
            continue
        rows = (device == d) & np.isin(group, minor) & is_range
        name = f"{len(set(out['phase'].to_numpy(dtype=object)[rows]))} other ranges"
        group[rows] = name
        names.append(name)
    return names


def group_name(phases: set[str]) -> str:
    """The fix group's name: its phases in name order joined by ``" + "``, the first
    :data:`NAMED_PHASES` - 1 and a count when there are more than :data:`NAMED_PHASES`."""
    names = sorted(phases)
    if len(names) > NAMED_PHASES:
        names = names[:NAMED_PHASES - 1] + [f"{len(names) - NAMED_PHASES + 1} more"]
    return " + ".join(names)


def _parts_text(items: list[tuple[str, int]], total: float) -> str:
    """``phase 25.7 ms (65%), ...``, largest first, at most :data:`NAMED_PHASES` entries."""
    if len(items) > NAMED_PHASES:
        rest = sum(v for _, v in items[NAMED_PHASES - 1:])
        items = items[:NAMED_PHASES - 1] + [(f"{len(items) - NAMED_PHASES + 1} more", rest)]
    return ", ".join(f"{p} {v / 1e6:.1f} ms ({v / total:.0%})" if total > 0 else f"{p} 0.0 ms" for p, v in items)


def kernel_shares(ctx: FactContext, phase_of: dict[str, str]) -> dict[tuple[int, str], tuple[float, float, float]]:
    """Per (device, phase), of the kernels starting in the window: ``(compiled_share, graphed_share,
    per_tensor_share)``.
    ``compiled_share``: of the kernels launched one by one (``in_graph`` 0), the share torch.compile's
    Inductor generated (:func:`analyzer.loading.kernel_names.is_inductor_kernel`); ``graphed_share``: the
    kernel time CUDA graph replays ran (``in_graph`` 1, a node-level traced graph's kernel or one of
    torch.profiler's; 2, a whole execution of nsys' default graph-level trace) over all kernel time.
    Kernel names and NVTX paths are read once per distinct text."""
    from analyzer.loading.kernel_names import is_inductor_kernel
    from analyzer.loading.model import NOT_IN_GRAPH

    ops = ctx.get("gpu_ops")
    if ops.empty:
        return {}
    w = ctx.window
    start = ops["start"].to_numpy(dtype=np.int64)
    op_codes, op_labels = text_codes(ops["op"])  # a categorical's own codes: no text compared per row
    pos = np.flatnonzero((op_labels == "kernel")[op_codes] & (start >= w.start_ns) & (start < w.end_ns))
    if not len(pos):
        return {}
    if "in_graph" in ops:
        eager = ops["in_graph"].to_numpy()[pos]
        eager = np.where(pd.isna(eager), NOT_IN_GRAPH, eager).astype(np.int64) == NOT_IN_GRAPH
    else:
        eager = np.ones(len(pos), dtype=bool)
    duration = ops["duration"].to_numpy(dtype=np.float64)[pos]
    all_names, names = text_codes(ops["label"])
    inductor = np.array([is_inductor_kernel(str(x)) for x in names], dtype=bool)[all_names[pos]] & eager
    all_paths, paths = text_codes(ops["nvtx_path"])
    phases = np.array([phase_of.get(k, "") for k in generic_keys(paths)], dtype=object)
    # each distinct path's phase coded once, then read per kernel (no text hashed per kernel)
    path_phase, phase_labels = pd.factorize(phases)
    phase_codes = path_phase[all_paths[pos]]
    dev_codes, dev_values = pd.factorize(ops["device"].to_numpy(dtype=np.int64)[pos])
    n_phase = max(len(phase_labels), 1)
    key = dev_codes.astype(np.int64) * n_phase + phase_codes
    space = len(dev_values) * n_phase
    launches = np.bincount(key, weights=eager, minlength=space)
    generated = np.bincount(key, weights=inductor, minlength=space)
    kernel_ns = np.bincount(key, weights=duration, minlength=space)
    graphed_ns = np.bincount(key, weights=np.where(eager, 0.0, duration), minlength=space)

    def launch_column(name: str) -> np.ndarray:  # a launch's thread and call start, -1 where the trace has none
        return pd.to_numeric(column(ops, name, -1)).fillna(-1).to_numpy(dtype=np.int64)[pos]

    looped = per_tensor_flags(all_names[pos], names, launch_column("tid"), launch_column("api_start"),
                              ctx.options.get("categories_file") or None) & eager
    in_loops = np.bincount(key, weights=looped, minlength=space)
    out: dict[tuple[int, str], tuple[float, float, float]] = {}
    kernels = np.bincount(key, minlength=space)
    for k in np.flatnonzero(kernels):
        d, p = divmod(int(k), n_phase)
        out[(int(dev_values[d]), str(phase_labels[p]))] = (  # kernels of no duration: graphed by count
            float(generated[k] / launches[k]) if launches[k] else 0.0,
            float(graphed_ns[k] / kernel_ns[k]) if kernel_ns[k] > 0 else float(1 - launches[k] / kernels[k]),
            float(in_loops[k] / launches[k]) if launches[k] else 0.0)
    return out


def graph_launch_rows(out: pd.DataFrame) -> None:
    """The ``graph_launch`` and ``device_graph_launch_ns`` columns of :func:`timeline_breakdown` (in place):
    which launch_bound rows are time spent launching CUDA graph replays
    (:func:`analyzer.facts.breakdown.graph_launch_time`: read once per distinct detail), and their window
    total per device."""
    from analyzer.facts.breakdown import graph_launch_time

    codes, details = text_codes(out["detail"])
    per_detail = np.array([graph_launch_time(str(x)) for x in details] + [False], dtype=bool)
    flag = per_detail[np.where(codes < 0, len(details), codes)] & (out["cause"] == "launch_bound").to_numpy()
    out["graph_launch"] = flag.astype(np.int64)
    in_window = flag & (out["scope"] == "window").to_numpy()
    per_device = out.loc[in_window].groupby("device")["duration_ns"].sum()
    out["device_graph_launch_ns"] = out["device"].map(per_device).fillna(0).to_numpy(dtype=np.int64)


def fix_groups(ctx: FactContext, out: pd.DataFrame, is_range: np.ndarray, held_rows: np.ndarray) -> None:
    """The ``compiled_share``, ``graphed_share``, ``graphed``, ``compiled``, ``fix_group``, ``group_ns``, ``group_host_held_ns`` and
    ``group_parts`` columns of :func:`timeline_breakdown` (in place; see :data:`BREAKDOWN_COLUMNS`). The
    standard fix for launch-bound compiled code, ``torch.compile(mode="reduce-overhead")``, records every
    compiled region in CUDA graphs at once (forward and backward alike): its phases are one fix."""
    phase = out["phase"].to_numpy(dtype=object)
    device = out["device"].to_numpy(dtype=np.int64)
    phase_of = {str(k): str(p) for k, p in zip(out["key"].to_numpy(dtype=object)[is_range], phase[is_range])}
    shares = kernel_shares(ctx, phase_of)
    of_row = [shares.get((int(d), str(p)), (0.0, 0.0, 0.0)) if r else (0.0, 0.0, 0.0)
              for d, p, r in zip(device, phase, is_range)]
    share = np.array([c for c, _, _ in of_row], dtype=np.float64)
    graphed_share = np.array([g for _, g, _ in of_row], dtype=np.float64)
    tensor_share = np.array([t for _, _, t in of_row], dtype=np.float64)
    graphed = is_range & (graphed_share >= GRAPHED_SHARE)
    # a graphed phase's fix is done: it joins no group of compiled phases still to graph
    compiled = is_range & (share >= COMPILED_SHARE) & ~graphed
    # ranges whose one-by-one launches are mostly per-tensor loops: one foreach / fused change fixes them all
    loop_named = np.array([str(p).rpartition("/")[2].startswith(TENSOR_LOOP_PREFIX) for p in phase], dtype=bool)
    per_tensor = is_range & ~compiled & ~graphed & ((tensor_share >= PER_TENSOR_SHARE) | loop_named)
    label_c, label_t = _labels(device, phase, compiled), _labels(device, phase, per_tensor)
    group = np.array([label_c[int(d)] if c and p and int(d) in label_c else
                      label_t[int(d)] if t and p and int(d) in label_t else (p if r else "")
                      for d, p, c, t, r in zip(device, phase, compiled, per_tensor, is_range)], dtype=object)
    label = {i: v for i, v in enumerate([*label_c.values(), *label_t.values(), *_other_ranges(out, group, is_range)])}
    out["compiled_share"] = share
    out["graphed_share"] = graphed_share
    out["graphed"] = graphed.astype(np.int64)
    out["compiled"] = compiled.astype(np.int64)
    out["per_tensor_share"] = tensor_share
    out["per_tensor"] = (per_tensor & np.isin(group, list(label_t.values()))).astype(np.int64)
    out["fix_group"] = group
    by_group = [out["device"], out["fix_group"]]
    out["group_ns"] = np.where(is_range, out["duration_ns"].where(is_range, 0).groupby(by_group).transform("sum"), 0)
    out["group_host_held_ns"] = np.where(
        is_range, out["duration_ns"].where(held_rows, 0).groupby(by_group).transform("sum"), 0)
    parts = np.full(len(out), "", dtype=object)
    several = is_range & np.isin(group, list(label.values())) if label else np.zeros(len(out), dtype=bool)
    if several.any():
        rows = out.loc[several]
        per = rows.groupby(["device", "fix_group", "cause", "phase"], sort=False)["duration_ns"].sum()
        text_of: dict[tuple[int, str, str], str] = {}
        for (d, g, c), block in per.groupby(level=[0, 1, 2], sort=False):
            total = float(block.sum())
            items = sorted(((str(k[3]), int(v)) for k, v in block.items()), key=lambda kv: (-kv[1], kv[0]))
            text_of[(int(d), str(g), str(c))] = _parts_text(items, total)
        parts[several] = [text_of[(int(d), str(g), str(c))] for d, g, c in
                          zip(rows["device"], rows["fix_group"], rows["cause"])]
    out["group_parts"] = parts

