"""cpu_posenc_mask: positional encodings and attention masks rebuilt with numpy every step and uploaded.

Pathology: a transformer encoder (8 layers, width 1024, 16 heads, sequence 512, batch 16, bf16
autocast, AdamW, ``scaled_dot_product_attention`` with an additive float mask) trained on
variable-length batches whose inputs are prepared on the host each step, as a data-pipeline-minded
script does: the sinusoidal positional table (``np.sin``/``np.cos`` of a 512 x 1024 angle grid)
recomputed, and the (16, 1, 512, 512) float32 mask (causal and key padding from the batch's
lengths, ``np.where`` to 0 / -inf, 16 MiB) built with numpy, then both copied with
``torch.from_numpy(...).to(device)``: pageable host-to-device copies the GPU waits for. The GPU is
idle while numpy works.
Twin (``--fixed``): the positional table built once on the GPU at set-up (the same formula in torch)
and the mask built on the GPU each step from the lengths (16 integers copied up): an ``arange``
compared with the lengths, or-ed with a causal mask made once, and ``masked_fill`` to -inf.
Trace evidence: per ``step_N`` (``prepare``, ``forward``, ``backward``, ``optimizer``): pathology: a
``prepare`` range of numpy work on the main thread with no GPU activity, then two pageable HtoD
memcpys (~18 MiB) before the first kernel; twin: a 64-byte copy and a few mask kernels, and a step
shorter by about the ``prepare`` range.
"""
from __future__ import annotations

import math
import random

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:gemm|nvjet|fmha|attention"
NCU_COUNT = 2
HAS_TWIN = True


def positions_numpy(seq: int, width: int) -> object:
    """The sinusoidal table of "Attention is all you need" (seq x width, float32)."""
    import numpy as np

    pos = np.arange(seq, dtype=np.float64)[:, None]
    div = np.exp(np.arange(0, width, 2, dtype=np.float64) * (-math.log(10000.0) / width))
    table = np.zeros((seq, width), dtype=np.float32)
    table[:, 0::2] = np.sin(pos * div)
    table[:, 1::2] = np.cos(pos * div)
    return table


def mask_numpy(lengths: list[int], seq: int) -> object:
    """Additive (batch, 1, seq, seq) float32 mask: -inf above the diagonal and on padded keys."""
    import numpy as np

    causal = np.triu(np.ones((seq, seq), dtype=bool), k=1)
    padded = np.arange(seq)[None, :] >= np.asarray(lengths)[:, None]
    blocked = causal[None, None] | padded[:, None, None, :]
    return np.where(blocked, np.float32(-np.inf), np.float32(0.0)).astype(np.float32)


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    import torch.nn.functional as F
    from torch import nn

    layers, width, heads, seq, batch = c.pick(cfg, (2, 32, 4, 16, 2), (8, 1024, 16, 512, 16))
    head_dim = width // heads
    dev = cfg.device
    torch.manual_seed(0)
    rng = random.Random(0)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            b, s, _ = x.shape
            q, k, v = (t.view(b, s, heads, head_dim).transpose(1, 2)
                       for t in self.qkv(self.norm1(x)).chunk(3, dim=-1))
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype))
            x = x + self.out(o.transpose(1, 2).reshape(b, s, width))
            return x + self.mlp(self.norm2(x))

    blocks = nn.ModuleList(Block() for _ in range(layers)).to(dev)
    head = nn.Linear(width, width).to(dev)
    opt = torch.optim.AdamW([*blocks.parameters(), *head.parameters()], lr=1e-4, fused=cfg.cuda)
    amp = c.bf16_autocast(cfg)
    x = torch.randn(batch, seq, width, device=dev)
    target = torch.randn(batch, seq, width, device=dev)

    # the twin's set-up: the table once on the device, the causal part of the mask once
    pos = torch.arange(seq, dtype=torch.float64, device=dev)[:, None]
    div = torch.exp(torch.arange(0, width, 2, dtype=torch.float64, device=dev) * (-math.log(10000.0) / width))
    table_dev = torch.zeros(seq, width, device=dev)
    table_dev[:, 0::2] = torch.sin(pos * div).float()
    table_dev[:, 1::2] = torch.cos(pos * div).float()
    causal_dev = torch.ones(seq, seq, dtype=torch.bool, device=dev).triu(1)
    key_pos = torch.arange(seq, device=dev)

    def prepare_host(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        table = torch.from_numpy(positions_numpy(seq, width)).to(dev)
        mask = torch.from_numpy(mask_numpy(lengths, seq)).to(dev)
        return table, mask

    def prepare_device(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        lens = torch.tensor(lengths).to(dev, non_blocking=True)
        blocked = causal_dev[None, None] | (key_pos[None, :] >= lens[:, None])[:, None, None, :]
        mask = torch.zeros(blocked.shape, device=dev).masked_fill_(blocked, float("-inf"))
        return table_dev, mask

    prepare = prepare_device if cfg.fixed else prepare_host

    def step(_i: int) -> None:
        lengths = [rng.randint(seq // 2, seq) for _ in range(batch)]
        with nv.range("prepare"):
            table, mask = prepare(lengths)
        with nv.range("forward"):
            opt.zero_grad(set_to_none=True)
            with amp:
                h = x + table
                for block in blocks:
                    h = block(h, mask)
                loss = F.mse_loss(head(h).float(), target)
        with nv.range("backward"):
            loss.backward()
        with nv.range("optimizer"):
            opt.step()

    return step


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("cpu_posenc_mask", __doc__, build, argv, steps=(2, 25), warmup=(1, 3))


if __name__ == "__main__":
    raise SystemExit(main())
