"""healthy: the control. Large bf16 GEMMs back to back on data already on the GPU.

No pathology: each step chains 8 bf16 8192x8192x8192 matmuls (~1.1 TFLOP each) on
device-resident tensors, one synchronization per step. There is no twin: ``--fixed`` is
accepted and ignored (it runs the same program) so drivers can treat every workload alike.
Trace evidence of health: GPU busy > 95% of each ``step_N`` range, Tensor Core GEMM kernels
(``nvjet``/``sm90_xmma``/``cutlass`` bf16) > 95% of kernel time, no memcpy, one sync per step.
"""
from __future__ import annotations

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:gemm|nvjet|cutlass|xmma"
NCU_COUNT = 1
HAS_TWIN = False


def build(cfg: c.RunConfig) -> c.Step:
    import torch

    n, chain = c.pick(cfg, (64, 2), (8192, 8))
    if cfg.fixed:
        print("[healthy] --fixed: healthy has no twin; running the same program", flush=True)
    dev = cfg.device
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16) / n**0.5
    outs = (torch.empty_like(a), torch.empty_like(a))

    def step(_i: int) -> None:
        with nv.range("compute"):
            x = a
            for k in range(chain):
                torch.matmul(x, b, out=outs[k % 2])
                x = outs[k % 2]

    return step


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("healthy", __doc__, build, argv, steps=(2, 10), warmup=(1, 2),
                          has_twin=False)


if __name__ == "__main__":
    raise SystemExit(main())
