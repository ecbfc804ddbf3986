"""ATen's slow fallback kernels on the GPU, and what the standard fix buys (issue 27).

Some PyTorch ops have a fast implementation (cuDNN) and a slow one of ATen's own, chosen by the tensors'
memory format, dtype or a backend flag. The slow one shows in a trace by its kernel names:

* ``conv_depthwise2d_forward_kernel`` (and ``_generic``), ``conv_depthwise2d_backward_kernel``,
  ``conv_depthwise2d_grad_weight_kernel``: a depthwise convolution on NCHW tensors (every dtype but
  some fp16 shapes); in ``torch.channels_last`` cuDNN runs it with its NHWC kernels;
* ``conv_depthwise3d_cuda_kernel``, ``..._backward_input_kernel``, ``..._backward_weight_kernel``: the
  same in 3-d (NCDHW; fix ``torch.channels_last_3d``);
* ``im2col_kernel`` / ``col2im_kernel`` (``slow_conv2d``, ``slow_conv_dilated2d``,
  ``slow_conv_transpose2d``) and ``vol2col_kernel`` / ``col2vol_kernel`` (``slow_conv3d``): unfused
  convolutions (copy the patches out, then a GEMM), which ATen runs when cuDNN is not used
  (``torch.backends.cudnn.enabled = False``, or a case cuDNN does not take).

A kernel counts when its full name is in ``at::native`` (cuDNN has kernels of similar names) or the
trace records no namespace at all. One row per such kernel starting in the window, with its family, the
direction its name says (depthwise kernels only), the dtype of its first template argument, and what the
fix would save: the kernel's time over the share of the slow op's GPU time the fallback kernels take,
times ``1 - 1 / speedup``, with ``speedup`` and ``share`` measured by ``workloads/conv_layouts.py``
(the table in ``analyzer/hardware/conv_layouts.json``, :mod:`analyzer.hardware.fallbacks`). The
assumption: the trace's shapes gain what the benchmark's shapes gained (their median) on this GPU.

What a shorter kernel buys is bounded by the host, as for copy kernels: ``host_wait_ns`` is the time the
threads that launched these kernels spent blocked in synchronizing calls in the window (the host's slack
before its launches set the pace; see :mod:`analyzer.facts.copy_kernels`).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyzer.facts._util import column, frame_memo, text, text_codes
from analyzer.facts.api import step_index
from analyzer.facts.breakdown_ranges import generic_keys
from analyzer.facts.copy_kernels import launching_threads_wait
from analyzer.facts.registry import FactContext, fact
from analyzer.hardware.fallbacks import fallback_factor

#: short kernel name -> (family, direction: "forward", "backward" or "" when the name does not say)
FALLBACK_KERNELS: dict[str, tuple[str, str]] = {
    "conv_depthwise2d_forward_kernel": ("conv_depthwise2d", "forward"),
    "conv_depthwise2d_forward_kernel_generic": ("conv_depthwise2d", "forward"),
    "conv_depthwise2d_backward_kernel": ("conv_depthwise2d", "backward"),
    "conv_depthwise2d_grad_weight_kernel": ("conv_depthwise2d", "backward"),
    "conv_depthwise3d_cuda_kernel": ("conv_depthwise3d", "forward"),
    "conv_depthwise3d_cuda_backward_input_kernel": ("conv_depthwise3d", "backward"),
    "conv_depthwise3d_cuda_backward_weight_kernel": ("conv_depthwise3d", "backward"),
    "im2col_kernel": ("im2col", ""),
    "col2im_kernel": ("im2col", ""),
    "vol2col_kernel": ("vol2col", ""),
    "col2vol_kernel": ("vol2col", ""),
}
#: what replaces each family's kernels
FIXES: dict[str, str] = {
    "conv_depthwise2d": "channels_last (cuDNN's NHWC depthwise kernels)",
    "conv_depthwise3d": "channels_last_3d (cuDNN's NDHWC kernels, measured slower: no saving)",
    "im2col": "cuDNN convolution (torch.backends.cudnn.enabled)",
    "vol2col": "cuDNN convolution (torch.backends.cudnn.enabled)",
}
_NAME = re.compile(r"(?:^|[\s:])(" + "|".join(sorted(FALLBACK_KERNELS, key=len, reverse=True)) + r")\b")
_DTYPES = (("c10::BFloat16", "bf16"), ("c10::Half", "fp16"), ("float", "fp32"), ("double", "fp64"))
_TEMPLATE = re.compile(r"<\s*(?:(?:\(int\))?\d+,\s*)*(c10::BFloat16|c10::Half|float|double)\b")

FALLBACK_KERNEL_COLUMNS = {
    "device": "GPU device id",
    "start": "kernel start (ns)",
    "end": "kernel end (ns)",
    "duration": "kernel duration (ns)",
    "short_name": "kernel short name",
    "family": "conv_depthwise2d, conv_depthwise3d, im2col (unfused 2-d convolution) or vol2col (unfused 3-d)",
    "direction": "forward or backward (depthwise kernels' names say it), '' for im2col / vol2col",
    "dtype": "bf16, fp16, fp32 or fp64 from the kernel's template argument, '' when the name does not say",
    "fix": "what replaces the family's kernels (channels_last: cuDNN's NHWC kernels; cuDNN convolution)",
    "speedup": "measured op speed-up of the fix (slow / fixed, the median over the benchmark's shapes of "
               "this family, dtype and direction; NaN: not measured)",
    "fallback_share": "measured share of the slow op's GPU time in the fallback kernels (the op's time is "
                      "theirs over this share; NaN: not measured)",
    "saving_ns": "what the fix saves on this kernel's op (ns): duration / fallback_share * (1 - 1 / speedup), "
                 "0 where the fix measured slower (speedup <= 1) or was not measured",
    "basis": "where the factor comes from (the benchmark's GPU, date, shapes), as a message prints it",
    "nvtx_path": "NVTX path of the kernel ('' outside every range)",
    "range_key": "nvtx_path as the program's ranges name it, enumerated parts made generic (step_N/...)",
    "step": "index of the window's step the kernel starts in (-1 outside every step or without steps)",
    "host_wait_ns": "per device: time the threads that launched its fallback kernels spent blocked in "
                    "synchronizing calls in the window (ns), the host's slack before it bounds the step",
}

_INTS = ("device", "start", "end", "duration", "step", "host_wait_ns")
_FLOATS = ("speedup", "fallback_share", "saving_ns")


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="int64" if c in _INTS else ("float64" if c in _FLOATS else object))
                         for c in FALLBACK_KERNEL_COLUMNS})


def classify(full: str, short: str) -> tuple[str, str, str] | None:
    """(family, direction, dtype) of an ATen fallback kernel, None for any other kernel. The short name
    must be one of :data:`FALLBACK_KERNELS`; a full name with a namespace must be ATen's (``at::native``)."""
    m = _NAME.search(short) if short else None
    if m is None:
        m = _NAME.search(full)
    if m is None or m.group(1) not in FALLBACK_KERNELS:
        return None
    if "::" in full and "at::native" not in full:
        return None
    family, direction = FALLBACK_KERNELS[m.group(1)]
    at = full.find(m.group(1))
    t = _TEMPLATE.search(full, at + len(m.group(1)) if at >= 0 else 0)
    dtype = dict(_DTYPES).get(t.group(1), "") if t else ""
    return family, direction, dtype


def _full_names_only(k: pd.DataFrame) -> bool:
    """Whether the trace's short names are all empty (every kernel then classified by its full name)."""
    s = k["short_name"]
    return bool(s.isna().all()) or bool((text(s.iloc[:1000]) == "").all())


@fact("fallback_kernels", columns=FALLBACK_KERNEL_COLUMNS, requires=("kernel_categories",),
      scope_keys=("device", "nvtx_path", "short_name", "family"), per_kernel=True)
def fallback_kernels(ctx: FactContext) -> pd.DataFrame:
    """One row per ATen fallback kernel (depthwise convolutions on NCHW, unfused im2col / vol2col
    convolutions) in the window, with what the measured fix saves (see
    :mod:`analyzer.facts.fallback_kernels`)."""
    k = ctx.get("kernel_categories")
    if k.empty:
        return _empty()
    # per distinct short name first (most traces: none is a fallback's), then per distinct (name, short
    # name) pair of the kernels whose short name is one, never per kernel
    s_codes, s_labels = frame_memo(k, "text_codes:short_name", lambda: text_codes(k["short_name"]))
    named = np.array([bool(_NAME.search(str(u))) for u in s_labels], dtype=bool)
    cand = named[s_codes] if len(s_labels) else np.zeros(len(k), dtype=bool)
    if not cand.any() and not _full_names_only(k):
        return _empty()
    codes, labels = frame_memo(k, "text_codes:name", lambda: text_codes(k["name"]))
    if not cand.any():  # short names missing (a trace with full names only): look at every distinct name
        cand = np.ones(len(k), dtype=bool)
    at = np.flatnonzero(cand)
    pair = codes[at].astype(np.int64) * (len(s_labels) + 1) + s_codes[at]
    uniq, inv = np.unique(pair, return_inverse=True)
    found = [classify(str(labels[u // (len(s_labels) + 1)]), str(s_labels[u % (len(s_labels) + 1)]))
             for u in uniq]
    hit = np.array([f is not None for f in found], dtype=bool)
    inverse = np.full(len(k), -1, dtype=np.int64)
    inverse[at] = inv
    mine = np.zeros(len(k), dtype=bool)
    mine[at] = hit[inv]
    if not mine.any():
        return _empty()
    info = np.array([f if f is not None else ("", "", "") for f in found], dtype=object).reshape(len(found), 3)
    which = inverse[mine]
    c = k.loc[mine]
    start = c["start"].to_numpy(dtype=np.int64)
    dur = c["duration"].to_numpy(dtype=np.int64)
    family, direction, dtype = info[which, 0], info[which, 1], info[which, 2]
    speed = np.full(len(uniq), np.nan)
    share = np.full(len(uniq), np.nan)
    per_ns = np.zeros(len(uniq))
    basis = np.full(len(uniq), "", dtype=object)
    for i in np.flatnonzero(hit):
        fam, dirn, dt = found[i]  # type: ignore[misc]
        f = fallback_factor(fam, dt, dirn or "any")
        if f is not None:
            speed[i], share[i], per_ns[i], basis[i] = f.speedup, f.share, f.saving_per_ns, f.basis()
    sp, sh = speed[which], share[which]
    saving = dur * per_ns[which]
    spans = ctx.window.steps
    out = pd.DataFrame({
        "device": c["device"].to_numpy(dtype=np.int64), "start": start,
        "end": c["end"].to_numpy(dtype=np.int64), "duration": dur,
        "short_name": text(c["short_name"]).to_numpy(dtype=object),
        "family": family, "direction": direction, "dtype": dtype,
        "fix": np.array([FIXES[f] for f in family], dtype=object),
        "speedup": sp, "fallback_share": sh, "saving_ns": saving, "basis": basis[which],
        "nvtx_path": text(column(c, "nvtx_path", "")).to_numpy(dtype=object),
        "step": step_index(start, tuple(zip(spans.starts, spans.ends)) if spans else ()),
    })
    order = np.lexsort((start, out["device"].to_numpy()))
    out = out.iloc[order].reset_index(drop=True)
    p_codes, p_uniques = pd.factorize(out["nvtx_path"])
    keys = np.array(generic_keys(np.asarray(p_uniques, dtype=object)) + [""], dtype=object)
    out.insert(out.columns.get_loc("step"), "range_key", keys[p_codes])
    out["host_wait_ns"] = launching_threads_wait(ctx, c.iloc[order], out["device"].to_numpy(dtype=np.int64))
    return out
