"""ema_clip_loop: gradient clipping and a weight EMA written as Python loops over the parameters.

Pathology: a deep MLP (48 blocks of Linear(1024, 1024) + LayerNorm + GELU and a head: 194
parameter tensors, ~50 M parameters, fp32) trained with bf16 autocast on 8192-row batches and a fused
AdamW, with the two extras most training scripts add, written by hand one tensor at a time:
gradient-norm clipping (``total = sum(g.norm() ** 2 for g in grads) ** 0.5``, then
``g.mul_(clip_coef)`` for each gradient, the coefficient kept on the device: no host sync) and an
exponential moving average of the weights (``e.mul_(decay).add_(p, alpha=1 - decay)`` for each
parameter). That is ~6 small kernels per tensor, ~1200 launches a step, each a few microseconds
of GPU work on at most 4 MiB: the ``clip_grads`` and ``ema`` ranges are launch-bound while forward
and backward keep the GPU busy.
Twin (``--fixed``): the same math with the multi-tensor ops: ``torch._foreach_norm`` and one
``torch.linalg.vector_norm`` of their stack, ``torch._foreach_mul_`` by the coefficient, and
``torch._foreach_lerp_`` for the EMA: a handful of launches for all 194 tensors.
Trace evidence: per ``step_N`` (``forward``, ``backward``, ``clip_grads``, ``optimizer``, ``ema``):
pathology: ``clip_grads`` and ``ema`` hold ~1200 short elementwise/reduction kernels with the GPU
mostly idle between them; twin: a few ``multi_tensor_apply`` kernels in each and a step shorter by
about those ranges.
"""
from __future__ import annotations

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:elementwise|reduce|multi_tensor"
NCU_COUNT = 3
HAS_TWIN = True
MAX_NORM = 1.0
DECAY = 0.999


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    import torch.nn.functional as F

    blocks, width, rows, classes = c.pick(cfg, (3, 32, 64, 10), (48, 1024, 8192, 1000))
    dev = cfg.device
    torch.manual_seed(0)
    model = c.mlp_stack(blocks, width, classes).to(dev)
    params = [p for p in model.parameters() if p.requires_grad]
    ema = [p.detach().clone() for p in params]
    opt = torch.optim.AdamW(params, lr=1e-4, fused=cfg.cuda)
    amp = c.bf16_autocast(cfg)
    x = torch.randn(rows, width, device=dev)
    y = torch.randint(0, classes, (rows,), device=dev)

    def clip_loop() -> None:
        grads = [p.grad for p in params]
        total = sum(g.norm() ** 2 for g in grads) ** 0.5
        coef = (MAX_NORM / (total + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef)

    def clip_foreach() -> None:
        grads = [p.grad for p in params]
        total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        coef = (MAX_NORM / (total + 1e-6)).clamp(max=1.0)
        torch._foreach_mul_(grads, coef)

    def ema_loop() -> None:
        for e, p in zip(ema, params):
            e.mul_(DECAY).add_(p.detach(), alpha=1 - DECAY)

    def ema_foreach() -> None:
        torch._foreach_lerp_(ema, [p.detach() for p in params], 1 - DECAY)

    clip, update_ema = (clip_foreach, ema_foreach) if cfg.fixed else (clip_loop, ema_loop)

    def step(_i: int) -> None:
        _loss = c.forward_backward(opt, lambda: F.cross_entropy(model(x), y), amp=amp)
        with nv.range("clip_grads"):
            clip()
        c.optimizer_step(opt)
        with nv.range("ema"), torch.no_grad():
            update_ema()

    return step


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("ema_clip_loop", __doc__, build, argv, steps=(2, 20), warmup=(1, 3))


if __name__ == "__main__":
    raise SystemExit(main())
