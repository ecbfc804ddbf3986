"""ddp_exposed_comm: gradients are all-reduced after backward, so no communication is hidden.

A data-parallel training loop (bf16 MLP, 6 x 8192-wide layers, ~420 M parameters, 1.7 GB of fp32
gradients per step) on device-resident batches.
Pathology: hand-rolled data parallelism: after ``loss.backward()`` the gradients are flattened
into one buffer, all-reduced in one NCCL call and copied back (``allreduce_grads`` range). The
GPU computes nothing while the all-reduce runs: all of the communication is exposed, a large share
of every step.
Twin (``--fixed``): ``DistributedDataParallel`` with its default 25 MB buckets: each bucket is
all-reduced as soon as its gradients are ready, on NCCL's stream, while backward computes the
earlier layers; only the last bucket's all-reduce is exposed.
Trace evidence: pathology: one ``ncclDevKernel_AllReduce*`` per step in the ``allreduce_grads``
range, after the last backward kernel, with no compute kernel beside it; twin: one all-reduce per
bucket inside ``backward``, overlapping the backward GEMMs of the same GPU.
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
    _ddp.add_global_batch(parser, smoke=16, full=4096)


def build(cfg: c.RunConfig, d: _ddp.Dist) -> c.Step:
    import torch
    import torch.distributed as dist
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    rows = _ddp.per_rank(d, _ddp.global_batch(cfg))
    d_in, width, depth, d_out = c.pick(cfg, (32, 64, 2, 32), (1024, 8192, 6, 1024))
    torch.manual_seed(0)
    model = _ddp.mlp(d_in, width, depth, d_out).to(cfg.device)
    hand_rolled = d.distributed and not cfg.fixed
    if hand_rolled:
        for p in model.parameters():  # what DDP's constructor does: start from rank 0's weights
            dist.broadcast(p.data, src=0)
    else:
        model = _ddp.wrap_ddp(model, cfg, d)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    batches = _ddp.device_batches(cfg, d, rows, d_in, d_out)

    def allreduce_grads() -> None:
        grads = [p.grad for p in params]
        flat = _flatten_dense_tensors(grads)
        dist.all_reduce(flat)
        flat.div_(d.world)
        for g, synced in zip(grads, _unflatten_dense_tensors(flat, grads)):
            g.copy_(synced)

    def step(_i: int) -> None:
        x, target = next(batches)
        _ddp.train_phases(cfg, model, opt, x, target,
                          after_backward=allreduce_grads if hand_rolled else None)

    return step


def main(argv: list[str] | None = None) -> int:
    return _ddp.run("ddp_exposed_comm", __doc__, build, argv, add_arguments=add_arguments,
                    steps=(3, 12), warmup=(1, 3))


if __name__ == "__main__":
    raise SystemExit(main())
