"""tiny_kernels: a launch-bound stream of thousands of tiny elementwise kernels.

Pathology: a hand-written momentum/EMA update over 300 small parameter tensors (64x64 each),
done with a Python loop of per-tensor ops: ~4 kernels per tensor, ~1200 launches of a few
microseconds each per step. The CPU cannot launch them as fast as the GPU retires them.
Twin (``--fixed``): the same math on one flat (300*4096) buffer the tensors are views of, so a
step is 4 large elementwise kernels.
Trace evidence: per ``step_N``: ~1200 kernels with average duration < 5 us, GPU busy < 30% of
the step while ``cudaLaunchKernel`` calls fill the CPU timeline; the twin has 4 kernels per
step and a step time ~100x shorter.
"""
from __future__ import annotations

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:elementwise"
NCU_COUNT = 4
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch

    n_tensors, side = c.pick(cfg, (8, 8), (300, 64))
    dev = cfg.device
    flat_p = torch.randn(n_tensors * side * side, device=dev)
    flat_g = torch.randn_like(flat_p)
    flat_m = torch.zeros_like(flat_p)
    views = lambda flat: list(flat.view(n_tensors, side, side).unbind(0))
    params, grads, moms = views(flat_p), views(flat_g), views(flat_m)
    beta, lr, wd = 0.9, 1e-3, 1e-2

    def step_loop(_i: int) -> None:
        with nv.range("update"):
            for p, g, m in zip(params, grads, moms):
                m.mul_(beta)            # 1 kernel
                m.add_(g, alpha=1 - beta)  # 1 kernel
                p.mul_(1 - lr * wd)     # 1 kernel
                p.add_(m, alpha=-lr)    # 1 kernel

    def step_fused(_i: int) -> None:
        with nv.range("update"):
            flat_m.mul_(beta)
            flat_m.add_(flat_g, alpha=1 - beta)
            flat_p.mul_(1 - lr * wd)
            flat_p.add_(flat_m, alpha=-lr)

    return step_fused if cfg.fixed else step_loop


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("tiny_kernels", __doc__, build, argv, steps=(2, 10), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
