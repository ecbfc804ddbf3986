"""cpu_augment: each step augments its image batch on the CPU, in the main thread, while the GPU waits.

Pathology: a training loop over uint8 images (32 a batch, 3 x 256 x 256, already decoded in host
memory) prepares every batch the way a torchvision-style transform does, with no DataLoader
workers: per sample a random resized crop (``F.interpolate`` of a random box to 224 x 224) and a
random horizontal flip, then the batch is converted to float, normalized with the dataset's
mean/std (all torch CPU ops, in a ``preprocess`` range) and copied to the GPU, where a small
convolutional network (a 4x4 patchify stem and 4 conv3x3 + BatchNorm + ReLU layers, 128
channels, bf16 autocast, SGD) trains on it. The GPU is idle during the whole host phase.
Twin (``--fixed``): the same augmentation on the GPU: the same random boxes and flips (drawn on the
CPU, as before) become one affine matrix per sample, the uint8 batch is copied as it is, and one
``affine_grid`` + ``grid_sample`` crops, resizes and flips the whole batch, then normalizes it.
Trace evidence: per ``step_N``: a ``preprocess`` range on the main thread of ~10-20 ms with CPU
ops (``aten::upsample_bilinear2d``, ``aten::flip``, ...) and no GPU activity, then a HtoD copy of
the float batch and the training kernels; the twin's step starts its copy at once and is shorter
by about the host phase.
"""
from __future__ import annotations

import math
import random

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:conv|grid_sampler"
NCU_COUNT = 2
HAS_TWIN = True

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def crop_box(rng: random.Random, side: int) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop box (scale 0.25-1, ratio 3/4-4/3): top, left, height, width."""
    for _ in range(10):
        area = side * side * rng.uniform(0.25, 1.0)
        ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        w = int(round(math.sqrt(area * ratio)))
        h = int(round(math.sqrt(area / ratio)))
        if 0 < w <= side and 0 < h <= side:
            return rng.randint(0, side - h), rng.randint(0, side - w), h, w
    return 0, 0, side, side


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    import torch.nn.functional as F
    from torch import nn

    batch, side, out, ch, layers, classes = c.pick(cfg, (4, 32, 24, 8, 1, 10),
                                                   (32, 256, 224, 128, 4, 100))
    dev = cfg.device
    torch.manual_seed(0)
    rng = random.Random(0)
    # the "dataset": decoded uint8 images in host memory, 4 batches' worth, and their labels
    images = torch.randint(0, 256, (4 * batch, 3, side, side), dtype=torch.uint8)
    targets = torch.randint(0, classes, (4 * batch,))
    mean = torch.tensor(MEAN).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD).view(1, 3, 1, 1) * 255
    mean_dev, std_dev = mean.to(dev), std.to(dev)

    layers_list: list[nn.Module] = [nn.Conv2d(3, ch, 4, stride=4), nn.BatchNorm2d(ch), nn.ReLU()]
    for _ in range(layers):
        layers_list += [nn.Conv2d(ch, ch, 3, padding=1, bias=False), nn.BatchNorm2d(ch), nn.ReLU()]
    model = nn.Sequential(*layers_list, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(ch, classes)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    amp = c.bf16_autocast(cfg)

    def draw(k: int) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, int, int, int, bool]]]:
        """Batch ``k % 4`` and each sample's random box and flip."""
        lo = (k % 4) * batch
        params = [(*crop_box(rng, side), rng.random() < 0.5) for _ in range(batch)]
        return images[lo:lo + batch], targets[lo:lo + batch], params

    def augment_cpu(raw: torch.Tensor, params: list) -> torch.Tensor:
        crops = []
        for img, (top, left, h, w, flip) in zip(raw, params):
            crop = img[:, top:top + h, left:left + w].unsqueeze(0).float()
            crop = F.interpolate(crop, size=(out, out), mode="bilinear", align_corners=False)
            crops.append(crop.flip(-1) if flip else crop)
        return (torch.cat(crops) - mean) / std

    def augment_gpu(raw: torch.Tensor, params: list) -> torch.Tensor:
        # the same box as an affine map of normalized coordinates (align_corners=False)
        # (built as one list: 128 element assignments into a tensor cost ~1 ms of host time a step)
        theta = torch.tensor([[[(w / side) * (-1.0 if flip else 1.0), 0.0, (2 * left + w) / side - 1],
                               [0.0, h / side, (2 * top + h) / side - 1]]
                              for top, left, h, w, flip in params]).to(dev, non_blocking=True)
        grid = F.affine_grid(theta, [len(params), 3, out, out], align_corners=False)
        crops = F.grid_sample(raw.float(), grid, mode="bilinear", align_corners=False)
        return (crops - mean_dev) / std_dev

    def train(x: torch.Tensor, y: torch.Tensor) -> None:
        with nv.range("train"):
            opt.zero_grad(set_to_none=True)
            with amp:
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()

    counter = [0]

    def step(_i: int) -> None:
        raw, y, params = draw(counter[0])
        counter[0] += 1
        if cfg.fixed:
            with nv.range("upload"):
                raw_dev, y = raw.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            with nv.range("augment"):
                x = augment_gpu(raw_dev, params)
        else:
            with nv.range("preprocess"):
                x = augment_cpu(raw, params)
            with nv.range("upload"):
                x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        train(x, y)

    return step


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("cpu_augment", __doc__, build, argv, steps=(2, 10), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
