"""per_sample_loop: an evaluation loop that runs the model one sample at a time (launch-bound).

Pathology: a small convolutional classifier (a stem and 6 residual blocks of 3x3 conv + BatchNorm
+ ReLU, 64 channels, 32x32 images, bf16 on a GPU, ``eval()`` under ``no_grad``) scores a batch of 32
images the way a per-example evaluation script does: a Python loop calls the model on each sample
(``model(img.unsqueeze(0))``) and computes that sample's loss, and the losses and predictions are
stacked at the end. Each sample is ~40 small kernels launched one by one; at batch 1 every kernel
runs for a few microseconds, so the GPU waits on the CPU's launches most of the step.
Twin (``--fixed``): the same model and loss on the whole batch in one call (``model(batch)``,
``cross_entropy(..., reduction="none")``): the same ~40 launches once per step instead of once per
sample.
Trace evidence: per ``step_N`` (one ``sample`` range per image in the pathology): thousands of
kernels of a few us, GPU busy well under half of the step while the launches fill the CPU
timeline; the twin's step holds ~40 kernels and is many times shorter.
"""
from __future__ import annotations

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:conv|bn|relu"
NCU_COUNT = 2
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    import torch.nn.functional as F
    from torch import nn

    blocks, ch, side, batch, classes = c.pick(cfg, (1, 8, 8, 4, 10), (6, 64, 32, 32, 100))
    dev = cfg.device
    dtype = torch.bfloat16 if cfg.cuda else torch.float32
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(ch, ch, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(ch)
            self.conv2 = nn.Conv2d(ch, ch, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(ch)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = F.relu(self.bn1(self.conv1(x)))
            return F.relu(x + self.bn2(self.conv2(h)))

    model = nn.Sequential(
        nn.Conv2d(3, ch, 3, padding=1, bias=False), nn.BatchNorm2d(ch), nn.ReLU(),
        *[Block() for _ in range(blocks)],
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(ch, classes),
    ).to(device=dev, dtype=dtype).eval()
    images = torch.randn(batch, 3, side, side, device=dev, dtype=dtype)
    labels = torch.randint(0, classes, (batch,), device=dev)

    def step_per_sample(_i: int) -> None:
        losses, preds = [], []
        with torch.no_grad():
            for img, label in zip(images, labels):
                with nv.range("sample"):
                    logits = model(img.unsqueeze(0))
                    losses.append(F.cross_entropy(logits.float(), label.unsqueeze(0)))
                    preds.append(logits.argmax(-1))
            loss = torch.stack(losses).mean()
            acc = (torch.cat(preds) == labels).float().mean()
        torch.stack([loss, acc])  # kept on the device, as the twin's

    def step_batched(_i: int) -> None:
        with torch.no_grad():
            logits = model(images)
            loss = F.cross_entropy(logits.float(), labels, reduction="none").mean()
            acc = (logits.argmax(-1) == labels).float().mean()
        torch.stack([loss, acc])

    return step_batched if cfg.fixed else step_per_sample


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("per_sample_loop", __doc__, build, argv, steps=(2, 10), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
