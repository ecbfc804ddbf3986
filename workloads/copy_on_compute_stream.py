"""copy_on_compute_stream: each step's input is copied host->device on the compute stream.

Pathology: every step copies its batch (8192 x 2048 bf16, 32 MiB, from pinned memory,
``non_blocking=True``) to the GPU on the compute stream right before using it, so the step's GEMMs
(16 bf16 2048-wide layers, on Tensor Cores) queue behind the copy: about a quarter of the step is
the GPU copying while the SMs idle. ``non_blocking`` does not help: the copy is asynchronous to the host but in order
with the compute on the same stream.
Twin (``--fixed``): batch i+1 is prefetched on a side stream while step i computes (the compute
stream waits for the copy only through ``wait_stream``; ``record_stream`` keeps the allocator from
reusing a batch's memory early), so the copy overlaps the previous step's compute. The prefetch is
issued after the step's kernels are queued, so its host cost does not delay the step's first kernel.
Trace evidence: per ``step_N``: pathology: a ``h2d`` range whose 32 MiB HtoD memcpy runs on the
same stream as the kernels, kernels starting only after it; twin: the HtoD memcpy for the next
batch in ``prefetch`` on another stream, concurrent with the kernels, and a step shorter by about
the copy's duration.
"""
from __future__ import annotations

import contextlib

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:gemm|sgemm"
NCU_COUNT = 2
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch

    rows, width, n_layers = c.pick(cfg, (64, 32, 2), (8192, 2048, 16))
    dev = cfg.device
    dtype = torch.bfloat16  # as training runs: the GEMMs on Tensor Cores, the copy the step's problem
    torch.manual_seed(0)
    pin = cfg.cuda  # pinned memory needs CUDA
    host = [torch.randn(rows, width, dtype=dtype) for _ in range(2)]
    if pin:
        host = [h.pin_memory() for h in host]
    weights = [(torch.randn(width, width, device=dev) / width ** 0.5).to(dtype) for _ in range(n_layers)]

    def compute(x: "torch.Tensor") -> None:
        with nv.range("compute"):
            for w in weights:
                x = torch.relu(x @ w)
            x.sum()

    if not cfg.fixed:
        def step(i: int) -> None:
            with nv.range("h2d"):
                x = host[i % 2].to(dev, non_blocking=True)
            compute(x)

        return step

    side = torch.cuda.Stream() if cfg.cuda else None
    counter = [0]

    def prefetch(k: int) -> "torch.Tensor":
        with nv.range("prefetch"):
            with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
                return host[k % 2].to(dev, non_blocking=True)

    pending = [prefetch(0)]

    def step_prefetch(_i: int) -> None:
        k = counter[0]
        counter[0] += 1
        x = pending[0]
        if side is not None:
            main = torch.cuda.current_stream()
            main.wait_stream(side)   # batch k has arrived
            x.record_stream(main)    # its memory is in use on the compute stream too
        compute(x)
        # issued after the step's kernels are queued: the copy still overlaps this step's compute
        # (the side stream is idle), and issuing it (~0.1 ms of host time for a pinned copy) does
        # not delay the first kernel of the step
        pending[0] = prefetch(k + 1)

    return step_prefetch


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("copy_on_compute_stream", __doc__, build, argv, steps=(2, 10),
                          warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
