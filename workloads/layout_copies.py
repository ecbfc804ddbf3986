"""layout_copies: a ConvNeXt-style network that copies its activations between layouts in every block.

Pathology: 8 ConvNeXt blocks (depthwise 7x7 convolution, LayerNorm over channels, Linear 128 -> 512,
GELU, Linear 512 -> 128, residual) on 64 images of 224 x 224 (a 4 x 4 patchify stem: 56 x 56 x 128
activations), bf16 autocast, AdamW, written as many reimplementations write it: NCHW tensors, and
around the channel-last part of each block ``x.permute(0, 2, 3, 1).contiguous()`` and back
``x.permute(0, 3, 1, 2).contiguous()``. Each ``.contiguous()`` is an elementwise copy kernel of the
whole activation (51 MiB in bf16), forward and backward; and the depthwise convolution on NCHW bf16
data runs ATen's own ``conv_depthwise2d_*`` kernels, not cuDNN's. The H100 recording (tests/data/
heldout/h100_run4) says which costs more: the depthwise kernels 3.8 ms a block a step (the twin's cuDNN
NHWC kernels 0.8), copy kernels 6.8 ms a step (12% of kernel time; the twin's 2.7).
Twin (``--fixed``): the same model and input in ``torch.channels_last`` memory format and the
permutes without ``.contiguous()``: a channels-last NCHW tensor permuted to NHWC is already
contiguous, so the LayerNorm and Linears read it as it is and the convolution runs on NHWC data:
no layout copy at all.
Trace evidence: per ``step_N`` (``forward``, ``backward``, ``optimizer``): pathology: ~4
``direct_copy_kernel`` copies of permuted tensors per block and ``conv_depthwise2d_forward_kernel`` /
``_backward_kernel`` / ``_grad_weight_kernel`` (55% of kernel time); twin: cuDNN's
``conv2d_c1_k1_nhwc_specialized`` / ``dgrad2d_c1_k1_nhwc_specialized`` instead, no permuted copies, the
same normalization and GEMM kernels, and a step about half as long (57.0 -> 30.5 ms on the H100).
"""
from __future__ import annotations

from . import _common as c

NCU_KERNEL_FILTER = "regex:elementwise|nchw|nhwc|conv"
NCU_COUNT = 3
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    import torch.nn.functional as F
    from torch import nn

    blocks, ch, batch, side, classes = c.pick(cfg, (2, 16, 2, 32, 10), (8, 128, 64, 224, 1000))
    dev = cfg.device
    torch.manual_seed(0)
    keep_layout = cfg.fixed

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dwconv = nn.Conv2d(ch, ch, 7, padding=3, groups=ch)
            self.norm = nn.LayerNorm(ch)
            self.up, self.down = nn.Linear(ch, 4 * ch), nn.Linear(4 * ch, ch)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.dwconv(x).permute(0, 2, 3, 1)  # N, H, W, C
            if not keep_layout:
                h = h.contiguous()
            h = self.down(F.gelu(self.up(self.norm(h)))).permute(0, 3, 1, 2)  # back to N, C, H, W
            if not keep_layout:
                h = h.contiguous()
            return x + h

    model = nn.Sequential(nn.Conv2d(3, ch, 4, stride=4), *[Block() for _ in range(blocks)],
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(ch, classes))
    fmt = torch.channels_last if cfg.fixed else torch.contiguous_format
    model = model.to(dev, memory_format=fmt)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cfg.cuda)
    amp = c.bf16_autocast(cfg)
    x = torch.randn(batch, 3, side, side, device=dev).contiguous(memory_format=fmt)
    y = torch.randint(0, classes, (batch,), device=dev)

    return c.train_step(opt, lambda: F.cross_entropy(model(x), y), amp=amp)


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("layout_copies", __doc__, build, argv, steps=(2, 25), warmup=(1, 3))


if __name__ == "__main__":
    raise SystemExit(main())
