"""The third held-out batch's notes in docs/breakdown-heldout.md (``tests/data/heldout/h100_run4``).

Four programs written after the second held-out batch had been judged (`workloads/layer_timing_sync.py`,
`head_loop_attention.py`, `cpu_posenc_mask.py`, `layout_copies.py`), recorded by ``PART=k bash
workloads/device_round3.sh`` on an H100. :func:`notes` gives, from the judged rows, each program's verdict in
every recording (what the breakdown states against what the twin bought) and, for a miss, why it stays
wrong (:func:`benchmarks.breakdown_heldout_batch.batch_notes`). Called by
``benchmarks/breakdown_calibration.py --set heldout``.
"""
from __future__ import annotations

from typing import Any

from benchmarks.breakdown_heldout_batch import Batch, batch_notes

FOLDER = "h100_run4"
STEMS = ("layer_timing_sync", "head_loop_attention", "cpu_posenc_mask", "layout_copies")

#: what each program is, for its paragraph's title
WHAT = {
    "layer_timing_sync": "per-layer timing left from debugging: a `torch.cuda.synchronize()` before and after "
                         "each of 73 modules",
    "head_loop_attention": "multi-head attention as a Python loop over 16 heads, 12 layers",
    "cpu_posenc_mask": "positional table and a 16 MiB attention mask rebuilt with numpy every step, "
                       "uploaded from pageable memory",
    "layout_copies": "ConvNeXt blocks in NCHW with `permute(...).contiguous()` around their channel-last part",
}

#: why a third-batch twin fires the pathology's biggest cause too (filled from the recordings)
TWIN_WHY: dict[str, str] = {}

#: what else a program's paragraph says, right or wrong
NOTE = {
    "layer_timing_sync": (
        "Its first recording (48 blocks of Linear(1024) on 8192 rows, not committed) tested nothing: its twin "
        "saved 3.2 ms of 48.8 a step (nsys; torch.profiler and bare slower than the pathology), because the "
        "host took about 165 us to issue a module against about 30 us of GPU work, so the GPU had drained "
        "before each synchronization anyway, and the breakdown said launch-bound. The committed recording "
        "gives each module about as much GPU time as its issue time, where a synchronization around it "
        "costs the most. Its bare pair (47.65 vs 41.91 ms) is not committed (size)."),
    "layout_copies": (
        "The twin changes the layout, and with it both the copies and the kernel choice: in NCHW bf16 the "
        "depthwise 7x7 convolution runs ATen's own `conv_depthwise2d_*` kernels (3.8 ms a block a step, 55% "
        "of kernel time), in channels_last cuDNN's NHWC kernels (0.8 ms), while the copy kernels are 12% of "
        "kernel time (6.8 ms a step, the twin's 2.7). So slow-fallback-kernels is a cause this twin fixes, "
        "with copy-kernel-dominance; its speed-ups are the medians the microbenchmark "
        "`workloads/conv_layouts.py` measured over six shapes on an H100 (analyzer/hardware/conv_layouts.json), "
        "not fitted to this pair (at the pair's own shape it measured 4.96x forward, 4.70x backward)."),
}

#: why a third-batch verdict is wrong, by program (what the recordings show)
MISS_WHY: dict[str, str] = {
    "head_loop_attention": (
        "Right cause, stated per range: launch-bound in `step_N/backward` is the biggest single finding and "
        "`step_N/forward` the next; the per-head loop is in both and the twin removes both, so the judged "
        "finding is about two thirds of what the fix bought (as with ema_clip_loop in the second batch: "
        "ranges are joined into one finding only for torch.compile'd code). The twin fires launch-bound "
        "too: with one SDPA call per layer it is still launch-bound on this host (its own finding is in the "
        "list above). Its torch.profiler pair (9.5 MB) and bare pair "
        "(5 MB) are not committed (size)."),
    "cpu_posenc_mask": (
        "The bare recording states host-work-in-loop at two thirds of the saving and launch-bound the "
        "remaining third (together 1.00): in that recording the twin ran 24.4 ms a step against 34.7 in the "
        "annotated one and the pathology 77.6 against 70.1, the host's pace, not the program, differing "
        "between the two; the breakdown's split of the bare pathology is not what the twin's (faster) run "
        "says it should be, and no general mechanism separates a host that ran slower in one recording."),
    "layout_copies": (
        "The impact is the fallback kernels' time at the microbenchmark's median speed-ups "
        "(workloads/conv_layouts.py), never tuned on this pair; the rest of what the twin bought is the "
        "permute copies (12% of kernel time, under copy-kernel-dominance's 30% `min_share`)."),
}


BATCH = Batch(
    folder=FOLDER, ordinal="third", stems=STEMS, what=WHAT, miss_why=MISS_WHY, note=NOTE,
    intro="Recorded on an H100 after the second batch was judged (tests/data/MANIFEST.md), never used to "
          "calibrate. Each program's recordings, then, for a miss, why it stays wrong.")


def notes(judged: list[Any]) -> str:
    """The third batch's section: one paragraph per program, every recording of it on one line each."""
    return batch_notes(judged, BATCH)
