"""layer_timing_sync: per-layer timing left in from debugging, a device synchronization around every layer.

Pathology: an MLP (24 blocks of Linear(2048, 2048) + LayerNorm + GELU and a head, fp32 weights, bf16
autocast, fused AdamW, 16384-row batches: each module's GPU time about the host's time to issue it)
whose forward is timed layer by layer the way one does while hunting a slow layer and then forgets:
``torch.cuda.synchronize()``, ``t0 = time.perf_counter()``, the module, ``torch.cuda.synchronize()``
again and the elapsed time added to a per-module table, for each of the 73 modules. Each synchronize
lets the GPU drain: the host cannot queue the next module until the last one has finished, so every
module's launch latency and Python dispatch lies on the GPU's critical path (146
``cudaDeviceSynchronize`` a step).
Twin (``--fixed``): the same per-module table from CUDA events: an event recorded before the first
module and after each (``torch.cuda.Event(enable_timing=True)``), no synchronization, and the elapsed times
read once at the end of the step, after one ``synchronize`` of the last event. On a CPU the twin
times with ``perf_counter`` alone (no events, no syncs).
Trace evidence: per ``step_N`` (``forward``, ``backward``, ``optimizer``): pathology: 146
``cudaDeviceSynchronize`` calls in ``forward``, each followed by a GPU gap before the next module's
kernels; twin: 74 event records (``cudaEventRecord``) between the launches, one
``cudaEventSynchronize`` in ``read_timings`` at the step's end, a dense forward and a step shorter by
about the gaps.
"""
from __future__ import annotations

import time

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:gemm|nvjet|layer_norm"
NCU_COUNT = 2
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    import torch.nn.functional as F

    blocks, width, rows, classes = c.pick(cfg, (3, 32, 64, 10), (24, 2048, 16384, 1000))
    dev = cfg.device
    t = c.mlp_training(cfg, blocks, width, rows, classes)
    model, opt, amp, x, y = t.model, t.opt, t.amp, t.x, t.y
    names = [f"{i}:{type(m).__name__}" for i, m in enumerate(model)]
    table: dict[str, float] = dict.fromkeys(names, 0.0)  # milliseconds per module, summed

    def forward_synced(h: torch.Tensor) -> torch.Tensor:
        for name, module in zip(names, model):
            c.synchronize(dev)
            t0 = time.perf_counter()
            h = module(h)
            c.synchronize(dev)
            table[name] += (time.perf_counter() - t0) * 1e3
        return h

    def forward_events(h: torch.Tensor) -> torch.Tensor:
        if not cfg.cuda:
            for name, module in zip(names, model):
                t0 = time.perf_counter()
                h = module(h)
                table[name] += (time.perf_counter() - t0) * 1e3
            return h
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(len(names) + 1)]
        marks[0].record()
        for mark, module in zip(marks[1:], model):
            h = module(h)
            mark.record()
        pending.append(marks)
        return h

    pending: list[list] = []  # the step's events, read once after its last kernel

    def read_events() -> None:
        for marks in pending:
            marks[-1].synchronize()
            for name, a, b in zip(names, marks, marks[1:]):
                table[name] += a.elapsed_time(b)
        pending.clear()

    forward = forward_events if cfg.fixed else forward_synced

    def step(_i: int) -> None:
        _loss = c.forward_backward(opt, lambda: F.cross_entropy(forward(x), y), amp=amp)
        c.optimizer_step(opt)
        if cfg.fixed:
            with nv.range("read_timings"):
                read_events()

    return step


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("layer_timing_sync", __doc__, build, argv, steps=(2, 25), warmup=(1, 3))


if __name__ == "__main__":
    raise SystemExit(main())
