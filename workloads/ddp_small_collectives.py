"""ddp_small_collectives: one all-reduce per parameter tensor: hundreds of tiny collectives a step.

A data-parallel training loop of a deep, narrow residual MLP (96 blocks of LayerNorm + 512-wide
Linear + GELU: 384 parameter tensors, most of them 512 values) on device-resident batches.
Pathology: after backward, a loop calls ``dist.all_reduce`` on every gradient tensor in turn
(``allreduce_grads`` range): 384 NCCL launches per step, most moving 2 KB, each paying NCCL's
fixed latency and a host-side launch; the link is idle most of the time.
Twin (``--fixed``): ``DistributedDataParallel``: the gradients travel in a handful of 25 MB
buckets, overlapped with backward.
Trace evidence: pathology: ~384 ``ncclDevKernel_AllReduce*`` kernels per step, most a few
microseconds long, back to back in ``allreduce_grads``, whose NCCL NVTX ranges carry message sizes
of 2 KB; twin: ~5 all-reduces per step of ~20 MB each.
Alone (no torchrun) it is the 1-GPU run with the same global batch.
"""
from __future__ import annotations

import argparse

from . import _common as c
from . import _ddp

NCU_KERNEL_FILTER = "regex:gemm|nvjet"
HAS_TWIN = True
DISTRIBUTED = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _ddp.add_global_batch(parser, smoke=16, full=16384)


def build(cfg: c.RunConfig, d: _ddp.Dist) -> c.Step:
    import torch
    import torch.distributed as dist

    class Block(torch.nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.norm = torch.nn.LayerNorm(width)
            self.linear = torch.nn.Linear(width, width)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.nn.functional.gelu(self.linear(self.norm(x)))

    rows = _ddp.per_rank(d, _ddp.global_batch(cfg))
    width, blocks = c.pick(cfg, (32, 6), (512, 96))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Block(width) for _ in range(blocks)]).to(cfg.device)
    per_tensor = d.distributed and not cfg.fixed
    if per_tensor:
        for p in model.parameters():
            dist.broadcast(p.data, src=0)
    else:
        model = _ddp.wrap_ddp(model, cfg, d)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    batches = _ddp.device_batches(cfg, d, rows, width, width)

    def allreduce_grads() -> None:
        grads = [p.grad for p in params]
        for g in grads:
            dist.all_reduce(g)
        torch._foreach_div_(grads, float(d.world))

    def step(_i: int) -> None:
        x, target = next(batches)
        _ddp.train_phases(cfg, model, opt, x, target,
                          after_backward=allreduce_grads if per_tensor else None)

    return step


def main(argv: list[str] | None = None) -> int:
    return _ddp.run("ddp_small_collectives", __doc__, build, argv, add_arguments=add_arguments,
                    steps=(3, 8), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
