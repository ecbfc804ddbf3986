"""launch_blocking_env: ``CUDA_LAUNCH_BLOCKING=1`` left in a training script after a debugging session.

Pathology: an MLP (24 blocks of Linear(2048, 2048) + LayerNorm + GELU and a head, fp32 weights, bf16
autocast, fused AdamW, 8192-row batches already on the GPU) trained by a script whose first lines still
say ``os.environ["CUDA_LAUNCH_BLOCKING"] = "1"``, put there to get a readable stack trace for a
device-side assert weeks ago and never removed. With it set before CUDA is initialized, every kernel
launch returns only when the kernel has finished: the host can no longer run ahead of the GPU, so each
of the step's ~350 kernels waits for the Python dispatch of the next op (autocast, autograd, the
launch itself) with the GPU idle, and each launch's round trip adds to it. The program is GPU-bound
without the variable.
Twin (``--fixed``): the same script without that line: launches are asynchronous, the host queues the
step's kernels ahead of the GPU, which runs them back to back.
Trace evidence: per ``step_N`` (``forward``, ``backward``, ``optimizer``): pathology: every
``cudaLaunchKernel`` (and cuBLAS' launches) lasts as long as its kernel, and between consecutive kernels
the GPU is idle for the host's time between the launches, tens of microseconds each; no
synchronization call anywhere. Twin: launch calls of a few microseconds, far ahead of their kernels,
which run without gaps.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from . import _common as c

NCU_KERNEL_FILTER = "regex:gemm|nvjet|layer_norm"
NCU_COUNT = 2
HAS_TWIN = True
#: the debugging switch the pathology's script still sets (read by the CUDA driver when it initializes)
BLOCKING_VARIABLE = "CUDA_LAUNCH_BLOCKING"


def build(cfg: c.RunConfig) -> c.Step:
    import torch.nn.functional as F

    blocks, width, rows, classes = c.pick(cfg, (3, 32, 64, 10), (24, 2048, 8192, 1000))
    t = c.mlp_training(cfg, blocks, width, rows, classes)
    print(f"[launch_blocking_env] {BLOCKING_VARIABLE}={os.environ.get(BLOCKING_VARIABLE, '(unset)')}",
          flush=True)
    return c.train_step(t.opt, lambda: F.cross_entropy(t.model(t.x), t.y), amp=t.amp)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--fixed" not in args:
        # the line left in from debugging: before anything touches CUDA, as the script's first lines
        os.environ[BLOCKING_VARIABLE] = "1"
    return c.run_workload("launch_blocking_env", __doc__, build, args, steps=(2, 20), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
