"""fsdp_train: FSDP with the whole model as one unit: its all-gather and reduce-scatter are exposed.

A fully-sharded (FSDP2, ``fully_shard``) training loop of the MLP of ``ddp_exposed_comm`` (6 x
8192-wide layers, ~420 M parameters) on device-resident batches.
Pathology: ``fully_shard`` is applied to the root module only, so all parameters form one unit:
one all-gather of the whole model before forward can start, one reduce-scatter of all gradients
after backward has finished; neither overlaps compute.
Twin (``--fixed``): ``fully_shard`` on every Linear layer, then the root (the documented recipe):
FSDP prefetches the next layer's all-gather while the current one computes and reduce-scatters each
layer's gradients during backward.
Trace evidence: pathology: ``ncclDevKernel_AllGather*`` at the start of ``forward`` and
``ncclDevKernel_ReduceScatter*`` at the end of ``backward``, with no compute kernel beside them;
twin: one all-gather per layer in forward and backward and one reduce-scatter per layer, overlapping
the GEMMs. Alone (no torchrun) it is the 1-GPU run (no sharding) with the same global batch.
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

    rows = _ddp.per_rank(d, _ddp.global_batch(cfg))
    d_in, width, depth, d_out = c.pick(cfg, (32, 64, 2, 32), (1024, 8192, 6, 1024))
    torch.manual_seed(0)
    model = _ddp.mlp(d_in, width, depth, d_out).to(cfg.device)
    if d.distributed:
        from torch.distributed.fsdp import fully_shard

        if cfg.fixed:
            for layer in model:
                if isinstance(layer, torch.nn.Linear):
                    fully_shard(layer)
        fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = _ddp.device_batches(cfg, d, rows, d_in, d_out)

    def step(_i: int) -> None:
        x, target = next(batches)
        _ddp.train_phases(cfg, model, opt, x, target)

    return step


def main(argv: list[str] | None = None) -> int:
    return _ddp.run("fsdp_train", __doc__, build, argv, add_arguments=add_arguments,
                    steps=(3, 8), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
