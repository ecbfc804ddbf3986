"""ddp_straggler: one rank's data loader is slower, so every other rank waits in the all-reduce.

A DDP training loop (bf16 MLP, 8 x 4096-wide layers, ~140 M parameters) whose ``load_batch``
builds each batch on the host: it "decodes" raw uint8 samples from an in-memory shard (convert,
downsample, normalize: real numpy work, no sleeps) and copies them to the GPU.
Pathology: the shard of rank ``--slow-rank`` (default: the last rank) holds samples at
``--slow-factor`` times the resolution (16x), which it must downsample: its ``load_batch`` takes
tens of ms longer every step. DDP's all-reduce cannot finish before the slow rank arrives, so the
other ranks' NCCL kernels run long (waiting) and every rank's step is as slow as the slow one.
Twin (``--fixed``): every shard was preprocessed to the training resolution; all ranks load alike.
Trace evidence: the slow rank's ``load_batch`` ranges are ~16x longer; on the other ranks the
``ncclDevKernel_AllReduce*`` kernels last about that much longer than on the slow rank, and the
slow rank's all-reduce kernels start that much later (it arrives last at every collective).
Alone (no torchrun) it is the 1-GPU run with the same global batch.
"""
from __future__ import annotations

import argparse

import numpy as np

from . import _common as c
from . import _ddp
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:gemm|nvjet"
HAS_TWIN = True
DISTRIBUTED = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _ddp.add_global_batch(parser, smoke=16, full=8192)
    parser.add_argument("--slow-rank", type=int, default=-1,
                        help="rank with the slow loader (default -1: the last rank)")
    parser.add_argument("--slow-factor", type=int, default=16,
                        help="resolution factor of the slow rank's raw samples (default 16)")


class Shard:
    """An in-memory shard of raw uint8 samples at ``factor`` x the training resolution."""

    def __init__(self, rows: int, cols: int, factor: int, seed: int) -> None:
        self.rows, self.cols, self.factor = rows, cols, factor
        rng = np.random.default_rng(seed)
        self.raw = rng.integers(0, 256, size=(2 * rows, cols * factor), dtype=np.uint8)

    def load(self, index: int) -> np.ndarray:
        """Decode one batch: convert, downsample to ``cols`` features, normalize."""
        off = (index * 613) % self.rows
        x = self.raw[off:off + self.rows].astype(np.float32)
        if self.factor > 1:
            x = x.reshape(self.rows, self.cols, self.factor).mean(axis=-1)
        x *= 1.0 / 255.0
        x -= x.mean(axis=0, keepdims=True)
        return np.ascontiguousarray(x)


def build(cfg: c.RunConfig, d: _ddp.Dist) -> c.Step:
    import torch

    opts = cfg.options
    rows = _ddp.per_rank(d, _ddp.global_batch(cfg))
    d_in, width, depth, d_out = c.pick(cfg, (32, 64, 2, 32), (256, 4096, 8, 1024))
    slow_rank = opts.slow_rank % d.world
    slow = d.distributed and not cfg.fixed and d.rank == slow_rank
    shard = Shard(rows, d_in, opts.slow_factor if slow else 1, seed=100 + d.rank)
    torch.manual_seed(0)  # same initial weights on every rank (DDP also broadcasts rank 0's)
    model = _ddp.wrap_ddp(_ddp.mlp(d_in, width, depth, d_out).to(cfg.device), cfg, d)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cpu").manual_seed(7 + d.rank)
    target = torch.randn(rows, d_out, generator=gen).to(cfg.device)
    counter = iter(range(1 << 30))
    if slow:
        print(f"[ddp_straggler:rank{d.rank}] slow loader: samples at {opts.slow_factor}x "
              "resolution", flush=True)

    def step(_i: int) -> None:
        with nv.range("load_batch"):
            x = torch.from_numpy(shard.load(next(counter))).to(cfg.device)
        _ddp.train_phases(cfg, model, opt, x, target)

    return step


def main(argv: list[str] | None = None) -> int:
    return _ddp.run("ddp_straggler", __doc__, build, argv, add_arguments=add_arguments,
                    steps=(3, 16), warmup=(1, 3))


if __name__ == "__main__":
    raise SystemExit(main())
