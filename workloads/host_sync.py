"""host_sync: host synchronization inside the inner loop.

Pathology: each step runs 32 micro-steps of a small MLP training loop and, per micro-step,
reads the loss with ``.item()`` (early-stopping / logging check) and copies the predictions and
the labels to the host with ``.cpu()`` for an accuracy metric. Each read is a device-to-host memcpy
followed by a stream synchronization, so the CPU stops queueing work and the GPU drains to idle 96
times per step.
Twin (``--fixed``): loss and accuracy are accumulated in GPU tensors; the host reads them once,
at the end of the step (one read per step instead of 96).
Shapes (``--shape``): ``launch`` (default; width 1024, batch 2048, 32 micro-steps) is launch-bound
even without the syncs: the host issues each micro-step's ~40 launches more slowly than the GPU runs
them, so removing the syncs buys only their own waits. ``balanced`` (bf16, width 3584, batch 6144) gives
each micro-step about as much GPU time as the host needs to issue it (~2 ms on an H200): with the syncs
the host cannot queue the next micro-step while the GPU runs this one, so host and GPU take turns;
without them they overlap. ``gpu`` (bf16, width 4096, batch 8192, 16 micro-steps) is GPU-bound: each
sync costs only the GPU's refill after it. (bf16 so that fp32 matrix multiplies, whose fix would buy
more than the syncs', are not the biggest cause.) The three calibrate what the breakdown charges to a sync in each regime.
``--graph`` calibrates the other cause, launch-bound: its pathology is the twin's loop (no syncs, each
micro-step's ~40 kernels launched one by one, eagerly), its fixed twin (``--graph --fixed``) the same
step's micro-steps captured once in a ``torch.cuda.CUDAGraph`` (warmed up on a side stream, as PyTorch's
whole-network capture example shows) and replayed per step: one graph launch instead of ~1,300 kernel
launches. Comparing the two measures what CUDA graphs buy on this loop, which the breakdown states as
launch-bound time (on the launch shape, more than the syncs' removal buys). Without CUDA, ``--graph
--fixed`` runs the eager loop (capture needs CUDA).
Trace evidence: per ``step_N`` 96 ``cudaStreamSynchronize`` calls (3 per micro-step) and 64 DtoH
copies into pageable memory (16 KiB each at the full launch shape), with a GPU gap after each
synchronization (tests/data/host_sync: 960 and 640 in 10 steps); the twin shows one DtoH copy per step
and a dense kernel timeline.
"""
from __future__ import annotations

import argparse

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:gemm"
NCU_COUNT = 2
HAS_TWIN = True


#: --shape: (batch, width, micro-steps, dtype) of the full size
SHAPES = {"launch": (2048, 1024, 32, "float32"), "balanced": (6144, 3584, 32, "bfloat16"),
          "gpu": (8192, 4096, 16, "bfloat16")}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", choices=tuple(SHAPES), default="launch",
                        help="launch-bound (default), balanced host and GPU, or GPU-bound micro-steps")
    parser.add_argument("--graph", action="store_true",
                        help="pathology: the loop without syncs, launched eagerly; --fixed: that loop "
                             "captured in a CUDA graph (calibrates launch-bound)")


def build(cfg: c.RunConfig) -> c.Step:
    import torch

    batch, width, micro, dtype_name = c.pick(cfg, (8, 32, 4, "float32"), SHAPES[cfg.options.shape])
    dtype = getattr(torch, dtype_name)
    dev = cfg.device
    gen = torch.Generator(device="cpu").manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(width, width), torch.nn.ReLU(),
        torch.nn.Linear(width, width), torch.nn.ReLU(),
        torch.nn.Linear(width, 10),
    ).to(dev, dtype)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    xs = torch.randn(micro, batch, width, generator=gen).to(dev, dtype)
    ys = torch.randint(0, 10, (micro, batch), generator=gen).to(dev)
    loss_fn = torch.nn.CrossEntropyLoss()

    def micro_step(k: int) -> tuple[torch.Tensor, torch.Tensor]:
        with nv.range("forward"):
            logits = model(xs[k])
            loss = loss_fn(logits, ys[k])
        with nv.range("backward"):
            loss.backward()
        with nv.range("optimizer_step"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        return loss.detach(), logits.detach()

    def step_sync(_i: int) -> None:
        best = float("inf")
        for k in range(micro):
            with nv.range(f"micro_{k}"):
                loss, logits = micro_step(k)
                with nv.range("host_check"):
                    value = loss.item()                       # sync 1
                    preds = logits.argmax(dim=1).cpu()        # sync 2
                    _acc = (preds == ys[k].cpu()).float().mean().item()
                    best = min(best, value)

    def step_async(_i: int) -> None:
        total = torch.zeros((), device=dev)
        correct = torch.zeros((), device=dev)
        for k in range(micro):
            with nv.range(f"micro_{k}"):
                loss, logits = micro_step(k)
                total += loss
                correct += (logits.argmax(dim=1) == ys[k]).sum()
        with nv.range("host_check"):
            _mean_loss, _acc = (torch.stack([total / micro, correct / (micro * batch)])).tolist()

    if not cfg.options.graph:
        return step_async if cfg.fixed else step_sync
    if not (cfg.fixed and cfg.cuda):
        if cfg.fixed:
            print("[host_sync] no GPU: --graph --fixed runs the loop eagerly (CUDA-graph capture needs CUDA)",
                  flush=True)
        return step_async
    return _graphed(torch, micro, batch, dev, micro_step, ys)


def _graphed(torch, micro: int, batch: int, dev, micro_step, ys):  # type: ignore[no-untyped-def]
    """The no-sync step's micro-steps captured once in a CUDA graph; the step replays it and reads the
    loss and accuracy once, as the eager twin does."""
    total = torch.zeros((), device=dev)
    correct = torch.zeros((), device=dev)

    def body() -> None:
        total.zero_()
        correct.zero_()
        for k in range(micro):
            loss, logits = micro_step(k)
            total.add_(loss)
            correct.add_(logits.argmax(dim=1).eq(ys[k]).sum())

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (cuBLAS handles, optimizer state, allocator) off the capture
        for _ in range(3):
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    torch.cuda.synchronize()

    def step_graph(_i: int) -> None:
        with nv.range("micro_graph"):
            graph.replay()
        with nv.range("host_check"):
            _mean_loss, _acc = (torch.stack([total / micro, correct / (micro * batch)])).tolist()

    return step_graph


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("host_sync", __doc__, build, argv, add_arguments=add_arguments,
                          steps=(2, 10), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
