"""Range keys of the timeline breakdown: the program's own NVTX paths made generic (``step_N/...``), the
window's step keys, the level under the step (the breakdown's ``phase``), and the segments a breakdown
row sums (where a finding read from the breakdown lies on the GPU timeline). Split from
:mod:`analyzer.facts.breakdown`, which computes the segments and the table."""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.arrays import sorted_distinct
from analyzer.facts._util import column, generic_path, text, text_codes
from analyzer.facts.nvtx_ranges import ranges_only
from analyzer.facts.registry import FactContext


def generic_keys(paths: np.ndarray) -> list[str]:
    """Each (distinct) NVTX path as the program's own ranges name it: cut before the first framework
    operator (``aten::add_``, autograd nodes: :data:`analyzer.facts.nvtx.OPERATOR_TEXTS`, which
    torch.profiler traces nest under the annotations) and with enumerated components made generic
    (``step_12/load_batch`` -> ``step_N/load_batch``: the same code every step)."""
    from analyzer.facts.nvtx import OPERATOR_TEXTS

    def key(path: str) -> str:
        parts = path.split("/")
        cut = next((i for i, p in enumerate(parts) if OPERATOR_TEXTS.match(p)), len(parts))
        return generic_path("/".join(parts[:cut]))

    return [key(str(x)) for x in paths]


def step_range_keys(ctx: FactContext) -> tuple[str, ...]:
    """The range keys of the window's NVTX steps (their paths made generic: ``step_N``,
    ``train/step_N``), none when the steps are not NVTX ranges."""
    spans = ctx.window.steps
    nv = ctx.trace.nvtx
    if spans is None or spans.source != "nvtx" or not spans.range_ids or nv.empty or "range_id" not in nv:
        return ()
    from analyzer.facts.nvtx import positions_of

    pos = positions_of(nv, np.asarray(spans.range_ids, dtype=np.int64))
    pos = pos[pos >= 0]
    if not len(pos):
        return ()
    paths = text(column(nv, "path", "")).to_numpy(dtype=object)[pos]
    return tuple(sorted({k for k in generic_keys(np.unique(paths.astype(str)).astype(object)) if k}))


def instance_counts(ctx: FactContext) -> dict[str, int]:
    """NVTX range instances in the trace per generic text (``step_N``: every ``step_12``)."""
    nv = ranges_only(ctx.trace.nvtx)
    if nv.empty:
        return {}
    codes, labels = text_codes(nv["text"])
    counts = np.bincount(codes, minlength=len(labels)) if len(codes) else np.zeros(len(labels), dtype=np.int64)
    out: dict[str, int] = {}
    for label, n in zip(labels, counts.tolist()):
        key = generic_path(str(label))
        out[key] = out.get(key, 0) + int(n)
    return out


#: a step range whose own time is at most this share of its time, with one child range holding the
#: rest, is a wrapper (``ProfilerStep#N`` around the program's ``step_N``): its child is the step
WRAPPER_OWN_SHARE = 0.1


def phase_keys(ctx: FactContext, keys: np.ndarray, durations: np.ndarray) -> list[str]:
    """Each range key at the level under the step (the breakdown's ``phase``): under an NVTX step range
    ``S``, ``S/child`` (``S`` itself for the step's own time); elsewhere the key's outermost component;
    ``''`` stays ``''``. A step that only wraps one range (its own time at most
    :data:`WRAPPER_OWN_SHARE` of its time, every nested range under one child, e.g. torch.profiler's
    ``ProfilerStep#N`` around ``step_N``) is read through: the level under the child counts."""
    time: dict[str, float] = {}
    for k, d in zip(keys, durations):
        time[str(k)] = time.get(str(k), 0.0) + float(d)
    steps = []
    instances: dict[str, int] | None = None
    for s in step_range_keys(ctx):
        while True:
            under = {k: t for k, t in time.items() if k.startswith(s + "/")}
            children = {k[len(s) + 1:].split("/", 1)[0] for k in under}
            total = sum(under.values()) + time.get(s, 0.0)
            if len(children) != 1 or total <= 0 or time.get(s, 0.0) > WRAPPER_OWN_SHARE * total:
                break
            child = next(iter(children))
            if instances is None:
                instances = instance_counts(ctx)
            # a wrapper holds one instance of its child (several: micro-batches, layers: the level itself)
            if instances.get(child, 0) > instances.get(s.rsplit("/", 1)[-1], 0):
                break
            s = s + "/" + child
        steps.append(s)
    out: dict[str, str] = {}
    for key in time:
        phase = key.split("/", 1)[0]
        for s in sorted(steps, key=len, reverse=True):
            if key == s or s.startswith(key + "/"):
                phase = key  # the step (or a wrapper around it): its own time
                break
            if key.startswith(s + "/"):
                phase = s + "/" + key[len(s) + 1:].split("/", 1)[0]
                break
        out[key] = phase
    return [out[str(k)] for k in keys]


def breakdown_row_segments(rows: pd.DataFrame, segments: pd.DataFrame) -> pd.DataFrame:
    """The segments (rows of ``timeline_segments``) that ``rows`` of ``timeline_breakdown`` sum: those of
    the same device, cause and detail, and of the same step (``step`` rows) or range (``range`` rows).
    Where a finding's time lies on the GPU timeline when it is read from the breakdown."""
    if rows.empty or segments.empty:
        return segments.iloc[0:0]
    # matched on codes: each text column's distinct texts get one number (equal texts: one code), the
    # wanted rows are looked up among those texts; the segments are narrowed first on each column's own
    # (narrow) codes, the combined key made for the candidates only (no per-segment 64-bit temporaries:
    # a 10 M-kernel trace has about 48 M segments)
    cache: dict[str, tuple[np.ndarray, np.ndarray, dict[str, int]]] = {}

    def codes_of(name: str) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
        """``(codes, remap, canon)``: the column's own codes, each code's canonical number, text -> number."""
        if name not in cache:
            codes, labels = text_codes(segments[name])
            canon: dict[str, int] = {}
            for i, label in enumerate(labels.tolist()):
                canon.setdefault(str(label), i)
            remap = np.array([canon[str(x)] for x in labels.tolist()], dtype=np.int64)
            cache[name] = (codes, remap, canon)
        return cache[name]

    seg_dev = segments["device"].to_numpy()
    dev_values = sorted_distinct(seg_dev).astype(np.int64)
    parts = []
    for scope, key_column in (("window", None), ("step", "step"), ("range", "range_key")):
        mine = rows.loc[rows["scope"].to_numpy(object) == scope]
        if mine.empty:
            continue
        on = ["cause", "detail"] + ([key_column] if key_column else [])
        want_dev = mine["device"].to_numpy(np.int64)
        wd = np.searchsorted(dev_values, want_dev)
        ok = (wd < len(dev_values)) & (dev_values[np.minimum(wd, len(dev_values) - 1)] == want_dev)
        want_col = {"cause": mine["cause"], "detail": mine["detail"]}
        if key_column:
            want_col[key_column] = mine["key"]
        wanted_of = {}
        for name in on:
            _, _, canon = codes_of(name)
            wanted_of[name] = np.array([canon.get(str(x), -1) for x in want_col[name].to_numpy(object).tolist()],
                                       dtype=np.int64)
            ok &= wanted_of[name] >= 0
        # candidates: segments whose device and every column's value some wanted row has
        cand: np.ndarray | None = None
        for name in on:
            codes, remap, _ = codes_of(name)
            hit = np.isin(remap, wanted_of[name][ok])[codes]
            cand = hit if cand is None else cand & hit
        assert cand is not None
        if len(dev_values) > 1:
            cand &= np.isin(seg_dev, dev_values[wd[ok]])
        at = np.flatnonzero(cand)
        del cand
        seg_key = np.searchsorted(dev_values, seg_dev[at]).astype(np.int64)
        want_key = wd.astype(np.int64)
        for name in on:
            codes, remap, canon = codes_of(name)
            width = max(len(canon), 1)
            seg_key = seg_key * width + remap[codes[at]]
            want_key = want_key * width + wanted_of[name]
        parts.append(at[np.isin(seg_key, want_key[ok])])
    pos = sorted_distinct(np.concatenate(parts)) if parts else np.empty(0, dtype=np.int64)
    return segments.iloc[pos]
