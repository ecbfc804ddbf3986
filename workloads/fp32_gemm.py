"""fp32_gemm: float32 matrix multiplies with TF32 disabled, so no Tensor Cores are used.

Pathology: an MLP (4096 tokens, width 8192, 3 layers) trained in float32 with
``torch.backends.cuda.matmul.allow_tf32 = False``: cuBLAS picks SIMT sgemm kernels running at
~50 TFLOP/s instead of the ~700+ of bf16 Tensor Cores.
Twin (``--fixed``): the same model under ``torch.autocast(dtype=torch.bfloat16)`` (Tensor Core
bf16 GEMMs, fp32 master weights).
Trace evidence: GEMM kernels named like ``sgemm``/``*_sgemm_*``/``cutlass...simt...`` (no
``tensorop``/``gmma``/``bf16`` in the name) take > 80% of step time; the twin's GEMM kernels are
bf16 tensor-core kernels (e.g. ``sm90_xmma_gemm_bf16...`` / ``nvjet``) and the step is ~5-10x
shorter.
"""
from __future__ import annotations

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:gemm|nvjet|cutlass|xmma"
NCU_COUNT = 2
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch

    tokens, width, depth = c.pick(cfg, (16, 32, 2), (4096, 8192, 3))
    dev = cfg.device
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width, bias=False), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).to(dev)
    x = torch.randn(tokens, width, device=dev)

    def step(_i: int) -> None:
        with nv.range("forward"), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cfg.fixed):
            loss = model(x).float().square().mean()
        with nv.range("backward"):
            loss.backward()
        with nv.range("optimizer_step"), torch.no_grad():
            for p in model.parameters():
                p.grad = None

    return step


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("fp32_gemm", __doc__, build, argv, steps=(2, 8), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
