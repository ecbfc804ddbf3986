"""alloc_churn: device and pinned-host allocations inside the training loop.

Pathology: each step calls ``torch.cuda.empty_cache()`` (and empties the pinned-host cache),
then allocates fresh device tensors of a size that changes every step (variable-length batches)
and a fresh pinned staging buffer with ``torch.empty(..., pin_memory=True)``. The caching
allocators cannot reuse anything, so every step pays ``cudaMalloc``/``cudaFree`` and
``cudaHostAlloc``/``cudaFreeHost`` (each a device-wide synchronization, ~ms for large blocks).
Twin (``--fixed``): device buffers and the pinned staging buffer are allocated once at the
largest size and sliced per step; no cache flushing.
Trace evidence: CUDA API summary inside ``step_N`` shows several ``cudaMalloc``/``cudaFree`` and
``cudaHostAlloc``/``cudaFreeHost`` calls per step taking a large share of step time, with GPU
gaps around them; the twin has none after ``setup``/``warmup``.
"""
from __future__ import annotations

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:elementwise"
NCU_COUNT = 2
HAS_TWIN = True


def _empty_host_cache() -> None:
    import torch

    fn = getattr(torch._C, "_host_emptyCache", None)
    if fn is not None:
        fn()


def build(cfg: c.RunConfig) -> c.Step:
    import torch

    base, n_bufs = c.pick(cfg, (1 << 12, 2), (16 << 20, 4))  # elements (16 Mi floats = 64 MiB)
    dev = cfg.device
    pin = torch.cuda.is_available()
    host_src = torch.randn(2 * base)

    def size_at(i: int) -> int:
        return base + (abs(i) * 7919 % 97) * (base // 97)  # varies every step, <= 2*base

    def compute(bufs: list[torch.Tensor], staged: torch.Tensor) -> None:
        with nv.range("compute"):
            bufs[0].copy_(staged, non_blocking=True)
            for a, b in zip(bufs, bufs[1:]):
                torch.mul(a, 1.5, out=b)
                b.add_(a)

    def step_churn(i: int) -> None:
        n = size_at(i)
        with nv.range("alloc"):
            if dev.type == "cuda":
                torch.cuda.empty_cache()
                _empty_host_cache()
            bufs = [torch.empty(n, device=dev) for _ in range(n_bufs)]
            staged = torch.empty(n, pin_memory=pin)
            staged.copy_(host_src[:n])
        compute(bufs, staged.to(dev, non_blocking=True))

    max_n = 2 * base
    fixed_bufs = [torch.empty(max_n, device=dev) for _ in range(n_bufs)]
    fixed_staged = torch.empty(max_n, pin_memory=pin)
    fixed_dev_in = torch.empty(max_n, device=dev)

    def step_reuse(i: int) -> None:
        n = size_at(i)
        with nv.range("alloc"):
            bufs = [b[:n] for b in fixed_bufs]
            staged = fixed_staged[:n]
            staged.copy_(host_src[:n])
        dev_in = fixed_dev_in[:n]
        dev_in.copy_(staged, non_blocking=True)
        compute(bufs, dev_in)

    return step_reuse if cfg.fixed else step_churn


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("alloc_churn", __doc__, build, argv, steps=(2, 10), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
