"""cudnn_benchmark_shapes: ``cudnn.benchmark = True`` in a conv net fed a different image size every step.

Pathology: a small convolutional network (a stride-2 stem and 6 conv3x3 + BatchNorm + ReLU layers, 64
to 512 channels, global pooling and a linear head; bf16 autocast, SGD with momentum) trained with
multi-scale batches, as detection and segmentation recipes do: each step's 32 images have a height
and a width drawn from 160 to 320 pixels in steps of 16, a size the loop has not seen before. The
script sets ``torch.backends.cudnn.benchmark = True``, the "free speed-up" of every tuning guide; but
that autotuning runs once per new input shape, so every step cuDNN benchmarks the candidate
algorithms of each convolution (forward, backward data, backward filter) by running them, with their
workspaces, before the step's own kernels: the trial kernels and their allocations cost more than
the step (the first H100 recording, 64 images a step: 0.93 s a step against the twin's 52 ms under
torch.profiler, 1.1 to 2.8 s under nsys, which cut the run at its time limit; hence 32 images and 10
measured steps).
Twin (``--fixed``): the same shapes, model and data with ``torch.backends.cudnn.benchmark = False``:
cuDNN's heuristics choose one algorithm per shape without timing the candidates.
Trace evidence: per ``step_N`` (``forward``, ``backward``, ``optimizer``): pathology: several
convolution kernels per convolution, of different algorithms (the trials), with synchronizations and
``cudaMalloc`` of workspaces between them, in ``forward`` and ``backward``; twin: one kernel (or one
small group) per convolution and a several times shorter step.
"""
from __future__ import annotations

import random

from . import _common as c

NCU_KERNEL_FILTER = "regex:conv|xmma|cudnn|implicit"
NCU_COUNT = 4
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    import torch.nn.functional as F
    from torch import nn

    batch, widths, sizes, classes = c.pick(
        cfg, (2, (8, 8, 16), range(32, 65, 16), 10),
        (32, (64, 128, 128, 256, 256, 512, 512), range(160, 321, 16), 1000))
    dev = cfg.device
    torch.backends.cudnn.benchmark = not cfg.fixed
    torch.manual_seed(0)
    rng = random.Random(0)
    layers: list[nn.Module] = []
    c_in = 3
    for i, c_out in enumerate(widths):
        stride = 2 if i == 0 or c_out != c_in else 1
        layers += [nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]
        c_in = c_out
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, classes)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    amp = c.bf16_autocast(cfg)
    # every (height, width) at most once in a run: each step's shape is new to cuDNN
    shapes = [(h, w) for h in sizes for w in sizes]
    rng.shuffle(shapes)
    print(f"[cudnn_benchmark_shapes] cudnn.benchmark={torch.backends.cudnn.benchmark} "
          f"{len(shapes)} image sizes", flush=True)

    def new_batch(_i: int) -> tuple[torch.Tensor, torch.Tensor]:
        h, w = shapes.pop() if shapes else (sizes[-1], sizes[-1])
        return torch.randn(batch, 3, h, w, device=dev), torch.randint(0, classes, (batch,), device=dev)

    return c.train_step(opt, lambda images, labels: F.cross_entropy(model(images), labels),
                        batch=new_batch, amp=amp)


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("cudnn_benchmark_shapes", __doc__, build, argv, steps=(2, 10), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
