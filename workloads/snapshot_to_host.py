"""snapshot_to_host: a training loop that copies the model's ``state_dict()`` to the CPU every step.

Pathology: an MLP (6 blocks of Linear(2048, 2048) + LayerNorm + GELU and a head, fp32 weights,
~25 M parameters, 100 MiB) trained with bf16 autocast and a fused AdamW on 16384-row batches keeps a
host copy of its weights after every step, the way a script keeps "the last good weights" for a
rollback or an EMA on the CPU: ``{k: v.detach().cpu() for k, v in model.state_dict().items()}``. Each
``.cpu()`` is a synchronous device-to-host copy into fresh pageable memory (``cudaMemcpyAsync`` DtoH
staged by the driver, then ``cudaStreamSynchronize``): the GPU computes nothing while the 26 copies
crawl at pageable speed.
Twin (``--fixed``): the same snapshot of every step's weights, into pinned host buffers allocated
once, copied with ``non_blocking=True`` on a side stream: each step first queues the copy of the
weights the previous step left (the side stream waits for the compute stream with ``wait_stream``),
then runs its forward and backward while the copies move, and only its optimizer waits for them (it
overwrites the weights being copied). An event recorded after the copies tells a reader of the
snapshot when it is complete; nothing waits on the host.
Trace evidence: per ``step_N`` (``snapshot``, ``forward``, ``backward``, ``optimizer``; the
pathology's ``snapshot`` comes last): pathology: a ``snapshot`` range with 26 pageable DtoH memcpys
(~100 MiB) and their synchronizations, no kernel running beside them; twin: the same bytes as pinned
DtoH memcpys on another stream, concurrent with the forward and backward kernels, and a step shorter
by about the pathology's ``snapshot`` range.
"""
from __future__ import annotations

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:gemm|nvjet"
NCU_COUNT = 2
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    import torch.nn.functional as F

    blocks, width, rows, classes = c.pick(cfg, (2, 32, 64, 10), (6, 2048, 16384, 1000))
    dev = cfg.device
    t = c.mlp_training(cfg, blocks, width, rows, classes)
    model, opt, amp, x, y = t.model, t.opt, t.amp, t.x, t.y

    # the twin's pinned host buffers, the side stream that fills them and the "copy done" event
    pinned = {k: torch.empty(v.shape, dtype=v.dtype, pin_memory=cfg.cuda)
              for k, v in model.state_dict().items()}
    side = torch.cuda.Stream(dev) if cfg.cuda else None
    done = torch.cuda.Event() if cfg.cuda else None
    kept: list[dict] = []  # the pathology's latest snapshot (the previous one is dropped)

    def snapshot_sync() -> None:
        kept[:] = [{k: v.detach().cpu() for k, v in model.state_dict().items()}]

    def snapshot_async() -> None:
        if side is None:  # CPU: a plain copy (the smoke test's path)
            for k, v in model.state_dict().items():
                pinned[k].copy_(v)
            return
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            for k, v in model.state_dict().items():
                pinned[k].copy_(v.detach(), non_blocking=True)
            done.record(side)

    def step(_i: int) -> None:
        if cfg.fixed:
            with nv.range("snapshot"):  # the weights the previous step left, copied during this one
                snapshot_async()
        _loss = c.forward_backward(opt, lambda: F.cross_entropy(model(x), y), amp=amp)
        with nv.range("optimizer"):
            if side is not None:  # the previous snapshot reads the weights this step overwrites
                torch.cuda.current_stream(dev).wait_stream(side)
            opt.step()
        if not cfg.fixed:
            with nv.range("snapshot"):
                snapshot_sync()

    return step


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("snapshot_to_host", __doc__, build, argv, steps=(2, 20), warmup=(1, 3))


if __name__ == "__main__":
    raise SystemExit(main())
