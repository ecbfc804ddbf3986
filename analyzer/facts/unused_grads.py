"""Gradients computed for parameters no optimizer clears: backward work whose result nobody reads (issue 27).

A linear probe or a fine-tune of the last layers is often written with the optimizer given only the
trained part (``AdamW(model.head.parameters())``) while the rest still has ``requires_grad=True``.
Autograd then runs the backward through the whole network and accumulates every weight's gradient into
a ``.grad`` tensor the optimizer never reads, and its ``zero_grad`` never clears, so they grow step after
step. Designed after seeing the fifth held-out batch (``workloads/unfrozen_backbone.py``).

torch.profiler records it; nsys does not. Each gradient reaches its parameter through one
``torch::autograd::AccumulateGrad`` node. A gradient the optimizer's ``zero_grad`` reset to ``None``
(PyTorch's default since 2.0) is stored by that node without arithmetic; a gradient nobody clears is
added into the old one (an ``aten::add_`` under the node), every step. In one backward pass, nodes of
both kinds say that some parameters' gradients are cleared between steps (the optimizer's) and others'
are not (nobody's). ``zero_grad(set_to_none=False)`` (every node adds) and gradient accumulation
(the first pass of a step stores, the later ones add: never both kinds in one pass) are not this.
An nsys recording has no autograd nodes (unless the program ran under ``emit_nvtx``): its backward looks
like any training step's, so this fact has no rows for it.

A backward pass is the run of kernels launched from autograd nodes (``autograd::engine::evaluate_function``
in their range path) with no other kernel launched between them (the next micro-batch's forward, the
optimizer). The autograd engine runs the nodes from the loss down: once the last cleared gradient is
stored, everything the pass still launches serves only gradients nobody reads (the network below the
lowest trained parameter). ``wasted_ns`` is that part's time on the GPU, from its first kernel's start
(or the end of the pass's earlier kernels, if later) to its last kernel's end: the kernels and the GPU's
idle time while the host launched them, which freezing the untrained part removes. Weight gradients of
untrained parameters computed before the last cleared one are not counted (an underestimate).

One row per backward pass in the window holding an ``AccumulateGrad`` node.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyzer.facts._util import column, frame_memo, text, text_codes
from analyzer.facts.api import step_index
from analyzer.facts.breakdown_ranges import generic_keys
from analyzer.facts.nvtx_ranges import parent_positions
from analyzer.facts.registry import FactContext, fact

#: the autograd node storing a gradient into its parameter's ``.grad``
ACCUMULATE = frozenset({"torch::autograd::AccumulateGrad", "AccumulateGrad"})
#: the operators that node runs to add a new gradient into an existing one (``grad += new`` in place;
#: out of place when the layouts differ)
ADDS = frozenset({"aten::add_", "aten::add"})
#: a range path component the autograd engine opens around each node it runs
ENGINE = "autograd::engine::evaluate_function"
_NODE = re.compile(r"autograd::engine::evaluate_function: (?:torch::autograd::)?([^/]+)")

UNUSED_GRAD_COLUMNS = {
    "device": "GPU device id (of the pass's kernels)",
    "pid": "process id",
    "step": "index of the window's step the pass starts in (-1 outside every step or without steps)",
    "start": "launch of the pass's first backward kernel (ns)",
    "end": "end of the pass's last backward kernel on the GPU (ns)",
    "nvtx_path": "the program's range the pass ran in (its generic key: step_N/backward; '' outside every range)",
    "accumulations": "AccumulateGrad nodes in the pass: parameters given a gradient",
    "fresh": "of them, storing a gradient that was cleared (None) since the last step: no add",
    "adding": "of them, adding into a gradient nobody cleared (aten::add_ under the node)",
    "passes": "per device: backward passes in the window holding AccumulateGrad nodes",
    "backward_kernels": "kernels the pass launched from autograd nodes",
    "backward_ns": "GPU span of the pass: its first kernel's start to its last kernel's end (ns)",
    "wasted_kernels": "kernels launched after the last fresh AccumulateGrad (0 without fresh and adding nodes)",
    "wasted_kernel_ns": "their kernel time (ns)",
    "wasted_ns": "their GPU span: first wasted kernel's start (or the end of the pass's earlier kernels, if "
                 "later) to the last one's end (ns): kernels and the idle time while the host launched them",
    "top_node": "the autograd node whose kernels took most of the wasted time (AddmmBackward0)",
}
_INTS = ("device", "pid", "step", "start", "end", "accumulations", "fresh", "adding", "passes", "backward_kernels",
         "backward_ns", "wasted_kernels", "wasted_kernel_ns", "wasted_ns")


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="int64" if c in _INTS else object) for c in UNUSED_GRAD_COLUMNS})


@fact("unused_gradients", columns=UNUSED_GRAD_COLUMNS, requires=("kernel_categories",),
      scope_keys=("device", "nvtx_path"))
def unused_gradients(ctx: FactContext) -> pd.DataFrame:
    """One row per backward pass with AccumulateGrad nodes: how many stored cleared gradients, how many
    added into gradients nobody clears, and the GPU time the pass spent after its last cleared one (see
    :mod:`analyzer.facts.unused_grads`)."""
    nv = ctx.trace.nvtx
    if nv.empty:
        return _empty()
    codes, labels = frame_memo(nv, "text_codes:text", lambda: text_codes(nv["text"]))
    is_acc = np.array([str(u) in ACCUMULATE for u in labels], dtype=bool)
    if not is_acc.any():
        return _empty()
    w = ctx.window
    k = ctx.get("kernel_categories")
    if k.empty or "api_start" not in k.columns:
        return _empty()
    ks = k["start"].to_numpy(dtype=np.int64)
    k = k.loc[(ks >= w.start_ns) & (ks < w.end_ns)]
    launch = k["api_start"].to_numpy(dtype=np.int64)
    k = k.loc[launch >= 0]
    if k.empty:
        return _empty()
    is_add = np.array([str(u) in ADDS for u in labels], dtype=bool)
    n_start = nv["start"].to_numpy(dtype=np.int64)
    acc_pos = np.flatnonzero(is_acc[codes] & (n_start >= w.start_ns) & (n_start < w.end_ns))
    if not len(acc_pos):
        return _empty()
    parent = parent_positions(nv)
    add_parents = parent[is_add[codes]]
    adding = np.zeros(len(nv), dtype=bool)
    adding[add_parents[add_parents >= 0]] = True
    acc_start = n_start[acc_pos]
    acc_end = nv["end"].to_numpy(dtype=np.int64)[acc_pos]
    acc_adds = adding[acc_pos]
    acc_pid = column(nv, "pid", -1).fillna(-1).to_numpy(dtype=np.int64)[acc_pos]

    pcodes, plabels = text_codes(column(k, "nvtx_path", ""))
    bw_label = np.array([ENGINE in str(u) for u in plabels], dtype=bool)
    node = np.array([(m.group(1) if (m := _NODE.search(str(u))) else "") for u in plabels], dtype=object)
    keys = np.array(generic_keys(np.asarray(plabels, dtype=object)), dtype=object)
    bw = bw_label[pcodes]
    kpid = column(k, "pid", -1).fillna(-1).to_numpy(dtype=np.int64)
    launch = k["api_start"].to_numpy(dtype=np.int64)
    kstart = k["start"].to_numpy(dtype=np.int64)
    kend = k["end"].to_numpy(dtype=np.int64)
    kdur = k["duration"].to_numpy(dtype=np.int64)
    kdev = k["device"].to_numpy(dtype=np.int64)
    spans = ctx.window.steps
    bounds = tuple(zip(spans.starts, spans.ends)) if spans else ()
    rows: list[dict[str, object]] = []
    for pid in np.unique(kpid[bw]):
        mine = kpid == pid
        # passes: runs of backward launches with no other launch of the process between them
        other = np.sort(launch[mine & ~bw])
        sel = np.flatnonzero(mine & bw)
        sel = sel[np.argsort(launch[sel], kind="stable")]
        k_pass = np.searchsorted(other, launch[sel], side="right")
        a_sel = np.flatnonzero(acc_pid == pid) if (acc_pid >= 0).any() else np.arange(len(acc_pos))
        a_pass = np.searchsorted(other, acc_start[a_sel], side="right")
        for p in np.unique(k_pass):
            kp = sel[k_pass == p]
            ap = a_sel[a_pass == p]
            if not len(ap):
                continue
            fresh = ~acc_adds[ap]
            n_fresh, n_add = int(fresh.sum()), int((~fresh).sum())
            waste = kp[:0]
            if n_fresh and n_add:
                waste = kp[launch[kp] > acc_end[ap][fresh].max()]
            kept = np.setdiff1d(kp, waste, assume_unique=True)
            wasted_ns = 0
            top = ""
            if len(waste):
                lower = max(int(kstart[waste].min()), int(kend[kept].max()) if len(kept) else 0)
                wasted_ns = max(int(kend[waste].max()) - lower, 0)
                by_node = pd.Series(kdur[waste]).groupby(node[pcodes[waste]]).sum()
                top = str(by_node.idxmax())
            devs, counts = np.unique(kdev[kp], return_counts=True)
            rows.append({
                "device": int(devs[np.argmax(counts)]), "pid": int(pid),
                "step": int(step_index(launch[kp][:1], bounds)[0]),
                "start": int(launch[kp].min()), "end": int(kend[kp].max()),
                "nvtx_path": str(keys[pcodes[kp[0]]]),
                "accumulations": len(ap), "fresh": n_fresh, "adding": n_add, "passes": 0,
                "backward_kernels": len(kp), "backward_ns": int(kend[kp].max() - kstart[kp].min()),
                "wasted_kernels": len(waste), "wasted_kernel_ns": int(kdur[waste].sum()),
                "wasted_ns": wasted_ns, "top_node": top,
            })
    if not rows:
        return _empty()
    out = pd.DataFrame(rows, columns=list(UNUSED_GRAD_COLUMNS))
    out["passes"] = out.groupby("device")["device"].transform("size").astype(np.int64)
    out["nvtx_path"] = text(out["nvtx_path"])
    return out.sort_values(["device", "start"], kind="stable").reset_index(drop=True)
