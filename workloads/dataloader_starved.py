"""dataloader_starved: the GPU waits for a slow, synchronous host-side data loader.

Pathology: every step first decodes and augments a batch on the CPU in the main thread (numpy:
random "decode", crop, flip, normalize, colour jitter; ~tens of ms of real CPU work, no sleeps),
copies it from pageable memory, then runs a short bf16 MLP training step (~ a few ms on an H100).
The GPU sits idle while the next batch is built.
Twin (``--fixed``): a pool of worker threads (numpy releases the GIL) prefetches batches into
pinned memory ahead of time; the main thread only issues a ``non_blocking`` copy and the step.
Trace evidence: in the ``step_N`` ranges GPU utilization (kernel time / range time) is < 50%
(typically ~20%) with one long ``load_batch`` CPU range per step and a GPU gap of the same length;
in the twin the ``load_batch`` ranges shrink to a queue pop and the GPU is busy > 80% of the time.
"""
from __future__ import annotations

import collections
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:gemm|elementwise"
NCU_COUNT = 3
HAS_TWIN = True

_MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
_STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)
_PATCH = 16


def load_batch_cpu(index: int, batch: int, hw: int) -> np.ndarray:
    """Real CPU work standing in for JPEG decode + augmentation; returns float32 NCHW."""
    rng = np.random.default_rng(index)
    raw = rng.integers(0, 256, size=(batch, 3, hw + 16, hw + 16), dtype=np.uint8)  # "decode"
    oy, ox = (int(v) for v in rng.integers(0, 16, 2))
    x = raw[:, :, oy:oy + hw, ox:ox + hw].astype(np.float32)  # random crop
    x *= 1.0 / 255.0
    if index % 2:
        x = x[..., ::-1]  # horizontal flip
    x = (x - _MEAN) / _STD
    x = np.tanh(x)  # colour-jitter-like nonlinearity
    return np.ascontiguousarray(x)


def _patchify(x: object, patch: int) -> object:
    """(B, 3, H, W) -> (B * patches, 3 * patch * patch) tokens."""
    b, ch, h, w = x.shape
    x = x.reshape(b, ch, h // patch, patch, w // patch, patch).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b * (h // patch) * (w // patch), ch * patch * patch)


def build(cfg: c.RunConfig) -> c.Step:
    import torch

    batch, hw = c.pick(cfg, (4, 32), (64, 128))
    width, depth = c.pick(cfg, (64, 2), (4096, 10))
    workers = c.pick(cfg, 2, 8)
    dev = cfg.device
    layers: list[torch.nn.Module] = [torch.nn.Linear(3 * _PATCH * _PATCH, width)]
    for _ in range(depth):
        layers += [torch.nn.GELU(), torch.nn.Linear(width, width)]
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    amp = torch.autocast(dev.type, dtype=torch.bfloat16)
    counter = iter(range(1 << 30))

    def train_step(x_cpu_or_dev: torch.Tensor) -> None:
        with nv.range("h2d"):
            x = x_cpu_or_dev.to(dev, non_blocking=cfg.fixed)
        _loss = c.forward_backward(opt, lambda: model(_patchify(x, _PATCH)).float().pow(2).mean(), amp=amp,
                                   zero_grad=False)
        c.optimizer_step(opt, zero_grad=True, name="optimizer_step")

    if not cfg.fixed:
        def step(_i: int) -> None:
            with nv.range("load_batch"):
                x = torch.from_numpy(load_batch_cpu(next(counter), batch, hw))
            train_step(x)
        return step

    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="loader")
    pin = cfg.cuda
    pending: collections.deque[Future] = collections.deque()

    def produce(index: int) -> torch.Tensor:
        t = torch.from_numpy(load_batch_cpu(index, batch, hw))
        return t.pin_memory() if pin else t

    def refill() -> None:
        while len(pending) < 2 * workers:
            pending.append(pool.submit(produce, next(counter)))

    refill()

    def step_fixed(_i: int) -> None:
        with nv.range("load_batch"):
            x = pending.popleft().result()
            refill()
        train_step(x)

    return step_fixed


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("dataloader_starved", __doc__, build, argv, steps=(2, 12), warmup=(1, 3))


if __name__ == "__main__":
    raise SystemExit(main())
