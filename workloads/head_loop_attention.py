"""head_loop_attention: multi-head attention written as a Python loop over the heads.

Pathology: a transformer encoder (12 layers, width 512, 16 heads of 32, sequence 256, batch 16, bf16
autocast, AdamW) whose attention is written head by head, as in a first implementation from the
equations: for each head, slice its query/key/value columns, ``q @ k.transpose(-2, -1) * scale``,
``softmax``, ``@ v``, and ``torch.cat`` the 16 head outputs. Each head's matmuls are tiny (256 x 256
x 32 per sample), so a layer's attention is ~100 short kernels forward and ~200 backward, each a few
microseconds of GPU work: the host's launches, not the GPU, set the pace.
Twin (``--fixed``): the same projections viewed as (batch, heads, seq, head_dim) and one
``torch.nn.functional.scaled_dot_product_attention`` call per layer (a fused attention kernel for
all heads).
Trace evidence: per ``step_N`` (``forward``, ``backward``, ``optimizer``): pathology: ~16 x 12 small
batched GEMMs, softmax and slice/copy kernels per matmul position with the GPU mostly idle between
them (launch-bound), then a ``cat`` per layer; twin: one flash/efficient-attention kernel per layer
forward and one backward, and a step several times shorter.
"""
from __future__ import annotations

import math

from . import _common as c

NCU_KERNEL_FILTER = "regex:gemm|softmax|flash|fmha"
NCU_COUNT = 2
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    import torch.nn.functional as F
    from torch import nn

    layers, width, heads, seq, batch = c.pick(cfg, (2, 32, 4, 16, 2), (12, 512, 16, 256, 16))
    head_dim = width // heads
    scale = 1.0 / math.sqrt(head_dim)
    dev = cfg.device
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

        def attend_per_head(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            outs = []
            for hd in range(heads):
                cols = slice(hd * head_dim, (hd + 1) * head_dim)
                scores = q[..., cols] @ k[..., cols].transpose(-2, -1) * scale
                outs.append(scores.softmax(dim=-1) @ v[..., cols])
            return torch.cat(outs, dim=-1)

        def attend_fused(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            b, s, _ = q.shape
            q, k, v = (t.view(b, s, heads, head_dim).transpose(1, 2) for t in (q, k, v))
            o = F.scaled_dot_product_attention(q, k, v)
            return o.transpose(1, 2).reshape(b, s, width)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
            attend = self.attend_fused if cfg.fixed else self.attend_per_head
            x = x + self.out(attend(q, k, v))
            return x + self.mlp(self.norm2(x))

    model = nn.Sequential(*[Block() for _ in range(layers)], nn.LayerNorm(width)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cfg.cuda)
    amp = c.bf16_autocast(cfg)
    x = torch.randn(batch, seq, width, device=dev)
    target = torch.randn(batch, seq, width, device=dev)

    return c.train_step(opt, lambda: F.mse_loss(model(x).float(), target), amp=amp)


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("head_loop_attention", __doc__, build, argv, steps=(2, 25), warmup=(1, 3))


if __name__ == "__main__":
    raise SystemExit(main())
