"""pageable_h2d: host-to-device copies from pageable memory dominate each step.

Pathology: every step copies a fresh 128 MiB float32 batch that lives in ordinary (pageable)
host memory with ``.to('cuda')``; the driver stages it through a bounce buffer at a fraction of
PCIe bandwidth, synchronously, and only then runs a modest bf16 compute (a few GEMMs).
Twin (``--fixed``): the host batches are pinned once (``pin_memory()``, preallocated), copied
with ``non_blocking=True`` on a side copy stream one step ahead (double buffering), so the copy
runs at full PCIe speed and overlaps the compute of the previous batch.
Trace evidence: memcpy HtoD with source kind "Pageable" takes > 50% of GPU time in ``step_N``
(CUDA memcpy summary; measured on H100: 76% of an 18.8 ms step, kernels busy 21%); in the twin
copies are "Pinned", ~5x faster, on a separate stream overlapping the kernels (kernels busy
~93% of a 4.4 ms step).
"""
from __future__ import annotations

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:gemm"
NCU_COUNT = 2
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch

    rows, width, layers = c.pick(cfg, (64, 64, 2), (8192, 4096, 10))
    n_host = 2  # distinct host batches, rotated (stands for fresh data each step)
    dev = cfg.device
    host = [torch.randn(rows, width) for _ in range(n_host)]
    weights = [torch.randn(width, width, device=dev, dtype=torch.bfloat16) / width**0.5
               for _ in range(layers)]

    def compute(x: torch.Tensor) -> torch.Tensor:
        with nv.range("compute"):
            h = x.to(torch.bfloat16)
            for w in weights:
                h = torch.tanh(h @ w)
            return h.float().mean()

    if not cfg.fixed or not cfg.cuda:
        if cfg.fixed:  # CPU smoke: no streams; show the same structure
            host = [h.pin_memory() if torch.cuda.is_available() else h for h in host]

        def step(i: int) -> None:
            with nv.range("h2d"):
                x = host[i % n_host].to(dev)
            compute(x)
        return step

    pinned = [h.pin_memory() for h in host]
    dev_bufs = [torch.empty(rows, width, device=dev) for _ in range(2)]
    copy_stream = torch.cuda.Stream(device=dev)
    ready = [torch.cuda.Event() for _ in range(2)]
    state = {"n": 0}

    def issue_copy(slot: int, n: int) -> None:
        with nv.range("h2d"), torch.cuda.stream(copy_stream):
            # do not overwrite a buffer the compute stream may still be reading
            copy_stream.wait_stream(torch.cuda.current_stream(dev))
            dev_bufs[slot].copy_(pinned[n % n_host], non_blocking=True)
            ready[slot].record(copy_stream)

    issue_copy(0, 0)

    def step_fixed(_i: int) -> None:
        n = state["n"]
        slot = n % 2
        issue_copy(1 - slot, n + 1)  # prefetch next batch while computing this one
        torch.cuda.current_stream(dev).wait_event(ready[slot])
        compute(dev_bufs[slot])
        state["n"] = n + 1

    return step_fixed


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("pageable_h2d", __doc__, build, argv, steps=(2, 10), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
