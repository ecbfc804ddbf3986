"""Forward kernels run again inside the backward (``recomputed_forward``) on the held-out
checkpoint_everything pair (tests/data/heldout/h200_run6: 12 blocks of Linear + LayerNorm + GELU, every
block checkpointed with ``checkpoint_sequential``, and its twin with a plain forward), recorded with nsys
(NVTX steps), without NVTX (bare) and with torch.profiler."""
from __future__ import annotations

import numpy as np
import pytest

from analyzer.facts import FactStore, load_all
from analyzer.facts.recompute import NGRAM, RECOMPUTE_COLUMNS, recomputed_mask
from analyzer.loading import load_trace
from analyzer.testing import trace_file
from analyzer.window import choose_window

load_all()
RUN6 = "heldout/h200_run6/checkpoint_everything"


def _store(name: str) -> FactStore:
    t = load_trace(trace_file(name))
    return FactStore(t, choose_window(t), {})


def test_nsys_pathology_runs_per_block():
    st = _store(RUN6 + ".sqlite.xz")
    r = st.get("recomputed_forward")
    assert list(r.columns) == list(RECOMPUTE_COLUMNS)
    # 30 steps x 11 recomputed blocks (non-reentrant checkpointing stops early: the last segment's forward is
    # not rerun), each run: 3 autocast casts, the forward GEMM, the cast to fp32, the LayerNorm forward
    assert len(r) == 330 and (r["kernels"] == 6).all() and r["step"].nunique() == 30
    assert r["heavy_kernel"].str.endswith("_bias_TNT").all()  # the forward GEMM's layout, not NNT / NTN
    assert (r["range_key"] == "step_N/backward").all()
    assert r["segment"].nunique() == 30 and r["tid"].nunique() == 1
    gpu, cost = int(r["gpu_ns"].sum()), int(r["impact_ns"].sum())
    assert 139.5e6 < gpu < 140.5e6  # 139.9 ms: 21.5% of the window's kernel time
    assert 153.5e6 < cost < 154.5e6  # 154.0 ms against the twin's saving of 181.2 ms (0.85)
    # the host's time beyond the GPU's counts as far as the GPU waited in that backward pass
    assert 178.5e6 < int(r["host_ns"].sum()) < 179.5e6
    assert (r["impact_ns"] >= r["gpu_ns"]).all() and (r["impact_ns"] <= np.maximum(r["gpu_ns"], r["host_ns"])).all()
    per_pass = r.groupby("segment").agg(extra=("impact_ns", "sum"), gpu=("gpu_ns", "sum"), idle=("idle_ns", "first"))
    assert ((per_pass["extra"] - per_pass["gpu"]) <= per_pass["idle"] + len(r)).all()


@pytest.mark.parametrize("suffix, runs, lo, hi", [
    ("_bare.sqlite.xz", 341, 157.7e6, 158.7e6),      # no NVTX: 158.2 ms against 178.4 ms (0.89)
    (".pt.trace.json.gz", 77, 67.4e6, 68.0e6),       # torch.profiler: 67.7 ms against 87.4 ms (0.77)
])
def test_bare_and_torch_profiler_pathology(suffix, runs, lo, hi):
    r = _store(RUN6 + suffix).get("recomputed_forward")
    assert len(r) == runs and (r["kernels"] == 6).all()
    assert lo < int(r["impact_ns"].sum()) < hi


@pytest.mark.parametrize("suffix", ["_fixed.sqlite.xz", "_bare_fixed.sqlite.xz", "_fixed.pt.trace.json.gz"])
def test_twins_have_no_recomputed_run(suffix):
    st = _store(RUN6 + suffix)
    k = st.get("kernel_categories")
    assert k["tid"].nunique() == 2  # a backward thread too: compared, and nothing matched
    assert st.get("recomputed_forward").empty


def test_public_resnet_with_activation_checkpointing():
    # TraceLens' ResNet rank-0 trace (MI300X): 4 checkpointed segments recomputed in each of 3 backward
    # passes (MIOpen convolutions and batch norms); its GPU is busy with exposed all-reduces, so the host's
    # 14.5 ms barely counts
    st = _store("public/tracelens_resnet_act_checkpoint_mi300x.pt.trace.json.xz")
    r = st.get("recomputed_forward")
    assert r["kernels"].tolist() == [53, 53, 49, 42] * 3 and r["segment"].nunique() == 3
    assert 4.1e6 < int(r["gpu_ns"].sum()) < 4.15e6 and 14.5e6 < int(r["host_ns"].sum()) < 14.55e6
    assert 0.045 < int(r["impact_ns"].sum()) / st.window.duration_ns < 0.05


def test_mask_needs_a_compute_kernel_and_the_main_thread_before():
    # main segment: casts c, GEMM g, norm n, GELU e; backward segment: the same four again, then a cast run
    tok = np.array([1, 2, 3, 4, 1, 2, 3, 4, 9, 1, 1, 1, 1], dtype=np.int64)
    heavy = np.isin(tok, [2, 3])
    seg = np.array([0] * 4 + [1] * 9)
    main = seg == 0
    m = recomputed_mask(tok, heavy, seg, main)
    assert m[4:8].all() and not m[:4].any() and not m[8:].any()
    # the same tokens launched by the main thread after a backward segment are the next forward, not a rerun
    assert not recomputed_mask(tok, heavy, seg, ~main).any()
    # casts alone never count
    assert not recomputed_mask(tok, np.zeros_like(heavy), seg, main).any()
    assert NGRAM == 4
